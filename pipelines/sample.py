"""A deterministic, realistic `__consumer_offsets` log dir: what a Kafka 4.0 (then 4.1) cluster's group coordinators
would have left on disk after hours of classic, simple, Connect and KIP-848 groups, transactions and deletions.

Pure Python (no pyspark); `random.Random(seed)` is the only source of variation and the clock starts at
2026-11-01T00:00:00Z, so the same arguments always give the same bytes.

How the writes mimic the broker (spec §1.3-1.6, `brokerdata/*/dump_log`):

* every batch is magic 2, CreateTime; coordinator writes carry producerId -1, epoch -1, baseSequence 0
  (`CoordinatorRuntime`); TxnOffsetCommit batches carry the producer's id (>= 1000) and epoch, baseSequence 0
  and the transactional bit; COMMIT/ABORT markers are uncompressed control batches with baseSequence -1;
* records of one request (a commit of several partitions, a KIP-848 heartbeat) share one batch, and
  consecutive requests on a partition are sometimes merged into one batch (`group.coordinator.append.linger.ms`);
* classic groups: a generation-0 GroupMetadata on creation, a v3 GroupMetadata per rebalance with real
  ConsumerProtocol subscription (v1-v3) and assignment bytes, an Empty record (members [], next generation)
  when everyone leaves; static members keep their generation when replaced;
* KIP-848 groups: 5/4/3/7/6/8 on join, 8-7-5 tombstones then 3 on leave, 7*/6 on a new target assignment,
  8 per reconciliation step (UNREVOKED -> STABLE/UNRELEASED); deletion writes offset tombstones, then 6, 16*,
  4, 3 (§2.9, `ConsumerGroup.createGroupTombstoneRecords`);
* classic/simple deletion: offset tombstones then the GroupMetadata tombstone in one batch (DeleteGroups);
* a broker upgrade to 4.1 late in the timeline: OffsetCommitValue v4 with topicId, MetadataHash on type 3, a
  one-time type-4 tombstone instead of type-4 values (KIP-1101), partition leader epoch bumped by 2;
* codecs change over time per partition (`offsets.topic.compression.codec` reconfigured), all five appear.
"""
from __future__ import annotations

import base64
import heapq
import shutil
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from random import Random

from pipelines.coordinator.partitioner import partition_for
from pipelines.decoding import message_writer as mw
from pipelines.decoding.batch_writer import write_control_batch, write_record_batch
from pipelines.decoding.consumer_protocol import write_sticky_assignor_user_data
from pipelines.decoding.primitives import write_int16, write_int32, write_int64, write_string

__all__ = ["BASE_TIME_MS", "DEFAULT_SEGMENT_BYTES", "SampleStats", "generate_sample"]

BASE_TIME_MS = 1_793_491_200_000  # 2026-11-01T00:00:00Z
DEFAULT_SEGMENT_BYTES = 8 * 1024 * 1024
MIN_RECORDS_PER_GROUP = 8  # creating a group alone takes 2-7 records; the record budget must leave room for life
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
SHAPES = ("mixed", "cleaner-died")

KIND_CLASSIC, KIND_SIMPLE, KIND_KIP848, KIND_CONNECT, KIND_DELETED = "classic", "simple", "kip848", "connect", "deleted"
KIND_SHARES = ((KIND_CLASSIC, 0.60), (KIND_SIMPLE, 0.15), (KIND_KIP848, 0.15), (KIND_CONNECT, 0.05),
               (KIND_DELETED, 0.05))

# KIP-848 member states (`MemberState`): 0 STABLE, 1 UNREVOKED_PARTITIONS, 2 UNRELEASED_PARTITIONS
STABLE, UNREVOKED, UNRELEASED = 0, 1, 2

# ================================================================================================================
# stats
# ================================================================================================================
@dataclass
class SampleStats:
    """What `generate_sample` wrote. `records` counts every record (data and control) in every batch."""

    out_dir: str = ""
    seed: int = 0
    partitions: int = 0
    segment_bytes: int = 0
    records: int = 0
    batches: int = 0
    bytes: int = 0  # total size of the .log files
    files: int = 0  # .log files (empty partitions included)
    groups: int = 0
    groups_by_kind: dict[str, int] = field(default_factory=dict)
    group_partitions: dict[str, int] = field(default_factory=dict)  # group id -> __consumer_offsets partition
    deleted_groups: list[str] = field(default_factory=list)
    empty_classic_groups: int = 0  # classic groups whose last GroupMetadata has no members
    records_by_key_type: dict[int, int] = field(default_factory=dict)  # data records by key type
    tombstones_by_key_type: dict[int, int] = field(default_factory=dict)
    offset_commit_value_versions: dict[int, int] = field(default_factory=dict)
    control_records: dict[str, int] = field(default_factory=dict)  # COMMIT / ABORT
    batches_by_codec: dict[str, int] = field(default_factory=dict)
    multi_record_batches: int = 0
    transactional_batches: int = 0
    transactions_committed: int = 0
    transactions_aborted: int = 0
    transactions_open: int = 0
    producer_ids: int = 0
    records_per_partition: list[int] = field(default_factory=list)
    hot_partition: int | None = None  # the offsets partition `hot_share` of the records were steered to
    shape: str = "mixed"
    first_timestamp: int = 0
    last_timestamp: int = 0

    def summary(self) -> str:
        return (f"records={self.records} groups={self.groups} partitions={self.partitions} bytes={self.bytes} "
                f"files={self.files} batches={self.batches} txns(commit/abort/open)={self.transactions_committed}/"
                f"{self.transactions_aborted}/{self.transactions_open}"
                + (f" hot_partition={self.hot_partition} ({self.records_per_partition[self.hot_partition]} records)"
                   if self.hot_partition is not None else "") + ("" if self.shape == "mixed" else f" shape={self.shape}"))


# ================================================================================================================
# the partition log: batches, linger, codecs, segments
# ================================================================================================================
class _PartitionLog:
    """One `__consumer_offsets-N` directory being written: contiguous offsets, segments rolled at `segment_bytes`
    (Kafka rolls when the next batch would not fit; the file is named after that batch's base offset)."""

    FLUSH_BYTES = 1 << 20

    def __init__(self, gen: "_Generator", index: int):
        self.gen = gen
        self.index = index
        self.dir = gen.out / f"__consumer_offsets-{index}"
        self.next_offset = 0
        self.last_ts = 0
        self.seg_base = -1
        self.seg_size = 0
        self.seg_path: Path | None = None
        self.buf: list[bytes] = []
        self.buf_size = 0
        self.linger: list[tuple] = []  # records of an open non-transactional coordinator batch
        self.records = 0
        self.codec_plan: list[str] = []

    # -- time ----------------------------------------------------------------------------------------------------
    def tick(self) -> int:
        """Broker time for the next write on this partition: the global clock, strictly increasing here."""
        ts = self.gen.now
        if ts <= self.last_ts:
            ts = self.last_ts + 1
        self.last_ts = ts
        return ts

    # -- writes --------------------------------------------------------------------------------------------------
    def write(self, records: list[tuple], *, new_batch: bool = False) -> None:
        """A coordinator write (producerId -1): may join the open batch (linger) or start a new one."""
        linger = self.linger
        if linger:
            if not new_batch and len(linger) + len(records) <= 64 and self.gen.rng.random() < self.gen.linger_p:
                linger.extend(records)
                return
            self._emit_linger()
        self.linger = list(records)

    def write_txn(self, records: list[tuple], producer_id: int, producer_epoch: int) -> None:
        self._emit_linger()
        codec = self.codec()
        self._append(write_record_batch(records, self.next_offset, codec=codec, producer_id=producer_id,
                                        producer_epoch=producer_epoch, base_sequence=0, is_transactional=True,
                                        partition_leader_epoch=self.gen.leader_epoch), records, codec)
        self.gen.stats.transactional_batches += 1

    def write_marker(self, control_type: int, producer_id: int, producer_epoch: int, ts: int) -> None:
        self._emit_linger()
        batch = write_control_batch(control_type, self.gen.txn_coordinator_epoch, self.next_offset, producer_id,
                                    producer_epoch, ts, partition_leader_epoch=self.gen.leader_epoch)
        self._append(batch, None, "none")
        self.gen.stats.control_records["COMMIT" if control_type == 1 else "ABORT"] += 1

    def _emit_linger(self) -> None:
        if self.linger:
            records, self.linger = self.linger, []
            codec = self.codec()
            self._append(write_record_batch(records, self.next_offset, codec=codec, base_sequence=0,
                                            partition_leader_epoch=self.gen.leader_epoch), records, codec)

    def codec(self) -> str:
        era = self.gen.era()
        return self.codec_plan[era]

    def _append(self, batch: bytes, records, codec: str) -> None:
        n = 1 if records is None else len(records)
        stats = self.gen.stats
        stats.batches += 1
        stats.records += n
        stats.batches_by_codec[codec] += 1
        if n > 1:
            stats.multi_record_batches += 1
        size = len(batch)
        if self.seg_base < 0 or (self.seg_size > 0 and self.seg_size + size > self.gen.segment_bytes):
            self._roll()
        self.buf.append(batch)
        self.buf_size += size
        self.seg_size += size
        self.next_offset += n
        self.records += n
        if self.buf_size >= self.FLUSH_BYTES:
            self._flush()

    def _roll(self) -> None:
        self._flush()
        self.seg_base = self.next_offset
        self.seg_size = 0
        self.seg_path = self.dir / f"{self.seg_base:020d}.log"
        self.seg_path.write_bytes(b"")
        self.gen.stats.files += 1

    def _flush(self) -> None:
        if self.buf:
            with open(self.seg_path, "ab") as f:
                f.write(b"".join(self.buf))
            self.gen.stats.bytes += self.buf_size
            self.buf = []
            self.buf_size = 0

    def close(self) -> None:
        self._emit_linger()
        if self.seg_base < 0:  # an empty partition still has its (empty) first segment, as Kafka leaves it
            self._roll()
        self._flush()


# ================================================================================================================
# the world: topics, ids
# ================================================================================================================
_SERVICES = ("orders", "payments", "billing", "inventory", "shipping", "search", "fraud", "ledger", "notifications",
             "analytics", "audit", "recommendations", "pricing", "catalog", "checkout", "sessions", "clickstream",
             "metrics", "alerts", "reporting", "identity", "risk", "loyalty", "returns")
_ENTITIES = ("events", "commands", "changelog", "cdc", "enriched", "dlq", "state", "audit-log", "snapshots", "v2")
_ROLES = ("consumer", "processor", "indexer", "etl", "sink", "aggregator", "projector", "router")
_UNICODE_TAGS = ("ñandú", "ομάδα", "消费者组", "그룹", "🚀launch", "cafe\u0301", "Zürich", "данные")
_HOSTS = ("/10.0.{}.{}", "/172.16.{}.{}", "/192.168.{}.{}")
_METADATA = ("", "", "", "", "", "\u0000", "ok\u0000", "batch-{n}", '{"src":"svc","n":{n}}', "ckpt:{n}",
             "répertoire-{n}", "")


class _Topic:
    __slots__ = ("idx", "name", "partitions", "topic_id", "topic_id_raw", "leader_epoch")

    def __init__(self, idx, name, partitions, topic_id_raw):
        self.idx = idx
        self.name = name
        self.partitions = partitions
        self.topic_id_raw = topic_id_raw
        self.topic_id = base64.urlsafe_b64encode(topic_id_raw).rstrip(b"=").decode()
        self.leader_epoch = 0


def _uuid_raw(rng: Random) -> bytes:
    while True:
        raw = rng.getrandbits(128).to_bytes(16, "big")
        # Kafka's Uuid.randomUuid never hands out ZERO/ONE nor an id whose string starts with '-'
        if raw[0] >> 2 != 62 and raw not in (bytes(16), bytes(15) + b"\x01"):
            return raw


def _uuid36(rng: Random) -> str:
    h = rng.getrandbits(128).to_bytes(16, "big").hex()
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{'89ab'[int(h[16], 16) & 3]}{h[17:20]}-{h[20:]}"


def _b64id(rng: Random) -> str:
    return base64.urlsafe_b64encode(_uuid_raw(rng)).rstrip(b"=").decode()


# ================================================================================================================
# assignors (over sorted member ids and (topic idx, partition) pairs; deterministic)
# ================================================================================================================
def _assign_range(member_ids: list[str], topics: list[_Topic]) -> dict[str, set]:
    out = {m: set() for m in member_ids}
    ms = sorted(member_ids)
    m = len(ms)
    for t in sorted(topics, key=lambda t: t.name):
        n = t.partitions
        q, r = divmod(n, m)
        for i, mid in enumerate(ms):
            start = i * q + min(i, r)
            for p in range(start, start + q + (1 if i < r else 0)):
                out[mid].add((t.idx, p))
    return out


def _all_tps(topics: list[_Topic]) -> list[tuple[int, int]]:
    return [(t.idx, p) for t in sorted(topics, key=lambda t: t.name) for p in range(t.partitions)]


def _assign_roundrobin(member_ids: list[str], topics: list[_Topic]) -> dict[str, set]:
    ms = sorted(member_ids)
    out = {m: set() for m in ms}
    for i, tp in enumerate(_all_tps(topics)):
        out[ms[i % len(ms)]].add(tp)
    return out


def _assign_sticky(member_ids: list[str], topics: list[_Topic], previous: dict[str, set]) -> dict[str, set]:
    """Balanced and sticky: members keep what they owned up to the quota, the rest goes to the least loaded."""
    ms = sorted(member_ids)
    tps = _all_tps(topics)
    valid = set(tps)
    quota = -(-len(tps) // len(ms))
    out = {m: set() for m in ms}
    taken = set()
    for m in ms:
        for tp in sorted(previous.get(m, ()))[:quota]:
            if tp in valid and tp not in taken:
                out[m].add(tp)
                taken.add(tp)
    for tp in tps:
        if tp not in taken:
            least = min(ms, key=lambda x: (len(out[x]), x))
            out[least].add(tp)
    while True:
        most = max(ms, key=lambda x: (len(out[x]), x))
        least = min(ms, key=lambda x: (len(out[x]), x))
        if len(out[most]) - len(out[least]) <= 1:
            return out
        tp = max(out[most])
        out[most].discard(tp)
        out[least].add(tp)


# ================================================================================================================
# groups
# ================================================================================================================
class _Group:
    kind = ""

    def __init__(self, gen: "_Generator", gid: str, topics: list[_Topic], weight: float):
        self.gen = gen
        self.gid = gid
        self.topics = topics
        self.weight = weight
        self.log = gen.logs[partition_for(gid, gen.partitions)]
        self.committed: dict[tuple[int, int], int] = {}  # (topic idx, partition) -> offset
        self.keys: dict[tuple[int, int], bytes] = {}
        self.deleted_at_end = False
        self.explicit_retention_ms = 0  # > 0: OffsetCommit v1 with an expireTimestamp
        self.created = False

    # -- offsets -------------------------------------------------------------------------------------------------
    def key(self, tp: tuple[int, int]) -> bytes:
        k = self.keys.get(tp)
        if k is None:
            t = self.gen.topics[tp[0]]
            k = self.keys[tp] = mw.write_offset_commit_key(self.gid, t.name, tp[1])
        return k

    def commit_records(self, tps, ts: int, *, metadata: str = "", leader_epoch: bool = True) -> list[tuple]:
        gen = self.gen
        rand = gen.rng.random
        committed = self.committed
        topics = gen.topics
        upgraded = gen.upgraded
        version = 1 if self.explicit_retention_ms else (4 if upgraded else 3)
        out = []
        newest = gen.newest_commit
        for tp in tps:
            off = committed.get(tp, 0) + 1 + int(rand() * 400)
            committed[tp] = off
            if off > newest.get(tp, -1):
                newest[tp] = off
            t = topics[tp[0]]
            epoch = t.leader_epoch if leader_epoch else -1
            if version == 1:
                value = mw.write_offset_commit_value(1, offset=off, metadata=metadata, commit_timestamp=ts,
                                                     expire_timestamp=ts + self.explicit_retention_ms)
            else:
                value = mw.write_offset_commit_value(version, offset=off, metadata=metadata, commit_timestamp=ts,
                                                     leader_epoch=epoch, topic_id=t.topic_id)
            out.append((self.key(tp), value, ts))
        n = len(out)
        gen.count(1, n)
        gen.stats.offset_commit_value_versions[version] += n
        return out

    def tombstone_records(self, tps, ts: int) -> list[tuple]:
        out = [(self.key(tp), None, ts) for tp in tps]
        for tp in tps:
            self.committed.pop(tp, None)
        self.gen.count(1, len(out), tombstones=len(out))
        return out

    def pick_metadata(self) -> str:
        return self.gen.rng.choice(_METADATA).replace("{n}", str(self.gen.rng.randint(0, 99999)))

    # -- lifecycle hooks -----------------------------------------------------------------------------------------
    def step(self) -> None:
        raise NotImplementedError

    def end_cost(self) -> int:
        """Records the end phase will still write for this group (deletion, leaving members)."""
        return 0

    def finish(self) -> None:
        """End of the timeline: deletions etc."""


class _ClassicMember:
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
        self.producer: _Producer | None = None

    @property
    def owned(self) -> set:
        return self._owned

    @owned.setter
    def owned(self, tps: set) -> None:
        self._owned = tps
        self.owned_list = sorted(tps)


class _Producer:
    __slots__ = ("pid", "epoch", "open_tps", "group", "designated_open")

    def __init__(self, pid: int, epoch: int, group):
        self.pid = pid
        self.epoch = epoch
        self.open_tps = None  # the partitions of the open transaction, or None
        self.group = group
        self.designated_open = False


class _ClassicGroup(_Group):
    """A classic (JoinGroup/SyncGroup) group of protocol type `consumer`."""

    kind = KIND_CLASSIC
    protocol_type = "consumer"

    def __init__(self, gen, gid, topics, weight):
        super().__init__(gen, gid, topics, weight)
        rng = gen.rng
        self.assignor = rng.choice(("range", "range", "roundrobin", "cooperative-sticky", "cooperative-sticky",
                                    "sticky"))
        self.sub_version = rng.choice((1, 2, 3, 3)) if self.assignor != "cooperative-sticky" else rng.choice((2, 3))
        self.static = rng.random() < 0.25
        self.generation = 0
        self.members: list[_ClassicMember] = []
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
    def new_member(self, instance_id: str | None = None) -> _ClassicMember:
        rng = self.gen.rng
        client_id = f"{self.client_prefix}-{rng.randint(1, 64)}"
        if self.static and instance_id is None:
            self.instance_seq += 1
            instance_id = f"{self.client_prefix}-instance-{self.instance_seq}"
        mid = f"{instance_id or client_id}-{_uuid36(rng)}"
        h = rng.choice(_HOSTS).format(rng.randint(0, 40), rng.randint(2, 250))
        m = _ClassicMember(mid, instance_id, client_id, h, self.session_timeout, self.rebalance_timeout)
        if self.transactional:
            m.producer = self.gen.new_producer(self)
        return m

    # -- protocol bytes ------------------------------------------------------------------------------------------
    def _by_topic(self, tps) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        topics = self.gen.topics
        for ti, p in sorted(tps, key=lambda tp: (topics[tp[0]].name, tp[1])):
            out.setdefault(topics[ti].name, []).append(p)
        return out

    def _user_data(self, m: _ClassicMember) -> bytes | None:
        if self.assignor == "sticky":  # StickyAssignor user data v1: previous assignment + generation
            return write_sticky_assignor_user_data(self._by_topic(m.owned), self.generation)
        if self.assignor == "cooperative-sticky":  # CooperativeStickyAssignor: the generation only
            return write_int32(self.generation)
        return None

    def subscription(self, m: _ClassicMember) -> bytes:
        cooperative = self.assignor in ("cooperative-sticky", "sticky")
        return mw.write_consumer_subscription(
            self.sub_version, sorted(t.name for t in self.topics), user_data=self._user_data(m),
            owned_partitions=self._by_topic(m.owned) if cooperative else {},
            generation_id=self.generation if cooperative and self.sub_version >= 2 else -1,
            rack_id=self.rack)

    def assignment(self, tps) -> bytes:
        return mw.write_consumer_assignment(self.sub_version, self._by_topic(tps))

    # -- records -------------------------------------------------------------------------------------------------
    def group_record(self, ts: int, members: list[_ClassicMember] | None, *, creation: bool = False) -> tuple:
        gen = self.gen
        state_ts = max(BASE_TIME_MS, ts - gen.rng.randint(0, 25))
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
        gen.count(2, 1)
        return (mw.write_group_metadata_key(self.gid), value, ts)

    def protocol_name(self) -> str:
        return self.assignor

    def member_dict(self, m: _ClassicMember) -> dict:
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
            target = _assign_range(ids, self.topics)
        elif self.assignor == "roundrobin":
            target = _assign_roundrobin(ids, self.topics)
        else:
            target = _assign_sticky(ids, self.topics, previous)
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
                self.gen.retire_producer(m.producer)
        self.generation += 1
        self.members = []
        self.leader = None
        self.log.write([self.group_record(self.log.tick(), [])])

    # -- timeline ------------------------------------------------------------------------------------------------
    def step(self) -> None:
        rng = self.gen.rng
        if not self.members:
            if self.created and self.committed and rng.random() < 0.15:
                self.offset_delete()
            else:
                self.join_all()
            return
        r = rng.random()
        churn = self.gen.churn
        if r < 0.012 * churn:
            self.membership_change()
        elif r < 0.014 * churn:
            self.leave_all()
        else:
            self.commit()

    def membership_change(self) -> None:
        rng = self.gen.rng
        if self.static and rng.random() < 0.4:
            # a static member restarts: new member id, same instance id, no rebalance and no new generation
            i = rng.randrange(len(self.members))
            old = self.members[i]
            new = self.new_member(old.instance_id)
            new.owned = old.owned
            if old.producer is not None and new.producer is not None:
                self.gen.retire_producer(old.producer)
            self.members[i] = new
            if self.leader == old.member_id:
                self.leader = new.member_id
            self.log.write([self.group_record(self.log.tick(), self.members)])
            return
        if len(self.members) > 1 and rng.random() < 0.5:
            gone = self.members.pop(rng.randrange(len(self.members)))
            if gone.producer is not None:
                self.gen.retire_producer(gone.producer)
        else:
            self.members.append(self.new_member())
        self.rebalance(self.log.tick())

    def commit(self) -> None:
        gen = self.gen
        rng = gen.rng
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
            gen.txn_started(producer, chosen, ts)
            return
        ts = self.log.tick()
        meta = self.pick_metadata() if rand() < 0.3 else ""
        self.log.write(self.commit_records(chosen, ts, metadata=meta, leader_epoch=rand() < 0.9))

    def offset_delete(self) -> None:
        """OffsetDelete on an Empty group: tombstones for one topic's partitions (one batch)."""
        rng = self.gen.rng
        tis = sorted({ti for ti, _ in self.committed})
        ti = tis[rng.randrange(len(tis))]
        tps = sorted(tp for tp in self.committed if tp[0] == ti)
        self.log.write(self.tombstone_records(tps, self.log.tick()))

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
        if not self.deleted_at_end and self.created and not self.members:
            self.gen.stats.empty_classic_groups += 1

    def delete_group(self) -> None:
        """DeleteGroups: every offset tombstone, then the GroupMetadata tombstone, one batch."""
        ts = self.log.tick()
        records = self.tombstone_records(sorted(self.committed), ts)
        records.append((mw.write_group_metadata_key(self.gid), None, ts))
        self.gen.count(2, 1, tombstones=1)
        self.log.write(records, new_batch=True)  # DeleteGroups: a request of its own
        self.gen.stats.deleted_groups.append(self.gid)


class _ConnectGroup(_ClassicGroup):
    """A Kafka Connect worker group (protocol type `connect`): opaque ConnectProtocol bytes, no offsets here."""

    kind = KIND_CONNECT
    protocol_type = "connect"

    def __init__(self, gen, gid, topics, weight):
        super().__init__(gen, gid, topics, weight)
        rng = gen.rng
        self.static = False
        self.connect_protocol = rng.choice(("sessioned", "sessioned", "compatible", "default"))
        self.connect_version = {"default": 0, "compatible": 1, "sessioned": 2}[self.connect_protocol]
        self.config_offset = rng.randint(0, 500)
        self.connectors = [f"{rng.choice(_SERVICES)}-{rng.choice(('s3', 'jdbc', 'es', 'http'))}-"
                           f"{rng.choice(('sink', 'source'))}-{i}" for i in range(rng.randint(1, 4))]
        self.tasks = {c: rng.randint(1, 6) for c in self.connectors}
        self.worker_port = rng.choice((8083, 8083, 8443))

    def protocol_name(self) -> str:
        return self.connect_protocol

    def _url(self, m: _ClassicMember) -> str:
        return f"http://{m.host.lstrip('/')}:{self.worker_port}/"

    def member_dict(self, m: _ClassicMember) -> dict:
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
        rng = self.gen.rng
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

    def end_cost(self) -> int:
        return 0

    def finish(self) -> None:
        pass


class _SimpleGroup(_Group):
    """Offset-only group (assign() + commitSync, Spark/Flink sources, AdminClient alter): no GroupMetadata."""

    kind = KIND_SIMPLE

    def __init__(self, gen, gid, topics, weight):
        super().__init__(gen, gid, topics, weight)
        rng = gen.rng
        tps = _all_tps(topics)
        k = rng.randint(1, min(len(tps), 24))
        start = rng.randrange(len(tps))
        self.assigned = sorted((tps + tps)[start:start + k])
        self.meta_style = rng.random()

    def step(self) -> None:
        rng = self.gen.rng
        self.created = True
        if self.committed and rng.random() < 0.02:
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
            # the new coordinator writes the GroupMetadata tombstone even for a generation-0 simple group
            ts = self.log.tick()
            records = self.tombstone_records(sorted(self.committed), ts)
            records.append((mw.write_group_metadata_key(self.gid), None, ts))
            self.gen.count(2, 1, tombstones=1)
            self.log.write(records, new_batch=True)  # DeleteGroups: a request of its own
            self.gen.stats.deleted_groups.append(self.gid)


class _Kip848Member:
    __slots__ = ("member_id", "instance_id", "rack", "client_id", "host", "rebalance_timeout", "epoch",
                 "prev_epoch", "state", "assigned", "pending", "target")

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
        self.pending: set = set()  # partitions pending revocation
        self.target: set = set()


class _Kip848Group(_Group):
    """A KIP-848 consumer group (`group.protocol=consumer`) as the new coordinator persists it."""

    kind = KIND_KIP848

    def __init__(self, gen, gid, topics, weight):
        super().__init__(gen, gid, topics, weight)
        rng = gen.rng
        self.assignor = rng.choice((None, "uniform", "uniform", "range"))
        self.regex = None
        if rng.random() < 0.2:
            self.regex = f"^{topics[0].name.split('.')[0].split('-')[0]}.*"
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.members: dict[str, _Kip848Member] = {}
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
        self.gen.count(key_type, 1, tombstones=1 if value is None else 0)
        return (k, v, ts)

    def _tp_list(self, tps) -> list[dict]:
        topics = self.gen.topics
        by: dict[int, list[int]] = {}
        for ti, p in sorted(tps):
            by.setdefault(ti, []).append(p)
        return [{"topic_id": topics[ti].topic_id, "partitions": ps} for ti, ps in by.items()]

    def subscribed(self) -> list[_Topic]:
        return self.topics if self.members else []

    def epoch_records(self, ts: int) -> list[tuple]:
        """Group epoch bump, preceded by the subscription metadata when it changed (4.0) — 4.1 drops type 4."""
        gen = self.gen
        out = []
        subscribed = sorted(t.idx for t in self.subscribed())
        if not gen.upgraded:
            if subscribed != self.metadata_topics:
                self.metadata_topics = subscribed
                self.has_pm_record = True
                out.append(self.rec(4, {"topics_metadata": [
                    {"topic_id": gen.topics[i].topic_id, "topic_name": gen.topics[i].name,
                     "num_partitions": gen.topics[i].partitions} for i in subscribed]}, ts))
        elif self.has_pm_record:  # KIP-1101: 4.1 removes the legacy partition metadata record once
            self.has_pm_record = False
            out.append(self.rec(4, None, ts))
        self.group_epoch += 1
        value = {"group_epoch": self.group_epoch}
        if gen.upgraded:
            value["metadata_hash"] = self.metadata_hash(subscribed)
        out.append(self.rec(3, value, ts))
        return out

    def metadata_hash(self, subscribed: list[int]) -> int:
        h = 0xCBF29CE484222325
        for i in subscribed:
            for b in self.gen.topics[i].topic_id_raw + write_int32(self.gen.topics[i].partitions):
                h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
        return h - (1 << 64) if h >= 1 << 63 else h

    def target_records(self, ts: int) -> list[tuple]:
        """A new target assignment: 7 for every member whose target changed, then 6 (assignment epoch)."""
        ids = sorted(self.members)
        out = []
        if ids:
            if self.assignor == "range":
                target = _assign_range(ids, self.topics)
            else:
                target = _assign_sticky(ids, self.topics, {i: self.members[i].target for i in ids})
            for mid in ids:
                m = self.members[mid]
                if target[mid] != m.target or not m.target:
                    m.target = target[mid]
                    out.append(self.rec(7, {"assigned_partitions": self._tp_list(m.target)}, ts, member_id=mid))
        self.assignment_epoch = self.group_epoch
        out.append(self.rec(6, {"assignment_epoch": self.assignment_epoch}, ts))
        self.needs_target = False
        return out

    def reconcile_record(self, m: _Kip848Member, ts: int) -> tuple:
        """One heartbeat's CurrentMemberAssignment: revoke first (UNREVOKED), then move to the assignment epoch
        with whatever is not still owned by another member (UNRELEASED) or everything (STABLE)."""
        revoke = m.assigned - m.target
        if revoke and m.state != UNREVOKED:
            m.assigned = m.assigned & m.target
            m.pending = revoke
            m.state = UNREVOKED
        else:
            m.pending = set()
            others = set()
            for o in self.members.values():
                if o is not m:
                    others |= o.assigned | o.pending
            unreleased = m.target & others
            m.assigned = m.target - unreleased
            m.prev_epoch, m.epoch = m.epoch, self.assignment_epoch
            m.state = UNRELEASED if unreleased else STABLE
        return self.rec(8, {"member_epoch": m.epoch, "previous_member_epoch": m.prev_epoch, "member_state": m.state,
                            "assigned_partitions": self._tp_list(m.assigned),
                            "partitions_pending_revocation": self._tp_list(m.pending)}, ts, member_id=m.member_id)

    def needs_reconcile(self, m: _Kip848Member) -> bool:
        return m.state != STABLE or m.epoch != self.assignment_epoch or m.assigned != m.target

    # -- membership ----------------------------------------------------------------------------------------------
    def join(self) -> None:
        gen = self.gen
        rng = gen.rng
        ts = self.log.tick()
        self.created = True
        instance = None
        if self.static:
            self.instance_seq += 1
            instance = f"{self.client_prefix}-instance-{self.instance_seq}"
        m = _Kip848Member(_b64id(rng), instance, rng.choice((None, None, "use1-az1", "use1-az3")),
                          f"{self.client_prefix}-{rng.randint(1, 64)}",
                          rng.choice(_HOSTS).format(rng.randint(0, 40), rng.randint(2, 250)), self.rebalance_timeout)
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

    def leave(self, m: _Kip848Member) -> None:
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
        rng = self.gen.rng
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
        lagging = [m for m in self.members.values() if self.needs_reconcile(m)]
        if lagging and rng.random() < 0.7:
            self.log.write([self.reconcile_record(lagging[0], self.log.tick())])
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
        tps = sorted(m.assigned)
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
        # DeleteGroups on the now Empty group: offsets, then 6, 16*, 4, 3 (§2.9; members were removed above)
        ts = self.log.tick()
        records = self.tombstone_records(sorted(self.committed), ts)
        records.append(self.rec(6, None, ts))
        if self.regex_resolved:
            records.append(self.rec(16, None, ts, regex=self.regex))
        if self.has_pm_record or not self.gen.upgraded:
            records.append(self.rec(4, None, ts))
        records.append(self.rec(3, None, ts))
        self.log.write(records, new_batch=True)  # DeleteGroups: a request of its own
        self.gen.stats.deleted_groups.append(self.gid)


# ================================================================================================================
# the generator
# ================================================================================================================
class _Generator:
    def __init__(self, out: Path, *, records: int, groups: int, partitions: int, seed: int, segment_bytes: int,
                 hot_share: float | None = None, shape: str = "mixed"):
        self.out = out
        self.hot_share = hot_share
        self.shape = shape
        # how often groups rebalance, relative to a mixed cluster: a cleaner-died log is a stable fleet committing
        # the same few keys for a long time
        self.churn = 1.0 if shape == "mixed" else 0.05
        self.target = records
        self.n_groups = groups
        self.partitions = partitions
        self.segment_bytes = segment_bytes
        self.rng = Random(seed)
        self.now = BASE_TIME_MS
        self.emitted_at_era = 0
        self.linger_p = 0.25
        self.leader_epoch = 0
        self.upgraded = False
        self.txn_coordinator_epoch = self.rng.randint(0, 3)
        self.newest_commit: dict[tuple[int, int], int] = {}  # (topic idx, partition) -> highest offset committed
        self.stats = SampleStats(out_dir=str(out), seed=seed, partitions=partitions, segment_bytes=segment_bytes,
                                 shape=shape)
        if hot_share is not None:  # its own generator: the rest of the bytes follow the seed as without it
            self.stats.hot_partition = Random(seed).randrange(partitions)
        s = self.stats
        s.records_by_key_type = Counter()
        s.tombstones_by_key_type = Counter()
        s.offset_commit_value_versions = Counter()
        s.control_records = Counter({"COMMIT": 0, "ABORT": 0})
        s.batches_by_codec = Counter({c: 0 for c in CODECS})
        self.n_eras = 10
        self.logs = [_PartitionLog(self, p) for p in range(partitions)]
        self.next_pid = 1000 + self.rng.randint(0, 5000)
        self.producers: list[_Producer] = []
        self.markers: list[tuple] = []  # heap of (due ts, seq, producer, outcome)
        self.marker_seq = 0
        self.txn_seq = 0

    # -- shared helpers ------------------------------------------------------------------------------------------
    def count(self, key_type: int, n: int, tombstones: int = 0) -> None:
        self.stats.records_by_key_type[key_type] += n
        if tombstones:
            self.stats.tombstones_by_key_type[key_type] += tombstones

    def era(self) -> int:
        e = self.stats.records * self.n_eras // max(1, self.target)
        return e if e < self.n_eras else self.n_eras - 1

    def new_producer(self, group) -> _Producer:
        p = _Producer(self.next_pid, self.rng.randint(0, 40), group)
        self.next_pid += self.rng.randint(1, 7)
        self.producers.append(p)
        return p

    def retire_producer(self, p: _Producer) -> None:
        """A producer that goes away with a transaction open gets it aborted by the transaction coordinator."""
        if p.open_tps is not None:
            for i, item in enumerate(self.markers):
                if item[2] is p:
                    self.markers[i] = (item[0], item[1], p, 0)
            p.designated_open = False

    def txn_started(self, producer: _Producer, tps, ts: int) -> None:
        producer.open_tps = tps
        self.txn_seq += 1
        n = self.txn_seq
        outcome = 1 if n == 1 else 0 if n == 2 else (1 if self.rng.random() < 0.82 else 0)
        self.marker_seq += 1
        heapq.heappush(self.markers, (ts + self.rng.randint(5, 120), self.marker_seq, producer, outcome))

    def fire_markers(self, until: int) -> None:
        markers = self.markers
        while markers and markers[0][0] <= until:
            _due, _seq, producer, outcome = heapq.heappop(markers)
            self.write_marker(producer, outcome)

    def write_marker(self, producer: _Producer, outcome: int) -> None:
        log = producer.group.log
        log.write_marker(outcome, producer.pid, producer.epoch, log.tick())
        producer.open_tps = None
        if outcome == 1:
            self.stats.transactions_committed += 1
        else:
            self.stats.transactions_aborted += 1
            if self.rng.random() < 0.4:
                producer.epoch += 1  # the application re-initialised its producer after the abort

    # -- world ---------------------------------------------------------------------------------------------------
    def build(self) -> list[_Group]:
        rng = self.rng
        n_topics = max(6, min(400, self.n_groups // 2 + 5))
        self.topics: list[_Topic] = []
        names = set()
        while len(self.topics) < n_topics:
            name = f"{rng.choice(_SERVICES)}.{rng.choice(_ENTITIES)}"
            if name in names:
                name = f"{name}-{len(self.topics)}"
            names.add(name)
            counts = (1, 3, 6, 6, 8, 12, 12, 16, 24, 32) if self.shape == "mixed" else (1, 2, 3, 4)
            self.topics.append(_Topic(len(self.topics), name, rng.choice(counts), _uuid_raw(rng)))
        kinds = self.allocate_kinds()
        if self.hot_share is not None:
            # the hot groups: a random mix of kinds (`kinds` is shuffled); every group when the share is 1
            n_hot = len(kinds) if self.hot_share >= 1 else max(1, round(self.hot_share * len(kinds)))
            if self.partitions == 1:
                n_hot = len(kinds)
        groups: list[_Group] = []
        used = set()
        n_deleted = 0
        for i, kind in enumerate(kinds):
            base_kind = kind
            if kind == KIND_DELETED:  # deleted groups are of every kind that can be deleted, KIP-848 first
                base_kind = (KIND_KIP848, KIND_CLASSIC, KIND_SIMPLE)[n_deleted % 3]
                n_deleted += 1
            gid = self.group_id(base_kind, i, kind == KIND_DELETED)
            while gid in used:
                gid += "-x"
            if self.hot_share is not None:
                gid = self._steered(gid, hot=i < n_hot, used=used)
            used.add(gid)
            topics = self.pick_topics(base_kind)
            weight = min(20.0, rng.lognormvariate(0.0, 0.9))
            cls = {KIND_CLASSIC: _ClassicGroup, KIND_SIMPLE: _SimpleGroup, KIND_KIP848: _Kip848Group,
                   KIND_CONNECT: _ConnectGroup}[base_kind]
            if base_kind == KIND_CONNECT:
                weight *= 0.05
            elif base_kind == KIND_SIMPLE:
                weight *= 0.6
            g = cls(self, gid, topics, weight)
            g.deleted_at_end = kind == KIND_DELETED
            if base_kind in (KIND_CLASSIC, KIND_SIMPLE) and rng.random() < 0.08:
                g.explicit_retention_ms = rng.choice((1, 3, 7, 14)) * 86_400_000
            groups.append(g)
            self.stats.groups_by_kind[kind] = self.stats.groups_by_kind.get(kind, 0) + 1
            self.stats.group_partitions[gid] = g.log.index
        if self.hot_share is not None:
            self._reweigh(groups)
        classic = [g for g in groups if type(g) is _ClassicGroup and not g.deleted_at_end]
        n_txn = max(1, round(0.2 * len(classic))) if classic else 0
        for j, g in enumerate(classic):
            if j < n_txn:
                g.transactional = True
                g.explicit_retention_ms = 0
                g.weight = max(g.weight, 1.0)
            elif rng.random() < 0.25:
                g.end_empty = True
        # the first transactional groups keep one transaction open at the end (no marker)
        self.open_at_end = [g for g in classic if g.transactional][:max(1, min(5, n_txn // 10))]
        for g in self.open_at_end:
            g.txn_plain_p = 0.0
        for log in self.logs:
            plan = ["none"] * (self.n_eras - 4) + ["gzip", "snappy", "lz4", "zstd"]
            rng.shuffle(plan)
            log.codec_plan = plan
        return groups

    def _steered(self, gid: str, hot: bool, used: set) -> str:
        """`gid`, suffixed until its offsets partition is (`hot`) or is not the hot partition: Kafka places a group
        by the hash of its id, so a skewed cluster is one whose busiest groups' ids hash alike."""
        n, target = 0, self.stats.hot_partition
        out = gid
        while (partition_for(out, self.partitions) == target) != hot or out in used:
            n += 1
            out = f"{gid}-{n}"
        return out

    def _reweigh(self, groups: list[_Group]) -> None:
        """The groups' activity scaled so the hot partition's groups write `hot_share` of it."""
        hot = [g for g in groups if g.log.index == self.stats.hot_partition]
        cold = [g for g in groups if g.log.index != self.stats.hot_partition]
        if not cold or not hot:
            return
        share = min(self.hot_share, 0.999)
        w_hot, w_cold = sum(g.weight for g in hot), sum(g.weight for g in cold)
        scale = share / (1 - share) * w_cold / w_hot
        for g in hot:
            g.weight *= scale

    def allocate_kinds(self) -> list[str]:
        g = self.n_groups
        raw = [(k, share * g) for k, share in KIND_SHARES]
        counts = {k: int(x) for k, x in raw}
        if g >= len(KIND_SHARES):
            for k in counts:
                counts[k] = max(1, counts[k])
        while sum(counts.values()) > g:
            k = max(counts, key=lambda k: counts[k])
            counts[k] -= 1
        for k, _x in sorted(raw, key=lambda kx: kx[1] - int(kx[1]), reverse=True):
            if sum(counts.values()) >= g:
                break
            counts[k] += 1
        while sum(counts.values()) < g:
            counts[KIND_CLASSIC] += 1
        kinds = [k for k, _ in KIND_SHARES for _ in range(counts[k])]
        self.rng.shuffle(kinds)
        return kinds

    def group_id(self, kind: str, i: int, deleted: bool) -> str:
        rng = self.rng
        svc = rng.choice(_SERVICES)
        if deleted:
            return rng.choice((f"console-consumer-{rng.randint(10000, 99999)}", f"tmp-{svc}-{i}",
                               f"{svc}-migration-{i}"))
        if i % 37 == 7:
            return f"{svc}-{_UNICODE_TAGS[(i // 37) % len(_UNICODE_TAGS)]}-{i}"
        if kind == KIND_CLASSIC:
            return f"{svc}-{rng.choice(_ROLES)}-{i}"
        if kind == KIND_SIMPLE:
            return rng.choice((f"{svc}-offsets-{i}", f"spark-kafka-source-{_uuid36(rng)}-driver-0",
                               f"flink-{svc}-{i}", f"{svc}-backfill-{i}"))
        if kind == KIND_KIP848:
            return f"{svc}-{rng.choice(_ROLES)}-v2-{i}"
        return rng.choice((f"connect-cluster-{i}", f"connect-{svc}-{i}", f"{svc}-connect-workers-{i}"))

    def pick_topics(self, kind: str) -> list[_Topic]:
        rng = self.rng
        k = 1 if kind == KIND_SIMPLE else rng.choice((1, 1, 2, 2, 3))
        return rng.sample(self.topics, k)

    # -- run -----------------------------------------------------------------------------------------------------
    def run(self) -> SampleStats:
        rng = self.rng
        self.out.mkdir(parents=True, exist_ok=True)
        for log in self.logs:
            log.dir.mkdir(exist_ok=True)
            topic_id = _b64id(rng)
            (log.dir / "partition.metadata").write_text(f"version: 0\ntopic_id: {topic_id}\n")
            (log.dir / "leader-epoch-checkpoint").write_text("0\n1\n0 0\n")
        groups = self.build()
        upgrade_at = int(self.target * rng.uniform(0.75, 0.9))
        cum = []
        total = 0.0
        for g in groups:
            total += g.weight
            cum.append(total)
        stats = self.stats
        rand = rng.random
        next_check = 0
        picks: list[_Group] = []
        # every group shows up early on (creation order is random), then activity follows the weights
        intro = groups[:]
        rng.shuffle(intro)
        while True:
            if stats.records >= next_check:
                reserve = sum(g.end_cost() for g in groups) + len(self.markers) + 4 * len(self.open_at_end)
                left = self.target - stats.records - reserve
                if left <= 0:
                    if not intro:
                        break
                    left = 1  # every group exists before the budget may end the timeline
                next_check = stats.records + max(1, left // 8)
                if not self.upgraded and stats.records >= upgrade_at:
                    self.upgrade()
            self.now += int(rand() * 3)
            if self.markers and self.markers[0][0] <= self.now:
                self.fire_markers(self.now)
            if intro:
                g = intro.pop()
            else:
                if not picks:
                    picks = rng.choices(groups, cum_weights=cum, k=4096)
                g = picks.pop()
            g.step()
        self.finish(groups)
        return stats

    def write_high_watermarks(self) -> None:
        """`replication-offset-checkpoint` as the broker leaves it in its log dir: every data partition's high
        watermark at or past the groups' newest commit (consumers trail producers), and every offsets partition's.
        Its own seeded generator, so the segments stay byte for byte what they were."""
        rng = Random(self.rng.random())
        newest = self.newest_commit
        lines = []
        for t in self.topics:
            for p in range(t.partitions):
                lag = 0 if rng.random() < 0.4 else int(rng.expovariate(1 / 500))
                lines.append(f"{t.name} {p} {newest.get((t.idx, p), 0) + lag}")
        lines += [f"__consumer_offsets {log.index} {log.next_offset}" for log in self.logs]
        (self.out / "replication-offset-checkpoint").write_text(f"0\n{len(lines)}\n" + "\n".join(lines) + "\n")

    def upgrade(self) -> None:
        """Rolling upgrade to 4.1: the leader epoch of every partition moves on, v4 commits, KIP-1101."""
        self.upgraded = True
        self.leader_epoch += 2
        for t in self.topics:
            t.leader_epoch += 2
        for log in self.logs:
            log._emit_linger()

    def finish(self, groups: list[_Group]) -> None:
        rng = self.rng
        self.now += 1000
        # one producer of each of a few transactional groups leaves its transaction open (no marker)
        for g in self.open_at_end:
            if not g.members:
                g.join_all()
            m = next((x for x in g.members if x.owned and x.producer is not None), None)
            if m is None:
                continue
            m.producer.designated_open = True
            if m.producer.open_tps is None:
                tps = m.owned_list[:3]
                ts = g.log.tick()
                g.log.write_txn(g.commit_records(tps, ts, leader_epoch=False), m.producer.pid, m.producer.epoch)
                m.producer.open_tps = tps
                self.stats.transactions_open += 1
        # every other transaction gets its marker
        pending = sorted(self.markers)
        self.markers = []
        for _due, _seq, producer, outcome in pending:
            if producer.designated_open and producer.open_tps is not None:
                self.stats.transactions_open += 1
                continue
            self.now += rng.randint(0, 2)
            self.write_marker(producer, outcome)
        for g in groups:
            self.now += rng.randint(0, 3)
            g.finish()
        for log in self.logs:
            log.close()
        self.write_high_watermarks()
        s = self.stats
        s.groups = len(groups)
        s.producer_ids = len(self.producers)
        s.records_per_partition = [log.records for log in self.logs]
        s.first_timestamp = BASE_TIME_MS
        s.last_timestamp = max(log.last_ts for log in self.logs)
        s.records_by_key_type = dict(sorted(s.records_by_key_type.items()))
        s.tombstones_by_key_type = dict(sorted(s.tombstones_by_key_type.items()))
        s.offset_commit_value_versions = dict(sorted(s.offset_commit_value_versions.items()))
        s.control_records = dict(s.control_records)
        s.batches_by_codec = dict(s.batches_by_codec)


def generate_sample(out_dir: str | Path, *, records: int = 100_000, groups: int = 100, partitions: int = 8,
                    seed: int = 0, segment_bytes: int = DEFAULT_SEGMENT_BYTES, force: bool = False,
                    hot_share: float | None = None, shape: str = "mixed") -> SampleStats:
    """Write `out_dir/__consumer_offsets-{0..partitions-1}/` and return what was written.

    `records` is the approximate total (data + control records), `groups` the number of group ids. `hot_share`:
    about that fraction of the records in one offsets partition (`SampleStats.hot_partition`), its groups' ids
    chosen to hash there and their activity scaled (None: groups wherever their ids hash). `shape`: `mixed` (a
    busy cluster), or `cleaner-died` (topics of 1-4 partitions, groups that rarely rebalance: few keys committed
    again and again, the uncompacted log a dead log cleaner leaves; pair it with few `groups`). Raises
    ValueError on bad arguments, FileExistsError if `out_dir` already holds `__consumer_offsets-*` (unless
    `force`, which removes those directories first).
    """
    if records < 1 or groups < 1 or partitions < 1 or segment_bytes < 1:
        raise ValueError("records, groups, partitions and segment_bytes must all be >= 1")
    if hot_share is not None and not 0 < hot_share <= 1:
        raise ValueError(f"hot share must be in (0, 1], not {hot_share}")
    if shape not in SHAPES:
        raise ValueError(f"shape must be one of {', '.join(SHAPES)}, not {shape}")
    if groups * MIN_RECORDS_PER_GROUP > records:
        raise ValueError(f"{groups} groups need at least {groups * MIN_RECORDS_PER_GROUP} records (got {records})")
    out = Path(out_dir)
    existing = sorted(out.glob("__consumer_offsets-*")) if out.is_dir() else []
    if existing:
        if not force:
            raise FileExistsError(f"{out} already holds {len(existing)} __consumer_offsets-* entries")
        for p in existing:
            shutil.rmtree(p) if p.is_dir() else p.unlink()
    return _Generator(out, records=records, groups=groups, partitions=partitions, seed=seed,
                      segment_bytes=segment_bytes, hot_share=hot_share, shape=shape).run()
