"""`offsetlake sql`: DuckDB over a warehouse, one view per contract table, snapshot tables restricted to one
snapshot (`offset_commits` and `runs` whole).

The views scan the Delta tables through delta-rs' pyarrow datasets from the snapshot reader: a snapshot table is
its snapshot's partition at the Delta version the run pinned (`pipelines/io/snapshots.py`), DuckDB pushing the
query's filters down, so nothing is loaded up front. File access from SQL is switched off and the
configuration locked: a query can read the warehouse, nothing else, and cannot write.
"""
from __future__ import annotations

import csv
import io
import json
from typing import Any

import duckdb

from pipelines.io.snapshots import DeltaWarehouseReader, Snapshot, jsonable

FORMATS = ("table", "csv", "json")


def _quote(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def _contract_tables() -> tuple[dict, tuple]:
    from schemas.tables import SNAPSHOT_TABLES, TABLES  # pyspark type classes: only needed here, no JVM

    return TABLES, SNAPSHOT_TABLES


def connect(reader: DeltaWarehouseReader, snapshot: Snapshot) -> duckdb.DuckDBPyConnection:
    tables, snapshot_tables = _contract_tables()
    con = duckdb.connect(":memory:")
    for name in tables:
        if name in snapshot_tables:  # the snapshot's partition at the version its run pinned
            source = reader.snapshot_dataset(name, snapshot)
        else:
            source = reader.history_dataset(name)
        if source is None:  # a table the pipeline has not written yet: an empty view with the contract's columns
            from pyspark.sql.pandas.types import to_arrow_schema

            source = to_arrow_schema(tables[name]).empty_table()
        con.register(f"__delta_{name}", source)
        # the dataset holds the snapshot's files only; the filter keeps the view right for the empty stand-in too
        where = f" WHERE snapshot_id = {_quote(snapshot.snapshot_id)}" if name in snapshot_tables else ""
        con.execute(f'CREATE VIEW "{name}" AS SELECT * FROM "__delta_{name}"{where}')
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")
    return con


def run(con: duckdb.DuckDBPyConnection, query: str) -> tuple[list[str], list[tuple]]:
    """Run the query (raises duckdb.Error with DuckDB's message on a bad one)."""
    cur = con.execute(query)
    if cur.description is None:
        return [], []
    cols = [d[0] for d in cur.description]
    # Through Arrow: DuckDB's own Python conversion of timestamptz needs pytz.
    t = cur.fetch_arrow_table()
    return cols, [tuple(r) for r in zip(*(c.to_pylist() for c in t.columns))] if t.num_columns else []


def _cell(v: Any) -> str:
    if v is None:
        return "NULL"
    j = jsonable(v)
    return j if isinstance(j, str) else (json.dumps(j, default=str) if isinstance(j, (list, dict)) else str(j))


def render(cols: list[str], rows: list[tuple], fmt: str) -> str:
    if fmt == "json":
        return json.dumps([{c: jsonable(v) for c, v in zip(cols, r)} for r in rows], default=str, ensure_ascii=False) + "\n"
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(cols)
        for r in rows:
            w.writerow(["" if v is None else _cell(v) for v in r])
        return buf.getvalue()
    cells = [[_cell(v) for v in r] for r in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(cols)]
    sep = "+" + "+".join("-" * (w + 2) for w in widths) + "+"
    line = lambda vals: "| " + " | ".join(v.ljust(w) for v, w in zip(vals, widths)) + " |"  # noqa: E731
    out = [sep, line(cols), sep] + [line(r) for r in cells] + [sep, f"({len(rows)} row{'s' if len(rows) != 1 else ''})"]
    return "\n".join(out) + "\n"
