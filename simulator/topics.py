"""The cluster's data topics, as the groups see them: a name, a partition count, a topic id and the partitions'
leader epoch (which offset commits carry)."""
from __future__ import annotations

from simulator.names import uuid_str


class Topic:
    __slots__ = ("idx", "name", "partitions", "topic_id", "topic_id_raw", "leader_epoch")

    def __init__(self, idx: int, name: str, partitions: int, topic_id_raw: bytes):
        self.idx = idx  # groups name a topic partition (idx, partition)
        self.name = name
        self.partitions = partitions
        self.topic_id_raw = topic_id_raw
        self.topic_id = uuid_str(topic_id_raw)
        self.leader_epoch = 0
