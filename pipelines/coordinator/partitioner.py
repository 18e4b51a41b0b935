"""Which `__consumer_offsets` partition a group id lives in.

`GroupMetadataManager.partitionFor` (0.9-3.9), `OffsetManager.partitionFor` (0.8.2), `GroupCoordinatorService
.partitionFor` (3.6+): `Utils.abs(groupId.hashCode()) % numPartitions`, where `String.hashCode` runs over UTF-16
code units with int32 wrap-around and `Utils.abs(Integer.MIN_VALUE) == 0` (not `Math.abs`, not `toPositive`).
"""
from __future__ import annotations

import functools

INT_MIN = -(1 << 31)


@functools.lru_cache(maxsize=1 << 16)  # a group's partition is asked by its tables and again by their checks
def java_string_hash(s: str) -> int:
    """Java's `String.hashCode()`: h = 31*h + c over UTF-16 code units, as a signed int32."""
    h = 0
    for cp in s:
        c = ord(cp)
        if c >= 0x10000:  # a supplementary character is two code units (a surrogate pair)
            c -= 0x10000
            h = (31 * h + (0xD800 | (c >> 10))) & 0xFFFFFFFF
            h = (31 * h + (0xDC00 | (c & 0x3FF))) & 0xFFFFFFFF
        else:
            h = (31 * h + c) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def utils_abs(n: int) -> int:
    """`org.apache.kafka.common.utils.Utils.abs`: MIN_VALUE maps to 0."""
    return 0 if n == INT_MIN else abs(n)


def partition_for(group_id: str, num_partitions: int) -> int:
    """The offsets-topic partition of `group_id` for a topic of `num_partitions` partitions."""
    if num_partitions <= 0:
        raise ValueError(f"num_partitions must be positive, got {num_partitions}")
    return utils_abs(java_string_hash(group_id)) % num_partitions
