"""Builds offsetlake warehouses for the serving tests: one Delta table per contract table (schemas/tables.py),
snapshot tables partitioned by snapshot_id, the `runs` row written last — the layout CONTRACT.md promises.

Rows are dicts with the contract's column names; missing columns are null. Helpers make typical rows.
"""
from __future__ import annotations

import itertools
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow as pa
from deltalake import write_deltalake

from schemas.tables import SNAPSHOT_TABLES, TABLES

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
_record = itertools.count(1000)


def arrow_schema(table: str) -> pa.Schema:
    return TABLES[table]


def ts(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def offset(group, topic, partition, committed, *, t=0.0, leader_epoch=None, metadata="", **kw) -> dict:
    return {
        "group_id": group,
        "topic": topic,
        "partition": partition,
        "offsets_partition": kw.pop("offsets_partition", 0),
        "committed_offset": committed,
        "leader_epoch": leader_epoch,
        "metadata": metadata,
        "commit_timestamp": ts(t),
        "expire_timestamp": None,
        "record_offset": next(_record),
        "has_group_metadata": kw.pop("has_group_metadata", True),
        "producer_id": -1,
        **kw,
    }


def group(group_id, state="Stable", *, members=0, generation=1, protocol="range", leader=None, group_type="classic",
          protocol_type="consumer", t=0.0, **kw) -> dict:
    return {
        "group_id": group_id,
        "offsets_partition": kw.pop("offsets_partition", 0),
        "group_type": group_type,
        "protocol_type": protocol_type,
        "generation": generation,
        "protocol": protocol,
        "leader": leader,
        "state": state,
        "current_state_timestamp": ts(t),
        "member_count": members,
        "record_offset": next(_record),
        "is_simple": False,
        **kw,
    }


def member(group_id, member_id, assigned=(), *, client_id="client", host="/10.0.0.1", instance=None, **kw) -> dict:
    return {
        "group_id": group_id,
        "member_id": member_id,
        "group_instance_id": instance,
        "client_id": client_id,
        "client_host": host,
        "session_timeout_ms": 45000,
        "rebalance_timeout_ms": 300000,
        "subscribed_topics": sorted({tp[0] for tp in assigned}),
        "assigned_partitions": [{"topic": tp[0], "partition": tp[1]} for tp in assigned],
        "group_type": kw.pop("group_type", "classic"),
        **kw,
    }


def commit(group, topic, partition, committed, *, t=0.0, tombstone=False, txn=None, offsets_partition=0,
           applied: bool | None = None) -> dict:
    """An `offset_commits` row with what the engine records of it: it took effect at its own position and time
    unless its transaction was aborted or is still pending (`applied` says otherwise)."""
    record = next(_record)
    took = applied if applied is not None else txn not in ("aborted", "pending")
    return {
        "offsets_partition": offsets_partition,
        "record_offset": record,
        "group_id": group,
        "topic": topic,
        "partition": partition,
        "committed_offset": None if tombstone else committed,
        "commit_timestamp": ts(t),
        "is_tombstone": tombstone,
        "producer_id": -1,
        "txn_outcome": txn,
        "record_timestamp": ts(t),
        "applied_offset": record if took else None,
        "applied_timestamp": ts(t) if took else None,
    }


class WarehouseKit:
    def __init__(self, root: str | Path):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self._clock = itertools.count(1)

    def path(self, table: str) -> str:
        return str(self.root / table)

    def append(self, table: str, data, *, replace_snapshot: str | None = None) -> None:
        """Append rows (dicts or an Arrow table) to a contract table, creating it on first use."""
        schema = arrow_schema(table)
        if not isinstance(data, pa.Table):
            cols = schema.names
            data = pa.Table.from_pylist([{c: r.get(c) for c in cols} for r in data], schema=schema)
        else:
            data = data.select(schema.names).cast(schema)
        partition_by = ["snapshot_id"] if table in SNAPSHOT_TABLES else None
        exists = (self.root / table / "_delta_log").is_dir()
        if replace_snapshot is not None and exists:
            write_deltalake(self.path(table), data, mode="overwrite", predicate=f"snapshot_id = '{replace_snapshot}'",
                            partition_by=partition_by)
        else:
            write_deltalake(self.path(table), data, mode="append", partition_by=partition_by)

    def snapshot(
        self,
        snapshot_id: str,
        *,
        groups=(),
        members=(),
        offsets=(),
        empty_group_offsets=(),
        pending=(),
        expired_offsets=(),
        expired_groups=(),
        removed_groups=(),
        quarantine=(),
        log_end_offsets=(),
        commits=(),
        status: str = "succeeded",
        as_of: datetime | None = None,
        finished_at: datetime | None = None,
        replace: bool = False,
        tables: dict[str, pa.Table] | None = None,
        kind: str | None = None,
        validation: str = "{}",
        summary: str = "{}",
    ) -> str:
        """Write one snapshot: every snapshot table, the history, then its runs row (last, as the pipeline does)."""
        given = {
            "loaded_groups": groups,
            "group_members": members,
            "loaded_offsets": offsets,
            "empty_group_offsets": empty_group_offsets,
            "pending_offsets": pending,
            "expired_offsets": expired_offsets,
            "expired_groups": expired_groups,
            "removed_groups": removed_groups,
            "quarantine": quarantine,
            "log_end_offsets": [{"source": "replication-offset-checkpoint", **r} for r in log_end_offsets],
        }
        tables = tables or {}
        for table in SNAPSHOT_TABLES:
            if table in tables:
                data = tables[table]
                if "snapshot_id" in data.column_names:
                    data = data.drop_columns(["snapshot_id"])
                data = data.append_column("snapshot_id", pa.array([snapshot_id] * data.num_rows, pa.string()))
            else:
                data = [{**r, "snapshot_id": snapshot_id} for r in given.get(table, ())]
            self.append(table, data, replace_snapshot=snapshot_id if replace else None)
        if commits:
            self.append("offset_commits", [{**c, "snapshot_id": snapshot_id} for c in commits])
        elif not (self.root / "offset_commits" / "_delta_log").is_dir():
            self.append("offset_commits", [])
        tick = next(self._clock)
        finished = finished_at or (T0 + timedelta(hours=tick))
        self.append(
            "runs",
            [
                {
                    "snapshot_id": snapshot_id,
                    "status": status,
                    "started_at": finished - timedelta(minutes=1),
                    "finished_at": finished,
                    "as_of": as_of,
                    "retention_minutes": 10080,
                    "semantics": "legacy",
                    "inputs": ["dump/"],
                    "records_in": 10,
                    "records_out": 10,
                    "records_quarantined": 0,
                    "record_type_counts": [("offset_commit", 10)],
                    "validation": validation,
                    "summary": summary,
                    "kind": kind,
                }
            ],
        )
        return snapshot_id

    def run(self, snapshot_id: str, status: str, *, started_at: datetime | None, finished_at: datetime | None = None,
            as_of: datetime | None = None, validation: str = "{}", summary: str = "{}", kind: str | None = None) -> str:
        """A `runs` row alone, as a run that failed before writing any table records itself (no finished_at or
        as_of unless given)."""
        self.append("runs", [{"snapshot_id": snapshot_id, "status": status, "started_at": started_at,
                              "finished_at": finished_at, "as_of": as_of, "retention_minutes": 10080,
                              "semantics": "legacy", "inputs": ["dump/"], "validation": validation,
                              "summary": summary, "kind": kind}])
        return snapshot_id
