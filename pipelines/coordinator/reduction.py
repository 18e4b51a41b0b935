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

The history (`offset_commits`) is built from every record, not from this subset. `tests/coordinator/
test_reduction.py` checks the defining property on generated logs, both semantics: the loaders give the same state,
groups and group history from the subset as from the whole log; `test_saved.py` that a shard loaded from it
and saved still resumes like the whole log.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

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
    last one (a sequential pass over three columns of the values and group records only)."""
    is_group = pc.fill_null(pc.is_in(table.column("record_kind"), pa.array(GROUP_KINDS)), False)
    relevant = pc.or_(is_value, is_group)
    index = np.flatnonzero(relevant.to_numpy(zero_copy_only=False))
    sub = table.filter(relevant).select([PART, "group_id"])
    values = is_value.filter(relevant).to_pylist()
    seen: set = set()
    last: dict = {}
    for i, part, gid, value in zip(index, sub.column(PART).to_pylist(), sub.column("group_id").to_pylist(), values):
        g = (part, gid)
        if value:
            last[g] = i
            if g not in seen:
                seen.add(g)
                keep[i] = True
        else:
            seen.discard(g)
    if last:
        keep[np.fromiter(last.values(), dtype=np.int64)] = True


def state_relevant_rows(table: pa.Table, modern: bool) -> pa.Table:
    """The rows of `table` (decoded rows the shards load: no error/unknown rows, log order per offsets partition,
    up to the run's point in time) that the loaders need to reach the state the whole table gives."""
    n = table.num_rows
    if n == 0:
        return table
    is_commit = pc.fill_null(pc.equal(table.column("record_kind"), "offset_commit"), False)
    if modern:
        is_txn = pc.not_equal(pc.fill_null(table.column("producer_id"), -1), -1)
    else:
        is_txn = pc.fill_null(table.column("is_transactional"), False)
    plain = pc.and_(is_commit, pc.invert(is_txn))
    keep = np.asarray(pc.invert(plain).to_numpy(zero_copy_only=False), dtype=bool).copy()
    if keep.all():
        return table
    tombstone = pc.fill_null(table.column("is_tombstone"), False)
    rows = table.select(KEY).append_column("__row", pa.array(np.arange(n, dtype=np.int64)))
    _mark_last(keep, rows, plain)
    _mark_last(keep, rows, pc.and_(is_commit, tombstone))
    if modern:
        _mark_group_values(keep, table, pc.and_(is_commit, pc.invert(tombstone)))
    return table.filter(pa.array(keep))
