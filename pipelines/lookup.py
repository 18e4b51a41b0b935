"""Read-only access to a warehouse's snapshots, without Spark: a small reader protocol, its Delta implementation
(delta-rs + pyarrow) and snapshot resolution over the `runs` table (CONTRACT.md "Snapshots").

Everything on the serving side (describe, lookup, diff, reset-plan, sql, the HTTP API) reads through a
`SnapshotReader`, so tests and other storage layouts only have to implement four methods.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Protocol, Sequence

import pyarrow as pa

# Filters in the DNF form delta-rs/pyarrow take: [("group_id", "=", "g"), ("partition", "in", [0, 1])].
Filters = Sequence[tuple[str, str, Any]]

READABLE_STATUS = "succeeded"


class LookupError_(Exception):
    """Base of the serving errors; the message is meant for the user."""


class WarehouseError(LookupError_):
    """The warehouse directory is missing or is not an offsetlake warehouse (a usage error)."""


class SnapshotNotFound(LookupError_):
    """No readable snapshot with that id (or no readable snapshot at all)."""


class GroupNotFound(LookupError_):
    """The group does not exist in the chosen snapshot."""


class SnapshotReader(Protocol):
    """What the serving side needs from storage. Implementations are read-only and thread-safe."""

    def runs(self) -> pa.Table | None:
        """The whole `runs` table (None if the warehouse has none yet)."""

    def runs_version(self) -> int | None:
        """A cheap token that changes whenever `runs` gets a commit (a new snapshot may be readable)."""

    def snapshot_table(
        self, table: str, snapshot_id: str, *, filters: Filters | None = None, columns: list[str] | None = None
    ) -> pa.Table | None:
        """Rows of a snapshot table for one snapshot (None if the table does not exist)."""

    def history_table(
        self, table: str, *, filters: Filters | None = None, columns: list[str] | None = None
    ) -> pa.Table | None:
        """Rows of an unpartitioned table (`offset_commits`, `runs`); None if it does not exist."""


def _delta_log_version(path: Path) -> int | None:
    """Highest commit number in `_delta_log`; a directory listing, no JSON parsing (cheap enough per request)."""
    best = None
    try:
        with os.scandir(path / "_delta_log") as it:
            for entry in it:
                name = entry.name
                if name.endswith(".json") and name[:-5].isdigit():
                    v = int(name[:-5])
                    if best is None or v > best:
                        best = v
    except FileNotFoundError:
        return None
    return best


class DeltaWarehouseReader:
    """`<warehouse>/<table>/` Delta tables read with delta-rs; snapshot tables are pruned by the `snapshot_id`
    partition, other filters are pushed down to the Parquet row groups."""

    def __init__(self, warehouse: str | os.PathLike):
        self.root = Path(warehouse)
        if not self.root.is_dir():
            raise WarehouseError(f"warehouse {str(self.root)!r} is not a directory")
        if not (self.root / "runs" / "_delta_log").is_dir():
            raise WarehouseError(f"{str(self.root)!r} is not an offsetlake warehouse (no runs table)")

    def table_path(self, table: str) -> Path | None:
        p = self.root / table
        return p if (p / "_delta_log").is_dir() else None

    def _read(self, table: str, partitions, filters, columns) -> pa.Table | None:
        from deltalake import DeltaTable

        path = self.table_path(table)
        if path is None:
            return None
        dt = DeltaTable(str(path))
        if columns is not None:
            present = set(dt.schema().to_arrow().names)
            columns = [c for c in columns if c in present]
        return dt.to_pyarrow_table(partitions=partitions, filters=list(filters) if filters else None, columns=columns)

    def runs(self) -> pa.Table | None:
        return self._read("runs", None, None, None)

    def runs_version(self) -> int | None:
        return _delta_log_version(self.root / "runs")

    def table_version(self, table: str) -> int | None:
        return _delta_log_version(self.root / table)

    def snapshot_table(self, table, snapshot_id, *, filters=None, columns=None):
        return self._read(table, [("snapshot_id", "=", snapshot_id)], filters, columns)

    def history_table(self, table, *, filters=None, columns=None):
        return self._read(table, None, filters, columns)


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
    def cache_key(self) -> tuple:
        """Changes when the snapshot is rebuilt under the same id (a rerun replaces it)."""
        return (self.snapshot_id, self.started_at, self.finished_at)


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def _ts_key(t: datetime | None) -> datetime:
    return t if t is not None else _EPOCH


def snapshots_from_runs(runs: pa.Table | None) -> list[Snapshot]:
    """Every snapshot id with its latest `runs` row (by finished_at, then started_at), oldest first."""
    if runs is None or runs.num_rows == 0:
        return []
    latest: dict[str, dict] = {}
    for row in runs.to_pylist():
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
    snaps.sort(key=lambda s: (_ts_key(s.finished_at), _ts_key(s.started_at), s.snapshot_id))
    return snaps


def pick_snapshot(snaps: list[Snapshot], snapshot_id: str | None) -> Snapshot:
    """The requested snapshot, or the latest succeeded one (by finished_at). Raises SnapshotNotFound."""
    if snapshot_id is None:
        readable = [s for s in snaps if s.readable]
        if not readable:
            raise SnapshotNotFound("the warehouse has no succeeded snapshot yet")
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


def jsonable(value: Any) -> Any:
    """Arrow's Python values -> JSON values (timestamps as ISO strings, map columns as objects)."""
    if isinstance(value, datetime):
        return iso(value)
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        if value and all(isinstance(v, tuple) and len(v) == 2 for v in value):  # an Arrow map column
            return {str(k): jsonable(v) for k, v in value}
        return [jsonable(v) for v in value]
    if isinstance(value, tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, bytes):
        return value.hex()
    return value


def run_summary(s: Snapshot) -> dict:
    """A snapshot as the API and the CLI list it: its id, status, times and the whole runs row."""
    run = {k: v for k, v in s.run.items() if k != "snapshot_id"}
    counts = run.get("record_type_counts")
    if isinstance(counts, list):  # Arrow map -> list of (key, value)
        run["record_type_counts"] = {str(k): v for k, v in counts}
    return {"snapshot_id": s.snapshot_id, **jsonable(run)}
