"""Prometheus metrics of a warehouse: the served snapshot, the last run, groups, committed offsets, lag, regressions.

Rendered with prometheus_client (text format 0.0.4) for `GET /metrics` and for the textfile `rebuild` can leave
for node_exporter. Label cardinality is bounded: per-partition series (`group`, `topic`, `partition`) only while
the served snapshot has at most `max_series` committed offsets; above that, one series per (group, topic) with
the summed lag, the `max_series` largest; regressions per group likewise capped; what was left out is counted in
`offsetlake_metrics_series_omitted`. Every other family has a fixed label set (group type and state, run status).
"""
from __future__ import annotations

import json
import time
from collections.abc import Iterable
from datetime import datetime

from prometheus_client.core import CollectorRegistry, GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, generate_latest

from pipelines.io.snapshots import Snapshot
from pipelines.serving.index import GROUP_STATES, GROUP_TYPES, SnapshotIndex, consumer_lag
from pipelines.serving.overview import epoch_seconds

__all__ = ["CONTENT_TYPE", "DEFAULT_MAX_SERIES", "RUN_STATUSES", "render", "run_families",
           "snapshot_families", "state_families"]

DEFAULT_MAX_SERIES = 10_000
# The classic text format (0.0.4): every Prometheus server and node_exporter reads it.
CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4
RUN_STATUSES = ("running", "succeeded", "validation_failed", "failed")
_P = "offsetlake_"


def _gauge(name: str, doc: str, labels: Iterable[str] = ()) -> GaugeMetricFamily:
    return GaugeMetricFamily(_P + name, doc, labels=list(labels))


def render(families: Iterable) -> bytes:
    """Families -> Prometheus text exposition, through prometheus_client's own writer."""

    class _Once:
        def collect(self):
            return iter(families)

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Once())
    return generate_latest(registry)


def snapshot_families(served: Snapshot | None, now: float | None = None) -> list:
    """The served snapshot's as-of, finish time and age (seconds since it was written)."""
    now = time.time() if now is None else now
    up = _gauge("snapshot_served", "1 when a succeeded snapshot is served, 0 when the warehouse has none",
                ["snapshot_id"])
    out = [up]
    if served is None:
        up.add_metric([""], 0)
        return out
    up.add_metric([served.snapshot_id], 1)
    as_of, finished = epoch_seconds(served.as_of), epoch_seconds(served.finished_at)
    if as_of is not None:
        g = _gauge("snapshot_as_of_timestamp_seconds", "as_of of the served snapshot (state as of this time)")
        g.add_metric([], as_of)
        out.append(g)
    if finished is not None:
        g = _gauge("snapshot_finished_timestamp_seconds", "when the served snapshot's run finished")
        g.add_metric([], finished)
        out.append(g)
        g = _gauge("snapshot_age_seconds", "seconds since the served snapshot's run finished (alert when stale)")
        g.add_metric([], max(0.0, now - finished))
        out.append(g)
    return out


def _summary_of(run: dict) -> dict:
    raw = run.get("summary")
    if isinstance(raw, dict):
        return raw
    try:
        return json.loads(raw) if raw else {}
    except (TypeError, ValueError):
        return {}


def run_families(run: dict | None) -> list:
    """The last run (whatever its status): status one-hot, duration, records in / quarantined / unread bytes."""
    status = _gauge("last_run_status", "1 for the status of the warehouse's most recent run", ["status"])
    if run is None:
        return [status]
    for s in RUN_STATUSES:
        status.add_metric([s], 1 if run.get("status") == s else 0)
    out = [status]
    started, finished = epoch_seconds(run.get("started_at")), epoch_seconds(run.get("finished_at"))
    if started is not None:
        g = _gauge("last_run_started_timestamp_seconds", "when the most recent run started")
        g.add_metric([], started)
        out.append(g)
    if started is not None and finished is not None:
        g = _gauge("last_run_duration_seconds", "wall time of the most recent finished run")
        g.add_metric([], max(0.0, finished - started))
        out.append(g)
    summary = _summary_of(run)
    for name, key, doc in (
        ("last_run_records_in", "records_in", "records the most recent run read"),
        ("last_run_records_quarantined", "records_quarantined", "records it quarantined (not replayed)"),
        ("last_run_bytes_unread", "bytes_unread", "input bytes it could not frame into records"),
    ):
        value = run.get(key, summary.get(key))
        if value is not None:
            g = _gauge(name, doc)
            g.add_metric([], float(value))
            out.append(g)
    return out


def state_families(idx: SnapshotIndex, previous: SnapshotIndex | None, max_series: int = DEFAULT_MAX_SERIES) -> list:
    """Groups by type and state, committed offsets and lag, offset regressions against `previous`."""
    groups = _gauge("groups", "live groups of the served snapshot by type and state", ["type", "state"])
    counts: dict[tuple[str, str], int] = {}
    for gid in idx.group_ids:
        g = idx.groups[gid]
        key = (g.get("group_type") or "classic", g.get("state") or "Unknown")
        counts[key] = counts.get(key, 0) + 1
    for (t, s), n in sorted(counts.items()):
        groups.add_metric([t if t in GROUP_TYPES else "other", s if s in GROUP_STATES else "other"], n)
    out = [groups]

    omitted = 0
    leo = idx.end_offsets
    rows = []  # (group, topic, partition, committed, lag)
    t = idx.offsets.table
    if t is not None and t.num_rows:
        for g, tp, p, c in zip(t.column("group_id").to_pylist(), t.column("topic").to_pylist(),
                               t.column("partition").to_pylist(), t.column("committed_offset").to_pylist()):
            rows.append((g, tp, p, c, consumer_lag(leo.get((tp, p)), c)))
    if len(rows) <= max_series:
        committed = _gauge("consumer_group_committed_offset", "committed offset per group, topic and partition",
                           ["group", "topic", "partition"])
        lag = _gauge("consumer_group_lag", "log end offset minus committed offset, where the end offset is known",
                     ["group", "topic", "partition"])
        for g, tp, p, c, lg in rows:
            committed.add_metric([g, tp, str(p)], c)
            if lg is not None:
                lag.add_metric([g, tp, str(p)], lg)
        out += [committed, lag]
    else:
        by_topic: dict[tuple[str, str], int] = {}
        for g, tp, _p, _c, lg in rows:
            if lg is not None:
                by_topic[(g, tp)] = by_topic.get((g, tp), 0) + lg
        top = sorted(by_topic.items(), key=lambda kv: (-kv[1], kv[0]))
        omitted += 2 * len(rows) + max(0, len(top) - max_series)
        lag = _gauge("consumer_group_topic_lag", "summed lag per group and topic (per-partition series are over "
                                                 "the series limit); the largest only", ["group", "topic"])
        for (g, tp), v in top[:max_series]:
            lag.add_metric([g, tp], v)
        out.append(lag)

    regressions = _gauge("offset_regressions", "committed offsets that went backwards since the previous "
                                               "snapshot, per group", ["group"])
    total = _gauge("offset_regressions_total_partitions", "committed offsets that went backwards since the "
                                                           "previous snapshot, all groups")
    n_total = 0
    if previous is not None:
        per_group = _regressions(previous, idx)
        n_total = sum(per_group.values())
        top = sorted(per_group.items(), key=lambda kv: (-kv[1], kv[0]))
        omitted += max(0, len(top) - max_series)
        for g, n in top[:max_series]:
            regressions.add_metric([g], n)
    total.add_metric([], n_total)
    prev = _gauge("previous_snapshot", "the snapshot regressions are counted against (1), if any", ["snapshot_id"])
    if previous is not None:
        prev.add_metric([previous.snapshot.snapshot_id], 1)
    dropped = _gauge("metrics_series_omitted", "series left out to keep label cardinality under the limit")
    dropped.add_metric([], omitted)
    return out + [regressions, total, prev, dropped]


def _regressions(before: SnapshotIndex, after: SnapshotIndex) -> dict[str, int]:
    """Per group: partitions whose committed offset went backwards (`offsetlake diff`'s `regressed`)."""
    from pipelines.serving.diff import diff_snapshots

    out: dict[str, int] = {}
    for r in diff_snapshots(before, after)["offsets"]["regressed"]:
        out[r["group_id"]] = out.get(r["group_id"], 0) + 1
    return out


def catalog_families(catalog, max_series: int = DEFAULT_MAX_SERIES, cache: dict | None = None,
                     now: float | None = None, snapshot_id: str | None = None) -> list:
    """Every family for `GET /metrics` from the server's catalog: the served snapshot (the one the API answers
    with by default), the last run, and the state families against the scheduled snapshot before it. The state
    families are computed once per (served, previous) pair and kept in `cache`."""
    from pipelines.io.snapshots import SnapshotNotFound

    snaps = catalog.snapshots()
    last = max(snaps, key=lambda s: (epoch_seconds(s.started_at) or 0.0, epoch_seconds(s.finished_at) or 0.0), default=None)
    try:
        idx = catalog.resolve(None)
    except SnapshotNotFound:
        if snapshot_id is not None:
            raise
        return snapshot_families(None, now) + run_families(last.run if last else None)
    if snapshot_id is not None:
        idx = catalog.resolve(snapshot_id)  # unknown or unreadable: SnapshotNotFound, a 404
    from pipelines.serving.overview import previous_scheduled

    served = idx.snapshot
    prev = previous_scheduled(snaps, served)
    key = (served.cache_key, prev.cache_key if prev else None, max_series)
    state = (cache or {}).get(key)
    if state is None:
        state = state_families(idx, catalog.index_for(prev) if prev else None, max_series)
        if cache is not None:
            cache.clear()  # one pair at a time: the served snapshot only moves forward
            cache[key] = state
    return snapshot_families(served, now) + run_families(last.run if last else None) + state


def rebuild_families(summary, *, status: str | None = None, finished: float | None = None) -> list:
    """What one `rebuild` run leaves for node_exporter's textfile collector: its snapshot, status, duration and
    counts (`summary` is the run's RunSummary; `status` overrides it for a run that stopped with an error)."""
    finished = time.time() if finished is None else finished
    status = status or summary.status
    run = {"status": status, "records_in": summary.records_in, "records_quarantined": summary.records_quarantined,
           "bytes_unread": getattr(summary, "bytes_unread", None)}
    duration = sum((summary.stage_seconds or {}).values())
    out = run_families(run)
    for name, value, doc in (
        ("last_run_finished_timestamp_seconds", finished, "when the most recent run finished"),
        ("last_run_duration_seconds", duration, "wall time of the most recent run's stages"),
        ("last_run_groups", summary.groups, "live groups in the run's snapshot"),
        ("last_run_offsets", summary.offsets, "committed offsets in the run's snapshot"),
    ):
        g = _gauge(name, doc)
        g.add_metric([], float(value))
        out.append(g)
    snap = _gauge("last_run_snapshot", "the snapshot the most recent run wrote", ["snapshot_id"])
    snap.add_metric([summary.snapshot_id], 1)
    out.append(snap)
    if summary.as_of:
        g = _gauge("last_run_as_of_timestamp_seconds", "as_of of the snapshot the most recent run wrote")
        g.add_metric([], datetime.fromisoformat(summary.as_of).timestamp())
        out.append(g)
    return out
