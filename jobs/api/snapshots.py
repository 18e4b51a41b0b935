"""`/snapshots` and `/overview`: which snapshots the warehouse holds, and what the page shows first of one.
"""
from __future__ import annotations

from fastapi import APIRouter

from jobs.api.models import SnapshotsOut
from jobs.api.params import SnapshotQ
from jobs.api.responses import ERRORS, json_response
from jobs.api.server import Served
from pipelines.io.snapshots import SnapshotNotFound, run_summary
from pipelines.serving import group_status, overview as ov
from pipelines.serving.diff import diff_snapshots

router = APIRouter(tags=["snapshots"], responses=ERRORS)


@router.get("/snapshots", response_model=SnapshotsOut)
def snapshots(server: Served, snapshot: str | None = SnapshotQ):
    """Snapshots of every kind (oldest first) with their `runs` row and `kind`; `?snapshot=` narrows the list to
    that one. `latest_snapshot_id` is the default snapshot: the latest succeeded scheduled one."""
    snaps = server.catalog.snapshots()
    latest = next((s.snapshot_id for s in reversed(snaps) if s.is_default_candidate), None)
    if snapshot is not None:
        snaps = [s for s in snaps if s.snapshot_id == snapshot]
        if not snaps:
            raise SnapshotNotFound(f"snapshot {snapshot!r} does not exist")
    return json_response({"latest_snapshot_id": latest, "snapshots": [run_summary(s) for s in snaps]})


@router.get("/overview")
def overview(server: Served, snapshot: str | None = SnapshotQ):
    """What the page shows first: the served snapshot (as-of, age, kind, status, validation) and the recent
    runs, groups by type and state, the groups with the largest lag (when `log_end_offsets` is known) and the
    committed offsets that went backwards since the previous scheduled snapshot."""
    catalog = server.catalog
    snaps = catalog.snapshots()
    try:
        idx = catalog.resolve(snapshot)
    except SnapshotNotFound:
        if snapshot is not None:
            raise
        body = ov.runs_overview(snaps)  # nothing served yet: the runs, so the failed one shows
        body["last_attempt"] = ov.attempt_brief(catalog.reader.last_attempt())
        return json_response(body)
    prev_snap = ov.previous_scheduled(snaps, idx.snapshot)
    key = (idx.snapshot.cache_key, prev_snap.cache_key if prev_snap else None)
    diff = server.cache.snapshot_diffs.get(
        key, lambda: diff_snapshots(catalog.index_for(prev_snap), idx) if prev_snap else None)
    body = ov.overview(snaps, idx, prev_snap, diff)
    body["group_status"] = group_status.summary(server.group_statuses(idx))
    body["last_attempt"] = ov.attempt_brief(catalog.reader.last_attempt())
    return json_response(body, idx.snapshot.snapshot_id)
