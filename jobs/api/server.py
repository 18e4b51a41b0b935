"""The served warehouse as every route reads it: its snapshots (the catalog), the one cache, the settings
`offsetlake serve` was given, and the bearer-token guard. A route asks for it with the `Served` dependency.
"""
from __future__ import annotations

import logging
import secrets
import threading
from dataclasses import dataclass, field
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.exceptions import HTTPException as StarletteHTTPException

from pipelines.io.snapshots import DamagedTable, SnapshotReader
from pipelines.serving import group_status
from pipelines.serving.answers import ServingCache
from pipelines.serving.catalog import SnapshotCatalog
from pipelines.serving.group_status import GroupStatuses
from pipelines.serving.index import SnapshotIndex

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Server:
    reader: SnapshotReader
    catalog: SnapshotCatalog
    token: str | None
    refresh_interval: float
    metrics_max_series: int
    cache: ServingCache = field(default_factory=ServingCache)

    def group_statuses(self, idx: SnapshotIndex) -> GroupStatuses:
        """The snapshot's groups judged (`group_status`, Burrow's rules), once per snapshot for `/metrics`,
        `/overview` and `/status/groups`."""
        return self.cache.group_statuses.get(
            idx.snapshot.cache_key, lambda: group_status.evaluate_groups(self.reader, idx, self.catalog.snapshots()))

    def warm_statuses(self, stop: threading.Event) -> None:
        """Judge the served snapshot's groups as soon as its index is ready (reading the commit history takes
        seconds on a large warehouse: the first scrape should not wait for it, nor time out)."""
        damaged = None  # the snapshot whose table is damaged: said once, not again every tick with a traceback
        while not stop.wait(max(self.refresh_interval, 0.2)):
            idx = self.catalog.ready_index(None)
            if idx is None or idx.snapshot.cache_key == damaged or idx.snapshot.cache_key in self.cache.group_statuses:
                continue
            try:
                self.group_statuses(idx)
            except DamagedTable as e:  # a request judges it again (and /metrics names the table)
                damaged = idx.snapshot.cache_key
                log.error("judging the groups of %s failed: %s", idx.snapshot.snapshot_id, e)
            except Exception:  # a snapshot retired meanwhile, a transient read error: a request will try again
                log.exception("judging the groups of %s failed", idx.snapshot.snapshot_id)


async def _server(request: Request) -> Server:
    # async: FastAPI would run a plain function in the thread pool, a hop on every point lookup
    return request.app.state.server


Served = Annotated[Server, Depends(_server)]

bearer = HTTPBearer(auto_error=False, description="`offsetlake serve --token`")


async def check_token(server: Served, creds: HTTPAuthorizationCredentials | None = Depends(bearer)) -> None:
    """The routes' guard when the server has a token (`/health` and the page stay open)."""
    if server.token is None:
        return
    # the header as its bytes: Starlette decodes a header as latin-1, so a token beyond ASCII, sent as UTF-8 (curl,
    # httpx, a browser), was read as other characters and refused, every client locked out
    if creds is None or not secrets.compare_digest(creds.credentials.encode("latin-1"), server.token.encode()):
        raise StarletteHTTPException(401, "missing or wrong bearer token", headers={"WWW-Authenticate": "Bearer"})
