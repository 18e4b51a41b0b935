"""What a request carries: the `?snapshot=` every route takes, the group id as a path parameter (any character
Kafka allows, `/` and newlines included), the route that matches on the raw path, and a bad parameter's message.
"""
from __future__ import annotations

from fastapi import Query
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from starlette.convertors import Convertor, register_url_convertor
from starlette.routing import Match
from starlette.types import Scope

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
