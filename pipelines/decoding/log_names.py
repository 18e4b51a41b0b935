"""The names Kafka gives a log dir's directories and segment files, and reads them by (`LocalLog`, `LogManager`).

A partition directory is `<topic>-<partition>` (`LocalLog.parseTopicPartitionName`: the partition after the last
dash); one a deletion, a move between log dirs or a stray replica renamed (`<tp>.<uuid>-delete`, `-future`, `-stray`)
is not a partition's log. A segment is `<base offset, 20 digits>.log`. Each name is matched whole: a `$` would let a
trailing newline through, where Kafka's `Integer.parseInt` and `endsWith(".log")` refuse it.
"""
from __future__ import annotations

import re

__all__ = ["OFFSETS_PARTITION_DIR", "PARTITION_DIR", "SEGMENT_NAME", "SKIPPED_DIR"]

OFFSETS_PARTITION_DIR = re.compile(r"^__consumer_offsets-(\d+)\Z")
PARTITION_DIR = re.compile(r"^(.+)-(\d+)\Z")
SKIPPED_DIR = re.compile(r"-(delete|future|stray)\Z")
SEGMENT_NAME = re.compile(r"^(\d+)\.log\Z")
