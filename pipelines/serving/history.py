"""The histories as every view reads them: what the engine recorded each offset commit did (`offset_commits`'
`applied_offset` and `applied_timestamp`: where and when it took effect, null when it never did;
`pipelines/coordinator/offset_metadata.py` decides it, no view does), and the one refusal of a history written
before it recorded that; the group events (`group_history`), each with the event the engine named.
"""
from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.compute as pc

from pipelines.io.snapshots import DamagedTable, Filters, Snapshot, SnapshotReader
from pipelines.times import datetime_to_ms, ms_to_iso


class HistoryUnavailable(ValueError):
    """The snapshot's history lacks what a view needs (written by an older version, or no history): one line that
    names the command that fills it."""


class OutsideHistory(ValueError):
    """A time a view was asked about lies outside the snapshot's history, so an answer would be about what the
    snapshot cannot know. `option` names what was given (`as_of`, `from`, ...), for each edge to say in its own
    words."""

    def __init__(self, option: str, message: str):
        super().__init__(message)
        self.option = option


class AfterSnapshot(OutsideHistory):
    """A time past the snapshot's as-of: its history ends there (no change since, offsets as they were at its
    end)."""


class BeforeHistory(OutsideHistory):
    """A time before the first record of the snapshot's history, asked for an answer that came out empty: the log
    says nothing of that time (a group's offsets then, what changed then), which an empty answer would read as
    "no offsets", "nothing changed"."""


def check_within(snap: Snapshot, option: str, ms: int, consequence: str) -> None:
    """AfterSnapshot when `ms` (epoch ms) is after `snap`'s history (`Snapshot.history_end`: its as-of, or its log's
    end past a what-if --as-of; a snapshot without one: no check)."""
    if snap.history_end is None:
        return
    end = datetime_to_ms(snap.history_end)
    if ms > end:
        def iso(at: int) -> str:
            return ms_to_iso(at).replace("+00:00", "Z")

        what = "as-of" if snap.as_of is not None and end == datetime_to_ms(snap.as_of) else "newest record"
        raise AfterSnapshot(option, f"{iso(ms)} is after snapshot {snap.snapshot_id}'s {what} {iso(end)}: its "
                                    f"history ends there, {consequence}; rebuild from a newer log (rebuild "
                                    f"--incremental)")


def history_start_ms(reader: SnapshotReader, snap: Snapshot) -> int | None:
    """Epoch ms of the first record of `snap`'s history (its offset commits and group records); None when it holds
    none, or one without a time (a magic 0 record, whose time may be any), as nothing then is known to lie before
    it. Reads the time columns whole: for the error path of an empty answer only."""
    firsts = []
    commits = snapshot_commits(reader, snap, columns=["record_timestamp"])
    events = reader.snapshot_table("group_history", snap, columns=["record_timestamp"])
    for t in (commits, events):
        if t is None or not t.num_rows:
            continue
        times = t.column("record_timestamp")
        if times.null_count:
            return None
        first = pc.min(times).value  # in the column's unit: no datetime (pyarrow's would import pandas)
        per_ms = {"s": 0.001, "ms": 1, "us": 1000, "ns": 1_000_000}[times.type.unit]
        firsts.append(first * 1000 if per_ms < 1 else first // per_ms)
    return min(firsts) if firsts else None


def check_not_before(reader: SnapshotReader, snap: Snapshot, option: str, ms: int, consequence: str) -> None:
    """BeforeHistory when `ms` (epoch ms) is before the first record of `snap`'s history (`history_start_ms`)."""
    start = history_start_ms(reader, snap)
    if start is not None and ms < start:
        def iso(at: int) -> str:
            return ms_to_iso(at).replace("+00:00", "Z")

        raise BeforeHistory(option, f"{iso(ms)} is before the first record of snapshot {snap.snapshot_id}'s history, "
                                    f"at {iso(start)}: the log says nothing of that time, {consequence}")


def unrecorded(commits: pa.Table, snapshot_id: str) -> str | None:
    """Why `commits` (`offset_commits` rows with `applied_offset`, `txn_outcome`, `is_tombstone` where it has them)
    cannot say what took effect, None when it can: every plain commit took effect, so one without an
    `applied_offset` was written before the column existed."""
    if not commits.num_rows:
        return None
    if "applied_offset" in commits.column_names:
        outcome = commits.column("txn_outcome") if "txn_outcome" in commits.column_names else None
        unknown = pc.is_null(commits.column("applied_offset"))
        if outcome is not None:
            unknown = pc.and_(unknown, pc.is_null(outcome))
        unknown = pc.and_(unknown, pc.invert(pc.fill_null(commits.column("is_tombstone"), False)))
        if not pc.any(unknown).as_py():
            return None
    return (f"snapshot {snapshot_id!r}'s offset_commits history was written before it recorded where each commit "
            "took effect: rebuild it with this version (offsetlake rebuild) to fill it")


def snapshot_commits(reader: SnapshotReader, snap: Snapshot, *, columns: list[str], filters: Filters | None = None,
                     dictionary: tuple[str, ...] = ()) -> pa.Table | None:
    """The `offset_commits` history as `snap`'s run left it: at the version its run pinned (`runs.table_versions`;
    the latest for a run written before versions were pinned). The table is every run's, so its latest version
    holds the records later runs (or a rerun) added, which the snapshot never read: every view of one snapshot
    reads this one version, and they tell one story."""
    return reader.history_table("offset_commits", filters=filters, columns=columns, dictionary=dictionary,
                                version=snap.version_of("offset_commits"))


def applied_history(commits: pa.Table | None, snapshot_id: str) -> pa.Table | None:
    """`commits`, checked to say what took effect (`HistoryUnavailable` otherwise)."""
    why = None if commits is None else unrecorded(commits, snapshot_id)
    if why is not None:
        raise HistoryUnavailable(why)
    return commits


def applied_time(commits: pa.Table) -> pa.ChunkedArray:
    """When each of `commits` took effect, where it did and its time is known: `applied_timestamp` (its record's
    time, or its marker's); for a record with no time (magic 0), the commit time its value holds, the broker's own
    clock when it wrote it (KafkaApis.handleOffsetCommitRequest, 0.9.0: "commit timestamp is always set to now"), when
    at or after 1970; null otherwise (a tombstone carries no value; -1 or below is a client's clock a later broker
    stored as sent, or a corrupt record, as `consumer_lag.commit_age_seconds` reads it). It places a change in a
    window; it never decides whether the record took effect by a moment (`took_effect_by` does)."""
    commit_time = commits.column("commit_timestamp")
    known = pc.greater_equal(commit_time.cast(pa.int64()), 0)
    return pc.coalesce(commits.column("applied_timestamp"),
                       pc.if_else(known, commit_time, pa.scalar(None, commit_time.type)))


def took_effect_by(commits: pa.Table, upto) -> pa.ChunkedArray:
    """Which of `commits` (read through `applied_history`/`outcome_as_of`, with `record_timestamp`,
    `batch_timestamp` and, where the history has it, `txn_marker_timestamp`) had taken effect by `upto` (a
    datetime), as `rebuild --until-time upto` replays them: where the engine recorded one, its record held at that
    cut (`held_at`) and, for a transactional one, its marker too. Every view that stops at a moment (`changes`, the
    group status' recent commits) asks this, so none decides it again; the commit time inside a value
    (`applied_time`'s fallback) is the client's or the broker's word, never the log's, and no cut reads it."""
    return pc.and_(commits.column("applied_offset").is_valid(), kept_at(seen_time(commits), upto))


def seen_time(commits: pa.Table) -> pa.ChunkedArray:
    """When a reader of the coordinator first saw what each of `commits` did: its batch's time (`batch_time`) or,
    for a transactional record, its marker's if later (a marker is a batch of its own). Null for a record with no
    time at all (magic 0: every cut holds it)."""
    seen = batch_time(commits)
    if "txn_marker_timestamp" not in commits.column_names:
        return seen
    marker = commits.column("txn_marker_timestamp").cast(seen.type)
    # compared as integers: Arrow's element-wise max has no timestamp kernel
    return pc.max_element_wise(seen.cast(pa.int64()), marker.cast(pa.int64()), skip_nulls=True).cast(seen.type)


def batch_time(rows: pa.Table) -> pa.ChunkedArray:
    """Each history row's `batch_timestamp`: when a reader of the coordinator first saw its record, as the engine
    recorded it (`coordinator.decoded.with_batch_times`: a 4.0 coordinator's batch gathers the writes of its linger
    and a read sees it whole or not at all). A history written before the column existed says only the record's own
    time (`record_timestamp`), and is read by it."""
    own = rows.column("record_timestamp")
    if "batch_timestamp" not in rows.column_names:
        return own
    return pc.coalesce(rows.column("batch_timestamp").cast(own.type), own)


def held_at(rows: pa.Table, upto) -> pa.ChunkedArray:
    """Which of `rows` (history rows with `record_timestamp` and, where the history has it, `batch_timestamp`)
    `rebuild --until-time upto` (a datetime) reads: those whose batch a reader saw by then (`batch_time`), and those
    with no time (`kept_at`)."""
    return kept_at(batch_time(rows), upto)


def kept_at(times: pa.ChunkedArray, upto) -> pa.ChunkedArray:
    """`coordinator.decoded.kept_at`: the engine's cut, one rule."""
    # imported here: the coordinator's modules are ~0.3 s of import (python -X importtime) no other view needs
    from pipelines.coordinator.decoded import kept_at as engine_kept_at

    return engine_kept_at(times, upto)


def outcome_as_of(commits: pa.Table, as_of) -> pa.Table:
    """`commits` as the snapshot as of `as_of` knew them: the history is one table for every snapshot, and a later
    run records the marker that ended a transaction an earlier snapshot holds open (its `pending_offsets`), so a
    record whose marker came after `as_of` is still `pending` there and has not taken effect (`changes` likewise
    counts what took effect up to as_of only)."""
    names = commits.column_names
    if "txn_marker_timestamp" not in names or "txn_outcome" not in names:
        return commits
    marker = commits.column("txn_marker_timestamp")
    later = pc.fill_null(pc.greater(marker, pa.scalar(as_of, marker.type)), False)
    if not pc.any(later).as_py():
        return commits
    outcome = commits.column("txn_outcome")
    if pa.types.is_dictionary(outcome.type):
        outcome = outcome.cast(pa.string())
    commits = commits.set_column(names.index("txn_outcome"), "txn_outcome",
                                 pc.if_else(later, pa.scalar("pending", pa.string()), outcome))
    for name in ("applied_offset", "applied_timestamp"):
        if name in names:
            c = commits.column(name)
            commits = commits.set_column(names.index(name), name, pc.if_else(later, pa.scalar(None, c.type), c))
    return commits


def group_events(reader: SnapshotReader, snap: "Snapshot | str", *, columns: list[str],
                 filters: Filters | None = None) -> pa.Table | None:
    """The snapshot's `group_history` rows (None: a snapshot written before the table existed). Every version wrote
    each row's `event` (the engine always names one): a row without it is a table whose files lost the column, a
    `DamagedTable`, never an event shown as None or left out of the views."""
    t = reader.snapshot_table("group_history", snap, filters=filters, columns=columns)
    if t is None or "event" not in columns or not t.num_rows:
        return t
    lost = t.num_rows if "event" not in t.column_names else t.column("event").null_count
    if lost:
        sid = snap if isinstance(snap, str) else snap.snapshot_id
        raise DamagedTable(f"cannot read the warehouse's group_history table: {lost:,} row(s) of snapshot {sid!r} "
                           "have no event (its files lack the column every version writes)", "group_history")
    return t


def observable(history: pa.Table) -> pa.Array:
    """Which of `history`'s events (`group_history` rows sorted by group, offsets partition and record offset) left
    a state of their group that anyone could see: the last of their group in their batch. The new coordinator writes
    a result (one write operation, or several lingering together) as one batch (`CoordinatorRuntime.append`,
    coordinator-common 4.0; an atomic one, such as a classic <-> consumer conversion, is never split), takes a
    snapshot of its state only at a batch's end (`SnapshottableCoordinator.updateLastWrittenOffset`) and answers
    every read at the last committed offset (`CoordinatorReadEvent.run`), a batch's end: a state between two records
    of a batch is never seen. An event without `batch_last_offset` (a history written before it existed) is
    observable."""
    n = history.num_rows
    if n < 2 or "batch_last_offset" not in history.column_names:
        return pa.repeat(pa.scalar(True), n)
    column = history.column
    same_group = pc.and_(pc.equal(column("group_id").slice(1), column("group_id").slice(0, n - 1)),
                         pc.equal(column("offsets_partition").slice(1), column("offsets_partition").slice(0, n - 1)))
    # the group's next event is a record of the same batch: at or below the batch's last offset
    in_batch = pc.less_equal(column("record_offset").slice(1), column("batch_last_offset").slice(0, n - 1))
    hidden = pc.fill_null(pc.and_(same_group, in_batch), False).combine_chunks()
    return pa.concat_arrays([pc.invert(hidden), pa.array([True])])


def observed_events(events: pa.Table) -> pa.Table:
    """`events` (`group_history` rows with `group_id`, `offsets_partition`, `record_offset` and, where the history
    has it, `batch_last_offset`) in log order per group, each with `observable` (`observable`: whether a reader of
    the coordinator could have seen the group as it left it). Every view that lists a group's events marks them by
    this, as `changes` judges them by it, so none tells another story of a batch."""
    t = events.sort_by([("group_id", "ascending"), ("offsets_partition", "ascending"), ("record_offset", "ascending")])
    return t.append_column("observable", observable(t))


def log_gaps(run: dict | None) -> dict[int, dict]:
    """Offsets partition -> where the snapshot's input log lacked offsets (its run's summary: `first_offset`,
    `compacted_below`: the log is whole from that offset on, `compacted_until`: the newest record time up to it,
    epoch ms). A log the cleaner compacted has lost the commits it overwrote: no history built from it knows them."""
    try:
        summary = json.loads((run or {}).get("summary") or "{}")
    except (TypeError, ValueError):
        return {}
    gaps = summary.get("log_gaps") if isinstance(summary, dict) else None
    out = {}
    for p, g in (gaps or {}).items():
        if isinstance(g, dict) and g.get("compacted_below") is not None:
            out[int(p)] = g
    return out


def compaction_note(partition: int, gap: dict) -> str:
    """One line: where a partition's log stops missing commits."""
    return (f"offsets partition {partition} was compacted before offset {gap['compacted_below']}: intermediate "
            "commits are not in the log")
