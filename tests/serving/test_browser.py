"""The web page (`offsetlake serve`, GET /) in a real headless Chromium: search a group, open it, and check what the
page shows against the story warehouse and the API's own answer; a screenshot lands in the test's tmp dir.

Chromium is driven through chromedriver's W3C WebDriver protocol (plain JSON over HTTP, spoken with httpx), so no
extra Python package is needed. Needs the Debian packages `chromium` and `chromium-driver`; skips without them.
"""
from __future__ import annotations

import base64
import contextlib
import shutil
import struct
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from .conftest import free_port, running_server, stop_process

pytestmark = [pytest.mark.browser, pytest.mark.integration]

CHROMIUM = Path("/usr/bin/chromium")
CHROME_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--window-size=1280,1000"]
ELEMENT = "element-6066-11e4-a52e-4f735466cecf"  # the W3C WebDriver element reference key
TIMEOUT = 30.0


def _chromedriver() -> str:
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is absent (apt-get install chromium chromium-driver)")
    driver = shutil.which("chromedriver") or ("/usr/bin/chromedriver" if Path("/usr/bin/chromedriver").exists() else None)
    if driver is None:
        pytest.skip("chromedriver is absent (apt-get install chromium-driver)")
    return driver


class Browser:
    """The few WebDriver commands the test needs."""

    def __init__(self, http: httpx.Client, session_id: str):
        self.http, self.sid = http, session_id

    def _cmd(self, method: str, path: str, body: dict | None = None):
        r = self.http.request(method, f"/session/{self.sid}{path}", json=body)
        data = r.json()
        if r.status_code != 200:
            raise AssertionError(f"webdriver {method} {path}: {r.status_code} {data}")
        return data["value"]

    def get(self, url: str) -> None:
        self._cmd("POST", "/url", {"url": url})

    def js(self, script: str, *args):
        return self._cmd("POST", "/execute/sync", {"script": script, "args": list(args)})

    def find(self, css: str) -> str:
        return self._cmd("POST", "/element", {"using": "css selector", "value": css})[ELEMENT]

    def type(self, css: str, text: str) -> None:
        self._cmd("POST", f"/element/{self.find(css)}/value", {"text": text})

    def click(self, css: str) -> None:
        self._cmd("POST", f"/element/{self.find(css)}/click", {})

    def screenshot(self) -> bytes:
        return base64.b64decode(self._cmd("GET", "/screenshot"))

    def wait_for(self, script: str, *args, timeout: float = TIMEOUT):
        """Poll a script until it returns something truthy (the page loads its data asynchronously)."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.js(script, *args)
            if value:
                return value
            if time.monotonic() > deadline:
                error = self.js("return document.getElementById('error').textContent")
                raise AssertionError(f"timed out waiting for: {script} (page error: {error!r})")
            time.sleep(0.1)


@contextlib.contextmanager
def chromium(tmp_path: Path):
    driver = _chromedriver()
    port = free_port()
    log = tmp_path / "chromedriver.log"
    proc = subprocess.Popen([driver, f"--port={port}", f"--log-path={log}"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    http = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60)
    sid = None
    try:
        deadline = time.monotonic() + TIMEOUT
        while True:
            try:
                if http.get("/status").json()["value"]["ready"]:
                    break
            except (httpx.TransportError, ValueError, KeyError):
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"chromedriver did not start (see {log})")
            time.sleep(0.05)
        caps = {"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": str(CHROMIUM),
                                   "args": [*CHROME_FLAGS, f"--user-data-dir={tmp_path / 'profile'}"]},
        }}}
        r = http.post("/session", json=caps)
        assert r.status_code == 200, r.text
        sid = r.json()["value"]["sessionId"]
        yield Browser(http, sid)
    finally:
        if sid is not None:
            with contextlib.suppress(httpx.HTTPError):
                http.delete(f"/session/{sid}")
        http.close()
        stop_process(proc)


def _png_size(png: bytes) -> tuple[int, int]:
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and png[12:16] == b"IHDR", "not a PNG"
    return struct.unpack(">II", png[16:24])


def _cells(v) -> str:
    return "-" if v is None else str(v)


def test_search_open_group_and_screenshot(story, tmp_path):
    _chromedriver()  # skip before starting anything
    with running_server(story) as base, chromium(tmp_path) as b:
        api = httpx.get(base + "/groups/payments", timeout=10).json()  # what the page must show (latest: s2)
        b.get(base + "/")
        b.wait_for("return document.body.dataset.ready === '1'")
        assert b.js("return document.getElementById('snapshot-select').value") == api["snapshot_id"] == "s2"
        listed = b.js("return [...document.querySelectorAll('#group-list li')].map(li => li.dataset.groupId)")
        assert listed == ["fresh", "payments", "txn"]  # the live groups of s2

        b.type("#group-search", "pay")
        b.wait_for("return [...document.querySelectorAll('#group-list li')].map(li => li.dataset.groupId)"
                   ".join(',') === 'payments'")
        b.click("#group-list li[data-group-id='payments']")
        b.wait_for("return !document.getElementById('group-pane').hidden"
                   " && document.getElementById('group-title').textContent === 'payments'"
                   " && document.querySelectorAll('#offsets-table tbody tr').length > 0")
        b.wait_for("return document.getElementById('commits-info').textContent !== ''")

        table = b.js("return [...document.querySelectorAll('#offsets-table tbody tr')]"
                     ".map(tr => [...tr.cells].map(td => td.textContent))")
        assert table == [[o["topic"], _cells(o["partition"]), _cells(o["committed_offset"]),
                          _cells(o["log_end_offset"]), _cells(o["lag"]), _cells(o["leader_epoch"]),
                          _cells(o["metadata"]), _cells(o["commit_timestamp"])] for o in api["offsets"]]
        # the story: orders-0 rewound to 17 in s2 (leader epoch 4), 1283 behind the dump's high watermark;
        # orders-1 at 950, caught up; refunds-0 at 40, its end offset unknown
        assert [tuple(r[:5]) for r in table] == [("orders", "0", "17", "1300", "1283"), ("orders", "1", "950", "950", "0"),
                                                ("refunds", "0", "40", "-", "-")]
        assert table[0][5] == "4"

        members = b.js("return [...document.querySelectorAll('#members-table tbody tr')]"
                       ".map(tr => [...tr.cells].map(td => td.textContent))")
        assert members == [
            ["c-1", "-", "pay-1", "/10.0.0.1", "orders-0, orders-1"],
            ["c-2", "pay-static-2", "pay-2", "/10.0.0.2", "refunds-0"],
        ]
        meta = b.js("return Object.fromEntries([...document.querySelectorAll('#group-meta dd')].map(dd => [dd.id, dd.textContent]))")
        assert meta["group-state"] == api["group"]["state"] == "Stable"
        assert meta["group-generation"] == "6" and meta["group-member-count"] == "2" and meta["group-offset-count"] == "3"
        assert meta["group-protocol"] == "range" and meta["group-leader"] == "c-1"
        assert b.js("return document.getElementById('error').textContent") == ""
        # the commit history chart of the first partition (orders-0) has a line
        assert b.js("return document.getElementById('commits-line') !== null")

        png = b.screenshot()
        shot = tmp_path / "group-payments.png"
        shot.write_bytes(png)
        assert shot.is_file() and shot.stat().st_size > 5_000
        width, height = _png_size(png)
        assert width >= 800 and height >= 600
