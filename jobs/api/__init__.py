"""The read-only HTTP JSON API over a warehouse's snapshots (`offsetlake serve`), routes as in CONTRACT.md.

Every route takes `?snapshot=ID` (default: the latest succeeded scheduled snapshot; a what-if run is read by
id). A request resolves its snapshot once (see pipelines/serving/catalog.py) and answers from that snapshot's
in-memory index; the answer names the snapshot in its body (or, for the bare list of `/groups/{id}/offsets`, in
the `X-Offsetlake-Snapshot` header). Four routers, one tag each (groups, incidents, snapshots, meta), over one
server object and its one cache (`server.Server`, `pipelines/serving/answers.py`); the bearer token is a
dependency added to every router but `/health` and the page.
"""
from __future__ import annotations

import contextlib
import threading
from collections.abc import AsyncIterator
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from jobs.api import groups, incidents, meta, snapshots
from jobs.api.params import Utf8Only, first_error, known_query
from jobs.api.responses import AUTH_ERRORS, HeadAsGet, json_response
from jobs.api.server import Server, check_token
from pipelines.io.snapshots import DamagedTable, GroupNotFound, SnapshotNotFound, SnapshotReader
from pipelines.serving import metrics as prom, views
from pipelines.serving.catalog import SnapshotCatalog
from pipelines.serving.history import HistoryUnavailable, OutsideHistory
from pipelines.serving.index import unknown_group_message

# the routers behind the token, in the order their routes are matched
GUARDED = (snapshots.router, groups.router, incidents.router, meta.router)


def create_app(reader: SnapshotReader, *, token: str | None = None, refresh_interval: float = 1.0,
               metrics_max_series: int | None = None) -> FastAPI:
    server = Server(
        reader=reader,
        catalog=SnapshotCatalog(reader, refresh_interval=refresh_interval),
        token=token,
        refresh_interval=refresh_interval,
        metrics_max_series=prom.DEFAULT_MAX_SERIES if metrics_max_series is None else metrics_max_series,
    )
    app = FastAPI(
        lifespan=_lifespan,
        title="offsetlake",
        summary="Kafka consumer-group coordinator state rebuilt from __consumer_offsets, per snapshot (read-only).",
        version="1",
        docs_url=None,
        redoc_url=None,
        dependencies=[Depends(known_query)],
    )
    app.state.server = server
    app.state.catalog = server.catalog
    _answer_errors(app)
    app.include_router(meta.open_router)
    guarded = [Depends(check_token)] if token is not None else []
    for router in GUARDED:
        app.include_router(router, dependencies=guarded, responses=AUTH_ERRORS if token is not None else None)
    app.openapi = lambda: _openapi(app)
    app.add_middleware(HeadAsGet)
    app.add_middleware(Utf8Only)
    return app


@contextlib.asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    server: Server = app.state.server
    server.catalog.warm()  # index the latest snapshot in the background right away; watch `runs` from now on
    stop_statuses = threading.Event()
    threading.Thread(target=server.warm_statuses, args=(stop_statuses,), name="group-statuses", daemon=True).start()
    yield
    stop_statuses.set()
    server.catalog.stop()


def _answer_errors(app: FastAPI) -> None:
    """Bad parameters are a 400 with a message, unknown things a 404, a history too old for the view a 409, a table
    file that cannot be read a 500 that names it."""

    @app.exception_handler(RequestValidationError)
    async def _bad_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        return json_response({"detail": first_error(exc)}, status_code=400)

    @app.exception_handler(views.BadParameter)
    async def _bad_param(request: Request, exc: views.BadParameter) -> JSONResponse:
        return json_response({"detail": str(exc)}, status_code=400)

    @app.exception_handler(GroupNotFound)
    @app.exception_handler(SnapshotNotFound)
    @app.exception_handler(views.NotFound)
    async def _not_found(request: Request, exc: Exception) -> JSONResponse:
        detail = str(exc.args[0]) if exc.args else "not found"
        if isinstance(exc, GroupNotFound) and exc.group_id is not None:
            # the snapshot's nearest group ids, as the CLI and /changes name them: read off the event loop
            detail = await run_in_threadpool(unknown_group_message, request.app.state.server.reader, exc.snapshot,
                                             exc.group_id, detail)
        return json_response({"detail": detail}, status_code=404)

    @app.exception_handler(OutsideHistory)
    async def _outside_history(request: Request, exc: OutsideHistory) -> JSONResponse:
        """A time past the snapshot's as-of, or before its history where the answer was empty: the parameter's
        mistake, said with both times."""
        return json_response({"detail": f"{exc.option} {exc}"}, status_code=400)

    @app.exception_handler(HistoryUnavailable)
    async def _history_unavailable(request: Request, exc: HistoryUnavailable) -> JSONResponse:
        """A snapshot whose history was written before a view's facts were recorded: what fills it, not a 500."""
        return json_response({"detail": str(exc)}, status_code=409)

    @app.exception_handler(DamagedTable)
    async def _damaged_table(request: Request, exc: DamagedTable) -> JSONResponse:
        """A table file Arrow cannot read: the server's fault, said as which table and file, not a bare 500."""
        return json_response({"detail": str(exc)}, status_code=500)


def _openapi(app: FastAPI) -> dict[str, Any]:
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
