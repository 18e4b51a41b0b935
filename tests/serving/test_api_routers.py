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
