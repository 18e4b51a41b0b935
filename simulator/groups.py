"""What every group kind shares: its offsets partition, its committed offsets and how a commit or an offset
deletion is written, its part in the timeline (`step`, `end_cost`, `finish`); and the simple group, which is only
that. The kinds with a membership protocol are `classic_group` (classic, Connect) and `consumer_group` (KIP-848)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from pipelines.coordinator.partitioner import partition_for
from pipelines.decoding import message_writer as mw
from simulator.assignors import topic_partitions
from simulator.names import METADATA
from simulator.topics import Topic

if TYPE_CHECKING:
    from simulator.cluster import Cluster

KIND_CLASSIC, KIND_SIMPLE, KIND_KIP848, KIND_CONNECT, KIND_DELETED = "classic", "simple", "kip848", "connect", "deleted"
KIND_SHARES = ((KIND_CLASSIC, 0.60), (KIND_SIMPLE, 0.15), (KIND_KIP848, 0.15), (KIND_CONNECT, 0.05),
               (KIND_DELETED, 0.05))


class Group:
    """A group id and its offsets: every kind commits and deletes offsets the same way (OffsetCommit key v1)."""

    kind = ""
    held = False  # an incident's victim whose consumers are stopped: it takes no step (`simulator.incidents`)
    victim = False  # an incident's victim: never another's
    deleted = False  # DeleteGroups removed it (`delete_group`)

    def __init__(self, cluster: Cluster, gid: str, topics: list[Topic], weight: float):
        self.cluster = cluster
        self.gid = gid
        self.topics = topics
        self.weight = weight
        self.log = cluster.logs[partition_for(gid, cluster.partitions)]
        self.committed: dict[tuple[int, int], int] = {}  # (topic idx, partition) -> offset
        self.keys: dict[tuple[int, int], bytes] = {}
        self.deleted_at_end = False
        self.explicit_retention_ms = 0  # > 0: OffsetCommit v1 with an expireTimestamp
        self.created = False

    # -- offsets -------------------------------------------------------------------------------------------------
    def key(self, tp: tuple[int, int]) -> bytes:
        k = self.keys.get(tp)
        if k is None:
            t = self.cluster.topics[tp[0]]
            k = self.keys[tp] = mw.write_offset_commit_key(self.gid, t.name, tp[1])
        return k

    def commit_records(self, tps, ts: int, *, metadata: str = "", leader_epoch: bool = True) -> list[tuple]:
        cluster = self.cluster
        rand = cluster.rng.random
        committed = self.committed
        newest = cluster.newest_commit
        topics = cluster.topics
        keys = self.keys
        write_value = mw.write_offset_commit_value
        retention = self.explicit_retention_ms
        version = 1 if retention else (4 if cluster.upgraded else 3)
        out = []
        for tp in tps:
            off = committed.get(tp, 0) + 1 + int(rand() * 400)
            committed[tp] = off
            if off > newest.get(tp, -1):
                newest[tp] = off
                cluster.frontier.note(tp, off, ts)
            t = topics[tp[0]]
            if version == 1:
                value = write_value(1, offset=off, metadata=metadata, commit_timestamp=ts,
                                    expire_timestamp=ts + retention)
            else:
                value = write_value(version, offset=off, metadata=metadata, commit_timestamp=ts,
                                    leader_epoch=t.leader_epoch if leader_epoch else -1, topic_id=t.topic_id)
            out.append((keys.get(tp) or self.key(tp), value, ts))
        n = len(out)
        stats = cluster.stats
        stats.records_by_key_type[1] += n
        stats.offset_commit_value_versions[version] += n
        return out

    def commit_at(self, offsets: dict[tuple[int, int], int], ts: int, *, leader_epoch: bool) -> list[tuple]:
        """OffsetCommit records putting each partition at the given offset, below the group's own when an incident
        resets or rewinds it: value v3 (v4 after the 4.1 upgrade), no expire timestamp and empty metadata, as both
        a consumer's commitSync(offsets) and the admin client's alterConsumerGroupOffsets send them; `leader_epoch`:
        the topic's current one (a consumer's fetch position carries it), or -1 (the admin client sends none)."""
        cluster = self.cluster
        version = 4 if cluster.upgraded else 3
        out = []
        for tp, off in offsets.items():
            self.committed[tp] = off
            t = cluster.topics[tp[0]]
            value = mw.write_offset_commit_value(version, offset=off, metadata="", commit_timestamp=ts,
                                                 leader_epoch=t.leader_epoch if leader_epoch else -1,
                                                 topic_id=t.topic_id)
            out.append((self.key(tp), value, ts))
        cluster.stats.records_by_key_type[1] += len(out)
        cluster.stats.offset_commit_value_versions[version] += len(out)
        return out

    def tombstone_records(self, tps, ts: int) -> list[tuple]:
        out = [(self.key(tp), None, ts) for tp in tps]
        for tp in tps:
            self.committed.pop(tp, None)
        self.cluster.count(1, len(out), tombstones=len(out))
        return out

    def delete_group(self) -> None:
        """DeleteGroups on a classic or simple group: every offset tombstone, then the GroupMetadata tombstone, one
        batch."""
        ts = self.log.tick()
        records = self.tombstone_records(sorted(self.committed), ts)
        records.append((mw.write_group_metadata_key(self.gid), None, ts))
        self.cluster.count(2, 1, tombstones=1)
        self.log.write(records, new_batch=True)  # DeleteGroups: a request of its own
        self.deleted = True
        self.cluster.stats.deleted_groups.append(self.gid)

    def pick_metadata(self) -> str:
        return self.cluster.rng.choice(METADATA).replace("{n}", str(self.cluster.rng.randint(0, 99999)))

    # -- lifecycle hooks -----------------------------------------------------------------------------------------
    def step(self) -> None:
        raise NotImplementedError

    def has_end_phase(self) -> bool:
        """Whether `finish` may write anything: `end_cost` is 0 for every other group."""
        return self.deleted_at_end

    def end_cost(self) -> int:
        """Records the end phase will still write for this group (deletion, leaving members)."""
        return 0

    def finish(self) -> None:
        """End of the timeline: deletions etc."""


class SimpleGroup(Group):
    """Offset-only group (assign() + commitSync, Spark/Flink sources, AdminClient alter): no GroupMetadata."""

    kind = KIND_SIMPLE

    def __init__(self, cluster, gid, topics, weight):
        super().__init__(cluster, gid, topics, weight)
        rng = cluster.rng
        tps = topic_partitions(topics)
        k = rng.randint(1, min(len(tps), 24))
        start = rng.randrange(len(tps))
        self.assigned = sorted((tps + tps)[start:start + k])
        self.meta_style = rng.random()

    def step(self) -> None:
        rng = self.cluster.rng
        self.created = True
        if self.committed and rng.random() < 0.02 and self.cluster.may_delete_offsets():
            tps = sorted(self.committed)
            k = rng.randint(1, min(4, len(tps)))
            s = rng.randrange(len(tps))
            self.log.write(self.tombstone_records((tps + tps)[s:s + k], self.log.tick()))
            return
        k = rng.randint(1, min(len(self.assigned), 6))
        s = rng.randrange(len(self.assigned))
        chosen = (self.assigned + self.assigned)[s:s + k]
        meta = self.pick_metadata() if self.meta_style < 0.5 else ""
        self.log.write(self.commit_records(chosen, self.log.tick(), metadata=meta, leader_epoch=rng.random() < 0.7))

    def end_cost(self) -> int:
        return len(self.committed) + 1 if self.deleted_at_end else 0

    def finish(self) -> None:
        if self.deleted_at_end:
            self.delete_group()  # the new coordinator writes the GroupMetadata tombstone even for generation 0
