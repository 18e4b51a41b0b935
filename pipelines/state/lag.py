"""Consumer lag at a snapshot's as_of, per committed offset: in offsets, as `kafka-consumer-groups` shows LAG, and in
time, exactly, from the data topics' own segments in the input's log dirs (the `consumer_lag` table).

lag_seconds = as_of - the timestamp of the first record the group has not consumed: the one at its committed offset,
or at the log start when the commit is below it (the records between are gone; a consumer resuming there is handed
the log start). Control batches (transaction markers) are never handed to a consumer, so the first record is the
first of another batch; an aborted transaction's record is handed to one of the default `isolation.level`,
read_uncommitted (ConsumerConfig, 4.0), so it counts. "The timestamp" is the largest of the records the log dir
holds up to that record: where a producer's
CreateTime goes backwards, a record is as old as the newest before it, so lag never jumps below a later
one (`local_log.LocalLog.first_unconsumed`). It is 0 when the group is caught up (its commit at or past the log
end, or only markers past it, or its next record written after as_of: a what-if snapshot answers for its own
as_of, against the ends then, `log_end_offsets.ends_at`), and null when the partition's segments are not in the input (a high watermark alone says how many records,
not how old), the batch holding the record or a segment before it cannot be read, no record up to it has a
timestamp (magic 0), or, in a what-if snapshot as of a moment before the dump saw the partition, the commit is below
the log start (at its as_of the records from the commit on may still have been there; the dump holds them no more).

commit_age_seconds = as_of - the commit's own timestamp (null for a commit stamped -1 or below). Per group, its
largest lag_seconds and the partition holding it (the first in topic, partition order on a tie) are on every row of
the group, computed here once for the API, /metrics, the page and SQL alike.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from pipelines.times import MAX_TIME_MS
from schemas.tables import TABLES

if TYPE_CHECKING:
    import numpy as np

__all__ = ["LagFacts", "consumer_lag", "lag_table"]


def consumer_lag(log_end_offset: int | None, committed_offset: int | None) -> int | None:
    """LAG as `ConsumerGroupCommand.getLag` computes it: unknown without an end offset or a committed offset (-1
    is none). Like the tool, a commit past the end offset (an end offset older than the commit) shows negative."""
    if log_end_offset is None or committed_offset is None or committed_offset == -1:
        return None
    return log_end_offset - committed_offset


@dataclass
class LagFacts:
    """What computing the table found, for the run's summary."""

    partitions_read: int = 0  # data-topic partitions whose segments were read
    offsets: int = 0  # committed offsets
    offsets_timed: int = 0  # of those, with a lag_seconds
    records_read: int = 0  # records looked up (distinct partition and offset)
    notes: list = field(default_factory=list)  # schemas.log_notes.LogNote of the data logs


def lag_table(offsets: pa.Table, log_ends: pa.Table, logs: dict, as_of_ms: int,
              snapshot_id: str, past: bool = False, seen: dict | None = None) -> tuple[pa.Table, LagFacts]:
    """The `consumer_lag` rows of a snapshot (Arrow, the contract's columns) and what was found.

    `offsets`: the snapshot's `loaded_offsets` (Arrow); `log_ends`: its `log_end_offsets` (Arrow); `logs`: (topic,
    partition) -> `local_log.LocalLog` of the partitions whose segments the input holds; `past`: a what-if snapshot,
    whose as_of may be before the dump, when a commit now below the log start still had its records: the lag in
    time of such a commit is unknown, not the log start's (the records it was behind are gone from the dump), but
    where `seen` ((topic, partition) -> when the dump saw it, ms: its row's observed_at) says the dump was taken by
    as_of: those records were gone then already, and a consumer there is handed the log start. Each
    partition's log is read
    for its distinct asked offsets in offset order, then let go. Column-wise but for the records asked.
    """
    # not at import: `serving.index` imports `consumer_lag`, and the quick commands run without numpy (`jobs.cli.run`:
    # ~0.3 s with pandas)
    import numpy as np

    n = offsets.num_rows
    joined = _with_bounds(offsets, log_ends, logs, seen or {})

    def ints(col, missing=-1):
        return pc.fill_null(joined.column(col), missing).to_numpy()

    start, end = ints("_start"), ints("_end")
    has_start, has_end = start >= 0, end >= 0
    committed = pc.fill_null(offsets.column("committed_offset"), -1).to_numpy()
    has_commit = committed != -1
    lag = np.where(has_end & has_commit, end - committed, 0)

    # the records asked: the first not consumed of each commit below the log end, per partition, each once
    caught_up = has_end & has_commit & (committed >= end)
    timed = has_commit & ~caught_up & pc.fill_null(joined.column("_read"), False).to_numpy(zero_copy_only=False)
    if past:
        # the start the segments hold: a partition whose end at as_of is not known has no row, and so no `_start`
        held_start, seen_at = ints("_held_start"), ints("_seen", as_of_ms + 1)
        timed &= ~((held_start >= 0) & (committed < held_start) & (seen_at > as_of_ms))
    target = np.where(has_start, np.maximum(committed, start), committed)
    rows_timed = np.flatnonzero(timed)
    wanted = pa.table({"topic": offsets.column("topic").take(rows_timed),
                       "partition": offsets.column("partition").cast(pa.int32()).take(rows_timed),
                       "_target": pa.array(target[rows_timed])})
    answers, records_read = _first_unconsumed(logs, wanted)
    timing = _InTime.of(answers, wanted, rows_timed, target, end, caught_up, as_of_ms)
    facts = LagFacts(partitions_read=len(logs), offsets=n, records_read=records_read,
                     offsets_timed=int((~np.isnan(timing.lag_seconds)).sum()),
                     notes=[note for log in logs.values() for note in log.notes])

    commit_us = pc.fill_null(
        offsets.column("commit_timestamp").cast(pa.timestamp("us", tz="UTC")).cast(pa.int64()), -1).to_numpy()
    commit_age = (as_of_ms * 1000.0 - commit_us.astype(np.float64)) / 1e6
    # a commit stamped -1 or below has no time to be as old as: no broker stamps one (4.0 its own clock,
    # OffsetAndMetadata.fromRequest; 2.8 a v0/v1 client's own, -1 its DEFAULT_TIMESTAMP for the broker's clock,
    # KafkaApis), only a client's bad clock or a corrupt record, whose age would be as_of - 1969, or some 2,000
    # years for one read as year 1 (`decoded.within_time`): unknown, as a record's timestamp below -1 is
    commit_age[commit_us < 0] = np.nan

    group = offsets.column("group_id")
    group_max, is_max = _group_max(group, offsets.column("topic"), offsets.column("partition"), timing.lag_seconds)
    null_if = (lambda values, missing: pa.array(values, mask=missing))
    next_ts = timing.next_ts
    out = pa.table({
        "snapshot_id": pa.repeat(pa.scalar(snapshot_id, pa.string()), n),
        "group_id": group,
        "topic": offsets.column("topic"),
        "partition": offsets.column("partition").cast(pa.int32()),
        "committed_offset": null_if(committed, ~has_commit),
        "log_start_offset": null_if(start, ~has_start),
        "log_end_offset": null_if(end, ~has_end),
        "lag": null_if(lag, ~(has_end & has_commit)),
        "lag_seconds": null_if(timing.lag_seconds, np.isnan(timing.lag_seconds)),
        "commit_age_seconds": null_if(commit_age, np.isnan(commit_age)),
        "next_offset": null_if(timing.next_offset, timing.next_offset < 0),
        # a record's time past year 9999 (a crafted one) as that year's end, as the loaders read it
        "next_timestamp": pa.array(np.minimum(next_ts, MAX_TIME_MS) * 1000, pa.int64(), mask=next_ts < 0).cast(
            pa.timestamp("us", tz="UTC")),
        "timestamp_type": pa.array(timing.ts_type, pa.string()),
        "group_max_lag_seconds": null_if(group_max, np.isnan(group_max)),
        "is_group_max": pa.array(is_max, pa.bool_()),
    })
    return out.cast(TABLES["consumer_lag"]), facts


def _with_bounds(offsets: pa.Table, log_ends: pa.Table, logs: dict, seen: dict) -> pa.Table:
    """Per committed offset, in its order: its partition's log start (`_start`) and end (`_end`) where its row
    gives them, and whether the input holds the partition's segments (`_read`), where they start (`_held_start`)
    and when the dump saw them (`_seen`, ms; null: not known)."""
    import numpy as np  # see lag_table

    rows = pa.table({"topic": offsets.column("topic"), "partition": offsets.column("partition").cast(pa.int32()),
                     "_row": pa.array(np.arange(offsets.num_rows, dtype=np.int64))})
    starts = (log_ends.column("log_start_offset") if "log_start_offset" in log_ends.column_names
              else pa.nulls(log_ends.num_rows, pa.int64()))
    bounds = pa.table({"topic": log_ends.column("topic"), "partition": log_ends.column("partition").cast(pa.int32()),
                       "_start": starts.cast(pa.int64()), "_end": log_ends.column("log_end_offset").cast(pa.int64())})
    read = pa.table({"topic": pa.array([k[0] for k in logs], pa.string()),
                     "partition": pa.array([k[1] for k in logs], pa.int32()),
                     "_read": pa.array([True] * len(logs), pa.bool_()),
                     "_held_start": pa.array([log.log_start_offset for log in logs.values()], pa.int64()),
                     "_seen": pa.array([seen.get(key) for key in logs], pa.int64())})
    return (rows.join(bounds, ["topic", "partition"], join_type="left outer")
            .join(read, ["topic", "partition"], join_type="left outer").sort_by("_row"))


def _first_unconsumed(logs: dict, wanted: pa.Table) -> tuple[dict, int]:
    """(topic, partition, target) -> (next offset, timestamp type, largest timestamp, the log's end) of the first
    record a consumer at target is handed (None: its batch cannot be read), each asked once; and how many were asked.
    Each partition's log is read in offset order and closed before the next one's."""
    distinct = wanted.group_by(["topic", "partition", "_target"]).aggregate([]).sort_by(
        [("topic", "ascending"), ("partition", "ascending"), ("_target", "ascending")])
    answers = {}
    current = None
    for t, p, o in zip(*(distinct.column(c).to_pylist() for c in ("topic", "partition", "_target"))):
        if (t, p) != current:
            if current is not None:
                logs[current].close()
            current = (t, p)
        pos = logs[current].first_unconsumed(o)
        answers[(t, p, o)] = None if pos is None else (pos.offset, pos.timestamp_type, pos.max_timestamp_ms,
                                                       logs[current].log_end_offset)
    if current is not None:
        logs[current].close()
    return answers, distinct.num_rows


@dataclass(frozen=True)
class _InTime:
    """Per committed offset, its lag in time (NaN: unknown) and the record it is measured from: its offset (-1:
    none), largest timestamp (-1: none) and timestamp type."""

    lag_seconds: np.ndarray
    next_offset: np.ndarray
    next_ts: np.ndarray
    ts_type: list[str | None]

    @staticmethod
    def of(answers: dict, wanted: pa.Table, rows_timed: np.ndarray, target: np.ndarray, end: np.ndarray,
           caught_up: np.ndarray, as_of_ms: int) -> "_InTime":
        import numpy as np  # see lag_table

        n = len(caught_up)
        lag_seconds = np.full(n, np.nan)
        lag_seconds[caught_up] = 0.0
        next_offset = np.full(n, -1, np.int64)
        next_ts = np.full(n, -1, np.int64)
        ts_type: list[str | None] = [None] * n
        topics, parts = wanted.column("topic").to_pylist(), wanted.column("partition").to_pylist()
        for i, t, p, o in zip(rows_timed.tolist(), topics, parts, target[rows_timed].tolist()):
            got = answers[(t, p, o)]
            if got is None:
                continue  # its batch could not be read: unknown
            offset, kind, largest, held_to = got
            if offset is None:
                if held_to >= end[i]:  # nothing a consumer is handed before the log end
                    lag_seconds[i] = 0.0
                continue  # else the records past the segments' end (a high watermark beyond them) are not in the input
            next_offset[i], ts_type[i] = offset, kind
            if largest is not None:
                next_ts[i] = largest
                lag_seconds[i] = max(0.0, (as_of_ms - largest) / 1000.0)
        return _InTime(lag_seconds, next_offset, next_ts, ts_type)


def _group_max(group, topic, part, lag_seconds):
    """Per row, its group's largest lag_seconds (NaN: none known), and whether the row is the group's worst
    partition (the first in topic, partition order among those holding the largest)."""
    import numpy as np  # see lag_table

    n = len(lag_seconds)
    if n == 0:
        return np.empty(0), np.empty(0, bool)
    order = pc.sort_indices(pa.table({"g": group, "t": topic, "p": part}),
                            sort_keys=[("g", "ascending"), ("t", "ascending"), ("p", "ascending")]).to_numpy()
    g = pc.take(group, pa.array(order)).combine_chunks()
    new_group = pc.fill_null(pc.not_equal(g.slice(1), g.slice(0, n - 1)), True).to_numpy(zero_copy_only=False)
    starts = np.flatnonzero(np.r_[True, new_group])
    run_of = np.repeat(np.arange(len(starts)), np.diff(np.r_[starts, n]))
    filled = np.where(np.isnan(lag_seconds[order]), -np.inf, lag_seconds[order])
    row_peak = np.maximum.reduceat(filled, starts)[run_of]
    hits = np.flatnonzero((filled == row_peak) & np.isfinite(row_peak))
    _, first = np.unique(run_of[hits], return_index=True)  # hits are in sorted order: each group's first
    first_hit = np.zeros(n, bool)
    first_hit[hits[first]] = True
    out_max, out_is = np.empty(n), np.zeros(n, bool)
    out_max[order] = np.where(np.isfinite(row_peak), row_peak, np.nan)
    out_is[order] = first_hit
    return out_max, out_is
