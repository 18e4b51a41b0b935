"""`runs.kind`: what-if runs (--as-of/--until-*) are kept apart from the scheduled history, and a `runs` table written
before the column existed keeps working (its rows read as scheduled). No Spark: `runs` is written by delta-rs."""
from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from pipelines.io.warehouse import Warehouse, WarehouseError
from schemas.tables import TABLES

T0 = dt.datetime(2026, 11, 21, 20, 0, tzinfo=dt.timezone.utc)


def at(minutes: int) -> dt.datetime:
    return T0 + dt.timedelta(minutes=minutes)


def old_runs_table(wh: Warehouse, *snapshot_ids: str) -> None:
    """A `runs` table as the previous version wrote it: the contract's columns without `kind`."""
    schema = pa.schema([f for f in TABLES["runs"] if f.name != "kind"])
    rows = [{"snapshot_id": sid, "status": "succeeded", "started_at": at(i), "finished_at": at(i) + dt.timedelta(seconds=30),
             "as_of": at(i), "inputs": ["dump/"]} for i, sid in enumerate(snapshot_ids)]
    write_deltalake(str(wh.table_path("runs")), pa.Table.from_pylist(rows, schema=schema))


def finished(wh: Warehouse, sid: str, minute: int, kind: str | None) -> None:
    row = {"status": "succeeded", "started_at": at(minute), "finished_at": at(minute) + dt.timedelta(seconds=30)}
    if kind is not None:
        row["kind"] = kind
    wh.mark_run(sid, row)


def test_a_runs_table_without_kind_takes_new_rows_and_reads_as_scheduled(tmp_path):
    from pipelines.io.snapshots import DeltaWarehouseReader, resolve_snapshot, run_summary

    wh = Warehouse(tmp_path / "wh")
    old_runs_table(wh, "old1", "old2")
    assert "kind" not in DeltaTable(str(wh.table_path("runs"))).schema().to_arrow().names
    finished(wh, "whatif", 10, "what-if")  # newest, but a what-if run

    assert "kind" in DeltaTable(str(wh.table_path("runs"))).schema().to_arrow().names
    assert [(r["snapshot_id"], r["kind"]) for r in wh.snapshots()] == [
        ("old1", "scheduled"), ("old2", "scheduled"), ("whatif", "what-if")]
    # the old rows are kept as they were (the predicate overwrite replaced the new id's row only)
    runs = wh.read_table("runs").to_pylist()
    assert sorted((r["snapshot_id"], r["kind"], r["finished_at"]) for r in runs)[:2] == [
        ("old1", None, at(0) + dt.timedelta(seconds=30)), ("old2", None, at(1) + dt.timedelta(seconds=30))]
    assert wh.latest_snapshot_id() == "old2"
    assert wh.latest_snapshot_id(kind=None) == "whatif"
    assert wh.latest_snapshot_id(kind="what-if") == "whatif"

    reader = DeltaWarehouseReader(wh.path)
    default = resolve_snapshot(reader)
    assert default.snapshot_id == "old2" and default.kind == "scheduled"
    chosen = resolve_snapshot(reader, "whatif")
    assert chosen.kind == "what-if" and run_summary(chosen)["kind"] == "what-if"
    assert run_summary(resolve_snapshot(reader, "old1"))["kind"] == "scheduled"

    finished(wh, "new", 20, None)  # no kind given: a scheduled run
    assert wh.latest_snapshot_id() == "new" == resolve_snapshot(DeltaWarehouseReader(wh.path)).snapshot_id
    assert [r["kind"] for r in wh.read_table("runs", "new").to_pylist()] == ["scheduled"]


def test_only_what_if_runs_means_no_default_snapshot(tmp_path):
    from pipelines.io.warehouse import NoSnapshotError
    from pipelines.io.snapshots import DeltaWarehouseReader, SnapshotNotFound, resolve_snapshot

    wh = Warehouse(tmp_path / "wh")
    finished(wh, "w1", 1, "what-if")
    assert wh.latest_snapshot_id() is None
    with pytest.raises(NoSnapshotError):
        wh.read_table("loaded_offsets")
    with pytest.raises(SnapshotNotFound, match="scheduled"):
        resolve_snapshot(DeltaWarehouseReader(wh.path))
    assert resolve_snapshot(DeltaWarehouseReader(wh.path), "w1").snapshot_id == "w1"


def test_unknown_kind_is_rejected(tmp_path):
    wh = Warehouse(tmp_path / "wh")
    with pytest.raises(WarehouseError, match="kind"):
        wh.mark_run("x", {"status": "running", "kind": "adhoc"})
    assert wh.snapshots() == []


def test_retain_keeps_the_latest_scheduled_snapshot_besides_newer_what_if_runs(tmp_path):
    wh = Warehouse(tmp_path / "wh")
    finished(wh, "s1", 1, "scheduled")
    finished(wh, "s2", 2, "scheduled")
    finished(wh, "w1", 3, "what-if")
    finished(wh, "w2", 4, "what-if")
    report = wh.retain(keep=1)
    assert report["kept"] == ["s2", "w2"] and report["deleted"] == ["s1", "w1"]
    assert wh.latest_snapshot_id() == "s2"
    finished(wh, "s3", 5, "scheduled")
    assert wh.retain(keep=1)["kept"] == ["s3"]


def ended(wh: Warehouse, sid: str, minute: int, status: str) -> None:
    wh.mark_run(sid, {"status": status, "kind": "scheduled", "started_at": at(minute),
                      "finished_at": at(minute) + dt.timedelta(seconds=30)})


def test_retain_keeps_the_cleaning_run_and_the_newest_failure(tmp_path):
    """A nightly run that fails validation runs the clean-up itself: its own `runs` row stays (the page and
    `/metrics` read it), and so does the newest failure once later runs succeed; older failures go."""
    wh = Warehouse(tmp_path / "wh")
    ended(wh, "s1", 1, "succeeded")
    ended(wh, "bad1", 2, "validation_failed")
    report = wh.retain(keep=1, current="bad1")
    assert "bad1" not in report["deleted"]
    assert [(r["snapshot_id"], r["status"]) for r in wh.snapshots()] == [
        ("s1", "succeeded"), ("bad1", "validation_failed")]

    ended(wh, "s2", 3, "succeeded")
    report = wh.retain(keep=1, current="s2")
    # after a good night the newest failure keeps its row (its tables go: nothing serves them)
    assert report["deleted"] == ["bad1", "s1"] and report["rows_kept"] == ["bad1"]
    assert [r["snapshot_id"] for r in wh.snapshots()] == ["bad1", "s2"]

    ended(wh, "bad2", 4, "failed")
    ended(wh, "s3", 5, "succeeded")
    report = wh.retain(keep=1, current="s3")
    assert report["deleted"] == ["bad1", "bad2", "s2"] and report["rows_kept"] == ["bad2"]  # the newer one replaces it
    assert [(r["snapshot_id"], r["status"]) for r in wh.snapshots()] == [("bad2", "failed"), ("s3", "succeeded")]
    assert wh.latest_snapshot_id() == "s3"


def test_retain_never_deletes_the_cleaning_runs_own_row(tmp_path):
    """Clocks disagree (a run host's clock behind the last failure's): the run doing the clean-up is not the
    newest failure by time, and its row still stays."""
    wh = Warehouse(tmp_path / "wh")
    ended(wh, "s1", 1, "succeeded")
    ended(wh, "bad-later-clock", 9, "failed")
    ended(wh, "bad-now", 5, "validation_failed")
    report = wh.retain(keep=1, current="bad-now")
    assert "bad-now" not in report["deleted"] and report["rows_kept"] == ["bad-later-clock"]
    assert {r["snapshot_id"] for r in wh.snapshots()} == {"s1", "bad-now", "bad-later-clock"}
