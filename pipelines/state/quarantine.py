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
    if log.in_hand:  # a log decoded in this process: its quarantine too, with no session
        return _quarantine_in_hand(log.to_arrow(QUARANTINE_INPUT, kinds=(KIND_ERROR,)), snapshot_id)
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


def _quarantine_in_hand(rows: pa.Table, snapshot_id: str) -> pa.Table:
    """`quarantine_table`'s rows of a log in hand, column for column as Spark makes them."""
    def hex_of(column: str) -> list[str | None]:
        return [None if b is None else b.hex()[:HEX_CHARS] for b in rows.column(column).to_pylist()]
    out = {
        "snapshot_id": [snapshot_id] * rows.num_rows,
        "source": rows.column("source"),
        "offsets_partition": rows.column("offsets_partition"),
        "position": rows.column("batch_position"),
        "reason": rows.column("error"),
        "key_hex": hex_of("key"),
        "value_hex": hex_of("value"),
        "kind": rows.column("error_kind"),
        "offset": rows.column("offset"),
    }
    schema = TABLES["quarantine"]
    return pa.table({name: pa.array(out[name], type=schema.field(name).type)
                     if isinstance(out[name], list) else out[name].cast(schema.field(name).type)
                     for name in schema.names}, schema=schema)


def first_quarantined(table: "DataFrame | pa.Table") -> dict:
    """The first row of a quarantine (`--strict` names it)."""
    if isinstance(table, pa.Table):
        return table.slice(0, 1).to_pylist()[0]
    return table.limit(1).collect()[0].asDict()
