"""Tabular dumps (Spark Kafka-source rows) in Parquet / JSON lines / CSV, built from real Kafka 4.0 segments."""
from __future__ import annotations

import base64
import json
import random
import re
from datetime import datetime, timezone

import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest

from pipelines.decoding.errors import InvalidFieldError
from pipelines.decoding.segments import InputError, read_log
from pipelines.decoding.tabular import read_tabular_dump
from schemas.records import LogRecord, ReadProblem


@pytest.fixture(scope="module")
def txn_records(brokerdata) -> list[LogRecord]:
    recs = [r for r in read_log(brokerdata / "transactions/data") if isinstance(r, LogRecord)]
    assert any(r.batch.is_control for r in recs) and any(r.batch.is_transactional for r in recs)
    return recs


def _rows(recs, *, facts: bool, enc=None, ts="ms"):
    def e(b):
        if b is None:
            return None
        return b if enc is None else (b.hex().upper() if enc == "hex" else base64.b64encode(b).decode())

    rows = []
    for r in recs:
        if not facts and r.batch.is_control:
            continue  # a Kafka consumer (Spark's source) never returns control records
        t = r.timestamp
        if ts == "iso":
            t = datetime.fromtimestamp(t / 1000, tz=timezone.utc).isoformat(timespec="milliseconds").replace(
                "+00:00", "Z")
        elif ts == "datetime":
            t = datetime.fromtimestamp(t / 1000, tz=timezone.utc)
        row = {"key": e(r.key), "value": e(r.value), "topic": "__consumer_offsets", "partition": r.offsets_partition,
               "offset": r.offset, "timestamp": t, "timestampType": 0}
        if facts:
            row.update(producer_id=r.batch.producer_id, producer_epoch=r.batch.producer_epoch,
                       is_transactional=r.batch.is_transactional, is_control=r.batch.is_control,
                       batch_base_offset=r.batch.base_offset)
        rows.append(row)
    return rows


def _facts(r: LogRecord):
    return (r.offsets_partition, r.offset, r.key, r.value, r.timestamp, r.batch.is_transactional,
            r.batch.is_control, r.batch.producer_id)


def test_parquet_binary_with_batch_facts(tmp_path, txn_records):
    rows = _rows(txn_records, facts=True, ts="datetime")
    random.Random(1).shuffle(rows)  # dumps come in any order
    schema = pa.schema([("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()),
                        ("partition", pa.int32()), ("offset", pa.int64()), ("timestamp", pa.timestamp("us", "UTC")),
                        ("timestampType", pa.int32()), ("producer_id", pa.int64()), ("producer_epoch", pa.int16()),
                        ("is_transactional", pa.bool_()), ("is_control", pa.bool_()),
                        ("batch_base_offset", pa.int64())])
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), tmp_path / "dump.parquet")
    dump = read_tabular_dump(tmp_path / "dump.parquet")
    assert dump.fmt == "parquet" and dump.encoding is None and dump.has_batch_facts
    out = list(dump)
    assert not [o for o in out if isinstance(o, ReadProblem)]
    assert [_facts(r) for r in out] == [_facts(r) for r in txn_records]
    row_of = {(r["partition"], r["offset"]): i for i, r in enumerate(rows)}
    # batches rebuilt from batch_base_offset: same grouping as the segment
    by_batch = {}
    for r in txn_records:
        by_batch.setdefault((r.offsets_partition, r.batch.base_offset), []).append(r.offset)
    got = {}
    for r in out:
        got.setdefault((r.offsets_partition, r.batch.base_offset), []).append(r.offset)
        assert r.first_offset_in_batch == got[(r.offsets_partition, r.batch.base_offset)][0]
        # a record's position is its row in the dump (what a quarantine row of it names)
        assert r.batch.position == row_of[(r.offsets_partition, r.offset)] and r.batch.codec == "none"
    assert got == by_batch


def test_json_lines_base64_without_facts(tmp_path, txn_records):
    rows = _rows(txn_records, facts=False, enc="base64", ts="iso")
    (tmp_path / "part-0.json").write_text("\n".join(json.dumps(r) for r in rows[:10]) + "\n")
    (tmp_path / "part-1.json").write_text("\n".join(json.dumps(r) for r in rows[10:]) + "\n")
    (tmp_path / "_SUCCESS").write_text("")
    dump = read_tabular_dump(tmp_path)
    assert dump.fmt == "json" and dump.encoding == "base64" and not dump.has_batch_facts
    out = list(dump.records())
    data = [r for r in txn_records if not r.batch.is_control]
    assert [(r.offsets_partition, r.offset, r.key, r.value, r.timestamp) for r in out] == [
        (r.offsets_partition, r.offset, r.key, r.value, r.timestamp) for r in data]
    assert not any(r.batch.is_transactional for r in out)


def test_csv_hex_with_tombstones(tmp_path, brokerdata):
    recs = [r for r in read_log(brokerdata / "deletes/data") if isinstance(r, LogRecord)]
    assert any(r.value is None for r in recs)
    rows = _rows(recs, facts=False, enc="hex")
    pcsv.write_csv(pa.Table.from_pylist(rows), tmp_path / "dump.csv")
    dump = read_tabular_dump(tmp_path / "dump.csv")
    assert dump.fmt == "csv" and dump.encoding == "hex"
    out = list(dump)
    assert [(r.offset, r.key, r.value, r.timestamp) for r in out] == [
        (r.offset, r.key, r.value, r.timestamp) for r in recs]


def test_explicit_encoding_and_bad_text(tmp_path):
    rows = [{"key": "0001", "value": "zz", "topic": "__consumer_offsets", "partition": 0, "offset": 1,
             "timestamp": 5, "timestampType": 1},
            {"key": "0001", "value": "00", "topic": "__consumer_offsets", "partition": 0, "offset": 2,
             "timestamp": 6, "timestampType": 0}]
    p = tmp_path / "d.jsonl"
    p.write_text("\n".join(json.dumps(r) for r in rows))
    out = list(read_tabular_dump(p, encoding="hex"))
    # position: the row number in the dump; offset: the row's log offset
    assert isinstance(out[0], ReadProblem) and out[0].kind == "invalid_row" and out[0].position == 0
    assert out[0].offset == 1
    assert out[1].key == b"\x00\x01" and out[1].value == b"\x00" and out[1].batch.timestamp_type == "CreateTime"


def test_duplicates_and_other_topics(tmp_path):
    base = {"topic": "__consumer_offsets", "partition": 4, "timestamp": 10, "timestampType": 0}
    rows = [dict(base, key=b"\x00\x01a", value=b"v1", offset=7),
            dict(base, key=b"\x00\x01a", value=b"v1", offset=7),  # identical: a duplicate_row
            dict(base, key=b"\x00\x01a", value=b"v2", offset=8),
            dict(base, key=b"\x00\x01a", value=b"XX", offset=8),  # conflict
            dict(base, key=b"k", value=b"v", offset=3, topic="orders"),
            dict(base, key=b"k", value=b"v", offset=4, topic="orders"),
            dict(base, key=b"k", value=None, offset=None)]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "x.parquet")
    out = list(read_tabular_dump(tmp_path / "x.parquet"))
    probs = [(o.kind, o.position) for o in out if isinstance(o, ReadProblem)]
    # positions are row numbers of the dump
    assert ("not_offsets_data", 4) in probs and ("invalid_row", 6) in probs and ("duplicate_conflict", 3) in probs
    assert ("duplicate_row", 1) in probs
    assert len(probs) == 4
    recs = [o for o in out if isinstance(o, LogRecord)]
    assert [(r.offset, r.value) for r in recs] == [(7, b"v1"), (8, b"v2")]
    conflict = next(o for o in out if isinstance(o, ReadProblem) and o.kind == "duplicate_conflict")
    assert conflict.value == b"XX"


def test_a_part_file_written_twice_is_duplicate_rows_with_their_dump_and_row(tmp_path):
    """Two part files of one dump holding the same rows (a part written again): each record is loaded once and its
    copies were skipped with a reason but without a file or a row to look at; they are `duplicate_row` problems now,
    one per run of rows (its dump, its first row), standing for their records, as a later dump's copies are, so the
    reader's count (every row) is the records read plus the records the problems stand for."""
    from pipelines.frames.decode import count_tabular

    base = {"topic": "__consumer_offsets", "partition": 4, "timestamp": 10, "timestampType": 0}
    rows = [dict(base, key=b"\x00\x01a", value=b"v%d" % i, offset=i) for i in range(3)]
    (tmp_path / "d").mkdir()
    for name in ("part-0000.parquet", "part-0001.parquet"):
        pq.write_table(pa.Table.from_pylist(rows), tmp_path / "d" / name)
    pq.write_table(pa.Table.from_pylist([dict(base, key=b"\x00\x01a", value=b"v3", offset=3), rows[1]]),
                   tmp_path / "d" / "part-0002.parquet")
    out = list(read_tabular_dump(tmp_path / "d"))
    assert [r.offset for r in out if isinstance(r, LogRecord)] == [0, 1, 2, 3]
    problems = [(o.kind, o.source, o.offsets_partition, o.position, o.records) for o in out
                if isinstance(o, ReadProblem)]
    d = str(tmp_path / "d")
    assert problems == [("duplicate_row", d, 4, 3, 3), ("duplicate_row", d, 4, 7, 1)]
    assert count_tabular(d)[4]["records_in"] == 4 + 3 + 1


def test_missing_columns_and_paths(tmp_path):
    with pytest.raises(InputError):
        read_tabular_dump(tmp_path / "nope.parquet")
    pq.write_table(pa.table({"key": [b"k"], "offset": [1]}), tmp_path / "bad.parquet")
    with pytest.raises(InvalidFieldError, match="value"):
        read_tabular_dump(tmp_path / "bad.parquet")
    (tmp_path / "junk.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(InvalidFieldError):
        read_tabular_dump(tmp_path / "junk.parquet")


def test_a_record_that_fails_to_decode_is_quarantined_at_its_row(tmp_path, txn_records):
    """A dump row whose key/value bytes are well-formed base64 but not a valid record: an error row naming the
    dump and the row to look at (the dump's byte position has no meaning once Spark wrote it)."""
    from pipelines.decoding.reader import iter_decoded_rows

    rows = _rows(txn_records, facts=False, enc="base64", ts="iso")
    bad = 7
    rows[bad]["value"] = base64.b64encode(b"\x00\x09garbage").decode()  # offset-commit key, no such value version
    (tmp_path / "dump.json").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    errors = [r for r in iter_decoded_rows([tmp_path / "dump.json"]) if r["record_kind"] == "error"]
    assert [(e["offset"], e["batch_position"]) for e in errors] == [(rows[bad]["offset"], bad)]
    assert errors[0]["source"].endswith("dump.json")


def test_positions_past_kafkas_numbers_are_quarantined_and_counted(tmp_path):
    """A partition is a Java int and an offset a Java long: a row past them is reported at its row and the others
    are read, whatever the format (Arrow types a text column of such numbers as doubles; Parquet keeps them)."""
    from pipelines.frames.decode import count_tabular

    base = {"key": b"\x00\x01\x00\x01g\x00\x01t\x00\x00\x00\x00", "value": None, "topic": "__consumer_offsets",
            "timestamp": 10, "timestampType": 0}
    rows = [dict(base, partition=3, offset=1), dict(base, partition=2147483648, offset=2),
            dict(base, partition=3, offset=9223372036854775807)]
    pq.write_table(pa.Table.from_pylist(rows, schema=pa.schema([
        ("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()), ("timestamp", pa.int64()),
        ("timestampType", pa.int32()), ("partition", pa.int64()), ("offset", pa.int64())])), tmp_path / "p.parquet")
    out = list(read_tabular_dump(tmp_path / "p.parquet"))
    assert [(o.kind, o.position) for o in out if isinstance(o, ReadProblem)] == [("invalid_row", 1)]
    assert [(r.offsets_partition, r.offset) for r in out if isinstance(r, LogRecord)] == [
        (3, 1), (3, 9223372036854775807)]
    # the reader's own count puts each row where the decoded rows are (the invalid one under no partition)
    assert {p: c["records_in"] for p, c in count_tabular(str(tmp_path / "p.parquet")).items()} == {3: 2, -1: 1}

    text = [dict(base, key=base64.b64encode(base["key"]).decode(), partition=p, offset=o)
            for p, o in ((3, 1), (2147483648, 2), (3, 9223372036854775808))]
    (tmp_path / "d.jsonl").write_text("\n".join(json.dumps(r) for r in text) + "\n")
    with open(tmp_path / "d.csv", "w") as f:
        f.write("key,value,topic,partition,offset,timestamp,timestampType\n")
        f.writelines(f"{r['key']},,{r['topic']},{r['partition']},{r['offset']},10,0\n" for r in text)
    for name in ("d.jsonl", "d.csv"):
        out = list(read_tabular_dump(tmp_path / name))
        bad = [(o.kind, o.position) for o in out if isinstance(o, ReadProblem)]
        assert bad == [("malformed_row", 1), ("malformed_row", 2)], (name, out)
        assert [(r.offsets_partition, r.offset) for r in out if isinstance(r, LogRecord)] == [(3, 1)]

    fraction = pa.table({"key": [b"k"], "value": [b"v"], "partition": [0], "offset": [1.5]})
    pq.write_table(fraction, tmp_path / "f.parquet")
    with pytest.raises(InvalidFieldError, match="offset column holds double"):
        read_tabular_dump(tmp_path / "f.parquet")


def _commit_rows(n: int, **facts) -> list[dict]:
    """n plain offset commits of one group in partition 3, as a dump's rows (key and value in hex)."""
    from pipelines.decoding import message_writer as mw

    return [dict(key=mw.write_offset_commit_key("g", "t", i).hex(),
                 value=mw.write_offset_commit_value(3, offset=100 + i, commit_timestamp=10, leader_epoch=0).hex(),
                 topic="__consumer_offsets", partition=3, offset=i, timestamp=10, timestampType=0, **facts)
            for i in range(n)]


def test_batch_flags_written_as_text_are_read_as_booleans(tmp_path):
    """A dump's is_transactional / is_control as the text `false` (a JSON string, a CSV column Arrow reads as text
    once one cell is not a boolean) is false: read as Python truth, every plain commit of the dump was
    transactional and its offsets pending forever. A cell that is no boolean is an invalid row."""
    from pipelines.frames.decode import count_tabular

    rows = _commit_rows(4, producer_id=-1, producer_epoch=-1, is_transactional="false", is_control="False")
    (tmp_path / "d.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    out = list(read_tabular_dump(tmp_path / "d.jsonl"))
    assert [(r.offset, r.batch.is_transactional, r.batch.is_control) for r in out] == [
        (i, False, False) for i in range(4)]

    with open(tmp_path / "d.csv", "w") as f:
        f.write("key,value,topic,partition,offset,timestamp,timestampType,producer_id,producer_epoch,"
                "is_transactional,is_control\n")
        for r, txn in zip(rows, ("false", "no", "0", "TRUE")):
            f.write(f"{r['key']},{r['value']},__consumer_offsets,3,{r['offset']},10,0,-1,-1,{txn},false\n")
    out = list(read_tabular_dump(tmp_path / "d.csv"))
    assert [(o.kind, o.position, o.offset) for o in out if isinstance(o, ReadProblem)] == [("invalid_row", 1, 1)]
    assert "is_transactional 'no'" in next(o for o in out if isinstance(o, ReadProblem)).reason
    assert [(r.offset, r.batch.is_transactional) for r in out if isinstance(r, LogRecord)] == [
        (0, False), (2, False), (3, True)]
    # the reader's own count: four rows in
    assert {p: c["records_in"] for p, c in count_tabular(
        str(tmp_path / "d.csv")).items()} == {3: 4}


def test_batch_facts_and_timestamps_past_kafkas_types_are_invalid_rows(tmp_path):
    """A producer id is a long, an epoch a short, a batch base offset a log position and a timestamp a long of
    milliseconds: a row past them (or not a number at all) is an invalid row and the others are read, in every
    format. Each ended the run as a stack trace where the decoded rows became columns too narrow for them."""
    from pipelines.decoding.reader import iter_decoded_rows
    from pipelines.decoding.rows import rows_to_arrow
    from pipelines.frames.decode import count_tabular

    rows = _commit_rows(7, producer_id=-1, producer_epoch=-1, is_transactional=False, is_control=False,
                        batch_base_offset=None)
    rows[0]["batch_base_offset"] = 0
    rows[1]["producer_id"] = "abc"
    rows[2]["producer_epoch"] = 1 << 40
    rows[3]["batch_base_offset"] = "notanum"
    rows[4]["timestamp"] = 10 ** 20
    rows[5]["timestamp"] = "yesterday"
    bad = [1, 2, 3, 4, 5]
    (tmp_path / "d.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    with open(tmp_path / "d.csv", "w") as f:
        f.write(",".join(rows[0]) + "\n")
        f.writelines(",".join("" if v is None else str(v).lower() if isinstance(v, bool) else str(v)
                              for v in r.values()) + "\n" for r in rows)
    wide = [dict(r, key=bytes.fromhex(r["key"]), value=bytes.fromhex(r["value"]), producer_id=None, producer_epoch=-1,
                 timestamp=10, batch_base_offset=r["offset"]) for r in rows]
    wide[1]["producer_id"] = (1 << 64) - 1
    wide[2]["producer_epoch"] = 1 << 40
    wide[3]["batch_base_offset"] = -5
    wide[4]["timestamp"] = (1 << 64) - 1
    wide[5]["timestamp"] = (1 << 63)
    pq.write_table(pa.Table.from_pylist(wide, schema=pa.schema([
        ("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()), ("partition", pa.int32()),
        ("offset", pa.int64()), ("timestamp", pa.uint64()), ("timestampType", pa.int32()),
        ("producer_id", pa.uint64()), ("producer_epoch", pa.int64()), ("is_transactional", pa.bool_()),
        ("is_control", pa.bool_()), ("batch_base_offset", pa.int64())])), tmp_path / "d.parquet")
    for name in ("d.jsonl", "d.csv", "d.parquet"):
        out = list(read_tabular_dump(tmp_path / name))
        assert [(o.kind, o.position) for o in out if isinstance(o, ReadProblem)] == [
            ("invalid_row", i) for i in bad], (name, out)
        assert [r.offset for r in out if isinstance(r, LogRecord)] == [0, 6], name
        # the rows the run decodes fit their columns
        assert rows_to_arrow(list(iter_decoded_rows([tmp_path / name]))).num_rows == 7, name
        assert {p: c["records_in"] for p, c in count_tabular(
            str(tmp_path / name)).items()} == {3: 7}, name


def test_one_fact_past_a_long_in_a_text_dump_is_one_invalid_row(tmp_path):
    """A batch's producer id is a long (DefaultRecordBatch, 4.0: PRODUCER_ID_LENGTH 8), read exactly. One row's
    producer id past a long (or with a fraction) made Arrow's JSON and CSV readers type the whole column as doubles:
    every row's producer id was then read as a double, no whole number to the row check, and every row of the dump
    was an invalid row, named with its producer id rounded (2**62 + 1 as 4.611686018427388e+18). That row alone is
    invalid now; the others are read, their producer ids exact."""
    from pipelines.frames.decode import count_tabular

    pid = (1 << 62) + 1
    rows = _commit_rows(4, producer_id=pid, producer_epoch=0, is_transactional=False, is_control=False)
    rows[2]["producer_id"] = 1 << 64
    (tmp_path / "d.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    with open(tmp_path / "d.csv", "w") as f:
        f.write(",".join(rows[0]) + "\n")
        f.writelines(",".join(str(v).lower() if isinstance(v, bool) else str(v) for v in r.values()) + "\n"
                     for r in rows)
    # a timestamp is a long of milliseconds too: one with a fraction read every row's as a double, the long's top
    # as 2**63 (past it) and the fraction as a whole number
    rows[2].update(producer_id=1.5, timestamp=1.5)
    rows[1]["timestamp"] = (1 << 63) - 1
    (tmp_path / "f.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    for name in ("d.jsonl", "d.csv", "f.jsonl"):
        out = list(read_tabular_dump(tmp_path / name))
        assert [(o.kind, o.position) for o in out if isinstance(o, ReadProblem)] == [("invalid_row", 2)], (name, out)
        assert [(r.offset, r.batch.producer_id) for r in out if isinstance(r, LogRecord)] == [
            (0, pid), (1, pid), (3, pid)], name
        if name == "f.jsonl":
            assert [r.timestamp for r in out if isinstance(r, LogRecord)] == [10, (1 << 63) - 1, 10]
        assert {p: c["records_in"] for p, c in count_tabular(
            str(tmp_path / name)).items()} == {3: 4}, name


def test_batch_facts_a_writer_stored_as_doubles_are_read_where_a_double_holds_them_exactly(tmp_path):
    """pandas writes an integer column that holds a null (a legacy record's producer id, a row without a base
    offset) as doubles, in Parquet and in `to_json`. Every row of such a dump was an invalid row ("producer_id 7.0 is
    not a whole number"), and a timestamp of 10.5 was read as 10. A whole double up to 2**53 holds its long exactly
    and is read as that long; past 2**53 the long it was written from may have been rounded, and a fraction is no
    long Kafka wrote: those rows alone are invalid rows, each saying why."""
    from pipelines.frames.decode import count_tabular

    rows = _commit_rows(6, producer_id=7.0, producer_epoch=1.0, is_transactional=0.0, is_control=0.0,
                        batch_base_offset=None)
    for r in rows:
        r.update(timestamp=float(r["timestamp"]), timestampType=0.0, batch_base_offset=float(r["offset"]))
    rows[1]["producer_id"] = None  # the null that made the column doubles
    rows[2]["producer_id"] = float(1 << 60)  # a double past 2**53
    rows[3]["timestamp"] = 10.5
    rows[4]["timestampType"] = 1.0  # LogAppendTime
    wide = [dict(r, key=bytes.fromhex(r["key"]), value=bytes.fromhex(r["value"])) for r in rows]
    pq.write_table(pa.Table.from_pylist(wide, schema=pa.schema([
        ("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()), ("partition", pa.int32()),
        ("offset", pa.int64()), ("timestamp", pa.float64()), ("timestampType", pa.float64()),
        ("producer_id", pa.float64()), ("producer_epoch", pa.float64()), ("is_transactional", pa.float64()),
        ("is_control", pa.float64()), ("batch_base_offset", pa.float64())])), tmp_path / "d.parquet")
    (tmp_path / "d.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    for name in ("d.parquet", "d.jsonl"):
        out = list(read_tabular_dump(tmp_path / name))
        problems = [(o.kind, o.position) for o in out if isinstance(o, ReadProblem)]
        assert problems == [("invalid_row", 2), ("invalid_row", 3)], (name, out)
        reasons = [o.reason for o in out if isinstance(o, ReadProblem)]
        assert "past 2**53" in reasons[0] and "10.5" in reasons[1], reasons
        got = [(r.offset, r.batch.producer_id, r.batch.producer_epoch, r.timestamp, r.batch.timestamp_type,
                r.batch.is_transactional) for r in out if isinstance(r, LogRecord)]
        assert got == [(0, 7, 1, 10, "CreateTime", False), (1, -1, 1, 10, "CreateTime", False),
                       (4, 7, 1, 10, "LogAppendTime", False), (5, 7, 1, 10, "CreateTime", False)], (name, got)
        assert all(type(r.batch.producer_id) is int for r in out if isinstance(r, LogRecord))
        assert {p: c["records_in"] for p, c in count_tabular(
            str(tmp_path / name)).items()} == {3: 6}, name


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_one_part_file_typing_a_fact_otherwise_is_its_invalid_row_not_the_dump_refused(tmp_path, fmt):
    """A dump of part files, one of them holding a producer id past a long (kept as text) or a fraction (doubles)
    beside parts of longs: the parts were joined by their types, and the whole dump was refused ("incompatible
    schemas"), or its producer ids past 2**53 rounded to doubles. That row alone is invalid; every other row is
    read with its exact producer id."""
    from pipelines.frames.decode import count_tabular

    pid = (1 << 62) + 1
    rows = _commit_rows(6, producer_id=pid, producer_epoch=0, is_transactional=False, is_control=False)
    # the second part: a producer id past a long (JSON), or a part of doubles (Parquet) with one fraction
    small = pid if fmt == "jsonl" else 7.0
    parts = [rows[:3], [dict(rows[3], producer_id=small), dict(rows[4], producer_id=1 << 64 if fmt == "jsonl" else 2.5),
                        dict(rows[5], producer_id=small)]]
    (tmp_path / "d").mkdir()
    for i, part in enumerate(parts):
        if fmt == "jsonl":
            (tmp_path / "d" / f"part-{i}.jsonl").write_text("\n".join(json.dumps(r) for r in part) + "\n")
        else:
            wide = [dict(r, key=bytes.fromhex(r["key"]), value=bytes.fromhex(r["value"])) for r in part]
            pq.write_table(pa.Table.from_pylist(wide), tmp_path / "d" / f"part-{i}.parquet")
    out = list(read_tabular_dump(tmp_path / "d"))
    assert [(o.kind, o.position) for o in out if isinstance(o, ReadProblem)] == [("invalid_row", 4)], out
    assert [(r.offset, r.batch.producer_id) for r in out if isinstance(r, LogRecord)] == [
        (0, pid), (1, pid), (2, pid), (3, int(small)), (5, int(small))]
    assert {p: c["records_in"] for p, c in count_tabular(
        str(tmp_path / "d")).items()} == {3: 6}


@pytest.mark.parametrize("key, value, message", [
    (pa.array([1], pa.int64()), pa.array([b"v"]), "key column holds int64, not bytes or text"),
    (pa.array([[1]]), pa.array([b"v"]), "key column holds list<element: int64>, not bytes or text"),
    (pa.array([b"\x00\x01"]), pa.array(["0001"]), "key column holds binary and its value column string"),
    (pa.nulls(1, pa.null()), pa.array([3.5]), "value column holds double"),
])
def test_key_and_value_columns_that_hold_no_bytes_are_refused(tmp_path, key, value, message):
    """A Parquet dump's key and value are bytes, or both text in one encoding: any other column reached the
    decoders as it was (an int has no len(), a str is no buffer) and ended the run as a stack trace."""
    pq.write_table(pa.table({"key": key, "value": value, "partition": [0], "offset": [1]}), tmp_path / "d.parquet")
    with pytest.raises(InvalidFieldError, match=re.escape(message)):
        read_tabular_dump(tmp_path / "d.parquet")


@pytest.mark.parametrize("tail", ["", "\n0001,0002,x\n"])
def test_a_csv_header_naming_a_column_twice_is_refused(tmp_path, tail):
    """Which of two `offset` columns holds the offset is anyone's guess: one error line, where it was a stack trace
    (Arrow's reader keeps both, and a table with two is asked for its type), or the last one's (a line read on its
    own: a row with the wrong number of fields)."""
    rows = _commit_rows(2)
    with open(tmp_path / "d.csv", "w") as f:
        f.write("key,value,topic,partition,offset,timestamp,offset\n")
        f.writelines(f"{r['key']},{r['value']},__consumer_offsets,3,{r['offset']},10,{r['offset'] + 5}\n" for r in rows)
        f.write(tail)
    with pytest.raises(InvalidFieldError, match="names column.s. offset more than once"):
        read_tabular_dump(tmp_path / "d.csv")


@pytest.mark.parametrize("damage", [lambda k: "zz" + k[2:], lambda k: k[1:]])
def test_one_damaged_hex_key_is_one_invalid_row_not_a_dump_read_as_base64(tmp_path, damage):
    """The encoding is told from the keys: one that is not hex (a damaged cell, an odd length) read every other row
    of a hex dump as base64 (hex digits are base64 letters), so no row was what the dump held."""
    rows = _commit_rows(5)
    rows[2]["key"] = damage(rows[2]["key"])
    pcsv.write_csv(pa.Table.from_pylist(rows), tmp_path / "d.csv")
    dump = read_tabular_dump(tmp_path / "d.csv")
    assert dump.encoding == "hex"
    out = list(dump)
    assert [(o.kind, o.position) for o in out if isinstance(o, ReadProblem)] == [("invalid_row", 2)]
    assert [(r.offset, r.key) for r in out if isinstance(r, LogRecord)] == [
        (r["offset"], bytes.fromhex(r["key"])) for r in rows if r["offset"] != 2]


@pytest.mark.parametrize("end", ["\n", "\r\n", " "])
def test_hex_keys_the_hex_decoder_reads_are_told_hex_whatever_their_line_end(tmp_path, end):
    """The encoding vote counted a key as hex by a `$`-anchored pattern: `<hex>\\n` passed (`$` matches before a
    trailing newline) but `<hex>\\r\\n` and `<hex> ` did not, so a dump whose keys end in a CRLF was read as base64
    and every row was an invalid row, where the hex decoder (`bytes.fromhex`, ASCII whitespace skipped) reads each
    key whole. The vote now asks the decoder's own grammar of the whole key."""
    rows = _commit_rows(3)
    with open(tmp_path / "d.json", "w") as f:
        f.writelines(json.dumps(dict(r, key=r["key"] + end)) + "\n" for r in rows)
    dump = read_tabular_dump(tmp_path / "d.json")
    assert dump.encoding == "hex"
    out = list(dump)
    assert [(r.offset, r.key) for r in out if isinstance(r, LogRecord)] == [
        (r["offset"], bytes.fromhex(r["key"])) for r in rows]
    assert not [o for o in out if isinstance(o, ReadProblem)]


def test_a_timestamp_type_that_names_no_kafka_type_is_an_invalid_row(tmp_path):
    """A dump's timestampType is Kafka's `TimestampType`: its id or its name. Any other cell was read as CreateTime,
    so the batch took a clock it never had; now it is an invalid row, in every format, and the reader's count agrees."""
    from pipelines.frames.decode import count_tabular

    rows = _commit_rows(6)
    for r, t in zip(rows, ("LogAppendTime", "bogus", "CREATE_TIME", "7", "NoTimestampType", "-1")):
        r["timestampType"] = t
    (tmp_path / "d.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    pcsv.write_csv(pa.Table.from_pylist(rows), tmp_path / "d.csv")
    wide = [dict(r, key=bytes.fromhex(r["key"]), value=bytes.fromhex(r["value"]), timestampType=t)
            for r, t in zip(rows, (1, 9, 0, 7, -1, -1))]
    pq.write_table(pa.Table.from_pylist(wide), tmp_path / "d.parquet")
    for name in ("d.jsonl", "d.csv", "d.parquet"):
        out = list(read_tabular_dump(tmp_path / name))
        bad = [o for o in out if isinstance(o, ReadProblem)]
        assert [(o.kind, o.position) for o in bad] == [("invalid_row", 1), ("invalid_row", 3)], (name, out)
        assert "timestampType" in bad[0].reason
        assert [(r.offset, r.batch.timestamp_type) for r in out if isinstance(r, LogRecord)] == [
            (0, "LogAppendTime"), (2, "CreateTime"), (4, "NoTimestampType"), (5, "NoTimestampType")], name
        assert {p: c["records_in"] for p, c in count_tabular(str(tmp_path / name)).items()} == {3: 6}, name


@pytest.mark.parametrize("fmt", ["json", "csv"])
def test_a_text_dump_compressed_whole_is_read_as_the_same_rows(tmp_path, fmt):
    """Spark's `compression` option writes `part-0000.json.gz`: such a file, or a directory of them, is the dump it
    holds (gzip, bzip2, zstd), where it was refused as 'not a .log segment'; a damaged one is one error naming it,
    and a codec the reader does not decompress (or a Parquet file compressed again) is refused by name."""
    import bz2
    import gzip

    from pipelines.decoding.reader import is_tabular
    from pipelines.frames.decode import count_tabular

    rows = _commit_rows(50)
    rows[7]["offset"] = "x"  # a malformed row: the file is read line by line, through the decompressing stream
    plain = tmp_path / f"d.{fmt}"
    if fmt == "json":
        plain.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    else:
        plain.write_text(",".join(rows[0]) + "\n" + "".join(",".join(map(str, r.values())) + "\n" for r in rows))
    data = plain.read_bytes()
    want = [(o.kind, o.position) if isinstance(o, ReadProblem) else (o.offset, o.value)
            for o in read_tabular_dump(plain)]
    assert ("malformed_row", 7) in want and len(want) == 50
    (tmp_path / "spark").mkdir()
    (tmp_path / "spark" / f"part-00000.{fmt}.gz").write_bytes(gzip.compress(data))
    (tmp_path / "spark" / "_SUCCESS").write_text("")
    for name, packed in ((f"d.{fmt}.gz", gzip.compress(data)), (f"d.{fmt}.bz2", bz2.compress(data)),
                         (f"d.{fmt}.zst", pa.compress(data, "zstd", asbytes=True)), ("spark", None)):
        if packed is not None:
            (tmp_path / name).write_bytes(packed)
        assert is_tabular(tmp_path / name), name
        got = [(o.kind, o.position) if isinstance(o, ReadProblem) else (o.offset, o.value)
               for o in read_tabular_dump(tmp_path / name)]
        assert got == want, name
        assert {p: c["records_in"] for p, c in count_tabular(str(tmp_path / name)).items()} == {-1: 1, 3: 49}

    packed = gzip.compress(data)
    (tmp_path / f"torn.{fmt}.gz").write_bytes(packed[: len(packed) // 2])
    with pytest.raises(InvalidFieldError, match=f"torn.{fmt}.gz: Truncated compressed stream"):
        read_tabular_dump(tmp_path / f"torn.{fmt}.gz")
    (tmp_path / f"d.{fmt}.snappy").write_bytes(data)
    assert is_tabular(tmp_path / f"d.{fmt}.snappy")
    with pytest.raises(InvalidFieldError, match=r"compressed as \.snappy: only JSON lines and CSV compressed as \.gz"):
        read_tabular_dump(tmp_path / f"d.{fmt}.snappy")
    pq.write_table(pa.Table.from_pylist(_commit_rows(2)), tmp_path / "p.parquet")
    (tmp_path / "p.parquet.gz").write_bytes(gzip.compress((tmp_path / "p.parquet").read_bytes()))
    with pytest.raises(InvalidFieldError, match=r"p.parquet.gz is a parquet file compressed as \.gz"):
        read_tabular_dump(tmp_path / "p.parquet.gz")


@pytest.mark.parametrize("indent", [None, 1])
def test_a_json_dump_written_as_one_array_is_read_as_its_rows(tmp_path, indent):
    """An export as one JSON document (`[{…}, {…}]`, on one line or indented) was read line by line: every line a
    malformed row, no record replayed, and the run a succeeded snapshot without them. Its elements are its rows; an
    element that is no object is one malformed row at its index."""
    from pipelines.frames.decode import count_tabular

    rows = _commit_rows(5)
    doc = [*rows[:2], 7, *rows[2:]]
    (tmp_path / "d.json").write_text(json.dumps(doc, indent=indent))
    out = list(read_tabular_dump(tmp_path / "d.json"))
    assert [(o.kind, o.position) for o in out if isinstance(o, ReadProblem)] == [("malformed_row", 2)]
    assert [(r.offset, r.batch.position) for r in out if isinstance(r, LogRecord)] == [
        (0, 0), (1, 1), (2, 3), (3, 4), (4, 5)]
    assert {p: c["records_in"] for p, c in count_tabular(str(tmp_path / "d.json")).items()} == {-1: 1, 3: 5}


def test_a_dump_directory_mixing_formats_is_refused(tmp_path):
    """Every part file was read in the first one's format: a JSON part beside a CSV one gave each of its lines as a
    malformed row (1,999 of 2,000 rows quarantined, the records lost); now one error names the formats."""
    rows = _commit_rows(3)
    pcsv.write_csv(pa.Table.from_pylist(rows), tmp_path / "a.csv")
    (tmp_path / "b.json").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    with pytest.raises(InvalidFieldError, match=r"more than one format \(csv: a.csv, json: b.json\)"):
        read_tabular_dump(tmp_path)
    (tmp_path / "b.json").unlink()
    import gzip

    (tmp_path / "c.csv.gz").write_bytes(gzip.compress((tmp_path / "a.csv").read_bytes()))  # one format, packed or not
    out = list(read_tabular_dump(tmp_path))
    assert len([o for o in out if isinstance(o, LogRecord)]) == 3  # the rows of c repeat a's: not read again
    assert [(o.kind, o.position, o.records) for o in out if isinstance(o, ReadProblem)] == [("duplicate_row", 3, 3)]


@pytest.mark.parametrize("fmt", ["json", "parquet"])
@pytest.mark.parametrize("column", ["key", "topic"])
def test_text_that_is_not_utf8_is_one_row_quarantined_not_a_stack_trace(tmp_path, fmt, column):
    """Arrow's JSON and Parquet readers take a string's bytes as they are (its CSV reader checks them): a key or a
    topic holding a byte that is no UTF-8 stopped the run in a UnicodeDecodeError where the rows were read. Its row
    is now read as the line reader reads a text file (the byte as U+FFFD): a key that is no hex, an invalid row; a
    topic that is not __consumer_offsets, not read; the other rows are the dump's."""
    rows = _commit_rows(4)
    bad = {"key": b"\xff" + rows[2]["key"][2:].encode(), "topic": b"__consumer_offsets\xff"}[column]
    if fmt == "json":
        path = tmp_path / "d.json"
        lines = [json.dumps({**r, column: "@"}).encode().replace(b'"@"', b'"' + bad + b'"') if i == 2
                 else json.dumps(r).encode() for i, r in enumerate(rows)]
        path.write_bytes(b"\n".join(lines) + b"\n")
    else:
        path = tmp_path / "d.parquet"
        table = pa.Table.from_pylist(rows)
        cells = [bad if i == 2 else r[column].encode() for i, r in enumerate(rows)]
        table = table.set_column(table.column_names.index(column), column,
                                 pa.array(cells, pa.binary()).view(pa.string()))
        pq.write_table(table, path)
    out = list(read_tabular_dump(path))
    kind = {"key": "invalid_row", "topic": "not_offsets_data"}[column]
    assert [(o.kind, o.position) for o in out if isinstance(o, ReadProblem)] == [(kind, 2)]
    assert [r.offset for r in out if isinstance(r, LogRecord)] == [0, 1, 3]


@pytest.mark.parametrize("nested", ["[" * 5000 + "]" * 5000, '{"key": ' + "[" * 5000 + "]" * 5000 + "}"])
def test_a_json_row_nested_past_pythons_recursion_is_one_malformed_row(tmp_path, nested):
    """Python's JSON parser recurses once per level: a line nested 5000 deep raised RecursionError, a stack trace
    where the dump was planned. It is one malformed row at its row, and the others are read; in a dump written as
    one array, which then does not parse, each of its lines is one, as in any such array."""
    rows = [json.dumps(r) for r in _commit_rows(3)]
    rows.insert(1, nested)
    (tmp_path / "d.json").write_text("\n".join(rows) + "\n")
    out = list(read_tabular_dump(tmp_path / "d.json"))
    (problem,) = [o for o in out if isinstance(o, ReadProblem)]
    assert (problem.kind, problem.position) == ("malformed_row", 1) and "nested deeper than" in problem.reason
    assert [r.offset for r in out if isinstance(r, LogRecord)] == [0, 1, 2]

    (tmp_path / "d.json").write_text("[" + ",\n".join(rows) + "]\n")
    out = list(read_tabular_dump(tmp_path / "d.json"))
    assert [(o.kind, o.position) for o in out] == [("malformed_row", i) for i in range(4)]


def test_a_csv_field_past_pythons_field_limit_is_read_when_the_file_is_read_line_by_line(tmp_path):
    """A CSV dump read line by line (Arrow's reader refused a row: here one of two fields) holding a value past 128 KiB
    of hex (a GroupMetadata of many members): Python's CSV reader stopped at it with `field larger than field limit`,
    a stack trace. The record is read whole, and the short row is its malformed row."""
    from pipelines.decoding import message_writer as mw

    members = [dict(member_id=f"consumer-{i:05d}-" + "x" * 36, group_instance_id=None, client_id="c",
                    client_host="/10.0.0.1", rebalance_timeout=300000, session_timeout=45000,
                    subscription=mw.write_consumer_subscription(1, ["orders"]),
                    assignment=mw.write_consumer_assignment(1, {"orders": [i]})) for i in range(1500)]
    value = mw.write_group_metadata_value(3, protocol_type="consumer", generation=4, protocol="range",
                                          leader=members[0]["member_id"], current_state_timestamp=10, members=members)
    assert len(value.hex()) > 131072
    rows = _commit_rows(2)
    rows.append(dict(rows[0], key=mw.write_group_metadata_key("g").hex(), value=value.hex(), offset=2))
    with open(tmp_path / "d.csv", "w") as f:
        f.write(",".join(rows[0]) + "\n")
        f.writelines(",".join(str(v) for v in r.values()) + "\n" for r in rows)
        f.write("0001,0002\n")
    out = list(read_tabular_dump(tmp_path / "d.csv"))
    assert [(o.kind, o.position) for o in out if isinstance(o, ReadProblem)] == [("malformed_row", 3)]
    assert [(r.offset, r.value) for r in out if isinstance(r, LogRecord)][2] == (2, value)


def test_a_csv_header_that_is_not_utf8_is_the_dumps_missing_column_not_a_stack_trace(tmp_path):
    """Arrow's CSV reader checks the values, not the header: a column name holding a byte that is no UTF-8 raised
    UnicodeDecodeError where the dump was planned. The header is read as a text file is (the byte as U+FFFD): the
    dump lacks its `key` column, one error line."""
    rows = _commit_rows(2)
    (tmp_path / "d.csv").write_bytes(b"\xffkey," + ",".join(list(rows[0])[1:]).encode() + b"\n" + "".join(
        ",".join(str(v) for v in r.values()) + "\n" for r in rows).encode())
    with pytest.raises(InvalidFieldError, match="lacks column"):
        read_tabular_dump(tmp_path / "d.csv")


def test_a_parquet_offset_column_of_unsigned_longs_is_read_and_one_past_a_long_is_an_invalid_row(tmp_path):
    """A Parquet writer's `uint64` offset column (what `pandas` writes for unsigned numbers): comparing it with 0
    cast it to longs, and one value past 2**63 - 1 failed the run in an ArrowInvalid stack trace. That row is an
    invalid row (no Kafka offset is past a long); the others are read."""
    rows = _commit_rows(3)
    table = pa.Table.from_pylist(rows)
    table = table.set_column(table.column_names.index("offset"), "offset",
                             pa.array([0, 2**64 - 1, 2], pa.uint64()))
    table = table.set_column(table.column_names.index("partition"), "partition", pa.array([3, 3, 3], pa.uint32()))
    pq.write_table(table, tmp_path / "d.parquet")
    out = list(read_tabular_dump(tmp_path / "d.parquet"))
    assert [(o.kind, o.position) for o in out if isinstance(o, ReadProblem)] == [("invalid_row", 1)]
    assert [(r.offsets_partition, r.offset) for r in out if isinstance(r, LogRecord)] == [(3, 0), (3, 2)]


def test_a_json_dump_naming_no_key_column_lacks_it_as_a_csv_dump_does(tmp_path):
    """JSON lines whose key is under another name (`k`): Arrow's reader, given key/value/topic as text, made a key
    column of nulls, and each row was quarantined in a run that succeeded, where the same rows in CSV were refused
    for the missing column. Both refuse it now; a dump whose every value is null (tombstones) still reads."""
    rows = _commit_rows(3)
    (tmp_path / "d.json").write_text("".join(json.dumps({("k" if c == "key" else c): v for c, v in r.items()}) + "\n"
                                             for r in rows))
    with pytest.raises(InvalidFieldError, match=r"lacks column\(s\) key"):
        read_tabular_dump(tmp_path / "d.json")
    (tmp_path / "d.json").write_text("".join(json.dumps({**r, "value": None}) + "\n" for r in rows))
    out = list(read_tabular_dump(tmp_path / "d.json"))
    assert [(r.offset, r.value) for r in out if isinstance(r, LogRecord)] == [(0, None), (1, None), (2, None)]
