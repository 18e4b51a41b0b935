"""The offsets half of a shard's replay, column by column: `OffsetMetadataManager.replay` and
`replayEndTransactionMarker` (new coordinator, Kafka 3.7 - 4.x; spec §5.3) and the `loadedOffsets` /
`pendingOffsets` maps of `GroupMetadataManager.doLoadGroupsAndOffsets` (old coordinator, 0.11 - 3.9; spec §5.1),
one window of a partition's records at a time, onto what the records before it left (`loader.ShardState`: the
committed offsets, the open transactions' pending offsets and the records of those transactions).

What every offset-commit record did is decided here, and only here (`Decisions`): where it took effect
(`applied_offset`, the log position, and `applied_timestamp`, that record's time) or that it never did (null), and
for a transactional record the end marker of its transaction (`txn_outcome`, `txn_marker_offset`,
`txn_marker_timestamp`). The history keeps those columns and every view reads them.

Kafka's rules, per record:

* a plain value (old loader: a record of a non-transactional batch; new coordinator: producer id -1) is committed at
  its own position, whatever the key held;
* a tombstone deletes the key at its own position, and took effect when the key held an offset. The old loader
  reads only plain tombstones so; a transactional one only drops the key from its producer's pending map. The new
  coordinator deletes on every tombstone, and from 3.8 drops the key from every open transaction too (spec §5.5 #1;
  3.7's left its pending maps alone);
* a transactional value waits in its producer's pending map (a later record of the key in the same transaction
  replaces it) until an end marker of the producer: old loader, the first record of any control batch; new
  coordinator, a COMMIT or ABORT record. A COMMIT installs it at the marker's position unless the key's committed
  offset is as new: its `appendedBatchOffset` (old loader: the offset of the first record iterated in its batch)
  or record offset (new, 3.8+; 3.7's installed it whatever the key held) is not below the pending one's. It never
  takes effect otherwise (aborted, overtaken, replaced, dropped, or still open at the end of the log).

Why it can be done column by column, exactly: per key, a decision reads only whether the key holds an offset and
the version (appendedBatchOffset / record offset) of the one it holds. Both are a fold over the key's events in
log order (a value or a seed at a plain value's or the state's version, absence at a tombstone, and at each
installed value its version, which is above the one in place): so per key, after sorting its events by position,
the version in place before each event is the running maximum since the last plain value, tombstone or seed, and
it holds an offset when that maximum exists (3.7's installs read no version: whether one exists is all). A
transaction's end marker per record, the last record of a key in a transaction, and the first tombstone after a
pending value are searches in sorted arrays.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipelines.coordinator.committed import KEY, SCHEMA
from schemas.tables import DECISION_COLUMNS

if TYPE_CHECKING:  # the parameter's type only
    from pipelines.coordinator.options import ReplayOptions

#: the control types that end a transaction in the new coordinator (`replayEndTransactionMarker`)
END_MARKER_TYPES = ("COMMIT", "ABORT")
#: what `Decisions` gives each record: the history's columns of the same names
DECIDED_COLUMNS = DECISION_COLUMNS
DECIDED_TYPES = {"txn_outcome": pa.string(), "txn_marker_offset": pa.int64(), "txn_marker_timestamp": pa.int64(),
                 "applied_offset": pa.int64(), "applied_timestamp": pa.int64()}
#: the decoded columns a window's offset commits are read in: the replay's, and the history's (`tables.HISTORY_READS`)
READ_COLUMNS = ("record_kind", "offsets_partition", "offset", "group_id", "topic", "partition", "is_tombstone",
                "producer_id", "producer_epoch", "is_transactional", "batch_first_offset", "control_type", "timestamp",
                "committed_offset", "leader_epoch", "metadata", "commit_timestamp", "expire_timestamp", "topic_id",
                "batch_timestamp")

_SEED, _VALUE, _TOMBSTONE, _INSTALL = 0, 1, 2, 3  # a key's events, in this order at one position
_NONE = -1


def is_control(table: pa.Table) -> pa.ChunkedArray:
    """Which of `table`'s decoded rows are control records (transaction markers)."""
    return pc.fill_null(pc.equal(table.column("record_kind"), "control"), False)


def is_offset_commit(table: pa.Table) -> pa.ChunkedArray:
    return pc.fill_null(pc.equal(table.column("record_kind"), "offset_commit"), False)


def end_markers(table: pa.Table, modern: bool):
    """(control records, the control records that end their producer's transaction): new coordinator, COMMIT and
    ABORT; the old loader, the first record of any control batch (only it is read)."""
    control = is_control(table)
    if modern:
        ends = pc.fill_null(pc.is_in(table.column("control_type"), pa.array(END_MARKER_TYPES)), False)
    else:
        first = table.column("batch_first_offset")
        ends = pc.fill_null(pc.or_kleene(pc.is_null(first), pc.equal(table.column("offset"), first)), False)
    return control, pc.and_(control, ends)


def is_transactional(table: pa.Table, modern: bool):
    """Which rows a producer's transaction holds: old loader, a record of a transactional batch; new coordinator,
    one with a producer id (spec §5.5 #6)."""
    if modern:
        return pc.not_equal(pc.fill_null(table.column("producer_id"), -1), -1)
    return pc.fill_null(table.column("is_transactional"), False)


def transactional_commits(table: pa.Table, modern: bool):
    """The offset commits a producer's transaction holds, as a mask."""
    return pc.and_(is_offset_commit(table), is_transactional(table, modern))


def plain_values(table: pa.Table, modern: bool):
    """The offset commits that are plain values, as a mask: each is committed at its own position, whatever the
    state (a range of a split partition writes their history without loading any)."""
    return pc.and_(pc.and_(is_offset_commit(table), pc.invert(is_transactional(table, modern))),
                   pc.invert(pc.fill_null(table.column("is_tombstone"), False)))


@dataclass
class Decisions:
    """What a window's replay decided: for each of its offset-commit records, in its order (`own`: `DECIDED_COLUMNS`
    arrays), and for the records of transactions open before it that one of its markers ended (`carried`:
    `offsets_partition`, `offset` and the `DECIDED_COLUMNS`). `commits`: those offset-commit records in
    `READ_COLUMNS`, as the replay read them, so the history need not pick them out again."""

    own: dict[str, pa.Array]
    carried: pa.Table
    commits: pa.Table

    @staticmethod
    def concat(parts: list["Decisions"]) -> "Decisions":
        if len(parts) == 1:
            return parts[0]
        own = {c: pa.concat_arrays([p.own[c] for p in parts]) if parts else pa.array([], DECIDED_TYPES[c])
               for c in DECIDED_COLUMNS}
        carried = [p.carried for p in parts if p.carried.num_rows]
        return Decisions(own, pa.concat_tables(carried) if carried else no_carried(),
                         pa.concat_tables([p.commits for p in parts]))


def no_carried() -> pa.Table:
    return pa.table({"offsets_partition": pa.array([], pa.int32()), "offset": pa.array([], pa.int64()),
                     **{c: pa.array([], DECIDED_TYPES[c]) for c in DECIDED_COLUMNS}})


def plain_value_decisions(commits: pa.Table) -> dict[str, pa.Array]:
    """`Decisions.own` of offset-commit records that are all plain values (`plain_values`): each took effect at its
    own position and time, with no transaction."""
    n = commits.num_rows
    return {"txn_outcome": pa.nulls(n, pa.string()), "txn_marker_offset": pa.nulls(n, pa.int64()),
            "txn_marker_timestamp": pa.nulls(n, pa.int64()),
            "applied_offset": pc.cast(commits.column("offset"), pa.int64()).combine_chunks(),
            "applied_timestamp": _times(commits.column("timestamp"))}


def _times(column) -> pa.Array:
    """Record timestamps (epoch ms) with Kafka's -1 (none) as null."""
    c = pc.cast(column, pa.int64())
    return pc.if_else(pc.fill_null(pc.less(c, 0), False), pa.scalar(None, pa.int64()), c).combine_chunks() \
        if len(c) else pa.array([], pa.int64())


def _ints(column, fill: int) -> np.ndarray:
    c = pc.cast(column, pa.int64())
    return (pc.fill_null(c, fill) if c.null_count else c).to_numpy(zero_copy_only=False).astype(np.int64, copy=False)


def _codes(*columns: np.ndarray) -> np.ndarray:
    """Dense codes of the tuples of `columns` (int64 arrays of one length): equal tuples, equal codes, and the codes
    in the tuples' order. The tuples are one int64 each (mixed radix over each column's span) where their spans
    allow, then ranked through a table of every possible value when that is no larger than a few times the rows
    (no sort), else hashed (`_ranked`); a lexical sort of the columns only where they do not fit one."""
    n = len(columns[0])
    if not n:
        return np.empty(0, np.int64)
    key, room = None, 1
    for c in columns:
        lo = int(c.min())
        span = int(c.max()) - lo + 1
        room *= span
        if room >= 1 << 62:
            return _lexical_codes(*columns)
        key = c - lo if key is None else key * span + (c - lo)
    if room <= 4 * n + 1024:
        seen = np.zeros(room, np.int64)
        seen[key] = 1
        np.cumsum(seen, out=seen)
        return seen[key] - 1
    return _ranked(key)


def _ranked(key: np.ndarray) -> np.ndarray:
    """Dense codes of `key` in its values' order: each row's distinct value found by hashing (Arrow's
    `dictionary_encode`), then only the distinct values sorted: `np.unique(..., return_inverse=True)` sorts every
    row, stably, and a range's keys recur a few times each."""
    encoded = pc.dictionary_encode(pa.array(key))
    distinct = encoded.dictionary.to_numpy()
    rank = np.empty(len(distinct), np.int64)
    rank[np.argsort(distinct)] = np.arange(len(distinct), dtype=np.int64)
    return rank[encoded.indices.to_numpy()]


def _lexical_codes(*columns: np.ndarray) -> np.ndarray:
    n = len(columns[0])
    order = np.lexsort(columns[::-1])
    change = np.zeros(n, dtype=bool)
    change[0] = True
    for c in columns:
        s = c[order]
        change[1:] |= s[1:] != s[:-1]
    out = np.empty(n, np.int64)
    out[order] = np.cumsum(change) - 1
    return out


def _string_codes(column) -> np.ndarray:
    encoded = pc.dictionary_encode(column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column)
    return _ints(encoded.indices, -1)


def key_codes(commits: pa.Table, by_partition: bool = False, groups: np.ndarray | None = None) -> np.ndarray:
    """Dense codes of the offset commits' GroupTopicPartitions (`by_partition`: of their offsets partition and
    GroupTopicPartition; `groups`: the rows' `group_codes`, found already, which implies it): equal keys, equal
    codes."""
    rest = [_string_codes(commits.column("topic")), _ints(commits.column("partition"), -1)]
    if groups is not None:
        return _codes(groups, *rest)
    columns = [_string_codes(commits.column("group_id")), *rest]
    if by_partition:
        columns.insert(0, _ints(commits.column("offsets_partition"), -1))
    return _codes(*columns)


def group_codes(rows: pa.Table) -> np.ndarray:
    """Dense codes of the rows' (offsets partition, group id): equal pairs, equal codes (no id is an id too)."""
    return _codes(_ints(rows.column("offsets_partition"), -1), _string_codes(rows.column("group_id")))


def stable_order(codes: np.ndarray) -> np.ndarray:
    """`np.argsort(codes, kind="stable")` of dense codes: a radix sort where they fit 16 bits (most windows' groups
    do), a merge sort elsewhere."""
    if len(codes) and 0 <= codes.min() and codes.max() < 1 << 16:
        return np.argsort(codes.astype(np.uint16), kind="stable")
    return np.argsort(codes, kind="stable")


def _next_event(q_group: np.ndarray, q_at: np.ndarray, e_group: np.ndarray, e_at: np.ndarray,
                after: bool = True) -> np.ndarray:
    """For each query (group, position), the index of the first event of its group at a later position (`after`;
    else at or after it), -1 when none."""
    nq, ne = len(q_group), len(e_group)
    if not nq or not ne:
        return np.full(nq, _NONE, np.int64)
    group = np.concatenate([e_group, q_group])
    at = np.concatenate([e_at, q_at])
    is_event = np.concatenate([np.ones(ne, bool), np.zeros(nq, bool)])
    # at one position, a query sorts after the event (after=True: the event is not later) or before it
    tie = np.where(is_event, 0, 1) if after else np.where(is_event, 1, 0)
    order = np.lexsort((tie, at, group))
    n = len(order)
    pos = np.arange(n)
    nxt = np.where(is_event[order], pos, n)
    nxt = np.minimum.accumulate(nxt[::-1])[::-1]
    found = nxt < n
    clipped = np.minimum(nxt, n - 1)
    found &= group[order][clipped] == group[order]
    out = np.empty(n, np.int64)
    out[order] = np.where(found, order[clipped], _NONE)
    return out[ne:]


@dataclass(frozen=True)
class _Markers:
    """A window's end-transaction markers as columns: log offset, producer, COMMIT (else ABORT), timestamp."""

    off: np.ndarray
    pid: np.ndarray
    commit: np.ndarray
    time: pa.Array

    @staticmethod
    def of(rows: pa.Table, modern: bool) -> "_Markers":
        _, ends = end_markers(rows, modern)
        markers = rows.select(["offset", "producer_id", "control_type", "timestamp"]).filter(ends)
        commit = pc.fill_null(pc.equal(markers.column("control_type"), "COMMIT"), False)
        return _Markers(_ints(markers.column("offset"), -1), _ints(markers.column("producer_id"), -1),
                        commit.to_numpy(zero_copy_only=False), _times(markers.column("timestamp")))


@dataclass(frozen=True)
class _Commits:
    """A window's offset commits (`table`) as columns. `version` is what Kafka compares an install against: the
    record's offset in the modern coordinator, its batch's first offset (`appendedBatchOffset`) in the legacy one."""

    table: pa.Table
    off: np.ndarray
    tomb: np.ndarray
    pid: np.ndarray
    txn: np.ndarray
    batch: np.ndarray
    version: np.ndarray

    @staticmethod
    def of(rows: pa.Table, modern: bool) -> "_Commits":
        commits = rows.select(list(READ_COLUMNS)).filter(is_offset_commit(rows))
        n = commits.num_rows
        off = _ints(commits.column("offset"), -1)
        tomb = pc.fill_null(commits.column("is_tombstone"), False).to_numpy(zero_copy_only=False)
        txn = is_transactional(commits, modern).to_numpy(zero_copy_only=False) if n else np.zeros(0, bool)
        batch = _ints(pc.coalesce(commits.column("batch_first_offset"), commits.column("offset")), -1) if n else off
        return _Commits(commits, off, tomb, _ints(commits.column("producer_id"), -1), txn, batch,
                        off if modern else batch)


@dataclass(frozen=True)
class _Transactions:
    """The transactions' records: the `carried` pending offsets carried in, then the window's (`rows`: their
    indexes among its commits); each with its end marker (-1: none yet), whether that marker installs it (the last
    record of its key in a committed transaction) and whether it is still pending after the window."""

    rows: np.ndarray
    carried: int
    key: np.ndarray
    pid: np.ndarray
    off: np.ndarray
    version: np.ndarray
    marker: np.ndarray
    install: np.ndarray
    still_pending: np.ndarray


def _transactions(c: _Commits, c_key: np.ndarray, pending: pa.Table, p_key: np.ndarray, m: _Markers,
                  modern: bool, clears: bool) -> _Transactions:
    """Each transaction's records matched to the marker that ends them: what its pending map holds at that marker
    is the last record of each key (old loader: a tombstone holds nothing; 3.7's new coordinator: a tombstone leaves
    the pending map alone, so its last value; `clears`, the new coordinator from 3.8: a tombstone of the key after it
    and before the marker drops it), installed when the marker is a COMMIT."""
    p_pid = _ints(pending.column("producer_id"), -1)
    p_off = _ints(pending.column("record_offset"), -1)
    p_version = p_off if modern else _ints(pc.coalesce(pending.column("appended_batch_offset"),
                                                       pending.column("record_offset")), -1)
    t_rows = np.flatnonzero(c.txn)
    np_ = len(p_pid)
    t_key = np.concatenate([p_key, c_key[t_rows]])
    t_pid = np.concatenate([p_pid, c.pid[t_rows]])
    t_off = np.concatenate([p_off, c.off[t_rows]])
    t_tomb = np.concatenate([np.zeros(np_, bool), c.tomb[t_rows]])
    t_marker = _next_event(t_pid, t_off, m.pid, m.off)

    # the new coordinator's tombstones never enter a pending map: a key's last value is what its map holds
    is_value = ~t_tomb if modern else np.ones(len(t_key), bool)
    order = np.lexsort((t_off, is_value, t_marker, t_pid, t_key))
    last = np.ones(len(order), bool)
    if len(order) > 1:
        k, p, mk = t_key[order], t_pid[order], t_marker[order]
        last[:-1] = (k[1:] != k[:-1]) | (p[1:] != p[:-1]) | (mk[1:] != mk[:-1])
    held = np.zeros(len(t_key), bool)
    held[order[last]] = True
    held &= ~t_tomb
    if clears and len(t_key):
        tomb_rows = np.flatnonzero(c.tomb)
        nt = _next_event(t_key, t_off, c_key[tomb_rows], c.off[tomb_rows])
        dropped = nt >= 0
        ended = dropped & (t_marker >= 0)
        dropped[ended] = c.off[tomb_rows][nt[ended]] < m.off[t_marker[ended]]
        held &= ~dropped
    install = held & (t_marker >= 0)
    install[install] = m.commit[t_marker[install]]
    return _Transactions(t_rows, np_, t_key, t_pid, t_off, np.concatenate([p_version, c.version[t_rows]]),
                         t_marker, install, held & (t_marker < 0))


@dataclass(frozen=True)
class _KeyEvents:
    """Every key's events in log order (sorted by key, then position, then kind): the state's offset (a seed),
    plain values, tombstones and installs at markers; `ref` the commit or transaction record behind each, and
    `took` whether it took effect. `seeded`: whether the state held an offset of any key in the window."""

    key: np.ndarray
    kind: np.ndarray
    ref: np.ndarray
    took: np.ndarray
    value_rows: np.ndarray
    seeded: bool


def _key_events(c: _Commits, key: np.ndarray, keys: pa.Table, t: _Transactions, m: _Markers, state,
                modern: bool, most_recent: bool) -> _KeyEvents:
    n = c.table.num_rows
    c_key = key[:n]
    firsts = _firsts(key)
    seeded_at, seeded = state.offsets.lookup(keys.take(pa.array(firsts)))
    s_key = key[firsts[seeded_at]]
    s_version = _ints(seeded.column("record_offset") if modern else pc.coalesce(
        seeded.column("appended_batch_offset"), seeded.column("record_offset")), -1)
    value_rows = np.flatnonzero(~c.txn & ~c.tomb)
    tomb_rows = np.flatnonzero(c.tomb if modern else c.tomb & ~c.txn)
    install_at = np.flatnonzero(t.install)
    values = _deciding_values(key, c_key[value_rows], value_rows, [c_key[tomb_rows], t.key[install_at]])
    e_key = np.concatenate([s_key, c_key[values], c_key[tomb_rows], t.key[install_at]])
    e_pos = np.concatenate([np.full(len(s_key), np.iinfo(np.int64).min), c.off[values], c.off[tomb_rows],
                            m.off[t.marker[install_at]]])
    e_kind = np.concatenate([np.full(len(s_key), _SEED), np.full(len(values), _VALUE),
                             np.full(len(tomb_rows), _TOMBSTONE), np.full(len(install_at), _INSTALL)])
    e_version = np.concatenate([s_version, c.version[values], np.zeros(len(tomb_rows), np.int64),
                                t.version[install_at]])
    e_ref = np.concatenate([np.full(len(s_key), _NONE), values, tomb_rows, install_at])
    order = np.lexsort((e_kind, e_pos, e_key))
    e_key, e_kind, e_version, e_ref = e_key[order], e_kind[order], e_version[order], e_ref[order]
    took = _took_effect(e_key, e_kind, e_version, most_recent)
    return _KeyEvents(e_key, e_kind, e_ref, took, value_rows, bool(len(s_key)))


def _applied(c: _Commits, t: _Transactions, m: _Markers, ev: _KeyEvents
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The position each of the window's records took effect at (-1: never), whether that is its marker's, and
    which transaction records were installed."""
    n = c.table.num_rows
    applied_row = np.full(n, _NONE, np.int64)
    applied_row[ev.value_rows] = c.off[ev.value_rows]
    deleted = ev.ref[ev.took & (ev.kind == _TOMBSTONE)]
    applied_row[deleted] = c.off[deleted]
    installed = ev.ref[ev.took & (ev.kind == _INSTALL)]
    t_applied = np.zeros(len(t.key), bool)
    t_applied[installed] = True
    own_install = installed[installed >= t.carried] - t.carried
    applied_row[t.rows[own_install]] = m.off[t.marker[t.carried:][own_install]]
    at_marker = np.zeros(n, bool)  # a modern transactional tombstone takes effect at its own record, not here
    at_marker[t.rows[own_install]] = True
    return applied_row, at_marker, t_applied


def _carry_transactions(part: int, state, c: _Commits, pending: pa.Table, t: _Transactions, m: _Markers,
                        t_applied: np.ndarray, modern: bool) -> pa.Table:
    """The state's pending offsets and open transactions' records after the window; returns the records of
    transactions open before the window that its markers ended (`_ended`)."""
    np_ = t.carried
    new_pending = [pending.take(pa.array(np.flatnonzero(t.still_pending[:np_]), pa.int64()))]
    open_new = t.rows[np.flatnonzero(t.still_pending[np_:])]
    if len(open_new):
        new_pending.append(_offsets_of(c.table, open_new, c.batch, modern))
    state.pending = pa.concat_tables(new_pending).combine_chunks()
    carried, open_records = _ended(part, state.open_records, m.pid, m.off, m.commit, m.time,
                                   t.off[:np_][t_applied[:np_]])
    still_open = t.marker[np_:] < 0
    for p_, o in zip(c.pid[t.rows][still_open].tolist(), c.off[t.rows][still_open].tolist()):
        open_records.setdefault(p_, []).append(o)
    state.open_records = open_records
    return carried


def replay_offsets(part: int, rows: pa.Table, state, options: ReplayOptions) -> Decisions:
    """Replays the offset commits and end markers of `rows` (one offsets partition's decoded records, in log order)
    onto `state` (`loader.ShardState`: its `offsets`, `pending` and `open_records` are replaced) with the rules of
    `options`' coordinator and version (`commit_keeps_most_recent`, `tombstone_clears_transactions`), and returns what
    every offset-commit record of `rows` did, and every record of a transaction open before them that they ended."""
    modern, clears = options.is_modern, options.tombstone_clears_transactions
    most_recent = options.commit_keeps_most_recent
    c = _Commits.of(rows, modern)
    m = _Markers.of(rows, modern)
    n = c.table.num_rows
    pending = state.pending
    # the keys of the window's records and of the pending offsets, as codes
    keys = pa.concat_tables([c.table.select(KEY).cast(pa.schema(SCHEMA.field(k) for k in KEY)),
                             pending.select(KEY)])
    key = key_codes(keys)
    t = _transactions(c, key[:n], pending, key[n:], m, modern, clears)
    ev = _key_events(c, key, keys, t, m, state, modern, most_recent)
    applied_row, at_marker, t_applied = _applied(c, t, m, ev)
    _apply_last(state, c.table, pending, c.batch, modern, ev.key, ev.kind, ev.ref, ev.took, t.rows, t.carried,
                touched=ev.seeded)
    carried = _carry_transactions(part, state, c, pending, t, m, t_applied, modern)
    own_marker = np.full(n, _NONE, np.int64)
    own_marker[t.rows] = t.marker[t.carried:]
    return Decisions(_own(c.table, c.txn, own_marker, m.off, m.commit, m.time, applied_row, at_marker), carried,
                     c.table)


def _firsts(codes: np.ndarray) -> np.ndarray:
    """The index of each code's first occurrence, by code (`key_codes`: dense, so every code up to the highest
    occurs)."""
    if not len(codes):
        return np.zeros(0, np.int64)
    first = np.full(int(codes.max()) + 1, len(codes), np.int64)
    np.minimum.at(first, codes, np.arange(len(codes), dtype=np.int64))
    return first


def _deciding_values(codes: np.ndarray, v_key: np.ndarray, value_rows: np.ndarray,
                     others: list[np.ndarray]) -> np.ndarray:
    """The plain values (`value_rows`, ascending, of keys `v_key`) whose events can decide anything: every value of
    a key that a tombstone or an install (`others`: their keys) also touches in the window, else only the key's last.
    A value is always applied and the next value of its key puts the key's offset back in place, so a value followed
    by another of its key changes neither what a later tombstone or install does nor the key's last event: without
    them, a window's events are about its keys, not its records."""
    if not len(value_rows):
        return value_rows
    size = int(codes.max()) + 1
    last = np.full(size, -1, np.int64)
    np.maximum.at(last, v_key, value_rows)
    touched = np.zeros(size, bool)
    for keys in others:
        touched[keys] = True
    return value_rows[touched[v_key] | (last[v_key] == value_rows)]


def _took_effect(e_key: np.ndarray, e_kind: np.ndarray, e_version: np.ndarray, most_recent: bool = True
                 ) -> np.ndarray:
    """Which of a window's key events (sorted by key, then position) took effect: a plain value always; a tombstone
    when the key held an offset; an install when the key held none, or one of a lower version (`most_recent`; else
    always: 3.7's new coordinator). The version in place is the running maximum since the last seed, value or
    tombstone (an install raises it), as ranks (0: none)."""
    n = len(e_key)
    if not n:
        return np.zeros(0, bool)
    versioned = e_kind != _TOMBSTONE
    ranks = np.zeros(n, np.int64)
    if versioned.any():
        _, inverse = np.unique(e_version[versioned], return_inverse=True)
        ranks[versioned] = inverse + 1
    top = int(ranks.max()) + 1
    key_start = np.ones(n, bool)
    key_start[1:] = e_key[1:] != e_key[:-1]
    segment = np.cumsum(key_start | (e_kind != _INSTALL)) - 1
    held = np.maximum.accumulate(segment * top + ranks) - segment * top  # in place after each event
    before = np.zeros(n, np.int64)
    before[1:] = np.where(key_start[1:], 0, held[:-1])
    return ((e_kind == _VALUE) | ((e_kind == _TOMBSTONE) & (before > 0))
            | ((e_kind == _INSTALL) & ((ranks > before) | (not most_recent))))


def _offsets_of(commits: pa.Table, rows: np.ndarray, batch: np.ndarray, modern: bool) -> pa.Table:
    """`commits`' rows at `rows` as offsets the state holds (`committed.SCHEMA`; the producer in `producer_id`)."""
    t = commits.take(pa.array(rows))
    n = t.num_rows
    columns = {"record_offset": t.column("offset"), "producer_id": pc.fill_null(t.column("producer_id"), -1),
               "appended_batch_offset": pa.nulls(n, pa.int64()) if modern else pa.array(batch[rows], pa.int64())}
    return pa.Table.from_arrays([(columns[f.name] if f.name in columns else t.column(f.name)).cast(f.type)
                                 for f in SCHEMA], schema=SCHEMA)


def _apply_last(state, commits, pending, batch, modern, e_key, e_kind, e_ref, took, t_rows, np_, touched) -> None:
    """`state.offsets` after the window: each key's last event that took effect, a value or an install put in
    place, a tombstone deleting."""
    at = np.flatnonzero(took & (e_kind != _SEED))
    if not len(at):
        return
    last = np.ones(len(at), bool)
    last[:-1] = e_key[at][1:] != e_key[at][:-1]
    kind, ref = e_kind[at[last]], e_ref[at[last]]
    puts = []
    values = ref[kind == _VALUE]
    installs = ref[kind == _INSTALL]
    from_pending = installs[installs < np_]
    from_window = t_rows[installs[installs >= np_] - np_]
    own = np.concatenate([values, from_window])
    if len(own):
        puts.append(_offsets_of(commits, np.sort(own), batch, modern))
    if len(from_pending):
        puts.append(pending.take(pa.array(from_pending)))
    gone = ref[kind == _TOMBSTONE]
    deletes = commits.select(KEY).take(pa.array(gone)) if len(gone) else pa.table(
        {k: pa.array([], SCHEMA.field(k).type) for k in KEY})
    put = pa.concat_tables(puts) if puts else SCHEMA.empty_table()
    state.offsets.apply(put, deletes, touched_held=touched or bool(len(from_pending)))


def _ended(part: int, open_records: dict[int, list[int]], m_pid, m_off, m_commit, m_time,
           installed_offsets: np.ndarray) -> tuple[pa.Table, dict[int, list[int]]]:
    """The records of transactions open before the window that one of its end markers ended (each producer's
    first), decided (`installed_offsets`: those of them an install put in place), and the transactions still open."""
    if not open_records:
        return no_carried(), {}
    pids = np.fromiter(open_records, dtype=np.int64, count=len(open_records))
    first = _next_event(pids, np.full(len(pids), np.iinfo(np.int64).min), m_pid, m_off, after=False)
    still = {p_: open_records[p_] for p_, m in zip(pids.tolist(), first.tolist()) if m < 0}
    ended = [(p_, m) for p_, m in zip(pids.tolist(), first.tolist()) if m >= 0]
    if not ended:
        return no_carried(), still
    offs = np.array([o for p_, _ in ended for o in open_records[p_]], np.int64)
    marker = np.array([m for p_, m in ended for _ in open_records[p_]], np.int64)
    installed = np.isin(offs, installed_offsets)
    times = m_time.take(pa.array(marker))
    return pa.table({
        "offsets_partition": pa.array(np.full(len(offs), part), pa.int32()), "offset": pa.array(offs),
        "txn_outcome": _outcome_names(np.where(m_commit[marker], 1, 2)),
        "txn_marker_offset": pa.array(m_off[marker]), "txn_marker_timestamp": times,
        "applied_offset": pa.array(m_off[marker], mask=~installed),
        "applied_timestamp": pc.if_else(pa.array(installed), times, pa.scalar(None, pa.int64()))}), still


def _outcome_names(codes: np.ndarray) -> pa.Array:
    """Outcome codes (-1: none, 0: pending, 1: committed, 2: aborted) as `txn_outcome` strings."""
    return pc.take(pa.array(["pending", "committed", "aborted"]), pa.array(codes, mask=codes < 0))


def _own(commits, txn, marker, m_off, m_commit, m_time, applied_row, at_marker) -> dict[str, pa.Array]:
    n = commits.num_rows
    decided = marker >= 0
    at = np.maximum(marker, 0)
    commit = m_commit[at] if len(m_off) else np.zeros(n, bool)
    outcome = np.where(~txn, -1, np.where(~decided, 0, np.where(commit, 1, 2)))
    marker_time = m_time.take(pa.array(at)) if len(m_off) else pa.nulls(n, pa.int64())
    applied = applied_row >= 0
    own_time = _times(commits.column("timestamp")) if n else pa.array([], pa.int64())
    applied_time = pc.if_else(pa.array(at_marker), marker_time, own_time) if n else own_time
    return {"txn_outcome": _outcome_names(outcome),
            "txn_marker_offset": pa.array(m_off[at] if len(m_off) else np.zeros(n, np.int64), mask=~decided),
            "txn_marker_timestamp": pc.if_else(pa.array(decided), marker_time, pa.scalar(None, pa.int64()))
            if n else pa.array([], pa.int64()),
            "applied_offset": pa.array(applied_row, mask=~applied),
            "applied_timestamp": pc.if_else(pa.array(applied), applied_time, pa.scalar(None, pa.int64()))
            if n else pa.array([], pa.int64())}
