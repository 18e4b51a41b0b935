"""Decoded rows the pipeline could not use -> the `quarantine` table (kind, source, byte position, offset, bytes)."""
from __future__ import annotations

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from schemas.decoded import KIND_ERROR
from schemas.tables import TABLES, columns

HEX_CHARS = 512  # bytes shown in key_hex / value_hex are truncated to this many hex characters

# the decoded columns the table is made of
QUARANTINE_INPUT = ("source", "offsets_partition", "batch_position", "error", "key", "value", "error_kind", "offset")


def quarantine_table(log, snapshot_id: str, error_rows: int | None = None) -> "DataFrame | pa.Table":
    """The quarantined rows of `log` (`frames.decoded_log.DecodedLog`): one row per undecodable record or unread
    byte range, with the reason Kafka (or we) could not use it. `error_rows`: how many error rows the log holds,
    when known (its tally); 0 spares reading the whole log to find none.

    `kind` is the reader's own (`schemas.quarantine.QUARANTINE_KINDS`); `position` the byte position of the
    batch or entry in its file (a row number for a tabular dump, -1 for a file that was not opened); `offset` the
    log offset when known. An unread range starts at `position`; its end is in the reason.
    """
    if error_rows == 0:  # an empty table in hand: nothing for Spark to run
        return TABLES["quarantine"].empty_table()
    q = log.frame(QUARANTINE_INPUT, kinds=(KIND_ERROR,))
    return q.select(
        F.lit(snapshot_id).alias("snapshot_id"),
        F.col("source"),
        F.col("offsets_partition"),
        F.col("batch_position").cast("long").alias("position"),
        F.col("error").alias("reason"),
        F.substring(F.lower(F.hex(F.col("key"))), 1, HEX_CHARS).alias("key_hex"),
        F.substring(F.lower(F.hex(F.col("value"))), 1, HEX_CHARS).alias("value_hex"),
        F.col("error_kind").alias("kind"),
        F.col("offset"),
    ).select(*columns("quarantine"))
