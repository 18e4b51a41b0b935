"""Segment input -> the snapshot's tables on Spark, Kafka's shape: one task per `__consumer_offsets` partition
reads that partition's segments in order, decodes them and loads the shard in the same Python worker, one window of
segment bytes at a time (`decoded_windows`, `coordinator.streamed`): the task holds the shard's state and one window.

The decoded rows never leave the worker that decoded them. What a task returns is what the rest of the run reads:
the shard's history (`offset_commits`, log-sized: written by the task, or kept by Spark as blobs until the write
opens them), its group history (log-sized too: its rows made as the task loads, written to the run's scratch, and
their KIP-848 members' topic ids named with the run's topic names by the tasks of the write,
`group_history_on_spark`), its loaded state
(`coordinator.shard.LoadedShards.states`, pickled, state-sized), the end-transaction markers, the tally of what it
decoded and the rows that name topics (`frames.tally`, `coordinator.shard.naming_rows`) and its quarantined rows
(the decoded log the run keeps: `frames.decoded_log`), each a payload of its own kind (`frames.envelope`). The
shard as the next `--incremental` run resumes it (`coordinator.saved`) it writes into the run's state
(`io.checkpoint.StateStage`). An incremental run's task loads its new records onto the shard the previous run saved
(`incremental.saved.SavedShards`).

Two facts of the whole run are needed before a shard's tables are final: the expiry clock (by default the newest
record timestamp of every partition) and the topic names (read off every partition). So the state tables are built
by a second, state-sized job over the kept states (`coordinator.shard.tabulate_shards`), which also picks the
history's suspects for validation (`validation.suspects`: its bounds depend on the expiry clock). A partition of
more than `decode.split_bytes` is decoded in ranges, a task each, and loaded by a second job from what each range
keeps (`frames.ranges`, `split_load_task`): a full run's split partition in buckets of its groups, a task each on
every core. A bucket's shard is a shard like any other from there on: the second job tabulates it, and the next
`--incremental` run resumes the partition from its buckets' saved shards as one (`coordinator.saved.SavedShard.union`).
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import pickle
import resource
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipelines.background import in_thread
from pipelines.coordinator.decoded import PART, conform_loaded, loadable, with_batch_times
from pipelines.coordinator.expiry import ExpiryOptions
from pipelines.coordinator.options import ReplayOptions
from pipelines.coordinator.saved import saved_shards
from pipelines.coordinator.shard import tabulate_shards
from pipelines.coordinator.streamed import RANGE, FinishedShards, StreamedShards, by_group, load_split
from pipelines.coordinator.tables import contract_table, group_history_table, named_group_history
from pipelines.decoding.policy import ReadPolicy
from pipelines.frames import decode as decoding
from pipelines.frames.decode import WORK_SCHEMA, DecodePlan, end_position, read_before, work_table
from pipelines.frames.decoded_log import DecodedLog
from pipelines.frames.envelope import (FUSED_DDL, DecodedTally, GroupEventsFile, HistoryRows, HistorySuspects,
                                       KeptRowsFile, Markers, Payload, QuarantinedRows, ReaderCounts, SavedFile,
                                       ShardStates, StateTable, WrittenHistory, blob_column, collected_rows, decode,
                                       encode, log_blobs, not_of_kind, of_kind)
from pipelines.frames.progress import TaskCounters, reporting
from pipelines.frames.ranges import NO_FLOOR, LogRange, log_ranges
from pipelines.frames.shards import CHUNK_ROWS, SparkShards, shards_from_payloads, table_chunks
from pipelines.frames.tally import RunningTally
from pipelines.incremental.saved import SavedShards
from pipelines.io.blobs import PAYLOAD, BlobRows, from_blob, to_blob
from pipelines.io.checkpoint import SavedState, StateStage
from pipelines.io.delta import spark_schema
from pipelines.io.scratch import Scratch
from pipelines.io.warehouse import HistoryStage, HistoryWriter, StagedHistory
from pipelines.validation.suspects import SuspectFilter
from schemas.decoded import DECODED_RECORD_SCHEMA, KIND_ERROR
from schemas.tables import TABLES

# pyspark is imported by the functions that run in the driver: `pyspark.sql.functions` and `StorageLevel` take
# 0.74-0.98 s to import here (measured after pyarrow and numpy), which every test and task that imports this
# module for its executor functions alone would pay
if TYPE_CHECKING:
    from pyspark import Accumulator
    from pyspark.sql import DataFrame, SparkSession

TASKS_PER_CORE = 2
#: How much of a partition's segments a task decodes and loads at a time (`decode.load_buffer_bytes`), as Kafka's
#: `offsets.load.buffer.size` (5 MiB there): a window pays ~8 ms for its Arrow calls and Python steps whatever its
#: size, a seventh of a 5 MiB window's CPU; at 16 MiB a task holds ~100 MB more.
LOAD_BUFFER_BYTES = 16 * 1024 * 1024
EVENTS_PER_FILE = 2_000  # group events in a `GroupEventsFile`: the write's tasks share the files out
# A full run of at most this many group records makes its group history in the driver (`group_history_in_hand`),
# which then holds it whole: about 1.5 KB a row, most of it the records' JSON. Above it, the tasks of a job started
# while the driver validates write it, beside validation; below it, the few rows cost less than a job of their own.
GROUP_EVENTS_IN_HAND = 20_000


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
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    return "no limit set" if soft == resource.RLIM_INFINITY else f"{soft // (1024 * 1024)} MiB"


@dataclass(frozen=True, kw_only=True)
class ShardLoad:
    """How the shards' tasks load their offsets partitions.

    `cut`: the run's (until_offset, until_time_ms), which the tallies are taken at. `split_by`: the history's suite
    as a filter (`validation.suspects`), with any clock: `tabulate_on_spark` checks the suspects against the run's
    own. `stage`: the tasks write the history's files there (else its blobs are kept in the envelope);
    `state_stage`: where the shards the next `--incremental` run resumes are saved (None: a what-if run saves
    none). `previous`: an incremental run's saved shards (every partition it holds is a shard, new records or not).
    `window_bytes`: how much of a partition's segments a task decodes and loads at a time (`decoded_windows`);
    `split_bytes`: a partition of more segment bytes is decoded in ranges of about that size, in tasks of their own,
    and loaded by a second job (`frames.ranges`; 0: never), in `buckets` of its groups, a task each. `scratch`: where
    the tasks write the group events they take (`GroupEventsFile`), for the write to read."""

    options: ReplayOptions
    scratch: Scratch
    cut: tuple[int | None, int | None] = (None, None)
    split_by: SuspectFilter | None = None
    stage: HistoryStage | None = None
    state_stage: StateStage | None = None
    previous: SavedShards | None = None
    window_bytes: int = LOAD_BUFFER_BYTES
    split_bytes: int = 0
    buckets: int = 1

    @property
    def split_buckets(self) -> int:
        """The buckets a split partition is loaded in: an incremental run resumes its partitions' shards whole."""
        return 1 if self.previous is not None else max(1, self.buckets)

    def writer(self, shard: int) -> HistoryWriter | None:
        """The writer of offsets partition `shard`'s history files (None: its history is kept as blobs)."""
        return self.stage.writer(max(shard, 0)) if self.stage is not None else None


@dataclass(frozen=True)
class TaskCpu:
    """The accumulators of the CPU-seconds the shards' tasks spend decoding and loading, and of the records their
    Python loaders read one at a time (`coordinator.streamed.FinishedShards.looped`)."""

    decode: Accumulator
    load: Accumulator
    looped: Accumulator


@dataclass(frozen=True)
class WorkUnit:
    """What one of the first job's tasks takes: an offsets partition's work items (`frames.decode.WORK_SCHEMA`),
    the whole partition's, or (`piece`) one range's of a split partition."""

    shard: int
    items: pa.Table
    piece: LogRange | None = None

    @property
    def size(self) -> int:
        """The unit's segment bytes."""
        if self.piece is not None:
            return self.piece.bytes
        return sum(s or 0 for s in self.items.column("size").to_pylist())

    @property
    def doing(self) -> str:
        return "decoding and loading" if self.piece is None else f"range {self.piece.index}"


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


def saved_state(state_stage: StateStage, files: list[SavedFile]) -> SavedState:
    """`io.checkpoint.SavedState` of the files the tasks saved."""
    return SavedState(state_stage, [f.file for f in files], sum(f.entries for f in files),
                      {f.file: f.size for f in files}, digests={f.file: f.sha256 for f in files if f.sha256})


def decoded_windows(batches: Iterator[pa.RecordBatch], window_bytes: int) -> Iterator[pa.Table]:
    """Decoded rows of one offsets partition (`batches`: in log order, each of one file, as the segment decoder
    gives them) in windows of whole log batches: a window closes at the first log batch that starts
    `window_bytes` or more of segment bytes after the window's first (a file's bytes count on into the next
    file's). Memory is one window (and one decoder batch, `frames.decode.ARROW_BATCH_ROWS` rows), whatever the
    log's length; `window_bytes=1`: one log batch per window."""
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


def decode_and_load_task(slices: list[list[WorkUnit]], *, policy: ReadPolicy, load: ShardLoad,
                         counters: TaskCounters | None = None, cpu: TaskCpu | None = None,
                         counted: list[pa.Table] | None = None):
    """The executor function: a slice's number in (`slices[i]`: the units of work of a task, each an offsets
    partition with its work items, or a range of a split partition with that range's), the envelope rows of its
    shards out. Each shard is read, decoded and loaded window by window (`decoded_windows` of `load.window_bytes`,
    `coordinator.streamed`): its history is written (or packed) and its quarantined rows packed as each window is
    loaded, so a task holds the shard's state and one window. A resumed shard (`load.previous`) has the decoded
    rows loaded onto it (the tally, the quarantine and the progress counts are of the decoded rows). A range hands
    on its rows in `load.split_buckets` buckets of its partition's groups (`coordinator.streamed.by_group`), each
    loaded by a task. `counters` and `cpu` receive each shard's records and input bytes, and its CPU-seconds
    decoding and loading, as it ends. `counted[i]`: the work items task `i` counts for the accounting (`counted_items`,
    `_Count`), each from the copy its decode read where it has one."""
    def task(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for i in batch.column(0).to_pylist():
                count = _Count(counted[i], policy) if counted is not None else None
                for unit in slices[i]:
                    with memory_of(unit.shard, unit.doing):
                        for payloads in _loaded_unit(unit, policy=policy, load=load, counters=counters, cpu=cpu,
                                                     read=None if count is None else count.read):
                            yield encode(payloads)
                if count is not None:
                    yield encode(count.payloads())
    return task


class _Count:
    """A task's reader count of its work items (`counted_items`): an item whose first bytes the task decodes is
    walked from the local copy the decode read (an object-store segment is fetched once for both), the others at the
    task's end."""

    def __init__(self, items: pa.Table, policy: ReadPolicy):
        self.policy = policy
        self.acc: dict = {}
        self.left: dict[tuple, list[dict]] = {}
        for item in items.to_pylist():
            self.left.setdefault((item["path"], item["start_position"]), []).append(item)

    def read(self, item: dict, local: str) -> None:
        waiting = self.left.get((item["path"], item.get("start_position") or 0))
        if waiting:
            decoding.count_item(waiting.pop(), self.acc, self.policy, local)

    def payloads(self) -> list[ReaderCounts]:
        for items in self.left.values():
            for item in items:
                decoding.count_item(item, self.acc, self.policy)
        self.left.clear()
        if not self.acc:
            return []
        return [ReaderCounts(shard=-1, rows=to_blob(pa.Table.from_batches([decoding.counted_rows(self.acc)])))]


def counted_items(work: pa.Table, slices: list[list[WorkUnit]]) -> list[pa.Table]:
    """The work items of `work` (the plan's) each task of `slices` counts for the accounting
    (`frames.decode.count_items`): each item once and whole, in the task that decodes its first bytes. A split
    partition's tasks decode ranges of its files, but the count walks a file from its start to its end."""
    task_of: dict[tuple, int] = {}
    for i, units in enumerate(slices):
        for unit in units:
            for key in zip(unit.items.column("path").to_pylist(), unit.items.column("start_position").to_pylist()):
                task_of.setdefault(key, i)
    rows: list[list[int]] = [[] for _ in slices]
    for r, key in enumerate(zip(work.column("path").to_pylist(), work.column("start_position").to_pylist())):
        rows[task_of.get(key, 0)].append(r)  # every item is some unit's: the first task takes any other
    return [work.take(pa.array(r, pa.int64())) for r in rows]


class _Spent:
    """A unit's CPU-seconds decoding and loading so far, and the records it decoded."""

    def __init__(self) -> None:
        self.decode, self.load, self.records = 0.0, 0.0, 0
        self._at = time.process_time()

    def decoded(self, records: int) -> None:
        now = time.process_time()
        self.decode += now - self._at
        self.records += records
        self._at = now

    def loaded(self) -> None:
        now = time.process_time()
        self.load += now - self._at
        self._at = now


def _loader(unit: WorkUnit, load: ShardLoad) -> StreamedShards:
    """The streamed shard a unit loads: a range's (no state: its history built, its kept rows handed on), or its
    partition's, from the shard the previous run saved where there is one."""
    piece = unit.piece
    if piece is not None:
        return StreamedShards(load.options, floor={} if piece.floor == NO_FLOOR else {unit.shard: piece.floor},
                              mode=RANGE)
    resume = load.previous.of_partition(unit.shard) if load.previous is not None and unit.shard >= 0 else None
    return StreamedShards(load.options, None if resume is None else {unit.shard: resume})


def _read_from(unit: WorkUnit, items: pa.Table) -> dict[int, int]:
    """Where a unit's reading starts, for missing offsets: the first segment's base offset, or (a later range) the
    last record of the ranges before it."""
    if unit.piece is not None and unit.piece.index:
        return {} if unit.piece.read_floor is None else {unit.shard: unit.piece.read_floor}
    return read_before(items.to_pylist())


def _input_bytes(items: pa.Table) -> int:
    ends = [end_position({"end_position": e}) for e in items.column("end_position").to_pylist()]
    return sum(max(0, (e if e is not None else s or 0) - (p or 0)) for s, p, e in zip(
        items.column("size").to_pylist(), items.column("start_position").to_pylist(), ends))


def _loaded_unit(unit: WorkUnit, *, policy: ReadPolicy, load: ShardLoad, counters: TaskCounters | None,
                 cpu: TaskCpu | None, read: Callable[[dict, str], None] | None = None) -> Iterator[list[Payload]]:
    """One unit's payloads, window by window, then its end: its tally and naming rows, and its shard's (a range's:
    its kept rows). `read`: given each segment's local copy once it is decoded (`frames.decode.decode_items`)."""
    shard, piece = unit.shard, unit.piece
    items = unit.items.sort_by([("base_offset", "ascending"), ("path", "ascending"), ("start_position", "ascending")])
    loader = _loader(unit, load)
    writer = load.writer(shard)
    tally, spent = RunningTally(*load.cut, after=_read_from(unit, items)), _Spent()
    try:
        yield from _windows(shard, items, policy=policy, load=load, loader=loader, writer=writer, tally=tally,
                            spent=spent, read=read)
        done = loader.finish()
        out = _closed(shard, done.pending, load.split_by, writer)
        out.extend(_group_events(loader.take_group_events(), load))
    except BaseException:
        if writer is not None:
            writer.abort()
        raise
    names = done.naming
    out.append(DecodedTally(shard=shard, tally=to_blob(tally.result()),
                            named=to_blob(names) if names.num_rows else None))
    if piece is not None:
        kept = loader.passed_on(load.split_buckets) or by_group(_empty_kept(), load.split_buckets)
        out.extend(KeptRowsFile(shard=shard, file=load.scratch.write_rows(rows, shard), range_index=piece.index,
                                bucket=b) for b, rows in enumerate(kept))
    else:
        out.extend(_shard_payloads(shard, done, load.state_stage))
    spent.loaded()
    if counters is not None:
        counters.add(spent.records, _input_bytes(items), shards=1 if piece is None or piece.index == 0 else 0)
    if cpu is not None:
        cpu.decode.add(spent.decode)
        cpu.load.add(spent.load)
        cpu.looped.add(done.looped)
    yield out


def _windows(shard: int, items: pa.Table, *, policy: ReadPolicy, load: ShardLoad, loader: StreamedShards,
             writer: HistoryWriter | None, tally: RunningTally, spent: _Spent,
             read: Callable[[dict, str], None] | None = None) -> Iterator[list[Payload]]:
    """The payloads of each window of a unit's items as it is decoded and loaded: its quarantined rows, the history
    it settles and the group events it took."""
    decoded = decoding.decode_items(iter(items.to_batches(max_chunksize=1)), policy, read=read)
    for window in decoded_windows(decoded, load.window_bytes):
        spent.decoded(window.num_rows)
        tally.add(window)
        is_error = pc.fill_null(pc.equal(window.column("record_kind"), KIND_ERROR), False)
        out: list[Payload] = []
        if pc.any(is_error).as_py():  # the quarantine, packed as it comes
            out.append(QuarantinedRows(shard=shard, rows=to_blob(window.filter(is_error))))
        settled = loader.load(window)
        del window
        out.extend(_history(shard, settled, load.split_by, writer))
        out.extend(_group_events(loader.take_group_events(), load))
        del settled
        spent.loaded()
        if out:
            yield out


def _shard_payloads(shard: int, done: FinishedShards, state_stage: StateStage | None) -> list[Payload]:
    """The payloads of a loaded shard beside its history: its markers, its state, and the shard the next
    `--incremental` run resumes, saved in `state_stage` (None: none)."""
    out: list[Payload] = [Markers(shard=shard, rows=to_blob(done.markers))]
    # the transactions' outcomes are in the history already: the tables need the rest of each state
    states = [] if done.state is None else [done.state]
    out.append(ShardStates(shard=shard, states=pickle.dumps(states, protocol=pickle.HIGHEST_PROTOCOL)))
    if state_stage is not None:
        for p, saved in saved_shards(states, done.pending, done.naming, done.markers).items():
            data = saved.to_bytes()
            out.append(SavedFile(shard=shard, file=state_stage.write(data, p), entries=saved.entries,
                                 size=len(data), sha256=hashlib.sha256(data).hexdigest()))
    return out


def _empty_kept() -> pa.Table:
    return with_batch_times(loadable(conform_loaded(DECODED_RECORD_SCHEMA.empty_table())))


def split_load_task(load: ShardLoad, loads: list[list[list[KeptRowsFile]]], *, cpu: TaskCpu | None = None):
    """The executor function of the split partitions' loads (`frames.ranges`): task `i` (the `id` of
    `spark.range`) loads each of `loads[i]`, the files a split partition's ranges kept (`split_loads`), and gives
    its shard's envelope rows, as a whole partition's task gives them but for the tally, the quarantine and the
    plain values' history (its ranges'). The ranges' kept rows are loaded in log order, as the windows of one
    streamed shard, onto the shard the previous run saved (`coordinator.streamed.load_split`), and the history of
    the offset commits they hold but the plain values is decided there. Its rows go out window by window: the task
    holds one range's kept rows at a time, the shard's state and one window's history and group events. A bucket
    of the partition's groups (`load.split_buckets` > 1) is loaded alike, and gives its groups' shard: its tables
    are theirs, its saved shard theirs (bucket 0's alone carries the partition's markers, which every bucket's
    load lists)."""
    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for i in batch.column("id").to_pylist():
                for kept in loads[i]:
                    with memory_of(kept[0].shard, "loading its ranges"):
                        for payloads in _loaded_split(kept, load=load, cpu=cpu):
                            yield encode(payloads)
    return run


def split_loads(kept: list[KeptRowsFile], buckets: int, tasks: int) -> list[list[list[KeptRowsFile]]]:
    """The split loads' tasks (`split_load_task`): the files the ranges kept, by (partition, bucket) in log order,
    each partition's `buckets` buckets in tasks of their own, one per pair while there are at most `tasks` (or
    `buckets`) of them, else the pairs in turn: a partition's buckets load side by side."""
    by_pair: dict[tuple[int, int], list[KeptRowsFile]] = {}
    for k in sorted(kept, key=lambda k: (k.shard, k.bucket, k.range_index)):
        by_pair.setdefault((k.shard, k.bucket), []).append(k)
    split = sorted({shard for shard, _ in by_pair})
    n = max(buckets, min(len(split) * buckets, tasks))
    out: list[list[list[KeptRowsFile]]] = [[] for _ in range(n)]
    for i, shard in enumerate(split):
        for b in range(buckets):
            if (shard, b) in by_pair:
                out[(i * buckets + b) % n].append(by_pair[shard, b])
    return out


def _loaded_split(kept: list[KeptRowsFile], *, load: ShardLoad, cpu: TaskCpu | None) -> Iterator[list[Payload]]:
    """A split partition's (or bucket's) payloads from the files its ranges kept (in log order), each read as the
    load comes to it."""
    started = time.process_time()
    shard, bucket = kept[0].shard, kept[0].bucket
    resume = load.previous.of_partition(shard) if load.previous is not None else None
    writer = load.writer(shard)

    def ranges() -> Iterator[pa.Table]:
        for k in kept:
            yield load.scratch.read_rows(k.file)

    try:
        for settled in load_split(load.options, ranges(), None if resume is None else {shard: resume}):
            if not isinstance(settled, tuple):
                done = settled
                continue
            out = [*_history(shard, settled[0], load.split_by, writer),
                   *_group_events(settled[1], load)]
            if out:
                yield out
            del settled, out
        del resume
        out = _closed(shard, done.pending, load.split_by, writer)
    except BaseException:
        if writer is not None:
            writer.abort()
        raise
    if bucket:  # every bucket's load lists every marker: bucket 0's rows carry them, once
        done.markers = done.markers.slice(0, 0)
    out.extend(_shard_payloads(shard, done, load.state_stage))
    if cpu is not None:
        cpu.load.add(time.process_time() - started)
        cpu.looped.add(done.looped)
    yield out


def _group_events(taken: list[tuple[int, list]], load: ShardLoad) -> list[GroupEventsFile]:
    """The `group_history` rows of the group events a load took, written to the run's scratch, `EVENTS_PER_FILE` at
    most in each file: the tasks that name them share the files out (`group_history_on_spark`)."""
    out = []
    for part, events in taken:
        for i in range(0, len(events), EVENTS_PER_FILE):
            rows = group_history_table(events[i:i + EVENTS_PER_FILE], load.options.snapshot_id, part)
            skipped = rows.filter(pc.equal(rows.column("event"), "skipped")).column("group_id").to_pylist()
            out.append(GroupEventsFile(shard=part, file=load.scratch.write_rows(rows, part), count=rows.num_rows,
                                       skipped=tuple(skipped)))
    return out


def _closed(shard: int, pending: pa.Table, split_by: SuspectFilter | None, writer: HistoryWriter | None
            ) -> list[Payload]:
    """The payloads that end a shard's history: its still-pending rows' suspects, and the rows packed (no
    `writer`) or set aside by `writer` as it closes, with every file it wrote."""
    out = list(_history(shard, pending, split_by, None))
    if writer is None:
        return out
    out = [p for p in out if not isinstance(p, HistoryRows)]
    out.extend(WrittenHistory(shard=shard, file=f, aside=aside) for f, aside in writer.close(pending))
    return out


def _history(shard: int, rows: pa.Table, split_by: SuspectFilter | None, writer: HistoryWriter | None
             ) -> Iterator[Payload]:
    """The payloads of a shard's history `rows` as they are settled: their suspects, and the rows packed (no
    `writer`: Spark keeps them) or written by `writer` (`io.warehouse.HistoryWriter`)."""
    if not rows.num_rows:
        return
    if split_by is not None:
        yield HistorySuspects(shard=shard, rows=to_blob(split_by.split(rows)))
    if writer is not None:
        writer.write(rows)
        return
    for start in range(0, rows.num_rows, CHUNK_ROWS):
        yield HistoryRows(shard=shard, rows=to_blob(rows.slice(start, CHUNK_ROWS)))


@dataclass(frozen=True)
class LoadedOnSpark:
    """What the first job gives: the kept envelope, the decoded log's view of it (tally, naming rows, quarantine),
    and the CPU-seconds its tasks spent decoding and loading; `history`: the shards' history as the write takes
    it (`io.blobs.BlobRows` of the envelope, or `io.warehouse.StagedHistory`: the files the tasks wrote)."""

    envelope: DataFrame  # FUSED_DDL, of the persisted ones
    log: DecodedLog
    cpu_seconds: dict[str, float]
    records_looped: int  # the records the tasks' Python loaders read one at a time
    top_partition: int  # the highest offsets partition read
    split_by: SuspectFilter | None  # the filter the shards split their history's suspects with
    collected: list[Payload]  # the markers and the suspects
    history: BlobRows | StagedHistory
    events: list[GroupEventsFile]  # the shards' group history, in the files of `scratch` the tasks wrote
    scratch: Scratch
    read_counts: dict  # the reader's own count of the plan's items (`frames.decode.reader_counts`), the tasks'
    saved: SavedState | None = None  # the shards the tasks saved
    persisted: tuple[DataFrame, ...] = ()  # the DataFrames the envelope is made of

    @property
    def group_events(self) -> int:
        """The `group_history` rows the tasks wrote."""
        return sum(f.count for f in self.events)

    @property
    def skipped_groups(self) -> list[tuple[int, str]]:
        """(offsets partition, group id) of each group record the tasks' loads skipped (`GroupEventsFile.skipped`)."""
        return [(f.shard, gid) for f in self.events for gid in f.skipped]

    def release(self) -> None:
        """The kept envelope dropped, the history's and the saved shards' files deleted unless they were committed
        (the scratch is the run's to delete)."""
        for frame in self.persisted or (self.envelope,):
            frame.unpersist()
        for written in (self.history, self.saved):
            discard = getattr(written, "discard", None)
            if discard is not None:
                discard()


def load_on_spark(spark: SparkSession, plan: DecodePlan, load: ShardLoad, *, counters: TaskCounters | None = None,
                  emit=None) -> LoadedOnSpark:
    """Every offsets partition of `plan` (segments only: `rebuild.executor.Route.SHARDS`) decoded and loaded by
    one task as `load` says, the envelope kept. `counters` receive each shard's records and input bytes as it
    ends; `emit`, progress lines."""
    # imported here, not at module level: pyspark ~0.1 s of import (python -X importtime)
    from pyspark import StorageLevel

    cores = spark.sparkContext.defaultParallelism
    units, shards = _work_units(plan, load, cores)
    slices = [[units[u] for u in us] for us in balanced({u: units[u].size for u in units}, cores * TASKS_PER_CORE)]
    split = sorted({unit.shard for unit in units.values() if unit.piece is not None})
    sc = spark.sparkContext
    cpu = TaskCpu(sc.accumulator(0.0), sc.accumulator(0.0), sc.accumulator(0))
    task = decode_and_load_task(slices, policy=plan.policy, load=load, counters=counters, cpu=cpu,
                                counted=counted_items(work_table(plan), slices))
    envelope = (spark.range(0, len(slices), 1, numPartitions=len(slices)).mapInArrow(task, FUSED_DDL)
                .persist(StorageLevel.DISK_ONLY))
    persisted = [envelope]
    # the job that runs the shards, collecting what is sized by the state (or by the partitions) as it ends
    with reporting(spark, emit, "decode", counters, shards=len(shards) if counters is not None else None):
        payloads = list(decode(_collected(envelope)))
    if split:
        if emit is not None:
            emit(f"          loading {len(split)} split offsets partition(s) from their ranges' kept rows")
        tasks = split_loads([p for p in payloads if isinstance(p, KeptRowsFile)], load.split_buckets,
                            cores * TASKS_PER_CORE)
        loads = (spark.range(0, len(tasks), 1, numPartitions=len(tasks))
                 .mapInArrow(split_load_task(load, tasks, cpu=cpu), FUSED_DDL).persist(StorageLevel.DISK_ONLY))
        persisted.append(loads)
        payloads.extend(decode(_collected(loads)))
        envelope = not_of_kind(envelope, KeptRowsFile).unionByName(loads)
    tallies = [p for p in payloads if isinstance(p, DecodedTally)]
    log = DecodedLog(spark, blobs=log_blobs(envelope, PART), cut=tuple(load.cut), collected=pa.table({
        "tally": pa.array([p.tally for p in tallies], pa.binary()),
        "named": pa.array([p.named for p in tallies], pa.binary())}))
    saved = None
    if load.state_stage is not None:
        saved = saved_state(load.state_stage, [p for p in payloads if isinstance(p, SavedFile)])
    if load.stage is not None:
        history = StagedHistory(load.stage, [(p.file, p.aside) for p in payloads if isinstance(p, WrittenHistory)],
                                spark)
    else:
        history = BlobRows(blob_column(envelope, HistoryRows), spark_schema(TABLES["offset_commits"]))
    collected = [p for p in payloads if isinstance(p, (Markers, HistorySuspects))]
    events = [p for p in payloads if isinstance(p, GroupEventsFile)]
    read_counts = decoding.summed_counts(r for p in payloads if isinstance(p, ReaderCounts)
                                         for r in from_blob(p.rows).to_pylist())
    return LoadedOnSpark(envelope, log, {"decode": cpu.decode.value, "load": cpu.load.value}, cpu.looped.value,
                         max(shards, default=-1), load.split_by, collected, history, events, load.scratch,
                         read_counts, saved, tuple(persisted))


def _work_units(plan: DecodePlan, load: ShardLoad, cores: int) -> tuple[dict[tuple[int, int], WorkUnit], list[int]]:
    """The first job's units of work (`work_units`) and every offsets partition they read: the shards in slices of
    similar bytes, the largest shards first (no shuffle groups the items: each task reads its own shards' files); a
    slice per task, a few per core: each task has a fixed cost of its own."""
    work = work_table(plan)
    previous = load.previous
    by_shard: dict[int, list[int]] = {p: [] for p in (previous.partitions if previous is not None else ())}
    for i, p in enumerate(work.column(PART).to_pylist()):
        by_shard.setdefault(-1 if p is None else p, []).append(i)  # -1: discovery problems of no partition
    return work_units(work, by_shard, load.split_bytes, cores), list(by_shard)


def _collected(envelope) -> pa.Table:
    """What a job's envelope holds that is sized by the state (or by the partitions), collected."""
    # of the decoded log, its tally and naming only: its quarantined rows stay in Spark
    return collected_rows(envelope, QuarantinedRows, Markers, HistorySuspects, WrittenHistory, SavedFile,
                          GroupEventsFile, KeptRowsFile, ReaderCounts, blobs_left=(QuarantinedRows,)).toArrow()


def work_units(work: pa.Table, by_shard: dict[int, list[int]], split_bytes: int, cores: int = 1
               ) -> dict[tuple[int, int], WorkUnit]:
    """What the first job's tasks take, by (offsets partition, range index or -1): each partition's work items (the
    rows `by_shard` gives of `work`) whole or, for a partition of more than `split_bytes`
    (`frames.ranges.log_ranges`, a multiple of `cores` ranges), one unit per range."""
    units = {}
    for p, rows in by_shard.items():
        items = work.take(pa.array(rows, pa.int64()))
        ranges = None
        if p >= 0 and split_bytes > 0 and items.num_rows:
            ordered = items.sort_by([("base_offset", "ascending"), ("path", "ascending")]).to_pylist()
            ranges = log_ranges(p, ordered, split_bytes, cores)
        if ranges is None:
            units[(p, -1)] = WorkUnit(p, items)
            continue
        for r in ranges:
            units[(p, r.index)] = WorkUnit(p, pa.Table.from_pylist(list(r.items), schema=WORK_SCHEMA), r)
    return units


def tabulate_task(options: ReplayOptions, expiry: ExpiryOptions | None, names: dict[str, str], top_partition: int):
    """The executor function of the second job: kept states in, their state tables out."""
    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for kept in decode(batch):
                with memory_of(kept.shard, "tabulating its state"):
                    tables = tabulate_shards(pickle.loads(kept.states), options, expiry, names, top_partition)
                    for name in list(tables):  # a table's blobs out, then the table dropped
                        table = tables.pop(name)
                        if table.num_rows:
                            yield encode(StateTable(shard=kept.shard, table=name, rows=blob)
                                         for blob in table_chunks(table))
                        del table
    return run


def _suspects_task(history_check: SuspectFilter):
    """The executor function that picks an offsets partition's history suspects again: its rows in, one envelope
    row out."""
    def run(rows: pa.Table) -> pa.Table:
        suspects = HistorySuspects(shard=rows.column(PART)[0].as_py(), rows=to_blob(history_check.split(rows)))
        return pa.Table.from_batches([encode([suspects])])
    return run


def tabulate_on_spark(spark: SparkSession, loaded: LoadedOnSpark, options: ReplayOptions,
                      expiry: ExpiryOptions | None, names: dict[str, str], *,
                      history_check: SuspectFilter | None = None, events_in_hand: bool = False) -> SparkShards:
    """The state tables of every kept shard at the run's expiry clock and topic names (one state-sized job),
    collected with the markers and the history's suspects of the first job. A shard whose
    suspects the first job's filter may have missed under the run's own (`SuspectFilter.holds_for`: its values
    reach a bound that moved with the clock) has them picked again from its kept history. `events_in_hand`: the
    group history is made in this process (`group_history_in_hand`: a run of few group records), else on Spark."""
    env = loaded.envelope
    events = None
    if events_in_hand:  # read and made into rows while the job below runs
        events = in_thread("group-history", group_history_in_hand, loaded.scratch, loaded.events, names)
    states = of_kind(env, ShardStates)
    tables = states.mapInArrow(tabulate_task(options, expiry, names, loaded.top_partition), FUSED_DDL).toArrow()
    collected = [*decode(tables), *loaded.collected]
    if history_check is not None:
        collected = _checked_suspects(loaded.history, collected, history_check, loaded.split_by)
    else:
        collected = [p for p in collected if not isinstance(p, HistorySuspects)]
    shards = shards_from_payloads(collected, loaded.history, keep=False, history_check=history_check,
                                  release=loaded.release)
    shards.saved = loaded.saved
    if events is not None:
        shards.tables["group_history"] = events.result()
    else:
        shards.tables["group_history"] = group_history_on_spark(spark, loaded.scratch, loaded.events, names)
        shards.counted["group_history"] = loaded.group_events
    return shards


def group_history_in_hand(scratch: Scratch, files: list[GroupEventsFile], names: dict[str, str]) -> pa.Table:
    """`group_history_on_spark`'s rows in this process, read from the files the tasks wrote: for a run of few group
    records, a write job of their own costs more than the rows."""
    if not files:
        return contract_table([], "group_history")
    return named_group_history(pa.concat_tables(scratch.read_all_rows([f.file for f in files])), names)


def group_history_on_spark(spark: SparkSession, scratch: Scratch, files: list[GroupEventsFile],
                           names: dict[str, str]) -> BlobRows:
    """The shards' `group_history` as the write takes it: the files of group events the tasks wrote (log-sized:
    they stay in the scratch), shared out over every core by their rows, each opened by the task that writes it,
    its members' topic ids named by the run's `names` (`named_history`). Its rows never cross into the JVM: Spark
    holds only the files' names, which each task takes from a literal of its own (a Python function to give them
    would start a second Python worker beside the writing one)."""
    # imported here, not at module level: pyspark ~0.1 s of import (python -X importtime)
    from pyspark.sql import functions as F

    by_rows = {i: f.count for i, f in enumerate(files)}
    slices = [[files[i].file for i in sl] for sl in balanced(by_rows, spark.sparkContext.defaultParallelism)]
    # one literal of JSON for every name: a literal per name is a call into the JVM each (~1 ms apiece here)
    named = F.from_json(F.lit(json.dumps(slices)), "array<array<string>>").cast("array<array<binary>>")
    names_of = spark.range(0, len(slices), 1, numPartitions=len(slices)).select(
        F.explode(F.element_at(named, F.col("id").cast("int") + 1)).alias(PAYLOAD))
    return BlobRows(names_of, spark_schema(TABLES["group_history"]),
                    functools.partial(named_history, scratch=scratch, names=names))


def named_history(batches: Iterator[pa.RecordBatch], scratch: Scratch, names: dict[str, str]
                  ) -> Iterator[pa.RecordBatch]:
    """The executor function that opens files of group events (`payload`: their names in `scratch`) into
    `group_history` rows, their KIP-848 members' topic ids named by `names`
    (`coordinator.tables.named_group_history`)."""
    for batch in batches:
        for name in batch.column(PAYLOAD).to_pylist():
            yield from named_group_history(scratch.read_rows(name.decode()), names).to_batches()


def _checked_suspects(history: BlobRows | StagedHistory, collected: list[Payload], history_check: SuspectFilter,
                      split_by: SuspectFilter | None) -> list[Payload]:
    """`collected` with the suspects of every shard as `history_check` picks them: the first job's where they
    hold, picked again from the shards' history (`history.frame()`) where they may not."""
    # imported here, not at module level: pyspark ~0.1 s of import (python -X importtime)
    from pyspark.sql import functions as F

    again = sorted({p.shard for p in collected if isinstance(p, HistorySuspects)
                    and (split_by is None or not history_check.holds_for(from_blob(p.rows), split_by))})
    if split_by is not None and not again:
        return collected
    rows = history.frame()
    if split_by is not None:  # else nothing was split: every shard's suspects are picked
        rows = rows.where(F.col(PART).isin(again))
    # only the columns the suite reads: a task holds a whole offsets partition of them
    read = dict.fromkeys([PART, *history_check.columns, *(c for b in history_check.bounds for c in b.columns)])
    rows = rows.select(*[c for c in read if c in rows.columns])
    collected = [p for p in collected if not isinstance(p, HistorySuspects) or split_by is not None
                 and p.shard not in again]
    picked = rows.groupBy(PART).applyInArrow(_suspects_task(history_check), FUSED_DDL).toArrow()
    return [*collected, *decode(picked)]
