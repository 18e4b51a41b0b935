"""The API's routers against CONTRACT.md's HTTP section: every route it lists is served with the query parameters
it names, every route takes `?snapshot=`, and each operation carries its router's one tag (groups, incidents,
snapshots, meta). Builds the app in-process: no server, no Spark."""
from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient

from jobs.api import GUARDED, create_app, meta
from pipelines.io.snapshots import DeltaWarehouseReader

from .warehouse_kit import WarehouseKit, group, offset

TAGS = {"groups", "incidents", "snapshots", "meta"}


@pytest.fixture(scope="module")
def spec(tmp_path_factory) -> dict:
    kit = WarehouseKit(tmp_path_factory.mktemp("wh"))
    kit.snapshot("s1", groups=[group("g", members=0, state="Empty")], offsets=[offset("g", "t", 0, 1)])
    with TestClient(create_app(DeltaWarehouseReader(kit.root), token="t", refresh_interval=0)) as client:
        r = client.get("/openapi.json")
    assert r.status_code == 200
    return r.json()


def contract_routes(shared_dir) -> dict[str, set[str]]:
    """`GET` path -> the query parameters CONTRACT.md's "HTTP API" section names for it."""
    path = shared_dir / "CONTRACT.md"
    if not path.is_file():
        pytest.skip(f"{path} not present")
    text = path.read_text(encoding="utf-8")
    section = re.search(r"^## HTTP API.*?(?=^## )", text, re.S | re.M)
    assert section, "CONTRACT.md has no HTTP API section"
    routes = {}
    for route, query in re.findall(r"`GET (/[^`?\s]*)(?:\?([^`]*))?`", section.group(0)):
        routes[route] = {q.split("=", 1)[0] for q in query.split("&") if q}
    assert len(routes) >= 5, routes
    return routes


def test_every_contract_route_is_served_with_its_parameters(spec, shared_dir):
    for route, params in contract_routes(shared_dir).items():
        if route == "/openapi.json":  # the description itself: fetched by the fixture
            continue
        op = spec["paths"].get(route, {}).get("get")
        assert op is not None, f"{route} is in CONTRACT.md but not in the API"
        names = {p["name"] for p in op.get("parameters", []) if p["in"] == "query"}
        assert params <= names, (route, params - names)


def test_every_route_takes_a_snapshot(spec):
    for route, item in spec["paths"].items():
        for method, op in item.items():
            assert "snapshot" in {p["name"] for p in op.get("parameters", [])}, (method, route)


def test_one_tag_per_router_and_per_operation(spec):
    routers = [meta.open_router, *GUARDED]
    assert all(len(r.tags) == 1 for r in routers), [r.tags for r in routers]
    assert {r.tags[0] for r in routers} == TAGS
    for route, item in spec["paths"].items():
        for method, op in item.items():
            assert len(op.get("tags", [])) == 1 and op["tags"][0] in TAGS, (method, route, op.get("tags"))
    assert {op["tags"][0] for item in spec["paths"].values() for op in item.values()} == TAGS


def test_every_operation_documents_the_error_answers_the_server_gives(spec):
    """`offsetlake serve` answers a request target over 65,535 bytes with a 414 and a head over 128 KiB with a 431,
    JSON with a `detail` (jobs/api/responses.py JsonErrorsProtocol), whatever the route, and a damaged table with a
    500 (`DamagedTable`); the answers reading what took effect a 409 for a history written before it was recorded
    (`HistoryUnavailable`): a client generated from the description knows them as it knows the 400 and 404, with
    the same error body."""
    error = spec["paths"]["/groups"]["get"]["responses"]["400"]["content"]
    for route, item in spec["paths"].items():
        for method, op in item.items():
            for status in ("414", "431", "500"):
                assert op["responses"].get(status, {}).get("content") == error, (method, route, status)
            # the answers that read what took effect say when a snapshot's history predates it (HistoryUnavailable)
            history = route in ("/changes", "/restore-plan.zip", "/status/groups")
            assert (op["responses"].get("409", {}).get("content") == error) == history, (method, route)


# every route that takes one group id, by path and by query
_GROUP_ROUTES = ["/groups/{g}", "/groups/{g}/offsets", "/groups/{g}/commits", "/groups/{g}/history", "/group?id={g}",
                 "/group/offsets?id={g}", "/group/commits?id={g}", "/group/history?id={g}", "/status/groups?group={g}",
                 "/history/offsets?group={g}", "/changes?from=2000-01-01&to=2100-01-01&group={g}",
                 "/restore-plan.zip?as_of=2026-01-01T00:00:30Z&group={g}"]


@pytest.fixture(scope="module")
def story_client(tmp_path_factory):
    from .conftest import build_story

    kit = build_story(tmp_path_factory.mktemp("story"))
    with TestClient(create_app(DeltaWarehouseReader(kit.root), refresh_interval=0)) as client:
        yield client, kit.root


@pytest.mark.parametrize("route", _GROUP_ROUTES)
def test_an_unknown_group_is_a_404_naming_the_nearest_ids_on_every_route(story_client, route):
    """/groups/{id}/commits, /history, /offsets, /groups/{id} itself and the rest answered a mistyped group id with
    a bare 404 ("does not exist"), where /changes and /restore-plan.zip named the snapshot's nearest ids in other
    words ("is not in"); every route now says what the CLI says, through one function
    (`index.unknown_group_message`), and a group that is gone says why (deleted, expired) the same way."""
    from click.testing import CliRunner

    from jobs.cli import main

    client, root = story_client
    r = client.get(route.format(g="paymnts"))
    assert (r.status_code, r.json()) == (404, {"detail": "group 'paymnts' does not exist in snapshot 's2' "
                                                         "(did you mean 'payments'?)"})
    cli = CliRunner().invoke(main, ["describe", "--warehouse", str(root), "paymnts"])
    assert cli.stderr == f"error: {r.json()['detail']}\n"
    if route.startswith("/group"):  # the routes of one live group: a deleted one says so
        r = client.get(route.format(g="simple"))
        assert r.json() == {"detail": "group 'simple' does not exist in snapshot 's2' (deleted by a group tombstone)"}


def test_a_polled_unknown_group_s_404_searches_the_snapshot_once(story_client, monkeypatch):
    """A client polling a deleted or mistyped group (a dashboard tile, a retry loop) made every 404 read the group id
    column of five tables and run difflib over every id (seconds of a core for 100 k near-alike ids): an id's line
    is found once per snapshot, and the snapshot's ids are read once for every typo."""
    import difflib

    from pipelines.serving import index
    from pipelines.serving.cache import Kept

    client, _ = story_client
    # the other tests' searches left aside: this one counts its own from the start
    for name, keep in (("_UNKNOWN", 1024), ("_NAMES", 2)):
        monkeypatch.setattr(index, name, Kept(keep))
    reader = client.app.state.server.reader
    reads, searches = [], []
    table, close = reader.snapshot_table, difflib.get_close_matches

    def snapshot_table(name, *args, **kwargs):
        if kwargs.get("columns") == ["group_id"]:
            reads.append((name, kwargs.get("filters") is None))  # every id of a table, or the ids asked for
        return table(name, *args, **kwargs)

    monkeypatch.setattr(reader, "snapshot_table", snapshot_table)
    monkeypatch.setattr(difflib, "get_close_matches", lambda *a, **k: searches.append(a[0]) or close(*a, **k))
    r = client.get("/groups/paymentz/offsets")
    assert r.status_code == 404 and r.json()["detail"].endswith("(did you mean 'payments'?)")
    first = list(reads)
    assert searches == ["paymentz"] and sum(whole for _, whole in first) == 5
    for _ in range(2):
        assert client.get("/groups/paymentz/offsets").json() == r.json()
    assert searches == ["paymentz"] and reads == first
    assert client.get("/groups/pament").json()["detail"].endswith("(did you mean 'payments'?)")
    assert searches == ["paymentz", "pament"] and sum(whole for _, whole in reads) == 5
