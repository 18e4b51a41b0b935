"""Prometheus metrics of a warehouse: the served snapshot, the newest run, groups, their status, committed
offsets, lag, regressions.

Rendered with prometheus_client (text format 0.0.4) for `GET /metrics` and for the textfile `rebuild` can leave
for node_exporter. Names and label sets never depend on the snapshot or its size: no family carries a snapshot id
but `offsetlake_snapshot_info`, and over `max_series` a per-partition or per-group family keeps its name and labels
and drops its least urgent series (smallest lag; healthiest groups), counted in `offsetlake_metrics_series_omitted`.
"""
from __future__ import annotations

import copy
import json
import logging
import math
import re
import time
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import TypeVar

from prometheus_client.core import CollectorRegistry, GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, generate_latest

from pipelines.io.snapshots import DamagedTable, Snapshot, SnapshotNotFound, pick_snapshot
from pipelines.serving import group_status as gs
from pipelines.serving.cache import Kept
from pipelines.serving.diff import diff_snapshots
from pipelines.serving.index import GROUP_STATES, GROUP_TYPES, SnapshotIndex, consumer_lag
from pipelines.serving.overview import epoch_seconds, newest_run, previous_scheduled

__all__ = ["CONTENT_TYPE", "DEFAULT_MAX_SERIES", "RUN_STATUSES", "attempt_families", "lock_families", "render",
           "run_families", "snapshot_families", "state_families"]

DEFAULT_MAX_SERIES = 10_000
# The classic text format (0.0.4): every Prometheus server and node_exporter reads it.
CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4
RUN_STATUSES = ("running", "succeeded", "validation_failed", "failed")
_P = "offsetlake_"
T = TypeVar("T")
log = logging.getLogger(__name__)


def _gauge(name: str, doc: str, labels: Iterable[str] = ()) -> GaugeMetricFamily:
    return GaugeMetricFamily(_P + name, doc, labels=list(labels))


# Characters the text format has no escape for (it has `\\`, `\"` and `\n`) that end a line for a reader that
# splits lines as Python's text files and str.splitlines do (`\r`, `\x0b`, `\x0c`, `\x1c`-`\x1e`, `\x85`, U+2028,
# U+2029: prometheus_client's text_fd_to_metric_families over a file opened as text failed on a raw `\r`), or act on
# a terminal showing the scrape (`\x1b`): every C0 control but the newline, DEL, the C1 controls, the two separators.
_UNSPEAKABLE = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029]")


def _spoken(value: str) -> str:
    r"""A label value with each such character as the text views print it (`\r`, `\x1b`, `\u2028`): a parser reads
    the escape back as its text, a backslash and `r`, never as the character itself, which no escape can say."""
    return _UNSPEAKABLE.sub(lambda m: repr(m.group())[1:-1], value)


def _speakable(family):
    r"""The family with its label values `_spoken`. A value whose spoken form is another series' own labels (a group
    whose id is the text `a\rb` beside one holding `a`, a carriage return and `b`) keeps its raw characters: two
    series of one label set fail the whole scrape, and the format allows any character but the newline raw."""
    if not any(_UNSPEAKABLE.search(v) for s in family.samples for v in s.labels.values()):
        return family
    taken = {(s.name, tuple(sorted(s.labels.items()))) for s in family.samples}
    samples = []
    for s in family.samples:
        labels = {k: _spoken(v) for k, v in s.labels.items()}
        if labels != s.labels:
            key = (s.name, tuple(sorted(labels.items())))
            if key in taken:
                labels = s.labels
            else:
                taken.add(key)
        samples.append(s._replace(labels=labels))
    spoken = copy.copy(family)
    spoken.samples = samples
    return spoken


def render(families: Iterable) -> bytes:
    """Families -> Prometheus text exposition, through prometheus_client's own writer, label values `_spoken`."""

    class _Once:
        def collect(self):
            return (_speakable(f) for f in families)

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Once())
    return generate_latest(registry)


def snapshot_families(served: Snapshot | None, now: float | None = None,
                      previous: Snapshot | None = None) -> list:
    """The served snapshot: served or not, which one (one info series), its as-of, finish time and age. With none
    served the age is +Inf: the staleness rule fires on a warehouse that never served a snapshot too."""
    now = time.time() if now is None else now
    up = _gauge("snapshot_served", "1 when a succeeded snapshot is served, 0 when the warehouse has none")
    age = _gauge("snapshot_age_seconds", "seconds since the served snapshot's run finished (+Inf: none served)")
    out = [up, age]
    if served is None:
        up.add_metric([], 0)
        age.add_metric([], math.inf)
        return out
    up.add_metric([], 1)
    info = _gauge("snapshot_info", "the served snapshot (1): its id, kind and the snapshot regressions are "
                                   "counted against", ["snapshot_id", "kind", "previous_snapshot_id"])
    info.add_metric([served.snapshot_id, served.kind, previous.snapshot_id if previous is not None else ""], 1)
    out.append(info)
    as_of, finished = epoch_seconds(served.as_of), epoch_seconds(served.finished_at)
    age.add_metric([], math.inf if finished is None else max(0.0, now - finished))
    if as_of is not None:
        g = _gauge("snapshot_as_of_timestamp_seconds", "as_of of the served snapshot (state as of this time)")
        g.add_metric([], as_of)
        out.append(g)
    if finished is not None:
        g = _gauge("snapshot_finished_timestamp_seconds", "when the served snapshot's run finished")
        g.add_metric([], finished)
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
    """The newest run (whatever its status): status one-hot (all 0 without a run), start, finish, duration,
    records in / quarantined / unread bytes."""
    status = _gauge("last_run_status", "1 for the status of the warehouse's newest scheduled run", ["status"])
    for s in RUN_STATUSES:
        status.add_metric([s], 1 if run is not None and run.get("status") == s else 0)
    out = [status]
    if run is None:
        return out
    started, finished = epoch_seconds(run.get("started_at")), epoch_seconds(run.get("finished_at"))
    if started is not None:
        g = _gauge("last_run_started_timestamp_seconds", "when the newest run started")
        g.add_metric([], started)
        out.append(g)
    if finished is not None:
        g = _gauge("last_run_finished_timestamp_seconds", "when the newest run finished")
        g.add_metric([], finished)
        out.append(g)
    if started is not None and finished is not None:
        g = _gauge("last_run_duration_seconds", "wall time of the newest run")
        g.add_metric([], max(0.0, finished - started))
        out.append(g)
    summary = _summary_of(run)
    for name, key, doc in (
        ("last_run_records_in", "records_in", "records the newest run read"),
        ("last_run_records_quarantined", "records_quarantined", "records it quarantined (not replayed)"),
        ("last_run_bytes_unread", "bytes_unread", "input bytes it could not frame into records"),
    ):
        value = run.get(key, summary.get(key))
        if value is not None:
            g = _gauge(name, doc)
            g.add_metric([], float(value))
            out.append(g)
    return out


def attempt_families(last: dict | None, attempt: dict | None) -> list:
    """The newest scheduled run counting the reruns of a served id kept in `_attempts/` (`last`: the newest runs
    row; `attempt`: `SnapshotReader.last_attempt`): a rerun that failed leaves the served row and `last_run_status`
    as they were, so only these say the night's run of that id failed. Status one-hot, start, and when the newest
    such rerun was recorded."""
    def started(run: dict | None) -> float | None:
        return None if run is None else epoch_seconds(run.get("started_at") or run.get("recorded_at"))

    newest = last
    if attempt is not None and (last is None or (started(attempt) or 0.0) > (started(last) or 0.0)):
        newest = attempt
    status = _gauge("last_attempt_status", "1 for the status of the newest scheduled run, reruns of a served "
                                           "snapshot id that left it served included", ["status"])
    for s in RUN_STATUSES:
        status.add_metric([s], 1 if newest is not None and newest.get("status") == s else 0)
    out = [status]
    at = started(newest)
    if at is not None:
        g = _gauge("last_attempt_started_timestamp_seconds", "when the newest scheduled run (or rerun) started")
        g.add_metric([], at)
        out.append(g)
    if attempt is not None:
        g = _gauge("last_kept_attempt_timestamp_seconds", "when the newest rerun of a served snapshot id that did "
                                                          "not replace it (failed, killed, validation failed) ended")
        g.add_metric([], epoch_seconds(attempt["recorded_at"]))
        out.append(g)
    return out


def lock_families(holder: dict | None) -> list:
    """Whether a run holds the warehouse's writer lock, and how long ago its heartbeat (every 30 s) last touched it:
    a run killed (out of memory, its node lost) leaves its lock and no `runs` row until the next run records it,
    so only a heartbeat that stopped says it died."""
    held = _gauge("run_in_progress", "1 while a run holds the warehouse's writer lock")
    held.add_metric([], 0 if holder is None else 1)
    out = [held]
    if holder is not None and isinstance(holder.get("age_seconds"), (int, float)):
        g = _gauge("writer_lock_heartbeat_age_seconds", "seconds since the writer lock's heartbeat (every 30 s "
                                                        "while its run lives)")
        g.add_metric([], float(holder["age_seconds"]))
        out.append(g)
    return out


def _partition_families(idx: SnapshotIndex, max_series: int) -> tuple[list, int]:
    """Committed offset, lag and lag in time per (group, topic, partition); over `max_series` partitions, the
    largest lags are kept: in time first, then in offsets (known before unknown). Returns the families and the
    series left out."""
    leo, timed = idx.end_offsets, idx.lag_seconds
    rows = []  # (group, topic, partition, committed, lag, lag seconds)
    t = idx.offsets.table
    if t is not None and t.num_rows:
        for g, tp, p, c in zip(t.column("group_id").to_pylist(), t.column("topic").to_pylist(),
                               t.column("partition").to_pylist(), t.column("committed_offset").to_pylist()):
            rows.append((g, tp, p, c, consumer_lag(leo.get((tp, p)), c), timed.get((g, tp, p))))
    omitted = 0
    if len(rows) > max_series:
        rows.sort(key=lambda r: (r[4] is None and r[5] is None, -(r[5] if r[5] is not None else -1), -(r[4] or 0),
                                 r[0], r[1], r[2]))
        omitted = sum(1 + (r[4] is not None) + (r[5] is not None) for r in rows[max_series:])
        rows = rows[:max_series]
    committed = _gauge("consumer_group_committed_offset", "committed offset per group, topic and partition",
                       ["group", "topic", "partition"])
    lag = _gauge("consumer_group_lag", "log end offset minus committed offset, where the end offset is known",
                 ["group", "topic", "partition"])
    lag_seconds = _gauge("consumer_group_lag_seconds", "seconds from the first record the group has not consumed "
                                                       "(the largest timestamp up to it) to the snapshot's as-of; 0 "
                                                       "caught up; where the partition's segments were in the input",
                         ["group", "topic", "partition"])
    for g, tp, p, c, lg, secs in rows:
        committed.add_metric([g, tp, str(p)], c)
        if lg is not None:
            lag.add_metric([g, tp, str(p)], lg)
        if secs is not None:
            lag_seconds.add_metric([g, tp, str(p)], secs)
    return [committed, lag, lag_seconds], omitted


def _group_series(row: dict, st: gs.GroupStatus | None, timed: bool) -> int:
    """How many series `_group_families` gives one group (what leaving it out takes away)."""
    n = 1 + (row.get("member_count") is not None) + timed
    if st is not None:
        n += 3 + (st.total_lag is not None) + 2 * (st.max_lag is not None)
    return n


def _group_families(idx: SnapshotIndex, statuses: dict[str, gs.GroupStatus] | None,
                    max_series: int) -> tuple[list, int]:
    """Per group: state, members, Burrow status, partitions, total and max lag; over `max_series` groups, the
    worst are kept (status, then total lag). The status counts cover every group whatever the limit; with
    `statuses` None (not judged) there are none."""
    state = _gauge("consumer_group_state", "1 for the group's state (Kafka's name)", ["group", "state"])
    members = _gauge("consumer_group_members", "members of the group", ["group"])
    status = _gauge("consumer_group_status", "1 for the group's status over its commit windows (Burrow's rules: "
                                             "OK, WARN, STOP, STALL, REWIND)", ["group", "status"])
    parts = _gauge("consumer_group_partitions", "partitions the group has committed offsets for", ["group"])
    known = _gauge("consumer_group_lag_known_partitions", "of those, partitions whose log end offset is known",
                   ["group"])
    total = _gauge("consumer_group_total_lag", "lag summed over the partitions whose end offset is known "
                                               "(Burrow's totallag; a negative lag counts 0)", ["group"])
    worst = _gauge("consumer_group_max_lag", "the largest lag of one partition of the group (Burrow's maxlag)",
                   ["group"])
    worst_at = _gauge("consumer_group_max_lag_info", "the partition with the group's largest lag (1)",
                      ["group", "topic", "partition"])
    worst_time = _gauge("consumer_group_max_lag_seconds", "the largest lag in time of one partition of the group",
                        ["group"])
    counts = _gauge("groups_with_status", "groups with committed offsets by status (Burrow's rules)", ["status"])
    timed = idx.group_max_lag
    if statuses is not None:
        for s, n in gs.status_counts(statuses).items():
            counts.add_metric([s], n)
    statuses = statuses or {}
    ok = gs.GroupStatus("", "OK", [])
    ids = sorted(idx.group_ids, key=lambda g: (-gs.SEVERITY[statuses.get(g, ok).status],
                                               -(statuses.get(g, ok).total_lag or 0), g))
    omitted = 0
    if len(ids) > max_series:
        omitted = sum(_group_series(idx.groups.get(g) or {}, statuses.get(g), g in timed) for g in ids[max_series:])
        ids = ids[:max_series]
    for gid in sorted(ids):
        row = idx.groups.get(gid) or {}
        state.add_metric([gid, row.get("state") or "Unknown"], 1)
        if row.get("member_count") is not None:
            members.add_metric([gid], row["member_count"])
        if gid in timed:
            worst_time.add_metric([gid], timed[gid][0])
        st = statuses.get(gid)
        if st is None:
            continue
        status.add_metric([gid, st.status], 1)
        parts.add_metric([gid], len(st.partitions))
        known.add_metric([gid], st.lag_known_partitions)
        if st.total_lag is not None:
            total.add_metric([gid], st.total_lag)
        top = st.max_lag
        if top is not None:
            worst.add_metric([gid], top.lag)
            worst_at.add_metric([gid, top.topic, str(top.partition)], 1)
    return [state, members, status, parts, known, total, worst, worst_at, worst_time, counts], omitted


def state_families(idx: SnapshotIndex, previous: SnapshotIndex | None, max_series: int = DEFAULT_MAX_SERIES,
                   statuses: dict[str, gs.GroupStatus] | None = None, *, compared: bool = True) -> list:
    """Groups by type and state; per group its state, members, status and lag; committed offsets and lag per
    partition; offset regressions against `previous`. `statuses` None: the groups could not be judged (their
    status families stay empty, never all OK); `compared` False: `previous` could not be read (no regression
    series, never 0)."""
    groups = _gauge("groups", "live groups of the served snapshot by type and state", ["type", "state"])
    counts: dict[tuple[str, str], int] = {}
    for gid in idx.group_ids:
        g = idx.groups[gid]
        key = (g.get("group_type") or "classic", g.get("state") or "Unknown")
        key = (key[0] if key[0] in GROUP_TYPES else "other", key[1] if key[1] in GROUP_STATES else "other")
        counts[key] = counts.get(key, 0) + 1
    for (t, s), n in sorted(counts.items()):
        groups.add_metric([t, s], n)
    out = [groups]
    fams, omitted = _group_families(idx, statuses, max_series)
    out += fams
    fams, dropped = _partition_families(idx, max_series)
    out += fams
    omitted += dropped

    regressions = _gauge("offset_regressions", "committed offsets that went backwards since the previous "
                                               "snapshot, per group", ["group"])
    regressed = _gauge("offset_regressed_partitions", "committed offsets that went backwards since the previous "
                                                      "snapshot, all groups")
    n_total = 0
    if previous is not None:
        per_group = _regressions(previous, idx)
        n_total = sum(per_group.values())
        top = sorted(per_group.items(), key=lambda kv: (-kv[1], kv[0]))
        omitted += max(0, len(top) - max_series)
        for g, n in top[:max_series]:
            regressions.add_metric([g], n)
    if compared:
        regressed.add_metric([], n_total)
    left_out = _gauge("metrics_series_omitted", "series left out to keep label cardinality under the limit")
    left_out.add_metric([], omitted)
    return out + [regressions, regressed, left_out]


def _regressions(before: SnapshotIndex, after: SnapshotIndex) -> dict[str, int]:
    """Per group: partitions whose committed offset went backwards (`offsetlake diff`'s `regressed`)."""
    out: dict[str, int] = {}
    for r in diff_snapshots(before, after)["offsets"]["regressed"]:
        out[r["group_id"]] = out.get(r["group_id"], 0) + 1
    return out


def unreadable_family(damaged: Iterable[DamagedTable]) -> GaugeMetricFamily:
    """1 per table a scrape could not read (the family stays, without series, when every table read)."""
    g = _gauge("table_unreadable", "1 for a warehouse table /metrics could not read (damaged): the series read "
                                   "from it are left out, the runs table's are there", ["table"])
    for table in sorted({e.table or "unknown" for e in damaged}):
        g.add_metric([table], 1)
    return g


def catalog_families(catalog, max_series: int = DEFAULT_MAX_SERIES,
                     cache: Kept[list[GaugeMetricFamily]] | None = None, now: float | None = None,
                     snapshot_id: str | None = None,
                     statuses: Callable[[SnapshotIndex], dict[str, gs.GroupStatus]] | None = None) -> list:
    """Every family for `GET /metrics` from the server's catalog: the served snapshot (the one the API answers
    with by default), the newest scheduled run, and the state families against the scheduled snapshot before it.
    The state families are computed once per (served, previous) pair and kept in `cache`; `statuses(idx)` gives
    the groups' statuses (default: evaluated here).

    A damaged table (`DamagedTable`) leaves out the families read from it, never the scrape: the run-level
    families come from the `runs` table alone, and a 500 would be Prometheus' `up == 0`, every rule on them quiet
    while the night's run failed or the snapshot went stale. `offsetlake_table_unreadable` names the table."""
    snaps = catalog.snapshots()
    last = newest_run(snaps)
    runs = [*run_families(last.run if last else None),
            *attempt_families(last.run if last else None, catalog.reader.last_attempt()),
            *lock_families(catalog.reader.writer_lock())]
    damaged: list[DamagedTable] = []

    def readable(read: Callable[[], T]) -> T | None:
        try:
            return read()
        except DamagedTable as e:
            damaged.append(e)
            return None

    try:
        idx = catalog.resolve(None)
    except SnapshotNotFound:
        if snapshot_id is not None:
            raise
        return snapshot_families(None, now) + runs + [unreadable_family(())]
    except DamagedTable as e:
        idx = None
        if snapshot_id is None:
            damaged.append(e)
    if snapshot_id is not None:
        idx = readable(lambda: catalog.resolve(snapshot_id))  # unknown or unreadable: SnapshotNotFound, a 404
    if idx is None:  # its runs row says what it is, when it finished; its tables say nothing more
        served = (catalog.status()["serving"] if snapshot_id is None else None) or pick_snapshot(snaps, snapshot_id)
        return (snapshot_families(served, now, previous_scheduled(snaps, served)) + runs
                + [unreadable_family(damaged)])
    served = idx.snapshot
    prev = previous_scheduled(snaps, served)
    key = (served.cache_key, prev.cache_key if prev else None, max_series)
    judge = statuses if statuses is not None else (lambda i: gs.evaluate_groups(catalog.reader, i, snaps))

    def build() -> list[GaugeMetricFamily]:
        return state_families(idx, catalog.index_for(prev) if prev else None, max_series, judge(idx))

    try:
        state = build() if cache is None else cache.get(key, build)
    except DamagedTable:
        # read again one by one, so that what did read is there; never kept: a repaired table is read next time.
        # An index that failed was logged by its build (the catalog's one line); the groups' judgement is not
        before = readable(lambda: catalog.index_for(prev)) if prev else None
        judged = readable(lambda: judge(idx))
        if judged is None:
            log.error("/metrics of snapshot %s has no group status: %s", served.snapshot_id, damaged[-1])
        state = state_families(idx, before, max_series, judged, compared=prev is None or before is not None)
    return snapshot_families(served, now, prev) + runs + state + [unreadable_family(damaged)]


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
