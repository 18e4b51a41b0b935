"""The decoded log's tally against the reference reader: on broker data dirs, real segments and a damaged dump,
the record counts by type, the newest timestamps and the records past a cut-off equal those of the rows
`segments.read_log` + `to_decoded_row` give, counted here in plain Python; on Spark and in the driver alike."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from pipelines.decoding.rows import problem_to_row, to_decoded_row
from pipelines.decoding.segments import read_log
from pipelines.frames.decode import decoded_log, plan_inputs
from pipelines.frames.tally import tally
from pipelines.validation.accounting import Accounting
from schemas.records import ReadProblem
from tests import badinputs as bi
from tests.depth import cases


def reference_rows(path):
    return [problem_to_row(x) if isinstance(x, ReadProblem) else to_decoded_row(x) for x in read_log([path])]


def label(r):
    if r["record_kind"] == "error":
        return "error"
    if r["record_kind"] == "control":
        return f"control:{r['control_type'] or '?'}"
    return f"{r['record_kind']}:{'?' if r['key_type'] is None else r['key_type']}"


def expected(rows, until_offset, until_time):
    counts, late = {}, {}
    for r in rows:
        counts[label(r)] = counts.get(label(r), 0) + 1
        if r["record_kind"] in ("error", "unknown"):
            continue
        reason = None
        if until_offset is not None and r["offset"] is not None and r["offset"] > until_offset:
            reason = f"after --until-offset {until_offset}"
        elif until_time is not None and r["timestamp"] is not None and r["timestamp"] > until_time:
            reason = "time"
        if reason:
            late.setdefault(r["offsets_partition"], {}).setdefault(reason, 0)
            late[r["offsets_partition"]][reason] += 1
    timed = [r for r in rows if r["record_kind"] != "error" and r["timestamp"] is not None and r["timestamp"] >= 0]
    newest = max((r["timestamp"] for r in timed), default=None)
    newest_until = None if until_offset is None else max(
        (r["timestamp"] for r in timed if r["offset"] <= until_offset), default=None)
    quarantined = {}
    for r in rows:
        if r["record_kind"] == "error":
            w = 1 if r["error_records"] is None else r["error_records"]
            quarantined[r["offsets_partition"]] = quarantined.get(r["offsets_partition"], 0) + w
    return counts, newest, newest_until, late, {p: n for p, n in quarantined.items() if n}


@pytest.mark.spark
def test_the_tally_counts_what_the_reference_reader_reads(spark, shared_dir, tmp_path):
    inputs = bi.real_and_damaged_inputs(shared_dir, tmp_path)
    if not inputs:
        pytest.skip("no real segments")
    for path in inputs:
        rows = reference_rows(path)
        offsets = sorted(r["offset"] for r in rows if r["offset"] is not None)
        times = sorted(r["timestamp"] for r in rows if r["timestamp"] is not None and r["timestamp"] >= 0)
        at_offset = offsets[len(offsets) // 2] if offsets else 0
        at_time = times[len(times) // 3] if times else 0
        on_spark = plan_inputs([path])
        for cut in [(at_offset, None), (None, at_time), (at_offset, at_time)]:
            counts, newest, newest_until, late, quarantined = expected(rows, *cut)
            # in this process at every cut; on Spark (the same task functions, a job each) at the one with both
            plans = (on_spark, replace(on_spark, in_process=True)) if None not in cut else (
                replace(on_spark, in_process=True),)
            for plan in plans:
                t = tally(decoded_log(spark, plan, cut=cut))
                facts = t.facts()
                assert facts.counts == counts, (path, cut)
                assert (facts.max_timestamp, facts.max_timestamp_until) == (newest, newest_until), (path, cut)
                acc = Accounting.from_tally(t)
                got = {p: {("time" if k.startswith("after --until-time") else k): n
                           for k, n in c.records_skipped.items() if k.startswith("after")}
                       for p, c in acc.partitions.items()}
                assert {p: v for p, v in got.items() if v} == late, (path, cut)
                assert {p: c.records_quarantined for p, c in acc.partitions.items()
                        if c.records_quarantined} == quarantined, (path, cut)


def dump_log_gaps(dump: Path) -> dict | None:
    """From `kafka-dump-log --offsets-decoder` of a partition's segments: where its offsets stop missing (the first
    offset printed after the last one missing, counting from the first segment's base offset) and the newest record
    time up to it; None when nothing is missing."""
    import re

    prev, end, newest, until = None, None, None, None
    for line in dump.read_text(encoding="utf-8").splitlines():
        start = re.match(r"Log starting offset: (\d+)", line)
        if start and prev is None:
            prev = int(start.group(1)) - 1
        record = re.match(r"\| offset: (\d+) CreateTime: (-?\d+)", line)
        if record:
            offset, ts = int(record.group(1)), int(record.group(2))
            newest = ts if newest is None else max(newest, ts)
            if prev is not None and offset > prev + 1:
                end, until = offset, newest
            prev = offset
    return None if end is None else {"compacted_below": end, "compacted_until": until}


def test_where_a_compacted_log_lacks_offsets_is_what_dump_log_shows(brokerdata):
    """The broker's `compacted` scenario (its log cleaner ran) and every other scenario (nothing missing): per
    offsets partition, where the decoded log stops missing offsets, read in one pass and in windows of a few rows
    (a run of missing offsets may fall between two windows), equals what kafka-dump-log printed."""
    import pyarrow as pa

    from pipelines.decoding.reader import iter_decoded_rows
    from pipelines.frames.tally import RunningTally, Tally, tally_rows
    from schemas.decoded import DECODED_RECORD_SCHEMA

    found = 0
    for scenario in sorted(p for p in brokerdata.iterdir() if (p / "dump_log").is_dir()):
        plan = plan_inputs([scenario / "data"])
        rows = pa.Table.from_pylist(list(iter_decoded_rows([scenario / "data"])), schema=DECODED_RECORD_SCHEMA)
        whole = Tally(tally_rows(rows, after=plan.read_before())).log_gaps()
        windows = RunningTally(rows=3, after=plan.read_before())
        for start in range(0, rows.num_rows, 7):
            windows.add(rows.slice(start, 7))
        split = Tally(windows.result()).log_gaps()
        for dump in sorted((scenario / "dump_log").glob("__consumer_offsets-*.txt")):
            p = int(dump.stem.rsplit("-", 1)[1])
            want = dump_log_gaps(dump)
            for got in (whole, split):
                gap = got.get(p, {})
                assert ({"compacted_below": gap["compacted_below"], "compacted_until": gap["compacted_until"]}
                        if gap.get("compacted_below") is not None else None) == want, (scenario.name, p)
            found += want is not None
    assert found  # the compacted scenario's partitions lack offsets


def test_a_gaps_timestamp_is_the_newest_read_up_to_its_end_whatever_the_order():
    """A run of missing offsets is dated by the newest timestamp read up to the first offset after it, in each
    partition on its own: a producer's clock may go back (CreateTime), so that is not the row's own timestamp. Two
    partitions, read in any order, each with the newest timestamp before its gap's end."""
    import pyarrow as pa

    from pipelines.frames.tally import tally_rows

    read = [(0, 0, 100), (1, 7, 900), (0, 1, 300), (0, 5, 200), (1, 8, 50), (1, 12, 60), (0, 9, 150)]
    for rows in (read, sorted(read)):  # shuffled, and in log order (as a shard's decoder gives them)
        table = pa.table({"offsets_partition": pa.array([p for p, _, _ in rows], pa.int32()),
                          "record_kind": ["offset_commit"] * len(rows),
                          "control_type": pa.nulls(len(rows), pa.string()),
                          "key_type": pa.array([1] * len(rows), pa.int16()),
                          "timestamp": pa.array([t for _, _, t in rows], pa.int64()),
                          "offset": pa.array([o for _, o, _ in rows], pa.int64())})
        got = {r["offsets_partition"]: (r["first_offset"], r["gap_end"], r["gap_ts"])
               for r in tally_rows(table).to_pylist()}
        # partition 0 reads 0, 1, 5, 9: its last gap ends at 9, the newest before it 300; partition 1: 7, 8, 12
        assert got == {0: (0, 9, 300), 1: (7, 12, 900)}


def test_a_batch_quarantined_for_a_negative_offset_is_no_place_in_the_log(tmp_path):
    """Its quarantine row carries the batch's offset (-5): taken for the first offset read, the summary said the log
    began at -5 and lacked -4 to 0, as if the log cleaner had removed them."""
    import pyarrow as pa

    from pipelines.decoding.columnar import decode_segment_to_arrow
    from pipelines.frames.tally import Tally, tally_rows

    g = bi.group_in(0, "neg")
    path = bi.write_segment(tmp_path, 0, bi.batch([bi.group_record(g, bi.T0)], 0)
                            + bi.batch([bi.commit(g, 0, 1, bi.T0 + 1)], -5)
                            + bi.batch([bi.commit(g, 1, 1, bi.T0 + 2)], 1))
    table = pa.Table.from_batches(list(decode_segment_to_arrow(path, offsets_partition=0)))
    assert "negative_offset" in table.column("error_kind").to_pylist()
    assert Tally(tally_rows(table)).log_gaps() == {0: {"first_offset": 0, "compacted_below": None,
                                                       "compacted_until": None}}


def test_a_runs_times_past_year_9999_are_that_years_end():
    # the clock of a run as of its newest record, and the time a compacted log is dated by: a crafted record of year
    # 146 million made both past what a run record and the views hold (`changes` failed printing the compaction)
    import pyarrow as pa

    from pipelines.frames.tally import Tally, tally_rows
    from pipelines.times import MAX_TIME_MS

    rows = [(0, 100), (1, 1 << 62), (9, 200)]
    table = pa.table({"offsets_partition": pa.array([3] * 3, pa.int32()), "record_kind": ["offset_commit"] * 3,
                      "control_type": pa.nulls(3, pa.string()), "key_type": pa.array([1] * 3, pa.int16()),
                      "timestamp": pa.array([t for _, t in rows], pa.int64()),
                      "offset": pa.array([o for o, _ in rows], pa.int64())})
    tally = Tally(tally_rows(table))
    assert tally.facts().max_timestamp == MAX_TIME_MS
    assert tally.log_gaps() == {3: {"first_offset": 0, "compacted_below": 9, "compacted_until": MAX_TIME_MS}}


def plain_tally(rows, until_offset, until_time, after):
    """The tally of `rows` (dicts of the tally's columns) by its definitions, row by row."""
    out = {}
    for r in rows:
        kind = r["record_kind"]
        lab = None if kind is None else label(r)
        empty = dict.fromkeys(("n", "quarantined", "late_offset", "late_time"), 0) | {"ts": None, "ts_until": None}
        t = out.setdefault((r["offsets_partition"], lab, r["value_version"]), empty)
        t["n"] += 1
        if kind == "error":
            t["quarantined"] += 1 if r["error_records"] is None else r["error_records"]
        usable = kind is not None and kind not in ("error", "unknown")
        late_offset = until_offset is not None and r["offset"] is not None and r["offset"] > until_offset
        t["late_offset"] += usable and late_offset
        t["late_time"] += usable and not late_offset and until_time is not None and r["timestamp"] is not None \
            and r["timestamp"] > until_time
        if kind not in (None, "error") and r["timestamp"] is not None and r["timestamp"] >= 0:
            t["ts"] = max(t["ts"] or r["timestamp"], r["timestamp"])
            if until_offset is not None and r["offset"] is not None and r["offset"] <= until_offset:
                t["ts_until"] = max(t["ts_until"] or r["timestamp"], r["timestamp"])
    spans = {}
    for p in {r["offsets_partition"] for r in rows} - {None}:
        read = sorted((r for r in rows if r["offsets_partition"] == p and r["offset"] is not None),
                      key=lambda r: r["offset"])
        s = spans[p] = {"first_offset": read[0]["offset"] if read else None, "gap_end": None, "gap_ts": None}
        prev, newest = after.get(p), None
        for r in read:
            if r["record_kind"] not in (None, "error") and r["timestamp"] is not None and r["timestamp"] >= 0:
                newest = r["timestamp"] if newest is None else max(newest, r["timestamp"])
            if prev is not None and r["offset"] > prev + 1:
                s["gap_end"], s["gap_ts"] = r["offset"], newest
            prev = r["offset"]
        s["span_ts"] = newest
    none = {"first_offset": None, "gap_end": None, "gap_ts": None, "span_ts": None}
    return {k: v | spans.get(k[0], none) for k, v in out.items()}


@given(st.lists(st.fixed_dictionaries({
    "offsets_partition": st.sampled_from([None, 0, 1, 3]),
    "record_kind": st.sampled_from([None, "offset_commit", "group_metadata", "consumer_group", "control", "error",
                                    "unknown"]),
    "key_type": st.sampled_from([None, -1, 0, 1, 2, 8, 300]),
    "control_type": st.sampled_from([None, "COMMIT", "ABORT"]),
    "value_version": st.sampled_from([None, 0, 3, 4]),
    "timestamp": st.one_of(st.none(), st.integers(-2, 1000)),
    "offset": st.one_of(st.none(), st.integers(0, 40)),
    "error_records": st.one_of(st.none(), st.integers(0, 5))}), max_size=60),
    st.one_of(st.none(), st.integers(0, 40)), st.one_of(st.none(), st.integers(0, 1000)),
    st.dictionaries(st.sampled_from([0, 1, 3]), st.integers(-1, 20), max_size=3), st.integers(1, 25),
    st.lists(st.integers(1, 59), max_size=3))
@settings(max_examples=cases(2000, 200), deadline=None)
def test_the_tally_is_its_definitions_row_by_row(rows, until_offset, until_time, after, held, cuts):
    """Any rows (nulls anywhere, cut or not), tallied at once in any order, in log order by a running tally that
    groups every `held` rows, and in pieces of the log cut at `cuts` (a split partition's ranges, each tallied by a
    task of its own, from where the one before stopped reading) added up as the driver adds the tasks' tallies:
    one row per offsets partition and record type label, each sum, newest time and span as its definition gives it
    row by row."""
    import pyarrow as pa

    from pipelines.frames.tally import RunningTally, TALLY_SCHEMA, _combine, tally_rows

    # where each partition's reading started: below every offset read of it
    after = {p: a for p, a in after.items()
             if all(r["offset"] is None or r["offsets_partition"] != p or r["offset"] > a for r in rows)}
    types = {f.name: f.type for f in TALLY_SCHEMA} | {"offsets_partition": pa.int32(), "record_kind": pa.string(),
                                                       "key_type": pa.int16(), "control_type": pa.string(),
                                                       "timestamp": pa.int64(), "offset": pa.int64(),
                                                       "error_records": pa.int64()}
    table = pa.table({c: pa.array([r[c] for r in rows], types[c]) for c in rows[0]}) if rows else None
    want = plain_tally(rows, until_offset, until_time, after)
    if table is None:
        assert tally_rows(TALLY_SCHEMA.empty_table()).num_rows == 0
        return
    # a running tally's windows come in log order, as a shard's decoder reads them
    in_order = sorted(range(len(rows)), key=lambda i: (rows[i]["offsets_partition"] is None,
                                                       rows[i]["offsets_partition"] or 0, rows[i]["offset"] or 0))
    running = RunningTally(until_offset, until_time, rows=held, after=after)
    for start in range(0, len(rows), 7):
        running.add(table.take(pa.array(in_order[start:start + 7], pa.int64())))
    # the pieces: of each record once (a record read twice, on both sides of a cut, leaves their order unknown)
    seen: set = set()
    key = [(r["offsets_partition"], r["offset"]) for r in rows]
    once = [i for i in in_order if rows[i]["offset"] is None or key[i] not in seen and not seen.add(key[i])]
    pieces, read = [], dict(after)
    for a, b in zip([0, *sorted(cuts)], [*sorted(cuts), len(once)]):
        piece = table.take(pa.array(once[a:b], pa.int64()))
        task = RunningTally(until_offset, until_time, rows=held, after=read)
        task.add(piece)
        pieces.append(task.result())
        for r in piece.to_pylist():
            if r["offsets_partition"] is not None and r["offset"] is not None:
                read[r["offsets_partition"]] = max(r["offset"], read.get(r["offsets_partition"], r["offset"]))
    for got, expected in ((tally_rows(table, until_offset, until_time, after=after), want), (running.result(), want),
                          (_combine(pa.concat_tables(pieces)),
                           plain_tally([rows[i] for i in sorted(once)], until_offset, until_time, after))):
        assert {(r.pop("offsets_partition"), r.pop("label"), r.pop("value_version")): r
                for r in got.to_pylist()} == expected
