"""Segment input -> the snapshot's tables on Spark, Kafka's shape: one task per `__consumer_offsets` partition
reads that partition's segments in order, decodes them and loads the shard in the same Python worker, one window of
segment bytes at a time (`decoded_windows`, `coordinator.streamed`): the task holds the shard's state and one window.

The decoded rows never leave the worker that decoded them. What a task returns is what the rest of the run reads:
the shard's history (`offset_commits`, log-sized: written by the task, or kept by Spark as blobs until the write
opens them), its group history (log-sized too: its rows made as the task loads, kept by Spark as blobs, and their
KIP-848 members' topic ids named with the run's topic names by the tasks of the write, `group_history_on_spark`),
its loaded state
(`coordinator.shard.LoadedShards.states`, pickled, state-sized), the end-transaction markers, the tally of what it
decoded and the rows that name topics (`frames.tally`, `coordinator.shard.naming_rows`) and its quarantined rows
(the decoded log the run keeps: `frames.decoded_log`). The
shard as the next `--incremental` run resumes it (`coordinator.saved`) it writes into the run's state
(`io.checkpoint.StateStage`). An incremental run's task loads its new records onto the shard the previous run saved
(`incremental.saved.SavedShards`).

Two facts of the whole run are needed before a shard's tables are final: the expiry clock (by default the newest
record timestamp of every partition) and the topic names (read off every partition). So the state tables are built
by a second, state-sized job over the kept states (`coordinator.shard.tabulate_shards`), which also picks the
history's suspects for validation (`validation.suspects`: its bounds depend on the expiry clock). A partition of
more than `decode.split_bytes` is decoded in ranges, a task each, and loaded by a second job from what each range
keeps (`frames.ranges`, `_split_load_task`): a full run's split partition in buckets of its groups, a task each on
every core. A bucket's shard is a shard like any other from there on: the second job tabulates it, and the next
`--incremental` run resumes the partition from its buckets' saved shards as one (`coordinator.saved.SavedShard.union`).
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import pickle
import time
from dataclasses import dataclass
from typing import Iterator

import pyarrow as pa
import pyarrow.compute as pc

from pipelines.coordinator.options import ReplayOptions
from pipelines.coordinator.shard import PART, tabulate_shards, without_unread
from pipelines.frames.shards import (CHUNK_ROWS, ENVELOPE_DDL, MARKERS, SUSPECTS, SparkShards,
                                     shards_from_envelope)
from pipelines.incremental.saved import SavedShards
from pipelines.io.blobs import BlobRows, from_blob, opened, to_blob
from schemas.decoded import DECODED_RECORD_SCHEMA, KIND_ERROR

LOG = "_log"  # the shard's quarantined rows, with the tally and the naming rows of everything it decoded
STATES = "_states"  # the shard's loaded state, pickled
WRITTEN = "_written"  # a file of the shard's history its task wrote: (delta.WrittenFile fields, aside) as JSON
SAVED_FILE = "_saved_file"  # the file of the shard the next --incremental run resumes a task wrote: {file, entries, bytes}
TASKS_PER_CORE = 2
#: How much of a partition's segments a task decodes and loads at a time (`decode.load_buffer_bytes`), as Kafka's
#: `offsets.load.buffer.size`.
LOAD_BUFFER_BYTES = 5 * 1024 * 1024
#: the `group_history` rows of the group events a shard's task took as it loaded
#: (`coordinator.streamed.StreamedShards.take_group_events`; `coordinator.tables.group_history_table`), its KIP-848
#: members' topic ids named once the run's topic names are known (`group_history_on_spark`)
GROUP_EVENTS = "_group_events"
EVENTS_PER_BLOB = 2_000
# A full run of at most this many group records makes its group history in the driver (`group_history_in_hand`),
# which then holds it whole: about 1.5 KB a row, most of it the records' JSON.
GROUP_EVENTS_IN_HAND = 100_000
KEPT = "_kept"  # a range of a split partition: the rows its partition's load reads of it (`frames.ranges`)
# `seq`: a range's rows in its partition's log order (the range's index); `bucket`:
# the bucket of the partition's groups the rows are of (`coordinator.streamed.by_group`), loaded by a task of its own.
# A GROUP_EVENTS row's `seq`: how many rows its blob holds
FUSED_DDL = "table string, shard int, payload binary, tally binary, named binary, seq int, bucket int"


class ShardMemoryError(RuntimeError):
    """A shard's task ran out of the memory its Python worker may use (`spark.executor.pyspark.memory`, which
    PySpark sets as the worker's address-space limit): one line naming the offsets partition, for the user, instead
    of a worker killed without a word."""


@contextlib.contextmanager
def memory_of(shard: int, what: str):
    """A `MemoryError` (Arrow's too) while a task works on offsets partition `shard` as a `ShardMemoryError`."""
    try:
        yield
    except MemoryError:
        raise ShardMemoryError(f"offsets partition {shard}: {what} needs more memory than its Python worker may use "
                               f"({_worker_limit()}): raise spark.executor.pyspark.memory (the README's 'Memory' "
                               "gives what a task needs), or lower decode.split_bytes and decode.load_buffer_bytes"
                               ) from None


def _worker_limit() -> str:
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    return "no limit set" if soft == resource.RLIM_INFINITY else f"{soft // (1024 * 1024)} MiB"


def balanced(weights: dict[int, int], tasks: int) -> list[list[int]]:
    """The keys of `weights` (offsets partitions) in at most `tasks` slices of similar weight, the heaviest placed
    first, each on the lightest slice so far."""
    slices: list[list[int]] = [[] for _ in range(max(1, min(len(weights), tasks)))]
    loads = [0] * len(slices)
    for p in sorted(weights, key=lambda p: (-weights[p], p)):
        i = loads.index(min(loads))
        slices[i].append(p)
        loads[i] += weights[p] + 1
    return slices


def saved_state(state_stage, payloads: list[bytes]):
    """`io.checkpoint.SavedState` of the files the tasks saved, from their `SAVED_FILE` envelope payloads."""
    from pipelines.io.checkpoint import SavedState

    files = [json.loads(b) for b in payloads]
    return SavedState(state_stage, [f["file"] for f in files], sum(f["entries"] for f in files),
                      {f["file"]: f["bytes"] for f in files})


def _row(table: str, shard: int, payload: bytes | None, tally: bytes | None = None, named: bytes | None = None,
         seq: int | None = None, bucket: int | None = None):
    return table, shard, payload, tally, named, seq, bucket


def decoded_windows(batches: Iterator[pa.RecordBatch], window_bytes: int) -> Iterator[pa.Table]:
    """Decoded rows of one offsets partition (`batches`: in log order, each of one file, as the segment decoder
    gives them) in windows of whole log batches: a window closes at the first log batch that starts
    `window_bytes` or more of segment bytes after the window's first (a file's bytes count on into the next
    file's). Memory is one window (and one decoder batch, `frames.decode.ARROW_BATCH_ROWS` rows), whatever the
    log's length; `window_bytes=1`: one log batch per window."""
    import numpy as np

    held: list[pa.RecordBatch] = []
    source, start, carried, last = None, 0, 0, 0
    for batch in batches:
        n = batch.num_rows
        if n == 0:
            continue
        # rows without a position (read problems) stay with the batch before them
        pos = np.maximum.accumulate(pc.fill_null(batch.column("batch_position"), -1).to_numpy(zero_copy_only=False)
                                    .astype(np.int64))
        src = batch.column("source")[0].as_py() or source
        if src != source:
            if source is not None:
                carried += max(0, last - start)
            source, start = src, max(0, int(pos[0]))
        i = 0
        while True:
            j = max(int(np.searchsorted(pos, start + window_bytes - carried, side="left")), i if held else i + 1)
            if j >= n:
                break
            if j > i:
                held.append(batch.slice(i, j - i))
            yield pa.Table.from_batches(held)
            held, start, carried, i = [], int(pos[j]), 0, j
        held.append(batch.slice(i))
        last = int(pos[-1])
    if held:
        yield pa.Table.from_batches(held)


def _decode_and_load_task(slices: list[list[tuple]], policy, options: ReplayOptions, cut: tuple,
                          split_by=None, stage=None, counters=None, cpu=None, state_stage=None,
                          previous: SavedShards | None = None, window_bytes: int = LOAD_BUFFER_BYTES,
                          buckets: int = 1):
    """The executor function: a slice's number in (`slices[i]`: each of its offsets partitions with its work
    items, and None, or a range of a split partition (`frames.ranges.LogRange`) with that range's items), the
    envelope rows of its shards out. Each shard is read, decoded and loaded window by window
    (`decoded_windows` of `window_bytes`, `coordinator.streamed`): its history is written (or packed) and its
    quarantined rows packed as each window is loaded, so a task holds the shard's state and one window.
    `previous`: the shards the previous run saved, the decoded rows loaded onto them (the tally, the quarantine
    and the progress counts are of the decoded rows). `split_by`: the history's suspect filter before the run's
    clock is known (`validation.suspects`). `stage` (`io.warehouse.HistoryStage`): where to write the history's
    files (else it is returned as blobs); `state_stage` (`io.checkpoint.StateStage`), where to write the shard the
    next `--incremental` run resumes (None: none is kept). `counters` and `cpu` (accumulators) receive each shard's
    records and input bytes, and its CPU-seconds decoding and loading, as it ends. `buckets`: a range hands on its
    rows in that many buckets of its partition's groups (`coordinator.streamed.by_group`), each loaded by a task."""
    def task(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for i in batch.column(0).to_pylist():
                for shard, items, piece in slices[i]:
                    with memory_of(shard, "decoding and loading" if piece is None else f"range {piece.index}"):
                        for rows in run(shard, items, piece):
                            yield _envelope_batch(rows)

    def run(shard: int, items: pa.Table, piece) -> Iterator[list]:
        from pipelines.coordinator.streamed import RANGE, StreamedShards
        from pipelines.frames.decode import _decode_items, end_position, read_before
        from pipelines.frames.ranges import NO_FLOOR
        from pipelines.frames.tally import RunningTally

        items = items.sort_by([("base_offset", "ascending"), ("path", "ascending"), ("start_position", "ascending")])
        if piece is not None:  # a range: its history built, its kept rows handed on to its partition's load
            floor = {} if piece.floor == NO_FLOOR else {shard: piece.floor}
            loader = StreamedShards(options, floor=floor, mode=RANGE)
        else:
            resume = previous.of_partition(shard) if previous is not None and shard >= 0 else None
            loader = StreamedShards(options, None if resume is None else {shard: resume})
            del resume
        writer = stage.writer(max(shard, 0)) if stage is not None else None
        # missing offsets are found from where the reading starts: the first segment's base offset, or where the
        # ranges before this one ended
        if piece is not None and piece.index:  # a later range: from the ranges before's last record
            after = None if piece.read_floor is None else {shard: piece.read_floor}
        else:
            after = read_before(items.to_pylist())
        tally, records, decode_cpu, load_cpu = RunningTally(*cut, after=after), 0, 0.0, 0.0
        try:
            started = time.process_time()
            for window in decoded_windows(_decode_items(iter(items.to_batches(max_chunksize=1)), policy),
                                          window_bytes):
                decoded = time.process_time()
                decode_cpu += decoded - started
                records += window.num_rows
                tally.add(window)
                is_error = pc.fill_null(pc.equal(window.column("record_kind"), KIND_ERROR), False)
                out = []
                if pc.any(is_error).as_py():  # the quarantine, packed as it comes
                    out.append(_row(LOG, shard, to_blob(window.filter(is_error))))
                settled = loader.load(without_unread(window))
                del window
                out.extend(_history(shard, settled, split_by, writer))
                out.extend(_group_events(loader.take_group_events(), options.snapshot_id))
                del settled
                started = time.process_time()
                load_cpu += started - decoded
                if out:
                    yield out
            done = loader.finish()
            out = _closed(shard, done.pending, split_by, writer)
            out.extend(_group_events(loader.take_group_events(), options.snapshot_id))
        except BaseException:
            if writer is not None:
                writer.abort()
            raise
        names = done.naming
        out.append(_row(LOG, shard, to_blob(DECODED_RECORD_SCHEMA.empty_table()), to_blob(tally.result()),
                        to_blob(names) if names.num_rows else None))
        if piece is not None:
            from pipelines.coordinator.streamed import by_group

            kept = loader.passed_on()
            for b, rows in enumerate(by_group(kept if kept is not None else _empty_kept(), buckets)):
                out.append(_row(KEPT, shard, to_blob(rows), seq=piece.index, bucket=b))
        else:
            out.extend(_shard_rows(shard, done, state_stage))
        load_cpu += time.process_time() - started
        in_bytes = sum(max(0, (e if e is not None else s or 0) - (p or 0)) for s, p, e in zip(
            items.column("size").to_pylist(), items.column("start_position").to_pylist(),
            [end_position({"end_position": e}) for e in items.column("end_position").to_pylist()]))
        if counters is not None:
            counters.add(records, in_bytes, shards=1 if piece is None or piece.index == 0 else 0)
        if cpu is not None:
            cpu[0].add(decode_cpu)
            cpu[1].add(load_cpu)
        yield out
    return task


def _shard_rows(shard: int, done, state_stage) -> list[tuple]:
    """The envelope rows of a loaded shard (`coordinator.streamed.FinishedShards`) beside its history: its markers,
    its state, and the shard the next `--incremental` run resumes, saved in `state_stage` (None: none)."""
    from pipelines.coordinator.saved import saved_shards

    out = [_row(MARKERS, shard, to_blob(done.markers))]
    # the transactions' outcomes are in the history already: the tables need the rest of each state
    states = [] if done.state is None else [done.state]
    out.append(_row(STATES, shard, pickle.dumps(states, protocol=pickle.HIGHEST_PROTOCOL)))
    if state_stage is not None:
        for p, saved in saved_shards(states, done.pending, done.naming, done.markers).items():
            data = saved.to_bytes()
            name = state_stage.write(data, p)
            out.append(_row(SAVED_FILE, shard, json.dumps({"file": name, "entries": saved.entries,
                                                      "bytes": len(data)}).encode()))
    return out


def _empty_kept() -> pa.Table:
    from pipelines.coordinator.shard import conform_decoded, loadable

    return loadable(conform_decoded(DECODED_RECORD_SCHEMA.empty_table()))


def _split_load_task(options: ReplayOptions, split_by=None, stage=None, state_stage=None,
                     previous: SavedShards | None = None, cpu=None, buckets: int = 1):
    """The executor function of a split partition's load (`frames.ranges`): its ranges' envelope rows in (KEPT, any
    order), its shard's envelope rows out, as a whole partition's task gives them but for the tally, the quarantine
    and the plain values' history (its ranges'). The ranges' kept rows are loaded in log order, as the windows of
    one streamed shard, onto the shard the previous run saved (`coordinator.streamed.load_split`), and the history
    of the offset commits they hold but the plain values is decided there. Its rows go out window by window: the
    task holds the ranges' kept rows, the shard's state and one window's history and group events. A bucket of the partition's
    groups (`buckets` > 1) is loaded alike, and gives its groups' shard: its tables are theirs, its saved shard
    theirs (bucket 0's alone carries the partition's markers, which every bucket's load lists)."""
    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        # the ranges' blobs as they come, each batch dropped once its blobs are taken: they are the task's largest
        # input, held once and let go range by range as the load opens them
        entries: list = []
        shard = bucket = None
        for batch in batches:
            if batch.num_rows:
                shard, bucket = batch.column("shard")[0].as_py(), batch.column("bucket")[0].as_py()
                entries.extend(zip(batch.column("seq").to_pylist(), batch.column("table").to_pylist(),
                                   batch.column("payload").to_pylist()))
            del batch
        if shard is None:
            return
        with memory_of(shard, "loading its ranges"):
            yield from load(shard, bucket, entries)

    def load(shard: int, bucket: int | None, entries: list) -> Iterator[pa.RecordBatch]:
        from pipelines.coordinator.streamed import load_split

        started = time.process_time()
        entries.sort(key=lambda e: e[0])
        resume = previous.of_partition(shard) if previous is not None else None
        writer = stage.writer(shard) if stage is not None else None

        def kept() -> Iterator[pa.Table]:
            for i, (_, table, payload) in enumerate(entries):
                if table == KEPT:
                    entries[i] = None
                    yield from_blob(payload)
                    del payload

        try:
            for settled in load_split(options, kept(), None if resume is None else {shard: resume}):
                if not isinstance(settled, tuple):
                    done = settled
                    continue
                out = [*_history(shard, settled[0], split_by, writer),
                       *_group_events(settled[1], options.snapshot_id)]
                if out:
                    yield _envelope_batch(out)
                del settled, out
            del resume
            out = _closed(shard, done.pending, split_by, writer)
        except BaseException:
            if writer is not None:
                writer.abort()
            raise
        if bucket:  # every bucket's load lists every marker: bucket 0's rows carry them, once
            done.markers = done.markers.slice(0, 0)
        out.extend(_shard_rows(shard, done, state_stage))
        if cpu is not None:
            cpu[1].add(time.process_time() - started)
        yield _envelope_batch(out)
    return run


def _group_events(taken: list[tuple[int, list]], snapshot_id: str) -> list[tuple]:
    """Envelope rows (`GROUP_EVENTS`) of the `group_history` rows of the group events a load took,
    `EVENTS_PER_BLOB` at most in each (`seq`: how many): the tasks that name them take the blobs in turn
    (`group_history_on_spark`)."""
    from pipelines.coordinator.tables import group_history_table

    out = []
    for part, events in taken:
        for i in range(0, len(events), EVENTS_PER_BLOB):
            rows = group_history_table(events[i:i + EVENTS_PER_BLOB], snapshot_id, part)
            out.append(_row(GROUP_EVENTS, part, to_blob(rows), seq=rows.num_rows))
    return out


def _closed(shard: int, pending: pa.Table, split_by, writer) -> list[tuple]:
    """The envelope rows that end a shard's history: its still-pending rows' suspects, and the rows packed (no
    `writer`) or set aside by `writer` as it closes, with every file it wrote."""
    out = list(_history(shard, pending, split_by, None))
    if writer is None:
        return out
    out = [r for r in out if r[0] != "offset_commits"]
    for f, aside in writer.close(pending):
        out.append(_row(WRITTEN, shard, json.dumps([dataclasses.asdict(f), aside]).encode()))
    return out


def _history(shard: int, rows: pa.Table, split_by, writer) -> Iterator[tuple]:
    """Envelope rows of a shard's history `rows` as they are settled: their suspects, and the rows packed (no
    `writer`: Spark keeps them) or written by `writer` (`io.warehouse.HistoryWriter`)."""
    if not rows.num_rows:
        return
    if split_by is not None:
        yield _row(SUSPECTS, shard, to_blob(split_by.split(rows)))
    if writer is not None:
        writer.write(rows)
        return
    for start in range(0, rows.num_rows, CHUNK_ROWS):
        yield _row("offset_commits", shard, to_blob(rows.slice(start, CHUNK_ROWS)))


def _envelope_batch(rows: list[tuple]) -> pa.RecordBatch:
    columns = list(zip(*rows))
    return pa.record_batch([pa.array(columns[0], pa.string()), pa.array(columns[1], pa.int32()),
                            pa.array(columns[2], pa.binary()), pa.array(columns[3], pa.binary()),
                            pa.array(columns[4], pa.binary()), pa.array(columns[5], pa.int32()),
                            pa.array(columns[6], pa.int32())],
                           names=["table", "shard", "payload", "tally", "named", "seq", "bucket"])


@dataclass
class LoadedOnSpark:
    """What the first job gives: the kept envelope, the decoded log's view of it (tally, naming rows, quarantine),
    and the CPU-seconds its tasks spent decoding and loading; `history`: the shards' history as the write takes
    it (`io.blobs.BlobRows` of the envelope, or `io.warehouse.StagedHistory`: the files the tasks wrote)."""

    envelope: object  # DataFrame, FUSED_DDL, of persisted ones
    log: object  # frames.decoded_log.DecodedLog
    cpu_seconds: dict
    top_partition: int  # the highest offsets partition read
    split_by: object  # validation.suspects.SuspectFilter the shards split their history's suspects with
    collected: pa.Table  # (table, shard, payload) of the markers and suspects
    history: object
    saved: object = None  # io.checkpoint.SavedState: the shards the tasks saved
    persisted: tuple = ()  # the DataFrames the envelope is made of

    def release(self) -> None:
        """The kept envelope dropped, the history's and the saved shards' files deleted unless they were
        committed."""
        for frame in self.persisted or (self.envelope,):
            frame.unpersist()
        for written in (self.history, self.saved):
            discard = getattr(written, "discard", None)
            if discard is not None:
                discard()


def load_on_spark(spark, plan, options: ReplayOptions, cut: tuple, split_by=None, stage=None, counters=None,
                  emit=None, state_stage=None, previous: SavedShards | None = None,
                  window_bytes: int = LOAD_BUFFER_BYTES, split_bytes: int = 0, buckets: int = 1) -> LoadedOnSpark:
    """Every offsets partition of `plan` (segments only: `rebuild.executor.Route.SHARDS`) decoded and loaded by
    one task, the envelope kept. `split_by`: the history's suite as a filter (`validation.suspects`), with any clock: `tabulate_on_spark`
    checks the suspects against the run's own. `stage` (`io.warehouse.HistoryStage`): the tasks write the
    history's files there (else its blobs are kept in the envelope); `state_stage` (`io.checkpoint.StateStage`),
    where the shards the next `--incremental` run resumes are saved (None: a what-if run saves none). `previous`:
    an incremental run's saved shards (every partition it holds is a shard, new records or not). `counters` (`frames.progress.TaskCounters`) receive each shard's
    records and input bytes as it ends. `window_bytes`: how much of a partition's segments a task decodes and
    loads at a time (`decoded_windows`); `split_bytes`: a partition of more segment bytes is decoded in ranges of
    about that size, in tasks of their own, and loaded by a second job (`frames.ranges`; 0: never), in `buckets`
    of its groups, a task each (a full run's only: an incremental one resumes its partitions' shards whole)."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    from pipelines.frames.decode import _work_table
    from pipelines.frames.decoded_log import DecodedLog
    from pipelines.frames.progress import reporting

    work = _work_table(plan)
    by_shard: dict[int, list[int]] = {p: [] for p in (previous.partitions if previous is not None else ())}
    for i, p in enumerate(work.column(PART).to_pylist()):
        by_shard.setdefault(-1 if p is None else p, []).append(i)  # -1: discovery problems of no partition
    # the shards in slices of similar bytes, the largest shards first (no shuffle groups the items: each task reads
    # its own shards' files); a slice per task, a few per core: each task has a fixed cost of its own
    sizes = {p: sum(work.column("size")[i].as_py() or 0 for i in rows) for p, rows in by_shard.items()}
    units = _units(work, by_shard, split_bytes, spark.sparkContext.defaultParallelism)
    slices = [[units[u] for u in us] for us in balanced({u: _unit_bytes(units[u]) for u in units},
                                                        spark.sparkContext.defaultParallelism * TASKS_PER_CORE)]
    split = sorted({shard for shard, _, piece in units.values() if piece is not None})
    if previous is not None:
        buckets = 1
    cpu = spark.sparkContext.accumulator(0.0), spark.sparkContext.accumulator(0.0)
    task = _decode_and_load_task(slices, plan.policy, options, tuple(cut), split_by, stage, counters, cpu,
                                 state_stage, previous, window_bytes, buckets)
    envelope = (spark.range(0, len(slices), 1, numPartitions=len(slices)).mapInArrow(task, FUSED_DDL)
                .persist(StorageLevel.DISK_ONLY))
    persisted = [envelope]
    shards = len(sizes)
    # the job that runs the shards, collecting what is sized by the state (or by the partitions) as it ends
    with reporting(spark, emit, "decode", counters, shards=shards if counters is not None else None):
        small = _collected(envelope)
    if split:
        if emit is not None:
            emit(f"          loading {len(split)} split offsets partition(s) from their ranges' kept rows")
        slot, tasks = _slot_column(spark, split, buckets, spark.sparkContext.defaultParallelism * TASKS_PER_CORE)
        loads = (envelope.where(F.col("table") == F.lit(KEPT)).select("table", "shard", "payload", "seq", "bucket")
                 .withColumn("slot", slot).repartition(tasks, "slot")
                 .groupBy("slot", "shard", "bucket").applyInArrow(_split_load_task(options, split_by, stage,
                                                                                   state_stage, previous, cpu,
                                                                                   buckets), FUSED_DDL)
                 .persist(StorageLevel.DISK_ONLY))
        persisted.append(loads)
        small = pa.concat_tables([small, _collected(loads)])
        envelope = envelope.where(F.col("table") != F.lit(KEPT)).unionByName(loads)
    is_log = pc.equal(small.column("table"), LOG)
    log = DecodedLog(spark, blobs=envelope.where(F.col("table") == F.lit(LOG)).select(
        F.col("shard").alias(PART), "payload", "tally", "named"), cut=tuple(cut),
        collected=small.filter(is_log).select(["tally", "named"]))
    rest = small.filter(pc.invert(is_log)).select(["table", "shard", "payload"])
    saved = None
    if state_stage is not None:
        is_saved = pc.equal(rest.column("table"), SAVED_FILE)
        saved = saved_state(state_stage, rest.filter(is_saved).column("payload").to_pylist())
        rest = rest.filter(pc.invert(is_saved))
    if stage is not None:
        from pipelines.io.delta import WrittenFile
        from pipelines.io.warehouse import StagedHistory

        is_written = pc.equal(rest.column("table"), WRITTEN)
        files = [(WrittenFile(**f), aside) for f, aside in
                 (json.loads(b) for b in rest.filter(is_written).column("payload").to_pylist())]
        history = StagedHistory(stage, files, spark)
        rest = rest.filter(pc.invert(is_written))
    else:
        from pipelines.io.blobs import BlobRows
        from pipelines.io.delta import spark_schema
        from schemas.tables import TABLES

        history = BlobRows(envelope.where(F.col("table") == F.lit("offset_commits")).select("payload"),
                           spark_schema(TABLES["offset_commits"]))
    return LoadedOnSpark(envelope, log, {"decode": cpu[0].value, "load": cpu[1].value}, max(sizes, default=-1),
                         split_by, rest, history, saved, tuple(persisted))


def _slot_column(spark, split: list[int], buckets: int, tasks: int):
    """(column, n): a column that puts the `buckets` buckets of each partition of `split` in partitions of their own
    under `repartition(n, column)`, one per pair while there are at most `tasks` (or `buckets`) of them, else the
    pairs in turn: a partition's buckets load side by side. Grouping by (shard, bucket) alone hashes them into
    `spark.sql.shuffle.partitions`, and two of a partition's buckets often share one (with 8, 13 of 50 partitions'
    2 buckets did), loading one after the other. The values are ones whose hash Spark itself puts in partitions 0,
    1, ... (asked once, of a few numbers)."""
    from pyspark.sql import functions as F

    n = max(buckets, min(len(split) * buckets, tasks))
    first: dict[int, int] = {}
    tried = 0
    while len(first) < n:
        probe = spark.range(tried, tried + 64 * n).select("id", F.expr(f"pmod(hash(id), {n})").alias("p")).toArrow()
        for value, p in zip(probe.column("id").to_pylist(), probe.column("p").to_pylist()):
            first.setdefault(p, value)
        tried += 64 * n
    index = F.element_at(F.create_map(*[F.lit(x) for i, shard in enumerate(split) for x in (shard, i)]),
                         F.col("shard"))
    slot = F.pmod(index * F.lit(buckets) + F.col("bucket"), F.lit(n))
    return F.element_at(F.array(*[F.lit(first[p]).cast("long") for p in range(n)]), slot + 1), n


def _collected(envelope) -> pa.Table:
    """What a job's envelope holds that is sized by the state (or by the partitions), collected."""
    from pyspark.sql import functions as F

    return (envelope.where(F.col("table").isin(LOG, MARKERS, SUSPECTS, WRITTEN, SAVED_FILE))
            .select("table", "shard", F.when(F.col("table") != F.lit(LOG), F.col("payload")).alias("payload"),
                    "tally", "named").toArrow())


def _units(work: pa.Table, by_shard: dict[int, list[int]], split_bytes: int, cores: int = 1) -> dict:
    """What the first job's tasks take, each (offsets partition, work items, None) or, for a partition of more than
    `split_bytes` (`frames.ranges.log_ranges`, a multiple of `cores` ranges), one (partition, the range's items,
    `LogRange`) per range."""
    from pipelines.frames.decode import WORK_SCHEMA
    from pipelines.frames.ranges import log_ranges

    units = {}
    for p, rows in by_shard.items():
        items = work.take(pa.array(rows, pa.int64()))
        ranges = None
        if p >= 0 and split_bytes > 0 and items.num_rows:
            ordered = items.sort_by([("base_offset", "ascending"), ("path", "ascending")]).to_pylist()
            ranges = log_ranges(p, ordered, split_bytes, cores)
        if ranges is None:
            units[(p, -1)] = (p, items, None)
            continue
        for r in ranges:
            units[(p, r.index)] = (p, pa.Table.from_pylist(list(r.items), schema=WORK_SCHEMA), r)
    return units


def _unit_bytes(unit) -> int:
    shard, items, piece = unit
    return piece.bytes if piece is not None else sum(s or 0 for s in items.column("size").to_pylist())


def _tabulate_task(options: ReplayOptions, expiry, names: dict[str, str], top_partition: int):
    """The executor function of the second job: kept states in, their state tables out."""
    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pipelines.frames.shards import _blobs

        for batch in batches:
            shards, payloads = batch.column("shard"), batch.column("payload")
            for i in range(batch.num_rows):
                shard = shards[i].as_py()
                with memory_of(shard, "tabulating its state"):
                    tables = tabulate_shards(pickle.loads(payloads[i].as_py()), options, expiry, names,
                                             top_partition)
                    for name in list(tables):  # a table's blobs out, then the table dropped
                        table = tables.pop(name)
                        if table.num_rows:
                            yield from _envelope([(name, shard, blob) for blob in _blobs(table)])
                        del table
    return run


def _envelope(rows) -> Iterator[pa.RecordBatch]:
    if rows:
        t, s, p = zip(*rows)
        yield pa.record_batch([pa.array(t, pa.string()), pa.array(s, pa.int32()), pa.array(p, pa.binary())],
                              names=["table", "shard", "payload"])


def _suspects_task(history_check):
    """The executor function that picks an offsets partition's history suspects again: its rows in, one envelope
    row out."""
    def run(rows: pa.Table) -> pa.Table:
        shard = rows.column(PART)[0].as_py()
        return pa.table({"table": [SUSPECTS], "shard": pa.array([shard], pa.int32()),
                         "payload": [to_blob(history_check.split(rows))]})
    return run



def tabulate_on_spark(spark, loaded: LoadedOnSpark, options: ReplayOptions, expiry, names: dict[str, str],
                      history_check=None, events_in_hand: bool = False) -> SparkShards:
    """The state tables of every kept shard at the run's expiry clock and topic names (one state-sized job),
    collected with the markers and the history's suspects of the first job. A shard whose
    suspects the first job's filter may have missed under the run's own (`SuspectFilter.holds_for`: its values
    reach a bound that moved with the clock) has them picked again from its kept history. `events_in_hand`: the
    group history is made in this process (`group_history_in_hand`: a run of few group records), else on Spark."""
    from pyspark.sql import functions as F

    env = loaded.envelope
    events = None
    if events_in_hand:  # collected and made into rows while the job below runs
        from pipelines.background import in_thread

        events = in_thread("group-history", group_history_in_hand, env, names)
    states = env.where(F.col("table") == F.lit(STATES)).select("shard", "payload")
    tables = states.mapInArrow(_tabulate_task(options, expiry, names, loaded.top_partition), ENVELOPE_DDL).toArrow()
    collected = pa.concat_tables([tables, loaded.collected.cast(tables.schema)])
    if history_check is not None:
        collected = _checked_suspects(loaded.history, collected, history_check, loaded.split_by)
    else:
        collected = collected.filter(pc.not_equal(collected.column("table"), SUSPECTS))
    shards = shards_from_envelope(collected, loaded.history, False, history_check, loaded.release)
    shards.saved = loaded.saved
    if events is not None:
        shards.tables["group_history"] = events.result()
    else:
        shards.tables["group_history"] = group_history_on_spark(env, names)
        # counted off the kept envelope, so the blobs are opened once, by the write
        counted = env.where(F.col("table") == F.lit(GROUP_EVENTS)).agg(F.sum("seq")).first()[0]
        shards.counted["group_history"] = int(counted or 0)
    return shards


def group_history_in_hand(envelope, names: dict[str, str]) -> pa.Table:
    """`group_history_on_spark`'s rows in this process, from the collected `GROUP_EVENTS` blobs: for a run of few
    group records, a Spark job, its checkpoint and a write job of their own cost seconds more than the rows."""
    from pyspark.sql import functions as F

    from pipelines.coordinator.tables import contract_table, named_group_history

    blobs = envelope.where(F.col("table") == F.lit(GROUP_EVENTS)).select("payload").toArrow()
    rows = opened(blobs.column("payload").to_pylist())
    return contract_table([], "group_history") if rows is None else named_group_history(rows, names)


def group_history_on_spark(envelope, names: dict[str, str]) -> BlobRows:
    """The shards' `group_history` as the write takes it: their tasks' `GROUP_EVENTS` blobs (log-sized: they stay on
    the cluster), each opened by the task that writes it, its members' topic ids named by the run's `names`
    (`named_history`). Its rows never cross into the JVM."""
    from pyspark.sql import functions as F

    from pipelines.io.delta import spark_schema
    from schemas.tables import TABLES

    blobs = envelope.where(F.col("table") == F.lit(GROUP_EVENTS)).select("payload")
    # a hot partition's blobs all come from the one task that loaded it: spread over every core
    blobs = blobs.repartition(max(1, envelope.sparkSession.sparkContext.defaultParallelism))
    return BlobRows(blobs, spark_schema(TABLES["group_history"]), functools.partial(named_history, names=names))


def named_history(batches: Iterator[pa.RecordBatch], names: dict[str, str]) -> Iterator[pa.RecordBatch]:
    """The executor function that opens `GROUP_EVENTS` blobs (`payload`) into `group_history` rows, their KIP-848
    members' topic ids named by `names` (`coordinator.tables.named_group_history`)."""
    from pipelines.coordinator.tables import named_group_history

    for batch in batches:
        for blob in batch.column("payload").to_pylist():
            yield from named_group_history(from_blob(blob), names).to_batches()


def _checked_suspects(history, collected: pa.Table, history_check, split_by) -> pa.Table:
    """`collected` with the suspects of every shard as `history_check` picks them: the first job's where they
    hold, picked again from the shards' history (`history.frame()`) where they may not."""
    from pyspark.sql import functions as F

    is_suspects = pc.equal(collected.column("table"), SUSPECTS)
    parts = collected.filter(is_suspects)
    again = sorted({shard for shard, blob in zip(parts.column("shard").to_pylist(), parts.column("payload").to_pylist())
                    if split_by is None or not history_check.holds_for(from_blob(blob), split_by)})
    if split_by is not None and not again:
        return collected
    rows = history.frame()
    if split_by is not None:  # else nothing was split: every shard's suspects are picked
        rows = rows.where(F.col(PART).isin(again))
    # only the columns the suite reads: a task holds a whole offsets partition of them
    read = dict.fromkeys([PART, *history_check.columns, *(c for b in history_check.bounds for c in b.columns)])
    rows = rows.select(*[c for c in read if c in rows.columns])
    collected = collected.filter(pc.invert(is_suspects) if split_by is None else pc.invert(pc.and_(
        is_suspects, pc.is_in(collected.column("shard"), pa.array(again, pa.int32())))))
    picked = rows.groupBy(PART).applyInArrow(_suspects_task(history_check), ENVELOPE_DDL).toArrow()
    return pa.concat_tables([collected, picked.cast(collected.schema)])
