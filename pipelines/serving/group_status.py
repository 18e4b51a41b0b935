"""Each consumer group's status from its offset-commit history, judged the way Burrow's evaluator judges a window.

Burrow (linkedin/Burrow, `core/internal/evaluator/caching.go`, `calculatePartitionStatus`) keeps, per group and
partition, a ring of the last `intervals` commits (commits less than `min-distance` apart merged into one slot),
each with the lag the broker's end offset gave at that commit, and judges it against the partition's current lag:

* current lag <= `allowed-lag`: OK, whatever the history (nothing is behind);
* STOP: the time from the window's last commit to now is longer than the window itself (first to last commit);
* REWIND: a commit below the one before it, and no later commit in the window back at that earlier offset;
* only while the lag was never zero in the window: STALL (every commit in the window at the same offset), else
  WARN (the lags in the window never go down);
* otherwise OK. A group is its worst partition, in Burrow's order OK < WARN < STOP < STALL < REWIND.

Offline, from one snapshot (what the evaluation can and cannot know):
* the commits are the `offset_commits` history's records that took effect by the snapshot's log end as `rebuild
  --until-time` holds them (`history.took_effect_by`: a record with no time, magic 0, at every cut), in the order
  and at the time they did (`applied_offset`, `applied_timestamp`: the engine's record; an aborted, overtaken or
  still-pending transactional commit never did, a committed one did at its marker), since the partition's offset
  was last deleted (a commit after a deletion starts anew: it rewinds nothing; a deletion counts at its position,
  with a time or without), less those whose time is unknown (`history.applied_time`: no record time, and no commit
  timestamp at or after 1970: Burrow drops a commit that old): such a commit has a position, not a time, and takes
  no slot, so it neither stretches the window nor moves a slot's offset; "now" is the snapshot's
  as_of, the newest moment the log speaks for (a wall clock would call every consumer stopped as the snapshot
  ages); a history written before the engine recorded that is judged on lag alone (`GroupStatuses.unavailable`
  says why);
* the current lag is the snapshot's log end offset minus its committed offset, known only where `log_end_offsets`
  has the partition; Burrow's "recent zero lag" look at its last few broker offsets has one end offset to look at
  here, which the lag gate already covers;
* the lag AT a past commit is known only where an end offset was observed while that commit was the latest: each
  `log_end_offsets` observation (this snapshot's and the earlier scheduled snapshots', at `observed_at`) gives the
  lag of the last commit at or before it. Other commits carry no lag (Burrow's nil lag: skipped by its rules);
* the lag in time (`consumer_lag.lag_seconds`) decides Burrow's first rule where it knows more than the offsets:
  a partition whose lag in time is 0 is OK whatever its offset lag, as nothing a consumer is handed lies past its
  commit (only transaction markers, which no consumer receives and whose offsets `kafka-consumer-groups` counts as
  lag forever, or nothing written by the as-of). The other rules are Burrow's, on offsets and commit times;
* so: STOP and STALL need the current lag (a partition without a known end offset can be neither), REWIND needs
  offsets only (an unrecovered rewind is behind an offset the log has, so its lag is > 0 whatever the end offset),
  WARN needs at least two known lags in the window (Burrow, with fewer, calls any lagging consumer WARN; offline
  that would be every lagging consumer whose window spans no earlier dump).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone

from pipelines.io.snapshots import Snapshot, SnapshotReader, column_values
from pipelines.serving.history import (HistoryUnavailable, applied_history, applied_time, snapshot_commits,
                                       took_effect_by)
from pipelines.serving.index import SnapshotIndex, consumer_lag
from pipelines.serving.overview import epoch_seconds

__all__ = ["INTERVALS", "MIN_DISTANCE_SECONDS", "STATUSES", "Commit", "GroupStatus", "GroupStatuses", "PartitionStatus",
           "evaluate_groups", "group_status", "partition_status", "ranked", "status_counts", "summary", "window"]

# Burrow's order of severity (protocol.StatusConstant): a group takes its worst partition's.
STATUSES = ("OK", "WARN", "STOP", "STALL", "REWIND")
SEVERITY = {s: i for i, s in enumerate(STATUSES)}
# Burrow's defaults: storage `intervals` (commits per window), `min-distance` (seconds), evaluator `allowed-lag`.
INTERVALS = 10
MIN_DISTANCE_SECONDS = 1.0
ALLOWED_LAG = 0
# Raw commits read per partition to fill the window: commits merged by min-distance need more than `intervals`.
_READ_PER_PARTITION = 8 * INTERVALS


@dataclass
class Commit:
    """One slot of the window: the committed offset, when (epoch seconds), the lag then (None: unknown)."""

    offset: int
    timestamp: float
    lag: int | None = None


@dataclass
class PartitionStatus:
    topic: str
    partition: int
    status: str
    lag: int | None  # current lag, clipped at 0 as Burrow does; None: the end offset is unknown
    window: list[Commit] = field(default_factory=list)
    lag_seconds: float | None = None  # the lag in time at as-of (`consumer_lag`); None: unknown

    def as_json(self) -> dict:
        return {"topic": self.topic, "partition": self.partition, "status": self.status, "lag": self.lag,
                "lag_seconds": self.lag_seconds,
                "window": [{"offset": c.offset, "timestamp": _iso(c.timestamp), "lag": c.lag} for c in self.window]}


@dataclass
class GroupStatus:
    group_id: str
    status: str
    partitions: list[PartitionStatus]

    @property
    def worst(self) -> PartitionStatus | None:
        """The partition that set the group's status: of those with the group's status, the one with the largest
        known lag (then the first in topic, partition order)."""
        mine = [p for p in self.partitions if p.status == self.status]
        return max(mine, key=lambda p: -1 if p.lag is None else p.lag, default=None)

    @property
    def lag_known_partitions(self) -> int:
        return sum(1 for p in self.partitions if p.lag is not None)

    @property
    def total_lag(self) -> int | None:
        """Burrow's `totallag` over the partitions whose end offset is known; None when none is."""
        known = [p.lag for p in self.partitions if p.lag is not None]
        return sum(known) if known else None

    @property
    def max_lag(self) -> PartitionStatus | None:
        """Burrow's `maxlag`: the partition with the largest known current lag (first in topic, partition order)."""
        best = None
        for p in self.partitions:
            if p.lag is not None and (best is None or p.lag > best.lag):
                best = p
        return best

    def as_json(self, partitions: bool = True) -> dict:
        out = {"group_id": self.group_id, "status": self.status, "total_lag": self.total_lag,
               "partitions": len(self.partitions), "lag_known_partitions": self.lag_known_partitions,
               "max_lag": _brief(self.max_lag), "worst_partition": _brief(self.worst)}
        if partitions:
            out["partition_status"] = [p.as_json() for p in self.partitions]
        return out


def _brief(p: PartitionStatus | None) -> dict | None:
    return None if p is None else {"topic": p.topic, "partition": p.partition, "lag": p.lag, "status": p.status}


class GroupStatuses(dict):
    """Group id -> `GroupStatus`; `unavailable`: why the commit windows could not be read (None: they were)."""

    unavailable: str | None = None


def window(commits: list[tuple[int, float]], intervals: int = INTERVALS,
           min_distance: float = MIN_DISTANCE_SECONDS) -> list[Commit]:
    """The last `intervals` slots of `commits` ((offset, epoch seconds), log order) as Burrow's storage keeps them:
    a commit less than `min_distance` after the slot before replaces that slot's offset and keeps its timestamp
    (`mergeFrequentCommitIntoPrevious`)."""
    offsets: list[int] = []
    times: list[float] = []
    for offset, ts in commits:
        if times and ts - times[-1] < min_distance:
            offsets[-1] = offset
        else:
            offsets.append(offset)
            times.append(ts)
    return [Commit(o, t) for o, t in zip(offsets[-intervals:], times[-intervals:])]


def partition_status(offsets: list[Commit], current_lag: int | None, now: float,
                     allowed_lag: int = ALLOWED_LAG, lag_seconds: float | None = None) -> str:
    """Burrow's `calculatePartitionStatus` over one window (oldest first), with the offline limits in the module
    docstring: `current_lag` None (no end offset) decides REWIND only; a lag in time of 0 is no lag."""
    if not offsets:
        return "OK"
    if current_lag is None:
        rewind = _rewind_index(offsets)
        return "REWIND" if rewind > 0 and not _rewind_recovered(offsets, rewind) else "OK"
    if current_lag <= allowed_lag or lag_seconds == 0:
        return "OK"
    # Rule 3 first: a stopped consumer is a problem even with zero lag somewhere in an old window
    if now - offsets[-1].timestamp > offsets[-1].timestamp - offsets[0].timestamp:
        return "STOP"
    rewind = _rewind_index(offsets)
    if rewind > 0 and not _rewind_recovered(offsets, rewind):
        return "REWIND"
    if all(c.lag is None or c.lag > allowed_lag for c in offsets):  # rule 1: never caught up in the window
        if all(c.offset == offsets[0].offset for c in offsets):  # rule 4
            return "STALL"
        known = [c.lag for c in offsets if c.lag is not None]
        if len(known) >= 2 and all(b >= a for a, b in zip(known, known[1:])):  # rule 5
            return "WARN"
    return "OK"


def _rewind_index(offsets: list[Commit]) -> int:
    """Rule 2: the first commit below the one before it, -1 when none."""
    for i in range(1, len(offsets)):
        if offsets[i].offset < offsets[i - 1].offset:
            return i
    return -1


def _rewind_recovered(offsets: list[Commit], index: int) -> bool:
    """Rule 2, part 2: a later commit is back at (or past) the offset before the rewind."""
    before = offsets[index - 1].offset
    return any(c.offset >= before for c in offsets[index:])


def group_status(group_id: str, partitions: list[PartitionStatus]) -> GroupStatus:
    worst = max((p.status for p in partitions), key=SEVERITY.__getitem__, default="OK")
    return GroupStatus(group_id, worst, partitions)


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _recent_commits(reader: SnapshotReader, snap: Snapshot) -> dict[tuple, list[tuple[int, float]]]:
    """(group, topic, partition) -> the last commits that took effect up to the snapshot's as_of since its offset
    was last deleted, (offset, epoch seconds), in the order they took effect. `HistoryUnavailable` for a history
    written before the engine recorded that."""
    # imported here, not at module level: duckdb ~0.3 s of import (python -X importtime)
    import duckdb


    cols = ["offsets_partition", "group_id", "topic", "partition", "committed_offset", "commit_timestamp",
            "is_tombstone", "txn_outcome", "applied_offset", "applied_timestamp", "record_timestamp",
            "txn_marker_timestamp", "batch_timestamp"]
    t = applied_history(snapshot_commits(reader, snap, columns=cols), snap.snapshot_id)
    if t is None or t.num_rows == 0:
        return {}
    until = snap.log_until  # the commits the state holds: a what-if --as-of before the log's end is no cut
    if until is not None:
        t = t.filter(took_effect_by(t, until))
    # its time in the window: null where unknown (a client's clock a broker stored as sent, KafkaApis
    # handleOffsetCommitRequest, 2.8: only -1 becomes the broker's own time; a corrupt record; -2**63, stored as year
    # 1), as Burrow's storage drops a commit stamped older than its `expire-group` horizon (storage/inmemory.go
    # addConsumerOffset, "old offset"): placed in 1969 it made its window span decades, which hid a STOP. Such a
    # commit, and a tombstone with no time (magic 0), still orders and deletes at its position
    t = t.append_column("window_time", applied_time(t))
    con = duckdb.connect(":memory:")
    try:
        con.register("commits", t)
        # in the order the coordinator applied them: a group's commits live in one offsets partition, so the
        # positions they took effect at order them (timestamps may tie or go backwards). One row per partition,
        # its commits as two lists: built by DuckDB, not appended to one by one in Python
        got = con.execute(f"""
            SELECT group_id, topic, "partition",
                   list(committed_offset ORDER BY offsets_partition, applied_offset) AS offsets,
                   list(ts ORDER BY offsets_partition, applied_offset) AS times
            FROM (
                SELECT * FROM (
                    SELECT group_id, topic, "partition", committed_offset, offsets_partition, applied_offset,
                           is_tombstone, window_time, epoch_ms(window_time) / 1000.0 AS ts,
                           max(CASE WHEN coalesce(is_tombstone, false) THEN applied_offset END)
                               OVER (PARTITION BY group_id, topic, "partition", offsets_partition) AS deleted_at
                    FROM commits
                    WHERE applied_offset IS NOT NULL
                )
                WHERE NOT coalesce(is_tombstone, false) AND committed_offset IS NOT NULL
                  AND applied_offset > coalesce(deleted_at, -1) AND window_time IS NOT NULL
                QUALIFY row_number() OVER (PARTITION BY group_id, topic, "partition"
                                           ORDER BY offsets_partition DESC, applied_offset DESC) <= {_READ_PER_PARTITION}
            )
            GROUP BY group_id, topic, "partition"
        """).to_arrow_table()
    finally:
        con.close()
    cols = [got.column(i).to_pylist() for i in range(5)]
    return {(g, tp, p): list(zip(o, ts)) for g, tp, p, o, ts in zip(*cols)}


def _observations(reader: SnapshotReader, snaps: list[Snapshot], served: Snapshot,
                  leo: dict[tuple[str, int], int]) -> dict[tuple[str, int], list[tuple[float, int]]]:
    """(topic, partition) -> end offsets observed, (epoch seconds, end offset), oldest first: the served snapshot's
    (at its observed_at, else its as_of) and those of the readable scheduled snapshots finished before it."""
    upto = epoch_seconds(served.finished_at) or 0.0
    earlier = {s.snapshot_id: s for s in snaps if s.is_default_candidate and s.snapshot_id != served.snapshot_id
               and (epoch_seconds(s.finished_at) or 0.0) <= upto}
    out: dict[tuple[str, int], list[tuple[float, int]]] = {}
    if earlier and leo:
        t = reader.history_table("log_end_offsets", columns=["snapshot_id", "topic", "partition", "log_end_offset",
                                                             "observed_at"])
        if t is not None and t.num_rows:
            for sid, tp, p, e, seen in zip(*(column_values(t.column(c)) for c in t.column_names)):
                if sid in earlier and (tp, p) in leo and e is not None and seen is not None:
                    out.setdefault((tp, p), []).append((epoch_seconds(seen), e))
    now_seen = _served_observed_at(reader, served)
    for key, e in leo.items():
        seen = now_seen.get(key) if now_seen.get(key) is not None else epoch_seconds(served.as_of)
        if seen is not None and e is not None:
            out.setdefault(key, []).append((seen, e))
    for v in out.values():
        v.sort()
    return out


def _served_observed_at(reader: SnapshotReader, served: Snapshot) -> dict[tuple[str, int], float | None]:
    t = reader.snapshot_table("log_end_offsets", served, columns=["topic", "partition", "observed_at"])
    if t is None or t.num_rows == 0:
        return {}
    return {(tp, p): epoch_seconds(seen) for tp, p, seen in zip(*(column_values(t.column(c)) for c in t.column_names))}


def _attach_lags(slots: list[Commit], seen: list[tuple[float, int]]) -> None:
    """Each observation gives the lag of the last commit at or before it (the offset committed then); a slot takes
    the first observation after it, the closest to its own time."""
    for at, end in seen:
        last = None
        for i, c in enumerate(slots):
            if c.timestamp <= at:
                last = i
        if last is not None and slots[last].lag is None and (last == len(slots) - 1 or slots[last + 1].timestamp > at):
            slots[last].lag = max(0, end - slots[last].offset)


def evaluate_groups(reader: SnapshotReader, idx: SnapshotIndex, snaps: list[Snapshot]) -> GroupStatuses:
    """Every group with committed offsets in snapshot `idx`: its partitions judged over their commit windows."""
    out = GroupStatuses()
    t = idx.offsets.table
    if t is None or t.num_rows == 0:
        return out
    served = idx.snapshot
    leo = idx.end_offsets
    try:
        history = _recent_commits(reader, served)
    except HistoryUnavailable as e:
        history, out.unavailable = {}, str(e)
    seen = _observations(reader, snaps, served, leo)
    now = epoch_seconds(served.as_of)
    timed = idx.lag_seconds
    per_group: dict[str, list[PartitionStatus]] = {}
    for g, tp, p, c in zip(t.column("group_id").to_pylist(), t.column("topic").to_pylist(),
                           t.column("partition").to_pylist(), t.column("committed_offset").to_pylist()):
        lag = consumer_lag(leo.get((tp, p)), c)
        lag = None if lag is None else max(0, lag)
        slots = window(history.get((g, tp, p), []))
        _attach_lags(slots, seen.get((tp, p), []))
        at = now if now is not None else (slots[-1].timestamp if slots else 0.0)
        secs = timed.get((g, tp, p))
        per_group.setdefault(g, []).append(PartitionStatus(tp, p, partition_status(slots, lag, at, lag_seconds=secs),
                                                           lag, slots, secs))
    out.update((g, group_status(g, parts)) for g, parts in per_group.items())
    return out


def status_counts(statuses: dict[str, GroupStatus]) -> dict[str, int]:
    counts = {s: 0 for s in STATUSES}
    for st in statuses.values():
        counts[st.status] += 1
    return counts


def ranked(statuses: dict[str, GroupStatus]) -> list[GroupStatus]:
    """Worst first: status severity, then total lag, then group id."""
    return sorted(statuses.values(), key=lambda s: (-SEVERITY[s.status], -(s.total_lag or 0), s.group_id))


def summary(statuses: dict[str, GroupStatus], limit: int = 50) -> dict:
    """What the page's overview shows: groups per status and the worst `limit` groups that are not OK (and why the
    commit windows could not be read, if they could not)."""
    bad = [s for s in ranked(statuses) if s.status != "OK"]
    return {"counts": status_counts(statuses), "groups": [s.as_json(partitions=False) for s in bad[:limit]],
            "truncated": len(bad) > limit, "unavailable": getattr(statuses, "unavailable", None)}

