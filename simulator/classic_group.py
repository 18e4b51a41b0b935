"""Classic groups (JoinGroup/SyncGroup, the `consumer` protocol type) and Kafka Connect worker groups (`connect`):
members join and leave, each completed rebalance writes a GroupMetadata value with every member's subscription and
assignment, static members come back under the same instance id, transactional members commit through their
producers, and an emptied group writes its Empty record."""
from __future__ import annotations

from pipelines.decoding import message_writer as mw
from pipelines.decoding.consumer_protocol import write_sticky_assignor_user_data
from pipelines.decoding.primitives import write_int16, write_int32, write_int64, write_string
from simulator.assignors import assign_range, assign_roundrobin, assign_sticky
from simulator.clock import BASE_TIME_MS
from simulator.groups import KIND_CLASSIC, KIND_CONNECT, Group
from simulator.names import HOSTS, SERVICES, random_java_uuid
from simulator.transactions import Producer


class ClassicMember:
    __slots__ = ("member_id", "instance_id", "client_id", "host", "session_timeout", "rebalance_timeout",
                 "_owned", "owned_list", "producer")

    def __init__(self, member_id, instance_id, client_id, host, session_timeout, rebalance_timeout):
        self.member_id = member_id
        self.instance_id = instance_id
        self.client_id = client_id
        self.host = host
        self.session_timeout = session_timeout
        self.rebalance_timeout = rebalance_timeout
        self._owned: set = set()
        self.owned_list: list = []  # sorted, for the commit hot path
        self.producer: Producer | None = None

    @property
    def owned(self) -> set:
        return self._owned

    @owned.setter
    def owned(self, tps: set) -> None:
        self._owned = tps
        self.owned_list = sorted(tps)


class ClassicGroup(Group):
    """A classic (JoinGroup/SyncGroup) group of protocol type `consumer`."""

    kind = KIND_CLASSIC
    protocol_type = "consumer"

    def __init__(self, cluster, gid, topics, weight):
        super().__init__(cluster, gid, topics, weight)
        rng = cluster.rng
        self.assignor = rng.choice(("range", "range", "roundrobin", "cooperative-sticky", "cooperative-sticky",
                                    "sticky"))
        self.sub_version = rng.choice((1, 2, 3, 3)) if self.assignor != "cooperative-sticky" else rng.choice((2, 3))
        self.static = rng.random() < 0.25
        self.generation = 0
        self.members: list[ClassicMember] = []
        self.leader: str | None = None
        self.client_prefix = gid.split("-")[0][:12] or "client"
        self.rack = rng.choice((None, "", "use1-az1", "use1-az2")) if self.sub_version >= 3 else None
        self.session_timeout = rng.choice((10000, 30000, 45000, 45000))
        self.rebalance_timeout = rng.choice((60000, 300000, 300000))
        self.target_members = rng.randint(1, 5)
        self.instance_seq = 0
        self.transactional = False
        self.end_empty = False
        self.txn_plain_p = 0.1

    # -- members -------------------------------------------------------------------------------------------------
    def new_member(self, instance_id: str | None = None) -> ClassicMember:
        rng = self.cluster.rng
        client_id = f"{self.client_prefix}-{rng.randint(1, 64)}"
        if self.static and instance_id is None:
            self.instance_seq += 1
            instance_id = f"{self.client_prefix}-instance-{self.instance_seq}"
        mid = f"{instance_id or client_id}-{random_java_uuid(rng)}"
        h = rng.choice(HOSTS).format(rng.randint(0, 40), rng.randint(2, 250))
        m = ClassicMember(mid, instance_id, client_id, h, self.session_timeout, self.rebalance_timeout)
        if self.transactional:
            m.producer = self.cluster.transactions.new_producer(self)
        return m

    # -- protocol bytes ------------------------------------------------------------------------------------------
    def _by_topic(self, tps) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        topics = self.cluster.topics
        for ti, p in sorted(tps, key=lambda tp: (topics[tp[0]].name, tp[1])):
            out.setdefault(topics[ti].name, []).append(p)
        return out

    def _user_data(self, m: ClassicMember) -> bytes | None:
        if self.assignor == "sticky":  # StickyAssignor user data v1: previous assignment + generation
            return write_sticky_assignor_user_data(self._by_topic(m.owned), self.generation)
        if self.assignor == "cooperative-sticky":  # CooperativeStickyAssignor: the generation only
            return write_int32(self.generation)
        return None

    def subscription(self, m: ClassicMember) -> bytes:
        cooperative = self.assignor in ("cooperative-sticky", "sticky")
        return mw.write_consumer_subscription(
            self.sub_version, sorted(t.name for t in self.topics), user_data=self._user_data(m),
            owned_partitions=self._by_topic(m.owned) if cooperative else {},
            generation_id=self.generation if cooperative and self.sub_version >= 2 else -1,
            rack_id=self.rack)

    def assignment(self, tps) -> bytes:
        return mw.write_consumer_assignment(self.sub_version, self._by_topic(tps))

    # -- records -------------------------------------------------------------------------------------------------
    def group_record(self, ts: int, members: list[ClassicMember] | None, *, creation: bool = False) -> tuple:
        cluster = self.cluster
        state_ts = max(BASE_TIME_MS, ts - cluster.rng.randint(0, 25))
        if creation:  # new coordinator: JoinGroup on an unknown id writes an empty generation-0 group first
            value = mw.write_group_metadata_value(3, protocol_type="", generation=0, protocol=None, leader=None,
                                                  current_state_timestamp=state_ts, members=[])
        elif not members:
            value = mw.write_group_metadata_value(3, protocol_type=self.protocol_type, generation=self.generation,
                                                  protocol=None, leader=None, current_state_timestamp=state_ts,
                                                  members=[])
        else:
            value = mw.write_group_metadata_value(
                3, protocol_type=self.protocol_type, generation=self.generation, protocol=self.protocol_name(),
                leader=self.leader, current_state_timestamp=state_ts,
                members=[self.member_dict(m) for m in members])
        cluster.count(2, 1)
        return (mw.write_group_metadata_key(self.gid), value, ts)

    def protocol_name(self) -> str:
        return self.assignor

    def member_dict(self, m: ClassicMember) -> dict:
        return {"member_id": m.member_id, "group_instance_id": m.instance_id, "client_id": m.client_id,
                "client_host": m.host, "rebalance_timeout_ms": m.rebalance_timeout,
                "session_timeout_ms": m.session_timeout, "subscription": self.subscription(m),
                "assignment": self.assignment(m.owned)}

    # -- rebalances ----------------------------------------------------------------------------------------------
    def rebalance(self, ts: int, records: list | None = None) -> None:
        """A completed rebalance: generation + 1, new assignment, one GroupMetadata (two for cooperative moves)."""
        records = records if records is not None else []
        ids = [m.member_id for m in self.members]
        previous = {m.member_id: m.owned for m in self.members}
        if self.assignor == "range":
            target = assign_range(ids, self.topics)
        elif self.assignor == "roundrobin":
            target = assign_roundrobin(ids, self.topics)
        else:
            target = assign_sticky(ids, self.topics, previous)
        if self.leader not in ids:
            self.leader = self.members[0].member_id
        if self.assignor == "cooperative-sticky":
            # first round: members only get what nobody else has to revoke; then a second generation
            owned_elsewhere = {mid: set().union(*(o for x, o in previous.items() if x != mid)) for mid in ids}
            first = {mid: target[mid] - owned_elsewhere[mid] for mid in ids}
            if first != target:
                self.generation += 1
                for m in self.members:
                    m.owned = first[m.member_id]
                records.append(self.group_record(ts, self.members))
                ts = self.log.tick()
        self.generation += 1
        for m in self.members:
            m.owned = target[m.member_id]
        records.append(self.group_record(ts, self.members))
        self.log.write(records)

    def join_all(self) -> None:
        ts = self.log.tick()
        records = []
        if not self.created:
            self.created = True
            records.append(self.group_record(ts, None, creation=True))
        self.members = [self.new_member() for _ in range(self.target_members)]
        self.rebalance(ts, records)

    def leave_all(self) -> None:
        """Everyone left: an Empty GroupMetadata with the next generation (protocol and leader null)."""
        for m in self.members:
            if m.producer is not None:
                self.cluster.transactions.retire_producer(m.producer)
        self.generation += 1
        self.members = []
        self.leader = None
        self.log.write([self.group_record(self.log.tick(), [])])

    # -- timeline ------------------------------------------------------------------------------------------------
    def step(self) -> None:
        rng = self.cluster.rng
        if not self.members:
            if self.created and self.committed and rng.random() < 0.15 and self.cluster.may_delete_offsets():
                self.offset_delete()
            else:
                self.join_all()
            return
        r = rng.random()
        churn = self.cluster.churn
        if r < 0.012 * churn:
            self.membership_change()
        elif r < 0.014 * churn:
            self.leave_all()
        else:
            self.commit()

    def membership_change(self) -> None:
        rng = self.cluster.rng
        if self.static and rng.random() < 0.4:
            # a static member restarts: new member id, same instance id, no rebalance and no new generation
            i = rng.randrange(len(self.members))
            old = self.members[i]
            new = self.new_member(old.instance_id)
            new.owned = old.owned
            if old.producer is not None and new.producer is not None:
                self.cluster.transactions.retire_producer(old.producer)
            self.members[i] = new
            if self.leader == old.member_id:
                self.leader = new.member_id
            self.log.write([self.group_record(self.log.tick(), self.members)])
            return
        if len(self.members) > 1 and rng.random() < 0.5:
            gone = self.members.pop(rng.randrange(len(self.members)))
            if gone.producer is not None:
                self.cluster.transactions.retire_producer(gone.producer)
        else:
            self.members.append(self.new_member())
        self.rebalance(self.log.tick())

    def commit(self) -> None:
        cluster = self.cluster
        rng = cluster.rng
        rand = rng.random
        m = self.members[int(rand() * len(self.members))]
        tps = m.owned_list
        if not tps:
            return
        n = len(tps)
        k = 1 + int(rand() * (n if n < 8 else 8))
        start = int(rand() * n)
        chosen = tps[start:start + k] if start + k <= n else tps[start:] + tps[:start + k - n]
        producer = m.producer
        if producer is not None and producer.open_tps is None and rand() > self.txn_plain_p:
            ts = self.log.tick()
            records = self.commit_records(chosen, ts, leader_epoch=False)  # TxnOffsetCommit carries no epoch
            self.log.write_txn(records, producer.pid, producer.epoch)
            cluster.transactions.txn_started(producer, chosen, ts)
            return
        ts = self.log.tick()
        meta = self.pick_metadata() if rand() < 0.3 else ""
        self.log.write(self.commit_records(chosen, ts, metadata=meta, leader_epoch=rand() < 0.9))

    def offset_delete(self) -> None:
        """OffsetDelete on an Empty group: tombstones for one topic's partitions (one batch)."""
        rng = self.cluster.rng
        tis = sorted({ti for ti, _ in self.committed})
        ti = tis[rng.randrange(len(tis))]
        tps = sorted(tp for tp in self.committed if tp[0] == ti)
        self.log.write(self.tombstone_records(tps, self.log.tick()))

    def has_end_phase(self) -> bool:
        return self.deleted_at_end or self.end_empty

    def end_cost(self) -> int:
        if self.deleted_at_end:
            return (1 if self.members else 0) + len(self.committed) + 1
        return 1 if self.end_empty and self.members else 0

    def finish(self) -> None:
        if self.deleted_at_end:
            if self.members:
                self.leave_all()
            self.delete_group()
        elif self.end_empty and self.members:
            self.leave_all()
        if not self.deleted and self.created and not self.members:
            self.cluster.stats.empty_classic_groups += 1


class ConnectGroup(ClassicGroup):
    """A Kafka Connect worker group (protocol type `connect`): opaque ConnectProtocol bytes, no offsets here."""

    kind = KIND_CONNECT
    protocol_type = "connect"

    def __init__(self, cluster, gid, topics, weight):
        super().__init__(cluster, gid, topics, weight)
        rng = cluster.rng
        self.static = False
        self.connect_protocol = rng.choice(("sessioned", "sessioned", "compatible", "default"))
        self.connect_version = {"default": 0, "compatible": 1, "sessioned": 2}[self.connect_protocol]
        self.config_offset = rng.randint(0, 500)
        self.connectors = [f"{rng.choice(SERVICES)}-{rng.choice(('s3', 'jdbc', 'es', 'http'))}-"
                           f"{rng.choice(('sink', 'source'))}-{i}" for i in range(rng.randint(1, 4))]
        self.tasks = {c: rng.randint(1, 6) for c in self.connectors}
        self.worker_port = rng.choice((8083, 8083, 8443))

    def protocol_name(self) -> str:
        return self.connect_protocol

    def _url(self, m: ClassicMember) -> str:
        return f"http://{m.host.lstrip('/')}:{self.worker_port}/"

    def member_dict(self, m: ClassicMember) -> dict:
        # ConnectProtocol / IncrementalCooperativeConnectProtocol worker state and assignment
        v = self.connect_version
        sub = write_int16(v) + write_string(self._url(m)) + write_int64(self.config_offset)
        if v >= 1:
            sub += write_int32(-1)  # no previous allocation
        ids = sorted(x.member_id for x in self.members)
        mine = ids.index(m.member_id) if m.member_id in ids else 0
        work = [(c, t) for c in self.connectors for t in [-1] + list(range(self.tasks[c]))]
        assigned: dict[str, list[int]] = {}
        for i, (c, t) in enumerate(work):
            if i % len(ids) == mine:
                assigned.setdefault(c, []).append(t)
        leader = self.leader or m.member_id
        leader_url = self._url(next((x for x in self.members if x.member_id == leader), m))
        asg = [write_int16(v), write_int16(0), write_string(leader), write_string(leader_url),
               write_int64(self.config_offset), write_int32(len(assigned))]
        for c, ts_ in assigned.items():
            asg += [write_string(c), write_int32(len(ts_))] + [write_int32(t) for t in ts_]
        if v >= 1:
            asg += [write_int32(0), write_int32(0)]  # revoked [], scheduled delay 0
        return {"member_id": m.member_id, "group_instance_id": None, "client_id": m.client_id,
                "client_host": m.host, "rebalance_timeout_ms": 60000, "session_timeout_ms": 10000,
                "subscription": sub, "assignment": b"".join(asg)}

    def rebalance(self, ts: int, records: list | None = None) -> None:
        records = records if records is not None else []
        ids = [m.member_id for m in self.members]
        if self.leader not in ids:
            self.leader = sorted(ids)[0]
        self.generation += 1
        records.append(self.group_record(ts, self.members))
        self.log.write(records)

    def step(self) -> None:
        rng = self.cluster.rng
        if not self.members:
            self.join_all()
        elif rng.random() < 0.3:
            self.config_offset += rng.randint(1, 20)  # a connector reconfigured: workers rejoin
            if rng.random() < 0.3:
                c = rng.choice(self.connectors)
                self.tasks[c] = rng.randint(1, 8)
            self.rebalance(self.log.tick())
        else:
            self.membership_change()

    def has_end_phase(self) -> bool:
        return False

    def end_cost(self) -> int:
        return 0

    def finish(self) -> None:
        pass
