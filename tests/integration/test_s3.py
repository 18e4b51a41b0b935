"""The object-storage round trip: a dump in a bucket rebuilt into a warehouse in a bucket, through a local
S3-compatible server (moto), then read back by every reading command, and the answers compared with the same
dump rebuilt from and into local directories.

Every command on the bucket runs as its own process, as a user runs it: Spark's executors and the reading
commands get the endpoint and the credentials from the AWS environment variables only. The reading commands' answers
from the local warehouse, what those are compared with, are taken in this process.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests import logtools

pytestmark = [pytest.mark.integration, pytest.mark.spark]

ROOT = Path(__file__).resolve().parents[2]


def cli(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "jobs.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "PYTHONPATH": str(ROOT)})


def ok(*args: str) -> str:
    r = cli(*args)
    assert r.returncode == 0, f"{args}: exit {r.returncode}\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}"
    return r.stdout


def ok_here(*args: str) -> str:
    """A command's output, run in this process (click's runner): for the local side of a comparison."""
    from click.testing import CliRunner

    from jobs.cli import main

    r = CliRunner().invoke(main, list(args))
    assert r.exit_code == 0, f"{args}: exit {r.exit_code}\n{r.output[-3000:]}"
    return r.stdout


def upload(local: Path, uri: str) -> None:
    import pyarrow.fs as pafs

    from pipelines.io import storage

    loc = storage.location(uri)
    pafs.copy_files(str(local), loc.path, source_filesystem=pafs.LocalFileSystem(), destination_filesystem=loc.fs)


def rebuild(inputs: list[str], warehouse: str, snapshot_id: str, *extra: str, here: bool = False) -> dict:
    """`offsetlake rebuild … --json`'s summary; `here`: run in this process (a local input and warehouse)."""
    out = (ok_here if here else ok)("rebuild", *[a for i in inputs for a in ("--input", i)], "--warehouse", warehouse,
                                    "--snapshot-id", snapshot_id, "--env", "ci", "--json", "--quiet", *extra)
    return json.loads(out.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def story(spark, s3_server, tmp_path_factory):  # spark: the session the local rebuilds run in
    """One dump rebuilt twice, local → local and bucket → bucket: s1 from yesterday's dump, then s2 --incremental
    from today's (the same files, grown)."""
    import pyarrow.fs as pafs

    mp = pytest.MonkeyPatch()
    for k, v in {"AWS_ACCESS_KEY_ID": "offsetlake-test", "AWS_SECRET_ACCESS_KEY": "offsetlake-test-secret",
                 "AWS_REGION": "us-east-1", "AWS_ENDPOINT_URL": s3_server}.items():
        mp.setenv(k, v)
    for k in ("AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3", "AWS_PROFILE", "AWS_DEFAULT_REGION"):
        mp.delenv(k, raising=False)
    try:
        bucket = "offsetlake-roundtrip"
        pafs.S3FileSystem(access_key="offsetlake-test", secret_key="offsetlake-test-secret", region="us-east-1",
                          endpoint_override=s3_server.split("://", 1)[1], scheme="http",
                          allow_bucket_creation=True).create_dir(bucket)
        base = tmp_path_factory.mktemp("s3story")
        full = base / "full"
        # no data-topic segments: from a bucket only the checkpoints are read (README: no lag in time there), and
        # this story holds the answers from the bucket to the local ones
        ok("sample", str(full), "--records", "3000", "--groups", "40", "--partitions", "4", "--seed", "11",
           "--data-segments", "0")
        # yesterday's dump: each partition's log cut at 80 %, at a batch boundary
        logtools.cut_log_dir(full, base / "dump", fraction=0.8)
        local = SimpleNamespace(wh=str(base / "wh"), dump=str(base / "dump"))
        remote = SimpleNamespace(wh=f"s3://{bucket}/wh", dump=f"s3://{bucket}/dump")
        upload(base / "dump", remote.dump)
        for side in (local, remote):
            side.s1 = rebuild([side.dump], side.wh, "s1", here=side is local)
        # today's: the same files grown to the whole log, in place
        shutil.rmtree(base / "dump")
        shutil.copytree(full, base / "dump")
        upload(base / "dump", remote.dump)
        for side in (local, remote):
            side.s2 = rebuild([side.dump], side.wh, "s2", "--incremental", here=side is local)
        yield SimpleNamespace(local=local, remote=remote, bucket=bucket, endpoint=s3_server)
    finally:
        mp.undo()


def test_rebuild_from_a_bucket_into_a_bucket_matches_local(story):
    compared = ("status", "records_in", "records_out", "records_quarantined", "groups", "removed_groups", "offsets",
                "empty_group_offsets", "pending_offsets", "expired_offsets", "expired_groups")
    for run in ("s1", "s2"):
        local, remote = getattr(story.local, run), getattr(story.remote, run)
        assert {k: remote.get(k) for k in compared} == {k: local.get(k) for k in compared}, run
    assert story.remote.s1["status"] == "succeeded" and story.remote.s1["offsets"] > 0
    # the second run read only what was appended, from the bucket as from the local directory
    inc_local, inc_remote = story.local.s2["incremental"], story.remote.s2["incremental"]
    assert inc_remote["mode"] == inc_local["mode"] == "incremental", (inc_local, inc_remote)
    assert (inc_remote["new_bytes"], inc_remote["new_records"]) == (inc_local["new_bytes"], inc_local["new_records"])
    assert inc_remote["new_records"] > 0


def _group(story) -> str:
    out = ok_here("sql", "--warehouse", story.local.wh, "--format", "csv",
             "SELECT group_id FROM loaded_groups WHERE member_count > 0 ORDER BY member_count DESC, group_id LIMIT 1")
    return out.strip().splitlines()[-1]


def test_every_reading_command_answers_the_same_from_the_bucket(story):
    g = _group(story)
    commands = [
        ["describe", g], ["describe", g, "--members"], ["describe", g, "--state"], ["describe", g, "--history"],
        ["describe", "--all-groups"], ["describe", g, "--snapshot", "s1"],
        ["lookup", "--group", g], ["lookup", "--group", g, "--snapshot", "s1"],
        ["diff", "s1", "s2", "--json"],
        ["reset-plan", "--group", g],
        ["sql", "--format", "json", "SELECT group_id, topic, partition, committed_offset FROM loaded_offsets "
                                    "ORDER BY ALL"],
        ["sql", "--format", "csv", "SELECT count(*) AS n, min(record_offset), max(record_offset) FROM offset_commits"],
        ["repair-stats"],  # last: it reads every file's footer, and would commit had the writer got a stat wrong
    ]
    for args in commands:
        want = ok_here(args[0], "--warehouse", story.local.wh, *args[1:])
        got = ok(args[0], "--warehouse", story.remote.wh, *args[1:])
        assert got == want, args
        assert want.strip(), args


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(warehouse: str):
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "jobs.cli", "serve", "--warehouse", warehouse, "--port", str(port)],
                            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2).read()
            return proc, f"http://127.0.0.1:{port}"
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(f"serve did not start: {proc.stderr.read()[-2000:]}")
            time.sleep(0.2)


def _get(url: str) -> str:
    return urllib.request.urlopen(url, timeout=30).read().decode()


# When each run started and finished, how long it took, what it read from and when it saw the end offsets (the
# files' times): the two rebuilds ran at different
# times from different places, everything else must agree.
_WHEN_AND_WHERE = {"started_at", "finished_at", "summary", "inputs", "seconds", "observed_at"}


def _same_story(value):
    if isinstance(value, str) and value.startswith("{"):
        value = json.loads(value)  # a runs column holding JSON text (validation)
    if isinstance(value, dict):
        return {k: _same_story(v) for k, v in value.items() if k not in _WHEN_AND_WHERE}
    if isinstance(value, list):
        return [_same_story(v) for v in value]
    return value


def _differences(a, b, at: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b)) for d in _differences(a.get(k), b.get(k), f"{at}.{k}")]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in _differences(x, y, f"{at}[{i}]")]
    return [] if a == b else [f"{at}: {str(a)[:200]} != {str(b)[:200]}"]


def _metric_samples(text: str) -> dict:
    from prometheus_client.parser import text_string_to_metric_families

    def timing(name: str) -> bool:
        return any(t in name for t in ("_age_seconds", "_duration_seconds", "finished_timestamp", "started_timestamp"))

    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples if not timing(s.name)}


def test_serve_answers_the_same_from_the_bucket(story):
    g = _group(story)
    servers = [_serve(story.local.wh), _serve(story.remote.wh)]
    try:
        (_, local), (_, remote) = servers
        for route in ("/snapshots", "/groups?limit=50", f"/groups/{g}", f"/groups/{g}/offsets"):
            got, want = _same_story(json.loads(_get(remote + route))), _same_story(json.loads(_get(local + route)))
            assert _differences(got, want) == [], route
        remote_metrics = _metric_samples(_get(remote + "/metrics"))
        assert remote_metrics == _metric_samples(_get(local + "/metrics"))
        assert remote_metrics[("offsetlake_snapshot_served", ())] == 1
        assert {dict(labels)["snapshot_id"] for name, labels in remote_metrics if name == "offsetlake_snapshot_info"} == {"s2"}
    finally:
        for proc, _ in servers:
            proc.terminate()
            proc.wait(timeout=30)


@pytest.mark.parametrize("where", ["s3://no-such-bucket-offsetlake/wh", "BUCKET/empty"])
def test_a_warehouse_uri_that_holds_nothing_is_one_line_and_exit_2(story, where):
    where = where.replace("BUCKET", f"s3://{story.bucket}")
    for args in (["describe", "--all-groups"], ["lookup", "--group", "g"], ["sql", "SELECT 1 FROM runs"]):
        r = cli(args[0], "--warehouse", where, *args[1:])
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
        assert len(lines) == 1 and where in lines[0] and "Traceback" not in r.stderr, (args, r.stderr)


def test_an_input_uri_that_holds_nothing_is_one_line_and_exit_2(story, tmp_path):
    for where in ("s3://no-such-bucket-offsetlake/dump", f"s3://{story.bucket}/nothing-here"):
        r = cli("rebuild", "--input", where, "--warehouse", str(tmp_path / "wh"), "--env", "ci", "--quiet")
        assert r.returncode == 2, (where, r.stdout, r.stderr[-2000:])
        lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
        assert len(lines) == 1 and where in lines[0] and "Traceback" not in r.stderr, (where, r.stderr)


def _tabular_dump(segments_dir: str, out: Path) -> Path:
    """The sample's records as a Parquet dump with batch facts (as a Spark job over the topic would write it, two
    part files), for the tabular reader."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from pipelines.decoding.segments import read_log
    from schemas.records import ReadProblem

    rows = [{"key": r.key, "value": r.value, "topic": "__consumer_offsets", "partition": r.offsets_partition,
             "offset": r.offset, "timestamp": r.timestamp, "timestampType": 0,
             "producer_id": r.batch.producer_id, "producer_epoch": r.batch.producer_epoch,
             "is_transactional": r.batch.is_transactional, "is_control": r.batch.is_control,
             "batch_base_offset": r.batch.base_offset}
            for r in read_log(segments_dir) if not isinstance(r, ReadProblem)]
    out.mkdir(parents=True)
    half = len(rows) // 2
    for i, part in enumerate((rows[:half], rows[half:])):
        pq.write_table(pa.Table.from_pylist(part), out / f"part-0000{i}.parquet")
    return out


def test_a_tabular_dump_and_decode_read_from_a_bucket_as_from_disk(spark, story, tmp_path):
    dump = _tabular_dump(story.local.dump, tmp_path / "tabular")
    upload(dump, f"s3://{story.bucket}/tabular")
    # a tabular dump does not say how many partitions the topic has: the sample's four
    local = rebuild([str(dump)], str(tmp_path / "wh-tab"), "t1", "--num-partitions", "4", here=True)
    remote = rebuild([f"s3://{story.bucket}/tabular"], str(tmp_path / "wh-tab-s3"), "t1", "--num-partitions", "4")
    assert local["records_in"] == remote["records_in"] > 0 and local["offsets"] == remote["offsets"] > 0
    query = "SELECT group_id, topic, partition, committed_offset FROM loaded_offsets ORDER BY ALL"
    assert ok("sql", "--warehouse", str(tmp_path / "wh-tab-s3"), "--format", "csv", query) == ok_here(
        "sql", "--warehouse", str(tmp_path / "wh-tab"), "--format", "csv", query)
    # decode prints every record of the segments, each line naming its file
    want = ok_here("decode", story.local.dump).replace(story.local.dump, "<dump>")
    got = ok("decode", story.remote.dump).replace(story.remote.dump, "<dump>")
    assert got == want and want.count("\n") > 1000


def test_a_warehouse_bucket_that_does_not_exist_stops_the_rebuild_before_spark(story):
    where = "s3://no-such-bucket-offsetlake/wh"
    r = cli("rebuild", "--input", story.local.dump, "--warehouse", where, "--env", "ci", "--quiet")
    assert r.returncode == 2, (r.stdout, r.stderr[-2000:])
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and where in lines[0] and "Traceback" not in r.stderr, r.stderr


def test_the_shards_tasks_write_and_hand_on_their_files_in_a_bucket(story, tmp_path):
    """The shards' route with its warehouse in a bucket: the tasks write the history's files, the saved shards and
    the group events' scratch files there, the write reads them back; the tables equal the local run's, and the run
    leaves no scratch file behind."""
    import pyarrow.fs as pafs

    from pipelines.io import storage

    on_tasks = ("--conf", "decode.in_process_max_bytes=0", "--conf", "rebuild.local_replay_max_rows=0",
                "--conf", "decode.split_bytes=20000",  # one partition at least read in ranges, loaded in buckets
                "--semantics", "modern", "--kafka-version", "4.0")  # the sample's KIP-848 groups replayed too
    remote_wh = f"s3://{story.bucket}/wh-shards"
    got = rebuild([story.remote.dump], remote_wh, "k1", *on_tasks)
    want = rebuild([story.local.dump], str(tmp_path / "wh-shards"), "k1", *on_tasks, here=True)
    assert got["status"] == want["status"] == "succeeded" and got.get("task_cpu_seconds", {}).get("load") is not None
    for query in ("SELECT * EXCLUDE (snapshot_id) FROM group_history ORDER BY ALL",
                  "SELECT * FROM offset_commits ORDER BY ALL"):
        remote = ok("sql", "--warehouse", remote_wh, "--format", "csv", query)
        assert remote == ok_here("sql", "--warehouse", str(tmp_path / "wh-shards"), "--format", "csv", query)
        assert remote.count("\n") > 100, query
    scratch = storage.location(remote_wh).join("_scratch")
    assert not [i for i in scratch.listdir(recursive=True) if i.type == pafs.FileType.File]
