"""An incremental run decoded in this process, its shards resumed on Spark: one task per core loads the new records
of its offsets partitions onto the shards the previous run saved, tabulates them and saves them for the next run.

The engine is the one every path calls (`coordinator.shard.replay_shards` with `resume`). A run decoded here knows
every run-wide fact a shard's tables need before any shard loads: the expiry clock and the load time (the newest
timestamp of the checkpoint and of the decoded records), the partition count, and the topic names (the decoded
records' and the saved shards' namers, read without loading the shards). So one job does it all, and the driver
gathers only the tables, sized by the state, and the names of the files the tasks saved. Only a run whose replay
holds at least `rebuild.resume_tasks_min_rows` rows (off by default) comes here: each Python task has a fixed cost
of its own, and a fresh process's workers start cold.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterator

import pyarrow as pa
import pyarrow.compute as pc

from pipelines.coordinator.decoded import PART, naming_rows
from pipelines.coordinator.expiry import ExpiryOptions
from pipelines.coordinator.options import ReplayOptions
from pipelines.coordinator.shard import replay_shards
from pipelines.coordinator.tables import contract_table
from pipelines.coordinator.tables import topic_names as names_of
from pipelines.frames.envelope import FUSED_DDL, HistoryRows, Markers, Payload, SavedFile, StateTable, decode, encode
from pipelines.frames.segment_shards import balanced, saved_state
from pipelines.frames.shards import shards_from_payloads, table_chunks
from pipelines.heap import gc_paused
from pipelines.incremental.saved import SavedShards
from pipelines.io.blobs import from_blob, opened, to_blob
from pipelines.io.checkpoint import SavedState, StateStage

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

ROW_BYTES = 200  # a saved state entry's bytes, about: weighs a partition's new records against its saved shard


@dataclass
class ResumedShards:
    tables: dict[str, pa.Table]  # SHARD_TABLES, contract columns, the history (`offset_commits`) too
    markers: pa.Table  # the end-transaction markers read (`shard.transaction_markers`), the resumed shards' too
    saved: SavedState | None  # the shards the tasks saved (None: a run that keeps none)
    release: Callable[[], None]


def topic_names(rows: pa.Table, previous: SavedShards) -> dict[str, str]:
    """The run's topic id -> name map: the decoded records' namers and every saved shard's."""
    named = naming_rows(rows)
    tables = [named, *(t.cast(named.schema) for t in previous.naming())]
    return names_of(pa.concat_tables(tables).to_pylist())


def _slices(rows: pa.Table, previous: SavedShards, tasks: int) -> list[tuple[tuple[int, ...], bytes]]:
    """The offsets partitions (every saved one, and any the new records open) in `tasks` slices of similar work,
    the heaviest first, each with its partitions' new records (a blob: lz4 makes the job's closure a third of the
    rows' size, which Spark pickles and broadcasts)."""
    new = pc.value_counts(rows.column(PART)).to_pylist() if rows.num_rows else []
    weight = {p: previous.size_of(p) for p in previous.partitions}
    for c in new:
        weight[c["values"]] = weight.get(c["values"], 0) + c["counts"] * ROW_BYTES
    return [(tuple(sorted(ps)), to_blob(rows.filter(pc.is_in(rows.column(PART),
                                                              pa.array(ps, rows.schema.field(PART).type)))))
            for ps in balanced(weight, tasks)]


def _resume_task(slices: list[tuple[tuple[int, ...], bytes]], options: ReplayOptions, expiry: ExpiryOptions | None,
                 names: dict[str, str], previous: SavedShards, state_stage: StateStage | None = None):
    """The executor function: a slice's number in, its tables, markers and saved files out as envelope rows."""
    def task(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for i in batch.column(0).to_pylist():
                yield encode(run(i, *slices[i]))

    def run(i: int, partitions: tuple[int, ...], blob: bytes) -> list[Payload]:
        out: list[Payload] = []
        with gc_paused():  # the resumed states are many small objects: see `heap.gc_paused`
            resume = {p: s for p in partitions if (s := previous.of_partition(p)) is not None}
            result = replay_shards(from_blob(blob), options, expiry, names=names, keep=state_stage is not None,
                                   resume=resume)
            del resume
            for p, data, entries in ((p, s.to_bytes(), s.entries) for p, s in (result.saved or {}).items()):
                out.append(SavedFile(shard=p, file=state_stage.write(data, p), entries=entries, size=len(data)))
            tables = [*result.tables.items(), ("", result.markers)]
            del result  # the states, freed while paused (`heap.gc_paused`)
        for name, table in tables:
            kind = HistoryRows if name == "offset_commits" else Markers if not name else None
            out.extend(kind(shard=i, rows=blob) if kind is not None else StateTable(shard=i, table=name, rows=blob)
                       for blob in table_chunks(table))
        return out
    return task


def resume_on_spark(spark: SparkSession, rows: pa.Table, previous: SavedShards, options: ReplayOptions,
                    expiry: ExpiryOptions | None, tasks: int, state_stage: StateStage | None = None) -> ResumedShards:
    """`rows` (the new records, decoded here: `decoded.conform_loaded`) loaded onto `previous` by `tasks` tasks (one
    per core), every saved partition resumed whether it has new records or not. `state_stage`: where the tasks save
    the shards the next `--incremental` run resumes (None: none is kept)."""
    names = topic_names(rows, previous)
    slices = _slices(rows, previous, tasks)
    task = _resume_task(slices, options, expiry, names, previous, state_stage)
    envelope = spark.range(0, len(slices), 1, numPartitions=len(slices)).mapInArrow(task, FUSED_DDL).toArrow()
    payloads = list(decode(envelope))
    history = opened(p.rows for p in payloads if isinstance(p, HistoryRows))
    saved = None if state_stage is None else saved_state(state_stage,
                                                         [p for p in payloads if isinstance(p, SavedFile)])
    shards = shards_from_payloads(payloads, history if history is not None else contract_table([], "offset_commits"),
                                  keep=False, history_check=None,
                                  release=saved.discard if saved is not None else lambda: None)
    return ResumedShards(shards.tables, shards.markers, saved, shards.release)
