"""Flatten decoded records into `DECODED_RECORD_SCHEMA` rows: the contract between decoding and state replay.

`to_decoded_row` is the hot path (every record of every segment): offset commits (key type 0/1, value v1/v3)
take a fast path of precompiled structs over a per-batch dict template; everything else goes through the
readers of `messages.py`. A record that cannot be decoded becomes a row of kind "error" — never an exception.
"""
from __future__ import annotations

import struct
from typing import Any

import pyarrow as pa

from pipelines.decoding.consumer_protocol import read_assignment, read_subscription
from pipelines.decoding.errors import DecodeError, UnknownVersionError
from pipelines.decoding.messages import (
    CONSUMER_GROUP_KEY_TYPES,
    SHARE_GROUP_KEY_TYPES,
    read_control_record_key,
    read_end_txn_marker,
    read_message_key,
    read_message_value,
)
from schemas.decoded import (
    DECODED_COLUMNS,
    DECODED_RECORD_SCHEMA,
    KIND_CONSUMER_GROUP,
    KIND_CONTROL,
    KIND_ERROR,
    KIND_GROUP_METADATA,
    KIND_OFFSET_COMMIT,
    KIND_SHARE_GROUP,
    KIND_STREAMS_GROUP,
    KIND_UNKNOWN,
)
from schemas.messages import (
    CONTROL_TYPE_NAMES,
    GroupMetadataKey,
    GroupMetadataValue,
    GroupRecordKey,
    GroupRecordValue,
    OffsetCommitKey,
    OffsetCommitValue,
    UnknownKey,
)
from schemas.quarantine import UNDECODABLE_KEY, UNDECODABLE_VALUE, UNKNOWN_VERSION
from schemas.records import LogRecord, ReadProblem

_TEMPLATE: dict[str, Any] = dict.fromkeys(DECODED_COLUMNS)

_U16 = struct.Struct(">H").unpack_from
_I32 = struct.Struct(">i").unpack_from
_I64 = struct.Struct(">q").unpack_from
_V3_HEAD = struct.Struct(">hqiH").unpack_from  # version, offset, leaderEpoch, metadata length
_V1_HEAD = struct.Struct(">hqH").unpack_from  # version, offset, metadata length
_V1_TAIL = struct.Struct(">qq").unpack_from  # commitTimestamp, expireTimestamp

_batch_cache: list = [None, None]  # (batch, its base row): records of one batch share the location columns


def _base_row(record: LogRecord) -> dict[str, Any]:
    b = record.batch
    if _batch_cache[0] is not b:
        base = _TEMPLATE.copy()
        base["source"] = b.source
        base["offsets_partition"] = b.offsets_partition
        base["batch_base_offset"] = b.base_offset
        base["batch_last_offset"] = b.last_offset
        base["batch_position"] = b.position
        base["timestamp_type"] = b.timestamp_type
        base["producer_id"] = b.producer_id
        base["producer_epoch"] = b.producer_epoch
        base["is_transactional"] = b.is_transactional
        base["is_control"] = b.is_control
        base["magic"] = b.magic
        base["codec"] = b.codec
        _batch_cache[0] = b
        _batch_cache[1] = base
    row = _batch_cache[1].copy()
    row["offset"] = record.offset
    row["batch_first_offset"] = record.first_offset_in_batch
    row["timestamp"] = record.timestamp
    return row


def _fast_offset_commit(k: bytes, v: bytes | None, row: dict[str, Any]) -> bool:
    """Key type 0/1 with value v3 / v1 / tombstone, written the common way. False = take the general path."""
    try:
        glen = _U16(k, 2)[0]
        p = 4 + glen
        tlen = _U16(k, p)[0]
        q = p + 2 + tlen
        if q + 4 != len(k):
            return False
        group = k[4:p].decode()
        topic = k[p + 2:q].decode()
        partition = _I32(k, q)[0]
        if v is None:
            row["is_tombstone"] = True
        else:
            ver = v[1] if v[0] == 0 else -1
            if ver == 3:
                _, off, epoch, mlen = _V3_HEAD(v, 0)
                e = 16 + mlen
                if e + 8 != len(v):
                    return False
                row["metadata"] = v[16:e].decode()
                row["commit_timestamp"] = _I64(v, e)[0]
                row["leader_epoch"] = epoch
            elif ver == 1:
                _, off, mlen = _V1_HEAD(v, 0)
                e = 12 + mlen
                if e + 16 != len(v):
                    return False
                row["metadata"] = v[12:e].decode()
                row["commit_timestamp"], row["expire_timestamp"] = _V1_TAIL(v, e)
                row["leader_epoch"] = -1
            else:
                return False
            row["value_version"] = ver
            row["committed_offset"] = off
            row["is_tombstone"] = False
    except (struct.error, UnicodeDecodeError, IndexError):
        return False
    row["record_kind"] = KIND_OFFSET_COMMIT
    row["key_type"] = k[1]
    row["group_id"] = group
    row["topic"] = topic
    row["partition"] = partition
    return True


def to_decoded_row(record: LogRecord) -> dict[str, Any]:
    """One `DECODED_RECORD_SCHEMA` row for one record (data or control). Never raises for bad bytes."""
    row = _base_row(record)
    k = record.key
    v = record.value
    if record.batch.is_control:
        return _control_row(k, v, row)
    if k is not None and len(k) > 2 and k[0] == 0 and k[1] < 2 and _fast_offset_commit(k, v, row):
        return row
    key = None
    try:
        key = read_message_key(k)
        value = read_message_value(key, v)
    except DecodeError as e:
        return _error_row(row, e, key, k, v)
    _fill_key(row, key)
    row["is_tombstone"] = v is None
    if isinstance(key, UnknownKey):
        row["record_kind"] = KIND_UNKNOWN
        row["key"] = k
        row["value"] = v
        return row
    if value is not None:
        _fill_value(row, value)
    return row


def _control_row(k: bytes | None, v: bytes | None, row: dict[str, Any]) -> dict[str, Any]:
    ck = None
    try:
        ck = read_control_record_key(k)
        row["record_kind"] = KIND_CONTROL
        row["control_type"] = CONTROL_TYPE_NAMES.get(ck.type, f"UNKNOWN({ck.type})")
        if ck.type in (0, 1):
            row["coordinator_epoch"] = read_end_txn_marker(v).coordinator_epoch
    except DecodeError as e:
        return _error_row(row, e, None, k, v, key_read=ck is not None)
    row["is_tombstone"] = v is None
    return row


def _error_row(row, err: DecodeError, key, k, v, key_read: bool | None = None) -> dict[str, Any]:
    if key is not None:
        _fill_key(row, key)
    if key_read is None:
        key_read = key is not None
    row["record_kind"] = KIND_ERROR
    row["error"] = f"{type(err).__name__}: {err}"
    row["error_kind"] = (UNKNOWN_VERSION if isinstance(err, UnknownVersionError)
                         else UNDECODABLE_VALUE if key_read else UNDECODABLE_KEY)
    row["error_records"] = 1
    row["key"] = k
    row["value"] = v
    row["is_tombstone"] = v is None
    if key is None and k is not None and len(k) >= 2 and not row["is_control"]:
        row["key_type"] = int.from_bytes(k[:2], "big", signed=True)
    if v is not None and len(v) >= 2 and not row["is_control"]:
        row["value_version"] = int.from_bytes(v[:2], "big", signed=True)
    return row


def _fill_key(row: dict[str, Any], key) -> None:
    row["key_type"] = key.key_type
    if isinstance(key, OffsetCommitKey):
        row["record_kind"] = KIND_OFFSET_COMMIT
        row["group_id"] = key.group
        row["topic"] = key.topic
        row["partition"] = key.partition
    elif isinstance(key, GroupMetadataKey):
        row["record_kind"] = KIND_GROUP_METADATA
        row["group_id"] = key.group
    elif isinstance(key, GroupRecordKey):
        t = key.key_type
        row["record_kind"] = (KIND_CONSUMER_GROUP if t in CONSUMER_GROUP_KEY_TYPES
                              else KIND_SHARE_GROUP if t in SHARE_GROUP_KEY_TYPES else KIND_STREAMS_GROUP)
        row["group_id"] = key.group_id
        row["member_id"] = key.member_id
        row["regex"] = key.regular_expression


def _fill_value(row: dict[str, Any], value) -> None:
    row["value_version"] = value.version
    if isinstance(value, OffsetCommitValue):
        row["committed_offset"] = value.offset
        row["leader_epoch"] = value.leader_epoch
        row["metadata"] = value.metadata
        row["commit_timestamp"] = value.commit_timestamp
        row["expire_timestamp"] = value.expire_timestamp if value.version == 1 else None
        row["topic_id"] = value.topic_id
    elif isinstance(value, GroupMetadataValue):
        row["protocol_type"] = value.protocol_type
        row["generation"] = value.generation
        row["protocol"] = value.protocol
        row["leader"] = value.leader
        row["current_state_timestamp"] = value.current_state_timestamp
        consumer = value.protocol_type == "consumer"
        row["members"] = [_member_dict(m, consumer) for m in value.members]
    elif isinstance(value, GroupRecordValue):
        row["layout"] = value.layout
        _fill_group_record(row, value.key_type, value.fields)


def _tp_list(parts, name_key="topic"):
    return [{name_key: t, "partitions": list(p)} for t, p in parts]


def _member_dict(m, consumer: bool) -> dict[str, Any]:
    d = {
        "member_id": m.member_id, "group_instance_id": m.group_instance_id, "client_id": m.client_id,
        "client_host": m.client_host, "rebalance_timeout_ms": m.rebalance_timeout,
        "session_timeout_ms": m.session_timeout, "subscription": m.subscription, "assignment": m.assignment,
        "subscription_version": None, "subscribed_topics": None, "owned_partitions": None,
        "subscription_generation_id": None, "subscription_rack_id": None, "assigned_partitions": None,
        "assignment_version": None,
    }
    if consumer:
        sub = read_subscription(m.subscription)
        if sub is not None:
            d["subscription_version"] = sub.version
            d["subscribed_topics"] = list(sub.topics)
            if sub.owned_partitions is not None:
                d["owned_partitions"] = _tp_list(sub.owned_partitions)
            d["subscription_generation_id"] = sub.generation_id
            d["subscription_rack_id"] = sub.rack_id
        asg = read_assignment(m.assignment)
        if asg is not None:
            d["assignment_version"] = asg.version
            d["assigned_partitions"] = _tp_list(asg.assigned_partitions)
    return d


def _tid_parts(items):
    return None if items is None else [{"topic_id": t["topicId"], "partitions": t["partitions"]} for t in items]


#: `MemberState` codes of 3.8+ for what 3.7's `ConsumerGroupMember.Builder.build` derived: REVOKING (partitions
#: to give up: UNREVOKED_PARTITIONS), ASSIGNING (partitions still to get: UNRELEASED_PARTITIONS), STABLE
_UNREVOKED_PARTITIONS, _UNRELEASED_PARTITIONS, _STABLE = 1, 2, 0


def _early_member_state(f: dict[str, Any]) -> int:
    """The state of a member whose ConsumerGroupCurrentMemberAssignmentValue is in the 3.6/3.7 layout, as its writer
    derived it from the record. 3.7's `ConsumerGroup.maybeUpdateGroupState` counts a member reconciled when STABLE at
    the assignment epoch (its CurrentAssignmentBuilder moves the member epoch to the target's in every transition
    but to REVOKING), which is the 3.8+ rule over these codes."""
    if f.get("partitionsPendingRevocation"):
        return _UNREVOKED_PARTITIONS
    if f.get("partitionsPendingAssignment"):
        return _UNRELEASED_PARTITIONS
    return _STABLE


def _fill_group_record(row: dict[str, Any], t: int, f: dict[str, Any]) -> None:
    if not f:
        return
    if t in (3, 11, 17):
        row["group_epoch"] = f.get("epoch")
        row["metadata_hash"] = f.get("metadataHash", 0 if t == 3 else None)
        if t == 17:
            row["validated_topology_epoch"] = f.get("validatedTopologyEpoch", -1)
    elif t in (4, 9):
        row["topics_metadata"] = [{"topic_id": x["topicId"], "topic_name": x["topicName"],
                                   "num_partitions": x["numPartitions"]} for x in f["topics"]]
    elif t in (5, 10, 19):
        row["group_instance_id"] = f.get("instanceId")
        row["rack_id"] = f.get("rackId")
        row["client_id"] = f.get("clientId")
        row["client_host"] = f.get("clientHost")
        row["subscribed_topics"] = f.get("subscribedTopicNames")
        row["subscribed_topic_regex"] = f.get("subscribedTopicRegex")
        row["rebalance_timeout_ms"] = f.get("rebalanceTimeoutMs")
        row["server_assignor"] = f.get("serverAssignor")
        classic = f.get("classicMemberMetadata")
        if classic:
            row["session_timeout_ms"] = classic["sessionTimeoutMs"]
    elif t in (6, 12, 20):
        row["assignment_epoch"] = f["assignmentEpoch"]
    elif t in (7, 13):
        row["assigned_partitions"] = _tid_parts(f["topicPartitions"])
    elif t in (8, 14, 22):
        row["member_epoch"] = f["memberEpoch"]
        row["previous_member_epoch"] = f["previousMemberEpoch"]
        row["member_state"] = f.get("state")
        if "partitionsPendingAssignment" in f:  # the 3.6/3.7 layout stores no state
            row["member_state"] = _early_member_state(f)
        if t != 22:
            row["assigned_partitions"] = _tid_parts(f["assignedPartitions"])
            row["partitions_pending_revocation"] = _tid_parts(f.get("partitionsPendingRevocation"))
    elif t == 23:
        row["topology_epoch"] = f["epoch"]
        # `StreamsTopology.sourceTopicMap`'s keys: a topic in two subtopologies is one key
        row["topology_source_topics"] = list(dict.fromkeys(
            [topic for sub in f["subtopologies"] for topic in sub["sourceTopics"]]
            + [info["name"] for sub in f["subtopologies"] for info in sub["repartitionSourceTopics"]]))
    elif t == 16:
        row["regex_topics"] = f["topics"]
        row["regex_version"] = f["version"]
        row["regex_timestamp"] = f["timestamp"]


def problem_to_row(problem: ReadProblem) -> dict[str, Any]:
    """A reader's problem (torn tail, bad CRC, ...) as an "error" row, its byte position in batch_position."""
    row = _TEMPLATE.copy()
    row["source"] = problem.source
    row["offsets_partition"] = problem.offsets_partition
    row["offset"] = problem.offset
    row["batch_position"] = problem.position
    row["record_kind"] = KIND_ERROR
    row["error"] = problem.reason
    row["error_kind"] = problem.kind
    row["error_records"] = problem.records
    row["unread_bytes"] = None if problem.unread_to is None else problem.unread_to - problem.position
    row["key"] = problem.key
    row["value"] = problem.value
    return row


def rows_to_arrow(rows: list[dict[str, Any]]) -> pa.RecordBatch:
    """Rows as one Arrow record batch of `DECODED_RECORD_SCHEMA`."""
    return pa.RecordBatch.from_pylist(rows, schema=DECODED_RECORD_SCHEMA)
