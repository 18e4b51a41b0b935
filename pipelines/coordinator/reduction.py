"""A shard's log reduced column-wise to the records its end state can depend on, before the sequential load.

Most of a `__consumer_offsets` log is plain (non-transactional) offset commits of keys committed again later, and
the coordinator keeps only the last of them. The loaders (`loader`) walk records one at a time in Python, so a
shard hands them only the records whose effect can reach the end state; the rest are dropped with Arrow kernels.
Kept, for the run's semantics:

* every record that is not an offset commit, and every transactional offset commit (legacy: the batch's
  transactional flag; modern: a producer id), so every marker resolves what it resolved in the whole log;
* per GroupTopicPartition, the last plain record and the last tombstone of any kind. A plain record sets or
  removes the committed offset whatever it held, so the last plain record overwrites what every earlier one did;
  what a marker installed in between is overwritten too. A modern tombstone also drops the key from every open
  transaction, which the last tombstone repeats for every transaction still open then, and a transaction ended
  before it has its outcome from its marker either way;
* modern, per group: the first offset value after each of the group's records (and before the first), and the
  last one. An offset value creates a simple group only where the id holds no group
  (`GroupStore.maybe_create_simple_group`), and only the group's own records change that in between.

A load that reads no transaction outcomes (`keep_outcomes=False`: a replay of a history that already holds them)
also drops a transactional offset value whose transaction ended (the marker that ends it in the loader's terms,
`loader.is_end_marker`) before a plain record of its key: whatever the marker installed, that plain record
overwrites; a value touches no other key and no other transaction (tombstones do: they are all kept). Then every
control record that ends no kept transactional record is dropped: ending an empty transaction changes nothing.

The history (`offset_commits`) is built from every record, not from this subset. `tests/coordinator/
test_reduction.py` checks the defining property on generated logs, both semantics: the loaders give the same state,
groups and group history from the subset as from the whole log; `test_saved.py` that a shard loaded from it
and saved still resumes like the whole log.
"""
from __future__ import annotations

from typing import Iterable, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipelines.coordinator.loader import END_MARKER_TYPES

PART = "offsets_partition"
KEY = [PART, "group_id", "topic", "partition"]
GROUP_KINDS = ("group_metadata", "consumer_group")


def _mark_last(keep: np.ndarray, rows: pa.Table, mask) -> None:
    """Sets `keep` at the last row (in table order) of every GroupTopicPartition among the rows `mask` selects."""
    chosen = rows.filter(mask)
    if chosen.num_rows:
        last = chosen.group_by(KEY).aggregate([("__row", "max")]).column("__row_max")
        keep[last.to_numpy()] = True


def _mark_group_values(keep: np.ndarray, table: pa.Table, is_value) -> None:
    """modern: per group, the first offset value after each of its group records (and before the first), and the
    last one. Over the values and group records in (group, table) order: a value whose predecessor in its group is
    a group record (or that has none) is a first one."""
    is_group = pc.fill_null(pc.is_in(table.column("record_kind"), pa.array(GROUP_KINDS)), False)
    relevant = pc.or_(is_value, is_group)
    index = np.flatnonzero(relevant.to_numpy(zero_copy_only=False))
    if not len(index):
        return
    value = is_value.filter(relevant).to_numpy(zero_copy_only=False)
    gid = pc.dictionary_encode(table.column("group_id").filter(relevant)).unify_dictionaries()
    codes = np.concatenate([c.indices.to_numpy(zero_copy_only=False) for c in gid.chunks]) \
        if gid.num_chunks else np.empty(0)
    codes = np.where(np.isnan(codes.astype(float)), -1, codes).astype(np.int64)  # a null id is a group too
    part = pc.fill_null(table.column(PART).filter(relevant), -1).to_numpy(zero_copy_only=False).astype(np.int64)
    group = codes * (int(part.max()) + 2) + (part + 1)
    order = np.argsort(group, kind="stable")
    g, v = group[order], value[order]
    starts = np.ones(len(g), dtype=bool)
    starts[1:] = g[1:] != g[:-1]
    after_record = np.ones(len(g), dtype=bool)
    after_record[1:] = ~v[:-1]
    first = v & (starts | after_record)
    ends = np.append(starts[1:], True)
    # the last value of each group: the group's last value row, found from its end
    last = np.zeros(len(g), dtype=bool)
    value_at = np.where(v, np.arange(len(g)), -1)
    latest = np.maximum.accumulate(value_at)  # the latest value row so far (groups are contiguous)
    segment_start = np.maximum.accumulate(np.where(starts, np.arange(len(g)), 0))
    at_end = latest[ends]
    has = at_end >= segment_start[ends]
    last[at_end[has]] = True
    keep[index[order[first | last]]] = True


def is_control(table: pa.Table) -> pa.ChunkedArray:
    """Which of `table`'s decoded rows are control records (transaction markers)."""
    return pc.fill_null(pc.equal(table.column("record_kind"), "control"), False)


def end_markers(table: pa.Table, modern: bool):
    """The control records that end their producer's transaction, as the loaders read them
    (`loader.is_end_marker`): modern, COMMIT and ABORT; the old loader, the first record of any control batch."""
    control = is_control(table)
    if modern:
        ends = pc.fill_null(pc.is_in(table.column("control_type"), pa.array(END_MARKER_TYPES)), False)
    else:
        first = table.column("batch_first_offset")
        ends = pc.fill_null(pc.or_kleene(pc.is_null(first), pc.equal(table.column("offset"), first)), False)
    return control, pc.and_(control, ends)


def _by_producer(table: pa.Table, ends, records) -> tuple[np.ndarray, ...] | None:
    """The end markers and the `records` (a mask) in (offsets partition, producer id, log) order: (row numbers,
    is-end flags, and for each, the position in that order of its producer's next end marker, or -1)."""
    either = pc.or_(ends, records)
    sub = pa.table({"p": table.column(PART).filter(either),
                    "pid": pc.fill_null(table.column("producer_id"), -1).filter(either),
                    "end": ends.filter(either),
                    "row": np.flatnonzero(either.to_numpy(zero_copy_only=False)).astype(np.int64)})
    if not sub.num_rows:
        return None
    sub = sub.take(pc.sort_indices(sub, [("p", "ascending"), ("pid", "ascending"), ("row", "ascending")]))
    p, pid, row = (sub.column(c).to_numpy() for c in ("p", "pid", "row"))
    end = sub.column("end").to_numpy(zero_copy_only=False)
    end_at = np.flatnonzero(end)
    nxt = np.full(len(sub), -1, dtype=np.int64)
    if len(end_at):
        here = np.arange(len(sub))
        cand = end_at[np.minimum(np.searchsorted(end_at, here), len(end_at) - 1)]
        same = (cand >= here) & (p[cand] == p) & (pid[cand] == pid)
        nxt[same] = cand[same]
    return row, end, nxt


def _ended_before_overwrite(table: pa.Table, rows: pa.Table, ends, values, plain) -> np.ndarray:
    """The row numbers of the transactional offset values (`values`) whose transaction's end marker comes before
    the last plain record of their GroupTopicPartition."""
    ordered = _by_producer(table, ends, values)
    if ordered is None:
        return np.empty(0, dtype=np.int64)
    row, end, nxt = ordered
    ended = ~end & (nxt >= 0)
    if not ended.any():
        return np.empty(0, dtype=np.int64)
    candidates = rows.take(pa.array(row[ended])).append_column("__marker", pa.array(row[nxt[ended]]))
    last_plain = rows.filter(plain).group_by(KEY).aggregate([("__row", "max")])
    joined = candidates.join(last_plain, keys=KEY, join_type="inner")
    overwritten = pc.greater(joined.column("__row_max"), joined.column("__marker"))
    return joined.column("__row").filter(overwritten).to_numpy()


def _drop_idle_markers(keep: np.ndarray, table: pa.Table, control, ends, txn,
                       open_producers: Mapping[int, Iterable[int]] | None = None) -> None:
    """Clears `keep` at the control records that end no kept transactional record (and at those that end none),
    but for the end markers of `open_producers` (offsets partition -> producer ids with a transaction open before
    `table`)."""
    keep[np.flatnonzero(control.to_numpy(zero_copy_only=False))] = False
    if open_producers:
        p = table.column(PART).to_numpy(zero_copy_only=False)
        pid = pc.fill_null(table.column("producer_id"), -1).to_numpy(zero_copy_only=False)
        ended = np.zeros(table.num_rows, dtype=bool)
        for part, pids in open_producers.items():
            ended |= (p == part) & np.isin(pid, np.fromiter(pids, dtype=np.int64))
        keep[ended & ends.to_numpy(zero_copy_only=False)] = True
    kept_txn = pc.and_(txn, pa.array(keep))
    ordered = _by_producer(table, ends, kept_txn)
    if ordered is None:
        return
    row, end, _ = ordered
    # a marker ends a kept record when the one before it in its producer's order is a record, not a marker
    needed = end.copy()
    needed[0] = False
    needed[1:] &= ~end[:-1]
    same = np.zeros(len(row), dtype=bool)
    p = table.column(PART).to_numpy()
    pid = pc.fill_null(table.column("producer_id"), -1).to_numpy()
    same[1:] = (p[row[1:]] == p[row[:-1]]) & (pid[row[1:]] == pid[row[:-1]])
    keep[row[needed & same]] = True


def transactional_commits(table: pa.Table, modern: bool):
    """The offset commits the loaders hold in a producer's transaction (legacy: the batch's transactional flag;
    modern: a producer id), as a mask."""
    is_commit = pc.fill_null(pc.equal(table.column("record_kind"), "offset_commit"), False)
    return pc.and_(is_commit, _is_txn(table, modern))


def _is_txn(table: pa.Table, modern: bool):
    if modern:
        return pc.not_equal(pc.fill_null(table.column("producer_id"), -1), -1)
    return pc.fill_null(table.column("is_transactional"), False)


def state_relevant_rows(table: pa.Table, modern: bool, keep_outcomes: bool = True,
                        open_producers: Mapping[int, Iterable[int]] | None = None) -> pa.Table:
    """The rows of `table` (decoded rows the shards load: no error/unknown rows, log order per offsets partition,
    up to the run's point in time) that the loaders need to reach the state the whole table gives, and, unless
    `keep_outcomes` is False, every transactional record's outcome. `open_producers` (without `keep_outcomes`; a
    window of a longer log, `streamed`): offsets partition -> the producers whose transaction the rows before
    `table` left open: their end markers in `table` are kept, whatever `table` holds of their transaction."""
    keep = state_relevant_mask(table, modern, keep_outcomes, open_producers)
    return table if keep is None else table.filter(pa.array(keep))


def state_relevant_mask(table: pa.Table, modern: bool, keep_outcomes: bool = True,
                        open_producers: Mapping[int, Iterable[int]] | None = None) -> np.ndarray | None:
    """`state_relevant_rows` as a mask over `table` (None: every row), for a caller that reads a few columns of
    the rows kept: a filter copies every column of a decoded table."""
    n = table.num_rows
    if n == 0:
        return None
    is_commit = pc.fill_null(pc.equal(table.column("record_kind"), "offset_commit"), False)
    is_txn = _is_txn(table, modern)
    plain = pc.and_(is_commit, pc.invert(is_txn))
    keep = np.asarray(pc.invert(plain).to_numpy(zero_copy_only=False), dtype=bool).copy()
    if keep.all():
        return None
    tombstone = pc.fill_null(table.column("is_tombstone"), False)
    rows = table.select(KEY).append_column("__row", pa.array(np.arange(n, dtype=np.int64)))
    if not keep_outcomes:
        control, ends = end_markers(table, modern)
        values = pc.and_(pc.and_(is_commit, is_txn), pc.invert(tombstone))
        keep[_ended_before_overwrite(table, rows, ends, values, plain)] = False
    _mark_last(keep, rows, plain)
    _mark_last(keep, rows, pc.and_(is_commit, tombstone))
    if modern:
        _mark_group_values(keep, table, pc.and_(is_commit, pc.invert(tombstone)))
    if not keep_outcomes:
        _drop_idle_markers(keep, table, control, ends, pc.and_(is_commit, is_txn), open_producers)
    return keep
