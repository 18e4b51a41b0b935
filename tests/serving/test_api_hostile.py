"""Hostile paths against a real `offsetlake serve`: whatever the client sends, the answer is a 4xx, never a 5xx
(the attack that found `/static/%00` and names over 255 bytes answering 500)."""
from __future__ import annotations

import json

import httpx
import pytest

LONG = "a" * 300  # over the 255 bytes a file name may have
HOSTILE = [
    "/static/%00", "/static/" + LONG, "/static/" + "é" * 200, "/static/..%2f..%2fetc%2fpasswd", "/static/%2e%2e",
    "/static/%ff", "/static/index.html%00", "/static/.", "/%00", "/" + LONG,
    "/groups/%00", "/groups/%00/offsets", "/groups/%00/commits", "/groups/" + LONG, "/groups/" + LONG + "/offsets",
    "/groups/" + LONG + "/commits", "/groups/" + "é" * 200, "/groups/a%2F..%2F..%2Fx", "/_group_detail/%00",
    "/_group_detail/" + LONG, "/topics/%00/groups", "/topics/" + LONG + "/groups",
    "/groups?snapshot=%00", "/groups?snapshot=" + "s" * 300, "/health?snapshot=%00", "/snapshots?snapshot=" + "x" * 600,
    "/groups/payments?snapshot=../x", "/groups/payments/offsets?snapshot=" + LONG,
]


@pytest.mark.parametrize("path", HOSTILE, ids=lambda p: p[:40])
def test_hostile_path_is_a_client_error(server, path):
    r = httpx.get(server + path, timeout=20)
    assert r.status_code in (400, 404), (path, r.status_code, r.text[:300])


def test_the_shipped_page_is_still_served(server):
    r = httpx.get(server + "/static/index.html", timeout=20)
    assert r.status_code == 200 and "<html" in r.text.lower()


@pytest.mark.parametrize("target", [b"/groups?prefix=\xf0\xb8\x87\xaf", b"/history/offsets?group=\xc2\x9d\xc2\x93",
                                    b"/groups/\xff/history", b"/overview?snapshot=a b"])
def test_a_request_line_that_is_not_http_is_a_400(server, target):
    """Raw non-ASCII bytes (or a space) in the request target are not HTTP: the server refuses the request line with
    a 400 before any route sees it, in the API's error shape, and keeps serving."""
    status, headers, body = _raw_request(server, b"GET " + target + CLOSE)
    assert status == 400 and headers["content-type"] == "application/json", (status, headers, body[:200])
    assert json.loads(body) == {"detail": "not an HTTP/1.1 request the server can read"}
    assert httpx.get(server + "/health", timeout=20).status_code in (200, 503)


CLOSE = b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"


def _raw_request(server: str, request: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send bytes no HTTP client would; the answer's status, headers and body (the server closes the connection)."""
    import socket
    from urllib.parse import urlparse

    u = urlparse(server)
    answer = b""
    with socket.create_connection((u.hostname, u.port), timeout=20) as s:
        s.sendall(request)
        while chunk := s.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    return int(status_line.split()[1]), {k.lower(): v.strip() for k, v in (ln.split(":", 1) for ln in lines)}, body


def test_a_request_target_over_64_kib_is_a_414_in_the_apis_shape(server):
    """uvicorn's parser (httptools) reads a request target of at most 65535 bytes: a longer one (a `/restore-plan.zip`
    of many `&group=`, a very long id) was a plain-text 400, "Invalid HTTP request received.", where every other
    error of the API is JSON; it is now a 414 with a `detail`, and the server keeps serving."""
    target = b"/groups?prefix=" + b"a" * 70_000
    status, headers, body = _raw_request(server, b"GET " + target + CLOSE)
    assert status == 414 and headers["content-type"] == "application/json", (status, headers, body[:200])
    assert json.loads(body) == {"detail": f"the request target is {len(target)} bytes, over the 65535 the server "
                                          "reads: ask for fewer or shorter values"}
    # just under the limit the app answers (here, its own 400 for a prefix over 1000 characters)
    r = httpx.get(server + "/groups", params={"prefix": "a" * 65_000}, timeout=20)
    assert r.status_code == 400 and "prefix" in r.json()["detail"], r.text[:200]
    assert httpx.get(server + "/health", timeout=20).status_code in (200, 503)


@pytest.mark.parametrize("headers", [[b"X-Big: " + b"a" * (4 << 20)], [b"X-%d: " % i + b"b" * 4000 for i in range(50)]])
def test_a_request_head_over_128_kib_is_a_431_in_the_apis_shape(server, headers):
    """httptools sets no limit on a request's headers: a client sending megabytes of them had them gathered in the
    server's memory (a 16 MiB header grew it by about 300 MB) and answered. Past 128 KiB of request line and headers
    the request is now a 431 with a `detail`, the rest unread, and the server keeps serving; a head under it is
    answered."""
    request = (b"GET /health HTTP/1.1\r\nHost: x\r\n" + b"".join(h + b"\r\n" for h in headers)
               + b"Connection: close\r\n\r\n")
    status, got, body = _raw_request(server, request)
    assert status == 431 and got["content-type"] == "application/json", (status, got, body[:200])
    assert json.loads(body) == {"detail": "the request line and headers are over the 131072 bytes the server reads"}
    target = b"/groups?prefix=" + b"a" * 200_000  # the target itself past both limits: a 414, as under 128 KiB
    status, got, body = _raw_request(server, b"GET " + target + CLOSE)
    assert status == 414 and json.loads(body)["detail"].startswith("the request target is over the 65535 bytes")
    fine = {f"X-{i}": "c" * 4000 for i in range(25)}
    assert httpx.get(server + "/health", headers=fine, timeout=20).status_code in (200, 503)


@pytest.mark.parametrize("path", ["/groups/%ff", "/groups/pay%C3", "/groups/%ff/offsets", "/groups?prefix=%ff",
                                  "/status/groups?group=%C3%28", "/changes?from=2026-01-01&to=2026-01-02&group=%ff"])
def test_bytes_that_are_not_utf8_are_a_400(server, path):
    """Percent-encoded bytes that are not UTF-8 were read as U+FFFD: `/groups/%ff` looked up the group '\ufffd' (a
    404 naming an id nobody asked for, or the answer for a group whose id holds that character)."""
    r = httpx.get(server + path, timeout=20)
    assert r.status_code == 400 and "not UTF-8" in r.json()["detail"], r.text
    assert httpx.get(server + "/groups/%EF%BF%BD", timeout=20).status_code == 404  # U+FFFD itself is an id


ODD_SNAPSHOT_IDS = ["s\x01", "a\r\nX-Injected: 1", " padded ", "tab\there", "del\x7f"]


@pytest.fixture(scope="module")
def odd_snapshots(tmp_path_factory):
    """A warehouse whose snapshot ids hold what an HTTP header cannot carry as it is (a run may be given any id)."""
    from .conftest import running_server
    from .warehouse_kit import WarehouseKit, group, offset, ts

    k = WarehouseKit(tmp_path_factory.mktemp("odd-ids"))
    for i, sid in enumerate(ODD_SNAPSHOT_IDS + ["plain"]):
        k.snapshot(sid, groups=[group("g")], offsets=[offset("g", "t", 0, 10 + i)], as_of=ts(10 * (i + 1)))
    with running_server(k.root) as base:
        yield base


@pytest.mark.parametrize("sid", ODD_SNAPSHOT_IDS, ids=repr)
def test_a_snapshot_id_no_header_can_carry_is_named_in_the_body(odd_snapshots, sid):
    """A snapshot id holding a control character was put in the X-Offsetlake-Snapshot header as it is: uvicorn
    refused the answer and closed the connection without a response (a 500 in its log) on every route of it."""
    i = ODD_SNAPSHOT_IDS.index(sid)
    r = httpx.get(odd_snapshots + "/groups/g/offsets", params={"snapshot": sid}, timeout=20)
    assert r.status_code == 200 and r.json()[0]["committed_offset"] == 10 + i, r.text
    assert "X-Offsetlake-Snapshot" not in r.headers  # the id, as a header, would be another one or none
    r = httpx.get(odd_snapshots + "/groups/g", params={"snapshot": sid}, timeout=20)
    assert r.status_code == 200 and r.json()["snapshot_id"] == sid
    r = httpx.get(odd_snapshots + "/groups/g", timeout=20)  # a plain id keeps its header
    assert r.headers["X-Offsetlake-Snapshot"] == "plain"
