"""Attacks on the pipeline through the real `offsetlake rebuild`: corrupt input is never state, and every record
and byte is accounted for (issue #14).

One rebuild over every attack (a bit flipped inside a committed offset of a real segment, a batch length of -1
in the middle of another, a 2 KB garbage `.log`, JSON and CSV dumps with a malformed line and an offset of -5),
then one run per option that changes the outcome (`--replay-corrupt-batches`, `validation.max_unread_bytes=0`).
"""
from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests import badinputs as bi


SNAPSHOT = "attacks"


def invoke(args: list[str]):
    from jobs.cli import main

    # the log dirs hold a few of the 50 partitions only: say how many the topic has
    result = CliRunner().invoke(main, ["rebuild", "--env", "ci", "--num-partitions", "50", *args],
                                catch_exceptions=True)
    output = result.output + (result.stderr if result.stderr_bytes is not None else "")
    assert "Traceback" not in output, output[-3000:]
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    return result


def _real(shared_dir: Path, rel: str) -> bytes:
    p = shared_dir / rel / "00000000000000000000.log"
    if not p.exists():
        pytest.skip(f"{p} not present")
    return p.read_bytes()


def _hex_rows(partition: int, records: list[tuple[int, tuple]]) -> list[dict]:
    return [{"key": k.hex(), "value": v.hex(), "topic": "__consumer_offsets", "partition": partition,
             "offset": off, "timestamp": ts, "timestampType": 0} for off, (k, v, ts) in records]


def build_attacks(root: Path, shared_dir: Path) -> dict:
    logdir = root / "logs"
    flipped = bi.flip_committed_offset(_real(shared_dir, bi.REAL_PARTITION_DIR))
    seg_flip = bi.write_segment(logdir / "__consumer_offsets-13", 0, flipped.data)

    clean = _real(shared_dir, bi.REAL_PARTITION_DIR_2)
    starts = bi.entry_positions(clean)
    cut = starts[len(starts) // 2]
    seg_cut = bi.write_segment(logdir / "__consumer_offsets-39", 0, bi.set_int32(clean, cut + 8, -1))

    garbage = random.Random(14).randbytes(2048)
    seg_garbage = bi.write_segment(logdir / "__consumer_offsets-7", 0, garbage)

    g_json = bi.group_in(20, "json")
    rows = _hex_rows(20, [(0, bi.group_record(g_json, bi.T0)), (1, bi.commit(g_json, 0, 2001, bi.T0 + 1))])
    rows.append(None)  # row 2: a line cut short
    rows += _hex_rows(20, [(-5, bi.commit(g_json, 2, 6666, bi.T0 + 2)), (3, bi.commit(g_json, 1, 2002, bi.T0 + 3))])
    dump_json = root / "dump.jsonl"
    dump_json.write_text("\n".join('{"key": "0001", "value": ' if r is None else json.dumps(r) for r in rows) + "\n")

    g_csv = bi.group_in(21, "csv")
    crow = _hex_rows(21, [(0, bi.group_record(g_csv, bi.T0)), (1, bi.commit(g_csv, 0, 2101, bi.T0 + 1)),
                          (3, bi.commit(g_csv, 1, 2102, bi.T0 + 3))])
    cols = list(crow[0])
    lines = [",".join(cols)] + [",".join(str(r[c]) for c in cols) for r in crow[:2]] + ["0001,00ff"] \
        + [",".join(str(crow[2][c]) for c in cols)]
    dump_csv = root / "dump.csv"
    dump_csv.write_text("\n".join(lines) + "\n")
    return dict(logdir=logdir, flipped=flipped, seg_flip=str(seg_flip), seg_cut=str(seg_cut), cut=cut,
                cut_size=len(clean), clean_cut=clean, seg_garbage=str(seg_garbage), dump_json=str(dump_json),
                dump_csv=str(dump_csv), g_json=g_json, g_csv=g_csv)


def _served(wh, snapshot: str) -> list[dict]:
    return wh.read_table("loaded_offsets", snapshot).to_pylist() + wh.read_table(
        "empty_group_offsets", snapshot).to_pylist()


@pytest.fixture(scope="module")
def attacks(spark, shared_dir, tmp_path_factory):
    from pipelines.io.warehouse import Warehouse

    root = tmp_path_factory.mktemp("attacks")
    a = build_attacks(root, shared_dir)
    warehouse = root / "warehouse"
    result = invoke(["--input", str(a["logdir"]), "--input", a["dump_json"], "--input", a["dump_csv"],
                     "--warehouse", str(warehouse), "--snapshot-id", SNAPSHOT, "--json", "--quiet"])
    wh = Warehouse(str(warehouse))
    return dict(a, result=result, summary=bi.parse_summary(result.stdout),
                quarantine=wh.read_table("quarantine", SNAPSHOT).to_pylist(), served=_served(wh, SNAPSHOT))


def test_the_run_succeeds_and_balances_with_every_attack_quarantined(attacks):
    s = attacks["summary"]
    assert attacks["result"].exit_code == 0, attacks["result"].output[-3000:]
    assert s["status"] == "succeeded" and s["validation"]["failed"] == 0, s["validation"]
    from schemas.quarantine import QUARANTINE_KINDS

    assert {q["kind"] for q in attacks["quarantine"]} <= set(QUARANTINE_KINDS)


def test_a_flipped_bit_in_a_committed_offset_is_not_state(attacks):
    f: bi.Flipped = attacks["flipped"]
    key = (f.group, f.topic, f.partition)
    served = [o["committed_offset"] for o in attacks["served"] if (o["group_id"], o["topic"], o["partition"]) == key]
    assert f.corrupt_offset not in served, served
    assert not [o for o in attacks["served"] if o["committed_offset"] == f.corrupt_offset]
    rows = [q for q in attacks["quarantine"] if q["source"] == attacks["seg_flip"]]
    assert rows and {(q["kind"], q["position"]) for q in rows} == {("crc_mismatch", f.batch_position)}, rows
    mine = next(q for q in rows if q["offset"] == f.record_offset)
    assert "CRC-32C" in mine["reason"] and mine["value_hex"]


def test_an_unframeable_length_reports_the_unread_bytes_and_counts_no_phantom_records(attacks, spark):
    from pipelines.frames.decode import plan_inputs, reader_counts

    (row,) = [q for q in attacks["quarantine"] if q["source"] == attacks["seg_cut"]]
    cut, size = attacks["cut"], attacks["cut_size"]
    assert (row["kind"], row["position"]) == ("unframeable", cut)
    assert f"bytes [{cut}, {size})" in row["reason"]
    assert [attacks["seg_cut"], cut, size, "unframeable"] in attacks["summary"]["unread_ranges"]
    # the reader counts the records before the bad length, nothing after it, nothing from the bad header
    counts = reader_counts(spark, plan_inputs([Path(attacks["seg_cut"]).parent]))
    assert counts[39]["records_in"] == bi.records_before(attacks["clean_cut"], cut)
    assert counts[39]["bytes_unread"] == size - cut


def test_a_garbage_log_is_all_unread_bytes_and_no_records(attacks, spark):
    from pipelines.frames.decode import plan_inputs, reader_counts

    ranges = [r for r in attacks["summary"]["unread_ranges"] if r[0] == attacks["seg_garbage"]]
    assert [r[1:3] for r in ranges] == [[0, 2048]], ranges
    counts = reader_counts(spark, plan_inputs([Path(attacks["seg_garbage"]).parent]))
    assert counts[7]["records_in"] == 0 and counts[7]["bytes_unread"] == 2048
    s = attacks["summary"]
    assert s["bytes_unread"] == 2048 + attacks["cut_size"] - attacks["cut"]


def test_a_malformed_json_line_and_a_negative_offset_are_quarantined_and_the_good_rows_replayed(attacks):
    rows = sorted((q["kind"], q["position"], q["offset"]) for q in attacks["quarantine"]
                  if q["source"] == attacks["dump_json"])
    assert rows == [("malformed_row", 2, None), ("negative_offset", 3, -5)]
    got = {o["partition"]: o["committed_offset"] for o in attacks["served"] if o["group_id"] == attacks["g_json"]}
    assert got == {0: 2001, 1: 2002}


def test_a_short_csv_row_is_quarantined_and_the_good_rows_replayed(attacks):
    rows = [(q["kind"], q["position"]) for q in attacks["quarantine"] if q["source"] == attacks["dump_csv"]]
    assert rows == [("malformed_row", 2)]
    got = {o["partition"]: o["committed_offset"] for o in attacks["served"] if o["group_id"] == attacks["g_csv"]}
    assert got == {0: 2101, 1: 2102}


def test_replay_corrupt_batches_serves_what_a_broker_that_skipped_verification_would(spark, shared_dir, tmp_path):
    from pipelines.io.warehouse import Warehouse

    f = bi.flip_committed_offset(_real(shared_dir, bi.REAL_PARTITION_DIR))
    bi.write_segment(tmp_path / "in" / "__consumer_offsets-13", 0, f.data)
    r = invoke(["--input", str(tmp_path / "in"), "--warehouse", str(tmp_path / "wh"), "--snapshot-id", "replayed",
                "--replay-corrupt-batches", "--quiet"])
    assert r.exit_code == 0, r.output[-2000:]
    wh = Warehouse(str(tmp_path / "wh"))
    key = (f.group, f.topic, f.partition)
    served = [o["committed_offset"] for o in _served(wh, "replayed")
              if (o["group_id"], o["topic"], o["partition"]) == key]
    assert served == [f.corrupt_offset]
    (q,) = wh.read_table("quarantine", "replayed").to_pylist()
    assert (q["kind"], q["position"]) == ("crc_mismatch", f.batch_position) and "replayed anyway" in q["reason"]


def test_unread_bytes_fail_a_run_that_tolerates_none(spark, shared_dir, tmp_path):
    clean = _real(shared_dir, bi.REAL_PARTITION_DIR_2)
    cut = bi.entry_positions(clean)[3]
    bi.write_segment(tmp_path / "in" / "__consumer_offsets-39", 0, bi.set_int32(clean, cut + 8, -1))
    r = invoke(["--input", str(tmp_path / "in"), "--warehouse", str(tmp_path / "wh"), "--json", "--quiet",
                "--conf", "validation.max_unread_bytes=0"])
    s = bi.parse_summary(r.stdout)
    assert r.exit_code == 1 and s["status"] == "validation_failed"
    assert s["validation"]["failed_ids"] == ["accounting.bytes_all_read"], s["validation"]
    assert s["bytes_unread"] == len(clean) - cut


def test_prod_settings_tolerate_no_unread_bytes():
    from pipelines.config import load_settings
    from pipelines.validation.runner import max_unread_bytes

    assert max_unread_bytes(load_settings(env="prod")) == 0
    assert load_settings(env="prod").section("validation")["policy"] == "fail"


def test_instants_past_the_years_a_table_holds_are_read_as_its_ends(tmp_path):
    """Kafka takes any long for a time; a table, a run record and ISO-8601 text hold years 1 to 9999. A crafted log
    with a record of year 146 million (the run's clock, as of its newest record) and commits at both ends of the long
    range ended the run as a stack trace; each instant is now the nearest end, and what Kafka did with the long is
    what the run did: the commit past 9999 with an expireTimestamp past it is kept, the others go with their Empty
    group's state time."""
    import datetime as dt

    from pipelines.decoding import message_writer as mw
    from pipelines.decoding.batch_writer import write_record_batch
    from pipelines.io.warehouse import Warehouse

    g, far = "far-times", 1 << 62
    late = (mw.write_offset_commit_key(g, "orders", 1),
            mw.write_offset_commit_value(1, offset=6, metadata="m", commit_timestamp=far,
                                         expire_timestamp=(1 << 63) - 1), bi.T0 + 2)
    early = (mw.write_offset_commit_key(g, "orders", 2),
             mw.write_offset_commit_value(3, offset=7, metadata="m", commit_timestamp=-far, leader_epoch=0), bi.T0 + 3)
    bi.write_segment(tmp_path / "logs" / "__consumer_offsets-3", 0,
                     write_record_batch([bi.group_record(g, bi.T0), bi.commit(g, 0, 5, bi.T0 + 1)], 0)
                     + write_record_batch([late, early], 2) + write_record_batch([bi.commit(g, 3, 8, far)], 4))
    wh = tmp_path / "wh"
    last = dt.datetime(9999, 12, 31, 23, 59, 59, 999000, tzinfo=dt.timezone.utc)
    first = dt.datetime(1, 1, 1, tzinfo=dt.timezone.utc)

    newest = invoke(["--input", str(tmp_path / "logs"), "--warehouse", str(wh), "--snapshot-id", "newest", "--quiet"])
    assert newest.exit_code in (0, 1), newest.output  # validation reports the odd times
    assert {r["snapshot_id"]: r for r in Warehouse(wh).snapshots()}["newest"]["as_of"] == last

    result = invoke(["--input", str(tmp_path / "logs"), "--warehouse", str(tmp_path / "then"), "--snapshot-id",
                     "then", "--as-of", "2027-06-01", "--quiet"])
    assert result.exit_code in (0, 1), result.output
    w = Warehouse(tmp_path / "then")
    kept = w.read_table("loaded_offsets", "then").to_pylist()
    assert [(r["partition"], r["commit_timestamp"], r["expire_timestamp"]) for r in kept] == [(1, last, last)]
    expired = w.read_table("expired_offsets", "then").to_pylist()
    assert sorted(r["partition"] for r in expired) == [0, 2, 3]
    assert {(r["expire_timestamp"], r["expiry_rule"]) for r in expired} == {(None, "empty_group_state_timestamp")}
    history = {r["record_offset"]: r for r in w.read_table("offset_commits", "then").to_pylist()}
    assert (history[3]["commit_timestamp"], history[4]["record_timestamp"]) == (first, last)
