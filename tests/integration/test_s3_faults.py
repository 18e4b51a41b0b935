"""Rebuilds from a bucket into a bucket through a proxy that answers a share of requests 503 SlowDown, cuts GET
bodies mid-way and answers slowly (tests/faultproxy.py in front of moto), as a platform team tried it: before,
a transient read of an input segment was exit 2 with no `runs` row, and a run could end exit 1 with a traceback
while `runs` said succeeded.

What must hold: at 5 % every run succeeds and serves exactly what the same dump rebuilt locally serves, full and
`--incremental`; at 30 % a run succeeds so, or fails as a recorded run (exit 1, one message line, a `failed` row
naming the stage and the cause) and the served snapshot stays; a store down through the checks before Spark, or
through the decode tasks, fails the run in that stage, recorded, shown by /metrics. Never exit 2, never a
traceback, nothing but offsetlake's lines on stderr. `benchmarks/bench_faults.py` runs the same at any rate and
count for the README's figures.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests import logtools
from tests.faultproxy import FaultProxy

pytestmark = [pytest.mark.integration, pytest.mark.spark]
ROOT = Path(__file__).resolve().parents[2]
FAILED = re.compile(r"^error: run (\S+) failed in stage (\w+): object store unavailable: .*; (recorded as failed|"
                    r"its failure could not be recorded either .*) \(log: \S+\)$")
# the tables a reader serves, each compared without the columns that say where or when the files were read; from
# a bucket the data topics' segments are not walked (README, "Object storage"): their log start is the checkpoint's
# alone, and their timestamps are not known
COMPARED = {"loaded_offsets": (), "empty_group_offsets": (), "loaded_groups": (), "group_members": (),
            "removed_groups": (), "pending_offsets": (), "expired_offsets": (), "expired_groups": (),
            "log_end_offsets": ("observed_at", "timestamp_type", "log_start_timestamp", "log_start_offset",
                                "log_start_source")}
# the waits of a test are kept short (the figures use the settings as they are)
QUICK = ("--conf", "storage.retry_first_backoff_seconds=0.05", "--conf", "storage.retry_max_backoff_seconds=0.5")


def rebuild(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "jobs.cli", "rebuild", "--env", "ci", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=900)


def answer(warehouse: str, snapshot_id: str | None = None) -> tuple[str, dict]:
    """(the snapshot served, or `snapshot_id`; its tables' rows, sorted), read around the proxy by one snapshot
    reader, which reads `runs` once: Warehouse.read_table opens a reader of its own and reads `runs` again for each
    table, and from the bucket those reads were most of an answer's time."""
    from pipelines.io.snapshots import pick_snapshot, snapshots_from_runs
    from pipelines.io.warehouse import Warehouse

    reader = Warehouse(warehouse).reader()
    try:
        snap = pick_snapshot(snapshots_from_runs(reader.runs()), snapshot_id)
        out = {}
        for table, skipped in COMPARED.items():
            t = reader.snapshot_table(table, snap)
            rows = [{k: v for k, v in r.items() if k not in ("snapshot_id", *skipped)} for r in t.to_pylist()]
            out[table] = sorted(rows, key=repr)
    finally:
        reader.close()
    return snap.snapshot_id, out


def assert_answer(got: tuple[str, dict], want: tuple[str, dict]) -> None:
    """The same snapshot served, with the same rows table by table (a difference names its table and rows)."""
    assert got[0] == want[0]
    for table in COMPARED:
        extra = [r for r in got[1][table] if r not in want[1][table]]
        missing = [r for r in want[1][table] if r not in got[1][table]]
        assert got[1][table] == want[1][table], f"{table}: served but not clean {extra[:3]}; clean but not served " \
                                                f"{missing[:3]}"


def runs(warehouse: str) -> dict:
    from pipelines.io.warehouse import Warehouse

    return {r["snapshot_id"]: r for r in Warehouse(warehouse).snapshots()}


def message_lines(stderr: str) -> list[str]:
    """stderr's lines that are not progress lines (with --quiet there are none of those)."""
    return [ln for ln in stderr.splitlines() if ln.strip() and not re.match(r"^(\[\s*[\d.]+s\] |          )", ln)]


@pytest.fixture(scope="module")
def world(spark, s3_server, tmp_path_factory):  # spark: the local reference rebuilds run in this process
    """A dump (yesterday's: each partition cut at 80 %; today's: whole) in a bucket and locally, the local
    rebuilds' answers, and the environment of a CLI that talks to the bucket through the proxy."""
    import pyarrow.fs as pafs
    from click.testing import CliRunner

    from jobs.cli import main

    mp = pytest.MonkeyPatch()
    creds = {"AWS_ACCESS_KEY_ID": "offsetlake-test", "AWS_SECRET_ACCESS_KEY": "offsetlake-test-secret",
             "AWS_REGION": "us-east-1", "AWS_ENDPOINT_URL": s3_server}
    for k, v in creds.items():
        mp.setenv(k, v)
    for k in ("AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3", "AWS_PROFILE", "AWS_DEFAULT_REGION"):
        mp.delenv(k, raising=False)
    base = tmp_path_factory.mktemp("s3faults")
    fs = pafs.S3FileSystem(access_key=creds["AWS_ACCESS_KEY_ID"], secret_key=creds["AWS_SECRET_ACCESS_KEY"],
                           region="us-east-1", endpoint_override=s3_server.split("://", 1)[1], scheme="http",
                           allow_bucket_creation=True)
    fs.create_dir("faults")
    r = subprocess.run([sys.executable, "-m", "jobs.cli", "sample", str(base / "full"), "--records", "2000",
                        "--groups", "30", "--partitions", "4", "--seed", "23"],
                       cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    logtools.cut_log_dir(base / "full", base / "yesterday", fraction=0.8)
    clean = {}
    for day in ("yesterday", "full"):
        pafs.copy_files(str(base / day), f"faults/{day}", source_filesystem=pafs.LocalFileSystem(),
                        destination_filesystem=fs)
        out = CliRunner().invoke(main, ["rebuild", "--input", str(base / day), "--warehouse", str(base / f"wh-{day}"),
                                        "--snapshot-id", "clean", "--env", "ci", "--quiet"])
        assert out.exit_code == 0, out.output
        clean[day] = answer(str(base / f"wh-{day}"))[1]
    proxy = FaultProxy(s3_server, seed=5)
    try:
        yield type("World", (), dict(clean=clean, proxy=proxy, wh="s3://faults/wh", dump="s3://faults/",
                                     env={**os.environ, **creds, "AWS_ENDPOINT_URL": proxy.url,
                                          "PYTHONPATH": str(ROOT)}))
    finally:
        proxy.close()
        mp.undo()


def test_at_5_percent_every_rebuild_serves_the_clean_answer(world):
    world.proxy.set_rates(slowdown=0.05, reset=0.02, slow=0.02, complete_error=0.05)
    try:
        for sid, day, extra in (("y1", "yesterday", ()), ("t1", "full", ("--incremental",))):
            r = rebuild(world.env, "--input", world.dump + day, "--warehouse", world.wh, "--snapshot-id", sid,
                        "--quiet", *QUICK, *extra)
            assert r.returncode == 0, r.stderr[-3000:]
            assert r.stderr == "", r.stderr[-3000:]  # Arrow's retry chatter and the JVM's went to the run's log
            assert_answer(answer(world.wh), (sid, world.clean[day]))
        assert runs(world.wh)["t1"]["status"] == "succeeded"
        assert world.proxy.injected() > 10, world.proxy.counts
    finally:
        world.proxy.clear()


def test_at_30_percent_a_run_succeeds_or_fails_as_a_recorded_run(world):
    before = answer(world.wh)
    world.proxy.set_rates(slowdown=0.3, reset=0.1, complete_error=0.3)
    try:
        r = rebuild(world.env, "--input", world.dump + "full", "--warehouse", world.wh, "--snapshot-id", "t30",
                    "--quiet", *QUICK)
    finally:
        world.proxy.clear()
    lines = message_lines(r.stderr)
    assert r.returncode in (0, 1) and len(lines) <= 2 and "Traceback" not in r.stderr, r.stderr[-3000:]
    if r.returncode == 0:
        assert lines == []
        assert_answer(answer(world.wh), ("t30", world.clean["full"]))
    else:
        assert len(lines) == 1 and FAILED.match(lines[0]), lines
        row = runs(world.wh)["t30"]
        assert row["status"] == "failed" and "object store unavailable" in row["summary"], row
        assert answer(world.wh) == before


def _last_run_failed(warehouse: str) -> bool:
    from tests.serving.test_metrics import scrape_in_process

    samples = scrape_in_process(warehouse)
    return samples[("offsetlake_last_run_status", (("status", "failed"),))] == 1


def test_a_store_down_through_the_checks_fails_the_run_in_preflight(world):
    """Every read of the dump's objects refused 503 from the start: the run never reaches Spark; it is a failed run
    in stage `preflight`, not a user's mistake, and /metrics says the night failed."""
    before = answer(world.wh)
    world.proxy.fail_next(10 ** 6, method="GET", path_contains="/faults/full/")
    try:
        r = rebuild(world.env, "--input", world.dump + "full", "--warehouse", world.wh, "--snapshot-id", "down1",
                    "--quiet", "--conf", "storage.retry_attempts=2", "--conf", "storage.retry_total_seconds=2")
    finally:
        world.proxy.clear()
    assert r.returncode == 1, r.stderr[-3000:]
    lines = message_lines(r.stderr)
    assert len(lines) == 1 and FAILED.match(lines[0]) and "failed in stage preflight" in lines[0], lines
    row = runs(world.wh)["down1"]
    assert row["status"] == "failed" and '"stage": "preflight"' in row["summary"], row
    assert answer(world.wh) == before
    assert _last_run_failed(world.wh)


def test_a_store_down_in_the_decode_tasks_fails_the_run_in_its_stage(world):
    """The dump's reads pass the checks, then fail in the Spark tasks that decode it (the rule set when the decode
    stage begins): the task's StoreUnavailable reaches the driver as Spark's error text, and the run is recorded
    failed in stage decode."""
    before = answer(world.wh)
    p = subprocess.Popen([sys.executable, "-m", "jobs.cli", "rebuild", "--env", "ci", "--input", world.dump + "full",
                          "--warehouse", world.wh, "--snapshot-id", "down2", "--conf", "decode.in_process_max_bytes=0",
                          "--conf", "storage.retry_attempts=2", "--conf", "storage.retry_total_seconds=2"],
                         cwd=ROOT, env=world.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    seen = []
    for line in p.stderr:
        seen.append(line)
        if "] decode:" in line:
            world.proxy.fail_next(10 ** 6, method="GET", path_contains="/faults/full/")
            break
    err = "".join(seen) + p.stderr.read()
    code = p.wait(600)
    world.proxy.clear()
    assert code == 1, err[-3000:]
    lines = message_lines(err)
    assert len(lines) == 1 and FAILED.match(lines[0]) and "failed in stage decode" in lines[0], lines
    assert "Traceback" not in err and "Py4J" not in err
    row = runs(world.wh)["down2"]
    assert row["status"] == "failed" and '"stage": "decode"' in row["summary"], row
    assert "object store unavailable" in row["summary"] and ".log (read)" in row["summary"], row
    assert answer(world.wh) == before
    assert _last_run_failed(world.wh)


def test_a_fault_after_the_commit_is_a_warning_and_the_run_stands(world):
    """Every delete refused once the tables are committed (S3's DELETE, and the POST ?delete of a batch, which
    obstore sends for one key too): the writer lock cannot be given back. The snapshot and its `succeeded` row are
    written, so the run says what is true: served (exit 0), and a `warning:` line."""
    p = subprocess.Popen([sys.executable, "-m", "jobs.cli", "rebuild", "--env", "ci", "--input", world.dump + "full",
                          "--warehouse", world.wh, "--snapshot-id", "late", "--json", *QUICK,
                          "--conf", "storage.retry_attempts=2", "--conf", "storage.retry_total_seconds=2"],
                         cwd=ROOT, env=world.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen = []
    for line in p.stderr:
        seen.append(line)
        if "commit: every table staged" in line:
            world.proxy.fail_next(10 ** 6, method="DELETE")
            world.proxy.fail_next(10 ** 6, method="POST", path_contains="?delete")
            break
    err = "".join(seen) + p.stderr.read()
    out = p.stdout.read()
    code = p.wait(600)
    world.proxy.clear()
    assert code == 0, err[-3000:]
    # the lock not given back; retiring old snapshots too, when the vacuum had files to delete
    lines = message_lines(err)
    assert 1 <= len(lines) <= 2 and all(ln.startswith("warning: ") for ln in lines), lines
    assert lines[-1].startswith("warning: the writer lock ") and "not released" in lines[-1], lines
    assert "object store unavailable" in lines[-1] and "Traceback" not in err
    assert runs(world.wh)["late"]["status"] == "succeeded"
    assert_answer(answer(world.wh), ("late", world.clean["full"]))
    import json

    said = [" ".join(w.split()) for w in json.loads(out.strip().splitlines()[-1])["after_commit"]]
    assert said == [ln[len("warning: "):] for ln in lines]
