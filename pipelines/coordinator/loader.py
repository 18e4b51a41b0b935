"""Loading one coordinator shard (one `__consumer_offsets` partition) from its records, in log order.

* legacy: `GroupMetadataManager.doLoadGroupsAndOffsets` + `readGroupMessageValue` / `GroupMetadata.loadGroup`
  (old coordinator, Kafka 0.11 - 3.9; spec §5.1, §5.2);
* modern: `CoordinatorLoaderImpl` + `GroupCoordinatorShard.replay`: `OffsetMetadataManager.replay` /
  `replayEndTransactionMarker` and `GroupMetadataManager.replay` for GroupMetadata and the KIP-848 record types
  3-8, 16 (new coordinator, Kafka 3.8 - 4.x; spec §5.3, §2.9).

Records are the decoder's rows (`schemas/decoded.py` columns) of one partition, offset commits as `OffsetCommit`s
(`offset_commits`); error and unknown rows never reach the loaders (Kafka 3.4.1+/3.6+ skip unknown types;
quarantined rows are accounted elsewhere).
"""
from __future__ import annotations

from collections import defaultdict
from itertools import repeat
from dataclasses import dataclass, field
from typing import Any, Iterable, NamedTuple

import pyarrow as pa
import pyarrow.compute as pc

from pipelines.coordinator.committed import CommittedOffsets, GroupTopicPartition, OffsetAndMetadata
from pipelines.coordinator.groups import GroupStore
from pipelines.coordinator.options import ReplayOptions

Row = dict[str, Any]
SKIPPED_KINDS = ("error", "unknown")


class SparseRow(dict):
    """A decoded record holding only the columns its kind of record fills: a column it lacks reads None, as
    `row.get` does (`row[c]` too). A dict of every decoded column per group record or marker would cost the
    loaders more to build than to replay."""

    __slots__ = ()

    def __missing__(self, key):
        return None


class OffsetCommit(NamedTuple):
    """An offset-commit record (key type 0/1) as the loaders read it: its key, its value as the coordinator would
    hold it (None: a tombstone), the old loader's `appendedBatchOffset` (offset of the first record iterated in
    the batch, §5.1) and its producer (-1: none). Built column by column (`offset_commits`): a shard's log is
    mostly these."""

    offset: int
    key: GroupTopicPartition
    value: OffsetAndMetadata | None
    appended_batch_offset: int
    producer_id: int
    is_transactional: bool


#: What `offset_commits` reads of an offset-commit record.
OFFSET_COMMIT_READ_COLUMNS = ("offset", "is_tombstone", "producer_id", "group_id", "topic", "partition",
                              "committed_offset", "leader_epoch", "metadata", "commit_timestamp", "expire_timestamp",
                              "topic_id", "producer_epoch", "batch_first_offset", "is_transactional")


def offset_commits(table: pa.Table) -> list[OffsetCommit]:
    """The offset-commit records of decoded rows (`table`: offset commits only, in order) as the loaders read
    them."""
    def col(name: str, fill=None) -> list:
        c = table.column(name)
        return (c if fill is None else pc.fill_null(c, fill)).to_pylist()

    offset, tombstone = col("offset"), col("is_tombstone", False)
    pid = col("producer_id", -1)
    keys = map(tuple.__new__, repeat(GroupTopicPartition), zip(col("group_id"), col("topic"), col("partition")))
    values = map(tuple.__new__, repeat(OffsetAndMetadata), zip(
        col("committed_offset"), col("leader_epoch"), col("metadata"), col("commit_timestamp"),
        col("expire_timestamp"), offset, col("topic_id"), pid, col("producer_epoch")))
    first = pc.coalesce(table.column("batch_first_offset"), table.column("offset")).to_pylist()
    return list(map(tuple.__new__, repeat(OffsetCommit), zip(
        offset, keys, (None if t else v for t, v in zip(tombstone, values)), first, pid,
        col("is_transactional", False))))


#: What the loaders read of a control record (`producer_id`, `is_first_record_of_batch`, `is_end_marker`, `_decide`):
#: a log's markers are many, and a row of every column they fill cost more to build than to replay.
CONTROL_READ_COLUMNS = ("record_kind", "offset", "batch_first_offset", "producer_id", "control_type", "timestamp")


def producer_id(row: Row) -> int:
    return -1 if row.get("producer_id") is None else row["producer_id"]


def is_first_record_of_batch(row: Row) -> bool:
    return row.get("batch_first_offset") is None or row["offset"] == row["batch_first_offset"]


#: the control types that end a transaction in the new coordinator (`replayEndTransactionMarker`)
END_MARKER_TYPES = ("COMMIT", "ABORT")


def is_end_marker(row: Row, modern: bool) -> bool:
    """A control record that ends its producer's transaction: modern reads every control record and only COMMIT /
    ABORT end one; the old loader reads the first record of a control batch, whatever its type."""
    if modern:
        return row.get("control_type") in END_MARKER_TYPES
    return is_first_record_of_batch(row)


@dataclass(slots=True)
class ShardState:
    """A coordinator shard after loading: its groups, the committed offsets, the open transactions' pending offsets,
    and for the history the outcome of every transactional offset-commit record it loaded. What else the loader
    holds to go on loading later records (`resume`): the offsets of each open transaction's records, and (old
    loader) each offset's `appendedBatchOffset`."""

    partition: int
    groups: GroupStore
    offsets: CommittedOffsets  # with each one's appendedBatchOffset (old loader)
    pending: dict[int, dict[GroupTopicPartition, OffsetAndMetadata]]  # producer id -> open transaction's offsets
    outcomes: dict[int, str]  # record offset -> committed / aborted / pending, transactional records only
    modern: bool
    open_records: dict[int, list[int]] = field(default_factory=dict)  # producer id -> its open records' offsets
    pending_batch_offsets: dict[int, dict[GroupTopicPartition, int]] = field(default_factory=dict)  # of `pending`
    # record offset -> (offset, timestamp) of the marker that decided it, like `outcomes` of the loaded records only:
    # the history keeps when a transaction's commit took effect, so a restore plan can replay it at any time
    decided_by: dict[int, tuple[int, int | None]] = field(default_factory=dict)

    @staticmethod
    def union(states: list["ShardState"]) -> "ShardState":
        """One shard from the states of its groups' buckets (`coordinator.streamed.by_group`; their saved shards
        resumed as one: `coordinator.saved.SavedShard.union`), each loaded from the start of the log with the
        markers of its own records' producers. A group's records change only its own state, and an open
        transaction's offsets are keyed by group, so no two buckets hold the same key; a transaction's marker was
        read by every bucket holding its records, so a transaction ended in one ended in all."""
        pending: dict[int, dict] = {}
        batches: dict[int, dict] = {}
        open_records: dict[int, list[int]] = {}
        outcomes: dict[int, str] = {}
        decided_by: dict[int, tuple[int, int | None]] = {}
        for s in states:
            for pid, txn in s.pending.items():
                pending.setdefault(pid, {}).update(txn)
            for pid, txn in s.pending_batch_offsets.items():
                batches.setdefault(pid, {}).update(txn)
            for pid, offs in s.open_records.items():
                open_records.setdefault(pid, []).extend(offs)
            outcomes.update(s.outcomes)
            decided_by.update(s.decided_by)
        for offs in open_records.values():
            offs.sort()  # log order, as one load appends them
        return ShardState(states[0].partition, GroupStore.union([s.groups for s in states]),
                          CommittedOffsets.union([s.offsets for s in states]), pending, outcomes, states[0].modern,
                          open_records, batches, decided_by)

    # Pickled with the committed offsets as Arrow IPC bytes (`CommittedOffsets.table`: the next run resumes them
    # as its base without a Python object per offset) and the pending ones as plain tuples, rebuilt by
    # `tuple.__new__` (a named tuple pickles through a Python call of its own).
    def __getstate__(self):
        pending = {pid: (list(map(tuple, txn)), list(map(tuple, txn.values())),
                         [self.pending_batch_offsets[pid][k] for k in txn] if self.pending_batch_offsets else None)
                   for pid, txn in self.pending.items()}
        return (self.partition, self.groups, self.offsets.to_bytes(), pending, self.outcomes, self.modern,
                self.open_records)

    def __setstate__(self, state) -> None:
        (self.partition, self.groups, offsets, pending, self.outcomes, self.modern, self.open_records) = state
        self.offsets = CommittedOffsets.from_bytes(offsets)
        self.pending, self.pending_batch_offsets, self.decided_by = {}, {}, {}
        for pid, (txn_keys, txn_values, txn_batches) in pending.items():
            txn_keys = list(map(tuple.__new__, repeat(GroupTopicPartition), txn_keys))
            self.pending[pid] = dict(zip(txn_keys, map(tuple.__new__, repeat(OffsetAndMetadata), txn_values)))
            if txn_batches is not None:
                self.pending_batch_offsets[pid] = dict(zip(txn_keys, txn_batches))


def _kind(row: Row) -> str:
    kind = row["record_kind"]
    if kind == "offset_commit":  # only as an `OffsetCommit`: a dict of one would be read as nothing at all
        raise TypeError("an offset-commit record reaches the loaders as an OffsetCommit (`offset_commits`)")
    return kind


def _replay_group_record(groups: GroupStore, kind: str, row: Row) -> None:
    if kind == "group_metadata":
        groups.replay_group_metadata(row)
    elif kind == "consumer_group":
        groups.replay_consumer_group_record(row)


def _decide(offsets: list[int], outcome: str, marker: Row, outcomes: dict[int, str],
            decided_by: dict[int, tuple[int, int | None]]) -> None:
    """The records of a transaction an end marker closed: their outcome, and the marker that gave it."""
    at = (marker["offset"], marker.get("timestamp"))
    for off in offsets:
        outcomes[off] = outcome
        decided_by[off] = at


def _still_pending(open_rows: dict[int, list[int]], outcomes: dict[int, str]) -> None:
    """The records of transactions no marker ended by the log's end."""
    for offs in open_rows.values():
        for off in offs:
            outcomes[off] = "pending"


def do_load_groups_and_offsets(partition: int, rows: Iterable[Row], resume: ShardState | None = None,
                               keep_history: bool = True, continued: bool = False) -> ShardState:
    """`GroupMetadataManager.doLoadGroupsAndOffsets` (old coordinator, Kafka 0.11 - 3.9), one partition, log order.

    Offsets are kept with their `appendedBatchOffset` (first record iterated in the batch); a control batch
    (only its first record is read) ends the producer's pending map, installing it on COMMIT where the key is
    absent or the existing entry's batch is older. `resume`: the shard as loading the records before `rows` left
    it (its `outcomes` are of `rows` only). `continued`: `resume` is this load's own previous window, carried on in
    place (its offsets, open transactions and groups, with their history events, are not copied).
    """
    groups, open_rows = _resumed(resume, keep_history, continued)
    # each pending offset's appendedBatchOffset beside it, keyed alike
    if resume is None:
        offsets = CommittedOffsets()
        pending: dict[int, dict[GroupTopicPartition, OffsetAndMetadata]] = {}
        pending_batch_offsets: dict[int, dict[GroupTopicPartition, int]] = {}
    elif continued:
        offsets, pending, pending_batch_offsets = resume.offsets, resume.pending, resume.pending_batch_offsets
    else:
        offsets = resume.offsets.copy()
        pending = {pid: dict(txn) for pid, txn in resume.pending.items()}
        pending_batch_offsets = {pid: dict(resume.pending_batch_offsets[pid]) for pid in resume.pending}
    outcomes: dict[int, str] = {}
    decided_by: dict[int, tuple[int, int | None]] = {}
    for row in rows:
        if type(row) is OffsetCommit:
            k, abo = row.key, row.appended_batch_offset
            if row.is_transactional:
                pid = row.producer_id
                txn = pending.setdefault(pid, {})
                txn_batches = pending_batch_offsets.setdefault(pid, {})
                open_rows[pid].append(row.offset)
                if row.value is None:
                    txn.pop(k, None)
                    txn_batches.pop(k, None)
                else:
                    txn[k], txn_batches[k] = row.value, abo
            elif row.value is None:
                offsets.delete(k)
            else:
                offsets.put(k, row.value, abo)
            continue
        kind = _kind(row)
        if kind == "control":
            if not is_first_record_of_batch(row):
                continue
            pid = producer_id(row)
            committed = row.get("control_type") == "COMMIT"
            if committed:
                txn_batches = pending_batch_offsets.get(pid, {})
                for k, o in pending.get(pid, {}).items():
                    abo = txn_batches[k]
                    current = offsets.batch_offset(k)
                    if current is None or current < abo:
                        offsets.put(k, o, abo)
            pending.pop(pid, None)  # COMMIT, ABORT or any other control type
            pending_batch_offsets.pop(pid, None)
            _decide(open_rows.pop(pid, []), "committed" if committed else "aborted", row, outcomes, decided_by)
        else:
            _replay_group_record(groups, kind, row)
    _still_pending(open_rows, outcomes)
    return ShardState(partition, groups, offsets, pending, outcomes, modern=False, open_records=dict(open_rows),
                      pending_batch_offsets=pending_batch_offsets, decided_by=decided_by)


def _resumed(resume: ShardState | None, keep_history: bool = True,
             continued: bool = False) -> tuple[GroupStore, defaultdict]:
    """The groups and the open transactions' records a load starts from: none, or those `resume` left (`continued`:
    the very objects, the groups' history events kept)."""
    if resume is None:
        return GroupStore(keep_history), defaultdict(list)
    if continued:
        return resume.groups, defaultdict(list, resume.open_records)
    return resume.groups.resumed(), defaultdict(list, {pid: list(o) for pid, o in resume.open_records.items()})


def replay(partition: int, rows: Iterable[Row], resume: ShardState | None = None,
           keep_history: bool = True, continued: bool = False) -> ShardState:
    """`CoordinatorLoaderImpl` + `GroupCoordinatorShard.replay` (new coordinator, Kafka 3.8 - 4.x), one partition.

    `OffsetMetadataManager.replay`: transactional = producerId != -1; any tombstone deletes the committed offset
    and drops the partition from every open transaction. `replayEndTransactionMarker`: COMMIT installs a pending
    offset only if its record offset is greater than the committed one's; ABORT discards. Control records other
    than COMMIT/ABORT are ignored. `resume`: as `do_load_groups_and_offsets`.
    """
    groups, open_rows = _resumed(resume, keep_history, continued)
    offsets = CommittedOffsets() if resume is None else resume.offsets if continued else resume.offsets.copy()
    pending: dict[int, dict[GroupTopicPartition, OffsetAndMetadata]] = (
        {} if resume is None else resume.pending if continued else
        {pid: dict(txn) for pid, txn in resume.pending.items()})
    outcomes: dict[int, str] = {}
    decided_by: dict[int, tuple[int, int | None]] = {}
    for row in rows:
        if type(row) is OffsetCommit:
            k, pid = row.key, row.producer_id
            if pid != -1:
                open_rows[pid].append(row.offset)
            if row.value is None:
                offsets.delete(k)
                for txn in pending.values():
                    txn.pop(k, None)
            else:
                groups.maybe_create_simple_group(k.group)
                if pid == -1:
                    offsets.put(k, row.value)
                else:
                    pending.setdefault(pid, {})[k] = row.value
            continue
        kind = _kind(row)
        if kind == "control":
            ctype = row.get("control_type")
            if ctype not in END_MARKER_TYPES:
                continue
            pid = producer_id(row)
            txn = pending.pop(pid, None)
            if ctype == "COMMIT" and txn:
                for k, o in txn.items():
                    current = offsets.record_offset(k)
                    if current is None or o.record_offset > current:
                        offsets.put(k, o)
            _decide(open_rows.pop(pid, []), "committed" if ctype == "COMMIT" else "aborted", row, outcomes, decided_by)
        else:
            _replay_group_record(groups, kind, row)
    _still_pending(open_rows, outcomes)
    return ShardState(partition, groups, offsets, pending, outcomes, modern=True, open_records=dict(open_rows),
                      decided_by=decided_by)


def load_shard(partition: int, rows: Iterable[Row], options: ReplayOptions,
               resume: ShardState | None = None, keep_history: bool = True, continued: bool = False) -> ShardState:
    """The shard after loading `rows` (log order, no error/unknown rows, up to the run's point in time) with the
    run's coordinator generation; `resume`: the shard as the records before `rows` left it (the previous run's,
    `coordinator.saved`), loaded on as Kafka's coordinator goes on replaying what is appended; `continued`: the
    shard as this load's previous window left it, carried on in place (`coordinator.window`)."""
    load = replay if options.is_modern else do_load_groups_and_offsets
    return load(partition, rows, resume, keep_history, continued)
