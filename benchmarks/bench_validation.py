"""Benchmark: validation cost on a synthetic snapshot of 1M loaded offsets (+ groups, members, pending, markers).

    PYSPARK_PYTHON=$PWD/.venv/bin/python .venv/bin/python benchmarks/bench_validation.py --rows 1000000

Inputs are generated with spark.range, cached and counted first, so the figure is validation only (every suite,
both GX passes). For scale it also times writing the same tables as Parquet (a lower bound for the commit step of a
run). Target: validation < 20 % of a run.
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from pipelines.config import load_settings
from pipelines.io.delta import spark_schema
from pipelines.session import get_spark
from pipelines.validation.accounting import Accounting, PartitionCounts
from pipelines.validation.runner import run_validation
from pipelines.coordinator.partitioner import partition_for
from schemas.tables import TABLES

PARTITIONS = 50
GROUPS = 20_000
AS_OF_MS = 1_717_200_000_000  # 2024-06-01


def java_partition_for(column: str, partitions: int):
    """The offsets partition of each group id, by the engine's own rule (inputs are built before the clock starts)."""
    return F.udf(lambda g: partition_for(g, partitions), "int")(F.col(column))


def _typed(df: DataFrame, table: str) -> DataFrame:
    """Select the contract's columns in order, nulls for the ones the synthetic data leaves out."""
    have = set(df.columns)
    return df.select(
        *[(F.col(f.name) if f.name in have else F.lit(None)).cast(f.dataType).alias(f.name)
          for f in spark_schema(TABLES[table]).fields]
    )


def synthetic_tables(spark, rows: int) -> tuple[dict[str, DataFrame], DataFrame, Accounting]:
    id_ = F.col("id")
    g = F.pmod(id_, F.lit(GROUPS))
    j = (id_ / GROUPS).cast("long")
    as_of = F.lit(AS_OF_MS / 1000).cast("timestamp")
    offsets = (
        spark.range(rows)
        .withColumn("snapshot_id", F.lit("bench"))
        .withColumn("group_id", F.concat(F.lit("group-"), g.cast("string")))
        .withColumn("topic", F.concat(F.lit("topic-"), F.pmod(j, F.lit(20)).cast("string")))
        .withColumn("partition", (j / 20).cast("int"))
        .withColumn("committed_offset", (id_ * 7) % 1_000_003)
        .withColumn("leader_epoch", F.lit(5))
        .withColumn("metadata", F.lit(""))
        .withColumn("commit_timestamp", as_of - F.make_interval(secs=F.pmod(id_, F.lit(86_400 * 7))))
        .withColumn("record_offset", id_)
        .withColumn("has_group_metadata", g < GROUPS - 1000)
        .withColumn("producer_id", F.lit(-1).cast("long"))
        .withColumn("offsets_partition", java_partition_for("group_id", PARTITIONS))
    )
    loaded_offsets = _typed(offsets, "loaded_offsets")
    empty = loaded_offsets.where(~F.col("has_group_metadata"))
    groups = _typed(
        spark.range(GROUPS - 1000)
        .withColumn("snapshot_id", F.lit("bench"))
        .withColumn("group_id", F.concat(F.lit("group-"), F.col("id").cast("string")))
        .withColumn("offsets_partition", java_partition_for("group_id", PARTITIONS))
        .withColumn("group_type", F.lit("classic"))
        .withColumn("protocol_type", F.lit("consumer"))
        .withColumn("state", F.lit("Stable"))
        .withColumn("generation", F.lit(3))
        .withColumn("current_state_timestamp", as_of - F.make_interval(hours=F.lit(1)))
        .withColumn("member_count", F.lit(2))
        .withColumn("record_offset", F.col("id") + rows),
        "loaded_groups",
    )
    members = _typed(
        groups.select("snapshot_id", "group_id", "offsets_partition")
        .crossJoin(spark.range(2).withColumnRenamed("id", "m"))
        .withColumn("member_id", F.concat(F.lit("member-"), F.col("m").cast("string")))
        .withColumn("group_type", F.lit("classic"))
        .withColumn("subscribed_topics", F.array(F.lit("topic-0"), F.lit("topic-1")))
        .withColumn("assigned_partitions", F.array(F.struct(F.lit("topic-0").alias("topic"),
                                                            F.col("m").cast("int").alias("partition")))),
        "group_members",
    )
    removed = _typed(
        spark.range(1000)
        .withColumn("snapshot_id", F.lit("bench"))
        .withColumn("group_id", F.concat(F.lit("gone-"), F.col("id").cast("string")))
        .withColumn("offsets_partition", java_partition_for("group_id", PARTITIONS))
        .withColumn("tombstone_record_offset", F.col("id") + 2 * rows)
        .withColumn("tombstone_timestamp", as_of - F.make_interval(days=F.lit(1))),
        "removed_groups",
    )
    pending = _typed(
        offsets.where(F.col("id") < 1000)
        .withColumn("producer_id", 5000 + F.col("id"))
        .withColumn("record_offset", F.col("id") + 3 * rows),
        "pending_offsets",
    )
    markers = pending.select(
        "offsets_partition", "producer_id", (F.col("record_offset") - 10).alias("offset"),
        F.lit("COMMIT").alias("control_type"),
    )
    tables = {
        "loaded_offsets": loaded_offsets,
        "empty_group_offsets": empty,
        "loaded_groups": groups,
        "group_members": members,
        "removed_groups": removed,
        "pending_offsets": pending,
    }
    tables = {k: v.cache() for k, v in tables.items()}
    markers = markers.cache()
    for v in (*tables.values(), markers):
        v.count()
    per_partition = rows // PARTITIONS
    accounting = Accounting(
        {p: PartitionCounts(records_in=per_partition, records_used=per_partition) for p in range(PARTITIONS)}
    )
    return tables, markers, accounting


def measure(spark, rows: int) -> dict:
    settings = load_settings(env=os.environ.get("OFFSETLAKE_ENV", "local"),
                             overrides={"validation": {"policy": "fail"}})
    t0 = time.perf_counter()
    tables, markers, accounting = synthetic_tables(spark, rows)
    gen = time.perf_counter() - t0
    run_validation(spark, {"loaded_groups": tables["loaded_groups"]}, as_of_ms=AS_OF_MS,
                   num_partitions=PARTITIONS, settings=settings, suites=["loaded_groups"])  # warm GX and the JVM
    t0 = time.perf_counter()
    result = run_validation(spark, tables, as_of_ms=AS_OF_MS, num_partitions=PARTITIONS, settings=settings,
                            markers=markers, accounting=accounting)
    seconds = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        for name in ("loaded_offsets", "empty_group_offsets", "loaded_groups", "group_members"):
            tables[name].write.mode("overwrite").parquet(os.path.join(d, name))
        write = time.perf_counter() - t0
    out = {
        "rows": rows,
        "validation_seconds": round(seconds, 1),
        "expectations": len(result.expectations),
        "failed": [e.id for e in result.failed],
        "per_suite_seconds": {s.name: round(s.seconds, 1) for s in result.suites},
        "parquet_write_seconds": round(write, 1),
        "generate_and_cache_seconds": round(gen, 1),
        "load_average": os.getloadavg()[0],
    }
    for v in tables.values():
        v.unpersist()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    args = ap.parse_args()
    spark = get_spark(load_settings(env=os.environ.get("OFFSETLAKE_ENV", "local")), app_name="bench-validation")
    out = measure(spark, args.rows)
    for k, v in out.items():
        print(f"{k}: {v}")
    spark.stop()


if __name__ == "__main__":
    main()
