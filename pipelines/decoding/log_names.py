"""The names Kafka gives a log dir's directories and segment files, and reads them by (`LocalLog`, `LogManager`).

A partition directory is `<topic>-<partition>` (`LocalLog.parseTopicPartitionName`: the partition after the last
dash); one a deletion, a move between log dirs or a stray replica renamed (`<tp>.<uuid>-delete`, `-future`, `-stray`)
is not a partition's log. A segment is `<base offset, 20 digits>.log`. Each name is matched whole: a `$` would let a
trailing newline through, where Kafka's `Integer.parseInt` and `endsWith(".log")` refuse it.

The partition is `Integer.parseInt` of what follows the last dash (4.0 `LocalLog.parseTopicPartitionName`; 2.8-3.x
`Log`/`LocalLog.parseTopicPartitionName`, Scala's `toInt`, the same call): a leading `+` and leading zeros are taken
(`-+1`, `-01` are partition 1), and so is any Unicode decimal digit of the Basic Multilingual Plane
(`Character.digit` of each `char`: a digit past it is two surrogates, neither a digit). No `-` can follow the last
dash: `__consumer_offsets--0` is partition 0 of a topic named `__consumer_offsets-`. Two directories of one log dir
naming one partition make `LogManager.loadLog` throw ("Duplicate log directories for ..."): the broker does not
start (`duplicate_partition_dirs`).
"""
from __future__ import annotations

import re
from collections.abc import Iterable

__all__ = ["INTERNAL_TOPICS", "METADATA_TOPIC", "OFFSETS_PARTITION_DIR", "PARTITION_DIR", "SEGMENT_NAME",
           "SKIPPED_DIR", "duplicate_partition_dirs", "is_internal_topic"]

# `Integer.parseInt`'s grammar past the last dash: `+`, then decimal digits of the BMP (`int()` reads them alike)
_PARTITION = r"(\+?(?:(?![\U00010000-\U0010FFFF])\d)+)"
OFFSETS_PARTITION_DIR = re.compile(rf"^__consumer_offsets-{_PARTITION}\Z")
PARTITION_DIR = re.compile(rf"^(.+)-{_PARTITION}\Z")
SKIPPED_DIR = re.compile(r"-(delete|future|stray)\Z")
SEGMENT_NAME = re.compile(r"^(\d+)\.log\Z")
#: KRaft's own log (`KafkaRaftServer.MetadataTopic`): `LogManager.loadLogs` leaves its directory to the raft manager
METADATA_TOPIC = "__cluster_metadata"
#: Kafka's internal topics (`Topic.INTERNAL_TOPICS`, 3.9 and 4.0: `Topic.isInternal`) and the metadata log. A topic a
#: user named with a leading `__` (`__audit`) is none of them: a data topic, whose partitions consumer groups lag on
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state", METADATA_TOPIC})


def is_internal_topic(topic: str) -> bool:
    """Whether `topic` is one of Kafka's own (`INTERNAL_TOPICS`), not a data topic."""
    return topic in INTERNAL_TOPICS


def duplicate_partition_dirs(names: Iterable[str]) -> tuple[str, int, str, str] | None:
    """The first (topic, partition, one directory name, another) of two of `names` (a log dir's directories) that
    name one partition (`__consumer_offsets-1` and `__consumer_offsets-01` or `-+1`), as `LogManager.loadLog` (2.8-4.x)
    finds it when it loads the second and throws; None when no two do. Directories Kafka does not load as a
    partition's log (`-delete`, `-future`, `-stray`, the metadata log) are left out."""
    seen: dict[tuple[str, int], str] = {}
    for name in sorted(names):
        m = PARTITION_DIR.match(name)
        if m is None or SKIPPED_DIR.search(name) or m.group(1) == METADATA_TOPIC:
            continue
        key = (m.group(1), int(m.group(2)))
        if key in seen:
            return key[0], key[1], seen[key], name
        seen[key] = name
    return None
