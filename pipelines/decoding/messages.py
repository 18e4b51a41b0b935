"""Keys and values of `__consumer_offsets` records: Kafka's dispatch on the int16 key type and value version.

Mirrors `GroupMetadataManager.readMessageKey / readOffsetMessageValue / readGroupMessageValue` (old coordinator,
0.9..3.9) and `GroupCoordinatorRecordSerde` / `CoordinatorRecordSerde.deserialize` (new coordinator, 3.6..4.x).
Every reader raises only `DecodeError` subclasses; an unknown key type is a value (`UnknownKey`), not an error.

Key (types 0/1):  int16 type | string group | string topic | int32 partition
Key (type 2):     int16 type | string group
Key (3-17,19-23): int16 type | string GroupId [| string MemberId | string RegularExpression (16)]
Value:            int16 version | struct at that version (null value = tombstone)
"""
from __future__ import annotations

import struct
from typing import Any

from pipelines.decoding.errors import (
    DecodeError,
    InvalidFieldError,
    TrailingBytesError,
    TruncatedError,
    UnknownVersionError,
)
from pipelines.decoding.primitives import (
    decode_utf8,
    read_compact_array_count,
    read_compact_nullable_bytes,
    read_compact_nullable_string,
    read_compact_string,
    read_int8,
    read_int16,
    read_int32,
    read_int64,
    read_nullable_bytes,
    read_nullable_string,
    read_string,
    read_tagged_fields,
    read_uint16,
    read_uuid,
    read_uvarint,
)
from schemas.messages import (
    ControlRecordKey,
    EndTxnMarker,
    GroupMetadataKey,
    GroupMetadataValue,
    GroupRecordValue,
    GroupRecordKey,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    UnknownKey,
)

OFFSET_COMMIT_KEY_TYPES = (0, 1)
GROUP_METADATA_KEY_TYPE = 2

# key type -> (Kafka record name, key fields after GroupId). Types 3-8 and 16: ConsumerGroup*Key.json; 9-15:
# ShareGroup*Key.json (9 removed in 4.1); 17, 19-23: StreamsGroup*Key.json (18 was never released).
GROUP_RECORD_TYPES: dict[int, tuple[str, str | None]] = {
    3: ("ConsumerGroupMetadata", None),
    4: ("ConsumerGroupPartitionMetadata", None),
    5: ("ConsumerGroupMemberMetadata", "memberId"),
    6: ("ConsumerGroupTargetAssignmentMetadata", None),
    7: ("ConsumerGroupTargetAssignmentMember", "memberId"),
    8: ("ConsumerGroupCurrentMemberAssignment", "memberId"),
    9: ("ShareGroupPartitionMetadata", None),
    10: ("ShareGroupMemberMetadata", "memberId"),
    11: ("ShareGroupMetadata", None),
    12: ("ShareGroupTargetAssignmentMetadata", None),
    13: ("ShareGroupTargetAssignmentMember", "memberId"),
    14: ("ShareGroupCurrentMemberAssignment", "memberId"),
    15: ("ShareGroupStatePartitionMetadata", None),
    16: ("ConsumerGroupRegularExpression", "regularExpression"),
    17: ("StreamsGroupMetadata", None),
    19: ("StreamsGroupMemberMetadata", "memberId"),
    20: ("StreamsGroupTargetAssignmentMetadata", None),
    21: ("StreamsGroupTargetAssignmentMember", "memberId"),
    22: ("StreamsGroupCurrentMemberAssignment", "memberId"),
    23: ("StreamsGroupTopology", None),
}
CONSUMER_GROUP_KEY_TYPES = frozenset({3, 4, 5, 6, 7, 8, 16})
SHARE_GROUP_KEY_TYPES = frozenset(range(9, 16))
STREAMS_GROUP_KEY_TYPES = frozenset({17, 19, 20, 21, 22, 23})


def _check_end(buf: bytes, pos: int, what: str) -> None:
    if pos != len(buf):
        raise TrailingBytesError(f"{len(buf) - pos} bytes after the {what}", position=pos, field=what)


# -------------------------------------------------------------------------------------------------- keys


def read_message_key(buf: bytes) -> OffsetCommitKey | GroupMetadataKey | GroupRecordKey | UnknownKey:
    """`GroupMetadataManager.readMessageKey` (3.4.1+: unknown types become `UnknownKey`) and the new
    coordinator's key dispatch (`GroupCoordinatorRecordSerde`, 4.0: 0-16; 4.1+: 0-8, 10-17, 19-23)."""
    if buf is None:
        raise InvalidFieldError("record without a key", position=0, field="key")
    key_type, pos = read_int16(buf, 0, "key.type")
    if key_type == 1 or key_type == 0:
        group, pos = read_string(buf, pos, "key.group")
        topic, pos = read_string(buf, pos, "key.topic")
        partition, pos = read_int32(buf, pos, "key.partition")
        _check_end(buf, pos, "key")
        return OffsetCommitKey(key_type=key_type, group=group, topic=topic, partition=partition)
    if key_type == 2:
        group, pos = read_string(buf, pos, "key.group")
        _check_end(buf, pos, "key")
        return GroupMetadataKey(group=group)
    spec = GROUP_RECORD_TYPES.get(key_type)
    if spec is None:
        return UnknownKey(key_type=key_type, raw=bytes(buf))
    name, second = spec
    group_id, pos = read_string(buf, pos, "key.groupId")
    member_id = regex = None
    if second == "memberId":
        member_id, pos = read_string(buf, pos, "key.memberId")
    elif second == "regularExpression":
        regex, pos = read_string(buf, pos, "key.regularExpression")
    _check_end(buf, pos, "key")
    return GroupRecordKey(key_type=key_type, name=name, group_id=group_id, member_id=member_id,
                          regular_expression=regex)


def read_control_record_key(buf: bytes) -> ControlRecordKey:
    """`ControlRecordType.parse`: int16 version (negative = corrupt; higher versions read as v0), int16 type."""
    if buf is None or len(buf) < 4:
        raise TruncatedError("control record key needs 4 bytes", position=0, field="controlKey")
    version, pos = read_int16(buf, 0, "controlKey.version")
    if version < 0:
        raise InvalidFieldError(f"negative control key version {version}", position=0, field="controlKey.version")
    ctype, pos = read_int16(buf, pos, "controlKey.type")
    return ControlRecordKey(version=version, type=ctype)


def read_end_txn_marker(buf: bytes) -> EndTxnMarker:
    """`EndTransactionMarker.deserializeValue`: int16 version, int32 coordinatorEpoch; versions > 0 read as v0."""
    if buf is None:
        raise InvalidFieldError("end transaction marker without a value", position=0, field="endTxnMarker")
    version, pos = read_int16(buf, 0, "endTxnMarker.version")
    if version < 0:
        raise InvalidFieldError(f"negative marker version {version}", position=0, field="endTxnMarker.version")
    epoch, pos = read_int32(buf, pos, "endTxnMarker.coordinatorEpoch")
    return EndTxnMarker(version=version, coordinator_epoch=epoch)


# ---------------------------------------------------------------------------------- OffsetCommitValue
#   v0: int64 offset | string metadata | int64 commitTimestamp
#   v1: int64 offset | string metadata | int64 commitTimestamp | int64 expireTimestamp
#   v2: as v0
#   v3: int64 offset | int32 leaderEpoch | string metadata | int64 commitTimestamp
#   v4: int64 offset | int32 leaderEpoch | compact string metadata | int64 commitTimestamp | tagged fields
#       (tag 0 topicId uuid, 4.1+)   -- first flexible version (KIP-915)

_OFFSET_LEADER = struct.Struct(">qi")


def _read_offset_v0(buf: bytes, pos: int, version: int = 0) -> OffsetCommitValue:
    offset, pos = read_int64(buf, pos, "offset")
    metadata, pos = read_string(buf, pos, "metadata")
    ts, pos = read_int64(buf, pos, "commitTimestamp")
    _check_end(buf, pos, "value")
    return OffsetCommitValue(version=version, offset=offset, metadata=metadata, commit_timestamp=ts)


def _read_offset_v1(buf: bytes, pos: int) -> OffsetCommitValue:
    offset, pos = read_int64(buf, pos, "offset")
    metadata, pos = read_string(buf, pos, "metadata")
    ts, pos = read_int64(buf, pos, "commitTimestamp")
    expire, pos = read_int64(buf, pos, "expireTimestamp")
    _check_end(buf, pos, "value")
    return OffsetCommitValue(version=1, offset=offset, metadata=metadata, commit_timestamp=ts, expire_timestamp=expire)


def _read_offset_v2(buf: bytes, pos: int) -> OffsetCommitValue:
    return _read_offset_v0(buf, pos, 2)


def _read_offset_v3(buf: bytes, pos: int) -> OffsetCommitValue:
    if pos + 12 > len(buf):
        read_int64(buf, pos, "offset")
        read_int32(buf, pos + 8, "leaderEpoch")
    offset, epoch = _OFFSET_LEADER.unpack_from(buf, pos)
    metadata, pos = read_string(buf, pos + 12, "metadata")
    ts, pos = read_int64(buf, pos, "commitTimestamp")
    _check_end(buf, pos, "value")
    return OffsetCommitValue(version=3, offset=offset, leader_epoch=epoch, metadata=metadata, commit_timestamp=ts)


def _read_offset_v4(buf: bytes, pos: int) -> OffsetCommitValue:
    """v4, flexible. Lenient rule: a value that ends exactly where its tagged-field section would start is read
    as having no tagged fields (an absent empty tag buffer; Burrow's v4 encoder writes values like that).
    Known tag 0 = topicId (16-byte uuid, omitted when zero); unknown tags are skipped by size."""
    offset, pos = read_int64(buf, pos, "offset")
    epoch, pos = read_int32(buf, pos, "leaderEpoch")
    metadata, pos = read_compact_string(buf, pos, "metadata")
    ts, pos = read_int64(buf, pos, "commitTimestamp")
    topic_id = None
    if pos < len(buf):
        tags, pos = read_tagged_fields(buf, pos)
        raw = tags.get(0)
        if raw is not None:
            if len(raw) != 16:
                raise InvalidFieldError(f"topicId tag of {len(raw)} bytes", position=pos, field="topicId")
            topic_id, _ = read_uuid(raw, 0, "topicId")
    _check_end(buf, pos, "value")
    return OffsetCommitValue(version=4, offset=offset, leader_epoch=epoch, metadata=metadata, commit_timestamp=ts,
                             topic_id=topic_id)


OFFSET_COMMIT_VALUE_READERS = {0: _read_offset_v0, 1: _read_offset_v1, 2: _read_offset_v2, 3: _read_offset_v3,
                               4: _read_offset_v4}


# The common values, v0-v3 whole with a metadata string, in one unpack of their fixed head: the decoders read
# millions. Any other (v4, short, trailing bytes, a null or negative length) is read field by field, which says where
# and why it fails.
_V0_HEAD = struct.Struct(">hqh")  # version, offset, metadata length (v0-v2)
_V3_HEAD = struct.Struct(">hqih")  # version, offset, leaderEpoch, metadata length
_INT64 = struct.Struct(">q").unpack_from
_INT64_PAIR = struct.Struct(">qq").unpack_from


def read_offset_message_value(buf: bytes) -> OffsetCommitValue:
    """`GroupMetadataManager.readOffsetMessageValue` / `OffsetCommitValue` v0-v4; unknown version = error."""
    fields = _common_offset_value(buf)
    if fields is None:
        return _offset_value_by_field(buf)
    version, offset, epoch, metadata, commit, expire, _ = fields
    return OffsetCommitValue(version=version, offset=offset, leader_epoch=epoch, metadata=metadata,
                             commit_timestamp=commit, expire_timestamp=expire)


def offset_commit_value_fields(buf: bytes) -> tuple:
    """`read_offset_message_value` as the tuple (version, offset, leader_epoch, metadata, commit_timestamp,
    expire_timestamp, topic_id), without the object: the decoders' column rows. Raises as it does."""
    fields = _common_offset_value(buf)
    if fields is None:
        v = _offset_value_by_field(buf)
        return v.version, v.offset, v.leader_epoch, v.metadata, v.commit_timestamp, v.expire_timestamp, v.topic_id
    return fields


def _common_offset_value(buf: bytes) -> tuple | None:
    """A v0-v3 value, whole, with a metadata string, read in one unpack of its fixed head; None for any other."""
    n = len(buf)
    if n < 20 or buf[0] != 0 or buf[1] > 3:
        return None
    version = buf[1]
    if version == 3:
        _, offset, epoch, size = _V3_HEAD.unpack_from(buf)
        start = 16
    else:
        _, offset, size = _V0_HEAD.unpack_from(buf)
        epoch, start = -1, 12
    end = start + size
    if size < 0 or end + (16 if version == 1 else 8) != n:
        return None
    metadata = decode_utf8(buf[start:end]) if size else ""
    if version == 1:
        commit, expire = _INT64_PAIR(buf, end)
        return 1, offset, -1, metadata, commit, expire, None
    return version, offset, epoch, metadata, _INT64(buf, end)[0], -1, None


def _offset_value_by_field(buf: bytes) -> OffsetCommitValue:
    """Field by field: every version, and where and why a value fails."""
    version, pos = read_int16(buf, 0, "value.version")
    reader = OFFSET_COMMIT_VALUE_READERS.get(version)
    if reader is None:
        raise UnknownVersionError(f"unknown OffsetCommitValue version {version}", position=0, field="value.version")
    return reader(buf, pos)


# ---------------------------------------------------------------------------------- GroupMetadataValue
#   v0: string protocolType | int32 generation | nstring protocol | nstring leader | members[]
#   v1: as v0                                                                       members with rebalanceTimeout
#   v2: ... nstring leader | int64 currentStateTimestamp | members[]
#   v3: as v2, members with groupInstanceId
#   v4: as v3, flexible (compact strings/bytes/arrays, tagged sections on the value and on each member)
#   MemberMetadata: string memberId | [v3+ nstring groupInstanceId] | string clientId | string clientHost |
#                   [v1+ int32 rebalanceTimeout] | int32 sessionTimeout | bytes subscription | bytes assignment


def _read_members(buf: bytes, pos: int, version: int) -> tuple[tuple[MemberMetadata, ...], int]:
    flexible = version >= 4
    if flexible:
        count, pos = read_compact_array_count(buf, pos, "members")
    else:
        count, pos = read_int32(buf, pos, "members")
        if count < -1:
            raise InvalidFieldError(f"members count {count}", position=pos - 4, field="members")
        if count > len(buf) - pos:
            raise TruncatedError(f"{count} members cannot fit", position=pos - 4, field="members")
        if count == -1:
            count = None
    if count is None:
        raise InvalidFieldError("null members array", position=pos, field="members")
    rstr = read_compact_string if flexible else read_string
    rnstr = read_compact_nullable_string if flexible else read_nullable_string
    rbytes = read_compact_nullable_bytes if flexible else read_nullable_bytes
    members = []
    for i in range(count):
        f = f"members[{i}]."
        member_id, pos = rstr(buf, pos, f + "memberId")
        instance = None
        if version >= 3:
            instance, pos = rnstr(buf, pos, f + "groupInstanceId")
        client_id, pos = rstr(buf, pos, f + "clientId")
        client_host, pos = rstr(buf, pos, f + "clientHost")
        rebalance = -1
        if version >= 1:
            rebalance, pos = read_int32(buf, pos, f + "rebalanceTimeout")
        session, pos = read_int32(buf, pos, f + "sessionTimeout")
        sub, pos = rbytes(buf, pos, f + "subscription")
        asg, pos = rbytes(buf, pos, f + "assignment")
        if sub is None or asg is None:
            raise InvalidFieldError("null bytes in a non-nullable field", position=pos, field=f + "subscription")
        if flexible:
            _, pos = read_tagged_fields(buf, pos, f + "_tagged_fields")
        members.append(MemberMetadata(member_id=member_id, group_instance_id=instance, client_id=client_id,
                                      client_host=client_host, rebalance_timeout=rebalance, session_timeout=session,
                                      subscription=sub, assignment=asg))
    return tuple(members), pos


def _read_group_header(buf: bytes, pos: int, version: int):
    flexible = version >= 4
    rstr = read_compact_string if flexible else read_string
    rnstr = read_compact_nullable_string if flexible else read_nullable_string
    protocol_type, pos = rstr(buf, pos, "protocolType")
    generation, pos = read_int32(buf, pos, "generation")
    protocol, pos = rnstr(buf, pos, "protocol")
    leader, pos = rnstr(buf, pos, "leader")
    ts = -1
    if version >= 2:
        ts, pos = read_int64(buf, pos, "currentStateTimestamp")
    return protocol_type, generation, protocol, leader, ts, pos


def _read_group(buf: bytes, pos: int, version: int) -> GroupMetadataValue:
    protocol_type, generation, protocol, leader, ts, pos = _read_group_header(buf, pos, version)
    members, pos = _read_members(buf, pos, version)
    if version >= 4 and pos < len(buf):  # same lenient end-of-value rule as OffsetCommitValue v4
        _, pos = read_tagged_fields(buf, pos)
    _check_end(buf, pos, "value")
    return GroupMetadataValue(version=version, protocol_type=protocol_type, generation=generation, protocol=protocol,
                              leader=leader, current_state_timestamp=ts, members=members)


def _read_group_v0(buf, pos):
    return _read_group(buf, pos, 0)


def _read_group_v1(buf, pos):
    return _read_group(buf, pos, 1)


def _read_group_v2(buf, pos):
    return _read_group(buf, pos, 2)


def _read_group_v3(buf, pos):
    return _read_group(buf, pos, 3)


def _read_group_v4(buf, pos):
    """v4 is flexible; a value ending exactly where its final tagged-field section would start is accepted as
    "no tagged fields" (the lenient rule of `_read_offset_v4`)."""
    return _read_group(buf, pos, 4)


GROUP_METADATA_VALUE_READERS = {0: _read_group_v0, 1: _read_group_v1, 2: _read_group_v2, 3: _read_group_v3,
                                4: _read_group_v4}


def read_group_message_value(buf: bytes) -> GroupMetadataValue:
    """`GroupMetadataManager.readGroupMessageValue` / `GroupMetadataValue` v0-v4; unknown version = error."""
    version, pos = read_int16(buf, 0, "value.version")
    reader = GROUP_METADATA_VALUE_READERS.get(version)
    if reader is None:
        raise UnknownVersionError(f"unknown GroupMetadataValue version {version}", position=0, field="value.version")
    return reader(buf, pos)


# ------------------------------------------------------------------- KIP-848 / share / streams values (v0)
# All flexible v0 structs. A schema is a tuple of fields (KafkaName, type[, tag, default]); types are
# "int8" "int16" "uint16" "int32" "int64" "uuid" "string" "nstring" "bytes" "nbytes", ("array", T),
# ("struct", schema), ("nstruct", schema). Every struct (nested too) ends with its tagged-field section.
# A tagged field is written by Kafka only when it differs from `default` ("always": written even when null —
# what 4.0 does for ClassicMemberMetadata; its payload then starts with 0 = null / 1 = present).


class F(tuple):
    """A schema field: name, type, tag (None = untagged), default (for tagged fields)."""

    def __new__(cls, name: str, ftype: Any, tag: int | None = None, default: Any = None):
        return super().__new__(cls, (name, ftype, tag, default))


TOPIC_PARTITIONS = ("struct", (F("topicId", "uuid"), F("partitions", ("array", "int32"))))
PARTITION_METADATA = ("struct", (F("partition", "int32"), F("racks", ("array", "string"))))
TOPIC_METADATA = ("struct", (F("topicId", "uuid"), F("topicName", "string"), F("numPartitions", "int32"),
                             F("partitionMetadata", ("array", PARTITION_METADATA))))
CLASSIC_MEMBER_METADATA = ("nstruct", (F("sessionTimeoutMs", "int32"),
                                       F("supportedProtocols", ("array", ("struct", (F("name", "string"),
                                                                                      F("metadata", "bytes")))))))
ASSIGNOR = ("struct", (F("name", "string"), F("minimumVersion", "int16"), F("maximumVersion", "int16"),
                       F("reason", "int8"), F("version", "int16"), F("metadata", "bytes")))
TASK_IDS = ("struct", (F("subtopologyId", "string"), F("partitions", ("array", "int32")),
                       F("assignmentEpochs", ("narray", "int32"), 0, None)))
KEY_VALUE = ("struct", (F("key", "string"), F("value", "string")))
TOPIC_INFO = ("struct", (F("name", "string"), F("partitions", "int32"), F("replicationFactor", "int16"),
                         F("topicConfigs", ("array", KEY_VALUE))))
COPARTITION_GROUP = ("struct", (F("sourceTopics", ("array", "int16")), F("sourceTopicRegex", ("array", "int16")),
                                 F("repartitionSourceTopics", ("array", "int16"))))
SUBTOPOLOGY = ("struct", (F("subtopologyId", "string"), F("sourceTopics", ("array", "string")),
                          F("sourceTopicRegex", ("array", "string")), F("stateChangelogTopics", ("array", TOPIC_INFO)),
                          F("repartitionSinkTopics", ("array", "string")),
                          F("repartitionSourceTopics", ("array", TOPIC_INFO)),
                          F("copartitionGroups", ("array", COPARTITION_GROUP))))
STATE_TOPIC = ("struct", (F("topicId", "uuid"), F("topicName", "string"), F("partitions", ("array", "int32"))))

# key type -> ((layout, schema), ...) in the order they are tried.
GROUP_RECORD_SCHEMAS: dict[int, tuple[tuple[str, tuple], ...]] = {
    # ConsumerGroupMetadataValue.json: Epoch; 4.1+ tag 0 MetadataHash (KIP-1101)
    3: (("3.8+", (F("epoch", "int32"), F("metadataHash", "int64", 0, 0))),),
    # ConsumerGroupPartitionMetadataValue.json; 3.6/3.7 had a leading Epoch
    4: (("3.8+", (F("topics", ("array", TOPIC_METADATA)),)),
        ("3.7", (F("epoch", "int32"), F("topics", ("array", TOPIC_METADATA))))),
    # ConsumerGroupMemberMetadataValue.json; 3.6/3.7: Assignors[] instead of the ClassicMemberMetadata tag
    5: (("3.8+", (F("instanceId", "nstring"), F("rackId", "nstring"), F("clientId", "string"),
                  F("clientHost", "string"), F("subscribedTopicNames", ("array", "string")),
                  F("subscribedTopicRegex", "nstring"), F("rebalanceTimeoutMs", "int32"),
                  F("serverAssignor", "nstring"), F("classicMemberMetadata", CLASSIC_MEMBER_METADATA, 0, "always"))),
        ("3.7", (F("instanceId", "nstring"), F("rackId", "nstring"), F("clientId", "string"),
                 F("clientHost", "string"), F("subscribedTopicNames", ("array", "string")),
                 F("subscribedTopicRegex", "nstring"), F("rebalanceTimeoutMs", "int32"),
                 F("serverAssignor", "nstring"),
                 F("assignors", ("array", ASSIGNOR))))),
    # ConsumerGroupTargetAssignmentMetadataValue.json
    6: (("3.8+", (F("assignmentEpoch", "int32"),)),),
    # ConsumerGroupTargetAssignmentMemberValue.json; 3.6/3.7: Error, TopicPartitions, MetadataVersion, MetadataBytes
    7: (("3.8+", (F("topicPartitions", ("array", TOPIC_PARTITIONS)),)),
        ("3.7", (F("error", "int8"), F("topicPartitions", ("array", TOPIC_PARTITIONS)),
                 F("metadataVersion", "int16"), F("metadataBytes", "bytes")))),
    # ConsumerGroupCurrentMemberAssignmentValue.json; 3.6/3.7 layout below it
    8: (("3.8+", (F("memberEpoch", "int32"), F("previousMemberEpoch", "int32"), F("state", "int8"),
                  F("assignedPartitions", ("array", TOPIC_PARTITIONS)),
                  F("partitionsPendingRevocation", ("array", TOPIC_PARTITIONS)))),
        ("3.7", (F("memberEpoch", "int32"), F("previousMemberEpoch", "int32"), F("targetMemberEpoch", "int32"),
                 F("assignedPartitions", ("array", TOPIC_PARTITIONS)),
                 F("partitionsPendingRevocation", ("array", TOPIC_PARTITIONS)),
                 F("partitionsPendingAssignment", ("array", TOPIC_PARTITIONS)),
                 F("error", "int8"), F("metadataVersion", "int16"), F("metadataBytes", "bytes")))),
    # ShareGroupPartitionMetadataValue.json (3.9/4.0 only)
    9: (("4.0", (F("topics", ("array", TOPIC_METADATA)),)),),
    # ShareGroupMemberMetadataValue.json
    10: (("4.0+", (F("rackId", "nstring"), F("clientId", "string"), F("clientHost", "string"),
                   F("subscribedTopicNames", ("array", "string")))),),
    # ShareGroupMetadataValue.json: 4.1+ adds an untagged MetadataHash
    11: (("4.1+", (F("epoch", "int32"), F("metadataHash", "int64"))),
         ("4.0", (F("epoch", "int32"),))),
    12: (("4.0+", (F("assignmentEpoch", "int32"),)),),
    13: (("4.0+", (F("topicPartitions", ("array", TOPIC_PARTITIONS)),)),),
    14: (("4.0+", (F("memberEpoch", "int32"), F("previousMemberEpoch", "int32"), F("state", "int8"),
                   F("assignedPartitions", ("array", TOPIC_PARTITIONS)))),),
    # ShareGroupStatePartitionMetadataValue.json: 4.1+ prepends InitializingTopics
    15: (("4.1+", (F("initializingTopics", ("array", STATE_TOPIC)), F("initializedTopics", ("array", STATE_TOPIC)),
                   F("deletingTopics", ("array", ("struct", (F("topicId", "uuid"), F("topicName", "string"))))))),
         ("4.0", (F("initializedTopics", ("array", STATE_TOPIC)),
                  F("deletingTopics", ("array", ("struct", (F("topicId", "uuid"), F("topicName", "string")))))))),
    # ConsumerGroupRegularExpressionValue.json (4.0+)
    16: (("3.8+", (F("topics", ("array", "string")), F("version", "int64"), F("timestamp", "int64"))),),
    # StreamsGroupMetadataValue.json (4.1+; 4.2 tags)
    17: (("4.1+", (F("epoch", "int32"), F("metadataHash", "int64"), F("validatedTopologyEpoch", "int32", 0, -1),
                   F("lastAssignmentConfigs", ("narray", KEY_VALUE), 1, None))),),
    19: (("4.1+", (F("instanceId", "nstring"), F("rackId", "nstring"), F("clientId", "string"),
                   F("clientHost", "string"), F("rebalanceTimeoutMs", "int32"), F("topologyEpoch", "int32"),
                   F("processId", "string"),
                   F("userEndpoint", ("nstruct", (F("host", "string"), F("port", "uint16")))),
                   F("clientTags", ("array", KEY_VALUE)))),),
    20: (("4.1+", (F("assignmentEpoch", "int32"),)),),
    21: (("4.1+", (F("activeTasks", ("array", TASK_IDS)), F("standbyTasks", ("array", TASK_IDS)),
                   F("warmupTasks", ("array", TASK_IDS)))),),
    22: (("4.1+", (F("memberEpoch", "int32"), F("previousMemberEpoch", "int32"), F("state", "int8"),
                   F("activeTasks", ("array", TASK_IDS)), F("standbyTasks", ("array", TASK_IDS)),
                   F("warmupTasks", ("array", TASK_IDS)), F("activeTasksPendingRevocation", ("array", TASK_IDS)),
                   F("standbyTasksPendingRevocation", ("array", TASK_IDS)),
                   F("warmupTasksPendingRevocation", ("array", TASK_IDS)))),),
    23: (("4.1+", (F("epoch", "int32"), F("subtopologies", ("array", SUBTOPOLOGY)))),),
}

_SCALARS = {"int8": read_int8, "int16": read_int16, "uint16": read_uint16, "int32": read_int32,
            "int64": read_int64, "uuid": read_uuid, "nstring": read_compact_nullable_string,
            "string": read_compact_string, "nbytes": read_compact_nullable_bytes}


def _read_typed(buf: bytes, pos: int, ftype: Any, field: str, tagged: bool = False) -> tuple[Any, int]:
    if isinstance(ftype, str):
        if ftype == "bytes":
            v, pos = read_compact_nullable_bytes(buf, pos, field)
            if v is None:
                raise InvalidFieldError("null for non-nullable bytes", position=pos, field=field)
            return v, pos
        return _SCALARS[ftype](buf, pos, field)
    kind, inner = ftype
    if kind in ("array", "narray"):
        count, pos = read_compact_array_count(buf, pos, field)
        if count is None:
            if kind == "array":
                raise InvalidFieldError("null for a non-nullable array", position=pos, field=field)
            return None, pos
        out = []
        for i in range(count):
            v, pos = _read_typed(buf, pos, inner, f"{field}[{i}]")
            out.append(v)
        return out, pos
    if kind == "nstruct":
        start = pos
        if tagged:
            marker, pos = read_uvarint(buf, pos, field)
            present = marker != 0
        else:
            marker, pos = read_int8(buf, pos, field)
            present = marker >= 0
        if marker not in ((0, 1) if tagged else (-1, 1)):
            raise InvalidFieldError(f"nullable struct marker {marker}", position=start, field=field)
        if not present:
            return None, pos
        return read_flexible_struct(buf, pos, inner, field)
    if kind == "struct":
        return read_flexible_struct(buf, pos, inner, field)
    raise InvalidFieldError(f"schema type {kind}", position=pos, field=field)  # pragma: no cover


def read_flexible_struct(buf: bytes, pos: int, schema: tuple, field: str = "") -> tuple[dict[str, Any], int]:
    """A flexible struct per `schema`: untagged fields in order, then its tagged-field section (known tags
    decoded from their payload, unknown tags skipped by size). Tagged fields absent from the bytes are left out
    of the result (they hold their default)."""
    out: dict[str, Any] = {}
    tagged_fields = {}
    prefix = f"{field}." if field else ""
    for name, ftype, tag, default in schema:
        if tag is not None:
            tagged_fields[tag] = (name, ftype)
            continue
        out[name], pos = _read_typed(buf, pos, ftype, prefix + name)
    tags, pos = read_tagged_fields(buf, pos, prefix + "_tagged_fields")
    for tag, raw in tags.items():
        spec = tagged_fields.get(tag)
        if spec is None:
            continue
        name, ftype = spec
        v, end = _read_typed(raw, 0, ftype, prefix + name, tagged=True)
        if end != len(raw):
            raise TrailingBytesError(f"{len(raw) - end} bytes after tagged field {name}", position=end,
                                     field=prefix + name)
        out[name] = v
    return out, pos


def read_group_record_value(key_type: int, buf: bytes) -> GroupRecordValue:
    """Values of types 3-17, 19-23 (`GroupCoordinatorRecordSerde`, all v0): try each known layout in order
    (3.8+ before 3.6/3.7 for consumer groups, 4.1+ before 4.0 for share groups) and keep the first that reads
    the whole buffer. A consumer-group value no layout reads raises the 3.8+ layout's error; a share / streams
    value no layout reads is kept as layout "unparsed" (identified by its key; early-access formats)."""
    name = GROUP_RECORD_TYPES[key_type][0]
    version, pos = read_int16(buf, 0, "value.version")
    if version != 0:
        raise UnknownVersionError(f"unknown {name}Value version {version}", position=0, field="value.version")
    first_error: DecodeError | None = None
    for layout, schema in GROUP_RECORD_SCHEMAS[key_type]:
        try:
            fields, end = read_flexible_struct(buf, pos, schema)
            _check_end(buf, end, "value")
        except DecodeError as e:
            first_error = first_error or e
            continue
        return GroupRecordValue(key_type=key_type, version=version, name=name, layout=layout, fields=fields)
    if key_type in CONSUMER_GROUP_KEY_TYPES:
        raise first_error
    return GroupRecordValue(key_type=key_type, version=version, name=name, layout="unparsed", fields={})


def read_message_value(key, buf: bytes | None):
    """The value for an already-read key (None for a tombstone or an unknown key)."""
    if buf is None:
        return None
    if isinstance(key, OffsetCommitKey):
        return read_offset_message_value(buf)
    if isinstance(key, GroupMetadataKey):
        return read_group_message_value(buf)
    if isinstance(key, GroupRecordKey):
        return read_group_record_value(key.key_type, buf)
    return None


def read_record(key: bytes | None, value: bytes | None):
    """(key, value) of one data record; value None for tombstones and unknown keys."""
    k = read_message_key(key)
    return k, read_message_value(k, value)

