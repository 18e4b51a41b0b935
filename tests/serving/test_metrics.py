"""`GET /metrics` on the story warehouse (tests/serving/conftest.py), parsed with prometheus_client's parser:
the served snapshot and its staleness, the last run, groups, committed offsets, lag, and the incident of s2
(payments rewound on orders-0) as an offset regression. Cardinality stays under the limit."""
from __future__ import annotations

import time

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.serving.conftest import running_server


def scrape(base: str, **headers) -> dict:
    r = httpx.get(base + "/metrics", headers=headers, timeout=30)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/plain; version=0.0.4")
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(r.text) for s in f.samples}


def series(samples: dict, name: str) -> dict:
    return {labels: v for (n, labels), v in samples.items() if n == name}


def test_metrics_of_the_served_snapshot(server):
    m = scrape(server)
    assert series(m, "offsetlake_snapshot_served") == {(("snapshot_id", "s2"),): 1}
    # the newest run (s3) failed: the alert on the last run fires while s2 stays served
    assert series(m, "offsetlake_last_run_status")[(("status", "failed"),)] == 1
    assert series(m, "offsetlake_last_run_status")[(("status", "succeeded"),)] == 0
    groups = {dict(k)["state"] + "/" + dict(k)["type"]: v for k, v in series(m, "offsetlake_groups").items()}
    assert groups == {"Stable/classic": 2, "Empty/classic": 1}  # payments, fresh; txn
    committed = {(dict(k)["group"], dict(k)["topic"], dict(k)["partition"]): v
                 for k, v in series(m, "offsetlake_consumer_group_committed_offset").items()}
    api = httpx.get(server + "/groups/payments/offsets").json()
    assert {k: v for k, v in committed.items() if k[0] == "payments"} == {
        ("payments", o["topic"], str(o["partition"])): o["committed_offset"] for o in api}
    lag = {(dict(k)["group"], dict(k)["topic"], dict(k)["partition"]): v
           for k, v in series(m, "offsetlake_consumer_group_lag").items()}
    assert lag[("payments", "orders", "0")] == 1283 and ("payments", "refunds", "0") not in lag  # unknown end offset
    # the regression: payments' orders-0 went from 1200 (s1) to 17 (s2)
    assert series(m, "offsetlake_previous_snapshot") == {(("snapshot_id", "s1"),): 1}
    assert series(m, "offsetlake_offset_regressions") == {(("group", "payments"),): 1}
    assert m[("offsetlake_offset_regressions_total_partitions", ())] == 1
    assert m[("offsetlake_metrics_series_omitted", ())] == 0


def test_a_stale_snapshot_shows_its_age(server):
    """The story's snapshots finished long ago: `offsetlake_snapshot_age_seconds > 86400` is the stale alert."""
    m = scrape(server)
    finished = m[("offsetlake_snapshot_finished_timestamp_seconds", ())]
    age = m[("offsetlake_snapshot_age_seconds", ())]
    assert abs(age - (time.time() - finished)) < 120
    assert age > 86_400
    assert m[("offsetlake_snapshot_as_of_timestamp_seconds", ())] <= finished


def test_series_stay_under_the_limit(story):
    """Over the limit, per-partition series give way to the largest per-(group, topic) lags, and the rest is
    counted as omitted."""
    with running_server(story, "--metrics-max-series", "1") as base:
        m = scrape(base)
    assert not series(m, "offsetlake_consumer_group_committed_offset")
    assert not series(m, "offsetlake_consumer_group_lag")
    # the largest: fresh on orders (1300 - 5), ahead of payments on orders (1283 + 0)
    assert series(m, "offsetlake_consumer_group_topic_lag") == {(("group", "fresh"), ("topic", "orders")): 1295}
    assert m[("offsetlake_metrics_series_omitted", ())] > 0


def test_metrics_need_the_token_when_one_is_set(story):
    with running_server(story, "--token", "s3cret") as base:
        assert httpx.get(base + "/metrics").status_code == 401
        assert scrape(base, Authorization="Bearer s3cret")[("offsetlake_metrics_series_omitted", ())] == 0


def test_an_empty_warehouse_says_nothing_is_served(tmp_path):
    from tests.serving.warehouse_kit import WarehouseKit

    kit = WarehouseKit(tmp_path / "wh")
    kit.snapshot("only", status="failed")
    with running_server(tmp_path / "wh") as base:
        m = scrape(base)
    assert series(m, "offsetlake_snapshot_served") == {(("snapshot_id", ""),): 0}
    assert series(m, "offsetlake_last_run_status")[(("status", "failed"),)] == 1


def test_metrics_of_a_named_snapshot(server):
    r = httpx.get(server + "/metrics", params={"snapshot": "s1"}, timeout=30)
    assert r.status_code == 200
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for f in text_string_to_metric_families(r.text) for s in f.samples}
    assert series(samples, "offsetlake_snapshot_served") == {(("snapshot_id", "s1"),): 1}
    assert series(samples, "offsetlake_previous_snapshot") == {}  # nothing before s1
    assert httpx.get(server + "/metrics", params={"snapshot": "s3"}).status_code == 404  # failed: not readable
