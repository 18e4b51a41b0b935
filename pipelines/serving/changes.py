"""`offsetlake changes` and `GET /changes`: what changed between two times, read from one snapshot's history.

An incident responder asks "what changed between 14:00 and 14:10, and who committed it". The answer comes from the
snapshot's own tables, as the engine wrote them; nothing here replays the log again:

* `offset_commits` in log order per (group, topic, partition), counting a record as Kafka's coordinator did
  (`txn_outcome`: an aborted or still-pending transactional offset never took effect): a committed offset below
  the one before it is `offset_regressed`; one above the partition's log end offset the snapshot knows
  (`log_end_offsets`) is `offset_past_end`; a tombstone is `offset_tombstone` (the log does not say whether
  DeleteOffsets, a group deletion or the broker's own expiry wrote it).
* `expired_offsets` / `expired_groups`: what retention expiry removed at the snapshot's `as_of`, when `as_of` lies
  in the window (`offset_expired`, `group_expired`).
* `group_history`: `group_created`, `group_emptied`, `group_deleted`, `group_converted` (a group deleted and
  re-created as the other type at the same record time: Kafka's online classic <-> consumer migration), and
  `rebalance_storm` (more than `storm_per_minute` new generations / group epochs in one minute).

An offset change names the member assigned that partition at that moment: `group_history.member_assignments`
folded in log order up to the commit record (a classic generation sets every member, a KIP-848 member record one).
A transactional offset counts at its own record's position (its COMMIT marker's position is not in the history).
"""
from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipelines.io.snapshots import Snapshot, SnapshotReader

#: more new generations (classic) or group epochs (KIP-848) than this in one minute make a `rebalance_storm`
DEFAULT_STORM_PER_MINUTE = 10

KINDS = ("offset_regressed", "offset_past_end", "offset_tombstone", "offset_expired", "group_created",
         "group_emptied", "group_deleted", "group_converted", "group_expired", "rebalance_storm")

_COMMIT_COLUMNS = ["offsets_partition", "record_offset", "group_id", "topic", "partition", "committed_offset",
                   "commit_timestamp", "record_timestamp", "is_tombstone", "producer_id", "txn_outcome"]
_HISTORY_COLUMNS = ["group_id", "offsets_partition", "record_offset", "record_timestamp", "group_type", "event",
                    "generation", "assignment_epoch", "state", "members_joined", "members_left", "member_assignments"]


class BadWindow(ValueError):
    """A time, window or group selection the caller got wrong (CLI exit 2, HTTP 400)."""


def parse_time(text: str, what: str) -> dt.datetime:
    """A TIME as every command takes it (`pipelines.times`: ISO-8601, UTC when no zone, or epoch milliseconds) ->
    an aware UTC datetime."""
    from pipelines.times import TimeFormatError, parse_time_ms

    try:
        ms = parse_time_ms(str(text), what=what)
    except TimeFormatError as e:
        raise BadWindow(str(e)) from None
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.timezone.utc)


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
            raise BadWindow(f"--to ({iso_time(self.end)}) is before --from ({iso_time(self.start)})")
        if self.groups and self.group_regex is not None:
            raise BadWindow("give either --group or --group-regex, not both")
        if self.group_regex is not None:
            try:
                re.compile(self.group_regex)
            except re.error as e:
                raise BadWindow(f"--group-regex {self.group_regex!r}: {e}") from None
        if self.storm_per_minute < 1:
            raise BadWindow("the rebalance storm threshold must be at least 1 per minute")

    def filters(self):
        return [("group_id", "in", list(self.groups))] if self.groups else None

    def keep(self, t: pa.Table | None) -> pa.Table | None:
        """`t` narrowed to the selected groups (the regex matched anywhere in the id, as Python's re.search)."""
        if t is None or self.group_regex is None or not t.num_rows:
            return t
        rx = re.compile(self.group_regex)
        ids = t.column("group_id").to_pylist()
        return t.filter(pa.array([g is not None and rx.search(g) is not None for g in ids], pa.bool_()))


def iso_time(t: dt.datetime | None) -> str | None:
    if t is None:
        return None
    return t.astimezone(dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _us(t: dt.datetime) -> int:
    from pipelines.times import EPOCH

    return (t - EPOCH) // dt.timedelta(microseconds=1)


def _iso_us(us: int | None) -> str | None:
    from pipelines.times import EPOCH

    return None if us is None else iso_time(EPOCH + dt.timedelta(microseconds=us))


def _member(m: dict | None) -> dict | None:
    if m is None:
        return None
    return {k: m.get(k) for k in ("member_id", "group_instance_id", "client_id", "client_host")}


class _Assignments:
    """One group's members over its history, folded in log order: who held (topic, partition) at a position.
    `events` are the group's events in log order (without `member_assignments`); `assignments(i)` gives the i-th
    event's, read only for the events a fold applies: a classic generation or a deletion sets the members whatever
    came before it, so a fold starts at the last one it passes."""

    def __init__(self, events: list[dict], assignments):
        self.events = events
        self.assignments = assignments
        self.i = 0
        self.members: dict[str, dict] = {}
        self.generation: int | None = None

    @staticmethod
    def _resets(e: dict) -> bool:
        return ((e["event"] in ("deleted", "tombstone") and e.get("state") is None)
                or (e["group_type"] == "classic" and e["event"] == "generation"))

    def at(self, record_offset: int) -> "_Assignments":
        """Advance to just before the record at `record_offset` (calls come in increasing order)."""
        end = self.i
        while end < len(self.events) and self.events[end]["record_offset"] < record_offset:
            end += 1
        for k in range(end - 1, self.i - 1, -1):
            if self._resets(self.events[k]):
                self.i = k
                break
        while self.i < end:
            e = self.events[self.i]
            self.i += 1
            if e["event"] in ("deleted", "tombstone") and e.get("state") is None:
                self.members, self.generation = {}, None
                continue
            set_ = self.assignments(self.i - 1)
            if e["group_type"] == "classic" and e["event"] == "generation":
                self.members = {m["member_id"]: m for m in set_ or ()}
            else:
                for m in set_ or ():
                    self.members[m["member_id"]] = m
                for mid in e.get("members_left") or ():
                    self.members.pop(mid, None)
            self.generation = e.get("generation")
        return self

    def holder(self, topic: str, partition: int) -> dict | None:
        for m in self.members.values():
            for tp in m.get("assigned_partitions") or ():
                if tp["topic"] == topic and tp["partition"] == partition:
                    return m
        return None


def _history(reader: SnapshotReader, snap: Snapshot, sel: Selection) -> pa.Table | None:
    """The selected groups' `group_history` events up to the window's end, in log order per group."""
    try:
        t = reader.snapshot_table("group_history", snap, filters=sel.filters(), columns=_HISTORY_COLUMNS)
    except Exception:  # noqa: BLE001 - a snapshot written before group_history existed has none
        return None
    t = sel.keep(t)
    if t is None or not t.num_rows:
        return None
    if "member_assignments" not in t.column_names:  # written before the column existed: nobody is named
        t = t.append_column("member_assignments", pa.nulls(t.num_rows, pa.list_(pa.struct([]))))
    ts = t.column("record_timestamp")
    t = t.filter(pc.fill_null(pc.less_equal(ts, pa.scalar(sel.end, ts.type)), True))
    return t.sort_by([("group_id", "ascending"), ("offsets_partition", "ascending"), ("record_offset", "ascending")])


def _from_window(history: pa.Table | None, start: dt.datetime) -> np.ndarray | None:
    """Which of `history`'s events (log order per group) a group's changes from `start` on need: every event from
    `start`, and a group's last event before it (its state entering the window)."""
    if history is None or not history.num_rows:
        return None
    ts = history.column("record_timestamp")
    before = pc.fill_null(pc.less(ts, pa.scalar(start, ts.type)), True).to_numpy(zero_copy_only=False)
    gid = pc.dictionary_encode(history.column("group_id").combine_chunks()).indices.to_numpy(zero_copy_only=False)
    keep = ~before
    keep[-1] = True
    keep[:-1] |= (gid[1:] != gid[:-1]) | ~before[1:]
    return keep


class _Events:
    """`history`'s events as dicts, in its order (log order per group), without `member_assignments`: those only
    an offset change's fold reads, one event at a time (`assignments`), and they are most of a conversion's cost."""

    def __init__(self, history: pa.Table | None):
        self.history = history
        if history is not None:  # times as epoch microseconds: Python datetimes of every event cost seconds
            at = history.schema.get_field_index("record_timestamp")
            history = history.set_column(at, "record_timestamp", history.column(at).cast(
                pa.timestamp("us", tz="UTC")).cast(pa.int64()))
        self.rows = [] if history is None else history.drop_columns(["member_assignments"]).to_pylist()
        self.by_group: dict[str, tuple[int, int]] = {}
        for i, e in enumerate(self.rows):
            lo, _ = self.by_group.get(e["group_id"], (i, i))
            self.by_group[e["group_id"]] = (lo, i + 1)

    def fold(self, group_id: str) -> _Assignments:
        lo, hi = self.by_group.get(group_id, (0, 0))
        column = None if self.history is None else self.history.column("member_assignments")
        return _Assignments(self.rows[lo:hi], lambda i: column[lo + i].as_py())

    def where(self, mask: np.ndarray | None) -> list[dict]:
        return [] if mask is None else [e for e, keep in zip(self.rows, mask) if keep]


def _candidates(commits: pa.Table, leo: pa.Table, start: dt.datetime, upto: dt.datetime) -> list[dict]:
    """The commit records in [start, upto] that are a change: a tombstone, an offset below the previous counted
    record of its key (group, topic, partition), or one above the partition's known end offset; each with that
    previous offset. Counted: what the coordinator applied (plain commits, tombstones, transactional offsets whose
    transaction committed); `offset_commits` holds every record any snapshot saw, this snapshot's are up to its
    as_of. Vectorized (a key per row as integers, one sort in log order): a window function over string keys took
    several times longer on a 2 M-record history."""
    ts = pc.coalesce(commits.column("record_timestamp"), commits.column("commit_timestamp"))
    outcome = commits.column("txn_outcome")
    counted = pc.and_(
        pc.or_(pc.fill_null(commits.column("is_tombstone"), False),
               pc.or_(pc.is_null(outcome), pc.fill_null(pc.equal(outcome, "committed"), False))),
        pc.fill_null(pc.less_equal(ts, pa.scalar(upto, ts.type)), False))
    # the counted rows' numbers: columns are read through them, never copied whole (the history is log-sized)
    rows_at = np.flatnonzero(counted.to_numpy(zero_copy_only=False))
    n = len(rows_at)
    if not n:
        return []
    every = n == commits.num_rows  # then no row is skipped: no copy through the row numbers
    # (each log-sized temporary costs its page faults: they are kept few, and made in place)

    def column(name: str, fill=None):
        c = commits.column(name) if fill is None else pc.fill_null(commits.column(name), fill)
        values = c.to_numpy(zero_copy_only=False)
        return values if every else values[rows_at]

    def codes(name: str):
        d = pc.dictionary_encode(commits.column(name)).unify_dictionaries()
        indices = np.concatenate([ch.indices.to_numpy(zero_copy_only=False).astype(np.int64) for ch in d.chunks]) \
            if d.num_chunks else np.empty(0, dtype=np.int64)
        return (indices if every else indices[rows_at]), (d.chunk(0).dictionary if d.num_chunks
                                                          else pa.array([], pa.string()))

    key, _ = codes("group_id")
    tp_key, topics = codes("topic")
    part = column("partition", 0)
    width = int(part.max()) + 1 if n else 1
    tp_key *= width
    tp_key += part
    del part
    key *= len(topics) * width
    key += tp_key
    op = column("offsets_partition")
    ro = column("record_offset")
    order = _key_then_log_order(key, op, ro)
    key, tp_key = key[order], tp_key[order]
    co = column("committed_offset", -1)[order]
    tomb = column("is_tombstone", False)[order]
    pid = column("producer_id", -1)[order]
    when = ts.cast(pa.int64()).to_numpy(zero_copy_only=False)
    when = (when if every else when[rows_at])[order]
    same = np.zeros(n, dtype=bool)
    same[1:] = key[1:] == key[:-1]
    has_prev = same.copy()
    has_prev[1:] &= ~tomb[:-1]
    prev_co = np.empty_like(co)
    prev_co[0], prev_co[1:] = -1, co[:-1]
    prev_pid = np.empty_like(pid)
    prev_pid[0], prev_pid[1:] = -1, pid[:-1]
    regressed = ~tomb & has_prev & (co < prev_co)
    # the partition's end offset, looked up by the same (topic, partition) code
    end = np.full(n, -1, dtype=np.int64)
    if leo.num_rows:
        lt = pc.index_in(leo.column("topic"), value_set=topics).to_numpy(zero_copy_only=False)
        lp = leo.column("partition").to_numpy(zero_copy_only=False)
        known = ~np.isnan(lt.astype(float)) & (lp < width)
        lkey = (np.nan_to_num(lt.astype(float)).astype(np.int64) * width + lp.astype(np.int64))[known]
        lval = leo.column("log_end_offset").to_numpy()[known]
        by = np.argsort(lkey)
        lkey, lval = lkey[by], lval[by]
        at = np.clip(np.searchsorted(lkey, tp_key), 0, max(len(lkey) - 1, 0))
        if len(lkey):
            hit = lkey[at] == tp_key
            end[hit] = lval[at[hit]]
    past_end = ~tomb & (end >= 0) & (co > end)
    lo = int(pa.scalar(start, pa.timestamp("us", tz="UTC")).cast(pa.int64()).as_py())
    pick = np.nonzero((when >= lo) & (tomb | regressed | past_end))[0]
    picked = pa.array(rows_at[order[pick]])
    rows = commits.select(["group_id", "topic", "partition", "offsets_partition", "record_offset",
                           "committed_offset", "is_tombstone", "producer_id"]).take(picked) \
        .append_column("ts", ts.take(picked)).to_pylist()
    for r, i in zip(rows, pick):
        r["previous_offset"] = int(prev_co[i]) if has_prev[i] else None
        r["previous_producer_id"] = int(prev_pid[i]) if has_prev[i] else None
        r["log_end_offset"] = int(end[i]) if end[i] >= 0 else None
    rows.sort(key=lambda r: (r["group_id"], r["offsets_partition"], r["record_offset"]))
    return rows


def _key_then_log_order(key: np.ndarray, op: np.ndarray, ro: np.ndarray) -> np.ndarray:
    """The indices that sort rows by key, then log position: a stable sort by key alone when the rows of every key
    already come in log order (as a history's files hold them), else a sort by all three."""
    order = np.argsort(key, kind="stable")
    k, p, r = key[order], op[order], ro[order]
    same = k[1:] == k[:-1]
    if np.all(~same | (p[1:] > p[:-1]) | ((p[1:] == p[:-1]) & (r[1:] >= r[:-1]))):
        return order
    return np.lexsort((ro, op, key))


def _offset_changes(reader: SnapshotReader, snap: Snapshot, sel: Selection, events: _Events) -> list[dict]:
    commits = reader.history_table("offset_commits", filters=sel.filters(), columns=_COMMIT_COLUMNS)
    commits = sel.keep(commits)
    if commits is None or not commits.num_rows:
        return []
    leo = reader.snapshot_table("log_end_offsets", snap, columns=["topic", "partition", "log_end_offset"])
    if leo is None:
        leo = pa.table({"topic": pa.array([], pa.string()), "partition": pa.array([], pa.int32()),
                        "log_end_offset": pa.array([], pa.int64())})
    as_of = snap.as_of
    rows = _candidates(commits, leo, sel.start, min(sel.end, as_of) if as_of is not None else sel.end)
    if not rows:
        return []
    out = []
    folds: dict[str, _Assignments] = {}
    for r in rows:
        fold = folds.get(r["group_id"])
        if fold is None:
            fold = folds[r["group_id"]] = events.fold(r["group_id"])
        fold.at(r["record_offset"])
        base = {"time": iso_time(r["ts"]), "group_id": r["group_id"], "offsets_partition": r["offsets_partition"],
                "record_offset": r["record_offset"], "generation": fold.generation, "topic": r["topic"],
                "partition": r["partition"], "member": _member(fold.holder(r["topic"], r["partition"]))}
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
                # the offset gone back from was transactional: it took effect at its COMMIT marker, which may
                # come after this record (then it never showed), a position the history does not keep
                regressed["previous_producer_id"] = r["previous_producer_id"]
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
    t = sel.keep(reader.snapshot_table("expired_offsets", snap, filters=sel.filters()))
    for r in (t.to_pylist() if t is not None else []):
        out.append({"kind": "offset_expired", "time": iso_time(as_of), "group_id": r["group_id"],
                    "offsets_partition": r.get("offsets_partition"), "record_offset": r.get("record_offset"),
                    "generation": None, "topic": r["topic"], "partition": r["partition"],
                    "committed_offset": r.get("committed_offset"), "expiry_rule": r.get("expiry_rule"),
                    "expiry_base_timestamp": iso_time(r.get("expiry_base_timestamp"))})
    t = sel.keep(reader.snapshot_table("expired_groups", snap, filters=sel.filters()))
    for r in (t.to_pylist() if t is not None else []):
        out.append({"kind": "group_expired", "time": iso_time(as_of), "group_id": r["group_id"],
                    "offsets_partition": r.get("offsets_partition"), "record_offset": None,
                    "generation": r.get("generation"), "group_type": r.get("group_type"), "reason": r.get("reason")})
    return out


def _group_changes(events: list[dict], sel: Selection) -> list[dict]:
    """Group lifecycle changes and rebalance storms from the groups' events (log order per group)."""
    out: list[dict] = []
    storms: dict[tuple[str, int], dict] = {}
    start, end = _us(sel.start), _us(sel.end)

    def base(e: dict, kind: str) -> dict:
        return {"kind": kind, "time": _iso_us(e["record_timestamp"]), "group_id": e["group_id"],
                "offsets_partition": e["offsets_partition"], "record_offset": e["record_offset"],
                "generation": e.get("generation"), "group_type": e["group_type"]}

    i = 0
    while i < len(events):
        j = i
        while j < len(events) and events[j]["group_id"] == events[i]["group_id"]:
            j += 1
        group = events[i:j]
        exists, state, gtype, generation = False, None, None, None
        converted_at = -1  # the creation that completes a conversion, reported with the deletion before it
        for k, e in enumerate(group):
            ts = e["record_timestamp"]
            inside = ts is not None and start <= ts <= end
            now_exists = e.get("state") is not None
            if inside and e["event"] == "deleted":
                nxt = group[k + 1] if k + 1 < len(group) else None
                if (nxt is not None and nxt.get("state") is not None and nxt["group_type"] != e["group_type"]
                        and nxt["record_timestamp"] == ts):
                    out.append({**base(nxt, "group_converted"), "from_type": e["group_type"],
                                "to_type": nxt["group_type"], "state": nxt.get("state")})
                    converted_at = k + 1
                else:
                    out.append({**base(e, "group_deleted"), "generation": generation, "state_before": state})
            elif inside and now_exists and not exists and k != converted_at:
                out.append({**base(e, "group_created"), "state": e.get("state")})
            elif inside and now_exists and exists and e.get("state") == "Empty" and state not in (None, "Empty"):
                out.append({**base(e, "group_emptied"), "state_before": state,
                            "members_left": list(e.get("members_left") or [])})
            new_gen = e.get("generation")
            if inside and now_exists:
                minute = storms.setdefault((e["group_id"], ts - ts % 60_000_000),
                                           {"bumps": [], "events": [], "before": None})
                minute["events"].append(e)
                if (exists and new_gen is not None and e["group_type"] == gtype and generation is not None
                        and new_gen > generation):
                    if not minute["bumps"]:
                        minute["before"] = generation
                    minute["bumps"].append(e)
            exists, state = now_exists, e.get("state")
            gtype, generation = (e["group_type"], new_gen) if now_exists else (None, None)
        i = j
    for (gid, minute), seen in storms.items():
        gens = sorted({e["generation"] for e in seen["bumps"]})
        if len(gens) <= sel.storm_per_minute:
            continue
        joined = sorted({m for e in seen["events"] for m in (e.get("members_joined") or [])})
        left = sorted({m for e in seen["events"] for m in (e.get("members_left") or [])})
        out.append({**base(seen["bumps"][0], "rebalance_storm"), "minute": _iso_us(minute),
                    "rebalances": len(gens), "generation_from": seen["before"], "generation": gens[-1],
                    "members_joined": joined, "members_left": left})
    return out


def changes(reader: SnapshotReader, snap: Snapshot, sel: Selection) -> list[dict]:
    """Every change of the selected groups in the window, oldest first (time, then log position)."""
    history = _history(reader, snap, sel)
    events = _Events(history)
    out = _offset_changes(reader, snap, sel, events)
    out += _expiry_changes(reader, snap, sel)
    out += _group_changes(events.where(_from_window(history, sel.start)), sel)
    out.sort(key=lambda c: (c["time"] or "", c["offsets_partition"] if c["offsets_partition"] is not None else -1,
                            c["record_offset"] if c["record_offset"] is not None else -1, KINDS.index(c["kind"])))
    return out


def _s(v) -> str:
    return "-" if v is None else str(v)


def render_line(c: dict) -> str:
    """One readable line: time, log position, generation, kind, then what changed and who was assigned."""
    pos = f"{_s(c['offsets_partition'])}:{_s(c['record_offset'])}"
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
