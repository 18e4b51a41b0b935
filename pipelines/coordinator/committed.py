"""A shard's committed offsets (`OffsetFetch`'s answer) and its open transactions' pending offsets, keyed by
`GroupTopicPartition`, as the offsets replay (`offset_metadata`) leaves them after each window.

Both are one Arrow table of `SCHEMA` rows (a pending offset's row carries its producer in `producer_id`): the replay
reads and changes them a window at a time, column by column (`lookup`, `apply`), so no offset of a shard ever
becomes a Python object. Beside each offset, what a later COMMIT marker compares with it: its
`appendedBatchOffset` (old loader; null for the new coordinator) and its `recordOffset` (`record_offset`).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipelines.io.blobs import from_plain_blob


class GroupTopicPartition(NamedTuple):
    group: str
    topic: str
    partition: int


class OffsetAndMetadata(NamedTuple):
    """A committed (or pending) offset as the coordinator holds it (`OffsetAndMetadata`, new coordinator 3.8+ with
    its `recordOffset`), plus the producer that wrote it. Timestamps are epoch ms; -1 / None where Kafka has none."""

    committed_offset: int
    leader_epoch: int | None
    metadata: str | None
    commit_timestamp: int | None
    expire_timestamp: int | None
    record_offset: int
    topic_id: str | None
    producer_id: int
    producer_epoch: int | None


KEY_FIELDS = (("group_id", pa.string()), ("topic", pa.string()), ("partition", pa.int32()))
KEY = [n for n, _ in KEY_FIELDS]
VALUE_FIELDS = (("committed_offset", pa.int64()), ("leader_epoch", pa.int32()), ("metadata", pa.string()),
                ("commit_timestamp", pa.int64()), ("expire_timestamp", pa.int64()), ("record_offset", pa.int64()),
                ("topic_id", pa.string()), ("producer_id", pa.int64()), ("producer_epoch", pa.int16()))
#: The offsets' columns: the key, `OffsetAndMetadata`'s fields in order, the batch offset.
SCHEMA = pa.schema([*KEY_FIELDS, *VALUE_FIELDS, ("appended_batch_offset", pa.int64())])
assert tuple(n for n, _ in VALUE_FIELDS) == OffsetAndMetadata._fields


class CommittedOffsets:
    """key -> `OffsetAndMetadata` (and its `appendedBatchOffset`): one table, replaced by `apply`. Tables are never
    changed in place, so a copy shares them."""

    __slots__ = ("_table",)

    def __init__(self, table: pa.Table | None = None) -> None:
        if table is not None and table.schema != SCHEMA:
            raise ValueError("committed offsets of another layout")
        self._table = table if table is not None else SCHEMA.empty_table()

    def copy(self) -> "CommittedOffsets":
        return CommittedOffsets(self._table)

    @staticmethod
    def union(stores: list["CommittedOffsets"]) -> "CommittedOffsets":
        """The offsets of `stores`, which share no key (the groups of a split partition's buckets,
        `coordinator.saved.SavedShard.union`)."""
        return CommittedOffsets(pa.concat_tables([s.table() for s in stores]).combine_chunks())

    def to_bytes(self) -> bytes:
        """The offsets as Arrow IPC (`from_bytes`): how a saved shard keeps them."""
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, SCHEMA) as writer:
            writer.write_table(self._table)
        return sink.getvalue().to_pybytes()

    @staticmethod
    def from_bytes(data: bytes) -> "CommittedOffsets":
        return CommittedOffsets(from_plain_blob(data))  # a saved shard's: read back from the warehouse

    def table(self) -> pa.Table:
        return self._table

    def __len__(self) -> int:
        return self._table.num_rows

    def lookup(self, keys: pa.Table) -> tuple[np.ndarray, pa.Table]:
        """For `keys` (the `KEY` columns, each key once): the row numbers of `keys` held here, and those rows of
        the store, in the same order."""
        if not self._table.num_rows or not keys.num_rows:
            return np.empty(0, np.int64), self._table.slice(0, 0)
        asked = keys.select(KEY).append_column("__at", pa.array(np.arange(keys.num_rows, dtype=np.int64)))
        held = self._table.select(KEY).append_column("__row", pa.array(np.arange(self._table.num_rows,
                                                                                 dtype=np.int64)))
        # the join hashes its right side: the window's few keys, not the whole store again at every window
        found = held.join(asked, keys=KEY, join_type="inner", use_threads=False)
        at = found.column("__at").to_numpy()
        order = np.argsort(at, kind="stable")
        return at[order], _taken(self._table, found.column("__row").to_numpy()[order])

    def apply(self, puts: pa.Table, deletes: pa.Table, touched_held: bool = True) -> None:
        """The offsets after a window: the keys of `deletes` (`KEY` columns) removed, `puts` (`SCHEMA`, each key
        once) put in place of whatever their keys held. `touched_held`: some key of `puts` or `deletes` may be held
        here (False: the caller knows none is, so nothing is looked for)."""
        table = self._table
        if table.num_rows and touched_held and (puts.num_rows or deletes.num_rows):
            gone = pa.concat_tables([puts.select(KEY), deletes.select(KEY).cast(pa.schema(list(KEY_FIELDS)))])
            hit = table.select(KEY).append_column("__row", pa.array(np.arange(table.num_rows, dtype=np.int64))) \
                .join(gone, keys=KEY, join_type="left semi", use_threads=False).column("__row").to_numpy()
            if len(hit):
                table = _without_rows(table, hit)
        if puts.num_rows:
            table = pa.concat_tables([table, puts.select(SCHEMA.names).cast(SCHEMA)]) if table.num_rows else \
                puts.select(SCHEMA.names).cast(SCHEMA)
        if table.num_columns and table.column(0).num_chunks > 64:
            table = table.combine_chunks()
        self._table = table

    def items(self) -> list[tuple[GroupTopicPartition, OffsetAndMetadata]]:
        """The offsets as the engine's types (tests, small tools)."""
        t = self._table
        keys = zip(*(t.column(n).to_pylist() for n, _ in KEY_FIELDS))
        values = zip(*(t.column(n).to_pylist() for n, _ in VALUE_FIELDS))
        return [(GroupTopicPartition(*k), OffsetAndMetadata(*v)) for k, v in zip(keys, values)]


def _taken(table: pa.Table, rows: np.ndarray) -> pa.Table:
    """`table.take(rows)`, batch by batch: a take from a table of many chunks joins them all first, and a store
    holds a chunk per window that put offsets since it was last made one."""
    if table.column(0).num_chunks <= 1:
        return table.take(pa.array(rows, pa.int64()))
    order = np.argsort(rows, kind="stable")
    parts = [batch.take(pa.array(at)) for batch, at in _by_batch(table, rows[order]) if len(at)]
    got = pa.Table.from_batches(parts, schema=table.schema).combine_chunks()
    back = np.empty(len(rows), np.int64)
    back[order] = np.arange(len(rows), dtype=np.int64)
    return got.take(pa.array(back))


def _without_rows(table: pa.Table, rows: np.ndarray) -> pa.Table:
    """`table` without its rows numbered `rows`, only the batches that hold one of them copied: a window puts the
    keys the windows before it put, whose rows sit in the last few batches, and a big store's other batches stay as
    they are (`CommittedOffsets.apply` makes them one again once they are many)."""
    out = []
    for batch, at in _by_batch(table, np.sort(rows)):
        if not len(at):
            out.append(batch)
            continue
        keep = np.ones(batch.num_rows, dtype=bool)
        keep[at] = False
        if keep.any():
            out.append(batch.filter(pa.array(keep)))
    return pa.Table.from_batches(out, schema=table.schema)


def _by_batch(table: pa.Table, ascending: np.ndarray):
    """Each batch of `table` with the rows of `ascending` (row numbers of `table`, sorted) that it holds, numbered
    within it."""
    start = 0
    for batch in table.to_batches():
        end = start + batch.num_rows
        lo, hi = np.searchsorted(ascending, [start, end])
        yield batch, ascending[lo:hi] - start
        start = end


def pending_by_producer(pending: pa.Table) -> dict[int, dict[GroupTopicPartition, OffsetAndMetadata]]:
    """A shard's pending offsets (`SCHEMA` rows, `producer_id` the transaction's producer) as producer -> key ->
    offset (tests, small tools)."""
    out: dict[int, dict[GroupTopicPartition, OffsetAndMetadata]] = {}
    for k, v in CommittedOffsets(pending).items():
        out.setdefault(v.producer_id, {})[k] = v
    return out


def groups_of(table: pa.Table) -> set:
    """The group ids of offsets (`SCHEMA` rows)."""
    return set(pc.unique(table.column("group_id")).to_pylist()) if table.num_rows else set()
