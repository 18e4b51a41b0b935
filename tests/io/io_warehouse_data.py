"""Tiny contract-typed rows for the warehouse tests, and row normalisation shared by the three readers."""
from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pyarrow as pa

from pipelines.io.delta import spark_schema
from pipelines.io.table_rows import ArrowRows, FrameRows
from pipelines.io.warehouse import HistoryWrite, Warehouse
from schemas.tables import TABLES, columns

UTC = dt.timezone.utc
BASE_TIME = dt.datetime(2024, 5, 17, 8, 30, 0, 123456, tzinfo=UTC)  # micros must survive every reader


def _value(field_type, name: str, i: int, salt: int):
    t = field_type.typeName()
    if t == "string":
        return f"{name}-{salt}-{i}"
    if t == "integer":
        return i + 10 * salt
    if t == "long":
        return 1_000_000_000_000 + 1000 * salt + i  # beyond int32
    if t == "boolean":
        return (i + salt) % 2 == 0
    if t == "double":
        return i + 10 * salt + 0.25  # exact in binary: every reader gives it back as written
    if t == "timestamp":
        return BASE_TIME + dt.timedelta(hours=salt, seconds=i, microseconds=i)
    if t == "array":
        el = field_type.elementType
        return [_value(el, name, i, salt), _value(el, name, i + 1, salt)]
    if t == "struct":
        return tuple(_value(f.dataType, f.name, i, salt) for f in field_type.fields)
    if t == "map":
        return {f"{name}-k{i}": i + salt}
    raise AssertionError(f"no test value for {t}")


def contract_rows(table: str, n: int = 3, salt: int = 0, snapshot_id: str | None = None) -> list[tuple]:
    """`n` rows of `table` in contract order: every column filled; in the last row every nullable
    column is null (nulls must round-trip too)."""
    rows = []
    for i in range(n):
        row = []
        for f in spark_schema(TABLES[table]).fields:
            if f.name == "snapshot_id":
                row.append(snapshot_id)
            elif f.nullable and i == n - 1 and n > 1:
                row.append(None)
            else:
                row.append(_value(f.dataType, f.name, i, salt))
        rows.append(tuple(row))
    return rows


def offset_commit_rows(records: list[tuple[int, int, str | None]], salt: int = 0) -> list[tuple]:
    """offset_commits rows for (offsets_partition, record_offset, txn_outcome) triples (the columns a replay at
    any time needs, after the first fourteen, left null)."""
    out = []
    rest = (None,) * (len(columns("offset_commits")) - 14)
    for part, off, outcome in records:
        out.append((part, off, f"g{part}", "orders", off % 3, off * 10, BASE_TIME + dt.timedelta(seconds=off),
                    False, 7 if outcome else -1, outcome, 1, f"m-{salt}", BASE_TIME, None, *rest))
    return out


def run_row(salt: int = 0, **extra) -> dict:
    row = {
        "started_at": BASE_TIME,
        "as_of": BASE_TIME + dt.timedelta(hours=1),
        "retention_minutes": 10080,
        "semantics": "legacy",
        "inputs": [f"/dumps/{salt}/00000000000000000000.log"],
        "records_in": 10 + salt,
        "records_out": 9 + salt,
        "records_quarantined": 1,
        "record_type_counts": {"offset_commit": 7, "group_metadata": 2},
        "validation": {"success": True},
    }
    row.update(extra)
    return row


def normalized(table: pa.Table | list[dict], names: list[str] | None = None) -> list[dict]:
    """Rows comparable across readers: UTC-aware datetimes, maps as sorted pairs, sorted rows."""
    rows = table.to_pylist() if isinstance(table, pa.Table) else table

    def norm(v):
        if isinstance(v, dt.datetime):
            return (v if v.tzinfo else v.replace(tzinfo=UTC)).astimezone(UTC)
        if isinstance(v, dict):
            return {k: norm(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            vals = [norm(x) for x in v]
            if vals and all(isinstance(x, tuple) and len(x) == 2 for x in v):  # arrow map as pairs
                return sorted(vals)
            return vals
        return v

    out = [{k: norm(v) for k, v in r.items() if names is None or k in names} for r in rows]
    return sorted(out, key=lambda r: json.dumps(r, sort_keys=True, default=str))


def _as_read(data_type, v):
    """A test value as the readers give it back: structs as dicts (nested ones too), maps as sorted pairs."""
    if v is None:
        return None
    t = data_type.typeName()
    if t == "array":
        return [_as_read(data_type.elementType, e) for e in v]
    if t == "struct":
        return {f.name: _as_read(f.dataType, e) for f, e in zip(data_type.fields, v)}
    if t == "map":
        return sorted(v.items())
    return v


def expected_rows(table: str, tuples: list[tuple]) -> list[dict]:
    cols = columns(table)
    rows = []
    for t in tuples:
        r = {}
        for c, v, f in zip(cols, t, spark_schema(TABLES[table]).fields):
            r[c] = _as_read(f.dataType, v)
        rows.append(r)
    return normalized(rows)


def duck_read(con, table_path: Path, snapshot_id: str | None = None) -> pa.Table:
    sql = f"SELECT * FROM delta_scan('{table_path}')"
    if snapshot_id is not None:
        return con.execute(sql + " WHERE snapshot_id = ?", [snapshot_id]).fetch_arrow_table()
    return con.execute(sql).fetch_arrow_table()


def write_snapshot(wh: Warehouse, snapshot_id: str, tables: dict, run_row: dict, *, clustered: bool = False,
                   **kw) -> None:
    """`wh.write_snapshot` of the tables as these tests build them (Arrow tables in this process, DataFrames on
    Spark), a history among them (`offset_commits`) merged as a full run's; `clustered`: each of its records once,
    grouped by offsets partition in record order."""
    rows = {t: ArrowRows(a, clustered) if isinstance(a, pa.Table) else FrameRows(a, clustered)
            for t, a in tables.items()}
    history = rows.pop("offset_commits", None)
    wh.write_snapshot(snapshot_id, rows, run_row, history=None if history is None else HistoryWrite(rows=history),
                      **kw)
