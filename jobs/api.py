"""The read-only HTTP JSON API over a warehouse's snapshots (`offsetlake serve`), routes as in CONTRACT.md.

Every route takes `?snapshot=ID` (default: the latest succeeded scheduled snapshot; a what-if run is read by
id). A request resolves its snapshot once
(see pipelines/serving/catalog.py) and answers from that snapshot's in-memory index; the answer names the
snapshot in its body (or, for the bare list of `/groups/{id}/offsets`, in the `X-Offsetlake-Snapshot` header).
One way of routing, auth and caching: FastAPI's routes, the bearer token as a dependency, and point answers kept
serialized in the snapshot index's response cache.
"""
from __future__ import annotations

import contextlib
import json
import logging
import secrets
import threading
from pathlib import Path
from typing import Any

import orjson

from fastapi import Depends, FastAPI, Path as PathParam, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, ConfigDict
from starlette.concurrency import run_in_threadpool
from starlette.convertors import Convertor, register_url_convertor
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from pipelines.io.snapshots import GroupNotFound, SnapshotNotFound, SnapshotReader, run_summary
from pipelines.serving import group_status, views
from pipelines.serving.history import HistoryUnavailable
from pipelines.serving.catalog import SnapshotCatalog

STATIC_DIR = Path(__file__).resolve().parent / "static"
SNAPSHOT_HEADER = "X-Offsetlake-Snapshot"


# --- response models (documentation and schema checks; answers are built as plain JSON) ----------------------
class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class ErrorOut(BaseModel):
    detail: str


class HealthOut(_Open):
    status: str
    snapshot_id: str | None
    latest_snapshot_id: str | None
    indexing: list[str]


class SnapshotOut(_Open):
    snapshot_id: str
    status: str | None
    started_at: str | None
    finished_at: str | None
    as_of: str | None
    kind: str  # scheduled or what-if (a run with --as-of/--until-*: served by id only)
    validation: dict[str, Any] | None = None  # runs.validation, stored as JSON text, listed as an object
    summary: dict[str, Any] | None = None  # runs.summary: the run's summary (`rebuild --json`) as stored


class SnapshotsOut(BaseModel):
    latest_snapshot_id: str | None
    snapshots: list[SnapshotOut]


class GroupSummaryOut(_Open):
    group_id: str
    group_type: str | None
    protocol_type: str | None
    state: str | None
    generation: int | None
    member_count: int | None
    offset_count: int


class GroupsPageOut(BaseModel):
    snapshot_id: str
    groups: list[GroupSummaryOut]
    next_cursor: str | None


class OffsetOut(BaseModel):
    topic: str
    partition: int
    committed_offset: int | None
    leader_epoch: int | None
    metadata: str | None
    commit_timestamp: str | None
    # the partition's bounds and the lag at the snapshot's as_of (`consumer_lag`; null when unknown)
    log_start_offset: int | None = None
    log_end_offset: int | None = None
    lag: int | None = None
    lag_seconds: float | None = None
    commit_age_seconds: float | None = None


class GroupMetadataOut(_Open):
    group_id: str
    group_type: str | None
    protocol_type: str | None
    state: str | None
    generation: int | None
    protocol: str | None
    leader: str | None
    member_count: int | None
    offset_count: int


class ExpiredOut(BaseModel):
    offsets: list[dict[str, Any]]
    group: dict[str, Any] | None


class GroupLagOut(BaseModel):
    max_lag_seconds: float | None  # the group's largest lag in time
    worst_partition: dict[str, Any] | None  # {topic, partition} holding it
    partitions_timed: int  # partitions with a lag in time


class GroupDetailOut(BaseModel):
    snapshot_id: str
    group: GroupMetadataOut
    members: list[dict[str, Any]]
    offsets: list[dict[str, Any]]  # each as OffsetOut, with the rest of its `loaded_offsets` row
    lag: GroupLagOut
    pending: list[dict[str, Any]]
    expired: ExpiredOut
    removed: dict[str, Any] | None


class TopicGroupOut(GroupSummaryOut):
    offsets: list[dict[str, Any]]


class TopicGroupsOut(BaseModel):
    snapshot_id: str
    topic: str
    groups: list[TopicGroupOut]
    next_cursor: str | None


class CommitOut(_Open):
    topic: str | None
    partition: int | None
    committed_offset: int | None
    commit_timestamp: str | None


class CommitsOut(BaseModel):
    snapshot_id: str
    group_id: str
    commits: list[CommitOut]
    truncated: bool


ERRORS = {400: {"model": ErrorOut, "description": "bad parameter"}, 404: {"model": ErrorOut, "description": "not found"}}
AUTH_ERRORS = {401: {"model": ErrorOut, "description": "missing or wrong bearer token"}}

SnapshotQ = Query(None, min_length=1, max_length=512, description="snapshot id (default: the latest succeeded scheduled one)")


def _json(content: Any, snapshot_id: str | None = None, status_code: int = 200) -> JSONResponse:
    headers = {SNAPSHOT_HEADER: snapshot_id} if snapshot_id and snapshot_id.isascii() else None
    return JSONResponse(content, status_code=status_code, headers=headers)


def _dumps(content: Any) -> bytes:
    """The bytes JSONResponse would send (compact UTF-8 JSON). orjson writes the same bytes for the values the
    views produce (str keys, ints, strings, bools, null) about ten times faster than the json module; anything
    it refuses (a non-str key, an int beyond 64 bits) goes through json."""
    try:
        return orjson.dumps(content)
    except TypeError:
        return json.dumps(content, ensure_ascii=False, allow_nan=False, indent=None, separators=(",", ":")).encode("utf-8")


def _bytes_response(body: bytes, snapshot_id: str) -> Response:
    headers = {SNAPSHOT_HEADER: snapshot_id} if snapshot_id.isascii() else None
    return Response(body, media_type="application/json", headers=headers)


class GroupIdConvertor(Convertor):
    """A path parameter holding any group id the snapshot may hold: every character, `/`, a newline and the other
    control characters included (Kafka refuses none but an empty id). Starlette's `:path` is `.*`, whose `.` stops
    at a newline: a group id holding one answered 404 though the snapshot holds it."""

    regex = r"[\s\S]*"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


register_url_convertor("group_id", GroupIdConvertor())


class RawPathRoute(APIRoute):
    """A route whose template ends in a word after a `:group_id` parameter (`/groups/{group_id:group_id}/offsets`)
    matches only when the client sent that word after a real `/`. Group ids may hold `/` (legal in Kafka): sent
    percent-encoded, `/groups/x%2Foffsets` is the detail of group "x/offsets", but the server decodes the path before
    routing, which alone would make it the offsets of "x"."""

    def __init__(self, path: str, *args, **kwargs):
        super().__init__(path, *args, **kwargs)
        self.literal_tail = path.rsplit("}", 1)[1].encode() if ":group_id}" in path else b""

    def matches(self, scope):
        match, child = super().matches(scope)
        raw = scope.get("raw_path")
        if match is not Match.NONE and self.literal_tail and raw and not raw.split(b"?", 1)[0].endswith(self.literal_tail):
            return Match.NONE, {}
        return match, child


def _first_error(exc: RequestValidationError) -> str:
    msgs = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err.get("loc", ()) if p not in ("query", "path"))
        msgs.append(f"{loc}: {err.get('msg')}" if loc else str(err.get("msg")))
    return "; ".join(msgs) or "bad request"


def create_app(reader: SnapshotReader, *, token: str | None = None, refresh_interval: float = 1.0,
               metrics_max_series: int | None = None) -> FastAPI:
    from pipelines.serving import metrics as prom

    catalog = SnapshotCatalog(reader, refresh_interval=refresh_interval)
    metrics_cache: dict = {}
    max_series = prom.DEFAULT_MAX_SERIES if metrics_max_series is None else metrics_max_series
    bearer = HTTPBearer(auto_error=False, description="`offsetlake serve --token`")

    async def check_token(creds: HTTPAuthorizationCredentials | None = Depends(bearer)) -> None:
        if token is None:
            return
        if creds is None or not secrets.compare_digest(creds.credentials.encode(), token.encode()):
            raise StarletteHTTPException(401, "missing or wrong bearer token", headers={"WWW-Authenticate": "Bearer"})

    guarded = [Depends(check_token)] if token is not None else []
    responses = {**ERRORS, **(AUTH_ERRORS if token is not None else {})}

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        catalog.warm()  # index the latest snapshot in the background right away; watch `runs` from now on
        stop_statuses = threading.Event()
        threading.Thread(target=_warm_statuses, args=(stop_statuses,), name="group-statuses", daemon=True).start()
        yield
        stop_statuses.set()
        catalog.stop()

    def _warm_statuses(stop: threading.Event) -> None:
        """Judge the served snapshot's groups as soon as its index is ready (reading the commit history takes
        seconds on a large warehouse: the first scrape should not wait for it, nor time out)."""
        while not stop.wait(max(refresh_interval, 0.2)):
            idx = catalog.ready_index(None)
            if idx is None or idx.snapshot.cache_key in status_cache:
                continue
            try:
                group_statuses(idx)
            except Exception:  # a snapshot retired meanwhile, a transient read error: a request will try again
                logging.getLogger(__name__).exception("judging the groups of %s failed", idx.snapshot.snapshot_id)

    app = FastAPI(
        lifespan=lifespan,
        title="offsetlake",
        summary="Kafka consumer-group coordinator state rebuilt from __consumer_offsets, per snapshot (read-only).",
        version="1",
        docs_url=None,
        redoc_url=None,
    )
    app.router.route_class = RawPathRoute  # every route below (see RawPathRoute)
    app.state.catalog = catalog

    async def cached(snapshot: str | None, key: tuple, build) -> Response:
        """Point lookups: the serialized answer of (snapshot index, key), built once in the thread pool (the
        first request may wait for an index or read nothing at all) and then served from the index's LRU."""
        idx = catalog.ready_index(snapshot)
        if idx is None:  # may have to wait for an index: off the event loop
            idx = await run_in_threadpool(catalog.resolve, snapshot)
        body = idx.responses.get(key)
        if body is None:
            # An answer from a built index is a few Arrow slices and a JSON dump (well under a millisecond for a
            # group's offsets): cheaper inline than the thread-pool hop it would otherwise take.
            body = _dumps(build(idx))
            idx.responses.put(key, body)
        return _bytes_response(body, idx.snapshot.snapshot_id)

    # --- errors: bad parameters are 400 with a message; unknown things are 404 ---------------------------
    @app.exception_handler(RequestValidationError)
    async def _bad_request(request: Request, exc: RequestValidationError):
        return _json({"detail": _first_error(exc)}, status_code=400)

    @app.exception_handler(views.BadParameter)
    async def _bad_param(request: Request, exc: views.BadParameter):
        return _json({"detail": str(exc)}, status_code=400)

    @app.exception_handler(GroupNotFound)
    @app.exception_handler(SnapshotNotFound)
    @app.exception_handler(views.NotFound)
    async def _not_found(request: Request, exc: Exception):
        return _json({"detail": str(exc.args[0]) if exc.args else "not found"}, status_code=404)

    @app.exception_handler(HistoryUnavailable)
    async def _history_unavailable(request: Request, exc: HistoryUnavailable):
        """A snapshot whose history was written before a view's facts were recorded: what fills it, not a 500."""
        return _json({"detail": str(exc)}, status_code=409)

    # --- routes ----------------------------------------------------------------------------------------------
    @app.get("/", include_in_schema=False)
    def index_page():
        return FileResponse(STATIC_DIR / "index.html", media_type="text/html")

    static_files = frozenset(p.name for p in STATIC_DIR.iterdir() if p.is_file())

    @app.get("/static/{name}", include_in_schema=False)
    def static_file(name: str):
        # looked up among the files shipped, never turned into a path: a NUL byte, a name longer than the file
        # system allows or `..` is simply not one of them (404, not an OSError)
        if name not in static_files:
            raise StarletteHTTPException(404, "Not Found")
        return FileResponse(STATIC_DIR / name)

    # --- group statuses (pipelines/serving/group_status.py): one evaluation per snapshot, for /metrics and the page
    status_cache: dict = {}
    status_lock = threading.Lock()

    def group_statuses(idx):
        key = idx.snapshot.cache_key
        with status_lock:  # one evaluation at a time: the page and a scrape arriving together share it
            got = status_cache.get(key)
            if got is None:
                got = group_status.evaluate_groups(reader, idx, catalog.snapshots())
                if len(status_cache) >= 2:  # the served snapshot and one pinned by a page or ?snapshot=
                    status_cache.pop(next(iter(status_cache)))
                status_cache[key] = got
            return got

    # --- the page's data: the overview on top, a group's offsets across snapshots (pipelines/serving/overview.py)
    overview_cache: dict = {}

    @app.get("/overview", responses=responses, dependencies=guarded, tags=["page"])
    def overview(snapshot: str | None = SnapshotQ):
        """What the page shows first: the served snapshot (as-of, age, kind, status, validation) and the recent
        runs, groups by type and state, the groups with the largest lag (when `log_end_offsets` is known) and the
        committed offsets that went backwards since the previous scheduled snapshot."""
        from pipelines.serving import overview as ov
        from pipelines.serving.diff import diff_snapshots

        snaps = catalog.snapshots()
        try:
            idx = catalog.resolve(snapshot)
        except SnapshotNotFound:
            if snapshot is not None:
                raise
            return _json(ov.runs_overview(snaps))  # nothing served yet: the runs, so the failed one shows
        prev_snap = ov.previous_scheduled(snaps, idx.snapshot)
        key = (idx.snapshot.cache_key, prev_snap.cache_key if prev_snap else None)
        try:
            diff = overview_cache[key]
        except KeyError:
            diff = diff_snapshots(catalog.index_for(prev_snap), idx) if prev_snap else None
            overview_cache.clear()  # one pair at a time: the page asks for the served snapshot
            overview_cache[key] = diff
        body = ov.overview(snaps, idx, prev_snap, diff)
        body["group_status"] = group_status.summary(group_statuses(idx))
        return _json(body, idx.snapshot.snapshot_id)

    @app.get("/status/groups", responses=responses, dependencies=guarded, tags=["page"])
    def group_status_route(
        group: str = Query(..., max_length=10_000, description="group id"),
        snapshot: str | None = SnapshotQ,
    ):
        """The group's status over its commit windows (Burrow's rules, see the README): `{group_id, status,
        total_lag, partitions, lag_known_partitions, max_lag, partition_status: [{topic, partition, status, lag,
        window: [{offset, timestamp, lag}]}]}`, the same numbers `/metrics` exports."""
        idx = catalog.resolve(snapshot)
        st = group_statuses(idx).get(group)
        if st is None:
            if not idx.exists(group):
                raise GroupNotFound(idx.absent_reason(group))
            st = group_status.GroupStatus(group, "OK", [])  # a group without committed offsets: nothing to judge
        return _json({"snapshot_id": idx.snapshot.snapshot_id, **st.as_json()}, idx.snapshot.snapshot_id)

    @app.get("/history/offsets", responses=responses, dependencies=guarded, tags=["page"])
    def offsets_history(
        group: str = Query(..., max_length=10_000, description="group id"),
        snapshot: str | None = SnapshotQ,
    ):
        """The group's committed offset per partition in every readable scheduled snapshot up to `snapshot`
        (default: the served one), with the log end offset and lag where known; `regressed` marks a committed
        offset below the previous snapshot's."""
        from pipelines.serving import overview as ov

        idx = catalog.resolve(snapshot)
        body = ov.offsets_over_snapshots(reader, catalog.snapshots(), group, idx.snapshot)
        if not body["partitions"] and not idx.exists(group):
            raise GroupNotFound(idx.absent_reason(group))
        return _json(body, idx.snapshot.snapshot_id)

    @app.get("/changes", responses=responses, dependencies=guarded, tags=["incidents"])
    def changes(
        from_: str = Query(..., alias="from", max_length=64, description="window start: ISO-8601 or epoch ms"),
        to: str = Query(..., max_length=64, description="window end (included): ISO-8601 or epoch ms"),
        group: list[str] | None = Query(None, max_length=10_000, description="only these groups (repeatable)"),
        group_regex: str | None = Query(None, max_length=1000, description="only groups whose id matches"),
        storm_threshold: int | None = Query(None, ge=1, le=100_000,
                                            description="rebalance storm: more new generations per minute than this"),
        snapshot: str | None = SnapshotQ,
    ):
        """What changed in the window, from the snapshot's history (`offsetlake changes --json`), oldest first:
        `{snapshot_id, from, to, changes: [{kind, time, group_id, offsets_partition, record_offset, generation,
        ...}]}`; the kinds and their fields are in the README."""
        from pipelines.serving import changes as ch

        try:
            sel = ch.Selection(ch.parse_time(from_, "from"), ch.parse_time(to, "to"), tuple(group or ()),
                               group_regex or None, storm_threshold or ch.DEFAULT_STORM_PER_MINUTE)
        except ch.BadWindow as e:
            raise views.BadParameter(str(e)) from None
        idx = catalog.resolve(snapshot)
        items = ch.changes(reader, idx.snapshot, sel)
        return _bytes_response(_dumps({"snapshot_id": idx.snapshot.snapshot_id, "from": ch.iso_time(sel.start),
                                       "to": ch.iso_time(sel.end), "changes": items}), idx.snapshot.snapshot_id)

    @app.get("/restore-plan.zip", response_class=Response, dependencies=guarded, tags=["incident"],
             responses={**responses, 200: {"content": {"application/zip": {}},
                                           "description": "the plan's files under restore-plan/"}})
    def restore_plan_zip(
        as_of: str = Query(..., max_length=64, description="the time to restore: ISO-8601 (UTC when no zone) or epoch ms"),
        group: list[str] | None = Query(None, description="group ids (repeat the parameter)"),
        group_regex: str | None = Query(None, max_length=1000, description="groups whose id matches (Python re.search)"),
        changed_since: str | None = Query(None, max_length=64,
                                          description="groups with a commit or group record at or after this time"),
        damaged_since: str | None = Query(None, max_length=64, description="groups `changes` reports damaged from "
                                          "this time on: an offset rewound, deleted or expired, or the group deleted"),
        damaged_until: str | None = Query(None, max_length=64,
                                          description="with damaged_since: up to this time (default: the as-of)"),
        clamp: bool = Query(False, description="targets clamped into [log start, log end] (restore-plan --clamp)"),
        snapshot: str | None = SnapshotQ,
    ):
        """`offsetlake restore-plan` as a zip: each selected group's committed offsets at `as_of` (one
        `--reset-offsets --from-file` CSV per group), index.json, apply.sh and README.txt."""
        import re

        from pipelines.serving import restore_plan as rp

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
            damaged = None if damaged_since is None else (
                rp.parse_instant(damaged_since, "damaged_since"),
                None if damaged_until is None else rp.parse_instant(damaged_until, "damaged_until"))
            if group_regex is not None:
                re.compile(group_regex)
        except re.error as e:
            raise views.BadParameter(f"group_regex: {e}") from None
        except ValueError as e:
            raise views.BadParameter(str(e)) from None
        snap = catalog.resolve(snapshot).snapshot
        try:
            plan = rp.restore_plan(reader, snap, as_of_ms, groups=group or None, group_regex=group_regex,
                                   changed_since_ms=since_ms, damaged=damaged, clamp=clamp)
        except HistoryUnavailable as e:
            raise views.NotFound(str(e)) from None
        headers = {"Content-Disposition": f'attachment; filename="restore-plan-{as_of_ms}.zip"'}
        if snap.snapshot_id.isascii():
            headers[SNAPSHOT_HEADER] = snap.snapshot_id
        return Response(rp.restore_plan_zip(plan), media_type="application/zip", headers=headers)

    @app.get("/health", response_model=HealthOut, responses=ERRORS, tags=["meta"])
    def health(snapshot: str | None = SnapshotQ):
        """Status and the snapshot being served (`loading` while the first index is built)."""
        st = catalog.status()
        serving, latest = st["serving"], st["latest"]
        sid = serving.snapshot_id if serving else None
        if snapshot is not None:
            sid = catalog.resolve(snapshot).snapshot.snapshot_id
        status = "ok" if serving is not None else ("empty" if latest is None else "loading")
        body = {
            "status": status,
            "snapshot_id": sid,
            "latest_snapshot_id": latest.snapshot_id if latest else None,
            "indexing": st["indexing"],
            "cached": st["cached"],
        }
        if st["error"]:
            body["error"] = st["error"]
        return _json(body, sid)

    @app.get("/metrics", response_class=Response, dependencies=guarded, tags=["meta"],
             responses={**responses, 200: {"content": {prom.CONTENT_TYPE: {"schema": {"type": "string"}}},
                                           "description": "Prometheus text format"}})
    def metrics(snapshot: str | None = SnapshotQ):
        """Prometheus metrics: the served snapshot's age and as-of, the newest run's status, duration and counts,
        groups by type and state, per group its state, members, status (Burrow's rules) and lag, committed offsets
        and lag per group/topic/partition (bounded: see the README), offset regressions against the previous
        snapshot. `?snapshot=` describes that snapshot instead."""
        body = prom.render(prom.catalog_families(catalog, max_series, metrics_cache, snapshot_id=snapshot,
                                                 statuses=group_statuses))
        return Response(body, media_type=prom.CONTENT_TYPE)

    @app.get("/snapshots", response_model=SnapshotsOut, responses=responses, dependencies=guarded, tags=["snapshots"])
    def snapshots(snapshot: str | None = SnapshotQ):
        """Snapshots of every kind (oldest first) with their `runs` row and `kind`; `?snapshot=` narrows the list to
        that one. `latest_snapshot_id` is the default snapshot: the latest succeeded scheduled one."""
        snaps = catalog.snapshots()
        latest = next((s.snapshot_id for s in reversed(snaps) if s.is_default_candidate), None)
        if snapshot is not None:
            snaps = [s for s in snaps if s.snapshot_id == snapshot]
            if not snaps:
                raise SnapshotNotFound(f"snapshot {snapshot!r} does not exist")
        return _json({"latest_snapshot_id": latest, "snapshots": [run_summary(s) for s in snaps]})

    @app.get("/groups", response_model=GroupsPageOut, responses=responses, dependencies=guarded, tags=["groups"])
    def groups(
        snapshot: str | None = SnapshotQ,
        state: str | None = Query(None, max_length=200, description="comma list of states, e.g. Stable,Empty"),
        type: str | None = Query(None, max_length=200, description="comma list of group types (classic, consumer, …)"),
        protocol_type: str | None = Query(None, max_length=249),
        prefix: str | None = Query(None, max_length=1000, description="group id prefix"),
        topic: str | None = Query(None, max_length=249, description="groups with committed offsets on this topic"),
        limit: int = Query(views.DEFAULT_PAGE, ge=1, le=views.MAX_PAGE),
        cursor: str | None = Query(None, max_length=4000, description="`next_cursor` of the previous page"),
    ):
        """Live groups in group-id order, `limit` per page; follow `next_cursor` until it is null."""
        idx = catalog.resolve(snapshot)
        page = views.list_groups(
            idx, state=state, type=type, protocol_type=protocol_type, prefix=prefix, topic=topic, limit=limit, cursor=cursor
        )
        return _json(page, idx.snapshot.snapshot_id)

    @app.get(
        "/groups/{group_id:group_id}/offsets",
        response_model=list[OffsetOut],
        responses=responses,
        dependencies=guarded,
        tags=["groups"],
    )
    async def group_offsets(
        group_id: str = PathParam(..., description="group id"),
        snapshot: str | None = SnapshotQ,
        topic: str | None = Query(None, max_length=249),
        partition: int | None = Query(None, ge=0, le=2**31 - 1),
    ):
        """The group's committed offsets: `{topic, partition, committed_offset, leader_epoch, metadata,
        commit_timestamp, log_start_offset, log_end_offset, lag, lag_seconds, commit_age_seconds}` in topic, partition
        order (the lag at the snapshot's as_of; null when unknown). The snapshot is in the X-Offsetlake-Snapshot
        header."""
        return await cached(
            snapshot, ("offsets", group_id, topic, partition), lambda idx: views.group_offsets(idx, group_id, topic, partition)
        )

    @app.get(
        "/groups/{group_id:group_id}/commits",
        response_model=CommitsOut,
        responses=responses,
        dependencies=guarded,
        tags=["groups"],
    )
    def group_commits(
        group_id: str = PathParam(..., description="group id"),
        snapshot: str | None = SnapshotQ,
        topic: str | None = Query(None, max_length=249),
        partition: int | None = Query(None, ge=0, le=2**31 - 1),
        limit: int = Query(views.DEFAULT_COMMITS, ge=1, le=views.MAX_COMMITS),
    ):
        """The group's offset-commit history (`offset_commits`) up to the snapshot's as_of, oldest first."""
        idx = catalog.resolve(snapshot)
        body = views.group_commits(reader, idx, group_id, topic=topic, partition=partition, limit=limit)
        return _json(body, idx.snapshot.snapshot_id)

    @app.get(
        "/groups/{group_id:group_id}/history",
        responses=responses,
        dependencies=guarded,
        tags=["groups"],
    )
    def group_history(
        group_id: str = PathParam(..., description="group id"),
        snapshot: str | None = SnapshotQ,
        limit: int = Query(views.DEFAULT_COMMITS, ge=1, le=views.MAX_COMMITS),
    ):
        """The group's rebalances from the snapshot's log (`group_history`), oldest first: `{events: [{record_timestamp,
        offsets_partition, record_offset, event, generation, assignment_epoch, state, member_count, members_joined,
        members_left, ...}], truncated}`."""
        idx = catalog.resolve(snapshot)
        return _json(views.group_history(reader, idx, group_id, limit=limit), idx.snapshot.snapshot_id)

    @app.get(
        "/groups/{group_id:group_id}",
        response_model=GroupDetailOut,
        responses=responses,
        dependencies=guarded,
        tags=["groups"],
    )
    async def group(group_id: str = PathParam(..., description="group id"), snapshot: str | None = SnapshotQ):
        """The group: metadata, members, committed offsets, open transactional offsets, what expired at as_of."""
        return await cached(snapshot, ("group", group_id), lambda idx: views.group_detail(idx, group_id))

    @app.get(
        "/topics/{topic}/groups",
        response_model=TopicGroupsOut,
        responses=responses,
        dependencies=guarded,
        tags=["topics"],
    )
    def topic_groups(
        topic: str = PathParam(..., max_length=249),
        snapshot: str | None = SnapshotQ,
        limit: int = Query(views.DEFAULT_PAGE, ge=1, le=views.MAX_PAGE),
        cursor: str | None = Query(None, max_length=4000),
    ):
        """Groups with committed offsets on the topic (group-id order, paginated), each with those offsets."""
        idx = catalog.resolve(snapshot)
        return _json(views.topic_groups(idx, topic, limit=limit, cursor=cursor), idx.snapshot.snapshot_id)

    def openapi():
        """FastAPI documents 422 for validation errors; this API answers 400 (CONTRACT.md)."""
        if app.openapi_schema:
            return app.openapi_schema
        schema = get_openapi(title=app.title, version=app.version, summary=app.summary, routes=app.routes)
        for item in schema.get("paths", {}).values():
            for op in item.values():
                op.get("responses", {}).pop("422", None)
        comps = schema.get("components", {}).get("schemas", {})
        comps.pop("HTTPValidationError", None)
        comps.pop("ValidationError", None)
        app.openapi_schema = schema
        return schema

    app.openapi = openapi
    return app
