"""Repair of the per-file statistics in a warehouse's Delta logs.

Earlier versions wrote statistics that did not bound their files (a long string's max left out, timestamps with a
null count but no min/max), and delta-rs then skips files that hold matching rows. A repair checks every active
file's logged statistics against the exact bounds in its Parquet footer and, per table with files whose statistics
can make a reader skip them wrongly, commits ONE transaction that re-adds those files (same path, size, partition
values; `dataChange=false`) with statistics from `delta.file_stats`, as Delta Spark's statistics recomputation
does: in Delta a later add of an active path replaces its statistics. The rows are untouched. A table whose
statistics are sound gets no commit, so a second repair changes nothing.
"""
from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake.exceptions import DeltaError
from deltalake.transaction import AddAction

from pipelines.io import delta, storage
from pipelines.io.warehouse import Warehouse
from schemas.tables import TABLES

_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)


class StatsRepairError(RuntimeError):
    """A table could not be repaired (nothing was committed to it)."""


@dataclass
class TableRepair:
    table: str
    files: int = 0
    fixed: list[str] = field(default_factory=list)  # relative paths whose statistics were replaced
    version: int | None = None  # the repair commit, None when nothing needed fixing


def _table_schema(dt) -> pa.Schema:
    """The table's own schema (its Delta log's), as Arrow."""
    return pa.schema(dt.schema().to_arrow())


def _micros(v: _dt.datetime) -> int:
    v = v if v.tzinfo else v.replace(tzinfo=_dt.timezone.utc)
    return (v - _EPOCH) // _dt.timedelta(microseconds=1)


def _wrong_column(kind: str, logged: tuple, footer: tuple) -> bool:
    """Whether a column's logged (null count, min, max) can make a reader skip this file wrongly, judged against
    the footer's exact (null count, min, max)."""
    nc_l, lo_l, hi_l = logged
    nc, lo, hi = footer
    if nc_l is not None and nc_l != nc:
        return True
    if (lo_l is None) != (hi_l is None):
        return True  # delta-rs reads the missing one as "nothing matches"
    if lo_l is None:  # a null count without min/max: delta-rs skips the file for every comparison
        return nc_l is not None and lo is not None and delta.stat_bounds(kind, lo, hi) is not None
    if lo is None:
        return False  # nothing to check it against
    if kind == "timestamp":
        # the protocol lets a writer truncate timestamps to milliseconds; readers widen a max by 1 ms for it
        return _micros(lo_l) > lo or _micros(hi_l) < hi // 1000 * 1000
    return lo_l > lo or hi_l < hi


def _wrong_file(row: dict, rows: int, bounds: dict, kinds: dict) -> bool:
    if row.get("num_records") != rows:
        return True
    return any(_wrong_column(kinds[c], (row.get(f"null_count.{c}"), row.get(f"min.{c}"), row.get(f"max.{c}")), b)
               for c, b in bounds.items())


def repair_table(path: str | Path, name: str | None = None) -> TableRepair:
    """Recompute the statistics of the active files of the Delta table at `path`; commit if any differ."""
    path = storage.location(path)
    dt = delta.open_table(path)
    report = TableRepair(name or path.name)
    if dt is None:
        return report
    version = dt.version()
    schema = _table_schema(dt)
    parts = list(dt.metadata().partition_columns)
    kinds = {f.name: delta.type_name(f.type) for f in schema}
    rows = delta.add_actions(dt, flatten=True).to_pylist()
    files = {f["path"]: f for f in delta.active_files(dt)}
    adds = []
    for row in rows:
        rel = row["path"]
        f = path / rel
        if not f.is_file():
            raise StatsRepairError(f"{report.table}: active file {rel} is missing from {path}")
        try:
            with storage.errors(f), f.fs.open_input_file(f.path) as src:
                footer = pq.read_metadata(src)
        except pa.ArrowInvalid as e:  # no footer to read (a file cut short or overwritten): nothing to repair from
            raise StatsRepairError(f"{report.table}: active file {rel} is no Parquet file: {e}") from None
        if not _wrong_file(row, *delta.footer_bounds(footer, schema, parts), kinds):
            continue
        stats, _ = delta.file_stats(footer, schema, parts)
        report.fixed.append(rel)
        adds.append(AddAction(path=rel, size=row["size_bytes"],
                              partition_values=files[rel]["partition_values"],
                              modification_time=row["modification_time"], data_change=False, stats=stats))
    report.files = len(rows)
    if not adds:
        return report
    if delta.open_table(path).version() != version:
        raise StatsRepairError(f"{report.table}: the table changed while it was being repaired; run the repair again")
    report.version = delta.commit(dt, schema, adds, mode="append", partition_by=parts or None,
                                  metadata={"offsetlake.operation": "repair_stats"})
    return report


def repair_warehouse(warehouse: str | Path) -> list[TableRepair]:
    """`repair_table` for every table of the warehouse (tables never written are left out), then `repin`."""
    root = storage.location(warehouse)
    if not root.is_dir():
        raise StatsRepairError(f"{root}: no such warehouse directory")
    reports = [_repair_named(root / t, t) for t in TABLES if delta.is_table(root / t)]
    repin(root, {r.table: r.version for r in reports if r.version is not None})
    return reports


def _repair_named(path, table: str) -> TableRepair:
    """`repair_table`, a delta-rs error on a damaged table (a commit file truncated) said with the table's name."""
    try:
        return repair_table(path, table)
    except DeltaError as e:  # its first line: the rest is a Rust backtrace when RUST_BACKTRACE is set
        raise StatsRepairError(f"{table}: cannot read its Delta log at {path}: "
                               f"{str(e).strip().split(chr(10), 1)[0].strip()}") from None


def _partition_files(path, version: int, snapshot_id: str) -> set[str]:
    """The files a snapshot reads of the table at `version`: its partition's, or every file of the history (which
    a later run's records make another history than the one the snapshot pinned)."""
    dt = delta.open_table(path, version)
    return {f["path"] for f in delta.active_files(dt)
            if "snapshot_id" not in f["partition_values"] or f["partition_values"]["snapshot_id"] == snapshot_id}


def repin(warehouse, repaired: dict[str, int]) -> None:
    """Snapshots are read at the table versions their runs pinned (`runs.table_versions`), which predate a
    repair: a snapshot whose files the repair commit left as they were (it only re-adds them with new statistics)
    is pinned to the repair's version instead, so its readers get the repaired statistics."""
    if not repaired:
        return
    wh = Warehouse(warehouse)
    for run in wh.snapshots():
        pinned = dict(run.get("table_versions") or {})
        moved = {t: v for t, v in repaired.items() if t in pinned and pinned[t] < v
                 and _partition_files(wh.table_path(t), pinned[t], run["snapshot_id"])
                 == _partition_files(wh.table_path(t), v, run["snapshot_id"])}
        if moved:
            wh.mark_run(run["snapshot_id"], {**{k: v for k, v in run.items() if k != "snapshot_id"},
                                             "table_versions": {**pinned, **moved}})
