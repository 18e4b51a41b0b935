"""The decoded log -> the snapshot's tables on Spark: each `__consumer_offsets` partition is loaded by one task.

The log's blobs (`frames.decoded_log`) are grouped by offsets partition (`groupBy(...).applyInArrow`: one
coordinator shard per group, its blobs handed to the Python worker) and `coordinator.shard.replay_shards` loads,
expires and tabulates the shard's rows there. The task returns every table of the shard as Arrow IPC blobs in one envelope row per
(table, chunk). The state tables (sized by the coordinator's state) are collected to the driver as Arrow in one
job with the shards saved for `--incremental`, the transaction markers and the history's suspects
(`validation.suspects`); the log-sized history (`offset_commits`) stays on the cluster as the kept envelope's
blobs (`io.blobs`), opened by the tasks that write it. Spark schedules the shards (adaptive execution packs small ones
into one task), retries a failed one and spreads them over a cluster; the rules run once, in the engine. A
partition is never split: a skewed partition is one long task.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterator

import pyarrow as pa
import pyarrow.compute as pc

from pipelines.coordinator.expiry import ExpiryOptions
from pipelines.coordinator.options import ReplayOptions
from pipelines.coordinator.shard import MARKER_COLUMNS, PART, SHARD_TABLES, replay_shards, without_unread
from pipelines.coordinator.tables import contract_table, topic_names
from pipelines.frames.decoded_log import from_blobs
from pipelines.frames.progress import TaskCounters, reporting
from pipelines.io.blobs import BlobRows, from_blob, opened, to_blob
from pipelines.io.checkpoint import SavedState
from pipelines.io.delta import spark_schema
from pipelines.validation.suspects import SuspectFilter, Suspects
from schemas.decoded import DECODED_RECORD_SCHEMA
from schemas.tables import TABLES

SAVED = "_saved"  # the envelope's name for the shard the next --incremental run resumes (`coordinator.saved`)
MARKERS = "_markers"  # the end-transaction markers the shard read (validation checks pending offsets against them)
SUSPECTS = "_suspects"  # the history's rows its suite might reject, with the counts of all of them
PROGRESS = "_progress"  # one row per shard: its records and input bytes, counted for the progress lines, dropped
ENVELOPE_DDL = "table string, shard int, payload binary"
CHUNK_ROWS = 65_536  # rows per IPC blob: keeps every envelope value far below Spark's 2 GB per-value limit


def _blobs(table: pa.Table) -> Iterator[bytes]:
    for start in range(0, max(table.num_rows, 1), CHUNK_ROWS):
        yield to_blob(table.slice(start, CHUNK_ROWS))


def _shard_task(options: ReplayOptions, expiry: ExpiryOptions | None, names: dict[str, str], keep: bool,
                input_bytes: dict[int, int], history_check=None):
    """The executor function: one offsets partition's blobs in, its envelope rows out."""
    def run(blobs: pa.Table) -> pa.Table:
        shard = blobs.column(PART)[0].as_py() if blobs.num_rows else -1
        rows = from_blobs(blobs.column("payload").to_pylist())
        progress = f"{rows.num_rows},{input_bytes.get(shard, 0)}".encode()
        del blobs
        rows = without_unread(rows)
        result = replay_shards(rows, options, expiry, names, keep)
        tables = dict(result.tables)
        tables[MARKERS] = result.markers
        names_out, shards, payloads = [PROGRESS], [shard], [progress]
        for p, saved in (result.saved or {}).items():
            names_out.append(SAVED)
            shards.append(p)
            payloads.append(saved.to_bytes())
        if history_check is not None:  # always sent: it carries the counts of the shard's history
            names_out.append(SUSPECTS)
            shards.append(shard)
            payloads.append(to_blob(history_check.split(tables["offset_commits"])))
        for t, table in tables.items():
            if table.num_rows == 0:
                continue
            for blob in _blobs(table):
                names_out.append(t)
                shards.append(shard)
                payloads.append(blob)
        return pa.table({"table": pa.array(names_out, pa.string()), "shard": pa.array(shards, pa.int32()),
                         "payload": pa.array(payloads, pa.binary())})
    return run


def _counted(counters):
    """A pass over the envelope as the shards emit it: each shard's progress row counted, then dropped (an
    accumulator cannot be updated from inside the grouped task itself on Spark 4.1: its worker crashes)."""
    def count(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            is_progress = pc.equal(batch.column("table"), PROGRESS)
            if counters is not None:
                for blob in batch.filter(is_progress).column("payload").to_pylist():
                    records, nbytes = map(int, blob.decode().split(","))
                    counters.add(records, nbytes, shards=1)
            yield batch.filter(pc.invert(is_progress))
    return count


LOG_SIZED = ("offset_commits",)


@dataclass
class SparkShards:
    """What the shards give: `tables` holds every `SHARD_TABLES` table, the state tables as Arrow (collected) and
    `offset_commits` as the blobs of the kept envelope (`io.blobs`); `saved` the shards the next run resumes
    (offsets partition -> `coordinator.saved.SavedShard` bytes, collected with the state tables: they are sized by
    the state too; or the `io.checkpoint.SavedState` the tasks that loaded the shards wrote them to; None unless
    asked for); `markers` the
    end-transaction markers the shards read; `suspects` the history as its suite sees it (None without a
    `history_check`); `release` drops the kept envelope once the history is written; `counted` the rows of a table
    on Spark counted off the envelope (the group history), which then needs no pass of its own to be counted."""

    tables: dict
    saved: dict[int, bytes] | SavedState | None
    release: Callable[[], None]
    markers: pa.Table
    suspects: Suspects | None = None
    counted: dict = field(default_factory=dict)  # rows of a table on Spark, counted where they were made


def replay_on_spark(spark, log, options: ReplayOptions, expiry: ExpiryOptions | None,
                    names: dict[str, str], keep: bool, emit=None, input_bytes: dict[int, int] | None = None,
                    history_check: SuspectFilter | None = None) -> SparkShards:
    """The engine over `log` (a `frames.decoded_log.DecodedLog`: the rows of every partition), one task per
    offsets partition. `emit` receives progress lines (shards done, records, and MB of `input_bytes`: the input
    bytes of each offsets partition, where known). `history_check`: the history's suite as a filter each shard
    applies to its own history (`validation.suspects`), so the history is validated without a pass over it."""
    # imported here, not at module level: pyspark ~0.7 s of import (python -X importtime)
    from pyspark import StorageLevel
    from pyspark.sql import functions as F


    counters = TaskCounters(spark) if emit is not None else None
    shards = log.partitions() if emit is not None else None
    task = _shard_task(options, expiry, names, keep, input_bytes or {}, history_check)
    envelope = (log.blob_frame().groupBy(PART).applyInArrow(task, ENVELOPE_DDL)
                .mapInArrow(_counted(counters), ENVELOPE_DDL).persist(StorageLevel.MEMORY_AND_DISK))
    with reporting(spark, emit, "replay", counters, shards=shards):  # the job that runs the shards
        state = envelope.where(~F.col("table").isin(*LOG_SIZED)).select("table", "shard", "payload").toArrow()
    history = BlobRows(envelope.where(F.col("table") == F.lit("offset_commits")).select("payload"),
                       spark_schema(TABLES["offset_commits"]))
    return shards_from_envelope(state, history, keep, history_check, envelope.unpersist)


def shards_from_envelope(state: pa.Table, history, keep: bool, history_check: SuspectFilter | None,
                         release: Callable[[], None]) -> SparkShards:
    """`SparkShards` from the collected (table, shard, payload) rows of the shards' state-sized tables, saved shards,
    markers and suspects, and `history`: the shards' history as the write takes it (`io.blobs.BlobRows`, or
    `io.warehouse.StagedHistory`: its files written already), with a `frame()`."""
    blobs: dict[str, list[bytes]] = {}
    for t, blob in zip(state.column("table").to_pylist(), state.column("payload").to_pylist()):
        blobs.setdefault(t, []).append(blob)
    tables: dict = {}
    for t in SHARD_TABLES:
        if t in LOG_SIZED:
            tables[t] = history
        else:
            got = opened(blobs.get(t, ()))
            tables[t] = got if got is not None else contract_table([], t)
    saved = None
    if keep:
        is_saved = pc.equal(state.column("table"), SAVED)
        got = state.filter(is_saved)
        saved = dict(zip(got.column("shard").to_pylist(), got.column("payload").to_pylist()))
    suspects = None
    if history_check is not None:
        schema = TABLES["offset_commits"]
        suspects = Suspects.gather("offset_commits", (from_blob(b) for b in blobs.get(SUSPECTS, ())),
                                   pa.schema([schema.field(c) for c in history_check.columns]),
                                   frame=tables["offset_commits"].frame())
    markers = opened(blobs.get(MARKERS, ()))
    if markers is None:
        markers = pa.schema([DECODED_RECORD_SCHEMA.field(c) for c in MARKER_COLUMNS]).empty_table()
    return SparkShards(tables, saved, release, markers, suspects)


def topic_names_of(log) -> dict[str, str]:
    """The run's topic id -> name map: every partition's ConsumerGroupPartitionMetadata (type 4) values at the cut
    (`frames.decoded_log.DecodedLog.naming_rows`: a few rows, kept by the decode tasks)."""
    return topic_names(log.naming_rows().to_pylist())
