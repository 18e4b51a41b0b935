"""`offset_commits.batch_timestamp` and `group_history.batch_timestamp` end to end: a 4.0 coordinator's batch of two
writes (one group's commit, then another group's) as real segment bytes, rebuilt by the pipeline, each history row
stamped with its batch's newest time, and every view that stops at a moment cutting by it as `rebuild --until-time`
does; and a warehouse the previous version wrote (neither history with the column) taking it on its next run, with
every reader still answering for the old snapshot, whose rows are then cut by their own time. No Spark: the
in-process route."""
from __future__ import annotations

import datetime as dt
import json

import pyarrow as pa
import pytest
from click.testing import CliRunner
from deltalake import DeltaTable

from jobs.cli import main
from pipelines.io.warehouse import Warehouse
from schemas.tables import TABLES
from tests import badinputs as bi
from tests.coordinator.rowkit import Log, to_segment

PARTITION = 3


def _rebuild(no_spark, settings, inputs, wh, sid: str, **kw):
    from pipelines.rebuild import RebuildRequest, run_rebuild

    res = run_rebuild(no_spark, settings, RebuildRequest(inputs=(str(inputs),), warehouse=str(wh), snapshot_id=sid,
                                                         semantics="modern", num_partitions=50, **kw))
    assert res.status == "succeeded", res


def _iso(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).isoformat(timespec="milliseconds")


def _cli(*args: str) -> str:
    r = CliRunner().invoke(main, list(args))
    assert r.exit_code == 0, r.output
    return r.output


@pytest.fixture
def lingered(tmp_path):
    """g commits 7, then a batch of the append linger: g's commit of 2, and 4 ms later h's commit of 5; then one more
    write of h, so the log's end lies past the batch."""
    g, h = bi.group_in(PARTITION, "g"), bi.group_in(PARTITION, "h")
    log = Log(partition=PARTITION)
    log.commit(g, "t", 0, 7)
    log.ts += 1000
    with log.batch():
        inside = log.commit(g, "t", 0, 2)["timestamp"]
        log.ts += 4
        end = log.commit(h, "t", 0, 5)["timestamp"]
    log.ts += 1000
    log.commit(h, "t", 0, 6)
    bi.write_segment(tmp_path / "in" / f"__consumer_offsets-{PARTITION}", 0, to_segment(log.rows))
    return tmp_path / "in", log, g, inside, end


def test_each_row_is_stamped_and_every_view_cuts_by_it(no_spark, settings, lingered, tmp_path):
    inputs, log, g, inside, end = lingered
    wh = tmp_path / "wh"
    _rebuild(no_spark, settings, inputs, wh, "s")
    history = Warehouse(wh).read_table("offset_commits", "s").sort_by("record_offset")
    stamped = [int(v.timestamp() * 1000) for v in history.column("batch_timestamp").to_pylist()]
    assert stamped == [log.rows[0]["timestamp"], end, end, log.rows[-1]["timestamp"]]

    # what the engine holds for g between the batch's two records, and at its end, and what the same snapshot's
    # commits say was committed by then
    from fastapi.testclient import TestClient

    from jobs.api import create_app
    from pipelines.io.snapshots import DeltaWarehouseReader

    for sid, at, want in (("inside", inside, [7]), ("end", end, [7, 2])):
        _rebuild(no_spark, settings, inputs, wh, sid, until_time=str(at))
        held = Warehouse(wh).read_table("loaded_offsets", sid).to_pylist()
        assert [o["committed_offset"] for o in held if o["group_id"] == g] == want[-1:]
        with TestClient(create_app(DeltaWarehouseReader(str(wh)), refresh_interval=0)) as client:
            got = client.get(f"/groups/{g}/commits", params={"snapshot": sid}).json()["commits"]
        assert [c["committed_offset"] for c in got] == want
    # changes: a window ending inside the batch lists no regression; the next one, starting inside it, does
    first = _iso(log.rows[0]["timestamp"])
    windows = [json.loads(_cli("changes", "--warehouse", str(wh), "--snapshot", "s", "--group", g, "--json",
                               "--from", a, "--to", b))
               for a, b in ((first, _iso(inside)), (_iso(inside + 1), _iso(end)))]
    assert [[c["committed_offset"] for c in w if c["kind"] == "offset_regressed"] for w in windows] == [[], [2]]


def test_a_warehouse_without_the_column_takes_it_and_its_old_snapshot_still_reads(no_spark, settings, lingered,
                                                                                  tmp_path, monkeypatch):
    """The previous version's warehouse (no `batch_timestamp` in either history) rebuilt from the log without its
    last record, then this version's run of the whole log: the history takes the column with the new record, the
    records it held already keep theirs null (a known record is never rewritten but to decide its transaction), and
    every view answers for both snapshots, cutting those rows by their own time."""
    inputs, log, g, inside, end = lingered
    older = tmp_path / "older"
    bi.write_segment(older / f"__consumer_offsets-{PARTITION}", 0, to_segment(log.rows[:-1]))
    wh = tmp_path / "wh"
    with monkeypatch.context() as m:  # the previous version's contract: no batch_timestamp in either history
        for name in ("offset_commits", "group_history"):
            m.setitem(TABLES, name, pa.schema([f for f in TABLES[name] if f.name != "batch_timestamp"]))
        _rebuild(no_spark, settings, older, wh, "old")
    path = str(Warehouse(wh).table_path("offset_commits"))
    assert "batch_timestamp" not in DeltaTable(path).schema().to_arrow().names
    _rebuild(no_spark, settings, inputs, wh, "new")
    history = DeltaTable(path).to_pyarrow_dataset().to_table().sort_by("record_offset")
    assert history.column("batch_timestamp").null_count == len(log.rows) - 1
    assert history.column("batch_timestamp")[-1].as_py() is not None

    first = _iso(log.rows[0]["timestamp"])
    for sid in ("old", "new"):
        out = json.loads(_cli("changes", "--warehouse", str(wh), "--snapshot", sid, "--group", g, "--json",
                              "--from", first, "--to", _iso(end)))
        assert [c["committed_offset"] for c in out if c["kind"] == "offset_regressed"] == [2]
        _cli("describe", "--warehouse", str(wh), "--snapshot", sid, g)
        plan = tmp_path / f"plan-{sid}"
        _cli("restore-plan", "--warehouse", str(wh), "--snapshot", sid, "--as-of", _iso(end), "--out", str(plan))
        assert (plan / "index.json").exists()
