"""`offsetlake changes` and `GET /changes`: what changed between two times, read from one snapshot's history.

An incident responder asks "what changed between 14:00 and 14:10, and who committed it". The answer comes from the
snapshot's own tables, as the engine wrote them; nothing here replays the log again:

* `offset_commits`, each record where and when the engine recorded that it took effect (`applied_offset`,
  `applied_timestamp`: a plain commit at its own position, a transactional one at its COMMIT marker; an aborted,
  overtaken or still-open one, or a tombstone with nothing to delete, never), per (group, topic, partition) in that
  order: a committed offset below the one in place before it is `offset_regressed` (one after a deletion starts
  anew); one above the partition's log end offset the snapshot knows (`log_end_offsets`) is `offset_past_end`; a
  tombstone that deleted is `offset_tombstone` (the log does not say whether DeleteOffsets, a group deletion or the
  broker's own expiry wrote it). Nothing here decides what took effect: a history written before the engine
  recorded it is refused (`HistoryUnavailable`).
* `expired_offsets` / `expired_groups`: what retention expiry removed at the snapshot's `as_of`, when `as_of` lies
  in the window (`offset_expired`, `group_expired`).
* `group_history`: `group_created`, `group_emptied`, `group_deleted`, `group_converted` (the group as the other
  type: Kafka's online classic <-> consumer migration, whose deletion and re-creation are one batch; in a history
  without batch ends, a deletion and a re-creation as the other type at the same record time), and
  `rebalance_storm` (more than `storm_per_minute` new generations / group epochs in one minute). Each is judged
  only where a reader could have seen the group, at the last of its events in a batch (`history.observable`),
  against the group as the batch before it left it: a member's tombstones that empty a group for a moment inside
  the batch that converts it are no `group_emptied`.

An offset change names the member assigned that partition at that moment: `group_history.member_assignments`
folded in log order up to the position it took effect at (a classic generation sets every member, a KIP-848 member
record one).
"""
from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipelines.io.snapshots import SCHEDULED, GroupNotFound, Snapshot, SnapshotReader
from pipelines.serving.cells import cell
from pipelines.serving.codes import string_codes
from pipelines.serving.group_regex import BadGroupRegex, check, matching
from pipelines.serving.history import (applied_history, applied_time, batch_time, check_not_before, check_within,
                                       compaction_note, group_events, held_at, log_gaps, observable, seen_time,
                                       snapshot_commits, took_effect_by)
from pipelines.serving.index import check_groups_known, no_group_matches
from pipelines.times import EPOCH, TimeFormatError, parse_time_ms
from schemas.tables import GROUP_HISTORY_VERSION

#: the changes that damage a group's position: what a restore plan puts back (`damaged_groups`)
DAMAGE = ("offset_regressed", "offset_tombstone", "offset_expired", "group_deleted")

#: more new generations (classic) or group epochs (KIP-848) than this in one minute make a `rebalance_storm`
DEFAULT_STORM_PER_MINUTE = 10

KINDS = ("offset_regressed", "offset_past_end", "offset_tombstone", "offset_expired", "group_created",
         "group_emptied", "group_deleted", "group_converted", "group_expired", "rebalance_storm", "log_compacted")

_COMMIT_COLUMNS = ["offsets_partition", "record_offset", "group_id", "topic", "partition", "committed_offset",
                   "commit_timestamp", "is_tombstone", "producer_id", "txn_outcome", "applied_offset",
                   "applied_timestamp", "record_timestamp", "txn_marker_timestamp", "batch_timestamp"]
_HISTORY_COLUMNS = ["group_id", "offsets_partition", "record_offset", "record_timestamp", "group_type", "event",
                    "generation", "assignment_epoch", "state", "members_joined", "members_left", "member_assignments",
                    "batch_last_offset", "batch_timestamp"]


class BadWindow(ValueError):
    """A time, window or group selection the caller got wrong (CLI exit 2, HTTP 400)."""


def parse_time(text: str, what: str) -> dt.datetime:
    """A TIME as every command takes it (`pipelines.times`: ISO-8601, UTC when no zone, or epoch milliseconds) ->
    an aware UTC datetime."""
    try:
        ms = parse_time_ms(str(text), what=what)
    except TimeFormatError as e:
        raise BadWindow(str(e)) from None
    # integer arithmetic: past year 2106 a float of seconds loses the millisecond (.999 read as .998)
    return EPOCH + dt.timedelta(milliseconds=ms)


@dataclass(frozen=True)
class Selection:
    """The window [start, end] (both included) and the groups asked about (all when neither is given)."""

    start: dt.datetime
    end: dt.datetime
    groups: tuple[str, ...] = ()
    group_regex: str | None = None
    storm_per_minute: int = DEFAULT_STORM_PER_MINUTE

    def __post_init__(self):
        if self.end < self.start:
            raise BadWindow(f"the window ends ({iso_time(self.end)}) before it starts ({iso_time(self.start)})")
        if self.groups and self.group_regex is not None:
            raise BadWindow("select groups by id or by a regex, not both")
        if self.group_regex is not None:
            try:
                check(self.group_regex)
            except BadGroupRegex as e:
                raise BadWindow(f"group regex {self.group_regex!r}: {e}") from None
        if self.storm_per_minute < 1:
            raise BadWindow("the rebalance storm threshold must be at least 1 per minute")

    def filters(self):
        return [("group_id", "in", list(self.groups))] if self.groups else None

    def keep(self, t: pa.Table | None) -> pa.Table | None:
        """`t` narrowed to the selected groups (`pipelines.serving.group_regex`)."""
        if t is None or self.group_regex is None or not t.num_rows:
            return t
        ids = t.column("group_id")  # matched once per distinct id: a history repeats each many times
        matched = matching(pc.unique(ids).to_pylist(), self.group_regex)
        return t.filter(pc.is_in(ids, value_set=pa.array(matched, pa.string())))


def iso_time(t: dt.datetime | None) -> str | None:
    if t is None:
        return None
    return t.astimezone(dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _us(t: dt.datetime) -> int:
    return (t - EPOCH) // dt.timedelta(microseconds=1)


def _iso_us(us: int | None) -> str | None:
    return None if us is None else iso_time(EPOCH + dt.timedelta(microseconds=us))


def _member(m: dict | None) -> dict | None:
    if m is None:
        return None
    return {k: m.get(k) for k in ("member_id", "group_instance_id", "client_id", "client_host")}


class _Assignments:
    """One group's members over its history, folded in log order: who held (topic, partition) at a position.
    The group's events are `events`' rows lo..hi; an event's member assignments are read only for the events a fold
    applies: a classic generation or a deletion sets the members whatever came before it, so a fold starts at the
    last one it passes."""

    def __init__(self, events: "_Events", lo: int, hi: int):
        self.ev = events
        self.i = lo
        self.hi = hi
        self.members: dict[str, dict] = {}
        self.generation: int | None = None

    def _resets(self, k: int) -> bool:
        ev = self.ev
        return ev.removes(k) or (ev.group_type[k] == "classic" and ev.event[k] == "generation")

    def at(self, record_offset: int) -> "_Assignments":
        """Advance to just before the record at `record_offset` (calls come in increasing order)."""
        ev = self.ev
        end = self.i
        while end < self.hi and ev.record_offset[end] < record_offset:
            end += 1
        for k in range(end - 1, self.i - 1, -1):
            if self._resets(k):
                self.i = k
                break
        while self.i < end:
            k = self.i
            self.i += 1
            if ev.removes(k):
                self.members, self.generation = {}, None
                continue
            set_ = ev.assignments(k)
            if ev.group_type[k] == "classic" and ev.event[k] == "generation":
                self.members = {m["member_id"]: m for m in set_ or ()}
            else:
                for m in set_ or ():
                    self.members[m["member_id"]] = m
                for mid in ev.members_left(k) or ():
                    self.members.pop(mid, None)
            self.generation = ev.generation[k]
        return self

    def holder(self, topic: str, partition: int) -> dict | None:
        for m in self.members.values():
            for tp in m.get("assigned_partitions") or ():
                if tp["topic"] == topic and tp["partition"] == partition:
                    return m
        return None


def _history(reader: SnapshotReader, snap: Snapshot, sel: Selection) -> pa.Table | None:
    """The selected groups' `group_history` events up to the window's end, in log order per group."""
    # None for a snapshot written before group_history existed; a damaged one is a DamagedTable, never "no events"
    t = group_events(reader, snap, filters=sel.filters(), columns=_HISTORY_COLUMNS)
    t = sel.keep(t)
    if t is None or not t.num_rows:
        return None
    if "member_assignments" not in t.column_names:  # written before the column existed: nobody is named
        t = t.append_column("member_assignments", pa.nulls(t.num_rows, pa.list_(pa.struct([]))))
    t = t.filter(held_at(t, sel.end))  # as `--until-time` cuts: no time, every window
    return t.sort_by([("group_id", "ascending"), ("offsets_partition", "ascending"), ("record_offset", "ascending")])


class _Events:
    """The selected groups' events (`_history`: by group, then log position) as columns: Python lists of the few
    fields the member folds read, numpy arrays for the group changes. Member assignments and departures are
    converted one event at a time, only for the events a fold applies: they are most of a conversion's cost."""

    def __init__(self, history: pa.Table | None):
        self.n = 0 if history is None else history.num_rows
        self.history = history
        self.by_group: dict[str, tuple[int, int]] = {}
        if not self.n:
            return
        column = history.column
        self.record_offset = column("record_offset").to_pylist()
        self.event = column("event").to_pylist()
        self.group_type = column("group_type").to_pylist()
        self.state = column("state").to_pylist()
        self.generation = column("generation").to_pylist()
        gid = column("group_id")
        firsts = np.flatnonzero(np.concatenate(
            ([True], pc.not_equal(gid.slice(1), gid.slice(0, self.n - 1)).to_numpy(zero_copy_only=False))))
        ends = np.append(firsts[1:], self.n)
        self.first = np.zeros(self.n, dtype=bool)
        self.first[firsts] = True
        for g, lo, hi in zip(gid.take(pa.array(firsts)).to_pylist(), firsts.tolist(), ends.tolist()):
            self.by_group[g] = (lo, hi)
        ts = column("record_timestamp").cast(pa.timestamp("us", tz="UTC")).cast(pa.int64())
        self.timed = ts.is_valid().to_numpy(zero_copy_only=False)
        self.time_us = pc.fill_null(ts, 0).to_numpy(zero_copy_only=False)
        # when a reader first saw each event (`history.batch_time`): it is in the window that holds that moment
        seen = batch_time(history).cast(pa.timestamp("us", tz="UTC")).cast(pa.int64())
        self.seen = seen.is_valid().to_numpy(zero_copy_only=False)
        self.seen_us = pc.fill_null(seen, 0).to_numpy(zero_copy_only=False)

    def before(self, a: np.ndarray) -> np.ndarray:
        """`a`'s value at each event's previous event of its group (False / 0 at a group's first)."""
        b = np.zeros_like(a)
        b[1:] = a[:-1]
        b[self.first] = 0
        return b

    def removes(self, k: int) -> bool:
        """The k-th event deletes the group (its members go with it)."""
        return self.event[k] in ("deleted", "tombstone") and self.state[k] is None

    def assignments(self, k: int) -> list | None:
        return self.history.column("member_assignments")[k].as_py()

    def members_left(self, k: int) -> list | None:
        return self.history.column("members_left")[k].as_py()

    def members_joined(self, k: int) -> list | None:
        return self.history.column("members_joined")[k].as_py()

    def fold(self, group_id: str) -> _Assignments:
        lo, hi = self.by_group.get(group_id, (0, 0))
        return _Assignments(self, lo, hi)


def _end_offsets(leo: pa.Table, topics: pa.Array, width: int) -> np.ndarray:
    """Each partition's end offset (-1: unknown) at its (topic code * `width` + partition), the code `_candidates`
    keys a commit's partition by."""
    end_by_tp = np.full(len(topics) * width, -1, dtype=np.int64)
    if leo.num_rows:
        lt = pc.index_in(leo.column("topic"), value_set=topics).to_numpy(zero_copy_only=False)
        lp = leo.column("partition").to_numpy(zero_copy_only=False)
        known = ~np.isnan(lt.astype(float)) & (lp >= 0) & (lp < width)
        end_by_tp[np.nan_to_num(lt.astype(float)).astype(np.int64)[known] * width + lp.astype(np.int64)[known]] = \
            leo.column("log_end_offset").to_numpy(zero_copy_only=False)[known]
    return end_by_tp


def _candidates(commits: pa.Table, leo: pa.Table, start: dt.datetime, upto: dt.datetime,
                ends_at: dt.datetime | None = None) -> list[dict]:
    """The records that took effect by `upto` (`took_effect_by`: what `rebuild --until-time upto` holds), less
    those a reader saw before `start` (`seen_time`; a magic 0 record, which has none, at its value's commit time,
    `applied_time`, which may be past `upto`; one with no time at all is in every window), that are a change: a
    tombstone
    that deleted, an offset below the one in place before it (the previous record of its key (group, topic,
    partition) to take effect, unless that one deleted it), or one above the partition's known end offset; each with
    the offset before it. Vectorized (a key per row as integers, one sort in the order they took effect): the history
    is log-sized, so each column is read once, rows that never took effect are keyed -1 rather than copied out, and
    only the picked rows become Python values."""
    n = commits.num_rows
    if not n:
        return []
    counted = took_effect_by(commits, upto).to_numpy(zero_copy_only=False)
    ts = applied_time(commits)
    if not counted.any():
        return []

    def column(name: str, fill):
        c = commits.column(name)
        return (pc.fill_null(c, fill) if c.null_count else c).to_numpy(zero_copy_only=False)

    group, _ = string_codes(commits.column("group_id"))
    topic, topics = string_codes(commits.column("topic"))
    part = column("partition", 0)
    width = int(part.max()) + 1
    tp_key = np.multiply(topic, width, dtype=np.int64)
    del topic
    tp_key += part
    del part
    key = np.multiply(group, len(topics) * width, dtype=np.int64)
    key += tp_key
    key[~counted] = -1  # sorts first, compared with nothing
    order = _key_then_log_order(key, group, column("offsets_partition", 0), column("applied_offset", 0))
    del group
    key = key[order]
    valid = key >= 0
    same = np.zeros(n, dtype=bool)
    same[1:] = (key[1:] == key[:-1]) & valid[1:]
    del key
    co = column("committed_offset", -1)[order]
    tomb = column("is_tombstone", False)[order]
    has_prev = same
    has_prev[1:] &= ~tomb[:-1]  # after a deletion the key starts anew
    regressed = np.zeros(n, dtype=bool)
    regressed[1:] = ~tomb[1:] & has_prev[1:] & (co[1:] < co[:-1])
    end = _end_offsets(leo, topics, width)[tp_key[order]]
    del tp_key
    past_end = ~tomb & (end >= 0) & (co > end)
    lo = _us(start)
    timed = ts.is_valid().to_numpy(zero_copy_only=False)[order]
    when = pc.fill_null(ts.cast(pa.int64()), 0).to_numpy(zero_copy_only=False)[order]
    if ends_at is not None:  # a commit made after the ends' moment may be past them by the records written since
        past_end &= ~timed | (when <= _us(ends_at))
    # counted, it is held at the window's end (a record with no time of its own, magic 0, at every end): the start
    # leaves out one a reader saw before it (a record of a batch that ends from it on, earlier itself, is in), one
    # with no time of its own placed before it; one with no time at all (a tombstone) is in every window where it
    # deleted
    seen = seen_time(commits)
    seen_known = seen.is_valid().to_numpy(zero_copy_only=False)[order]
    seen_us = pc.fill_null(seen.cast(pa.int64()), 0).to_numpy(zero_copy_only=False)[order]
    inside = np.where(seen_known, seen_us >= lo, np.where(timed, when >= lo, ~tomb | has_prev))
    pick = np.flatnonzero(valid & inside & (tomb | regressed | past_end))
    pid = column("producer_id", -1)
    at = order[pick]
    prev_at = order[np.maximum(pick - 1, 0)]
    rows = _take_rows(commits, ts, at)
    for r, i, k in zip(rows, pick, prev_at):
        p = bool(has_prev[i])
        r["previous_offset"] = int(co[i - 1]) if p else None
        r["previous_producer_id"] = int(pid[k]) if p else None
        r["log_end_offset"] = int(end[i]) if end[i] >= 0 else None
    rows.sort(key=lambda r: (r["group_id"], r["offsets_partition"], r["applied_offset"]))
    return rows


def _take_rows(commits: pa.Table, ts: pa.ChunkedArray, at: np.ndarray) -> list[dict]:
    """The rows at positions `at` (in that order) as dicts, taken batch by batch: a take on a many-chunk column
    first joins the whole column into one."""
    batches = commits.select(["group_id", "topic", "partition", "offsets_partition", "record_offset",
                              "applied_offset", "committed_offset", "is_tombstone", "producer_id"]
                             ).append_column("ts", ts).to_batches()
    bounds = np.cumsum([0] + [b.num_rows for b in batches])
    which = np.searchsorted(bounds, at, "right") - 1
    rows: list = [None] * len(at)
    for b in np.unique(which).tolist():
        picked = np.flatnonzero(which == b)
        for i, r in zip(picked.tolist(), batches[b].take(pa.array(at[picked] - bounds[b])).to_pylist()):
            rows[i] = r
    return rows


def _key_then_log_order(key: np.ndarray, group: np.ndarray, op: np.ndarray, ro: np.ndarray) -> np.ndarray:
    """The indices that sort rows by key (a code within `group`), then log position (offsets partition, and `ro`:
    the position each took effect at). A history's files each hold one partition's records in the order they were
    settled, so a stable sort by key alone puts nearly every key's rows in order already: only the keys of rows that
    came after a later one of their partition (an appended run) are sorted again by position."""
    order = np.argsort(key, kind="stable")
    late = _late_rows(group, op, ro)
    if late is None:
        return np.lexsort((ro, op, key))
    if not late.any():
        return order
    k = key[order]
    keys = np.unique(key[late])
    lo, hi = np.searchsorted(k, keys, "left"), np.searchsorted(k, keys, "right")
    rows = np.concatenate([np.arange(a, b) for a, b in zip(lo, hi)])
    at = order[rows]
    order[rows] = at[np.lexsort((ro[at], op[at], k[rows]))]
    return order


def _late_rows(group: np.ndarray, op: np.ndarray, ro: np.ndarray) -> np.ndarray | None:
    """Which rows come after a row of their partition with a higher record offset (as a mask), when every group's
    rows lie in one offsets partition (as Kafka places a group); None when some group spans partitions, or the rows
    are too scattered to be worth it."""
    n = len(op)
    late = np.zeros(n, dtype=bool)
    if not n:
        return late
    op_of = np.zeros(int(group.max()) + 1, dtype=op.dtype)
    op_of[group] = op
    if not np.array_equal(op_of[group], op):
        return None
    starts = np.flatnonzero((op[1:] != op[:-1]) | (ro[1:] < ro[:-1])) + 1  # runs in log order, one partition each
    if len(starts) > 100_000:
        return None
    starts = np.concatenate(([0], starts)).tolist()
    ends = starts[1:] + [n]
    highest: dict[int, int] = {}
    for s, e in zip(starts, ends):
        p = int(op[s])
        if p in highest and ro[s] < highest[p]:
            late[s:e] = True
        highest[p] = max(highest.get(p, -1), int(ro[e - 1]))
    return late


def _offset_changes(reader: SnapshotReader, snap: Snapshot, sel: Selection, events: _Events,
                    partitions: set[int]) -> list[dict]:
    """The offset changes of the window; `partitions` receives the offsets partitions of the selected groups'
    commits."""
    commits = snapshot_commits(reader, snap, filters=sel.filters(), columns=_COMMIT_COLUMNS,
                               dictionary=("group_id", "topic", "txn_outcome"))
    commits = applied_history(sel.keep(commits), snap.snapshot_id)
    if commits is None or not commits.num_rows:
        return []
    partitions.update(p for p in pc.unique(commits.column("offsets_partition")).to_pylist() if p is not None)
    leo = reader.snapshot_table("log_end_offsets", snap, columns=["topic", "partition", "log_end_offset"])
    if leo is None:
        leo = pa.table({"topic": pa.array([], pa.string()), "partition": pa.array([], pa.int32()),
                        "log_end_offset": pa.array([], pa.int64())})
    until = snap.log_until  # what the state holds: a what-if --as-of before the log's end is no cut
    # a what-if snapshot's end offsets are the ends at its as_of (`log_end_offsets.ends_at`), its commits the log's
    upto = min(sel.end, until) if until is not None else sel.end
    rows = _candidates(commits, leo, sel.start, upto, snap.as_of if snap.kind != SCHEDULED else None)
    if not rows:
        return []
    out = []
    folds: dict[str, _Assignments] = {}
    for r in rows:
        fold = folds.get(r["group_id"])
        if fold is None:
            fold = folds[r["group_id"]] = events.fold(r["group_id"])
        fold.at(r["applied_offset"])
        base = {"time": iso_time(r["ts"]), "group_id": r["group_id"], "offsets_partition": r["offsets_partition"],
                "record_offset": r["record_offset"], "applied_offset": r["applied_offset"],
                "generation": fold.generation, "topic": r["topic"], "partition": r["partition"],
                "member": _member(fold.holder(r["topic"], r["partition"]))}
        if r["producer_id"] is not None and r["producer_id"] >= 0:
            base["producer_id"] = r["producer_id"]
        if r["is_tombstone"]:
            out.append({"kind": "offset_tombstone", **base, "previous_offset": r["previous_offset"]})
            continue
        if r["previous_offset"] is not None and r["committed_offset"] < r["previous_offset"]:
            regressed = {"kind": "offset_regressed", **base, "committed_offset": r["committed_offset"],
                         "previous_offset": r["previous_offset"],
                         "delta": r["committed_offset"] - r["previous_offset"]}
            if r["previous_producer_id"] is not None and r["previous_producer_id"] >= 0:
                regressed["previous_producer_id"] = r["previous_producer_id"]  # gone back from a transaction's
            out.append(regressed)
        if r["log_end_offset"] is not None and r["committed_offset"] > r["log_end_offset"]:
            out.append({"kind": "offset_past_end", **base, "committed_offset": r["committed_offset"],
                        "log_end_offset": r["log_end_offset"]})
    return out


def _expiry_changes(reader: SnapshotReader, snap: Snapshot, sel: Selection) -> list[dict]:
    """What the engine's retention expiry removed at as_of (`expired_offsets`, `expired_groups`)."""
    as_of = snap.as_of
    if as_of is None or not (sel.start <= as_of <= sel.end):
        return []
    out = []
    expired = sel.keep(reader.snapshot_table("expired_offsets", snap, filters=sel.filters()))
    dead = sel.keep(reader.snapshot_table("expired_groups", snap, filters=sel.filters()))
    dead_rows = dead.to_pylist() if dead is not None else []
    # the generation the expiry judged each group at: the engine's state at as_of, the group that expiry then made
    # Dead too (expired_groups) or the one it left (loaded_groups); the offset changes' fold of the history stops at
    # the window's end, which a what-if --as-of before the log's end may precede
    generation = {r["group_id"]: r.get("generation") for r in dead_rows}
    if expired is not None and expired.num_rows:
        ids = pc.unique(expired.column("group_id")).to_pylist()
        live = reader.snapshot_table("loaded_groups", snap, filters=[("group_id", "in", ids)],
                                     columns=["group_id", "generation"])
        for r in (live.to_pylist() if live is not None else []):
            generation.setdefault(r["group_id"], r["generation"])
    for r in (expired.to_pylist() if expired is not None else []):
        out.append({"kind": "offset_expired", "time": iso_time(as_of), "group_id": r["group_id"],
                    "offsets_partition": r.get("offsets_partition"), "record_offset": r.get("record_offset"),
                    "generation": generation.get(r["group_id"]), "topic": r["topic"], "partition": r["partition"],
                    "committed_offset": r.get("committed_offset"), "expiry_rule": r.get("expiry_rule"),
                    "expiry_base_timestamp": iso_time(r.get("expiry_base_timestamp"))})
    for r in dead_rows:
        out.append({"kind": "group_expired", "time": iso_time(as_of), "group_id": r["group_id"],
                    "offsets_partition": r.get("offsets_partition"), "record_offset": None,
                    "generation": r.get("generation"), "group_type": r.get("group_type"), "reason": r.get("reason")})
    return out


def _group_changes(events: _Events, sel: Selection, steps: "_GroupSteps | None") -> list[dict]:
    """Group lifecycle changes and rebalance storms. A group's state after an event is the event's own (`state`
    null: the group does not exist), so every change compares an event with the one before it in its group:
    columns shifted by one, whatever the window, and Python values only for the changes found."""
    if steps is None:
        return []
    return _lifecycle_changes(events, steps) + _rebalance_storms(events, steps, sel)


@dataclass(frozen=True)
class _GroupSteps:
    """Per event (in group, then log order): whether it is in the window, whether a reader could see the group as it
    left it (`observed`: the last of its group's events in its batch), what the group was after it, and the same of
    the group as last observed before it (`was_*`: False / 0 when it never was; `prev`: that event, -1 for none)."""

    inside: np.ndarray
    observed: np.ndarray
    exists: np.ndarray
    empty: np.ndarray
    deleted: np.ndarray  # it deleted the group
    # a tombstone (one that found nothing) right after the group's removal: before GROUP_HISTORY_VERSION 2 a legacy
    # history's too where an offset commit had made the group again, and it deleted that (`history_warnings`)
    tombstone_again: np.ndarray
    gtype: np.ndarray  # the group type, as codes
    gen_known: np.ndarray
    gen: np.ndarray
    prev: np.ndarray
    was: np.ndarray  # the group existed as last observed before this event
    was_empty: np.ndarray
    was_type: np.ndarray

    @staticmethod
    def of(events: _Events, sel: Selection) -> "_GroupSteps":
        h = events.history
        state = h.column("state")
        exists = state.is_valid().to_numpy(zero_copy_only=False)
        empty = pc.fill_null(pc.equal(state, "Empty"), False).to_numpy(zero_copy_only=False)
        event = h.column("event")
        # a group tombstone deletes the group: one the engine found a group to delete at ("deleted": a group record
        # or an offset commit made it, `GroupStore.maybe_create_simple_group`), or an id whose only group record is
        # its tombstone (a group compacted away): `removed_groups` holds it
        deleted = pc.fill_null(pc.equal(event, "deleted"), False).to_numpy(zero_copy_only=False)
        tombstone = pc.fill_null(pc.equal(event, "tombstone"), False).to_numpy(zero_copy_only=False)
        gtype = pc.dictionary_encode(pc.fill_null(h.column("group_type").combine_chunks(), "")).indices \
            .to_numpy(zero_copy_only=False)
        gen_known = h.column("generation").is_valid().to_numpy(zero_copy_only=False)
        gen = pc.fill_null(h.column("generation"), 0).to_numpy(zero_copy_only=False)
        was_removed = events.before(deleted | tombstone)
        deleted |= tombstone & (events.first | ~was_removed)  # the first tombstone of a group no record held
        observed = observable(h).to_numpy(zero_copy_only=False)
        # the group's last observed event before each one: the running last observed index, cut at the group's start
        n = events.n
        at = np.arange(n)
        last_seen = np.maximum.accumulate(np.where(observed, at, -1))
        prev = np.full(n, -1)
        prev[1:] = last_seen[:-1]
        prev[prev < np.maximum.accumulate(np.where(events.first, at, 0))] = -1
        seen = prev >= 0

        def before(a: np.ndarray) -> np.ndarray:
            return np.where(seen, a[np.maximum(prev, 0)], np.zeros_like(a))

        return _GroupSteps(
            inside=events.seen & (events.seen_us >= _us(sel.start)) & (events.seen_us <= _us(sel.end)),
            observed=observed, exists=exists,
            empty=empty, deleted=deleted, tombstone_again=tombstone & ~deleted, gtype=gtype, gen_known=gen_known,
            gen=gen, prev=prev, was=before(exists), was_empty=before(empty), was_type=before(gtype))


def _change(events: _Events, k: int, kind: str) -> dict:
    """The fields every group change of event k carries."""
    h = events.history
    return {"kind": kind, "time": _iso_us(int(events.time_us[k])) if events.timed[k] else None,
            "group_id": h.column("group_id")[k].as_py(), "offsets_partition": h.column("offsets_partition")[k]
            .as_py(), "record_offset": events.record_offset[k], "generation": events.generation[k],
            "group_type": events.group_type[k]}


def _lifecycle_changes(events: _Events, s: _GroupSteps) -> list[dict]:
    """Groups converted, deleted, created and emptied in the window, each at an observed event against the group as
    last observed before it. A group observed as the other type than it was is converted (KIP-848's online upgrade
    and downgrade write the old type's tombstones and the new type's records in one batch); so is, in a history
    without batch ends, a deletion followed at the same record time by the group re-created as the other type."""
    n, ts = events.n, events.time_us
    prev = s.prev
    p = np.maximum(prev, 0)
    lives = s.inside & s.observed & ~s.deleted & s.exists
    # the group was seen as one type, and is now seen as the other
    converted = lives & s.was & (s.gtype != s.was_type)
    # one history's deletion, seen, and the other type's creation right after it at the same time
    after_deletion = (lives & (prev >= 0) & ~s.was & s.deleted[p] & s.inside[p] & (s.gtype != s.was_type)
                      & events.timed & events.timed[p] & (ts == ts[p]))
    converted |= after_deletion
    deletion_converted = np.zeros(n, dtype=bool)
    deletion_converted[p[after_deletion]] = True

    def previous(k: int) -> tuple:
        """The group's generation and state as last observed before event k."""
        j = int(prev[k])
        if j < 0:
            return None, None
        return (events.generation[j] if s.exists[j] else None), events.state[j]

    out: list[dict] = []
    for k in np.flatnonzero(converted).tolist():
        out.append({**_change(events, k, "group_converted"), "from_type": events.group_type[int(prev[k])],
                    "to_type": events.group_type[k], "state": events.state[k]})
    for k in np.flatnonzero(s.inside & s.observed & s.deleted & ~deletion_converted).tolist():
        generation, state_before = previous(k)
        out.append({**_change(events, k, "group_deleted"), "generation": generation, "state_before": state_before})
    for k in np.flatnonzero(lives & ~s.was & ~converted).tolist():
        out.append({**_change(events, k, "group_created"), "state": events.state[k]})
    for k in np.flatnonzero(lives & s.was & s.empty & ~s.was_empty & ~converted).tolist():
        left: list[str] = []
        for j in range(int(prev[k]) + 1, k + 1):  # the members that left in the batch
            left += [m for m in events.members_left(j) or () if m not in left]
        out.append({**_change(events, k, "group_emptied"), "state_before": events.state[int(prev[k])],
                    "members_left": left})
    return out


def _rebalance_storms(events: _Events, s: _GroupSteps, sel: Selection) -> list[dict]:
    """Per (group, minute), the distinct new generations (a generation or epoch above the one before, same group
    type) among the events that leave the group existing: more than `sel.storm_per_minute` is a storm. Every event
    counts, seen or not: a generation a batch passed through was a rebalance all the same."""
    ts = events.time_us
    counted = s.inside & s.exists
    before = events.before
    was_gen = before(s.gen)
    bump = (counted & before(s.exists) & s.gen_known & before(s.exists & s.gen_known) & (s.gtype == before(s.gtype))
            & (s.gen > was_gen))
    minute = ts - ts % 60_000_000
    storms: dict[tuple[int, int], list[int]] = {}
    group_of = np.cumsum(events.first) - 1
    for k in np.flatnonzero(bump).tolist():
        storms.setdefault((int(group_of[k]), int(minute[k])), []).append(k)
    out: list[dict] = []
    for (g, m), bumps in storms.items():
        gens = sorted({events.generation[k] for k in bumps})
        if len(gens) <= sel.storm_per_minute:
            continue
        seen = np.flatnonzero(counted & (group_of == g) & (minute == m)).tolist()
        joined = sorted({x for k in seen for x in (events.members_joined(k) or [])})
        left = sorted({x for k in seen for x in (events.members_left(k) or [])})
        out.append({**_change(events, bumps[0], "rebalance_storm"), "minute": _iso_us(m), "rebalances": len(gens),
                    "generation_from": int(was_gen[bumps[0]]), "generation": gens[-1],
                    "members_joined": joined, "members_left": left})
    return out


def _compaction(snap: Snapshot, sel: Selection, partitions: set[int] | None) -> list[dict]:
    """`log_compacted`: an offsets partition (of the selected groups, `partitions`; None: any) whose input log the
    cleaner had compacted up to a time at or after the window's start, so commits in the window may be missing."""
    out = []
    for p, gap in sorted(log_gaps(snap.run).items()):
        until = gap.get("compacted_until")
        if (partitions is not None and p not in partitions) or (until is not None and until * 1000 < _us(sel.start)):
            continue
        out.append({"kind": "log_compacted", "time": None if until is None else _iso_us(until * 1000),
                    "group_id": None, "offsets_partition": p, "record_offset": None, "generation": None,
                    "compacted_below": gap["compacted_below"], "first_offset": gap.get("first_offset"),
                    "note": compaction_note(p, gap)})
    return out


def changes(reader: SnapshotReader, snap: Snapshot, sel: Selection) -> list[dict]:
    """Every change of the selected groups in the window, oldest first (time, then log position), and where the
    log the snapshot was built from had been compacted within it."""
    return changes_and_warnings(reader, snap, sel)[0]


def history_warnings(snap: Snapshot, steps: "_GroupSteps | None") -> list[str]:
    """What the answer may lack for the history it read: a legacy `group_history` whose run recorded no
    `group_history_version` (written before it was, by a version that may predate version 2) holds, in the window,
    a group tombstone right after the group's removal, which deleted a group again if an offset commit of the id
    came between (its `group_deleted` is then missing). Told from the run's summary, never from the data."""
    if steps is None or not (steps.tombstone_again & steps.inside).any():
        return []
    summary = _summary(snap)
    semantics = snap.run.get("semantics") or summary.get("semantics")
    if summary.get("group_history_version") is not None or semantics == "modern":  # modern's always said `deleted`
        return []
    return [f"snapshot {snap.snapshot_id!r}'s group history was written before offsetlake recorded its version, "
            f"maybe before version {GROUP_HISTORY_VERSION} (a group tombstone after an offset commit of a removed "
            f"simple consumer group is a deletion): a group_deleted may be missing where a tombstone followed a "
            f"removal; rebuild it with this version (offsetlake rebuild) to have every one"]


def _summary(snap: Snapshot) -> dict:
    raw = snap.run.get("summary")
    try:
        summary = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        summary = None
    return summary if isinstance(summary, dict) else {}


def changes_and_warnings(reader: SnapshotReader, snap: Snapshot, sel: Selection) -> tuple[list[dict], list[str]]:
    """`changes`, and what the answer may lack for the history it read (`history_warnings`)."""
    check_groups_known(reader, snap, sel.groups)
    start = sel.start if sel.start.tzinfo is not None else sel.start.replace(tzinfo=dt.timezone.utc)
    check_within(snap, "from", (start - EPOCH) // dt.timedelta(milliseconds=1),
                 "so nothing in the window is known (an empty answer would say nothing changed)")
    history = _history(reader, snap, sel)
    events = _Events(history)
    partitions: set[int] = set()
    out = _offset_changes(reader, snap, sel, events, partitions)
    out += _expiry_changes(reader, snap, sel)
    steps = _GroupSteps.of(events, sel) if events.n else None
    out += _group_changes(events, sel, steps)
    if history is not None:
        partitions.update(p for p in pc.unique(history.column("offsets_partition")).to_pylist() if p is not None)
    if sel.group_regex is not None and not out and (why := no_group_matches(reader, snap, sel.group_regex)):
        raise GroupNotFound(why)  # a mistyped regex, as a mistyped --group: not "nothing changed"
    if not out:
        end = sel.end if sel.end.tzinfo is not None else sel.end.replace(tzinfo=dt.timezone.utc)
        check_not_before(reader, snap, "to", (end - EPOCH) // dt.timedelta(milliseconds=1),
                         "so nothing in the window is known (an empty answer would say nothing changed)")
    selected = bool(sel.groups) or sel.group_regex is not None
    out += _compaction(snap, sel, partitions if selected else None)
    out.sort(key=lambda c: (c["time"] or "", c["offsets_partition"] if c["offsets_partition"] is not None else -1,
                            _position(c), KINDS.index(c["kind"])))
    return out, history_warnings(snap, steps)


def _position(c: dict) -> int:
    """Where in its offsets partition a change happened: where an offset took effect, or the group record."""
    at = c.get("applied_offset", c.get("record_offset"))
    return -1 if at is None else at


def damaged_groups(reader: SnapshotReader, snap: Snapshot, start: dt.datetime, end: dt.datetime) -> list[str]:
    """The groups `changes` reports damaged in [start, end] (`DAMAGE`: an offset that went back, was deleted or
    expired, or the group deleted): the one selection of a restore plan by damage, for the CLI and the page alike.
    A group that merely kept committing is not one."""
    return sorted({c["group_id"] for c in changes(reader, snap, Selection(start, end))
                   if c["kind"] in DAMAGE and c["group_id"] is not None})


def _s(v) -> str:
    return "-" if v is None else str(v)


def _cells(c: dict) -> dict:
    """The change with every id of the log in it (group, topic, member, client, host) as `cell` shows it."""
    out = {k: [cell(x) for x in v] if isinstance(v, list) else cell(v) for k, v in c.items()}
    if c.get("member"):
        out["member"] = {k: cell(v) for k, v in c["member"].items()}
    return out


def render_line(c: dict) -> str:
    """One readable line: time, log position, generation, kind, then what changed and who was assigned."""
    c = _cells(c)
    if c["kind"] == "log_compacted":
        pos = f"{c['offsets_partition']}:<{c['compacted_below']}"
        return f"{c['time'] or '-'}  {pos:<14} {'':<9} {c['kind']:<17} {c['note']}"
    pos = f"{_s(c['offsets_partition'])}:{_s(c.get('applied_offset', c['record_offset']))}"
    head = f"{c['time'] or '-'}  {pos:<14} gen {_s(c.get('generation')):<5} {c['kind']:<17} {c['group_id']}"
    k = c["kind"]
    if k.startswith("offset_"):
        tp = f"{c['topic']}-{c['partition']}"
        if k == "offset_regressed":
            what = f"{tp} {c['previous_offset']} -> {c['committed_offset']} ({c['delta']})"
            if c.get("previous_producer_id") is not None:
                what += f" (from a transactional offset of producer {c['previous_producer_id']})"
        elif k == "offset_past_end":
            what = f"{tp} {c['committed_offset']} > log end {c['log_end_offset']}"
        elif k == "offset_tombstone":
            what = f"{tp} deleted (was {_s(c.get('previous_offset'))})"
        else:
            what = f"{tp} {_s(c.get('committed_offset'))} expired ({_s(c.get('expiry_rule'))})"
        m = c.get("member")
        if m:
            what += f"  member {m['member_id']} client {_s(m.get('client_id'))} host {_s(m.get('client_host'))}"
        elif k != "offset_expired":
            what += "  no member assigned"
        if c.get("producer_id") is not None:
            what += f"  producer {c['producer_id']}"
            if c.get("applied_offset") not in (None, c.get("record_offset")):
                what += f" (record {c['record_offset']}, committed by the marker at {c['applied_offset']})"
        return f"{head}  {what}"
    if k == "group_created":
        return f"{head}  {c['group_type']} group created ({c.get('state')})"
    if k == "group_emptied":
        left = ",".join(c.get("members_left") or []) or "-"
        return f"{head}  {c['group_type']} group {c.get('state_before')} -> Empty (left: {left})"
    if k == "group_deleted":
        return f"{head}  {c['group_type']} group deleted (was {_s(c.get('state_before'))})"
    if k == "group_converted":
        return f"{head}  converted {c['from_type']} -> {c['to_type']}"
    if k == "group_expired":
        return f"{head}  group expired ({_s(c.get('reason'))})"
    joined = ",".join(c["members_joined"]) or "-"
    left = ",".join(c["members_left"]) or "-"
    return (f"{head}  {c['rebalances']} rebalances in the minute {c['minute']} (generation {c['generation_from']}"
            f" -> {c['generation']}; joined: {joined}; left: {left})")


def render_text(items: list[dict]) -> str:
    return "".join(render_line(c) + "\n" for c in items)
