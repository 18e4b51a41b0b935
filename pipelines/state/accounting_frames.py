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


def max_record_timestamp(decoded: DataFrame) -> int | None:
    """The newest record timestamp in the input (the default `as_of`); error rows don't count."""
    row = decoded.where((F.col("record_kind") != KIND_ERROR) & (F.col("timestamp") >= 0)).agg(
        F.max("timestamp").alias("m")).collect()[0]
    return None if row["m"] is None else int(row["m"])


def max_partition(decoded: DataFrame) -> int:
    row = decoded.agg(F.max("offsets_partition").alias("m")).collect()[0]
    return -1 if row["m"] is None else int(row["m"])


def markers(decoded: DataFrame) -> DataFrame:
    """Control records: (offsets_partition, producer_id, offset, control_type)."""
    return decoded.where(F.col("record_kind") == KIND_CONTROL).select(
        "offsets_partition", "producer_id", "offset", "control_type")


def with_empty_expiry_tables(spark, tables: dict[str, DataFrame]) -> dict[str, DataFrame]:
    """`--no-expiry`: the expiry tables exist, empty, so every snapshot has every table."""
    out = dict(tables)
    for name in ("expired_offsets", "expired_groups"):
        out[name] = spark.createDataFrame([], TABLES[name])
    return out


def table_counts(tables: dict[str, DataFrame]) -> dict[str, int]:
    return {name: df.count() for name, df in tables.items()}


def open_transactions(pending_offsets: DataFrame) -> int:
    """Open (producer, offsets partition) transactions at the end of the log."""
    return pending_offsets.select("offsets_partition", "producer_id").distinct().count()


def misplaced_count(loaded_groups: DataFrame) -> int:
    """Groups found in an offsets partition other than abs(javaHashCode(group)) % n."""
    return loaded_groups.where(
        F.col("expected_offsets_partition").isNotNull()
        & (F.col("expected_offsets_partition") != F.col("offsets_partition"))).count()
