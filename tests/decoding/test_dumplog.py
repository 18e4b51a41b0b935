"""`kafka-dump-log --offsets-decoder` output, line for line against Kafka 4.0's own dumps of brokerdata."""
from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from pipelines.decoding import message_writer as w
from pipelines.decoding.dumplog import dump_lines, jackson_dumps, to_json_record
from pipelines.decoding.segments import discover_segments, read_segment_batches
from tests.decoding.test_messages import _header, _rec

SCENARIOS = ["classic-basic", "compacted", "compression-gzip", "compression-lz4", "compression-snappy",
             "compression-zstd", "deletes", "expiry", "kip848", "many-groups", "simple-consumers", "transactions"]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_dump_matches_kafka_line_for_line(brokerdata, scenario):
    dumps = sorted((brokerdata / scenario / "dump_log").glob("*.txt"))
    assert dumps
    compared = 0
    for txt in dumps:
        expected = [line for line in txt.read_text(encoding="utf-8").split("\n")
                    if line.startswith(("baseOffset:", "| offset:"))]
        segments, _ = discover_segments([brokerdata / scenario / "data" / txt.stem])
        got = []
        for seg in segments:
            got += [line for line in dump_lines(read_segment_batches(seg)) if not line.startswith("#")]
        assert len(got) == len(expected), txt.name
        for i, (g, e) in enumerate(zip(got, expected)):
            assert g == e, f"{txt.name} line {i}"
        compared += len(expected)
        headers = [ln for ln in txt.read_text(encoding="utf-8").split("\n") if ln.startswith(("Dumping", "Log "))]
        # discover_segments skips 0-byte segments (an empty active segment), which kafka-dump-log still names
        named = [Path(h.split(" ", 1)[1]).name for h in headers[::2]]
        named = [n for n in named if (brokerdata / scenario / "data" / txt.stem / n).stat().st_size > 0]
        assert named == [Path(s.path).name for s in segments]
    assert compared > 0


def test_jackson_escaping():
    assert jackson_dumps({"m": "tab\tnl\nq\"b\\\x00\x1f\x7f\u00e9\U0001F600"}) == \
        '{"m":"tab\\tnl\\nq\\"b\\\\\\u0000\\u001F\x7f\u00e9\U0001F600"}'
    assert jackson_dumps({"a": [1, None, True, b"\x00\x01"]}) == '{"a":[1,null,true,"AAE="]}'
    assert jackson_dumps("\\u00ab") == '"\\\\u00ab"'  # a literal backslash-u stays as written


def test_json_record_shape():
    k, v = w.write_offset_commit_key("g", "t", 2), w.write_offset_commit_value(3, offset=5, commit_timestamp=6)
    rec = _rec(k, v)
    out = to_json_record(rec.batch, rec)
    assert out["partition"] == 3 and out["offset"] == 10
    assert out["key"] == {"type": 1, "data": {"group": "g", "topic": "t", "partition": 2}}
    assert out["payload"] == {"version": 3, "data": {"offset": 5, "leaderEpoch": -1, "metadata": "",
                                                     "commitTimestamp": 6}}
    assert out["batch"]["baseOffset"] == 10
    json.dumps(out)
    assert to_json_record(rec.batch, _rec(k, None))["payload"] is None
    ck, cv = w.write_control_record(1, 4)
    c = _rec(ck, cv, is_control=True)
    out = to_json_record(c.batch, c)
    assert out["control"] == {"type": "COMMIT", "coordinatorEpoch": 4} and "key" not in out
    sub = w.write_consumer_subscription(3, ["a"], user_data=b"", rack_id="")
    g = w.write_group_metadata_value(3, protocol_type="consumer", generation=1, protocol="range", leader="m",
                                     current_state_timestamp=1, members=[dict(
                                         member_id="m", client_id="c", client_host="h", rebalance_timeout_ms=1,
                                         session_timeout_ms=2, subscription=sub, assignment=b"")])
    out = to_json_record(_header(), _rec(w.write_group_metadata_key("x"), g))
    m = out["payload"]["data"]["members"][0]
    assert m["subscription"] == {"topics": ["a"], "userData": "", "ownedPartitions": [], "generationId": -1,
                                 "rackId": ""}
    assert m["assignment"] == ""  # empty assignment bytes stay (base64) bytes
    json.dumps(out)
    # a negative version: the generated reader refuses it (`checkSubscriptionVersion`), the bytes stay base64
    negative = b"\xff\xff" + sub[2:]
    g = w.write_group_metadata_value(3, protocol_type="consumer", generation=1, protocol="range", leader="m",
                                     members=[dict(member_id="m", subscription=negative, assignment=b"")])
    out = to_json_record(_header(), _rec(w.write_group_metadata_key("x"), g))
    assert out["payload"]["data"]["members"][0]["subscription"] == base64.b64encode(negative).decode()


def test_unknown_and_error_records_in_text():
    lines = dump_lines([(_header(), [_rec(b"\x00\x12\x00\x01g", b"\x00\x00"),
                                     _rec(w.write_offset_commit_key("g", "t", 0), b"\x00\x09")])])
    assert lines[1].endswith("key: Unknown record type 18 at offset 10, skipping.")
    assert "key: Error at offset 10, skipping. unknown OffsetCommitValue version 9" in lines[2]
    assert "payload" not in lines[2]


def test_cli_decode(brokerdata, tmp_path):
    from click.testing import CliRunner

    from jobs.cmd_decode import decode

    part = brokerdata / "transactions" / "data"
    r = CliRunner().invoke(decode, [str(part)])
    assert r.exit_code == 0, r.output
    assert "endTxnMarker: COMMIT coordinatorEpoch: 0" in r.output
    assert r.output.startswith("Dumping ") and "Log starting offset: 0" in r.output
    r = CliRunner().invoke(decode, ["--json", str(part)])
    objs = [json.loads(line) for line in r.output.splitlines()]
    assert any("control" in o for o in objs) and all("partition" in o for o in objs)
    r = CliRunner().invoke(decode, [str(tmp_path / "missing")])
    assert r.exit_code == 2 and "does not exist" in r.output and "Traceback" not in r.output
