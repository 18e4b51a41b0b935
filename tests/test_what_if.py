"""What-if runs (--as-of, --until-time, --until-offset) stay apart from the scheduled snapshots (runs.kind).

On the `transactions` broker scenario (brokerdata/transactions, SCENARIO.md "case D"): in offsets partition 43,
tx-prod-1 (producer 1) writes tx-in[0]@60 at offset 19, tx-prod-2 (producer 2) tx-in[0]@70 at offset 20, and their
COMMIT markers follow at offsets 21 and 22 (and producer 1 commits again at 24). `--until-time` between the writes
and the markers is a point in time where both transactions are open: they are pending there, the validation must
judge them against the markers up to the cut, and the run is as of the cut.

One warehouse is shared by the module (rebuilds are slow): `base`, a scheduled run on the log up to offset 22 of
partition 43 (both transactions committed), then `cut`, a what-if run on the whole log cut at CUT.
"""
from __future__ import annotations

import datetime as dt
import json
import re
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from tests import logtools

# rebuilt through the CLI, in process (no JVM) but where the history is written by Spark's tasks
pytestmark = pytest.mark.slow

CUT = "2026-11-21T20:50:30.830Z"  # after offsets 19 and 20 of partition 43 (…30.809, …30.819), before 21 (…30.846)
CUT_DT = dt.datetime(2026, 11, 21, 20, 50, 30, 830000, tzinfo=dt.timezone.utc)
CUT_MS = "1795294230830"  # CUT as epoch milliseconds, the form timeline.tsv and kafka-dump-log give


def cli_rebuild(wh: Path, inputs: list[Path], snapshot_id: str, *args: str):
    """`offsetlake rebuild` under the `fail` validation policy; returns (exit code, summary)."""
    from jobs.cli import main

    argv = ["rebuild", *[a for p in inputs for a in ("--input", str(p))], "--warehouse", str(wh), "--snapshot-id",
            snapshot_id, "--env", "ci", "--conf", "validation.policy=fail", "--json", "--quiet", *args]
    r = CliRunner().invoke(main, argv, catch_exceptions=False)
    summary = json.loads(r.stdout.strip().splitlines()[-1]) if r.stdout.strip() else None
    return r.exit_code, summary


def failed_expectations(wh: Path, snapshot_id: str) -> list[str]:
    report = json.loads((wh / "_reports" / f"{snapshot_id}.json").read_text())
    return [e["id"] for s in report.get("suites", []) for e in s.get("expectations", []) if e.get("success") is False]


def tx_g1(wh: Path, *args: str) -> tuple[str, dict[int, int]]:
    from jobs.cli import main

    r = CliRunner().invoke(main, ["lookup", "--warehouse", str(wh), "--group", "tx-g1", *args], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    return out["snapshot_id"], {o["partition"]: o["committed_offset"] for o in out["offsets"] if o["topic"] == "tx-in"}


@pytest.fixture(scope="module")
def runs(brokerdata, tmp_path_factory):
    data = brokerdata / "transactions" / "data"
    if not data.is_dir():
        pytest.skip("brokerdata/transactions not present")
    tmp = tmp_path_factory.mktemp("what-if")
    prefix = tmp / "prefix"
    logtools.cut_log_dir(data, prefix, until_offset={43: 23})
    wh = tmp / "wh"
    base_rc, base = cli_rebuild(wh, [prefix], "base")
    assert base_rc == 0, failed_expectations(wh, "base")
    history = history_rows(wh)
    cut_rc, cut = cli_rebuild(wh, [data], "cut", "--until-time", CUT, "--incremental")
    return SimpleNamespace(data=data, tmp=tmp, wh=wh, base=base, cut_rc=cut_rc, cut=cut, history_after_base=history)


def history_rows(wh: Path) -> dict[tuple[int, int], dict]:
    """The warehouse's offset_commits by record (each record once)."""
    from pipelines.io.warehouse import Warehouse

    rows = Warehouse(wh).read_table("offset_commits").to_pylist()
    by_key = {(r["offsets_partition"], r["record_offset"]): r for r in rows}
    assert len(by_key) == len(rows)
    return by_key


def snapshot_tables(wh: Path, snapshot_id: str) -> dict[str, list]:
    """Every snapshot table of `snapshot_id`, its rows without the snapshot id, sorted."""
    from pipelines.io.warehouse import Warehouse
    from schemas.tables import SNAPSHOT_TABLES

    w = Warehouse(wh)
    out = {}
    for t in SNAPSHOT_TABLES:
        rows = w.read_table(t, snapshot_id).drop_columns(["snapshot_id"]).to_pylist()
        out[t] = sorted(json.dumps(r, sort_keys=True, default=str) for r in rows)
    return out


def test_until_time_run_validates_against_the_log_up_to_its_cut(runs):
    from pipelines.io.checkpoint import read_checkpoint
    from pipelines.io.warehouse import Warehouse

    wh = Warehouse(runs.wh)
    # the markers do follow in the log: the scheduled run over it has both transactions committed (SCENARIO.md: 70)
    assert tx_g1(runs.wh, "--snapshot", "base") == ("base", {0: 70, 1: 40, 2: 45})
    assert not [r for r in wh.read_table("pending_offsets", "base").to_pylist() if r["offsets_partition"] == 43]

    # under the fail policy the point-in-time run passes: after_last_marker looks at markers up to the cut only
    assert runs.cut_rc == 0, failed_expectations(runs.wh, "cut")
    assert runs.cut["status"] == "succeeded" and runs.cut["kind"] == "what-if"
    pending = sorted((r["offsets_partition"], r["record_offset"], r["producer_id"], r["group_id"], r["topic"],
                      r["partition"], r["committed_offset"])
                     for r in wh.read_table("pending_offsets", "cut").to_pylist() if r["offsets_partition"] == 43)
    assert pending == [(43, 19, 1, "tx-g1", "tx-in", 0, 60), (43, 20, 2, "tx-g1", "tx-in", 0, 70)]
    # the state at the cut (SCENARIO.md timeline: "broker now reports tx-g1: tx-in[0]=25, tx-in[1]=40, tx-in[2]=45")
    assert tx_g1(runs.wh, "--snapshot", "cut") == ("cut", {0: 25, 1: 40, 2: 45})

    # as of the cut, not of the newest record of the input
    run = {r["snapshot_id"]: r for r in wh.snapshots()}["cut"]
    assert run["as_of"] == CUT_DT and run["kind"] == "what-if"
    assert dt.datetime.fromisoformat(runs.cut["as_of"]) == CUT_DT
    # a what-if run with --incremental is a full run, and leaves no checkpoint for the chain
    assert runs.cut["incremental"]["mode"] == "full" and "what-if" in runs.cut["incremental"]["reason"]
    assert read_checkpoint(wh, "cut") is None and read_checkpoint(wh, "base") is not None


def test_until_time_in_epoch_milliseconds_is_the_same_cut(runs, tmp_path):
    """timeline.tsv and Kafka's tools give times as epoch milliseconds: `--until-time 1795294230830` is CUT, so the
    run is the state SCENARIO.md describes at the cut, as the ISO-8601 `cut` run found it."""
    from pipelines.io.warehouse import Warehouse

    wh = tmp_path / "wh"
    rc, summary = cli_rebuild(wh, [runs.data], "cut-ms", "--until-time", CUT_MS)
    assert rc == 0, failed_expectations(wh, "cut-ms")
    assert dt.datetime.fromisoformat(summary["as_of"]) == CUT_DT and summary["kind"] == "what-if"
    assert tx_g1(wh, "--snapshot", "cut-ms") == ("cut-ms", {0: 25, 1: 40, 2: 45})
    pending = sorted((r["record_offset"], r["producer_id"], r["committed_offset"])
                     for r in Warehouse(wh).read_table("pending_offsets", "cut-ms").to_pylist()
                     if r["offsets_partition"] == 43)
    assert pending == [(19, 1, 60), (20, 2, 70)]
    assert summary["records_in"] == runs.cut["records_in"] and summary["offsets"] == runs.cut["offsets"]


def test_an_until_time_before_every_record_is_said_in_the_summary(runs, tmp_path):
    """`--until-time` a year early (2025 for 2026) cut every record of the broker's log: the run wrote a what-if
    snapshot with no group and no offset, exit 0, and nothing in its summary told it from a log without records.
    Its summary now says the cut took every record, with how many; a cut inside the log says nothing of the kind."""
    early = (CUT_DT - dt.timedelta(days=365)).isoformat()
    rc, summary = cli_rebuild(tmp_path / "wh", [runs.data], "early", "--until-time", early)
    assert rc == 0 and summary["groups"] == 0 and summary["offsets"] == 0 and summary["records_out"] == 0
    said = [w for w in summary["warnings"] if "cut every record" in w]
    assert said == [f"--until-time {early} cut every record of the input ({summary['records_skipped']:,} past it, "
                    "none replayed): this snapshot holds no group and no offset, which says nothing of that time (a "
                    "mistyped time or offset?)"], summary["warnings"]
    assert not [w for w in runs.cut["warnings"] if "cut every record" in w]


def test_readers_stay_on_the_scheduled_snapshot(runs):
    from fastapi.testclient import TestClient

    from jobs.api import create_app
    from jobs.cli import main
    from pipelines.io.snapshots import DeltaWarehouseReader

    assert runs.cut_rc == 0
    assert tx_g1(runs.wh) == ("base", {0: 70, 1: 40, 2: 45})  # `cut` is newer, but a what-if run
    describe = CliRunner().invoke(main, ["describe", "--warehouse", str(runs.wh), "tx-g1"], catch_exceptions=False)
    assert sorted(line.split()[3] for line in describe.stdout.splitlines()[2:] if line.strip()) == ["40", "45", "70"]
    describe = CliRunner().invoke(main, ["describe", "--warehouse", str(runs.wh), "tx-g1", "--snapshot", "cut"],
                                  catch_exceptions=False)
    assert sorted(line.split()[3] for line in describe.stdout.splitlines()[2:] if line.strip()) == ["25", "40", "45"]
    sql = CliRunner().invoke(main, ["sql", "--warehouse", str(runs.wh), "--format", "json",
                                    "select distinct snapshot_id from pending_offsets"], catch_exceptions=False)
    assert json.loads(sql.stdout) == [{"snapshot_id": "base"}]
    # `runs.validation` is JSON in SQL, an interval an ISO-8601 duration
    sql = CliRunner().invoke(main, ["sql", "--warehouse", str(runs.wh), "--format", "json",
                                    "select validation, validation->>'$.evaluated' as evaluated, started_at, finished_at, "
                                    "finished_at - started_at as took from runs where snapshot_id = 'base'"],
                             catch_exceptions=False)
    (row,) = json.loads(sql.stdout)
    assert row["validation"] == runs.base["validation"] and row["evaluated"] == str(runs.base["validation"]["evaluated"])
    took = dt.datetime.fromisoformat(row["finished_at"]) - dt.datetime.fromisoformat(row["started_at"])
    m = re.fullmatch(r"PT(?:(\d+)M)?(\d+(?:\.\d+)?)S", row["took"])
    assert m and int(m[1] or 0) * 60 + float(m[2]) == pytest.approx(took.total_seconds()), row["took"]

    with TestClient(create_app(DeltaWarehouseReader(runs.wh), refresh_interval=0)) as client:
        snaps = client.get("/snapshots").json()
        assert snaps["latest_snapshot_id"] == "base"
        assert [(s["snapshot_id"], s["kind"]) for s in snaps["snapshots"]] == [("base", "scheduled"), ("cut", "what-if")]
        # the runs row's JSON columns are objects: the validation the run printed, the summary it stored
        listed = snaps["snapshots"][0]
        assert listed["validation"] == runs.base["validation"] and listed["validation"]["evaluated"] > 0
        assert listed["summary"]["snapshot_id"] == "base" and listed["summary"]["records_in"] == runs.base["records_in"]
        assert client.get("/groups/tx-g1").json()["snapshot_id"] == "base"
        at_cut = client.get("/groups/tx-g1", params={"snapshot": "cut"}).json()
        assert at_cut["snapshot_id"] == "cut"
        assert sorted((p["producer_id"], p["committed_offset"]) for p in at_cut["pending"]) == [(1, 60), (2, 70)]


def test_incremental_run_after_a_what_if_run_extends_the_scheduled_chain(runs, tmp_path):
    assert runs.cut_rc == 0
    wh = tmp_path / "wh"
    shutil.copytree(runs.wh, wh)  # the other tests keep the module's warehouse as it is
    rc, inc = cli_rebuild(wh, [runs.data], "inc", "--incremental")
    assert rc == 0, failed_expectations(wh, "inc")
    assert inc["kind"] == "scheduled"
    assert inc["incremental"]["mode"] == "incremental", inc["incremental"]
    assert inc["incremental"]["previous_snapshot"] == "base"
    assert 0 < inc["incremental"]["new_bytes"] < runs.cut["bytes_in"]
    # SCENARIO.md: tx-g1 ends at tx-in[0]=70, [1]=80, [2]=90; the new run is the default snapshot now
    assert tx_g1(wh) == ("inc", {0: 70, 1: 80, 2: 90})


def test_a_what_if_run_leaves_the_history_as_the_log_decided_it(runs, tmp_path):
    """The what-if run's records up to its cut are all in the history `base` wrote (the log up to offset 22 of
    partition 43 and the rest whole): the history stays row for row as it was, though at the cut the two
    transactions of partition 43 are pending (their markers follow), and the snapshot tables are those of the same
    run into an empty warehouse."""
    assert runs.cut_rc == 0
    after = history_rows(runs.wh)
    assert after == runs.history_after_base
    assert {r["txn_outcome"] for k, r in after.items() if k in ((43, 19), (43, 20))} == {"committed"}

    empty = tmp_path / "empty"
    rc, alone = cli_rebuild(empty, [runs.data], "cut", "--until-time", CUT)
    assert rc == 0, failed_expectations(empty, "cut")
    assert snapshot_tables(runs.wh, "cut") == snapshot_tables(empty, "cut")
    # into an empty warehouse the what-if run's history is its records up to the cut, as it saw them
    own = history_rows(empty)
    assert own and set(own) <= set(after)
    assert {own[k]["txn_outcome"] for k in ((43, 19), (43, 20))} == {"pending"}


@pytest.mark.parametrize("where", ["driver", pytest.param("tasks", marks=pytest.mark.spark)])
def test_a_what_if_run_adds_only_the_records_the_history_lacks(runs, tmp_path, where):
    """Past `base`'s prefix (partition 43 from offset 23 on), a what-if run over the whole log meets records the
    history lacks: exactly those are added, with its snapshot id, and the rows held before stay as they were —
    whether the history is written in the driver or by the Spark tasks that load the shards."""
    wh = tmp_path / "wh"
    shutil.copytree(runs.wh, wh)
    before = history_rows(wh)
    on_spark = ["--conf", "decode.in_process_max_bytes=0", "--conf", "rebuild.local_replay_max_rows=0"]
    rc, _ = cli_rebuild(wh, [runs.data], "late", "--until-offset", "1000", *(on_spark if where == "tasks" else []))
    assert rc == 0, failed_expectations(wh, "late")
    after = history_rows(wh)
    assert {k: after[k] for k in before} == before
    added = {k: r for k, r in after.items() if k not in before}
    # what the whole log holds past the prefix: the same run into an empty warehouse, less what `base` read
    empty = tmp_path / "empty"
    rc, _ = cli_rebuild(empty, [runs.data], "late", "--until-offset", "1000")
    assert rc == 0
    whole = history_rows(empty)
    assert added == {k: r for k, r in whole.items() if k not in before}
    assert added and all(p == 43 and o >= 23 for p, o in added) and {r["snapshot_id"] for r in added.values()} == {"late"}
    assert snapshot_tables(wh, "late") == snapshot_tables(empty, "late")
