"""The snapshot warehouse: Spark-written Parquet committed by delta-rs, read back by three independent readers
(delta-rs, DuckDB's delta_scan, Spark over the active file list)."""
from __future__ import annotations

import contextlib
import datetime as dt
import json
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.compute  # noqa: F401 - pa.compute
import pytest
from deltalake import DeltaTable

from pipelines.io import delta
from pipelines.io.blobs import BlobRows
from pipelines.io.table_rows import ArrowRows, FrameRows
from pipelines.io.warehouse import HistoryWrite, NoSnapshotError, StagedHistory, Warehouse, WarehouseError
from schemas.tables import SNAPSHOT_TABLES, TABLES, columns

from .io_warehouse_data import (BASE_TIME, contract_rows, duck_read, expected_rows, normalized, offset_commit_rows,
                               run_row, write_snapshot)

pytestmark = pytest.mark.spark
# the history's Spark schema, for the DataFrames these tests make (the contract is Arrow)
HISTORY_STRUCT = delta.spark_schema(TABLES["offset_commits"])

# Two overlapping runs over the same offsets partition: record 2 is pending in run 1 and committed in run 2.
COMMITS_1 = [(0, 1, None), (0, 2, "pending"), (0, 3, None), (1, 1, "aborted")]
COMMITS_2 = [(0, 2, "committed"), (0, 3, None), (0, 4, "pending"), (1, 1, "aborted"), (1, 2, None)]


def merge(wh: Warehouse, snapshot_id: str, rows, *, clustered: bool = False,
          known_below: dict[int, int] | None = None) -> int | None:
    """The history merge of `rows` (a DataFrame, an Arrow table, or rows a write takes as they are: the shards'
    blobs, a staged history) as a full run's, or with `known_below` an incremental one's."""
    if isinstance(rows, pa.Table):
        rows = ArrowRows(rows, clustered)
    elif not isinstance(rows, (BlobRows, StagedHistory)):
        rows = FrameRows(rows, clustered)
    mode = "incremental" if known_below else "full"
    return wh._merge_offset_commits(snapshot_id, HistoryWrite(rows=rows, mode=mode, known_below=known_below or {}))


def parquet_files(table_dir: Path) -> set[str]:
    return {str(p.relative_to(table_dir)) for p in table_dir.rglob("*.parquet") if "_delta_log" not in p.parts}


def active_paths(table_dir: Path) -> set[str]:
    return {f["path"] for f in delta.active_files(DeltaTable(str(table_dir)))}


def state(wh: Warehouse, snapshot_id: str) -> dict[str, list[dict]]:
    return {t: normalized(wh.read_table(t, snapshot_id)) for t in SNAPSHOT_TABLES}


def versions(wh: Warehouse) -> dict[str, int | None]:
    return {t: wh.table_version(t) for t in TABLES}


class Scenario:
    pass


@pytest.fixture(scope="module")
def scenario(spark, make_snapshot, tmp_path_factory):
    """s1, the same s1 again, then s2 (overlapping offset commits, one empty table)."""
    s = Scenario()
    s.wh = wh = Warehouse(tmp_path_factory.mktemp("wh") / "warehouse")
    write_snapshot(wh, "s1", make_snapshot("s1", 0, COMMITS_1), run_row(0))
    s.state_1, s.versions_1, s.runs_1 = state(wh, "s1"), versions(wh), wh.snapshots()
    s.active_1 = {t: active_paths(wh.table_path(t)) for t in SNAPSHOT_TABLES}
    s.commits_1 = normalized(wh.read_table("offset_commits"))

    write_snapshot(wh, "s1", make_snapshot("s1", 0, COMMITS_1), run_row(0))
    s.state_1b, s.versions_1b, s.runs_1b = state(wh, "s1"), versions(wh), wh.snapshots()
    s.active_1b = {t: active_paths(wh.table_path(t)) for t in SNAPSHOT_TABLES}
    s.commits_1b = normalized(wh.read_table("offset_commits"))

    frames = make_snapshot("s2", 1, COMMITS_2)
    frames["expired_groups"] = frames["expired_groups"].limit(0)
    # s2's snapshot tables arrive as Arrow tables (the in-process replay's path), written by pyarrow
    frames = {t: f if t == "offset_commits" else f.toArrow() for t, f in frames.items()}
    write_snapshot(wh, "s2", frames, run_row(1))
    return s


def test_snapshot_tables_read_back_identically_through_three_readers(scenario, spark, duck):
    wh = scenario.wh
    for sid, salt in (("s1", 0), ("s2", 1)):
        for table in SNAPSHOT_TABLES:
            empty = (sid, table) == ("s2", "expired_groups")  # an empty DataFrame is an empty partition
            want = [] if empty else expected_rows(table, contract_rows(table, 3, salt, sid))
            by_delta_rs = normalized(wh.read_table(table, sid))
            by_duckdb = normalized(duck_read(duck, wh.table_path(table), sid))
            by_spark = normalized(wh.spark_read(spark, table, sid).toArrow())
            assert by_delta_rs == want, (sid, table)
            assert by_duckdb == want, (sid, table)
            assert by_spark == want, (sid, table)


@pytest.mark.parametrize("sid", ["s1", "s2"], ids=["written by Spark", "written from Arrow"])
def test_readers_keep_contract_types_and_microsecond_utc_timestamps(scenario, spark, duck, sid):
    wh = scenario.wh
    table = "loaded_offsets"
    arrow = wh.read_table(table, sid)
    assert arrow.schema == TABLES[table]
    assert arrow.schema.field("commit_timestamp").type == pa.timestamp("us", tz="UTC")
    assert {f.name: f.dataType for f in wh.spark_read(spark, table, sid).schema.fields} == {
        f.name: f.dataType for f in delta.spark_schema(TABLES[table]).fields}
    # the Delta log itself declares the contract schema, partitioned by snapshot_id
    dt_ = DeltaTable(str(wh.table_path(table)))
    assert dt_.metadata().partition_columns == ["snapshot_id"]
    assert [f.name for f in dt_.schema().fields] == columns(table)
    ts = duck.execute(f"SELECT max(commit_timestamp) FROM delta_scan('{wh.table_path(table)}') "
                      f"WHERE snapshot_id = '{sid}'").fetch_arrow_table().column(0)[0].as_py()
    assert ts.microsecond == 123457 and ts.utcoffset() == dt.timedelta(0)


def test_committed_files_carry_statistics(scenario):
    adds = pa.table(DeltaTable(str(scenario.wh.table_path("loaded_groups"))).get_add_actions(flatten=True))
    rows = adds.to_pylist()
    assert sum(r["num_records"] for r in rows if r["partition.snapshot_id"] == "s1") == 3
    assert sum(r["num_records"] for r in rows if r["partition.snapshot_id"] == "s2") == 3  # the Arrow write
    with_rows = [r for r in rows if r["num_records"]]
    assert with_rows and all(r["min.group_id"] is not None and r["null_count.generation"] is not None
                             for r in with_rows)


def test_same_input_same_snapshot_id_twice_is_idempotent(scenario):
    s = scenario
    assert s.state_1b == s.state_1
    assert [r["snapshot_id"] for r in s.runs_1b] == ["s1"] and s.runs_1b[0]["status"] == "succeeded"
    for t in SNAPSHOT_TABLES:
        # exactly one commit replaced the partition: new files in, every old file out
        assert s.versions_1b[t] == s.versions_1[t] + 1, t
        assert s.active_1b[t] and not (s.active_1b[t] & s.active_1[t]), t
    assert s.commits_1b == s.commits_1
    assert s.versions_1b["offset_commits"] == s.versions_1["offset_commits"]  # nothing new: no commit


def test_new_snapshot_id_adds_a_second_snapshot(scenario):
    wh = scenario.wh
    runs = wh.snapshots()
    assert [(r["snapshot_id"], r["status"]) for r in runs] == [("s1", "succeeded"), ("s2", "succeeded")]
    assert wh.latest_snapshot_id() == "s2"
    assert normalized(wh.read_table("loaded_groups")) == normalized(wh.read_table("loaded_groups", "s2"))
    assert wh.read_table("expired_groups").num_rows == 0
    assert state(wh, "s1") == scenario.state_1  # the older snapshot is untouched
    r = runs[1]
    assert r["record_type_counts"] == {"offset_commit": 7, "group_metadata": 2}
    assert r["inputs"] == ["/dumps/1/00000000000000000000.log"] and r["validation"] == '{"success": true}'
    assert r["finished_at"].tzinfo is not None and r["finished_at"] >= r["started_at"]


def test_offset_commits_has_each_record_once_across_overlapping_runs(scenario, spark, duck):
    wh = scenario.wh
    rows = normalized(wh.read_table("offset_commits"))
    keys = Counter((r["offsets_partition"], r["record_offset"]) for r in rows)
    assert sorted(keys) == [(0, 1), (0, 2), (0, 3), (0, 4), (1, 1), (1, 2)]
    assert set(keys.values()) == {1}
    by_key = {(r["offsets_partition"], r["record_offset"]): r for r in rows}
    assert by_key[(0, 2)]["txn_outcome"] == "committed"  # pending -> committed by the later run
    assert by_key[(0, 2)]["snapshot_id"] == "s1"  # first seen by s1
    assert by_key[(0, 2)]["metadata"] == "m-0"  # the record itself is not rewritten, only its outcome
    assert by_key[(0, 4)]["snapshot_id"] == "s2" and by_key[(0, 4)]["txn_outcome"] == "pending"
    assert normalized(duck_read(duck, wh.table_path("offset_commits"))) == rows
    assert normalized(wh.spark_read(spark, "offset_commits").toArrow()) == rows
    assert normalized(wh.read_table("offset_commits", "s2")) == [r for r in rows if r["snapshot_id"] == "s2"]


def test_decided_outcome_is_never_downgraded(spark, make_snapshot, tmp_path):
    wh = Warehouse(tmp_path / "wh")
    merge(wh, "a", spark.createDataFrame(
        offset_commit_rows([(0, 5, "committed"), (0, 6, None)]), HISTORY_STRUCT))
    v = wh.table_version("offset_commits")
    # a later, truncated view sees the record but not its marker; a duplicated input record too
    assert merge(wh, "b", spark.createDataFrame(
        offset_commit_rows([(0, 5, "pending"), (0, 6, None), (0, 6, None)]), HISTORY_STRUCT)) is None
    assert wh.table_version("offset_commits") == v
    rows = wh.read_table("offset_commits").to_pylist()
    assert [(r["record_offset"], r["txn_outcome"], r["snapshot_id"]) for r in rows] == [
        (5, "committed", "a"), (6, None, "a")]


def test_outcome_upgrade_rewrites_only_the_open_transactions_files(spark, tmp_path):
    """Rows of open transactions are written to files of their own: a later run that decides them rewrites
    those rows, not the history files around them."""
    wh = Warehouse(tmp_path / "wh")

    def merge_records(sid, records):
        return merge(wh, sid, spark.createDataFrame(
            offset_commit_rows(records), HISTORY_STRUCT).repartition(3))

    def active():
        files = [f["path"] for f in delta.active_files(DeltaTable(str(wh.table_path("offset_commits"))))]
        return {f: [r["txn_outcome"] for r in pq_rows(wh.table_path("offset_commits") / f)] for f in files}

    merge_records("a", [(0, o, None) for o in range(1, 200)] + [(0, 200, "pending"), (0, 201, "pending"), (1, 7, "aborted")])
    first = active()
    plain_a = {f for f, outcomes in first.items() if "pending" not in outcomes}
    assert plain_a and all(set(first[f]) == {"pending"} for f in first if f not in plain_a)
    assert sum(len(v) for v in first.values()) == 202

    merge_records("b", [(0, 200, "committed"), (0, 201, "pending"), (0, 202, None)])
    second = active()
    assert plain_a <= set(second)  # the plain history files were not rewritten
    for f, outcomes in second.items():
        assert ("pending" in outcomes) == (f.startswith("pending-")), f
        assert f.startswith("pending-") <= (set(outcomes) == {"pending"}), f
    rows = {(r["offsets_partition"], r["record_offset"]): r for r in wh.read_table("offset_commits").to_pylist()}
    assert len(rows) == 203
    assert (rows[(0, 200)]["txn_outcome"], rows[(0, 200)]["snapshot_id"]) == ("committed", "a")
    assert (rows[(0, 201)]["txn_outcome"], rows[(0, 202)]["snapshot_id"]) == ("pending", "b")


def pq_rows(path: Path) -> list[dict]:
    import pyarrow.parquet as pq

    return pq.read_table(path).to_pylist()


def test_read_table_columns_filters_and_defaults(scenario, tmp_path):
    wh = scenario.wh
    t = wh.read_table("loaded_offsets", columns=["group_id", "committed_offset"],
                      filters=[("group_id", "=", "group_id-1-1")])
    assert t.column_names == ["group_id", "committed_offset"]
    assert t.to_pylist() == [{"group_id": "group_id-1-1", "committed_offset": 1_000_000_001_001}]
    assert wh.read_table("runs", "s1").column("status").to_pylist() == ["succeeded"]
    with pytest.raises(WarehouseError):
        wh.read_table("nope")
    empty = Warehouse(tmp_path / "empty")
    assert empty.latest_snapshot_id() is None and empty.snapshots() == []
    with pytest.raises(NoSnapshotError):
        empty.read_table("loaded_offsets")
    assert empty.read_table("offset_commits").num_rows == 0
    assert empty.table_version("runs") is None


def test_failure_midway_keeps_last_snapshot_and_next_run_succeeds(spark, make_arrow_snapshot, tmp_path, duck,
                                                                  monkeypatch):
    """Written from Arrow, as a run replayed in this process writes (the Spark write stages and commits alike)."""
    wh = Warehouse(tmp_path / "wh")
    write_snapshot(wh, "s1", make_arrow_snapshot("s1", 0, COMMITS_1), run_row(0), clustered=True)
    before = state(wh, "s1")
    before_duck = {t: normalized(duck_read(duck, wh.table_path(t), "s1")) for t in SNAPSHOT_TABLES}
    commits_before = normalized(wh.read_table("offset_commits"))

    fail_stage_of(monkeypatch, "group_members")
    with pytest.raises(OSError, match="injected"):
        write_snapshot(wh, "s2", make_arrow_snapshot("s2", 1, COMMITS_2), run_row(1),
                         clustered=True)
    # every table is staged before any is committed: no table holds s2 rows, and no staged file is left
    assert not any("s2" in wh.snapshot_ids_in(t) for t in SNAPSHOT_TABLES)
    assert not any(list(wh.table_path(t).glob("snapshot_id=s2/*/*.parquet")) for t in SNAPSHOT_TABLES)
    assert wh.latest_snapshot_id() == "s1"
    failed = {r["snapshot_id"]: r for r in wh.snapshots()}["s2"]
    assert failed["status"] == "failed" and "disk full" in failed["summary"]
    assert state(wh, wh.latest_snapshot_id()) == before
    assert {t: normalized(duck_read(duck, wh.table_path(t), "s1")) for t in SNAPSHOT_TABLES} == before_duck
    assert normalized(wh.read_table("offset_commits")) == commits_before  # merge never ran

    monkeypatch.undo()
    write_snapshot(wh, "s2", make_arrow_snapshot("s2", 1, COMMITS_2), run_row(1),
                         clustered=True)
    assert wh.latest_snapshot_id() == "s2"
    assert [(r["snapshot_id"], r["status"]) for r in wh.snapshots()] == [("s1", "succeeded"), ("s2", "succeeded")]
    for table in SNAPSHOT_TABLES:  # the half-written s2 partitions were replaced, not appended to
        assert normalized(wh.read_table(table)) == expected_rows(table, contract_rows(table, 3, 1, "s2")), table
    assert state(wh, "s1") == before


def fail_stage_of(monkeypatch, failing_table: str) -> None:
    """Staging `failing_table`'s files fails as a full disk would; every other table stages."""
    real_stage = Warehouse._stage_table

    def failing_stage(self, table, snapshot_id, rows):
        if table == failing_table:
            raise OSError("disk full (injected)")
        return real_stage(self, table, snapshot_id, rows)

    monkeypatch.setattr(Warehouse, "_stage_table", failing_stage)


def fail_commit_of(monkeypatch, table: str) -> None:
    """The Delta commit of `table` fails (as a commit conflict would); every other table commits."""
    real_commit = delta.commit

    def failing_commit(dt_, struct, actions, **kw):
        if struct is TABLES[table]:
            raise RuntimeError("commit conflict (injected)")
        return real_commit(dt_, struct, actions, **kw)

    monkeypatch.setattr(delta, "commit", failing_commit)


def test_retain_keeps_newest_snapshot_and_vacuum_removes_files(spark, make_arrow_snapshot, tmp_path, duck,
                                                                monkeypatch):
    wh = Warehouse(tmp_path / "wh")
    write_snapshot(wh, "s1", make_arrow_snapshot("s1", 0, COMMITS_1), run_row(0), clustered=True)
    write_snapshot(wh, "s2", make_arrow_snapshot("s2", 1, COMMITS_2), run_row(1), clustered=True)

    # s3 fails while committing loaded_groups: its staged files must not be left behind
    fail_commit_of(monkeypatch, "loaded_groups")
    with pytest.raises(RuntimeError, match="injected"):
        write_snapshot(wh, "s3", make_arrow_snapshot("s3", 2), run_row(2))
    monkeypatch.undo()
    lg = wh.table_path("loaded_groups")
    assert parquet_files(lg) == active_paths(lg)  # the failed write discarded its files
    assert "s3" in wh.snapshot_ids_in("loaded_offsets")

    on_disk_before = {t: parquet_files(wh.table_path(t)) for t in SNAPSHOT_TABLES}
    commits = normalized(wh.read_table("offset_commits"))
    report = wh.retain(keep=1)
    assert report["kept"] == ["s2"] and report["deleted"] == ["s1", "s3"] and report["rows_kept"] == ["s3"]
    # the failed s3 keeps its runs row (the newest failure stays visible), not its tables
    assert [(r["snapshot_id"], r["status"]) for r in wh.snapshots()] == [("s2", "succeeded"), ("s3", "failed")]
    for table in SNAPSHOT_TABLES:
        path = wh.table_path(table)
        assert wh.snapshot_ids_in(table) == {"s2"}, table
        on_disk = parquet_files(path)
        assert on_disk == active_paths(path), table  # vacuum removed every unreferenced file
        assert on_disk < on_disk_before[table], table
        assert not (path / "snapshot_id=s1").exists() and not (path / "snapshot_id=s3").exists()
        want = expected_rows(table, contract_rows(table, 3, 1, "s2"))
        assert normalized(wh.read_table(table)) == want, table
        assert normalized(duck_read(duck, path)) == want, table
        assert normalized(wh.spark_read(spark, table).toArrow()) == want, table
    assert report["vacuumed_files"]["loaded_offsets"] > 0
    assert normalized(wh.read_table("offset_commits")) == commits  # history is kept
    with pytest.raises(WarehouseError):
        wh.retain(keep=0)


def test_bad_input_is_rejected_before_anything_is_written(spark, make_snapshot, tmp_path):
    wh = Warehouse(tmp_path / "wh")
    frames = make_snapshot("x", 0)
    with pytest.raises(ValueError, match="invalid snapshot id"):
        write_snapshot(wh, "../evil", frames, run_row())
    with pytest.raises(WarehouseError, match="missing tables"):
        write_snapshot(wh, "x", {k: v for k, v in frames.items() if k != "quarantine"}, run_row())
    with pytest.raises(WarehouseError, match="unknown tables"):
        write_snapshot(wh, "x", {**frames, "runs": frames["quarantine"]}, run_row())
    with pytest.raises(WarehouseError, match="ends a run"):
        write_snapshot(wh, "x", frames, run_row(status="running"))
    with pytest.raises(WarehouseError, match="unknown column"):
        wh.mark_run("x", {"status": "running", "colour": "blue"})
    assert wh.snapshots() == [] and not wh.path.exists()


def test_contract_violations_fail_the_run_without_leaving_files(spark, make_snapshot, tmp_path):
    from pyspark.sql import functions as F

    wh = Warehouse(tmp_path / "wh")
    frames = make_snapshot("x", 0)
    frames["loaded_offsets"] = frames["loaded_offsets"].withColumn("colour", F.lit("blue"))
    with pytest.raises(WarehouseError, match="unknown"):
        write_snapshot(wh, "x", frames, run_row())
    frames = make_snapshot("x", 0)
    frames["loaded_offsets"] = frames["loaded_offsets"].withColumn(
        "group_id", F.when(F.col("partition") == 1, F.lit(None)).otherwise(F.col("group_id")))
    with pytest.raises(delta.DeltaWriteError, match="group_id"):
        write_snapshot(wh, "x", frames, run_row())
    # the same through the Arrow write
    arrow = frames["loaded_offsets"].toArrow()
    with pytest.raises(delta.DeltaWriteError, match="group_id"):
        write_snapshot(wh, "x", {**frames, "loaded_offsets": arrow}, run_row())
    with pytest.raises(WarehouseError, match="unknown"):
        write_snapshot(wh, "x", {**frames, "loaded_offsets": arrow.append_column("colour", pa.array(
            ["blue"] * arrow.num_rows))}, run_row())
    assert [(r["snapshot_id"], r["status"]) for r in wh.snapshots()] == [("x", "failed")]
    assert wh.latest_snapshot_id() is None
    assert parquet_files(wh.table_path("loaded_offsets")) == set()


def test_failed_rerun_of_a_served_id_leaves_it_served(spark, make_arrow_snapshot, tmp_path, monkeypatch):
    """A rerun of the served id that fails keeps the old row and rows, the attempt kept aside: before committing,
    and after replacing some of the id's tables too (readers stay on the versions the served row pinned)."""
    wh = Warehouse(tmp_path / "wh")
    write_snapshot(wh, "s1", make_arrow_snapshot("s1", 0), run_row(0))
    before = state(wh, "s1")
    fail_stage_of(monkeypatch, "quarantine")
    with pytest.raises(OSError, match="injected") as failed:
        write_snapshot(wh, "s1", make_arrow_snapshot("s1", 1), run_row(1))
    monkeypatch.undo()
    assert [(r["snapshot_id"], r["status"]) for r in wh.snapshots()] == [("s1", "succeeded")]
    assert wh.latest_snapshot_id() == "s1" and state(wh, "s1") == before
    (attempt,) = (wh.path / "_attempts").glob("s1.*.json")
    assert json.loads(attempt.read_text())["status"] == "failed" and "disk full" in attempt.read_text()
    # the run that called the write records its failure once: the write did, with what it knew of its commits
    assert wh.failure_recorded("s1")
    from pipelines.rebuild.failures import RunFailed, record_failure
    with contextlib.suppress(RunFailed):  # a storage error becomes one line for the user
        record_failure(wh, "s1", "write", run_row(1), failed.value, str(wh.path))
    assert len(list((wh.path / "_attempts").glob("s1.*.json"))) == 1

    fail_commit_of(monkeypatch, "loaded_groups")
    with pytest.raises(RuntimeError, match="injected"):
        write_snapshot(wh, "s1", make_arrow_snapshot("s1", 1), run_row(1))
    monkeypatch.undo()
    (row,) = wh.snapshots()
    assert row["status"] == "succeeded" and wh.latest_snapshot_id() == "s1" and state(wh, "s1") == before
    assert wh.snapshot_ids_in("loaded_offsets") == {"s1"}
    assert len(list((wh.path / "_attempts").glob("s1.*.json"))) == 2


def test_a_clustered_history_is_written_as_it_comes(spark, tmp_path):
    """`clustered` (the shards' history: each record once, grouped by offsets partition in record order): no
    shuffle, no sort, and the same table, one offsets partition per file, as the general merge gives."""
    records = ([(0, o, None) for o in range(1, 120)] + [(0, 120, "pending")] + [(3, o, None) for o in range(5, 60)]
               + [(7, 2, "committed"), (7, 3, "aborted")] + [(9, o, None) for o in range(40)])
    rows = offset_commit_rows(records)
    # three Spark partitions, each holding its rows grouped by offsets partition in record order (one offsets
    # partition across two Spark partitions too)
    frame = spark.createDataFrame(spark.sparkContext.parallelize(rows, 3), HISTORY_STRUCT)
    assert frame.rdd.getNumPartitions() == 3
    got, in_hand, staged, want = (Warehouse(tmp_path / "clustered"), Warehouse(tmp_path / "in_hand"),
                                  Warehouse(tmp_path / "staged"), Warehouse(tmp_path / "general"))
    merge(got, "a", frame, clustered=True)
    # the same rows in this process (a small run's history, as Arrow): written by the driver, no Spark job
    merge(in_hand, "a", frame.toArrow(), clustered=True)
    # written by the tasks that built them, an offsets partition at a time, then committed as they are
    stage = staged.stage_history("a")
    history = StagedHistory(stage, written_by_tasks(stage, frame.toArrow()), spark)
    merge(staged, "a", history, clustered=True)
    assert history.committed and staged.stage_history("b") is None  # a history with files is merged into
    history.discard()  # committed: kept
    merge(want, "a", spark.createDataFrame(rows, HISTORY_STRUCT).repartition(3))
    for wh in (got, in_hand, staged):
        assert normalized(wh.read_table("offset_commits")) == normalized(want.read_table("offset_commits"))
        files = delta.active_files(DeltaTable(str(wh.table_path("offset_commits"))))
        assert sum(f["path"].startswith("pending-") for f in files) >= 1
        for f in files:
            rows_in_file = pq_rows(wh.table_path("offset_commits") / f["path"])
            assert len({r["offsets_partition"] for r in rows_in_file}) == 1, f["path"]
            offsets = [r["record_offset"] for r in rows_in_file]
            assert offsets == sorted(offsets)
            if not f["path"].startswith("pending-"):
                assert "pending" not in {r["txn_outcome"] for r in rows_in_file}


def written_by_tasks(stage, history: pa.Table) -> list:
    """`history` written into `stage` as the shards' tasks write it: each offsets partition by a writer of its own,
    its pending rows set aside when it closes."""
    files = []
    for p in sorted(set(history.column("offsets_partition").to_pylist())):
        rows = history.filter(pa.compute.equal(history.column("offsets_partition"), p))
        pending = pa.compute.fill_null(pa.compute.equal(rows.column("txn_outcome"), "pending"), False)
        writer = stage.writer(p)
        writer.write(rows.filter(pa.compute.invert(pending)))
        files += writer.close(rows.filter(pending))
    return files


def test_a_staged_history_meeting_a_written_one_is_merged_and_an_uncommitted_one_leaves_no_file(spark, tmp_path):
    """Files staged by the tasks are committed as they are only into an empty history: against one that holds rows
    (written since the stage was taken), their rows are merged like any incoming rows; staged files never
    committed are deleted by `discard`."""
    first = offset_commit_rows([(0, 1, "pending"), (0, 2, None)])
    second = offset_commit_rows([(0, 1, "committed"), (0, 2, None), (0, 3, None)])
    wh, want = Warehouse(tmp_path / "wh"), Warehouse(tmp_path / "want")
    stage = wh.stage_history("b")
    schema = wh_arrow_schema()
    files = written_by_tasks(stage, pa.Table.from_pylist([dict(zip(schema.names, r)) for r in second], schema=schema))
    merge(wh, "a", spark.createDataFrame(first, HISTORY_STRUCT))
    history = StagedHistory(stage, files, spark)
    merge(wh, "b", history, clustered=True)
    for rows, sid in ((first, "a"), (second, "b")):
        merge(want, sid, spark.createDataFrame(rows, HISTORY_STRUCT))
    assert normalized(wh.read_table("offset_commits")) == normalized(want.read_table("offset_commits"))
    outcomes = {r["record_offset"]: r["txn_outcome"] for r in wh.read_table("offset_commits").to_pylist()}
    assert outcomes == {1: "committed", 2: None, 3: None}
    history.discard()  # its files were read, not committed: deleted
    root = Path(wh.table_path("offset_commits"))
    assert not (root / stage.settled).exists() and not (root / stage.pending).exists()
    assert normalized(wh.read_table("offset_commits")) == normalized(want.read_table("offset_commits"))


def wh_arrow_schema():

    return pa.schema([f.with_nullable(True) for f in TABLES["offset_commits"]])


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_an_incremental_history_in_hand_merges_by_the_rules_and_rewrites_only_upgraded_files(spark, tmp_path, seed):
    """An incremental run's history (its saved rows and its new ones, each record once) merged in this process,
    as Arrow or as the shards' blobs, and a full run's replayed in this process (no marks: Arrow, met against
    every history file its rows may overlap): every record once, the first snapshot that saw it kept, an outcome
    only ever decided further (null → pending → committed/aborted), rows past each partition's mark added, and
    only the files holding an upgraded row rewritten."""
    import random

    from pipelines.io.blobs import PAYLOAD, to_blob

    rnd = random.Random(seed)
    outcomes = (None, "pending", "committed", "aborted")
    first = {(p, o): rnd.choice(outcomes) for p in range(4) for o in range(rnd.randrange(1, 80))}
    marks = {p: 1 + max((o for q, o in first if q == p), default=-1) for p in range(4)}
    second = {}
    for (p, o), outcome in first.items():
        if rnd.random() < 0.5:  # a saved row the replay read again, its outcome known as far as it got
            second[(p, o)] = "committed" if outcome == "pending" and rnd.random() < 0.5 else outcome
    for p in range(5):  # partition 4 is new
        for o in range(marks.get(p, 0), marks.get(p, 0) + rnd.randrange(0, 30)):
            second[(p, o)] = rnd.choice(outcomes)
    want = {k: (v, "a") for k, v in first.items()}
    for k, v in second.items():
        if k not in want:
            want[k] = (v, "b")
        else:
            old = want[k][0]
            if v is not None and v != old and (old is None or (old == "pending" and v in ("committed", "aborted"))):
                want[k] = (v, "a")
    schema = wh_arrow_schema()

    def arrow(records):
        rows = offset_commit_rows([(p, o, v) for (p, o), v in sorted(records.items())])
        return pa.Table.from_pylist([dict(zip(schema.names, r)) for r in rows], schema=schema)

    for kind in ("arrow", "blobs", "full"):
        wh = Warehouse(tmp_path / kind)
        merge(wh, "a", arrow(first), clustered=True)
        before = {f["path"] for f in delta.active_files(DeltaTable(str(wh.table_path("offset_commits"))))}
        incoming = arrow(second)
        if kind == "blobs":
            halves = [incoming.slice(0, incoming.num_rows // 2), incoming.slice(incoming.num_rows // 2)]
            incoming = BlobRows(spark.createDataFrame([(to_blob(t),) for t in halves], f"{PAYLOAD} binary"),
                                HISTORY_STRUCT)
        merge(wh, "b", incoming, known_below=None if kind == "full" else marks, clustered=True)
        rows = wh.read_table("offset_commits").to_pylist()
        assert len(rows) == len({(r["offsets_partition"], r["record_offset"]) for r in rows})
        assert {(r["offsets_partition"], r["record_offset"]): (r["txn_outcome"], r["snapshot_id"]) for r in rows} \
            == want
        after = {f["path"] for f in delta.active_files(DeltaTable(str(wh.table_path("offset_commits"))))}
        upgraded = {k for k, (v, sid) in want.items() if sid == "a" and v != first[k]}
        for f in before - after:  # a file gone was rewritten for an upgrade of one of its rows
            keys = {(r["offsets_partition"], r["record_offset"]) for r in pq_rows(wh.table_path("offset_commits") / f)}
            assert keys & upgraded, f
        for f in after - before:
            file_rows = pq_rows(wh.table_path("offset_commits") / f)
            assert len({r["offsets_partition"] for r in file_rows}) == 1 or f.startswith("pending-")
            assert ("pending" in {r["txn_outcome"] for r in file_rows}) == f.startswith("pending-"), f


def test_retain_deletes_attempts_older_than_every_kept_snapshot_but_the_newest(make_arrow_snapshot, tmp_path):
    """A failed rerun of a served id keeps its row in `_attempts/`; before, nothing ever deleted one, and every
    /metrics and /overview request lists them all. retain now deletes those recorded before the oldest kept
    snapshot started, but the newest (what the page and the alerts show)."""
    from pipelines.io.snapshots import DeltaWarehouseReader

    wh = Warehouse(tmp_path / "wh")
    write_snapshot(wh, "s1", make_arrow_snapshot("s1", 0), run_row(0))
    folder = wh.path / "_attempts"
    folder.mkdir()
    row = json.dumps({"status": "failed", "kind": "scheduled", "summary": "{}"})
    old = [f"s1.2020010{d}T000000000000Z.json" for d in range(1, 6)]
    later = (BASE_TIME + dt.timedelta(hours=1)).strftime("s1.%Y%m%dT%H%M%S%fZ.json")
    for name in [*old, later, "notes.txt"]:
        (folder / name).write_text(row)
    assert wh.retain(keep=1)["attempts_deleted"] == 5
    assert sorted(p.name for p in folder.iterdir()) == sorted([later, "notes.txt"])
    (folder / later).unlink()
    for name in old[:2]:
        (folder / name).write_text(row)
    assert wh.retain(keep=1)["attempts_deleted"] == 1
    assert sorted(p.name for p in folder.iterdir()) == sorted([old[1], "notes.txt"])
    assert DeltaWarehouseReader(wh.path).last_attempt()["recorded_at"].date() == dt.date(2020, 1, 2)
