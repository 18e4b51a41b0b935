"""Encoders for `__consumer_offsets` keys and values: the inverse of `messages.py` / `consumer_protocol.py`.

Used for round-trip tests and by the broker simulator (`simulator/`). Byte layouts are documented next to the readers;
these follow `GroupCoordinatorRecordHelpers` / the generated `*.write` methods byte for byte.
"""
from __future__ import annotations

import functools
import struct
from collections.abc import Sequence
from typing import Any

from pipelines.decoding.consumer_protocol import write_assignment, write_subscription
from pipelines.decoding.messages import GROUP_RECORD_SCHEMAS, GROUP_RECORD_TYPES
from pipelines.decoding.primitives import (
    INT8,
    INT16,
    INT32,
    INT64,
    write_bytes,
    write_compact_array_count,
    write_compact_bytes,
    write_compact_string,
    write_int8,
    write_int16,
    write_int32,
    write_int64,
    write_string,
    write_tagged_fields,
    write_uint16,
    write_uuid,
    write_uvarint,
)


def write_offset_commit_key(group: str, topic: str, partition: int, key_type: int = 1) -> bytes:
    return b"".join((INT16.pack(key_type), write_string(group), write_string(topic), INT32.pack(partition)))


# OffsetCommitValue's fixed-size runs, each packed at once (the simulator writes a value per commit): the version, the
# offset, the leader epoch (v3+) and, but in v4 (a compact string's uvarint), the metadata's length
_V0_HEAD = struct.Struct(">hqh")  # v0-v2: version, offset, metadata length
_V3_HEAD = struct.Struct(">hqih")  # v3: version, offset, leaderEpoch, metadata length
_V4_HEAD = struct.Struct(">hqi")  # v4: version, offset, leaderEpoch
_COMMIT_EXPIRE = struct.Struct(">qq")  # v1: commitTimestamp, expireTimestamp
_V3_NO_METADATA = struct.Struct(">hqihq")  # v3 without metadata, whole


def write_offset_commit_value(version: int, *, offset: int, metadata: str = "", commit_timestamp: int,
                              leader_epoch: int = -1, expire_timestamp: int = -1,
                              topic_id: str | None = None) -> bytes:
    """OffsetCommitValue at `version` (0-4); fields the version lacks are dropped (v4 topicId = tag 0)."""
    if version == 3 and metadata == "":  # most commits carry no metadata
        return _V3_NO_METADATA.pack(3, offset, leader_epoch, 0, commit_timestamp)
    if not 0 <= version <= 4:
        raise ValueError(f"no OffsetCommitValue version {version}")
    raw = b"" if metadata is None else metadata.encode("utf-8")
    size = -1 if metadata is None else len(raw)  # a null string's length
    if version == 3:
        return b"".join((_V3_HEAD.pack(3, offset, leader_epoch, size), raw, INT64.pack(commit_timestamp)))
    if version == 4:
        tags = _topic_id_tag(topic_id) if topic_id is not None else write_tagged_fields()
        return b"".join((_V4_HEAD.pack(4, offset, leader_epoch), write_uvarint(size + 1), raw,
                         INT64.pack(commit_timestamp), tags))
    if version == 1:
        return b"".join((_V0_HEAD.pack(1, offset, size), raw, _COMMIT_EXPIRE.pack(commit_timestamp, expire_timestamp)))
    return b"".join((_V0_HEAD.pack(version, offset, size), raw, INT64.pack(commit_timestamp)))


@functools.lru_cache(maxsize=4096)
def _topic_id_tag(topic_id: str) -> bytes:
    """v4's tagged fields with the topicId (tag 0): one topic's commits repeat them, so they are written once."""
    return write_tagged_fields({0: write_uuid(topic_id)})


def write_group_metadata_key(group: str) -> bytes:
    return write_int16(2) + write_string(group)


def write_group_metadata_value(version: int, *, protocol_type: str, generation: int, protocol: str | None,
                               leader: str | None, current_state_timestamp: int = -1,
                               members: Sequence[dict]) -> bytes:
    """GroupMetadataValue at `version` (0-4). Member dicts: member_id, group_instance_id, client_id,
    client_host, rebalance_timeout_ms, session_timeout_ms, subscription, assignment."""
    if not 0 <= version <= 4:
        raise ValueError(f"no GroupMetadataValue version {version}")
    flexible = version >= 4
    wstr = write_compact_string if flexible else write_string
    wbytes = write_compact_bytes if flexible else write_bytes
    out = [write_int16(version), wstr(protocol_type), write_int32(generation), wstr(protocol), wstr(leader)]
    if version >= 2:
        out.append(write_int64(current_state_timestamp))
    out.append(write_compact_array_count(len(members)) if flexible else write_int32(len(members)))
    for m in members:
        out.append(wstr(m["member_id"]))
        if version >= 3:
            out.append(wstr(m.get("group_instance_id")))
        out += [wstr(m.get("client_id", "")), wstr(m.get("client_host", ""))]
        if version >= 1:
            out.append(write_int32(m.get("rebalance_timeout_ms", -1)))
        out.append(write_int32(m.get("session_timeout_ms", 10000)))
        out += [wbytes(m.get("subscription", b"")), wbytes(m.get("assignment", b""))]
        if flexible:
            out.append(write_tagged_fields())
    if flexible:
        out.append(write_tagged_fields())
    return b"".join(out)


def write_consumer_subscription(version: int, topics, user_data: bytes | None = None,
                                owned_partitions: dict[str, list[int]] | None = None, generation_id: int = -1,
                                rack_id: str | None = None) -> bytes:
    return write_subscription(version, topics, user_data, owned_partitions, generation_id, rack_id)


def write_consumer_assignment(version: int, assigned: dict[str, list[int]], user_data: bytes | None = None) -> bytes:
    return write_assignment(version, assigned, user_data)


def write_control_record(control_type: int, coordinator_epoch: int) -> tuple[bytes, bytes]:
    """(key, value) of a transaction marker: key v0 + type, `EndTxnMarker` v0 value."""
    return write_int16(0) + write_int16(control_type), write_int16(0) + write_int32(coordinator_epoch)


# ------------------------------------------------------------------------------ flexible group records

_SCALAR_WRITERS = {"int8": write_int8, "int16": write_int16, "uint16": write_uint16, "int32": write_int32,
                   "int64": write_int64, "uuid": write_uuid, "string": write_compact_string,
                   "nstring": write_compact_string, "bytes": write_compact_bytes, "nbytes": write_compact_bytes}


# arrays of fixed-size ints packed at once: a KIP-848 assignment lists every partition
_PACKED_ARRAYS = {"int8": "b", "int16": "h", "int32": "i", "int64": "q"}


def _write_typed(ftype, v, tagged: bool = False) -> bytes:
    if isinstance(ftype, str):
        return _SCALAR_WRITERS[ftype](v)
    kind, inner = ftype
    if kind in ("array", "narray"):
        if v is None:
            return write_compact_array_count(None)
        code = _PACKED_ARRAYS.get(inner) if isinstance(inner, str) else None
        if code is not None:
            return write_compact_array_count(len(v)) + struct.pack(f">{len(v)}{code}", *v)
        return write_compact_array_count(len(v)) + b"".join(_write_typed(inner, x) for x in v)
    if kind == "nstruct":
        if v is None:
            return b"\x00" if tagged else INT8.pack(-1)
        return b"\x01" + write_flexible_struct(inner, v)
    return write_flexible_struct(inner, v)


def write_flexible_struct(schema: tuple, d: dict[str, Any]) -> bytes:
    """A flexible struct per a `messages.GROUP_RECORD_SCHEMAS` schema, fields by Kafka name; tagged fields
    written when present and not default (`always` ones always)."""
    out = []
    tags = {}
    for name, ftype, tag, default in schema:
        if tag is None:
            out.append(_write_typed(ftype, d[name]))
        elif default == "always" or (d.get(name, default) != default):
            tags[tag] = _write_typed(ftype, d.get(name), tagged=True)
    out.append(write_tagged_fields(tags))
    return b"".join(out)


def write_group_record_value(key_type: int, fields: dict[str, Any], layout: str | None = None) -> bytes:
    """Value of a type 3-17/19-23 record (v0) from Kafka-named fields, in `layout` (default: the first)."""
    layouts = GROUP_RECORD_SCHEMAS[key_type]
    schema = dict(layouts)[layout] if layout else layouts[0][1]
    return write_int16(0) + write_flexible_struct(schema, fields)


def _tid(parts) -> list[dict[str, Any]]:
    return [{"topicId": p["topic_id"], "partitions": list(p["partitions"])} for p in parts or []]


def _fields_from_columns(key_type: int, v: dict[str, Any], layout: str) -> dict[str, Any]:
    """DECODED_RECORD_SCHEMA column names -> the Kafka field names of the type's value."""
    g = v.get
    if key_type == 3:
        f = {"epoch": g("group_epoch", 0)}
        if g("metadata_hash"):
            f["metadataHash"] = g("metadata_hash")
    elif key_type == 4:
        f = {"topics": [{"topicId": t["topic_id"], "topicName": t["topic_name"], "numPartitions": t["num_partitions"],
                         "partitionMetadata": []} for t in g("topics_metadata") or []],
             "epoch": g("group_epoch", 0)}
    elif key_type == 5:
        session = g("session_timeout_ms")
        f = {"instanceId": g("group_instance_id"), "rackId": g("rack_id"), "clientId": g("client_id", ""),
             "clientHost": g("client_host", ""), "subscribedTopicNames": list(g("subscribed_topics") or []),
             "subscribedTopicRegex": g("subscribed_topic_regex"), "rebalanceTimeoutMs": g("rebalance_timeout_ms", -1),
             "serverAssignor": g("server_assignor"),
             "classicMemberMetadata": None if session is None else {"sessionTimeoutMs": session,
                                                                    "supportedProtocols": []},
             "assignors": []}
    elif key_type == 6:
        f = {"assignmentEpoch": g("assignment_epoch", 0)}
    elif key_type == 7:
        f = {"topicPartitions": _tid(g("assigned_partitions")), "error": 0, "metadataVersion": 0,
             "metadataBytes": b""}
    elif key_type == 8:
        f = {"memberEpoch": g("member_epoch", 0), "previousMemberEpoch": g("previous_member_epoch", 0),
             "state": g("member_state", 0) or 0, "assignedPartitions": _tid(g("assigned_partitions")),
             "partitionsPendingRevocation": _tid(g("partitions_pending_revocation")),
             "targetMemberEpoch": g("member_epoch", 0), "partitionsPendingAssignment": [], "error": 0,
             "metadataVersion": 0, "metadataBytes": b""}
    elif key_type == 16:
        f = {"topics": list(g("regex_topics") or []), "version": g("regex_version", 0),
             "timestamp": g("regex_timestamp", 0)}
    else:
        raise ValueError(f"write_consumer_group_record handles key types 3-8 and 16, not {key_type}")
    schema = dict(GROUP_RECORD_SCHEMAS[key_type])[layout]
    names = {name for name, *_ in schema}
    f.update({k: val for k, val in v.items() if k in names})  # Kafka-named fields given directly win
    return f


def write_consumer_group_record(key_type: int, group_id: str, value: dict | None, *, member_id: str | None = None,
                                regex: str | None = None, layout: str = "3.8+") -> tuple[bytes, bytes | None]:
    """(key, value) of a KIP-848 consumer-group record (types 3-8, 16); `value` None = tombstone. `value` keys
    are DECODED_RECORD_SCHEMA column names (group_epoch, topics_metadata, subscribed_topics, assignment_epoch,
    member_epoch, assigned_partitions, ...). `layout` "3.7" writes the 3.6/3.7 early-access layout."""
    name, second = GROUP_RECORD_TYPES[key_type]
    key = write_int16(key_type) + write_string(group_id)
    if second == "memberId":
        if member_id is None:
            raise ValueError(f"key type {key_type} ({name}) needs member_id")
        key += write_string(member_id)
    elif second == "regularExpression":
        if regex is None:
            raise ValueError("key type 16 needs regex")
        key += write_string(regex)
    if value is None:
        return key, None
    if layout not in dict(GROUP_RECORD_SCHEMAS[key_type]):
        layout = GROUP_RECORD_SCHEMAS[key_type][0][0]
    return key, write_group_record_value(key_type, _fields_from_columns(key_type, value, layout), layout)


def write_group_record_key(key_type: int, group_id: str, member_id: str | None = None,
                           regex: str | None = None) -> bytes:
    """Key of any type 3-17/19-23 record."""
    second = GROUP_RECORD_TYPES[key_type][1]
    key = write_int16(key_type) + write_string(group_id)
    if second == "memberId":
        key += write_string(member_id or "")
    elif second == "regularExpression":
        key += write_string(regex or "")
    return key
