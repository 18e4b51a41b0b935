"""Inputs -> the run's decoded log (DECODED_RECORD_SCHEMA rows, `frames.decoded_log`), parallel over files.

The driver only lists files; each task opens its own files and decodes them into Arrow batches, packed into blobs
by offsets partition (`mapInArrow`). Nothing is collected to the driver.

`reader_counts` is the run's independent record count (the `records_in` of the accounting): a second, cheap
walk over the same work items (`count_items`) that reads entry heads only (framing + CRC, no record decoding) and
returns a few numbers per offsets partition — see its docstring for exactly what is counted.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import mmap
import os
import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Iterator

import crc32c
import pyarrow as pa
import pyarrow.compute as pc

from pipelines.decoding.batches import RECORD_BATCH_OVERHEAD, decode_entry
from pipelines.decoding.errors import DecodeError
from pipelines.decoding.dump_copies import dump_copies, without_copies
from pipelines.decoding.framing import MAGIC_OFFSET, frame_entries, last_offset, stop_problem
from pipelines.decoding.native import fastdecode
from pipelines.decoding.overlaps import kafka_reading
from pipelines.decoding.policy import DEFAULT_POLICY, ReadPolicy
from pipelines.decoding.reader import is_tabular
from pipelines.decoding.rows import problem_to_row, rows_to_arrow, to_decoded_row
from pipelines.decoding.segments import discover_segments, log_start_offsets
from pipelines.decoding.tabular import OFFSETS_TOPIC, read_tabular_dump
from pipelines.frames.decoded_log import LOG_DDL, DecodedLog, pack
from pipelines.io import storage
from schemas.decoded import DECODED_RECORD_SCHEMA, KIND_ERROR
from schemas.records import OFFSET_MAX, PARTITION_MAX, ReadProblem

ARROW_BATCH_ROWS = 20_000

# A work item: one segment file, or one tabular dump file, or a discovery problem to turn into a row.
WORK_SCHEMA = pa.schema(
    [
        ("kind", pa.string()),  # segment | tabular | problem
        ("path", pa.string()),
        ("offsets_partition", pa.int32()),
        ("base_offset", pa.int64()),
        ("size", pa.int64()),
        ("problem_kind", pa.string()),
        ("problem_reason", pa.string()),
        # segment: the byte position (an entry boundary) to start reading at; null/0 = the whole file. An
        # incremental run (`pipelines.incremental`) resumes files it read before where the previous run stopped.
        ("start_position", pa.int64()),
        # segment: the entry boundary to stop reading at (a range of a split partition); null or -1: the file's end
        ("end_position", pa.int64()),
        ("problem_offset", pa.int64()),  # problem: the log offset it is at, when it has one
        # segment: JSON [[from, to, reason, kind], ...]: the entries Kafka's loader passes over (`decoding.overlaps`);
        # tabular: the same of rows, the records an earlier tabular input holds (`decoding.dump_copies`)
        ("unread", pa.string()),
    ]
)
FILE_END = -1  # `end_position` of an item read to its file's end


def end_position(item: dict) -> int | None:
    """Where a work item's reading stops: None for the file's end (-1 or null)."""
    end = item.get("end_position")
    return None if end is None or end < 0 else int(end)


@dataclass(frozen=True)
class DecodePlan:
    """What the driver found: the work items, and facts the run reports (inputs, bytes, tabular caveats)."""

    items: list[dict]
    total_bytes: int
    num_segments: int
    num_tabular: int
    tabular_without_batch_facts: list[str]
    max_partition: int
    policy: ReadPolicy = field(default=DEFAULT_POLICY)  # what the readers do with corrupt batches and bombs
    # read in the driver process, by the same functions a task runs: no Python worker to start and no job to
    # schedule for a small dump (`rebuild.executor.choose` decides)
    in_process: bool = False
    # offsets partition -> the logStartOffset its log dir's log-start-offset-checkpoint names (`segments.
    # log_start_offsets`): an incremental run resumes only from a checkpoint whose reading started there too
    log_start: dict[int, int] = field(default_factory=dict)

    def bytes_by_partition(self) -> dict[int, int]:
        """The segment bytes this plan reads per offsets partition (tabular dumps: not known per partition)."""
        out: dict[int, int] = {}
        for item in self.items:
            if item["kind"] == "segment":
                p = item["offsets_partition"]
                out[p] = out.get(p, 0) + max(0, (item["size"] or 0) - (item.get("start_position") or 0))
        return out

    def read_before(self) -> dict[int, int]:
        """Per offsets partition read from the start of its first segment: the offset before that segment's base
        offset (a segment's first records missing are records the log cleaner removed; `frames.tally`)."""
        return read_before(self.items)


def read_before(items: Iterable[dict]) -> dict[int, int]:
    """`DecodePlan.read_before` of work items (a partition any of whose items starts inside a file, as an
    incremental run's do, is left out: its reading starts past records it did not read)."""
    first: dict[int, int] = {}
    resumed: set[int] = set()
    for item in items:
        if item["kind"] != "segment" or item.get("offsets_partition") is None or item["offsets_partition"] < 0:
            continue
        p = item["offsets_partition"]
        if item.get("start_position"):
            resumed.add(p)
        first[p] = min(first.get(p, item["base_offset"]), item["base_offset"])
    return {p: b - 1 for p, b in first.items() if p not in resumed}


class NoOffsetsDataError(FileNotFoundError):
    """The inputs hold no `__consumer_offsets` segment and no tabular dump at all (the CLI: exit 2)."""


class UnreadableDumpError(FileNotFoundError):
    """A tabular dump that cannot be read at all: no key/value/partition/offset columns, not Parquet (exit 2)."""


def plan_inputs(paths: Iterable[str | Path]) -> DecodePlan:
    """Discover segment files and tabular dumps; discovery problems become work items too (never dropped).

    A tabular input that is a directory is ONE dump (`read_tabular_dump` reads its part files together), so two
    part files holding the same (partition, offset) with different bytes give a `duplicate_conflict` row; a
    tabular input's records at offsets a segment or an earlier tabular input holds are its item's `unread` rows
    (`dump_copies`). A "segment" that is not a regular file (a directory named `00000000000000000000.log`, a pipe)
    becomes an `unreadable` problem item (`segments.discover_segments`). Raises `NoOffsetsDataError` when there is no
    segment and no dump at all (an empty directory, only 0-byte segments, only other topics' directories): there is
    nothing to rebuild from."""
    paths = [p if storage.is_remote(p) else Path(p) for p in map(str, paths)]
    items: list[dict] = []
    tabular = {str(p): is_tabular(p) for p in paths}
    seg_paths = [p for p in paths if not tabular[str(p)]]
    tab_inputs: list[tuple[str, list[int]]] = []  # (the dump as read, its files' sizes)
    for p in paths:
        if tabular[str(p)]:
            loc = storage.location(p)
            sizes = [int(i.size) for i in loc.listdir() if i.type == storage.pafs.FileType.File] \
                if loc.is_dir() else [loc.size()]
            tab_inputs.append((str(p), sizes))
    max_partition = -1
    total = 0
    nseg = 0
    problems = []
    if seg_paths:
        segments, problems = discover_segments(seg_paths)
        # what Kafka's loader reads of overlapping files and from the log start, and what it passes over
        starts = log_start_offsets(segments)
        reading = kafka_reading(segments, starts)
        problems = [*problems, *reading.problems]
        for s in segments:
            unread = reading.unread.get(s.path)
            items.append(dict(kind="segment", path=str(s.path), offsets_partition=s.offsets_partition,
                              base_offset=s.base_offset, size=s.size, problem_kind=None, problem_reason=None,
                              unread=json.dumps(unread) if unread else None))
            total += s.size
            nseg += 1
            max_partition = max(max_partition, s.offsets_partition)
        for pr in problems:
            items.append(dict(kind="problem", path=pr.source, offsets_partition=pr.offsets_partition,
                              base_offset=pr.position, size=0, problem_kind=pr.kind, problem_reason=pr.reason,
                              problem_offset=pr.offset))
    ntab = sum(len(files) for _, files in tab_inputs)
    if nseg == 0 and ntab == 0:
        found = f" ({len(problems)} path(s) not read: {problems[0].reason}{', ...' if len(problems) > 1 else ''})" \
            if problems else ""
        raise NoOffsetsDataError(f"no __consumer_offsets data found under {', '.join(map(str, paths))}{found}")
    # the records a tabular input repeats: the segments' are loaded, then the first dump's; the copies quarantined
    copies = [[] for _ in tab_inputs]
    if len(tab_inputs) > 1 or (tab_inputs and nseg):
        copies = dump_copies([p for p, _ in tab_inputs], segments if nseg else [], reading.unread if nseg else None)
    for (dump_path, sizes), copied in zip(tab_inputs, copies):
        size = sum(sizes)
        items.append(dict(kind="tabular", path=str(dump_path), offsets_partition=-1, base_offset=0, size=size,
                          problem_kind=None, problem_reason=None, unread=json.dumps(copied) if copied else None))
        total += size
    without_facts = []
    rows = 0
    if tab_inputs:
        for dump_path, _files in tab_inputs:
            try:
                dump = read_tabular_dump(dump_path)
            except DecodeError as e:
                raise UnreadableDumpError(str(e)) from None
            if not dump.has_batch_facts:
                without_facts.append(str(dump_path))
            max_partition = max(max_partition, getattr(dump, "max_partition", -1) or -1)
            rows += dump.num_rows + len(dump.malformed)
        if nseg == 0 and rows == 0:
            # as only empty segments are: an export that wrote nothing would be served as a coordinator without groups
            raise NoOffsetsDataError(f"no __consumer_offsets data found under {', '.join(map(str, paths))} (the "
                                     f"dump holds no rows)")
    return DecodePlan(items, total, nseg, ntab, without_facts, max_partition,
                      log_start={p: start for p, (start, _) in starts.items()} if seg_paths else {})


def _decoder_for(policy: ReadPolicy, counters=None):
    """The executor function of `mapInArrow` for ``policy`` (a picklable closure over plain values); ``counters``
    (`frames.progress.TaskCounters`) receive the records decoded and the input bytes of each work item."""
    def decoded(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for out in decode_items(batches, policy, counters):
            if counters is not None:
                counters.add(out.num_rows, 0)
            yield out
    return decoded


def decode_items(batches: Iterator[pa.RecordBatch], policy: ReadPolicy = DEFAULT_POLICY, counters=None,
                 read: Callable[[dict, str], None] | None = None) -> Iterator[pa.RecordBatch]:
    """Executor side: decode every work item in the incoming batches, streaming Arrow batches out. `read(item,
    local)`: called with the local copy of each segment once it is decoded (an object-store segment's is fetched
    once for both), which holds its bytes from its start on and its first `HEAD_BYTES`."""
    def flush(rows):
        return rows_to_arrow(rows)

    keys = None  # the task's segments share their key table (`columnar.KeyTable`)
    for batch in batches:
        for item in batch.to_pylist():
            rows: list[dict] = []
            if counters is not None:
                end = end_position(item)
                counters.add(0, max(0, (item["size"] if end is None else end) - (item.get("start_position") or 0)))
            if item["kind"] == "segment":
                # fast path: segment bytes straight to Arrow columns (same rows as the reference path)
                from pipelines.decoding.columnar import KeyTable, decode_segment_to_arrow

                keys = keys if keys is not None else KeyTable()
                start = item.get("start_position") or 0
                try:
                    # an object-store segment is fetched into the task's temp dir (from `start` on) and read there
                    with storage.location(item["path"]).as_local_file(start=start, head=HEAD_BYTES) as local:
                        for a, b, passed_over in read_pieces(item):
                            batches = decode_segment_to_arrow(local, offsets_partition=item["offsets_partition"],
                                                              batch_rows=ARROW_BATCH_ROWS, start_position=a,
                                                              end_position=b, policy=policy, source=item["path"],
                                                              keys=keys)
                            yield from batches if passed_over is None else _passed_over(batches, item, a,
                                                                                        passed_over)
                        if read is not None:
                            read(item, local)
                except (OSError, storage.StorageError) as e:  # vanished, a directory, I/O: one row, not a failure
                    yield flush([problem_to_row(ReadProblem(
                        source=item["path"], offsets_partition=item["offsets_partition"], position=-1,
                        kind="unreadable", reason=f"cannot read segment: {storage.error_text(e)}"))])
                continue
            elif item["kind"] == "tabular":
                source = read_tabular_dump(item["path"]).records()
                if item.get("unread"):
                    source = without_copies(source, [tuple(c) for c in json.loads(item["unread"])], item["path"])
            else:
                source = iter([ReadProblem(source=item["path"], offsets_partition=item["offsets_partition"],
                                           position=item["base_offset"], kind=item["problem_kind"],
                                           reason=item["problem_reason"], offset=item.get("problem_offset"))])
            for rec in source:
                rows.append(problem_to_row(rec) if isinstance(rec, ReadProblem) else to_decoded_row(rec))
                if len(rows) >= ARROW_BATCH_ROWS:
                    yield flush(rows)
                    rows = []
            if rows:
                yield flush(rows)


def read_pieces(item: dict) -> list[tuple[int, int | None, tuple[str, str] | None]]:
    """A segment work item's bytes as pieces (from, to (None: the file's end), None for a piece read, else the
    quarantine kind and reason of a piece Kafka's loader passes over: the item's `unread` ranges within its own)."""
    start, end = item.get("start_position") or 0, end_position(item)
    pieces: list[tuple[int, int | None, tuple[str, str] | None]] = []
    at = start
    for a, b, why, kind in json.loads(item.get("unread") or "[]"):
        a, b = max(a, start), b if end is None else min(b, end)
        if a >= b:
            continue
        if a > at:
            pieces.append((at, a, None))
        pieces.append((a, b, (kind, why)))
        at = b
    if end is None or at < end:
        pieces.append((at, end, None))
    return pieces


def _passed_over(batches: Iterator[pa.RecordBatch], item: dict, at: int, passed: tuple[str, str]
                 ) -> Iterator[pa.RecordBatch]:
    """The rows of entries Kafka's loader passes over: their records as one row of `passed`'s kind and reason
    (`overlapping_segment`, `duplicate_segment`) standing for them (never state), their quarantine rows as they are."""
    kind, why = passed
    records = 0
    for batch in batches:
        is_error = pc.fill_null(pc.equal(batch.column("record_kind"), KIND_ERROR), False)
        records += batch.num_rows - pc.sum(is_error.cast(pa.int64())).as_py() if batch.num_rows else 0
        if pc.any(is_error).as_py():
            yield batch.filter(is_error)
    if records:
        yield rows_to_arrow([problem_to_row(ReadProblem(
            source=item["path"], offsets_partition=item["offsets_partition"], position=at, kind=kind,
            reason=f"{why} ({records} record(s))", records=records))])


def decoded_log(spark, plan: DecodePlan, counters=None, cut: tuple = (None, None)):
    """The run's decoded log (`frames.decoded_log.DecodedLog`) for a plan: one task per group of files, balanced by
    size, its batches packed into blobs by offsets partition and tallied at ``cut`` (until_offset,
    until_time_ms; `frames.tally`); or decoded in the driver when the plan is small (`DecodePlan.in_process`).
    ``counters`` (`frames.progress.TaskCounters`): records and bytes decoded, for progress lines (tasks only)."""
    cut = tuple(cut)
    if plan.in_process:
        batches = list(decode_items(iter(work_batches(plan)), plan.policy))
        return DecodedLog(spark, table=pa.Table.from_batches(batches, schema=DECODED_RECORD_SCHEMA), cut=cut)
    decode = _decoder_for(plan.policy, counters)

    def decode_and_pack(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        return pack(decode(batches), cut)
    blobs = _over_items(spark, plan, decode_and_pack, LOG_DDL)
    if blobs is None:
        return DecodedLog(spark, table=DECODED_RECORD_SCHEMA.empty_table(), cut=cut)
    return DecodedLog(spark, blobs=blobs, cut=cut)


def collect_items(spark, plan: DecodePlan, task, ddl: str) -> list[dict]:
    """`task` (a task's function: work-item batches in, Arrow batches out) over the plan's items, its rows
    collected: in the driver when the plan is small, else one Spark task per group of files."""
    if plan.in_process:
        return [row for batch in task(iter(work_batches(plan))) for row in batch.to_pylist()]
    rows = _over_items(spark, plan, task, ddl, per_core=1)  # a light walk: a task's fixed cost is most of it
    return [] if rows is None else [r.asDict() for r in rows.collect()]


def work_table(plan: DecodePlan) -> pa.Table:
    items = sorted((dict(i) for i in plan.items), key=lambda i: -(i["size"] or 0))
    for item in items:
        if item.get("start_position") is None:
            item["start_position"] = 0  # never null: every item says where it starts and where it stops
        if item.get("end_position") is None:
            item["end_position"] = FILE_END
    return pa.Table.from_pylist(items, schema=WORK_SCHEMA)


def work_batches(plan: DecodePlan) -> list[pa.RecordBatch]:
    """The work items as the task function reads them in this process, one item per batch, in log order (by
    offsets partition, then base offset): segment input then decodes to rows the shards load as they are, with no
    sort of every column (`coordinator.shard.loadable`)."""
    table = work_table(plan).sort_by([("offsets_partition", "ascending"), ("base_offset", "ascending"),
                                       ("path", "ascending")])
    return table.to_batches(max_chunksize=1)


def _over_items(spark, plan: DecodePlan, task, ddl: str, per_core: int = 4):
    """`task` (work-item batches in, Arrow batches out, `ddl`) over the plan's items as a DataFrame (None when there
    are none): the items dealt into slices of similar size (`per_core` a core), the largest first, a Spark task
    each. A task finds its slice in its function's closure (an item is a path and a few numbers): no DataFrame of
    the items is made, sent through pandas and shuffled before the tasks can start."""
    table = work_table(plan)
    if table.num_rows == 0:
        return None
    n = max(1, min(table.num_rows, spark.sparkContext.defaultParallelism * per_core))
    slices = [table.take(pa.array(range(i, table.num_rows, n), pa.int64())).to_batches() for i in range(n)]

    def run(ids: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in ids:
            for i in batch.column(0).to_pylist():
                yield from task(iter(slices[i]))
    return spark.range(0, n, 1, numPartitions=n).mapInArrow(run, ddl)


# ================================================================================================================
# the reader's own record count (accounting `records_in`)
# ================================================================================================================
READ_COUNT_FIELDS = ("records_in", "bytes_unread", "bytes_zero_tail")
READ_COUNT_DDL = ("offsets_partition int, " + ", ".join(f"{f} long" for f in READ_COUNT_FIELDS)
                  + ", unread_ranges string, segments string")
UNREAD_RANGES = "unread_ranges"  # per partition: [(source, from, to, kind)] of the bytes not read into records
SEGMENTS = "segments"  # per partition: how far each segment file was framed (`segment_scan`), for the checkpoint
HEAD_BYTES = 64 * 1024  # a file's first bytes the checkpoint hashes: a rewritten or other cluster's log differs


def reader_counts(spark, plan: DecodePlan) -> dict[int | None, dict]:
    """Records per offsets partition as the reader's framing sees them, independently of record decoding.

    One small `mapInArrow` over the plan's work items (the same files the decode reads); its few rows per task
    are collected to the driver and summed there. (A run whose tasks decode and load the shards walks the same way
    in those tasks, each file from the copy its decode read: `frames.segment_shards.load_on_spark`.) Per partition:

    * ``records_in`` — only what can be verified: a magic 2 batch whose CRC verifies counts its header's
      ``recordsCount`` (its record section is never walked); a legacy entry whose CRC verifies counts 1. An entry
      that fails a check (CRC, count, magic, a legacy compressed wrapper) is given to the reference
      `decode_entry` and counts what it yields: records that parsed (replayed or quarantined one per row) and the
      records its quarantine rows stand for (`ReadProblem.records`) — never an unverified header's count.
      Tails and unframeable sizes count no records; a tabular dump counts its rows (rows of another topic: 1
      per topic, as the dump reader reports them; malformed lines: 1 each).
    * ``bytes_unread`` / ``bytes_zero_tail`` and ``unread_ranges`` — the byte ranges no record was read from:
      unframeable sizes, torn tails, batches that fail their CRC and do not parse (zero tails apart: they hold
      no data).
    * ``segments`` — per segment file, how far the walk framed it (`segment_scan`): what the checkpoint of an
      `--incremental` chain records, from this same walk.

    Cost: framing reads each entry's 17-byte head and CRC-32C over its bytes (C, from the page cache the decode
    just filled); no record is decoded on the normal path.
    """
    policy = plan.policy

    def counted(batches):
        return count_items(batches, policy)

    return summed_counts(collect_items(spark, plan, counted, READ_COUNT_DDL))


def summed_counts(rows: Iterable[dict]) -> dict[int | None, dict]:
    """`reader_counts` from the rows `count_items` gave, wherever it ran."""
    out: dict[int | None, dict] = {}
    for r in rows:
        c = out.setdefault(r["offsets_partition"], _counters())
        for f in READ_COUNT_FIELDS:
            c[f] += int(r[f] or 0)
        c[UNREAD_RANGES].extend(tuple(x) for x in json.loads(r[UNREAD_RANGES] or "[]"))
        c[SEGMENTS].extend(json.loads(r[SEGMENTS] or "[]"))
    for c in out.values():
        c[UNREAD_RANGES].sort(key=lambda x: (x[0], x[1]))
        c[SEGMENTS].sort(key=lambda x: x["path"])
    return out


def _counters() -> dict:
    return {**dict.fromkeys(READ_COUNT_FIELDS, 0), UNREAD_RANGES: [], SEGMENTS: []}


def count_items(batches: Iterator[pa.RecordBatch], policy: ReadPolicy = DEFAULT_POLICY) -> Iterator[pa.RecordBatch]:
    """Executor side of `reader_counts`: one output row per (work batch, offsets partition)."""
    for batch in batches:
        acc: dict[int | None, dict] = {}
        for item in batch.to_pylist():
            count_item(item, acc, policy)
        if acc:
            yield counted_rows(acc)


def count_item(item: dict, acc: dict, policy: ReadPolicy = DEFAULT_POLICY, local: str | None = None) -> None:
    """One work item counted into `acc` (`reader_counts`); `local`: a local copy of its segment from its start on,
    with its first `HEAD_BYTES` (else it is read where it is)."""
    if item["kind"] == "segment":
        start = item.get("start_position") or 0
        copy = (contextlib.nullcontext(local) if local is not None
                else storage.location(item["path"]).as_local_file(start=start, head=HEAD_BYTES))
        try:
            with copy as path:
                count_segment(path, item["offsets_partition"], acc, start_position=start, policy=policy,
                              source=item["path"])
        except (OSError, storage.StorageError):
            _bump(acc, item["offsets_partition"])  # the decode makes the same error one `unreadable` row
    elif item["kind"] == "tabular":
        count_tabular(item["path"], acc)
    else:
        _bump(acc, item["offsets_partition"])  # a discovery problem: one row, no records


def counted_rows(acc: dict) -> pa.RecordBatch:
    """`acc`'s counters as rows `summed_counts` reads, one per offsets partition."""
    parts = list(acc)
    return pa.RecordBatch.from_arrays(
        [pa.array(parts, pa.int32())]
        + [pa.array([acc[p][f] for p in parts], pa.int64()) for f in READ_COUNT_FIELDS]
        + [pa.array([json.dumps(acc[p].get(UNREAD_RANGES, [])) for p in parts], pa.string())]
        + [pa.array([json.dumps(acc[p].get(SEGMENTS, [])) for p in parts], pa.string())],
        schema=_COUNTED_SCHEMA)


_COUNTED_SCHEMA = pa.schema([("offsets_partition", pa.int32())] + [(f, pa.int64()) for f in READ_COUNT_FIELDS]
                            + [(UNREAD_RANGES, pa.string()), (SEGMENTS, pa.string())])


def _bump(acc: dict, partition: int | None, **deltas: int) -> dict:
    c = acc.get(partition)
    if c is None:
        c = acc[partition] = _counters()
    for k, v in deltas.items():
        c[k] += v
    return c


def _unread(acc: dict, partition: int, path: str, start: int, stop: int, kind: str) -> None:
    c = _bump(acc, partition)
    if kind == "zero_tail":
        c["bytes_zero_tail"] += stop - start
    else:
        c["bytes_unread"] += stop - start
    c[UNREAD_RANGES].append((path, start, stop, kind))


def count_segment(path: str, partition: int, acc: dict | None = None, *, start_position: int = 0,
                  policy: ReadPolicy = DEFAULT_POLICY, source: str | None = None, use_c: bool | None = None) -> dict:
    """`reader_counts` for one segment file, added into ``acc`` (partition -> counters), which is returned.

    Framed by `framing.frame_entries`, as the decoders frame it: the same entries, the same place where reading
    stops. The file's `segment_scan` is added to the partition's ``segments``. ``source``: the
    name the file goes by in the counts (its URI when `path` is a local copy of an object). With the C extension
    (`native`), `_fastdecode.count_entries` walks the file and counts the clean magic 2 batches; the loop here,
    its reference, then looks at the other entries only (``use_c``: None = C when built, False = the reference).
    """
    local, path = path, source or path



    acc = {} if acc is None else acc
    u32 = struct.Struct(">I").unpack_from
    i32 = struct.Struct(">i").unpack_from
    crc = crc32c.crc32c
    n_in = 0
    try:
        with open(local, "rb") as f:
            end = os.fstat(f.fileno()).st_size
            if end == 0 or start_position >= end:
                f.seek(0)
                _bump(acc, partition)[SEGMENTS].append(segment_scan(
                    path, end, start_position, f.read(min(HEAD_BYTES, start_position)), None))
                return acc
            mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            try:
                file_size = end
                end = min(end, len(mm))
                pos = start_position  # an incremental run's resume point (an entry boundary)
                last = None  # (position, size, last offset) of the last entry framed
                def other(at: int, total: int) -> int:
                    """The records an entry that is not a clean magic 2 batch counts: a clean legacy entry one."""
                    if mm[at + MAGIC_OFFSET] in (0, 1) and (mm[at + 17] & 0x07) == 0 and _legacy_crc_ok(mm, at, total):
                        return 1
                    _count_suspicious(bytes(mm[at:at + total]), path, partition, at, acc, policy)
                    return 0

                if fastdecode is not None and use_c is not False:
                    # the walk below, in C for the clean magic 2 batches; the other entries are looked at here
                    with memoryview(mm) as whole, whole[:end] as view:
                        clean_records, others, pos, last = fastdecode.count_entries(view, start_position)
                    n_in += clean_records + sum(other(at, total) for at, total in struct.iter_unpack("=qq", others))
                    if pos < end:
                        stop = stop_problem(mm, pos, end, source=path, offsets_partition=partition)
                        _unread(acc, partition, path, stop.position, stop.unread_to, stop.kind)
                else:
                    for frame in frame_entries(mm, start_position, end, source=path, offsets_partition=partition):
                        if type(frame) is not tuple:
                            _unread(acc, partition, path, frame.position, frame.unread_to, frame.kind)
                            break
                        pos, _off, total = frame
                        magic = mm[pos + MAGIC_OFFSET]
                        last = (pos, total, last_offset(mm, pos, _off, total))
                        count = i32(mm, pos + 57)[0] if magic == 2 and total >= RECORD_BATCH_OVERHEAD else -1
                        if count >= 0 and crc(mm[pos + 21:pos + total]) == u32(mm, pos + 17)[0]:
                            n_in += count
                        else:
                            n_in += other(pos, total)
                        pos += total
                last_entry = None if last is None else (*last, mm[last[0]:last[0] + last[1]])
                _bump(acc, partition)[SEGMENTS].append(
                    segment_scan(path, file_size, pos, mm[0:min(HEAD_BYTES, pos)], last_entry))
            finally:
                mm.close()
    except OSError:
        pass  # the decode side turns the same error into one `unreadable` row (no records)
    _bump(acc, partition, records_in=n_in)
    return acc


def segment_scan(path: str, size: int, consumed: int, head: bytes, last) -> dict:
    """How far a segment file was read: its size, the end of the last entry framed (`consumed`: a torn tail is
    read again next time), the sha256 of its first ``min(HEAD_BYTES, consumed)`` bytes, and the last entry's
    position, size, last offset (v2: base offset + lastOffsetDelta; magic 0/1: the entry's offset) and sha256
    (`last`: (position, size, last offset, bytes), None when no entry was framed after the start position)."""
    out = dict(path=path, size=size, consumed=consumed, head_bytes=len(head),
               head_sha256=hashlib.sha256(head).hexdigest(), last_batch_position=None, last_batch_size=None,
               last_batch_sha256=None, last_offset=None)
    if last is not None:
        pos, total, last_offset, data = last
        out.update(last_batch_position=pos, last_batch_size=total, last_offset=last_offset,
                   last_batch_sha256=hashlib.sha256(data).hexdigest())
    return out


def _legacy_crc_ok(mm, pos: int, total: int) -> bool:
    return zlib.crc32(mm[pos + 16:pos + total]) == int.from_bytes(mm[pos + 12:pos + 16], "big")


def _count_suspicious(entry: bytes, path: str, partition: int, pos: int, acc: dict, policy: ReadPolicy) -> None:
    """An entry the header walk cannot vouch for: what the reference reader makes of it (see `reader_counts`)."""
    n = 0
    for it in decode_entry(entry, 0, len(entry), source=path, offsets_partition=partition, position=pos,
                           policy=policy):
        if isinstance(it, ReadProblem):
            n += it.records
            if it.unread_to is not None:
                _unread(acc, partition, path, it.position, it.unread_to, it.kind)
        else:
            n += len(it[1])
    _bump(acc, partition, records_in=n)


def count_tabular(path: str, acc: dict | None = None) -> dict:
    """`reader_counts` for one tabular dump: its rows per partition, as `tabular._iter_records` reads them."""
    acc = {} if acc is None else acc
    dump = read_tabular_dump(path)
    table = dump._table
    if dump.malformed:
        _bump(acc, -1, records_in=len(dump.malformed))  # one `malformed_row` row (one record) per bad line
    if "topic" in table.column_names:
        is_offsets = pc.fill_null(pc.equal(table.column("topic"), OFFSETS_TOPIC), True)
        others = table.filter(pc.invert(is_offsets))
        first_part: dict = {}
        for t, part in zip(others.column("topic").to_pylist(), others.column("partition").to_pylist()):
            first_part.setdefault(t, part if part is not None else -1)
        for part in first_part.values():
            _bump(acc, part, records_in=1)  # one `not_offsets_data` row per other topic
        table = table.filter(is_offsets)
    parts = table.column("partition").to_pylist()
    offs = table.column("offset").to_pylist()
    for part, off in zip(parts, offs):
        if part is None or off is None:
            _bump(acc, -1 if part is None else part, records_in=1)
            continue
        if part < 0 or off < 0:  # a `negative_offset` row: one record
            _bump(acc, max(part, -1), records_in=1)
            continue
        if part > PARTITION_MAX or off > OFFSET_MAX:  # an `invalid_row` of no partition: one record
            _bump(acc, -1, records_in=1)
            continue
        _bump(acc, part, records_in=1)  # a row repeating another's offset too: a `duplicate_*` row stands for it
    return acc
