"""`offsetlake restore-plan`: the committed offsets at a past time, from the snapshot's history.

Against three references: the engine's own replay of the log cut at the same time (what `rebuild --until-time`
runs for a small input, in-process), real `rebuild --until-time` snapshots written by the CLI, and the clients'
own record of what they committed (`timeline.tsv` of every broker scenario). The warehouses are real rebuilds
(one per broker scenario, one per semantics of a generated sample), made once per module, in process (no JVM); the
tests that read them are `slow`.
"""
from __future__ import annotations

import io
import json
import os
import re
import shlex
import stat
import subprocess
import zipfile
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import unquote

import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient

from jobs.api import create_app
from pipelines.io.snapshots import DeltaWarehouseReader
from tests.depth import cases
from tests.serving.warehouse_kit import WarehouseKit, commit, group, offset, ts
from tests.test_what_if import cli_rebuild


SCENARIOS = [
    "classic-basic", "compacted", "compression-gzip", "compression-lz4", "compression-snappy", "compression-zstd",
    "deletes", "expiry", "kip848", "many-groups", "simple-consumers", "transactions",
]


def _ms(v) -> int | None:
    if v is None:
        return None
    return int(v.timestamp() * 1000) if hasattr(v, "timestamp") else int(v)


def _offsets(tables: dict) -> dict[str, set]:
    """group -> {(topic, partition, offset)} of `loaded_offsets` and `empty_group_offsets` (what OffsetFetch gives)."""
    out: dict[str, set] = {}
    for name in ("loaded_offsets", "empty_group_offsets"):
        rows = tables[name].to_pylist() if hasattr(tables[name], "to_pylist") else tables[name]
        for r in rows:
            out.setdefault(r["group_id"], set()).add((r["topic"], r["partition"], r["committed_offset"]))
    return out


def _plan_offsets(plan_at: dict) -> dict[str, set]:
    return {g: set(v) for g, v in plan_at.items()}


def _cut_replay(rows, semantics: str, t: int, retention: int = 10080) -> dict[str, set]:
    """The engine over the log cut at `t`, expired at `t`: what `rebuild --until-time t` computes."""
    from pipelines.coordinator.expiry import ExpiryOptions
    from pipelines.coordinator.options import ReplayOptions
    from pipelines.coordinator.shard import replay_rows

    options = ReplayOptions(semantics=semantics, until_time_ms=t, snapshot_id="cut", load_time_ms=t)
    expiry = ExpiryOptions(as_of_ms=t, retention_minutes=retention, semantics=semantics)
    return _offsets(replay_rows(rows, options, expiry))


def _end(rows) -> int:
    """The newest record's time: the as-of of a snapshot rebuilt from `rows`, the latest time a plan is made at."""
    return max(r["timestamp"] for r in rows if r.get("timestamp") is not None)


def _start(reader, snap) -> int:
    """The first record's time of the snapshot's history, the earliest time a plan without offsets is made at."""
    from pipelines.serving.history import history_start_ms

    return history_start_ms(reader, snap)


def _times(rows, n: int = 30) -> list[int]:
    """Moments across the log: `n` record timestamps and `n` transaction markers' times spread evenly (the first
    and the last record's among them), each also 1 ms before (a record and its marker on either side of the cut),
    and expiry's clock past the end."""
    ts = sorted({r["timestamp"] for r in rows if r.get("timestamp") is not None and r["timestamp"] >= 0})
    picked = set(ts[:: max(1, len(ts) // n)]) | {ts[0], ts[-1]}
    markers = sorted({r["timestamp"] for r in rows if r.get("record_kind") == "control" and r.get("timestamp")})
    picked |= set(markers[:: max(1, len(markers) // n)])
    late = {ts[-1] + d for d in (30_000, 61_000, 90_000, 600_000, 3_600_000, 7 * 86_400_000 + 1)}  # expiry's clock
    return sorted(picked | {t - 1 for t in picked} | late)


@pytest.fixture(scope="module")
def broker(brokerdata, tmp_path_factory):
    """scenario -> (warehouse, decoded rows): each scenario rebuilt with `--semantics modern` into its own
    warehouse (the history tables are per warehouse)."""
    from pipelines.decoding.reader import iter_decoded_rows

    tmp = tmp_path_factory.mktemp("restore-broker")
    out = {}
    for s in SCENARIOS:
        data = brokerdata / s / "data"
        wh = tmp / s
        rc, summary = cli_rebuild(wh, [data], "base", "--semantics", "modern")
        assert rc == 0, summary
        out[s] = SimpleNamespace(wh=wh, rows=list(iter_decoded_rows([data])), dir=brokerdata / s)
    return out


def _plan_at(wh: Path, t: int, groups=None, snapshot: str = "base", reader=None) -> dict[str, list]:
    """The plan's offsets at `t`, through `reader` when given (one reader for many moments, as `serve` keeps it)."""
    from pipelines.io.snapshots import DeltaWarehouseReader
    from pipelines.serving.restore_plan import offsets_at

    reader = reader or DeltaWarehouseReader(wh)
    return offsets_at(reader, reader.snapshot(snapshot), t, groups)


class _ReadOnce:
    """A warehouse reader that reads each table once: the moments of one test ask one snapshot's pinned history
    again and again, and the plan at each is what is under test, not the read (`_plan_at` without a reader reads
    it)."""

    def __init__(self, wh: Path):
        from pipelines.io.snapshots import DeltaWarehouseReader

        self._reader, self._read = DeltaWarehouseReader(wh), {}

    def __getattr__(self, name):
        return getattr(self._reader, name)

    def _once(self, method: str, *args, **kw):
        key = (method, repr(args), repr(sorted(kw.items())))
        if key not in self._read:
            self._read[key] = getattr(self._reader, method)(*args, **kw)
        return self._read[key]

    def snapshot(self, *args, **kw):
        return self._once("snapshot", *args, **kw)

    def history_table(self, *args, **kw):
        return self._once("history_table", *args, **kw)

    def snapshot_table(self, *args, **kw):
        return self._once("snapshot_table", *args, **kw)


#: record times and marker times spread over each scenario's log (each also the ms before it, and expiry's clock
#: after the end): a moment costs a replay of the whole log and a plan, ~0.25 s in many-groups
BROKER_MOMENTS = cases(deep=30, quick=10)


@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.slow
def test_plan_is_the_until_time_replay_at_every_moment_of_every_broker_scenario(broker, scenario):
    b = broker[scenario]
    times = _times(b.rows, BROKER_MOMENTS)
    assert len(times) >= 20
    reader = _ReadOnce(b.wh)
    for t in times:
        expected = _cut_replay(b.rows, "modern", t)
        assert _plan_offsets(_plan_at(b.wh, t, reader=reader)) == expected, (scenario, t)


# ------------------------------------------------------------------------------------------ timeline ground truth
_ENTRY = re.compile(r"(?P<topic>[A-Za-z0-9._-]+)\[(?P<p>\d+)\]@(?P<off>-?\d+)(?:/e-?\d+)?(?:/md='.*?')?(?=,[A-Za-z0-9._-]+\[|$| ->)")
#: a worker's synchronous commit and what it committed (`commit(async)` issued lines are not results)
_WORKER_COMMIT = re.compile(r"^\[(?P<group>\S+) worker\] \S+: commit\((?:sync|offsets\+metadata|message=[^)]*)\) -> (?P<e>.+)$")
#: a client's own commit call, answered ok (simple consumers), or a plain commit beside transactions
_CLIENT_COMMIT = re.compile(r"^(?:\[\S+ worker\] )?(?P<group>[A-Za-z0-9._-]+)(?: [^:]*)?: (?:plain )?commit (?P<e>\S.*?)(?: -> ok)?$")


def timeline_commits(scenario_dir: Path, known_groups: set[str]) -> list[tuple[int, str, str, int, int]]:
    """(epoch ms, group, topic, partition, offset) of every commit the timeline records as done, in time order.
    A line counts when it is a synchronous commit's result (or a commit answered ok) of a group the broker knows;
    `@-1001`-style entries (no offset for that partition) are left out, as are async commits, failures and
    transactional commits (the timeline does not say which offsets a transaction held when it committed)."""
    out = []
    events = []
    for line in (scenario_dir / "timeline.tsv").read_text(encoding="utf-8").splitlines():
        parts = line.split("\t", 2)
        if len(parts) == 3 and parts[0].isdigit():
            events.append((int(parts[0]), parts[2]))
    for i, (ms, event) in enumerate(events):
        m = _WORKER_COMMIT.match(event) or _CLIENT_COMMIT.match(event)
        if not m or m.group("group") not in known_groups or "fail" in event.lower() or "error" in event.lower():
            continue
        group = m.group("group")
        # A commit's record is written before its line is logged, so it is in the log at the line's time; the
        # group's next commit may be written in that same millisecond, though: a moment counts only when the
        # next line about the group comes clearly later.
        word = re.compile(r"(?<![A-Za-z0-9._-])" + re.escape(group) + r"(?![A-Za-z0-9._-])")
        after = next((t for t, e in events[i + 1:] if word.search(e)), None)
        if after is not None and after - ms < QUIET_MS:
            continue
        for e in _ENTRY.finditer(m.group("e")):
            off = int(e.group("off"))
            if off >= 0:
                out.append((ms, group, e.group("topic"), int(e.group("p")), off))
    return out


#: how much later the group's next event must come for a logged commit's moment to be unambiguous
QUIET_MS = 100


def _known_groups(scenario_dir: Path) -> set[str]:
    return set(json.loads((scenario_dir / "expected_state.json").read_text())["summary"])


def _async_groups(scenario_dir: Path) -> set[str]:
    """Groups that also commit asynchronously: which commit was last at a moment is not in the timeline."""
    text = (scenario_dir / "timeline.tsv").read_text(encoding="utf-8")
    return set(re.findall(r"\[(\S+) worker\] \S+: commit\(async\)", text))


#: Scenarios whose timeline gives no unambiguous moment: many-groups commits through raw requests and child
#: processes, never logged with offsets; transactions logs each plain commit within milliseconds of the group's
#: transactional ones (its SCENARIO.md values are checked in test_transactions_scenario_against_a_real_until_time_
#: snapshot); compacted's cleaner removed the commits that later ones and the groups' deletion overwrote, so the log
#: no longer holds what the clients committed then (its until-time equality is tested above).
NO_TIMELINE_MOMENTS = ("many-groups", "transactions", "compacted")


@pytest.mark.parametrize("scenario", [s for s in SCENARIOS if s not in NO_TIMELINE_MOMENTS])
@pytest.mark.slow
def test_plan_gives_what_the_clients_had_committed(broker, scenario):
    b = broker[scenario]
    commits = [c for c in timeline_commits(b.dir, _known_groups(b.dir)) if c[1] not in _async_groups(b.dir)]
    assert commits, f"no commit parsed from {scenario}'s timeline"
    checked = 0
    # the moment of each logged commit: the client has its answer, the next commit has not been made
    by_moment: dict[tuple[int, str], list] = {}
    for ms, g, topic, p, off in commits:
        by_moment.setdefault((ms, g), []).append((topic, p, off))
    moments = sorted(by_moment)
    for ms, g in moments[:: max(1, len(moments) // 25)]:
        plan = {(t, p): o for t, p, o in _plan_at(b.wh, ms, [g]).get(g, [])}
        for topic, p, off in by_moment[(ms, g)]:
            assert plan.get((topic, p)) == off, (scenario, ms, g, topic, p, off)
            checked += 1
    assert checked >= 1


# ------------------------------------------------------------------------------------------ generated logs
@pytest.fixture(scope="module", params=["legacy", "modern"])
def sampled(request, tmp_path_factory):
    """A generated log (transactions committed, aborted and open, tombstones, deletions, KIP-848 groups) rebuilt
    with a 1-minute retention, so expiry takes offsets at some moments; plus two real `--until-time` what-if
    snapshots of it."""
    from jobs.cli import main
    from pipelines.decoding.reader import iter_decoded_rows

    semantics = request.param
    tmp = tmp_path_factory.mktemp(f"restore-{semantics}")
    dump = tmp / "dump"
    r = CliRunner().invoke(main, ["sample", str(dump), "--records", "4000", "--groups", "40", "--partitions", "5",
                                  "--seed", "7"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    rows = list(iter_decoded_rows([dump]))
    wh = tmp / "wh"
    common = ["--semantics", semantics, "--retention-minutes", "1"]
    rc, summary = cli_rebuild(wh, [dump], "base", *common)
    assert rc == 0, summary
    times = _times(rows, 8)  # 42 moments: ~8 record times and ~8 marker times, the ms before each, expiry's clock
    cuts = [times[len(times) // 3], times[2 * len(times) // 3]]
    for i, t in enumerate(cuts):
        rc, summary = cli_rebuild(wh, [dump], f"cut{i}", *common, "--until-time", str(_iso(t)))
        assert rc == 0, summary
    return SimpleNamespace(semantics=semantics, dump=dump, rows=rows, wh=wh, times=times, cuts=cuts)


def _iso(ms: int) -> str:
    from pipelines.serving.restore_plan import _iso as iso

    return iso(ms)


@pytest.mark.slow
def test_plan_is_the_until_time_replay_on_generated_logs(sampled):
    kinds = {(r["record_kind"], r.get("is_tombstone")) for r in sampled.rows}
    assert ("control", None) in kinds or ("control", False) in kinds
    assert ("offset_commit", True) in kinds and ("group_metadata", True) in kinds
    expired_somewhere = False
    reader = _ReadOnce(sampled.wh)
    for t in sampled.times:
        expected = _cut_replay(sampled.rows, sampled.semantics, t, retention=1)
        assert _plan_offsets(_plan_at(sampled.wh, t, reader=reader)) == expected, (sampled.semantics, t)
        if not expired_somewhere:
            expired_somewhere = expected != _cut_replay(sampled.rows, sampled.semantics, t, retention=10**9)
    assert expired_somewhere  # expiry did take offsets at some of the moments


@pytest.mark.slow
def test_plan_equals_real_until_time_snapshots(sampled):
    from pipelines.io.snapshots import DeltaWarehouseReader

    reader = DeltaWarehouseReader(sampled.wh)
    for i, t in enumerate(sampled.cuts):
        snap = reader.snapshot(f"cut{i}")
        rebuilt = _offsets({n: reader.snapshot_table(n, snap) for n in ("loaded_offsets", "empty_group_offsets")})
        assert rebuilt, "the what-if snapshot has offsets"
        assert _plan_offsets(_plan_at(sampled.wh, t)) == rebuilt


@pytest.mark.slow
def test_transactions_scenario_against_a_real_until_time_snapshot(broker):
    """tests/test_what_if.py's moment: two transactional commits written, their markers not yet."""
    from pipelines.io.snapshots import DeltaWarehouseReader
    from pipelines.serving.restore_plan import parse_instant
    from tests.test_what_if import CUT

    b = broker["transactions"]
    rc, summary = cli_rebuild(b.wh, [b.dir / "data"], "cut", "--semantics", "modern", "--until-time", CUT)
    assert rc == 0, summary
    reader = DeltaWarehouseReader(b.wh)
    rebuilt = _offsets({n: reader.snapshot_table(n, reader.snapshot("cut"))
                        for n in ("loaded_offsets", "empty_group_offsets")})
    t = parse_instant(CUT)
    assert _plan_offsets(_plan_at(b.wh, t)) == rebuilt
    # a moment after both markers: the transactions' offsets are committed (SCENARIO.md: tx-in[0]@70)
    later = {(tp, p): o for tp, p, o in _plan_at(b.wh, t + 1000, ["tx-g1"])["tx-g1"]}
    now = {(tp, p): o for tp, p, o in _plan_at(b.wh, t, ["tx-g1"])["tx-g1"]}
    assert later[("tx-in", 0)] == 70 and now[("tx-in", 0)] != 70


# ------------------------------------------------------------------------------------------ the files and the CLI
def _cli(*args):
    from jobs.cli import main

    return CliRunner().invoke(main, ["restore-plan", *args], catch_exceptions=False)


@pytest.mark.slow
def test_cli_writes_the_files_and_apply_sh_runs_them(broker, tmp_path):
    from pipelines.serving.restore_plan import file_stem

    from pipelines.serving.restore_plan import restore_plan

    b = broker["deletes"]
    reader = DeltaWarehouseReader(b.wh)
    snap = reader.snapshot("base")
    # the earliest moment at which a since-deleted group had offsets: the plan has a group of each kind (a time
    # before the history, where no group had one, is refused)
    t = next(t for t in _times(b.rows) if _start(reader, snap) <= t <= _end(b.rows)
             and any(g.state_now is None and g.file for g in restore_plan(reader, snap, t).groups))
    out = tmp_path / "plan"
    r = _cli("--warehouse", str(b.wh), "--as-of", str(t), "--out", str(out))
    assert r.exit_code == 0, r.output
    index = json.loads((out / "index.json").read_text())
    expected = _cut_replay(b.rows, "modern", t)
    assert set(index.values()) == {g for g, o in expected.items() if o}
    for name, gid in index.items():
        assert name == file_stem(gid) + ".csv"
        rows = [line.split(",") for line in (out / name).read_text().splitlines()]
        assert {(tp, int(p), int(o)) for tp, p, o in rows} == expected[gid]
    readme = (out / "README.txt").read_text()
    assert "REFUSED" in readme and "GONE" in readme and "BELOW LOG START" in readme
    # apply.sh: a dry run per group, then (--execute) the execute, with the group ids and files as given
    fake = tmp_path / "bin" / "kafka-consumer-groups.sh"
    fake.parent.mkdir()
    log = tmp_path / "calls"
    fake.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" >> {shlex.quote(str(log))}\nprintf -- "--\\n" >> {shlex.quote(str(log))}\n')
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{fake.parent}:{os.environ['PATH']}", "BOOTSTRAP": "broker:9092"}
    assert subprocess.run(["sh", str(out / "apply.sh")], env={k: v for k, v in env.items() if k != "BOOTSTRAP"},
                          capture_output=True).returncode != 0  # BOOTSTRAP is required
    subprocess.run(["sh", str(out / "apply.sh"), "--execute"], env=env, check=True, cwd=tmp_path)
    calls = [c.strip("\n").split("\n") for c in log.read_text().split("--\n") if c.strip()]
    assert len(calls) == 2 * len(index)
    for dry, execute in zip(calls[::2], calls[1::2]):
        assert dry[-1] == "--dry-run" and execute[-1] == "--execute" and dry[:-1] == execute[:-1]
        group, plan_file = dry[dry.index("--group") + 1], dry[dry.index("--from-file") + 1]
        assert dry[dry.index("--bootstrap-server") + 1] == "broker:9092"
        assert index[Path(plan_file).name] == group and Path(plan_file).is_file()


def test_group_ids_are_file_names_reversibly():
    from pipelines.serving.restore_plan import file_stem

    ids = ["orders", "a.b-c_d", ".hidden", "..", "", "a/b", "x y", "métadonnées", "😀", "%41", "~x", "a" * 300,
           "$(rm -rf /)", "it's", "CON", "-n"]
    stems = [file_stem(g) for g in ids]
    assert len(set(stems)) == len(ids)
    for g, s in zip(ids, stems):
        assert re.fullmatch(r"[A-Za-z0-9._%~-]{1,200}", s) and not s.startswith(".")
        if s.startswith("%"):
            assert unquote(s[1:]) == g
        elif not s.startswith("~"):
            assert s == g


def test_hostile_group_ids_reach_kafka_as_they_are(tmp_path):
    """apply.sh quotes every id: the shell hands the tool exactly the group id, whatever it holds."""
    from pipelines.serving.restore_plan import GroupPlan, RestorePlan, file_stem, write_restore_plan

    ids = ["$(touch pwned)", "it's", 'a"b', "x y\tz", "`id`", "-n", "line\nbreak", "日本"]
    plan = RestorePlan("s", "modern", 0, [GroupPlan(g, file_stem(g) + ".csv", [("t", 0, 5)], state_now="Empty")
                                          for g in ids], "--group …")
    out = write_restore_plan(plan, tmp_path / "plan")
    assert stat.S_IMODE((out / "apply.sh").stat().st_mode) & 0o100
    fake = tmp_path / "kcg"
    fake.write_text('#!/bin/sh\nfor a in "$@"; do printf "%s\\0" "$a"; done\nprintf "\\n\\0"\n')
    fake.chmod(0o755)
    env = {**os.environ, "BOOTSTRAP": "b:1", "KAFKA_CONSUMER_GROUPS": str(fake)}
    got = subprocess.run(["sh", str(out / "apply.sh")], env=env, capture_output=True, cwd=tmp_path, check=True).stdout
    calls = [c.strip("\0").split("\0") for c in got.decode().split("\n\0") if c.strip("\0")]
    calls = [c for c in calls if "--group" in c]  # apply.sh's own summary line follows the tool's output
    assert [c[c.index("--group") + 1] for c in calls] == ids
    assert not (tmp_path / "pwned").exists()


def test_a_group_id_holding_a_nul_is_never_handed_to_the_tool_as_another_group(tmp_path):
    """A group id may hold U+0000 (a client's bytes), but no command line carries it: the shell drops a NUL from
    a script's text, so `--group 'a<NUL>b'` reached kafka-consumer-groups.sh as `--group ab` and reset group `ab`
    to a<NUL>b's offsets. apply.sh leaves that group out, and README.txt says how to reset it."""
    from jobs.cli import main
    from tests.coordinator.rowkit import Log

    log = Log()
    log.commit("a\0b", "t", 0, 900)
    log.commit("ab", "t", 0, 7)
    wh = _engine_warehouse(tmp_path / "wh", log, "modern")
    out = tmp_path / "plan"
    r = CliRunner().invoke(main, ["restore-plan", "--warehouse", str(wh), "--as-of", str(log.ts), "--out", str(out)])
    assert r.exit_code == 0, r.output
    index = json.loads((out / "index.json").read_text())
    assert sorted(index.values()) == ["a\0b", "ab"]
    fake = tmp_path / "kcg"
    fake.write_text('#!/bin/sh\nfor a in "$@"; do printf "%s\\0" "$a"; done\nprintf "\\n\\0"\n')
    fake.chmod(0o755)
    env = {**os.environ, "BOOTSTRAP": "b:1", "KAFKA_CONSUMER_GROUPS": str(fake)}
    got = subprocess.run(["sh", str(out / "apply.sh"), "--execute"], env=env, capture_output=True, cwd=tmp_path,
                         check=True).stdout
    calls = [c.strip("\0").split("\0") for c in got.decode().split("\n\0") if c.strip("\0")]
    calls = [c for c in calls if "--group" in c]
    # group ab is reset to its own offsets alone (a dry run, then the execute), never to a<NUL>b's 900
    assert [(c[c.index("--group") + 1], index[Path(c[c.index("--from-file") + 1]).name]) for c in calls] \
        == [("ab", "ab")] * 2
    readme = (out / "README.txt").read_text()
    assert "NOT IN apply.sh" in readme and '"a\\u0000b"' in readme
    assert "1 not in apply.sh (a NUL in the id)" in r.output


def _engine_warehouse(root: Path, log, semantics: str, log_ends=()) -> Path:
    """The engine's snapshot `s` of `log` (rowkit rows), as a rebuild writes it: its tables and its history;
    `log_ends`: its `log_end_offsets` rows (the data topics' log start and end offsets)."""
    import datetime as dt

    from pipelines.coordinator.options import ReplayOptions
    from pipelines.coordinator.shard import replay_shards
    from schemas.tables import SNAPSHOT_TABLES
    from tests.coordinator.rowkit import to_table

    res = replay_shards(to_table(log.rows), ReplayOptions(semantics=semantics, snapshot_id="s"))
    kit = WarehouseKit(root)
    kit.snapshot("s", tables={t: res.tables[t] for t in SNAPSHOT_TABLES if t in res.tables
                              and not (log_ends and t == "log_end_offsets")},
                 as_of=dt.datetime.fromtimestamp(log.ts / 1000, dt.timezone.utc),
                 summary=json.dumps({"semantics": semantics}), log_end_offsets=log_ends)
    kit.append("offset_commits", res.tables["offset_commits"])
    return root


@pytest.mark.parametrize("semantics", ["legacy", "modern"])
def test_a_plan_inside_a_batch_sees_none_of_it_for_any_selection(semantics, tmp_path):
    """A batch of several writes (Kafka 4.0's append linger: CoordinatorRuntime.maybeFlushCurrentBatch; each record
    stamped at its write) was seen whole at its end or not at all (CoordinatorReadEvent.run reads at the last
    committed offset): a plan for a time between its records, for every group or for g alone, whose record in it
    comes before h's, gives g's offset before the batch, as `rebuild --until-time` then does."""
    from pipelines.io.snapshots import DeltaWarehouseReader
    from pipelines.serving.restore_plan import offsets_at
    from tests.coordinator.rowkit import Log

    log = Log()
    log.commit("g", "t", 0, 1)
    with log.batch():
        t = log.commit("g", "t", 0, 2)["timestamp"]
        log.commit("h", "t", 0, 5)
    log.commit("x", "t", 0, 9)
    wh = _engine_warehouse(tmp_path / "wh", log, semantics)
    reader = DeltaWarehouseReader(str(wh))
    snap = reader.snapshot("s")
    engine = _cut_replay(log.rows, semantics, t)
    assert engine == {"g": {("t", 0, 1)}}
    assert _plan_offsets(offsets_at(reader, snap, t)) == engine
    assert _plan_offsets(offsets_at(reader, snap, t, groups=["g"])) == engine


@pytest.mark.parametrize("semantics", ["legacy", "modern"])
def test_changed_since_picks_a_group_whose_transactional_commit_took_effect_since(semantics, tmp_path):
    """A transactional commit changes its group's offsets at its COMMIT marker (Kafka 4.0 OffsetMetadataManager
    .replayEndTransactionMarker; 3.9 GroupMetadataManager.doLoadGroupsAndOffsets at the control batch), not at its
    record: g's offset
    went from 100 to 50 at the marker, after T, though its record came before T. --changed-since T picks g, as
    `changes` from T reports its regression."""
    from jobs.cli import main
    from tests.coordinator.rowkit import Log

    log = Log()
    log.commit("g", "t", 0, 100)
    log.commit("g", "t", 0, 50, pid=5, epoch=0)
    since = log.commit("other", "t", 0, 1)["timestamp"]
    log.marker(5, "COMMIT")
    log.commit("other", "t", 0, 2)
    wh = _engine_warehouse(tmp_path / "wh", log, semantics)
    r = CliRunner().invoke(main, ["changes", "--warehouse", str(wh), "--from", str(since), "--to", str(log.ts),
                                  "--json"])
    assert [(c["kind"], c["group_id"]) for c in json.loads(r.output)] == [("offset_regressed", "g")]
    out = tmp_path / "plan"
    r = CliRunner().invoke(main, ["restore-plan", "--warehouse", str(wh), "--as-of", str(since - 1),
                                  "--changed-since", str(since), "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert json.loads((out / "index.json").read_text()) == {"g.csv": "g"}  # other had no offset yet
    assert (out / "g.csv").read_text() == "t,0,100\n"


@pytest.mark.parametrize("semantics", ["legacy", "modern"])
def test_a_time_before_the_history_is_refused_where_the_answer_is_empty(semantics, tmp_path):
    """`restore-plan --as-of` a year early (2025 for 2026), before the log's first record, wrote an empty plan, exit
    0, and `changes` over a window before it answered nothing, exit 0: "no offset to restore", "nothing changed",
    where the log says nothing of that time (a compacted log's first record is not the first ever written). Each
    is now one line naming the history's first record (exit 2), the API a 400; from the first record on they
    answer as before, and a window that starts before it and ends after does too."""
    from jobs.cli import main
    from tests.coordinator.rowkit import Log

    log = Log()
    first = log.commit("g", "t", 0, 100)["timestamp"]
    log.commit("g", "t", 0, 150)
    wh = _engine_warehouse(tmp_path / "wh", log, semantics)
    early = first - 365 * 86_400_000
    out = tmp_path / "plan"
    r = CliRunner().invoke(main, ["restore-plan", "--warehouse", str(wh), "--as-of", str(early), "--out", str(out)])
    assert (r.exit_code, r.stderr) == (2, f"error: --as-of {_iso(early)} is before the first record of snapshot s's "
                                          f"history, at {_iso(first)}: the log says nothing of that time, so no "
                                          "offset is known to restore (an empty plan would say there is none)\n")
    assert not out.exists()
    r = CliRunner().invoke(main, ["restore-plan", "--warehouse", str(wh), "--as-of", str(first), "--out", str(out)])
    assert r.exit_code == 0 and (out / "g.csv").read_text() == "t,0,100\n", r.output
    r = CliRunner().invoke(main, ["changes", "--warehouse", str(wh), "--from", str(early), "--to", str(first - 1)])
    assert (r.exit_code, r.stdout) == (2, ""), r.output
    assert r.stderr == (f"error: --to {_iso(first - 1)} is before the first record of snapshot s's history, at "
                        f"{_iso(first)}: the log says nothing of that time, so nothing in the window is known (an "
                        "empty answer would say nothing changed)\n")
    r = CliRunner().invoke(main, ["changes", "--warehouse", str(wh), "--from", str(early), "--to", str(log.ts)])
    assert r.exit_code == 0, r.output
    with TestClient(create_app(DeltaWarehouseReader(wh), refresh_interval=0)) as client:
        r = client.get("/changes", params={"from": str(early), "to": str(first - 1)})
        assert r.status_code == 400 and "is before the first record of snapshot s's history" in r.json()["detail"]
        assert client.get("/restore-plan.zip", params={"as_of": str(early)}).status_code == 400
        assert client.get("/restore-plan.zip", params={"as_of": str(first)}).status_code == 200


def test_groups_whose_names_differ_only_in_case_get_files_apart_on_a_case_insensitive_file_system(tmp_path):
    """`Orders.csv` and `orders.csv` are one file on macOS' and Windows' file systems (the plan's zip opened there):
    the second group written overwrote the first's targets, and apply.sh reset both groups from it. Every file
    name of a plan differs from the others beyond case, and still gives its group id back."""
    from jobs.cli import main
    from tests.coordinator.rowkit import Log

    log = Log()
    targets = {"Orders": 11, "orders": 22, "ORDERS.v2": 33, "orders.v2": 44, "Payments": 55}
    for gid, offset in targets.items():
        log.commit(gid, "t", 0, offset)
    wh = _engine_warehouse(tmp_path / "wh", log, "legacy")
    out = tmp_path / "plan"
    r = CliRunner().invoke(main, ["restore-plan", "--warehouse", str(wh), "--as-of", str(log.ts), "--out", str(out)])
    assert r.exit_code == 0, r.output
    index = json.loads((out / "index.json").read_text())
    on_insensitive_fs: dict[str, str] = {}
    for name in sorted(index):  # a case-insensitive file system keeps one file per name folded to lower case
        on_insensitive_fs[name.lower()] = (out / name).read_text()
    assert {index[n]: on_insensitive_fs[n.lower()] for n in index} == {g: f"t,0,{o}\n" for g, o in targets.items()}
    for name, gid in index.items():
        stem = name.removesuffix(".csv")
        assert stem == gid or unquote(stem[1:]) == gid
    assert index["Payments.csv"] == "Payments"  # no other group near it: named as before


@pytest.mark.parametrize("semantics", ["legacy", "modern"])
def test_a_partition_committed_since_that_held_no_offset_then_is_named_as_not_reset(semantics, tmp_path):
    """A reset that committed every partition, t-1 for the first time: put back at TIME, the group held t-0 alone,
    and `--reset-offsets --from-file` touches only the file's partitions (4.0 ConsumerGroupCommand
    .resetOffsetsForInactiveGroup), so t-1 stays at the reset's 0. README.txt names it, with what it holds now,
    rather than leave the group looking restored; a partition the group held then and now is not named."""
    from jobs.cli import main
    from tests.coordinator.rowkit import Log

    log = Log()
    log.commit("g", "t", 0, 100)
    log.commit("h", "t", 1, 5)
    as_of = log.ts
    log.commit("g", "t", 0, 0)
    log.commit("g", "t", 1, 0)
    wh = _engine_warehouse(tmp_path / "wh", log, semantics)
    out = tmp_path / "plan"
    r = CliRunner().invoke(main, ["restore-plan", "--warehouse", str(wh), "--as-of", str(as_of), "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert (out / "g.csv").read_text() == "t,0,100\n"
    readme = (out / "README.txt").read_text()
    section = readme.split("NOT RESET")[1].split("\n\n")[0]
    assert section.splitlines()[1:] == ['  "g" (g.csv) t-1: 0']


def test_a_target_below_the_log_start_is_said_to_go_to_the_log_start_as_the_tool_moves_it(tmp_path):
    """kafka-consumer-groups.sh --reset-offsets --from-file moves a target below the partition's log start to the
    log start (4.0 ConsumerGroupCommand.checkOffsetsRange; 2.8's Scala command alike): the consumer resumes at the
    first record still held, not wherever its auto.offset.reset (`latest`: the log end) would put it. README.txt
    says so."""
    from jobs.cli import main
    from tests.coordinator.rowkit import Log

    log = Log()
    log.commit("g", "t", 0, 100)
    log.commit("g", "t", 0, 900)
    wh = _engine_warehouse(tmp_path / "wh", log, "legacy", log_ends=[
        {"topic": "t", "partition": 0, "log_end_offset": 1000, "log_start_offset": 400}])
    out = tmp_path / "plan"
    r = CliRunner().invoke(main, ["restore-plan", "--warehouse", str(wh), "--as-of", str(log.ts - 1), "--out",
                                  str(out)])
    assert r.exit_code == 0, r.output
    assert (out / "g.csv").read_text() == "t,0,100\n"
    below = (out / "README.txt").read_text().split("BELOW LOG START")[1].split("\n\n")[0]
    assert "the reset moves each to the log start" in below and "auto.offset.reset" not in below
    assert below.splitlines()[1:] == ['  "g" (g.csv) t-0: target 100 < log start 400: the reset skips 300 records']


@pytest.mark.slow
def test_zip_holds_the_same_files(broker, tmp_path):
    from pipelines.io.snapshots import DeltaWarehouseReader
    from pipelines.serving.restore_plan import plan_files, restore_plan, restore_plan_zip

    b = broker["kip848"]
    reader = DeltaWarehouseReader(b.wh)
    plan = restore_plan(reader, reader.snapshot("base"), _end(b.rows))
    z = zipfile.ZipFile(io.BytesIO(restore_plan_zip(plan)))
    files = plan_files(plan)
    assert {n.removeprefix("restore-plan/") for n in z.namelist()} == set(files)
    for name, text in files.items():
        assert z.read(f"restore-plan/{name}").decode() == text
    assert (z.getinfo("restore-plan/apply.sh").external_attr >> 16) & 0o111


@pytest.mark.slow
def test_selection_and_flags(broker, tmp_path):
    """--group, --group-regex, --changed-since select; README.txt flags the groups deleted since and the
    groups with members (the reset refuses them)."""
    from pipelines.io.snapshots import DeltaWarehouseReader
    from pipelines.serving.restore_plan import restore_plan

    b = broker["deletes"]
    reader = DeltaWarehouseReader(b.wh)
    snap = reader.snapshot("base")
    removed = {r["group_id"] for r in reader.snapshot_table("removed_groups", snap).to_pylist()}
    live = {r["group_id"]: r for r in reader.snapshot_table("loaded_groups", snap).to_pylist()}
    # a time past the snapshot's as-of is refused, and one before its history where no group had an offset
    times = [t for t in _times(b.rows) if _start(reader, snap) <= t <= _end(b.rows)]
    # the earliest moment at which a since-deleted group had offsets
    plans = ((t, restore_plan(reader, snap, t)) for t in times)
    t, plan = next((t, p) for t, p in plans if any(g.state_now is None and g.file for g in p.groups))
    for g in plan.groups:
        if g.group_id in removed and g.group_id not in live:
            assert g.state_now is None and g.gone_reason.startswith("deleted")
        if g.group_id in live:
            assert g.refused == (live[g.group_id]["member_count"] > 0)
    some = sorted(g.group_id for g in plan.groups if g.file)[:2]
    assert [g.group_id for g in restore_plan(reader, snap, t, groups=some).groups] == some
    rx = restore_plan(reader, snap, t, group_regex="^dl-re")
    assert rx.groups and all(g.group_id.startswith("dl-re") for g in rx.groups)
    late = restore_plan(reader, snap, t, changed_since_ms=times[-3])
    every = restore_plan(reader, snap, t, changed_since_ms=0)
    assert {g.group_id for g in late.groups} < {g.group_id for g in every.groups}


@pytest.mark.slow
def test_bad_input_is_one_line_and_exit_2(broker, tmp_path):
    wh = str(broker["transactions"].wh)
    for args in (["--as-of", "yesterday"], ["--as-of", "1", "--group-regex", "("],
                 ["--as-of", "1", "--changed-since", "soon"], ["--as-of", "1", "--snapshot", "nope"],
                 ["--as-of", "1", "--group", "a", "--group-regex", "a"]):
        r = _cli("--warehouse", wh, "--out", str(tmp_path / "o"), *args)
        assert r.exit_code == 2, (args, r.output)
        assert "Traceback" not in r.output and len(r.stderr.strip().splitlines()) <= 3, r.output
    r = _cli("--warehouse", str(tmp_path / "none"), "--as-of", "1", "--out", str(tmp_path / "o"))
    assert r.exit_code == 2 and "Traceback" not in r.output


@pytest.mark.slow
def test_api_route_serves_the_plan(broker):
    b = broker["transactions"]
    reader = DeltaWarehouseReader(b.wh)
    t = _end(b.rows)
    with TestClient(create_app(reader)) as client:
        r = client.get("/restore-plan.zip", params={"as_of": _iso(t), "group": ["tx-g1"], "snapshot": "base"})
        assert r.status_code == 200 and r.headers["content-type"] == "application/zip"
        z = zipfile.ZipFile(io.BytesIO(r.content))
        assert json.loads(z.read("restore-plan/index.json")) == {"tx-g1.csv": "tx-g1"}
        lines = z.read("restore-plan/tx-g1.csv").decode().splitlines()
        assert {tuple(x.split(",")) for x in lines} == {(tp, str(p), str(o)) for tp, p, o in
                                                        _cut_replay(b.rows, "modern", t)["tx-g1"]}
        assert client.get("/restore-plan.zip", params={"as_of": str(t)}).status_code == 200  # epoch ms too
        assert client.get("/restore-plan.zip", params={"as_of": "nope"}).status_code == 400
        assert client.get("/restore-plan.zip", params={"as_of": str(t), "group_regex": "("}).status_code == 400
        assert client.get("/restore-plan.zip", params={"as_of": str(t), "snapshot": "nope"}).status_code == 404


@pytest.mark.slow
def test_a_time_after_the_snapshot_s_as_of_is_refused(broker, tmp_path):
    """--as-of past the snapshot's as-of planned from where its history ends (and expired offsets at TIME that may
    have been committed again since) without a word: an on-call engineer applying it rewound groups to that end.
    Now the CLI refuses it in one line (exit 2) naming both times, the API with a 400; at the as-of it plans."""
    b = broker["deletes"]
    end = _end(b.rows)
    for t in (end + 1, end + 7 * 86_400_000):
        r = _cli("--warehouse", str(b.wh), "--as-of", str(t), "--out", str(tmp_path / "late"))
        assert r.exit_code == 2 and r.stderr.count("\n") == 1, r.output
        assert r.stderr.startswith(f"error: --as-of {_iso(t)} is after snapshot base's as-of {_iso(end)}"), r.stderr
        assert not (tmp_path / "late").exists()
    # a selection of the groups changed or damaged since a time past it was an empty plan, exit 0
    for option in ("--changed-since", "--damaged-since"):
        r = _cli("--warehouse", str(b.wh), "--as-of", str(end), option, str(end + 1), "--out", str(tmp_path / "late"))
        assert r.exit_code == 2 and r.stderr.count("\n") == 1, r.output
        assert r.stderr.startswith(f"error: {option} {_iso(end + 1)} is after snapshot base's as-of"), r.stderr
    with TestClient(create_app(DeltaWarehouseReader(b.wh), refresh_interval=0)) as client:
        r = client.get("/restore-plan.zip", params={"as_of": str(end + 1)})
        assert r.status_code == 400 and f"is after snapshot base's as-of {_iso(end)}" in r.json()["detail"], r.text
        assert client.get("/restore-plan.zip", params={"as_of": str(end)}).status_code == 200
    assert _cli("--warehouse", str(b.wh), "--as-of", str(end), "--out", str(tmp_path / "end")).exit_code == 0


def test_a_history_written_before_restore_plans_is_refused_in_each_edge_s_words(tmp_path):
    """offset_commits rows without their batch positions (as warehouse_kit writes them, as a warehouse written
    before restore plans holds them): the plan is refused. The library's reason names no CLI flag, so the API
    answers it as it is (404); the CLI adds the flag of the what-if run that answers instead."""
    kit = WarehouseKit(tmp_path / "wh")
    kit.snapshot("s1", groups=[group("g", members=0, state="Empty")], offsets=[offset("g", "t", 0, 5, t=1.0)],
                 commits=[commit("g", "t", 0, 5, t=1.0)], as_of=ts(10))
    as_of = _iso(int(ts(5).timestamp() * 1000))
    with TestClient(create_app(DeltaWarehouseReader(kit.root), refresh_interval=0)) as client:
        r = client.get("/restore-plan.zip", params={"as_of": as_of})
    assert r.status_code == 404, r.text
    assert "written before restore plans" in r.json()["detail"] and not re.search(r"--\w", r.json()["detail"])
    res = _cli("--warehouse", str(kit.root), "--as-of", as_of, "--out", str(tmp_path / "out"))
    assert res.exit_code == 2 and "written before restore plans" in res.output, res.output
    assert f"rebuild --until-time {as_of}" in res.output


# ------------------------------------------------------------------------------------------ a what-if snapshot's end
@pytest.fixture(scope="module")
def cut_before_a_group(tmp_path_factory):
    """A generated log rebuilt whole (`base`) and cut by `--until-time` 1 ms before the first record of the group
    whose records start last (`cut`): the history's version `cut` pinned holds that group's records, past its end."""
    from jobs.cli import main
    from pipelines.decoding.reader import iter_decoded_rows

    tmp = tmp_path_factory.mktemp("cut-before-a-group")
    dump = tmp / "dump"
    r = CliRunner().invoke(main, ["sample", str(dump), "--records", "4000", "--groups", "40", "--partitions", "5",
                                  "--seed", "7"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    first: dict[str, int] = {}
    for row in iter_decoded_rows([dump]):
        if row["group_id"] is not None:
            first[row["group_id"]] = min(row["timestamp"], first.get(row["group_id"], row["timestamp"]))
    late = max(first, key=first.get)
    early = min(first, key=first.get)
    cut = first[late] - 1
    assert first[early] <= cut, "a group seen before the cut"
    wh = tmp / "wh"
    for sid, args in (("base", ()), ("cut", ("--until-time", _iso(cut)))):
        rc, summary = cli_rebuild(wh, [dump], sid, *args)
        assert rc == 0, summary
    return SimpleNamespace(wh=wh, late=late, early=early, cut=cut)


@pytest.mark.slow
def test_a_what_if_snapshot_refuses_a_group_first_seen_after_its_cut(cut_before_a_group, tmp_path):
    """restore-plan of a what-if snapshot took a --group whose records all came after its cut (the history's
    version it pinned holds them: it is every run's) and listed it under NOTHING TO RESTORE, as if the snapshot knew
    the group and it had no offset then; `describe` of the same snapshot says the group does not exist. It is
    refused as an id the snapshot does not know is (exit 2, HTTP 404, `changes` too), saying when the group's first
    offset commit came, and a --group-regex matching it alone as one matching nothing; the scheduled snapshot,
    which read those records, still plans it (nothing to restore then)."""
    from jobs.cli import main
    from pipelines.times import parse_time_ms

    c = cut_before_a_group
    as_of = _iso(c.cut)
    r = CliRunner().invoke(main, ["restore-plan", "--warehouse", str(c.wh), "--snapshot", "cut", "--as-of", as_of,
                                  "--group", c.late, "--group", c.early, "--out", str(tmp_path / "plan")])
    said = re.fullmatch(rf"error: (group {re.escape(repr(c.late))} does not exist in snapshot 'cut': its first offset "
                        rf"commit came at (\S+), after the snapshot's log ends at {re.escape(_iso(c.cut)[:-1])}000Z)"
                        r"( \(did you mean .*\?\))?\n", r.stderr)
    assert r.exit_code == 2 and said, r.output
    assert parse_time_ms(said.group(2), what="its first commit") > c.cut  # a reader saw it after the cut
    said = said.group(1)
    assert not (tmp_path / "plan").exists()
    # a regex that matches that group alone matches no group of the snapshot's, as a mistyped one
    r = CliRunner().invoke(main, ["restore-plan", "--warehouse", str(c.wh), "--snapshot", "cut", "--as-of", as_of,
                                  "--group-regex", f"^{re.escape(c.late)}$", "--out", str(tmp_path / "plan")])
    assert (r.exit_code, r.stderr) == (2, f"error: no group id in snapshot 'cut' matches the group regex "
                                          f"{'^' + re.escape(c.late) + '$'!r}\n"), r.output
    r = CliRunner().invoke(main, ["changes", "--warehouse", str(c.wh), "--snapshot", "cut", "--from", _iso(0),
                                  "--to", as_of, "--group", c.late])
    assert r.exit_code == 2 and r.stderr.startswith(f"error: {said}"), r.output
    with TestClient(create_app(DeltaWarehouseReader(c.wh), refresh_interval=0)) as client:
        h = client.get("/restore-plan.zip", params={"snapshot": "cut", "as_of": as_of, "group": c.late})
        assert h.status_code == 404 and h.json()["detail"] == r.stderr[len("error: "):].rstrip("\n")
        assert client.get("/restore-plan.zip", params={"snapshot": "cut", "as_of": as_of,
                                                       "group": c.early}).status_code == 200
        # the group's own routes tell the same story: its commits and events are past the snapshot's end
        for route in (f"/groups/{c.late}/commits", f"/groups/{c.late}/history"):
            h = client.get(route, params={"snapshot": "cut"})
            assert (h.status_code, h.json()["detail"]) == (404, r.stderr[len("error: "):].rstrip("\n")), route
        assert client.get(f"/groups/{c.early}/commits", params={"snapshot": "cut"}).status_code == 200
    r = CliRunner().invoke(main, ["restore-plan", "--warehouse", str(c.wh), "--snapshot", "base", "--as-of",
                                  as_of, "--group", c.late, "--out", str(tmp_path / "base")])
    assert r.exit_code == 0, r.output
    text = (tmp_path / "base" / "README.txt").read_text()
    assert f'NOTHING TO RESTORE: selected groups with no committed offset at that time (no file): 1\n  "{c.late}"' \
        in text
