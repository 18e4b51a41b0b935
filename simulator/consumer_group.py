"""KIP-848 consumer groups (`group.protocol=consumer`) as the new group coordinator persists them: member
subscriptions (type 5), subscription metadata (4) and the group epoch (3), target assignments (7, 6), each
member's current assignment reconciled step by step (8), and the tombstones a leaving member or a deletion writes."""
from __future__ import annotations

from pipelines.decoding import message_writer as mw
from pipelines.decoding.primitives import write_int32
from simulator.assignors import assign_range, assign_sticky
from simulator.groups import KIND_KIP848, Group
from simulator.names import HOSTS, random_uuid_str
from simulator.topics import Topic

# member states (`MemberState`): 0 STABLE, 1 UNREVOKED_PARTITIONS, 2 UNRELEASED_PARTITIONS
STABLE, UNREVOKED, UNRELEASED = 0, 1, 2


class ConsumerGroupMember:
    __slots__ = ("member_id", "instance_id", "rack", "client_id", "host", "rebalance_timeout", "epoch",
                 "prev_epoch", "state", "assigned", "assigned_list", "pending", "target")

    def __init__(self, member_id, instance_id, rack, client_id, host, rebalance_timeout):
        self.member_id = member_id
        self.instance_id = instance_id
        self.rack = rack
        self.client_id = client_id
        self.host = host
        self.rebalance_timeout = rebalance_timeout
        self.epoch = 0
        self.prev_epoch = 0
        self.state = STABLE
        self.assigned: set = set()
        self.assigned_list: list = []  # sorted, for the commit hot path
        self.pending: set = set()  # partitions pending revocation
        self.target: set = set()

    def assign(self, tps: set) -> None:
        self.assigned = tps
        self.assigned_list = sorted(tps)


class ConsumerGroup(Group):
    """A KIP-848 consumer group (`group.protocol=consumer`) as the new coordinator persists it."""

    kind = KIND_KIP848

    def __init__(self, cluster, gid, topics, weight):
        super().__init__(cluster, gid, topics, weight)
        rng = cluster.rng
        self.assignor = rng.choice((None, "uniform", "uniform", "range"))
        self.regex = None
        if rng.random() < 0.2:
            self.regex = f"^{topics[0].name.split('.')[0].split('-')[0]}.*"
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.members: dict[str, ConsumerGroupMember] = {}
        self.metadata_topics: list[int] | None = None  # topic idxs in the last type-4 value
        self.has_pm_record = False
        self.regex_resolved = False
        self.needs_target = False
        self.target_members = rng.randint(1, 4)
        self.client_prefix = gid.split("-")[0][:12] or "consumer"
        self.static = rng.random() < 0.15
        self.instance_seq = 0
        self.rebalance_timeout = rng.choice((300000, 300000, 45000))

    # -- records -------------------------------------------------------------------------------------------------
    def rec(self, key_type: int, value: dict | None, ts: int, member_id: str | None = None,
            regex: str | None = None) -> tuple:
        k, v = mw.write_consumer_group_record(key_type, self.gid, value, member_id=member_id, regex=regex)
        self.cluster.count(key_type, 1, tombstones=1 if value is None else 0)
        return (k, v, ts)

    def _tp_list(self, tps) -> list[dict]:
        topics = self.cluster.topics
        by: dict[int, list[int]] = {}
        for ti, p in sorted(tps):
            by.setdefault(ti, []).append(p)
        return [{"topic_id": topics[ti].topic_id, "partitions": ps} for ti, ps in by.items()]

    def subscribed(self) -> list[Topic]:
        return self.topics if self.members else []

    def epoch_records(self, ts: int) -> list[tuple]:
        """Group epoch bump, preceded by the subscription metadata when it changed (4.0) — 4.1 drops type 4."""
        cluster = self.cluster
        out = []
        subscribed = sorted(t.idx for t in self.subscribed())
        if not cluster.upgraded:
            if subscribed != self.metadata_topics:
                self.metadata_topics = subscribed
                self.has_pm_record = True
                out.append(self.rec(4, {"topics_metadata": [
                    {"topic_id": cluster.topics[i].topic_id, "topic_name": cluster.topics[i].name,
                     "num_partitions": cluster.topics[i].partitions} for i in subscribed]}, ts))
        elif self.has_pm_record:  # KIP-1101: 4.1 removes the legacy partition metadata record once
            self.has_pm_record = False
            out.append(self.rec(4, None, ts))
        self.group_epoch += 1
        value = {"group_epoch": self.group_epoch}
        if cluster.upgraded:
            value["metadata_hash"] = self.metadata_hash(subscribed)
        out.append(self.rec(3, value, ts))
        return out

    def metadata_hash(self, subscribed: list[int]) -> int:
        h = 0xCBF29CE484222325
        for i in subscribed:
            for b in self.cluster.topics[i].topic_id_raw + write_int32(self.cluster.topics[i].partitions):
                h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
        return h - (1 << 64) if h >= 1 << 63 else h

    def target_records(self, ts: int) -> list[tuple]:
        """A new target assignment: 7 for every member whose target changed, then 6 (assignment epoch)."""
        ids = sorted(self.members)
        out = []
        if ids:
            if self.assignor == "range":
                target = assign_range(ids, self.topics)
            else:
                target = assign_sticky(ids, self.topics, {i: self.members[i].target for i in ids})
            for mid in ids:
                m = self.members[mid]
                if target[mid] != m.target or not m.target:
                    m.target = target[mid]
                    out.append(self.rec(7, {"assigned_partitions": self._tp_list(m.target)}, ts, member_id=mid))
        self.assignment_epoch = self.group_epoch
        out.append(self.rec(6, {"assignment_epoch": self.assignment_epoch}, ts))
        self.needs_target = False
        return out

    def reconcile_record(self, m: ConsumerGroupMember, ts: int) -> tuple:
        """One heartbeat's CurrentMemberAssignment: revoke first (UNREVOKED), then move to the assignment epoch
        with whatever is not still owned by another member (UNRELEASED) or everything (STABLE)."""
        revoke = m.assigned - m.target
        if revoke and m.state != UNREVOKED:
            m.assign(m.assigned & m.target)
            m.pending = revoke
            m.state = UNREVOKED
        else:
            m.pending = set()
            others = set()
            for o in self.members.values():
                if o is not m:
                    others |= o.assigned | o.pending
            unreleased = m.target & others
            m.assign(m.target - unreleased)
            m.prev_epoch, m.epoch = m.epoch, self.assignment_epoch
            m.state = UNRELEASED if unreleased else STABLE
        return self.rec(8, {"member_epoch": m.epoch, "previous_member_epoch": m.prev_epoch, "member_state": m.state,
                            "assigned_partitions": self._tp_list(m.assigned),
                            "partitions_pending_revocation": self._tp_list(m.pending)}, ts, member_id=m.member_id)

    def needs_reconcile(self, m: ConsumerGroupMember) -> bool:
        return m.state != STABLE or m.epoch != self.assignment_epoch or m.assigned != m.target

    # -- membership ----------------------------------------------------------------------------------------------
    def join(self) -> None:
        cluster = self.cluster
        rng = cluster.rng
        ts = self.log.tick()
        self.created = True
        instance = None
        if self.static:
            self.instance_seq += 1
            instance = f"{self.client_prefix}-instance-{self.instance_seq}"
        m = ConsumerGroupMember(random_uuid_str(rng), instance, rng.choice((None, None, "use1-az1", "use1-az3")),
                          f"{self.client_prefix}-{rng.randint(1, 64)}",
                          rng.choice(HOSTS).format(rng.randint(0, 40), rng.randint(2, 250)), self.rebalance_timeout)
        self.members[m.member_id] = m
        records = [self.rec(5, {"group_instance_id": m.instance_id, "rack_id": m.rack, "client_id": m.client_id,
                                "client_host": m.host,
                                "subscribed_topics": [] if self.regex else sorted(t.name for t in self.topics),
                                "subscribed_topic_regex": self.regex, "rebalance_timeout_ms": m.rebalance_timeout,
                                "server_assignor": self.assignor}, ts, member_id=m.member_id)]
        if self.regex and not self.regex_resolved:
            self.regex_resolved = True
            records.append(self.rec(16, {"regex_topics": sorted(t.name for t in self.topics),
                                         "regex_version": rng.randint(100, 10000), "regex_timestamp": ts - 1},
                                    ts, regex=self.regex))
        records += self.epoch_records(ts)
        records += self.target_records(ts)
        records.append(self.reconcile_record(m, ts))
        self.log.write(records)

    def leave(self, m: ConsumerGroupMember) -> None:
        """Member leaves: 8, 7, 5 tombstones, then the epoch bump (and new subscription metadata)."""
        ts = self.log.tick()
        del self.members[m.member_id]
        records = [self.rec(8, None, ts, member_id=m.member_id), self.rec(7, None, ts, member_id=m.member_id),
                   self.rec(5, None, ts, member_id=m.member_id)]
        records += self.epoch_records(ts)
        self.needs_target = bool(self.members)
        self.log.write(records)

    # -- timeline ------------------------------------------------------------------------------------------------
    def step(self) -> None:
        rng = self.cluster.rng
        if len(self.members) < self.target_members and (not self.members or rng.random() < 0.3):
            self.join()
            return
        if not self.members:
            return
        if self.needs_target:
            ts = self.log.tick()
            records = self.target_records(ts)
            ids = sorted(self.members)
            records.append(self.reconcile_record(self.members[ids[rng.randrange(len(ids))]], ts))
            self.log.write(records)
            return
        lagging = next((m for m in self.members.values() if self.needs_reconcile(m)), None)
        if lagging is not None and rng.random() < 0.7:
            self.log.write([self.reconcile_record(lagging, self.log.tick())])
            return
        r = rng.random()
        if r < 0.008:
            self.target_members = rng.randint(1, 5)
            if len(self.members) > self.target_members:
                ids = sorted(self.members)
                self.leave(self.members[ids[rng.randrange(len(ids))]])
            return
        if r < 0.009:
            self.target_members = 0  # everyone goes away for a while: the group becomes Empty
            for mid in sorted(self.members):
                self.leave(self.members[mid])
            self.target_members = rng.randint(1, 4)
            return
        ids = sorted(self.members)
        m = self.members[ids[rng.randrange(len(ids))]]
        if not m.assigned:
            return
        tps = m.assigned_list
        k = rng.randint(1, min(len(tps), 8))
        s = rng.randrange(len(tps))
        self.log.write(self.commit_records((tps + tps)[s:s + k], self.log.tick(),
                                           metadata=self.pick_metadata() if rng.random() < 0.2 else ""))

    def end_cost(self) -> int:
        if not self.deleted_at_end:
            return 0
        return 5 * len(self.members) + len(self.committed) + 2 + (1 if self.has_pm_record else 0) \
            + (1 if self.regex_resolved else 0)

    def finish(self) -> None:
        if not self.deleted_at_end:
            return
        for mid in sorted(self.members):
            self.leave(self.members[mid])
        self.delete_group()

    def delete_group(self) -> None:
        """DeleteGroups on the Empty group: offsets, then 6, 16*, 4, 3 (§2.9; its members have left)."""
        ts = self.log.tick()
        records = self.tombstone_records(sorted(self.committed), ts)
        records.append(self.rec(6, None, ts))
        if self.regex_resolved:
            records.append(self.rec(16, None, ts, regex=self.regex))
        if self.has_pm_record or not self.cluster.upgraded:
            records.append(self.rec(4, None, ts))
        records.append(self.rec(3, None, ts))
        self.log.write(records, new_batch=True)  # DeleteGroups: a request of its own
        self.deleted = True
        self.cluster.stats.deleted_groups.append(self.gid)
