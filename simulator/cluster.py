"""The simulated cluster: its topics and groups (built from the seed), its offsets partitions' logs, and the timeline
that drives them: groups step in turn, weighted by how busy each is, transaction markers fall due, the brokers are
upgraded to 4.1 late on, and at the end groups are deleted or emptied, markers written and the logs closed.

Without a duration the clock moves 0-2 ms a step, so a whole sample spans seconds (the bytes every pinned digest and
benchmark was measured on). With one (`duration_ms`), the steps are spread over it as a busy cluster's requests are
(`advance`), and named incidents (`simulator.incidents`) happen at their times."""
from __future__ import annotations

import math
from collections import Counter
from pathlib import Path
from random import Random

from pipelines.coordinator.partitioner import partition_for
from simulator.classic_group import ClassicGroup, ConnectGroup
from simulator.clock import BASE_TIME_MS, Clock
from simulator.consumer_group import ConsumerGroup
from simulator.data_topics import DataTopics, Frontier
from simulator.groups import KIND_CLASSIC, KIND_CONNECT, KIND_DELETED, KIND_KIP848, KIND_SHARES, KIND_SIMPLE, Group, \
    SimpleGroup
from simulator.incidents import IncidentSpec, Incidents
from simulator.log import CODECS, PartitionLog
from simulator.names import ENTITIES, ROLES, SERVICES, UNICODE_TAGS, random_java_uuid, random_uuid, random_uuid_str
from simulator.stats import SampleStats
from simulator.topics import Topic
from simulator.transactions import TransactionCoordinator


LINGER_MS = 5


class Cluster:
    def __init__(self, out: Path, *, records: int, groups: int, partitions: int, seed: int, segment_bytes: int,
                 hot_share: float | None = None, shape: str = "mixed", data_segments: int = 0,
                 data_batches: int = 16, data_partitions: int | None = None, duration_ms: int | None = None,
                 incidents: tuple[IncidentSpec, ...] = ()):
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
        self.clock = Clock()
        self.linger_p = 0.25
        # a paced timeline (`duration_ms`) merges consecutive writes into one batch only within the linger time, as
        # the coordinator does (`group.coordinator.append.linger.ms`, 5 ms in 4.0); unpaced, writes are ms apart
        self.duration_ms = duration_ms
        self.linger_ms = LINGER_MS if duration_ms is not None else None
        self.end_ms = BASE_TIME_MS + (duration_ms or 0)
        self.groups: list[Group] = []
        self.steps = 0  # timeline steps taken (a paced timeline's records per step)
        self.left_at_check = 1  # the record budget left at the last check, and the records written then
        self.records_at_check = 0
        self.leader_epoch = 0
        self.upgraded = False
        self.newest_commit: dict[tuple[int, int], int] = {}  # (topic idx, partition) -> highest offset committed
        self.frontier = Frontier()  # when the highest committed offsets grew: no record is consumed before it exists
        self.data = (data_segments, data_batches, data_partitions)  # the data topics' segments (0: none written)
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
        self.transactions = TransactionCoordinator(self.rng, self.clock, self.stats)
        self.n_eras = 10  # the record budget's tenths: each offsets partition's codec changes with them
        self.logs = [PartitionLog(self, p) for p in range(partitions)]
        self.incidents = Incidents(self, incidents, BASE_TIME_MS, self.end_ms) if incidents else None

    # -- shared helpers ------------------------------------------------------------------------------------------
    def may_delete_offsets(self) -> bool:
        """Whether a group may delete offsets of its own now (OffsetDelete, a simple consumer's tombstones): not in
        the incidents' window, whose damaged groups are the incidents' alone."""
        return self.incidents is None or not self.incidents.quiet(self.clock.now)

    def count(self, key_type: int, n: int, tombstones: int = 0) -> None:
        self.stats.records_by_key_type[key_type] += n
        if tombstones:
            self.stats.tombstones_by_key_type[key_type] += tombstones

    # -- world ---------------------------------------------------------------------------------------------------
    def build(self) -> list[Group]:
        rng = self.rng
        n_topics = max(6, min(400, self.n_groups // 2 + 5))
        self.topics: list[Topic] = []
        names = set()
        while len(self.topics) < n_topics:
            name = f"{rng.choice(SERVICES)}.{rng.choice(ENTITIES)}"
            if name in names:
                name = f"{name}-{len(self.topics)}"
            names.add(name)
            counts = (1, 3, 6, 6, 8, 12, 12, 16, 24, 32) if self.shape == "mixed" else (1, 2, 3, 4)
            self.topics.append(Topic(len(self.topics), name, rng.choice(counts), random_uuid(rng)))
        kinds = self.allocate_kinds()
        if self.hot_share is not None:
            # the hot groups: a random mix of kinds (`kinds` is shuffled); every group when the share is 1
            n_hot = len(kinds) if self.hot_share >= 1 else max(1, round(self.hot_share * len(kinds)))
            if self.partitions == 1:
                n_hot = len(kinds)
        groups: list[Group] = []
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
            cls = {KIND_CLASSIC: ClassicGroup, KIND_SIMPLE: SimpleGroup, KIND_KIP848: ConsumerGroup,
                   KIND_CONNECT: ConnectGroup}[base_kind]
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
        classic = [g for g in groups if type(g) is ClassicGroup and not g.deleted_at_end]
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

    def _reweigh(self, groups: list[Group]) -> None:
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
        svc = rng.choice(SERVICES)
        if deleted:
            return rng.choice((f"console-consumer-{rng.randint(10000, 99999)}", f"tmp-{svc}-{i}",
                               f"{svc}-migration-{i}"))
        if i % 37 == 7:
            return f"{svc}-{UNICODE_TAGS[(i // 37) % len(UNICODE_TAGS)]}-{i}"
        if kind == KIND_CLASSIC:
            return f"{svc}-{rng.choice(ROLES)}-{i}"
        if kind == KIND_SIMPLE:
            return rng.choice((f"{svc}-offsets-{i}", f"spark-kafka-source-{random_java_uuid(rng)}-driver-0",
                               f"flink-{svc}-{i}", f"{svc}-backfill-{i}"))
        if kind == KIND_KIP848:
            return f"{svc}-{rng.choice(ROLES)}-v2-{i}"
        return rng.choice((f"connect-cluster-{i}", f"connect-{svc}-{i}", f"{svc}-connect-workers-{i}"))

    def pick_topics(self, kind: str) -> list[Topic]:
        rng = self.rng
        k = 1 if kind == KIND_SIMPLE else rng.choice((1, 1, 2, 2, 3))
        return rng.sample(self.topics, k)

    # -- run -----------------------------------------------------------------------------------------------------
    def run(self) -> SampleStats:
        rng = self.rng
        self.out.mkdir(parents=True, exist_ok=True)
        topic_id = None  # one __consumer_offsets topic: every partition's partition.metadata names its one id
        for log in self.logs:
            log.dir.mkdir(exist_ok=True)
            drawn = random_uuid_str(rng)  # one draw a partition still: a seed's sample keeps its records
            topic_id = topic_id or drawn
            (log.dir / "partition.metadata").write_text(f"version: 0\ntopic_id: {topic_id}\n")
            (log.dir / "leader-epoch-checkpoint").write_text("0\n1\n0 0\n")
        groups = self.groups = self.build()
        upgrade_at = int(self.target * rng.uniform(0.75, 0.9))
        cum = []
        total = 0.0
        for g in groups:
            total += g.weight
            cum.append(total)
        ending = [g for g in groups if g.has_end_phase()]  # what the budget keeps in reserve is theirs alone
        stats = self.stats
        clock = self.clock
        transactions = self.transactions
        markers = transactions.markers  # the heap itself: fire_markers pops in place
        rand = rng.random
        paced = self.duration_ms is not None
        incidents = self.incidents
        next_check = 0
        picks: list[Group] = []
        # every group shows up early on (creation order is random), then activity follows the weights
        intro = groups[:]
        rng.shuffle(intro)
        while True:
            if stats.records >= next_check:
                reserve = sum(g.end_cost() for g in ending) + len(markers) + 4 * len(self.open_at_end)
                left = self.target - stats.records - reserve
                if left <= 0:
                    if not intro and not (incidents and incidents.pending):
                        break
                    left = 1  # every group exists, and every incident happened, before the budget may end it
                next_check = stats.records + max(1, left // 8)
                self.left_at_check, self.records_at_check = left, stats.records
                if not self.upgraded and stats.records >= upgrade_at:
                    self.upgrade()
            if paced:
                self.advance(rand())
            else:
                clock.now += int(rand() * 3)
                if markers and markers[0][0] <= clock.now:
                    transactions.fire_markers(clock.now)
            if intro:
                g = intro.pop()
            else:
                if not picks:
                    picks = rng.choices(groups, cum_weights=cum, k=4096)
                g = picks.pop()
            if not g.held:
                g.step()
            self.steps += 1
        self.finish(groups)
        return stats

    def advance(self, u: float) -> None:
        """A paced timeline's next step: after an exponential gap (so each group steps as a Poisson process at its
        own weight's rate: its own cadence, and rebalances far apart), whose mean spreads the record budget left
        over the time left, so the timeline ends about `duration_ms` after its start. Transaction markers and
        incident events due before the step happen on the way, each at its own time. `u`: a uniform draw."""
        clock, stats = self.clock, self.stats
        left = max(1, self.left_at_check - (stats.records - self.records_at_check))
        per_step = stats.records / self.steps if self.steps else 3.0
        remaining = self.end_ms - clock.now
        mean = min(remaining, remaining * per_step / left) if remaining > 0 else 1000.0
        until = clock.now + int(-mean * math.log(1.0 - u))
        markers, incidents = self.transactions.markers, self.incidents
        while True:
            marker_at = markers[0][0] if markers else None
            event_at = incidents.due() if incidents else None
            if event_at is not None and event_at <= until and (marker_at is None or event_at <= marker_at):
                incidents.fire_next()
            elif marker_at is not None and marker_at <= until:
                clock.now = max(clock.now, marker_at)
                self.transactions.fire_markers(clock.now)
            else:
                break
        clock.now = max(clock.now, until)

    def write_high_watermarks(self) -> dict[tuple[int, int], int]:
        """`replication-offset-checkpoint` as the broker leaves it in its log dir: every data partition's high
        watermark at or past the groups' newest commit (consumers trail producers), and every offsets partition's.
        Its own seeded generator, so the segments stay byte for byte what they were. Returns the data partitions'."""
        rng = Random(self.rng.random())
        newest = self.newest_commit
        lines, hw = [], {}
        for t in self.topics:
            for p in range(t.partitions):
                lag = 0 if rng.random() < 0.4 else int(rng.expovariate(1 / 500))
                hw[(t.idx, p)] = newest.get((t.idx, p), 0) + lag
                lines.append(f"{t.name} {p} {hw[(t.idx, p)]}")
        lines += [f"__consumer_offsets {log.index} {log.next_offset}" for log in self.logs]
        (self.out / "replication-offset-checkpoint").write_text(f"0\n{len(lines)}\n" + "\n".join(lines) + "\n")
        return hw

    def upgrade(self) -> None:
        """Rolling upgrade to 4.1: the leader epoch of every partition moves on, v4 commits, KIP-1101."""
        self.upgraded = True
        self.leader_epoch += 2
        for t in self.topics:
            t.leader_epoch += 2
        for log in self.logs:
            log._emit_linger()

    def finish(self, groups: list[Group]) -> None:
        rng = self.rng
        self.clock.now += 1000
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
        self.transactions.finish()  # every other transaction gets its marker
        if self.incidents is not None and self.incidents.quiet(self.clock.now):
            # the incidents' quiet window reaches the end: the groups the sample deletes there are kept, so every
            # group damaged around the incidents is still an incident's (what restore-plan --damaged-since picks)
            for g in groups:
                g.deleted_at_end = False
        for g in groups:
            self.clock.now += rng.randint(0, 3)
            g.finish()
        for log in self.logs:
            log.close()
        hw = self.write_high_watermarks()
        s = self.stats
        s.groups = len(groups)
        s.producer_ids = len(self.transactions.producers)
        s.records_per_partition = [log.records for log in self.logs]
        s.first_timestamp = BASE_TIME_MS
        s.last_timestamp = max(log.last_ts for log in self.logs)
        s.duration_ms = self.duration_ms
        s.incidents = self.incidents.records() if self.incidents else []
        s.records_by_key_type = dict(sorted(s.records_by_key_type.items()))
        s.tombstones_by_key_type = dict(sorted(s.tombstones_by_key_type.items()))
        s.offset_commit_value_versions = dict(sorted(s.offset_commit_value_versions.items()))
        s.control_records = dict(s.control_records)
        s.batches_by_codec = dict(s.batches_by_codec)
        segments, batches, limit = self.data
        if segments:
            s.data_topics = DataTopics(self, hw, segments=segments, batches_per_segment=batches,
                                       partitions=limit).write()

