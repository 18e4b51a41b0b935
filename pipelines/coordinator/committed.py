"""A shard's committed offsets (`OffsetFetch`'s answer), keyed by `GroupTopicPartition`, as the loaders write them.

A resumed shard holds every offset committed in its partition so far, and a run's new records touch a fraction of
them. The others stay in the Arrow table the previous run saved (the base) and never become Python objects: only
what the loaders put or delete since lives in a dict over it (`put`, `delete`; a deleted offset is None there).
`table` gives the live offsets back as Arrow: the base rows nothing changed, in their order, then the changed
ones in the order they were first changed. A shard loaded from the start of its log has no base.

A COMMIT marker compares what it installs with the offset in place: its `appendedBatchOffset` (old loader, kept
beside each offset: `batch_offset`; null in the table for the new coordinator) or its `recordOffset` (new
coordinator: `record_offset`). Such a lookup in the base indexes the base's keys once.
"""
from __future__ import annotations

from itertools import repeat
from typing import NamedTuple

import numpy as np
import pyarrow as pa


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
VALUE_FIELDS = (("committed_offset", pa.int64()), ("leader_epoch", pa.int32()), ("metadata", pa.string()),
                ("commit_timestamp", pa.int64()), ("expire_timestamp", pa.int64()), ("record_offset", pa.int64()),
                ("topic_id", pa.string()), ("producer_id", pa.int64()), ("producer_epoch", pa.int16()))
#: The live offsets' columns: the key, `OffsetAndMetadata`'s fields in order, the batch offset.
SCHEMA = pa.schema([*KEY_FIELDS, *VALUE_FIELDS, ("appended_batch_offset", pa.int64())])
_KEY_TYPE = pa.struct(list(KEY_FIELDS))
_VALUE_TYPE = pa.struct(list(VALUE_FIELDS))
assert tuple(n for n, _ in VALUE_FIELDS) == OffsetAndMetadata._fields


class CommittedOffsets:
    """key -> `OffsetAndMetadata` (and its `appendedBatchOffset`): a base table and the changes since."""

    __slots__ = ("_base", "_keys", "_columns", "_changed", "_batches", "_table")

    def __init__(self, base: pa.Table | None = None) -> None:
        if base is not None and base.schema != SCHEMA:
            raise ValueError("committed offsets of another layout")
        self._base = base if base is not None and base.num_rows else None
        self._keys: dict[GroupTopicPartition, int] | None = None  # base key -> row, built at the first lookup
        self._columns: dict[str, list] = {}  # base columns read by lookups, as Python values
        self._changed: dict[GroupTopicPartition, OffsetAndMetadata | None] = {}
        self._batches: dict[GroupTopicPartition, int] = {}
        self._table: pa.Table | None = None  # `table`, until the next change

    def copy(self) -> "CommittedOffsets":
        """The same offsets, changed on their own from now on (the base is shared: nothing writes it)."""
        out = CommittedOffsets()
        out._base, out._keys, out._columns, out._table = self._base, self._keys, self._columns, self._table
        out._changed, out._batches = dict(self._changed), dict(self._batches)
        return out

    @staticmethod
    def union(stores: list["CommittedOffsets"]) -> "CommittedOffsets":
        """The offsets of `stores`, which share no key (the groups of a split partition's buckets,
        `coordinator.saved.SavedShard.union`), as the base of a store."""
        return CommittedOffsets(pa.concat_tables([s.table() for s in stores]))

    def to_bytes(self) -> bytes:
        """The live offsets as Arrow IPC (`from_bytes`): how a saved shard keeps them."""
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, SCHEMA) as writer:
            writer.write_table(self.table())
        return sink.getvalue().to_pybytes()

    @staticmethod
    def from_bytes(data: bytes) -> "CommittedOffsets":
        """`to_bytes`' offsets, as the base of a store."""
        return CommittedOffsets(pa.ipc.open_stream(data).read_all())

    def put(self, key: GroupTopicPartition, value: OffsetAndMetadata, batch_offset: int | None = None) -> None:
        self._changed[key] = value
        if batch_offset is not None:
            self._batches[key] = batch_offset
        self._table = None

    def delete(self, key: GroupTopicPartition) -> None:
        if self._base is None:  # nothing to hide: a log's deleted offsets are not kept
            self._changed.pop(key, None)
        else:
            self._changed[key] = None
        self._batches.pop(key, None)
        self._table = None

    def record_offset(self, key: GroupTopicPartition) -> int | None:
        """The offset's `recordOffset` (the new coordinator's COMMIT marker compares it); None: no such offset."""
        if key in self._changed:
            value = self._changed[key]
            return None if value is None else value.record_offset
        i = self._base_index(key)
        return None if i is None else self._base_column("record_offset")[i]

    def batch_offset(self, key: GroupTopicPartition) -> int | None:
        """The offset's `appendedBatchOffset` (old loader); None when there is no such offset."""
        if key in self._changed:
            return None if self._changed[key] is None else self._batches.get(key)
        i = self._base_index(key)
        return None if i is None else self._base_column("appended_batch_offset")[i]

    def _base_index(self, key: GroupTopicPartition) -> int | None:
        if self._base is None:
            return None
        if self._keys is None:
            columns = [self._base.column(n).to_pylist() for n, _ in KEY_FIELDS]
            self._keys = dict(zip(map(tuple.__new__, repeat(GroupTopicPartition), zip(*columns)),
                                  range(self._base.num_rows)))
        return self._keys.get(key)

    def _base_column(self, name: str) -> list:
        if name not in self._columns:
            self._columns[name] = self._base.column(name).to_pylist()
        return self._columns[name]

    def __len__(self) -> int:
        return self.table().num_rows

    def table(self) -> pa.Table:
        """The live offsets (`SCHEMA`): the base rows nothing changed, then the changed ones."""
        if self._table is not None:
            return self._table
        parts = []
        if self._base is not None:
            base = self._base
            if self._changed:
                self._base_index(next(iter(self._changed)))  # builds the index
                shadowed = np.zeros(base.num_rows, bool)
                at = [i for i in map(self._keys.get, self._changed) if i is not None]
                shadowed[at] = True
                base = base.filter(pa.array(~shadowed))
            parts.append(base)
        live = [(k, v) for k, v in self._changed.items() if v is not None]
        if live:
            keys = pa.array([k for k, _ in live], _KEY_TYPE).flatten()
            values = pa.array([v for _, v in live], _VALUE_TYPE).flatten()
            batches = pa.array([self._batches.get(k) for k, _ in live], pa.int64())
            parts.append(pa.Table.from_arrays([*keys, *values, batches], schema=SCHEMA))
        self._table = (pa.concat_tables(parts) if len(parts) > 1 else parts[0]) if parts else SCHEMA.empty_table()
        return self._table

    def items(self) -> list[tuple[GroupTopicPartition, OffsetAndMetadata]]:
        """The live offsets as the engine's types (tests, small tools)."""
        t = self.table()
        keys = zip(*(t.column(n).to_pylist() for n, _ in KEY_FIELDS))
        values = zip(*(t.column(n).to_pylist() for n, _ in VALUE_FIELDS))
        return [(GroupTopicPartition(*k), OffsetAndMetadata(*v)) for k, v in zip(keys, values)]
