"""Bad usage of `offsetlake rebuild`, each as the attack that found it answered late (18-50 s, after the JVM started)
or not at all: now exit 2 with one line, before Spark starts. Each case runs the real CLI in a subprocess and
asserts the wall time generously (< 15 s; a JVM start alone is more); the real figures are printed (`-s`).

Unreadable inputs cannot be made with chmod when the tests run as root (root reads anything): those cases patch
`os.access` — the check the run itself makes — in-process, through click's runner.
"""
from __future__ import annotations

import gzip
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests import badinputs as bi

ROOT = Path(__file__).resolve().parent.parent
LIMIT_S = 15.0


def rebuild(*args: str, env_extra: dict | None = None, wrap: list[str] | None = None, timeout: float = 300):
    env = {**os.environ, "PYTHONPATH": str(ROOT), **(env_extra or {})}
    # the test's own --env, where it gives one: a second would be refused as given twice (jobs/params.OneValueEach)
    env_option = [] if "--env" in args else ["--env", "ci"]
    cmd = [*(wrap or []), sys.executable, "-m", "jobs.cli", "rebuild", *env_option, "--quiet", *args]
    t0 = time.monotonic()
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    took = time.monotonic() - t0
    print(f"\n{took:5.2f} s  exit {p.returncode}  {p.stderr.strip()[:160]}")
    return p, took


def assert_usage_error(p, took, *needles: str):
    assert p.returncode == 2, (p.returncode, p.stderr[-2000:])
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), p.stderr[-2000:]
    for n in needles:
        assert n in lines[0], lines[0]
    assert "Traceback" not in p.stderr + p.stdout
    assert took < LIMIT_S, took


@pytest.fixture
def good(tmp_path) -> Path:
    return bi.clean_small(tmp_path / "in")[0]


@pytest.fixture(scope="module")
def scheduled_run(tmp_path_factory) -> tuple[Path, Path]:
    """`clean_small`'s log and a warehouse holding its scheduled run `n1`, made once: the tests that damage such a
    warehouse or run over it take a copy each (`served_copy`) instead of a rebuild each."""
    root = tmp_path_factory.mktemp("scheduled")
    good = bi.clean_small(root / "in")[0]
    p, _ = rebuild("--input", str(good), "--warehouse", str(root / "wh"), "--snapshot-id", "n1")
    assert p.returncode == 0, p.stderr[-2000:]
    return good, root / "wh"


@pytest.fixture
def served_copy(scheduled_run, tmp_path) -> tuple[Path, Path]:
    """(the log, this test's own copy of the warehouse serving its run `n1`)."""
    good, wh = scheduled_run
    shutil.copytree(wh, tmp_path / "wh", symlinks=True)
    return good, tmp_path / "wh"


@pytest.mark.parametrize("extra, needles", [
    (["--as-of", "garbage"], ["--as-of", "'garbage' is not an ISO-8601 time"]),
    (["--until-time", "yesterday"], ["--until-time", "'yesterday'"]),
    (["--retention-minutes", "-5"], ["--retention-minutes must be at least 1"]),
    # it was parsed only when the expiry's options were made: a stack trace
    (["--kafka-version", "x.y"], ["--kafka-version: kafka_version 'x.y' is not of the form MAJOR.MINOR[.PATCH]"]),
    (["--conf", "rebuild.kafka_version=latest"], ["rebuild.kafka_version: kafka_version 'latest' is not of the form"]),
    (["--until-offset", "-1"], ["--until-offset must be 0 or more"]),
    # an offset is a long: past it the cut reached the tally's Arrow kernel as a Python int (a stack trace)
    (["--until-offset", "9223372036854775808"], ["--until-offset must be 0 to 9223372036854775807"]),
    (["--num-partitions", "0"], ["--num-partitions must be 1 to 2147483647"]),
    (["--num-partitions", "2147483648"], ["--num-partitions must be 1 to 2147483647, not 2147483648"]),
    (["--snapshot-id", "../evil"], ["--snapshot-id", "invalid snapshot id '../evil'"]),
    (["--snapshot-id", "a" * 200], ["invalid snapshot id"]),
    # a trailing newline passed the check (`$` matches before it): the run wrote partition dirs whose paths delta-rs
    # refuses to read, so retiring old snapshots failed in every later run on that warehouse
    (["--snapshot-id", "snap\n"], ["--snapshot-id", "invalid snapshot id 'snap\\n'"]),
    # an unset variable (`--snapshot-id "$ID"`): each rerun wrote a new snapshot instead of replacing its own
    (["--snapshot-id", ""], ["--snapshot-id", "invalid snapshot id ''"]),
    # the same of a TIME, a version and an environment: read as not given, a run of the whole log (`--until-time`),
    # as of its newest record, as the default version, or with another environment's settings (`--env`)
    (["--until-time", ""], ["--until-time: '' is not an ISO-8601 time"]),
    (["--as-of", ""], ["--as-of: '' is not an ISO-8601 time"]),
    (["--kafka-version", ""], ["--kafka-version: kafka_version '' is not of the form MAJOR.MINOR[.PATCH]"]),
    (["--env", ""], ["the environment is empty (an unset variable?)"]),
    (["--conf", "rebuild.semantix=modern"], ["unknown setting rebuild.semantix", "did you mean rebuild.semantics?"]),
    (["--conf", "warehouse.keep_snapshot=3"], ["did you mean warehouse.keep_snapshots?"]),
    # read before the run: a typo here failed every run's retirement of old snapshots, once its own was committed
    (["--conf", "warehouse.keep_snapshots=abc"], ["warehouse.keep_snapshots must be a whole number, not 'abc'"]),
    (["--conf", "rebuild.num_offsets_partitions=-3"], ["rebuild.num_offsets_partitions must be 0 or more, not -3"]),
    (["--conf", "rebuild.num_offsets_partitions=2147483648"], ["must be at most 2147483647"]),
    # NaN passes every `< 0` check: a lock wait, a retry's sleep or the suites' bound failed on it mid-run
    (["--conf", "validation.timestamp_skew_minutes=nan"], ["validation.timestamp_skew_minutes must be 0 to"]),
    (["--conf", "validation.timestamp_skew_minutes=1e15"], ["(ten years), not 1000000000000000.0"]),
    (["--conf", "warehouse.lock_wait_seconds=nan"], ["both finite"]),
    (["--conf", "storage.retry_first_backoff_seconds=nan"], ["must be a finite number more than 0"]),
    (["--conf", "validation.pandas_max_rows=1.5"], ["validation.pandas_max_rows must be a whole number, got 1.5"]),
    (["--conf", "rebuld.semantics=modern"], ["unknown settings section 'rebuld'", "did you mean rebuild?"]),
    (["--conf", "validation.policy=ignore"], ["validation.policy must be one of fail, warn"]),
    (["--conf", "warehouse.lock_wait_seconds=-1"], ["warehouse.lock_wait_seconds must be >= 0"]),
])
def test_bad_option_exits_2_before_spark(good, tmp_path, extra, needles):
    p, took = rebuild("--input", str(good), "--warehouse", str(tmp_path / "wh"), *extra)
    assert_usage_error(p, took, *needles)
    assert not (tmp_path / "wh").exists()  # refused before anything was written


def test_spark_settings_pass_through_the_key_check():
    from jobs.rebuild_common import parse_overrides
    from pipelines.config import load_settings

    s = load_settings(env="ci", overrides=parse_overrides(["spark.sql.shuffle.partitions=3", "spark.foo.bar=x"]))
    assert s.spark_conf["spark.sql.shuffle.partitions"] == "3" and s.spark_conf["spark.foo.bar"] == "x"


@pytest.mark.parametrize("version, conf, cli, minutes", [
    (None, None, None, 10080), ("2.0", None, None, 10080), ("1.1", None, None, 1440), ("0.11.0.3", None, None, 1440),
    ("1.1", 2880, None, 2880), ("1.1", None, 60, 60), ("3.9", 720, 60, 60)])
def test_retention_defaults_to_the_emulated_brokers(version, conf, cli, minutes):
    """offsets.retention.minutes was 1 day until Kafka 2.0 made it 7 (KIP-186): a run emulating an older broker
    with nothing setting retention expires offsets after its day, not after 7 (it took 10080 whatever the version);
    a setting or --retention-minutes still wins."""
    from jobs.rebuild_common import parse_overrides
    from pipelines.config import load_settings
    from pipelines.rebuild import RebuildRequest, resolve_settings

    overrides = [f"rebuild.retention_minutes={conf}"] if conf is not None else []
    settings = load_settings(env="ci", overrides=parse_overrides(overrides))
    req = RebuildRequest(inputs=("x",), warehouse="wh", kafka_version=version, retention_minutes=cli)
    assert resolve_settings(settings, req).retention_minutes == minutes


@pytest.mark.parametrize("semantics, version, conf, emulated", [
    (None, None, None, "3.9"), ("legacy", None, None, "3.9"), ("modern", None, None, "4.0"),
    ("modern", "3.9", None, "3.9"), ("modern", None, "4.1", "4.1"), ("legacy", "2.8", "4.1", "2.8")])
def test_a_modern_run_emulates_the_first_broker_whose_default_is_the_new_coordinator(semantics, version, conf,
                                                                                      emulated):
    """Nothing naming a broker, a legacy run emulates 3.9 (the classic coordinator's last default) and a modern one
    4.0 (the new one's first): on 3.9, a modern run of a 4.x log skipped records its broker loads. A setting or
    --kafka-version wins."""
    from jobs.rebuild_common import parse_overrides
    from pipelines.config import load_settings
    from pipelines.rebuild import RebuildRequest, resolve_settings

    settings = load_settings(env="ci", overrides=parse_overrides([f"rebuild.kafka_version={conf}"] if conf else []))
    req = RebuildRequest(inputs=("x",), warehouse="wh", semantics=semantics, kafka_version=version)
    assert resolve_settings(settings, req).kafka_version == emulated


def test_unknown_key_in_an_env_overlay_exits_2(good, tmp_path):
    conf = tmp_path / "conf"
    shutil.copytree(ROOT / "conf", conf)
    (conf / "ci" / "offsetlake.yml").write_text("rebuild:\n  retention_minuts: 5\n")
    p, took = rebuild("--input", str(good), "--warehouse", str(tmp_path / "wh"),
                      env_extra={"OFFSETLAKE_CONF_DIR": str(conf)})
    assert_usage_error(p, took, "ci/offsetlake.yml: unknown setting rebuild.retention_minuts",
                       "did you mean rebuild.retention_minutes?")


def test_missing_input_exits_2(tmp_path):
    p, took = rebuild("--input", str(tmp_path / "nope"), "--warehouse", str(tmp_path / "wh"))
    assert_usage_error(p, took, "no such file or directory", str(tmp_path / "nope"))


def test_empty_dir_exits_2(tmp_path):
    (tmp_path / "in").mkdir()
    p, took = rebuild("--input", str(tmp_path / "in"), "--warehouse", str(tmp_path / "wh"))
    assert_usage_error(p, took, "no __consumer_offsets data found")


@pytest.mark.parametrize("name, content", [("d.json", b""), ("d.csv", b"key,value,partition,offset\n"),
                                           ("d.json.gz", gzip.compress(b"", mtime=0))],
                         ids=["json", "csv-header", "json-gz"])
def test_a_dump_without_rows_exits_2(tmp_path, name, content):
    """An export that wrote nothing (no line, a CSV header alone) gave a `succeeded` snapshot without a group, which
    became the served one; as only empty segments do, it is now refused."""
    f = tmp_path / name
    f.write_bytes(content)
    p, took = rebuild("--input", str(f), "--warehouse", str(tmp_path / "wh"))
    assert_usage_error(p, took, "no __consumer_offsets data found", "the dump holds no rows")


@pytest.mark.parametrize("name", ["notes.log", "00000000000000000000.log", "notes.txt"])
def test_plain_text_file_exits_2(tmp_path, name):
    """A text file is not a log: before, `notes.log` gave a `succeeded` empty snapshot that became the served one."""
    f = tmp_path / name
    f.write_text("hello, this is a plain text file\nand not a Kafka log segment at all\n" * 20)
    p, took = rebuild("--input", str(f), "--warehouse", str(tmp_path / "wh"))
    assert_usage_error(p, took, "no __consumer_offsets data found")


def test_plain_text_partition_dir_exits_2(tmp_path):
    d = tmp_path / "logs" / "__consumer_offsets-3"
    d.mkdir(parents=True)
    (d / "00000000000000000000.log").write_text("not a segment\n" * 50)
    p, took = rebuild("--input", str(tmp_path / "logs"), "--warehouse", str(tmp_path / "wh"))
    assert_usage_error(p, took, "none of the 1 .log file(s) starts with a Kafka log entry")


def test_text_csv_exits_2(tmp_path):
    f = tmp_path / "dump.csv"
    f.write_text("hello,world\n1,2\n")
    p, took = rebuild("--input", str(f), "--warehouse", str(tmp_path / "wh"))
    assert_usage_error(p, took, "cannot read input", "lacks column(s)")


def test_warehouse_inside_the_input_log_dir_exits_2(good):
    p, took = rebuild("--input", str(good), "--warehouse", str(good / "warehouse"))
    assert_usage_error(p, took, "is inside the input")
    assert not (good / "warehouse").exists()


def test_input_inside_the_warehouse_exits_2(tmp_path):
    wh = tmp_path / "wh"
    src = bi.clean_small(wh / "dump")[0]
    p, took = rebuild("--input", str(src), "--warehouse", str(wh))
    assert_usage_error(p, took, "is inside the warehouse")


def test_warehouse_that_is_a_file_exits_2(good, tmp_path):
    (tmp_path / "wh").write_text("x")
    p, took = rebuild("--input", str(good), "--warehouse", str(tmp_path / "wh"))
    assert_usage_error(p, took, "is a file")  # click's own check, one line like the run's


@pytest.mark.parametrize("name", ["runs", "quarantine", "_reports", "_checkpoints", "_state"])
def test_a_file_where_the_warehouse_has_a_directory_exits_2(good, tmp_path, name):
    """A file in the place of one of the warehouse's directories: before, the run went on to fail at its write or
    its checkpoint with a traceback (and, for `runs`, no record of the run)."""
    (tmp_path / "wh").mkdir()
    (tmp_path / "wh" / name).write_text("x")
    p, took = rebuild("--input", str(good), "--warehouse", str(tmp_path / "wh"))
    assert_usage_error(p, took, f"{tmp_path / 'wh' / name} is a file, not a directory")


@pytest.mark.parametrize("name", ["_reports/s.html", "_reports/s.json", "_checkpoints/s.json", "_cluster.json"])
def test_a_directory_where_the_run_writes_a_file_exits_2(good, tmp_path, name):
    """A directory in the place of a file the run of that id writes (its report, its checkpoint, the cluster
    record): before, the run went on to fail at its write with a traceback (IsADirectoryError)."""
    (tmp_path / "wh" / name).mkdir(parents=True)
    p, took = rebuild("--input", str(good), "--warehouse", str(tmp_path / "wh"), "--snapshot-id", "s")
    assert_usage_error(p, took, f"{tmp_path / 'wh' / name} is a directory, not a file")


def test_a_what_if_run_under_a_scheduled_snapshots_id_exits_2(served_copy):
    """`--as-of` (or `--until-*`) under the id of a scheduled snapshot replaced it with a what-if one: the page and
    API went back to the scheduled snapshot before it, and the run said "the default snapshot and the incremental
    chain stay on the scheduled runs". Now refused, the snapshot served as it was; a what-if id may be run again."""
    from pipelines.io.warehouse import Warehouse

    good, wh = served_copy
    p, _ = rebuild("--input", str(good), "--warehouse", str(wh), "--snapshot-id", "n2")
    assert p.returncode == 0, p.stderr[-2000:]
    for cut in (["--as-of", "now"], ["--until-offset", "3"], ["--until-time", "2026-11-01T00:00:00Z"]):
        p, took = rebuild("--input", str(good), "--warehouse", str(wh), "--snapshot-id", "n2", *cut)
        assert_usage_error(p, took, "--snapshot-id n2 is a scheduled snapshot of this warehouse")
    assert Warehouse(wh).latest_snapshot_id() == "n2"
    for _ in range(2):
        p, _ = rebuild("--input", str(good), "--warehouse", str(wh), "--snapshot-id", "then", "--as-of", "now")
        assert p.returncode == 0, p.stderr[-2000:]
    assert Warehouse(wh).latest_snapshot_id() == "n2"


def test_a_damaged_runs_table_exits_2_before_any_work(served_copy):
    """The `runs` table's last commit damaged: the run decoded and replayed, failed, then failed to record its
    failure in that table too, a traceback (DamagedTable). Now refused before Spark starts, naming the table."""
    good, wh = served_copy
    sorted((wh / "runs" / "_delta_log").glob("*.json"))[-1].write_text("garbage")
    for extra in ([], ["--as-of", "now"]):
        p, took = rebuild("--input", str(good), "--warehouse", str(wh), "--snapshot-id", "n2", *extra)
        assert_usage_error(p, took, "cannot read its runs table", "write to another --warehouse")



@pytest.mark.parametrize("table", ["offset_commits", "loaded_offsets"])
def test_a_damaged_table_exits_2_before_any_work(served_copy, table):
    """Another table's last commit damaged: the run failed at its commit (or, for the history, while checking the
    input's cluster) with a traceback (DeltaError). Now refused before Spark starts, naming the table."""
    good, wh = served_copy
    last = sorted((wh / table / "_delta_log").glob("*.json"))[-1]
    commit = last.read_bytes()
    last.write_text("garbage")
    p, took = rebuild("--input", str(good), "--warehouse", str(wh), "--snapshot-id", "n2")
    assert_usage_error(p, took, f"cannot read its {table} table", "write to another --warehouse")
    # a file in the log whose name delta-rs' path parser refuses: before, a traceback of its OSError, coloured
    last.write_bytes(commit)
    (last.parent / "00000000000000000099.json\n").write_text("{}")
    p, took = rebuild("--input", str(good), "--warehouse", str(wh), "--snapshot-id", "n2")
    assert_usage_error(p, took, f"cannot read its {table} table", "invalid path: Error parsing Path")
    assert "\x1b" not in p.stderr


def _unshare_ok() -> bool:
    if not shutil.which("unshare") or os.geteuid() != 0:
        return False
    return subprocess.run(["unshare", "-m", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt"],
                          capture_output=True).returncode == 0


needs_mount = pytest.mark.skipif(not _unshare_ok(), reason="needs root and mount namespaces (unshare -m)")


@needs_mount
def test_read_only_warehouse_exits_2(good, tmp_path):
    """A real read-only file system (a tmpfs mounted ro in a private mount namespace): before, a Rust panic and
    a traceback."""
    wh = tmp_path / "wh"
    wh.mkdir()
    p, took = rebuild("--input", str(good), "--warehouse", str(wh),
                      wrap=["unshare", "-m", "sh", "-c", f'mount -t tmpfs -o ro tmpfs "{wh}" && exec "$@"', "sh"])
    assert_usage_error(p, took, f"--warehouse {wh}", "read-only file system")


@needs_mount
def test_full_warehouse_exits_2(good, tmp_path):
    wh = tmp_path / "wh"
    wh.mkdir()
    fill = f'mount -t tmpfs -o size=16k tmpfs "{wh}" && (cat /dev/zero > "{wh}/fill" 2>/dev/null; true) && exec "$@"'
    p, took = rebuild("--input", str(good), "--warehouse", str(wh), wrap=["unshare", "-m", "sh", "-c", fill, "sh"])
    assert_usage_error(p, took, "no space left on device")


def test_warehouse_held_by_another_run_exits_2_naming_it(good, tmp_path):
    from pipelines.io.lock import WriterLock

    lock = WriterLock(tmp_path / "wh")
    lock.acquire("nightly-1")
    try:
        p, took = rebuild("--input", str(good), "--warehouse", str(tmp_path / "wh"))
    finally:
        lock.release()
    assert_usage_error(p, took, "is being written by another run", f"pid {os.getpid()} snapshot nightly-1 since ")


# ------------------------------------------------------------------------------ unreadable inputs (as root: patched)
def invoke(args: list[str]):
    from click.testing import CliRunner

    from jobs.cli import main

    t0 = time.monotonic()
    r = CliRunner().invoke(main, ["rebuild", "--env", "ci", "--quiet", *args], catch_exceptions=True)
    return r, time.monotonic() - t0


def deny(monkeypatch, *denied: Path):
    real = os.access
    denied_s = {str(d) for d in denied}

    def access(path, mode, *a, **kw):
        return False if str(path) in denied_s else real(path, mode, *a, **kw)

    monkeypatch.setattr(os, "access", access)


def two_partitions(root: Path) -> Path:
    bi.clean_small(root)
    g = bi.group_in(1, "other")
    bi.write_segment(root / "__consumer_offsets-1", 0, bi.batch([bi.commit(g, 0, 5, bi.T0)], 0))
    return root


def test_unreadable_segment_exits_2(tmp_path, monkeypatch):
    """Before: exit 0, a `succeeded` snapshot holding the groups of the other segments only."""
    src = two_partitions(tmp_path / "in")
    seg = src / "__consumer_offsets-1" / f"{0:020d}.log"
    deny(monkeypatch, seg)
    r, took = invoke(["--input", str(src), "--warehouse", str(tmp_path / "wh")])
    assert r.exit_code == 2, r.output
    assert "cannot read input" in r.stderr and str(seg) in r.stderr and "permission denied" in r.stderr
    assert took < LIMIT_S and not (tmp_path / "wh").exists()


def test_unlistable_partition_dir_exits_2(tmp_path, monkeypatch):
    src = two_partitions(tmp_path / "in")
    deny(monkeypatch, src / "__consumer_offsets-1")
    r, took = invoke(["--input", str(src), "--warehouse", str(tmp_path / "wh")])
    assert r.exit_code == 2, r.output
    assert "cannot read input" in r.stderr and "__consumer_offsets-1" in r.stderr
    assert took < LIMIT_S


def test_unreadable_input_dir_exits_2(tmp_path, monkeypatch):
    src = two_partitions(tmp_path / "in")
    deny(monkeypatch, src)
    r, _ = invoke(["--input", str(src), "--warehouse", str(tmp_path / "wh")])
    # click's own check of the option may see it first
    assert r.exit_code == 2 and ("directory cannot be listed" in r.stderr or "is not readable" in r.stderr), r.output


def test_unreadable_segment_as_a_plain_user_is_refused_by_the_check_itself(tmp_path):
    """Without the patch, for a non-root run: the process' own `os.access` says no (skipped as root)."""
    if os.geteuid() == 0:
        pytest.skip("root reads files whatever their mode")
    src = two_partitions(tmp_path / "in")
    seg = src / "__consumer_offsets-1" / f"{0:020d}.log"
    seg.chmod(0)
    p, took = rebuild("--input", str(src), "--warehouse", str(tmp_path / "wh"))
    assert_usage_error(p, took, "cannot read input")


def test_a_pipe_among_a_dumps_part_files_exits_2_not_waits_for_a_writer(tmp_path):
    """A FIFO named like a part file (`part-0001.json`) beside a dump's real part: the reader opened it and waited
    for a writer that never came, a run hung with nothing said (a Parquet one failed, as a file of 0 bytes).
    Refused in one line, before it is opened."""
    import base64
    import json

    dump = tmp_path / "dump"
    dump.mkdir()
    key, value, ts = bi.commit(bi.group_in(0, "pipe"), 0, 5, bi.T0)
    (dump / "part-0000.json").write_text(json.dumps({
        "key": base64.b64encode(key).decode(), "value": base64.b64encode(value).decode(),
        "topic": "__consumer_offsets", "partition": 0, "offset": 0, "timestamp": ts, "timestampType": 0}) + "\n")
    os.mkfifo(dump / "part-0001.json")
    try:
        p, took = rebuild("--input", str(dump), "--warehouse", str(tmp_path / "wh"), timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("the run waited on the pipe")
    assert_usage_error(p, took, "dump file", "part-0001.json is not a regular file")


@pytest.mark.parametrize("option", [["--num-partitions", "1"], ["--conf", "rebuild.num_offsets_partitions=1"]])
def test_a_partition_count_below_the_inputs_partitions_exits_2_before_any_work(tmp_path, option):
    """`--num-partitions 1` for a log dir holding __consumer_offsets-1: Kafka's partitioner places no group there,
    and the run failed its validation (exit 1, a `validation_failed` snapshot) after all its work."""
    src = two_partitions(tmp_path / "in")
    p, took = rebuild("--input", str(src), "--warehouse", str(tmp_path / "wh"), *option)
    assert_usage_error(p, took, "1: the input holds offsets partition 1, which a topic of 1 partition(s) cannot have")
    assert not (tmp_path / "wh").exists()
