"""`spark-submit jobs/rebuild_job.py` — pyspark's own spark-submit, locally and on a real standalone cluster."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.cluster import StandaloneCluster, spark_bin

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.integration]


@pytest.fixture(scope="module")
def sample_dump(tmp_path_factory):
    from pipelines.sample import generate_sample

    out = tmp_path_factory.mktemp("sample") / "dump"
    generate_sample(out, records=3000, groups=40, partitions=4, seed=11, segment_bytes=64 * 1024)
    return out


def submit(args: list[str], master: str, tmp: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
               SPARK_LOCAL_IP="127.0.0.1", OFFSETLAKE_ENV="ci")
    cmd = [spark_bin("spark-submit"), "--master", master, "--conf", "spark.ui.enabled=false",
           "--conf", f"spark.executorEnv.PYSPARK_PYTHON={sys.executable}",
           str(ROOT / "jobs" / "rebuild_job.py"), *args]
    return subprocess.run(cmd, cwd=tmp, env=env, capture_output=True, text=True, timeout=900)


def snapshot_state(warehouse: Path, snapshot_id: str) -> dict:
    """Every snapshot table as sorted rows, read with delta-rs (independent of Spark)."""
    from deltalake import DeltaTable

    out = {}
    for table in ("loaded_offsets", "empty_group_offsets", "loaded_groups", "group_members", "removed_groups",
                  "pending_offsets", "expired_offsets", "expired_groups", "quarantine"):
        rows = DeltaTable(str(warehouse / table)).to_pyarrow_table(
            partitions=[("snapshot_id", "=", snapshot_id)]).to_pylist()
        for r in rows:
            r.pop("snapshot_id", None)
        out[table] = sorted(json.dumps(r, sort_keys=True, default=str) for r in rows)
    return out


def test_spark_submit_local_and_standalone_cluster_give_the_same_snapshot(sample_dump, tmp_path):
    common = ["--input", str(sample_dump), "--json", "--quiet", "--semantics", "modern"]
    local = submit([*common, "--warehouse", str(tmp_path / "wh_local"), "--snapshot-id", "s1"], "local[2]", tmp_path)
    assert local.returncode == 0, local.stderr[-4000:]
    local_summary = json.loads(local.stdout.strip().splitlines()[-1])
    assert local_summary["snapshot_id"] == "s1" and local_summary["records_in"] > 2500

    with StandaloneCluster(tmp_path / "cluster") as cluster:
        remote = submit([*common, "--warehouse", str(tmp_path / "wh_cluster"), "--snapshot-id", "s1"],
                        cluster.master_url, tmp_path)
    assert remote.returncode == 0, remote.stderr[-4000:]
    remote_summary = json.loads(remote.stdout.strip().splitlines()[-1])
    assert remote_summary["records_in"] == local_summary["records_in"]
    assert snapshot_state(tmp_path / "wh_cluster", "s1") == snapshot_state(tmp_path / "wh_local", "s1")
    # The application really ran on the cluster's executors, not in local mode.
    assert "app-" in (tmp_path / "cluster" / "worker.log").read_text(errors="replace")


def test_spark_submit_bad_input_exits_2_without_a_stack_trace(tmp_path):
    r = submit(["--input", str(tmp_path / "nope"), "--warehouse", str(tmp_path / "wh")], "local[1]", tmp_path)
    # spark-submit's PythonRunner merges the Python driver's stderr into its own stdout.
    output = r.stdout + r.stderr
    ours = [line for line in output.splitlines() if " INFO " not in line and " WARN " not in line]
    assert r.returncode == 2, ours
    assert any(line.startswith("error: input ") and "no such file or directory" in line for line in ours), ours
    assert "Traceback" not in output
