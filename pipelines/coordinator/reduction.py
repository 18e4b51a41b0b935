"""A shard's log reduced column-wise to the records a later step can depend on.

The offsets half of a replay runs column by column over whole windows (`offset_metadata`), and only the group
records go through the Python loaders (`loader`), one at a time. Three reductions, each a mask over decoded rows:

* `loader_mask`: what the Python loaders read: every group record and, per group, the first offset value after each
  of the group's records (and before the first) and the last one. An offset value creates a simple group only where
  the id holds no group (`GroupStore.maybe_create_simple_group`), and only the group's own records change that in
  between.
* `split_mask`: what a range of a split partition hands on to its partition's load (`frames.ranges`), which replays
  the offsets of every range one after another without the rows of a plain value most of them hold: the loader's
  rows, every control record, every transactional offset commit and every tombstone, and per GroupTopicPartition the
  first plain value after each of its other offset commits (and before the first) and its last plain value. A
  decision reads only whether the key holds an offset and whether one newer than a pending value landed since it
  (`offset_metadata`): the first plain value after each of the key's other records says both, and the last one is
  what the key holds at the end. So the load decides every record it reads as the whole log would, and ends in the
  same state; the plain values it never reads took effect where they stand.
* `state_only_mask`: what a load that decides nothing needs to reach the end state (a restore plan's replay of a
  history that holds the decisions): per key, the last plain record and the last tombstone; every transactional
  record but a value whose transaction ended before a later plain record of its key (that record overwrites whatever
  the marker installed; a value touches no other key and no other transaction, tombstones do: they are all kept);
  the end markers of the transactional records kept; the group records, and for the new coordinator the offset
  values `loader_mask` reads (its simple groups are state; the old loader's come from the offsets it ends with,
  `tables.shard_rows`, and the ones a legacy replay tracks only name the group history's deletions).

`tests/coordinator/test_reduction.py` checks each defining property on generated logs, both semantics.
"""
from __future__ import annotations

from typing import Iterable, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipelines.coordinator.loader import KIND_NOT_LOADED
from pipelines.coordinator.offset_metadata import (end_markers, group_codes, is_offset_commit, is_transactional,
                                                   key_codes, plain_values, stable_order)

PART = "offsets_partition"
KEY = [PART, "group_id", "topic", "partition"]
GROUP_KINDS = ("group_metadata", "consumer_group", "share_group", "streams_group")


def _mark_last(keep: np.ndarray, rows: pa.Table, mask) -> None:
    """Sets `keep` at the last row (in table order) of every GroupTopicPartition among the rows `mask` selects."""
    chosen = rows.filter(mask)
    if chosen.num_rows:
        last = chosen.group_by(KEY).aggregate([("__row", "max")]).column("__row_max")
        keep[last.to_numpy()] = True


def _mark_group_values(keep: np.ndarray, table: pa.Table, is_value, groups: np.ndarray | None = None) -> None:
    """Per group, the first offset value after each of its group records (and before the first), and the last
    one. Over the values and group records in (group, table) order: a value whose predecessor in its group is
    a group record (or that has none) is a first one. `groups`: the rows' `group_codes`, when found already."""
    is_group = pc.fill_null(pc.is_in(table.column("record_kind"), pa.array(GROUP_KINDS)), False)
    relevant = pc.or_(is_value, is_group)
    index = np.flatnonzero(relevant.to_numpy(zero_copy_only=False))
    if not len(index):
        return
    value = is_value.filter(relevant).to_numpy(zero_copy_only=False)
    group = group_codes(table.select([PART, "group_id"]).filter(relevant)) if groups is None else groups[index]
    order = stable_order(group)
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


def _commit_masks(table: pa.Table, modern: bool):
    is_commit = is_offset_commit(table)
    is_txn = is_transactional(table, modern)
    plain = pc.and_(is_commit, pc.invert(is_txn))
    tombstone = pc.fill_null(table.column("is_tombstone"), False)
    return is_commit, is_txn, plain, tombstone


def loader_mask(table: pa.Table, groups: np.ndarray | None = None) -> np.ndarray:
    """The rows the Python loaders read (`loader.replay_group_records`), as a mask over `table` (decoded rows of one
    or more offsets partitions, each in log order; `groups`: their `group_codes`, when found already). The same in
    either semantics: an offset value creates a simple group in both (`GroupStore.maybe_create_simple_group`)."""
    keep = pc.fill_null(pc.is_in(table.column("record_kind"), pa.array(GROUP_KINDS)), False) \
        .to_numpy(zero_copy_only=False).copy()
    if table.num_rows:
        values = pc.and_(is_offset_commit(table), pc.invert(pc.fill_null(table.column("is_tombstone"), False)))
        _mark_group_values(keep, table, values, groups)
    return keep


def _not_loaded(table: pa.Table) -> np.ndarray:
    """The rows no loader reads (`loader.KIND_NOT_LOADED`): a reduction keeps none of them."""
    return pc.fill_null(pc.equal(table.column("record_kind"), KIND_NOT_LOADED), False).to_numpy(zero_copy_only=False)


def split_mask(table: pa.Table, modern: bool) -> np.ndarray | None:
    """What a range of a split partition hands on to its partition's load (see the module's docstring), as a mask
    over `table` (None: every row)."""
    n = table.num_rows
    if n == 0:
        return None
    is_commit, _, plain, tombstone = _commit_masks(table, modern)
    value = plain_values(table, modern).to_numpy(zero_copy_only=False)
    keep = ~(value | _not_loaded(table))
    if keep.all():
        return None
    commit_at = np.flatnonzero(is_commit.to_numpy(zero_copy_only=False))
    # every row's key, then the commits': a take of string columns over the many chunks of the windows a range
    # holds cost more than coding the rows it leaves out
    groups = group_codes(table)
    key = key_codes(table, groups=groups)[commit_at]
    order = stable_order(key)  # a key's commits in log order
    k, v = key[order], value[commit_at][order]
    after_other = np.ones(len(order), bool)  # the key's first commit, or one after the key's other record
    after_other[1:] = (k[1:] != k[:-1]) | ~v[:-1]
    last = np.zeros(len(order), bool)  # the key's last plain value
    at = np.flatnonzero(v)
    if len(at):
        ends = np.ones(len(at), bool)
        ends[:-1] = k[at][1:] != k[at][:-1]
        last[at[ends]] = True
    keep[commit_at[order[v & (after_other | last)]]] = True
    keep |= loader_mask(table, groups)
    return None if keep.all() else keep


def state_only_rows(table: pa.Table, modern: bool,
                    open_producers: Mapping[int, Iterable[int]] | None = None) -> pa.Table:
    """`state_only_mask`'s rows of `table`."""
    keep = state_only_mask(table, modern, open_producers)
    return table if keep is None else table.filter(pa.array(keep))


def state_only_mask(table: pa.Table, modern: bool,
                    open_producers: Mapping[int, Iterable[int]] | None = None) -> np.ndarray | None:
    """The rows of `table` (decoded rows: no error/unknown rows, log order per offsets partition, up to the run's
    point in time) a load needs to reach the state the whole table gives (see the module's docstring), as a mask
    (None: every row). `open_producers` (a window of a longer log): offsets partition -> the producers whose
    transaction the rows before `table` left open: their end markers in `table` are kept."""
    n = table.num_rows
    if n == 0:
        return None
    is_commit, is_txn, plain, tombstone = _commit_masks(table, modern)
    keep = ~(plain.to_numpy(zero_copy_only=False) | _not_loaded(table))
    if keep.all():
        return None
    rows = table.select(KEY).append_column("__row", pa.array(np.arange(n, dtype=np.int64)))
    control, ends = end_markers(table, modern)
    values = pc.and_(pc.and_(is_commit, is_txn), pc.invert(tombstone))
    keep[_ended_before_overwrite(table, rows, ends, values, plain)] = False
    _mark_last(keep, rows, plain)
    _mark_last(keep, rows, pc.and_(is_commit, tombstone))
    if modern:
        _mark_group_values(keep, table, pc.and_(is_commit, pc.invert(tombstone)))
    _drop_idle_markers(keep, table, control, ends, pc.and_(is_commit, is_txn), open_producers)
    return keep
