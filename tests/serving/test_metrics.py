"""`GET /metrics` of a real `offsetlake serve`, parsed with prometheus_client's parser: the story warehouse
(tests/serving/conftest.py: s2 served, payments rewound on orders-0, s3 failed), the README's alert rules fired on
warehouses built for each and quiet on a healthy one (asked of the server's app in this process: the story's server
holds the route end to end), per-group status by Burrow's rules over commit histories
built for each rule, and series dropped (never renamed) over the limit."""
from __future__ import annotations

import json
import math
import operator
import re
import time
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.serving.conftest import ROOT, running_server
from tests.serving.warehouse_kit import WarehouseKit, commit, group, member, offset, ts


def scrape(base: str, **headers) -> dict:
    return _samples_of_response(httpx.get(base + "/metrics", headers=headers, timeout=60))


@contextmanager
def app_client(warehouse: Path):
    """A client of the app `offsetlake serve` runs over `warehouse`, in this process."""
    from fastapi.testclient import TestClient

    from jobs.api import create_app
    from pipelines.io.snapshots import DeltaWarehouseReader

    with TestClient(create_app(DeltaWarehouseReader(warehouse))) as client:
        yield client


def scrape_in_process(warehouse: Path) -> dict:
    with app_client(warehouse) as client:
        return _samples_of_response(client.get("/metrics"))


def _samples_of_response(r) -> dict:
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/plain; version=0.0.4")
    return samples_of(r.text)


def samples_of(text: str) -> dict:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(text) for s in f.samples}


def series(samples: dict, name: str) -> dict:
    return {labels: v for (n, labels), v in samples.items() if n == name}


def by_group(samples: dict, name: str, *extra: str) -> dict:
    """{group: value} or, with extra label names, {group: (labels..., value)}."""
    out = {}
    for labels, v in series(samples, name).items():
        d = dict(labels)
        out[d["group"]] = (*(d[k] for k in extra), v) if extra else v
    return out


# --- the README's rules -----------------------------------------------------------------------------------------
_OPS = {"==": operator.eq, "!=": operator.ne, ">": operator.gt, "<": operator.lt, ">=": operator.ge, "<=": operator.le}
_EXPR = re.compile(r"^(?P<name>[a-zA-Z_:][\w:]*)(?:\{(?P<matchers>[^}]*)\})?\s*(?P<op>==|!=|>=|<=|>|<)\s*"
                   r"(?P<rhs>[\d\s*+.]+)$")
_MATCHER = re.compile(r'\s*(\w+)\s*(=|!=)\s*"([^"]*)"\s*')


def readme_rules() -> dict[str, str]:
    """alert name -> expr, from the rule file in the README's "Metrics to alert on" section."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Metrics to alert on"):]
    block = re.search(r"```yaml\n(.*?)```", section, re.S).group(1)
    return {r["alert"]: r["expr"] for g in yaml.safe_load(block)["groups"] for r in g["rules"]}


def firing(samples: dict, expr: str) -> list[dict]:
    """The series a one-selector PromQL comparison (`name{l="v",m!="w"} OP number`) keeps: the rule fires when
    any is kept, as Prometheus fires an alert for each series its expression returns."""
    m = _EXPR.match(expr.strip())
    assert m, f"not a rule this test can evaluate: {expr}"
    matchers = [_MATCHER.fullmatch(x).groups() for x in (m["matchers"] or "").split(",") if x.strip()]
    threshold = eval(m["rhs"], {"__builtins__": {}})  # digits, spaces, * + . only (the regex above)
    out = []
    for labels, v in series(samples, m["name"]).items():
        d = dict(labels)
        if all((d.get(k, "") == want) == (op == "=") for k, op, want in matchers) and _OPS[m["op"]](v, threshold):
            out.append(d)
    return out


RULES = readme_rules()
LAST_RUN = RULES["OffsetlakeLastRunNotSucceeded"]
LAST_ATTEMPT = RULES["OffsetlakeLastAttemptNotSucceeded"]
RUN_STOPPED = RULES["OffsetlakeRunStopped"]
STALE = RULES["OffsetlakeSnapshotStale"]
GROUP_NOT_OK = RULES["OffsetlakeConsumerGroupNotOK"]
REGRESSED = RULES["OffsetlakeOffsetsWentBackwards"]
UNREADABLE = RULES["OffsetlakeTableUnreadable"]


def test_the_readme_lists_the_run_rules():
    assert LAST_RUN == 'offsetlake_last_run_status{status="succeeded"} == 0'
    assert STALE == "offsetlake_snapshot_age_seconds > 26 * 3600"


def now_utc() -> datetime:
    return datetime.now(timezone.utc)


def healthy(kit: WarehouseKit, sid: str, finished: datetime) -> None:
    kit.snapshot(sid, groups=[group("g", members=1)], offsets=[offset("g", "t", 0, 10, t=5)],
                 members=[member("g", "m-1", [("t", 0)])], as_of=finished - timedelta(minutes=5),
                 finished_at=finished, commits=[commit("g", "t", 0, 10, t=5)],
                 log_end_offsets=[{"topic": "t", "partition": 0, "log_end_offset": 10, "observed_at": ts(6)}])


def test_a_healthy_warehouse_fires_no_rule(tmp_path):
    kit = WarehouseKit(tmp_path / "wh")
    healthy(kit, "n1", now_utc() - timedelta(days=1))
    healthy(kit, "n2", now_utc() - timedelta(minutes=30))
    m = scrape_in_process(tmp_path / "wh")
    for expr in RULES.values():
        assert firing(m, expr) == [], expr
    assert series(m, "offsetlake_last_run_status")[(("status", "succeeded"),)] == 1
    assert 1700 < m[("offsetlake_snapshot_age_seconds", ())] < 3600


@pytest.mark.parametrize("status", ["failed", "validation_failed"])
def test_a_newer_run_that_did_not_succeed_fires_the_run_rule(tmp_path, status):
    """A run that failed keeps its runs row without finished_at or as_of (it stopped before them): it is still the
    newest, by its start; the snapshot before it stays served and fresh."""
    kit = WarehouseKit(tmp_path / "wh")
    served = now_utc() - timedelta(hours=2)
    healthy(kit, "n1", served)
    failed = ('{"success": false, "failed_expectations": [{"table": "loaded_offsets", "expectation": '
              '"expect_compound_columns_to_be_unique", "column": "group_id,topic,partition"}]}')
    kit.run("n2", status, started_at=now_utc() - timedelta(minutes=20),
            validation=failed if status == "validation_failed" else "{}",
            summary='{"error": "disk full", "stage": "write"}' if status == "failed" else "{}")
    with app_client(tmp_path / "wh") as client:
        m = _samples_of_response(client.get("/metrics"))
        over = client.get("/overview").json()
    assert firing(m, LAST_RUN) == [{"status": "succeeded"}]
    assert series(m, "offsetlake_last_run_status")[(("status", status),)] == 1
    assert firing(m, STALE) == []  # n1 is two hours old
    assert series(m, "offsetlake_snapshot_info") == {
        (("kind", "scheduled"), ("previous_snapshot_id", ""), ("snapshot_id", "n1")): 1}
    assert ("offsetlake_last_run_duration_seconds", ()) not in m  # no finish time: no duration
    assert over["snapshot"]["snapshot_id"] == "n1" and over["last_run"]["snapshot_id"] == "n2"
    if status == "failed":
        assert over["last_run"]["error"] == "disk full" and over["last_run"]["stage"] == "write"
    else:
        assert over["last_run"]["failed_expectations"] == [
            {"table": "loaded_offsets", "expectation": "expect_compound_columns_to_be_unique",
             "column": "group_id,topic,partition"}]


def test_an_older_failed_run_does_not_fire(tmp_path):
    """The failure came before the run that is served: the newest run succeeded."""
    kit = WarehouseKit(tmp_path / "wh")
    kit.run("n0", "failed", started_at=now_utc() - timedelta(hours=5))
    healthy(kit, "n1", now_utc() - timedelta(hours=1))
    m = scrape_in_process(tmp_path / "wh")
    assert firing(m, LAST_RUN) == []
    assert series(m, "offsetlake_last_run_status")[(("status", "failed"),)] == 0


@pytest.mark.parametrize("status", ["failed", "validation_failed"])
def test_a_rerun_of_the_served_id_that_did_not_succeed_fires_the_attempt_rule(tmp_path, status):
    """A rerun of the served id that failed (or failed validation) leaves the served row as it was and its own in
    `_attempts/`: the newest runs row still says succeeded, so only `offsetlake_last_attempt_status` tells on-call
    the night failed. A later run that succeeds quiets it."""
    from pipelines.io.warehouse import Warehouse

    kit = WarehouseKit(tmp_path / "wh")
    healthy(kit, "n1", now_utc() - timedelta(hours=2))
    row = dict(started_at=now_utc() - timedelta(minutes=20), summary={"error": "disk full", "stage": "write"},
               kind="scheduled")
    wh = Warehouse(tmp_path / "wh")
    where = wh.record_failure("n1", row) if status == "failed" else wh._write_attempt("n1", {**row, "status": status})
    assert "_attempts" in where
    m = scrape_in_process(tmp_path / "wh")
    assert firing(m, LAST_RUN) == []  # the runs row of n1 is the served run's
    assert firing(m, LAST_ATTEMPT) == [{"status": "succeeded"}]
    assert series(m, "offsetlake_last_attempt_status")[(("status", status),)] == 1
    assert m[("offsetlake_last_attempt_started_timestamp_seconds", ())] == pytest.approx(
        row["started_at"].timestamp(), abs=0.01)
    assert time.time() - 120 < m[("offsetlake_last_kept_attempt_timestamp_seconds", ())] <= time.time()
    healthy(kit, "n2", now_utc() - timedelta(minutes=5))
    m = scrape_in_process(tmp_path / "wh")
    assert firing(m, LAST_ATTEMPT) == [] and firing(m, LAST_RUN) == []
    assert ("offsetlake_last_kept_attempt_timestamp_seconds", ()) in m  # when it happened stays said



def test_the_overview_names_the_last_rerun_of_the_served_id_that_did_not_succeed(tmp_path):
    """`GET /overview` (the page's first answer) showed `last_run` alone, the served run's row: a rerun of that id
    that failed is only in `_attempts/`. It now adds `last_attempt`, with its error and stage (null: none)."""
    from pipelines.io.warehouse import Warehouse

    kit = WarehouseKit(tmp_path / "wh")
    healthy(kit, "n1", now_utc() - timedelta(hours=2))
    with app_client(tmp_path / "wh") as client:
        assert client.get("/overview").json()["last_attempt"] is None
    started = now_utc() - timedelta(minutes=20)
    Warehouse(tmp_path / "wh").record_failure("n1", dict(started_at=started, kind="scheduled",
                                                         summary={"error": "disk full", "stage": "write"}))
    with app_client(tmp_path / "wh") as client:
        over = client.get("/overview").json()
    assert over["last_run"]["snapshot_id"] == "n1" and over["last_run"]["status"] == "succeeded"
    attempt = over["last_attempt"]
    assert {k: attempt[k] for k in ("snapshot_id", "status", "error", "stage")} == {
        "snapshot_id": "n1", "status": "failed", "error": "disk full", "stage": "write"}
    assert attempt["started_at"].startswith(started.strftime("%Y-%m-%dT%H:%M:%S"))


def test_an_attempt_file_whose_stamp_is_no_time_is_passed_over(tmp_path):
    """A file in `_attempts/` named like an attempt but stamped with month 13 sorted newest and its stamp was parsed
    unguarded: /metrics and /overview were a 500 (ValueError). It is passed over, as an unreadable one is."""
    kit = WarehouseKit(tmp_path / "wh")
    healthy(kit, "n1", now_utc() - timedelta(hours=2))
    (tmp_path / "wh" / "_attempts").mkdir()
    (tmp_path / "wh" / "_attempts" / "n1.20261301T000000000000Z.json").write_text(
        json.dumps({"status": "failed", "kind": "scheduled"}))
    m = scrape_in_process(tmp_path / "wh")
    assert ("offsetlake_last_kept_attempt_timestamp_seconds", ()) not in m
    with app_client(tmp_path / "wh") as client:
        assert client.get("/overview").json()["last_attempt"] is None


def test_a_run_killed_while_it_held_the_lock_fires_the_stopped_rule(tmp_path):
    """A run killed (out of memory, its node lost) leaves its writer lock and no `runs` row until the next run
    records it: /metrics said nothing. A live run's lock (its heartbeat fresh) is in progress, not stopped."""
    import os

    from pipelines.io.lock import WriterLock

    kit = WarehouseKit(tmp_path / "wh")
    healthy(kit, "n1", now_utc() - timedelta(hours=2))
    m = scrape_in_process(tmp_path / "wh")
    assert m[("offsetlake_run_in_progress", ())] == 0 and firing(m, RUN_STOPPED) == []
    lock = WriterLock(tmp_path / "wh")
    lock.acquire("n2")
    m = scrape_in_process(tmp_path / "wh")
    assert m[("offsetlake_run_in_progress", ())] == 1 and firing(m, RUN_STOPPED) == []
    assert m[("offsetlake_writer_lock_heartbeat_age_seconds", ())] < 60
    old = time.time() - 900  # the heartbeat stopped a quarter of an hour ago: the run was killed
    os.utime(lock.path, (old, old))
    m = scrape_in_process(tmp_path / "wh")
    assert firing(m, RUN_STOPPED) == [{}] and firing(m, LAST_RUN) == []
    lock.release()


def test_a_lock_stamped_ahead_of_the_servers_clock_ages_while_it_stays_put(tmp_path):
    """A lock whose heartbeat is ahead of the server's clock (its run's host's clock ahead) had a negative age for
    as long as it was ahead: a run killed there never fired the stopped rule. Its age is now how long the server has
    seen it unchanged, back to 0 at each heartbeat."""
    import os

    kit = WarehouseKit(tmp_path / "wh")
    healthy(kit, "n1", now_utc() - timedelta(hours=2))
    lock = tmp_path / "wh" / "_lock"
    lock.write_text(json.dumps({"host": "elsewhere.example", "pid": 1, "snapshot_id": "n2"}))

    def beat():
        ahead = time.time() + 86_400
        os.utime(lock, (ahead, ahead))

    beat()
    age = ("offsetlake_writer_lock_heartbeat_age_seconds", ())
    with app_client(tmp_path / "wh") as client:
        first = _samples_of_response(client.get("/metrics"))[age]
        time.sleep(1.2)
        later = _samples_of_response(client.get("/metrics"))[age]
        beat()
        after_beat = _samples_of_response(client.get("/metrics"))[age]
    assert 0 <= first < later and later >= 1 and 0 <= after_beat < later


def test_a_stale_snapshot_fires_the_staleness_rule(server):
    """The story's s2 finished on 2026-01-01, far more than 26 h ago."""
    m = scrape(server)
    finished = m[("offsetlake_snapshot_finished_timestamp_seconds", ())]
    age = m[("offsetlake_snapshot_age_seconds", ())]
    assert abs(age - (time.time() - finished)) < 120
    assert firing(m, STALE) == [{}]
    assert m[("offsetlake_snapshot_as_of_timestamp_seconds", ())] <= finished


def test_a_warehouse_that_never_served_fires_both_run_rules(tmp_path):
    kit = WarehouseKit(tmp_path / "wh")
    kit.snapshot("only", status="failed")
    with app_client(tmp_path / "wh") as client:
        m = _samples_of_response(client.get("/metrics"))
        over = client.get("/overview").json()
    assert m[("offsetlake_snapshot_served", ())] == 0
    assert m[("offsetlake_snapshot_age_seconds", ())] == math.inf
    assert firing(m, STALE) == [{}] and firing(m, LAST_RUN) == [{"status": "succeeded"}]
    assert series(m, "offsetlake_last_run_status")[(("status", "failed"),)] == 1
    assert over["snapshot"] is None and over["last_run"]["snapshot_id"] == "only"


# --- the story ---------------------------------------------------------------------------------------------------
def test_metrics_of_the_served_snapshot(server):
    m = scrape(server)
    assert m[("offsetlake_snapshot_served", ())] == 1
    assert series(m, "offsetlake_snapshot_info") == {
        (("kind", "scheduled"), ("previous_snapshot_id", "s1"), ("snapshot_id", "s2")): 1}
    # the newest run (s3) failed: the alert on the last run fires while s2 stays served
    assert firing(m, LAST_RUN) == [{"status": "succeeded"}]
    assert series(m, "offsetlake_last_run_status")[(("status", "failed"),)] == 1
    groups = {dict(k)["state"] + "/" + dict(k)["type"]: v for k, v in series(m, "offsetlake_groups").items()}
    assert groups == {"Stable/classic": 2, "Empty/classic": 1}  # payments, fresh; txn
    assert by_group(m, "offsetlake_consumer_group_state", "state") == {
        "payments": ("Stable", 1), "fresh": ("Stable", 1), "txn": ("Empty", 1)}
    assert by_group(m, "offsetlake_consumer_group_members") == {"payments": 2, "fresh": 1, "txn": 0}
    committed = {(dict(k)["group"], dict(k)["topic"], dict(k)["partition"]): v
                 for k, v in series(m, "offsetlake_consumer_group_committed_offset").items()}
    api = httpx.get(server + "/groups/payments/offsets").json()
    assert {k: v for k, v in committed.items() if k[0] == "payments"} == {
        ("payments", o["topic"], str(o["partition"])): o["committed_offset"] for o in api}
    lag = {(dict(k)["group"], dict(k)["topic"], dict(k)["partition"]): v
           for k, v in series(m, "offsetlake_consumer_group_lag").items()}
    assert lag[("payments", "orders", "0")] == 1283 and ("payments", "refunds", "0") not in lag  # unknown end offset
    # per group: payments 1300-17 + 950-950 (refunds-0 unknown), its worst orders-0; fresh 1300-5; txn 60-55
    assert by_group(m, "offsetlake_consumer_group_total_lag") == {"payments": 1283, "fresh": 1295, "txn": 5}
    assert by_group(m, "offsetlake_consumer_group_max_lag") == {"payments": 1283, "fresh": 1295, "txn": 5}
    assert by_group(m, "offsetlake_consumer_group_max_lag_info", "topic", "partition")["payments"] == ("orders", "0", 1)
    assert by_group(m, "offsetlake_consumer_group_partitions") == {"payments": 3, "fresh": 1, "txn": 1}
    assert by_group(m, "offsetlake_consumer_group_lag_known_partitions") == {"payments": 2, "fresh": 1, "txn": 1}
    # payments' orders-0 history: 1000, 1100, 1200 (s1) then 17 (s2): rewound, behind 1300 -> REWIND; the others
    # have no commit history in the story: nothing to judge
    assert by_group(m, "offsetlake_consumer_group_status", "status") == {
        "payments": ("REWIND", 1), "fresh": ("OK", 1), "txn": ("OK", 1)}
    assert {dict(k)["status"]: v for k, v in series(m, "offsetlake_groups_with_status").items()} == {
        "OK": 2, "WARN": 0, "STOP": 0, "STALL": 0, "REWIND": 1}
    assert firing(m, GROUP_NOT_OK) == [{"group": "payments", "status": "REWIND"}]
    # the regression: payments' orders-0 went from 1200 (s1) to 17 (s2)
    assert series(m, "offsetlake_offset_regressions") == {(("group", "payments"),): 1}
    assert m[("offsetlake_offset_regressed_partitions", ())] == 1 and firing(m, REGRESSED) == [{}]
    assert m[("offsetlake_metrics_series_omitted", ())] == 0


def test_series_over_the_limit_are_dropped_never_renamed(story):
    """Over the limit each family keeps its name and labels and only its most urgent series; the rest is counted."""
    with running_server(story) as base:
        full = scrape(base)
    with running_server(story, "--metrics-max-series", "1") as base:
        m = scrape(base)
    assert {n for n, _ in m} == {n for n, _ in full}  # the same families
    assert {n: {tuple(k for k, _ in labels)} for n, labels in m} == {n: {tuple(k for k, _ in labels)}
                                                                     for n, labels in full}
    # the largest lag: fresh on orders-0 (1300 - 5), ahead of payments on orders-0 (1283)
    assert series(m, "offsetlake_consumer_group_lag") == {
        (("group", "fresh"), ("partition", "0"), ("topic", "orders")): 1295}
    assert series(m, "offsetlake_consumer_group_committed_offset") == {
        (("group", "fresh"), ("partition", "0"), ("topic", "orders")): 5}
    # the worst group: payments (REWIND), whatever fresh's larger lag
    assert set(by_group(m, "offsetlake_consumer_group_status")) == {"payments"}
    assert set(by_group(m, "offsetlake_consumer_group_state")) == {"payments"}
    assert {dict(k)["status"]: v for k, v in series(m, "offsetlake_groups_with_status").items()}["OK"] == 2
    kept = sum(1 for (n, _) in m if n.startswith("offsetlake_consumer_group_"))
    in_full = sum(1 for (n, _) in full if n.startswith("offsetlake_consumer_group_"))
    assert m[("offsetlake_metrics_series_omitted", ())] == in_full - kept > 0


def test_metrics_need_the_token_when_one_is_set(story):
    with running_server(story, "--token", "s3cret") as base:
        assert httpx.get(base + "/metrics").status_code == 401
        assert scrape(base, Authorization="Bearer s3cret")[("offsetlake_metrics_series_omitted", ())] == 0


def test_metrics_of_a_named_snapshot(server):
    r = httpx.get(server + "/metrics", params={"snapshot": "s1"}, timeout=30)
    assert r.status_code == 200
    m = samples_of(r.text)
    assert series(m, "offsetlake_snapshot_info") == {
        (("kind", "scheduled"), ("previous_snapshot_id", ""), ("snapshot_id", "s1")): 1}  # nothing before s1
    assert httpx.get(server + "/metrics", params={"snapshot": "s3"}).status_code == 404  # failed: not readable


# --- a damaged table ---------------------------------------------------------------------------------------------
def _unlistable_loaded_offsets(wh: Path) -> None:
    """A Delta log file name delta-rs cannot parse: no snapshot's loaded_offsets can be read, nor indexed."""
    (wh / "loaded_offsets" / "_delta_log" / "00000000000000000009.json\n").write_text("{}")


def _torn_history(wh: Path) -> None:
    """The offset_commits history's files torn: the index reads, the groups cannot be judged."""
    for f in (wh / "offset_commits").glob("*.parquet"):
        f.write_bytes(f.read_bytes()[:64] + bytes(f.stat().st_size - 64))


def _torn_previous_offsets(wh: Path) -> None:
    """s1's loaded_offsets files torn: s2 is indexed and judged, the snapshot it is compared with cannot be read."""
    for f in (wh / "loaded_offsets" / "snapshot_id=s1").glob("*.parquet"):
        f.write_bytes(f.read_bytes()[:64] + bytes(f.stat().st_size - 64))


# the families each damage leaves out (a name ending in `_`: every family it begins), every other the healthy scrape's
_REGRESSIONS = ("offsetlake_offset_regressions", "offsetlake_offset_regressed_partitions")
_STATE = ("offsetlake_groups", "offsetlake_groups_with_status", "offsetlake_consumer_group_", *_REGRESSIONS,
          "offsetlake_metrics_series_omitted")
_STATUS = ("offsetlake_groups_with_status", "offsetlake_consumer_group_status", "offsetlake_consumer_group_partitions",
           "offsetlake_consumer_group_lag_known_partitions", "offsetlake_consumer_group_total_lag",
           "offsetlake_consumer_group_max_lag", "offsetlake_consumer_group_max_lag_info")


@pytest.mark.parametrize("damage, table, left_out", [
    (_unlistable_loaded_offsets, "loaded_offsets", _STATE),
    (_torn_history, "offset_commits", _STATUS),
    (_torn_previous_offsets, "loaded_offsets", _REGRESSIONS),
])
def test_a_damaged_table_leaves_out_its_series_never_the_scrape(story, tmp_path, caplog, damage, table, left_out):
    """A snapshot table the server could not read made `/metrics` a JSON 500: Prometheus saw `up == 0` and the
    rules on the runs table (the story's newest run failed; s2 is days old) went quiet. The scrape is now the
    healthy one less the series read from the damaged table, `offsetlake_table_unreadable` naming it (the README's
    rule fires), and the server logs one line for it, no traceback."""
    import logging
    import shutil

    healthy_scrape = scrape_in_process(story)
    wh = tmp_path / "wh"
    shutil.copytree(story, wh)
    damage(wh)
    with caplog.at_level(logging.ERROR), app_client(wh) as client:
        m = _samples_of_response(client.get("/metrics"))
    assert series(m, "offsetlake_table_unreadable") == {(("table", table),): 1}
    assert firing(m, UNREADABLE) == [{"table": table}]
    assert firing(m, LAST_RUN) == [{"status": "succeeded"}] and firing(m, STALE) == [{}]
    age = ("offsetlake_snapshot_age_seconds", ())
    assert abs(m.pop(age) - healthy_scrape.pop(age)) < 60
    def gone(name: str) -> bool:
        return any(name == f or f.endswith("_") and name.startswith(f) for f in left_out)

    assert any(gone(n) for n, _ in healthy_scrape)
    kept = {k: v for k, v in healthy_scrape.items() if not gone(k[0])}
    assert {k: v for k, v in m.items() if k[0] != "offsetlake_table_unreadable"} == kept
    lines = [r for r in caplog.records if table in r.getMessage()]
    assert lines and not any(r.exc_info for r in caplog.records), caplog.text


def test_a_damaged_history_is_one_line_of_the_thread_that_judges_the_served_groups(story, tmp_path, caplog):
    """The thread that judges the served snapshot's groups in the background logged a traceback on every tick
    (each second by default) while the commit history was damaged; it now says so in one line, once."""
    import logging
    import shutil
    import threading

    class Ticks(threading.Event):
        """A stop event that lets the loop run `n` ticks, untimed."""

        def __init__(self, n: int):
            super().__init__()
            self.n = n

        def wait(self, timeout=None) -> bool:
            self.n -= 1
            return self.n < 0

    wh = tmp_path / "wh"
    shutil.copytree(story, wh)
    _torn_history(wh)
    with app_client(wh) as client:
        assert client.get("/groups/payments").status_code == 200  # s2 indexed and served
        with caplog.at_level(logging.ERROR):
            client.app.state.server.warm_statuses(Ticks(5))
    mine = [r for r in caplog.records if r.thread == threading.get_ident()]
    assert len(mine) == 1 and not mine[0].exc_info, caplog.text
    assert "cannot read the warehouse's offset_commits table" in mine[0].getMessage()


# --- Burrow's rules on commit histories built for each -------------------------------------------------------------
def build_burrow(root: Path) -> WarehouseKit:
    """b1 (as of 1000 s) then b2 (as of 2000 s), end offsets observed at each as-of. In b2's windows:
    stopper committed every 10 s until 1090 (a 90 s window, silent for 910 s since), 100 behind;
    rewinder went 500..700 then back to 300 and 350, 1000 is the end;
    staller committed 400 ten times from 1905 to 1995, 900 is the end;
    slow commits every 200 s, advancing, 100 behind at b1's dump and 300 behind at b2's (lag growing);
    fine is at the end; blind rewound like rewinder and stopped like stopper on a topic with no end offset."""
    k = WarehouseKit(root)
    slow = [(t, 10 * t) for t in range(200, 2001, 200)]  # (time, offset)
    k.snapshot("b1", groups=[group("slow", members=1)], offsets=[offset("slow", "s", 0, 10_000, t=1000)],
               log_end_offsets=[{"topic": "s", "partition": 0, "log_end_offset": 10 * 1000 + 100,
                                 "observed_at": ts(1000)}], as_of=ts(1000))
    history = (
        [commit("stopper", "a", 0, 100 + i, t=1000 + 10 * i) for i in range(10)]
        + [commit("rewinder", "b", 0, o, t=1900 + 20 * i) for i, o in enumerate((500, 600, 700, 300, 350))]
        + [commit("staller", "c", 0, 400, t=1905 + 10 * i) for i in range(10)]
        + [commit("slow", "s", 0, o, t=t) for t, o in slow]
        + [commit("fine", "f", 0, 10 * i, t=1910 + 10 * i) for i in range(10)]
        + [commit("blind", "x", 0, o, t=1000 + 20 * i) for i, o in enumerate((500, 600, 700, 300, 350))]
        # not commits: a tombstone, an aborted transactional commit
        + [commit("fine", "f", 0, None, t=1999, tombstone=True), commit("staller", "c", 0, 999, t=1996, txn="aborted")]
    )
    last = {("stopper", "a"): 109, ("rewinder", "b"): 350, ("staller", "c"): 400, ("slow", "s"): 20_000,
            ("fine", "f"): 90, ("blind", "x"): 350}
    ends = {"a": 209, "b": 1000, "c": 900, "s": 20_300, "f": 90}
    k.snapshot(
        "b2",
        groups=[group(g, members=1) for g, _ in last],
        offsets=[offset(g, tp, 0, o, t=1990) for (g, tp), o in last.items()],
        commits=history,
        log_end_offsets=[{"topic": tp, "partition": 0, "log_end_offset": e, "observed_at": ts(2000)}
                         for tp, e in ends.items()],
        as_of=ts(2000),
    )
    return k


@pytest.fixture(scope="module")
def burrow(tmp_path_factory):
    root = tmp_path_factory.mktemp("burrow")
    build_burrow(root)
    with running_server(root) as base:
        yield base


def test_each_rule_names_its_group(burrow):
    m = scrape(burrow)
    assert by_group(m, "offsetlake_consumer_group_status", "status") == {
        "stopper": ("STOP", 1), "rewinder": ("REWIND", 1), "staller": ("STALL", 1), "slow": ("WARN", 1),
        "fine": ("OK", 1), "blind": ("REWIND", 1)}
    assert sorted(d["group"] for d in firing(m, GROUP_NOT_OK)) == ["blind", "rewinder", "slow", "staller", "stopper"]
    assert by_group(m, "offsetlake_consumer_group_total_lag") == {
        "stopper": 100, "rewinder": 650, "staller": 500, "slow": 300, "fine": 0}
    assert by_group(m, "offsetlake_consumer_group_lag_known_partitions")["blind"] == 0


def test_the_page_reads_the_same_status(burrow):
    d = httpx.get(burrow + "/status/groups", params={"group": "slow"}, timeout=30).json()
    assert d["status"] == "WARN" and d["total_lag"] == 300
    (p,) = d["partition_status"]
    # the window's last 10 commits, the lags known at the two dumps (b1 at 1000 s, b2 at 2000 s) only
    assert [c["lag"] for c in p["window"] if c["lag"] is not None] == [100, 300]
    over = httpx.get(burrow + "/overview", timeout=30).json()["group_status"]
    assert over["counts"] == {"OK": 1, "WARN": 1, "STOP": 1, "STALL": 1, "REWIND": 2}
    assert [g["group_id"] for g in over["groups"]] == ["rewinder", "blind", "staller", "stopper", "slow"]
    assert httpx.get(burrow + "/status/groups", params={"group": "nope"}, timeout=30).status_code == 404


# --- a real broker's state, rebuilt by the pipeline ----------------------------------------------------------------
def _checkpoint_end_offsets(data: Path) -> dict[tuple[str, int], int]:
    """The broker's high watermarks as its replication-offset-checkpoint files hold them (version, count, then
    `topic partition offset` lines), Kafka's internal topics left out; the highest per partition."""
    out: dict[tuple[str, int], int] = {}
    for f in data.rglob("replication-offset-checkpoint"):
        for line in f.read_text().splitlines()[2:]:
            if line.strip():
                topic, p, o = line.rsplit(" ", 2)
                if not topic.startswith("__"):
                    out[(topic, int(p))] = max(int(o), out.get((topic, int(p)), 0))
    return out


@pytest.fixture(scope="module", params=["classic-basic", "simple-consumers"])
def broker_metrics(request, brokerdata, no_spark, settings, tmp_path_factory):
    """The scenario rebuilt by the real pipeline, served, scraped; with what the broker answered and its end offsets."""
    import json

    from pipelines.rebuild import RebuildRequest, run_rebuild

    scenario = brokerdata / request.param
    if not (scenario / "expected_state.json").is_file():
        pytest.skip(f"{scenario} not present")
    wh = tmp_path_factory.mktemp("metrics-" + request.param)
    res = run_rebuild(no_spark, settings, RebuildRequest(inputs=(str(scenario / "data"),), warehouse=str(wh),
                                                      snapshot_id="k1", semantics="modern"))
    assert res.status == "succeeded", res
    with running_server(wh) as base:
        m = scrape(base)
    summary = json.loads((scenario / "expected_state.json").read_text())["summary"]
    return m, {g: v for g, v in summary.items() if v["listed"]}, _checkpoint_end_offsets(scenario / "data")


@pytest.mark.shared
@pytest.mark.integration
def test_group_metrics_are_what_the_broker_answered(broker_metrics):
    """Per group: the state ListGroups gave, the members DescribeGroups gave, the offsets OffsetFetch gave, the lag
    those offsets leave behind the broker's own high watermarks; a group with nothing left to consume is OK."""
    m, listed, ends = broker_metrics
    # the groups with committed offsets (simple-consumers' sc-deleted-all, every offset deleted, is listed by the
    # reloaded 4.0 broker and not by the rebuild: a replay question, not a metrics one)
    listed = {g: v for g, v in listed.items() if v["committed_offsets"]}
    states = by_group(m, "offsetlake_consumer_group_state", "state")
    assert {g: states.get(g) for g in listed} == {g: (v["list_groups"]["state"], 1) for g, v in listed.items()}
    members = by_group(m, "offsetlake_consumer_group_members")
    assert {g: members.get(g) for g in listed} == {
        g: len((v.get("describe_groups") or {}).get("members") or []) for g, v in listed.items()}
    fetched = {(g, t, int(p)): o["offset"] for g, v in listed.items()
               for t, ps in v["committed_offsets"].items() for p, o in ps.items()}
    committed = {(dict(k)["group"], dict(k)["topic"], int(dict(k)["partition"])): v
                 for k, v in series(m, "offsetlake_consumer_group_committed_offset").items()}
    assert committed == fetched
    lag: dict[str, int] = {}
    for (g, t, p), o in fetched.items():
        if (t, p) in ends:
            lag[g] = lag.get(g, 0) + max(0, ends[(t, p)] - o)
    assert by_group(m, "offsetlake_consumer_group_total_lag") == lag
    statuses = by_group(m, "offsetlake_consumer_group_status", "status")
    assert set(statuses) == set(listed)
    assert all(statuses[g] == ("OK", 1) for g, n in lag.items() if n == 0)
    assert {dict(k)["status"]: v for k, v in series(m, "offsetlake_groups_with_status").items()} == {
        s: sum(1 for st, _ in statuses.values() if st == s) for s in ("OK", "WARN", "STOP", "STALL", "REWIND")}


def _scrape_groups(kit: WarehouseKit, gids: list[str]) -> str:
    kit.snapshot("m1", groups=[group(g, members=0) for g in gids], offsets=[offset(g, "t", 0, 10, t=5) for g in gids],
                 as_of=ts(10))
    with app_client(kit.root) as client:
        r = client.get("/metrics")
    assert r.status_code == 200, r.text
    return r.text


def test_a_control_character_in_a_label_is_written_as_its_escape(tmp_path):
    r"""A group id holding a carriage return (or another control character, or U+2028) was written raw inside its
    label value: a reader splitting lines as Python's text files do (text_fd_to_metric_families over the scrape
    saved to a file) failed on the whole scrape. Each is now its escape's text, as the text views print it (`\r`:
    a backslash and an r, read back as that)."""
    import io

    from prometheus_client.parser import text_fd_to_metric_families

    gids = ["pay\rments", "esc\x1b[2J", "sep\u2028x", "tab\tx", "nul\x00", "c1\x85", "new\nline", "back\\slash"]
    text = _scrape_groups(WarehouseKit(tmp_path / "wh"), gids)
    assert not re.search(r"[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029]", text)
    read = {s.labels["group"] for f in text_fd_to_metric_families(io.StringIO(text, newline=None)) for s in f.samples
            if s.name == "offsetlake_consumer_group_committed_offset"}
    assert read == {"pay\\rments", "esc\\x1b[2J", "sep\\u2028x", "tab\\tx", "nul\\x00", "c1\\x85", "new\nline",
                    "back\\slash"}


def test_an_escape_that_would_name_another_groups_series_stays_raw(tmp_path):
    """Two series of one label set fail a whole scrape: a group whose id is the escape's text (a backslash and an r)
    keeps its series, and the group holding the carriage return itself keeps the character raw, which the format
    allows (prometheus_client reads it back from the text)."""
    text = _scrape_groups(WarehouseKit(tmp_path / "wh"), ["a\rb", "a\\rb"])
    read = [s.labels["group"] for f in text_string_to_metric_families(text) for s in f.samples
            if s.name == "offsetlake_consumer_group_committed_offset"]
    assert sorted(read) == ["a\rb", "a\\rb"]
