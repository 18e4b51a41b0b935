"""Every user mistake, through the real program (`python -m jobs.cli`, and the spark-submit job's script): exactly
one line on stderr, starting `error: `, exit 2, and no pyspark imported (so no JVM) by the time the process ends.
--help and --version still print and exit 0."""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests import badinputs as bi

ROOT = Path(__file__).resolve().parent.parent

# Runs the program as its console script does, then reports at exit whether pyspark was imported at all and whether
# it launched a JVM (its gateway; `sql` and `repair-stats` import pyspark's type classes for the table schemas,
# which starts nothing).
_PROBE = ("import atexit, sys\n"
          "def report():\n"
          "    ps = sys.modules.get('pyspark')\n"
          "    jvm = ps is not None and getattr(getattr(ps, 'SparkContext', None), '_gateway', None) is not None\n"
          "    sys.__stdout__.write('\\npyspark imported: %s, jvm: %s\\n' % (ps is not None, jvm))\n"
          "atexit.register(report)\n"
          "sys.argv = ['offsetlake', *sys.argv[1:]]\n"
          "from jobs.cli import run\n"
          "run()\n")


def offsetlake(*args: str, script: list[str] | None = None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, *(script or ["-c", _PROBE]), *args]
    return subprocess.run(cmd, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True,
                          text=True, timeout=120)


def assert_one_error_line(p: subprocess.CompletedProcess, *needles: str, code: int = 2, script=None) -> str:
    assert p.returncode == code, (p.returncode, p.stderr[-2000:])
    lines = p.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), p.stderr[-2000:]
    for n in needles:
        assert n in lines[0], lines[0]
    assert "jvm: False" in p.stdout or script is not None, p.stdout[-500:]
    return lines[0]


@pytest.fixture(scope="module")
def story(tmp_path_factory) -> Path:
    from tests.serving.conftest import build_story

    root = tmp_path_factory.mktemp("story")
    build_story(root)
    return root


@pytest.fixture(scope="module")
def good(tmp_path_factory) -> Path:
    return bi.clean_small(tmp_path_factory.mktemp("in") / "dump")[0]


# --- click's usage errors, for every command: one line naming the command's --help ------------------------------
def test_a_mistyped_option_is_one_line_with_did_you_mean(tmp_path):
    p = offsetlake("rebuild", "--warehose", str(tmp_path))
    line = assert_one_error_line(p)
    assert line == "error: no such option: --warehose (did you mean --warehouse?) — see 'offsetlake rebuild --help'"


@pytest.mark.parametrize("args, needles", [
    (["rebuld"], ["no such command: rebuld (did you mean rebuild?)", "see 'offsetlake --help'"]),
    (["rebuild", "--input", "x"], ["missing option '--warehouse'", "see 'offsetlake rebuild --help'"]),
    (["rebuild", "--input", "x", "--warehouse", "y", "--semantics", "newest"],
     ["invalid value for '--semantics': 'newest' is not one of 'legacy', 'modern'"]),
    (["rebuild", "--input", "x", "--warehouse", "y", "--until-offset", "ten"], ["'--until-offset'", "'ten'"]),
    (["decode"], ["missing argument 'PATHS...'", "'offsetlake decode --help'"]),
    (["sample"], ["missing argument 'DIR'"]),
    (["sample", "d", "--records", "0"], ["invalid value for '--records'"]),
    (["describe", "--warehouse", "w", "g", "--membrs"], ["no such option: --membrs (did you mean --members?)"]),
    (["lookup", "--warehouse", "w", "--partition", "-1"], ["invalid value for '--partition'"]),
    (["serve", "--warehouse", "w", "--port", "99999"], ["invalid value for '--port'"]),
    (["diff", "--warehouse", "w", "a"], ["missing argument 'SNAP_B'"]),
    (["reset-plan", "--warehouse", "w"], ["missing option '--group'"]),
    (["sql", "--warehouse", "w", "select 1", "--format", "xml"], ["invalid value for '--format'"]),
    (["repair-stats"], ["missing option '--warehouse'"]),
    (["--no-such-flag"], ["no such option: --no-such-flag", "see 'offsetlake --help'"]),
])
def test_usage_errors_of_every_command_are_one_line(args, needles):
    assert_one_error_line(offsetlake(*args), *needles)


def test_the_spark_submit_job_reports_usage_errors_the_same_way(tmp_path):
    p = offsetlake("--warehose", str(tmp_path), script=["jobs/rebuild_job.py"])
    assert_one_error_line(p, "no such option: --warehose (did you mean --warehouse?)", "rebuild_job.py --help",
                          script="jobs/rebuild_job.py")


def test_help_and_version_still_exit_0():
    for args in (["--help"], ["rebuild", "--help"], ["describe", "--help"], ["--version"]):
        p = offsetlake(*args)
        assert p.returncode == 0 and p.stderr == "", (args, p.stderr)
    assert "Usage: offsetlake rebuild [OPTIONS]" in offsetlake("rebuild", "--help").stdout
    bare = offsetlake()  # no command: click's help, as before (on stderr, exit 2), not folded into one line
    assert bare.returncode == 2 and bare.stderr.startswith("Usage: offsetlake [OPTIONS] COMMAND [ARGS]...\n")
    assert "  rebuild " in bare.stderr


# --- the commands' own checks ------------------------------------------------------------------------------------
@pytest.mark.parametrize("extra, needles", [
    (["--as-of", "yesterday"], ["--as-of: 'yesterday' is not an ISO-8601 time", "epoch milliseconds"]),
    (["--until-time", "1795294230"], ["--until-time: '1795294230' has too few digits for epoch milliseconds"]),
    (["--until-time", "1795294230830000"], ["past year 9999 as epoch milliseconds"]),
    (["--conf", "rebuild.semantix=modern"], ["did you mean rebuild.semantics?"]),
    (["--conf", "novalue"], ["--conf 'novalue': expected section.key=value"]),
    (["--conf", "decode.split_bytes=1.5"], ["decode.split_bytes must be a whole number, not 1.5"]),  # not 1
    (["--conf", "decode.load_buffer_bytes=-5"], ["decode.load_buffer_bytes must be 1 or more, not -5"]),
    (["--conf", "rebuild.retention_minutes=abc"], ["rebuild.retention_minutes must be a whole number, not 'abc'"]),
    (["--conf", "validation.max_unread_bytes=1.5"], ["validation.max_unread_bytes must be a whole number or null"]),
    # offsets.retention.minutes is a Java int: past a long it was a stack trace once the snapshot had been built
    (["--retention-minutes", "9999999999999999999"], ["--retention-minutes must be at most 2147483647", "an int"]),
    (["--conf", "rebuild.retention_minutes=2147483648"], ["rebuild.retention_minutes must be at most 2147483647"]),
])
def test_rebuild_mistakes_are_one_line_before_any_jvm(good, tmp_path, extra, needles):
    p = offsetlake("rebuild", "--input", str(good), "--warehouse", str(tmp_path / "wh"), "--env", "ci", "--quiet",
                   *extra)
    assert_one_error_line(p, *needles)
    assert "pyspark imported: False" in p.stdout  # preflight answers before the rebuild imports pyspark at all


def test_rebuild_of_a_warehouse_that_is_a_file(good, tmp_path):
    (tmp_path / "wh").write_text("x")
    p = offsetlake("rebuild", "--input", str(good), "--warehouse", str(tmp_path / "wh"))
    assert_one_error_line(p, "'--warehouse'", "is a file")


@pytest.mark.parametrize("args", [
    ["rebuild", "--env", "ci", "--quiet", "--input", "", "--warehouse", "{wh}"],
    ["rebuild", "--env", "ci", "--quiet", "--input", ".", "--warehouse", ""],
    ["rebuild", "--env", "ci", "--quiet", "--input", ".", "--warehouse", "{wh}", "--metrics-textfile", ""],
    ["sample", "", "--records", "50", "--groups", "2", "--partitions", "2", "--data-segments", "0"],
    ["decode", ""],
    ["repair-stats", "--warehouse", ""],
    ["sql", "--warehouse", "", "select 1"],
])
def test_an_empty_path_is_one_line_and_never_the_current_directory(good, tmp_path, monkeypatch, args):
    """`--warehouse "$WH"` with WH unset: the OS reads '' as the current directory, so a rebuild read it as its input
    or wrote its tables there, `sample` wrote its log dir there, `decode` and `repair-stats` went over it."""
    from click.testing import CliRunner

    from jobs.cli import main

    here = tmp_path / "cwd"
    shutil.copytree(good, here)  # a log dir: what a rebuild or decode of '' would have read
    before = sorted(p.name for p in here.iterdir())
    monkeypatch.chdir(here)
    r = CliRunner().invoke(main, [a.format(wh=tmp_path / "wh") for a in args])
    lines = r.stderr.splitlines()
    assert r.exit_code == 2 and len(lines) == 1 and "the path is empty (an unset variable?)" in lines[0], r.output
    assert sorted(p.name for p in here.iterdir()) == before and not (tmp_path / "wh").exists()


def test_an_argument_that_is_not_utf8_is_one_line(good, tmp_path, story):
    # Linux names a file with any bytes; Arrow, Delta and DuckDB take UTF-8 only, so such a path failed deep in the
    # run as a stack trace
    bad = os.fsencode(tmp_path) + b"/in\xff"
    shutil.copytree(good, os.fsdecode(bad))
    for script in (None, ["jobs/rebuild_job.py"]):
        args = ([] if script else ["rebuild"]) + ["--input", bad, "--warehouse", str(tmp_path / "wh")]
        line = assert_one_error_line(offsetlake(*args, script=script), "is not valid UTF-8", script=script)
        assert repr(bad) in line
    assert_one_error_line(offsetlake("lookup", "--warehouse", str(story), "--group", b"g\xfe"), "b'g\\xfe'",
                          "is not valid UTF-8")
    assert not (tmp_path / "wh").exists()


def test_a_dump_directory_holding_a_name_that_is_not_utf8_is_one_line(good, tmp_path):
    # Arrow's listing of a directory decodes each name as it is asked for: a part file named with other bytes ended
    # the run as a stack trace (UnicodeDecodeError) before anything was read
    import json

    dump = tmp_path / "dump"
    dump.mkdir()
    with open(os.fsencode(dump) + b"/part-\xff.json", "w") as f:
        f.write(json.dumps({"key": "AAE=", "value": None, "partition": 0, "offset": 0}) + "\n")
    p = offsetlake("rebuild", "--input", str(dump), "--warehouse", str(tmp_path / "wh"), "--env", "ci", "--quiet")
    assert_one_error_line(p, "holds a name that is not UTF-8", "part-\\xff.json", "rename it")


def test_sample_into_a_place_it_cannot_write(tmp_path):
    (tmp_path / "f").write_text("x")
    assert_one_error_line(offsetlake("sample", str(tmp_path / "f" / "dump")), f"cannot write {tmp_path / 'f' / 'dump'}",
                          "Not a directory")
    assert_one_error_line(offsetlake("sample", "s3://bucket/dump"), "sample writes a local directory")
    made = offsetlake("sample", str(tmp_path / "d"), "--records", "200", "--groups", "2", "--partitions", "2")
    assert made.returncode == 0
    assert_one_error_line(offsetlake("sample", str(tmp_path / "d"), "--records", "200", "--groups", "2"),
                          "already holds 2 __consumer_offsets-* entries (use --force to replace them)")


def test_decode_of_what_is_not_a_log(tmp_path, shared_dir):
    """An empty directory, a broker file that is not a segment, and bytes that are not a log under a segment's
    name (a real producer-state snapshot): one line each, with what was found."""
    empty = tmp_path / "empty"
    empty.mkdir()
    assert_one_error_line(offsetlake("decode", str(empty)), f"no __consumer_offsets segment files under {empty}")
    part = shared_dir / "brokerdata" / "transactions" / "data" / "__consumer_offsets-43"
    if not part.is_dir():
        pytest.skip("brokerdata/transactions not present")
    meta = part / "partition.metadata"
    assert_one_error_line(offsetlake("decode", str(meta)), "partition.metadata is not a .log segment")
    fake = tmp_path / "__consumer_offsets-43" / "00000000000000000000.log"
    fake.parent.mkdir()
    shutil.copyfile(part / "00000000000000000026.snapshot", fake)
    p = offsetlake("decode", str(fake))
    assert_one_error_line(p, f"no readable record in {fake}", "byte(s) not read")
    assert p.stdout.startswith(f"Dumping {fake}\n")  # the dump's header, as kafka-dump-log prints it
    # a real segment still decodes, and its problems (none here) never turn into an error
    ok = offsetlake("decode", str(part / "00000000000000000000.log"))
    assert ok.returncode == 0 and ok.stderr == "" and "offset: 19" in ok.stdout



@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full to write to")
@pytest.mark.parametrize("cmd", ["decode", "describe", "sql"])
def test_output_onto_a_full_disk_is_one_line(cmd, good, story):
    """Output the disk has no room for (stdout on /dev/full: every write fails with ENOSPC) is one line, exit 1, as
    a failure that is not the user's: it was a stack trace (decode), or blamed the warehouse with exit 2."""
    args = {"decode": ["decode", str(next(good.rglob("*.log")))],
            "describe": ["describe", "--warehouse", str(story), "--all-groups"],
            "sql": ["sql", "--warehouse", str(story), "select * from loaded_offsets"]}[cmd]
    with open("/dev/full", "w") as full:
        p = subprocess.run([sys.executable, "-m", "jobs.cli", *args], cwd=ROOT, stdout=full, stderr=subprocess.PIPE,
                           env={**os.environ, "PYTHONPATH": str(ROOT)}, text=True, timeout=120)
    assert p.returncode == 1, p.stderr[-2000:]
    assert p.stderr.splitlines() == ["error: cannot write: No space left on device"], p.stderr[-2000:]

_ENDLESS = "SELECT range AS n, 'group-' || range AS g FROM range(100000000000)"


def _rss(pid: int) -> int:
    """The process's resident memory in bytes (0 once it has ended)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    # a zombie has no VmRSS line
    return next((int(ln.split()[1]) * 1024 for ln in status.splitlines() if ln.startswith("VmRSS:")), 0)


def _endless_sql(story: Path, fmt: str, *, interruptible: bool = False) -> subprocess.Popen:
    """`offsetlake sql` of 10^11 rows, killed past 1.5 GiB of memory (what holding the rows would reach; the
    machine is left alone)."""
    p = subprocess.Popen([sys.executable, "-m", "jobs.cli", "sql", "--warehouse", str(story), "--format", fmt,
                          _ENDLESS], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE,
                         preexec_fn=(lambda: signal.signal(signal.SIGINT, signal.SIG_DFL)) if interruptible else None)

    def guard():
        while p.poll() is None:
            if _rss(p.pid) > 1.5 * 2**30:
                p.kill()
            time.sleep(0.05)

    threading.Thread(target=guard, daemon=True).start()
    return p


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="no /proc to read a process's memory from")
@pytest.mark.parametrize("fmt", ["table", "csv", "json"])
def test_sql_prints_a_result_too_large_to_hold_as_it_fetches_it(story, fmt):
    """sql fetched every row before it printed one: a result of 10^11 rows (a join mistyped into a cross product)
    printed nothing and grew until the machine killed it. It prints from the first rows on, in bounded memory, and
    the reader leaving (`| head`) ends it as it ends every command: exit 1, nothing on stderr."""
    p = _endless_sql(story, fmt)
    first = p.stdout.read(2**20)  # past the rows the table holds back for its widths
    assert len(first) == 2**20, p.stderr.read().decode()[-2000:]
    before = _rss(p.pid)
    for _ in range(8):  # about 700,000 rows more
        assert len(p.stdout.read(2**20)) == 2**20
    grown = _rss(p.pid) - before
    p.stdout.close()
    assert p.wait(timeout=120) == 1
    assert p.stderr.read() == b""
    assert grown < 64 * 2**20, grown
    text = first.decode()
    if fmt == "table":
        assert [ln.split() for ln in text.splitlines()[1:5:2]] == [["|", "n", "|", "g", "|"],
                                                                   ["|", "0", "|", "group-0", "|"]]
    else:
        assert text.startswith({"csv": "n,g\n0,group-0\n1,group-1\n",
                                "json": '[{"n": 0, "g": "group-0"}, {"n": 1, "g": "group-1"}, '}[fmt])


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="no /proc to read a process's memory from")
def test_sql_ctrl_c_while_printing_is_one_line(story):
    """Ctrl-C while sql prints a long result: `error: aborted`, exit 1, as at any prompt of offsetlake's."""
    p = _endless_sql(story, "csv", interruptible=True)
    assert len(p.stdout.read(2**20)) == 2**20, p.stderr.read().decode()[-2000:]
    p.send_signal(signal.SIGINT)
    p.stdout.read()  # what it printed before the signal reached it
    assert p.wait(timeout=120) == 1
    assert p.stderr.read().decode().split() == ["error:", "aborted"]


def test_sql_ctrl_c_while_duckdb_runs_the_query_is_one_line(story):
    """Ctrl-C while DuckDB ran a query (an aggregate over 10^11 rows) was a RuntimeError stack trace, and the
    process then ran on until DuckDB's threads had finished the query (minutes). It is `error: aborted`, exit 1,
    and the process ends."""
    script = ("import os, signal, threading\n"
              "import pipelines.serving.sql as s\n"
              "streamed = s.stream\n"
              "def stream(con, query, *args):\n"  # Ctrl-C once DuckDB runs the query, not before
              "    threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT)).start()\n"
              "    return streamed(con, query, *args)\n"
              "s.stream = stream\n"
              "from jobs.cli import run\n"
              "run()\n")
    p = subprocess.run([sys.executable, "-c", script, "sql", "--warehouse", str(story),
                        "SELECT sum(hash(range)) FROM range(100000000000)"], cwd=ROOT,
                       env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=120,
                       preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert p.returncode == 1, p.stderr[-2000:]
    assert p.stderr.split() == ["error:", "aborted"], p.stderr[-2000:]
    assert p.stdout == ""


# --- the serving commands --------------------------------------------------------------------------------------
@pytest.mark.parametrize("args, line", [
    (["describe", "paymnts", "--snapshot", "s1"],
     "error: group 'paymnts' does not exist in snapshot 's1' (did you mean 'payments'?)"),
    (["describe", "fresh1"], "error: group 'fresh1' does not exist in snapshot 's2' (did you mean 'fresh'?)"),
    (["describe", "txm", "--history"], "error: group 'txm' does not exist in snapshot 's2' (did you mean 'txn'?)"),
    (["lookup", "--group", "Payments"], "error: group 'Payments' does not exist in snapshot 's2' (did you mean "
                                        "'payments'?)"),
    (["reset-plan", "--group", "zzz"], "error: group 'zzz' does not exist in snapshot 's2'"),
    (["describe", "simple"], "error: group 'simple' does not exist in snapshot 's2' (deleted by a group tombstone)"),
    (["describe", "g", "--snapshot", "nope"], None),
    (["describe"], "error: missing GROUP (or --all-groups) — see 'offsetlake describe --help'"),
    (["lookup"], "error: give --group and/or --topic — see 'offsetlake lookup --help'"),
    (["sql", "select * from no_such_table"], None),
    (["diff", "s1", "missing"], None),
])
def test_serving_mistakes_are_one_line(story, args, line):
    p = offsetlake(args[0], "--warehouse", str(story), *args[1:])
    got = assert_one_error_line(p)
    if line is not None:
        assert got == line
    assert p.stdout.rsplit("\npyspark imported: ", 1)[0] == ""


def test_serving_an_unreadable_warehouse(tmp_path):
    for cmd in (["describe", "g"], ["lookup", "--group", "g"], ["sql", "select 1"], ["serve"], ["diff", "a", "b"]):
        assert_one_error_line(offsetlake(cmd[0], "--warehouse", str(tmp_path / "none"), *cmd[1:]))
    assert_one_error_line(offsetlake("repair-stats", "--warehouse", str(tmp_path / "none")))


def test_serving_a_warehouse_whose_runs_table_is_damaged(story, tmp_path):
    """The `runs` table's last commit damaged: `serve` failed its startup in uvicorn's traceback (exit 3), where
    `describe` said it in one line; now `serve` says it the same way, before it listens."""
    import shutil

    wh = tmp_path / "wh"
    shutil.copytree(story, wh)
    sorted((wh / "runs" / "_delta_log").glob("*.json"))[-1].write_text("garbage")
    for cmd in (["serve", "--port", "0"], ["describe", "g"]):
        assert_one_error_line(offsetlake(cmd[0], "--warehouse", str(wh), *cmd[1:]),
                              "cannot read the warehouse's runs table")


@pytest.mark.parametrize("table", ["runs", "loaded_groups"])
def test_a_delta_commit_nested_past_any_action_is_one_line_not_a_crash(story, good, tmp_path, table):
    """A commit line of 60,000 `[` (a damaged or hostile `_delta_log`): delta-rs' JSON reader recursed once a level
    and overflowed its stack, a SIGSEGV (exit -11) with not a word, in every command opening the table. It is one
    line naming the commit, before delta-rs reads it."""
    import shutil

    wh = tmp_path / "wh"
    shutil.copytree(story, wh)
    last = sorted((wh / table / "_delta_log").glob("*.json"))[-1]
    last.write_bytes(last.read_bytes() + b"\n" + b"[" * 60_000 + b"]" * 60_000 + b"\n")
    said = f"{last.name} line "
    for cmd in (["describe", "g"], ["sql", "select count(*) from loaded_groups"], ["repair-stats"],
                ["rebuild", "--env", "ci", "--quiet", "--input", str(good)], ["serve", "--port", "0"]):
        if table != "runs" and cmd[0] == "serve":
            continue  # it starts, and says it of the snapshot it cannot index (tests/serving)
        assert_one_error_line(offsetlake(cmd[0], "--warehouse", str(wh), *cmd[1:]), said,
                              "is nested deeper than any Delta action")


@pytest.mark.parametrize("ahead", [1, 3])
def test_a_directory_named_as_a_commit_to_come_is_refused_before_the_run(story, good, tmp_path, ahead):
    """A directory in `runs/_delta_log` named as a version past the table's last: delta-rs reads past it, but the
    run's commit at that version found it taken 15 times over, after all the run's work, and recording the failure
    failed the same way: a traceback, exit 1. It is one line before any work, exit 2, naming the directory."""
    import shutil

    wh = tmp_path / "wh"
    shutil.copytree(story, wh)
    last = max(int(p.name[:20]) for p in (wh / "runs" / "_delta_log").glob("*.json"))
    (wh / "runs" / "_delta_log" / f"{last + ahead:020d}.json").mkdir()
    versions = sorted(p.name for p in (wh / "runs" / "_delta_log").iterdir())
    assert_one_error_line(offsetlake("rebuild", "--env", "ci", "--quiet", "--input", str(good), "--warehouse",
                                     str(wh)), f"{last + ahead:020d}.json is a directory where the run commits")
    assert sorted(p.name for p in (wh / "runs" / "_delta_log").iterdir()) == versions


def test_a_metrics_textfile_that_is_no_regular_file_is_refused_not_replaced(good, tmp_path):
    """`--metrics-textfile` names a pipe (or a device: `/dev/full`, run as root): the metrics were written beside it
    and renamed over it, so the run replaced the device or pipe with a regular file. It is one line before any work,
    and the pipe is left as it was."""
    import stat

    fifo = tmp_path / "metrics.prom"
    os.mkfifo(fifo)
    assert_one_error_line(offsetlake("rebuild", "--env", "ci", "--quiet", "--input", str(good), "--warehouse",
                                     str(tmp_path / "wh"), "--metrics-textfile", str(fifo)),
                          f"--metrics-textfile {fifo}: not a regular file")
    assert stat.S_ISFIFO(os.stat(fifo).st_mode) and not (tmp_path / "wh").exists()


def test_end_offsets_past_what_such_a_file_holds_are_one_line_not_read_whole(story, tmp_path, monkeypatch):
    """`describe --end-offsets /dev/zero` read the stream whole, until the kernel killed the process (its memory):
    a line longer than any (a topic is 249 characters) or a file past the cap is one line, read no further. The
    bounds' own values are set small here: /dev/zero itself would, without them, take the machine's memory."""
    from click.testing import CliRunner

    from jobs import cmd_serving
    from jobs.cli import main

    def describe(path):
        r = CliRunner().invoke(main, ["describe", "--warehouse", str(story), "g", "--end-offsets", str(path)])
        lines = r.stderr.splitlines()
        assert r.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: "), r.output
        return lines[0]

    monkeypatch.setattr(cmd_serving, "END_OFFSETS_MAX_LINE", 100)
    monkeypatch.setattr(cmd_serving, "END_OFFSETS_MAX_BYTES", 3000)
    (tmp_path / "long").write_bytes(b"\x00" * 5000)
    assert f"{tmp_path / 'long'}: a line longer than 100 bytes: not end offsets" in describe(tmp_path / "long")
    (tmp_path / "big").write_text("orders:0:100\n" * 400)
    assert f"{tmp_path / 'big'}: more than 3,000 bytes: not end offsets" in describe(tmp_path / "big")


def test_a_commit_line_nested_past_python_s_parser_is_one_line(story, tmp_path):
    """An action nesting 3,000 levels fits a commit file too small to be read before delta-rs opens the table, and
    delta-rs reads it: the log's own check (`delta_log.Commit`) parsed it with Python's JSON reader, which recurses a
    level at a time to about 1,000, and its RecursionError was a stack trace. It is the log's damage, in one line."""
    import shutil

    wh = tmp_path / "wh"
    shutil.copytree(story, wh)
    last = sorted((wh / "loaded_groups" / "_delta_log").glob("*.json"))[-1]
    # an action delta-rs takes (a commitInfo's fields are the writer's own), so the log's check reads it after
    last.write_bytes(last.read_bytes().rstrip(b"\n") + b'\n{"commitInfo":{"x":' + b"[" * 3_000 + b"]" * 3_000
                     + b"}}\n")
    assert_one_error_line(offsetlake("describe", "--warehouse", str(wh), "g"), f"{last.name} line ",
                          "is nested deeper than any Delta action")


def test_a_deep_line_in_a_commit_below_the_newest_checkpoint_is_not_read(tmp_path, monkeypatch):
    """An open replays the commits after the newest checkpoint at or below the version it reads: a commit below it is
    never read, by delta-rs or by the check before it, which reads each commit it does check once a process."""
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    from pipelines.io import delta_log
    from pipelines.io.delta import open_table

    table = tmp_path / "t"
    for i in range(3):
        write_deltalake(str(table), pa.table({"x": [i]}), mode="append")
    DeltaTable(str(table)).create_checkpoint()
    first = table / "_delta_log" / f"{0:020d}.json"
    first.write_bytes(first.read_bytes() + b"[" * 20_000 + b"]" * 20_000 + b"\n")
    read = []
    monkeypatch.setattr(delta_log, "_nesting", lambda line: read.append(line) or 0)
    assert open_table(table).version() == 2 and not read
    deep = table / "_delta_log" / f"{3:020d}.json"
    write_deltalake(str(table), pa.table({"x": [3]}), mode="append")
    deep.write_bytes(deep.read_bytes() + b"[" * 20_000 + b"]" * 20_000 + b"\n")
    monkeypatch.undo()
    with pytest.raises(Exception, match=f"{deep.name} line 2 is nested deeper"):
        open_table(table)


def test_serve_on_a_port_in_use_is_one_line(story):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        p = offsetlake("serve", "--warehouse", str(story), "--port", str(port))
    assert_one_error_line(p, f"cannot listen on 127.0.0.1:{port}", "another process is listening there")
    p = offsetlake("serve", "--warehouse", str(story), "--host", "192.0.2.1", "--token", "t")  # TEST-NET: not ours
    assert_one_error_line(p, "cannot listen on 192.0.2.1:8765")


@pytest.mark.parametrize("host", ["", " "])
def test_serve_on_an_empty_host_is_one_line(story, host):
    """`--host "$HOST"` with HOST unset bound every interface (0.0.0.0), after a warning naming no address."""
    p = offsetlake("serve", "--warehouse", str(story), "--host", host, "--port", "0")
    assert_one_error_line(p, "--host must not be empty")


def test_serve_with_a_refresh_interval_of_nan_is_one_line(story):
    """click's FloatRange lets nan through: the server's refresh loops waited nan seconds, no time at all, and
    spun a core re-reading the runs table."""
    p = offsetlake("serve", "--warehouse", str(story), "--refresh-interval", "nan", "--port", "0")
    assert_one_error_line(p, "--refresh-interval must be a number of seconds, not nan")
