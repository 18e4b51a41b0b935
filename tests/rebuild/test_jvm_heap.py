"""A JVM whose heap runs out fails the run in one line, exit 1, recorded as failed: the stage, the largest offsets
partition and the setting to raise; the JVM's own words (`Terminating due to java.lang.OutOfMemoryError`) and
Python's tracebacks go to the run's log, never the terminal. The heap is really exhausted: a driver JVM of 64 MB
(`spark.testing.memory` lets Spark start under its 450 MB floor) on a log it cannot hold."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from pipelines.rebuild.failures import heap_advice, jvm_heap_exhausted

ROOT = Path(__file__).resolve().parents[2]
LINE = re.compile(r"^error: run heap failed in stage (\w+): the JVM's heap ran out \(java\.lang\.OutOfMemoryError, "
                  r"the driver JVM exited with status 3\) at offsets partition (\d+), the largest \(\d+ MiB of "
                  r"segments\): raise spark\.driver\.memory \(now (\w+)\); the README's \"Memory\" sizes it; "
                  r"recorded as failed \(log: (\S+)\)$")


def _cli(env, *args):
    return subprocess.run([sys.executable, "-m", "jobs.cli", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600)


@pytest.mark.spark
@pytest.mark.integration
@pytest.mark.parametrize("heap", ["40m", "64m"], ids=["at-start", "mid-run"])
def test_a_heap_that_runs_out_is_one_line_and_a_failed_run(tmp_path, heap):
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}
    r = _cli(env, "sample", str(tmp_path / "dump"), "--records", "300000", "--groups", "200", "--partitions", "2",
             "--data-segments", "0")
    assert r.returncode == 0, r.stderr
    r = _cli(env, "rebuild", "--input", str(tmp_path / "dump"), "--warehouse", str(tmp_path / "wh"), "--snapshot-id",
             "heap", "--quiet", "--json", "--conf", f"spark.spark.driver.memory={heap}",
             "--conf", "spark.spark.testing.memory=1073741824")
    assert r.returncode == 1, r.stderr[-3000:]
    assert r.stdout == ""  # the JVM's "Terminating due to …" went to the log with the rest of it
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and LINE.match(lines[0]), lines
    stage, partition, now, log = LINE.match(lines[0]).groups()
    assert now == heap and (stage == "start") == (heap == "40m") and partition in ("0", "1")
    said = Path(log).read_text(errors="replace")
    assert "Terminating due to java.lang.OutOfMemoryError" in said
    from pipelines.io.warehouse import Warehouse

    (run,) = Warehouse(str(tmp_path / "wh")).snapshots()
    assert run["snapshot_id"] == "heap" and run["status"] == "failed"
    assert "raise spark.driver.memory" in run["summary"] and f'"stage": "{stage}"' in run["summary"]


def test_what_says_a_heap_ran_out():
    """Spark's text of an executor lost to it (a cluster), a task's error, the driver's exit status; nothing else."""
    lost = RuntimeError("Job aborted: ExecutorLostFailure (executor 3 exited caused by one of the running tasks) "
                        "Reason: The executor with id 3 exited with exit code 52(JVM OOM).")
    assert jvm_heap_exhausted(lost) == "exit code 52"
    wrapped = RuntimeError("stage failed")
    wrapped.__cause__ = RuntimeError("py4j: java.lang.OutOfMemoryError: Java heap space\n\tat org.apache…")
    assert jvm_heap_exhausted(wrapped) == "java.lang.OutOfMemoryError: Java heap space"
    assert jvm_heap_exhausted(RuntimeError("x"), jvm_exit=3).startswith("java.lang.OutOfMemoryError")
    assert jvm_heap_exhausted(RuntimeError("exit code 1"), jvm_exit=1) is None
    assert jvm_heap_exhausted(MemoryError("Python's own")) is None  # a Python worker's: ShardMemoryError's case
    assert "raise spark.executor.memory" in heap_advice("x", local=False, memory="2g", partition=None)


@pytest.mark.bench
@pytest.mark.spark
@pytest.mark.integration
def test_a_log_far_larger_than_the_heap_rebuilds_under_it_split_or_not(tmp_path):
    """The JVM holds no log: one uncompacted offsets partition of about 1.1 GB (the log a dead cleaner leaves)
    rebuilds under a 512 MB driver heap (a local run's only JVM, with Spark's own accounting of it), read in ranges
    and read whole, and both give the same snapshot, table by table, the history too. Run by `make bench`
    (minutes), never by `make test`."""
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}
    dump = tmp_path / "dump"
    r = _cli(env, "sample", str(dump), "--records", "10000000", "--groups", "300", "--partitions", "1",
             "--shape", "cleaner-died", "--data-segments", "0")
    assert r.returncode == 0, r.stderr
    log_mb = sum(f.stat().st_size for f in dump.rglob("*.log")) / 2**20
    assert log_mb > 2 * 512, log_mb
    for name, split in (("split", []), ("whole", ["--conf", "decode.split_bytes=0"])):  # split: 64 MiB ranges
        r = _cli(env, "rebuild", "--input", str(dump), "--warehouse", str(tmp_path / name), "--snapshot-id", "s",
                 "--quiet", "--json", "--conf", "spark.spark.driver.memory=512m", *split)
        assert r.returncode == 0, (name, r.stderr[-3000:])
    # the state tables row by row; the history (a row per record: 10 M) as Arrow tables in log order
    from pipelines.io.warehouse import Warehouse
    from tests.test_incremental import COMPARED, _canon

    whole, split = Warehouse(str(tmp_path / "whole")), Warehouse(str(tmp_path / "split"))
    for table in COMPARED:
        assert _canon(split.read_table(table, "s")) == _canon(whole.read_table(table, "s")), table
    in_log_order = [("offsets_partition", "ascending"), ("record_offset", "ascending")]
    history = [w.read_table("offset_commits").sort_by(in_log_order) for w in (whole, split)]
    assert history[0].num_rows >= 10_000_000 * 0.9 and history[1].equals(history[0])


@pytest.mark.spark
@pytest.mark.integration
def test_a_session_spark_refuses_to_start_is_one_line_and_a_failed_run(tmp_path):
    """A setting Spark rejects at start (a driver heap under its 450 MB floor) is said in Spark's own words, on one
    line, exit 1, and the run is recorded as failed in stage `start`: never Py4J's traceback."""
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}
    r = _cli(env, "sample", str(tmp_path / "dump"), "--records", "300000", "--groups", "200", "--partitions", "2",
             "--data-segments", "0")
    assert r.returncode == 0, r.stderr
    r = _cli(env, "rebuild", "--input", str(tmp_path / "dump"), "--warehouse", str(tmp_path / "wh"), "--snapshot-id",
             "small", "--quiet", "--conf", "spark.spark.driver.memory=256m")
    assert r.returncode == 1 and r.stdout == "", r.stderr[-3000:]
    (line,) = r.stderr.splitlines()
    # the heap as the JVM reports it: 256 MB less what the collector keeps of it
    assert re.match(r"error: run small failed in stage start: Spark did not start: \[INVALID_DRIVER_MEMORY\] System "
                    r"memory \d+ must be at least 471859200; recorded as failed \(log: \S+\)$", line), line
    from pipelines.io.warehouse import Warehouse

    (run,) = Warehouse(str(tmp_path / "wh")).snapshots()
    assert run["status"] == "failed" and '"stage": "start"' in run["summary"] and "INVALID_DRIVER_MEMORY" in run["summary"]
