"""Small DataFrame facts a run reports: record-type counts, newest timestamp, highest partition, table counts."""
from __future__ import annotations

from dataclasses import dataclass

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


@dataclass(frozen=True)
class DecodedFacts:
    """What a run reports and cuts by, from one aggregation over the decoded rows."""

    counts: dict[str, int]  # records per `record_type_label`
    max_timestamp: int | None  # the newest record timestamp (the default `as_of`); error rows don't count
    max_timestamp_until: int | None  # the same, at or before `--until-offset` (None without it)
    max_partition: int  # the highest offsets partition of any row, error rows included; -1 for none


FACT_COLUMNS = ("record_kind", "control_type", "key_type", "timestamp", "offset", "offsets_partition")


def decoded_facts(log, until_offset: int | None = None) -> DecodedFacts:
    """The facts of `log` (`frames.decoded_log.DecodedLog`)."""
    decoded = log.frame(FACT_COLUMNS)
    timed = (F.col("record_kind") != KIND_ERROR) & (F.col("timestamp") >= 0)
    until = timed & (F.col("offset") <= F.lit(until_offset)) if until_offset is not None else F.lit(False)
    rows = decoded.groupBy(record_type_label(decoded).alias("t")).agg(
        F.count(F.lit(1)).alias("n"),
        F.max(F.when(timed, F.col("timestamp"))).alias("ts"),
        F.max(F.when(until, F.col("timestamp"))).alias("ts_until"),
        F.max("offsets_partition").alias("part")).collect()

    def newest(field: str) -> int | None:
        values = [int(r[field]) for r in rows if r[field] is not None]
        return max(values) if values else None

    part = newest("part")
    return DecodedFacts(counts={r["t"]: int(r["n"]) for r in rows}, max_timestamp=newest("ts"),
                        max_timestamp_until=newest("ts_until"), max_partition=-1 if part is None else part)


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
