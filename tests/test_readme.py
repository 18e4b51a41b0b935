"""The README is true line by line: every `offsetlake` command it shows runs as written, every `make` target it
names exists, every SQL example runs, every file it points at is there.

A command is read from an inline code span or a line of a code block. Its synopsis is expanded into runs: the
required words, then once more with each optional group (`[--flag VALUE]`, or each alternative of
`[--a|--b]`). Placeholders get values from one small warehouse built here from a generated sample (`PATH` the
dump, `DIR` the warehouse, `GROUP` its busiest group, `TIME` its as-of, …); a placeholder this file has no value
for fails the test, naming the README line, so a new command in the README needs a value here. A mention that is
only a command's name (`offsetlake sql`) checks that the command exists.
"""
from __future__ import annotations

import json
import re
import shlex
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from click.testing import CliRunner

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"

_SPAN = re.compile(r"`(?:\.venv/bin/)?(offsetlake\s[^`]*|offsetlake)`")
_BLOCK_LINE = re.compile(r"^\s*(?:[A-Z_]+=\S+\s+)*(?:\.venv/bin/)?(offsetlake\s.*?)\s*(?:#.*)?$")
_MAKE = re.compile(r"`make ([a-z-]+)([^`]*)`|^make ([a-z-]+)(\s[^#]*)?(?:#.*)?$")
_TOKEN = re.compile(r"\[[^\]]*\]|\"[^\"]*\"|'[^']*'|\S+")
_PLACEHOLDER = re.compile(r"^[A-Z][A-Z0-9_]*$")


def readme_lines() -> list[tuple[int, str, bool]]:
    """(line number, text, inside a code block) of every README line."""
    out, block = [], False
    for n, line in enumerate(README.read_text(encoding="utf-8").splitlines(), 1):
        if line.lstrip().startswith("```"):
            block = not block
            continue
        out.append((n, line, block))
    return out


def readme_commands() -> list[tuple[int, str]]:
    """(line number, command) of every `offsetlake …` the README shows."""
    out = []
    for n, line, block in readme_lines():
        if block:
            m = _BLOCK_LINE.match(line)
            if m:
                out.append((n, m.group(1)))
            continue
        for m in _SPAN.finditer(line):
            out.append((n, m.group(1).replace("\\|", "|")))
    return out


def readme_make_targets() -> list[tuple[int, str, str]]:
    """(line number, target, the rest of the line) of every `make TARGET` the README shows."""
    out = []
    for n, line, block in readme_lines():
        if block:
            m = _MAKE.match(line.strip())
            if m and m.group(3):
                out.append((n, m.group(3), (m.group(4) or "").strip()))
            continue
        for m in _MAKE.finditer(line):
            if m.group(1):
                out.append((n, m.group(1), m.group(2).strip()))
    return out


def readme_sql() -> list[tuple[int, str]]:
    """(line number of its first line, statement) of every statement in the README's ```sql blocks."""
    out, in_sql, buf, start = [], False, [], 0
    for n, line in enumerate(README.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip().startswith("```"):
            in_sql = line.strip() == "```sql"
            continue
        if not in_sql:
            continue
        code = line.split("--", 1)[0].rstrip() if line.lstrip().startswith("--") else line
        if not code.strip():
            continue
        if not buf:
            start = n
        buf.append(code)
        if code.rstrip().endswith(";"):
            out.append((start, "\n".join(buf).rstrip().rstrip(";")))
            buf = []
    return out


def expand(synopsis: str) -> list[list[str]]:
    """A synopsis -> its runs: the required words alone, then with each optional group's alternatives, one at a
    time. `…` (more of the same, or left out) is dropped."""
    tokens = [t for t in _TOKEN.findall(synopsis.replace("…", " ").replace("\u2026", " ")) if t]
    required = [t for t in tokens if not t.startswith("[")]
    runs = [required]
    for group in (t for t in tokens if t.startswith("[")):
        alternatives = [a.split() for a in group[1:-1].split("|") if a.strip()]
        flag = next((a[0] for a in alternatives if a[0].startswith("-")), None)
        for alt in alternatives:
            if not alt[0].startswith("-") and flag is not None:  # `[--as-of TIME|now]`: `now` is --as-of's value
                alt = [flag, *alt]
            runs.append(required + alt)
    return runs


@dataclass
class Story:
    """One small warehouse the README's commands run against, and a value for every placeholder it uses."""

    root: Path
    dump: Path
    warehouse: Path
    group: str
    snapshots: list[str]
    as_of: str
    topic: str
    end_offsets: Path
    made: list[Path] = field(default_factory=list)

    def fresh(self, name: str) -> str:
        p = self.root / f"{name}-{len(self.made)}"
        self.made.append(p)
        return str(p)

    def value(self, command: str, option: str | None, placeholder: str, position: int) -> str:
        """The value of `placeholder` after `option` (None: a positional) in `command`."""
        by_option = {
            ("--retention-minutes", "N"): "10080", ("--until-offset", "N"): "40", ("--records", "N"): "2000",
            ("--metrics-max-series", "N"): "100", ("--groups", "G"): "4", ("--partitions", "P"): "2",
            ("--seed", "S"): "3", ("--segment-bytes", "B"): "65536", ("--end-offsets", "FILE"): str(self.end_offsets),
            ("--group-regex", "R"): ".*", ("--snapshot-id", "ID"): f"readme-{len(self.made)}",
            ("--snapshot", "ID"): self.snapshots[-1], ("--group", "G"): self.group, ("--out", "OUT"): "",
            ("--topic", "T"): self.topic, ("--partition", "N"): "0", ("--storm-threshold", "N"): "10",
            ("--hot-share", "F"): "0.9", ("--data-segments", "S"): "1", ("--data-partitions", "N"): "5",
        }
        if (option, placeholder) in by_option:
            v = by_option[(option, placeholder)]
            return v or self.fresh("out")
        if placeholder in ("TIME", "T", "T1", "T2"):
            return self.as_of
        if placeholder == "PATH":
            return str(self.dump)
        if placeholder == "DIR":
            return self.fresh("sample") if command == "sample" and option is None else str(self.warehouse)
        if placeholder in ("GROUP", "G"):
            return self.group
        if placeholder in ("A", "B") and option is None:
            return self.snapshots[0] if placeholder == "A" else self.snapshots[-1]
        pytest.fail(f"README: no value for {placeholder!r} after {option or command!r}: give it one in "
                    f"tests/test_readme.py (Story.value)")


def instantiate(story: Story, words: list[str]) -> list[str]:
    command, out, option = words[1], [], None
    warehouse = words[words.index("--warehouse") + 1] if "--warehouse" in words else "DIR"
    for i, w in enumerate(words[1:]):
        if w in ("GROUP", "G") and option in (None, "--group") and not _PLACEHOLDER.match(warehouse):
            out.append(busiest_group(Path(warehouse)))  # a warehouse the README's own commands made
        elif _PLACEHOLDER.match(w) and w not in ("SELECT",):
            out.append(story.value(command, option, w, i))
        elif w.startswith('"') or w.startswith("'"):
            inner = w[1:-1].strip()
            out.append("SELECT 1" if inner.upper() in ("", "SELECT") else inner)  # `"SELECT …"`: any query
        else:
            out.append(w)
        option = w if w.startswith("--") else None
    return out


def busiest_group(warehouse: Path) -> str:
    """The Stable group with the most members (as `make run` picks the one it describes)."""
    from pipelines.io.snapshots import DeltaWarehouseReader, resolve_snapshot
    from pipelines.serving.sql import connect, run

    reader = DeltaWarehouseReader(str(warehouse))
    con = connect(reader, resolve_snapshot(reader))
    return run(con, "SELECT group_id FROM loaded_groups WHERE state = 'Stable' "
                    "ORDER BY member_count DESC, group_id LIMIT 1")[1][0][0]


@pytest.fixture(scope="module")
def story(spark, tmp_path_factory) -> Story:
    from jobs.cli import main
    from pipelines.io.snapshots import DeltaWarehouseReader, resolve_snapshot
    from pipelines.serving.sql import connect, run

    root = tmp_path_factory.mktemp("readme")
    dump, wh = root / "dump", root / "warehouse"
    runner = CliRunner()
    r = runner.invoke(main, ["sample", str(dump), "--records", "2000", "--groups", "20", "--partitions", "4",
                             "--seed", "7"])
    assert r.exit_code == 0, r.output
    for sid in ("first", "second"):
        r = runner.invoke(main, ["rebuild", "--input", str(dump), "--warehouse", str(wh), "--snapshot-id", sid,
                                 "--quiet"])
        assert r.exit_code == 0, r.output
    reader = DeltaWarehouseReader(str(wh))
    con = connect(reader, resolve_snapshot(reader))
    group = busiest_group(wh)
    topic = run(con, f"SELECT min(topic) FROM loaded_offsets WHERE group_id = '{group}'")[1][0][0]
    as_of = run(con, "SELECT max(as_of) FROM runs")[1][0][0]
    end_offsets = root / "end-offsets.txt"
    end_offsets.write_text("orders:0:100\n")
    return Story(root=root, dump=dump, warehouse=wh, group=group, snapshots=["first", "second"],
                 as_of=as_of.isoformat(), topic=topic, end_offsets=end_offsets)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(args: list[str]) -> tuple[int, str]:
    """`offsetlake serve …` in its own process on a free loopback port: (exit code or 0 once /health answers, log)."""
    import httpx

    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "jobs.cli", *args, "--port", str(port)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                return proc.returncode, proc.stdout.read()
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    return 0, ""
            except httpx.HTTPError:
                time.sleep(0.2)
        return -1, "no answer on /health in 60 s"
    finally:
        proc.terminate()
        proc.wait(10)


def test_every_command_the_readme_shows_runs(story, monkeypatch):
    from jobs.cli import COMMANDS, main

    monkeypatch.chdir(story.root)  # relative paths in the README (`sample/dump`, `warehouse`) land here
    runner = CliRunner()
    commands = readme_commands()
    assert len(commands) > 20  # the reader still finds them
    failures = []
    for line, synopsis in commands:
        words = synopsis.split()
        if len(words) == 1 or words[1] not in COMMANDS:
            failures.append(f"README:{line}: `{synopsis}`: no such command") if len(words) > 1 else None
            continue
        if len(words) == 2:  # a mention of the command's name
            continue
        if any(w.startswith("s3://") for w in words):  # object storage: tests/integration/test_s3.py runs these
            continue
        for run in expand(synopsis):
            args = instantiate(story, run)
            if args[0] == "serve":
                code, output = _serve(args)
            else:
                r = runner.invoke(main, args)
                code, output = r.exit_code, r.output
            if code != 0:
                failures.append(f"README:{line}: `offsetlake {shlex.join(args)}` exited {code}: "
                                f"{output.strip().splitlines()[-1:] if output.strip() else ''}")
    assert not failures, "\n".join(failures)


def test_every_make_target_the_readme_names_exists():
    targets = readme_make_targets()
    assert {t for _, t, _ in targets} >= {"run", "test"}
    for line, target, rest in targets:
        r = subprocess.run(["make", "-n", "-C", str(ROOT), target, *shlex.split(rest)], capture_output=True, text=True)
        assert r.returncode == 0, f"README:{line}: `make {target} {rest}`: {r.stderr.strip()}"


def test_every_sql_example_runs(story):
    from jobs.cli import main

    statements = readme_sql()
    assert len(statements) >= 4
    for line, sql in statements:
        r = CliRunner().invoke(main, ["sql", "--warehouse", str(story.warehouse), "--format", "json", sql])
        assert r.exit_code == 0, f"README:{line}: {r.output}"
        json.loads(r.output)


def test_every_file_the_readme_points_at_exists():
    """Paths of the checkout the README names (`jobs/rebuild_job.py`, `pipelines/coordinator/saved.py`, …)."""
    names = set()
    for _, line, _ in readme_lines():
        names |= set(re.findall(r"`((?:pipelines|jobs|schemas|conf|benchmarks|tests)/[\w./-]*\w)`", line))
        names |= set(re.findall(r"(?<![\w/])((?:jobs|conf)/[\w-]+\.(?:py|properties))", line))
    assert len(names) > 10
    built = {"pipelines/_conf"}  # the wheel's copy of conf/, made by the build (setup.py), never in a checkout
    missing = sorted(n for n in names - built if not (ROOT / n).exists())
    assert not missing, f"the README points at files that do not exist: {missing}"
