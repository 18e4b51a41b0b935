"""A rebuild's stderr is offsetlake's lines; what its dependencies write to file descriptor 2 (below Python: a JVM,
Arrow's C++, a Rust panic, a forked worker) goes to the run's log, and `--verbose` shows it too. Each case runs in a
process of its own, whose stderr is a pipe the test reads, as a terminal would be."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = """
import os, subprocess, sys, warnings
from jobs.run_log import RunLog

with RunLog(sys.argv[1], verbose=sys.argv[2] == "1") as log:
    log.say("[    0.0s] plan: ours")
    os.write(2, b"native: written to fd 2 as C++ or Rust does\\n")
    subprocess.run(["sh", "-c", "echo child: a forked worker or the JVM >&2"])
    print("python: a library's own stderr line", file=sys.stderr)
    warnings.warn("a library's warning")
    log.name_after("nightly-1")
    log.say("error: run nightly-1 failed in stage decode: … (log: %s)" % log.path)
print(log.path)
os.write(2, b"after: the terminal again\\n")
"""


def run(tmp_path: Path, verbose: bool) -> tuple[list[str], str, Path]:
    r = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "runs"), "1" if verbose else "0"], cwd=ROOT,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    log = Path(r.stdout.strip())
    return r.stderr.splitlines(), log.read_text(), log


def test_the_terminal_gets_our_lines_and_the_log_everything(tmp_path):
    terminal, log, path = run(tmp_path, verbose=False)
    assert terminal == ["[    0.0s] plan: ours", f"error: run nightly-1 failed in stage decode: … (log: {path})",
                        "after: the terminal again"]
    assert path.parent == tmp_path / "runs" and path.name.endswith("-nightly-1.log")
    for line in ("[    0.0s] plan: ours", "native: written to fd 2", "child: a forked worker",
                 "python: a library's own stderr line", "a library's warning", "error: run nightly-1 failed"):
        assert line in log, (line, log)
    assert log.startswith("# offsetlake ") and "after: the terminal again" not in log


def test_verbose_shows_everything_and_still_logs_it(tmp_path):
    terminal, log, _ = run(tmp_path, verbose=True)
    text = "\n".join(terminal)
    for line in ("[    0.0s] plan: ours", "native: written to fd 2", "child: a forked worker",
                 "python: a library's own stderr line", "error: run nightly-1 failed", "after: the terminal again"):
        assert line in text, (line, text)
    assert "native: written to fd 2" in log and "child: a forked worker" in log


def test_an_unwritable_directory_falls_back_to_the_temp_directory(tmp_path):
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    r = subprocess.run([sys.executable, "-c", SCRIPT, str(blocked / "runs"), "0"], cwd=ROOT, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    import tempfile

    assert Path(r.stdout.strip()).parent == Path(tempfile.gettempdir()) / "offsetlake-runs"


def test_only_the_newest_logs_are_kept(tmp_path, monkeypatch):
    from jobs import run_log

    monkeypatch.setattr(run_log, "KEEP", 3)
    d = tmp_path / "runs"
    d.mkdir()
    for i in range(6):
        (d / f"20260101T00000{i}Z-s{i}.log").write_text("x")
    run_log._prune(d)
    assert sorted(p.name for p in d.iterdir()) == [f"20260101T00000{i}Z-s{i}.log" for i in (3, 4, 5)]


def test_two_runs_of_one_id_in_one_second_keep_both_logs(tmp_path, monkeypatch):
    """Two runs of one snapshot id (two warehouses) starting in one second with one log dir: the second run's
    rename replaced the first's log, still being written."""
    from jobs import run_log

    class Second(run_log._dt.datetime):
        @classmethod
        def now(cls, tz=None):
            return run_log._dt.datetime(2026, 12, 5, 3, 0, 0, tzinfo=tz)

    monkeypatch.setattr(run_log._dt, "datetime", Second)
    logs = [run_log.RunLog(tmp_path / "runs"), run_log.RunLog(tmp_path / "runs")]
    for pid, log in zip((1001, 1002), logs):  # each run's own process
        monkeypatch.setattr(run_log.os, "getpid", lambda pid=pid: pid)
        log._open()
        log._file.write(f"run {pid}\n".encode())
    for pid, log in zip((1001, 1002), logs):
        monkeypatch.setattr(run_log.os, "getpid", lambda pid=pid: pid)
        log.name_after("nightly")
        log._file.close()
    assert [log.path.name for log in logs] == ["20261205T030000Z-nightly.log", "20261205T030000Z-nightly-1002.log"]
    assert [log.path.read_text() for log in logs] == ["run 1001\n", "run 1002\n"]
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == sorted(log.path.name for log in logs)
