"""`/health`, `/metrics` and the page (`/`, `/static/{name}`): the server itself rather than a snapshot's groups.

`/health` and the page stay open when the server has a token (`open_router`); `/metrics` is guarded (`router`).
"""
from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from jobs.api.models import HealthOut
from jobs.api.params import SnapshotQ
from jobs.api.responses import ERRORS, json_response
from jobs.api.server import Served
from pipelines.serving import metrics as prom

STATIC_DIR = Path(__file__).resolve().parent.parent / "static"
# looked up among the files shipped, never turned into a path: a NUL byte, a name longer than the file system
# allows or `..` is simply not one of them (404, not an OSError)
STATIC_FILES = frozenset(p.name for p in STATIC_DIR.iterdir() if p.is_file())

open_router = APIRouter(tags=["meta"], responses=ERRORS)
router = APIRouter(tags=["meta"], responses=ERRORS)


@open_router.get("/", include_in_schema=False)
def index_page():
    return FileResponse(STATIC_DIR / "index.html", media_type="text/html")


@open_router.get("/static/{name}", include_in_schema=False)
def static_file(name: str):
    if name not in STATIC_FILES:
        raise StarletteHTTPException(404, "Not Found")
    return FileResponse(STATIC_DIR / name)


@open_router.get("/health", response_model=HealthOut,
                 responses={503: {"model": HealthOut, "description": "status `error`: no snapshot is served and the "
                                  "latest one cannot be indexed (`error` says why, `damaged_table` names the table)"}})
def health(server: Served, snapshot: str | None = SnapshotQ):
    """Status and the snapshot being served: `ok`; `empty` before any run succeeded; `loading` while the first
    index is built; `error` (a 503, what a health check takes for an unhealthy server) when none is served and the
    latest snapshot's index could not be built, which waiting does not mend: a damaged table (named in
    `damaged_table`) is repaired, or a run adds a snapshot that indexes."""
    st = server.catalog.status()
    serving, latest, failed = st["serving"], st["latest"], st["latest_failed"]
    sid = serving.snapshot_id if serving else None
    if snapshot is not None:
        sid = server.catalog.resolve(snapshot).snapshot.snapshot_id
    if serving is not None:
        status = "ok"
    elif latest is None:
        status = "empty"
    else:
        status = "error" if failed is not None else "loading"
    body = {
        "status": status,
        "snapshot_id": sid,
        "latest_snapshot_id": latest.snapshot_id if latest else None,
        "indexing": st["indexing"],
        "cached": st["cached"],
    }
    if failed is not None:  # the latest's own failure, whatever was indexed since (an older snapshot, by id)
        body["error"], body["damaged_table"] = failed
    elif st["error"]:
        body["error"] = st["error"]
    return json_response(body, sid, status_code=503 if status == "error" else 200)


@router.get("/metrics", response_class=Response,
            responses={200: {"content": {prom.CONTENT_TYPE: {"schema": {"type": "string"}}},
                             "description": "Prometheus text format"}})
def metrics(server: Served, snapshot: str | None = SnapshotQ):
    """Prometheus metrics: the served snapshot's age and as-of, the newest run's status, duration and counts,
    groups by type and state, per group its state, members, status (Burrow's rules) and lag, committed offsets
    and lag per group/topic/partition (bounded: see the README), offset regressions against the previous
    snapshot. `?snapshot=` describes that snapshot instead. A damaged table is no 500 here: the series read from
    it are left out, the runs table's kept, and `offsetlake_table_unreadable{table="..."}` is 1."""
    body = prom.render(prom.catalog_families(server.catalog, server.metrics_max_series, server.cache.metric_families,
                                             snapshot_id=snapshot, statuses=server.group_statuses))
    return Response(body, media_type=prom.CONTENT_TYPE)
