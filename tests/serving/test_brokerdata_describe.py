"""`offsetlake describe` on a snapshot the real pipeline rebuilt from a real broker's `__consumer_offsets`
(brokerdata scenarios `classic-basic` and `kip848`, Kafka 4.0.0), checked against what that broker answered
(`expected_state.json` -> `summary`: ListGroups state, DescribeGroups members, OffsetFetch committed offsets).

Every expectation is derived from the JSON; nothing about the scenario is hard-coded here.
"""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from jobs.cli import main

pytestmark = [pytest.mark.shared, pytest.mark.integration]

SCENARIO = "classic-basic"
SNAPSHOT = "cb"
MISSING = "-"


@pytest.fixture(scope="module")
def summary(brokerdata) -> dict:
    path = brokerdata / SCENARIO / "expected_state.json"
    if not path.is_file():
        pytest.skip(f"{path} not present")
    return json.loads(path.read_text())["summary"]


@pytest.fixture(scope="module")
def warehouse(brokerdata, summary, no_spark, settings, tmp_path_factory):
    """The scenario rebuilt ONCE for the module by the real pipeline (in-process: no Spark session)."""
    from pipelines.rebuild import RebuildRequest, run_rebuild

    wh = tmp_path_factory.mktemp("brokerdata-cb")
    res = run_rebuild(no_spark, settings, RebuildRequest(
        inputs=(str(brokerdata / SCENARIO / "data"),), warehouse=str(wh), snapshot_id=SNAPSHOT, semantics="modern",
        kafka_version="4.0"))
    assert res.status == "succeeded", res
    return wh


def describe(wh, group: str, *flags: str):
    r = CliRunner().invoke(main, ["describe", "--warehouse", str(wh), "--snapshot", SNAPSHOT, group, *flags],
                           catch_exceptions=False)
    assert r.exit_code == 0, (group, flags, r.output)
    return r


def data_rows(stdout: str, header_first: str = "GROUP") -> tuple[list[str], list[list[str]]]:
    """(header cells, data rows split on whitespace); values in this scenario have no spaces."""
    lines = [ln for ln in stdout.splitlines() if ln.strip()]
    assert lines and lines[0].split()[0] == header_first, stdout
    return lines[0].split(), [ln.split() for ln in lines[1:]]


def live_members(g: dict) -> list[dict]:
    return g["describe_groups"].get("members") or []


def state_of(g: dict) -> str:
    return g["list_groups"]["state"]


def assigned(m: dict) -> list[tuple[str, int]]:
    return sorted((t, int(p)) for t, ps in (m.get("assignment") or {}).items() for p in ps)


def committed(g: dict) -> dict[tuple[str, int], int]:
    return {(t, int(p)): v["offset"] for t, ps in g["committed_offsets"].items() for p, v in ps.items()}


def test_scenario_has_groups_in_both_states(summary):
    states = {state_of(g) for g in summary.values()}
    assert {"Stable", "Empty"} <= states, states  # the checks below cover members and no-member groups


def _timeline_topics(brokerdata) -> tuple[dict[str, int], dict[str, int]]:
    """(records produced per topic, partitions per topic) as the scenario's timeline.tsv tells them."""
    import ast
    import re

    produced: dict[str, int] = {}
    partitions: dict[str, int] = {}
    for line in (brokerdata / SCENARIO / "timeline.tsv").read_text().splitlines():
        if m := re.search(r"\tproduced (\d+) records to ([\w.-]+)$", line):
            produced[m.group(2)] = produced.get(m.group(2), 0) + int(m.group(1))
        if m := re.search(r"\tcreated topics (\{.*\})$", line):
            partitions.update(ast.literal_eval(m.group(1)))
    return produced, partitions


def test_describe_offsets_matches_the_broker(warehouse, summary, brokerdata):
    leo_seen: dict[tuple[str, int], int] = {}
    for gid, g in sorted(summary.items()):
        r = describe(warehouse, gid)
        head, rows = data_rows(r.stdout)
        assert head == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID",
                        "HOST", "CLIENT-ID", "LAG-TIME"]
        # the scenarios keep no data-topic segments: no lag in time, but where nothing is left to consume (0)
        assert all(row[9] == ("PT0S" if row[5] != MISSING and int(row[5]) <= 0 else MISSING) for row in rows), rows
        rows = [row[:9] for row in rows]
        offsets = committed(g)
        owner = {tp: m for m in live_members(g) for tp in assigned(m)}
        expected = {}
        for tp in set(offsets) | set(owner):
            m = owner.get(tp)
            off = offsets.get(tp)
            expected[tp] = [gid, tp[0], str(tp[1]), MISSING if off is None else str(off),
                            m["member_id"] if m else MISSING, m["client_host"] if m else MISSING,
                            m["client_id"] if m else MISSING]
        got = {(row[1], int(row[2])): row[:4] + row[6:] for row in rows}
        assert len(got) == len(rows), (gid, "a partition printed twice", rows)
        assert got == expected, gid
        # LOG-END-OFFSET from the log dir's own high watermarks; LAG = LOG-END-OFFSET - CURRENT-OFFSET
        for row in rows:
            tp, leo = (row[1], int(row[2])), int(row[4])
            assert leo_seen.setdefault(tp, leo) == leo, (gid, tp)
            assert row[5] == (MISSING if row[3] == MISSING else str(leo - int(row[3]))), (gid, row)

        # Kafka's order: members with more partitions first, each member's partitions by topic then partition,
        # then the committed-but-unassigned partitions (sorted).
        blocks: list[tuple[str, list[tuple[str, int]]]] = []
        for row in rows:
            tp = (row[1], int(row[2]))
            if not blocks or blocks[-1][0] != row[6]:
                blocks.append((row[6], []))
            blocks[-1][1].append(tp)
        assert len({c for c, _ in blocks}) == len(blocks), (gid, "a consumer's rows are not contiguous")
        assigned_blocks = [b for b in blocks if b[0] != MISSING]
        assert [len(tps) for _, tps in assigned_blocks] == sorted((len(tps) for _, tps in assigned_blocks), reverse=True)
        assert all(tps == sorted(tps) for _, tps in blocks), gid
        if blocks and any(c == MISSING for c, _ in blocks):
            assert blocks[-1][0] == MISSING, gid

        if state_of(g) == "Empty":
            assert r.stderr == f"\nConsumer group '{gid}' has no active members.\n"
        else:
            assert r.stderr == "", (gid, r.stderr)
    produced, partitions = _timeline_topics(brokerdata)
    whole = [t for t in produced if sum(1 for tp in leo_seen if tp[0] == t) == partitions[t]]
    assert whole, "no topic with every partition described"
    for t in whole:  # every partition of the topic shown: its end offsets add up to what the producers wrote
        assert sum(v for tp, v in leo_seen.items() if tp[0] == t) == produced[t], t


def test_describe_members_matches_the_broker(warehouse, summary):
    for gid, g in sorted(summary.items()):
        r = describe(warehouse, gid, "--members")
        members = live_members(g)
        head, rows = data_rows(r.stdout)
        if not members:
            assert rows == [], gid
            assert r.stderr == f"\nConsumer group '{gid}' has no active members.\n"
            continue
        assert r.stderr == "", (gid, r.stderr)
        with_instance = any(m.get("group_instance_id") for m in members)
        assert head == ["GROUP", "CONSUMER-ID", *(["GROUP-INSTANCE-ID"] if with_instance else []), "HOST", "CLIENT-ID",
                        "#PARTITIONS"], gid
        expected = sorted(
            [gid, m["member_id"], *([m.get("group_instance_id") or ""] if with_instance else []),
             m["client_host"], m["client_id"], str(len(assigned(m)))]
            for m in members
        )
        assert sorted(rows) == expected, gid


def test_describe_state_matches_the_broker(warehouse, summary):
    for gid, g in sorted(summary.items()):
        r = describe(warehouse, gid, "--state")
        head, rows = data_rows(r.stdout)
        assert head == ["GROUP", "COORDINATOR", "(ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"]
        assert len(rows) == 1, (gid, rows)
        strategy = g["describe_groups"].get("protocol") or MISSING
        # COORDINATOR (ID) is not in the offsets topic: the tool prints `-`.
        assert rows[0] == [gid, MISSING, strategy, state_of(g), str(len(live_members(g)))], gid
        if state_of(g) == "Empty":
            assert r.stderr == f"\nConsumer group '{gid}' has no active members.\n"
        else:
            assert r.stderr == ""


@pytest.fixture(scope="module")
def kip848(brokerdata, no_spark, settings, tmp_path_factory):
    """The `kip848` scenario (KIP-848 groups next to one classic group) rebuilt once, with the broker's summary."""
    from pipelines.rebuild import RebuildRequest, run_rebuild

    path = brokerdata / "kip848" / "expected_state.json"
    if not path.is_file():
        pytest.skip(f"{path} not present")
    wh = tmp_path_factory.mktemp("brokerdata-kip848")
    res = run_rebuild(no_spark, settings, RebuildRequest(
        inputs=(str(brokerdata / "kip848" / "data"),), warehouse=str(wh), snapshot_id=SNAPSHOT, semantics="modern",
        kafka_version="4.0"))
    assert res.status == "succeeded", res
    return wh, json.loads(path.read_text())["summary"]


def test_describe_state_of_consumer_groups_matches_the_broker(kip848):
    """ASSIGNMENT-STRATEGY of a KIP-848 group is the assignor ConsumerGroupDescribe reports: the members' server
    assignor, else the coordinator's default (`uniform`), also for a group whose members had named `range` and left."""
    wh, summary = kip848
    listed = {gid: g for gid, g in summary.items() if g.get("listed")}
    assert {g["list_groups"]["group_type"] for g in listed.values()} == {"classic", "consumer"}, "scenario changed"
    for gid, g in sorted(listed.items()):
        r = describe(wh, gid, "--state")
        head, rows = data_rows(r.stdout)
        assert head == ["GROUP", "COORDINATOR", "(ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"], gid
        if g["list_groups"]["group_type"] == "consumer":
            cgd = g["consumer_group_describe"]
            strategy, members = cgd["assignor_name"], cgd["members"]
        else:
            strategy, members = g["describe_groups"].get("protocol") or MISSING, live_members(g)
        assert rows == [[gid, MISSING, strategy, state_of(g), str(len(members))]], gid


def test_describe_history_ends_in_the_members_the_broker_reports(warehouse, kip848, summary):
    """`--history`: the last event's #MEMBERS is the broker's member count, and replaying JOINED/LEFT over the
    events gives exactly the member ids DescribeGroups / ConsumerGroupDescribe report."""
    cases = [(warehouse, summary), kip848]
    checked = 0
    for wh, groups in cases:
        for gid, g in sorted(groups.items()):
            if not g.get("listed"):
                continue
            if g["list_groups"].get("group_type") == "consumer":
                want = {m["member_id"] for m in g["consumer_group_describe"]["members"]}
            else:
                want = {m["member_id"] for m in live_members(g)}
            r = CliRunner().invoke(main, ["describe", "--warehouse", str(wh), "--snapshot", SNAPSHOT, gid,
                                          "--history"], catch_exceptions=False)
            if not want and r.exit_code == 1:  # a simple group: offsets only, no group record in the log
                continue
            assert r.exit_code == 0, (gid, r.output)
            lines = [ln for ln in r.stdout.splitlines() if ln.strip()]
            assert lines[1].split() == ["TIME", "OFFSET", "EVENT", "GENERATION", "STATE", "#MEMBERS", "JOINED",
                                        "LEFT"]
            members: set[str] = set()
            for ln in lines[2:]:
                cells = ln.split()
                joined, left = cells[-2], cells[-1]
                members |= set() if joined == MISSING else set(joined.split(","))
                members -= set() if left == MISSING else set(left.split(","))
                assert int(cells[-3]) == len(members), (gid, ln)
            assert members == want, gid
            checked += 1
    assert checked >= 8


def test_api_group_history_matches_describe(kip848):
    """`GET /groups/{id}/history` gives the events `describe --history` prints, and a 404 for an unknown group."""
    from fastapi.testclient import TestClient

    from jobs.api import create_app
    from pipelines.io.snapshots import DeltaWarehouseReader

    wh, summary = kip848
    gid = next(g for g, v in sorted(summary.items()) if v.get("listed")
               and v["list_groups"].get("group_type") == "consumer")
    r = CliRunner().invoke(main, ["describe", "--warehouse", str(wh), "--snapshot", SNAPSHOT, gid, "--history"])
    printed = [ln.split()[1:3] for ln in r.stdout.splitlines()[3:] if ln.strip()]
    with TestClient(create_app(DeltaWarehouseReader(wh), refresh_interval=0)) as client:
        body = client.get(f"/groups/{gid}/history", params={"snapshot": SNAPSHOT}).json()
        assert [[f"{e['offsets_partition']}:{e['record_offset']}", e["event"]] for e in body["events"]] == printed
        assert body["events"][-1]["member_count"] == len(summary[gid]["consumer_group_describe"]["members"])
        assert client.get("/groups/no-such-group/history", params={"snapshot": SNAPSHOT}).status_code == 404
