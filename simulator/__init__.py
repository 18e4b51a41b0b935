"""A broker simulator: the `__consumer_offsets` log dir a Kafka 4.0 (then 4.1) cluster's group coordinators would
have left on disk after hours of classic, simple, Connect and KIP-848 groups, transactions and deletions.

It sits beside `pipelines`, not in it: the pipeline reads such logs, the simulator only writes them (for
`offsetlake sample`, `make run`, the benchmarks and the tests), through the pipeline's own writers
(`pipelines.decoding.batch_writer`, `message_writer`), so the bytes it writes are the ones the readers are held to.
Nothing in `pipelines` imports it.

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

Modules: `generate` (the entry point and its arguments), `cluster` (the world and its timeline), `clock`,
`log` (one offsets partition's segments), `groups` (what every group kind shares, and simple groups),
`classic_group` (classic and Connect groups), `consumer_group` (KIP-848 groups), `transactions` (producers and
markers), `assignors`, `topics`, `names`, `stats`.
"""
from simulator.clock import BASE_TIME_MS
from simulator.generate import generate_sample
from simulator.log import DEFAULT_SEGMENT_BYTES
from simulator.stats import SampleStats

__all__ = ["BASE_TIME_MS", "DEFAULT_SEGMENT_BYTES", "SampleStats", "generate_sample"]
