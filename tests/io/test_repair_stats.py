"""`offsetlake repair-stats` on a warehouse written with the statistics of earlier versions (a long string max
left out, the min cut to 32 characters, timestamps with a null count only): delta-rs and `offsetlake sql` skip rows
before the repair and answer right after it; the rows are unchanged and a second repair changes nothing."""
from __future__ import annotations

import datetime as dt
import json

import pyarrow as pa
import pytest
from click.testing import CliRunner
from deltalake import DeltaTable

from jobs.cli import main
from pipelines.io import delta
from pipelines.io.warehouse import Warehouse
from schemas.tables import SNAPSHOT_TABLES, TABLES

from .io_warehouse_data import contract_rows, normalized, run_row, write_snapshot
from .stats_data import (PROBED, active_stats, arrow_table, as_tuples, file_bounds, holds, predicates, sql_condition,
                         table_rows)

UTC = dt.timezone.utc
_file_stats = delta.file_stats


def _old_file_stats(footer, struct, partition_columns=()):
    """The statistics earlier versions wrote: a string's min cut to 32 characters and its max left out when
    longer; timestamps with a null count but no min/max."""
    stats_json, rows = _file_stats(footer, struct, partition_columns)
    stats = json.loads(stats_json)
    _, exact = delta.footer_bounds(footer, struct, partition_columns)  # the file's own min/max per column
    for f in struct:
        kind = delta.type_name(f.type)
        if kind == "timestamp":
            stats["minValues"].pop(f.name, None)
            stats["maxValues"].pop(f.name, None)
        elif kind == "string" and f.name in exact:
            _, lo, hi = exact[f.name]
            stats["minValues"].pop(f.name, None)
            stats["maxValues"].pop(f.name, None)
            if lo is not None:
                stats["minValues"][f.name] = lo[:32]
                if len(hi) <= 32:
                    stats["maxValues"][f.name] = hi
    return json.dumps(stats), rows


@pytest.fixture()
def old_warehouse(tmp_path, monkeypatch):
    wh = Warehouse(tmp_path / "wh")
    rows = {t: table_rows(t)["s1"] for t in PROBED}
    frames = {t: arrow_table(t, contract_rows(t, 3, 0, "s1")) for t in SNAPSHOT_TABLES}
    frames.update({t: arrow_table(t, as_tuples(t, rows[t], "s1")) for t in PROBED})
    with monkeypatch.context() as m:
        m.setattr(delta, "file_stats", _old_file_stats)
        write_snapshot(wh, "s1", frames, run_row(0))
    return wh, {t: [{**r, "snapshot_id": "s1"} for r in rows[t]] for t in PROBED}


def _dataset_offsets(wh, table, expr) -> list[int]:
    t = DeltaTable(str(wh.table_path(table))).to_pyarrow_dataset().to_table(columns=["record_offset"], filter=expr)
    return sorted(t.column("record_offset").to_pylist())


def _sql_count(wh, query) -> int:
    res = CliRunner().invoke(main, ["sql", "--warehouse", str(wh.path), "--format", "json", query])
    assert res.exit_code == 0, res.output
    return list(json.loads(res.output)[0].values())[0]


def _whole(wh) -> dict:
    return {t: normalized(DeltaTable(str(wh.table_path(t))).to_pyarrow_table()) for t in TABLES
            if delta.is_table(wh.table_path(t))}


def test_repair_makes_filtered_reads_right_and_keeps_the_rows(old_warehouse, duck):
    import pyarrow.compute as pc

    wh, rows = old_warehouse
    since = dt.datetime(2024, 5, 17, 8, 31, 0, 1, tzinfo=UTC)
    ts_expr = pc.field("commit_timestamp") >= pa.scalar(since, pa.timestamp("us", "UTC"))
    want_ts = sorted(r["record_offset"] for r in rows["loaded_offsets"] if r["commit_timestamp"] >= since)
    want_76 = sorted(r["record_offset"] for r in rows["loaded_offsets"] if r["group_id"] == "alerts-etl-76")
    assert want_ts and want_76
    count_76 = "SELECT count(*) FROM loaded_groups WHERE group_id = 'alerts-etl-76'"

    # the old statistics make delta-rs (and so `offsetlake sql`) skip the files holding the rows
    assert _dataset_offsets(wh, "loaded_offsets", ts_expr) != want_ts
    assert _dataset_offsets(wh, "loaded_offsets", pc.field("group_id") == "alerts-etl-76") != want_76
    assert _sql_count(wh, count_76) == 0

    before = _whole(wh)
    versions = {t: wh.table_version(t) for t in TABLES}
    files = {t: set(active_stats(wh.table_path(t))) for t in PROBED}
    res = CliRunner().invoke(main, ["repair-stats", "--warehouse", str(wh.path)])
    assert res.exit_code == 0, res.output
    assert "loaded_offsets: fixed the statistics of 1 of 1 file(s)" in res.output
    assert "loaded_groups: fixed the statistics of 1 of 1 file(s)" in res.output
    for t in PROBED:  # one commit per repaired table, the same files
        assert wh.table_version(t) == versions[t] + 1, t
        assert set(active_stats(wh.table_path(t))) == files[t]
    after = _whole(wh)
    # the run's row now pins the repair commits: the snapshot is read with the repaired statistics
    (pins,) = [dict(r.pop("table_versions")) for r in after["runs"]]
    (old_pins,) = [dict(r.pop("table_versions")) for r in before["runs"]]
    assert pins == {t: wh.table_version(t) for t in old_pins} and all(pins[t] == versions[t] + 1 for t in PROBED)
    assert after == before  # every reader's rows are the rows that were written, none twice
    assert DeltaTable(str(wh.table_path("loaded_offsets"))).to_pyarrow_table().num_rows == len(rows["loaded_offsets"])
    assert normalized(duck.execute(f"SELECT * FROM delta_scan('{wh.table_path('loaded_offsets')}')")
                      .fetch_arrow_table()) == before["loaded_offsets"]

    assert _dataset_offsets(wh, "loaded_offsets", ts_expr) == want_ts
    assert _dataset_offsets(wh, "loaded_offsets", pc.field("group_id") == "alerts-etl-76") == want_76
    assert _sql_count(wh, count_76) == 1
    # through delta-rs (the table opened once) and DuckDB's delta_scan: every probe of a string or timestamp column
    # (the statistics the repair rewrote; a string column's narrowed to the repaired bounds), one of each operator
    # on the others (written right before and after, and probed at every bound by test_readers_agree)
    for t in PROBED:
        dataset = DeltaTable(str(wh.table_path(t))).to_pyarrow_dataset()
        seen = set()
        for p in predicates(t, rows[t], file_bounds(wh.table_path(t))):
            if delta.type_name(TABLES[t].field(p[0]).type) not in ("string", "timestamp"):
                if p[:2] in seen:
                    continue
                seen.add(p[:2])
            want = sorted(r["record_offset"] for r in rows[t] if holds(r, p))
            got = duck.execute(f"SELECT record_offset FROM delta_scan('{wh.table_path(t)}') "
                               f"WHERE {sql_condition(p)}").fetch_arrow_table()
            assert sorted(got.column(0).to_pylist()) == want, (t, p)
            if p[1] in ("=", ">=", "<=", ">", "<", "is_null"):
                f = pc.field(p[0])
                expr = f.is_null() if p[1] == "is_null" else {
                    "=": f.__eq__, ">=": f.__ge__, "<=": f.__le__, ">": f.__gt__, "<": f.__lt__}[p[1]](
                    pa.scalar(p[2], TABLES[t].field(p[0]).type))
                got = dataset.to_table(columns=["record_offset"], filter=expr).column("record_offset")
                assert sorted(got.to_pylist()) == want, (t, p)

    # idempotent: nothing left to fix, no commit
    versions = {t: wh.table_version(t) for t in TABLES}
    res = CliRunner().invoke(main, ["repair-stats", "--warehouse", str(wh.path)])
    assert res.exit_code == 0, res.output
    assert "fixed" not in res.output and "loaded_offsets: statistics of 1 file(s) correct" in res.output
    assert {t: wh.table_version(t) for t in TABLES} == versions


def test_repair_of_a_warehouse_written_right_commits_nothing(tmp_path):
    wh = Warehouse(tmp_path / "wh")
    frames = {t: arrow_table(t, contract_rows(t, 3, 0, "s1")) for t in SNAPSHOT_TABLES}
    frames.update({t: arrow_table(t, as_tuples(t, table_rows(t)["s2"], "s1")) for t in PROBED})
    write_snapshot(wh, "s1", frames, run_row(0))
    versions = {t: wh.table_version(t) for t in TABLES}
    res = CliRunner().invoke(main, ["repair-stats", "--warehouse", str(wh.path)])
    assert res.exit_code == 0 and "fixed" not in res.output, res.output
    assert {t: wh.table_version(t) for t in TABLES} == versions


def test_repair_stats_rejects_what_is_not_a_warehouse(tmp_path):
    res = CliRunner().invoke(main, ["repair-stats", "--warehouse", str(tmp_path / "nope")])
    assert res.exit_code == 2 and "no such warehouse directory" in res.output
    (tmp_path / "lost").mkdir()
    wh = Warehouse(tmp_path / "lost")
    frames = {t: arrow_table(t, contract_rows(t, 3, 0, "s1")) for t in SNAPSHOT_TABLES}
    write_snapshot(wh, "s1", frames, run_row(0))
    victim = sorted(active_stats(wh.table_path("loaded_groups")))[0]
    (wh.table_path("loaded_groups") / victim).unlink()
    res = CliRunner().invoke(main, ["repair-stats", "--warehouse", str(wh.path)])
    assert res.exit_code == 2 and "is missing" in res.output and "Traceback" not in res.output


@pytest.mark.parametrize("damage", [lambda b: b[:7], lambda b: b[: len(b) // 2], lambda b: b"x" * len(b)],
                         ids=["7-bytes", "half", "overwritten"])
def test_repair_stats_of_a_data_file_that_is_no_parquet_is_one_line_naming_it(tmp_path, damage):
    """An active data file cut short or overwritten: reading its footer raised ArrowInvalid, a stack trace and exit
    1. It is one line naming the table and the file, and nothing is committed."""
    wh = Warehouse(tmp_path / "wh")
    write_snapshot(wh, "s1", {t: arrow_table(t, contract_rows(t, 3, 0, "s1")) for t in SNAPSHOT_TABLES}, run_row(0))
    victim = sorted(active_stats(wh.table_path("loaded_groups")))[0]
    f = wh.table_path("loaded_groups") / victim
    f.write_bytes(damage(f.read_bytes()))
    versions = {t: wh.table_version(t) for t in TABLES}
    res = CliRunner().invoke(main, ["repair-stats", "--warehouse", str(wh.path)])
    assert res.exit_code == 2, res.output
    assert res.stderr.startswith(f"error: loaded_groups: active file {victim} is no Parquet file: ") and \
        res.stderr.count("\n") == 1, res.stderr
    assert {t: wh.table_version(t) for t in TABLES} == versions


@pytest.mark.parametrize("table", ["loaded_groups", "runs"])
def test_repair_stats_of_a_truncated_delta_log_is_one_line_naming_the_table(tmp_path, table):
    """A commit file cut short (a torn copy): delta-rs' error was a stack trace (its class's module is deltalake's
    `_internal`, which the command's check of the module name missed)."""
    wh = Warehouse(tmp_path / "wh")
    write_snapshot(wh, "s1", {t: arrow_table(t, contract_rows(t, 3, 0, "s1")) for t in SNAPSHOT_TABLES}, run_row(0))
    last = max((wh.table_path(table) / "_delta_log").glob("*.json"))
    last.write_bytes(last.read_bytes()[:50])
    res = CliRunner().invoke(main, ["repair-stats", "--warehouse", str(wh.path)], catch_exceptions=False)
    assert res.exit_code == 2, res.output
    assert res.stderr.startswith(f"error: {table}: cannot read its Delta log at ") and res.stderr.count("\n") == 1, \
        res.stderr


def test_repinning_after_a_repair_keeps_a_snapshot_off_the_history_a_later_run_added(no_spark, settings, tmp_path):
    """`repin` moves a snapshot's pin to a repair's commit only where the files it reads are the same there. A
    snapshot reads all of the `offset_commits` history at its pin (no partition of its own): after a later run
    added a record, a repair of the history (its commit, here the newest version) must leave the older snapshot's
    pin where it was, or its views would show the record it never read."""
    from pipelines.io.snapshots import DeltaWarehouseReader
    from pipelines.io.stats_repair import repin
    from pipelines.rebuild import RebuildRequest, run_rebuild
    from tests import badinputs as bi

    g = bi.group_in(1, "g")
    log = [bi.batch([bi.commit(g, 0, o, bi.T0 + 1000 * (i + 1))], i) for i, o in enumerate((200, 150))]
    wh = tmp_path / "wh"
    for n, sid in enumerate(("first", "second"), 1):
        bi.write_segment(tmp_path / sid / "__consumer_offsets-1", 0, b"".join(log[:n]))
        res = run_rebuild(no_spark, settings, RebuildRequest(inputs=(str(tmp_path / sid),), warehouse=str(wh),
                                                             snapshot_id=sid, num_partitions=50))
        assert res.status == "succeeded", res
    repin(wh, {"offset_commits": Warehouse(wh).table_version("offset_commits")})
    reader = DeltaWarehouseReader(str(wh))
    seen = {}
    for sid in ("first", "second"):
        t = reader.history_table("offset_commits", columns=["committed_offset"],
                                 version=reader.snapshot(sid).version_of("offset_commits"))
        seen[sid] = sorted(t.column("committed_offset").to_pylist())
    assert seen == {"first": [200], "second": [150, 200]}
