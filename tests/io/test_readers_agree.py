"""Every reader of the warehouse gives the same, right answer to filtered queries.

Readers prune files with the Delta statistics the writer puts in the log, so a statistic that does not bound its
file's values makes a reader skip rows silently. The tables here are written through the project's real write paths
(Spark's for snapshot s1, several files per table; the Arrow write for s2 and s3) with rows built to break the
statistics (tests/io/stats_data.py), then read with delta-rs (pyarrow dataset, table filters, its SQL), DuckDB's
delta_scan, polars, Spark over the active Parquet files and `offsetlake sql`, under equality, range, prefix, IN,
null and join predicates on every column type. Each answer is compared with the same predicate applied in Python
to the rows that were written.
"""
from __future__ import annotations

import datetime as dt
import json

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, QueryBuilder

from pipelines.io import delta
from pipelines.io.warehouse import Warehouse
from schemas.tables import SNAPSHOT_TABLES, TABLES

from .io_warehouse_data import contract_rows, run_row, write_snapshot
from .stats_data import (PROBED, SNAPSHOT_GROUPS, active_stats, arrow_table, as_tuples, file_bounds, holds,
                         predicates, sql_condition, table_rows)

# other projects' readers (delta-rs, DuckDB, polars) pushing filters down into our files: a tier of their own
pytestmark = [pytest.mark.spark, pytest.mark.readers]

SIDS = list(SNAPSHOT_GROUPS)
JOIN_PREDS = [("state", "=", "Empty"), ("state", "in", ("Stable", "Dead")), ("leader", "prefix", "consumer-alerts"),
              ("group_id", "=", "alerts-etl-76"), ("group_id", "prefix", "alerts-etl-consumer-group-prod-eu-"),
              ("current_state_timestamp", ">=", dt.datetime(2024, 5, 17, 8, 30, 21, 999, tzinfo=dt.timezone.utc)),
              ("is_simple", "=", False)]


class Written:
    pass


@pytest.fixture(scope="module")
def written(spark, make_snapshot, tmp_path_factory) -> Written:
    w = Written()
    w.wh = wh = Warehouse(tmp_path_factory.mktemp("agree") / "warehouse")
    w.rows = {t: table_rows(t) for t in PROBED}
    for i, sid in enumerate(SIDS):
        if sid == "s1":  # Spark: several files, disjoint group_id ranges in one table, overlapping in the other
            frames = make_snapshot(sid, i)
            for t in PROBED:
                df = spark.createDataFrame(as_tuples(t, w.rows[t][sid], sid), delta.spark_schema(TABLES[t]))
                frames[t] = df.repartitionByRange(3, "group_id") if t == "loaded_offsets" else df.repartition(3)
        else:  # the Arrow write: one file per snapshot
            frames = {t: arrow_table(t, contract_rows(t, 3, i, sid)) for t in SNAPSHOT_TABLES}
            frames.update({t: arrow_table(t, as_tuples(t, w.rows[t][sid], sid)) for t in PROBED})
        write_snapshot(wh, sid, frames, run_row(i))
    # every row with its snapshot id: what a whole-table read returns
    w.all_rows = {t: [{**r, "snapshot_id": s} for s in SIDS for r in w.rows[t][s]] for t in PROBED}
    # the files' minima and maxima: an integer column is probed at each of them, either side, and at a sample of
    # its values in between (stats_data._probes)
    w.bounds = {t: file_bounds(wh.table_path(t)) for t in PROBED}
    return w


def test_the_tables_have_several_files_from_both_write_paths(written):
    for t in PROBED:
        files = delta.active_files(DeltaTable(str(written.wh.table_path(t))))
        per_sid = {s: sum(f["partition_values"]["snapshot_id"] == s for f in files) for s in SIDS}
        assert per_sid["s1"] >= 2 and per_sid["s2"] == per_sid["s3"] == 1, (t, per_sid)


def test_every_file_statistic_bounds_its_rows(written):
    """The Delta protocol's rule, checked file by file: min <= every value <= max, exact null and row counts."""
    for t in PROBED:
        path = written.wh.table_path(t)
        for file, stats in active_stats(path).items():
            rows = pq.read_table(path / file).to_pylist()
            assert stats["numRecords"] == len(rows), file
            for col, n in stats["nullCount"].items():
                assert n == sum(r[col] is None for r in rows), (file, col)
            for col in set(stats["minValues"]) | set(stats["maxValues"]):
                lo, hi = stats["minValues"].get(col), stats["maxValues"].get(col)
                assert (lo is None) == (hi is None), f"{t} {file} {col}: only one of min/max"
                vals = [r[col] for r in rows if r[col] is not None]
                if lo is None or not vals:
                    continue
                lo, hi = _stat_value(lo, vals[0]), _stat_value(hi, vals[0])
                assert lo <= min(vals) and max(vals) <= hi, (t, file, col, lo, min(vals), max(vals), hi)


def _stat_value(stat, like):
    if isinstance(like, dt.datetime):
        if isinstance(stat, dt.datetime):
            return stat if stat.tzinfo else stat.replace(tzinfo=dt.timezone.utc)
        return dt.datetime.fromisoformat(stat.replace("Z", "+00:00"))
    return stat


# ------------------------------------------------------------------ readers
def _expected(rows, pred) -> list[int]:
    return sorted(r["record_offset"] for r in rows if holds(r, pred))


def _arrow_type(t, col):
    return TABLES[t].field(col).type


def _arrow_expr(t, pred):
    col, op, v = pred
    f, typ = pc.field(col), _arrow_type(t, col)
    if op == "is_null":
        return f.is_null()
    if op == "not_null":
        return f.is_valid()
    if op == "in":
        return f.isin(pa.array(list(v), typ))
    if op == "prefix":
        return pc.starts_with(f, pattern=v)
    s = pa.scalar(v, typ)
    return {"=": f == s, ">=": f >= s, "<=": f <= s, ">": f > s, "<": f < s}[op]


def _offsets(table: pa.Table) -> list[int]:
    return sorted(table.column("record_offset").to_pylist())


def _check(reader: str, got: dict, want: dict) -> list[str]:
    return [f"{reader}: {key}: got {len(got[key])} rows, want {len(want[key])}"
            for key in want if got[key] != want[key]]


def _run(written, reader, read_one, filter_pred=lambda t, p: True, narrowed=True):
    wrong = []
    for t in PROBED:
        rows = written.all_rows[t]
        preds = [p for p in predicates(t, rows, written.bounds[t] if narrowed else None) if filter_pred(t, p)]
        assert preds
        want = {(t, p): _expected(rows, p) for p in preds}
        got = {(t, p): read_one(t, p) for p in preds}
        wrong += _check(reader, got, want)
    return wrong


def _report(wrong: list[str]) -> None:
    assert not wrong, f"{len(wrong)} wrong answers, e.g.\n" + "\n".join(wrong[:25])


def test_delta_rs_pyarrow_dataset(written):
    datasets = {t: DeltaTable(str(written.wh.table_path(t))).to_pyarrow_dataset() for t in PROBED}
    for t in PROBED:  # unfiltered: every row
        assert _offsets(datasets[t].to_table(columns=["record_offset"])) == _expected(
            written.all_rows[t], ("record_offset", "not_null", None))
    _report(_run(written, "delta-rs dataset", lambda t, p: _offsets(
        datasets[t].to_table(columns=["record_offset"], filter=_arrow_expr(t, p)))))


OPERATORS = ("=", ">=", "<=", ">", "<", "in", "prefix", "is_null", "not_null")


def _typed_probes(ops=("=", ">=", "<=", ">", "<", "in")):
    """A probe filter for `_run`: of the operators `ops`, every probe of a string or timestamp column (the literals a
    reader's own translation can get wrong: unicode, time zones, precision, and the statistics that are cut or
    rounded), one of each operator on the others (exact statistics, which `test_every_file_statistic_bounds_its_rows`
    holds to every row and delta-rs' dataset and SQL are asked at every bound)."""
    seen = set()

    def keep(t, p) -> bool:
        kind = delta.type_name(TABLES[t].field(p[0]).type)
        if p[1] not in ops or (kind not in ("string", "timestamp") and (t, *p[:2]) in seen):
            return False
        seen.add((t, *p[:2]))
        return True
    return keep


def test_delta_rs_table_filters(written):
    """`to_pyarrow_table(filters=…)`: delta-rs turns the DNF filters into an expression (pyarrow's
    `filters_to_expression`) over the dataset `test_delta_rs_pyarrow_dataset` probes at every bound: every string and
    timestamp probe, one of each operator on the other columns."""
    tables = {t: DeltaTable(str(written.wh.table_path(t))) for t in PROBED}
    _report(_run(written, "delta-rs to_pyarrow_table(filters)", lambda t, p: _offsets(
        tables[t].to_pyarrow_table(columns=["record_offset"], filters=[p])), _typed_probes()))


def test_delta_rs_sql(written):
    qb = QueryBuilder()
    for t in PROBED:
        qb.register(t, DeltaTable(str(written.wh.table_path(t))))

    def one(t, p):
        return _offsets(pa.table(qb.execute(f'SELECT record_offset FROM "{t}" WHERE {sql_condition(p)}').read_all()))

    wrong = _run(written, "delta-rs SQL", one)
    wrong += _joins(written, "delta-rs SQL", lambda q: _offsets(pa.table(qb.execute(q).read_all())),
                    lambda t: f'"{t}"')
    _report(wrong)


def test_duckdb_delta_scan(written, duck):
    def src(t):
        return f"delta_scan('{written.wh.table_path(t)}')"

    def one(t, p):
        query = f"SELECT record_offset FROM {src(t)} WHERE {sql_condition(p)}"
        return _offsets(duck.execute(query).fetch_arrow_table())

    wrong = _run(written, "duckdb delta_scan", one, _typed_probes(OPERATORS))
    wrong += _joins(written, "duckdb delta_scan", lambda q: _offsets(duck.execute(q).fetch_arrow_table()), src)
    _report(wrong)


def test_polars(written):
    pl = pytest.importorskip("polars")

    def expr(t, p):
        col, op, v = p
        c = pl.col(col)
        if op == "is_null":
            return c.is_null()
        if op == "not_null":
            return c.is_not_null()
        if op == "prefix":
            return c.str.starts_with(v)
        if isinstance(v, tuple) or isinstance(v, dt.datetime):
            dtype = pl.Datetime("us", "UTC") if _arrow_type(t, col) == pa.timestamp("us", "UTC") else None
            if op == "in":
                return c.is_in(pl.Series(list(v), dtype=dtype) if dtype else list(v))
            v = pl.lit(v, dtype=dtype)
        return {"=": c == v, ">=": c >= v, "<=": c <= v, ">": c > v, "<": c < v}[op]

    paths = {t: str(written.wh.table_path(t)) for t in PROBED}
    # the table opened once, as a session querying it again and again holds it; polars prunes the files itself
    tables = {t: DeltaTable(paths[t]) for t in PROBED}
    wrong = _run(written, "polars scan_delta", lambda t, p: sorted(
        pl.scan_delta(tables[t]).filter(expr(t, p)).select("record_offset").collect()["record_offset"].to_list()),
                 _typed_probes(OPERATORS))
    # read_delta takes no predicate (it reads the whole table, then polars filters it): one read per table serves
    # every predicate
    read = {t: pl.read_delta(paths[t]) for t in PROBED}
    wrong += _run(written, "polars read_delta", lambda t, p: sorted(
        read[t].filter(expr(t, p))["record_offset"].to_list()), lambda t, p: p[1] == "=")
    _report(wrong)


def test_spark_over_the_active_files(written, spark):
    from pyspark.sql import functions as F

    frames = {}
    for t in PROBED:  # the active files of every snapshot, as the warehouse reads them with Spark
        parts = [written.wh.spark_read(spark, t, sid) for sid in SIDS]
        frames[t] = parts[0].unionByName(parts[1]).unionByName(parts[2]).cache()

    def cond(p):
        col, op, v = p
        c = F.col(col)
        return {"is_null": lambda: c.isNull(), "not_null": lambda: c.isNotNull(), "in": lambda: c.isin(list(v)),
                "prefix": lambda: c.startswith(v), "=": lambda: c == v, ">=": lambda: c >= v,
                "<=": lambda: c <= v, ">": lambda: c > v, "<": lambda: c < v}[op]()

    def one(t, p):
        return sorted(r[0] for r in frames[t].filter(cond(p)).select("record_offset").collect())

    # a sample: Spark reads Parquet itself (no Delta statistics), one job per predicate
    every = {"loaded_offsets": 41, "loaded_groups": 19}
    keep = {t: set(predicates(t, written.all_rows[t])[:: every[t]]) for t in PROBED}
    _report(_run(written, "spark", one, lambda t, p: p in keep[t], narrowed=False))


# ------------------------------------------------------------------ joins
def _join_sql(src, pred, snapshot_cond=True) -> str:
    on = "o.group_id = g.group_id" + (" AND o.snapshot_id = g.snapshot_id" if snapshot_cond else "")
    return (f"SELECT o.record_offset FROM {src('loaded_offsets')} o JOIN {src('loaded_groups')} g ON {on} "
            f"WHERE {sql_condition(pred, 'g.')}")


def _join_expected(offsets, groups, pred) -> list[int]:
    keep = {(g["snapshot_id"], g["group_id"]) for g in groups if holds(g, pred)}
    return sorted(o["record_offset"] for o in offsets if (o["snapshot_id"], o["group_id"]) in keep)


def _joins(written, reader, run, src) -> list[str]:
    wrong = []
    for pred in JOIN_PREDS:
        want = _join_expected(written.all_rows["loaded_offsets"], written.all_rows["loaded_groups"], pred)
        assert want, pred
        got = run(_join_sql(src, pred))
        if got != want:
            wrong.append(f"{reader}: join on {pred}: got {len(got)} rows, want {len(want)}")
    return wrong


# ------------------------------------------------------------------ the project's own readers
def test_offsetlake_sql(written):
    from pipelines.io.snapshots import DeltaWarehouseReader, resolve_snapshot
    from pipelines.serving import sql as sqlmod

    reader = DeltaWarehouseReader(written.wh.path)
    wrong = []
    try:
        for sid in SIDS:
            con = sqlmod.connect(reader, resolve_snapshot(reader, sid))
            for t in PROBED:
                rows = [{**r, "snapshot_id": sid} for r in written.rows[t][sid]]
                # DuckDB pushes the filters into the snapshot's dataset, whose pruning
                # test_warehouse_read_table_filters asks at every bound
                keep = _typed_probes(OPERATORS)
                for p in (p for p in predicates(t, rows, written.bounds[t]) if keep(t, p)):
                    _, got = sqlmod.run(con, f'SELECT record_offset FROM "{t}" WHERE {sql_condition(p)}')
                    if sorted(r[0] for r in got) != _expected(rows, p):
                        wrong.append(f"offsetlake sql {sid}: {t} {p}: got {len(got)}, want {len(_expected(rows, p))}")
            offsets = [{**r, "snapshot_id": sid} for r in written.rows["loaded_offsets"][sid]]
            groups = [{**r, "snapshot_id": sid} for r in written.rows["loaded_groups"][sid]]
            for pred in JOIN_PREDS:
                _, got = sqlmod.run(con, _join_sql(lambda t: f'"{t}"', pred, snapshot_cond=False))
                if sorted(r[0] for r in got) != _join_expected(offsets, groups, pred):
                    wrong.append(f"offsetlake sql {sid}: join on {pred}")
            con.close()
    finally:
        reader.close()
    _report(wrong)


def test_offsetlake_sql_command_answers_the_reported_queries(written):
    """The queries of the bug report, through the command itself."""
    from click.testing import CliRunner

    from jobs.cli import main

    offsets = written.rows["loaded_offsets"]["s1"]
    groups = written.rows["loaded_groups"]["s1"]
    empty = {g["group_id"] for g in groups if g["state"] == "Empty"}
    since = dt.datetime(2024, 5, 17, 8, 32, 0, 1, tzinfo=dt.timezone.utc)
    cases = {
        "SELECT count(*) FROM loaded_groups WHERE group_id = 'alerts-etl-76'": 1,
        "SELECT count(*) FROM loaded_groups WHERE group_id LIKE 'a%'":
            sum(g["group_id"].startswith("a") for g in groups),
        "SELECT count(*) FROM loaded_offsets o JOIN loaded_groups g ON o.group_id = g.group_id "
        "WHERE g.state = 'Empty'": sum(o["group_id"] in empty for o in offsets),
        "SELECT count(*) FROM loaded_offsets WHERE commit_timestamp >= TIMESTAMPTZ '2024-05-17 08:32:00.000001+00'":
            sum(o["commit_timestamp"] >= since for o in offsets),
        "SELECT count(*) FROM loaded_groups WHERE leader LIKE 'consumer-alerts-etl-consumer-group-prod-e%'":
            sum((g["leader"] or "").startswith("consumer-alerts-etl-consumer-group-prod-e") for g in groups),
    }
    for query, want in cases.items():
        assert want > 0, query
        res = CliRunner().invoke(main, ["sql", "--warehouse", str(written.wh.path), "--snapshot", "s1",
                                        "--format", "json", query])
        assert res.exit_code == 0, res.output
        assert list(json.loads(res.output)[0].values()) == [want], query


def test_warehouse_read_table_filters(written):
    """Every predicate on the snapshot's dataset the reader gives `Warehouse.read_table` (opened once per table),
    and `read_table` itself (which opens the warehouse on each call) on one predicate of every column and operator."""
    from pipelines.io.snapshots import DeltaWarehouseReader

    wrong = []
    reader = DeltaWarehouseReader(written.wh.path)
    try:
        for sid in ("s1", "s2"):  # a snapshot written by Spark, one by the Arrow write
            for t in PROBED:
                rows = [{**r, "snapshot_id": sid} for r in written.rows[t][sid]]
                ds = reader.snapshot_dataset(t, sid)
                through_read_table = {}
                for p in predicates(t, rows, written.bounds[t]):
                    through_read_table.setdefault(p[:2], p)
                    got = _offsets(ds.to_table(columns=["record_offset"], filter=_arrow_expr(t, p)))
                    if got != _expected(rows, p):
                        wrong.append(f"snapshot_dataset {sid}: {t} {p}")
                for p in through_read_table.values():
                    got = _offsets(written.wh.read_table(t, sid, columns=["record_offset"], filters=_arrow_expr(t, p)))
                    if got != _expected(rows, p):
                        wrong.append(f"Warehouse.read_table {sid}: {t} {p}")
    finally:
        reader.close()
    _report(wrong)


def test_warehouse_reader_dictionary_scan(written):
    """`DeltaWarehouseReader.history_table(dictionary=…)` (the scan `changes` and `restore-plan` read log-sized
    histories with: string columns as the files' dictionaries) keeps the rows each predicate `_sql_where` takes
    selects: comparisons and `in` against the written rows, an empty `in`, `not in` and `= None` against the DuckDB
    path; and the strings come back the same. Reading the files' dictionaries changes how string columns are read, nothing else:
    every probe of a string column, and of a timestamp column (a literal the two paths translate), is asked; of an
    integer or boolean column, one of each operator (the pruning itself is delta-rs' dataset's, which
    `test_delta_rs_pyarrow_dataset` probes at every bound)."""
    from pipelines.io.snapshots import DeltaWarehouseReader

    reader = DeltaWarehouseReader(written.wh.path)
    try:
        for t in PROBED:
            rows = written.all_rows[t]
            strings = tuple(f.name for f in TABLES[t] if delta.type_name(f.type) == "string")
            whole = reader.history_table(t, dictionary=strings)
            assert any(pa.types.is_dictionary(whole.schema.field(c).type) for c in strings)
            plain = reader.history_table(t)
            for c in strings:
                assert sorted(whole.column(c).to_pylist(), key=str) == sorted(plain.column(c).to_pylist(), key=str)
            keep = _typed_probes()
            preds = [p for p in predicates(t, rows, written.bounds[t]) if keep(t, p)]
            col = strings[0]
            values = sorted({r[col] for r in rows if r[col] is not None})
            extra = [(col, "in", []), (col, "not in", values[:2]), (col, "=", None), (col, "!=", None)]
            for p in preds + extra:
                got = _offsets(reader.history_table(t, filters=[p], columns=["record_offset"], dictionary=strings))
                if p[1] in ("=", ">=", "<=", ">", "<", "in") and p[2] is not None:
                    assert got == _expected(rows, p), (t, p)
                else:  # no reference answer for these here: the DuckDB path's
                    assert got == _offsets(reader.history_table(t, filters=[p], columns=["record_offset"])), (t, p)
    finally:
        reader.close()
