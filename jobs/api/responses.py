"""How the API answers: JSON naming its snapshot (in the body, and in the `X-Offsetlake-Snapshot` header when the
id is ASCII), bytes kept serialized, and the error answers every route documents.
"""
from __future__ import annotations

import json
from typing import Any

import orjson
from fastapi.responses import JSONResponse, Response

from jobs.api.models import ErrorOut

SNAPSHOT_HEADER = "X-Offsetlake-Snapshot"

ERRORS = {400: {"model": ErrorOut, "description": "bad parameter"},
          404: {"model": ErrorOut, "description": "not found"}}
AUTH_ERRORS = {401: {"model": ErrorOut, "description": "missing or wrong bearer token"}}


def snapshot_headers(snapshot_id: str | None) -> dict[str, str] | None:
    # an HTTP header holds latin-1 at most; a snapshot id beyond ASCII is named in the body alone
    return {SNAPSHOT_HEADER: snapshot_id} if snapshot_id and snapshot_id.isascii() else None


def json_response(content: Any, snapshot_id: str | None = None, status_code: int = 200) -> JSONResponse:
    return JSONResponse(content, status_code=status_code, headers=snapshot_headers(snapshot_id))


def dumps(content: Any) -> bytes:
    """The bytes JSONResponse would send (compact UTF-8 JSON). orjson writes the same bytes for the values the
    views produce (str keys, ints, strings, bools, null) about ten times faster than the json module; anything
    it refuses (a non-str key, an int beyond 64 bits) goes through json."""
    try:
        return orjson.dumps(content)
    except TypeError:
        text = json.dumps(content, ensure_ascii=False, allow_nan=False, indent=None, separators=(",", ":"))
        return text.encode("utf-8")


def bytes_response(body: bytes, snapshot_id: str) -> Response:
    return Response(body, media_type="application/json", headers=snapshot_headers(snapshot_id))
