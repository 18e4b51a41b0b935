"""The consumer protocol bytes embedded in GroupMetadataValue members: Subscription and Assignment v0-v3.

Upstream: `clients/src/main/resources/common/message/ConsumerProtocol{Subscription,Assignment}.json`,
`clients/.../consumer/internals/ConsumerProtocol.java` (non-flexible, prefixed by int16 version):

    Subscription  v0: Topics string[] | UserData nullable bytes
                  v1: + OwnedPartitions [] { string Topic | int32[] Partitions }    (2.4+, KIP-429)
                  v2: + int32 GenerationId (default -1)                             (3.4+)
                  v3: + nullable string RackId                                      (3.4+, KIP-881)
    Assignment    v0-v3: AssignedPartitions [] { string Topic | int32[] Partitions } | UserData nullable bytes

Versions above 3 are read with the v3 layout (new versions may only append). Real clients are sloppy: kafka-go
claims v1 and stops after UserData. So we expose both views: Kafka's own (`GroupMetadata.computeSubscribedTopics`
reads the version and then parses as v0: Topics + UserData), and the fullest parse the bytes allow
(`complete` False when the claimed version's fields are missing). Unparseable bytes give None, never an error.
"""
from __future__ import annotations

import struct

from pipelines.decoding.errors import DecodeError, InvalidFieldError
from pipelines.decoding.primitives import (
    read_array_count,
    read_int16,
    read_int32,
    read_nullable_bytes,
    read_nullable_string,
    read_string,
    write_array_count,
    write_bytes,
    write_int16,
    write_int32,
    write_string,
)
from schemas.messages import ConsumerProtocolAssignment, ConsumerProtocolSubscription

HIGHEST_SUBSCRIPTION_VERSION = 3
HIGHEST_ASSIGNMENT_VERSION = 3

TopicPartitions = tuple[tuple[str, tuple[int, ...]], ...]


def _read_strings(buf: bytes, pos: int, field: str) -> tuple[tuple[str, ...], int]:
    n, pos = read_array_count(buf, pos, field)
    if n is None:
        raise InvalidFieldError("null array", position=pos, field=field)
    out = []
    for i in range(n):
        s, pos = read_string(buf, pos, f"{field}[{i}]")
        out.append(s)
    return tuple(out), pos


def _read_topic_partitions(buf: bytes, pos: int, field: str) -> tuple[TopicPartitions, int]:
    n, pos = read_array_count(buf, pos, field)
    if n is None:
        raise InvalidFieldError("null array", position=pos, field=field)
    out = []
    for i in range(n):
        topic, pos = read_string(buf, pos, f"{field}[{i}].topic")
        m, pos = read_array_count(buf, pos, f"{field}[{i}].partitions")
        if m is None:
            raise InvalidFieldError("null array", position=pos, field=f"{field}[{i}].partitions")
        parts = []
        for _ in range(m):
            p, pos = read_int32(buf, pos, f"{field}[{i}].partitions")
            parts.append(p)
        out.append((topic, tuple(parts)))
    return tuple(out), pos


def read_subscription(buf: bytes | None) -> ConsumerProtocolSubscription | None:
    """`ConsumerProtocol.deserializeSubscription`, leniently: None when even the v0 prefix cannot be read. A negative
    version is read as v0, as the coordinators read every version (`deserializeVersion` checks none); Kafka's
    generated reader at that version would refuse it (`dumplog` keeps such bytes as they are)."""
    if not buf:
        return None
    try:
        version, pos = read_int16(buf, 0, "version")
        topics, pos = _read_strings(buf, pos, "topics")
        user_data, pos = read_nullable_bytes(buf, pos, "userData")
    except DecodeError:
        return None
    owned = generation = rack = None
    complete = True
    try:
        if version >= 1:
            owned, pos = _read_topic_partitions(buf, pos, "ownedPartitions")
        if version >= 2:
            generation, pos = read_int32(buf, pos, "generationId")
        if version >= 3:
            rack, pos = read_nullable_string(buf, pos, "rackId")
    except DecodeError:
        complete = False
    return ConsumerProtocolSubscription(version=version, topics=topics, user_data=user_data, owned_partitions=owned,
                                        generation_id=generation, rack_id=rack, complete=complete)


def subscribed_topics(buf: bytes | None) -> tuple[str, ...] | None:
    """Kafka's view (`GroupMetadata.computeSubscribedTopics` / `ClassicGroup.computeSubscribedTopics`): read the
    version, parse the rest as v0 (Topics + UserData); any failure = unknown (None)."""
    sub = read_subscription(buf)
    return None if sub is None else sub.topics


def read_assignment(buf: bytes | None) -> ConsumerProtocolAssignment | None:
    """`ConsumerProtocol.deserializeAssignment`; empty bytes (a leader that sent none) or garbage give None."""
    if not buf:
        return None
    try:
        version, pos = read_int16(buf, 0, "version")
        if version < 0:
            return None
        assigned, pos = _read_topic_partitions(buf, pos, "assignedPartitions")
        user_data, pos = read_nullable_bytes(buf, pos, "userData")
    except DecodeError:
        return None
    return ConsumerProtocolAssignment(version=version, assigned_partitions=assigned, user_data=user_data)


# ---------------------------------------------------------------------------------------------- writers


def _write_topic_partitions(tp: dict[str, list[int]] | None) -> bytes:
    tp = tp or {}
    out = [write_array_count(len(tp))]
    for topic, parts in tp.items():
        out += [write_string(topic), write_array_count(len(parts)), struct.pack(f">{len(parts)}i", *parts)]
    return b"".join(out)


def write_subscription(version: int, topics, user_data: bytes | None = None,
                       owned_partitions: dict[str, list[int]] | None = None, generation_id: int = -1,
                       rack_id: str | None = None) -> bytes:
    """`ConsumerProtocol.serializeSubscription` at `version` (0-3)."""
    out = [write_int16(version), write_array_count(len(topics))]
    out += [write_string(t) for t in topics]
    out.append(write_bytes(user_data))
    if version >= 1:
        out.append(_write_topic_partitions(owned_partitions))
    if version >= 2:
        out.append(write_int32(generation_id))
    if version >= 3:
        out.append(write_string(rack_id))
    return b"".join(out)


def write_assignment(version: int, assigned: dict[str, list[int]], user_data: bytes | None = None) -> bytes:
    """`ConsumerProtocol.serializeAssignment` at `version` (same layout for 0-3)."""
    return write_int16(version) + _write_topic_partitions(assigned) + write_bytes(user_data)


def write_sticky_assignor_user_data(owned_partitions: dict[str, list[int]], generation: int) -> bytes:
    """StickyAssignor's subscription user data, v1 (`StickyAssignor.serializeTopicPartitionAssignment`): the
    member's previous assignment, then its generation."""
    return _write_topic_partitions(owned_partitions) + write_int32(generation)
