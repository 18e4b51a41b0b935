"""The README's spark-submit recipes run as written — locally, and on a real standalone cluster with the
executors' Python shipped as a packed venv — plus spark-submit's answer to bad input."""
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.integration.cluster import StandaloneCluster, spark_bin

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.integration
# The sample is small enough to decode and replay in the driver process; both runs decode and replay on Spark
# instead (one task per offsets partition), so the cluster run's tasks run in the executors' Python from the
# shipped archive.
ON_SPARK = "--conf rebuild.local_replay_max_rows=0 --conf decode.in_process_max_bytes=0"


@pytest.fixture(scope="module")
def sample_dump(tmp_path_factory):
    from simulator import generate_sample

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


def snapshot_state(warehouse: Path | str, snapshot_id: str, dump: Path | str | None = None) -> dict:
    """Every snapshot table as sorted rows, read with delta-rs (independent of Spark); `dump`, the input the rows
    name as their source, is written `<dump>`."""
    from deltalake import DeltaTable

    from pipelines.io.storage import storage_options

    out = {}
    for table in ("loaded_offsets", "empty_group_offsets", "loaded_groups", "group_members", "removed_groups",
                  "pending_offsets", "expired_offsets", "expired_groups", "quarantine"):
        uri = f"{warehouse}/{table}"
        rows = DeltaTable(uri, storage_options=storage_options(uri)).to_pyarrow_table(
            partitions=[("snapshot_id", "=", snapshot_id)]).to_pylist()
        for r in rows:
            r.pop("snapshot_id", None)
        text = [json.dumps(r, sort_keys=True, default=str) for r in rows]
        out[table] = sorted(t.replace(str(dump), "<dump>") if dump else t for t in text)
    return out


def readme_commands() -> dict[str, str]:
    """The README's spark-submit block, one entry per command (continuation lines joined): `local`, `pack`,
    `cluster`, as a reader would copy them."""
    text = (ROOT / "README.md").read_text()
    block = text.split("## spark-submit", 1)[1].split("```", 2)[1]
    commands = [c.strip() for c in re.sub(r"\\\n\s*", " ", block).splitlines()]
    commands = [c.split("  #", 1)[0].strip() for c in commands if c and not c.startswith("#")]
    out = {"local": [c for c in commands if "spark-submit --master 'local" in c],
           "pack": [c for c in commands if c.startswith("make pack")],
           "cluster": [c for c in commands if "--archives" in c]}
    assert all(len(v) == 1 for v in out.values()), f"README's spark-submit block changed shape: {commands}"
    return {k: v[0] for k, v in out.items()}


def fill_in(command: str, *, dump: Path, warehouse: Path, master: str = "") -> str:
    """The README's placeholders replaced by this test's dump, warehouse and master. A checkout without its own
    .venv (a worktree sharing another venv) runs the venv of this interpreter instead."""
    command = (command.replace("/dumps/2026-11-21", shlex.quote(str(dump)))
               .replace("/data/offsetlake", shlex.quote(str(warehouse))))
    if master:
        command = command.replace("spark://master:7077", master)
    if not (ROOT / ".venv" / "bin" / "python").exists():
        command = command.replace(".venv/bin/", f"{Path(sys.executable).parent}/")
    return command


def clean_env() -> dict[str, str]:
    """A shell as a fresh clone has it: no venv activated, nothing pointing at Spark or at the checkout."""
    venv_bin = str(Path(sys.executable).parent)
    env = {k: v for k, v in os.environ.items()
           if k not in ("VIRTUAL_ENV", "SPARK_HOME", "PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p != venv_bin)
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    return env


def run_shell(command: str, env: dict[str, str] | None = None, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", command], cwd=ROOT, env={**clean_env(), **(env or {})}, capture_output=True,
                          text=True, **kw)


def python_workers(under: Path) -> dict[int, dict]:
    """Every pyspark.daemon process (the executors' Python workers) whose working directory lies under `under`:
    its argv[0] and the files it has mapped (shared libraries: pyarrow's, the _fastdecode extension)."""
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if not os.readlink(f"/proc/{pid}/cwd").startswith(str(under)):
                continue
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            if b"pyspark.daemon" not in argv:
                continue
            maps = {line.split(None, 5)[5] for line in Path(f"/proc/{pid}/maps").read_text().splitlines()
                    if len(line.split(None, 5)) == 6 and line.split(None, 5)[5].startswith("/")}
            found[int(pid)] = {"argv0": argv[0].decode(), "cwd": os.readlink(f"/proc/{pid}/cwd"), "maps": maps}
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue  # gone between listing and reading
    return found


@pytest.fixture(scope="module")
def local_run(sample_dump, tmp_path_factory):
    """The README's local line, as written, from a shell with no venv activated."""
    warehouse = tmp_path_factory.mktemp("local") / "wh"
    cmd = fill_in(readme_commands()["local"], dump=sample_dump, warehouse=warehouse)
    r = run_shell(f"{cmd} --snapshot-id s1 --json {ON_SPARK}", timeout=900)
    assert r.returncode == 0, (cmd, r.stdout[-2000:], r.stderr[-4000:])
    return warehouse, json.loads(r.stdout.strip().splitlines()[-1]), r.stdout + r.stderr


# log4j's pattern (`yy/MM/dd HH:mm:ss LEVEL Logger:`) and Spark's own announcements
SPARK_LOG_LINE = re.compile(r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d (TRACE|DEBUG|INFO|WARN|ERROR) |Using Spark's default log4j")


def test_readme_local_spark_submit_runs_as_written(local_run):
    warehouse, summary, _ = local_run
    assert summary["snapshot_id"] == "s1" and summary["records_in"] > 2500
    assert (warehouse / "loaded_offsets" / "_delta_log").is_dir()


def test_readme_local_spark_submit_is_quiet(local_run):
    """The console carries offsetlake's progress and summary, not Spark's log."""
    _, _, output = local_run
    spark_lines = [line for line in output.splitlines() if SPARK_LOG_LINE.search(line)]
    assert spark_lines == [], spark_lines[:10]
    assert any("decode" in line for line in output.splitlines()), output[-2000:]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A standalone master and worker, started without any AWS variable, so an executor reaches a bucket only
    through what its driver hands it (`spark.executorEnv.*`)."""
    from pipelines.session import S3_ENV

    mp = pytest.MonkeyPatch()
    try:
        for k in (*S3_ENV, "AWS_PROFILE"):
            mp.delenv(k, raising=False)
        with StandaloneCluster(tmp_path_factory.mktemp("cluster")) as c:
            mp.undo()  # the master and worker have their environment; the tests get theirs back
            yield c
    finally:
        mp.undo()


def drop_applications(cluster: StandaloneCluster) -> None:
    """Every application's directory under the worker's (each executor unpacked ~900 MB there)."""
    work = cluster.workdir / "work"
    for app in work.iterdir() if work.is_dir() else ():
        shutil.rmtree(app, ignore_errors=True)


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads the executors' processes from /proc")
def test_readme_cluster_recipe_runs_offsetlake_from_the_packed_venv_between_buckets(
        local_run, sample_dump, tmp_path, s3_server, monkeypatch, make_dist_lock, cluster):
    """`make pack`, then the README's cluster command against a standalone master and worker on loopback, with
    `--input` and `--warehouse` in a bucket (the local moto server). One application (each one's executors unpack
    the ~900 MB archive afresh) shows:
    - the executors' Python workers run ./environment/bin/python from the shipped archive and load pyarrow and the
      C extension from it, nothing from the checkout or the test's venv;
    - the executors, which fetch the segments and write the Parquet files, reach the store through what the driver
      hands them: the master and worker started without any AWS variable (the `cluster` fixture);
    - the snapshot equals local mode's (`local_run`, from the same dump on disk)."""
    import pyarrow.fs as pafs

    from pipelines.session import S3_ENV

    for k in (*S3_ENV, "AWS_PROFILE"):
        monkeypatch.delenv(k, raising=False)
    aws = {"AWS_ACCESS_KEY_ID": "offsetlake-test", "AWS_SECRET_ACCESS_KEY": "offsetlake-test-secret",
           "AWS_REGION": "us-east-1", "AWS_ENDPOINT_URL": s3_server}
    fs = pafs.S3FileSystem(access_key=aws["AWS_ACCESS_KEY_ID"], secret_key=aws["AWS_SECRET_ACCESS_KEY"],
                           region="us-east-1", endpoint_override=s3_server.split("://", 1)[1], scheme="http",
                           allow_bucket_creation=True)
    fs.create_dir("offsetlake-cluster")
    pafs.copy_files(str(sample_dump), "offsetlake-cluster/dump", source_filesystem=pafs.LocalFileSystem(),
                    destination_filesystem=fs)
    dump, warehouse = "s3://offsetlake-cluster/dump", "s3://offsetlake-cluster/wh"
    readme = readme_commands()
    # gzip's fastest level: this archive is unpacked once, by one executor; the files it holds are the same
    with make_dist_lock():  # only the pack writes dist/offsetlake-env.tar.gz; other modules' `make dist` leave it
        pack = run_shell(readme["pack"], env={"PACK_COMPRESS_LEVEL": "1"}, timeout=1200)
    assert pack.returncode == 0, pack.stdout[-2000:] + pack.stderr[-4000:]

    local_wh, local_summary, _ = local_run
    cmd = fill_in(readme["cluster"], dump=dump, warehouse=warehouse, master=cluster.master_url)
    assert "--archives dist/offsetlake-env.tar.gz#environment" in cmd
    work = cluster.workdir / "work"
    proc = subprocess.Popen(["bash", "-c", f"{cmd} --snapshot-id s1 --json --quiet {ON_SPARK}"], cwd=ROOT,
                            env={**clean_env(), **aws}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    workers: dict[int, dict] = {}
    with ThreadPoolExecutor(1) as pool:  # drain the pipes while /proc is watched
        out = pool.submit(proc.communicate, timeout=900)
        while proc.poll() is None:
            workers.update(python_workers(work))
            time.sleep(0.2)
        stdout, stderr = out.result()
    try:
        assert proc.returncode == 0, (cmd, stdout[-2000:], stderr[-4000:])
        summary = json.loads(stdout.strip().splitlines()[-1])
        assert summary["records_in"] == local_summary["records_in"]
        for k, v in aws.items():
            monkeypatch.setenv(k, v)
        assert snapshot_state(warehouse, "s1", dump) == snapshot_state(local_wh, "s1", sample_dump)

        assert workers, "no executor Python worker was seen under the worker's directory"
        envs = {Path(w["cwd"]) / "environment" for w in workers.values()}
        assert all(w["argv0"] == "./environment/bin/python" for w in workers.values()), workers
        mapped = set().union(*(w["maps"] for w in workers.values()))
        assert any("/pyarrow/" in m and any(m.startswith(f"{e}/") for e in envs) for m in mapped), mapped
        assert any("_fastdecode" in m and any(m.startswith(f"{e}/") for e in envs) for m in mapped), mapped
        foreign = [m for m in mapped if m.startswith((str(ROOT) + "/", sys.prefix + "/"))]
        assert not foreign, f"executors loaded files from the checkout or the test's venv: {foreign}"

        # The shipped package runs on its own: its CLI starts and its settings load from its copy of conf/.
        env_dir = next(iter(envs))
        check = subprocess.run(
            [str(env_dir / "bin" / "python"), "-c",
             "import pipelines.config as c; s = c.load_settings(env='prod'); print(c.CONF_DIR, s.section('validation')['policy'])"],
            cwd=tmp_path, env=clean_env(), capture_output=True, text=True)
        assert check.returncode == 0, check.stderr
        assert check.stdout.split() == [str(env_dir / "lib" / "python3.11" / "site-packages" / "pipelines" / "_conf"),
                                        "fail"]
        cli = subprocess.run([str(env_dir / "bin" / "python"), str(env_dir / "bin" / "offsetlake"), "--help"],
                             cwd=tmp_path, env=clean_env(), capture_output=True, text=True)
        assert cli.returncode == 0 and "rebuild" in cli.stdout, cli.stderr
    finally:
        # every executor unpacked ~900 MB; pytest keeps the last runs' tmp dirs
        drop_applications(cluster)


def test_spark_submit_bad_input_exits_2_without_a_stack_trace(tmp_path):
    r = submit(["--input", str(tmp_path / "nope"), "--warehouse", str(tmp_path / "wh")], "local[1]", tmp_path)
    # spark-submit's PythonRunner merges the Python driver's stderr into its own stdout.
    output = r.stdout + r.stderr
    ours = [line for line in output.splitlines() if " INFO " not in line and " WARN " not in line]
    assert r.returncode == 2, ours
    assert any(line.startswith("error: input ") and "no such file or directory" in line for line in ours), ours
    assert "Traceback" not in output


def readme_memory_flags() -> dict[str, str]:
    """The JVM and Python sizes the README's cluster recipe gives spark-submit, as `{flag or conf: value}`."""
    words = shlex.split(readme_commands()["cluster"])
    flags = {w: words[i + 1] for i, w in enumerate(words) if w in ("--driver-memory", "--executor-memory")}
    flags.update(words[i + 1].split("=", 1) for i, w in enumerate(words) if w == "--conf")
    return flags


def executor_jvms(under: Path) -> dict[int, str]:
    """Every executor JVM (`CoarseGrainedExecutorBackend`) whose working directory lies under `under`: its
    command line."""
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            if b"org.apache.spark.executor.CoarseGrainedExecutorBackend" in argv and \
                    os.readlink(f"/proc/{pid}/cwd").startswith(str(under)):
                found[int(pid)] = " ".join(a.decode() for a in argv)
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    return found


def rss_mb(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) // 1024
    except (FileNotFoundError, ProcessLookupError):
        pass
    return 0


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads the executors' processes from /proc")
def test_a_hot_partition_rebuilds_on_a_cluster_with_the_readmes_one_gigabyte_executor(cluster, tmp_path):
    """The README's cluster recipe sizes the JVMs from its "Memory" paragraph: an executor heap of 1 GB, whatever the
    log. A hot partition (one uncompacted offsets partition, split into ranges whose kept rows are loaded by other
    tasks) rebuilds on a standalone cluster with exactly those sizes; the executor's JVM is started with that heap
    and its process stays within 1.5 GB; the snapshot equals a local run's."""
    from simulator import generate_sample

    flags = readme_memory_flags()
    assert flags.get("--executor-memory") == "1g" and "--driver-memory" in flags, flags
    assert "spark.executor.pyspark.memory" in flags, flags
    dump = tmp_path / "hot"
    generate_sample(dump, records=600_000, groups=60, partitions=1, seed=5, shape="cleaner-died")
    split = "--conf decode.split_bytes=8388608"  # about six ranges of the ~50 MB partition
    local = run_shell(f"{Path(sys.executable).parent}/offsetlake rebuild --input {dump} --warehouse {tmp_path / 'local'}"
                      f" --snapshot-id s1 --json --quiet --env ci", timeout=900)
    assert local.returncode == 0, local.stderr[-3000:]

    sizes = [a for k, v in flags.items() for a in ((k, v) if k.startswith("--") else ("--conf", f"{k}={v}"))]
    work = cluster.workdir / "work"
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
               SPARK_LOCAL_IP="127.0.0.1", OFFSETLAKE_ENV="ci")
    cmd = [spark_bin("spark-submit"), "--master", cluster.master_url, "--conf", "spark.ui.enabled=false",
           "--conf", f"spark.executorEnv.PYSPARK_PYTHON={sys.executable}", *sizes,
           str(ROOT / "jobs" / "rebuild_job.py"), "--input", str(dump), "--warehouse", str(tmp_path / "wh"),
           "--snapshot-id", "s1", "--json", "--quiet", *shlex.split(ON_SPARK), *shlex.split(split)]
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    jvms: dict[int, str] = {}
    peak = 0
    try:
        with ThreadPoolExecutor(1) as pool:
            out = pool.submit(proc.communicate, timeout=900)
            while proc.poll() is None:
                jvms.update(executor_jvms(work))
                peak = max([peak, *(rss_mb(p) for p in jvms)])
                time.sleep(0.2)
            stdout, stderr = out.result()
        assert proc.returncode == 0, (stdout[-2000:], stderr[-4000:])
        summary = json.loads(stdout.strip().splitlines()[-1])
        assert summary["records_in"] == json.loads(local.stdout.strip().splitlines()[-1])["records_in"]
        assert jvms and all(re.search(r"-Xmx1024[mM] ", argv) for argv in jvms.values()), jvms
        assert 0 < peak <= 1536, f"the executor JVM peaked at {peak} MB resident"
        assert snapshot_state(tmp_path / "wh", "s1", dump) == snapshot_state(tmp_path / "local", "s1", dump)
    finally:
        drop_applications(cluster)
