"""Small DataFrame facts a run reports: record-type labels, newest timestamp, markers, table counts."""
from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from schemas.decoded import KIND_CONTROL, KIND_ERROR
from schemas.tables import TABLES


def record_type_label(decoded: DataFrame):
    """`offset_commit:1`, `group_metadata:2`, `consumer_group:5`, `control:COMMIT`, `unknown:42`, `error`."""
    kind = F.col("record_kind")
    return (
        F.when(kind == KIND_ERROR, F.lit("error"))
        .when(kind == KIND_CONTROL, F.concat(F.lit("control:"), F.coalesce(F.col("control_type"), F.lit("?"))))
        .otherwise(F.concat(kind, F.lit(":"), F.coalesce(F.col("key_type").cast("string"), F.lit("?"))))
    )


def max_record_timestamp(decoded: DataFrame, until_offset: int | None = None) -> int | None:
    """The newest record timestamp in the input (the default `as_of`), at or before `until_offset` when given;
    error rows don't count."""
    if until_offset is not None:
        decoded = decoded.where(F.col("offset") <= F.lit(until_offset))
    row = decoded.where((F.col("record_kind") != KIND_ERROR) & (F.col("timestamp") >= 0)).agg(
        F.max("timestamp").alias("m")).collect()[0]
    return None if row["m"] is None else int(row["m"])


def max_partition(decoded: DataFrame) -> int:
    row = decoded.agg(F.max("offsets_partition").alias("m")).collect()[0]
    return -1 if row["m"] is None else int(row["m"])


def with_empty_expiry_tables(spark, tables: dict[str, DataFrame]) -> dict[str, DataFrame]:
    """`--no-expiry`: the expiry tables exist, empty, so every snapshot has every table."""
    out = dict(tables)
    for name in ("expired_offsets", "expired_groups"):
        out[name] = spark.createDataFrame([], TABLES[name])
    return out


def materialize(tables: dict[str, DataFrame]) -> dict[str, int]:
    """Compute every table once and cut its lineage (an eager local checkpoint), in place; returns row counts.
    Validation, counts and the write then read materialized rows instead of re-running the replay's task."""
    counts = {}
    for name in list(tables):
        tables[name] = tables[name].localCheckpoint(eager=True)
        counts[name] = tables[name].count()
    return counts


def open_transactions(pending_offsets: DataFrame) -> int:
    """Open (producer, offsets partition) transactions at the end of the log."""
    return pending_offsets.select("offsets_partition", "producer_id").distinct().count()


def misplaced_count(loaded_groups: DataFrame) -> int:
    """Groups found in an offsets partition other than abs(javaHashCode(group)) % n."""
    return loaded_groups.where(
        F.col("expected_offsets_partition").isNotNull()
        & (F.col("expected_offsets_partition") != F.col("offsets_partition"))).count()
