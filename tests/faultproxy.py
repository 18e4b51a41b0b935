"""A fault-injecting HTTP proxy in front of a local S3 server (moto), as a platform team tests a client against
throttling: a share of the requests answered `503 SlowDown` (never forwarded, as S3 refuses a request it throttles),
GET bodies cut off mid-way by a TCP reset, slow answers, and `CompleteMultipartUpload` answered `200 OK` with an
error in its body (S3's documented way of failing that call).

Clients point `AWS_ENDPOINT_URL` at `FaultProxy.url`; every request is forwarded to the server unchanged (its Host
header too: moto does not check signatures). The proxy runs in a process of its own (`python -m tests.faultproxy`;
`FaultProxy` starts it and talks to it over `/__faultproxy/…` requests): a client in the test's process that holds
the GIL while it waits on the network (delta-rs does) would otherwise wait on a proxy thread that cannot run.
Listens on 127.0.0.1 only. Each connection is served by a thread of its own whose loop ends when the client closes,
after a request that closes it, or after `IDLE_SECONDS` without one; `close()` stops the process.

    with FaultProxy(moto_url, slowdown=0.3, seed=7) as proxy:
        env["AWS_ENDPOINT_URL"] = proxy.url
        ...
        proxy.counts  # {"forwarded": n, "slowdown": n, "reset": n, "slow": n, "complete_error": n, "lost": n}

`fail_next(n, method=…, path_contains=…, fault=…)` makes the next n matching requests fail whatever the rates (a
deterministic attack on one call), `lost` among its faults: a request done, its answer replaced by a 503.
With FAULTPROXY_DEBUG set, the proxy prints each request and its fault on its stderr.
"""
from __future__ import annotations

import http.client
import json
import os
import random
import socket
import struct
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlparse

IDLE_SECONDS = 30.0
CONTROL = "/__faultproxy/"  # no S3 request starts so: a bucket name holds no underscore
# headers that describe one hop's connection, not the request (RFC 9110 §7.6.1)
_HOP = {"connection", "keep-alive", "proxy-connection", "te", "trailer", "upgrade", "expect"}

SLOWDOWN_BODY = (b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
                 b'<Message>Please reduce your request rate.</Message><RequestId>FAULTPROXY</RequestId></Error>')


@dataclass
class _Rule:
    remaining: int
    method: str | None
    path_contains: str | None
    fault: str = "slowdown"
    after_lost: bool = False  # only once a `lost` fault has been served

    def matches(self, method: str, path: str, lost: int) -> bool:
        return (self.remaining > 0 and (lost or not self.after_lost) and (self.method is None or self.method == method)
                and (self.path_contains is None or self.path_contains in path))


class _Proxy:
    """The proxy itself, in the process `main` runs (the rates as `FaultProxy` says)."""

    def __init__(self, upstream: str, *, seed: int = 0, slowdown: float = 0.0, reset: float = 0.0, slow: float = 0.0,
                 slow_seconds: float = 0.3, complete_error: float = 0.0):
        target = urlparse(upstream)
        self.upstream = (target.hostname, target.port or 80)
        self.slowdown, self.reset, self.slow, self.slow_seconds = slowdown, reset, slow, slow_seconds
        self.complete_error = complete_error
        self.counts = {"forwarded": 0, "slowdown": 0, "reset": 0, "slow": 0, "complete_error": 0, "lost": 0}
        self._rules: list[_Rule] = []
        self._random = random.Random(seed)
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            timeout = IDLE_SECONDS

            def log_message(self, *args):  # quiet: the tests read the counts
                pass

            def do_GET(self):
                proxy._serve(self)

            do_HEAD = do_PUT = do_POST = do_DELETE = do_GET

        self._server = _Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, name="faultproxy", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ control
    def set_rates(self, **rates: float) -> None:
        with self._lock:
            for name, value in rates.items():
                if name not in ("slowdown", "reset", "slow", "slow_seconds", "complete_error"):
                    raise TypeError(f"unknown rate {name}")
                setattr(self, name, value)

    def fail_next(self, n: int, *, method: str | None = None, path_contains: str | None = None,
                  fault: str = "slowdown", after_lost: bool = False) -> None:
        if fault not in ("slowdown", "reset", "lost"):
            raise TypeError(f"unknown fault {fault}")
        with self._lock:
            self._rules.append(_Rule(n, method, path_contains, fault, after_lost))

    def serve_forever(self) -> None:
        self._thread.join()

    def _control(self, h: BaseHTTPRequestHandler, body: bytes) -> None:
        what = h.path[len(CONTROL):]
        try:
            args = json.loads(body or b"{}")
            if what == "rates":
                self.set_rates(**args)
            elif what == "rules":
                self.fail_next(args.pop("n"), **args)
            elif what == "clear":
                with self._lock:
                    self._rules.clear()
                    self.slowdown = self.reset = self.slow = self.complete_error = 0.0
            elif what != "counts":
                raise TypeError(f"unknown control {what}")
        except (TypeError, ValueError, KeyError) as e:
            return _answer(h, 400, str(e).encode())
        with self._lock:
            counts = dict(self.counts)
        _answer(h, 200, json.dumps(counts).encode(), headers=[("Content-Type", "application/json")])

    # ------------------------------------------------------------------ one request
    def _choose(self, method: str, path: str) -> str | None:
        with self._lock:
            for rule in self._rules:
                if rule.matches(method, path, self.counts["lost"]):
                    rule.remaining -= 1
                    return rule.fault
            roll = self._random.random()
            if method == "POST" and "uploadId=" in path and roll < self.complete_error:
                return "complete_error"
            if roll < self.slowdown:
                return "slowdown"
            roll -= self.slowdown
            if method == "GET" and roll < self.reset:
                return "reset"
            roll -= self.reset
            if roll < self.slow:
                return "slow"
            return None

    def _count(self, what: str) -> None:
        with self._lock:
            self.counts[what] += 1

    def _serve(self, h: BaseHTTPRequestHandler) -> None:
        body = _read_body(h)
        if h.path.startswith(CONTROL):
            return self._control(h, body)
        fault = self._choose(h.command, h.path)
        if os.environ.get("FAULTPROXY_DEBUG"):
            print(h.command, h.path, fault, file=sys.stderr, flush=True)
        if fault == "slowdown":
            self._count("slowdown")
            return _answer(h, 503, SLOWDOWN_BODY, "Slow Down", head=h.command == "HEAD")
        if fault == "complete_error":
            self._count("complete_error")
            return _answer(h, 200, SLOWDOWN_BODY)
        if fault == "slow":
            self._count("slow")
            time.sleep(self.slow_seconds)
        status, reason, headers, payload = self._forward(h, body)
        self._count("forwarded")
        if fault == "lost":
            self._count("lost")  # arms the rules that wait for it
            return _answer(h, 503, SLOWDOWN_BODY, "Slow Down", head=h.command == "HEAD")
        if fault == "reset" and status in (200, 206) and len(payload) >= 2:
            self._count("reset")
            return _cut(h, status, reason, headers, payload)
        _answer(h, status, payload, reason, headers, head=h.command == "HEAD")

    def _forward(self, h: BaseHTTPRequestHandler, body: bytes):
        conn = http.client.HTTPConnection(*self.upstream, timeout=60)
        try:
            conn.putrequest(h.command, h.path, skip_host=True, skip_accept_encoding=True)
            for name, value in h.headers.items():
                if name.lower() not in _HOP and name.lower() not in ("content-length", "transfer-encoding"):
                    conn.putheader(name, value)
            conn.putheader("Content-Length", str(len(body)))
            conn.endheaders(body)
            resp = conn.getresponse()
            payload = resp.read()
            headers = [(k, v) for k, v in resp.getheaders()
                       if k.lower() not in _HOP and k.lower() not in ("content-length", "transfer-encoding")]
            if h.command == "HEAD":  # the object's length, not the (empty) payload's
                headers += [(k, v) for k, v in resp.getheaders() if k.lower() == "content-length"]
            return resp.status, resp.reason, headers, payload
        finally:
            conn.close()


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        # a client that gave up on an answer (its own timeout) closed the connection: nothing to report
        import sys

        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            super().handle_error(request, client_address)


def _read_body(h: BaseHTTPRequestHandler) -> bytes:
    """The request's body, de-chunked (the server is sent it with a length)."""
    if "chunked" in (h.headers.get("Transfer-Encoding") or "").lower():
        out = bytearray()
        while True:
            size = int(h.rfile.readline().split(b";", 1)[0].strip() or b"0", 16)
            if size == 0:
                while h.rfile.readline() not in (b"\r\n", b"\n", b""):  # trailers
                    pass
                return bytes(out)
            out += h.rfile.read(size)
            h.rfile.readline()
    n = int(h.headers.get("Content-Length") or 0)
    return h.rfile.read(n) if n else b""


def _answer(h: BaseHTTPRequestHandler, status: int, payload: bytes, reason: str | None = None,
            headers=(), head: bool = False) -> None:
    h.send_response(status, reason)
    names = {k.lower() for k, _ in headers}
    for k, v in headers:
        h.send_header(k, v)
    if "content-length" not in names:
        h.send_header("Content-Length", str(len(payload)))
    if status >= 500:
        h.send_header("Content-Type", "application/xml")
    h.end_headers()
    if not head:
        h.wfile.write(payload)
    h.wfile.flush()


def _cut(h: BaseHTTPRequestHandler, status: int, reason: str, headers, payload: bytes) -> None:
    """The head and half the body, then a TCP reset (SO_LINGER 0): a connection dropped mid-transfer."""
    h.send_response(status, reason)
    for k, v in headers:
        h.send_header(k, v)
    h.send_header("Content-Length", str(len(payload)))
    h.end_headers()
    h.wfile.write(payload[: len(payload) // 2])
    h.wfile.flush()
    h.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    h.close_connection = True
    h.connection.close()


class FaultProxy:
    """See the module docstring: the proxy's process, started in front of `upstream` and stopped by `close()`.
    Rates are shares of requests in [0, 1]: `slowdown` (503, not forwarded), `reset` (a GET whose body is cut after
    half its bytes), `slow` (answered after `slow_seconds`), `complete_error` (CompleteMultipartUpload answered 200
    with a SlowDown body, not forwarded); `seed` makes the draws repeatable."""

    def __init__(self, upstream: str, *, seed: int = 0, **rates: float):
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        self._proc = subprocess.Popen([sys.executable, "-m", "tests.faultproxy", upstream, str(seed)], cwd=root,
                                      stdout=subprocess.PIPE, text=True,
                                      env={**os.environ, "PYTHONPATH": root})
        self.url = self._proc.stdout.readline().strip()
        if not self.url.startswith("http://127.0.0.1:"):
            self._proc.kill()
            raise RuntimeError("the fault proxy did not start")
        if rates:
            self.set_rates(**rates)

    def _call(self, what: str, args: dict | None = None) -> dict:
        host, port = urlparse(self.url).hostname, urlparse(self.url).port
        conn = http.client.HTTPConnection(host, port, timeout=30)
        try:
            conn.request("POST", CONTROL + what, body=json.dumps(args or {}))
            resp = conn.getresponse()
            body = resp.read()
            if resp.status != 200:
                raise TypeError(body.decode())
            return json.loads(body)
        finally:
            conn.close()

    def set_rates(self, **rates: float) -> None:
        self._call("rates", rates)

    def fail_next(self, n: int, *, method: str | None = None, path_contains: str | None = None,
                  fault: str = "slowdown", after_lost: bool = False) -> None:
        """The next `n` requests matching `method` and `path_contains` get `fault`: `slowdown` (503, not
        forwarded), `reset` (a GET's body cut mid-way), or `lost` (forwarded and done, then answered 503: the
        answer of a request that succeeded was lost). `after_lost`: counting only from the first `lost` fault on
        (what follows a lost answer)."""
        self._call("rules", {"n": n, "method": method, "path_contains": path_contains, "fault": fault,
                             "after_lost": after_lost})

    def clear(self) -> None:
        """No faults from now on: every rule dropped, every rate 0."""
        self._call("clear")

    @property
    def counts(self) -> dict:
        return self._call("counts")

    def injected(self) -> int:
        return sum(v for k, v in self.counts.items() if k != "forwarded")

    def close(self) -> None:
        self._proc.terminate()
        try:
            self._proc.wait(10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()

    def __enter__(self) -> "FaultProxy":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def main() -> None:
    proxy = _Proxy(sys.argv[1], seed=int(sys.argv[2]) if len(sys.argv) > 2 else 0)
    print(proxy.url, flush=True)
    proxy.serve_forever()


if __name__ == "__main__":
    main()
