"""The commit window: a rerun of the served snapshot id killed between its table commits and its `runs` row leaves
every reader on the previous, complete snapshot (the versions `runs.table_versions` pinned), and `retain`'s vacuum
keeps the files those versions read. No JVM: the snapshot tables are Arrow tables, written by pyarrow."""
from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from click.testing import CliRunner
from deltalake import DeltaTable

from jobs.cli import main
from pipelines.io import delta
from pipelines.io.warehouse import Warehouse
from schemas.tables import SNAPSHOT_TABLES, TABLES, columns

from ..serving.warehouse_kit import arrow_schema, group, member, offset, ts
from .io_warehouse_data import run_row, write_snapshot


def snapshot_tables(committed: int) -> dict[str, pa.Table]:
    """Two groups on `orders`; every committed offset is `committed + partition`, so two runs differ everywhere."""
    rows = {
        "loaded_groups": [group("pay", members=1, leader="c-1", generation=committed),
                          group("idle", "Empty", members=0, generation=1, protocol="")],
        "group_members": [member("pay", "c-1", [("orders", 0), ("orders", 1)])],
        "loaded_offsets": [offset("pay", "orders", p, committed + p, leader_epoch=1, t=10) for p in range(3)]
                          + [offset("idle", "orders", 0, committed // 2, t=5)],
        "empty_group_offsets": [offset("simple", "orders", 0, committed + 7, t=3, has_group_metadata=False)],
        "expired_offsets": [{**offset("old", "orders", 0, committed - 1, t=1), "expiry_base_timestamp": ts(1),
                             "expiry_rule": "group-empty"}],
        "log_end_offsets": [{"topic": "orders", "partition": p, "log_end_offset": committed + 100,
                             "source": "replication-offset-checkpoint", "observed_at": ts(20)} for p in range(3)],
    }
    out = {}
    for table in SNAPSHOT_TABLES:
        schema = arrow_schema(table)
        wanted = [c for c in columns(table) if c != "snapshot_id"]
        out[table] = pa.Table.from_pylist([{c: r.get(c) for c in wanted} for r in rows.get(table, ())],
                                          schema=pa.schema([schema.field(c) for c in wanted]))
    return out


class Killed(BaseException):
    """The process dies: nothing after this point of the run happens (no cleanup, no failure recorded)."""


def kill_after_commits(monkeypatch, tables) -> None:
    """The run dies once the snapshot table commits of `tables` are in: every other table's commit is killed (the
    tables commit side by side, so which commits a real kill lets through is chosen here, not left to the threads).
    Its staged files stay; nothing is recorded."""
    real_commit = delta.commit
    tables = set(tables)

    def commit(dt_, struct, actions, **kw):
        table = dt_.table_uri.rstrip("/").rsplit("/", 1)[-1]
        if table not in tables:
            raise Killed(f"killed before committing {table}")
        return real_commit(dt_, struct, actions, **kw)

    def dead(*_a, **_k):
        raise Killed("a killed process records nothing")

    monkeypatch.setattr(delta, "commit", commit)
    monkeypatch.setattr(delta, "discard_dir", lambda *_a, **_k: None)
    monkeypatch.setattr(Warehouse, "record_failure", dead)


def answers(wh: Warehouse) -> dict:
    """What every reader says about the served snapshot (and the diff from s0 to it)."""
    from fastapi.testclient import TestClient

    from jobs.api import create_app
    from pipelines.io.snapshots import DeltaWarehouseReader, resolve_snapshot
    from pipelines.serving import sql as sqlmod

    def cli(*args: str) -> tuple[int, str]:
        r = CliRunner().invoke(main, [args[0], "--warehouse", str(wh.path), *args[1:]], catch_exceptions=False)
        return r.exit_code, r.stdout

    out = {
        "describe": cli("describe", "pay"),
        "describe_members": cli("describe", "pay", "--members"),
        "describe_all": cli("describe", "--all-groups", "--state"),
        "lookup_group": cli("lookup", "--group", "pay"),
        "lookup_topic": cli("lookup", "--topic", "orders"),
        "reset_plan": cli("reset-plan", "--group", "pay"),
        "diff": cli("diff", "s0", "s1", "--json"),
        "read_table": {t: wh.read_table(t).to_pylist() for t in SNAPSHOT_TABLES},
    }
    # every table through the views `offsetlake sql` opens (one connection: opening it reads every table), and the
    # command itself on one
    out["sql command"] = cli("sql", "--format", "json", 'SELECT * FROM "loaded_offsets" ORDER BY ALL')
    reader = DeltaWarehouseReader(wh.path)
    con = sqlmod.connect(reader, resolve_snapshot(reader))
    try:
        for table in SNAPSHOT_TABLES:
            out[f"sql {table}"] = sqlmod.render(*sqlmod.run(con, f'SELECT * FROM "{table}" ORDER BY ALL'), "json")
    finally:
        con.close()
        reader.close()
    with TestClient(create_app(DeltaWarehouseReader(wh.path), refresh_interval=0)) as client:
        for route in ("/groups/pay", "/groups/pay/offsets", "/groups/idle", "/topics/orders/groups", "/groups",
                      "/snapshots", "/health"):
            r = client.get(route)
            out[route] = (r.status_code, r.json())
    return out


def latest_committed(wh: Warehouse, table: str) -> list:
    """The id's rows in the table's LATEST version (what an unpinned reader would see)."""
    dt = DeltaTable(str(wh.table_path(table)))
    return dt.to_pyarrow_table(partitions=[("snapshot_id", "=", "s1")]).column("committed_offset").to_pylist()


def test_rerun_of_the_served_id_killed_between_its_commits_changes_no_answer(tmp_path, monkeypatch):
    wh = Warehouse(tmp_path / "wh")
    write_snapshot(wh, "s0", snapshot_tables(500), run_row(0, finished_at=ts(50)))
    write_snapshot(wh, "s1", snapshot_tables(1000), run_row(1, finished_at=ts(60)))
    served = {r["snapshot_id"]: r for r in wh.snapshots()}["s1"]
    assert set(served["table_versions"]) == set(SNAPSHOT_TABLES)
    before = answers(wh)
    assert before["describe"][0] == 0 and "1002" in before["describe"][1]
    assert before["/groups/pay/offsets"][0] == 200
    assert sorted(o["committed_offset"] for o in before["/groups/pay/offsets"][1]) == [1000, 1001, 1002]

    # the rerun dies after 3 of its table commits (loaded_offsets among them), before its runs row
    assert "loaded_offsets" in SNAPSHOT_TABLES[:3]
    kill_after_commits(monkeypatch, SNAPSHOT_TABLES[:3])
    with pytest.raises(Killed):
        write_snapshot(wh, "s1", snapshot_tables(9000), run_row(2, finished_at=ts(70)))
    monkeypatch.undo()
    assert sorted(latest_committed(wh, "loaded_offsets")) == [4500, 9000, 9001, 9002]  # the rerun's commit went in
    assert {r["snapshot_id"]: r for r in wh.snapshots()}["s1"] == served
    assert answers(wh) == before

    # the next run takes the dead run's lock over and records it (a partial commit): s1 stays served
    where = wh.record_failure("s1", {"started_at": ts(65), "summary": {"error": "abandoned"}}, partial=True)
    assert "_attempts" in where
    assert {r["snapshot_id"]: r for r in wh.snapshots()}["s1"] == served
    assert answers(wh) == before

    # retain vacuums: the files the pinned versions read survive, the dead run's orphans go
    orphans = {p for t in SNAPSHOT_TABLES for p in wh.table_path(t).rglob("*.parquet")
               if str(p.relative_to(wh.table_path(t))) not in pinned_files(wh, t)}
    report = wh.retain(keep=2)
    assert report["kept"] == ["s0", "s1"] and report["deleted"] == []
    assert not any(p.exists() for p in orphans - current_files(wh))
    assert answers(wh) == before

    # a rerun that completes is what readers see next; retain then lets the old files go
    old_files = {t: pinned_files(wh, t) for t in SNAPSHOT_TABLES}
    write_snapshot(wh, "s1", snapshot_tables(9000), run_row(3, finished_at=ts(80)))
    after = answers(wh)
    assert sorted(o["committed_offset"] for o in after["/groups/pay/offsets"][1]) == [9000, 9001, 9002]
    assert "9002" in after["describe"][1] and "9002" in after["lookup_group"][1]
    wh.retain(keep=2)
    assert answers(wh) == after
    for t in SNAPSHOT_TABLES:
        assert not any((wh.table_path(t) / f).exists() for f in old_files[t] - pinned_files(wh, t)), t


def test_a_kill_at_every_commit_leaves_the_served_snapshot(tmp_path, monkeypatch):
    """Whichever table the rerun dies before, read_table and describe answer from the previous snapshot."""
    wh = Warehouse(tmp_path / "wh")
    write_snapshot(wh, "s1", snapshot_tables(1000), run_row(1))
    want = {t: wh.read_table(t).to_pylist() for t in SNAPSHOT_TABLES}
    describe = CliRunner().invoke(main, ["describe", "--warehouse", str(wh.path), "pay"]).stdout
    for n in range(1, len(SNAPSHOT_TABLES)):
        kill_after_commits(monkeypatch, SNAPSHOT_TABLES[:n])
        with pytest.raises(Killed):
            write_snapshot(wh, "s1", snapshot_tables(2000 + n), run_row(2))
        monkeypatch.undo()
        assert {t: wh.read_table(t).to_pylist() for t in SNAPSHOT_TABLES} == want, n
        assert CliRunner().invoke(main, ["describe", "--warehouse", str(wh.path), "pay"]).stdout == describe, n


def test_a_runs_row_without_table_versions_reads_the_latest_versions(tmp_path):
    """Rows written before `runs.table_versions` existed read the latest version, as before."""
    wh = Warehouse(tmp_path / "wh")
    write_snapshot(wh, "s1", snapshot_tables(1000), run_row(1))
    row = {k: v for k, v in wh.snapshots()[0].items() if k not in ("snapshot_id", "table_versions")}
    wh.mark_run("s1", row)
    assert wh.snapshots()[0]["table_versions"] is None
    # a later commit to loaded_offsets' s1 partition (as an older rerun left it) is what readers see
    wh._commit_staged("loaded_offsets", "s1", [])
    assert wh.read_table("loaded_offsets").num_rows == 0
    assert wh.read_table("loaded_groups").num_rows == 2


def pinned_files(wh: Warehouse, table: str) -> set[str]:
    return wh._pinned_files(table, [r for r in wh.snapshots() if r["status"] == "succeeded"])


def current_files(wh: Warehouse) -> set[Path]:
    return {wh.table_path(t) / f["path"] for t in SNAPSHOT_TABLES
            for f in delta.active_files(DeltaTable(str(wh.table_path(t))))}


def test_table_versions_are_in_the_runs_row_as_a_map(tmp_path):
    wh = Warehouse(tmp_path / "wh")
    write_snapshot(wh, "s1", snapshot_tables(1000), run_row(1))
    versions = wh.snapshots()[0]["table_versions"]
    assert versions == {t: wh.table_version(t) for t in SNAPSHOT_TABLES}
    out = CliRunner().invoke(main, ["sql", "--warehouse", str(wh.path), "--format", "json",
                                    "SELECT table_versions['loaded_offsets'] AS v FROM runs"]).stdout
    assert json.loads(out) == [{"v": versions["loaded_offsets"]}]
    assert pa.types.is_map(TABLES["runs"].field("table_versions").type)


def test_retain_keeps_the_history_a_kept_snapshot_pinned(no_spark, settings, tmp_path):
    """A later run rewrites the history file holding a record whose transaction it saw end (pending -> committed,
    copy-on-write). Each snapshot reads the history at the version its run pinned (`runs.table_versions`), so
    `retain`'s vacuum keeps the files of those versions: the older snapshot still reads its history (the
    transaction still pending there, as its `pending_offsets` say) where it lost its file."""
    from pipelines.decoding.batch_writer import write_control_batch, write_record_batch
    from pipelines.io.snapshots import DeltaWarehouseReader
    from pipelines.rebuild import RebuildRequest, run_rebuild
    from tests import badinputs as bi

    g = bi.group_in(1, "g")
    log = [bi.batch([bi.commit(g, 0, 200, bi.T0 + 1000)], 0),
           write_record_batch([bi.commit(g, 0, 150, bi.T0 + 2000)], 1, producer_id=5, producer_epoch=0,
                              base_sequence=0, is_transactional=True),
           write_control_batch(1, 0, 2, 5, 0, bi.T0 + 3000)]  # COMMIT (ControlRecordType, 4.0)
    wh = tmp_path / "wh"
    for sid, batches in (("first", log[:2]), ("second", log)):
        bi.write_segment(tmp_path / sid / "__consumer_offsets-1", 0, b"".join(batches))
        res = run_rebuild(no_spark, settings, RebuildRequest(inputs=(str(tmp_path / sid),), warehouse=str(wh),
                                                             snapshot_id=sid, num_partitions=50))
        assert res.status == "succeeded", res
    Warehouse(str(wh)).retain(keep=2)
    reader = DeltaWarehouseReader(str(wh))
    outcomes = {}
    for sid in ("first", "second"):
        snap = reader.snapshot(sid)
        t = reader.history_table("offset_commits", columns=["committed_offset", "txn_outcome"],
                                 version=snap.version_of("offset_commits"))
        outcomes[sid] = sorted(zip(*(t.column(c).to_pylist() for c in ("committed_offset", "txn_outcome"))))
    assert outcomes == {"first": [(150, "pending"), (200, None)], "second": [(150, "committed"), (200, None)]}
