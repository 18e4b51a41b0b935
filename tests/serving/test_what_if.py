"""What-if snapshots (runs.kind = what-if: a run with --as-of/--until-*) are served by id only: describe, lookup, sql,
reset-plan and the API default to the latest succeeded scheduled snapshot, whatever was written after it."""
from __future__ import annotations

import json

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
