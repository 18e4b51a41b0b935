"""Lag in time end to end: the crafted log dir of `tests/lagdata.py` (timestamps known by construction) rebuilt by
`offsetlake rebuild`, then asked everywhere lag is: `lookup`, `describe`, the HTTP API, `/metrics`, SQL, the restore
plan, a what-if snapshot. Every answer is held to the schedule the records were written on (within 1 s where the
issue asks it; the figures are exact here)."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from tests import lagdata as ld

pytestmark = pytest.mark.spark


def _cli(*args):
    from jobs.cli import main

    r = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return r


@pytest.fixture(scope="module")
def crafted(spark, tmp_path_factory):
    root = tmp_path_factory.mktemp("lag-e2e")
    log_dir = ld.build(root)
    wh = root / "warehouse"
    r = _cli("rebuild", "--env", "ci", "--input", str(log_dir), "--warehouse", str(wh), "--snapshot-id", "now",
             "--json", "--quiet")
    assert r.exit_code == 0, r.output[-3000:]
    return log_dir, wh, json.loads(r.stdout)


def _expected() -> dict[tuple[str, str, int], float | None]:
    ids = ld.group_ids()
    return {(ids[stem], t, p): ld.expected_lag_seconds(t, p, off) for stem, tps in ld.GROUPS.items()
            for t, p, off in tps}


def test_the_run_reads_the_data_topics_and_says_so(crafted):
    _, _, summary = crafted
    assert summary["as_of"].startswith("2026-11-01T00:00:21")  # AS_OF: the newest record
    lag = summary["lag"]
    assert (lag["partitions_read"], lag["offsets"], lag["offsets_timed"]) == (3, 8, 7)  # audit-0: no segments
    assert lag["notes"] == {} and summary["records_quarantined"] == 0


def test_lookup_gives_every_offset_its_bounds_and_lag(crafted):
    _, wh, _ = crafted
    want = _expected()
    starts = {0: 0, 1: ld.RETENTION_START, 2: 0}
    for gid in ld.group_ids().values():
        r = _cli("lookup", "--warehouse", str(wh), "--group", gid)
        assert r.exit_code == 0, r.output
        body = json.loads(r.stdout)
        for o in body["offsets"]:
            key = (gid, o["topic"], o["partition"])
            assert set(o) >= {"log_start_offset", "log_end_offset", "lag", "lag_seconds", "commit_age_seconds"}
            assert (o["lag_seconds"] is None) == (want[key] is None)
            if want[key] is not None:
                assert abs(o["lag_seconds"] - want[key]) < 1, key
            end = ld.ends()[(o["topic"], o["partition"])]
            assert (o["log_end_offset"], o["lag"]) == (end, end - o["committed_offset"])
            assert o["log_start_offset"] == (starts[o["partition"]] if o["topic"] == ld.TOPIC else None)
        timed = {(o["topic"], o["partition"]): o["lag_seconds"] for o in body["offsets"] if o["lag_seconds"] is not None}
        if timed:
            worst = max(timed.values())
            assert abs(body["lag"]["max_lag_seconds"] - worst) < 1
            assert timed[tuple(body["lag"]["worst_partition"].values())] == worst
    by_topic = json.loads(_cli("lookup", "--warehouse", str(wh), "--topic", ld.TOPIC, "--partition", "1").stdout)
    assert {o["group_id"]: o["lag_seconds"] for o in by_topic["offsets"]} == pytest.approx(
        {g: s for (g, t, p), s in want.items() if (t, p) == (ld.TOPIC, 1)})


def test_describe_shows_lag_time_after_client_id(crafted):
    _, wh, _ = crafted
    gid = ld.group_ids()["behind"]
    r = _cli("describe", "--warehouse", str(wh), gid)
    lines = r.stdout.splitlines()
    assert lines[1].split() == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                                "CONSUMER-ID", "HOST", "CLIENT-ID", "LAG-TIME"]
    got = {(row.split()[1], int(row.split()[2])): row.split()[-1] for row in lines[2:] if row.strip()}
    # events-0 at 60: as of AS_OF, 60 records of a minute each behind, and the 21 s the commits came after T0
    assert got[(ld.TOPIC, 0)] == "PT1H21S"


def test_describe_with_end_offsets_past_the_snapshots_knows_no_lag_time_there(crafted, tmp_path):
    """--end-offsets past the end the snapshot measured a caught-up group to: the records between are not in the
    snapshot's segments, so LAG-TIME is unknown (it said PT0S beside a LAG of 10 records behind); a file's end at or
    below the commit is caught up; a lag the snapshot measured to a record it holds stands."""
    _, wh, _ = crafted
    f = tmp_path / "leo.txt"
    f.write_text(f"{ld.TOPIC}:0:120\n{ld.TOPIC}:1:130\n{ld.TOPIC}:2:130\n")
    ids = ld.group_ids()

    def lag_times(stem):
        r = _cli("describe", "--warehouse", str(wh), ids[stem], "--end-offsets", str(f))
        assert r.exit_code == 0, r.output
        return {int(row.split()[2]): (row.split()[5], row.split()[-1]) for row in r.stdout.splitlines()[2:]
                if row.strip()}

    assert lag_times("caught") == {0: ("0", "PT0S"), 1: ("10", "-"), 2: ("9", "-")}
    assert lag_times("behind")[0] == ("60", "PT1H21S")


def test_api_and_metrics_say_the_same_within_a_second(crafted):
    from fastapi.testclient import TestClient
    from prometheus_client.parser import text_string_to_metric_families

    from jobs.api import create_app
    from pipelines.io.snapshots import DeltaWarehouseReader

    _, wh, _ = crafted
    want = _expected()
    with TestClient(create_app(DeltaWarehouseReader(wh))) as client:
        samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
                   for f in text_string_to_metric_families(client.get("/metrics").text) for s in f.samples}
        per_partition = {(dict(k)["group"], dict(k)["topic"], int(dict(k)["partition"])): v
                         for (n, k), v in samples.items() if n == "offsetlake_consumer_group_lag_seconds"}
        assert set(per_partition) == {k for k, v in want.items() if v is not None}
        assert all(abs(per_partition[k] - want[k]) < 1 for k in per_partition)
        per_group = {dict(k)["group"]: v for (n, k), v in samples.items()
                     if n == "offsetlake_consumer_group_max_lag_seconds"}
        for gid in ld.group_ids().values():
            timed = [v for (g, _t, _p), v in want.items() if g == gid and v is not None]
            assert (gid in per_group) == bool(timed)
            if timed:
                assert abs(per_group[gid] - max(timed)) < 1
            offsets = client.get(f"/groups/{gid}/offsets").json()
            assert {(gid, o["topic"], o["partition"]): o["lag_seconds"] for o in offsets} == pytest.approx(
                {k: v for k, v in want.items() if k[0] == gid})
            detail = client.get(f"/groups/{gid}").json()
            assert detail["lag"]["max_lag_seconds"] == (pytest.approx(max(timed)) if timed else None)
        page = client.get("/overview").json()["lag"]["top_groups"]
        assert page[0]["group_id"] == ld.group_ids()["below"]  # the most behind in time first
        # the caught-up group's partition with only a COMMIT marker left (offset lag 1) is OK by its lag in time
        status = client.get("/status/groups", params={"group": ld.group_ids()["caught"]}).json()
        assert status["status"] == "OK"
        assert {(p["topic"], p["partition"]): (p["lag"], p["lag_seconds"]) for p in status["partition_status"]} == {
            (ld.TOPIC, 0): (1, 0.0), (ld.TOPIC, 1): (0, 0.0), (ld.TOPIC, 2): (0, 0.0)}


def test_sql_has_the_table(crafted):
    _, wh, _ = crafted
    r = _cli("sql", "--warehouse", str(wh), "--format", "json",
             "SELECT group_id, max(lag_seconds) AS worst FROM consumer_lag GROUP BY group_id ORDER BY worst DESC")
    rows = json.loads(r.stdout)
    assert rows[0]["group_id"] == ld.group_ids()["below"]
    r = _cli("sql", "--warehouse", str(wh), "--format", "json",
             "SELECT partition, log_start_offset, log_start_source, timestamp_type FROM log_end_offsets "
             f"WHERE topic = '{ld.TOPIC}' ORDER BY partition")
    assert json.loads(r.stdout) == [
        {"partition": 0, "log_start_offset": 0, "log_start_source": "segment", "timestamp_type": "CreateTime"},
        {"partition": 1, "log_start_offset": ld.RETENTION_START, "log_start_source": "segment",
         "timestamp_type": "CreateTime"},
        {"partition": 2, "log_start_offset": 0, "log_start_source": "segment", "timestamp_type": "CreateTime"}]


def test_restore_plan_knows_the_bounds_and_clamps(crafted, tmp_path):
    _, wh, _ = crafted
    gid = ld.group_ids()["below"]
    out = tmp_path / "plan"
    r = _cli("restore-plan", "--warehouse", str(wh), "--as-of", str(ld.AS_OF), "--group", gid, "--out", str(out))
    assert r.exit_code == 0, r.output
    readme = (out / "README.txt").read_text()
    start_time = ld.schedule(1, ld.RETENTION_START)
    assert (f"{ld.TOPIC}-1: target 10 < log start {ld.RETENTION_START}: the reset skips 20 records, "
            f"{max(0, start_time - ld.AS_OF) / 1000:,.0f} s of data") in readme
    assert (out / next(iter(json.loads((out / "index.json").read_text())))).read_text() == f"{ld.TOPIC},1,10\n"
    caught = ld.group_ids()["caught"]
    r = _cli("restore-plan", "--warehouse", str(wh), "--as-of", str(ld.AS_OF), "--group", gid, "--group", caught,
             "--out", str(out), "--clamp", "--force")
    assert r.exit_code == 0, r.output
    readme = (out / "README.txt").read_text()
    assert f"{ld.TOPIC}-1: 10 -> {ld.RETENTION_START}" in readme and f"{ld.TOPIC}-2: 121 -> 120" in readme
    files = {v: (out / k).read_text() for k, v in json.loads((out / "index.json").read_text()).items()}
    assert files[gid] == f"{ld.TOPIC},1,{ld.RETENTION_START}\n"
    assert files[caught] == f"{ld.TOPIC},0,120\n{ld.TOPIC},1,120\n{ld.TOPIC},2,120\n"


def test_a_what_if_snapshot_answers_for_its_as_of(crafted):
    """`rebuild --as-of T`: how far behind each group was at T, measured to the records written before T."""
    log_dir, wh, _ = crafted
    as_of = ld.schedule(0, 100)
    r = _cli("rebuild", "--env", "ci", "--input", str(log_dir), "--warehouse", str(wh), "--snapshot-id", "then",
             "--as-of", str(as_of), "--no-expiry", "--quiet")
    assert r.exit_code == 0, r.output[-3000:]
    ids = ld.group_ids()
    body = json.loads(_cli("lookup", "--warehouse", str(wh), "--snapshot", "then", "--group", ids["behind"]).stdout)
    got = {(o["topic"], o["partition"]): o["lag_seconds"] for o in body["offsets"]}
    assert got == pytest.approx({(t, p): ld.expected_lag_seconds(t, p, off, as_of)
                                 for t, p, off in ld.GROUPS["behind"]})
    assert got[(ld.TOPIC, 0)] == pytest.approx(40 * 60)  # record 60 was written 40 minutes before record 100
    # LOG-END-OFFSET and LAG at T too, not the dump's (121, 120, 120): what had been written by then
    ends = {(o["topic"], o["partition"]): (o["log_end_offset"], o["lag"]) for o in body["offsets"]}
    want = {(t, p): (ld.expected_end(p, as_of), ld.expected_end(p, as_of) - off) for t, p, off in ld.GROUPS["behind"]}
    assert ends == want == {(ld.TOPIC, 0): (101, 41), (ld.TOPIC, 1): (100, 10), (ld.TOPIC, 2): (105, 3)}
    r = _cli("describe", "--warehouse", str(wh), "--snapshot", "then", ids["behind"])
    rows = [line.split()[2:6] for line in r.stdout.splitlines()[2:] if line.startswith(ids["behind"])]
    assert rows == [[str(p), str(off), str(want[(t, p)][0]), str(want[(t, p)][1])] for t, p, off in ld.GROUPS["behind"]]
    assert "LOG-END-OFFSET and CURRENT-OFFSET both as of" in r.stderr
    # the commits, made after T, are past the ends at T by what was written since: no offset_past_end for that
    r = _cli("changes", "--warehouse", str(wh), "--snapshot", "then", "--from", str(ld.DATA_T0), "--to",
             str(ld.AS_OF), "--json")
    assert r.exit_code in (0, 1), r.output[-3000:]
    assert "offset_past_end" not in r.stdout


def test_a_what_if_commit_below_todays_log_start_has_no_lag_in_time(crafted):
    """At a past as_of, a commit now below the log start still had its records (retention deleted them since): its
    lag in time was measured to today's log start, a later record, so it looked less behind than it was. It is now
    unknown; a live snapshot's stays the log start's (a consumer resuming there is handed it)."""
    log_dir, wh, _ = crafted
    r = _cli("rebuild", "--env", "ci", "--input", str(log_dir), "--warehouse", str(wh), "--snapshot-id", "then-below",
             "--as-of", str(ld.schedule(0, 100)), "--no-expiry", "--quiet")
    assert r.exit_code == 0, r.output[-3000:]
    gid = ld.group_ids()["below"]

    def below(snapshot):
        body = json.loads(_cli("lookup", "--warehouse", str(wh), "--snapshot", snapshot, "--group", gid).stdout)
        (o,) = body["offsets"]
        return o["committed_offset"], o["log_start_offset"], o["lag"], o["lag_seconds"]

    assert below("then-below") == (10, ld.RETENTION_START, ld.expected_end(1, ld.schedule(0, 100)) - 10, None)
    assert below("now") == (10, ld.RETENTION_START, 110, ld.expected_lag_seconds(ld.TOPIC, 1, 10))
