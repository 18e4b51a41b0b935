"""Benchmark: replay N synthetic decoded rows (spark.range-based, no decoding) end to end, every table to `noop`.

    PYSPARK_PYTHON=$PWD/.venv/bin/python .venv/bin/python benchmarks/bench_replay.py --rows 10000000

Row mix per offsets partition (50 partitions): ~88% plain offset commits over 20k groups x 20 topics x 8 partitions,
~1% offset tombstones, ~5% transactional commits of 200 producers with a COMMIT/ABORT marker every ~400 rows,
~4% GroupMetadata records (some tombstones), ~2% KIP-848 records (types 3, 5, 6, 8).
"""
from __future__ import annotations

import argparse
import time

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema

from pipelines.config import load_settings
from pipelines.session import get_spark
from pipelines.state.options import ReplayOptions
from pipelines.state.replay import replay
from schemas.decoded import DECODED_RECORD_SCHEMA

PARTITIONS = 50


def synthetic_decoded(spark, n: int) -> DataFrame:
    schema = from_arrow_schema(DECODED_RECORD_SCHEMA)
    id_ = F.col("id")
    bucket = F.pmod(F.xxhash64(id_), F.lit(1000))
    kind = (
        F.when(F.pmod(id_, F.lit(400)) == 399, "control")
        .when(bucket < 880, "offset_commit")
        .when(bucket < 890, "offset_commit")  # tombstones
        .when(bucket < 940, "offset_commit")  # transactional
        .when(bucket < 980, "group_metadata")
        .otherwise("consumer_group")
    )
    group = F.concat(F.lit("group-"), F.pmod(F.xxhash64(id_, F.lit(1)), F.lit(20000)).cast("string"))
    txn = (bucket >= 890) & (bucket < 940)
    pid = F.when(txn | (kind == "control"), 1000 + F.pmod(id_, F.lit(200))).otherwise(F.lit(-1)).cast("long")
    kip_type = F.element_at(F.array(F.lit(3), F.lit(5), F.lit(6), F.lit(8)), (F.pmod(id_, F.lit(4)) + 1).cast("int"))
    offset = (id_ / PARTITIONS).cast("long")
    values = {
        "source": F.lit("bench"),
        "offsets_partition": F.pmod(id_, F.lit(PARTITIONS)).cast("int"),
        "offset": offset,
        "batch_base_offset": offset,
        "batch_first_offset": offset,
        "batch_last_offset": offset,
        "timestamp": 1_700_000_000_000 + id_,
        "producer_id": pid,
        "producer_epoch": F.lit(0),
        "is_transactional": txn | (kind == "control"),
        "is_control": kind == "control",
        "magic": F.lit(2),
        "record_kind": kind,
        "key_type": F.when(kind == "offset_commit", 1).when(kind == "group_metadata", 2).when(
            kind == "consumer_group", kip_type),
        "is_tombstone": ((bucket >= 880) & (bucket < 890)) | ((kind == "group_metadata") & (bucket == 979)),
        "control_type": F.when(kind == "control", F.when(F.pmod(id_, F.lit(3)) == 0, "ABORT").otherwise("COMMIT")),
        "group_id": F.when(kind != "control", group),
        "topic": F.concat(F.lit("topic-"), F.pmod(id_, F.lit(20)).cast("string")),
        "partition": F.pmod(id_, F.lit(8)).cast("int"),
        "member_id": F.concat(F.lit("member-"), F.pmod(id_, F.lit(3)).cast("string")),
        "committed_offset": id_,
        "leader_epoch": F.lit(-1),
        "metadata": F.lit(""),
        "commit_timestamp": 1_700_000_000_000 + id_,
        "expire_timestamp": F.lit(-1),
        "protocol_type": F.lit("consumer"),
        "generation": F.pmod(id_, F.lit(100)).cast("int"),
        "protocol": F.lit("range"),
        "current_state_timestamp": F.lit(-1),
        "group_epoch": F.lit(3),
        "assignment_epoch": F.lit(3),
        "member_epoch": F.lit(3),
        "previous_member_epoch": F.lit(2),
        "member_state": F.lit(0),
        "server_assignor": F.lit("uniform"),
    }
    cols = [(values[f.name] if f.name in values else F.lit(None)).cast(f.dataType).alias(f.name)
            for f in schema.fields]
    return spark.range(n).select(*cols)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--semantics", default="legacy")
    ap.add_argument("--env", default="local")
    args = ap.parse_args()
    settings = load_settings(env=args.env, overrides={"spark": {"spark.master": "local[2]",
                                                                "spark.sql.shuffle.partitions": "16",
                                                                "spark.driver.memory": "3g"}})
    spark = get_spark(settings, app_name="bench-replay")
    decoded = synthetic_decoded(spark, args.rows)
    t0 = time.perf_counter()
    tables = replay(decoded, ReplayOptions(semantics=args.semantics, snapshot_id="bench"))
    timings = {}
    for name, df in tables.items():
        t = time.perf_counter()
        df.write.format("noop").mode("overwrite").save()
        timings[name] = time.perf_counter() - t
    total = time.perf_counter() - t0
    for name, secs in timings.items():
        print(f"{name:22s} {secs:8.1f} s")
    print(f"replay of {args.rows:,} rows ({args.semantics}), all tables: {total:.1f} s "
          f"= {args.rows / total:,.0f} rows/s")
    spark.stop()


if __name__ == "__main__":
    main()
