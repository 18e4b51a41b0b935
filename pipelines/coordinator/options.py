"""Replay options: which coordinator generation to emulate, where in the log to stop, what the snapshot is called."""
from __future__ import annotations

from dataclasses import dataclass

LEGACY = "legacy"
MODERN = "modern"
SEMANTICS = (LEGACY, MODERN)
#: What a run replays with when nothing says otherwise: the classic coordinator (Kafka <= 3.9), retention of
#: `offsets.retention.minutes`' default since Kafka 2.0 (KIP-186), and that broker version's expiry rules.
DEFAULT_SEMANTICS = LEGACY
DEFAULT_RETENTION_MINUTES = 10080
DEFAULT_KAFKA_VERSION = "3.9"

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
      ``modern`` = the new coordinator's `OffsetMetadataManager` / `GroupMetadataManager.replay` (3.8+/4.x). Spec §5.5.
    * `until_offset`: replay only records with `offset <= until_offset` (in every offsets partition).
    * `until_time_ms`: replay only records with `timestamp <= until_time_ms` (record timestamp, ms).
    * `num_partitions`: the offsets topic's partition count for the placement check; default: highest partition
      seen + 1, at least 50.
    * `snapshot_id`: written into every snapshot table.
    * `load_time_ms`: `currentStateTimestamp` Kafka gives groups it synthesizes for offsets (Kafka: the load time);
      null when not given, so a replay is reproducible.
    """

    semantics: str = LEGACY
    until_offset: int | None = None
    until_time_ms: int | None = None
    num_partitions: int | None = None
    snapshot_id: str = "adhoc"
    load_time_ms: int | None = None

    def __post_init__(self) -> None:
        if self.semantics not in SEMANTICS:
            raise ValueError(f"semantics must be one of {SEMANTICS}, not {self.semantics!r}")
        if self.num_partitions is not None and self.num_partitions <= 0:
            raise ValueError("num_partitions must be positive")

    @property
    def is_modern(self) -> bool:
        return self.semantics == MODERN
