"""Print batches and records like Kafka 4.0's `kafka-dump-log --offsets-decoder` (`DumpLogSegments.scala`
[C:4.0], spec §7.1), and as the JSON objects of `offsetlake decode --json` (CONTRACT.md).

Text lines: `baseOffset: ... isvalid: true` per v2 batch (`offset: ... isvalid: ...` per legacy entry), then
`| offset: O CreateTime: T keySize: K valueSize: V sequence: S headerKeys: [..]` + ` key: {..} payload: {..}`
(`<DELETE>` for tombstones) or ` endTxnMarker: COMMIT coordinatorEpoch: E` for markers. Key/payload JSON is what
the generated `*JsonConverter.write` produces, serialized by Jackson: compact, field names in schema order,
`"type"`/`"version"` as JSON strings, bytes as base64, uuids base64url, control characters `\\u00XX`.
"""
from __future__ import annotations

import base64
import json
import re
from typing import Any

from pipelines.decoding.consumer_protocol import (
    HIGHEST_ASSIGNMENT_VERSION,
    HIGHEST_SUBSCRIPTION_VERSION,
    read_assignment,
    read_subscription,
)
from pipelines.decoding.errors import DecodeError
from pipelines.decoding.messages import (
    GROUP_RECORD_SCHEMAS,
    read_control_record_key,
    read_end_txn_marker,
    read_message_key,
    read_message_value,
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
from schemas.records import RecordBatchHeader

# ------------------------------------------------------------------------------------- Jackson-like JSON

_UESC = re.compile(r"(\\\\)|\\u([0-9a-f]{4})")


def _jstr(s: str) -> str:
    # json.dumps already escapes like Jackson (short forms for \b \t \n \f \r, \uXXXX for other controls,
    # non-ASCII kept); Jackson writes the hex digits upper-case.
    out = json.dumps(s, ensure_ascii=False)
    if "\\u" in out:
        out = _UESC.sub(lambda m: m.group(1) or "\\u" + m.group(2).upper(), out)
    return out


def jackson_dumps(obj: Any) -> str:
    """Compact JSON as Jackson's ObjectMapper writes a JsonNode tree (key order kept, bytes as base64)."""
    if obj is None:
        return "null"
    if obj is True:
        return "true"
    if obj is False:
        return "false"
    if isinstance(obj, int):
        return str(obj)
    if isinstance(obj, str):
        return _jstr(obj)
    if isinstance(obj, (bytes, bytearray, memoryview)):
        return '"' + base64.b64encode(bytes(obj)).decode("ascii") + '"'
    if isinstance(obj, dict):
        return "{" + ",".join(_jstr(k) + ":" + jackson_dumps(v) for k, v in obj.items()) + "}"
    if isinstance(obj, (list, tuple)):
        return "[" + ",".join(jackson_dumps(v) for v in obj) + "]"
    raise TypeError(f"cannot serialize {type(obj).__name__}")


# ---------------------------------------------------------------------------------- key / payload JSON


def key_json(key) -> tuple[int, dict[str, Any]]:
    """(type, data) as `*KeyJsonConverter.write` gives them."""
    if isinstance(key, OffsetCommitKey):
        return key.key_type, {"group": key.group, "topic": key.topic, "partition": key.partition}
    if isinstance(key, GroupMetadataKey):
        return 2, {"group": key.group}
    if isinstance(key, GroupRecordKey):
        data = {"groupId": key.group_id}
        if key.member_id is not None:
            data["memberId"] = key.member_id
        if key.regular_expression is not None:
            data["regularExpression"] = key.regular_expression
        return key.key_type, data
    raise TypeError(f"no JSON for {type(key).__name__}")


def _tp_json(parts) -> list[dict[str, Any]]:
    return [{"topic": t, "partitions": list(p)} for t, p in parts]


def _subscription_json(raw: bytes):
    sub = read_subscription(raw)
    if sub is None or not sub.complete or not 0 <= sub.version <= HIGHEST_SUBSCRIPTION_VERSION:
        return raw  # not parseable by Kafka's generated reader at that version: stays base64
    d: dict[str, Any] = {"topics": list(sub.topics), "userData": sub.user_data}
    if sub.version >= 1:
        d["ownedPartitions"] = _tp_json(sub.owned_partitions)
    if sub.version >= 2:
        d["generationId"] = sub.generation_id
    if sub.version >= 3:
        d["rackId"] = sub.rack_id
    return d


def _assignment_json(raw: bytes):
    asg = read_assignment(raw)
    if asg is None or asg.version > HIGHEST_ASSIGNMENT_VERSION:
        return raw
    return {"assignedPartitions": _tp_json(asg.assigned_partitions), "userData": asg.user_data}


def _struct_json(schema: tuple, d: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, ftype, tag, default in schema:
        if tag is not None:
            if default == "always":
                v = d.get(name)
            elif name not in d or d[name] == default:
                continue
            else:
                v = d[name]
        else:
            v = d.get(name)
        out[name] = _typed_json(ftype, v)
    return out


def _typed_json(ftype, v):
    if v is None or isinstance(ftype, str):
        return v
    kind, inner = ftype
    if kind in ("array", "narray"):
        return [_typed_json(inner, x) for x in v]
    return _struct_json(inner, v)


def value_json(value) -> tuple[int, dict[str, Any] | None]:
    """(version, data) as `*ValueJsonConverter.write` gives them (fields absent in the version omitted)."""
    if isinstance(value, OffsetCommitValue):
        d: dict[str, Any] = {"offset": value.offset}
        if value.version >= 3:
            d["leaderEpoch"] = value.leader_epoch
        d["metadata"] = value.metadata
        d["commitTimestamp"] = value.commit_timestamp
        if value.version == 1:
            d["expireTimestamp"] = value.expire_timestamp
        if value.topic_id is not None and value.topic_id != "AAAAAAAAAAAAAAAAAAAAAA":
            d["topicId"] = value.topic_id
        return value.version, d
    if isinstance(value, GroupMetadataValue):
        consumer = value.protocol_type == "consumer"
        d = {"protocolType": value.protocol_type, "generation": value.generation, "protocol": value.protocol,
             "leader": value.leader}
        if value.version >= 2:
            d["currentStateTimestamp"] = value.current_state_timestamp
        members = []
        for m in value.members:
            md: dict[str, Any] = {"memberId": m.member_id}
            if value.version >= 3:
                md["groupInstanceId"] = m.group_instance_id
            md["clientId"] = m.client_id
            md["clientHost"] = m.client_host
            if value.version >= 1:
                md["rebalanceTimeout"] = m.rebalance_timeout
            md["sessionTimeout"] = m.session_timeout
            md["subscription"] = _subscription_json(m.subscription) if consumer else m.subscription
            md["assignment"] = _assignment_json(m.assignment) if consumer else m.assignment
            members.append(md)
        d["members"] = members
        return value.version, d
    if isinstance(value, GroupRecordValue):
        if value.layout == "unparsed":
            return value.version, None
        schema = dict(GROUP_RECORD_SCHEMAS[value.key_type])[value.layout]
        return value.version, _struct_json(schema, value.fields)
    raise TypeError(f"no JSON for {type(value).__name__}")


# ----------------------------------------------------------------------------------------------- text


def _last_sequence(h: RecordBatchHeader) -> int:
    if h.base_sequence < 0:
        return -1
    return (h.base_sequence + (h.last_offset - h.base_offset)) % (1 << 31)


def format_batch(h: RecordBatchHeader) -> str:
    """The batch line (`DumpLogSegments.dumpLog`, 3.3+ wording)."""
    valid = "true" if h.crc_valid else "false"
    if h.magic >= 2:
        horizon = "OptionalLong.empty" if h.delete_horizon_ms is None else f"OptionalLong[{h.delete_horizon_ms}]"
        return (f"baseOffset: {h.base_offset} lastOffset: {h.last_offset} count: {h.records_count} "
                f"baseSequence: {h.base_sequence} lastSequence: {_last_sequence(h)} producerId: {h.producer_id} "
                f"producerEpoch: {h.producer_epoch} partitionLeaderEpoch: {h.partition_leader_epoch} "
                f"isTransactional: {str(h.is_transactional).lower()} isControl: {str(h.is_control).lower()} "
                f"deleteHorizonMs: {horizon} position: {h.position} {h.timestamp_type}: {h.max_timestamp} "
                f"size: {h.size} magic: {h.magic} compresscodec: {h.codec} crc: {h.crc} isvalid: {valid}")
    return (f"offset: {h.last_offset} position: {h.position} {h.timestamp_type}: {h.max_timestamp} size: {h.size} "
            f"magic: {h.magic} compresscodec: {h.codec} crc: {h.crc} isvalid: {valid}")


def decode_for_dump(record) -> tuple[str | None, str | None]:
    """(key text, payload text) as `OffsetsMessageParser.parse` prints them (payload None = not printed)."""
    try:
        key = read_message_key(record.key)
    except DecodeError as e:
        return f"Error at offset {record.offset}, skipping. {e}", None
    if isinstance(key, UnknownKey):
        return f"Unknown record type {key.key_type} at offset {record.offset}, skipping.", None
    try:
        value = read_message_value(key, record.value)
    except DecodeError as e:
        return f"Error at offset {record.offset}, skipping. {e}", None
    ktype, kdata = key_json(key)
    key_text = '{"type":"%d","data":%s}' % (ktype, jackson_dumps(kdata))
    if value is None:
        return key_text, "<DELETE>"
    version, vdata = value_json(value)
    return key_text, '{"version":"%d","data":%s}' % (version, jackson_dumps(vdata))


def format_record(h: RecordBatchHeader, record) -> str:
    """The `| offset: ...` line of one record."""
    ksize = -1 if record.key is None else len(record.key)
    vsize = -1 if record.value is None else len(record.value)
    parts = [f"| offset: {record.offset} {h.timestamp_type}: {record.timestamp} keySize: {ksize} valueSize: {vsize}"]
    if h.magic >= 2:
        parts.append(f" sequence: {record.sequence} headerKeys: [{','.join(record.header_keys)}]")
    else:
        parts.append(f" isValid: true crc: {h.crc}}}")
    if h.is_control:
        try:
            ck = read_control_record_key(record.key)
            if ck.type in (0, 1):
                marker = read_end_txn_marker(record.value)
                parts.append(f" endTxnMarker: {CONTROL_TYPE_NAMES[ck.type]} coordinatorEpoch: "
                             f"{marker.coordinator_epoch}")
            else:
                parts.append(f" controlType: {CONTROL_TYPE_NAMES.get(ck.type, 'UNKNOWN')}({ck.type})")
        except DecodeError as e:
            parts.append(f" controlType: error ({e})")
    else:
        key_text, payload = decode_for_dump(record)
        if key_text is not None:
            parts.append(f" key: {key_text}")
        if payload is not None:
            parts.append(f" payload: {payload}")
    return "".join(parts)


def dump_lines(items) -> list[str]:
    """Lines for the items of one segment (`(header, records)` tuples; `ReadProblem`s become a note line)."""
    out = []
    for item in items:
        if isinstance(item, tuple):
            h, records = item
            out.append(format_batch(h))
            out.extend(format_record(h, r) for r in records)
        else:
            out.append(f"# {item.kind} at position {item.position}: {item.reason}")
    return out


# ------------------------------------------------------------------------------------- decode --json


def batch_json(h: RecordBatchHeader) -> dict[str, Any]:
    return {"baseOffset": h.base_offset, "lastOffset": h.last_offset, "count": h.records_count,
            "baseSequence": h.base_sequence, "lastSequence": _last_sequence(h) if h.magic >= 2 else -1,
            "producerId": h.producer_id, "producerEpoch": h.producer_epoch,
            "partitionLeaderEpoch": h.partition_leader_epoch, "isTransactional": h.is_transactional,
            "isControl": h.is_control, "deleteHorizonMs": h.delete_horizon_ms, "position": h.position,
            "timestampType": h.timestamp_type, "maxTimestamp": h.max_timestamp, "size": h.size, "magic": h.magic,
            "compresscodec": h.codec, "crc": h.crc, "isvalid": h.crc_valid}


def _plain(obj):
    """bytes -> base64 for `json.dumps`."""
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_plain(v) for v in obj]
    if isinstance(obj, (bytes, bytearray)):
        return base64.b64encode(bytes(obj)).decode("ascii")
    return obj


def to_json_record(header: RecordBatchHeader, record) -> dict[str, Any]:
    """One record in the CONTRACT.md `decode --json` shape (numbers as numbers, bytes base64)."""
    out: dict[str, Any] = {
        "partition": header.offsets_partition, "offset": record.offset, "timestamp": record.timestamp,
        "keySize": -1 if record.key is None else len(record.key),
        "valueSize": -1 if record.value is None else len(record.value),
        "batch": batch_json(header),
    }
    if header.is_control:
        try:
            ck = read_control_record_key(record.key)
            ctl: dict[str, Any] = {"type": CONTROL_TYPE_NAMES.get(ck.type, f"UNKNOWN({ck.type})")}
            if ck.type in (0, 1):
                ctl["coordinatorEpoch"] = read_end_txn_marker(record.value).coordinator_epoch
            out["control"] = ctl
        except DecodeError as e:
            out["control"] = None
            out["error"] = f"{type(e).__name__}: {e}"
        return out
    try:
        key = read_message_key(record.key)
        if isinstance(key, UnknownKey):
            out["key"] = {"type": key.key_type, "data": None}
            out["payload"] = None
            out["error"] = f"Unknown record type {key.key_type}"
            return out
        ktype, kdata = key_json(key)
        out["key"] = {"type": ktype, "data": kdata}
        value = read_message_value(key, record.value)
    except DecodeError as e:
        out.setdefault("key", None)
        out["payload"] = None
        out["error"] = f"{type(e).__name__}: {e}"
        return out
    if value is None:
        out["payload"] = None
    else:
        version, vdata = value_json(value)
        out["payload"] = {"version": version, "data": _plain(vdata)}
        if isinstance(value, GroupRecordValue):
            out["payload"]["layout"] = value.layout
    return out
