"""The README is true line by line: every `offsetlake` command it shows runs as written, every `make` target it
names exists, every SQL example runs, every file it points at is there.

A command is read from an inline code span or a line of a code block. Its synopsis is expanded into runs: the
required words, then once more with each optional group (`[--flag VALUE]`, or each alternative of
`[--a|--b]`; a group inside one, `[--a A [--b B]]`, once with the outer alone and once with both). Placeholders get
values from one small warehouse built here from a generated sample (`PATH` the dump, `DIR` the warehouse, `GROUP`
its busiest group, `TIME` its as-of, …); a placeholder this file has no value for fails the test, naming the README
line, so a new command in the README needs a value here. A mention that is only a command's name (`offsetlake sql`)
checks that the command exists.

The "Incident runbook"'s drill is run apart, as a person runs it (`test_the_runbook_drill_*`): its block in order,
in a folder of its own, the `offsetlake` lines and the shell lines alike, each exiting as its `# exit N` says (0
when it says nothing); then what each step answered is checked against what the sample says it wrote.
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
_PLACEHOLDER = re.compile(r"^[A-Z][A-Z0-9_]*(?:@[A-Z]+)?$")  # `KIND@TIME` too


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


RUNBOOK = "## Incident runbook"


def runbook_drill() -> list[tuple[int, str]]:
    """(line number, text) of every line of the runbook's drill: the first code block under its heading."""
    lines = README.read_text(encoding="utf-8").splitlines()
    start = next(n for n, line in enumerate(lines) if line.startswith(RUNBOOK))
    opening = next(n for n in range(start, len(lines)) if lines[n].startswith("```"))
    closing = next(n for n in range(opening + 1, len(lines)) if lines[n].startswith("```"))
    return [(n + 1, lines[n]) for n in range(opening + 1, closing)]


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


def tokens(text: str) -> list[str]:
    """Words, quoted strings and whole bracket groups (nested groups inside theirs)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if c.isspace():
            i += 1
            continue
        j = i
        if c == "[":
            depth = 0
            while j < n:
                depth += {"[": 1, "]": -1}.get(text[j], 0)
                if depth == 0:
                    break
                j += 1
            j += 1
        elif c in "\"'":
            j = text.find(c, i + 1) + 1 or n
        else:
            while j < n and not text[j].isspace():
                j += 1
        out.append(text[i:j])
        i = j
    return out


def _alternatives(group: str) -> list[str]:
    """`[a|b [c|d]]` -> `a`, `b [c|d]`: split at the group's own `|`s only."""
    parts, depth, current = [], 0, ""
    for c in group[1:-1]:
        depth += {"[": 1, "]": -1}.get(c, 0)
        if c == "|" and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += c
    return [p for p in parts + [current] if p.strip()]


def _group_runs(group: str) -> list[list[str]]:
    """An optional group -> the words of each way to give it: each alternative, and each alternative with each way
    to give a group inside it."""
    alternatives = [tokens(a) for a in _alternatives(group)]
    flag = next((a[0] for a in alternatives if a[0].startswith("-")), None)
    runs = []
    for alt in alternatives:
        words = [t for t in alt if not t.startswith("[")]
        if not words[0].startswith("-") and flag is not None:  # `[--as-of TIME|now]`: `now` is --as-of's value
            words = [flag, *words]
        runs.append(words)
        for inner in (t for t in alt if t.startswith("[")):
            runs += [words + more for more in _group_runs(inner)]
    return runs


def expand(synopsis: str) -> list[list[str]]:
    """A synopsis -> its runs: the required words alone, then with each optional group's alternatives, one at a
    time. `…` (more of the same, or left out) is dropped."""
    words = tokens(synopsis.replace("…", " ").replace("\u2026", " "))
    required = [t for t in words if not t.startswith("[")]
    runs = [required]
    for group in (t for t in words if t.startswith("[")):
        runs += [required + more for more in _group_runs(group)]
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
            ("--duration", "D"): "1h", ("--incident", "KIND@TIME"): "reset@+30m",
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
def story(tmp_path_factory) -> Story:
    """The README's story: a sample rebuilt twice through the CLI, in process (its tests are `slow`; no JVM)."""
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


@pytest.mark.slow
def test_every_command_the_readme_shows_runs(story, monkeypatch):
    from jobs.cli import COMMANDS, main

    monkeypatch.chdir(story.root)  # relative paths in the README (`sample/dump`, `warehouse`) land here
    runner = CliRunner()
    commands = readme_commands()
    assert len(commands) > 20  # the reader still finds them
    drill = {n for n, _ in runbook_drill()}  # run as a person runs them, in order (test_the_runbook_drill_*)
    failures = []
    for line, synopsis in commands:
        if line in drill:
            continue
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


@pytest.mark.slow
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


# ------------------------------------------------------------------------------------------- the runbook's drill
@dataclass
class Step:
    line: int
    command: str
    expected: int  # the exit code the README gives it (`# exit N`; 0 when it gives none)
    code: int
    output: str


_EXPECTED = re.compile(r"\s+#\s*exit (\d+)\b.*$|\s+#.*$")


@pytest.fixture(scope="module")
def drill(tmp_path_factory) -> dict:
    """The runbook's drill block run as written, in order, in a folder of its own: `offsetlake …` lines through the
    CLI, the others through `sh -c`: the folder and the steps, in order."""
    from jobs.cli import main

    root = tmp_path_factory.mktemp("drill")
    steps: list[Step] = []
    runner = CliRunner()
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(root)
        for n, text in runbook_drill():
            if not text.strip() or text.lstrip().startswith("#"):
                continue
            m = _EXPECTED.search(text)
            command = text[:m.start()] if m else text
            expected = int(m.group(1)) if m and m.group(1) else 0
            if command.startswith("offsetlake "):
                r = runner.invoke(main, shlex.split(command)[1:])
                code, output = r.exit_code, r.output
            else:
                done = subprocess.run(["sh", "-c", command], capture_output=True, text=True, cwd=root)
                code, output = done.returncode, done.stdout + done.stderr
            steps.append(Step(n, command, expected, code, output))
    return {"root": root, "steps": steps}


def _step(drill, start: str, *, with_: tuple[str, ...] = (), without: tuple[str, ...] = ()) -> Step:
    """The drill's only step whose command starts with `start` and has the words `with_` and none of `without`."""
    (found,) = [s for s in drill["steps"] if s.command.startswith(start)
                and all(w in s.command.split() for w in with_) and not any(w in s.command.split() for w in without)]
    return found


def _incidents_printed(drill) -> dict[str, dict]:
    """What the sample step printed of each incident (its kind, millisecond and group), by kind."""
    out = {}
    for line in _step(drill, "offsetlake sample").output.splitlines():
        m = re.match(r"incident (\w+)@\S+: (\S+) \((\d+)\) group '([^']+)'", line)
        if m:
            out[m.group(1)] = {"time": m.group(2), "ms": int(m.group(3)), "group": m.group(4), "line": line}
    return out


def _json(drill, args: list[str]):
    from jobs.cli import main

    r = CliRunner().invoke(main, [*args[:1], "--warehouse", str(drill["root"] / "drill" / "wh"), *args[1:]])
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


@pytest.mark.slow
def test_the_runbook_drill_runs_as_written(drill):
    steps = drill["steps"]
    assert len(steps) >= 10 and any(s.expected for s in steps)
    wrong = [f"README:{s.line}: `{s.command}` exited {s.code}, the README says {s.expected}: "
             f"{s.output.strip().splitlines()[-3:]}" for s in steps if s.code != s.expected]
    assert not wrong, "\n".join(wrong)


@pytest.mark.slow
def test_the_runbook_drill_names_the_incidents_the_sample_wrote(drill):
    """The README names each incident as the sample prints it (group, time to the millisecond), and its commands'
    times are the sample's: the plan as of 1 ms before the reset, the damage from the reset on."""
    printed = _incidents_printed(drill)
    assert set(printed) == {"reset", "rewind", "delete"} and len({i["group"] for i in printed.values()}) == 3
    block = "\n".join(text for _, text in runbook_drill())
    for inc in printed.values():
        shown = [t.split("#", 1)[1].strip().rstrip("…").strip() for t in block.splitlines()
                 if t.lstrip().startswith("#") and f"'{inc['group']}'" in t and "incident " in t]
        assert len(shown) == 1 and inc["line"].startswith(shown[0]), (inc["line"], shown)
    reset = printed["reset"]
    plan = _step(drill, "offsetlake restore-plan", with_=("--damaged-since",))
    words = plan.command.split()
    as_of = parse(words[words.index("--as-of") + 1])
    assert as_of == reset["ms"] - 1 and parse(words[words.index("--damaged-since") + 1]) == reset["ms"]
    assert parse(words[words.index("--damaged-until") + 1]) > printed["delete"]["ms"]


def parse(text: str) -> int:
    from pipelines.times import parse_time_ms

    return parse_time_ms(text, what="README")


@pytest.mark.slow
def test_the_drills_changes_show_each_incident_at_its_millisecond(drill):
    """`changes` over the README's window: the reset's regressions (one per partition, to 0) at the reset's exact
    millisecond, the rewind's at its own, the deleted group's offsets and the group at the deletion's; no other group
    damaged, no rebalance storm."""
    printed = _incidents_printed(drill)
    words = _step(drill, "offsetlake changes", without=("--group",)).command.split()
    window = [words[words.index("--from") + 1], words[words.index("--to") + 1]]
    items = _json(drill, ["changes", "--from", window[0], "--to", window[1], "--json"])
    damage = [c for c in items if c["kind"] in ("offset_regressed", "offset_tombstone", "offset_expired",
                                                "group_deleted")]
    assert {c["group_id"] for c in damage} == {i["group"] for i in printed.values()}
    reset, rewind, delete = printed["reset"], printed["rewind"], printed["delete"]
    regressed = [c for c in damage if c["group_id"] == reset["group"]]
    assert regressed and all(c["kind"] == "offset_regressed" and c["committed_offset"] == 0
                             and c["time"] == reset["time"] and c["previous_offset"] > 0 for c in regressed)
    assert f"{len(regressed)} partitions reset to 0" in reset["line"]
    back = [c for c in damage if c["group_id"] == rewind["group"]]
    assert back and all(c["kind"] == "offset_regressed" and c["time"] == rewind["time"]
                        and c["delta"] == -min(500, c["previous_offset"]) for c in back)
    gone = [c for c in damage if c["group_id"] == delete["group"]]
    assert [c["kind"] for c in gone][-1] == "group_deleted" and {c["time"] for c in gone} == {delete["time"]}
    assert f"deleted with its {len(gone) - 1} offsets" in delete["line"]
    emptied = {c["group_id"] for c in items if c["kind"] == "group_emptied"}
    assert {reset["group"], delete["group"]} <= emptied  # both Empty first: the tools refuse an active group
    assert not [c for c in items if c["kind"] == "rebalance_storm"]


@pytest.mark.slow
def test_a_quiet_hour_of_the_drill_holds_no_rebalance_storm(drill):
    items = _json(drill, ["changes", "--from", "2026-11-01T00:00:00Z", "--to", "2026-11-01T00:58:59.999Z", "--json"])
    assert {c["kind"] for c in items} >= {"group_created"}  # the hour is not empty
    assert not [c for c in items if c["kind"] == "rebalance_storm"]


@pytest.mark.slow
def test_the_drills_damaged_group_plan_holds_the_incident_groups_alone(drill):
    """The plan by damage holds the reset, the rewound and the deleted group, and none of the groups that committed
    in the window; each target is the offset committed just before the reset."""
    printed = _incidents_printed(drill)
    out = drill["root"] / "drill" / "restore"
    assert set(json.loads((out / "index.json").read_text()).values()) == {i["group"] for i in printed.values()}
    words = _step(drill, "offsetlake changes", without=("--group",)).command.split()
    items = _json(drill, ["changes", "--from", words[words.index("--from") + 1], "--to",
                          words[words.index("--to") + 1], "--json"])
    readme = (out / "README.txt").read_text()
    assert f'"{printed["delete"]["group"]}"' in readme and f"deleted at {printed['delete']['time']}" in readme
    reset = printed["reset"]
    csv = (out / f"{reset['group']}.csv").read_text().splitlines()
    targets = {(c["topic"], c["partition"]): c["previous_offset"] for c in items
               if c["group_id"] == reset["group"] and c["kind"] == "offset_regressed"}
    assert {(t, int(p)): int(o) for t, p, o in (line.rsplit(",", 2) for line in csv)} == targets


@pytest.mark.slow
def test_the_drill_refuses_a_mistyped_group_and_a_reused_out(drill):
    printed = _incidents_printed(drill)
    typo = _step(drill, "offsetlake changes", with_=("--group",))
    assert typo.code == 2 and typo.output.count("\n") == 1 and typo.output.startswith("error: ")
    assert f"did you mean '{printed['reset']['group']}'" in typo.output
    reused = _step(drill, "offsetlake restore-plan", with_=("--group",))
    assert reused.code == 2 and reused.output.count("\n") == 1 and "not empty" in reused.output


@pytest.mark.slow
def test_the_drills_apply_sh_goes_on_past_the_refused_group_and_the_rerun_applies_only_it(drill):
    printed = _incidents_printed(drill)
    refused = f"{printed['reset']['group']}.csv"
    dry = _step(drill, "BOOTSTRAP=", with_=("--dry-run",))
    assert "2 dry-run ok, 1 failed" in dry.output and f"FAILED {refused}" in dry.output
    first, rerun = [s for s in drill["steps"] if "apply.sh --execute" in s.command]
    assert "2 applied, 1 failed, 0 skipped" in first.output and f"FAILED {refused}" in first.output
    assert "1 applied, 0 failed, 2 skipped" in rerun.output
    applied = (drill["root"] / "drill" / "restore" / "applied.txt").read_text().split()
    assert applied[-1] == refused and sorted(applied) == sorted(f"{i['group']}.csv" for i in printed.values())
