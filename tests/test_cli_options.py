"""Every command's options, read from the commands themselves: one that takes one value, given twice, is one line
naming it (exit 2) before anything is read or written, where click kept the last (`rebuild --until-time A
--until-time B` replayed up to B); a repeatable option or a flag given twice is not refused. A new command or
option is covered as it is added."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from jobs.cli import COMMANDS, main
from jobs.rebuild_job import main as rebuild_job

ROOT = Path(__file__).resolve().parent.parent


def _options(one_value: bool):
    """(command path, click command, option) for every option of every command (and the spark-submit job's)."""
    commands = [(["offsetlake", name], main.get_command(None, name)) for name in sorted(COMMANDS)]
    commands.append((["rebuild_job.py"], rebuild_job))
    for path, command in commands:
        for p in command.params:
            if isinstance(p, click.Option) and (one_value != (p.multiple or p.count or p.is_flag)):
                yield pytest.param(path, command, p, id=f"{path[-1]}{max(p.opts, key=len)}")


def _invoke(path, command, args):
    # the group for `offsetlake X`, as the program runs it; the job's command alone, as spark-submit runs it
    runner = CliRunner()
    if path[0] == "offsetlake":
        return runner.invoke(main, [path[1], *args], prog_name="offsetlake", catch_exceptions=False)
    return runner.invoke(command, args, prog_name=path[0], catch_exceptions=False)


def _given_twice(option: click.Option) -> list[str]:
    """`--x 1 --x=1`: the values are never converted, as the refusal comes before any value is read."""
    name = max(option.opts, key=len)
    if option.nargs == 1:
        return [name, "1", f"{name}=1"]
    return [name, *["1"] * option.nargs] * 2


@pytest.mark.parametrize("path, command, option", list(_options(one_value=True)))
def test_every_one_value_option_given_twice_is_one_line(path, command, option, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = _invoke(path, command, _given_twice(option))
    name = max(option.opts, key=len)
    assert r.exit_code == 2, r.output
    assert r.stderr == f"error: option {name} given 2 times: it takes one value (run the command once per value) " \
                       f"— see '{' '.join(path)} --help'\n"
    assert r.stdout == "" and not any(tmp_path.iterdir())


@pytest.mark.parametrize("path, command, option", list(_options(one_value=False)))
def test_a_repeatable_option_or_a_flag_given_twice_is_not_refused(path, command, option, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    name = max(option.opts, key=len)
    args = [name, name] if option.is_flag or option.count else [name, "x", name, "y"]
    r = _invoke(path, command, [*args, "--help"])  # --help: the arguments parse, and nothing runs
    assert r.exit_code == 0 and r.stderr == "" and "Usage:" in r.stdout, r.output


def test_the_spark_submit_job_refuses_until_time_given_twice(tmp_path):
    """The job parses its own arguments (`jobs/rebuild_job.py`, spark-submit's file): the same refusal, before
    Spark starts and before the warehouse is touched."""
    p = subprocess.run([sys.executable, "jobs/rebuild_job.py", "--input", str(tmp_path), "--warehouse",
                        str(tmp_path / "wh"), "--until-time", "2026-01-01", "--until-time", "2026-01-02"],
                       cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 2, p.stderr
    assert p.stderr == "error: option --until-time given 2 times: it takes one value (run the command once per " \
                       "value) — see 'rebuild_job.py --help'\n"
    assert not (tmp_path / "wh").exists()
