"""Benchmark: the replay engine over N synthetic decoded rows (spark.range-based, no decoding), one Spark task per
offsets partition, timed per output table.

    PYSPARK_PYTHON=$PWD/.venv/bin/python .venv/bin/python benchmarks/bench_replay.py --rows 10000000

The rows resemble the `simulator`'s mix (spark.range-based, so 10M rows cost no Python): 50 offsets partitions,
~10k groups (each in one offsets partition), every group committing ~24 topic-partitions of its own topics:
* ~95% offset commits: plain values, ~0.5% tombstones, ~3% transactional commits of 100 producers per partition
  with a COMMIT / ABORT marker every 330 offsets of a partition (the last transactions stay open);
* ~2.5% GroupMetadata records of the classic groups (3 members with subscriptions and assignments, 10% Empty);
  ~5% of the groups also get GroupMetadata tombstones (deleted groups, some re-created);
* ~1% KIP-848 records (types 3, 4, 5, 6, 7, 8) of the ~15% KIP-848 groups (3 members each).

`--mode materialize` (default) does what `pipelines/rebuild/stages.py` does: the decoded rows are persisted first, then the
engine runs one task per offsets partition (`frames.shards.replay_on_spark`, timed as `replay (shards)`: it collects
the state tables), then the history is unpacked from the shards' envelope and materialized (an eager local
checkpoint), timed on its own. `--mode noop` writes it to the `noop` sink instead.
"""
from __future__ import annotations

import argparse
import os
import time

from pyspark import StorageLevel
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema

from pipelines.config import load_settings
from pipelines.session import get_spark
from pipelines.coordinator.options import ReplayOptions
from pipelines.frames.decoded_log import DecodedLog
from pipelines.frames.shards import replay_on_spark, topic_names_of
from schemas.decoded import DECODED_RECORD_SCHEMA

PARTITIONS = 50
GROUPS_PER_PARTITION = 200  # 10k groups
PRODUCERS_PER_PARTITION = 100
TOPICS = 200


def _pick(id_: F.Column, salt: int, n: int) -> F.Column:
    return F.pmod(F.xxhash64(id_, F.lit(salt)), F.lit(n))


def synthetic_decoded(spark, n: int) -> DataFrame:
    schema = from_arrow_schema(DECODED_RECORD_SCHEMA)
    types = {f.name: f.dataType for f in schema.fields}
    id_ = F.col("id")
    part = F.pmod(id_, F.lit(PARTITIONS)).cast("int")
    offset = F.floor(id_ / PARTITIONS).cast("long")
    bucket = _pick(id_, 0, 1000)
    # a group lives in one offsets partition: group index = partition + 50 * k
    gk = _pick(id_, 1, GROUPS_PER_PARTITION)
    gidx = part + F.lit(PARTITIONS) * gk
    group = F.concat(F.lit("group-"), gidx.cast("string"))
    kip_group = F.pmod(gidx, F.lit(100)) < 15  # ~15% of the groups are KIP-848 groups
    deleted = F.pmod(gidx, F.lit(100)) >= 95  # ~5% end deleted (a GroupMetadata tombstone)
    # one producer per (partition, slot) commits ~10 records then writes a marker: markers ~ every 330 rows
    txn_slot = F.pmod(offset, F.lit(330))
    control = txn_slot == 329
    txn = ~control & (bucket < 30)
    pid = (F.lit(1000) + part * PRODUCERS_PER_PARTITION + F.pmod(F.floor(offset / 330), F.lit(PRODUCERS_PER_PARTITION))
           ).cast("long")
    kind = (
        F.when(control, "control")
        .when(bucket < 935, "offset_commit")
        .when(kip_group, "consumer_group")
        .when(bucket < 965, F.when(deleted & (bucket >= 960), "group_metadata_tomb").otherwise("group_metadata"))
        .otherwise("offset_commit")
    )
    is_gm_tomb = kind == "group_metadata_tomb"
    kind = F.when(is_gm_tomb, "group_metadata").otherwise(kind)
    topic_of_group = F.pmod(gidx * 7, F.lit(TOPICS))
    topic = F.concat(F.lit("topic-"), (topic_of_group + _pick(id_, 2, 3)).cast("string"))
    kip_type = F.element_at(F.array(*[F.lit(t) for t in (3, 4, 5, 5, 6, 7, 8, 8)]),
                            (_pick(id_, 3, 8) + 1).cast("int"))
    member = F.concat(F.lit("member-"), gidx.cast("string"), F.lit("-"), _pick(id_, 4, 3).cast("string"))
    tps = F.array(*[F.struct(F.concat(F.lit("topic-"), (topic_of_group + i).cast("string")).alias("topic"),
                             F.array(*[F.lit(p) for p in range(8)]).alias("partitions")) for i in range(3)])
    tids = F.array(*[F.struct(F.concat(F.lit("tid-"), (topic_of_group + i).cast("string")).alias("topic_id"),
                              F.array(*[F.lit(p) for p in range(8)]).alias("partitions")) for i in range(3)])
    subs = F.array(*[F.concat(F.lit("topic-"), (topic_of_group + i).cast("string")) for i in range(3)])
    empty_group = _pick(id_, 5, 10) == 0
    members = F.when(empty_group, F.array()).otherwise(F.array(*[F.struct(
        F.concat(F.lit(f"consumer-{m}-"), gidx.cast("string")), F.lit(None), F.lit("client"), F.lit("/10.0.0.1"),
        F.lit(300000), F.lit(45000), F.lit(None), F.lit(None), F.lit(3), subs, F.lit(None), F.lit(-1),
        F.lit(None), tps, F.lit(3)) for m in range(3)]))
    is_oc, is_gm, is_cg = kind == "offset_commit", kind == "group_metadata", kind == "consumer_group"
    values = {
        "source": F.lit("bench"),
        "offsets_partition": part,
        "offset": offset,
        "batch_base_offset": offset,
        "batch_first_offset": offset,
        "batch_last_offset": offset,
        "batch_position": F.lit(-1),
        "timestamp": 1_700_000_000_000 + id_,
        "timestamp_type": F.lit("CreateTime"),
        "producer_id": F.when(txn | control, pid).otherwise(F.lit(-1)),
        "producer_epoch": F.when(txn | control, F.lit(0)).otherwise(F.lit(-1)),
        "is_transactional": txn | control,
        "is_control": control,
        "magic": F.lit(2),
        "codec": F.lit("none"),
        "record_kind": kind,
        "key_type": F.when(is_oc, 1).when(is_gm, 2).when(is_cg, kip_type),
        "value_version": F.when(is_oc, 3).when(is_gm, 3).when(is_cg, 0),
        "is_tombstone": (is_oc & (bucket >= 930)) | is_gm_tomb,
        "control_type": F.when(control, F.when(_pick(id_, 6, 4) == 0, "ABORT").otherwise("COMMIT")),
        "coordinator_epoch": F.when(control, F.lit(0)),
        "group_id": F.when(~control, group),
        "topic": F.when(is_oc, topic),
        "partition": F.when(is_oc, _pick(id_, 7, 8)).cast("int"),
        "member_id": F.when(is_cg, member),
        "committed_offset": F.when(is_oc, id_),
        "leader_epoch": F.when(is_oc, F.lit(0)),
        "metadata": F.when(is_oc, F.lit("")),
        "commit_timestamp": F.when(is_oc, 1_700_000_000_000 + id_),
        "expire_timestamp": F.when(is_oc, F.lit(-1)),
        "protocol_type": F.when(is_gm, F.lit("consumer")),
        "generation": F.when(is_gm, F.pmod(offset, F.lit(100))).cast("int"),
        "protocol": F.when(is_gm, F.lit("range")),
        "leader": F.when(is_gm & ~empty_group, F.concat(F.lit("consumer-0-"), gidx.cast("string"))),
        "current_state_timestamp": F.when(is_gm, 1_700_000_000_000 + id_),
        "members": F.when(is_gm & ~is_gm_tomb, members),
        "layout": F.when(is_cg, F.lit("3.8+")),
        "group_epoch": F.when(is_cg, F.lit(3)),
        "topics_metadata": F.when(is_cg & (kip_type == 4), F.array(*[F.struct(
            F.concat(F.lit("tid-"), (topic_of_group + i).cast("string")),
            F.concat(F.lit("topic-"), (topic_of_group + i).cast("string")), F.lit(8)) for i in range(3)])),
        "client_id": F.when(is_cg, F.lit("client")),
        "client_host": F.when(is_cg, F.lit("/10.0.0.2")),
        "subscribed_topics": F.when(is_cg, subs),
        "rebalance_timeout_ms": F.when(is_cg, F.lit(300000)),
        "server_assignor": F.when(is_cg, F.lit("uniform")),
        "assignment_epoch": F.when(is_cg, F.lit(3)),
        "member_epoch": F.when(is_cg, F.lit(3)),
        "previous_member_epoch": F.when(is_cg, F.lit(2)),
        "member_state": F.when(is_cg, F.lit(0)),
        "assigned_partitions": F.when(is_cg & kip_type.isin(7, 8), tids),
        "partitions_pending_revocation": F.when(is_cg & (kip_type == 8), F.array()),
    }
    cols = [(values[f.name] if f.name in values else F.lit(None)).cast(types[f.name]).alias(f.name)
            for f in schema.fields]
    return spark.range(n).select(*cols)


def _time(label: str, fn, timings: dict) -> None:
    t = time.perf_counter()
    fn()
    timings[label] = time.perf_counter() - t
    print(f"  {label:22s} {timings[label]:8.1f} s", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--semantics", default="legacy")
    ap.add_argument("--mode", choices=("materialize", "noop"), default="materialize")
    ap.add_argument("--env", default="local")
    args = ap.parse_args()
    settings = load_settings(env=args.env, overrides={"spark": {"spark.master": "local[2]",
                                                                "spark.sql.shuffle.partitions": "16",
                                                                "spark.driver.memory": "3g"}})
    spark = get_spark(settings, app_name="bench-replay")
    decoded = synthetic_decoded(spark, args.rows)
    print(f"load average {os.getloadavg()}", flush=True)
    timings: dict[str, float] = {}
    if args.mode == "materialize":
        decoded = decoded.persist(StorageLevel.MEMORY_AND_DISK)
        _time("decode (persist)", lambda: decoded.count(), timings)
    t0 = time.perf_counter()
    options = ReplayOptions(semantics=args.semantics, snapshot_id="bench", num_partitions=PARTITIONS)
    log = DecodedLog.from_frame(spark, decoded)
    shards = replay_on_spark(spark, log, options, None, topic_names_of(log), keep=False)
    release = shards.release
    # the state tables come back collected (Arrow) with the shards' job; the history stays packed on Spark
    tables = {"offset_commits": shards.tables["offset_commits"].frame()}
    timings["replay (shards)"] = time.perf_counter() - t0
    counts = {t: a.num_rows for t, a in shards.tables.items() if t not in tables}
    if args.mode == "materialize":
        for name in list(tables):
            def run(name=name):
                tables[name] = tables[name].localCheckpoint(eager=True)
                counts[name] = tables[name].count()
            _time(name, run, timings)
    else:
        for name, df in list(tables.items()):
            _time(name, lambda df=df: df.write.format("noop").mode("overwrite").save(), timings)
    release()
    total = time.perf_counter() - t0
    print(f"counts {counts}")
    print(f"replay of {args.rows:,} rows ({args.semantics}, {args.mode}), all tables: {total:.1f} s "
          f"= {args.rows / total:,.0f} rows/s; load average {os.getloadavg()}")
    spark.stop()


if __name__ == "__main__":
    main()
