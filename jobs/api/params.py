"""What a request carries: the `?snapshot=` every route takes, the group id as a path parameter (any character
Kafka allows, `/` and newlines included), the route that matches on the raw path, the query parameters a route
takes (no other), a request whose percent-encoded bytes are not UTF-8, and a bad parameter's message.
"""
from __future__ import annotations

import difflib
from urllib.parse import unquote_to_bytes

from fastapi import Query, Request
from fastapi.dependencies.models import Dependant
from fastapi.dependencies.utils import field_annotation_is_sequence
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from starlette.convertors import Convertor, register_url_convertor
from starlette.routing import Match
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from pipelines.serving.cells import did_you_mean
from pipelines.serving.views import BadParameter

SnapshotQ = Query(None, min_length=1, max_length=512,
                  description="snapshot id (default: the latest succeeded scheduled one)")


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

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        match, child = super().matches(scope)
        raw = scope.get("raw_path")
        if (match is not Match.NONE and self.literal_tail and raw
                and not raw.split(b"?", 1)[0].endswith(self.literal_tail)):
            return Match.NONE, {}
        return match, child


def first_error(exc: RequestValidationError) -> str:
    """A validation failure as the 400's one-line `detail`: `field: message`, joined."""
    msgs = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err.get("loc", ()) if p not in ("query", "path"))
        msgs.append(f"{loc}: {err.get('msg')}" if loc else str(err.get("msg")))
    return "; ".join(msgs) or "bad request"


def _query_params(dependant: Dependant) -> dict[str, bool]:
    """The query parameters a route takes (its own and its dependencies'): name -> whether it may repeat."""
    out = {p.alias: field_annotation_is_sequence(p.field_info.annotation) for p in dependant.query_params}
    for sub in dependant.dependencies:
        out.update(_query_params(sub))
    return out


_TAKEN: dict[int, dict[str, bool]] = {}


async def known_query(request: Request) -> None:
    """A query parameter the route does not take is a 400 naming it, with the nearest it takes: a typo
    (`?snaphot=s2`, `?limt=5`) was ignored, and the answer came from the served snapshot or the default limit as if
    nothing had been asked. So is one that takes a single value given twice (the last one won, without a word)."""
    route = request.scope.get("route")
    if not isinstance(route, APIRoute) or not route.include_in_schema:  # the page: a browser's link may carry any
        return
    taken = _TAKEN.get(id(route))
    if taken is None:
        taken = _TAKEN[id(route)] = _query_params(route.dependant)
    for name in dict.fromkeys(request.query_params.keys()):
        if name not in taken:
            near = difflib.get_close_matches(name, taken, n=1)
            hint = did_you_mean(near, quote=True)
            takes = ", ".join(sorted(taken)) or "none"
            raise BadParameter(f"unknown query parameter {name!r}{hint}; this route takes: {takes}")
        if not taken[name] and len(request.query_params.getlist(name)) > 1:
            raise BadParameter(f"query parameter {name!r} given {len(request.query_params.getlist(name))} times; "
                               "it takes one value")


class Utf8Only:
    """A request whose path or query, percent-decoded, is not UTF-8 is a 400. Starlette decodes such bytes as
    U+FFFD: `/groups/%ff` answered for a group whose id holds that character (a client may send it), or said no
    group '\ufffd' exists, for an id no Kafka client can send (group ids are strings, UTF-8 on the wire)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            parts = (("path", scope.get("raw_path") or scope["path"].encode()), ("query", scope.get("query_string")))
            for what, raw in parts:
                try:
                    unquote_to_bytes(raw or b"").decode("utf-8")
                except UnicodeDecodeError as e:
                    detail = f"the request's {what} is not UTF-8 once percent-decoded ({e.reason} at byte {e.start})"
                    await JSONResponse({"detail": detail}, status_code=400)(scope, receive, send)
                    return
        await self.app(scope, receive, send)
