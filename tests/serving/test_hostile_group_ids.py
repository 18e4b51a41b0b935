"""Every group id the snapshot holds is reachable through every surface, whatever it holds: a newline (the attack
that found `GET /groups/{id}` answering 404 for a group the CLI found: Starlette's `:path` pattern is `.*`, whose
`.` stops at a newline), a trailing newline, a tab, a carriage return, other control characters, and a newline
before a route word. The API's routes, the page's own routes, the restore-plan zip, and the CLI."""
from __future__ import annotations

import io
import json
import zipfile
from collections import defaultdict
from urllib.parse import quote

import httpx
import pytest
from click.testing import CliRunner

from tests import badinputs as bi

from .conftest import running_server

pytestmark = [pytest.mark.integration]

IDS = ["line\nbreak", "trailing\n", "\nleading", "tab\there", "cr\r\nlf", "bell\x07", "nul\x00byte", "esc\x1b[31m",
       "del\x7f", "x\n/offsets", "plain"]
# Ids a URL's path cannot hold: a client removes its dot segments (`%2e` too) before it sends it (RFC 3986 5.2.4)
DOTS = [".", ".."]
ALL = IDS + DOTS


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory):
    """A log whose groups have those ids (each in the offsets partition Kafka's partitioner gives it: a group
    record, then two commits on its own partition of `orders`, the second 100 + its index), rebuilt as a user
    does."""
    from jobs.cli import main
    from pipelines.coordinator.partitioner import partition_for

    root = tmp_path_factory.mktemp("hostile-ids")
    records = defaultdict(list)
    for i, g in enumerate(ALL):
        records[partition_for(g, bi.NUM_PARTITIONS)] += [bi.group_record(g, bi.T0), bi.commit(g, i, 50 + i, bi.T0 + 1),
                                                         bi.commit(g, i, 100 + i, bi.T0 + 2)]
    for p, rs in records.items():
        bi.write_segment(root / "dump" / f"__consumer_offsets-{p}", 0,
                         b"".join(bi.batch([r], n) for n, r in enumerate(rs)))
    r = CliRunner().invoke(main, ["rebuild", "--input", str(root / "dump"), "--warehouse", str(root / "wh"),
                                  "--snapshot-id", "h1", "--env", "ci", "--quiet", "--num-partitions", "50"])
    assert r.exit_code == 0, r.output
    return root / "wh"


@pytest.fixture(scope="module")
def server(warehouse):
    with running_server(warehouse) as base:
        yield base


@pytest.mark.parametrize("gid", IDS, ids=repr)
def test_every_route_of_a_group_answers_for_it(server, gid):
    i = IDS.index(gid)
    enc = quote(gid, safe="")
    for _ in range(2):  # built from the index, then from the response cache
        detail = httpx.get(f"{server}/groups/{enc}", timeout=20)
        assert detail.status_code == 200, (gid, detail.text[:300])
        body = detail.json()
        assert body["group"]["group_id"] == gid
        assert [(o["partition"], o["committed_offset"]) for o in body["offsets"]] == [(i, 100 + i)]
        offsets = httpx.get(f"{server}/groups/{enc}/offsets", timeout=20)
        assert offsets.status_code == 200 and [o["committed_offset"] for o in offsets.json()] == [100 + i]
        commits = httpx.get(f"{server}/groups/{enc}/commits", timeout=20)
        assert commits.status_code == 200 and commits.json()["group_id"] == gid, commits.text[:300]
        assert httpx.get(f"{server}/groups/{enc}/history", timeout=20).status_code == 200
    # the page's own routes take the id as a query parameter
    status = httpx.get(f"{server}/status/groups", params={"group": gid}, timeout=20)
    assert status.status_code == 200 and status.json()["group_id"] == gid, status.text[:300]
    history = httpx.get(f"{server}/history/offsets", params={"group": gid}, timeout=20)
    assert history.status_code == 200, history.text[:300]
    listed = httpx.get(f"{server}/groups", params={"limit": 100}, timeout=20).json()
    assert gid in [g["group_id"] for g in listed["groups"]]


@pytest.mark.parametrize("gid", ALL, ids=repr)
def test_every_route_of_a_group_answers_for_it_by_query(server, gid):
    """`/group?id=`, `/group/offsets?id=`, `/group/commits?id=`, `/group/history?id=`: the answers of the path routes,
    for every id, `.` and `..` too (`/groups/..` reaches the server as `/`)."""
    i = ALL.index(gid)
    detail = httpx.get(f"{server}/group", params={"id": gid}, timeout=20)
    assert detail.status_code == 200, (gid, detail.text[:300])
    assert detail.json()["group"]["group_id"] == gid
    assert [(o["partition"], o["committed_offset"]) for o in detail.json()["offsets"]] == [(i, 100 + i)]
    offsets = httpx.get(f"{server}/group/offsets", params={"id": gid, "partition": i}, timeout=20)
    assert offsets.status_code == 200 and [o["committed_offset"] for o in offsets.json()] == [100 + i]
    commits = httpx.get(f"{server}/group/commits", params={"id": gid}, timeout=20)
    assert commits.status_code == 200 and commits.json()["group_id"] == gid, commits.text[:300]
    assert [c["committed_offset"] for c in commits.json()["commits"]] == [50 + i, 100 + i]
    history = httpx.get(f"{server}/group/history", params={"id": gid}, timeout=20)
    assert history.status_code == 200 and [e["event"] for e in history.json()["events"]], history.text[:300]
    if gid not in DOTS:
        assert detail.json() == httpx.get(f"{server}/groups/{quote(gid, safe='')}", timeout=20).json()
    missing = httpx.get(f"{server}/group", params={"id": gid + "?"}, timeout=20)
    assert missing.status_code == 404 and "detail" in missing.json()


def test_an_id_ending_in_a_newline_is_not_its_prefix(server):
    """Python's `$` matches before a trailing newline: `/groups/trailing%0A` must be "trailing\\n" (held), and
    `/groups/trailing` (not held) a 404, not the other way round."""
    assert httpx.get(f"{server}/groups/trailing", timeout=20).status_code == 404
    assert httpx.get(f"{server}/groups/{quote('trailing' + chr(10), safe='')}", timeout=20).json()["group"][
        "group_id"] == "trailing\n"
    # "x\n/offsets" is a group of its own, not the offsets of "x\n"
    r = httpx.get(f"{server}/groups/{quote('x' + chr(10) + '/offsets', safe='')}", timeout=20)
    assert r.status_code == 200 and r.json()["group"]["group_id"] == "x\n/offsets"


def test_the_restore_plan_holds_every_group(server, warehouse, tmp_path):
    """As of the first commits: every group's plan resets its partition to 50 + its index, in the zip the page
    links to and in `offsetlake restore-plan`'s files."""
    from jobs.cli import main

    as_of = str(bi.T0 + 1)
    r = httpx.get(f"{server}/restore-plan.zip", params=[("as_of", as_of), *[("group", g) for g in IDS]], timeout=60)
    assert r.status_code == 200, r.text[:300]
    with zipfile.ZipFile(io.BytesIO(r.content)) as z:
        name = next(n for n in z.namelist() if n.endswith("index.json"))
        index = json.loads(z.read(name))
        plans = {gid: z.read(name[:-len("index.json")] + f).decode() for f, gid in index.items()}
    assert sorted(index.values()) == sorted(IDS)
    assert {g: plans[g] for g in IDS} == {g: f"orders,{i},{50 + i}\n" for i, g in enumerate(IDS)}
    out = tmp_path / "plan"
    r = CliRunner().invoke(main, ["restore-plan", "--warehouse", str(warehouse), "--as-of", as_of, "--out", str(out),
                                  *[a for g in IDS for a in ("--group", g)]])
    assert r.exit_code == 0, r.output
    files = json.loads((out / "index.json").read_text())
    assert {gid: (out / f).read_text() for f, gid in files.items()} == plans


@pytest.mark.parametrize("gid", ALL, ids=repr)
def test_the_cli_finds_every_group(warehouse, gid):
    from jobs.cli import main

    r = CliRunner().invoke(main, ["lookup", "--warehouse", str(warehouse), "--group", gid])
    assert r.exit_code == 0, r.output
    assert [(o["partition"], o["committed_offset"]) for o in json.loads(r.stdout)["offsets"]] == [
        (ALL.index(gid), 100 + ALL.index(gid))]
    r = CliRunner().invoke(main, ["describe", "--warehouse", str(warehouse), gid])
    assert r.exit_code == 0, r.output


def _shown(gid: str) -> str:
    """An id as the page writes it: a control character that draws nothing (all but tab, line feed and carriage
    return) as \\u{HEX}, so an id holding one does not look like another id."""
    hidden = {*range(0x00, 0x09), 0x0B, 0x0C, *range(0x0E, 0x20), *range(0x7F, 0xA0)}
    return "".join(f"\\u{{{ord(c):X}}}" if ord(c) in hidden else c for c in gid)


@pytest.mark.browser
def test_the_page_opens_every_group_by_its_link(server, tmp_path):
    """`/#/groups/<percent-encoded id>`: the group page of that id (its title, its offsets, its commits and
    rebalances), pasted or followed, and the page's own link to the view carries the same id; `.` and `..` too (the
    page asked `/groups/..`, which the browser fetched as `/`)."""
    from .test_browser import _chromedriver, _open, _rows, chromium

    _chromedriver()  # skip before starting anything
    with chromium(tmp_path) as b:
        for i, gid in enumerate(ALL):
            url = f"{server}/#/groups/{quote(gid, safe='')}"
            _open(b, url, "group")
            assert b.js("return document.getElementById('group-title').textContent") == _shown(gid)
            assert b.js("return document.getElementById('error').textContent") == ""
            # topic, partition, then lag in time, then the committed offset
            assert [[r[0], r[1], r[3]] for r in _rows(b, "#offsets-table tbody tr")] == [["orders", str(i), str(100 + i)]]
            link = b.js("return document.getElementById('group-permalink').href")
            assert link.endswith("?snapshot=h1#/groups/" + quote(gid, safe="")), link
            b.wait_for("return window.olCharts.commits && document.querySelectorAll('#history-table tbody tr').length")
            assert b.js("return window.olCharts.commits.data[1]") == [50 + i, 100 + i]


@pytest.mark.parametrize("sep", ["\u2028", "\u2029", "\x85"], ids=["U+2028", "U+2029", "U+0085"])
def test_a_line_separator_in_an_id_keeps_the_warehouse_readable(tmp_path, sep):
    """delta-rs writes a group id's U+2028, U+2029 or U+0085 raw in a commit's JSON (an add's min/max stats, a
    snapshot id's partition value); the Delta log check split the commit file's lines at them, as str.splitlines
    does, and every read of the warehouse failed on 'line 4 is not JSON': serve, describe, lookup, sql. A Delta
    log's lines end at a newline alone."""
    from jobs.cli import main

    from .warehouse_kit import WarehouseKit, group, offset, ts

    gid, sid = f"g{sep}x", f"s{sep}1"
    WarehouseKit(tmp_path).snapshot(sid, groups=[group(gid)], offsets=[offset(gid, f"t{sep}", 0, 42)], as_of=ts(10))
    r = CliRunner().invoke(main, ["lookup", "--warehouse", str(tmp_path), "--group", gid], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["snapshot_id"] == sid and [(o["topic"], o["committed_offset"]) for o in out["offsets"]] == [
        (f"t{sep}", 42)]
    r = CliRunner().invoke(main, ["sql", "--warehouse", str(tmp_path), "--format", "json",
                                  "SELECT group_id, committed_offset FROM loaded_offsets"], catch_exceptions=False)
    assert r.exit_code == 0 and json.loads(r.stdout) == [{"group_id": gid, "committed_offset": 42}], r.output
