"""The snapshot warehouse: one Delta table per contract table, every run kept as a `snapshot_id` partition.

Layout (CONTRACT.md "Snapshots"):
    <warehouse>/<table>/             one Delta table per `schemas.tables.TABLES` entry
        snapshot_id=<id>/w-…/*.parquet   snapshot tables, partitioned by snapshot_id
    <warehouse>/offset_commits/      history, one row per (offsets_partition, record_offset), unpartitioned
    <warehouse>/runs/                one row per snapshot_id, written by delta-rs from Arrow
    <warehouse>/_checkpoints/        incremental-run checkpoints (see `checkpoint.py`)
    <warehouse>/_scratch/            the files a run's tasks hand on to its write (see `scratch.py`)
    <warehouse>/_lock                the writer lock of the run in flight (see `lock.py`)
    <warehouse>/_attempts/           failed reruns of a served snapshot id (the served row stays as it was)

Snapshot rules: a snapshot table write replaces exactly that snapshot's partition in ONE Delta commit
(remove old files + add new ones); every table is staged before the first commit, and the `runs` row is
written only when the run ends (`succeeded`, `validation_failed` or `failed`), with the Delta version each
table's commit produced (`table_versions`). Readers (`pipelines/io/snapshots.py`) read a snapshot's tables at
those versions, so a reader taking the latest succeeded (scheduled) snapshot never sees a half-written one, and
a rerun of a served id leaves it served, at its previous versions, until the rerun's `runs` row is written, even
when the rerun dies between its table commits. Single writer per warehouse: the run holds `_lock`, and `retain`
(whose vacuum deletes every file no commit references, except those a kept snapshot's pinned versions still
read) runs under it, a run's own or one it takes for its clean-up.
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import functools
import json
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Literal
from urllib.parse import unquote

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable, write_deltalake
from deltalake.transaction import CommitProperties

from pipelines.io import cluster as clusters
from pipelines.io import delta, retry, storage
from pipelines.io.lock import LockHeldError, WriterLock, describe_holder
from pipelines.io.snapshots import (ATTEMPT_STAMP, ATTEMPTS_DIR, DeltaWarehouseReader, Snapshot, attempt_files,
                                     pick_snapshot, run_order, scanning, snapshots_from_runs)
from pipelines.io.snapshots import SnapshotNotFound as _SnapshotNotFound
from pipelines.io.table_rows import (Aside, ArrowRows, BatchMap, FrameRows, Held, StagedFiles, TableRows, Written, check_columns,
                                     with_snapshot_id)
from schemas.tables import DECISION_COLUMNS, FINAL_OUTCOMES, OUTCOME_RANK, SNAPSHOT_TABLES, TABLES
from schemas.tables import columns as table_columns

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

RUN_STATUSES = ("running", "succeeded", "failed", "validation_failed")
# `scheduled` runs form the served history and the incremental chain; `what-if` runs (--as-of/--until-*) are
# kept apart, read by id only. A row without a kind (written before the column existed) is `scheduled`.
RUN_KINDS = ("scheduled", "what-if")
# `runs.status` of a run that did not give a snapshot to serve
FAILED_STATUSES = ("failed", "validation_failed")
SCHEDULED = "scheduled"
# Final statuses `write_snapshot` may record; a snapshot with `validation_failed` is kept but not served.
_FINAL_WRITE_STATUSES = ("succeeded", "validation_failed")
_OFFSET_KEYS = ("offsets_partition", "record_offset")
# Up to this many incoming offset_commits rows, the history is pruned to their keys by a broadcast semi join.
_BROADCAST_KEYS_MAX = 1_000_000
#: A run whose history rows are in this process merges them here (`_merge_in_hand`) when the history files they may
#: meet hold at most this many rows (their keys and outcomes are read into memory: ~40 bytes a row); past it, Spark
#: merges them.
_IN_HAND_HISTORY_MAX_ROWS = 5_000_000
#: Tables `retain` works on at once, and a snapshot's commits at once.
_RETAIN_THREADS = _COMMIT_THREADS = 4


class WarehouseError(RuntimeError):
    """The warehouse cannot do what was asked (bad input tables, unknown table, …)."""


class NoSnapshotError(LookupError):
    """No snapshot with the wanted status exists (yet) in this warehouse."""


def _history_files(dt) -> list[dict]:
    """The history's files with what their Delta stats say: the range of offsets partitions and record offsets
    (None when a file has no stats) and whether it may hold a `pending` row (what an upgrade can change)."""
    t = delta.add_actions(dt, flatten=True)

    def col(name: str) -> list:
        return t.column(name).to_pylist() if name in t.column_names else [None] * t.num_rows

    out = []
    for path, rows, nulls, low, top, p0, p1, o0, o1 in zip(
            col("path"), col("num_records"), col("null_count.txn_outcome"), col("min.txn_outcome"),
            col("max.txn_outcome"),
            col("min.offsets_partition"), col("max.offsets_partition"), col("min.record_offset"),
            col("max.record_offset")):
        all_null = rows is not None and nulls is not None and nulls == rows
        out.append({"path": path, "rows": rows, "partitions": None if None in (p0, p1) else (p0, p1),
                    "offsets": None if None in (o0, o1) else (o0, o1),
                    "may_hold_pending": not all_null and (None in (low, top) or low <= "pending" <= top)})
    return out


def _met_files(dt, incoming: pa.Table, known_below: dict[int, int]):
    """(fresh, files) of history rows in hand (`incoming`) against the history `dt`: which rows lie at or above
    their partition's mark (`known_below`; below it a row can only upgrade a pending one), and the history files
    such rows may meet: those that may hold a pending row, and those whose stats overlap the fresh rows."""
    part = incoming.column("offsets_partition").to_numpy(zero_copy_only=False)
    offset = incoming.column("record_offset").to_numpy(zero_copy_only=False)
    marks = np.zeros(len(part), np.int64)
    for p, o in known_below.items():
        marks[part == int(p)] = int(o)
    fresh = offset >= marks
    above = pa.table({"p": part[fresh], "o": offset[fresh]}).group_by("p").aggregate([("o", "min"), ("o", "max")])
    ranges = list(zip(*(above.column(c).to_pylist() for c in ("p", "o_min", "o_max"))))
    return fresh, [f for f in _history_files(dt) if f["may_hold_pending"] or _overlaps(f, ranges)]


def _pending_rows(batch: pa.RecordBatch):
    """The rows of a history batch whose transaction was still open."""
    return pc.equal(batch.column("txn_outcome"), "pending")


def _overlaps(f: dict, ranges: list[tuple[int, int, int]]) -> bool:
    """Whether file `f` may hold a key of `ranges` ((offsets partition, lowest offset, highest offset) each)."""
    if f["partitions"] is None or f["offsets"] is None:
        return True
    (p0, p1), (o0, o1) = f["partitions"], f["offsets"]
    return any(p0 <= p <= p1 and lo <= o1 and hi >= o0 for p, lo, hi in ranges)


def _add_rows(adds: list) -> int:
    return sum(json.loads(a.stats)["numRecords"] for a in adds)


def _utcnow() -> _dt.datetime:
    return _dt.datetime.now(_dt.timezone.utc)


def _to_utc(value) -> _dt.datetime | None:
    """UTC-aware datetime from a datetime (naive = UTC) or an ISO-8601 string (no zone = UTC)."""
    if value is None:
        return None
    if isinstance(value, str):
        value = _dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    if not isinstance(value, _dt.datetime):
        raise WarehouseError(f"expected a datetime or ISO-8601 string, got {value!r}")
    if value.tzinfo is None:
        return value.replace(tzinfo=_dt.timezone.utc)
    return value.astimezone(_dt.timezone.utc)


def _json_text(value) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, default=str)


def _check_columns(columns: list[str], table: str, snapshot_id: str | None) -> None:
    wrong = check_columns(columns, table, snapshot_id)
    if wrong:
        raise WarehouseError(f"{table}: the rows do not match the contract; " + "; ".join(wrong))


def _stamped(batches: Iterator[pa.RecordBatch], *, snapshot_id: str, seen: HistoryKeys | None
             ) -> Iterator[pa.RecordBatch]:
    """Executor side: history rows with this run's `snapshot_id` (`seen`: only those whose record the history does
    not hold yet)."""
    cache: dict = {}
    wanted = table_columns("offset_commits")
    for batch in batches:
        batch = batch.select([c for c in wanted if c in batch.schema.names])
        if seen is not None:
            batch = seen.unseen(batch, cache)
        if batch.num_rows:
            yield with_snapshot_id(batch, snapshot_id)


@dataclass(frozen=True)
class HistoryKeys:
    """The records (offsets partition, record offset) the history holds, looked up where some rows may meet them:
    each history file's Delta stats bound its offsets partitions and record offsets, so only the files whose bounds
    take in a row are opened, and of those only the two key columns. What a what-if run adds to the history is
    found with it (`Warehouse.stage_history`). Picklable: a task filters the rows it writes with it."""

    table_uri: str
    files: tuple[tuple[str, dict], ...]  # (path relative to the table, its stats as `_history_files` gives them)

    @classmethod
    def of(cls, dt, table_uri: str) -> "HistoryKeys":
        return cls(table_uri, tuple((unquote(f["path"]), f) for f in _history_files(dt)))

    def _keys(self, rel: str, cache: dict | None) -> pa.Table:
        if cache is not None and rel in cache:
            return cache[rel]
        keys = delta.read_table_files(self.table_uri, [rel], TABLES["offset_commits"], columns=list(_OFFSET_KEYS))
        if cache is not None:
            cache[rel] = keys
        return keys

    def unseen(self, rows, cache: dict | None = None):
        """The rows of `rows` (a table or batch of history rows) whose record the history does not hold, in their
        order. `cache`: the key columns of files already read (by path), for a caller that asks again."""
        if rows.num_rows == 0 or not self.files:
            return rows
        part = np.asarray(rows.column("offsets_partition"))
        offset = np.asarray(rows.column("record_offset"))
        spans = pa.table({"p": part, "o": offset}).group_by("p").aggregate([("o", "min"), ("o", "max")])
        ranges = list(zip(*(spans.column(c).to_pylist() for c in ("p", "o_min", "o_max"))))
        read = [self._keys(rel, cache) for rel, f in self.files if _overlaps(f, ranges)]
        known = pa.concat_tables(read) if read else None
        if known is None or known.num_rows == 0:
            return rows
        known_part = np.asarray(known.column("offsets_partition"))
        known_offset = np.asarray(known.column("record_offset"))
        seen = np.zeros(len(part), bool)
        for p in np.unique(part):
            mine = part == p
            seen[mine] = np.isin(offset[mine], known_offset[known_part == p])
        return rows.filter(pa.array(~seen)) if seen.any() else rows


#: A streamed shard's history file is closed and another opened past this size (Parquet bytes written).
HISTORY_FILE_BYTES = 256 * 1024 * 1024


@dataclass(frozen=True)
class HistoryStage:
    """Where the tasks that build a run's history write its files before the run commits them: two new
    directories of the history table (settled rows in files of one offsets partition, rows of open transactions in
    `pending-*` files), as `Warehouse._write_history` lays them out. Picklable: a task writes with it."""

    table_uri: str
    settled: str
    pending: str
    snapshot_id: str
    seen: HistoryKeys | None = None  # a what-if run's: the history it only adds to (its rows not held yet)

    def writer(self, part: int, roll_bytes: int = HISTORY_FILE_BYTES) -> "HistoryWriter":
        """Executor side: a writer of one offsets partition's history as a task settles it window by window."""
        return HistoryWriter(self, part, roll_bytes)


class HistoryWriter:
    """One offsets partition's history written as it is settled (`coordinator.streamed`): its settled rows into
    files of `roll_bytes` at most (give or take a row group), its rows still pending at the end into a `pending-*`
    file, laid out as `Warehouse._write_history` lays them."""

    def __init__(self, stage: HistoryStage, part: int, roll_bytes: int) -> None:
        self.stage, self.part, self.roll_bytes = stage, part, roll_bytes
        self.current: delta.FileWriter | None = None
        self.files: list[tuple[delta.WrittenFile, bool]] = []

    def _rows(self, history: pa.Table) -> pa.Table:
        rows = history.select(table_columns("offset_commits"))
        if self.stage.seen is not None:
            rows = self.stage.seen.unseen(rows)
        return with_snapshot_id(rows, self.stage.snapshot_id)

    def write(self, settled: pa.Table) -> None:
        if not settled.num_rows:
            return
        if self.current is None:
            self.current = delta.FileWriter(self.stage.table_uri, self.stage.settled, TABLES["offset_commits"],
                                            self.part)
        self.current.write(self._rows(settled))
        if self.current.bytes_written >= self.roll_bytes:
            self._roll()

    def _roll(self) -> None:
        if self.current is not None:
            written = self.current.close()
            if written is not None:
                self.files.append((written, False))
            self.current = None

    def close(self, pending: pa.Table) -> list[tuple[delta.WrittenFile, bool]]:
        """The files written, (file, aside), with `pending` (the rows of transactions still open) set aside."""
        self._roll()
        if pending.num_rows:
            aside = delta.FileWriter(self.stage.table_uri, self.stage.pending, TABLES["offset_commits"], self.part)
            try:
                aside.write(self._rows(pending))
            except BaseException:
                aside.abort()
                raise
            written = aside.close()
            if written is not None:
                self.files.append((written, True))
        return self.files

    def abort(self) -> None:
        if self.current is not None:
            self.current.abort()
            self.current = None


@dataclass
class StagedHistory:
    """A run's history as its tasks wrote it (`HistoryStage`), not committed: a write's rows
    (`io.table_rows.TableRows`) already written. The history merge commits the files as they are when the table is
    still empty (or they hold only rows it lacks: a what-if run's), else merges their rows. `discard` deletes them
    unless they were committed."""

    held: ClassVar[Held] = "staged"
    clustered: ClassVar[bool] = True
    stage: HistoryStage
    files: list[tuple[delta.WrittenFile, bool]]  # (file, set aside: a `pending-*` file)
    spark: SparkSession
    committed: bool = False

    @property
    def column_names(self) -> list[str]:
        return table_columns("offset_commits")

    def conformed(self, table: str, snapshot_id: str | None) -> StagedHistory:
        """As they are: the tasks wrote the contract's rows."""
        return self

    def _rels(self) -> list[str]:
        return [f"{self.stage.pending if aside else self.stage.settled}/{f.name}" for f, aside in self.files]

    def frame(self) -> DataFrame:
        """The rows as a DataFrame (read from the files by the tasks)."""
        return delta.read_frame_files(self.spark, self.stage.table_uri, self._rels(), TABLES["offset_commits"])

    def to_frame(self, spark: SparkSession | None) -> DataFrame:
        return self.frame()

    def to_arrow(self) -> pa.Table:
        return delta.read_table_files(self.stage.table_uri, self._rels(), TABLES["offset_commits"])

    def staged(self) -> StagedFiles:
        return StagedFiles(self.stage.settled, self.stage.pending,
                           tuple(f for f, aside in self.files if not aside), tuple(f for f, aside in self.files if aside),
                           filtered=self.stage.seen is not None, committed=self._committed)

    def _committed(self, landed: bool) -> None:
        self.committed = landed

    def write_files(self, table_path: str | storage.Location, rel_dir: str, table_schema: pa.Schema, *,
                    partition_columns: tuple[str, ...] = (), split_by: str | None = None,
                    aside: Aside | None = None, through: BatchMap | None = None) -> Written:
        """Written again (their files are read in no particular order: sorted back into record order)."""
        frame = self.frame().repartition("offsets_partition").sortWithinPartitions(*_OFFSET_KEYS)
        return FrameRows(frame, clustered=True).write_files(
            table_path, rel_dir, table_schema, partition_columns=partition_columns, split_by=split_by, aside=aside,
            through=through)

    def discard(self) -> None:
        if not self.committed:
            for rel in (self.stage.settled, self.stage.pending):
                delta.discard_dir(self.stage.table_uri, rel)


#: What a history row's decision carries besides `txn_outcome`: the marker that decided it, and where and when it
#: took effect.
_DECISION_COLUMNS = tuple(c for c in DECISION_COLUMNS if c != "txn_outcome")


def _outcome_rank(F):
    """`schemas.tables.OUTCOME_RANK` of the `txn_outcome` column, as a Spark column (0: null)."""
    ranks = F.create_map(*[F.lit(v) for o, r in OUTCOME_RANK.items() for v in (o, r)])
    return F.coalesce(ranks[F.col("txn_outcome")], F.lit(0))


def _with_contract_columns(data: pa.Table, table: str, wanted: list[str] | None = None) -> pa.Table:
    """`data` as the contract's `wanted` columns (default: all) and Arrow types; a column the stored table lacks
    (added to the contract after it was written) reads as nulls."""
    schema = TABLES[table]
    fields = [schema.field(c) for c in (wanted or table_columns(table))]
    cols = [data.column(f.name).cast(f.type) if f.name in data.column_names else pa.nulls(data.num_rows, f.type)
            for f in fields]
    return pa.Table.from_arrays(cols, schema=pa.schema(fields))


HistoryMode = Literal["full", "incremental", "what-if"]


@dataclass(frozen=True, kw_only=True)
class HistoryWrite:
    """A run's `offset_commits` rows and how they meet the history the warehouse holds (`Warehouse.write_snapshot`).
    `full`: every record the run read; each is stored once, a record the history holds only ever decided further.
    `incremental`: the same, of a run that resumed the previous run's shards; `known_below` (offsets partition →
    offset, its checkpoint's) says the history holds every record of the partition below it, so rows below can
    only upgrade a pending one. `what-if`: only the rows whose record the history lacks are added, nothing it holds
    changes. `cluster` (`io.cluster.ClusterIdentity` of the input): recorded as the history's once it is merged."""

    rows: TableRows
    mode: HistoryMode = "full"
    known_below: Mapping[int, int] = field(default_factory=dict)
    cluster: clusters.ClusterIdentity | None = None

    def __post_init__(self) -> None:
        if self.known_below and self.mode != "incremental":
            raise WarehouseError(f"a {self.mode} run's history has no previous run's marks (known_below)")


class Warehouse:
    """A warehouse directory of Delta tables (see the module docstring for layout and rules)."""

    def __init__(self, path: "str | Path | storage.Location"):
        self.root = storage.location(path)
        # the ids whose failed write `write_snapshot` recorded itself, with the stage it recorded
        # (`failure_recorded`)
        self._recorded_failures: dict[str, str] = {}
        # a local warehouse is addressed as a Path, one on an object store by its Location
        self.path = self.root.local or self.root

    def __repr__(self) -> str:
        return f"Warehouse({self.root.uri!r})"

    # ------------------------------------------------------------------ layout
    def table_path(self, table: str) -> "Path | storage.Location":
        if table not in TABLES:
            raise WarehouseError(f"unknown table {table!r}; tables: {', '.join(TABLES)}")
        return self.path / table

    def _table(self, table: str) -> storage.Location:
        self.table_path(table)
        return self.root / table

    def table_version(self, table: str) -> int | None:
        """Current Delta version of `table`, None if it was never written."""
        dt = delta.open_table(self._table(table))
        return None if dt is None else dt.version()

    # ------------------------------------------------------------------ writes
    def stage_tables(self, snapshot_id: str, tables: Mapping[str, TableRows]) -> dict[str, tuple[str, list]]:
        """`write_snapshot`'s first step for some of the snapshot's tables: their files written, uncommitted (table
        -> their directory and add actions). A run stages the tables it holds while it validates them; on error
        nothing of this call stays staged. Hand the result to `write_snapshot(staged=)`, or drop it with
        `discard_staged`."""
        delta.check_partition_value(snapshot_id)
        staged: dict[str, tuple[str, list]] = {}
        try:
            for table, rows in tables.items():
                staged[table] = self._stage_table(table, snapshot_id, rows)
        except BaseException:
            self.discard_staged(staged)
            raise
        return staged

    def discard_staged(self, staged: Mapping[str, tuple[str, list]]) -> None:
        """Staged files never committed, deleted."""
        for table, (rel, _adds) in staged.items():
            delta.discard_dir(self._table(table), rel)

    def write_snapshot(self, snapshot_id: str, tables: Mapping[str, TableRows], run_row: dict, *,
                       history: HistoryWrite | None = None, spark: SparkSession | None = None,
                       expected_rows: Mapping[str, int] | None = None,
                       staged: Mapping[str, tuple[str, list]] | None = None,
                       before_commit: Callable[[], None] | None = None) -> str | None:
        """Write one snapshot: every snapshot table, the offset_commits merge, then the `runs` row.

        `tables` holds the rows of every `SNAPSHOT_TABLES` entry (`io.table_rows.TableRows`: in this process,
        written by pyarrow; on Spark, or in blobs the writing tasks open); `history`, the run's `offset_commits`
        rows and how they meet the history (`HistoryWrite`; `spark`: the session a merge of rows in this process
        runs on when they meet too much of it). Every table's files are staged (written, not committed) first;
        then each table's partition `snapshot_id` is replaced in one Delta commit per table, the commits side by
        side, and the `runs` row (`run_row["status"]`: `succeeded`, or `validation_failed` which keeps the snapshot
        unserved) is written last, with `table_versions`: the version each commit produced, which readers read the
        snapshot at. Until then a rerun of a served id leaves the served rows and `runs` row as they were: readers
        stay on the versions the served row pinned, even if some of the rerun's commits went through.
        `expected_rows` (table -> rows the run counted) is checked against the staged files' and then the
        committed add actions' `numRecords`: a snapshot never holds fewer (or more) rows than the run reported.
        On any error the staged files are deleted, the failure is recorded (`record_failure`) and the error
        propagates (`failure_recorded` then says so). `before_commit` is called once everything is staged,
        before the first commit (the run records the stage in its lock: a kill from here on may leave the id's
        tables partly replaced). `staged`: tables `stage_tables` already staged for this id (theirs in `tables`
        are then not read); they are this call's to commit or delete. A `validation_failed` rerun of a served id
        leaves the served row as it is and writes its own to `_attempts/` (as `record_failure` does): returns that
        file's path, else None.
        """
        final_status = self._check_write(snapshot_id, tables, run_row, staged)
        row = dict(run_row)
        row["started_at"] = _to_utc(row.get("started_at")) or _utcnow()
        expected = {t: int(n) for t, n in (expected_rows or {}).items() if t in SNAPSHOT_TABLES}
        staged = dict(staged or {})
        committed: list[str] = []
        pinned: dict[str, int] = {}
        stage = "write"
        try:
            staged.update(self.stage_tables(snapshot_id, {t: tables[t] for t in SNAPSHOT_TABLES if t not in staged}))
            for table, (_rel, adds) in staged.items():
                self._check_rows(table, snapshot_id, expected, _add_rows(adds), "staged")
            merged = None
            if history is not None:
                merged = self._merge_offset_commits(snapshot_id, history, spark=spark)
                if history.cluster is not None:
                    clusters.record(self.root, history.cluster)
            history_version = merged if merged is not None else self._history_version()
            if before_commit is not None:
                before_commit()
            stage = "commit"
            self._commit_tables(snapshot_id, staged, expected, pinned, committed)
            if history_version is not None:
                # the history is every run's (a later one adds its records, rewrites a file whose transaction it
                # saw end): this snapshot's views read it as this run left it, not with the records it never read
                pinned["offset_commits"] = history_version
        except BaseException as exc:
            # a commit that failed on the store may have landed: its table's files stay (a vacuum judges them)
            self.discard_staged({t: files for t, files in staged.items() if t not in committed
                                 and not (stage == "commit" and delta.may_have_landed(exc))})
            self._record_write_failure(snapshot_id, row, exc, stage, partial=bool(committed))
            raise
        final = {**row, "status": final_status, "table_versions": pinned,
                 "finished_at": _to_utc(row.get("finished_at")) or _utcnow()}
        if final_status != "succeeded" and self.served_row(snapshot_id, partial=True) is not None:
            # a rerun that failed validation must not take the last good snapshot away: readers and the next
            # --incremental run stay on the served row's pinned versions; the attempt keeps the versions it committed
            return self._write_attempt(snapshot_id, final)
        self.mark_run(snapshot_id, final)
        return None

    def _check_write(self, snapshot_id: str, tables: Mapping[str, TableRows], run_row: dict,
                     staged: Mapping[str, tuple[str, list]] | None) -> str:
        """The status `write_snapshot` ends the run with, once its arguments hold (else the tables `staged`
        already are deleted and the error raised, before anything is written)."""
        delta.check_partition_value(snapshot_id)
        self._recorded_failures.pop(snapshot_id, None)
        unknown = [t for t in tables if t not in SNAPSHOT_TABLES]
        missing = [t for t in SNAPSHOT_TABLES if tables.get(t) is None]
        final_status = run_row.get("status") or "succeeded"
        if (unknown or missing or final_status not in _FINAL_WRITE_STATUSES) and staged:
            self.discard_staged(staged)
        if unknown or missing:
            raise WarehouseError(
                f"write_snapshot({snapshot_id}): "
                + (f"missing tables {missing}" if missing else "")
                + ("; " if missing and unknown else "")
                + (f"unknown tables {unknown} (runs is written from run_row, offset_commits from history)"
                   if unknown else ""))
        if final_status not in _FINAL_WRITE_STATUSES:
            raise WarehouseError(f"write_snapshot ends a run as one of {_FINAL_WRITE_STATUSES}, not {final_status!r}")
        return final_status

    def _history_version(self) -> int | None:
        """The `offset_commits` version in place (None: no history yet), for a run whose merge changed nothing."""
        dt = delta.open_table(self._table("offset_commits"))
        return None if dt is None else dt.version()

    def _commit_tables(self, snapshot_id: str, staged: Mapping[str, tuple[str, list]], expected: dict[str, int],
                       pinned: dict[str, int], committed: list[str]) -> None:
        """Every snapshot table's staged files committed side by side (each waits on its own Delta log), into
        `pinned` (table -> the version its commit produced) and `committed`: every one that went through is known
        before an error of another propagates."""
        with ThreadPoolExecutor(_COMMIT_THREADS, thread_name_prefix="offsetlake-commit") as pool:
            commits = {t: pool.submit(self._commit_staged, t, snapshot_id, staged[t][1]) for t in SNAPSHOT_TABLES}
            for table, done in commits.items():
                if done.exception() is None:
                    pinned[table] = done.result()
                    committed.append(table)
            for done in commits.values():
                done.result()
            rows = pool.map(lambda t: self.committed_rows(t, snapshot_id, pinned[t]), SNAPSHOT_TABLES)
            for table, n in zip(SNAPSHOT_TABLES, rows):
                self._check_rows(table, snapshot_id, expected, n, "committed")

    def _record_write_failure(self, snapshot_id: str, row: dict, exc: BaseException, stage: str, *,
                              partial: bool) -> None:
        """The failed write recorded (`record_failure`) with its error and `stage`; a failure to record it is a note
        on `exc`, which stays the error."""
        failed = {**row, "finished_at": _utcnow()}
        summary = failed.get("summary")
        summary = json.loads(summary) if isinstance(summary, str) else dict(summary or {})
        unavailable = retry.unavailable_cause(exc)
        error = (f"object store unavailable: {unavailable}" if unavailable is not None
                 else f"{type(exc).__name__}: {exc}")
        failed["summary"] = {**summary, "status": "failed", "error": error[:2000], "stage": stage}
        try:
            self.record_failure(snapshot_id, failed, partial=partial)
            self._recorded_failures[snapshot_id] = stage
        except Exception as mark_exc:  # keep the original error
            exc.add_note(f"could not record the failure of run {snapshot_id}: {mark_exc}")

    @staticmethod
    def _check_rows(table: str, snapshot_id: str, expected: dict[str, int], got: int, what: str) -> None:
        if table in expected and got != expected[table]:
            raise WarehouseError(f"snapshot {snapshot_id}: {table} has {got:,} {what} rows, the run counted "
                                 f"{expected[table]:,} (files lost between the write and the commit?)")

    def committed_rows(self, table: str, snapshot_id: str, version: int | None = None) -> int:
        """Rows of partition `snapshot_id` of `table` at `version` (default: the latest) as the Delta log says (the
        add actions' numRecords); a file the log references but the storage no longer has (or has with another
        size) is an error."""
        dt = delta.open_table(self._table(table), version)
        if dt is None:
            return 0
        t = delta.add_actions(dt, flatten=True)
        if t.num_rows == 0:
            return 0
        t = t.filter(pc.equal(t.column("partition.snapshot_id").cast(pa.string()), snapshot_id))
        root = self._table(table)
        rels = [unquote(r) for r in t.column("path").to_pylist()]
        infos = storage.retried(root, "info", lambda: root.fs.get_file_info([root.join(r).path for r in rels])
                                ) if rels else []
        for rel, size, info in zip(rels, t.column("size_bytes").to_pylist(), infos):
            if info.type != storage.pafs.FileType.File or info.size != size:
                raise WarehouseError(f"snapshot {snapshot_id}: {table} commits {rel}, which is missing or changed "
                                     "on storage (deleted between the write and the commit?)")
        return int(pc.sum(t.column("num_records")).as_py() or 0)

    def failure_recorded(self, snapshot_id: str) -> bool:
        """Whether the last `write_snapshot` of `snapshot_id` failed and recorded its failure itself (with what it
        knew of its commits): the run must not record it again."""
        return snapshot_id in self._recorded_failures

    def recorded_stage(self, snapshot_id: str) -> str | None:
        """The stage `write_snapshot` recorded its failure in (`write`, or `commit` once it began committing)."""
        return self._recorded_failures.get(snapshot_id)

    def record_failure(self, snapshot_id: str, run_row: dict, *, partial: bool = False) -> str:
        """Record a run that failed (or was abandoned) without taking a served snapshot away.

        A new id gets a `failed` runs row. An id whose runs row is `succeeded` keeps it (the old snapshot stays
        served) and the attempt is written to `_attempts/<id>.<time>.json`; also when `partial` (the rerun had
        already replaced some of the id's tables), as long as the served row pins its table versions: readers
        stay on those. A row from before `table_versions` reads the latest versions, so after a partial rerun
        the id is marked `failed` instead of serving a mix. Returns where the failure went (`runs` or the
        attempt file's path).
        """
        row = {**run_row, "status": "failed"}
        if self.served_row(snapshot_id, partial=partial) is not None:
            return self._write_attempt(snapshot_id, row)
        if partial and isinstance(row.get("summary"), dict):
            row["summary"] = {**row["summary"], "partial": "some tables of this id were replaced before the failure"}
        self.mark_run(snapshot_id, row)
        return "runs"

    def served_row(self, snapshot_id: str, *, partial: bool) -> dict | None:
        """The `succeeded` runs row of `snapshot_id` when a rerun's outcome can leave it served: always, when the rerun
        replaced none of the id's tables (`partial` False); else only if the row pins its table versions."""
        current = {r["snapshot_id"]: r for r in self.snapshots()}.get(snapshot_id)
        if current is None or current["status"] != "succeeded":
            return None
        pinned = set(SNAPSHOT_TABLES) <= set(current.get("table_versions") or {})
        return current if pinned or not partial else None

    def _write_attempt(self, snapshot_id: str, row: dict) -> str:
        """A rerun's `runs` row kept aside in `_attempts/<id>.<time>.json`; returns its path."""
        stamp = _utcnow().strftime(ATTEMPT_STAMP)
        out = self.root.join(ATTEMPTS_DIR, f"{snapshot_id}.{stamp}.json")
        out.write_text(json.dumps(dict(row), default=str, sort_keys=True))
        return str(out)

    def _stage_table(self, table: str, snapshot_id: str, rows: TableRows) -> tuple[str, list]:
        """`rows` written as the files of partition `snapshot_id` of `table` from where they are held,
        uncommitted; returns their directory and add actions."""
        schema = TABLES[table]
        path = self._table(table)
        rel = f"snapshot_id={snapshot_id}/{delta.new_write_dir()}"
        try:
            _check_columns(rows.column_names, table, snapshot_id)
            # partition values live in the log
            written = rows.conformed(table, snapshot_id).write_files(path, rel, schema,
                                                                     partition_columns=("snapshot_id",))
            return rel, delta.collect_add_actions(path, rel, schema, {"snapshot_id": snapshot_id}, written)
        except BaseException:
            delta.discard_dir(path, rel)
            raise

    def _commit_staged(self, table: str, snapshot_id: str, adds: list) -> int:
        schema = TABLES[table]
        dt = delta.ensure_table(self._table(table), schema, partition_by=["snapshot_id"])
        # mode=overwrite + partition filter: delta-rs removes the partition's current files and adds
        # ours in the same commit, so readers see the old partition or the new one, never a mix.
        return delta.commit(dt, schema, adds, mode="overwrite", partition_by=["snapshot_id"],
                            partition_filters=[("snapshot_id", "=", snapshot_id)],
                            metadata={"offsetlake.operation": "write_snapshot",
                                      "offsetlake.snapshot_id": snapshot_id})

    def _merge_offset_commits(self, snapshot_id: str, history: HistoryWrite, *,
                              spark: SparkSession | None = None) -> int | None:
        """Merge a run's decoded offset-commit records into the history (copy-on-write, one commit).

        Each (offsets_partition, record_offset) is stored once. New records are added with this
        snapshot as `snapshot_id` (the first snapshot that saw them). A known record only changes its
        `txn_outcome`, and only towards a decision: pending/null → committed/aborted, null → pending;
        a decided outcome is never replaced (a later run over a truncated log may not see the marker).
        Files holding updated records are rewritten and swapped in the same commit as the new records.
        Returns the new table version, None when nothing changed.

        The ways differ by what the rows allow, not by where they are held: into an empty history, rows each
        record once are added as they are (written already by the tasks: committed as they are); a what-if run's
        rows only where the history lacks their record (`_add_history`). An incremental run's rows (its new
        records and the saved open transactions'), and rows in this process meeting at most
        `_IN_HAND_HISTORY_MAX_ROWS` history rows, are merged in this process (`_merge_in_hand`); anything else on
        Spark (`_merge_on_spark`). Files hold one offsets partition each (plus `pending-*` files for rows of open
        transactions), so their Delta stats bound a partition's offsets: an incremental run reads only the files
        that may hold a pending row or overlap the rows above its marks (`HistoryWrite.known_below`).
        """
        table = "offset_commits"
        rows = history.rows
        _check_columns(rows.column_names, table, snapshot_id)
        path = self._table(table)
        dt = delta.with_columns(delta.ensure_table(path, TABLES[table]), TABLES[table])
        current = delta.active_files(dt)
        if history.mode == "what-if" and current:
            return self._add_history(dt, snapshot_id, rows, seen=HistoryKeys.of(dt, path.uri), spark=spark)
        if not current and rows.clustered:  # nothing to merge with: the rows are the history
            return self._add_history(dt, snapshot_id, rows, seen=None, spark=spark)
        if rows.clustered and history.known_below:
            incoming = rows.to_arrow()
            return self._merge_in_hand(dt, snapshot_id, incoming, _met_files(dt, incoming, history.known_below))
        if rows.clustered and rows.held == "in_hand":  # merged here, unless the history files it meets are many
            incoming = rows.to_arrow()
            met = _met_files(dt, incoming, {})
            if sum(_IN_HAND_HISTORY_MAX_ROWS + 1 if f["rows"] is None else f["rows"]
                   for f in met[1]) <= _IN_HAND_HISTORY_MAX_ROWS:
                return self._merge_in_hand(dt, snapshot_id, incoming, met)
        return self._merge_on_spark(dt, snapshot_id, rows, spark=spark, known_below=history.known_below)

    def _add_history(self, dt: DeltaTable, snapshot_id: str, rows: TableRows, *, seen: HistoryKeys | None,
                     spark: SparkSession | None) -> int | None:
        """`rows` added to the history, in one commit that removes nothing; `seen` (a what-if run's, against a
        history that holds rows): only the rows whose record it lacks. A what-if run reads a prefix (`--until-*`)
        or the whole of a log the scheduled runs read too, so its records are mostly in the history already; where
        it meets one, the history's row is the log's (its `txn_outcome` decided by markers past the cut that the
        what-if run does not see) and stays as it is. The rows held are found from the history files' stats and
        key columns (`HistoryKeys`), by the tasks that write the run's history when they can: rows written already
        are committed as they are when they hold just what is added."""
        staged = rows.staged()
        if staged is not None and (seen is None or staged.filtered):
            return self._commit_staged_history(dt, snapshot_id, staged)
        rows = rows.conformed("offset_commits", snapshot_id)
        if not rows.clustered:  # grouped by offsets partition in record order first: files of one partition each
            rows = FrameRows(rows.to_frame(spark).repartition("offsets_partition").sortWithinPartitions(
                *_OFFSET_KEYS), clustered=True)
        return self._write_history(dt, snapshot_id, rows,
                                   through=functools.partial(_stamped, snapshot_id=snapshot_id, seen=seen))

    def _merge_on_spark(self, dt: DeltaTable, snapshot_id: str, rows: TableRows, *, spark: SparkSession | None,
                        known_below: Mapping[int, int]) -> int | None:
        """`_merge_offset_commits` on Spark. Rows not `clustered` are made one per record first (overlapping input
        files): the most decided outcome wins, then the remaining columns break ties so the choice does not depend
        on partitioning."""
        # pyspark.sql costs 0.24-1.6 s to import (-X importtime here), which a run replayed in this process never pays
        from pyspark import StorageLevel
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        table = "offset_commits"
        keys = list(_OFFSET_KEYS)
        incoming = FrameRows(rows.to_frame(spark)).conformed(table, snapshot_id).frame
        if not rows.clustered:
            # by offsets partition: the dedup window needs no other shuffle, and the files come out one partition each
            incoming = incoming.repartition("offsets_partition")
            others = [c for c in table_columns(table) if c not in keys]
            w = Window.partitionBy(*keys).orderBy(_outcome_rank(F).desc(), *[F.col(c).asc_nulls_last() for c in others])
            incoming = incoming.withColumn("_rn", F.row_number().over(w)).filter("_rn = 1").drop("_rn")
        current = delta.active_files(dt)
        if not current:
            out = incoming if rows.clustered else incoming.sortWithinPartitions(*keys)
            return self._write_history(dt, snapshot_id, FrameRows(out, clustered=True))
        # read again for the marks, the count and the join: computed once
        incoming = incoming.persist(StorageLevel.MEMORY_AND_DISK)
        try:
            fresh = F.lit(True)
            if known_below:
                marks = F.create_map(*[F.lit(v) for p, o in sorted(known_below.items()) for v in (int(p), int(o))])
                fresh = F.col("record_offset") >= F.coalesce(marks[F.col("offsets_partition")], F.lit(0))
                above = [(r[0], r[1], r[2]) for r in incoming.filter(fresh).groupBy("offsets_partition").agg(
                    F.min("record_offset"), F.max("record_offset")).collect()]
                current = [f for f in _history_files(dt) if f["may_hold_pending"] or _overlaps(f, above)]
            if not current:
                out = incoming.filter(fresh)
                return self._write_history(dt, snapshot_id, FrameRows(
                    out if rows.clustered else out.sortWithinPartitions(*keys), clustered=True))
            joined = self._joined_on_spark(incoming, current)
            try:
                out, touched = self._upgraded_on_spark(joined, current, fresh)
                return self._write_history(dt, snapshot_id, FrameRows(out, clustered=True), touched)
            finally:
                joined.unpersist()
        finally:
            incoming.unpersist()

    def _joined_on_spark(self, incoming: DataFrame, current: list[dict]) -> DataFrame:
        """`incoming` with what the history files `current` hold of each record (`_old`: its outcome, `_file`: the
        file; null: none holds it), persisted: it is read twice (the files to rewrite, then the rows to write)."""
        from pyspark import StorageLevel  # see `_merge_on_spark`
        from pyspark.sql import functions as F

        keys = list(_OFFSET_KEYS)
        existing = (delta.read_frame_files(incoming.sparkSession, self._table("offset_commits"),
                                           [unquote(f["path"]) for f in current], TABLES["offset_commits"],
                                           columns=[*keys, "txn_outcome"], with_file=True)
                    .select(*keys, F.col("txn_outcome").alias("_old"), F.col(delta.FILE_COLUMN).alias("_file")))
        if incoming.count() <= _BROADCAST_KEYS_MAX:
            # an incremental run's few rows against a long history: one scan of the history's key columns
            # through a broadcast hash of the incoming keys instead of shuffling the whole history
            existing = existing.join(F.broadcast(incoming.select(*keys)), keys, "left_semi")
        return incoming.join(existing, keys, "left").persist(StorageLevel.MEMORY_AND_DISK)

    def _upgraded_on_spark(self, joined: DataFrame, current: list[dict], fresh: Column) -> tuple[DataFrame, list[str]]:
        """(rows to write, history files they replace) of `_joined_on_spark`'s rows: the new records (`fresh`:
        below an incremental run's marks, a row not in the files read is in the others already), and the files
        holding a record whose outcome is decided further, rewritten whole with it (their other rows keep their
        snapshot ids)."""
        from pyspark.sql import functions as F  # see `_merge_on_spark`

        table = "offset_commits"
        keys = list(_OFFSET_KEYS)
        new, old = F.col("txn_outcome"), F.col("_old")
        upgrade = (F.col("_file").isNotNull() & new.isNotNull() & ~old.eqNullSafe(new)
                   & (old.isNull() | ((old == "pending") & new.isin(*FINAL_OUTCOMES))))
        updates = joined.filter(upgrade).select(*keys, F.col("txn_outcome").alias("_new"),
                                                *[F.col(c).alias(f"_new_{c}") for c in _DECISION_COLUMNS], "_file")
        new_rows = joined.filter(F.col("_file").isNull() & fresh).select(*table_columns(table))
        by_rel = {unquote(f["path"]): f["path"] for f in current}
        touched = [by_rel[r["_file"]] for r in updates.select("_file").distinct().collect()]
        out = new_rows
        if touched:
            rewritten = (delta.read_frame_files(joined.sparkSession, self._table(table), [unquote(p) for p in touched],
                                                TABLES[table])
                         .join(updates.select(*keys, "_new", *[f"_new_{c}" for c in _DECISION_COLUMNS]), keys, "left")
                         .withColumn("txn_outcome", F.coalesce(F.col("_new"), F.col("txn_outcome"))))
            for c in _DECISION_COLUMNS:  # the marker that decided it comes with the outcome
                rewritten = rewritten.withColumn(c, F.coalesce(F.col(f"_new_{c}"), F.col(c)))
            out = rewritten.select(*table_columns(table)).unionByName(new_rows)
        return out.repartition("offsets_partition").sortWithinPartitions(*keys), touched

    def _merge_in_hand(self, dt: DeltaTable, snapshot_id: str, incoming: pa.Table,
                       met: tuple[np.ndarray, list[dict]]) -> int | None:
        """`_merge_offset_commits` of history rows in hand (each record once: a run replayed in this process, or an
        incremental run's: its new records and the saved open transactions' records), in this process. `met`:
        `_met_files`' (fresh rows, history files they may meet); only those files are read (their keys and
        outcomes), and only the files with an upgraded row are rewritten."""
        table = "offset_commits"
        schema = TABLES[table]
        path = self._table(table)
        keys = list(_OFFSET_KEYS)
        incoming = _with_contract_columns(incoming, table)
        fresh, candidates = met
        existing = delta.read_table_files(path, [unquote(f["path"]) for f in candidates], schema,
                                          columns=[*keys, "txn_outcome"], with_file=True)
        existing = existing.rename_columns([*keys, "_old", "_file"])
        probe = incoming.select([*keys, "txn_outcome", *_DECISION_COLUMNS]).append_column(
            "_i", pa.array(np.arange(incoming.num_rows)))
        joined = probe.join(existing, keys, join_type="inner") if existing.num_rows else None
        matched = np.zeros(incoming.num_rows, bool)
        touched, upgrades = [], None
        if joined is not None and joined.num_rows:
            matched[joined.column("_i").to_numpy()] = True
            new, old = joined.column("txn_outcome"), joined.column("_old")
            final = pc.is_in(new, pa.array(FINAL_OUTCOMES))
            upgrade = pc.and_(pc.is_valid(new), pc.or_(
                pc.is_null(old), pc.and_(pc.fill_null(pc.equal(old, "pending"), False), final)))
            upgrade = pc.fill_null(pc.and_(upgrade, pc.invert(pc.fill_null(pc.equal(old, new), False))), False)
            upgrades = joined.filter(upgrade)
            touched_rel = sorted(set(upgrades.column("_file").to_pylist()))
            by_rel = {unquote(f["path"]): f["path"] for f in candidates}
            touched = [by_rel[r] for r in touched_rel]
        out = [_with_contract_columns(with_snapshot_id(incoming.filter(pa.array(fresh & ~matched)), snapshot_id),
                                      table)]
        if touched:
            # the files with an upgraded row, rewritten whole: their other rows keep their snapshot ids
            rewritten = delta.read_table_files(path, touched_rel, schema)
            new_outcome = upgrades.select([*keys, "txn_outcome", *_DECISION_COLUMNS]).rename_columns(
                [*keys, "_new", *[f"_new_{c}" for c in _DECISION_COLUMNS]])
            rewritten = rewritten.join(new_outcome, keys, join_type="left outer")
            for c, n in (("txn_outcome", "_new"), *[(c, f"_new_{c}") for c in _DECISION_COLUMNS]):
                if c in rewritten.column_names:  # the marker that decided it comes with the outcome
                    at = rewritten.schema.get_field_index(c)
                    value = pc.coalesce(rewritten.column(n).cast(rewritten.schema.field(c).type), rewritten.column(c))
                    rewritten = rewritten.set_column(at, c, value)
            out.append(_with_contract_columns(rewritten, table))
        rows = pa.concat_tables(out).sort_by([(k, "ascending") for k in keys])
        return self._write_history(dt, snapshot_id, ArrowRows(rows, clustered=True), touched)

    def _write_history(self, dt: DeltaTable, snapshot_id: str, rows: TableRows, touched: list[str] = (), *,
                       through: BatchMap | None = None) -> int | None:
        """`rows` added to the history (each record once, grouped by offsets partition in record order) and the
        `touched` files removed, in one commit. Rows of transactions still open are the only ones a later run
        upgrades (pending → committed/aborted): they go to files of their own, so the next run's upgrade rewrites
        those few rows, not the history files around them (copy-on-write). One pass writes both, from where the
        rows are held; `through`: what each writer does to its batches first (`TableRows.write_files`)."""
        path = self._table("offset_commits")
        rels = (delta.new_write_dir(), delta.new_write_dir("pending-"))
        try:
            settled, pending = rows.write_files(path, rels[0], TABLES["offset_commits"], split_by="offsets_partition",
                                                aside=(_pending_rows, rels[1]), through=through)
            return self._commit_history(dt, snapshot_id, *rels, settled, pending, touched)
        except BaseException as exc:
            if not delta.may_have_landed(exc):
                for rel in rels:
                    delta.discard_dir(path, rel)
            raise

    def _commit_staged_history(self, dt: DeltaTable, snapshot_id: str, staged: StagedFiles) -> int | None:
        """The files the tasks wrote committed as they are (`staged.committed` told: they are the history's, or may
        be: a commit that failed on the store may have landed, and then they stay for a vacuum to judge)."""
        try:
            version = self._commit_history(dt, snapshot_id, staged.settled_dir, staged.pending_dir,
                                           list(staged.settled), list(staged.pending))
        except BaseException as exc:
            staged.committed(delta.may_have_landed(exc))
            raise
        staged.committed(True)
        return version

    def _commit_history(self, dt: DeltaTable, snapshot_id: str, settled_dir: str, pending_dir: str,
                        settled: list[delta.WrittenFile], pending: list[delta.WrittenFile],
                        touched: list[str] = ()) -> int | None:
        """The written `settled` and `pending` files added to the history and the `touched` files removed, in one
        commit (None and the directories deleted when there is nothing to commit)."""
        schema = TABLES["offset_commits"]
        path = self._table("offset_commits")
        adds = (delta.collect_add_actions(path, settled_dir, schema, None, settled)
                + delta.collect_add_actions(path, pending_dir, schema, None, pending))
        removes = delta.remove_actions(dt, paths=touched)
        if not adds and not removes:
            for rel in (settled_dir, pending_dir):
                delta.discard_dir(path, rel)
            return None
        return delta.commit(dt, schema, [*adds, *removes], mode="append",
                            metadata={"offsetlake.operation": "merge_offset_commits",
                                      "offsetlake.snapshot_id": snapshot_id})

    def stage_history(self, snapshot_id: str, *, mode: HistoryMode = "full") -> HistoryStage | None:
        """Where a run's tasks may write its history before the commit: while the history table holds no file, or
        for a run that only adds to it (`what-if`: each task writes only its rows the history does not hold,
        `HistoryKeys`); else None (the rows are merged with it, `_merge_offset_commits`). The run's writer lock
        keeps the history as it is until the commit."""
        path = self._table("offset_commits")
        dt = delta.ensure_table(path, TABLES["offset_commits"])
        seen = None
        if delta.active_files(dt):
            if mode != "what-if":
                return None
            seen = HistoryKeys.of(dt, storage.location(path).uri)
        return HistoryStage(storage.location(path).uri, delta.new_write_dir(), delta.new_write_dir("pending-"),
                            snapshot_id, seen)

    def mark_run(self, snapshot_id: str, run_row: dict) -> None:
        """Insert or replace the `runs` row of `snapshot_id` (one Delta commit, predicate overwrite).

        Accepted values: timestamps as datetimes (naive = UTC) or ISO-8601 strings; `validation` and
        `summary` as JSON text or JSON-able objects; `inputs` a list of strings; `record_type_counts`
        and `table_versions` dicts. Unknown keys are an error.
        """
        delta.check_partition_value(snapshot_id)
        status = run_row.get("status")
        if status not in RUN_STATUSES:
            raise WarehouseError(f"run status must be one of {RUN_STATUSES}, not {status!r}")
        if run_row.get("kind") not in (None, *RUN_KINDS):
            raise WarehouseError(f"run kind must be one of {RUN_KINDS}, not {run_row.get('kind')!r}")
        unknown = [k for k in run_row if k not in table_columns("runs")]
        if unknown:
            raise WarehouseError(f"runs row: unknown column(s) {unknown}")
        row = {c: run_row.get(c) for c in table_columns("runs")}
        row["snapshot_id"] = snapshot_id
        row["kind"] = row["kind"] or SCHEDULED
        for c in ("started_at", "finished_at", "as_of"):
            row[c] = _to_utc(row[c])
        for c in ("validation", "summary"):
            row[c] = _json_text(row[c])
        if row["inputs"] is not None:
            row["inputs"] = [str(x) for x in row["inputs"]]
        for c in ("record_type_counts", "table_versions"):
            if row[c] is not None:
                row[c] = [(str(k), int(v)) for k, v in dict(row[c]).items()]
        batch = pa.Table.from_pylist([row], schema=TABLES["runs"])
        path = self._table("runs")
        delta.ensure_table(path, TABLES["runs"])
        # schema_mode merge: a runs table written before a column was added (e.g. `kind`) gets it in this
        # same commit, its old rows reading null there
        # the row replaces the id's row, so a try that landed before its answer was lost is harmlessly made again
        storage.retried(path, "commit", lambda: write_deltalake(
            path.uri, batch, storage_options=storage.storage_options(path.uri), mode="overwrite",
            predicate=f"snapshot_id = '{snapshot_id}'", schema_mode="merge",
            commit_properties=CommitProperties(custom_metadata={
                "offsetlake.operation": "mark_run", "offsetlake.snapshot_id": snapshot_id,
                "offsetlake.status": status})))

    # ------------------------------------------------------------------ reads
    def reader(self) -> DeltaWarehouseReader:
        """The snapshot reader over this warehouse (`pipelines/io/snapshots.py`): every read goes through it."""
        return DeltaWarehouseReader(self.root.uri, must_exist=False)

    def _snapshots(self) -> list[Snapshot]:
        reader = self.reader()
        try:
            return snapshots_from_runs(reader.runs())
        finally:
            reader.close()

    def snapshots(self) -> list[dict]:
        """Every `runs` row, oldest first (by finished_at, else started_at, then snapshot_id), as dicts with the
        contract's columns (`kind` filled in, maps as dicts)."""
        rows = []
        for snap in self._snapshots():
            r = {c: snap.run.get(c) for c in table_columns("runs")}
            for c in ("record_type_counts", "table_versions"):
                if r[c] is not None:
                    r[c] = dict(r[c])
            r["kind"] = snap.kind
            rows.append(r)
        return rows

    @staticmethod
    def _run_order(row: dict):
        return run_order(row)

    def latest_snapshot_id(self, status: str = "succeeded", kind: str | None = SCHEDULED) -> str | None:
        """The most recently finished snapshot with `status` and `kind` (None: any kind). Readers and the
        incremental chain take the default, the latest succeeded scheduled snapshot (the snapshot reader's
        `pick_snapshot`): what-if runs are read by id."""
        snaps = self._snapshots()
        if status == "succeeded" and kind == SCHEDULED:
            try:
                return pick_snapshot(snaps, None).snapshot_id
            except _SnapshotNotFound:
                return None
        matching = [s for s in snaps if s.status == status and (kind is None or s.kind == kind)]
        return matching[-1].snapshot_id if matching else None

    def _resolve(self, table: str, snapshot_id: str | None) -> Snapshot:
        """The snapshot to read `table` of: by id (any status, at its pinned versions), default the served one."""
        snaps = self._snapshots()
        if snapshot_id is not None:
            delta.check_partition_value(snapshot_id)
            return next((s for s in snaps if s.snapshot_id == snapshot_id),
                        Snapshot(snapshot_id, None, None, None, None, {}))
        try:
            return pick_snapshot(snaps, None)
        except _SnapshotNotFound:
            raise NoSnapshotError(f"{self.root}: no succeeded scheduled snapshot to read {table} from") from None

    def read_table(self, table: str, snapshot_id: str | None = None, columns: list[str] | None = None,
                   filters=None) -> pa.Table:
        """Rows of `table` through the snapshot reader as Arrow, with the contract's Arrow types.

        Snapshot tables: one snapshot (default: the latest succeeded scheduled one), read from its partition only,
        at the versions its run pinned. `offset_commits` / `runs`: all rows, or those whose `snapshot_id` column
        equals `snapshot_id`. `filters`: DNF tuples (or a pyarrow Expression), used to prune files by their
        statistics and to filter rows.
        """
        self.table_path(table)  # an unknown table is an error
        wanted = list(columns) if columns else table_columns(table)
        target = pa.schema([TABLES[table].field(c) for c in wanted])
        reader = self.reader()
        try:
            if table in SNAPSHOT_TABLES:
                snap = self._resolve(table, snapshot_id)
                if isinstance(filters, pc.Expression):
                    ds = reader.snapshot_dataset(table, snap)
                    with scanning(table):
                        got = None if ds is None else ds.to_table(
                            columns=[c for c in wanted if c in ds.schema.names], filter=filters)
                else:
                    got = reader.snapshot_table(table, snap, filters=filters, columns=wanted)
            else:
                if snapshot_id is not None:
                    by_id = [("snapshot_id", "=", snapshot_id)]
                    filters = (pc.field("snapshot_id") == snapshot_id) & filters if isinstance(
                        filters, pc.Expression) else [*(filters or ()), *by_id]
                if isinstance(filters, pc.Expression):
                    ds = reader.history_dataset(table)
                    with scanning(table):
                        got = None if ds is None else ds.to_table(
                            columns=[c for c in wanted if c in ds.schema.names], filter=filters)
                else:
                    got = reader.history_table(table, filters=filters, columns=wanted)
        finally:
            reader.close()
        if got is None:
            return target.empty_table()
        return _with_contract_columns(got, table, wanted)

    def spark_read(self, spark, table: str, snapshot_id: str | None = None):
        """`table` as a Spark DataFrame from the Delta table's files (Spark has no Delta jars): a snapshot table's
        files at the versions its run pinned, the others' active files. Same selection as `read_table`. The
        partition column is not in the files (Delta keeps it in the log); it is added back as a literal.
        """
        from pyspark.sql import functions as F  # see `_merge_on_spark`

        schema = TABLES[table]
        path = self._table(table)
        if table in SNAPSHOT_TABLES:
            snap = self._resolve(table, snapshot_id)
            dt = delta.open_table(path, snap.version_of(table))
            rels = [unquote(f["path"]) for f in delta.active_files(dt)
                    if f["partition_values"].get("snapshot_id") == snap.snapshot_id] if dt else []
            df = delta.read_frame_files(spark, path, rels, delta.file_schema(schema, ["snapshot_id"]))
            return df.withColumn("snapshot_id", F.lit(snap.snapshot_id)).select(*table_columns(table))
        dt = delta.open_table(path)
        rels = [unquote(f["path"]) for f in delta.active_files(dt)] if dt else []
        df = delta.read_frame_files(spark, path, rels, schema)
        if snapshot_id is not None:
            df = df.filter(F.col("snapshot_id") == snapshot_id)
        return df.select(*table_columns(table))

    def snapshot_ids_in(self, table: str) -> set[str]:
        """Snapshot ids that currently have files in a snapshot table."""
        dt = delta.open_table(self._table(table))
        if dt is None:
            return set()
        return {f["partition_values"].get("snapshot_id") for f in delta.active_files(dt)}

    # ------------------------------------------------------------------ retention
    @contextlib.contextmanager
    def _sole_writer(self, lock) -> Iterator[None]:
        """Held while `retain` deletes and vacuums: a vacuum deletes every file no commit references, so it must
        never run while another run has files staged, nor drop the partitions of a snapshot a run is committing.
        `lock`, the run's own writer lock (`pipelines/io/lock.py`), when it holds the warehouse; otherwise the lock is
        taken here for the whole clean-up and released after, and any holder refuses it, a stale one too: the next
        run takes that over and records the run it names as abandoned, which a clean-up breaking it would lose. A
        check of the holder alone, before deleting, let a run that started just after it stage its files for the
        vacuum to delete and commit the snapshot whose partitions the clean-up then dropped."""
        if lock is not None and lock.owned():
            yield
            return
        own = WriterLock(self.root.uri)
        try:
            own.acquire("(retain)", take_over=False)
        except LockHeldError as e:
            raise WarehouseError(f"{self.root}: not deleting or vacuuming while another run writes it "
                                 f"({describe_holder(e.holder)}; a lock left by a run that died is taken over, and "
                                 "the run recorded, by the next rebuild)") from None
        try:
            own.update(stage="retain")
            yield
        finally:
            own.release()

    def _pinned_files(self, table: str, runs: list[dict]) -> set[str]:
        """Files (relative to the table) that `runs`' snapshots read of `table` at their pinned versions: their own
        partition's of a snapshot table, every file of the history at the version they pinned."""
        if table not in SNAPSHOT_TABLES and table != "offset_commits":
            return set()
        out: set[str] = set()
        for r in runs:
            version = (r.get("table_versions") or {}).get(table)
            dt = None if version is None else delta.open_table(self._table(table), version)
            if dt is None:
                continue
            out |= {unquote(f["path"]) for f in delta.active_files(dt)
                    if table not in SNAPSHOT_TABLES or f["partition_values"].get("snapshot_id") == r["snapshot_id"]}
        return out

    def retain(self, keep: int, retention_hours: int = 0, lock=None, current: str | None = None) -> dict:
        """Keep the newest `keep` succeeded snapshots (and the latest succeeded scheduled one, when what-if runs
        are newer); delete the others, then vacuum every table.

        Deleted: every other snapshot id found in `runs` or in a snapshot table's partitions (failed,
        validation_failed and orphan partitions included), except `running` rows newer than the oldest
        kept snapshot (a run may be in progress) and the run doing the clean-up (`current`, whatever its
        status). The newest run that did not succeed keeps its `runs` row (its tables go): a failed night must
        stay visible (the page, `/metrics` and their alerts read `runs`) until a newer failure replaces it.
        The `runs` rows go first, so a reader never picks a
        snapshot whose data is being deleted; partitions are dropped as metadata-only Delta commits
        (remove actions, no rewrite). `offset_commits` is history and keeps its rows.
        The vacuum uses `retention_hours` (default 0, with delta-rs' retention check disabled) and
        `full=True`, so it also deletes files of writes that failed before committing; it keeps every file a
        kept snapshot's pinned table versions (`runs.table_versions`) read, which a rerun of its id that died
        between its commits may have removed from the latest version. With 0, a reader still holding some other
        older table version, or a concurrent writer, would lose files: fine for a single-writer warehouse read
        through the snapshot reader; pass e.g. 168 on shared storage.
        """
        if keep < 1:
            raise WarehouseError(f"retain(keep={keep}): keep at least one snapshot")
        with self._sole_writer(lock):
            return self._retain(keep, retention_hours, current)

    def _retain(self, keep: int, retention_hours: int, current: str | None) -> dict:
        runs = self.snapshots()
        succeeded = [r for r in runs if r["status"] == "succeeded"]
        kept = succeeded[-keep:]
        # what-if runs count among the newest, but the snapshot readers and the incremental chain default to (the
        # latest succeeded scheduled one) is kept besides them
        scheduled = [r for r in succeeded if r["kind"] == SCHEDULED]
        if scheduled and scheduled[-1] not in kept:
            kept = [scheduled[-1], *kept]
        keep_ids = {r["snapshot_id"] for r in kept}
        oldest_kept = self._run_order(kept[0]) if kept else None
        protected = {r["snapshot_id"] for r in runs if r["status"] == "running"
                     and (oldest_kept is None or self._run_order(r) > oldest_kept)}
        protected |= {current} if current else set()
        failures = [r["snapshot_id"] for r in runs if r["status"] in FAILED_STATUSES]
        # the newest failure keeps its row (what the alerts read), not its tables: nothing serves them
        row_only = set(failures[-1:])
        if not kept:
            protected |= {r["snapshot_id"] for r in runs}  # nothing succeeded yet: delete nothing
        # each table's reads, commits and deletes are its own: the tables are worked on side by side (most of the
        # time is spent opening Delta logs and listing files, waiting on the storage)
        with ThreadPoolExecutor(_RETAIN_THREADS, thread_name_prefix="offsetlake-retain") as pool:
            present = {r["snapshot_id"] for r in runs}.union(*pool.map(self.snapshot_ids_in, SNAPSHOT_TABLES))
            drop = sorted(present - keep_ids - protected)
            drop_rows = [s for s in drop if s not in row_only]
            if drop_rows and delta.is_table(self._table("runs")):
                literals = ", ".join(f"'{delta.check_partition_value(s)}'" for s in drop_rows)
                runs_table = delta.open_table(self._table("runs"))
                storage.retried(self._table("runs"), "delete", lambda: runs_table.delete(  # deleting again: a no-op
                    f"snapshot_id IN ({literals})",
                    commit_properties=CommitProperties(custom_metadata={"offsetlake.operation": "retain"})))
            if drop:
                list(pool.map(lambda table: self._drop_partitions(table, drop), SNAPSHOT_TABLES))
            still_kept = [r for r in kept if r["snapshot_id"] not in drop]
            counts = pool.map(lambda table: self._vacuum(table, still_kept, retention_hours), TABLES)
            vacuumed = {table: n for table, n in zip(TABLES, counts) if n is not None}
        attempts = self._retire_attempts(kept)
        return {"kept": sorted(keep_ids), "deleted": drop, "rows_kept": sorted(row_only & set(drop)),
                "vacuumed_files": vacuumed, "attempts_deleted": attempts}

    def _retire_attempts(self, kept: list[dict]) -> int:
        """The reruns kept aside in `_attempts/` recorded before the oldest kept snapshot started deleted, but the
        newest (what the page and `/metrics` show, as the newest failure keeps its `runs` row): a failed rerun of a
        served id adds one, and every /metrics and /overview request lists them. How many went."""
        starts = [r.get("started_at") for r in kept]
        starts = [t if t.tzinfo is not None else t.replace(tzinfo=_dt.timezone.utc)
                  for t in starts if isinstance(t, _dt.datetime)]
        if not starts:
            return 0
        since = min(starts).astimezone(_dt.timezone.utc).strftime(ATTEMPT_STAMP)
        folder = self.root.join(ATTEMPTS_DIR)
        old = [name for stamp, _, name in attempt_files(folder)[1:] if stamp < since]
        for name in old:
            folder.join(name).delete_file()
        return len(old)

    def _drop_partitions(self, table: str, drop: list[str]) -> None:
        """The partitions of `drop` removed from `table` in one metadata-only commit."""
        dt = delta.open_table(self._table(table))
        removes = [] if dt is None else delta.remove_actions(dt, partition=("snapshot_id", drop))
        if removes:
            delta.commit(dt, TABLES[table], removes, mode="append", partition_by=["snapshot_id"],
                         metadata={"offsetlake.operation": "retain"})

    def _vacuum(self, table: str, kept: list[dict], retention_hours: int) -> int | None:
        """`table` vacuumed but for the files `kept` runs' pinned versions read: how many files went (None: no
        such table)."""
        dt = delta.open_table(self._table(table))
        if dt is None:
            return None
        deleted = len(delta.vacuum(dt, retention_hours, keep=self._pinned_files(table, kept)))
        delta.remove_empty_dirs(self._table(table))
        return deleted

