"""The one snapshot reader: which snapshot is served (the `runs` table, CONTRACT.md "Snapshots") and its tables
read at the Delta versions its run committed, without Spark.

A run records in its `runs` row (`table_versions`) the version each snapshot table's commit produced, and the
`offset_commits` history's version it left; every read of that snapshot opens the table AT that version. A rerun
of the id killed between its table commits and its `runs` row therefore leaves readers on the previous, complete
versions. A row without `table_versions` (written before the column existed) reads the latest version. Every
command, the HTTP API, `offsetlake sql` and the warehouse's own reads (`Warehouse.read_table`,
`latest_snapshot_id`) go through here.
"""
from __future__ import annotations

import atexit
import contextlib
import functools
import json
import os
import re
import threading
import time
import weakref
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence

import pyarrow as pa
import pyarrow.fs as pafs

from pipelines.io import retry, storage
from pipelines.io.delta_log import LogChecker, LogDamage, refuse_deep_commits
from pipelines.io.storage import Location

# Filters in the DNF form delta-rs/pyarrow take: [("group_id", "=", "g"), ("partition", "in", [0, 1])].
Filters = Sequence[tuple[str, str, Any]]

READABLE_STATUS = "succeeded"
# The history every run merges its records into before its snapshot's commits (`Warehouse.write_snapshot`), but a
# run given --other-cluster, whose summary warns so
HISTORY = "offset_commits"
WROTE_HISTORY = ("succeeded", "validation_failed")
OTHER_CLUSTER_WARNING = "--other-cluster:"
# Runs of this kind are the default snapshot; `what-if` runs (--as-of/--until-*) are read by id only. A runs row
# without a kind (written before the column existed) is scheduled.
SCHEDULED = "scheduled"


class ReadError(Exception):
    """Base of the errors reading a snapshot; the message is meant for the user."""


class NotAWarehouse(ReadError):
    """The warehouse directory is missing or is not an offsetlake warehouse (a usage error)."""


class SnapshotNotFound(ReadError):
    """No readable snapshot with that id (or no readable snapshot at all)."""


class GroupNotFound(ReadError):
    """The group does not exist in the chosen snapshot. With `group_id` and `snapshot` when the message is the reason
    alone, for whoever reports it to add the snapshot's nearest group ids (`index.unknown_group_message`)."""

    def __init__(self, message: str, group_id: str | None = None, snapshot: "Snapshot | None" = None):
        super().__init__(message)
        self.group_id, self.snapshot = group_id, snapshot


class DamagedTable(ReadError):
    """A table's file cannot be read as Parquet (truncated, overwritten): the table, and Arrow's reason, which names
    the file. `table` is the table's name (None where the raiser did not say), for what must name it alone (a
    Prometheus label)."""

    def __init__(self, message: str, table: str | None = None):
        super().__init__(message)
        self.table = table


@contextlib.contextmanager
def scanning(table: str):
    """A scan of `table`'s files: a file Arrow cannot read as Parquet, or a file the table's Delta log lists that is
    gone (deleted by hand, a vacuum), raised as a `DamagedTable` (any other I/O error stays an OSError)."""
    try:
        yield
    except pa.ArrowInvalid as e:
        raise DamagedTable(f"cannot read the warehouse's {table} table: {' '.join(str(e).split())}", table) from e
    except FileNotFoundError as e:
        # Arrow's I/O threads still hold this exception, and with its traceback the frames of the read (the reader
        # and its DuckDB connection): freed on one of those threads after the interpreter has finalized, they
        # aborted the process ("terminate called without an active exception", exit 134) after its error line
        e.__traceback__ = None
        reason = " ".join(retry.plain(str(e)).split())
        raise DamagedTable(f"cannot read the warehouse's {table} table: a file its Delta log lists is missing: "
                           f"{reason}", table) from None


def _partition_files(dt, snapshot_id: str) -> list[str]:
    """The files of partition `snapshot_id` of the Delta table `dt` at its version, relative to the table."""
    t = pa.table(dt.get_add_actions(flatten=True))
    if t.num_rows == 0 or "partition.snapshot_id" not in t.column_names:
        return []
    ids = t.column("partition.snapshot_id").cast(pa.string()).to_pylist()
    return [p for p, i in zip(t.column("path").to_pylist(), ids) if i == snapshot_id]


class SnapshotReader(Protocol):
    """What the serving side needs from storage. Implementations are read-only and thread-safe."""

    def runs(self) -> pa.Table | None:
        """The whole `runs` table (None if the warehouse has none yet)."""

    def runs_version(self) -> int | None:
        """A cheap token that changes whenever `runs` gets a commit (a new snapshot may be readable)."""

    def last_attempt(self) -> dict | None:
        """The newest rerun of a served id that left it served (`_attempts/`), as its runs row; None without one."""

    def writer_lock(self) -> dict | None:
        """The writer lock's record with `age_seconds` since its heartbeat; None when no run holds the warehouse."""

    def snapshot_table(
        self, table: str, snapshot: "Snapshot | str", *, filters: Filters | None = None,
        columns: list[str] | None = None,
    ) -> pa.Table | None:
        """Rows of a snapshot table for one snapshot, at the version its run pinned (None if the table does not
        exist)."""

    def history_table(
        self, table: str, *, filters: Filters | None = None, columns: list[str] | None = None,
        dictionary: tuple[str, ...] = (), version: int | None = None,
    ) -> pa.Table | None:
        """Rows of an unpartitioned table (`offset_commits`, `runs`) at `version` (None: the latest); None if it
        does not exist. The string columns named in `dictionary` may come dictionary-encoded (a log-sized scan
        then never builds their strings)."""


ATTEMPTS_DIR = "_attempts"
_ATTEMPT_NAME = re.compile(r"(?P<id>.+)\.(?P<stamp>\d{8}T\d{12}Z)\.json")  # `Warehouse._write_attempt`'s


ATTEMPT_STAMP = "%Y%m%dT%H%M%S%fZ"  # fixed width: its order as text is its order in time


def attempt_files(folder: storage.Location) -> list[tuple[str, str, str]]:
    """The attempts kept in `folder` (`_attempts/`), newest first: (stamp, snapshot id, file name); other names are
    passed over. The listing's base names, matched only: a Location or a parsed time per entry cost a second per
    50,000 files, on every /metrics and /overview."""
    named = ((m["stamp"], m["id"], info.base_name) for info in folder.listdir()
             if (m := _ATTEMPT_NAME.fullmatch(info.base_name)))
    return sorted(named, reverse=True)


def attempt_time(stamp: str) -> datetime | None:
    """When an attempt was recorded, from its file's stamp; None for digits that are no time (month 13)."""
    try:
        return datetime.strptime(stamp, ATTEMPT_STAMP).replace(tzinfo=timezone.utc)
    except ValueError:
        return None


def _iso_or_none(text) -> datetime | None:
    """An attempt row's ISO-8601 time as a UTC datetime; None when it holds none."""
    try:
        t = datetime.fromisoformat(text) if isinstance(text, str) else None
    except ValueError:
        return None
    return t if t is None or t.tzinfo is not None else t.replace(tzinfo=timezone.utc)


def _delta_log_version(path: "Path | Location") -> int | None:
    """Highest commit number in `_delta_log`; a directory listing, no JSON parsing (cheap enough per request)."""
    best = None
    if isinstance(path, Location):
        names = [os.path.basename(i.path) for i in (path / "_delta_log").listdir()]
    else:
        try:
            with os.scandir(path / "_delta_log") as it:
                names = [entry.name for entry in it]
        except FileNotFoundError:
            return None
    for name in names:
        if name.endswith(".json") and name[:-5].isdigit():
            v = int(name[:-5])
            if best is None or v > best:
                best = v
    return best


def _sql_literal(value: Any) -> str:
    """A SQL literal for DuckDB (values are inlined: binding a Python list would import numpy and pandas)."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    raise TypeError(f"unsupported filter value {value!r}")


# An `in` filter with more values than this is matched against a registered Arrow table (a semi-join) instead
# of a literal list, which DuckDB plans and evaluates slowly once it has thousands of entries.
INLINE_IN_MAX = 64


def _sql_where(filters: Filters, register=None) -> str:
    """DNF conjunction [(col, op, value)] -> a WHERE clause (ops: =, !=, <, <=, >, >=, in, not in).
    `register(values) -> name`, when given, makes a long `in` list a table the clause selects from."""
    parts = []
    for col, op, value in filters:
        ident = '"' + col.replace('"', '""') + '"'
        op = op.lower()
        if op in ("in", "not in"):
            values = list(value)
            if not values:
                parts.append("FALSE" if op == "in" else "TRUE")
                continue
            if register is not None and len(values) > INLINE_IN_MAX:
                parts.append(f"{ident} {op.upper()} (SELECT v FROM {register(values)})")
                continue
            parts.append(f"{ident} {op.upper()} ({', '.join(_sql_literal(v) for v in values)})")
        elif op in ("=", "==", "!=", "<", "<=", ">", ">="):
            if value is None:
                parts.append(f"{ident} IS {'NOT ' if op == '!=' else ''}NULL")
            else:
                parts.append(f"{ident} {'=' if op == '==' else op} {_sql_literal(value)}")
        else:
            raise ValueError(f"unsupported filter operator {op!r}")
    return " AND ".join(parts) if parts else "TRUE"


def _dataset_filter(filters: Filters, schema: pa.Schema):
    """DNF conjunction [(col, op, value)] -> a pyarrow dataset expression that keeps what `_sql_where` keeps (a
    null never matches; an empty `in` list matches nothing), values typed as the column is."""
    # imported here, not at module level: pyarrow.dataset ~0.3-1.4 s (it imports pandas) of import (python -X
    # importtime)
    import pyarrow.dataset as ds

    expr = ds.scalar(True)
    for col, op, value in filters:
        f, t = ds.field(col), schema.field(col).type
        op = op.lower()
        if op in ("in", "not in"):
            e = f.isin(pa.array(list(value), t))
            e = e if op == "in" else ~e & f.is_valid()
        elif value is None:
            e = f.is_valid() if op == "!=" else f.is_null()
        else:
            v = ds.scalar(pa.scalar(value, t))
            e = {"=": f == v, "==": f == v, "!=": f != v, "<": f < v, "<=": f <= v, ">": f > v, ">=": f >= v}.get(op)
            if e is None:
                raise ValueError(f"unsupported filter operator {op!r}")
        expr = expr & e
    return expr


def _close_reader(ref) -> None:
    reader = ref()
    if reader is not None:
        reader.close()


class _FastPathUnavailable(Exception):
    """The table needs a full Delta reader (deletion vectors, column mapping, ...): use delta-rs' dataset."""


class DeltaWarehouseReader:
    """`<warehouse>/<table>/` Delta tables. delta-rs replays the log (which Parquet files are live, pruned by
    the `snapshot_id` partition); the files are then read by DuckDB with the other filters in a WHERE, so a
    one-group read decodes only the vectors that hold the group instead of the whole snapshot, and nothing
    imports pyarrow.dataset/numpy/pandas on the CLI path. Tables whose protocol needs more than plain Parquet
    files (reader features such as deletion vectors or column mapping) are read through delta-rs' pyarrow
    dataset instead, as is anything the fast path cannot express."""

    def __init__(self, warehouse: "str | os.PathLike | Location", *, fast_path: bool = True, must_exist: bool = True):
        try:
            loc = storage.location(warehouse)
            # a local warehouse stays a Path (the serving path's per-request checks are plain stat calls)
            self.root = loc.local or loc
            if must_exist and not self.root.is_dir():
                what = "holds no objects" if loc.remote else "is not a directory"
                raise NotAWarehouse(f"warehouse {str(self.root)!r} {what}")
            if must_exist and not (self.root / "runs" / "_delta_log").is_dir():
                raise NotAWarehouse(f"{str(self.root)!r} is not an offsetlake warehouse (no runs table)")
        except storage.StorageError as e:
            raise NotAWarehouse(f"warehouse {e}") from None
        self.remote = loc.remote
        self.fast_path = fast_path
        self._duck = None
        self._duck_lock = threading.Lock()
        self._lock_beat: tuple[tuple, float] | None = None  # (a lock's heartbeat ahead of our clock, first seen)
        self._log = LogChecker()

    def table_path(self, table: str) -> "Path | Location | None":
        p = self.root / table
        return p if (p / "_delta_log").is_dir() else None

    def _cursor(self):
        # imported here, not at module level: duckdb ~0.3 s of import (python -X importtime)
        import duckdb

        with self._duck_lock:
            if self._duck is None:
                self._duck = duckdb.connect(
                    ":memory:", config={"autoinstall_known_extensions": False, "autoload_known_extensions": False}
                )
                if self.remote:
                    storage.enable_duckdb_s3(self._duck)
                # Closed before interpreter teardown: a DuckDB database destroyed during finalization can
                # abort the process ("terminate called without an active exception").
                atexit.register(_close_reader, weakref.ref(self))
            return self._duck.cursor()  # one cursor per read: DuckDB connections are not shared across threads

    def close(self) -> None:
        with self._duck_lock:
            if self._duck is not None:
                self._duck.close()
                self._duck = None

    def _read_fast(self, dt, partitions, filters, columns) -> pa.Table:
        # imported here, not at module level: duckdb ~0.3 s of import (python -X importtime)
        import duckdb

        proto = dt.protocol()
        if proto.min_reader_version > 1 and (proto.min_reader_version != 3 or proto.reader_features):
            raise _FastPathUnavailable(f"reader protocol {proto}")
        part_cols = list(dt.metadata().partition_columns)
        part_values = {}
        for col, op, value in partitions or ():
            if op != "=" or col not in part_cols:
                raise _FastPathUnavailable("partition filter")
            part_values[col] = value
        if set(part_cols) - set(part_values):
            raise _FastPathUnavailable("unbound partition column")
        schema = pa.schema(dt.schema().to_arrow())
        if filters and any(c in part_cols for c, _, _ in filters):
            raise _FastPathUnavailable("filter on a partition column")
        wanted = [f.name for f in schema] if columns is None else columns
        target = pa.schema([schema.field(c) for c in wanted])
        files = dt.file_uris(file_pruning_predicate=list(partitions)) if partitions else dt.file_uris()
        files = [f[len("file://"):] if f.startswith("file://") else f for f in files]
        if any("://" in f and not storage.is_remote(f) for f in files):
            raise _FastPathUnavailable("remote files")
        if not files:
            return target.empty_table()
        file_list = "[" + ", ".join(_sql_literal(f) for f in files) + "]"
        cur = self._cursor()
        registered: list[str] = []

        def register(values: list) -> str:
            name = f"_offsetlake_in_{len(registered)}"
            cur.register(name, pa.table({"v": pa.array(values)}))
            registered.append(name)
            return name

        def query(select: str) -> pa.Table:
            return cur.execute(f"SELECT {select} FROM read_parquet({file_list}, union_by_name = true, "
                               f"hive_partitioning = false) WHERE {_sql_where(filters or (), register)}"
                               ).to_arrow_table()

        stored = [c for c in wanted if c not in part_values]
        try:
            try:  # only the columns asked for: a history's wide columns cost more to read than its keys
                got = query(", ".join('"' + c.replace('"', '""') + '"' for c in stored) if stored else "*")
            except duckdb.BinderException:  # a column no file has yet (added since they were written)
                got = query("*")
        finally:
            for name in registered:
                cur.unregister(name)
            cur.close()
        arrays = []
        for f in target:
            if f.name in part_values:
                arrays.append(pa.array([part_values[f.name]] * got.num_rows, f.type))
            elif f.name in got.column_names:
                arrays.append(got.column(f.name).cast(f.type))
            else:  # a column added after these files were written
                arrays.append(pa.nulls(got.num_rows, f.type))
        return pa.Table.from_arrays(arrays, schema=target)

    def _open(self, table: str, version: int | None = None, snapshot_id: str | None = None):
        """The Delta table at `version` (None: the latest), or None when it was never written; `snapshot_id`: the
        snapshot that pinned `version`, whose commit it must be."""
        # imported here, not at module level: deltalake ~0.2 s of import (python -X importtime)
        from deltalake import DeltaTable
        from deltalake.exceptions import DeltaError

        path = self.table_path(table)
        if path is None:
            if version is not None:  # the run committed it: gone since, not a table of a later version's
                raise DamagedTable(f"cannot read the warehouse's {table} table: the snapshot's run committed its "
                                   f"version {version}, but {self.root / table} holds no Delta log", table)
            if table == HISTORY and (run := self._history_writer()) is not None:
                # read as None it was no commit at all: `changes` left out every offset change, `sql` counted none
                raise DamagedTable(f"cannot read the warehouse's {table} table: run {run!r} added its records to it, "
                                   f"but {self.root / table} holds no Delta log", table)
            return None
        if version is not None:
            # delta-rs looks for a version past the log's last one commit by commit (10**8: 8 s; a pinned 2**62
            # hung every read of the snapshot), and a negative one is its OverflowError
            last = retry.call(lambda: _delta_log_version(path), f"{path} (list)") if self.remote \
                else _delta_log_version(path)
            if not 0 <= version <= (-1 if last is None else last):
                raise DamagedTable(f"cannot read the warehouse's {table} table: the snapshot's run committed its "
                                   f"version {version}, but its Delta log at {path} ends at version {last}", table)
        opened = functools.partial(DeltaTable, str(path), version=version,
                                   storage_options=storage.storage_options(str(path)))
        try:
            refuse_deep_commits(storage.location(path), version)  # before delta-rs overflows its stack on one
            dt = retry.call(opened, f"{path} (open)") if self.remote else opened()
        except (DeltaError, OSError) as e:  # a commit file truncated or garbled, or the pinned one gone
            if isinstance(e, OSError) and e.errno is not None:
                raise  # the disk's or the system's: not the log's damage
            # delta-rs raises a log it cannot list (a file name its object_store path parser refuses) as an OSError;
            # its first line: the rest is a Rust backtrace when RUST_BACKTRACE is set
            reason = retry.plain(str(e)).strip().split("\n", 1)[0].strip()
            raise DamagedTable(f"cannot read the warehouse's {table} table (its Delta log at {path}): {reason}",
                               table) from None
        pinned = snapshot_id if version is not None else None
        check = functools.partial(self._log.check, path, dt.version(), snapshot_id=pinned,
                                  partition_files=lambda: _partition_files(dt, pinned))
        try:
            retry.call(check, f"{path} (log)") if self.remote else check()
        except LogDamage as e:
            raise DamagedTable(f"cannot read the warehouse's {table} table (its Delta log at {path}): {e}",
                               table) from None
        return dt

    def _dataset(self, table: str, dt, **options):
        """`dt`'s pyarrow dataset, its files read through pyarrow's own filesystem rather than delta-rs' Python one.
        Arrow's reader threads drop a Python file's last reference by taking the GIL, and one still doing so while
        the interpreter finalized aborted the process ("terminate called without an active exception", exit 134)
        after the command had printed its answer. The log's check (`delta_log._inside`) has made sure that every
        data file lies under the table's root."""
        loc = storage.location(self.root / table)
        return dt.to_pyarrow_dataset(filesystem=pafs.SubTreeFileSystem(loc.path, loc.fs), **options)

    def _history_writer(self) -> str | None:
        """A run that wrote its records into the history (written, and its summary's warnings do not say
        --other-cluster), None when none did; a row without the summary a rebuild writes says nothing."""
        for snap in snapshots_from_runs(self.runs()):
            if snap.status not in WROTE_HISTORY:
                continue
            try:
                warnings = json.loads(snap.run.get("summary") or "{}").get("warnings")
            except (TypeError, ValueError, AttributeError):
                continue
            if isinstance(warnings, list) and not any(str(w).startswith(OTHER_CLUSTER_WARNING) for w in warnings):
                return snap.snapshot_id
        return None

    def _read(self, table: str, partitions, filters, columns, version: int | None = None,
              snapshot_id: str | None = None) -> pa.Table | None:
        """The rows, read again whole when the store fails transiently mid-read (`io.retry`)."""
        read = functools.partial(self._read_once, table, partitions, filters, columns, version, snapshot_id)
        return retry.call(read, f"{self.root}/{table} (read)") if self.remote else read()

    def _read_once(self, table: str, partitions, filters, columns, version: int | None = None,
                   snapshot_id: str | None = None) -> pa.Table | None:
        dt = self._open(table, version, snapshot_id)
        if dt is None:
            return None
        present = dt.schema().to_arrow().names if columns is not None else None
        if columns is not None:
            columns = [c for c in columns if c in present]
        if self.fast_path:
            # imported here, not at module level: duckdb ~0.07 s of import (python -X importtime)
            import duckdb

            try:
                return self._read_fast(dt, partitions, filters, columns)
            except (_FastPathUnavailable, duckdb.Error, TypeError, ValueError, pa.ArrowException):
                pass
        dataset = self._dataset(table, dt, file_pruning_predicate=list(partitions) if partitions else None)
        with scanning(table):
            return dataset.to_table(columns=columns, filter=_dataset_filter(
                filters, pa.schema(dt.schema().to_arrow())) if filters else None)

    def runs(self) -> pa.Table | None:
        return self._read("runs", None, None, None)

    def runs_version(self) -> int | None:
        return _delta_log_version(self.root / "runs")

    def table_version(self, table: str) -> int | None:
        return _delta_log_version(self.root / table)

    def writer_lock(self) -> dict | None:
        """The writer lock's record (`io.lock.WriterLock.holder`, with `age_seconds` since its heartbeat), None when
        no run holds the warehouse (or the lock cannot be read)."""
        # imported here, not at module level: the serving path reads the lock for /metrics alone
        from pipelines.io.lock import WriterLock

        try:
            got = WriterLock(self.root).holder_and_beat()
        except (OSError, storage.StorageError):
            return None
        if got is None:
            return None
        holder, beat = got
        if not WriterLock.ahead(holder):
            return holder
        # stamped ahead of our clock (its host's clock is ahead): the age it says is negative while its run lives
        # and after it died, so the stopped-run alert never fired; its age is how long this reader has seen it
        # unchanged (0 when first seen: no more is known)
        seen = self._lock_beat
        if seen is None or seen[0] != beat:
            seen = self._lock_beat = (beat, time.monotonic())
        return {**holder, "age_seconds": round(time.monotonic() - seen[1], 1)}

    def last_attempt(self) -> dict | None:
        """The newest scheduled rerun of a served id kept aside in `_attempts/` (`Warehouse.record_failure`: failed,
        killed or validation failed, the served row staying as it was), or None. Its runs row, with
        `snapshot_id`, `started_at` and `recorded_at` (when the attempt was written) as UTC datetimes. A file that
        is no attempt's row (altered, not JSON) is passed over: the next one down is the newest readable."""
        folder = storage.location(self.root).join(ATTEMPTS_DIR)
        try:
            named = attempt_files(folder)
        except (OSError, storage.StorageError):
            return None
        for stamp, snapshot_id, name in named:
            recorded = attempt_time(stamp)
            if recorded is None:
                continue
            try:
                row = json.loads(folder.join(name).read_text())
            except (OSError, storage.StorageError, ValueError):
                continue
            if isinstance(row, dict) and row.get("kind") in (None, "scheduled"):  # what `newest_run` counts
                return {**row, "snapshot_id": snapshot_id, "recorded_at": recorded,
                        "started_at": _iso_or_none(row.get("started_at"))}
        return None

    def snapshot(self, snapshot: "Snapshot | str") -> "Snapshot":
        """`snapshot` itself, or the snapshot of that id as its `runs` row describes it (any status: the warehouse
        reads failed ids too); an id without a row reads the latest versions."""
        if isinstance(snapshot, Snapshot):
            return snapshot
        for s in snapshots_from_runs(self.runs()):
            if s.snapshot_id == snapshot:
                return s
        return Snapshot(snapshot, None, None, None, None, {})

    def snapshot_table(self, table, snapshot, *, filters=None, columns=None):
        snap = self.snapshot(snapshot)
        return self._read(table, [("snapshot_id", "=", snap.snapshot_id)], filters, columns,
                          version=snap.version_of(table), snapshot_id=snap.snapshot_id)

    def snapshot_dataset(self, table: str, snapshot: "Snapshot | str"):
        """A pyarrow dataset of one snapshot's partition of `table` at its pinned version (None if the table does
        not exist): `offsetlake sql` scans it lazily, DuckDB pushing its filters down."""
        snap = self.snapshot(snapshot)
        dt = self._open(table, snap.version_of(table), snap.snapshot_id)
        if dt is None:
            return None
        return self._dataset(table, dt, file_pruning_predicate=[("snapshot_id", "=", snap.snapshot_id)])

    def snapshot_file_uris(self, table: str, snapshot: "Snapshot | str") -> list[str] | None:
        """The Parquet files of one snapshot's partition of `table` at its pinned version (None: no table)."""
        snap = self.snapshot(snapshot)
        dt = self._open(table, snap.version_of(table), snap.snapshot_id)
        if dt is None:
            return None
        return dt.file_uris(file_pruning_predicate=[("snapshot_id", "=", snap.snapshot_id)])

    def history_dataset(self, table: str, version: int | None = None):
        """A pyarrow dataset of an unpartitioned table at `version` (None: the latest; None if it does not exist)."""
        dt = self._open(table, version)
        return None if dt is None else self._dataset(table, dt)

    def history_table(self, table, *, filters=None, columns=None, dictionary=(), version=None):
        if dictionary and not self.remote:
            return self._read_dictionary(table, filters, columns, dictionary, version)
        return self._read(table, None, filters, columns, version=version)

    def _read_dictionary(self, table, filters, columns, dictionary, version) -> pa.Table | None:
        """A whole-table scan through delta-rs' pyarrow dataset, with `dictionary`'s columns read as the Parquet
        files store them (dictionary-encoded): on a history of millions of rows that is several times faster than
        building every string and encoding them again."""
        # imported here, not at module level: pyarrow.dataset ~0.3-1.4 s (it imports pandas) of import (python -X
        # importtime)
        import pyarrow.dataset as ds

        dt = self._open(table, version)
        if dt is None:
            return None
        schema = pa.schema(dt.schema().to_arrow())
        if columns is not None:
            columns = [c for c in columns if c in schema.names]
        options = ds.ParquetReadOptions(dictionary_columns={c for c in dictionary if c in schema.names})
        with scanning(table):
            return self._dataset(table, dt, parquet_read_options=options).to_table(
                columns=columns, filter=_dataset_filter(filters, schema) if filters else None)


@dataclass(frozen=True)
class Snapshot:
    """One snapshot as its (latest) `runs` row describes it."""

    snapshot_id: str
    status: str | None
    started_at: datetime | None
    finished_at: datetime | None
    as_of: datetime | None
    run: dict = field(compare=False, hash=False, repr=False)

    @property
    def readable(self) -> bool:
        return self.status == READABLE_STATUS

    @property
    def kind(self) -> str:
        return self.run.get("kind") or SCHEDULED

    @property
    def is_default_candidate(self) -> bool:
        """Readable and scheduled: what a reader without a snapshot id may be given."""
        return self.readable and self.kind == SCHEDULED

    @property
    def cache_key(self) -> tuple:
        """Changes when the snapshot is rebuilt under the same id (a rerun replaces it)."""
        return (self.snapshot_id, self.started_at, self.finished_at, tuple(sorted(self.table_versions.items())))

    @property
    def table_versions(self) -> dict[str, int]:
        """Table -> the Delta version this snapshot's commit produced, `offset_commits` -> the history's as its run
        left it (empty for a run written before `runs.table_versions` existed: those read the latest versions)."""
        pinned = self.run.get("table_versions")
        if not pinned:
            return {}
        items = pinned.items() if isinstance(pinned, dict) else pinned  # Arrow map: (key, value) pairs
        return {str(k): int(v) for k, v in items if v is not None}

    def version_of(self, table: str) -> int | None:
        """The version to read `table` at for this snapshot; None: the latest."""
        return self.table_versions.get(table)

    @functools.cached_property  # the summary's JSON parsed once per snapshot, not per request
    def log_until(self) -> datetime | None:
        """How far the snapshot's history goes: the newest time its log speaks for (`RunSummary.log_until`: its
        newest record's, or its --until-time cut), its as_of when the run did not record one. A what-if run's
        `--as-of` is only the clock of its expiry and lag: one before the log's end leaves the records after it in
        the state, so in its history too; one after it adds no commit the run did not read."""
        raw = self.run.get("summary")
        try:
            summary = json.loads(raw) if isinstance(raw, str) else raw
        except ValueError:
            summary = None
        until = _iso_or_none(summary.get("log_until")) if isinstance(summary, dict) else None
        return until if until is not None else self.as_of

    @property
    def history_end(self) -> datetime | None:
        """The latest time a view may be asked about: the log's end (`log_until`), or the as_of past it."""
        ends = [t for t in (self.as_of, self.log_until) if t is not None]
        return max(ends, key=lambda t: t if t.tzinfo is not None else t.replace(tzinfo=timezone.utc)) \
            if ends else None


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def column_values(col: pa.Array | pa.ChunkedArray) -> list:
    """`col.to_pylist()`, except that timestamps become UTC datetimes computed here: pyarrow's own conversion
    imports pandas (~0.25 s), which would be most of a `describe`'s wall time."""
    t = col.type
    if not pa.types.is_timestamp(t):
        return col.to_pylist()
    micros = col.cast(pa.timestamp(t.unit)).cast(pa.timestamp("us"), safe=False).cast(pa.int64()).to_pylist()
    tz = timezone.utc if t.tz is not None else None
    base = _EPOCH if tz is not None else _EPOCH.replace(tzinfo=None)
    return [None if v is None else base + timedelta(microseconds=v) for v in micros]


def table_rows(t: pa.Table) -> list[dict]:
    """`t.to_pylist()` through column_values (no pandas import for timestamp columns)."""
    names = t.column_names
    return [dict(zip(names, vals)) for vals in zip(*(column_values(c) for c in t.columns))] if names else [
        {} for _ in range(t.num_rows)
    ]


def _ts_key(t: datetime | None) -> datetime:
    return t if t is not None else _EPOCH


def run_order(row: dict) -> tuple:
    """Runs oldest first: by finished_at (a run still going, by started_at), then started_at, then id."""
    finished, started = row.get("finished_at"), row.get("started_at")
    return (_ts_key(finished or started), _ts_key(started), row.get("snapshot_id") or "")


def snapshots_from_runs(runs: pa.Table | None) -> list[Snapshot]:
    """Every snapshot id with its latest `runs` row (by finished_at, then started_at), oldest first."""
    if runs is None or runs.num_rows == 0:
        return []
    latest: dict[str, dict] = {}
    for row in table_rows(runs):
        sid = row.get("snapshot_id")
        if sid is None:
            continue
        prev = latest.get(sid)
        key = (_ts_key(row.get("finished_at")), _ts_key(row.get("started_at")))
        if prev is None or key >= (_ts_key(prev.get("finished_at")), _ts_key(prev.get("started_at"))):
            latest[sid] = row
    snaps = [
        Snapshot(sid, r.get("status"), r.get("started_at"), r.get("finished_at"), r.get("as_of"), r)
        for sid, r in latest.items()
    ]
    snaps.sort(key=lambda s: run_order(s.run))
    return snaps


def pick_snapshot(snaps: list[Snapshot], snapshot_id: str | None) -> Snapshot:
    """The requested snapshot (any kind), or the latest succeeded scheduled one (by finished_at): a what-if run is
    reached by its id only. Raises SnapshotNotFound."""
    if snapshot_id is None:
        readable = [s for s in snaps if s.is_default_candidate]
        if not readable:
            raise SnapshotNotFound("the warehouse has no succeeded scheduled snapshot yet")
        return readable[-1]
    for s in snaps:
        if s.snapshot_id == snapshot_id:
            if not s.readable:
                raise SnapshotNotFound(f"snapshot {snapshot_id!r} is not readable (status {s.status!r})")
            return s
    raise SnapshotNotFound(f"snapshot {snapshot_id!r} does not exist")


def resolve_snapshot(reader: SnapshotReader, snapshot_id: str | None = None) -> Snapshot:
    return pick_snapshot(snapshots_from_runs(reader.runs()), snapshot_id)


def iso(t: datetime) -> str:
    """UTC ISO-8601 with a Z, the way every serving answer prints a timestamp."""
    if t.tzinfo is None:
        t = t.replace(tzinfo=timezone.utc)
    return t.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")


def jsonable(value: Any, leaf: Callable[[Any], Any] | None = None) -> Any:
    """Arrow's Python values -> JSON values (timestamps as ISO strings, map columns as objects). `leaf`, when
    given, is tried first at every level (a caller's own types); it returns NotImplemented for the others."""
    if leaf is not None:
        out = leaf(value)
        if out is not NotImplemented:
            return out
    if isinstance(value, datetime):
        return iso(value)
    if isinstance(value, dict):
        return {k: jsonable(v, leaf) for k, v in value.items()}
    if isinstance(value, list):
        if value and all(isinstance(v, tuple) and len(v) == 2 for v in value):  # an Arrow map column
            return {str(k): jsonable(v, leaf) for k, v in value}
        return [jsonable(v, leaf) for v in value]
    if isinstance(value, tuple):
        return [jsonable(v, leaf) for v in value]
    if isinstance(value, bytes):
        return value.hex()
    return value


# `runs` columns holding JSON text (schemas/tables.py): listed as the objects they hold.
RUN_JSON_COLUMNS = ("validation", "summary")


def run_summary(s: Snapshot) -> dict:
    """A snapshot as the API and the CLI list it: its id, status, times, kind and the whole runs row, with its
    JSON columns as JSON objects (text that does not parse is left as it is)."""
    run = {k: v for k, v in s.run.items() if k != "snapshot_id"}
    run["kind"] = s.kind
    counts = run.get("record_type_counts")
    if isinstance(counts, list):  # Arrow map -> list of (key, value)
        run["record_type_counts"] = {str(k): v for k, v in counts}
    for name in RUN_JSON_COLUMNS:
        raw = run.get(name)
        if isinstance(raw, str):
            try:
                run[name] = json.loads(raw) if raw else None
            except ValueError:
                pass
    return {"snapshot_id": s.snapshot_id, **jsonable(run)}
