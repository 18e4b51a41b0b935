"""Decoded rows the pipeline could not use -> the `quarantine` table (reason, source, position, bytes)."""
from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from schemas.decoded import KIND_ERROR
from schemas.tables import columns

HEX_CHARS = 512  # bytes shown in key_hex / value_hex are truncated to this many hex characters


def filter_quarantined(decoded: DataFrame) -> DataFrame:
    return decoded.where(F.col("record_kind") == KIND_ERROR)


def quarantine_table(decoded: DataFrame, snapshot_id: str) -> DataFrame:
    """One row per undecodable record or unreadable byte range, with the reason Kafka (or we) could not use it."""
    q = filter_quarantined(decoded)
    # Position: the record's log offset when it has one, else the byte position in its file.
    position = F.coalesce(F.col("offset"), F.col("batch_position"))
    return q.select(
        F.lit(snapshot_id).alias("snapshot_id"),
        F.col("source"),
        F.col("offsets_partition"),
        position.cast("long").alias("position"),
        F.col("error").alias("reason"),
        F.substring(F.lower(F.hex(F.col("key"))), 1, HEX_CHARS).alias("key_hex"),
        F.substring(F.lower(F.hex(F.col("value"))), 1, HEX_CHARS).alias("value_hex"),
        F.regexp_extract(F.col("error"), r"^([A-Za-z_]+)", 1).alias("kind"),
        F.col("offset"),
    ).select(*columns("quarantine"))
