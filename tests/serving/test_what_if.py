"""What-if snapshots (runs.kind = what-if: a run with --as-of/--until-*) are served by id only: describe, lookup, sql,
reset-plan and the API default to the latest succeeded scheduled snapshot, whatever was written after it."""
from __future__ import annotations

import json
from datetime import timedelta

import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient

from jobs.cli import main

from .warehouse_kit import WarehouseKit, group, offset, ts


@pytest.fixture()
def kit(tmp_path) -> WarehouseKit:
    """`sched` (scheduled), then two newer what-if snapshots of `payments` and a failed scheduled run."""
    k = WarehouseKit(tmp_path / "wh")
    k.snapshot("sched", groups=[group("payments")], offsets=[offset("payments", "orders", 0, 500, t=10)], as_of=ts(20))
    k.snapshot("past", groups=[group("payments")], offsets=[offset("payments", "orders", 0, 120, t=5)], as_of=ts(6),
               kind="what-if")
    k.snapshot("what-if-2", groups=[group("payments"), group("other")],
               offsets=[offset("payments", "orders", 0, 130, t=7), offset("other", "orders", 1, 1, t=7)], as_of=ts(8),
               kind="what-if")
    k.snapshot("broken", status="failed", groups=[group("ghost")], kind="scheduled")
    return k


def cli(kit, *args):
    r = CliRunner().invoke(main, [args[0], "--warehouse", str(kit.root), *args[1:]], catch_exceptions=False)
    return r


def committed(describe_out: str) -> list[str]:
    return [line.split()[3] for line in describe_out.splitlines()[2:] if line.strip()]


def test_cli_defaults_to_the_scheduled_snapshot_and_reaches_what_if_ones_by_id(kit):
    assert committed(cli(kit, "describe", "payments").stdout) == ["500"]
    assert committed(cli(kit, "describe", "payments", "--snapshot", "past").stdout) == ["120"]

    default = json.loads(cli(kit, "lookup", "--group", "payments").stdout)
    assert default["snapshot_id"] == "sched" and default["offsets"][0]["committed_offset"] == 500
    by_id = json.loads(cli(kit, "lookup", "--group", "payments", "--snapshot", "what-if-2").stdout)
    assert by_id["snapshot_id"] == "what-if-2" and by_id["offsets"][0]["committed_offset"] == 130
    assert cli(kit, "lookup", "--group", "other").exit_code == 2  # only in a what-if snapshot

    q = "select max(committed_offset) as o from loaded_offsets"
    assert json.loads(cli(kit, "sql", q, "--format", "json").stdout) == [{"o": 500}]
    assert json.loads(cli(kit, "sql", q, "--format", "json", "--snapshot", "past").stdout) == [{"o": 120}]
    # `runs` stays whole, with every kind
    runs = json.loads(cli(kit, "sql", "select snapshot_id, kind from runs order by snapshot_id", "--format", "json").stdout)
    assert runs == [{"snapshot_id": "broken", "kind": "scheduled"}, {"snapshot_id": "past", "kind": "what-if"},
                    {"snapshot_id": "sched", "kind": None}, {"snapshot_id": "what-if-2", "kind": "what-if"}]

    plan = cli(kit, "reset-plan", "--group", "payments")
    assert plan.stdout.splitlines()[-1] == "orders,0,500" and "snapshot sched" in plan.stderr


def test_api_defaults_to_the_scheduled_snapshot_and_lists_every_kind(kit):
    from jobs.api import create_app
    from pipelines.io.snapshots import DeltaWarehouseReader

    with TestClient(create_app(DeltaWarehouseReader(kit.root), refresh_interval=0)) as client:
        snaps = client.get("/snapshots").json()
        assert snaps["latest_snapshot_id"] == "sched"
        assert [(s["snapshot_id"], s["kind"], s["status"]) for s in snaps["snapshots"]] == [
            ("sched", "scheduled", "succeeded"), ("past", "what-if", "succeeded"),
            ("what-if-2", "what-if", "succeeded"), ("broken", "scheduled", "failed")]
        assert client.get("/health").json()["latest_snapshot_id"] == "sched"
        d = client.get("/groups/payments").json()
        assert d["snapshot_id"] == "sched" and [o["committed_offset"] for o in d["offsets"]] == [500]
        d = client.get("/groups/payments", params={"snapshot": "what-if-2"}).json()
        assert d["snapshot_id"] == "what-if-2" and [o["committed_offset"] for o in d["offsets"]] == [130]
        assert client.get("/groups/other").status_code == 404
        assert client.get("/groups/other", params={"snapshot": "what-if-2"}).status_code == 200

        # the background refresh: a new what-if run does not move the default, a new scheduled one does
        kit.snapshot("later-what-if", groups=[group("payments")], offsets=[offset("payments", "orders", 0, 9)],
                     kind="what-if")
        client.app.state.catalog.refresh(force=True)
        assert client.get("/groups/payments").json()["snapshot_id"] == "sched"
        assert client.get("/snapshots").json()["latest_snapshot_id"] == "sched"
        kit.snapshot("sched-2", groups=[group("payments")], offsets=[offset("payments", "orders", 0, 700)],
                     kind="scheduled")
        catalog = client.app.state.catalog
        catalog.refresh(force=True)
        catalog.index_for(catalog.status()["latest"])  # the switch-over happens once its index is built
        assert client.get("/groups/payments").json()["snapshot_id"] == "sched-2"
        assert client.get("/snapshots").json()["latest_snapshot_id"] == "sched-2"


def test_offsets_over_snapshots_are_ordered_and_judged_by_as_of(tmp_path):
    """A what-if snapshot as of the past finishes last but is plotted at its as-of: the points come in as-of order,
    the page's x axis, and a what-if point below the scheduled one after it is no regression; a real one (a
    scheduled snapshot whose offset went below the one before it in time) still is."""
    from jobs.api import create_app
    from pipelines.io.snapshots import DeltaWarehouseReader

    k = WarehouseKit(tmp_path / "wh")
    k.snapshot("mon", groups=[group("payments")], offsets=[offset("payments", "orders", 0, 400)], as_of=ts(20))
    k.snapshot("tue", groups=[group("payments")], offsets=[offset("payments", "orders", 0, 300)], as_of=ts(40))
    # finished after both, as of between them (150 < 400: an offset back then, not a regression)
    k.snapshot("sun", groups=[group("payments")], offsets=[offset("payments", "orders", 0, 150)], as_of=ts(10),
               kind="what-if")
    with TestClient(create_app(DeltaWarehouseReader(k.root), refresh_interval=0)) as client:
        d = client.get("/history/offsets", params={"group": "payments", "snapshot": "sun"}).json()
        assert [s["snapshot_id"] for s in d["snapshots"]] == ["sun", "mon", "tue"]
        assert [s["as_of"] for s in d["snapshots"]] == sorted(s["as_of"] for s in d["snapshots"])
        points = [(p["snapshot_id"], p["committed_offset"], p["regressed"]) for p in d["partitions"][0]["points"]]
        assert points == [("sun", 150, False), ("mon", 400, False), ("tue", 300, True)]
        # the served scheduled snapshot's chart leaves the what-if one out, as before
        d = client.get("/history/offsets", params={"group": "payments"}).json()
        assert [s["snapshot_id"] for s in d["snapshots"]] == ["mon", "tue"]


def test_lag_of_a_what_if_snapshot_says_which_end_offsets_it_used(kit):
    """LAG at a past moment is the committed offset then against end offsets observed when the dump was taken:
    `describe` of a what-if snapshot names their source and time on stderr (stdout stays Kafka's table), and the
    API's group detail carries them with the as-of they are set against."""
    import datetime as dt

    from jobs.api import create_app
    from pipelines.io.snapshots import DeltaWarehouseReader

    seen = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc)
    kit.snapshot("then", groups=[group("payments")], offsets=[offset("payments", "orders", 0, 120, t=5)], as_of=ts(6),
                 kind="what-if", log_end_offsets=[{"topic": "orders", "partition": 0, "log_end_offset": 900,
                                                   "observed_at": seen}])
    r = cli(kit, "describe", "payments", "--snapshot", "then")
    assert r.exit_code == 0
    assert [line.split()[3:6] for line in r.stdout.splitlines()[2:] if line.strip()] == [["120", "900", "780"]]
    note = [line for line in r.stderr.splitlines() if line.strip()]
    assert note == ["LOG-END-OFFSET from replication-offset-checkpoint observed at 2026-01-02T03:04:05Z (1 partition); "
                    f"CURRENT-OFFSET as of {ts(6).isoformat().replace('+00:00', 'Z')} (what-if snapshot then): LAG "
                    "counts what was written between the two."]
    # a scheduled snapshot's describe prints Kafka's output alone
    assert cli(kit, "describe", "payments").stderr == ""

    with TestClient(create_app(DeltaWarehouseReader(kit.root), refresh_interval=0)) as client:
        d = client.get("/groups/payments", params={"snapshot": "then"}).json()
        assert [(o["log_end_offset"], o["lag"]) for o in d["offsets"]] == [(900, 780)]
        assert d["log_end_offsets"] == {"sources": [{"source": "replication-offset-checkpoint",
                                                     "observed_at": "2026-01-02T03:04:05Z", "partitions": 1}],
                                        "as_of": ts(6).isoformat().replace("+00:00", "Z"), "kind": "what-if"}
        d = client.get("/groups/payments").json()
        assert d["log_end_offsets"]["kind"] == "scheduled" and d["log_end_offsets"]["sources"] == []


@pytest.mark.browser
@pytest.mark.integration
def test_the_page_of_a_what_if_snapshot(tmp_path):
    """In a real Chromium: the committed-offsets chart of a what-if snapshot of the past has its x values (as-of)
    in order and no red mark, and the partitions' note names the end offsets LAG was measured against."""
    import datetime as dt

    from .conftest import running_server
    from .test_browser import _chromedriver, _open, chromium

    _chromedriver()
    k = WarehouseKit(tmp_path / "wh")
    k.snapshot("mon", groups=[group("payments")], offsets=[offset("payments", "orders", 0, 400)], as_of=ts(20))
    k.snapshot("tue", groups=[group("payments")], offsets=[offset("payments", "orders", 0, 450)], as_of=ts(40))
    seen = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc)
    k.snapshot("sun", groups=[group("payments")], offsets=[offset("payments", "orders", 0, 150)], as_of=ts(10),
               kind="what-if", log_end_offsets=[{"topic": "orders", "partition": 0, "log_end_offset": 900,
                                                 "observed_at": seen}])
    k.snapshot("sat", groups=[group("payments")], offsets=[offset("payments", "orders", 0, 100)], as_of=ts(5),
               kind="what-if", log_end_offsets=[{"topic": "orders", "partition": 0, "log_end_offset": 130,
                                                 "observed_at": ts(5), "source": "segment"}])
    with running_server(k.root) as base, chromium(tmp_path) as b:
        _open(b, base + "/?snapshot=sun#/groups/payments", "group")
        b.wait_for("return !!(window.olCharts && window.olCharts.snapshots)")
        xs, regressions = b.js("return [window.olCharts.snapshots.data[0], "
                               "document.getElementById('chart-snapshots').dataset.regressions]")
        assert xs == sorted(xs) and len(xs) == 3 and regressions == "0"
        note = b.js("const p = document.getElementById('lag-source'); return [p.textContent, p.className]")
        assert note[0].startswith("LOG-END-OFFSET from replication-offset-checkpoint observed at 2026-01-02T03:04:05Z "
                                  "(1 partition): 1 of 1 partitions known")
        assert "as of " + ts(10).isoformat().replace("+00:00", "Z") + " (what-if snapshot)" in note[0]
        assert "what-if" in note[1].split()
        # a rebuild's what-if snapshot: its ends are the ones at its as_of (observed_at = as_of)
        _open(b, base + "/?snapshot=sat#/groups/payments", "group")
        b.wait_for("return document.getElementById('lag-source').textContent.length > 0")
        note = b.js("return document.getElementById('lag-source').textContent")
        assert note.endswith("(what-if snapshot) too: the ends then, from the segments' record timestamps."), note


def test_an_as_of_before_the_logs_end_leaves_every_view_on_the_state(brokerdata, tmp_path):
    """`rebuild --as-of T` is the clock of expiry and lag, not a cut (`--until-time` cuts): every record of the log
    is replayed, so the state holds commits made after T. `/groups/{id}/commits` and `changes` stopped at T all the
    same (and `changes --from` after T was refused as past the snapshot's history): they now go as far as the
    state's records, the full rebuild's answers."""
    from jobs.api import create_app
    from pipelines.io.snapshots import DeltaWarehouseReader

    data, wh = brokerdata / "classic-basic" / "data", tmp_path / "wh"

    def run(*args):
        r = CliRunner().invoke(main, [*args, "--warehouse", str(wh)], catch_exceptions=False)
        assert r.exit_code == 0, r.output
        return r.stdout

    run("rebuild", "--input", str(data), "--snapshot-id", "full", "--env", "ci", "--quiet", "--json")
    q = "select group_id, max(commit_timestamp) as t from loaded_offsets group by group_id order by t desc limit 1"
    newest = json.loads(run("sql", q, "--format", "json"))[0]
    gid, end = newest["group_id"], dt_of(newest["t"])
    as_of = (end - timedelta(seconds=5)).isoformat()
    run("rebuild", "--input", str(data), "--snapshot-id", "early", "--as-of", as_of, "--env", "ci", "--quiet",
        "--json")
    later = f"select count(*) as n from loaded_offsets where commit_timestamp > '{as_of}'"
    assert json.loads(run("sql", later, "--format", "json", "--snapshot", "early"))[0]["n"] > 0  # in the state
    window = ["--from", as_of, "--to", (end + timedelta(minutes=1)).isoformat(), "--json"]
    changed = json.loads(run("changes", *window))
    assert changed and json.loads(run("changes", *window, "--snapshot", "early")) == changed
    with TestClient(create_app(DeltaWarehouseReader(wh), refresh_interval=0)) as client:
        full, early = (client.get(f"/groups/{gid}/commits", params={"snapshot": s, "limit": 1000}).json()["commits"]
                       for s in ("full", "early"))
    assert early == full and dt_of(full[-1]["commit_timestamp"]) > dt_of(as_of)


def dt_of(text: str):
    from datetime import datetime, timezone

    t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return t if t.tzinfo else t.replace(tzinfo=timezone.utc)


def test_a_cut_snapshot_s_commits_are_the_records_its_cut_holds(tmp_path, no_spark, settings):
    """`/groups/{id}/commits` of a snapshot cut by `--until-time` at 10 s left out a commit whose record has no time
    (magic 0) by the commit time its value gives (100 s), though the engine's cut holds it, as every cut holds a
    record without a timestamp: the commit the group's offset stands at there (150) was missing from its history.
    The route now lists the records that cut holds, that one with them, and not the commit at 50 s."""
    from jobs.api import create_app
    from pipelines.io.snapshots import DeltaWarehouseReader
    from tests.serving.test_group_status import timeless_warehouse

    groups, _ = timeless_warehouse(tmp_path, no_spark, settings)
    reader = DeltaWarehouseReader(tmp_path / "wh")
    g = groups["stamped"]
    held = {o["group_id"]: o["committed_offset"] for o in reader.snapshot_table("loaded_offsets", "cut").to_pylist()}
    with TestClient(create_app(reader, refresh_interval=0)) as client:
        commits = client.get(f"/groups/{g}/commits", params={"snapshot": "cut"}).json()["commits"]
    assert sorted(c["committed_offset"] for c in commits) == [100, 150, 200]
    last = max(commits, key=lambda c: c["applied_offset"])
    assert last["committed_offset"] == held[g] == 150 and last["record_timestamp"] is None
