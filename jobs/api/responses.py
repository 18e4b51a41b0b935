"""How the API answers: JSON naming its snapshot (in the body, and in the `X-Offsetlake-Snapshot` header when the
id is one an HTTP header can carry as it is), bytes kept serialized, the error answers every route documents, and
HEAD as GET without the body (a 405's Allow names both), and a request uvicorn's parser refuses answered as JSON too.
"""
from __future__ import annotations

import asyncio
import json
from http import HTTPStatus
from typing import Any

import orjson
from fastapi.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from jobs.api.models import ErrorOut

SNAPSHOT_HEADER = "X-Offsetlake-Snapshot"

# httptools' url_parser.pyx (0.9: MAX_URL_LENGTH, (1 << 16) - 1): a longer request target is no URL it parses
MAX_TARGET_BYTES = (1 << 16) - 1


# A request's head (its request line and headers) read at most: a target of up to MAX_TARGET_BYTES and as much
# again of headers. httptools sets no limit of its own: it gathers a header however long in memory before uvicorn
# sees it, so a client sending megabytes of headers grew the server by hundreds of megabytes, and kept it busy.
MAX_HEAD_BYTES = 2 << 16


ERRORS = {400: {"model": ErrorOut, "description": "bad parameter"},
          404: {"model": ErrorOut, "description": "not found"},
          # answered by the HTTP server before any route sees the request (`JsonErrorsProtocol`), to any of them
          414: {"model": ErrorOut, "description": f"request target over {MAX_TARGET_BYTES:,} bytes"},
          431: {"model": ErrorOut, "description": f"request line and headers over {MAX_HEAD_BYTES:,} bytes"},
          500: {"model": ErrorOut, "description": "a table of the warehouse cannot be read (damaged): the detail "
                                                  "names it"}}
# the answers that read the history's record of what took effect (`serving.history.HistoryUnavailable`)
HISTORY_ERRORS = {409: {"model": ErrorOut, "description": "the snapshot's history was written before what this "
                                                          "answer reads was recorded: the detail names the rebuild "
                                                          "that fills it"}}
AUTH_ERRORS = {401: {"model": ErrorOut, "description": "missing or wrong bearer token"}}


def snapshot_headers(snapshot_id: str | None) -> dict[str, str] | None:
    """The header naming the snapshot, for an id a header value holds as it is: printable ASCII without a space at
    either end (RFC 9110 5.5). Any other id is named in the body alone: a control character (a warehouse's run may
    have been given one) made uvicorn refuse the whole answer, the client's connection closed with no response, and
    a client strips the spaces at the ends, so the header would name another id."""
    if snapshot_id and snapshot_id == snapshot_id.strip(" ") and all(" " <= c <= "~" for c in snapshot_id):
        return {SNAPSHOT_HEADER: snapshot_id}
    return None


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


class HeadAsGet:
    """HEAD answered as the GET of the same URL, headers only (RFC 9110 9.3.2: a server that answers GET answers
    HEAD). FastAPI routes take the methods their decorator names, GET alone, so `HEAD /health`, what a load
    balancer's probe or `curl -I` sends, was a 405."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope["method"] != "HEAD":
            await self.app(scope, receive, _allow_head(send))
            return

        async def headers_only(message: Message) -> None:
            if message["type"] == "http.response.body":
                if message.get("more_body"):
                    return
                message = {"type": "http.response.body", "body": b"", "more_body": False}
            await send(message)

        await self.app({**scope, "method": "GET"}, receive, headers_only)


def _allow_head(send: Send) -> Send:
    """A 405's Allow names HEAD beside GET (RFC 9110 15.5.6: the methods the resource supports); it said `GET`
    alone, so a client asking with OPTIONS or POST was told HEAD is refused."""

    async def sender(message: Message) -> None:
        if message["type"] == "http.response.start" and message["status"] == 405:
            headers = []
            for k, v in message.get("headers", []):
                methods = [m.strip() for m in v.decode("latin-1").split(",")]
                if k.lower() == b"allow" and "GET" in methods and "HEAD" not in methods:
                    v = ", ".join(methods + ["HEAD"]).encode("latin-1")
                headers.append((k, v))
            message = {**message, "headers": headers}
        await send(message)

    return sender


LINGER_SECONDS = 10


class JsonErrorsProtocol(HttpToolsProtocol):
    """uvicorn's HTTP/1.1 protocol (httptools, what its `auto` picks with httptools installed), whose answer to a
    request its parser refuses is the API's error shape, `{"detail": ...}` as JSON, where uvicorn wrote a plain-text
    400 ("Invalid HTTP request received."): a request target over 64 KiB (a long `?group=` list, a long id) is a 414
    that says so, a head over `MAX_HEAD_BYTES` a 431, any other request the parser cannot read a 400. The request
    never reached the app, which answers every other error."""

    def connection_made(self, transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._head_bytes: int | None = 0  # of the request whose head is being read; None while its body is
        self._dropping = False

    def data_received(self, data: bytes) -> None:
        if self._dropping:
            return
        if self._head_bytes is not None:
            self._head_bytes += len(data)
            if self._head_bytes > MAX_HEAD_BYTES:
                if len(getattr(self, "url", b"")) > MAX_TARGET_BYTES:  # the target is what is too long
                    self._answer(414, f"the request target is over the {MAX_TARGET_BYTES} bytes the server reads: "
                                      "ask for fewer or shorter values", linger=True)
                else:
                    self._answer(431, f"the request line and headers are over the {MAX_HEAD_BYTES} bytes the "
                                      "server reads", linger=True)
                return
        super().data_received(data)

    def on_headers_complete(self) -> None:
        self._head_bytes = None
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._head_bytes = 0  # a pipelined request's head may follow
        super().on_message_complete()

    def send_400_response(self, msg: str) -> None:
        target = len(getattr(self, "url", b""))
        if target > MAX_TARGET_BYTES:
            status = 414
            detail = (f"the request target is {target} bytes, over the {MAX_TARGET_BYTES} the server reads: ask for "
                      "fewer or shorter values")
        else:
            status, detail = 400, "not an HTTP/1.1 request the server can read"
        self._answer(status, detail)

    def _answer(self, status: int, detail: str, *, linger: bool = False) -> None:
        body = orjson.dumps({"detail": detail})
        head = [f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\n".encode("ascii")]
        head += [name + b": " + value + b"\r\n" for name, value in self.server_state.default_headers]
        head += [b"content-type: application/json\r\n", b"content-length: %d\r\n" % len(body),
                 b"connection: close\r\n", b"\r\n"]
        self.transport.write(b"".join(head) + body)
        if not linger:
            self.transport.close()
            return
        # the client is still sending the rest of its request: closing with it unread would reset the connection,
        # and the client would see the reset, not the answer. So the answer is followed by the end of what the
        # server sends, the rest is read and dropped until the client closes, or LINGER_SECONDS have passed.
        self._dropping = True
        self.transport.write_eof()
        asyncio.get_running_loop().call_later(LINGER_SECONDS, self.transport.close)
