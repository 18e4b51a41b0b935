"""The int16 key type every `__consumer_offsets` record starts with, named as Kafka names it.

Kafka 4.0+ generates `org.apache.kafka.coordinator.group.generated.CoordinatorRecordType` from the `apiKey` of
`group-coordinator/src/main/resources/common/message/*Key.json`; `GroupCoordinatorShard.replay` switches on it.
Older brokers use the same numbers (`GroupMetadataManager.readMessageKey`: 0/1 offsets, 2 group metadata).
Type 9 was removed in 4.1; 18 was never released.
"""
from __future__ import annotations

from enum import IntEnum


class CoordinatorRecordType(IntEnum):
    LEGACY_OFFSET_COMMIT = 0
    OFFSET_COMMIT = 1
    GROUP_METADATA = 2
    CONSUMER_GROUP_METADATA = 3
    CONSUMER_GROUP_PARTITION_METADATA = 4
    CONSUMER_GROUP_MEMBER_METADATA = 5
    CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA = 6
    CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER = 7
    CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT = 8
    SHARE_GROUP_PARTITION_METADATA = 9
    SHARE_GROUP_MEMBER_METADATA = 10
    SHARE_GROUP_METADATA = 11
    SHARE_GROUP_TARGET_ASSIGNMENT_METADATA = 12
    SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER = 13
    SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT = 14
    SHARE_GROUP_STATE_PARTITION_METADATA = 15
    CONSUMER_GROUP_REGULAR_EXPRESSION = 16
    STREAMS_GROUP_METADATA = 17
    STREAMS_GROUP_MEMBER_METADATA = 19
    STREAMS_GROUP_TARGET_ASSIGNMENT_METADATA = 20
    STREAMS_GROUP_TARGET_ASSIGNMENT_MEMBER = 21
    STREAMS_GROUP_CURRENT_MEMBER_ASSIGNMENT = 22
    STREAMS_GROUP_TOPOLOGY = 23
