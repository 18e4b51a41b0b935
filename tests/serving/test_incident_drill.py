"""The incident runbook as an on-call engineer runs it, on a crafted log (no Spark): a group reset to 0 on several
partitions at exactly 00:05:00.000, a group deleted, a healthy group committing on. The damaged-group plan picks the
reset and the deleted group and not the healthy one; a mistyped id is refused with the nearest ids; a reused --out is
refused; apply.sh survives a failing group and a rerun applies only the rest."""
from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient

from jobs.cli import main
from pipelines.coordinator.options import ReplayOptions
from pipelines.coordinator.shard import replay_shards
from schemas.tables import SNAPSHOT_TABLES
from tests.coordinator.rowkit import Log, member, to_table
from tests.serving.warehouse_kit import WarehouseKit

T0 = int(dt.datetime(2026, 11, 21, 0, 0, tzinfo=dt.timezone.utc).timestamp() * 1000)
RESET_AT = T0 + 5 * 60_000  # 00:05:00.000


def _log(healthy: int = 0) -> list[dict]:
    """The drill's log; `healthy`: that many more groups created and committing in the minute before the reset."""
    log = Log()
    rows = []

    def at(ms, row):
        row["timestamp"] = ms
        if row.get("commit_timestamp") is not None:
            row["commit_timestamp"] = ms
        rows.append(row)

    for g in ("audit-sink-18", "billing-etl-5", "payments-old"):
        at(T0, log.group(g, [member(f"{g}-m", topics=("t",), assigned=(("t", (0, 1, 2)),))], generation=1))
    for minute in range(5):
        for p in range(3):
            at(T0 + minute * 60_000 + 1000, log.commit("audit-sink-18", "t", p, 1000 + 100 * minute))
            at(T0 + minute * 60_000 + 2000, log.commit("billing-etl-5", "t", p, 500 + 100 * minute))
            at(T0 + minute * 60_000 + 3000, log.commit("payments-old", "t", p, 700 + 10 * minute))
    for p in range(3):  # the incident: a reset to 0 at exactly 00:05:00.000
        at(RESET_AT, log.commit("audit-sink-18", "t", p, 0))
    for p in range(3):
        at(RESET_AT + 2000, log.commit("billing-etl-5", "t", p, 1100))  # healthy: committing on
        at(RESET_AT + 3000, log.offset_tombstone("payments-old", "t", p))
    at(RESET_AT + 4000, log.group_tombstone("payments-old"))
    for i in range(healthy):
        g = f"healthy-{i:02d}"
        at(RESET_AT - 30_000 + i, log.group(g, [member(f"{g}-m", topics=("t",), assigned=(("t", (0,)),))]))
        at(RESET_AT - 20_000 + i, log.commit(g, "t", 0, 10))
        at(RESET_AT + 30_000 + i, log.commit(g, "t", 0, 20))
    at(RESET_AT + 60_000, log.commit("billing-etl-5", "t", 0, 1200))
    rows.sort(key=lambda r: r["timestamp"])  # one log, in time order: offsets are given again below
    for i, r in enumerate(rows):
        r["offset"] = r["batch_base_offset"] = r["batch_first_offset"] = r["batch_last_offset"] = i
    return rows


def drill_warehouse(root, healthy: int = 0):
    """The engine's snapshot `nightly` of the drill's log, written as a rebuild writes it."""
    rows = _log(healthy)
    res = replay_shards(to_table(rows), ReplayOptions(semantics="legacy", snapshot_id="nightly"))
    kit = WarehouseKit(root)
    as_of = dt.datetime.fromtimestamp(max(r["timestamp"] for r in rows) / 1000, dt.timezone.utc)
    kit.snapshot("nightly", tables={t: res.tables[t] for t in SNAPSHOT_TABLES if t in res.tables}, as_of=as_of)
    kit.append("offset_commits", res.tables["offset_commits"])
    return root


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory):
    return drill_warehouse(tmp_path_factory.mktemp("drill"))


def _cli(*args):
    return CliRunner().invoke(main, list(args))


def test_changes_show_the_reset_and_the_deletion_at_the_millisecond(warehouse):
    r = _cli("changes", "--warehouse", str(warehouse), "--from", str(RESET_AT), "--to", str(RESET_AT + 10_000),
             "--json")
    assert r.exit_code == 0, r.output
    items = json.loads(r.output)
    regressed = [c for c in items if c["kind"] == "offset_regressed"]
    assert {c["group_id"] for c in regressed} == {"audit-sink-18"} and len(regressed) == 3
    assert all(c["time"] == "2026-11-21T00:05:00.000Z" for c in regressed)
    assert [c["group_id"] for c in items if c["kind"] == "group_deleted"] == ["payments-old"]
    assert not [c for c in items if c["group_id"] == "billing-etl-5"]


def test_the_damaged_group_plan_picks_the_damaged_groups_only(warehouse, tmp_path):
    out = tmp_path / "plan"
    r = _cli("restore-plan", "--warehouse", str(warehouse), "--as-of", str(RESET_AT - 1), "--out", str(out),
             "--damaged-since", "2026-11-21T00:05:00Z")
    assert r.exit_code == 0, r.output
    assert set(json.loads((out / "index.json").read_text()).values()) == {"audit-sink-18", "payments-old"}
    readme = (out / "README.txt").read_text()
    # each partition: what is committed now, the target, the difference
    assert "t-0: 0 -> 1400 (+1,400)" in readme
    assert "deleted at 2026-11-21T00:05:04.000Z" in readme  # to the millisecond
    assert "2 groups, 6 partitions" in readme
    # --changed-since includes its time: the group reset at exactly that millisecond is in
    since = tmp_path / "since"
    assert _cli("restore-plan", "--warehouse", str(warehouse), "--as-of", str(RESET_AT - 1), "--out", str(since),
                "--changed-since", str(RESET_AT + 60_000)).exit_code == 0
    assert set(json.loads((since / "index.json").read_text()).values()) == {"billing-etl-5"}


@pytest.mark.parametrize("args", [
    ["changes", "--from", str(T0), "--to", str(RESET_AT), "--group", "audit-sink-81"],
    ["restore-plan", "--as-of", str(T0), "--out", "OUT", "--group", "audit-sink-81"],
])
def test_a_mistyped_group_is_refused_with_the_nearest_ids(warehouse, tmp_path, args):
    args = [str(tmp_path / "o") if a == "OUT" else a for a in args]
    r = _cli(args[0], "--warehouse", str(warehouse), *args[1:])
    assert r.exit_code == 2
    assert r.output.count("\n") == 1 and "'audit-sink-81'" in r.output and "did you mean 'audit-sink-18'" in r.output
    # a deleted group is known: its deletion is what the incident is about
    ok = _cli(args[0], "--warehouse", str(warehouse), *[("payments-old" if a == "audit-sink-81" else a)
                                                         for a in args[1:]])
    assert ok.exit_code == 0, ok.output


def test_the_api_answers_404_for_a_mistyped_group(warehouse):
    from jobs.api import create_app
    from pipelines.io.snapshots import DeltaWarehouseReader

    with TestClient(create_app(DeltaWarehouseReader(str(warehouse)))) as client:
        r = client.get("/changes", params={"from": str(T0), "to": str(RESET_AT), "group": "audit-sink-81"})
        assert r.status_code == 404 and "audit-sink-18" in r.json()["detail"]
        r = client.get("/restore-plan.zip", params={"as_of": str(T0), "group": "audit-sink-81"})
        assert r.status_code == 404
        r = client.get("/restore-plan.zip", params={"as_of": str(RESET_AT - 1), "damaged_since": str(RESET_AT)})
        assert r.status_code == 200


def test_a_reused_out_is_refused_unless_forced(warehouse, tmp_path):
    out = tmp_path / "plan"
    assert _cli("restore-plan", "--warehouse", str(warehouse), "--as-of", str(RESET_AT - 1), "--out",
                str(out)).exit_code == 0
    assert len(list(out.glob("*.csv"))) == 3
    again = ["restore-plan", "--warehouse", str(warehouse), "--as-of", str(RESET_AT - 1), "--out", str(out),
             "--group", "audit-sink-18"]
    r = _cli(*again)
    assert r.exit_code == 2 and r.output.count("\n") == 1 and "not empty" in r.output
    assert _cli(*again, "--force").exit_code == 0
    assert [p.name for p in out.glob("*.csv")] == ["audit-sink-18.csv"]  # the earlier plan's files are gone


def test_apply_sh_goes_on_past_a_failing_group_and_a_rerun_applies_only_the_rest(warehouse, tmp_path):
    out = tmp_path / "plan"
    assert _cli("restore-plan", "--warehouse", str(warehouse), "--as-of", str(RESET_AT - 1), "--out",
                str(out)).exit_code == 0
    calls, broken = tmp_path / "calls", tmp_path / "broken"
    fake = tmp_path / "kcg"
    # a kafka-consumer-groups that fails billing-etl-5's --execute while `broken` exists
    fake.write_text(f'''#!/bin/sh
group=""; mode=""
while [ $# -gt 0 ]; do case "$1" in --group) group="$2"; shift;; --execute|--dry-run) mode="$1";; esac; shift; done
echo "$group $mode" >> {calls}
if [ "$mode" = --execute ] && [ "$group" = billing-etl-5 ] && [ -e {broken} ]; then echo "broker said no" >&2; exit 1; fi
''')
    fake.chmod(0o755)
    env = {**os.environ, "BOOTSTRAP": "b:9092", "KAFKA_CONSUMER_GROUPS": str(fake)}
    dry = subprocess.run(["sh", str(out / "apply.sh")], env=env, capture_output=True, text=True)
    assert dry.returncode == 0 and "3 dry-run ok, 0 failed" in dry.stdout and not (out / "applied.txt").exists()
    broken.touch()
    calls.unlink()
    first = subprocess.run(["sh", str(out / "apply.sh"), "--execute"], env=env, capture_output=True, text=True)
    assert first.returncode == 1
    assert "2 applied, 1 failed, 0 skipped" in first.stdout and "billing-etl-5.csv" in first.stderr
    executed = [ln for ln in calls.read_text().splitlines() if ln.endswith("--execute")]
    assert sorted(executed) == ["audit-sink-18 --execute", "billing-etl-5 --execute", "payments-old --execute"]
    assert sorted((out / "applied.txt").read_text().split()) == ["audit-sink-18.csv", "payments-old.csv"]
    broken.unlink()
    calls.unlink()
    rerun = subprocess.run(["sh", str(out / "apply.sh"), "--execute"], env=env, capture_output=True, text=True)
    assert rerun.returncode == 0 and "1 applied, 0 failed, 2 skipped" in rerun.stdout
    assert [ln for ln in calls.read_text().splitlines() if ln.endswith("--execute")] == ["billing-etl-5 --execute"]


def test_apply_sh_counts_a_group_the_tool_refuses_with_exit_0_as_failed(warehouse, tmp_path):
    """kafka-consumer-groups.sh prints `Error: Assignments can only be reset if the group … is inactive` and exits
    0 (`ConsumerGroupCommand.resetOffsets` puts an empty plan; `run` catches every failure the same way): apply.sh
    counted the group applied and wrote it to applied.txt, so a rerun skipped a group that was never reset."""
    out = tmp_path / "plan"
    assert _cli("restore-plan", "--warehouse", str(warehouse), "--as-of", str(RESET_AT - 1), "--out",
                str(out)).exit_code == 0
    fake = tmp_path / "kcg"
    fake.write_text('''#!/bin/sh
group=""
while [ $# -gt 0 ]; do case "$1" in --group) group="$2"; shift;; esac; shift; done
if [ "$group" = billing-etl-5 ]; then
  printf '\\nError: Assignments can only be reset if the group %s is inactive, but the current state is Stable.\\n' "$group"
  printf '\\nGROUP                          TOPIC                          PARTITION  NEW-OFFSET\\n'
fi
exit 0
''')
    fake.chmod(0o755)
    env = {**os.environ, "BOOTSTRAP": "b:9092", "KAFKA_CONSUMER_GROUPS": str(fake)}
    r = subprocess.run(["sh", str(out / "apply.sh"), "--execute"], env=env, capture_output=True, text=True)
    assert r.returncode == 1 and "2 applied, 1 failed, 0 skipped" in r.stdout, r
    assert "Error: Assignments can only be reset" in r.stdout and "FAILED billing-etl-5.csv" in r.stderr
    assert sorted((out / "applied.txt").read_text().split()) == ["audit-sink-18.csv", "payments-old.csv"]


def test_apply_sh_reads_its_own_directory_whatever_cdpath_says(warehouse, tmp_path):
    """`sh plan/apply.sh` with CDPATH naming a directory that holds another `plan`: its `cd` went there (and printed
    it), so every group's --from-file named a file of that other plan, or none."""
    out = tmp_path / "plan"
    assert _cli("restore-plan", "--warehouse", str(warehouse), "--as-of", str(RESET_AT - 1), "--out",
                str(out)).exit_code == 0
    (tmp_path / "decoy" / "plan").mkdir(parents=True)
    calls, fake = tmp_path / "calls", tmp_path / "kcg"
    fake.write_text(f'''#!/bin/sh
while [ $# -gt 0 ]; do case "$1" in --from-file) echo "$2" >> {calls}; [ -f "$2" ] || exit 1; shift;; esac; shift; done
''')
    fake.chmod(0o755)
    env = {**os.environ, "BOOTSTRAP": "b:9092", "KAFKA_CONSUMER_GROUPS": str(fake), "CDPATH": str(tmp_path / "decoy")}
    r = subprocess.run(["sh", "plan/apply.sh"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert r.returncode == 0 and "3 dry-run ok, 0 failed" in r.stdout, r
    assert {Path(p).parent for p in calls.read_text().splitlines()} == {out}


@pytest.mark.parametrize("args", [["--execute", "billing-etl-5"], ["--execute", "--group", "billing-etl-5"],
                                  ["--dry-run", "--execute"], [""], ["--exeucte"]])
def test_apply_sh_refuses_any_argument_but_one_mode(warehouse, tmp_path, args):
    """`sh apply.sh --execute billing-etl-5`, meant for one group, read its first argument alone and reset every group
    of the plan; `sh apply.sh "$MODE"` with MODE unset ran a dry run. Anything but no argument or one mode is now a
    usage line, exit 2, before the tool runs for any group."""
    out = tmp_path / "plan"
    assert _cli("restore-plan", "--warehouse", str(warehouse), "--as-of", str(RESET_AT - 1), "--out",
                str(out)).exit_code == 0
    calls, fake = tmp_path / "calls", tmp_path / "kcg"
    fake.write_text(f'#!/bin/sh\necho "$@" >> {calls}\n')
    fake.chmod(0o755)
    env = {**os.environ, "BOOTSTRAP": "b:9092", "KAFKA_CONSUMER_GROUPS": str(fake)}
    r = subprocess.run(["sh", str(out / "apply.sh"), *args], env=env, capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.startswith("usage: apply.sh") and r.stderr.count("\n") == 1, r
    assert not calls.exists() and not (out / "applied.txt").exists()
    # no argument is the dry run its usage line says
    r = subprocess.run(["sh", str(out / "apply.sh")], env=env, capture_output=True, text=True)
    assert r.returncode == 0 and "3 dry-run ok" in r.stdout and not (out / "applied.txt").exists()


def test_an_empty_group_regex_is_refused_not_taken_for_every_group(warehouse, tmp_path):
    """`restore-plan --group-regex "$UNSET"` matched every group id: a plan of every group of the cluster (here all
    three, the healthy billing-etl-5 too), exit 0, where `--group ""` is refused. An empty regex is now refused in
    one line (exit 2), by `changes` too, and the API answers 400 for an empty `group_regex` on both routes."""
    out = tmp_path / "plan"
    r = _cli("restore-plan", "--warehouse", str(warehouse), "--as-of", str(RESET_AT - 1), "--out", str(out),
             "--group-regex", "")
    assert r.exit_code == 2 and r.output.startswith("error: --group-regex '': an empty regex"), r.output
    assert r.output.count("\n") == 1 and not out.exists()
    r = _cli("changes", "--warehouse", str(warehouse), "--from", str(T0), "--to", str(RESET_AT), "--group-regex", "")
    assert r.exit_code == 2 and r.output.count("\n") == 1 and "an empty regex" in r.output, r.output
    from jobs.api import create_app
    from pipelines.io.snapshots import DeltaWarehouseReader

    with TestClient(create_app(DeltaWarehouseReader(str(warehouse)))) as client:
        for route, params in (("/changes", {"from": str(T0), "to": str(RESET_AT)}),
                              ("/restore-plan.zip", {"as_of": str(RESET_AT - 1)}),
                              ("/restore-plan.zip", {"as_of": str(RESET_AT - 1), "damaged_since": str(RESET_AT)})):
            r = client.get(route, params={**params, "group_regex": ""})
            assert r.status_code == 400 and r.json()["detail"].startswith("group_regex '': an empty regex"), r.text


def test_changed_since_on_a_what_if_snapshot_stops_at_its_end(tmp_path):
    """The history is every run's: a what-if snapshot cut at 00:04:01.500 reads a version holding the nightly run's
    later records, and `restore-plan --snapshot before --changed-since 00:04:00.500` picked billing-etl-5 and
    payments-old for their commits from 00:04:02 on, which that snapshot never read (`changes` on it, and its
    state, know of none of them). The selection now stops at the snapshot's end, as `changes` does."""
    root = drill_warehouse(tmp_path / "wh")
    cut = T0 + 4 * 60_000 + 1500
    rows = [r for r in _log() if r["timestamp"] <= cut]
    res = replay_shards(to_table(rows), ReplayOptions(semantics="legacy", snapshot_id="before"))
    at = dt.datetime.fromtimestamp(cut / 1000, dt.timezone.utc)
    WarehouseKit(root).snapshot("before", tables={t: res.tables[t] for t in SNAPSHOT_TABLES if t in res.tables},
                                as_of=at, kind="what-if", summary=json.dumps({"log_until": at.isoformat()}))
    since = str(cut - 1000)
    out = tmp_path / "plan"
    r = _cli("restore-plan", "--warehouse", str(root), "--snapshot", "before", "--as-of", str(cut), "--out", str(out),
             "--changed-since", since)
    assert r.exit_code == 0, r.output
    ch = _cli("changes", "--warehouse", str(root), "--snapshot", "before", "--from", since, "--to", str(cut), "--json")
    assert {c["group_id"] for c in json.loads(ch.output)} <= {"audit-sink-18"}
    assert set(json.loads((out / "index.json").read_text()).values()) == {"audit-sink-18"}
    # the nightly snapshot, whose end is the log's, still sees the three change from then on
    out = tmp_path / "nightly"
    assert _cli("restore-plan", "--warehouse", str(root), "--as-of", str(cut), "--out", str(out),
                "--changed-since", since).exit_code == 0
    assert set(json.loads((out / "index.json").read_text()).values()) == {"audit-sink-18", "billing-etl-5",
                                                                         "payments-old"}
