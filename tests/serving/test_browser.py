"""The web page (`offsetlake serve`, GET /) in a real headless Chromium: the overview, a group opened by its own URL
(CJK ids and ids full of URL syntax), the charts, checked against the warehouses as built and the API's own answers;
screenshots land in the test's tmp dir (overview.png, group-*.png).

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
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest

from .conftest import free_port, running_server, stop_process
from .warehouse_kit import WarehouseKit, commit, group, member, offset, ts

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

    def resize(self, width: int, height: int) -> None:
        self._cmd("POST", "/window/rect", {"width": width, "height": height})

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


CJK = "日本語-決済グループ"
SLASHED = "team/a#b%c?d 🚀/offsets"  # '/', '#', '%', '?', an emoji, and the suffix of another route
VALIDATION_FAILED = ('{"success": false, "policy": "prod", "should_fail_run": true, "evaluated": 41, "failed": 2, '
                     '"failed_ids": ["loaded_offsets.unique_key", "accounting.records_accounted"], '
                     '"failed_expectations": [{"table": "loaded_offsets", "expectation": '
                     '"expect_compound_columns_to_be_unique", "column": "group_id,topic,partition"}, '
                     '{"table": "accounting", "expectation": "records_accounted", "column": null}]}')
RED = "rgb(185, 28, 28)"  # --bad


def build_incident(root: Path) -> WarehouseKit:
    """w1, w2 (scheduled, succeeded) and w3 (validation failed, kept but not served). Between w1 and w2 the CJK group
    rewinds orders-3 (a regression) and advances the rest; the slashed group falls behind on clicks-0/1; every
    partition's end offset is known in w2 except audit-0."""
    k = WarehouseKit(root)
    parts = range(6)
    w1 = [1000 * (p + 1) for p in parts]
    w2 = [v + 500 for v in w1]
    w2[3] = 120  # rewound: 4000 -> 120
    cjk_members = [member(CJK, "消費者-1", [("orders", p) for p in parts[:3]], client_id="クライアント-1"),
                   member(CJK, "消費者-2", [("orders", p) for p in parts[3:]], client_id="クライアント-2")]
    k.snapshot(
        "w1",
        groups=[group(CJK, members=2, leader="消費者-1", generation=7), group(SLASHED, members=1, generation=2),
                group("quiet", "Empty", generation=1, protocol="")],
        members=cjk_members + [member(SLASHED, "m-1", [("clicks", 0), ("clicks", 1)], client_id="clicks-app")],
        offsets=[offset(CJK, "orders", p, w1[p], t=100) for p in parts]
        + [offset(SLASHED, "clicks", p, 50, t=100) for p in (0, 1)] + [offset("quiet", "audit", 0, 9, t=50)],
        commits=[commit(CJK, "orders", p, w1[p] - 100 * i, t=90 - 10 * i) for p in parts for i in (2, 1, 0)],  # log order
        log_end_offsets=[{"topic": "orders", "partition": p, "log_end_offset": w1[p] + 10, "observed_at": ts(100)}
                         for p in parts],
        as_of=ts(100),
    )
    k.snapshot(
        "w2",
        groups=[group(CJK, members=2, leader="消費者-1", generation=8), group(SLASHED, members=1, generation=2),
                group("quiet", "Empty", generation=1, protocol="")],
        members=cjk_members + [member(SLASHED, "m-1", [("clicks", 0), ("clicks", 1)], client_id="clicks-app")],
        offsets=[offset(CJK, "orders", p, w2[p], leader_epoch=2, t=200) for p in parts]
        + [offset(SLASHED, "clicks", p, 60, t=200) for p in (0, 1)] + [offset("quiet", "audit", 0, 9, t=50)],
        commits=[commit(CJK, "orders", p, w2[p], t=200) for p in parts],
        log_end_offsets=[{"topic": "orders", "partition": p, "log_end_offset": w2[p] + 40 * p, "observed_at": ts(200)}
                         for p in parts]
        + [{"topic": "clicks", "partition": p, "log_end_offset": 5060 + p, "observed_at": ts(200)} for p in (0, 1)],
        as_of=ts(200),
    )
    k.snapshot("w3", status="validation_failed", groups=[group("ghost")], as_of=ts(300), validation=VALIDATION_FAILED)
    return k


def _png_size(png: bytes) -> tuple[int, int]:
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and png[12:16] == b"IHDR", "not a PNG"
    return struct.unpack(">II", png[16:24])


def _cells(v) -> str:
    return "-" if v is None else str(v)


def _rows(b: Browser, css: str) -> list[list[str]]:
    return b.js("return [...document.querySelectorAll(arguments[0])].map(tr => [...tr.cells].map(td => td.textContent))", css)


def _utc(t: str) -> datetime:
    return datetime.fromisoformat(t.replace("Z", "+00:00"))


def _when(t: str | None) -> str:
    return "-" if t is None else t.replace("T", " ")


def _save(tmp_path: Path, name: str, png: bytes) -> Path:
    shot = tmp_path / name
    shot.write_bytes(png)
    width, height = _png_size(png)
    assert shot.stat().st_size > 5_000 and width >= 800 and height >= 600
    return shot


# A character renders when its pixels differ from the missing-glyph box (U+10FFFD, a private-use code point no font
# covers): a page without CJK or emoji fonts draws every one of them as that same box.
GLYPHS_JS = r"""
const font = getComputedStyle(document.getElementById(arguments[0])).fontFamily;
function pixels(ch) {
  const c = document.createElement('canvas'); c.width = c.height = 64;
  const x = c.getContext('2d'); x.font = '40px ' + font; x.textBaseline = 'top'; x.fillText(ch, 4, 4);
  return Array.from(x.getImageData(0, 0, 64, 64).data).join(',');
}
const box = pixels('\u{10FFFD}');
return Object.fromEntries([...arguments[1]].map(ch => [ch, pixels(ch) !== box]));
"""


def _open(b: Browser, url: str, view: str) -> None:
    b.get(url)
    b.wait_for("return document.body.dataset.ready === '1' && document.body.dataset.view === arguments[0]", view)


def test_search_open_group_and_screenshot(story, tmp_path):
    _chromedriver()  # skip before starting anything
    with running_server(story) as base, chromium(tmp_path) as b:
        api = httpx.get(base + "/groups/payments", timeout=10).json()  # what the page must show (latest: s2)
        _open(b, base + "/", "overview")
        assert b.js("return document.getElementById('snapshot-select').value") == api["snapshot_id"] == "s2"
        listed = b.js("return [...document.querySelectorAll('#group-list tbody tr')].map(tr => tr.dataset.groupId)")
        assert listed == ["fresh", "payments", "txn"]  # the live groups of s2

        b.type("#group-search", "pay")
        b.wait_for("return [...document.querySelectorAll('#group-list tbody tr')].map(tr => tr.dataset.groupId)"
                   ".join(',') === 'payments'")
        b.click("#group-list tbody tr[data-group-id='payments'] td:nth-child(2)")  # the row, not only its link
        b.wait_for("return document.body.dataset.view === 'group' && document.body.dataset.ready === '1'"
                   " && document.getElementById('group-title').textContent === 'payments'")
        assert b.js("return location.hash") == "#/groups/payments"

        table = _rows(b, "#offsets-table tbody tr")
        # lag in time first (this warehouse has no consumer_lag: "-"), then Kafka's columns, the log start offset
        assert table == [[o["topic"], _cells(o["partition"]), "-", _cells(o["committed_offset"]),
                          _cells(o["log_end_offset"]), _cells(o["lag"]), _cells(o["log_start_offset"]),
                          _cells(o["leader_epoch"]), _cells(o["metadata"]), _when(o["commit_timestamp"])]
                         for o in api["offsets"]]
        # the story: orders-0 rewound to 17 in s2 (leader epoch 4), 1283 behind the dump's high watermark;
        # orders-1 at 950, caught up; refunds-0 at 40, its end offset unknown
        assert [tuple(r[:2] + r[3:6]) for r in table] == [("orders", "0", "17", "1300", "1283"),
                                                          ("orders", "1", "950", "950", "0"),
                                                          ("refunds", "0", "40", "-", "-")]
        assert table[0][7] == "4"

        members = _rows(b, "#members-table tbody tr")
        assert members == [
            ["c-1", "-", "pay-1", "/10.0.0.1", "orders-0, orders-1"],
            ["c-2", "pay-static-2", "pay-2", "/10.0.0.2", "refunds-0"],
        ]
        meta = b.js("return Object.fromEntries([...document.querySelectorAll('#group-meta dd')].map(dd => [dd.id, dd.textContent]))")
        assert meta["group-state"] == api["group"]["state"] == "Stable"
        assert meta["group-generation"] == "6" and meta["group-member-count"] == "2" and meta["group-offset-count"] == "3"
        assert meta["group-protocol"] == "range" and meta["group-leader"] == "c-1"
        assert b.js("return document.getElementById('error').textContent") == ""
        # over snapshots: s1 -> s2 (s3 failed, not drawn); audit-0 only in s1 (expired in s2, not a regression);
        # orders-0 went 1200 -> 17, the one regression marked
        hist = b.js("const u = window.olCharts.snapshots; return {x: u.data[0].length, "
                    "labels: u.series.map(s => s.label), marks: u.data[u.data.length - 1]}")
        assert hist["x"] == 2
        assert hist["labels"][1:-1] == ["audit-0", "orders-0", "orders-1", "refunds-0"]
        assert hist["marks"] == [None, 17]
        _save(tmp_path, "group-payments.png", b.screenshot())


@pytest.fixture(scope="module")
def incident(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("incident")
    build_incident(root)
    return root


def test_overview_group_urls_and_charts(incident, tmp_path):
    """The on-call view of `build_incident`: the overview on top, then a CJK group and an id full of URL syntax
    opened by their own URLs (and reloaded), the charts' axes, lag equal to the API's, glyphs actually drawn."""
    _chromedriver()
    with running_server(incident) as base, chromium(tmp_path) as b:
        over = httpx.get(base + "/overview", timeout=10).json()
        b.resize(1400, 1100)
        _open(b, base + "/", "overview")
        assert b.js("return document.getElementById('error').textContent") == ""

        # the served snapshot and the run that failed its validation, labelled as such (never "succeeded")
        assert b.js("return document.getElementById('snap-id').textContent") == "w2"
        assert b.js("return document.getElementById('snap-status').textContent") == "succeeded"
        assert b.js("return document.getElementById('snap-as-of').textContent") == "2026-01-01 00:03:20Z"
        assert b.js("return document.getElementById('snap-age').textContent").endswith(" ago")
        alert = b.js("const a = document.getElementById('run-alert'); return [a.textContent, a.dataset.status]")
        assert alert[1] == "validation_failed"
        assert "Latest run w3: VALIDATION FAILED" in alert[0] and "2 of 41 checks failed" in alert[0]
        assert "serving w2" in alert[0]
        # in red, with the checks that failed named
        assert b.js("return getComputedStyle(document.getElementById('run-alert')).color") == RED
        assert b.js("return [...document.querySelectorAll('#run-alert-expectations li')].map(li => li.textContent)") == [
            "loaded_offsets: expect_compound_columns_to_be_unique (group_id,topic,partition)",
            "accounting: records_accounted"]
        # group status by Burrow's rules, as /metrics exports it: the CJK group rewound orders-3 (4000 -> 120, 120
        # behind the end); its other partitions advance while their lag grows (10 at w1's dump, 40 * p at w2's)
        assert over["group_status"]["counts"] == {"OK": 2, "WARN": 0, "STOP": 0, "STALL": 0, "REWIND": 1}
        # the worst partition is the one that set the status (the rewound one), not the one with the most lag
        assert _rows(b, "#group-status tbody tr") == [[CJK, "REWIND", "600", "orders-3: 120 (REWIND)", "6 (6)"]]
        assert b.js("return getComputedStyle(document.querySelector('#group-status tbody .badge')).color") == RED
        assert b.js("return [...document.querySelectorAll('#status-counts .badge')].map(p => p.textContent)") == [
            "REWIND 1", "STALL 0", "STOP 0", "WARN 0", "OK 2"]
        metrics = httpx.get(base + "/metrics", timeout=30).text
        assert f'offsetlake_consumer_group_status{{group="{CJK}",status="REWIND"}} 1.0' in metrics
        runs = {r[0]: r for r in _rows(b, "#runs-table tbody tr")}
        assert runs["w3"][1] == "validation failed" and runs["w3"][5] == "2 of 41 checks failed"
        assert runs["w2"][1] == runs["w1"][1] == "succeeded"
        option = b.js("const o = document.querySelector('#snapshot-select option[value=w3]'); return [o.textContent, o.disabled]")
        assert "validation failed" in option[0] and "succeeded" not in option[0] and option[1] is True

        # groups by type and state, the most lag, the regressions: the page shows what /overview says, and that is
        # the incident as built (lags: clicks 5060-60 + 5061-60; orders 40 * p summed over p = 0..5)
        assert _rows(b, "#groups-by-state tbody tr") == [
            ["classic", "Empty", "1"], ["classic", "Stable", "2"], ["all live groups", "", "3"]]
        assert [[r["group_type"], r["state"], str(r["groups"])] for r in over["groups"]["by_type_and_state"]] == \
            _rows(b, "#groups-by-state tbody tr")[:-1]
        top = [r[:4] for r in _rows(b, "#top-lag tbody tr")]  # lag in time first ("-": none in this warehouse)
        assert top == [[r["group_id"], r["state"], "-", str(r["lag"])] for r in over["lag"]["top_groups"]]
        assert top == [[SLASHED, "Stable", "-", "10001"], [CJK, "Stable", "-", "600"]]
        assert _rows(b, "#regressions tbody tr") == [[CJK, "orders", "3", "4000", "120", "-3880"]]
        assert "1 since w1" in b.js("return document.getElementById('regressions-note').textContent")

        # the group list uses the width of the screen, and filters
        width = b.js("return [document.getElementById('group-list').getBoundingClientRect().width, innerWidth]")
        assert width[0] > 0.9 * width[1], width
        assert b.js("return [...document.querySelectorAll('#group-list tbody tr')].map(tr => tr.dataset.groupId)") == \
            ["quiet", SLASHED, CJK]
        b.type("#group-search", "team/")
        b.wait_for("return [...document.querySelectorAll('#group-list tbody tr')].map(tr => tr.dataset.groupId)"
                   ".join('|') === arguments[0]", SLASHED)
        b.js("document.getElementById('group-search').value = ''; document.getElementById('group-state-filter').value = 'Empty';"
             "document.getElementById('group-state-filter').dispatchEvent(new Event('change'))")
        b.wait_for("return [...document.querySelectorAll('#group-list tbody tr')].map(tr => tr.dataset.groupId)"
                   ".join('|') === 'quiet'")
        glyphs = b.js(GLYPHS_JS, "group-list", CJK + "🚀")
        assert all(glyphs.values()), f"drawn as missing-glyph boxes (fonts-noto-cjk / fonts-noto-color-emoji?): {glyphs}"
        _save(tmp_path, "overview.png", b.screenshot())

        for gid in (CJK, SLASHED):
            api = httpx.get(base + "/groups/" + quote(gid, safe=""), timeout=10).json()
            assert api["group"]["group_id"] == gid
            url = base + "/#/groups/" + quote(gid, safe="")
            _open(b, url, "group")
            for again in (False, True):  # as opened, then as pasted into a fresh tab (a reload of the same URL)
                if again:
                    b.get("about:blank")
                    _open(b, url, "group")
                assert b.js("return document.getElementById('group-title').textContent") == gid
                assert b.js("return document.getElementById('error').textContent") == ""
                assert b.js("return document.getElementById('run-alert').dataset.status") == "validation_failed"
            # lag (and committed / end offsets) exactly as the API answers them
            table = _rows(b, "#offsets-table tbody tr")
            assert [r[:6] for r in table] == [[o["topic"], _cells(o["partition"]), "-", _cells(o["committed_offset"]),
                                               _cells(o["log_end_offset"]), _cells(o["lag"])] for o in api["offsets"]]
            charts = b.js("return Object.fromEntries(Object.entries(window.olCharts).map(([k, u]) => "
                          "[k, {axes: u.axes.map(a => a.label), series: u.series.length, "
                          "drawn: u.root.querySelector('canvas').width > 0}]))")
            assert charts["lag"]["axes"] == ["partition (topic-partition)", "lag (messages)"]
            assert charts["snapshots"]["axes"] == ["snapshot as-of (UTC)", "committed offset (messages)"]
            if gid == CJK:
                assert charts["commits"]["axes"] == ["commit time (UTC)", "committed offset (messages)"]
            else:
                assert "commits" not in charts  # the slashed group has no commit history
            n = len(api["offsets"])
            assert charts["snapshots"]["series"] == 1 + n + 1  # x, every partition, the regression marks
            assert all(c["drawn"] for c in charts.values())
            # the permalink pins the snapshot and reopens the same group
            link = b.js("return document.getElementById('group-permalink').href")
            assert link.endswith("?snapshot=w2#/groups/" + quote(gid, safe=""))

            # the group's status and total lag come first on its page
            first = b.js("const m = document.getElementById('group-pane'); return [...m.querySelectorAll('section, dl')]"
                         ".map(e => e.id).filter(Boolean)[0]")
            assert first == "group-status-card"
            status = b.js("return [document.getElementById('group-status-badge').textContent, "
                          "document.getElementById('group-total-lag').textContent]")
            assert status == (["REWIND", "600"] if gid == CJK else ["OK", "10001"])
            parts = _rows(b, "#group-partition-status tbody tr")
            assert all(r[3] == "-" for r in parts)  # the lag in time: none in this warehouse
            parts = [r[:3] + r[4:] for r in parts]
            if gid == CJK:
                assert [r[:4] for r in parts] == [["orders", "3", "REWIND", "120"], ["orders", "5", "WARN", "200"],
                                                  ["orders", "4", "WARN", "160"], ["orders", "2", "WARN", "80"],
                                                  ["orders", "1", "WARN", "40"], ["orders", "0", "OK", "0"]]
                assert parts[0][4] == "3800 → 3900 → 4000 (lag 10) → 120 (lag 120)"
            else:
                assert [r[:4] for r in parts] == [["clicks", "1", "OK", "5001"], ["clicks", "0", "OK", "5000"]]  # worst first
            if gid == CJK:
                assert [r[5] for r in table] == ["0", "40", "80", "120", "160", "200"]
                assert b.js("return window.olCharts.lag.data[1]") == [0, 40, 80, 120, 160, 200]
                marks = b.js("const u = window.olCharts.snapshots; return [u.data[0].length, u.data[u.data.length - 1], "
                             "document.getElementById('chart-snapshots').dataset.regressions]")
                assert marks == [2, [None, 120], "1"]
                glyphs = b.js(GLYPHS_JS, "group-title", CJK)
                assert all(glyphs.values()), glyphs
                b.resize(1400, 1900)
                time.sleep(0.3)  # charts follow the window's width
                _save(tmp_path, "group-cjk.png", b.screenshot())
                b.resize(1400, 1100)
            else:
                assert [r[5] for r in table] == ["5000", "5001"]


def test_the_first_night_failed_and_nothing_is_served(tmp_path):
    """No snapshot was ever served: the page still opens, says so, and shows the failed run in red with its error."""
    _chromedriver()
    kit = WarehouseKit(tmp_path / "wh")
    kit.run("n1", "failed", started_at=ts(10), summary='{"error": "OSError: [Errno 28] No space left on device", '
                                                       '"stage": "write"}')
    with running_server(tmp_path / "wh") as base, chromium(tmp_path) as b:
        _open(b, base + "/", "overview")
        assert b.js("return document.getElementById('error').textContent") == ""
        assert b.js("return document.getElementById('snap-id').textContent") == "none served"
        alert = b.js("const a = document.getElementById('run-alert'); return [a.textContent, a.dataset.status, "
                     "getComputedStyle(a).color]")
        assert alert == ["Latest run n1: FAILED — stage write: OSError: [Errno 28] No space left on device — no "
                         "snapshot is served yet.", "failed", RED]
        assert [r[:2] for r in _rows(b, "#runs-table tbody tr")] == [["n1", "failed"]]


BROKER_SCENARIO = "kip848"


@pytest.fixture(scope="module")
def broker_warehouse(brokerdata, no_spark, settings, tmp_path_factory) -> tuple[Path, dict]:
    """A real broker's log dir (Kafka 4.0, classic and KIP-848 groups) rebuilt once by the real pipeline, and what
    that broker answered (`expected_state.json` -> `summary`)."""
    import json

    from pipelines.rebuild import RebuildRequest, run_rebuild

    expected = brokerdata / BROKER_SCENARIO / "expected_state.json"
    if not expected.is_file():
        pytest.skip(f"{expected} not present")
    wh = tmp_path_factory.mktemp("browser-" + BROKER_SCENARIO)
    res = run_rebuild(no_spark, settings, RebuildRequest(inputs=(str(brokerdata / BROKER_SCENARIO / "data"),),
                                                      warehouse=str(wh), snapshot_id="k1", semantics="modern",
                                                      kafka_version="4.0"))
    assert res.status == "succeeded", res
    return wh, json.loads(expected.read_text())["summary"]


@pytest.mark.shared
def test_page_on_a_broker_scenario(broker_warehouse, tmp_path):
    """The page over a real broker's rebuilt state: the overview's groups by type and state and the group list are
    what ListGroups answered; every listed group's page shows the offsets OffsetFetch answered, and the lag the
    API computes from the log dir's end offsets."""
    _chromedriver()
    wh, summary = broker_warehouse
    listed = {g: v["list_groups"] for g, v in summary.items() if v["listed"]}
    with running_server(wh) as base, chromium(tmp_path) as b:
        b.resize(1400, 1100)
        _open(b, base + "/", "overview")
        assert b.js("return document.getElementById('error').textContent") == ""
        assert b.js("return document.getElementById('snap-status').textContent") == "succeeded"
        counts: dict[tuple[str, str], int] = {}
        for v in listed.values():
            counts[(v["group_type"], v["state"])] = counts.get((v["group_type"], v["state"]), 0) + 1
        assert _rows(b, "#groups-by-state tbody tr")[:-1] == [[t, s, str(n)] for (t, s), n in sorted(counts.items())]
        rows = {r[0]: r for r in _rows(b, "#group-list tbody tr")}
        assert set(rows) == set(listed)
        for g, v in listed.items():
            assert rows[g][1:4] == [v["group_type"], v["protocol_type"], v["state"]]
        _save(tmp_path, "overview-broker.png", b.screenshot())

        checked_history = False
        for gid in sorted(listed):
            api = httpx.get(base + "/groups/" + quote(gid, safe=""), timeout=10).json()
            _open(b, base + "/#/groups/" + quote(gid, safe=""), "group")
            assert b.js("return document.getElementById('error').textContent") == ""
            table = _rows(b, "#offsets-table tbody tr")
            fetched = sorted((t, int(p), o["offset"]) for t, ps in summary[gid]["committed_offsets"].items()
                             for p, o in ps.items())
            assert sorted((r[0], int(r[1]), int(r[3])) for r in table) == fetched
            assert [r[4:6] for r in table] == [[_cells(o["log_end_offset"]), _cells(o["lag"])] for o in api["offsets"]]
            assert any(o["lag"] is not None for o in api["offsets"])  # the log dir's end offsets are known
            axes = b.js("return Object.fromEntries(Object.entries(window.olCharts).map(([k, u]) => [k, u.axes.map(a => a.label)]))")
            assert axes["lag"] == ["partition (topic-partition)", "lag (messages)"]
            assert axes["snapshots"] == ["snapshot as-of (UTC)", "committed offset (messages)"]
            # the rebalance timeline: its last event leaves the members the broker describes
            history = _rows(b, "#history-table tbody tr")
            described = (summary[gid].get("consumer_group_describe") or {}).get("members") \
                if listed[gid]["group_type"] == "consumer" else summary[gid]["describe_groups"].get("members")
            if history:
                assert int(history[-1][5]) == len(described or []), (gid, history[-1])
                checked_history = True
        assert checked_history
        b.resize(1400, 1500)
        _save(tmp_path, "group-broker.png", b.screenshot())


@pytest.mark.shared
def test_commits_chart_plots_what_took_effect(brokerdata, no_spark, settings, tmp_path):
    """The transactions scenario's group tx-g1 (Kafka 4.0): its commits chart steps through the offsets the group
    had, the records that took effect at the time they did (a transaction's at its COMMIT marker), and ends at what
    OffsetFetch answered; an aborted, overtaken or replaced transactional commit was never its offset and is not a
    point (the chart drew the aborted 20s as the committed offset)."""
    import json

    from pipelines.rebuild import RebuildRequest, run_rebuild

    _chromedriver()
    scenario = brokerdata / "transactions"
    if not (scenario / "expected_state.json").is_file():
        pytest.skip(f"{scenario} not present")
    fetched = json.loads((scenario / "expected_state.json").read_text())["summary"]["tx-g1"]["committed_offsets"]
    wh = tmp_path / "wh"
    res = run_rebuild(no_spark, settings, RebuildRequest(inputs=(str(scenario / "data"),), warehouse=str(wh),
                                                      snapshot_id="tx", semantics="modern"))
    assert res.status == "succeeded", res
    with running_server(wh) as base, chromium(tmp_path) as b:
        commits = httpx.get(base + "/groups/tx-g1/commits", timeout=10).json()["commits"]
        never = {(c["partition"], c["committed_offset"]) for c in commits if c["applied_offset"] is None}
        assert ("tx-in" in fetched) and never  # aborted, overtaken and replaced transactional commits
        _open(b, base + "/#/groups/tx-g1", "group")
        b.wait_for("return !!(window.olCharts && window.olCharts.commits)")
        data = b.js("const u = window.olCharts.commits; return [u.series.slice(1).map(s => s.label), u.data]")
        for label, values in zip(data[0], data[1][1:]):
            partition = int(label.rsplit("-", 1)[1])
            steps = [v for v in values if v is not None]
            took = sorted((c for c in commits if c["partition"] == partition and c["applied_offset"] is not None),
                          key=lambda c: c["applied_offset"])
            assert steps == [c["committed_offset"] for c in took], label
            assert steps[-1] == fetched["tx-in"][str(partition)]["offset"]
            assert not set(steps) & {v for p, v in never if p == partition} - {c["committed_offset"] for c in took}


def test_the_rebalance_timeline_marks_the_states_no_reader_saw(no_spark, settings, tmp_path):
    """A classic group upgraded to a consumer group and downgraded back (`_conversions_log`, a 4.0 coordinator's
    batches as real segment bytes): the group page's timeline listed the downgrade's batch with the consumer group
    Empty and then deleted, states no reader saw (the coordinator answers at a batch's end), where `changes` reports
    one group_converted. Every record is still a row; the state of each event the API calls not observable is
    marked `*`, and the note says what the mark means."""
    from pipelines.rebuild import RebuildRequest, run_rebuild
    from tests import badinputs as bi
    from tests.coordinator.rowkit import to_segment
    from tests.serving.test_changes_oracle import _conversions_log

    _chromedriver()
    gid = bi.group_in(7, "g")
    bi.write_segment(tmp_path / "in" / "__consumer_offsets-7", 0, to_segment(_conversions_log(gid).rows))
    wh = tmp_path / "wh"
    res = run_rebuild(no_spark, settings, RebuildRequest(inputs=(str(tmp_path / "in"),), warehouse=str(wh),
                                                      snapshot_id="s", semantics="modern", num_partitions=50))
    assert res.status == "succeeded", res
    with running_server(wh) as base, chromium(tmp_path) as b:
        events = httpx.get(base + "/groups/" + gid + "/history", params={"limit": 1000}, timeout=10).json()["events"]
        assert any(not e["observable"] for e in events) and any(e["observable"] for e in events)
        _open(b, base + "/#/groups/" + gid, "group")
        b.wait_for("return document.querySelectorAll('#history-table tbody tr').length === arguments[0]", len(events))
        rows = _rows(b, "#history-table tbody tr")
        assert [r[1] for r in rows] == [f"{e['offsets_partition']}:{e['record_offset']}" for e in events]
        assert [r[4] for r in rows] == [(e["state"] or "-") + ("" if e["observable"] else "*") for e in events]
        assert b.js("return document.getElementById('history-note').textContent").endswith(
            "state*: inside a batch, never seen by a reader")


@pytest.fixture(scope="module")
def sample_warehouse(no_spark, settings, tmp_path_factory) -> Path:
    """The simulator's dump (what `make run` rebuilds, smaller) rebuilt once by the real pipeline."""
    from pipelines.rebuild import RebuildRequest, run_rebuild
    from simulator import generate_sample

    dump = tmp_path_factory.mktemp("browser-sample") / "dump"
    generate_sample(dump, records=4000, groups=30, partitions=4, seed=7, segment_bytes=64 * 1024, data_segments=2)
    wh = dump.parent / "wh"
    res = run_rebuild(no_spark, settings, RebuildRequest(inputs=(str(dump),), warehouse=str(wh), snapshot_id="s1"))
    assert res.status == "succeeded", res
    return wh


def test_page_on_the_sample(sample_warehouse, tmp_path):
    """The page over the sample's rebuilt state: the overview's groups by type and state are the API's, the groups
    most behind come by their lag in time first, and the busiest group's page shows the API's offsets with their lag
    in time first, and its rebalance timeline, whose last event leaves the members the group has."""
    _chromedriver()
    with running_server(sample_warehouse) as base, chromium(tmp_path) as b:
        b.resize(1400, 1100)
        _open(b, base + "/", "overview")
        assert b.js("return document.getElementById('error').textContent") == ""
        overview = httpx.get(base + "/overview", timeout=30).json()
        by_state = _rows(b, "#groups-by-state tbody tr")[:-1]  # the last row is the total
        assert [[r["group_type"], r["state"], str(r["groups"])] for r in overview["groups"]["by_type_and_state"]] \
            == by_state
        assert sum(int(r[2]) for r in by_state) == overview["groups"]["live"] > 10
        top = _rows(b, "#top-lag tbody tr")
        timed = [r["max_lag_seconds"] for r in overview["lag"]["top_groups"]]
        assert [r[0] for r in top] == [r["group_id"] for r in overview["lag"]["top_groups"]] and timed[0] > 0
        known = [t for t in timed if t is not None]
        assert known == sorted(known, reverse=True) and timed[:len(known)] == known  # in time first, worst first
        assert [r[2] != "-" for r in top] == [t is not None for t in timed]
        groups = httpx.get(base + "/groups", params={"limit": 1000}, timeout=30).json()["groups"]
        busiest = max((g for g in groups if g.get("member_count")), key=lambda g: (g["member_count"], g["group_id"]))
        gid = busiest["group_id"]
        api = httpx.get(base + "/groups/" + quote(gid, safe=""), timeout=30).json()
        _open(b, base + "/#/groups/" + quote(gid, safe=""), "group")
        table = _rows(b, "#offsets-table tbody tr")
        assert [(r[0], int(r[1]), int(r[3])) for r in table] == [
            (o["topic"], o["partition"], o["committed_offset"]) for o in api["offsets"]]
        # the lag in time first, where the sample's data topics give it; "0 s" caught up
        assert [r[2] != "-" for r in table] == [o["lag_seconds"] is not None for o in api["offsets"]]
        assert all((r[2] == "0 s") == (o["lag_seconds"] == 0) for r, o in zip(table, api["offsets"]))
        assert api["lag"]["max_lag_seconds"] is not None  # its worst partition, beside its status
        assert b.js("return document.getElementById('group-lag-time').textContent").endswith(
            f"({api['lag']['worst_partition']['topic']}-{api['lag']['worst_partition']['partition']})")
        axis = b.js("return window.olCharts.lag.axes[1].label")  # in time where the segments told it
        lagged = [o for o in api["offsets"] if o["lag"] is not None]
        in_time = all(o["lag_seconds"] is not None for o in lagged) and any(o["lag"] > 0 for o in lagged)
        assert axis == ("lag (seconds)" if in_time else "lag (messages)")
        history = _rows(b, "#history-table tbody tr")
        assert history and int(history[-1][5]) == len(api["members"]), history[-1:]
        _save(tmp_path, "group-sample.png", b.screenshot())


@pytest.mark.shared
def test_incident_view_on_a_broker_scenario(broker_warehouse, brokerdata, tmp_path):
    """The incident view over the rebuilt broker log: by default the hour before the snapshot's as-of, whose changes
    are the API's and include the group the scenario deleted (timeline.tsv); a narrower window typed in the form;
    a group followed to its page and its rebalances; the restore plan linked as of the window's start."""
    from urllib.parse import parse_qs, urlsplit

    _chromedriver()
    wh, _ = broker_warehouse
    events = (brokerdata / BROKER_SCENARIO / "timeline.tsv").read_text(encoding="utf-8").splitlines()
    deleted = [ln.split("\t")[2] for ln in events if "delete_consumer_groups" in ln and ln.endswith("-> ok")]
    gone = deleted[0].split("['", 1)[1].split("']", 1)[0]
    with running_server(wh) as base, chromium(tmp_path) as b:
        b.resize(1400, 1100)
        _open(b, base + "/#/incident", "incident")
        assert b.js("return document.getElementById('error').textContent") == ""
        start = b.js("return document.getElementById('incident-from').value")
        end = b.js("return document.getElementById('incident-to').value")
        api = httpx.get(base + "/changes", params={"from": start, "to": end}, timeout=30).json()
        # one row per group and kind of change, the damage first, the group lifecycle folded below
        grouped = "return [...document.querySelectorAll(arguments[0] + ' tbody tr.change-group')]" \
                  ".map(tr => [tr.dataset.kind, tr.dataset.groupId, +tr.dataset.count])"
        rows = b.js(grouped, "#incident-table")
        folded = b.js(grouped, "#incident-lifecycle-table")
        changes = [c for c in api["changes"] if c["kind"] != "log_compacted"]
        counted = Counter((c["kind"], c["group_id"]) for c in changes)
        assert sorted(map(tuple, rows + folded)) == sorted((k, g, n) for (k, g), n in counted.items()) and rows
        lifecycle = {"group_created", "group_emptied", "group_converted"}
        assert all(k in lifecycle for k, _, _ in folded) and not any(k in lifecycle for k, _, _ in rows)
        order = ["offset_regressed", "offset_tombstone", "offset_expired", "group_deleted"]
        ranks = [order.index(k) if k in order else len(order) for k, _, _ in rows]
        assert ranks == sorted(ranks)  # the damage first
        assert ["group_deleted", gone, 1] in rows
        firsts = {}
        for c in changes:
            firsts.setdefault((c["kind"], c["group_id"]), c["time"])
        shown = _rows(b, "#incident-table tbody tr.change-group")
        for (k, g, _), r in zip(rows, shown):
            assert r[0].endswith(_when(firsts[(k, g)])), (k, g, r)
        # the restore plan of the damaged groups, as of just before the first damage: a moment inside the log
        link = urlsplit(b.js("return document.getElementById('incident-restore').href"))
        q = parse_qs(link.query)
        first_damage = min(c["time"] for c in changes if c["kind"] in order)
        assert link.path == "/restore-plan.zip" and q["snapshot"] == ["k1"]
        assert q["damaged_since"] == [api["from"]] and q["damaged_until"] == [api["to"]]
        assert _utc(q["as_of"][0]) == _utc(first_damage) - timedelta(milliseconds=1)
        _save(tmp_path, "incident.png", b.screenshot())

        # the window typed in the form: only the deleted group's changes
        b.js("document.getElementById('incident-regex').value = arguments[0]", "^" + gone + "$")
        b.click("#incident-show")
        b.wait_for("return location.hash.includes('group_regex') && document.body.dataset.ready === '1'"
                   " && document.querySelectorAll('#incident-table tbody tr').length > 0"
                   " && [...document.querySelectorAll('#incident-table tbody tr')].every(tr => tr.dataset.groupId === arguments[0])", gone)
        kinds = b.js("return [...document.querySelectorAll('#incident-table tbody tr.change-group')].map(tr => tr.dataset.kind)")
        assert "group_deleted" in kinds and "offset_tombstone" in kinds

        # follow an emptied group to its page: its rebalance timeline shows the members the change says left
        _open(b, base + "/#/incident?" + "&".join(f"{k}={quote(v)}" for k, v in (("from", start), ("to", end))),
              "incident")
        removed = {c["group_id"] for c in api["changes"] if c["kind"] == "group_deleted"}
        emptied = next(c for c in api["changes"] if c["kind"] == "group_emptied" and c["group_id"] not in removed)
        b.js("document.getElementById('incident-lifecycle').open = true")  # the lifecycle is folded
        b.click(f"#incident-lifecycle-table tr.change-group[data-kind=group_emptied]"
                f"[data-group-id='{emptied['group_id']}'] a.group")
        b.wait_for("return document.body.dataset.view === 'group' && document.body.dataset.ready === '1'"
                   " && document.getElementById('group-title').textContent === arguments[0]", emptied["group_id"])
        b.wait_for("return document.querySelectorAll('#history-table tbody tr').length > 0")
        history = _rows(b, "#history-table tbody tr")
        left = {m for r in history for m in r[7].split(", ")}
        assert set(emptied["members_left"]) <= left


def test_the_incident_view_leads_with_the_damage(tmp_path):
    """The drill's log (a group reset to 0 at 00:05:00.000 on three partitions, a group deleted, a healthy group
    committing on) among sixty healthy groups created in the window: on the first screen of a 1400x900 window, the
    damage rows (one per group and kind, opening to their partitions) and the restore plan of the damaged groups;
    the sixty creations folded below."""
    from tests.serving.test_incident_drill import RESET_AT, T0, drill_warehouse

    _chromedriver()
    root = drill_warehouse(tmp_path / "wh", healthy=60)
    with running_server(root) as base, chromium(tmp_path) as b:
        b.resize(1400, 900)
        window = f"from={T0 + 4 * 60_000}&to={RESET_AT + 10_000}"
        _open(b, base + "/#/incident?" + window, "incident")
        assert b.js("return document.getElementById('error').textContent") == ""
        damage = b.js("return [...document.querySelectorAll('#incident-table tbody tr.change-group')]"
                      ".map(tr => [tr.dataset.kind, tr.dataset.groupId, +tr.dataset.count])")
        assert damage[:3] == [["offset_regressed", "audit-sink-18", 3], ["offset_tombstone", "payments-old", 3],
                              ["group_deleted", "payments-old", 1]]
        seen = b.js("return [...document.querySelectorAll('#incident-table tbody tr.change-group')]"
                    ".filter(tr => ['offset_regressed', 'offset_tombstone', 'group_deleted'].includes(tr.dataset.kind))"
                    ".every(tr => tr.getBoundingClientRect().bottom <= innerHeight)")
        assert seen, "a damage row is below the first screen"
        assert b.js("return document.getElementById('incident-restore').getBoundingClientRect().bottom <= innerHeight")
        assert "60 lifecycle changes" in b.js("return document.getElementById('incident-lifecycle-summary').textContent")
        assert not b.js("return document.getElementById('incident-lifecycle').open")
        _save(tmp_path, "incident-drill.png", png := b.screenshot())
        assert png[:8] == b"\x89PNG\r\n\x1a\n"
        # the reset's row opens to its three partitions
        b.click("#incident-table tr.change-group[data-kind=offset_regressed] td.t")
        opened = b.js("return [...document.querySelectorAll('#incident-table tr.change-detail')].filter(tr => !tr.hidden)"
                      ".map(tr => tr.children[4].textContent)")
        assert sorted(opened) == ["t-0 1400 → 0 (-1400)", "t-1 1400 → 0 (-1400)", "t-2 1400 → 0 (-1400)"]
        # the deleted group's page: its history and when it was deleted (the API answers 404 for the group itself)
        _open(b, base + "/#/groups/payments-old", "group")
        assert "Deleted at 2026-11-21 00:05:04.000Z" in b.js("return document.getElementById('group-gone').textContent")
        assert b.js("return document.querySelectorAll('#history-table tbody tr').length") >= 2


HOSTILE = ["payments", "pay\u200bments", "\u202eevil-gro", "<script>window.pwned=1</script>", "a\"b'c<img src=x "
           "onerror=window.pwned=2>", "x" * 5000]


def test_hostile_ids_are_shown_as_they_are_and_never_run(tmp_path):
    """Group ids, member ids, client ids and commit metadata holding markup, quotes, zero-width and bidi control
    characters or 5000 characters: nothing they hold runs or becomes an element, and an id with an invisible or
    reordering character no longer looks like another id ("pay\\u200Bments" drew as "payments", U+202E drew the
    text after it backwards): those characters are shown as \\u{…}, the links and data keeping the id itself."""
    _chromedriver()
    kit = WarehouseKit(tmp_path / "wh")
    kit.snapshot("h1", groups=[group(g, members=1, leader="m\u200b1") for g in HOSTILE],
                 members=[member(g, "m\u200b1", [("t", 0)], client_id="<b>c</b>\u202e") for g in HOSTILE],
                 offsets=[offset(g, "t", 0, 5, t=10, metadata="<i>m</i>\u2066") for g in HOSTILE], as_of=ts(100))
    with running_server(tmp_path / "wh") as base, chromium(tmp_path) as b:
        _open(b, base + "/", "overview")
        listed = b.js("return [...document.querySelectorAll('#group-list tbody tr')].map(tr => "
                      "[tr.dataset.groupId, tr.querySelector('a.group').textContent])")
        shown = {gid: text for gid, text in listed}
        assert set(shown) == set(HOSTILE)
        assert shown["payments"] == "payments" and shown["pay\u200bments"] == "pay\\u{200B}ments"
        assert shown["\u202eevil-gro"] == "\\u{202E}evil-gro"
        assert shown[HOSTILE[3]] == HOSTILE[3] and shown[HOSTILE[4]] == HOSTILE[4] and shown["x" * 5000] == "x" * 5000
        b.get(base + "/#/groups/" + quote(HOSTILE[4], safe=""))
        b.wait_for("return document.body.dataset.view === 'group' && document.body.dataset.ready === '1'")
        assert b.js("return document.getElementById('group-title').textContent") == HOSTILE[4]
        assert _rows(b, "#members-table tbody tr")[0][:3] == ["m\\u{200B}1", "-", "<b>c</b>\\u{202E}"]
        assert "<i>m</i>\\u{2066}" in _rows(b, "#offsets-table tbody tr")[0]
        assert b.js("return [window.pwned, document.querySelectorAll('[onerror], img[src=x]').length, "
                    "[...document.scripts].filter(s => s.textContent.includes('pwned')).length]") == [None, 0, 0]
        assert b.js("return document.getElementById('error').textContent") == ""
