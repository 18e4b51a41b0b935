"""The data contract: one Arrow schema per output table, key columns first (matches CONTRACT.md).

Arrow at the core, no pyspark: Spark's types are derived from these where a DataFrame needs them
(`pipelines.io.delta.spark_schema`), and Delta's from them too. Timestamps are UTC `timestamp[us]` columns (Spark's
`timestamp`), offsets `int64` (`bigint`), partitions `int32` (`int`). Add columns freely at the end; never change the
meaning of one.
"""
from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

STRING, INT, LONG, BOOLEAN, DOUBLE = pa.string(), pa.int32(), pa.int64(), pa.bool_(), pa.float64()
TIMESTAMP = pa.timestamp("us", tz="UTC")


def _f(name: str, dtype: pa.DataType, nullable: bool = True) -> pa.Field:
    return pa.field(name, dtype, nullable)


def _list(dtype: pa.DataType) -> pa.DataType:
    # Parquet's name for a list's element, the one Spark writes and reads back
    return pa.list_(pa.field("element", dtype))


TOPIC_PARTITION = pa.struct([_f("topic", STRING), _f("partition", INT)])

_OFFSET_COLUMNS = [
    _f("snapshot_id", STRING, False),
    _f("group_id", STRING, False),
    _f("topic", STRING, False),
    _f("partition", INT, False),
    _f("offsets_partition", INT),
    _f("committed_offset", LONG),
    _f("leader_epoch", INT),  # null if none
    _f("metadata", STRING),
    _f("commit_timestamp", TIMESTAMP),
    _f("expire_timestamp", TIMESTAMP),  # null if none
    _f("record_offset", LONG),  # its position in __consumer_offsets
    _f("has_group_metadata", BOOLEAN),
    _f("topic_id", STRING),  # OffsetCommitValue v4 tag 0
    _f("producer_id", LONG),  # producer that committed it (-1: plain OffsetCommit)
]

LOADED_OFFSETS = pa.schema(list(_OFFSET_COLUMNS))
EMPTY_GROUP_OFFSETS = pa.schema(list(_OFFSET_COLUMNS))

LOADED_GROUPS = pa.schema(
    [
        _f("snapshot_id", STRING, False),
        _f("group_id", STRING, False),
        _f("offsets_partition", INT),
        _f("group_type", STRING),  # classic, consumer, share, streams
        _f("protocol_type", STRING),  # null for simple groups
        _f("generation", INT),  # classic generation / consumer group epoch
        _f("protocol", STRING),  # classic protocol name / consumer server assignor
        _f("leader", STRING),
        _f("state", STRING),  # Empty, Stable (classic, share); Empty, Assigning, Reconciling, Stable (consumer;
        # streams also NotReady)
        _f("current_state_timestamp", TIMESTAMP),
        _f("member_count", INT),
        _f("record_offset", LONG),  # offset of the record that last defined the group
        _f("assignment_epoch", INT),  # consumer groups
        # null = unknown (unparseable subscription); a streams group's: its topology's source topics (null: none)
        _f("subscribed_topics", _list(STRING)),
        _f("is_simple", BOOLEAN),  # created for offsets only (no group record)
        _f("expected_offsets_partition", INT),  # abs(javaHashCode(group)) % n
        _f("unresolved_topic_ids", INT),  # consumer groups: topic ids with no name known
    ]
)

GROUP_MEMBERS = pa.schema(
    [
        _f("snapshot_id", STRING, False),
        _f("group_id", STRING, False),
        _f("member_id", STRING, False),
        _f("group_instance_id", STRING),
        _f("client_id", STRING),
        _f("client_host", STRING),
        _f("session_timeout_ms", INT),
        _f("rebalance_timeout_ms", INT),
        _f("subscribed_topics", _list(STRING)),
        _f("assigned_partitions", _list(TOPIC_PARTITION)),
        _f("group_type", STRING),
        _f("offsets_partition", INT),
        _f("rack_id", STRING),
        _f("subscribed_topic_regex", STRING),
        _f("server_assignor", STRING),
        _f("member_epoch", INT),
        _f("previous_member_epoch", INT),
        _f("member_state", STRING),  # STABLE, UNREVOKED_PARTITIONS, ...; a streams member STABLE, UNREVOKED_TASKS, ...
        _f("target_partitions", _list(TOPIC_PARTITION)),
        _f("partitions_pending_revocation", _list(TOPIC_PARTITION)),
        _f("is_leader", BOOLEAN),
    ]
)

REMOVED_GROUPS = pa.schema(
    [
        _f("snapshot_id", STRING, False),
        _f("group_id", STRING, False),
        _f("offsets_partition", INT),
        _f("tombstone_record_offset", LONG),
        _f("tombstone_timestamp", TIMESTAMP),
        _f("group_type", STRING),  # classic (type 2 tombstone) or consumer (type 3 tombstone)
    ]
)

PENDING_OFFSETS = pa.schema(
    [
        _f("snapshot_id", STRING, False),
        _f("producer_id", LONG, False),
        _f("group_id", STRING, False),
        _f("topic", STRING, False),
        _f("partition", INT, False),
        _f("committed_offset", LONG),
        _f("record_offset", LONG),
        _f("offsets_partition", INT),
        _f("producer_epoch", INT),
        _f("leader_epoch", INT),
        _f("metadata", STRING),
        _f("commit_timestamp", TIMESTAMP),
    ]
)

EXPIRED_OFFSETS = pa.schema(
    list(_OFFSET_COLUMNS)
    + [_f("expiry_base_timestamp", TIMESTAMP), _f("expiry_rule", STRING)]
)

EXPIRED_GROUPS = pa.schema(
    [
        _f("snapshot_id", STRING, False),
        _f("group_id", STRING, False),
        _f("offsets_partition", INT),
        _f("reason", STRING),
        _f("group_type", STRING),
        _f("generation", INT),
        _f("writes_tombstone", BOOLEAN),  # would the emulated coordinator write a group tombstone
    ]
)

OFFSET_COMMITS = pa.schema(
    [
        _f("offsets_partition", INT, False),
        _f("record_offset", LONG, False),
        _f("group_id", STRING),
        _f("topic", STRING),
        _f("partition", INT),
        _f("committed_offset", LONG),
        _f("commit_timestamp", TIMESTAMP),
        _f("is_tombstone", BOOLEAN),
        _f("producer_id", LONG),
        _f("txn_outcome", STRING),  # committed, aborted, pending, null (not transactional)
        _f("leader_epoch", INT),
        _f("metadata", STRING),
        _f("record_timestamp", TIMESTAMP),
        _f("snapshot_id", STRING),  # the snapshot that first saw this record
        # what a restore plan needs to replay the record at any time (`pipelines/serving/restore_plan.py`); null in
        # a history written before they existed
        _f("expire_timestamp", TIMESTAMP),  # OffsetCommitValue v1
        _f("topic_id", STRING),  # OffsetCommitValue v4 tag 0
        _f("producer_epoch", INT),
        _f("is_transactional", BOOLEAN),
        _f("batch_first_offset", LONG),  # the old loader's appendedBatchOffset
        _f("txn_marker_offset", LONG),  # the COMMIT/ABORT marker that decided a transactional record
        _f("txn_marker_timestamp", TIMESTAMP),
        # what the coordinator did with the record (`pipelines/coordinator/offset_metadata.py`): the log position at
        # which it took effect (its own for a plain commit or a tombstone that deleted, the COMMIT marker's for an
        # installed transactional value) and that position's time; null when it never took effect (aborted,
        # overtaken before its marker, a legacy transactional tombstone, a transaction still open). Null in a
        # history written before they existed
        _f("applied_offset", LONG),
        _f("applied_timestamp", TIMESTAMP),
        # when a reader of the coordinator first saw the record: the newest record time of its batch (a 4.0
        # coordinator's batch gathers several writes, and a read sees a batch whole or none of it), what
        # `rebuild --until-time` cuts by; null for a record whose batch has no time (magic 0), and in a history
        # written before it existed (a view then reads `record_timestamp`)
        _f("batch_timestamp", TIMESTAMP),
    ]
)

#: The history's columns of what the engine decided of each record (`pipelines/coordinator/offset_metadata.py`): set
#: once a record is decided, and only ever moved from a pending decision to a final one.
DECISION_COLUMNS = ("txn_outcome", "txn_marker_offset", "txn_marker_timestamp", "applied_offset", "applied_timestamp")

#: `offset_commits.txn_outcome` by how decided it is: a marker's outcome is final, `pending` waits for one, null is
#: no transaction (or not known). A record the history holds only ever moves up this order (a later run may not
#: see the marker an earlier one saw), and of two copies of one record the more decided is kept.
OUTCOME_RANK = {"committed": 2, "aborted": 2, "pending": 1}
FINAL_OUTCOMES = tuple(o for o, r in OUTCOME_RANK.items() if r == max(OUTCOME_RANK.values()))


def outcome_rank(outcomes) -> pa.ChunkedArray:
    """`OUTCOME_RANK` of each `txn_outcome` (0: null or unknown)."""
    outcomes = outcomes.cast(STRING) if not pa.types.is_string(outcomes.type) else outcomes
    names = pa.array(list(OUTCOME_RANK), STRING)
    ranks = pa.array(list(OUTCOME_RANK.values()), pa.int8())
    return pc.fill_null(pc.take(ranks, pc.index_in(outcomes, value_set=names)), 0)

QUARANTINE = pa.schema(
    [
        _f("snapshot_id", STRING, False),
        _f("source", STRING),
        _f("offsets_partition", INT),
        _f("position", LONG),
        _f("reason", STRING),
        _f("key_hex", STRING),
        _f("value_hex", STRING),
        _f("kind", STRING),
        _f("offset", LONG),
    ]
)

LOG_END_OFFSETS = pa.schema(
    [
        _f("snapshot_id", STRING, False),
        _f("topic", STRING, False),
        _f("partition", INT, False),
        _f("log_end_offset", LONG, False),
        _f("source", STRING, False),  # replication-offset-checkpoint, segment, file
        _f("observed_at", TIMESTAMP),  # when that source was written (file mtime); null if unknown
        # logStartOffset: the first segment's base offset, or log-start-offset-checkpoint when it says more (LogLoader);
        # null when the log dirs tell neither (or the snapshot was written before these columns existed)
        _f("log_start_offset", LONG),
        _f("log_start_source", STRING),  # log-start-offset-checkpoint, segment
        _f("timestamp_type", STRING),  # of the newest batch: CreateTime, LogAppendTime; null without segments
        _f("log_start_timestamp", TIMESTAMP),  # the first record at the log start (a consumer is handed), its own
    ]
)

# One row per committed offset of the snapshot (`loaded_offsets`' group, topic, partition), with the partition's
# bounds and the lag at the snapshot's as_of, computed by the rebuild from the input's log dirs
# (`pipelines/state/lag.py`): a what-if snapshot's lag is for its own as_of.
CONSUMER_LAG = pa.schema(
    [
        _f("snapshot_id", STRING, False),
        _f("group_id", STRING, False),
        _f("topic", STRING, False),
        _f("partition", INT, False),
        _f("committed_offset", LONG),
        _f("log_start_offset", LONG),  # null: the log dirs do not tell
        _f("log_end_offset", LONG),  # the `log_end_offsets` row's; null: unknown
        _f("lag", LONG),  # log_end_offset - committed_offset, as kafka-consumer-groups' LAG; null: unknown
        # as_of - the largest timestamp of the records up to the first one the group has not consumed (at the committed
        # offset, or at the log start when the commit is below it); 0 when nothing is left to consume by as_of; null
        # when the partition's data is not in the input
        _f("lag_seconds", DOUBLE),
        _f("commit_age_seconds", DOUBLE),  # as_of - the committed offset's commit timestamp
        _f("next_offset", LONG),  # that first record not consumed; null when none is (caught up) or unknown
        _f("next_timestamp", TIMESTAMP),  # the timestamp lag_seconds is measured to (the largest up to next_offset)
        _f("timestamp_type", STRING),  # of next_offset's batch: CreateTime, LogAppendTime
        _f("group_max_lag_seconds", DOUBLE),  # the group's largest lag_seconds (every row of the group)
        _f("is_group_max", BOOLEAN),  # the group's worst partition (the first in topic, partition order on a tie)
    ]
)

# One row per group record of the snapshot's log (key types 2-8, 16), in log order per offsets partition, with the
# group as it stands after it: a new classic generation (a GroupMetadata value: a rebalance completed, or the group
# went Empty), a consumer group's group or assignment epoch, a member joining, updated or leaving, assignments,
# deletions and tombstones that found nothing.
HISTORY_MEMBER = pa.struct(
    [
        _f("member_id", STRING),
        _f("group_instance_id", STRING),
        _f("client_id", STRING),
        _f("client_host", STRING),
        _f("subscribed_topics", _list(STRING)),
        _f("assigned_partitions", _list(TOPIC_PARTITION)),
    ]
)

GROUP_HISTORY = pa.schema(
    [
        _f("snapshot_id", STRING, False),
        _f("group_id", STRING, False),
        _f("offsets_partition", INT),
        _f("record_offset", LONG),
        _f("record_timestamp", TIMESTAMP),
        _f("group_type", STRING),  # classic, consumer, share, streams
        # generation, group_epoch, assignment_epoch, member_joined, member_updated, member_left, target_assignment,
        # member_assignment, partition_metadata, regex, topology, <one of those>_tombstone, deleted, tombstone, skipped
        _f("event", STRING),
        _f("generation", INT),  # after the record: classic generation / consumer group epoch
        _f("assignment_epoch", INT),  # consumer groups
        _f("protocol", STRING),  # classic protocol / the consumer group's server assignor
        _f("leader", STRING),  # classic
        _f("state", STRING),  # Stable or Empty (classic, share); Empty, Assigning, Reconciling, Stable (consumer;
        # streams also NotReady)
        _f("member_count", INT),  # after the record
        _f("members_joined", _list(STRING)),  # member ids the record added
        _f("members_left", _list(STRING)),  # member ids the record removed
        # the members the record set, as they stand after it: every member of a classic generation (the record
        # replaces them all), the one member of a KIP-848 member or member-assignment record; null otherwise.
        # Folded in log order they give who was assigned a partition at any moment (`offsetlake changes`).
        _f("member_assignments", _list(HISTORY_MEMBER)),
        # the group record itself (its decoded columns as JSON, raw subscription/assignment bytes left out), so a
        # restore plan replays the groups at any time; null in a history written before it existed
        _f("record_json", STRING),
        # the last offset of the record's batch (its lastOffset): a reader sees a group only as a whole batch left
        # it, so of a group's events in one batch only the last one's state was ever observable (`changes`); null
        # in a history written before it existed, or of an input that does not say (each event then observable)
        _f("batch_last_offset", LONG),
        # when a reader first saw the record, as `offset_commits.batch_timestamp`
        _f("batch_timestamp", TIMESTAMP),
    ]
)

# What a `group_history`'s events mean, as the run that wrote them recorded it (`runs.summary`'s
# `group_history_version`; a summary without it: a run before this version was recorded). 2: a group tombstone after
# a simple consumer group's offset commit is `deleted` in the legacy semantics too (an offset commit makes that group:
# `GroupStore.maybe_create_simple_group`), where a history before it says `tombstone`, one that found nothing, for a
# tombstone after the id's removal and a commit of it again.
GROUP_HISTORY_VERSION = 2

RUNS = pa.schema(
    [
        _f("snapshot_id", STRING, False),
        _f("status", STRING),  # running, succeeded, failed, validation_failed
        _f("started_at", TIMESTAMP),
        _f("finished_at", TIMESTAMP),
        _f("as_of", TIMESTAMP),
        _f("retention_minutes", LONG),
        _f("semantics", STRING),
        _f("inputs", _list(STRING)),
        _f("records_in", LONG),
        _f("records_out", LONG),
        _f("records_quarantined", LONG),
        _f("record_type_counts", pa.map_(STRING, LONG)),
        _f("validation", STRING),  # JSON summary of the validation results
        _f("summary", STRING),  # JSON of the run summary (`rebuild --json`)
        # scheduled, or what-if (a run with --as-of/--until-*): readers default to the latest succeeded scheduled
        # snapshot; null (a row written before this column existed) reads as scheduled
        _f("kind", STRING),
        # table -> the Delta version the run's commit of that snapshot table produced: readers read the snapshot
        # at these versions, so a rerun killed between its commits leaves them on the previous complete ones;
        # null (a row written before this column existed, or a run that committed nothing) reads the latest
        _f("table_versions", pa.map_(STRING, LONG)),
    ]
)

TABLES: dict[str, pa.Schema] = {
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
    "consumer_lag": CONSUMER_LAG,
    "group_history": GROUP_HISTORY,
    "runs": RUNS,
}

# Tables partitioned by snapshot_id (every table but the history and the run log).
SNAPSHOT_TABLES = tuple(t for t in TABLES if t not in ("offset_commits", "runs"))


def columns(table: str) -> list[str]:
    """The contract's column list of `table`, in order."""
    return TABLES[table].names
