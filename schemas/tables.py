"""The data contract: one Spark StructType per output table, key columns first (matches CONTRACT.md).

Importing this module needs pyspark's type classes only; it never starts a JVM. Timestamps are UTC `timestamp`
columns, offsets `bigint`, partitions `int`. Add columns freely at the end; never change the meaning of one.
"""
from __future__ import annotations

from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)


def _f(name: str, dtype, nullable: bool = True) -> StructField:
    return StructField(name, dtype, nullable)


TOPIC_PARTITION = StructType([_f("topic", StringType()), _f("partition", IntegerType())])

_OFFSET_COLUMNS = [
    _f("snapshot_id", StringType(), False),
    _f("group_id", StringType(), False),
    _f("topic", StringType(), False),
    _f("partition", IntegerType(), False),
    _f("offsets_partition", IntegerType()),
    _f("committed_offset", LongType()),
    _f("leader_epoch", IntegerType()),  # null if none
    _f("metadata", StringType()),
    _f("commit_timestamp", TimestampType()),
    _f("expire_timestamp", TimestampType()),  # null if none
    _f("record_offset", LongType()),  # its position in __consumer_offsets
    _f("has_group_metadata", BooleanType()),
    _f("topic_id", StringType()),  # OffsetCommitValue v4 tag 0
    _f("producer_id", LongType()),  # producer that committed it (-1: plain OffsetCommit)
]

LOADED_OFFSETS = StructType(list(_OFFSET_COLUMNS))
EMPTY_GROUP_OFFSETS = StructType(list(_OFFSET_COLUMNS))

LOADED_GROUPS = StructType(
    [
        _f("snapshot_id", StringType(), False),
        _f("group_id", StringType(), False),
        _f("offsets_partition", IntegerType()),
        _f("group_type", StringType()),  # classic, consumer, share, streams
        _f("protocol_type", StringType()),  # null for simple groups
        _f("generation", IntegerType()),  # classic generation / consumer group epoch
        _f("protocol", StringType()),  # classic protocol name / consumer server assignor
        _f("leader", StringType()),
        _f("state", StringType()),  # Empty, Stable (classic); Empty, Assigning, Reconciling, Stable (consumer)
        _f("current_state_timestamp", TimestampType()),
        _f("member_count", IntegerType()),
        _f("record_offset", LongType()),  # offset of the record that last defined the group
        _f("assignment_epoch", IntegerType()),  # consumer groups
        _f("subscribed_topics", ArrayType(StringType())),  # null = unknown (unparseable subscription)
        _f("is_simple", BooleanType()),  # created for offsets only (no group record)
        _f("expected_offsets_partition", IntegerType()),  # abs(javaHashCode(group)) % n
        _f("unresolved_topic_ids", IntegerType()),  # consumer groups: topic ids with no name known
    ]
)

GROUP_MEMBERS = StructType(
    [
        _f("snapshot_id", StringType(), False),
        _f("group_id", StringType(), False),
        _f("member_id", StringType(), False),
        _f("group_instance_id", StringType()),
        _f("client_id", StringType()),
        _f("client_host", StringType()),
        _f("session_timeout_ms", IntegerType()),
        _f("rebalance_timeout_ms", IntegerType()),
        _f("subscribed_topics", ArrayType(StringType())),
        _f("assigned_partitions", ArrayType(TOPIC_PARTITION)),
        _f("group_type", StringType()),
        _f("offsets_partition", IntegerType()),
        _f("rack_id", StringType()),
        _f("subscribed_topic_regex", StringType()),
        _f("server_assignor", StringType()),
        _f("member_epoch", IntegerType()),
        _f("previous_member_epoch", IntegerType()),
        _f("member_state", StringType()),
        _f("target_partitions", ArrayType(TOPIC_PARTITION)),
        _f("partitions_pending_revocation", ArrayType(TOPIC_PARTITION)),
        _f("is_leader", BooleanType()),
    ]
)

REMOVED_GROUPS = StructType(
    [
        _f("snapshot_id", StringType(), False),
        _f("group_id", StringType(), False),
        _f("offsets_partition", IntegerType()),
        _f("tombstone_record_offset", LongType()),
        _f("tombstone_timestamp", TimestampType()),
        _f("group_type", StringType()),  # classic (type 2 tombstone) or consumer (type 3 tombstone)
    ]
)

PENDING_OFFSETS = StructType(
    [
        _f("snapshot_id", StringType(), False),
        _f("producer_id", LongType(), False),
        _f("group_id", StringType(), False),
        _f("topic", StringType(), False),
        _f("partition", IntegerType(), False),
        _f("committed_offset", LongType()),
        _f("record_offset", LongType()),
        _f("offsets_partition", IntegerType()),
        _f("producer_epoch", IntegerType()),
        _f("leader_epoch", IntegerType()),
        _f("metadata", StringType()),
        _f("commit_timestamp", TimestampType()),
    ]
)

EXPIRED_OFFSETS = StructType(
    list(_OFFSET_COLUMNS)
    + [_f("expiry_base_timestamp", TimestampType()), _f("expiry_rule", StringType())]
)

EXPIRED_GROUPS = StructType(
    [
        _f("snapshot_id", StringType(), False),
        _f("group_id", StringType(), False),
        _f("offsets_partition", IntegerType()),
        _f("reason", StringType()),
        _f("group_type", StringType()),
        _f("generation", IntegerType()),
        _f("writes_tombstone", BooleanType()),  # would the emulated coordinator write a group tombstone
    ]
)

OFFSET_COMMITS = StructType(
    [
        _f("offsets_partition", IntegerType(), False),
        _f("record_offset", LongType(), False),
        _f("group_id", StringType()),
        _f("topic", StringType()),
        _f("partition", IntegerType()),
        _f("committed_offset", LongType()),
        _f("commit_timestamp", TimestampType()),
        _f("is_tombstone", BooleanType()),
        _f("producer_id", LongType()),
        _f("txn_outcome", StringType()),  # committed, aborted, pending, null (not transactional)
        _f("leader_epoch", IntegerType()),
        _f("metadata", StringType()),
        _f("record_timestamp", TimestampType()),
        _f("snapshot_id", StringType()),  # the snapshot that first saw this record
        # what a restore plan needs to replay the record at any time (`pipelines/serving/restore_plan.py`); null in
        # a history written before they existed
        _f("expire_timestamp", TimestampType()),  # OffsetCommitValue v1
        _f("topic_id", StringType()),  # OffsetCommitValue v4 tag 0
        _f("producer_epoch", IntegerType()),
        _f("is_transactional", BooleanType()),
        _f("batch_first_offset", LongType()),  # the old loader's appendedBatchOffset
        _f("txn_marker_offset", LongType()),  # the COMMIT/ABORT marker that decided a transactional record
        _f("txn_marker_timestamp", TimestampType()),
    ]
)

QUARANTINE = StructType(
    [
        _f("snapshot_id", StringType(), False),
        _f("source", StringType()),
        _f("offsets_partition", IntegerType()),
        _f("position", LongType()),
        _f("reason", StringType()),
        _f("key_hex", StringType()),
        _f("value_hex", StringType()),
        _f("kind", StringType()),
        _f("offset", LongType()),
    ]
)

LOG_END_OFFSETS = StructType(
    [
        _f("snapshot_id", StringType(), False),
        _f("topic", StringType(), False),
        _f("partition", IntegerType(), False),
        _f("log_end_offset", LongType(), False),
        _f("source", StringType(), False),  # replication-offset-checkpoint, segment, file
        _f("observed_at", TimestampType()),  # when that source was written (file mtime); null if unknown
    ]
)

# One row per group record of the snapshot's log (key types 2-8, 16), in log order per offsets partition, with the
# group as it stands after it: a new classic generation (a GroupMetadata value: a rebalance completed, or the group
# went Empty), a consumer group's group or assignment epoch, a member joining, updated or leaving, assignments,
# deletions and tombstones that found nothing.
HISTORY_MEMBER = StructType(
    [
        _f("member_id", StringType()),
        _f("group_instance_id", StringType()),
        _f("client_id", StringType()),
        _f("client_host", StringType()),
        _f("subscribed_topics", ArrayType(StringType())),
        _f("assigned_partitions", ArrayType(TOPIC_PARTITION)),
    ]
)

GROUP_HISTORY = StructType(
    [
        _f("snapshot_id", StringType(), False),
        _f("group_id", StringType(), False),
        _f("offsets_partition", IntegerType()),
        _f("record_offset", LongType()),
        _f("record_timestamp", TimestampType()),
        _f("group_type", StringType()),  # classic, consumer
        # generation, group_epoch, assignment_epoch, member_joined, member_updated, member_left, target_assignment,
        # member_assignment, partition_metadata, regex, <one of those>_tombstone, deleted, tombstone, skipped
        _f("event", StringType()),
        _f("generation", IntegerType()),  # after the record: classic generation / consumer group epoch
        _f("assignment_epoch", IntegerType()),  # consumer groups
        _f("protocol", StringType()),  # classic protocol / the consumer group's server assignor
        _f("leader", StringType()),  # classic
        _f("state", StringType()),  # Stable or Empty (classic); Empty, Assigning, Reconciling, Stable (consumer)
        _f("member_count", IntegerType()),  # after the record
        _f("members_joined", ArrayType(StringType())),  # member ids the record added
        _f("members_left", ArrayType(StringType())),  # member ids the record removed
        # the members the record set, as they stand after it: every member of a classic generation (the record
        # replaces them all), the one member of a KIP-848 member or member-assignment record; null otherwise.
        # Folded in log order they give who was assigned a partition at any moment (`offsetlake changes`).
        _f("member_assignments", ArrayType(HISTORY_MEMBER)),
        # the group record itself (its decoded columns as JSON, raw subscription/assignment bytes left out), so a
        # restore plan replays the groups at any time; null in a history written before it existed
        _f("record_json", StringType()),
    ]
)

RUNS = StructType(
    [
        _f("snapshot_id", StringType(), False),
        _f("status", StringType()),  # running, succeeded, failed, validation_failed
        _f("started_at", TimestampType()),
        _f("finished_at", TimestampType()),
        _f("as_of", TimestampType()),
        _f("retention_minutes", LongType()),
        _f("semantics", StringType()),
        _f("inputs", ArrayType(StringType())),
        _f("records_in", LongType()),
        _f("records_out", LongType()),
        _f("records_quarantined", LongType()),
        _f("record_type_counts", MapType(StringType(), LongType())),
        _f("validation", StringType()),  # JSON summary of the validation results
        _f("summary", StringType()),  # JSON of the run summary (`rebuild --json`)
        # scheduled, or what-if (a run with --as-of/--until-*): readers default to the latest succeeded scheduled
        # snapshot; null (a row written before this column existed) reads as scheduled
        _f("kind", StringType()),
        # table -> the Delta version the run's commit of that snapshot table produced: readers read the snapshot
        # at these versions, so a rerun killed between its commits leaves them on the previous complete ones;
        # null (a row written before this column existed, or a run that committed nothing) reads the latest
        _f("table_versions", MapType(StringType(), LongType())),
    ]
)

TABLES: dict[str, StructType] = {
    "loaded_offsets": LOADED_OFFSETS,
    "empty_group_offsets": EMPTY_GROUP_OFFSETS,
    "loaded_groups": LOADED_GROUPS,
    "group_members": GROUP_MEMBERS,
    "removed_groups": REMOVED_GROUPS,
    "pending_offsets": PENDING_OFFSETS,
    "expired_offsets": EXPIRED_OFFSETS,
    "expired_groups": EXPIRED_GROUPS,
    "offset_commits": OFFSET_COMMITS,
    "quarantine": QUARANTINE,
    "log_end_offsets": LOG_END_OFFSETS,
    "group_history": GROUP_HISTORY,
    "runs": RUNS,
}

# Tables partitioned by snapshot_id (every table but the history and the run log).
SNAPSHOT_TABLES = tuple(t for t in TABLES if t not in ("offset_commits", "runs"))


def columns(table: str) -> list[str]:
    """The contract's column list of `table`, in order."""
    return [f.name for f in TABLES[table].fields]
