"""Delta tables without the delta-spark jars: Spark writes Parquet files, delta-rs commits them.

Spark cannot reach Maven Central here, so it never touches the Delta log. A write is two steps:
1. Spark writes the rows as plain Parquet files (microsecond UTC timestamps, standard 3-level lists) into
   a fresh directory inside the table, one directory per write, so nothing it leaves can collide;
2. delta-rs commits those files (`DeltaTable.create_write_transaction` with `AddAction`s carrying
   per-file statistics read from the Parquet footers) in ONE Delta commit, optionally together with the
   removal of the files it replaces.
Until step 2 the files are invisible to every Delta reader; a failed write leaves only orphans that a
vacuum (`full=True`) deletes. Reading back with Spark goes through the active file list from delta-rs.
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import re
import shutil
import time
import uuid
from pathlib import Path
from typing import Iterable, Iterator

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable
from deltalake import Schema as DeltaSchema
from deltalake.transaction import AddAction, CommitProperties, PostCommitHookProperties, RemoveAction

# Spark SQL settings a Delta-compatible Parquet file needs; set for the duration of a write only.
#  - INT96 timestamps (Spark's historical default) are not a Delta type: force int64 micros, UTC-adjusted;
#  - the legacy format writes 2-level lists that delta-rs / delta-kernel do not read as `array`.
_PARQUET_WRITE_CONF = {
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.sql.parquet.writeLegacyFormat": "false",
}
# Snapshots are read at the table versions their runs pinned (`runs.table_versions`): the commits this project
# makes never delete old log files (delta-rs would after `delta.logRetentionDuration` once a checkpoint exists),
# so a pinned version stays loadable for as long as its snapshot is kept. Checkpoints still keep loading fast.
_KEEP_LOG = PostCommitHookProperties(create_checkpoint=True, cleanup_expired_logs=False)
# Delta keeps string statistics to a prefix of this many UTF-16 code units (Delta Spark's default
# `delta.dataSkippingStringPrefixLength`).
_STATS_STRING_PREFIX = 32


class DeltaWriteError(RuntimeError):
    """A write could not be committed; nothing of it is visible to readers."""


def delta_schema(struct) -> DeltaSchema:
    """The Delta schema of a Spark StructType (Delta's schema JSON is Spark's StructType JSON)."""
    return DeltaSchema.from_json(struct.json())


def arrow_schema(struct) -> pa.Schema:
    """The Arrow schema of a Spark StructType: timestamps `timestamp[us, UTC]`, nullability kept."""
    from pyspark.sql.pandas.types import to_arrow_schema  # pyspark types only; no JVM

    return to_arrow_schema(struct)


def is_table(path: str | Path) -> bool:
    return DeltaTable.is_deltatable(str(path))


def open_table(path: str | Path, version: int | None = None) -> DeltaTable | None:
    """The table at `path` (at `version`, default the latest), or None when no Delta table was ever committed
    there."""
    return DeltaTable(str(path), version=version) if is_table(path) else None


def ensure_table(path: str | Path, struct, partition_by: list[str] | None = None) -> DeltaTable:
    """Open the table at `path`, creating it (schema only, version 0) if it does not exist yet."""
    dt = open_table(path)
    if dt is not None:
        return dt
    Path(path).mkdir(parents=True, exist_ok=True)
    return DeltaTable.create(str(path), delta_schema(struct), mode="ignore", partition_by=partition_by or None)


@contextlib.contextmanager
def _parquet_write_conf(spark) -> Iterator[None]:
    previous = {k: spark.conf.get(k, None) for k in _PARQUET_WRITE_CONF}
    try:
        for k, v in _PARQUET_WRITE_CONF.items():
            spark.conf.set(k, v)
        yield
    finally:
        for k, v in previous.items():
            if v is None:
                spark.conf.unset(k)
            else:
                spark.conf.set(k, v)


def new_write_dir(prefix: str = "") -> str:
    """A relative directory name no other write uses: time-ordered for operators, uuid for uniqueness."""
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%S")
    return f"{prefix}w-{stamp}-{uuid.uuid4().hex[:12]}"


def spark_write_files(df, table_path: str | Path, rel_dir: str) -> None:
    """Write `df` as Parquet files into `<table_path>/<rel_dir>` (a directory that must not exist yet)."""
    target = Path(table_path) / rel_dir
    spark = df.sparkSession
    with _parquet_write_conf(spark):
        (
            df.write.mode("errorifexists")
            # Hadoop options travel with the write: no _SUCCESS marker inside a Delta table.
            .option("mapreduce.fileoutputcommitter.marksuccessfuljobs", "false")
            .option("compression", "snappy")
            .parquet(str(target))
        )


def arrow_write_files(table: pa.Table, table_path: str | Path, rel_dir: str) -> None:
    """`spark_write_files` for rows already in this process: one Parquet file into `<table_path>/<rel_dir>` (a
    directory that must not exist yet), written by pyarrow with what Spark's write is configured for: snappy,
    int64 microsecond UTC timestamps, standard 3-level lists."""
    target = Path(table_path) / rel_dir
    target.mkdir(parents=True, exist_ok=False)
    pq.write_table(table, str(target / f"part-00000-{uuid.uuid4()}-c000.snappy.parquet"), compression="snappy",
                   coerce_timestamps="us", use_compliant_nested_type=True)


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


def footer_bounds(path: str | Path, struct, partition_columns: Iterable[str] = ()) -> tuple[int, dict]:
    """A Parquet file's row count and, per top-level primitive column whose footer has statistics, its exact
    (null count, min, max) over all row groups: min/max None when the footer cannot give them, timestamps as
    microseconds since the epoch (UTC)."""
    md = pq.read_metadata(str(path))
    parts = set(partition_columns)
    index = {md.schema.column(i).path: i for i in range(md.num_columns)}
    out: dict = {}
    for field in struct.fields:
        i = index.get(field.name)  # nested leaves have dotted paths: not top-level primitives
        if field.name in parts or i is None or md.num_row_groups == 0:
            continue
        kind = field.dataType.typeName()
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


def file_stats(path: str | Path, struct, partition_columns: Iterable[str] = ()) -> tuple[str, int]:
    """Delta `stats` JSON of one Parquet file from its footer (no data read) and its row count.

    Null counts for every top-level primitive column; min/max for integers, booleans, strings and
    timestamps. Every min/max is a true bound of the file's values, as the Delta protocol requires and
    readers rely on to skip files: strings are cut to Delta's 32-character prefix (the max rounded up, see
    `truncate_max_string`), timestamps kept to the millisecond (min floored, max ceiled). A column gets both
    or neither (delta-rs reads a missing max as "below everything"), and none when its footer lacks them.
    """
    rows, bounds = footer_bounds(path, struct, partition_columns)
    kinds = {f.name: f.dataType.typeName() for f in struct.fields}
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


def _not_null_violations(stats_json: str, struct, partition_columns: Iterable[str]) -> list[str]:
    nulls = json.loads(stats_json)["nullCount"]
    parts = set(partition_columns)
    return [f.name for f in struct.fields
            if not f.nullable and f.name not in parts and nulls.get(f.name, 0) > 0]


def collect_add_actions(table_path: str | Path, rel_dir: str, struct,
                        partition_values: dict[str, str] | None = None) -> list[AddAction]:
    """Add actions (with stats) for the Parquet files Spark wrote into `<table_path>/<rel_dir>`.

    Files with no rows are deleted rather than committed. Hidden side files (Hadoop `.crc`) are removed.
    A non-nullable column holding nulls fails the write here, before anything is committed.
    """
    root = Path(table_path)
    base = root / rel_dir
    partition_values = dict(partition_values or {})
    actions: list[AddAction] = []
    if not base.is_dir():
        return actions  # nothing written, or deleted since: the caller's row check says which
    for entry in sorted(base.iterdir()):
        name = entry.name
        if name.startswith((".", "_")):
            entry.unlink()  # .crc checksums of the local file system, stray markers
            continue
        if not name.endswith(".parquet"):
            raise DeltaWriteError(f"unexpected file {entry} in a Spark Parquet output")
        stats, rows = file_stats(entry, struct, partition_values)
        bad = _not_null_violations(stats, struct, partition_values)
        if bad:
            raise DeltaWriteError(f"{entry}: nulls in non-nullable column(s) {', '.join(bad)}")
        if rows == 0:
            entry.unlink()
            continue
        st = entry.stat()
        actions.append(AddAction(
            path=f"{rel_dir}/{name}",
            size=st.st_size,
            partition_values=partition_values,
            modification_time=int(st.st_mtime * 1000),
            data_change=True,
            stats=stats,
        ))
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


def active_files(dt: DeltaTable) -> list[dict]:
    """The table's current add actions: relative path, size, partition values (strings)."""
    t = pa.table(dt.get_add_actions(flatten=False))
    parts = t.column("partition").to_pylist() if "partition" in t.column_names else [None] * t.num_rows
    return [
        {"path": p, "size": s, "partition_values": {k: (None if v is None else str(v)) for k, v in (pv or {}).items()}}
        for p, s, pv in zip(t.column("path").to_pylist(), t.column("size_bytes").to_pylist(), parts)
    ]


def commit(dt: DeltaTable, struct, actions: list, *, mode: str = "append",
           partition_by: list[str] | None = None, partition_filters=None,
           metadata: dict | None = None) -> int:
    """Commit `actions` as ONE Delta transaction and return the new table version."""
    dt.create_write_transaction(
        actions,
        mode=mode,
        schema=delta_schema(struct),
        partition_by=partition_by or None,
        partition_filters=partition_filters,
        commit_properties=CommitProperties(custom_metadata=metadata or None),
        post_commithook_properties=_KEEP_LOG,
    )
    dt.update_incremental()
    return dt.version()


def discard_dir(table_path: str | Path, rel_dir: str) -> None:
    """Best effort: delete files of a write that will not be committed (vacuum gets them otherwise)."""
    shutil.rmtree(Path(table_path) / rel_dir, ignore_errors=True)


def remove_empty_dirs(table_path: str | Path) -> None:
    """Drop directories left empty by a vacuum (delta-rs deletes files, never directories)."""
    root = Path(table_path)
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
    if not keep:
        return dt.vacuum(retention_hours=retention_hours, dry_run=False, enforce_retention_duration=False,
                         full=True, post_commithook_properties=_KEEP_LOG)
    # delta-rs' own keep_versions would keep every file of those versions, other snapshots' dropped files too
    root = Path(dt.table_uri.removeprefix("file://"))
    deleted = []
    for name in dt.vacuum(retention_hours=retention_hours, dry_run=True, enforce_retention_duration=False,
                          full=True):
        rel = _relative(root, name)
        if rel in keep:
            continue
        with contextlib.suppress(FileNotFoundError):
            (root / rel).unlink()
        deleted.append(name)
    return deleted


def _relative(root: Path, name: str) -> str:
    """A vacuum's file name (relative, absolute or a file:// URI) relative to the table root."""
    from urllib.parse import unquote

    s = unquote(name.removeprefix("file://"))
    p = Path(s)
    return str(p.relative_to(root)) if p.is_absolute() else s


_SAFE_VALUE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}$")


def check_partition_value(value: str) -> str:
    """Partition values become directory names and SQL literals: allow a safe alphabet only."""
    if not isinstance(value, str) or not _SAFE_VALUE.match(value):
        raise ValueError(
            f"invalid snapshot id {value!r}: use 1-128 characters from A-Z a-z 0-9 _ . - "
            "(starting with a letter or digit)")
    return value
