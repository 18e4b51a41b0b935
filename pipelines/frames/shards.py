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
from typing import TYPE_CHECKING, Callable, Iterable, Iterator

import pyarrow as pa

from pipelines.coordinator.decoded import MARKER_COLUMNS, PART
from pipelines.coordinator.expiry import ExpiryOptions
from pipelines.coordinator.options import ReplayOptions
from pipelines.coordinator.shard import SHARD_TABLES, replay_shards
from pipelines.coordinator.tables import contract_table, topic_names
from pipelines.frames.decoded_log import DecodedLog, from_blobs
from pipelines.frames.progress import TaskCounters, reporting
from pipelines.frames.envelope import (FUSED_DDL, HistoryRows, HistorySuspects, Markers, Payload, SavedShardBytes,
                                       ShardProgress, StateTable, blob_column, decode, encode, not_of_kind, taken)
from pipelines.io.blobs import BlobRows, from_blob, opened, to_blob
from pipelines.io.checkpoint import SavedState
from pipelines.io.delta import spark_schema
from pipelines.io.warehouse import StagedHistory
from pipelines.validation.suspects import SuspectFilter, Suspects
from schemas.decoded import DECODED_RECORD_SCHEMA
from schemas.tables import TABLES

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

CHUNK_ROWS = 65_536  # rows per IPC blob: keeps every envelope value far below Spark's 2 GB per-value limit


def table_chunks(table: pa.Table) -> Iterator[bytes]:
    """`table` in blobs of at most `CHUNK_ROWS` rows (one, empty, for an empty table)."""
    for start in range(0, max(table.num_rows, 1), CHUNK_ROWS):
        yield to_blob(table.slice(start, CHUNK_ROWS))


def _shard_task(options: ReplayOptions, expiry: ExpiryOptions | None, names: dict[str, str], keep: bool,
                input_bytes: dict[int, int], history_check: SuspectFilter | None = None):
    """The executor function: one offsets partition's blobs in, its envelope rows out."""
    def run(blobs: pa.Table) -> pa.Table:
        shard = blobs.column(PART)[0].as_py() if blobs.num_rows else -1
        rows = from_blobs(blobs.column("payload").to_pylist())
        out: list[Payload] = [ShardProgress(shard=shard, records=rows.num_rows,
                                            input_bytes=input_bytes.get(shard, 0))]
        del blobs
        result = replay_shards(rows, options, expiry, names, keep)
        del rows
        out.extend(SavedShardBytes(shard=p, data=saved.to_bytes()) for p, saved in (result.saved or {}).items())
        if history_check is not None:  # always sent: it carries the counts of the shard's history
            out.append(HistorySuspects(shard=shard, rows=to_blob(history_check.split(result.tables["offset_commits"]))))
        for t, table in [*result.tables.items(), ("", result.markers)]:
            if table.num_rows:
                out.extend(_table_payload(shard, t, blob) for blob in table_chunks(table))
        return pa.Table.from_batches([encode(out)])
    return run


def _table_payload(shard: int, table: str, rows: bytes) -> Payload:
    """A blob of one of a shard's tables: the history's, the markers' (`table` ""), or a state table's."""
    if table == "offset_commits":
        return HistoryRows(shard=shard, rows=rows)
    return Markers(shard=shard, rows=rows) if not table else StateTable(shard=shard, table=table, rows=rows)


def _counted(counters: TaskCounters | None):
    """A pass over the envelope as the shards emit it: each shard's progress row counted, then dropped (an
    accumulator cannot be updated from inside the grouped task itself on Spark 4.1: its worker crashes)."""
    def count(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            progress, rest = taken(batch, ShardProgress)
            if counters is not None:
                for p in progress:
                    counters.add(p.records, p.input_bytes, shards=1)
            yield rest
    return count


@dataclass
class SparkShards:
    """What the shards give: `tables` holds every `SHARD_TABLES` table, the state tables as Arrow (collected) and
    `offset_commits` as the blobs of the kept envelope (`io.blobs`) or the files its tasks wrote; `saved` the
    shards the next run resumes (offsets partition -> `coordinator.saved.SavedShard` bytes, collected with the
    state tables: they are sized by the state too; or the `io.checkpoint.SavedState` the tasks that loaded the
    shards wrote them to; None unless asked for); `markers` the end-transaction markers the shards read; `suspects`
    the history as its suite sees it (None without a `history_check`); `release` drops the kept envelope once the
    history is written; `counted` the rows of a table on Spark counted off the envelope (the group history), which
    then needs no pass of its own to be counted."""

    tables: dict[str, pa.Table | BlobRows | StagedHistory]
    saved: dict[int, bytes] | SavedState | None
    release: Callable[[], None]
    markers: pa.Table
    suspects: Suspects | None = None
    counted: dict[str, int] = field(default_factory=dict)  # rows of a table on Spark, counted where they were made


def replay_on_spark(spark: SparkSession, log: DecodedLog, options: ReplayOptions, expiry: ExpiryOptions | None,
                    names: dict[str, str], *, keep: bool, emit=None, input_bytes: dict[int, int] | None = None,
                    history_check: SuspectFilter | None = None) -> SparkShards:
    """The engine over `log` (the rows of every partition), one task per offsets partition. `emit` receives
    progress lines (shards done, records, and MB of `input_bytes`: the input bytes of each offsets partition, where
    known). `history_check`: the history's suite as a filter each shard applies to its own history
    (`validation.suspects`), so the history is validated without a pass over it."""
    from pyspark import StorageLevel  # in the driver only: 0.7-1 s to import (`frames.segment_shards`)

    counters = TaskCounters(spark) if emit is not None else None
    shards = log.partitions() if emit is not None else None
    task = _shard_task(options, expiry, names, keep, input_bytes or {}, history_check)
    envelope = (log.blob_frame().groupBy(PART).applyInArrow(task, FUSED_DDL)
                .mapInArrow(_counted(counters), FUSED_DDL).persist(StorageLevel.DISK_ONLY))  # log-sized
    with reporting(spark, emit, "replay", counters, shards=shards):  # the job that runs the shards
        state = decode(not_of_kind(envelope, HistoryRows).toArrow())
    history = BlobRows(blob_column(envelope, HistoryRows), spark_schema(TABLES["offset_commits"]))
    return shards_from_payloads(state, history, keep=keep, history_check=history_check, release=envelope.unpersist)


def shards_from_payloads(payloads: Iterable[Payload], history: BlobRows | StagedHistory | pa.Table, *, keep: bool,
                         history_check: SuspectFilter | None, release: Callable[[], None]) -> SparkShards:
    """`SparkShards` from the collected payloads of the shards' state-sized tables, saved shards (`keep`), markers
    and suspects, and `history`: the shards' history as the write takes it (`io.blobs.BlobRows`, or
    `io.warehouse.StagedHistory`: its files written already; a frame of it is read for the suspects)."""
    blobs: dict[str, list[bytes]] = {}
    markers, suspects, saved = [], [], {}
    for p in payloads:
        if isinstance(p, StateTable):
            blobs.setdefault(p.table, []).append(p.rows)
        elif isinstance(p, Markers):
            markers.append(p.rows)
        elif isinstance(p, HistorySuspects):
            suspects.append(p.rows)
        elif isinstance(p, SavedShardBytes):
            saved[p.shard] = p.data
    tables: dict[str, pa.Table | BlobRows | StagedHistory] = {}
    for t in SHARD_TABLES:
        got = history if t == "offset_commits" else opened(blobs.get(t, ()))
        tables[t] = got if got is not None else contract_table([], t)
    seen = None
    if history_check is not None:
        schema = TABLES["offset_commits"]
        seen = Suspects.gather("offset_commits", (from_blob(b) for b in suspects),
                               pa.schema([schema.field(c) for c in history_check.columns]),
                               frame=tables["offset_commits"].frame())
    got = opened(markers)
    if got is None:
        got = pa.schema([DECODED_RECORD_SCHEMA.field(c) for c in MARKER_COLUMNS]).empty_table()
    return SparkShards(tables, saved if keep else None, release, got, seen)


def topic_names_of(log: DecodedLog) -> dict[str, str]:
    """The run's topic id -> name map: every partition's ConsumerGroupPartitionMetadata (type 4) values at the cut
    (`frames.decoded_log.DecodedLog.naming_rows`: a few rows, kept by the decode tasks)."""
    return topic_names(log.naming_rows().to_pylist())
