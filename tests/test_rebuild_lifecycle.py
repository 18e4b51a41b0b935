"""A run's life against the attacks that found its holes: a second writer's vacuum during a paused write (before:
an empty table committed and `succeeded` reported), kills at each stage of a rerun of the served snapshot id
(before: the id withdrawn at once, `running` rows forever), a full disk mid-run (before: Java and Python tracebacks).

Spark is costly here (each run starts or uses a JVM): one tiny log, few runs.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests import badinputs as bi

pytestmark = pytest.mark.spark
ROOT = Path(__file__).resolve().parent.parent


def small_log(root: Path, first_offset: int) -> tuple[Path, str]:
    """Partition 0: a group record and five commits of offsets first_offset.. (a second log differs by them)."""
    g = bi.group_in(0, "clean")
    bi.write_segment(root / "__consumer_offsets-0", 0,
                     bi.batch([bi.group_record(g, bi.T0)], 0)
                     + b"".join(bi.batch([bi.commit(g, i, first_offset + i, bi.T0 + i + 1)], i + 1) for i in range(5)))
    return root, g


def _good_and_unreadable(tmp_path: Path, bad_commit: int) -> tuple[Path, str, Path, Path]:
    """A good log (and its group), one committing `bad_commit` whose segment ends in bytes no batch frames (a run
    under `max_unread_bytes: 0` fails validation on it), and where the warehouse goes."""
    good, g = small_log(tmp_path / "good", 100)
    bad, _ = small_log(tmp_path / "bad", bad_commit)
    seg = next((bad / "__consumer_offsets-0").glob("*.log"))
    seg.write_bytes(seg.read_bytes() + b"\xff" * 64)  # bytes no batch frames
    return good, g, bad, tmp_path / "wh"


def lookup(wh: Path, group: str, snapshot: str | None = None):
    """`offsetlake lookup --group`: (exit code, snapshot id, committed offsets by partition)."""
    from jobs.cli import main

    r = CliRunner().invoke(main, ["lookup", "--warehouse", str(wh), "--group", group,
                                  *(["--snapshot", snapshot] if snapshot else [])])
    if r.exit_code != 0:
        return r.exit_code, None, r.output
    d = json.loads(r.output)
    return 0, d["snapshot_id"], {o["partition"]: o["committed_offset"] for o in d["offsets"]}


def runs(wh: Path) -> dict:
    from pipelines.io.warehouse import Warehouse

    return {r["snapshot_id"]: r for r in Warehouse(wh).snapshots()}


# ------------------------------------------------------------------------------------------ the vacuum race
def test_a_paused_write_keeps_its_files_from_a_second_writer(spark, settings, tmp_path, monkeypatch):
    """Paused between Spark's write of loaded_offsets and its commit, a second run and a bare `retain` (vacuum,
    zero retention) try the warehouse: both are refused, the staged files survive, and the committed row counts
    are those the run reported."""
    from pipelines.io import delta
    from pipelines.io.warehouse import Warehouse, WarehouseError
    from pipelines.rebuild.preflight import prepare_run
    from pipelines.rebuild import RebuildRequest, UsageError, run_rebuild

    src, g = small_log(tmp_path / "in", 100)
    wh = tmp_path / "wh"
    real = delta.collect_add_actions
    paused: dict = {}

    def pause(table_path, rel_dir, *args):
        if Path(table_path).name == "loaded_offsets" and not paused:
            paused["files"] = sorted((Path(table_path) / rel_dir).glob("*.parquet"))
            with pytest.raises(UsageError, match="is being written by another run: .* snapshot s1 "):
                prepare_run(settings, RebuildRequest(inputs=(str(src),), warehouse=str(wh), snapshot_id="intruder"))
            with pytest.raises(WarehouseError, match="not deleting or vacuuming while another run writes it"):
                Warehouse(wh).retain(keep=1)
            paused["survived"] = all(f.exists() for f in paused["files"])
        return real(table_path, rel_dir, *args)

    monkeypatch.setattr(delta, "collect_add_actions", pause)
    summary = run_rebuild(spark, settings, RebuildRequest(inputs=(str(src),), warehouse=str(wh), snapshot_id="s1"))
    assert paused["files"] and paused["survived"]
    assert summary.status == "succeeded" and summary.offsets == 5
    assert Warehouse(wh).committed_rows("loaded_offsets", "s1") == 5
    assert lookup(wh, g) == (0, "s1", {i: 100 + i for i in range(5)})
    assert not (wh / "_lock").exists()


def test_files_lost_before_the_commit_fail_the_run_loudly(spark, settings, tmp_path, monkeypatch):
    """A writer that ignores the lock (an older offsetlake) vacuums the staged files away: the run must not
    commit an empty table and report success. It fails, is recorded failed, and the served snapshot stays."""
    from pipelines.io import delta
    from pipelines.io.warehouse import Warehouse
    from pipelines.rebuild import RebuildRequest, RunFailed, run_rebuild

    src, g = small_log(tmp_path / "in", 100)
    wh = tmp_path / "wh"
    run_rebuild(spark, settings, RebuildRequest(inputs=(str(src),), warehouse=str(wh), snapshot_id="s1"))
    before = lookup(wh, g)
    real = delta.collect_add_actions

    def lose(table_path, rel_dir, *args):
        if Path(table_path).name == "loaded_offsets":
            dt = delta.open_table(table_path)
            delta.vacuum(dt, 0)  # zero retention, full: deletes every file no commit references
        return real(table_path, rel_dir, *args)

    monkeypatch.setattr(delta, "collect_add_actions", lose)
    with pytest.raises(RunFailed, match="loaded_offsets has 0 staged rows, the run counted 5"):
        run_rebuild(spark, settings, RebuildRequest(inputs=(str(src),), warehouse=str(wh), snapshot_id="s2"))
    assert runs(wh)["s2"]["status"] == "failed" and "staged rows" in runs(wh)["s2"]["summary"]
    assert Warehouse(wh).latest_snapshot_id() == "s1" and lookup(wh, g) == before
    assert "s2" not in Warehouse(wh).snapshot_ids_in("loaded_offsets")
    assert not (wh / "_lock").exists()


def test_a_run_failing_while_its_tables_are_staged_leaves_no_file(spark, settings, tmp_path, monkeypatch):
    """The tables in hand are staged while validation runs: validation dying meanwhile fails the run, recorded,
    and the files already staged for it are deleted (none waits for a vacuum); the served snapshot stays."""
    from pipelines.io.warehouse import Warehouse
    from pipelines.rebuild import RebuildRequest, run_rebuild, stages
    from schemas.tables import SNAPSHOT_TABLES

    src, g = small_log(tmp_path / "in", 100)
    wh = tmp_path / "wh"
    run_rebuild(spark, settings, RebuildRequest(inputs=(str(src),), warehouse=str(wh), snapshot_id="s1"))
    before = lookup(wh, g)

    def dies(*_a, **_k):
        raise RuntimeError("validation died")

    monkeypatch.setattr(stages, "run_validation", dies)
    with pytest.raises(RuntimeError, match="validation died"):
        run_rebuild(spark, settings, RebuildRequest(inputs=(str(src),), warehouse=str(wh), snapshot_id="s2"))
    assert runs(wh)["s2"]["status"] == "failed" and "validation died" in runs(wh)["s2"]["summary"]
    assert not any(list((wh / t).glob("snapshot_id=s2/**/*.parquet")) for t in SNAPSHOT_TABLES)
    assert Warehouse(wh).latest_snapshot_id() == "s1" and lookup(wh, g) == before
    assert not (wh / "_lock").exists()


def test_a_commit_failing_on_a_full_disk_is_named_the_commit_when_the_write_cannot_record_it(
        no_spark, settings, tmp_path, monkeypatch):
    """The write records the stage it stopped in; on a full disk that record fails too, and the run's own record
    (made once the staged files were deleted) named the write stage, not the commit it had begun: the writer lock,
    which the run updates before its first commit, says so."""
    import errno

    from pipelines.io.warehouse import Warehouse
    from pipelines.rebuild import RebuildRequest, run_rebuild
    from pipelines.rebuild.failures import RunFailed

    src, _ = small_log(tmp_path / "in", 100)
    wh = tmp_path / "wh"
    real = Warehouse.record_failure
    attempts = []

    def full(*_a, **_k):
        raise OSError(errno.ENOSPC, "No space left on device")

    def full_once(self, *a, **k):  # the write's own record meets the full disk; the run's, once space is back
        attempts.append(a[0])
        return full() if len(attempts) == 1 else real(self, *a, **k)

    monkeypatch.setattr(Warehouse, "_commit_tables", full)
    monkeypatch.setattr(Warehouse, "record_failure", full_once)
    with pytest.raises(RunFailed, match="^run s1 failed in stage commit: disk full: "):
        run_rebuild(no_spark, settings, RebuildRequest(inputs=(str(src),), warehouse=str(wh), snapshot_id="s1"))
    assert attempts == ["s1", "s1"]
    row = runs(wh)["s1"]
    assert row["status"] == "failed" and json.loads(row["summary"])["stage"] == "commit"


# ------------------------------------------------------------------------------------------ a failed night
def test_a_run_failing_validation_keeps_its_row_and_names_the_failure(spark, tmp_path):
    """`--env prod`'s policy (a byte that cannot be read fails the run) on a log with unreadable bytes: the run
    writes its `validation_failed` row, then its own clean-up must not delete it (it did: `retain` kept only
    succeeded runs, so the page and `/metrics` stayed green). The failed expectation is named in `runs` and in the
    printed summary; the good snapshot stays served; a later good night keeps the failure visible."""
    from jobs.summary_text import format_summary
    from pipelines.config import load_settings
    from pipelines.io.warehouse import Warehouse
    from pipelines.rebuild import RebuildRequest, run_rebuild

    prod = load_settings(env="ci", overrides={"validation": {"policy": "fail", "max_unread_bytes": 0},
                                              "warehouse": {"keep_snapshots": 1}})
    good, g, bad, wh = _good_and_unreadable(tmp_path, 100)
    run_rebuild(spark, prod, RebuildRequest(inputs=(str(good),), warehouse=str(wh), snapshot_id="s1"))

    summary = run_rebuild(spark, prod, RebuildRequest(inputs=(str(bad),), warehouse=str(wh), snapshot_id="bad1"))
    assert summary.status == "validation_failed"
    row = runs(wh)["bad1"]
    assert row["status"] == "validation_failed"
    failed = json.loads(row["validation"])["failed_expectations"]
    assert [(f["table"], f["expectation"]) for f in failed] == [("accounting", "accounting.bytes_all_read")]
    assert "failed            accounting: `bytes_unread` <= 0" in format_summary(summary)
    assert Warehouse(wh).latest_snapshot_id() == "s1" and lookup(wh, g)[1] == "s1"

    run_rebuild(spark, prod, RebuildRequest(inputs=(str(good),), warehouse=str(wh), snapshot_id="s2"))
    assert {sid: r["status"] for sid, r in runs(wh).items()} == {"bad1": "validation_failed", "s2": "succeeded"}


def test_a_rerun_of_the_served_id_failing_validation_leaves_it_served_and_the_incremental_base(spark, tmp_path):
    """A rerun of the served id on a log with unreadable bytes fails validation: its row replaced the served one, so
    readers and the next --incremental run found no snapshot. Now the id stays served as it was, the attempt is
    kept in `_attempts/`, and the next --incremental run resumes from the good run's checkpoint."""
    from pipelines.config import load_settings
    from pipelines.io.warehouse import Warehouse
    from pipelines.rebuild import RebuildRequest, run_rebuild

    prod = load_settings(env="ci", overrides={"validation": {"policy": "fail", "max_unread_bytes": 0}})
    good, g, bad, wh = _good_and_unreadable(tmp_path, 900)
    run_rebuild(spark, prod, RebuildRequest(inputs=(str(good),), warehouse=str(wh), snapshot_id="s1"))
    before = lookup(wh, g)

    summary = run_rebuild(spark, prod, RebuildRequest(inputs=(str(bad),), warehouse=str(wh), snapshot_id="s1"))
    assert summary.status == "validation_failed"
    assert runs(wh)["s1"]["status"] == "succeeded" and Warehouse(wh).latest_snapshot_id() == "s1"
    assert lookup(wh, g) == before == (0, "s1", {i: 100 + i for i in range(5)})
    [attempt] = (wh / "_attempts").glob("s1.*.json")
    assert json.loads(attempt.read_text())["status"] == "validation_failed"
    assert any("stays served" in w and str(attempt) in w for w in summary.after_commit), summary.after_commit

    nxt = run_rebuild(spark, prod, RebuildRequest(inputs=(str(good),), warehouse=str(wh), snapshot_id="s2",
                                                  incremental=True))
    assert nxt.status == "succeeded"
    assert (nxt.incremental["mode"], nxt.incremental["previous_snapshot"]) == ("incremental", "s1"), nxt.incremental
    assert lookup(wh, g) == (0, "s2", {i: 100 + i for i in range(5)})


# ------------------------------------------------------------------------------------------ kills
def start_rebuild(src: Path, wh: Path, sid: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYSPARK_PYTHON": sys.executable,
           "PYSPARK_DRIVER_PYTHON": sys.executable}
    return subprocess.Popen([sys.executable, "-m", "jobs.cli", "rebuild", "--env", "ci", "--input", str(src),
                             "--warehouse", str(wh), "--snapshot-id", sid],
                            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def kill_at(proc: subprocess.Popen, marker: str, timeout: float = 600) -> list[str]:
    """SIGKILL the run (and its JVM: the whole process group) as soon as a stderr line contains `marker`."""
    seen = []
    deadline = time.monotonic() + timeout
    for line in proc.stderr:
        seen.append(line.rstrip())
        if marker in line:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
            return seen
        assert time.monotonic() < deadline, seen
    raise AssertionError(f"the run ended (exit {proc.wait()}) before {marker!r}:\n" + "\n".join(seen[-30:]))


@pytest.mark.integration
def test_killed_reruns_of_the_served_id_leave_it_served(spark, settings, tmp_path):
    """Rerun the served id `s` on a different log and SIGKILL it during decode, then while its tables are being
    staged, then while it commits. After each, readers answer exactly as before (a run killed while committing
    may have replaced some of `s`'s tables: readers stay on the versions `s`'s runs row pinned); each dead run's
    lock is seen stale and taken over by the next run, which records the dead attempt aside."""
    from pipelines.io.lock import WriterLock
    from pipelines.io.warehouse import Warehouse
    from pipelines.rebuild import RebuildRequest, run_rebuild

    old_src, g = small_log(tmp_path / "old", 100)
    new_src, _ = small_log(tmp_path / "new", 900)
    wh = tmp_path / "wh"
    run_rebuild(spark, settings, RebuildRequest(inputs=(str(old_src),), warehouse=str(wh), snapshot_id="s"))
    before = lookup(wh, g)
    assert before == (0, "s", {i: 100 + i for i in range(5)})

    for marker in ("] decode:", "] write:", "commit: every table staged"):
        seen = kill_at(start_rebuild(new_src, wh, "s"), marker)
        # the console is offsetlake's: progress lines only, Spark's own log stays off it (log.spark_level)
        noise = [ln for ln in seen if ln and not ln.startswith(("[", " ", "WARNING: Using incubator modules"))]
        assert noise == [], noise
        holder = WriterLock(wh).holder()
        assert holder is not None and holder["snapshot_id"] == "s", holder
        assert WriterLock(wh).is_stale(holder)  # its pid is gone
        assert lookup(wh, g) == before, marker  # the served snapshot answers as before the rerun
        assert runs(wh)["s"]["status"] == "succeeded"
        if marker == "] write:":
            assert any("took over a stale writer lock: run s abandoned" in ln for ln in seen), seen
    attempts = sorted((wh / "_attempts").glob("s.*.json"))
    assert len(attempts) == 2  # the decode and write kills, recorded by the runs that took their locks over
    assert all(json.loads(a.read_text())["status"] == "failed" and "abandoned" in a.read_text() for a in attempts)

    lines: list[str] = []
    # retention off for this run: it would delete `s` once failed (retain drops every snapshot not succeeded)
    keep_all = replace(settings, raw={**settings.raw, "warehouse": {**settings.section("warehouse"),
                                                                    "keep_snapshots": None}})
    summary = run_rebuild(spark, keep_all, RebuildRequest(inputs=(str(new_src),), warehouse=str(wh),
                                                          snapshot_id="next"), emit=lines.append)
    assert any("took over a stale writer lock: run s abandoned" in ln and "stage commit" in ln for ln in lines), lines
    assert runs(wh)["s"]["status"] == "succeeded" and lookup(wh, g, "s") == before
    attempts = sorted((wh / "_attempts").glob("s.*.json"))
    assert len(attempts) == 3 and "stage commit" in attempts[-1].read_text()
    assert summary.status == "succeeded" and Warehouse(wh).latest_snapshot_id() == "next"
    assert lookup(wh, g) == (0, "next", {i: 900 + i for i in range(5)})
    assert not (wh / "_lock").exists()
    assert not any(r["status"] == "running" for r in runs(wh).values())


# ------------------------------------------------------------------------------------------ a full disk
def _unshare_ok() -> bool:
    import shutil

    if not shutil.which("unshare") or os.geteuid() != 0:
        return False
    return subprocess.run(["unshare", "-m", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt"],
                          capture_output=True).returncode == 0


@pytest.mark.integration
@pytest.mark.skipif(not _unshare_ok(), reason="needs root and mount namespaces (unshare -m)")
def test_disk_full_mid_run_is_one_line_and_exit_1(tmp_path):
    """The warehouse (a 64 MB tmpfs in a private mount namespace) fills up once the run has started decoding."""
    src, _ = small_log(tmp_path / "in", 100)
    wh = tmp_path / "wh"
    wh.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYSPARK_PYTHON": sys.executable,
           "PYSPARK_DRIVER_PYTHON": sys.executable}
    script = f'mount -t tmpfs -o size=64m tmpfs "{wh}" && exec "$@"'
    proc = subprocess.Popen(["unshare", "-m", "sh", "-c", script, "sh", sys.executable, "-m", "jobs.cli", "rebuild",
                             "--env", "ci", "--input", str(src), "--warehouse", str(wh), "--snapshot-id", "full"],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    seen = []
    for line in proc.stderr:
        seen.append(line.rstrip())
        if "] decode:" in line:
            # the run's own view of its warehouse (its mount namespace), filled to the last byte
            try:
                with open(f"/proc/{proc.pid}/root{wh}/filler", "wb", buffering=0) as f:
                    while True:
                        f.write(b"\0" * (1 << 16))
            except OSError as e:
                assert e.errno == 28, e  # ENOSPC: full
            break
    rest = proc.stderr.read()
    proc.wait(600)
    err = "\n".join(seen) + "\n" + rest
    assert proc.returncode == 1, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    last = [ln for ln in err.splitlines() if ln.strip()][-1]
    assert last.startswith("error: run full failed in stage ") and "disk full" in last, last


@pytest.mark.parametrize("since", ["2026-99-99", "yesterday", 5, None])
@pytest.mark.parametrize("snapshot_id", ["new", ["x"], 7])
def test_a_stale_lock_whose_fields_were_edited_is_recorded_without_a_traceback(tmp_path, since, snapshot_id):
    """The lock a run took over names a `since` that is no time (an edited or damaged lock file): recording the
    dead run was a traceback (ValueError: month must be in 1..12), the run that took the lock over failing. The
    dead run is recorded with no start; a snapshot id that is no string is not recorded (it names no snapshot)."""
    from pipelines.io.warehouse import Warehouse
    from pipelines.rebuild.failures import record_abandoned

    wh = Warehouse(tmp_path / "wh")
    said: list[str] = []
    record_abandoned(wh, {"snapshot_id": snapshot_id, "since": since, "stage": {"a": 1}, "pid": 9, "host": "h"},
                     said.append)
    assert "abandoned" in said[0]
    rows = wh.snapshots()
    if snapshot_id == "new":
        (row,) = rows
        assert row["status"] == "failed" and row["started_at"] is None and "abandoned" in row["summary"]
    else:
        assert rows == []


def test_a_stale_lock_with_an_empty_record_is_said_without_none(tmp_path):
    """A lock taken over whose record was empty (damaged, or its run killed between create and write) was said as
    'run None abandoned: process None on None ... taken None'; what the record does not say is now '?'."""
    from pipelines.io.warehouse import Warehouse
    from pipelines.rebuild.failures import record_abandoned

    said: list[str] = []
    record_abandoned(Warehouse(tmp_path / "wh"), {}, said.append)
    assert "None" not in said[0] and "run ? abandoned: process ? on ? stopped during stage start" in said[0]
