"""Delta tables without the delta-spark jars: pyarrow writes Parquet files, delta-rs commits them.

Spark cannot reach Maven Central here, so it never touches the Delta log, and it has no object-store
filesystem either: the files are written and read by pyarrow (`pipelines/io/storage.py`), in the Spark tasks for
a DataFrame, in this process for an Arrow table. A write is two steps:
1. the rows become plain Parquet files (microsecond UTC timestamps, standard 3-level lists) in a fresh
   directory inside the table, one directory per write, so nothing it leaves can collide; each writer returns
   its file's size and Delta statistics from the footer it just wrote;
2. delta-rs commits the files that are still there (`DeltaTable.create_write_transaction` with `AddAction`s)
   in ONE Delta commit, optionally together with the removal of the files it replaces.
Until step 2 the files are invisible to every Delta reader; a failed write (or a failed task attempt) leaves
only orphans that a vacuum (`full=True`) deletes. Reading back with Spark goes through the active file list
from delta-rs, the files read by pyarrow in the tasks.
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import functools
import itertools
import json
import os
import re
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator
from urllib.parse import unquote

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import DeltaTable
from deltalake import Schema as DeltaSchema
from deltalake import Field as DeltaField
from deltalake.exceptions import CommitFailedError
from deltalake.transaction import AddAction, CommitProperties, PostCommitHookProperties, RemoveAction

from pipelines.io import retry, storage
from pipelines.io.delta_log import ADDED_FILES, refuse_deep_commits
from pipelines.io.storage import Location

# What a Delta-compatible Parquet file needs: int64 microsecond UTC timestamps (not INT96), standard 3-level lists
# (the legacy 2-level ones are not read as `array` by delta-rs / delta-kernel).
_PARQUET_OPTIONS = {"compression": "snappy", "coerce_timestamps": "us", "use_compliant_nested_type": True}
# Rows per Parquet row group: Spark hands a task its rows in Arrow batches of 10k; a row group per batch would
# make footers and readers slow. A writer holds a row group's rows until it is full, so wide rows close one sooner,
# at about `_ROW_GROUP_BYTES` (a group history row, its record's JSON, is ~1.5 KB: 262,144 of them held 390 MB).
_ROW_GROUP_ROWS = 262_144
_ROW_GROUP_BYTES = 64 << 20
# Snapshots are read at the table versions their runs pinned (`runs.table_versions`): the commits this project
# makes never delete old log files (delta-rs would after `delta.logRetentionDuration` once a checkpoint exists),
# so a pinned version stays loadable for as long as its snapshot is kept. Checkpoints still keep loading fast.
_KEEP_LOG = PostCommitHookProperties(create_checkpoint=True, cleanup_expired_logs=False)
# Delta keeps string statistics to a prefix of this many UTF-16 code units (Delta Spark's default
# `delta.dataSkippingStringPrefixLength`).
_STATS_STRING_PREFIX = 32


class DeltaWriteError(RuntimeError):
    """A write could not be committed; nothing of it is visible to readers."""


def delta_schema(schema: pa.Schema) -> DeltaSchema:
    """The Delta schema of a contract table's Arrow schema (`schemas.tables`)."""
    return DeltaSchema.from_arrow(schema)


def arrow_schema(struct) -> pa.Schema:
    """The Arrow schema of a Spark StructType (a DataFrame's): timestamps `timestamp[us, UTC]`, nullability kept."""
    from pyspark.sql.pandas.types import to_arrow_schema  # pyspark types only; no JVM

    return to_arrow_schema(struct)


def spark_schema(schema: pa.Schema):
    """The Spark StructType of an Arrow schema: what a DataFrame of a contract table is given at the Spark
    boundary (the contract itself is Arrow)."""
    from pyspark.sql.pandas.types import from_arrow_schema  # pyspark types only; no JVM

    return from_arrow_schema(schema)


def type_name(t: pa.DataType) -> str:
    """Delta's (Spark's) name of an Arrow column type: `string`, `timestamp`, `integer`, `long`, `boolean`, …"""
    for test, name in ((pa.types.is_string, "string"), (pa.types.is_large_string, "string"),
                       (pa.types.is_timestamp, "timestamp"), (pa.types.is_int32, "integer"),
                       (pa.types.is_int64, "long"), (pa.types.is_boolean, "boolean"), (pa.types.is_int16, "short"),
                       (pa.types.is_int8, "byte"), (pa.types.is_float32, "float"), (pa.types.is_float64, "double"),
                       (pa.types.is_date32, "date"), (pa.types.is_binary, "binary"), (pa.types.is_list, "array"),
                       (pa.types.is_map, "map"), (pa.types.is_struct, "struct")):
        if test(t):
            return name
    return str(t)


Where = "str | Path | Location"


# Reads of the Delta log go through `storage.retried`: object_store retries a request, not a listing's or a file's
# body cut mid-way.
def is_table(path: Where) -> bool:
    loc = storage.location(path)
    return storage.retried(loc, "open", lambda: DeltaTable.is_deltatable(
        loc.uri, storage_options=storage.storage_options(loc.uri)))


def open_table(path: Where, version: int | None = None) -> DeltaTable | None:
    """The table at `path` (at `version`, default the latest), or None when no Delta table was ever committed
    there."""
    loc = storage.location(path)
    if not is_table(loc):
        return None
    refuse_deep_commits(loc, version)
    return storage.retried(loc, "open", lambda: DeltaTable(loc.uri, version=version,
                                                      storage_options=storage.storage_options(loc.uri)))


def ensure_table(path: Where, table_schema, partition_by: list[str] | None = None) -> DeltaTable:
    """Open the table at `path`, creating it (schema only, version 0) if it does not exist yet."""
    dt = open_table(path)
    if dt is not None:
        return dt
    loc = storage.location(path)
    loc.makedirs()
    # mode="ignore": a try whose create landed before its answer was lost finds the table and leaves it
    return storage.retried(loc, "create", lambda: DeltaTable.create(
        loc.uri, delta_schema(table_schema), mode="ignore", partition_by=partition_by or None,
        storage_options=storage.storage_options(loc.uri)))


def with_columns(dt: DeltaTable, table_schema: pa.Schema) -> DeltaTable:
    """`dt` with every column of `table_schema` it lacks added (nullable: the rows written before read null), in a
    commit of its own. A table that is only appended to (the history) keeps the schema it was created with: an
    append's files may hold a column its schema lacks, but every reader reads the table's schema, so the column would
    never be seen. A try whose commit landed before its answer was lost finds the columns there."""
    missing = [f for f in table_schema if f.name not in _column_names(dt)]
    if not missing:
        return dt

    def once() -> None:
        dt.update_incremental()
        have = _column_names(dt)
        todo = [DeltaField.from_arrow(f.with_nullable(True)) for f in missing if f.name not in have]
        if todo:
            dt.alter.add_columns(todo, post_commithook_properties=_KEEP_LOG)

    storage.retried(storage.location(_table_location(dt.table_uri)), "add columns", once)
    return dt


def _column_names(dt: DeltaTable) -> set[str]:
    return {f.name for f in dt.schema().fields}


def new_write_dir(prefix: str = "") -> str:
    """A relative directory name no other write uses: time-ordered for operators, uuid for uniqueness."""
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%S")
    return f"{prefix}w-{stamp}-{uuid.uuid4().hex[:12]}"


def file_schema(schema: pa.Schema, partition_columns: Iterable[str] = ()) -> pa.Schema:
    """`schema` without the partition columns (Delta keeps their values in the log, not in the files)."""
    parts = set(partition_columns)
    return pa.schema([f for f in schema if f.name not in parts])


@dataclass(frozen=True)
class WrittenFile:
    """One Parquet file a writer produced: its name inside the write directory, size, rows and Delta stats."""

    name: str
    size: int
    rows: int
    stats: str


WRITTEN_DDL = "name string, size long, rows long, stats string"


def write_batches(batches: Iterable[pa.RecordBatch], table_uri: str, rel_dir: str, table_schema, part: int,
                  partition_columns: Iterable[str] = ()) -> WrittenFile | None:
    """Write `batches` as one Parquet file `<table_uri>/<rel_dir>/part-<part>-<uuid>.snappy.parquet`, its
    statistics taken from the footer just written; None (no file) when there are no rows."""
    writer = FileWriter(table_uri, rel_dir, table_schema, part, partition_columns)
    try:
        for batch in batches:
            writer.write(batch)
    except BaseException:
        writer.abort()
        raise
    return writer.close()


def _dictionary_columns(schema: pa.Schema) -> list[str]:
    """The columns a file dictionary-encodes: all but the 64-bit integers and timestamps (record and committed
    offsets, times), whose values hardly repeat. Parquet tries a dictionary for each column and falls back page by
    page, which cost a quarter of the history's write and saved no bytes."""
    return [f.name for f in schema if not _is_wide(f.type)]


def _column_encodings(schema: pa.Schema) -> dict[str, str]:
    """The 64-bit integers and timestamps delta-encoded (`DELTA_BINARY_PACKED`): offsets and times of a partition's
    rows climb by small steps, so their deltas pack into a few bits where plain values take 8 bytes for snappy to
    squeeze: an offset history's file is about half the size, and quicker to read (pyarrow, DuckDB, delta-rs and
    Spark all read the encoding)."""
    return {f.name: "DELTA_BINARY_PACKED" for f in schema if _is_wide(f.type)}


def _is_wide(t: pa.DataType) -> bool:
    return pa.types.is_int64(t) or pa.types.is_timestamp(t)


def _row_bytes(batch: pa.RecordBatch) -> int:
    """About what `batch`'s rows hold: 8 bytes a value, and the bytes of its top-level strings and binaries, a
    slice's own (not `nbytes`, which crashed on a batch Spark handed a Python worker: `io.blobs`)."""
    out = 8 * batch.num_rows * batch.num_columns
    for column in batch.columns:
        if (pa.types.is_string(column.type) or pa.types.is_binary(column.type)) and len(column):
            # the span of the slice's offsets, not a length per value: the bytes between its first and last
            offsets = column.buffers()[1]
            if offsets is not None:
                span = np.frombuffer(offsets, np.int32, count=len(column) + 1, offset=4 * column.offset)
                out += int(span[-1] - span[0])
    return out


class FileWriter:
    """One Parquet file of a table written batch by batch as the rows come (`write_batches` pulls them from an
    iterator; a task that makes its rows in a loop of its own pushes them), in row groups of `_ROW_GROUP_ROWS` or
    about `_ROW_GROUP_BYTES`, whichever comes first."""

    def __init__(self, table_uri: str, rel_dir: str, table_schema, part: int, partition_columns: Iterable[str] = ()):
        # Every column optional in the file, as Spark writes them: a null where the contract forbids one is
        # reported from the statistics (`collect_add_actions`), naming the column, not by the Arrow cast.
        schema = file_schema(table_schema, partition_columns)
        self.schema = pa.schema([f.with_nullable(True) for f in schema])
        self.table_schema, self.partition_columns = table_schema, list(partition_columns)
        self.loc = storage.location(table_uri).join(rel_dir, f"part-{part:05d}-{uuid.uuid4()}-c000.snappy.parquet")
        # On an object store the file is written locally (the task's temp dir) and uploaded whole when closed: a
        # throttled or dropped upload is retried from the local copy (`Location.upload`), where a stream's parts
        # could not be sent again.
        self.spool: str | None = None
        self.sink = self.writer = None
        self.pending: list[pa.RecordBatch] = []
        self.pending_rows = self.pending_bytes = 0

    @property
    def bytes_written(self) -> int:
        """The file's size so far (the row groups flushed)."""
        return 0 if self.sink is None else self.sink.tell()

    def write(self, batch: pa.RecordBatch | pa.Table) -> None:
        for b in (batch.to_batches() if isinstance(batch, pa.Table) else (batch,)):
            if b.num_rows == 0:
                continue
            with storage.errors(self.loc):
                if self.writer is None:
                    self.loc.parent.makedirs()
                    if self.loc.remote:
                        fd, self.spool = tempfile.mkstemp(prefix="offsetlake-", suffix=".parquet")
                        os.close(fd)
                        self.sink = pa.OSFile(self.spool, "wb")
                    else:
                        self.sink = self.loc.fs.open_output_stream(self.loc.path)
                    self.writer = pq.ParquetWriter(self.sink, self.schema, **_PARQUET_OPTIONS,
                                                   use_dictionary=_dictionary_columns(self.schema),
                                                   column_encoding=_column_encodings(self.schema))
                self.pending.append(_conform_batch(b, self.schema))
                self.pending_rows += b.num_rows
                self.pending_bytes += _row_bytes(b)
                if self.pending_rows >= _ROW_GROUP_ROWS or self.pending_bytes >= _ROW_GROUP_BYTES:
                    self._flush()

    def _flush(self) -> None:
        if self.pending:
            self.writer.write_table(pa.Table.from_batches(self.pending, schema=self.schema),
                                    row_group_size=_ROW_GROUP_ROWS)
        self.pending, self.pending_rows, self.pending_bytes = [], 0, 0

    def close(self) -> WrittenFile | None:
        """The file finished, with its statistics; None (no file) when it got no rows."""
        if self.writer is None:
            return None
        try:
            with storage.errors(self.loc):
                self._flush()
                self.writer.close()
                size = self.sink.tell()
                self.sink.close()
            if self.spool is not None:
                self.loc.upload(self.spool)
        except BaseException:
            self.abort()
            raise
        finally:
            self._unspool()
        stats, rows = file_stats(self.writer.writer.metadata, self.table_schema, self.partition_columns)
        return WrittenFile(self.loc.name, size, rows, stats)

    def abort(self) -> None:
        """The file deleted, as if never written."""
        if self.sink is not None:
            with contextlib.suppress(Exception):
                self.sink.close()
            if self.spool is None:
                self.loc.delete_file()
            else:  # the upload, if it began, may have landed
                with contextlib.suppress(Exception):
                    self.loc.delete_file()
        self._unspool()
        self.sink = self.writer = None

    def _unspool(self) -> None:
        if self.spool is not None:
            with contextlib.suppress(OSError):
                os.unlink(self.spool)
            self.spool = None


def _conform_batch(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """`batch`'s columns in `schema`'s order and types (Spark's Arrow batches carry the session's time zone and
    its own nested field names)."""
    arrays = [batch.column(f.name).cast(f.type) for f in schema]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def write_table_files(table: pa.Table, table_path: Where, rel_dir: str, table_schema,
                      partition_columns: Iterable[str] = (), split_by: str | None = None,
                      aside: tuple[Callable[[pa.RecordBatch], Any], str] | None = None
                      ) -> list[WrittenFile] | tuple[list[WrittenFile], list[WrittenFile]]:
    """Rows already in this process: written here as one task of `write_frame_files` writes its rows (one Parquet
    file into `<table_path>/<rel_dir>`; `split_by`, `aside` as there)."""
    task = _write_task(iter(table.to_batches()), table_uri=storage.location(table_path).uri, rel_dir=rel_dir,
                       table_schema=table_schema, parts=list(partition_columns), split_by=split_by, aside=aside,
                       opened=None)
    return _written([r for b in task for r in b.to_pylist()], aside)


def write_frame_files(df, table_path: Where, rel_dir: str, table_schema,
                      partition_columns: Iterable[str] = (), split_by: str | None = None,
                      aside: tuple[Callable[[pa.RecordBatch], Any], str] | None = None,
                      opened: Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]] | None = None
                      ) -> list[WrittenFile] | tuple[list[WrittenFile], list[WrittenFile]]:
    """A DataFrame's rows: each Spark task writes its rows as one Parquet file into `<table_path>/<rel_dir>`
    with pyarrow, on whatever storage the table is on. Only the files of successful task attempts come back.
    `split_by`: a column the rows arrive sorted by within each task; a new file starts where its value changes,
    so each file holds one value of it (and its Delta stats bound that value's rows alone).
    `aside`: (a batch's mask, another directory): the rows the mask picks go to one file per task in that
    directory instead, in the same pass; the files of both directories come back, (rel_dir's, the other's).
    `opened`: `df` holds the rows packed (`io.blobs`); each task opens its batches with it and writes
    what it gives."""
    parts = list(partition_columns)
    task = functools.partial(_write_task, table_uri=storage.location(table_path).uri, rel_dir=rel_dir,
                             table_schema=table_schema, parts=parts, split_by=split_by, aside=aside, opened=opened)
    if opened is None:
        df = df.select(*file_schema(table_schema, parts).names)
    return _written([r.asDict() for r in df.mapInArrow(task, WRITTEN_DDL + ", aside boolean").collect()], aside)


def _written(rows: list[dict], aside) -> list[WrittenFile] | tuple[list[WrittenFile], list[WrittenFile]]:
    files = [(r["aside"], WrittenFile(r["name"], r["size"], r["rows"], r["stats"])) for r in rows]
    main = [f for a, f in files if not a]
    return main if aside is None else (main, [f for a, f in files if a])


def _write_task(batches: Iterator[pa.RecordBatch], *, table_uri: str, rel_dir: str, table_schema, parts: list[str],
                split_by: str | None, aside, opened) -> Iterator[pa.RecordBatch]:
    """One task of `write_frame_files`: its batches in, a row per file written out."""
    # imported here, not at module level: pyspark ~0.7 s of import (python -X importtime)
    from pyspark import TaskContext

    ctx = TaskContext.get()
    part = ctx.partitionId() if ctx else 0
    kept: list[pa.RecordBatch] = []
    if opened is not None:
        batches = opened(batches)
    if aside is not None:
        batches = _put_aside(batches, aside[0], kept)
    runs = [batches] if split_by is None else (
        (piece for _, piece in run) for _, run in itertools.groupby(_runs_of(batches, split_by),
                                                                     key=lambda x: x[0]))
    for run in runs:
        written = write_batches(run, table_uri, rel_dir, table_schema, part, parts)
        if written is not None:
            yield pa.RecordBatch.from_pylist([{**written.__dict__, "aside": False}])
    if kept:
        written = write_batches(kept, table_uri, aside[1], table_schema, part, parts)
        if written is not None:
            yield pa.RecordBatch.from_pylist([{**written.__dict__, "aside": True}])


def _put_aside(batches: Iterable[pa.RecordBatch], mask, kept: list) -> Iterator[pa.RecordBatch]:
    """`batches` without the rows `mask` picks, which are appended to `kept`."""
    for batch in batches:
        picked = pc.fill_null(mask(batch), False)
        if not pc.any(picked).as_py():
            yield batch
            continue
        kept.append(batch.filter(picked))
        yield batch.filter(pc.invert(picked))


def _runs_of(batches: Iterable[pa.RecordBatch], column: str) -> Iterator[tuple[Any, pa.RecordBatch]]:
    """Every batch cut where `column`'s value changes: (value, slice) in order."""
    for batch in batches:
        n = batch.num_rows
        if n == 0:
            continue
        values = batch.column(column)
        cuts = [0, *(i + 1 for i in pc.indices_nonzero(
            pc.fill_null(pc.not_equal(values.slice(1), values.slice(0, n - 1)), True)).to_pylist()), n]
        for start, end in zip(cuts, cuts[1:]):
            yield values[start].as_py(), batch.slice(start, end - start)


FILE_COLUMN = "_file"


def _read_files(table_uri: str, rel_paths: Iterable[str], schema: pa.Schema, with_file: bool
                ) -> Iterator[pa.RecordBatch]:
    """The rows of some of a table's Parquet files as batches of `schema` (a column a file lacks reads null);
    `with_file` adds `_file`, the relative path each row came from."""
    root = storage.location(table_uri)
    names = schema.names
    for rel in rel_paths:
        loc = root.join(rel)
        for got, present in _file_batches(loc, names):
            arrays = [got.column(n).cast(schema.field(n).type) if n in present
                      else pa.nulls(got.num_rows, schema.field(n).type) for n in names]
            if with_file:
                arrays.append(pa.repeat(pa.scalar(rel, pa.string()), got.num_rows))
            yield pa.RecordBatch.from_arrays(arrays, names=[*names, *([FILE_COLUMN] if with_file else [])])


def _file_batches(loc: Location, names: list[str]) -> Iterator[tuple[pa.RecordBatch, list[str]]]:
    """One Parquet file's batches of the columns of `names` it holds (with those columns). On an object store a
    read that fails transiently mid-way opens the file again and goes on after the batches already given (a
    file's batches come in the same order every time)."""
    given = 0

    def batches():
        nonlocal given
        with loc.fs.open_input_file(loc.path) as f:
            pf = pq.ParquetFile(f)
            present = [n for n in names if n in pf.schema_arrow.names]
            for i, got in enumerate(pf.iter_batches(columns=present, batch_size=65_536)):
                if i >= given:
                    yield got, present
                    given += 1

    with storage.errors(loc):
        if not loc.remote:
            yield from batches()
            return
        for attempt in retry.attempts(f"{loc} (read)"):
            with attempt:
                yield from batches()


def _read_schema(schema: pa.Schema, columns: list[str] | None) -> pa.Schema:
    return pa.schema([f for f in schema if columns is None or f.name in columns])


def read_table_files(table_path: Where, rel_paths: list[str], table_schema, columns: list[str] | None = None,
                     with_file: bool = False) -> pa.Table:
    """`read_frame_files` in this process: the rows as one Arrow table."""
    schema = _read_schema(table_schema, columns)
    out = schema.append(pa.field(FILE_COLUMN, pa.string(), False)) if with_file else schema
    batches = list(_read_files(storage.location(table_path).uri, rel_paths, schema, with_file))
    return pa.Table.from_batches(batches).cast(out) if batches else out.empty_table()


def read_frame_files(spark, table_path: Where, rel_paths: list[str], table_schema, columns: list[str] | None = None,
                     with_file: bool = False):
    """The rows of some of a table's Parquet files (paths relative to the table) as a DataFrame of `table_schema`'s
    `columns`, read by pyarrow in the tasks; `with_file` adds `_file`, the relative path each row came from."""
    table_uri = storage.location(table_path).uri
    schema = _read_schema(table_schema, columns)
    out_struct = spark_schema(schema.append(pa.field(FILE_COLUMN, pa.string(), False)) if with_file else schema)
    if not rel_paths:
        return spark.createDataFrame([], out_struct)

    def read(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            yield from _read_files(table_uri, batch.column(0).to_pylist(), schema, with_file)

    n = max(1, min(len(rel_paths), spark.sparkContext.defaultParallelism * 2))
    paths = spark.createDataFrame([(p,) for p in rel_paths], "path string").repartition(n)
    return paths.mapInArrow(read, out_struct)


_MINMAX_TYPES = ("byte", "short", "integer", "long", "boolean", "string", "timestamp")
_ASCII_MAX = "\x7f"
_UNICODE_MAX = "\U0010ffff"
_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)
_MICROS_PER_UNIT = {"milliseconds": 1000, "microseconds": 1, "nanoseconds": 0.001}


def _utf16_units(ch: str) -> int:
    return 2 if ord(ch) > 0xFFFF else 1


def _prefix_chars(value: str, prefix_len: int) -> int:
    """How many characters of `value` make its first `prefix_len` UTF-16 code units (Java's String
    length, which Delta Spark counts in), one more unit when the cut would split a surrogate pair."""
    units = 0
    for i, ch in enumerate(value):
        if units >= prefix_len:
            return i
        units += _utf16_units(ch)
    return len(value)


def truncate_min_string(value: str, prefix_len: int = _STATS_STRING_PREFIX) -> str:
    """A lower bound of `value` of at most `prefix_len` UTF-16 units (+1 for a whole surrogate pair)."""
    return value[:_prefix_chars(value, prefix_len)]


def truncate_max_string(value: str, prefix_len: int = _STATS_STRING_PREFIX) -> str | None:
    """An upper bound of `value` (in UTF-8 byte order, which every reader compares in) cut near `prefix_len`
    UTF-16 units, as Delta Spark's `truncateMaxStringAgg` makes it: the prefix plus a tie-breaker greater than
    the first character cut off (ASCII DEL when that character is below it, else U+10FFFF); the prefix grows
    past characters that are U+10FFFF themselves, up to twice `prefix_len`. None when no such bound exists
    within that length: the column then gets no min/max at all."""
    i = _prefix_chars(value, prefix_len)
    if i == len(value):
        return value
    units = sum(_utf16_units(ch) for ch in value[:i])
    while units <= 2 * prefix_len:
        if i >= len(value):
            return value
        ch = value[i]
        if ch == _UNICODE_MAX:
            i, units = i + 1, units + 2
            continue
        return value[:i] + (_ASCII_MAX if ch < _ASCII_MAX else _UNICODE_MAX)
    return None


def _timestamp_micros(column) -> float | None:
    """Microseconds per stored unit of a UTC-adjusted Parquet timestamp column, else None (no statistics)."""
    if column.physical_type != "INT64":
        return None
    logical = json.loads(column.logical_type.to_json())
    if logical.get("Type") != "Timestamp" or not logical.get("isAdjustedToUTC"):
        return None
    return _MICROS_PER_UNIT.get(logical.get("timeUnit"))


def _timestamp_stat(micros: int) -> str | None:
    """Delta's statistics format for a timestamp: ISO 8601, UTC, milliseconds."""
    try:
        t = _EPOCH + _dt.timedelta(microseconds=micros)
    except OverflowError:
        return None
    return f"{t.year:04d}-{t:%m-%dT%H:%M:%S}.{t.microsecond // 1000:03d}Z"


def stat_bounds(kind: str, lo, hi) -> tuple | None:
    """Delta's (min, max) statistics for a column's exact footer min/max, widened where Delta keeps less
    precision so that min <= every value <= max still holds; None when they cannot be given."""
    if kind == "string":
        if not isinstance(lo, str) or not isinstance(hi, str):
            return None
        hi = truncate_max_string(hi)
        return None if hi is None else (truncate_min_string(lo), hi)
    if kind == "timestamp":
        # Delta keeps milliseconds: the min floored and the max ceiled keep the bounds true.
        lo_s, hi_s = _timestamp_stat(int(lo // 1000 * 1000)), _timestamp_stat(int(-(-hi // 1000) * 1000))
        return None if lo_s is None or hi_s is None else (lo_s, hi_s)
    return lo, hi


def footer_bounds(footer: "str | Path | pq.FileMetaData", table_schema, partition_columns: Iterable[str] = ()
                  ) -> tuple[int, dict]:
    """A Parquet file's row count and, per top-level primitive column whose footer has statistics, its exact
    (null count, min, max) over all row groups: min/max None when the footer cannot give them, timestamps as
    microseconds since the epoch (UTC). `footer`: a local file, or the footer a writer just wrote."""
    md = footer if isinstance(footer, pq.FileMetaData) else pq.read_metadata(str(footer))
    parts = set(partition_columns)
    index = {md.schema.column(i).path: i for i in range(md.num_columns)}
    out: dict = {}
    for field in table_schema:
        i = index.get(field.name)  # nested leaves have dotted paths: not top-level primitives
        if field.name in parts or i is None or md.num_row_groups == 0:
            continue
        kind = type_name(field.type)
        per = _timestamp_micros(md.schema.column(i)) if kind == "timestamp" else 1
        complete, minmax_ok, nc, lo, hi = True, kind in _MINMAX_TYPES and per is not None, 0, None, None
        for rg in range(md.num_row_groups):
            st = md.row_group(rg).column(i).statistics
            if st is None or not st.has_null_count:
                complete = False
                break
            nc += st.null_count
            if st.has_min_max:
                if minmax_ok:
                    a, b = (st.min_raw * per, st.max_raw * per) if kind == "timestamp" else (st.min, st.max)
                    lo = a if lo is None else min(lo, a)
                    hi = b if hi is None else max(hi, b)
            elif st.null_count != md.row_group(rg).num_rows:
                minmax_ok = False  # values present but no min/max in the footer
        if not complete:
            continue
        if not minmax_ok or isinstance(lo, bytes) or isinstance(hi, bytes):
            lo = hi = None
        out[field.name] = (nc, lo, hi)
    return md.num_rows, out


def file_stats(footer: "str | Path | pq.FileMetaData", table_schema, partition_columns: Iterable[str] = ()
               ) -> tuple[str, int]:
    """Delta `stats` JSON of one Parquet file from its footer (no data read) and its row count.

    Null counts for every top-level primitive column; min/max for integers, booleans, strings and
    timestamps. Every min/max is a true bound of the file's values, as the Delta protocol requires and
    readers rely on to skip files: strings are cut to Delta's 32-character prefix (the max rounded up, see
    `truncate_max_string`), timestamps kept to the millisecond (min floored, max ceiled). A column gets both
    or neither (delta-rs reads a missing max as "below everything"), and none when its footer lacks them.
    """
    rows, bounds = footer_bounds(footer, table_schema, partition_columns)
    kinds = {f.name: type_name(f.type) for f in table_schema}
    mins: dict = {}
    maxs: dict = {}
    nulls: dict = {}
    for name, (nc, lo, hi) in bounds.items():
        nulls[name] = nc
        minmax = None if lo is None else stat_bounds(kinds[name], lo, hi)
        if minmax is not None:
            mins[name], maxs[name] = minmax
    stats = {"numRecords": rows, "minValues": mins, "maxValues": maxs, "nullCount": nulls}
    # UTF-8, not \u escapes: delta-rs decodes the escaped surrogate pair of U+10FFFF (the max's tie-breaker) as
    # U+FFFFF, a smaller max than the one written.
    return json.dumps(stats, separators=(",", ":"), ensure_ascii=False), rows


def _not_null_violations(stats_json: str, table_schema, partition_columns: Iterable[str]) -> list[str]:
    nulls = json.loads(stats_json)["nullCount"]
    parts = set(partition_columns)
    return [f.name for f in table_schema
            if not f.nullable and f.name not in parts and nulls.get(f.name, 0) > 0]


def collect_add_actions(table_path: Where, rel_dir: str, table_schema, partition_values: dict[str, str] | None = None,
                        written: list[WrittenFile] = ()) -> list[AddAction]:
    """Add actions for the `written` files that are still in `<table_path>/<rel_dir>` with the size written.

    Anything else there (the files of a failed task attempt, checksums) is deleted rather than committed. A
    non-nullable column holding nulls fails the write here, before anything is committed.
    """
    base = storage.location(table_path).join(rel_dir)
    partition_values = dict(partition_values or {})
    on_storage = {base.child_of(i).name: i for i in base.listdir()}
    actions: list[AddAction] = []
    for f in sorted(written, key=lambda w: w.name):
        info = on_storage.pop(f.name, None)
        if info is None or info.size != f.size:
            continue  # deleted since (the caller's row check says so)
        bad = _not_null_violations(f.stats, table_schema, partition_values)
        if bad:
            raise DeltaWriteError(f"{base.join(f.name)}: nulls in non-nullable column(s) {', '.join(bad)}")
        mtime = info.mtime.timestamp() if info.mtime is not None else time.time()
        actions.append(AddAction(
            path=f"{rel_dir}/{f.name}",
            size=f.size,
            partition_values=partition_values,
            modification_time=int(mtime * 1000),
            data_change=True,
            stats=f.stats,
        ))
    for stray in on_storage.values():
        base.child_of(stray).delete_file()
    return actions


def remove_actions(dt: DeltaTable, paths: Iterable[str] | None = None,
                   partition: tuple[str, Iterable[str]] | None = None) -> list[RemoveAction]:
    """Remove actions for active files, chosen by relative path and/or by partition values."""
    now = int(time.time() * 1000)
    wanted = set(paths) if paths is not None else None
    part_col, part_values = (partition[0], set(partition[1])) if partition else (None, None)
    out = []
    for row in active_files(dt):
        if wanted is not None and row["path"] not in wanted:
            continue
        if part_col is not None and row["partition_values"].get(part_col) not in part_values:
            continue
        out.append(RemoveAction(path=row["path"], data_change=True, deletion_timestamp=now,
                                size=row["size"], partition_values=row["partition_values"] or None))
    return out


def add_actions(dt: DeltaTable, flatten: bool = False) -> pa.Table:
    """The table's current add actions as Arrow; delta-rs reads the log's files for them as it needs them, so on an
    object store they are read again whole when that fails transiently."""
    loc = storage.location(_table_location(dt.table_uri))
    return storage.retried(loc, "read", lambda: pa.table(dt.get_add_actions(flatten=flatten)))


def active_files(dt: DeltaTable) -> list[dict]:
    """The table's current add actions: relative path, size, partition values (strings)."""
    t = add_actions(dt)
    parts = t.column("partition").to_pylist() if "partition" in t.column_names else [None] * t.num_rows
    return [
        {"path": p, "size": s, "partition_values": {k: (None if v is None else str(v)) for k, v in (pv or {}).items()}}
        for p, s, pv in zip(t.column("path").to_pylist(), t.column("size_bytes").to_pylist(), parts)
    ]


_COMMIT_TOKEN = "offsetlake.commit_token"


def commit(dt: DeltaTable, table_schema, actions: list, *, mode: str = "append",
           partition_by: list[str] | None = None, partition_filters=None,
           metadata: dict | None = None) -> int:
    """Commit `actions` as ONE Delta transaction and return the new table version.

    On an object store a try that fails transiently is tried again, but only once the log says it did not land:
    each commit carries a token of its own in its metadata, and a version past the one the try started from that
    holds it is this commit (its answer was lost, or its post-commit checkpoint failed). Committing it twice would
    add its files twice. So delta-rs does not retry a commit at the next version itself (`max_commit_retries=0`):
    the version it found taken is, under the writer lock, this commit's own lost answer (object_store retried its
    PUT, which then found the file there)."""
    token = uuid.uuid4().hex
    # a reader checks the commit still holds them (`delta_log`): stripped of its adds it would read as no rows
    added = sum(isinstance(a, AddAction) for a in actions)
    loc = storage.location(_table_location(dt.table_uri))
    started = dt.version()
    tries = 0

    def once() -> int:
        nonlocal tries
        tries += 1
        landed = _landed(dt, started, token) if tries > 1 else None
        if landed is not None:
            return landed
        try:
            dt.create_write_transaction(
                actions,
                mode=mode,
                schema=delta_schema(table_schema),
                partition_by=partition_by or None,
                partition_filters=partition_filters,
                commit_properties=CommitProperties(custom_metadata={**(metadata or {}), _COMMIT_TOKEN: token,
                                                                    ADDED_FILES: str(added)},
                                                   max_commit_retries=0),
                post_commithook_properties=_KEEP_LOG,
            )
        except CommitFailedError:
            landed = _landed(dt, started, token)
            if landed is None:
                raise
            return landed
        dt.update_incremental()
        return dt.version()

    return storage.retried(loc, "commit", once)


def may_have_landed(exc: BaseException) -> bool:
    """Whether a commit that raised `exc` may have landed all the same: the store failed transiently past the
    retries, so `commit` could not read the log to tell. Its files must then stay (a vacuum deletes them if no
    commit references them); deleting them would leave a table that references files it no longer has."""
    return retry.transient(exc)


def _landed(dt: DeltaTable, since: int, token: str) -> int | None:
    """The version after `since` whose commit carries `token`, None when none does."""
    dt.update_incremental()
    newer = dt.version() - since
    if newer <= 0:
        return None
    for entry in dt.history(newer):
        if entry.get(_COMMIT_TOKEN) == token:
            return int(entry["version"])
    return None


def discard_dir(table_path: Where, rel_dir: str) -> None:
    """Best effort: delete files of a write that will not be committed (vacuum gets them otherwise)."""
    with contextlib.suppress(Exception):
        storage.location(table_path).join(rel_dir).delete_dir()


def remove_empty_dirs(table_path: Where) -> None:
    """Drop directories left empty by a vacuum (delta-rs deletes files, never directories; an object store has
    no directories to drop)."""
    root = storage.location(table_path).local
    if root is None:
        return
    for dirpath, dirnames, filenames in os.walk(root, topdown=False):
        p = Path(dirpath)
        if p == root or p.name.startswith("_"):
            continue
        if any(part.startswith("_delta_log") for part in p.relative_to(root).parts):
            continue
        with contextlib.suppress(OSError):
            for f in filenames:  # only orphan checksum files of vanished data files
                if f.startswith(".") and f.endswith(".crc") and not (p / f[1:-4]).exists():
                    (p / f).unlink()
            if not any(p.iterdir()):
                p.rmdir()


def vacuum(dt: DeltaTable, retention_hours: int = 0, keep: Iterable[str] = ()) -> list[str]:
    """Delete every file the table no longer references, including never-committed orphans (`full`), except the
    files in `keep` (paths relative to the table: those an older, pinned version still reads).

    With retention 0 the retention check must be disabled: fine for a single-writer warehouse, where every
    reader reads either the latest version or a pinned one whose files are kept, and no other writer has files
    staged but not committed.
    """
    keep = set(keep)
    if not keep:  # deleting what is already gone is a no-op: a try that failed half-way is run again
        return storage.retried(storage.location(_table_location(dt.table_uri)), "vacuum", lambda: dt.vacuum(
            retention_hours=retention_hours, dry_run=False, enforce_retention_duration=False, full=True,
            post_commithook_properties=_KEEP_LOG))
    # delta-rs' own keep_versions would keep every file of those versions, other snapshots' dropped files too
    root = storage.location(_table_location(dt.table_uri))
    deleted = []
    for name in storage.retried(root, "vacuum", lambda: dt.vacuum(retention_hours=retention_hours, dry_run=True,
                                                            enforce_retention_duration=False, full=True)):
        rel = _relative(root, name)
        if rel in keep:
            continue
        root.join(rel).delete_file()
        deleted.append(name)
    return deleted


def _table_location(table_uri: str) -> str:
    """delta-rs' table URI (`file:///…/` or `s3://…/`) as a path or URI `storage.location` takes."""
    if table_uri.startswith("file://"):
        return unquote(table_uri.removeprefix("file://"))
    return table_uri.rstrip("/")


def _relative(root: Location, name: str) -> str:
    """A vacuum's file name (relative, absolute, or a URI) relative to the table root."""
    s = unquote(name)
    if "://" in s:
        s = _table_location(s)
        prefix = root.uri.rstrip("/") + "/"
        return s[len(prefix):] if s.startswith(prefix) else s
    p = Path(s)
    return str(p.relative_to(root.uri)) if p.is_absolute() else s


_SAFE_VALUE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}")


def check_partition_value(value: str) -> str:
    """Partition values become directory names and SQL literals: allow a safe alphabet only (the whole value: a
    `$` would let a trailing newline through, and delta-rs reads no path holding one)."""
    if not isinstance(value, str) or not _SAFE_VALUE.fullmatch(value):
        raise ValueError(
            f"invalid snapshot id {value!r}: use 1-128 characters from A-Z a-z 0-9 _ . - "
            "(starting with a letter or digit)")
    return value
