"""One coordinator shard's state, and the replay of its group records in log order.

* legacy: `GroupMetadataManager.doLoadGroupsAndOffsets` + `readGroupMessageValue` / `GroupMetadata.loadGroup`
  (old coordinator, Kafka 0.11 - 3.9; spec §5.1, §5.2), and the simple group the coordinator made when it wrote an
  offset commit, which names the group history's deletions only (`GroupStore.maybe_create_simple_group`);
* modern: `CoordinatorLoaderImpl` + `GroupCoordinatorShard.replay`: `GroupMetadataManager.replay` for GroupMetadata,
  the consumer (KIP-848) / share / streams group records the emulated version knows (new
  coordinator, Kafka 3.7 - 4.x; spec §5.3, §2.9), and the simple group an offset value creates
  (`OffsetMetadataManager.replay`).

The offsets half of the replay (offset commits, transaction markers) is `offset_metadata`, column by column; the
group records are replayed here, one by one (`GroupStore`). Both change the one `ShardState` of a partition, and
neither reads what the other changes, so a window's offsets and groups are replayed side by side.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

import pyarrow as pa

from pipelines.coordinator.committed import SCHEMA, CommittedOffsets
from pipelines.coordinator.groups import GroupStore
from pipelines.coordinator.options import ReplayOptions
from schemas.decoded import (KIND_CONSUMER_GROUP, KIND_GROUP_METADATA, KIND_OFFSET_COMMIT, KIND_SHARE_GROUP,
                             KIND_STREAMS_GROUP)

Row = dict[str, Any]
SKIPPED_KINDS = ("error", "unknown")
#: The `record_kind` `decoded.loadable` gives a record the run's coordinator skips (a key type or value version it
#: does not read): every loader picks its rows by kind, so none reads it, and no filter copies every column to drop it.
KIND_NOT_LOADED = "not_loaded"
# group records of key types the run's coordinator does not know never reach it (`decoded.loadable`)
GROUP_RECORD_KINDS = frozenset({KIND_GROUP_METADATA, KIND_CONSUMER_GROUP, KIND_SHARE_GROUP, KIND_STREAMS_GROUP})


class SparseRow(dict):
    """A decoded record holding only the columns it sets (`decoded.group_rows`): a column it lacks reads None, as
    `row.get` does (`row[c]` too). A dict of every decoded column per group record or marker would cost the
    loaders more to build than to replay."""

    __slots__ = ()

    def __missing__(self, key):
        return None


@dataclass(slots=True)
class ShardState:
    """A coordinator shard as the records loaded so far left it: its groups, its committed offsets, the pending
    offsets of its open transactions (`committed.SCHEMA` rows, the producer in `producer_id`; the old loader's
    `appendedBatchOffset` beside each) and, per producer with a transaction open, the offsets of that transaction's
    records (its history rows are decided when the marker comes)."""

    partition: int
    groups: GroupStore
    offsets: CommittedOffsets
    pending: pa.Table
    modern: bool
    open_records: dict[int, list[int]] = field(default_factory=dict)

    @staticmethod
    def empty(partition: int, options: ReplayOptions, keep_history: bool = True) -> "ShardState":
        """The shard before its first record, its group rules those of `options`' coordinator."""
        groups = GroupStore(keep_history, options.simple_group_replaced_by, options.early_replays,
                            options.unique_static_members)
        return ShardState(partition, groups, CommittedOffsets(), SCHEMA.empty_table(), options.is_modern)

    @staticmethod
    def union(states: list["ShardState"]) -> "ShardState":
        """One shard from the states of its groups' buckets (`coordinator.streamed.by_group`; their saved shards
        resumed as one: `coordinator.saved.SavedShard.union`), each loaded from the start of the log with every
        marker. A group's records change only its own state, and an open transaction's offsets are keyed by group,
        so no two buckets hold the same key; a transaction's marker was read by every bucket, so a transaction
        ended in one ended in all."""
        open_records: dict[int, list[int]] = {}
        for s in states:
            for pid, offs in s.open_records.items():
                open_records.setdefault(pid, []).extend(offs)
        for offs in open_records.values():
            offs.sort()  # log order, as one load appends them
        return ShardState(states[0].partition, GroupStore.union([s.groups for s in states]),
                          CommittedOffsets.union([s.offsets for s in states]),
                          pa.concat_tables([s.pending for s in states]).combine_chunks(), states[0].modern,
                          open_records)

    # Pickled with the offsets as Arrow IPC bytes: a resumed shard's offsets never become Python objects
    def __getstate__(self):
        return (self.partition, self.groups, self.offsets.to_bytes(), CommittedOffsets(self.pending).to_bytes(),
                self.modern, self.open_records)

    def __setstate__(self, state) -> None:
        (self.partition, self.groups, offsets, pending, self.modern, self.open_records) = state
        self.offsets = CommittedOffsets.from_bytes(offsets)
        self.pending = CommittedOffsets.from_bytes(pending).table()


def replay_group_records(groups: GroupStore, rows: Iterable[Row], batch_times: Iterable[int | None] = ()) -> None:
    """The group records of `rows` (log order) replayed onto `groups` (`GroupStore.replay`: one replay per record
    type); an offset value among them creates the simple group of an id that holds none, in either semantics
    (`GroupStore.maybe_create_simple_group`). `batch_times`: each row's `decoded.with_batch_times`, for its event
    (beside the rows, not in them: a group record's row is its `record_json`)."""
    times = iter(batch_times)
    for row in rows:
        groups.batch_time = next(times, None)
        kind = row["record_kind"]
        if kind == KIND_OFFSET_COMMIT:  # `decoded.group_rows` keeps only its kind and group id: no key type
            groups.maybe_create_simple_group(row["group_id"])
        elif kind in GROUP_RECORD_KINDS:
            groups.replay(row)
