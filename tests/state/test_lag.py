"""The `consumer_lag` rows (`state.lag.lag_table`) of a crafted log dir whose timestamps are known by construction
(`tests/lagdata.py`): every formula of the lag in time pinned, against the schedule the records were written on."""
from __future__ import annotations

import math

import pyarrow as pa
import pytest

from pipelines.decoding.log_end_offsets import data_logs, log_end_offsets_table
from pipelines.state.lag import consumer_lag, lag_table
from schemas.tables import TABLES
from tests import lagdata as ld


def _offsets(commits: list[tuple[str, str, int, int, int]]) -> pa.Table:
    """loaded_offsets rows: (group, topic, partition, committed offset, commit time ms)."""
    g, t, p, c, ts = zip(*commits)
    return pa.table({"group_id": pa.array(g), "topic": pa.array(t), "partition": pa.array(p, pa.int32()),
                     "committed_offset": pa.array(c, pa.int64()),
                     "commit_timestamp": pa.array([x * 1000 for x in ts], pa.timestamp("us", tz="UTC"))})


@pytest.fixture(scope="module")
def crafted(tmp_path_factory):
    log_dir = ld.build(tmp_path_factory.mktemp("lag"))
    ids = ld.group_ids()
    commits = [(ids[stem], topic, part, off, ld.COMMIT_AT[stem]) for stem, tps in ld.GROUPS.items()
               for topic, part, off in tps]
    return log_dir, _offsets(commits)


def _table(log_dir, offsets, as_of=ld.AS_OF):
    found = data_logs([log_dir])
    try:
        return lag_table(offsets, log_end_offsets_table(found.rows, "s"), found.logs, as_of, "s")
    finally:
        found.close()


def test_every_partition_lags_as_the_schedule_says(crafted):
    log_dir, offsets = crafted
    t, facts = _table(log_dir, offsets)
    assert t.schema == TABLES["consumer_lag"]
    rows = t.to_pylist()
    assert len(rows) == offsets.num_rows == facts.offsets
    starts = {0: 0, 1: ld.RETENTION_START, 2: 0}
    for r in rows:
        want = ld.expected_lag_seconds(r["topic"], r["partition"], r["committed_offset"])
        got = r["lag_seconds"]
        assert (got is None) == (want is None) and (want is None or abs(got - want) < 1e-6), (r, want)
        end = ld.ends()[(r["topic"], r["partition"])]
        assert r["log_end_offset"] == end and r["lag"] == consumer_lag(end, r["committed_offset"])
        assert r["log_start_offset"] == (starts[r["partition"]] if r["topic"] == ld.TOPIC else None)
        stem = {gid: stem for stem, gid in ld.group_ids().items()}[r["group_id"]]
        assert r["commit_age_seconds"] == pytest.approx((ld.AS_OF - ld.COMMIT_AT[stem]) / 1000)
    assert facts.partitions_read == 3 and facts.offsets_timed == len(rows) - 1  # all but audit-0
    assert facts.notes == []


def test_the_formulas_one_by_one(crafted):
    log_dir, offsets = crafted
    ids = ld.group_ids()
    rows = {(r["group_id"], r["topic"], r["partition"]): r for r in _table(log_dir, offsets)[0].to_pylist()}
    as_of = ld.AS_OF / 1000
    # behind on events-0 at 60: as_of minus record 60's own time (it is the largest so far)
    r = rows[(ids["behind"], ld.TOPIC, 0)]
    assert r["lag_seconds"] == pytest.approx(as_of - ld.schedule(0, 60) / 1000)
    assert (r["next_offset"], r["timestamp_type"], r["lag"]) == (60, "CreateTime", 61)
    # below the log start: measured to the log start's record, the records between are gone
    r = rows[(ids["below"], ld.TOPIC, 1)]
    assert r["next_offset"] == ld.RETENTION_START == r["log_start_offset"]
    assert r["lag_seconds"] == pytest.approx(as_of - ld.schedule(1, ld.RETENTION_START) / 1000)
    # CreateTime going backwards: record 102 is as old as record 99, the newest before it
    r = rows[(ids["behind"], ld.TOPIC, 2)]
    assert ld.schedule(2, 102) < ld.schedule(2, 99)
    assert r["lag_seconds"] == pytest.approx(as_of - ld.schedule(2, 99) / 1000)
    assert r["next_timestamp"].timestamp() == pytest.approx(ld.schedule(2, 99) / 1000)
    # caught up: only a COMMIT marker past the commit (offset lag 1), at the end, past the end (negative lag)
    assert [(rows[(ids["caught"], ld.TOPIC, p)]["lag"], rows[(ids["caught"], ld.TOPIC, p)]["lag_seconds"])
            for p in range(3)] == [(1, 0.0), (0, 0.0), (-1, 0.0)]
    assert rows[(ids["caught"], ld.TOPIC, 0)]["next_offset"] is None
    # a high watermark alone: how many records, not how old
    r = rows[(ids["audit"], "audit", 0)]
    assert (r["lag"], r["lag_seconds"], r["log_start_offset"]) == (100, None, None)
    # commit age
    assert r["commit_age_seconds"] == pytest.approx((ld.AS_OF - ld.COMMIT_AT["audit"]) / 1000)


def test_each_group_has_its_largest_lag_and_worst_partition(crafted):
    log_dir, offsets = crafted
    ids = ld.group_ids()
    rows = _table(log_dir, offsets)[0].to_pylist()
    for stem, gid in ids.items():
        mine = [r for r in rows if r["group_id"] == gid]
        known = [r["lag_seconds"] for r in mine if r["lag_seconds"] is not None]
        worst = [r for r in mine if r["is_group_max"]]
        if not known:
            assert worst == [] and all(r["group_max_lag_seconds"] is None for r in mine)
            continue
        assert all(r["group_max_lag_seconds"] == max(known) for r in mine)
        assert len(worst) == 1 and worst[0]["lag_seconds"] == max(known)
    caught = [r for r in rows if r["group_id"] == ids["caught"] and r["is_group_max"]]
    assert [(r["topic"], r["partition"]) for r in caught] == [(ld.TOPIC, 0)]  # a tie: the first partition


def test_a_what_if_snapshot_answers_for_its_own_as_of(crafted):
    """As of 14:05 the group was as far behind as the records written before 14:05 say: a record written after
    as_of is not behind it (0), an older one is as_of minus its time."""
    log_dir, offsets = crafted
    ids = ld.group_ids()
    as_of = ld.schedule(0, 70)  # record 70's time: events-0 at 60 is ten minutes behind then
    rows = {(r["group_id"], r["topic"], r["partition"]): r for r in _table(log_dir, offsets, as_of)[0].to_pylist()}
    assert rows[(ids["behind"], ld.TOPIC, 0)]["lag_seconds"] == pytest.approx(600.0)
    assert rows[(ids["behind"], ld.TOPIC, 1)]["lag_seconds"] == 0.0  # record 90 was written after as_of
    for r in rows.values():
        want = ld.expected_lag_seconds(r["topic"], r["partition"], r["committed_offset"], as_of)
        assert (r["lag_seconds"] is None) == (want is None)
        if want is not None:
            assert r["lag_seconds"] == pytest.approx(want)


def test_no_logs_no_time(crafted):
    _, offsets = crafted
    t, facts = lag_table(offsets, TABLES["log_end_offsets"].empty_table(), {}, ld.AS_OF, "s")
    assert t.column("lag_seconds").null_count == t.num_rows and facts.partitions_read == 0
    assert all(math.isclose(a, (ld.AS_OF - c.value / 1000) / 1000) for a, c in
               zip(t.column("commit_age_seconds").to_pylist(), offsets.column("commit_timestamp")))


def test_past_the_segments_end_the_time_is_unknown(crafted, tmp_path):
    """A high watermark beyond what the log dir's segments hold (another broker's copy was ahead): a commit past
    the segments' end has records behind it whose time the input does not hold."""
    import shutil

    log_dir, offsets = crafted
    copy = tmp_path / "logdir"
    shutil.copytree(log_dir, copy)
    hw = {**ld.ends(), (ld.TOPIC, 2): 130}
    lines = [f"{t} {p} {o}" for (t, p), o in hw.items()]
    (copy / "replication-offset-checkpoint").write_text(f"0\n{len(lines)}\n" + "\n".join(lines) + "\n")
    rows = {(r["group_id"], r["topic"], r["partition"]): r for r in _table(copy, offsets)[0].to_pylist()}
    r = rows[(ld.group_ids()["caught"], ld.TOPIC, 2)]  # committed 121, past the segments' end (120), HW 130
    assert (r["lag"], r["lag_seconds"]) == (9, None)
    r = rows[(ld.group_ids()["behind"], ld.TOPIC, 2)]  # its next record is in the segments: known
    assert r["lag_seconds"] == pytest.approx(ld.expected_lag_seconds(ld.TOPIC, 2, 102))


def test_a_records_time_past_year_9999_is_that_years_end(tmp_path):
    # a crafted data-topic log of year 146 million: its times wrapped in int64 microseconds (a next record of
    # 1970) or failed the table; they are the last instant a table holds, as the loaders read the offsets topic's
    import datetime as dt

    from pipelines.decoding.batch_writer import write_record_batch

    (tmp_path / "orders-0").mkdir()
    far = 1 << 62
    (tmp_path / "orders-0" / "00000000000000000000.log").write_bytes(
        write_record_batch([(b"k", b"v", far), (b"k", b"v", far + 1), (b"k", b"v", ld.AS_OF - 1000)], 0))
    found = data_logs([tmp_path])
    try:
        ends = log_end_offsets_table(found.rows, "s")
        last = dt.datetime(9999, 12, 31, 23, 59, 59, 999000, tzinfo=dt.timezone.utc)
        assert ends.column("log_start_timestamp").to_pylist() == [last]
        t, _ = lag_table(_offsets([("g", "orders", 0, 1, ld.AS_OF - 5000)]), ends, found.logs, ld.AS_OF, "s")
    finally:
        found.close()
    (row,) = t.to_pylist()
    assert (row["next_offset"], row["next_timestamp"], row["lag_seconds"]) == (1, last, 0.0)


def test_a_what_if_snapshots_ends_are_the_ends_at_its_as_of(crafted):
    """The log end at a past as_of is the first record appended after it (a record stamped back in time after a
    newer one counts as that one's), never the dump's; before the oldest record a partition holds (retention took
    those before), it is unknown: no row, so LAG is unknown, not today's."""
    from pipelines.decoding.log_end_offsets import ends_at

    log_dir, offsets = crafted
    found = data_logs([log_dir])
    try:
        for as_of in (ld.DATA_T0 - 1, ld.schedule(1, ld.RETENTION_START) - 1, ld.schedule(2, 100), ld.schedule(0, 100),
                      ld.schedule(0, 119), ld.schedule(0, 119) + 500, ld.AS_OF):
            rows = ends_at(found, as_of)
            got = {r.partition: r.log_end_offset for r in rows if r.topic == ld.TOPIC}
            want = {p: ld.expected_end(p, as_of) for p in range(3)}
            assert got == {p: e for p, e in want.items() if e is not None}, as_of
            # audit-0's high watermark was written when the dump was, after every as_of here: unknown then too
            assert [r for r in rows if r.topic == "audit"] == []
            lag, _ = lag_table(offsets, log_end_offsets_table(rows, "s"), found.logs, as_of, "s", past=True)
            for r in lag.to_pylist():
                e = got.get(r["partition"]) if r["topic"] == ld.TOPIC else None
                assert (r["log_end_offset"], r["lag"]) == (e, None if e is None else e - r["committed_offset"])
        assert ld.expected_end(1, ld.schedule(1, ld.RETENTION_START) - 1) is None
        assert ld.expected_end(2, ld.schedule(0, 100)) == 105  # 100-104 stamped half an hour back, written after 99
    finally:
        found.close()


def test_the_end_at_a_past_as_of_reads_past_a_just_rolled_empty_segment(crafted, tmp_path):
    """A broker's newest segment is often empty (just rolled): it has no batch to give the log's timestamp type,
    which is no reason not to know the end then."""
    import shutil

    from pipelines.decoding.log_end_offsets import ends_at

    log_dir, _ = crafted
    copy = tmp_path / "logdir"
    shutil.copytree(log_dir, copy)
    (copy / f"{ld.TOPIC}-2" / f"{120:020d}.log").write_bytes(b"")
    found = data_logs([copy])
    try:
        as_of = ld.schedule(0, 100)
        got = {r.partition: r.log_end_offset for r in ends_at(found, as_of) if r.topic == ld.TOPIC}
    finally:
        found.close()
    assert got == {p: ld.expected_end(p, as_of) for p in range(3)}


def test_an_as_of_past_the_dump_keeps_the_dumps_end_as_observed_then(crafted):
    """`--as-of` after the dump was taken: the ends then are not known past the dump's, which is kept with the
    time it was observed (not claimed as the ends at as_of)."""
    from pipelines.decoding.log_end_offsets import ends_at

    log_dir, _ = crafted
    found = data_logs([log_dir])
    try:
        later = max(r.observed_at_ms for r in found.rows) + 3_600_000
        dump = {(r.topic, r.partition): (r.log_end_offset, r.observed_at_ms) for r in found.rows}
        then = {(r.topic, r.partition): (r.log_end_offset, r.observed_at_ms) for r in ends_at(found, later)}
    finally:
        found.close()
    assert then == dump and all(at < later for _, at in then.values())


def test_a_commit_below_the_log_start_has_no_lag_in_time_where_the_end_then_is_not_known(crafted):
    """A what-if snapshot as of a moment before the oldest record events-1 holds (retention took records 0-29 after
    it): its end then is not known (no row), and a commit below the log start had records 10-29 behind it then, at
    times the dump no longer holds. Its lag in time was 0.0 (caught up: measured to record 30, written after as_of),
    where a commit below the log start has none in a what-if snapshot; one at or past the start is still 0."""
    from pipelines.decoding.log_end_offsets import ends_at

    log_dir, _ = crafted
    as_of = ld.schedule(1, ld.RETENTION_START) - 1
    offsets = _offsets([("g", ld.TOPIC, 1, 10, as_of - 5_000), ("g", ld.TOPIC, 1, 35, as_of - 5_000)])
    found = data_logs([log_dir])
    try:
        rows = ends_at(found, as_of)
        assert [r for r in rows if (r.topic, r.partition) == (ld.TOPIC, 1)] == []  # the end then is not known
        lag, _ = lag_table(offsets, log_end_offsets_table(rows, "s"), found.logs, as_of, "s", past=True)
    finally:
        found.close()
    got = {r["committed_offset"]: (r["lag"], r["lag_seconds"], r["next_offset"]) for r in lag.to_pylist()}
    assert got == {10: (None, None, None), 35: (None, 0.0, 35)}


def test_a_log_its_loader_empties_at_the_checkpointed_start_lags_against_that_start(tmp_path):
    """orders-0's segments end at 10 and its log-start-offset-checkpoint says 25 (segments deleted by hand): Kafka's
    loader deletes them and starts the log empty at 25 (LogLoader, 4.0), with the high watermark 30 brought down to
    it. LAG counts from 25, as kafka-consumer-groups would, and a consumer at 5 or 15 is handed nothing: caught up
    in time, whatever the deleted records' times were. At an as_of before the dump the end then is not known (the
    records before 25 were appended at times the log dir no longer holds). The log started at 25 and ended at 30
    (LAG 25 and 15, lag in time unknown), and at the past as_of at 4: a start past its end."""
    from pipelines.decoding.log_end_offsets import ends_at
    from tests.decoding.test_log_end_offsets import _deleted_past_the_checkpointed_start

    _deleted_past_the_checkpointed_start(tmp_path)
    offsets = _offsets([("g", "orders", 0, 5, ld.AS_OF - 5_000), ("g", "orders", 0, 15, ld.AS_OF - 5_000)])
    found = data_logs([tmp_path])
    try:
        now, _ = lag_table(offsets, log_end_offsets_table(found.rows, "s"), found.logs, ld.AS_OF, "s")
        rows_then = ends_at(found, 1_003)
        then, _ = lag_table(offsets, log_end_offsets_table(rows_then, "s"), found.logs, 1_003, "s", past=True)
    finally:
        found.close()
    got = {r["committed_offset"]: (r["log_start_offset"], r["log_end_offset"], r["lag"], r["lag_seconds"])
           for r in now.to_pylist()}
    assert got == {5: (25, 25, 20, 0.0), 15: (25, 25, 10, 0.0)}
    assert rows_then == []
    assert [(r["log_end_offset"], r["lag"], r["lag_seconds"]) for r in then.to_pylist()] == [(None, None, None)] * 2


def test_a_commit_below_the_log_start_at_an_as_of_after_the_dump_is_handed_the_log_start(crafted):
    """A what-if snapshot as of an hour after the dump was taken: records 0-29 of events-1 were gone from the log
    already when the dump saw it, so at as_of a consumer at 10 is handed record 30, the log start, and lags by as_of
    minus its time, as a scheduled snapshot measures it. It was null, as if as_of were before the dump (when those
    records might still have been there); a partition the dump saw after as_of keeps it null."""
    from pipelines.decoding.log_end_offsets import ends_at

    log_dir, _ = crafted
    offsets = _offsets([("g", ld.TOPIC, 1, 10, ld.AS_OF - 5_000), ("g", ld.TOPIC, 1, 35, ld.AS_OF - 5_000)])
    found = data_logs([log_dir])
    try:
        seen = {(r.topic, r.partition): r.observed_at_ms for r in found.rows}
        later = max(seen.values()) + 3_600_000
        rows = ends_at(found, later)
        lag, _ = lag_table(offsets, log_end_offsets_table(rows, "s"), found.logs, later, "s", past=True, seen=seen)
        unseen, _ = lag_table(offsets, log_end_offsets_table(rows, "s"), found.logs, later, "s", past=True,
                              seen={**seen, (ld.TOPIC, 1): later + 1})
    finally:
        found.close()
    got = {r["committed_offset"]: (r["lag"], r["lag_seconds"], r["next_offset"]) for r in lag.to_pylist()}
    assert got == {10: (110, pytest.approx(ld.expected_lag_seconds(ld.TOPIC, 1, 10, later)), ld.RETENTION_START),
                   35: (85, pytest.approx(ld.expected_lag_seconds(ld.TOPIC, 1, 35, later)), 35)}
    assert [r["lag_seconds"] is None for r in unseen.to_pylist()] == [True, False]


def test_a_timestamp_below_minus_one_counts_as_none(tmp_path):
    """A producer other than Java's (whose ProducerRecord refuses it) may stamp a record before 1970, and a 4.0
    broker stores it under the default message.timestamp.before.max.ms (Long.MAX_VALUE: LogValidator). The broker's
    largest timestamp so far starts at -1 and only a larger one moves it (LogSegment, TimestampOffset.UNKNOWN, 4.0),
    so such a record has no time there: the lag in time up to it is unknown, like magic 0's, never as_of minus 1969
    (56 years); a later record with a time is measured as any."""
    from pipelines.decoding.batch_writer import write_record_batch

    (tmp_path / "orders-0").mkdir()
    (tmp_path / "orders-0" / "00000000000000000000.log").write_bytes(
        write_record_batch([(b"k", b"v", -5_000), (b"k", b"v", -4_000)], 0)
        + write_record_batch([(b"k", b"v", ld.AS_OF - 60_000)], 2))
    found = data_logs([tmp_path])
    try:
        t, facts = lag_table(_offsets([("g", "orders", 0, 0, ld.AS_OF - 5000), ("g", "orders", 0, 2, ld.AS_OF)]),
                             log_end_offsets_table(found.rows, "s"), found.logs, ld.AS_OF, "s")
    finally:
        found.close()
    got = [(r["next_offset"], r["next_timestamp"], r["lag_seconds"]) for r in t.to_pylist()]
    assert got[0] == (0, None, None)
    assert got[1][0] == 2 and got[1][2] == pytest.approx(60.0)
    assert facts.offsets_timed == 1


@pytest.mark.parametrize("stamp", [-1, -2, -86_400_000, -(2 ** 63)])
def test_a_commit_stamped_before_1970_has_no_commit_age(crafted, stamp):
    """A commit's own timestamp below 0 (a v1 OffsetCommit's client clock, which a 2.8 broker stored as sent, or a
    corrupt record; -2**63 is read as year 1) gave an age of some 56 or 2,000 years; it is now null (unknown), as
    a record's timestamp below -1 is, while a commit at the epoch itself keeps its age, and the lag in time its
    own figure."""
    from pipelines.coordinator.decoded import within_time
    from pipelines.decoding.message_writer import write_offset_commit_value
    from pipelines.decoding.messages import read_offset_message_value

    log_dir, offsets = crafted
    value = read_offset_message_value(write_offset_commit_value(1, offset=60, commit_timestamp=stamp))
    held = within_time(pa.table({"commit_timestamp": pa.array([value.commit_timestamp, 0], pa.int64())}))
    stamps = held.column("commit_timestamp").cast(pa.timestamp("ms", tz="UTC")).cast(pa.timestamp("us", tz="UTC"))
    behind = ld.group_ids()["behind"]
    odd = _offsets([(behind, ld.TOPIC, 0, value.offset, 0), (behind, ld.TOPIC, 1, value.offset, 0)])
    odd = odd.set_column(odd.schema.get_field_index("commit_timestamp"), "commit_timestamp", stamps)
    rows = _table(log_dir, odd)[0].to_pylist()
    assert [r["commit_age_seconds"] for r in rows] == [None, ld.AS_OF / 1000]
    assert rows[0]["lag_seconds"] == pytest.approx(ld.AS_OF / 1000 - ld.schedule(0, 60) / 1000)


def test_a_log_holding_no_record_has_no_end_at_a_time_before_its_segment_was_made(tmp_path):
    """orders-0 holds one empty segment at 50 (retention deleted records 0-49 and rolled it, a follower truncated
    to it): its end at any past as_of was taken to be 50, before the segment existed too, so a group at 40 was 10
    behind then. Kafka counts the empty segment's largest timestamp as its file's last modification
    (LogSegment.largestTimestamp, 4.0): before then the log held records 0-49, or some of them, appended at times
    the log dir does not hold, and the end then is unknown (no row, LAG unknown); from then on it is 50."""
    import os

    from pipelines.decoding.log_end_offsets import ends_at

    segment = tmp_path / "orders-0" / f"{50:020d}.log"
    segment.parent.mkdir()
    segment.write_bytes(b"")
    made = ld.AS_OF - 60_000
    os.utime(segment, ns=(made * 1_000_000, made * 1_000_000))
    offsets = _offsets([("g", "orders", 0, 40, made - 120_000)])
    found = data_logs([tmp_path])
    try:
        assert [(r.log_end_offset, r.observed_at_ms) for r in found.rows] == [(50, made)]
        before, since = ends_at(found, made - 1), ends_at(found, made)
        then, _ = lag_table(offsets, log_end_offsets_table(before, "s"), found.logs, made - 1, "s", past=True)
    finally:
        found.close()
    assert before == [] and [(r.log_end_offset, r.observed_at_ms) for r in since] == [(50, made)]
    assert [(r["log_end_offset"], r["lag"], r["lag_seconds"]) for r in then.to_pylist()] == [(None, None, None)]


def test_a_log_without_times_keeps_the_dumps_end_at_an_as_of_after_the_dump(tmp_path):
    """A what-if snapshot as of an hour after the dump saw orders-0, whose records carry no time (a producer other
    than Java's stamped them before 1970, which counts as none: LogSegment, 4.0): the dump had seen its end, 2, by
    then, as for a log whose times are known, yet the partition had no row (LAG unknown). It now keeps the dump's
    end observed when the dump saw it (LAG 1 for a group at 1); its lag in time stays unknown, and before the dump
    saw it the end is still unknown."""
    import os

    from pipelines.decoding.batch_writer import write_record_batch
    from pipelines.decoding.log_end_offsets import ends_at

    segment = tmp_path / "orders-0" / f"{0:020d}.log"
    segment.parent.mkdir()
    segment.write_bytes(write_record_batch([(b"k", b"v", -5_000), (b"k", b"v", -4_000)], 0))
    seen = ld.AS_OF - 60_000
    os.utime(segment, ns=(seen * 1_000_000, seen * 1_000_000))
    offsets = _offsets([("g", "orders", 0, 1, seen - 120_000)])
    later = seen + 3_600_000
    found = data_logs([tmp_path])
    try:
        after, before = ends_at(found, later), ends_at(found, seen - 1)
        lag, _ = lag_table(offsets, log_end_offsets_table(after, "s"), found.logs, later, "s", past=True,
                           seen={("orders", 0): seen})
    finally:
        found.close()
    assert [(r.log_end_offset, r.observed_at_ms) for r in after] == [(2, seen)] and before == []
    assert [(r["log_end_offset"], r["lag"], r["lag_seconds"]) for r in lag.to_pylist()] == [(2, 1, None)]
