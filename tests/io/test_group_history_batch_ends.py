"""`group_history.batch_last_offset` end to end: a 4.0 coordinator's conversions written as real segment bytes, read
by the pipeline (the decoder gives each record its batch's last offset, the engine keeps it), and a warehouse the
previous version wrote (its `group_history` without the column) taking the column on its next run, with every reader
still answering for the old snapshot, whose events then count as observable. No Spark: the in-process route."""
from __future__ import annotations

import json

import pyarrow as pa
import pytest
from click.testing import CliRunner
from deltalake import DeltaTable

from jobs.cli import main
from pipelines.io.snapshots import DeltaWarehouseReader
from pipelines.io.warehouse import Warehouse
from schemas.tables import TABLES
from tests import badinputs as bi
from tests.coordinator.rowkit import to_segment
from tests.serving.test_changes_oracle import _conversions_log

PARTITION = 7


def _rebuild(no_spark, settings, inputs, wh, sid: str, **kw):
    from pipelines.rebuild import RebuildRequest, run_rebuild

    res = run_rebuild(no_spark, settings, RebuildRequest(inputs=(str(inputs),), warehouse=str(wh), snapshot_id=sid,
                                                         semantics="modern", num_partitions=50, **kw))
    assert res.status == "succeeded", res


def _lifecycle(wh, sid: str, rows) -> list[tuple]:
    r = CliRunner().invoke(main, ["changes", "--warehouse", str(wh), "--snapshot", sid, "--from",
                                  str(rows[0]["timestamp"]), "--to", str(rows[-1]["timestamp"]), "--json"])
    assert r.exit_code == 0, r.output
    return [(c["kind"], c["record_offset"]) for c in json.loads(r.output) if c["kind"].startswith("group_")]


def _sql(wh, sid: str, query: str) -> list[str]:
    r = CliRunner().invoke(main, ["sql", "--warehouse", str(wh), "--snapshot", sid, "--format", "csv", query])
    assert r.exit_code == 0, r.output
    return r.output.split()


@pytest.fixture
def conversions(tmp_path):
    log = _conversions_log(bi.group_in(PARTITION, "g"))
    bi.write_segment(tmp_path / "in" / f"__consumer_offsets-{PARTITION}", 0, to_segment(log.rows))
    return tmp_path / "in", log.rows


def test_a_conversion_read_from_its_bytes_is_converted_not_emptied(no_spark, settings, conversions, tmp_path):
    inputs, rows = conversions
    _rebuild(no_spark, settings, inputs, tmp_path / "wh", "s")
    history = Warehouse(tmp_path / "wh").read_table("group_history", "s")
    assert history.column("batch_last_offset").to_pylist() == [r["batch_last_offset"] for r in rows]
    # the downgrade's batch (offsets 14-20) is one group_converted at its last record, no group_emptied at 17
    assert _lifecycle(tmp_path / "wh", "s", rows) == [
        ("group_created", 0), ("group_converted", 9), ("group_converted", 20), ("group_emptied", 21),
        ("group_deleted", 22)]
    # the engine's group cut at the downgrade's time (its records share it) and a millisecond before: what changes
    # says the batch did, from the consumer group (Assigning: group epoch 3, assignment epoch 1) to the classic group
    # Stable, with no Empty between
    at = rows[20]["timestamp"]
    for sid, until, want in (("before", at - 1, ("consumer", "Assigning")), ("at", at, ("classic", "Stable"))):
        _rebuild(no_spark, settings, inputs, tmp_path / "wh", sid, until_time=str(until))
        groups = Warehouse(tmp_path / "wh").read_table("loaded_groups", sid).to_pylist()
        assert [(g["group_type"], g["state"]) for g in groups] == [want]


def test_an_old_warehouse_takes_the_column_and_its_old_snapshot_still_reads(no_spark, settings, conversions,
                                                                              tmp_path, monkeypatch, duck):
    inputs, rows = conversions
    wh = tmp_path / "wh"
    path = str(Warehouse(wh).table_path("group_history"))
    new = TABLES["group_history"]
    with monkeypatch.context() as m:  # the previous version's contract: no batch_last_offset
        m.setitem(TABLES, "group_history", pa.schema([f for f in new if f.name != "batch_last_offset"]))
        _rebuild(no_spark, settings, inputs, wh, "old")
    assert "batch_last_offset" not in DeltaTable(path).schema().to_arrow().names
    _rebuild(no_spark, settings, inputs, wh, "new")
    assert "batch_last_offset" in DeltaTable(path).schema().to_arrow().names
    n = len(rows)

    # the warehouse reader, at each snapshot's pinned version: the old events without batch ends
    for sid, known in (("old", 0), ("new", n)):
        t = Warehouse(wh).read_table("group_history", sid)
        assert (t.num_rows, t.column("batch_last_offset").null_count) == (n, n - known)
        got = DeltaWarehouseReader(str(wh)).snapshot_table("group_history", sid,
                                                           columns=["record_offset", "batch_last_offset"])
        assert got.num_rows == n
        assert ("batch_last_offset" in got.column_names and got.column("batch_last_offset").null_count == 0) \
            == bool(known)
        assert _sql(wh, sid, "SELECT count(*) AS n FROM group_history") == ["n", str(n)]
    # delta-rs' pyarrow dataset and DuckDB's delta_scan of the whole table: the old files' rows read null
    whole = DeltaTable(path).to_pyarrow_dataset().to_table(columns=["snapshot_id", "batch_last_offset"])
    counts = whole.group_by("snapshot_id").aggregate([("snapshot_id", "count"), ("batch_last_offset", "count")])
    assert sorted(zip(*counts.to_pydict().values())) == [("new", n, n), ("old", n, 0)]
    scanned = duck.execute(f"SELECT snapshot_id, count(*), count(batch_last_offset) FROM delta_scan('{path}') "
                           "GROUP BY snapshot_id ORDER BY snapshot_id").fetchall()
    assert scanned == [("new", n, n), ("old", n, 0)]

    # changes answers for both: the old snapshot's events are each observable (as that version judged them), the
    # new one's only at their batch's end
    assert _lifecycle(wh, "new", rows) == [
        ("group_created", 0), ("group_converted", 9), ("group_converted", 20), ("group_emptied", 21),
        ("group_deleted", 22)]
    assert ("group_emptied", 17) in _lifecycle(wh, "old", rows)
    # and the group's history says the same of each: every event of the old snapshot observable, as changes judged it
    from fastapi.testclient import TestClient

    from jobs.api import create_app

    with TestClient(create_app(DeltaWarehouseReader(str(wh)), refresh_interval=0)) as client:
        seen = {sid: [e["observable"] for e in client.get(f"/groups/{rows[0]['group_id']}/history",
                                                          params={"snapshot": sid}).json()["events"]]
                for sid in ("old", "new")}
    assert seen["old"] == [True] * n and seen["new"].count(True) == len({r["batch_last_offset"] for r in rows})


def test_the_group_s_history_marks_what_no_reader_saw_as_changes_does(no_spark, settings, conversions, tmp_path):
    """`describe --history` and `GET /groups/{id}/history` listed every event of the conversions' batches with the
    state it left the group in, the consumer group Empty (17) and then deleted (19) inside the downgrade's batch
    among them, where `changes` says the batch converted the group and no reader saw either: the new coordinator
    answers at a batch's end (`CoordinatorRuntime`, 4.0). Every event is still listed (an audit of the log), and
    each says whether a reader could have seen the group as it left it: the last of its group in its batch, the
    state the engine's replay holds at that batch's end (`--until-offset`), and only there does `changes` report."""
    from fastapi.testclient import TestClient

    from jobs.api import create_app
    from pipelines.coordinator.groups import ClassicGroup, is_live
    from pipelines.coordinator.options import ReplayOptions
    from pipelines.coordinator.shard import load_shards
    from pipelines.coordinator.streamed import WHOLE_STATE
    from tests.coordinator.rowkit import to_table

    inputs, rows = conversions
    wh = tmp_path / "wh"
    _rebuild(no_spark, settings, inputs, wh, "s")
    gid = rows[0]["group_id"]
    with TestClient(create_app(DeltaWarehouseReader(str(wh)), refresh_interval=0)) as client:
        events = client.get(f"/groups/{gid}/history", params={"snapshot": "s"}).json()["events"]
    assert [e["record_offset"] for e in events] == [r["offset"] for r in rows]  # every record, in log order
    ends = {r["offset"]: r["batch_last_offset"] for r in rows}
    # the batch ends of the log: where a reader is answered
    assert {e["record_offset"] for e in events if e["observable"]} == set(ends.values())
    table = to_table(rows)
    for e in events:
        if not e["observable"]:
            continue
        state = load_shards(table, ReplayOptions(semantics="modern", until_offset=e["record_offset"]),
                            mode=WHOLE_STATE).states
        live = {g: ("classic" if isinstance(v, ClassicGroup) else v.group_type, v.state)
                for s in state for g, v in s.groups.groups.items() if is_live(v)}
        assert live.get(gid) == (None if e["state"] is None else (e["group_type"], e["state"])), e
    hidden = [(e["record_offset"], e["state"]) for e in events if not e["observable"]]
    assert (17, "Empty") in hidden and (19, None) in hidden  # the downgrade's momentary states
    assert {offset for _, offset in _lifecycle(wh, "s", rows)} <= {e["record_offset"] for e in events
                                                                   if e["observable"]}

    r = CliRunner().invoke(main, ["describe", "--warehouse", str(wh), "--snapshot", "s", gid, "--history"])
    assert r.exit_code == 0, r.output
    lines = [ln for ln in r.stdout.splitlines() if ln.strip()]
    assert "STATE*" in lines[0]  # the mark is said once, on the group's line
    marked = {int(ln.split()[1].split(":")[1]): ln.split()[4].endswith("*") for ln in lines[2:]}
    assert marked == {e["record_offset"]: not e["observable"] for e in events}
