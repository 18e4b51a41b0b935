"""The overview an on-call engineer opens first (`GET /overview`, the page's top), and a group's committed offsets
across snapshots (`GET /history/offsets`, the page's per-group chart).

The overview answers "is the data fresh and trustworthy, and where does it hurt": the served snapshot and the
most recent runs (a run whose validation failed says so: it is kept but never served), groups by type and state,
the groups most behind (lag in time first, from `consumer_lag`, then in offsets, from `log_end_offsets`, when the
snapshot has them) and the committed offsets that went backwards since the previous scheduled snapshot (`offsetlake
diff`'s rule).
"""
from __future__ import annotations

import json
import time
from datetime import datetime, timezone

import pyarrow as pa
import pyarrow.compute as pc

from pipelines.io.snapshots import SCHEDULED, Snapshot, SnapshotReader, jsonable
from pipelines.serving.index import SnapshotIndex, consumer_lag

TOP_LAG = 20
MAX_REGRESSIONS = 200
RECENT_RUNS = 10


def epoch_seconds(t: datetime | None) -> float | None:
    if t is None:
        return None
    if t.tzinfo is None:
        t = t.replace(tzinfo=timezone.utc)
    return t.timestamp()


def previous_scheduled(snaps: list[Snapshot], served: Snapshot) -> Snapshot | None:
    """The readable scheduled snapshot finished last before `served`: what regressions are counted against."""
    earlier = [s for s in snaps if s.is_default_candidate and s.snapshot_id != served.snapshot_id
               and (epoch_seconds(s.finished_at) or 0.0) <= (epoch_seconds(served.finished_at) or 0.0)]
    return earlier[-1] if earlier else None


def newest_run(snaps: list[Snapshot]) -> Snapshot | None:
    """The newest scheduled run, whatever its status: the one the nightly alert is about (a what-if run is a
    person's question, never served by default). One writer at a time, so runs start in the order they ran: by
    started_at; a row without it (an abandoned run whose lock named no start) by finished_at, else as_of. A failed
    run's row has no finished_at or as_of (it stopped before them); a row with no time at all ranks oldest."""
    def key(s: Snapshot) -> tuple:
        at = s.started_at or s.finished_at or s.as_of
        return (at is not None, epoch_seconds(at) or 0.0, epoch_seconds(s.finished_at) or 0.0)

    return max((s for s in snaps if s.kind == SCHEDULED), key=key, default=None)


def _json_field(run: dict, column: str) -> dict:
    raw = run.get(column)
    if isinstance(raw, str):
        try:
            raw = json.loads(raw) if raw else None
        except ValueError:
            return {}
    return raw if isinstance(raw, dict) else {}


def _failed_expectations(run: dict) -> list[dict]:
    """`failed_expectations` of a run that failed validation, from its `validation` JSON, else its `summary`:
    `{table, expectation, column}` each."""
    for column in ("validation", "summary"):
        got = _json_field(run, column).get("failed_expectations")
        if isinstance(got, list):
            return [{k: e.get(k) for k in ("table", "expectation", "column")} for e in got if isinstance(e, dict)]
    return []


def _validation(run: dict) -> dict | None:
    """`runs.validation` (stored as JSON text) in short: evaluated and failed checks, the failed ids."""
    raw = run.get("validation")
    if isinstance(raw, str):
        try:
            raw = json.loads(raw) if raw else None
        except ValueError:
            return None
    if not isinstance(raw, dict) or not raw:
        return None
    return {k: raw.get(k) for k in ("success", "policy", "evaluated", "failed", "failed_ids", "unexpected_rows")
            if k in raw}


def run_brief(s: Snapshot) -> dict:
    return {
        "snapshot_id": s.snapshot_id,
        "status": s.status,
        "kind": s.kind,
        "started_at": jsonable(s.started_at),
        "finished_at": jsonable(s.finished_at),
        "as_of": jsonable(s.as_of),
        "readable": s.readable,
        "validation": _validation(s.run or {}),
        # why a run did not succeed: its error and stage (failed), the checks that failed (validation_failed)
        "error": _json_field(s.run or {}, "summary").get("error"),
        "stage": _json_field(s.run or {}, "summary").get("stage"),
        "failed_expectations": _failed_expectations(s.run or {}),
    }


def attempt_brief(attempt: dict | None) -> dict | None:
    """The newest rerun of a served id that left it served (`SnapshotReader.last_attempt`): its row is in
    `_attempts/`, not `runs`, so `last_run` never shows it."""
    if attempt is None:
        return None
    summary = _json_field(attempt, "summary")
    return {"snapshot_id": attempt.get("snapshot_id"), "status": attempt.get("status"),
            "started_at": jsonable(attempt.get("started_at")), "recorded_at": jsonable(attempt.get("recorded_at")),
            "error": summary.get("error"), "stage": summary.get("stage"),
            "failed_expectations": _failed_expectations(attempt)}


def groups_by_type_and_state(idx: SnapshotIndex) -> list[dict]:
    counts: dict[tuple[str, str], int] = {}
    for gid in idx.group_ids:
        g = idx.groups[gid]
        key = (g.get("group_type") or "classic", g.get("state") or "Unknown")
        counts[key] = counts.get(key, 0) + 1
    return [{"group_type": t, "state": s, "groups": n} for (t, s), n in sorted(counts.items())]


def top_lag(idx: SnapshotIndex, limit: int = TOP_LAG) -> tuple[list[dict], int]:
    """The `limit` groups most behind: the largest lag in time first (`consumer_lag`: the group's worst partition),
    then the largest summed lag (partitions whose end offset is known); and how many committed offsets have a known
    lag at all."""
    leo = idx.end_offsets
    t = idx.offsets.table
    timed = idx.group_max_lag
    if not leo or t is None or t.num_rows == 0:
        return [], 0
    per: dict[str, dict] = {}
    known = 0
    for g, tp, p, c in zip(t.column("group_id").to_pylist(), t.column("topic").to_pylist(),
                           t.column("partition").to_pylist(), t.column("committed_offset").to_pylist()):
        lag = consumer_lag(leo.get((tp, p)), c)
        if lag is None:
            continue
        known += 1
        s = per.setdefault(g, {"group_id": g, "lag": 0, "partitions": 0, "max_partition_lag": 0,
                               "max_topic": None, "max_partition": None})
        s["lag"] += lag
        s["partitions"] += 1
        if s["max_topic"] is None or lag > s["max_partition_lag"]:
            s["max_partition_lag"], s["max_topic"], s["max_partition"] = lag, tp, p
    for s in per.values():
        secs, tp, p = timed.get(s["group_id"], (None, None, None))
        s.update(max_lag_seconds=secs, max_lag_seconds_topic=tp, max_lag_seconds_partition=p)
    ranked = sorted(per.values(), key=lambda s: (s["max_lag_seconds"] is None, -(s["max_lag_seconds"] or 0),
                                                 -s["lag"], s["group_id"]))
    out = []
    for s in ranked[:limit]:
        row = idx.groups.get(s["group_id"]) or {}
        out.append({**s, "state": row.get("state"), "group_type": row.get("group_type")})
    return out, known


def overview(snaps: list[Snapshot], idx: SnapshotIndex, previous: Snapshot | None, diff: dict | None,
             now: float | None = None) -> dict:
    """The overview of snapshot `idx` (`diff`: diff_snapshots(previous, idx), or None without a previous one)."""
    now = time.time() if now is None else now
    served = idx.snapshot
    finished = epoch_seconds(served.finished_at)
    last = newest_run(snaps)
    lag, known = top_lag(idx)
    regressed = diff["offsets"]["regressed"] if diff else []
    deleted = diff["groups"]["deleted"] if diff else []
    return {
        "snapshot": {**run_brief(served), "age_seconds": None if finished is None else max(0.0, now - finished)},
        "last_run": run_brief(last) if last is not None else None,
        "recent_runs": [run_brief(s) for s in reversed(snaps[-RECENT_RUNS:])],
        "previous_snapshot_id": previous.snapshot_id if previous is not None else None,
        "groups": {"live": len(idx.group_ids), "by_type_and_state": groups_by_type_and_state(idx)},
        "lag": {"known": bool(idx.end_offsets), "partitions_with_lag": known, "top_groups": lag,
                "partitions_timed": len(idx.lag_seconds)},
        "regressions": {"count": len(regressed), "offsets": regressed[:MAX_REGRESSIONS],
                        "truncated": len(regressed) > MAX_REGRESSIONS},
        "changes": diff["summary"] if diff else None,
        # groups gone since the previous scheduled snapshot (deleted by a tombstone, expired, gone), and those the
        # served snapshot holds as removed
        "deletions": {"count": len(deleted), "groups": deleted[:MAX_REGRESSIONS],
                      "truncated": len(deleted) > MAX_REGRESSIONS, "removed_groups": len(idx.removed_groups)},
    }


def runs_overview(snaps: list[Snapshot]) -> dict:
    """The overview of a warehouse that serves no snapshot yet (every run failed so far): the runs only, so the
    page can still say which run failed and why."""
    last = newest_run(snaps)
    return {
        "snapshot": None,
        "last_run": run_brief(last) if last is not None else None,
        "recent_runs": [run_brief(s) for s in reversed(snaps[-RECENT_RUNS:])],
        "previous_snapshot_id": None,
        "groups": {"live": 0, "by_type_and_state": []},
        "lag": {"known": False, "partitions_with_lag": 0, "top_groups": [], "partitions_timed": 0},
        "regressions": {"count": 0, "offsets": [], "truncated": False},
        "changes": None,
        "deletions": {"count": 0, "groups": [], "truncated": False, "removed_groups": 0},
    }


def offsets_over_snapshots(reader: SnapshotReader, snaps: list[Snapshot], group_id: str,
                           served: Snapshot) -> dict:
    """The group's committed offset (and the partition's log end offset, where known) in every readable scheduled
    snapshot up to `served` (and `served` itself, whatever its kind), by the time their state is as of (`as_of`,
    else `finished_at`: what the page plots them at), oldest first; a point whose committed offset is below the one
    of the snapshot before it in that order is marked `regressed`. A what-if snapshot as of the past finishes last
    but sits among the others at its as-of."""
    upto = epoch_seconds(served.finished_at) or 0.0
    chosen = [s for s in snaps if s.readable and (s.snapshot_id == served.snapshot_id
                                                  or (s.is_default_candidate and (epoch_seconds(s.finished_at) or 0.0) <= upto))]
    chosen.sort(key=lambda s: epoch_seconds(s.as_of or s.finished_at) or 0.0)  # stable: ties keep the run order
    order = {s.snapshot_id: i for i, s in enumerate(chosen)}
    cols = ["snapshot_id", "topic", "partition", "committed_offset"]
    parts = []
    for table in ("loaded_offsets", "empty_group_offsets"):
        t = reader.history_table(table, filters=[("group_id", "=", group_id)], columns=cols)
        if t is not None and t.num_rows:
            parts.append(t.select(cols).cast(pa.schema([("snapshot_id", pa.string()), ("topic", pa.string()),
                                                       ("partition", pa.int32()), ("committed_offset", pa.int64())])))
    rows: dict[tuple[str, int], dict[str, int]] = {}
    for t in parts:
        for sid, tp, p, c in zip(*(t.column(c).to_pylist() for c in cols)):
            if sid in order and c is not None:
                rows.setdefault((tp, p), {}).setdefault(sid, c)  # loaded_offsets first: the served copy wins
    ends: dict[tuple[str, int], dict[str, int]] = {}
    topics = sorted({tp for tp, _ in rows})
    if topics:
        t = reader.history_table("log_end_offsets", filters=[("topic", "in", topics)],
                                 columns=["snapshot_id", "topic", "partition", "log_end_offset"])
        if t is not None and t.num_rows:
            t = t.filter(pc.is_in(t.column("snapshot_id"), pa.array(list(order), pa.string())))
            for sid, tp, p, e in zip(*(t.column(c).to_pylist() for c in ("snapshot_id", "topic", "partition",
                                                                         "log_end_offset"))):
                if (tp, p) in rows:
                    ends.setdefault((tp, p), {})[sid] = e
    partitions = []
    for (tp, p) in sorted(rows):
        points, before = [], None
        for s in chosen:
            c = rows[(tp, p)].get(s.snapshot_id)
            if c is None:  # absent from a snapshot: gone, then appeared again (diff's rule), not a regression
                before = None
                continue
            end = ends.get((tp, p), {}).get(s.snapshot_id)
            points.append({"snapshot_id": s.snapshot_id, "committed_offset": c, "log_end_offset": end,
                           "lag": consumer_lag(end, c), "regressed": before is not None and c < before})
            before = c
        partitions.append({"topic": tp, "partition": p, "points": points})
    return {
        "group_id": group_id,
        "snapshot_id": served.snapshot_id,
        "snapshots": [{"snapshot_id": s.snapshot_id, "as_of": jsonable(s.as_of), "finished_at": jsonable(s.finished_at),
                       "kind": s.kind} for s in chosen],
        "partitions": partitions,
    }
