"""The decoded-record row: one flat row per `__consumer_offsets` record, the contract between decoding and state.

Every decoder output (segment files or tabular dumps) becomes rows of `DECODED_RECORD_SCHEMA`; the replay engine
(`pipelines/coordinator`) consumes exactly these columns. Values are Kafka's raw values (e.g.
`leader_epoch = -1` when absent, `expire_timestamp = -1` as written); the state layer turns sentinels into nulls.
Columns that do not apply to a record's type are null.
"""
from __future__ import annotations

import pyarrow as pa

# record_kind values
KIND_OFFSET_COMMIT = "offset_commit"  # key types 0/1
KIND_GROUP_METADATA = "group_metadata"  # key type 2
KIND_CONSUMER_GROUP = "consumer_group"  # key types 3-8, 16 (KIP-848)
KIND_SHARE_GROUP = "share_group"  # key types 9-15
KIND_STREAMS_GROUP = "streams_group"  # key types 17, 19-23
KIND_CONTROL = "control"  # a record of a control batch (COMMIT/ABORT markers, ...)
KIND_UNKNOWN = "unknown"  # a key type no Kafka version defines for this topic: Kafka skips it with a warning
KIND_ERROR = "error"  # undecodable key or value: quarantined, with `error` saying why

TOPIC_PARTITIONS = pa.list_(pa.struct([("topic", pa.string()), ("partitions", pa.list_(pa.int32()))]))
TOPIC_ID_PARTITIONS = pa.list_(pa.struct([("topic_id", pa.string()), ("partitions", pa.list_(pa.int32()))]))

MEMBER_STRUCT = pa.struct(
    [
        ("member_id", pa.string()),
        ("group_instance_id", pa.string()),
        ("client_id", pa.string()),
        ("client_host", pa.string()),
        ("rebalance_timeout_ms", pa.int32()),  # as stored; -1 / absent for v0 (loader substitutes session timeout)
        ("session_timeout_ms", pa.int32()),
        ("subscription", pa.binary()),
        ("assignment", pa.binary()),
        # Consumer-protocol view (protocol type "consumer" only); null when not parseable / not consumer.
        ("subscription_version", pa.int16()),
        ("subscribed_topics", pa.list_(pa.string())),  # Kafka's view: version read, then parsed as v0
        ("owned_partitions", TOPIC_PARTITIONS),
        ("subscription_generation_id", pa.int32()),
        ("subscription_rack_id", pa.string()),
        ("assigned_partitions", TOPIC_PARTITIONS),
        ("assignment_version", pa.int16()),
    ]
)

TOPIC_METADATA_STRUCT = pa.struct(
    [("topic_id", pa.string()), ("topic_name", pa.string()), ("num_partitions", pa.int32())]
)

DECODED_RECORD_SCHEMA = pa.schema(
    [
        # -- where the record is -------------------------------------------------------------------
        ("source", pa.string()),
        ("offsets_partition", pa.int32()),
        ("offset", pa.int64()),
        ("batch_base_offset", pa.int64()),
        ("batch_first_offset", pa.int64()),  # offset of the first record iterated in the batch
        ("batch_last_offset", pa.int64()),
        ("batch_position", pa.int64()),  # byte position of the batch in its file (-1 for tables)
        ("timestamp", pa.int64()),  # ms; -1 for magic 0
        ("timestamp_type", pa.string()),
        ("producer_id", pa.int64()),
        ("producer_epoch", pa.int16()),
        ("is_transactional", pa.bool_()),
        ("is_control", pa.bool_()),
        ("magic", pa.int8()),
        ("codec", pa.string()),
        # -- what it is ----------------------------------------------------------------------------
        ("record_kind", pa.string()),
        ("key_type", pa.int16()),  # the int16 key prefix; null for control records
        ("value_version", pa.int16()),  # null for tombstones and control records
        ("is_tombstone", pa.bool_()),
        ("error", pa.string()),  # why the record is undecodable (record_kind = error)
        ("error_kind", pa.string()),  # one of schemas.quarantine.QUARANTINE_KINDS (record_kind = error)
        ("error_records", pa.int64()),  # records an error row stands for in the accounting (0, 1, or a batch's)
        ("unread_bytes", pa.int64()),  # bytes from batch_position on that were not read into records
        ("key", pa.binary()),  # raw bytes, kept only for error / unknown records
        ("value", pa.binary()),
        # -- control records -------------------------------------------------------------------------
        ("control_type", pa.string()),  # COMMIT, ABORT, LEADER_CHANGE, ..., UNKNOWN(n)
        ("coordinator_epoch", pa.int32()),
        # -- keys ----------------------------------------------------------------------------------
        ("group_id", pa.string()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("member_id", pa.string()),
        ("regex", pa.string()),  # type 16 key
        # -- OffsetCommitValue v0-v4 ---------------------------------------------------------------
        ("committed_offset", pa.int64()),
        ("leader_epoch", pa.int32()),  # -1 = none (v0-v2 carry none: -1)
        ("metadata", pa.string()),
        ("commit_timestamp", pa.int64()),
        ("expire_timestamp", pa.int64()),  # v1 only; null when the version has no such field
        ("topic_id", pa.string()),  # v4 tag 0, Kafka's URL-safe base64 without padding
        # -- GroupMetadataValue v0-v4 --------------------------------------------------------------
        ("protocol_type", pa.string()),
        ("generation", pa.int32()),
        ("protocol", pa.string()),
        ("leader", pa.string()),
        ("current_state_timestamp", pa.int64()),  # -1 = unknown (v0/v1 carry none: -1)
        ("members", pa.list_(MEMBER_STRUCT)),
        # -- KIP-848 consumer-group records (types 3-8, 16), share / streams identification ------
        ("layout", pa.string()),  # "3.8+" or "3.7" for the two incompatible v0 layouts
        ("group_epoch", pa.int32()),  # type 3 (11 share, 17 streams)
        ("metadata_hash", pa.int64()),
        ("topics_metadata", pa.list_(TOPIC_METADATA_STRUCT)),  # type 4
        ("group_instance_id", pa.string()),  # type 5
        ("rack_id", pa.string()),
        ("client_id", pa.string()),
        ("client_host", pa.string()),
        ("subscribed_topics", pa.list_(pa.string())),
        ("subscribed_topic_regex", pa.string()),
        ("rebalance_timeout_ms", pa.int32()),
        ("session_timeout_ms", pa.int32()),  # ClassicMemberMetadata tag, classic members of a consumer group
        ("server_assignor", pa.string()),
        ("assignment_epoch", pa.int32()),  # type 6
        ("member_epoch", pa.int32()),  # type 8
        ("previous_member_epoch", pa.int32()),
        ("member_state", pa.int8()),
        ("assigned_partitions", TOPIC_ID_PARTITIONS),  # type 8 current; type 7 target
        ("partitions_pending_revocation", TOPIC_ID_PARTITIONS),
        ("regex_topics", pa.list_(pa.string())),  # type 16
        ("regex_version", pa.int64()),
        ("regex_timestamp", pa.int64()),
        # -- streams-group records: what `StreamsGroup.isSubscribedToTopic` and its NotReady state read -------
        ("validated_topology_epoch", pa.int32()),  # type 17, 4.2+ tag 0 (absent: -1, no topology validated)
        ("topology_epoch", pa.int32()),  # type 23
        # type 23: its subtopologies' source and repartition source topics (`StreamsTopology.sourceTopicMap`)
        ("topology_source_topics", pa.list_(pa.string())),
    ]
)

DECODED_COLUMNS: tuple[str, ...] = tuple(DECODED_RECORD_SCHEMA.names)
