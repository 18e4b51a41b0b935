"""Decoded `__consumer_offsets` keys and values: small frozen records named as Kafka names them.

Upstream schemas: `group-coordinator/src/main/resources/common/message/*.json` ([A:3.5.0]..[C:trunk]),
`clients/src/main/resources/common/message/{ConsumerProtocolSubscription,ConsumerProtocolAssignment,EndTxnMarker}.json`,
`clients/.../common/record/ControlRecordType.java`. Byte layouts live next to the readers in
`pipelines/decoding/messages.py` and `pipelines/decoding/consumer_protocol.py`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# -------------------------------------------------------------------------------------------------- keys


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetCommitKey:
    """Types 0/1 — `OffsetCommitKey.json` (type 0: `LegacyOffsetCommitKey` in 4.1+): group, topic, partition."""

    key_type: int
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupMetadataKey:
    """Type 2 — `GroupMetadataKey.json`: group."""

    key_type: int = 2
    group: str


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupRecordKey:
    """Types 3-17, 19-23 — `ConsumerGroup*Key.json`, `ShareGroup*Key.json`, `StreamsGroup*Key.json`.

    Every one of them is `GroupId [, MemberId]`; type 16 (`ConsumerGroupRegularExpressionKey`) is
    `GroupId, RegularExpression`. `name` is Kafka's record name (`ConsumerGroupMemberMetadata`, ...).
    """

    key_type: int
    name: str
    group_id: str
    member_id: str | None = None
    regular_expression: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class UnknownKey:
    """A key type no Kafka release defines for this topic (18, 24+, negative). Kafka 3.4.1+/3.6+ skips it."""

    key_type: int
    raw: bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class ControlRecordKey:
    """`ControlRecordType.java`: int16 version, int16 type (0 ABORT, 1 COMMIT, 2.. KRaft types)."""

    version: int
    type: int

    @property
    def type_name(self) -> str:
        return CONTROL_TYPE_NAMES.get(self.type, "UNKNOWN")


CONTROL_TYPE_NAMES = {0: "ABORT", 1: "COMMIT", 2: "LEADER_CHANGE", 3: "SNAPSHOT_HEADER", 4: "SNAPSHOT_FOOTER",
                      5: "KRAFT_VERSION", 6: "KRAFT_VOTERS"}


@dataclass(frozen=True, slots=True, kw_only=True)
class EndTxnMarker:
    """`EndTxnMarker.json` v0: int16 version, int32 coordinatorEpoch (higher versions read as v0)."""

    version: int
    coordinator_epoch: int


# ------------------------------------------------------------------------------------------------ values


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetCommitValue:
    """`OffsetCommitValue.json` v0-v4. Absent fields carry Kafka's defaults: leader_epoch -1 (v0-v2),
    expire_timestamp -1 (all but v1; `has_expire_timestamp` says whether the version has the field),
    topic_id None unless v4 tag 0 is present."""

    version: int
    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp: int
    expire_timestamp: int = -1
    topic_id: str | None = None

    @property
    def has_expire_timestamp(self) -> bool:
        return self.version == 1


@dataclass(frozen=True, slots=True, kw_only=True)
class MemberMetadata:
    """`GroupMetadataValue.json` MemberMetadata: group_instance_id v3+, rebalance_timeout v1+ (-1 when absent)."""

    member_id: str
    group_instance_id: str | None = None
    client_id: str
    client_host: str
    rebalance_timeout: int = -1
    session_timeout: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupMetadataValue:
    """`GroupMetadataValue.json` v0-v4; current_state_timestamp -1 for v0/v1."""

    version: int
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int = -1
    members: tuple[MemberMetadata, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupRecordValue:
    """A KIP-848 / share / streams value (types 3-17, 19-23), all v0 flexible.

    `fields` is the decoded struct with Kafka's JSON field names in schema order (nested structs are dicts,
    uuids Kafka's base64url strings, bytes `bytes`); the per-type schemas (one per writer generation) are the
    tables in `pipelines/decoding/messages.py`, each citing its upstream json. `layout` says which generation's
    layout parsed: "3.8+" / "3.7" for consumer-group records, "4.1+" / "4.0" for share / streams records, or
    "unparsed" for a share/streams value no known layout reads (identified by its key only).
    """

    key_type: int
    version: int
    name: str
    layout: str
    fields: dict[str, Any] = field(default_factory=dict)


# ------------------------------------------------------------------------------- embedded consumer protocol


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerProtocolSubscription:
    """`ConsumerProtocolSubscription.json` v0-v3 as far as it could be read.

    `topics`/`user_data` are Kafka's own view (version read, then parsed as v0); `owned_partitions`,
    `generation_id`, `rack_id` are None when the version lacks them or the bytes stop early (`complete` False).
    """

    version: int
    topics: tuple[str, ...]
    user_data: bytes | None
    owned_partitions: tuple[tuple[str, tuple[int, ...]], ...] | None = None
    generation_id: int | None = None
    rack_id: str | None = None
    complete: bool = True


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerProtocolAssignment:
    """`ConsumerProtocolAssignment.json` v0-v3 (same layout in every version)."""

    version: int
    assigned_partitions: tuple[tuple[str, tuple[int, ...]], ...]
    user_data: bytes | None
