"""Replay options: which coordinator generation to emulate, where in the log to stop, what the snapshot is called."""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from pipelines.decoding.messages import CONSUMER_GROUP_KEY_TYPES, SHARE_GROUP_KEY_TYPES, STREAMS_GROUP_KEY_TYPES
from schemas.record_types import CoordinatorRecordType

LEGACY = "legacy"
MODERN = "modern"
SEMANTICS = (LEGACY, MODERN)
#: What a run replays with when nothing says otherwise: the classic coordinator (Kafka <= 3.9), retention of
#: `offsets.retention.minutes`' default since Kafka 2.0 (KIP-186), and that broker version's expiry rules.
DEFAULT_SEMANTICS = LEGACY
DEFAULT_RETENTION_MINUTES = 10080
#: The broker a run emulates when nothing names one, by semantics: the last release whose default coordinator is the
#: classic one (3.9), the first whose default is the new one (4.0; 3.7-3.9 ran it only when a cluster asked). A
#: `modern` run of a 4.x log on 3.9 skipped records its broker loads (the regex record, consumer records 3.x's load
#: fails on) and lost their groups.
DEFAULT_KAFKA_VERSIONS = {LEGACY: "3.9", MODERN: "4.0"}
DEFAULT_KAFKA_VERSION = DEFAULT_KAFKA_VERSIONS[DEFAULT_SEMANTICS]

#: the first Kafka with the new group coordinator (its runtime, KIP-848) and the first without the old one (spec §5.3)
NEW_COORDINATOR_SINCE = (3, 6, 0)
OLD_COORDINATOR_UNTIL = (4, 1, 0)
#: the new coordinator's transactional offsets: none in 3.6 (its loader throws at a control batch); from 3.8 its
#: COMMIT installs only over an older offset, a tombstone clears the key from open transactions, and cleanup keeps an
#: offset with a pending one (KAFKA-14505); from 4.0.1 cleanup also keeps a group holding no committed offset while
#: a transaction of it is open (KAFKA-19163)
NEW_COORDINATOR_TRANSACTIONS_SINCE = (3, 7, 0)
PENDING_OFFSET_RULES_SINCE = (3, 8, 0)
OPEN_TRANSACTION_KEEPS_GROUP_SINCE = (4, 0, 1)

_VERSION_RE = re.compile(r"^\s*(\d+)\.(\d+)(?:\.(\d+))?")


@functools.lru_cache(maxsize=64)  # asked through ExpiryOptions' rules, several times per pass
def parse_kafka_version(version: str) -> tuple[int, int, int]:
    """'3.9' → (3, 9, 0), '2.8.2' → (2, 8, 2); suffixes such as '-rc3' or '-IV1' are ignored."""
    m = _VERSION_RE.match(str(version))
    if not m:
        raise ValueError(f"kafka_version {version!r} is not of the form MAJOR.MINOR[.PATCH]")
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


#: `offsets.retention.minutes`' default before Kafka 2.0 (KIP-186 made it 7 days)
PRE_KIP_186_RETENTION_MINUTES = 1440


def default_retention_minutes(major: int, minor: int) -> int:
    """`offsets.retention.minutes`' default in Kafka `major.minor`: what a broker of that version ran with where
    nothing set it."""
    return PRE_KIP_186_RETENTION_MINUTES if (major, minor) < (2, 0) else DEFAULT_RETENTION_MINUTES


#: the key types the old coordinator's `readMessageKey` reads (OffsetCommit v0 and v1 keys, GroupMetadata)
OLD_COORDINATOR_KEY_TYPES = frozenset({0, 1, 2})


def old_coordinator_key_types(kafka_version: str) -> frozenset[int]:
    """The key types the old coordinator of Kafka `kafka_version` reads: 0-2; before 0.9 (the group coordinator, and
    key types 1 and 2, came with it) `OffsetManager.readMessageKey` knew type 0 alone."""
    return frozenset({0}) if parse_kafka_version(kafka_version)[:2] < (0, 9) else OLD_COORDINATOR_KEY_TYPES


@functools.lru_cache(maxsize=16)
def unknown_group_key_types(semantics: str, kafka_version: str) -> frozenset[int]:
    """The group record key types the coordinator of `semantics` in Kafka `kafka_version` does not know: its loader
    skips their records with a warning (spec §5.4; `UnknownKey` in the old coordinator since 3.4.1,
    `UnknownRecordTypeException` in the new one). The old coordinator's `readMessageKey` knows types 0-2 only, so
    KIP-848 consumer groups (3-8, 16) are as unknown to it as share and streams groups; the new one's serde maps
    0-8 before 4.0 (3.9 defines share schemas it does not map; the regex record, 16, came with 4.0), 0-16 in 4.0
    (`CoordinatorRecordType`), and 0-8, 10-17, 19-23 from 4.1 (type 9 removed, streams added); 0.8's knew 0 alone
    (`old_coordinator_key_types`)."""
    share_streams = SHARE_GROUP_KEY_TYPES | STREAMS_GROUP_KEY_TYPES
    if semantics != MODERN:
        return CONSUMER_GROUP_KEY_TYPES | share_streams | (OLD_COORDINATOR_KEY_TYPES
                                                           - old_coordinator_key_types(kafka_version))
    version = parse_kafka_version(kafka_version)[:2]
    if version < (4, 0):
        return share_streams | {int(CoordinatorRecordType.CONSUMER_GROUP_REGULAR_EXPRESSION)}
    if version < (4, 1):
        return STREAMS_GROUP_KEY_TYPES
    return frozenset({min(SHARE_GROUP_KEY_TYPES)})  # ShareGroupPartitionMetadata, gone in 4.1


#: The highest value version of OffsetCommit (key types 0 and 1) and GroupMetadata (2) the old coordinator's reader
#: knows, from the release on (`OFFSET_VALUE_SCHEMAS` / `GROUP_VALUE_SCHEMAS` in GroupMetadataManager.scala; the
#: generated `OffsetCommitValue` / `GroupMetadataValue` from 3.0): v1 of GroupMetadata came with 0.10.1, v2 and v3 of
#: OffsetCommit and v2 of GroupMetadata with 2.1 (KIP-211, KIP-320), v3 of GroupMetadata with 2.3 (KIP-345), v4 of
#: both with 3.4.1 (KIP-915, KAFKA-14869; no 3.0-3.3 release has it). 0.8.2's `OffsetManager` reads type 0's v0 alone
#: (types 1 and 2 are keys it does not know: an unknown key type, not a version, fails its load).
_OLD_VALUE_VERSIONS = (((3, 4, 1), (4, 4, 4)), ((2, 3, 0), (3, 3, 3)), ((2, 1, 0), (3, 3, 2)), ((0, 10, 1), (1, 1, 1)),
                       ((0, 9, 0), (1, 1, 0)), ((0, 0, 0), (0, 1, 0)))
#: What the decoder reads (`decoding.messages`): OffsetCommit and GroupMetadata v0-v4, whichever the key type
DECODED_VALUE_VERSIONS = ((0, 4), (1, 4), (2, 4))


@functools.lru_cache(maxsize=16)
def known_value_versions(semantics: str, kafka_version: str) -> tuple[tuple[int, int], ...]:
    """(key type, the highest value version the coordinator of `semantics` in Kafka `kafka_version` reads) for the
    classic record types, 0-2. A value of a version above it fails that coordinator's load of the partition
    (spec §5.4, §8 item 7: the old one's `IllegalStateException`, the new one's `UnknownRecordVersionException`).
    The new coordinator reads v0-v4 of both (3.6+); from 4.1 type 0 is `LegacyOffsetCommitValue`, whose only
    version is 0. (The decoder quarantines the versions no release defines: the group types' values but v0 too.)"""
    version = parse_kafka_version(kafka_version)
    if semantics == MODERN:
        return ((0, 0), (1, 4), (2, 4)) if version[:2] >= (4, 1) else DECODED_VALUE_VERSIONS
    highest = next(v for since, v in _OLD_VALUE_VERSIONS if version >= since)
    return tuple(zip((0, 1, 2), highest))


def limited_value_versions(semantics: str, kafka_version: str) -> tuple[tuple[int, int], ...]:
    """`known_value_versions` where it reads less than the decoder does (none: every decoded value is known)."""
    known = known_value_versions(semantics, kafka_version)
    return () if known == DECODED_VALUE_VERSIONS else known


@functools.lru_cache(maxsize=16)
def unknown_group_fields(semantics: str, kafka_version: str) -> frozenset[str]:
    """The decoded columns of records the coordinator of `semantics` in Kafka `kafka_version` replays but whose
    generated value class lacks the field: its reader skips the tag, so its replay never sees it. 4.1's
    StreamsGroupMetadataValue has no ValidatedTopologyEpoch (4.2 tag 0)."""
    if STREAMS_GROUP_KEY_TYPES <= unknown_group_key_types(semantics, kafka_version):
        return frozenset()
    return frozenset({"validated_topology_epoch"}) if parse_kafka_version(kafka_version)[:2] < (4, 2) else frozenset()


#: The collections a replay produces, in this order.
REPLAY_TABLES = (
    "loaded_offsets",
    "empty_group_offsets",
    "loaded_groups",
    "group_members",
    "removed_groups",
    "pending_offsets",
    "offset_commits",
    "group_history",
)

#: offsets.topic.num.partitions default in every Kafka version (spec §4); the floor for the placement check.
DEFAULT_NUM_OFFSETS_PARTITIONS = 50


@dataclass(frozen=True)
class ReplayOptions:
    """How to replay `__consumer_offsets`.

    * `semantics`: ``legacy`` = the old `GroupMetadataManager.doLoadGroupsAndOffsets` (Kafka <= 3.9);
      ``modern`` = the new coordinator's `OffsetMetadataManager` / `GroupMetadataManager.replay` (3.7+/4.x; each
      version's rules: `kafka_version`). Spec §5.5.
    * `until_offset`: replay only records with `offset <= until_offset` (in every offsets partition).
    * `until_time_ms`: replay only the batches whose newest record time is `<= until_time_ms` (ms;
      `decoded.batch_times`: a reader of the coordinator sees a batch whole or not at all).
    * `num_partitions`: the offsets topic's partition count for the placement check; default: highest partition
      seen + 1, at least 50.
    * `snapshot_id`: written into every snapshot table.
    * `load_time_ms`: `currentStateTimestamp` Kafka gives groups it synthesizes for offsets (Kafka: the load time);
      null when not given, so a replay is reproducible.
    * `kafka_version`: the broker whose coordinator the replay emulates: which consumer / share / streams group
      records it knows (`unknown_group_key_types`; the others are skipped), how its transactions' markers and
      offset tombstones act (`commit_keeps_most_recent`, `tombstone_clears_transactions`).
    """

    semantics: str = LEGACY
    until_offset: int | None = None
    until_time_ms: int | None = None
    num_partitions: int | None = None
    snapshot_id: str = "adhoc"
    load_time_ms: int | None = None
    kafka_version: str | None = None  # None: the semantics' DEFAULT_KAFKA_VERSIONS

    def __post_init__(self) -> None:
        if self.semantics not in SEMANTICS:
            raise ValueError(f"semantics must be one of {SEMANTICS}, not {self.semantics!r}")
        if self.kafka_version is None:
            object.__setattr__(self, "kafka_version", DEFAULT_KAFKA_VERSIONS[self.semantics])
        if self.num_partitions is not None and self.num_partitions <= 0:
            raise ValueError("num_partitions must be positive")

    @property
    def is_modern(self) -> bool:
        return self.semantics == MODERN

    @property
    def commit_keeps_most_recent(self) -> bool:
        """Whether a transaction's COMMIT installs a pending offset only over an older committed one: the old
        loader's `olderThan` (by `appendedBatchOffset`), the new coordinator's `replayEndTransactionMarker` from 3.8
        (by record offset, KAFKA-14505 [7/N]); 3.7's installed every pending offset, whatever was committed since."""
        return not self.is_modern or parse_kafka_version(self.kafka_version) >= PENDING_OFFSET_RULES_SINCE

    @property
    def tombstone_clears_transactions(self) -> bool:
        """Whether an offset tombstone drops its partition from every open transaction (the new coordinator's
        `OffsetMetadataManager.replay` from 3.8: `openTransactions.clear`, KAFKA-14505 [8/8]). 3.7's removed the
        committed offset only; the old loader removes a transactional tombstone's key from its own transaction's
        `pendingOffsets` only."""
        return self.is_modern and parse_kafka_version(self.kafka_version) >= PENDING_OFFSET_RULES_SINCE

    @property
    def unknown_key_types(self) -> frozenset[int]:
        return unknown_group_key_types(self.semantics, self.kafka_version)

    @property
    def limited_value_versions(self) -> tuple[tuple[int, int], ...]:
        return limited_value_versions(self.semantics, self.kafka_version)

    @property
    def unknown_fields(self) -> frozenset[str]:
        return unknown_group_fields(self.semantics, self.kafka_version)

    @property
    def early_replays(self) -> tuple[str, ...]:
        """The group types whose records the emulated coordinator replays as their first releases did
        (`GroupStore.early`): the consumer group's before 4.0 (3.6-3.9: a group or member only a metadata or member
        metadata value creates, no tombstone of a missing one ignored), the share group's in 4.0 (KIP-932 early
        access) rather than 4.1's."""
        if not self.is_modern:
            return ()
        version = parse_kafka_version(self.kafka_version)[:2]
        return ("consumer",) if version < (4, 0) else ("share",) if version < (4, 1) else ()

    @property
    def unique_static_members(self) -> bool:
        """Whether loading a GroupMetadata value fails at a `groupInstanceId` it lists twice (`GroupStore
        .unique_static_members`): `GroupMetadata.add` refuses a static member already in the group from 3.0, and so
        does the new coordinator's `ClassicGroup.add`; 2.x's `loadGroup` mapped the id to the later member."""
        return self.is_modern or parse_kafka_version(self.kafka_version)[:2] >= (3, 0)

    @property
    def simple_group_replaced_by(self) -> tuple[str, ...]:
        """The group types whose records replace a simple group of offsets (`getOrMaybeCreatePersisted…Group`):
        a consumer group's from 4.0 (3.x's load fails there); a streams group's from 4.2 (KAFKA-19862: 4.1 fails
        the load); a share group's never."""
        if self.is_modern:
            version = parse_kafka_version(self.kafka_version)[:2]
            if version < (4, 0):
                return ()
            if version < (4, 2):
                return ("consumer",)
        return ("consumer", "streams")
