"""`/changes` and `/restore-plan.zip`: what went wrong in a window of the snapshot's history, and the plan that
puts the selected groups' committed offsets back as they were at a time.
"""
from __future__ import annotations

from fastapi import APIRouter, Query
from fastapi.responses import Response

from jobs.api.params import SnapshotQ
from jobs.api.responses import ERRORS, HISTORY_ERRORS, bytes_response, dumps, snapshot_headers
from jobs.api.server import Served
from pipelines.serving import changes as ch, restore_plan as rp, views
from pipelines.serving.group_regex import BadGroupRegex, check as check_group_regex
from pipelines.serving.history import HistoryUnavailable

router = APIRouter(tags=["incidents"], responses=ERRORS)


def _group_regex(pattern: str | None) -> None:
    """A pattern RE2 cannot compile, or an empty one, is a 400 before anything is read
    (`pipelines.serving.group_regex`)."""
    if pattern is not None:
        try:
            check_group_regex(pattern)
        except BadGroupRegex as e:
            raise views.BadParameter(f"group_regex {pattern!r}: {e}") from None


@router.get("/changes", responses=HISTORY_ERRORS)
def changes(
    server: Served,
    from_: str = Query(..., alias="from", max_length=64, description="window start: ISO-8601 or epoch ms"),
    to: str = Query(..., max_length=64, description="window end (included): ISO-8601 or epoch ms"),
    group: list[str] | None = Query(None, max_length=10_000, description="only these groups (repeatable)"),
    group_regex: str | None = Query(None, max_length=1000, description="only groups whose id a regex matches "
                                    "anywhere in (re.search, run by RE2)"),
    storm_threshold: int | None = Query(None, ge=1, le=100_000,
                                        description="rebalance storm: more new generations per minute than this"),
    snapshot: str | None = SnapshotQ,
):
    """What changed in the window, from the snapshot's history (`offsetlake changes --json`), oldest first:
    `{snapshot_id, from, to, changes: [{kind, time, group_id, offsets_partition, record_offset, generation,
    ...}]}`, and `warnings` (a list of lines) when the history may lack a change; the kinds and their fields are in
    the README."""
    _group_regex(group_regex)
    try:
        sel = ch.Selection(ch.parse_time(from_, "from"), ch.parse_time(to, "to"), tuple(group or ()),
                           group_regex or None, storm_threshold or ch.DEFAULT_STORM_PER_MINUTE)
    except ch.BadWindow as e:
        raise views.BadParameter(str(e)) from None
    idx = server.catalog.resolve(snapshot)
    items, warnings = ch.changes_and_warnings(server.reader, idx.snapshot, sel)
    body = {"snapshot_id": idx.snapshot.snapshot_id, "from": ch.iso_time(sel.start), "to": ch.iso_time(sel.end),
            "changes": items}
    if warnings:  # what the answer may lack for the history it read (`changes.history_warnings`)
        body["warnings"] = warnings
    return bytes_response(dumps(body), idx.snapshot.snapshot_id)


def _damaged_window(damaged_since: str | None, damaged_until: str | None) -> tuple[int, int | None] | None:
    if damaged_since is None:
        return None
    since = rp.parse_instant(damaged_since, "damaged_since")
    until = None if damaged_until is None else rp.parse_instant(damaged_until, "damaged_until")
    if until is not None and until < since:  # as restore-plan --damaged-until refuses it
        raise ValueError("damaged_until is before damaged_since")
    return since, until


@router.get("/restore-plan.zip", response_class=Response,
            responses={200: {"content": {"application/zip": {}},
                             "description": "the plan's files under restore-plan/"}, **HISTORY_ERRORS})
def restore_plan_zip(
    server: Served,
    as_of: str = Query(..., max_length=64, description="the time to restore: ISO-8601 (UTC when no zone) or epoch ms"),
    group: list[str] | None = Query(None, description="group ids (repeat the parameter)"),
    group_regex: str | None = Query(None, max_length=1000,
                                    description="groups whose id a regex matches anywhere in (re.search, run by RE2)"),
    changed_since: str | None = Query(None, max_length=64,
                                      description="groups with a commit or group record at or after this time, "
                                      "or a commit that took effect then (a transactional one at its COMMIT marker)"),
    damaged_since: str | None = Query(None, max_length=64, description="groups `changes` reports damaged from "
                                      "this time on: an offset rewound, deleted or expired, or the group deleted"),
    damaged_until: str | None = Query(None, max_length=64,
                                      description="with damaged_since: up to this time (default: the as-of)"),
    clamp: bool = Query(False, description="targets clamped into [log start, log end] (restore-plan --clamp)"),
    snapshot: str | None = SnapshotQ,
):
    """`offsetlake restore-plan` as a zip: each selected group's committed offsets at `as_of` (one
    `--reset-offsets --from-file` CSV per group), index.json, apply.sh and README.txt."""
    chosen = [n for n, v in (("group", group), ("group_regex", group_regex), ("changed_since", changed_since),
                             ("damaged_since", damaged_since)) if v]
    if len(chosen) > 1:
        raise views.BadParameter(f"give one of group, group_regex, changed_since, damaged_since, not "
                                 f"{' and '.join(chosen)}")
    if damaged_until is not None and damaged_since is None:
        raise views.BadParameter("damaged_until needs damaged_since")
    try:
        as_of_ms = rp.parse_instant(as_of, "as_of")
        since_ms = None if changed_since is None else rp.parse_instant(changed_since, "changed_since")
        damaged = _damaged_window(damaged_since, damaged_until)
    except ValueError as e:
        raise views.BadParameter(str(e)) from None
    _group_regex(group_regex)
    snap = server.catalog.resolve(snapshot).snapshot
    try:
        plan = rp.restore_plan(server.reader, snap, as_of_ms, groups=group or None, group_regex=group_regex,
                               changed_since_ms=since_ms, damaged=damaged, clamp=clamp)
    except HistoryUnavailable as e:
        raise views.NotFound(str(e)) from None
    headers = {"Content-Disposition": f'attachment; filename="restore-plan-{as_of_ms}.zip"',
               **(snapshot_headers(snap.snapshot_id) or {})}
    return Response(rp.restore_plan_zip(plan), media_type="application/zip", headers=headers)
