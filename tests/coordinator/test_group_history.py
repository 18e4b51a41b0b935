"""`group_history` against the broker: every group event the engine reports is read straight off
`kafka-dump-log --offsets-decoder`'s output (Kafka's own decoder, not ours) for every brokerdata scenario, and every
member the scenario's clients were assigned as (`timeline.tsv`) is reported joining its group.
"""
from __future__ import annotations

import json
import re
from collections import defaultdict

import pytest

from pipelines.coordinator.options import ReplayOptions
from pipelines.coordinator.shard import replay_rows

SCENARIOS = ["classic-basic", "deletes", "expiry", "kip848", "many-groups", "simple-consumers", "transactions"]
LINE = re.compile(r"offset: (\d+) .*?key: (\{.*?\}) payload: (.*)$")


GROUP_KEY_TYPES = {"2", "3", "4", "5", "6", "7", "8", "16"}
MODELLED = {"generation", "group_epoch", "member_joined", "member_left", "deleted"}


def dump_log_events(scenario_dir):
    """(offsets partition, offset) -> the group event Kafka's decoder shows: classic generations with their member
    ids, consumer group epochs, members joining/leaving, deletions (the member/epoch bookkeeping is the test's own,
    from the dump's fields); and the positions of every group record (key types 2-8, 16)."""
    events = {}
    positions = set()
    for f in sorted((scenario_dir / "dump_log").glob("__consumer_offsets-*.txt")):
        part = int(f.stem.rsplit("-", 1)[1])
        classic: dict[str, set] = {}
        consumer: dict[str, set] = {}
        simple: set[str] = set()  # the new coordinator's simple groups: made by an offset value of an unknown id
        for line in f.read_text(encoding="utf-8").splitlines():
            m = LINE.search(line)
            if not m:
                continue
            off, key, payload = int(m.group(1)), json.loads(m.group(2)), m.group(3).strip()
            kt, data = key["type"], key["data"]
            value = None if payload in ("<DELETE>", "null") else json.loads(payload)["data"]
            if kt in GROUP_KEY_TYPES:
                positions.add((part, off))
            if kt in ("0", "1") and value is not None and data["group"] not in classic | consumer.keys():
                simple.add(data["group"])
            elif kt == "2":
                gid = data["group"]
                if value is None:
                    if gid in classic or gid in consumer or gid in simple:
                        events[(part, off)] = (gid, "deleted", None, set())
                    classic.pop(gid, None)
                    consumer.pop(gid, None)
                    simple.discard(gid)
                else:
                    classic[gid] = {mm["memberId"] for mm in value["members"]}
                    consumer.pop(gid, None)
                    simple.discard(gid)
                    events[(part, off)] = (gid, "generation", value["generation"], set(classic[gid]))
            elif kt == "3":
                gid = data["groupId"]
                if value is None:
                    if gid in consumer or gid in simple:
                        events[(part, off)] = (gid, "deleted", None, set())
                        consumer.pop(gid, None)
                        simple.discard(gid)
                else:
                    consumer.setdefault(gid, set())
                    classic.pop(gid, None)
                    simple.discard(gid)
                    events[(part, off)] = (gid, "group_epoch", value["epoch"], set(consumer[gid]))
            elif kt == "5":
                gid, mid = data["groupId"], data["memberId"]
                if value is None:
                    if mid in consumer.get(gid, set()):
                        consumer[gid].discard(mid)
                        events[(part, off)] = (gid, "member_left", None, set(consumer[gid]))
                elif mid not in consumer.setdefault(gid, set()):
                    classic.pop(gid, None)
                    simple.discard(gid)
                    consumer[gid].add(mid)
                    events[(part, off)] = (gid, "member_joined", None, set(consumer[gid]))
    return events, positions


@pytest.fixture(scope="module")
def histories(brokerdata):
    reader = pytest.importorskip("pipelines.decoding.reader")
    out = {}
    for s in SCENARIOS:
        rows = list(reader.iter_decoded_rows([brokerdata / s / "data"]))
        tables = replay_rows(rows, ReplayOptions(semantics="modern", snapshot_id="h", num_partitions=50))
        out[s] = tables["group_history"]
    return out


@pytest.mark.shared
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_group_history_is_the_dump_logs_group_events(brokerdata, histories, scenario):
    want, positions = dump_log_events(brokerdata / scenario)
    # one history row per group record of the log, in log order
    assert [(r["offsets_partition"], r["record_offset"]) for r in histories[scenario]] == sorted(positions)
    got = {}
    members: dict[tuple[int, str], set] = defaultdict(set)
    for r in histories[scenario]:
        key = (r["offsets_partition"], r["group_id"])
        before = members[key]
        after = (before | set(r["members_joined"])) - set(r["members_left"])
        assert len(after) == r["member_count"], r
        members[key] = after
        if r["event"] not in MODELLED:
            continue  # assignments, partition metadata, member updates, ignored tombstones: not modelled above
        generation = r["generation"] if r["event"] in ("generation", "group_epoch") else None
        got[(r["offsets_partition"], r["record_offset"])] = (r["group_id"], r["event"], generation, after)
    assert got == want


@pytest.mark.shared
def test_every_assigned_member_is_seen_joining(brokerdata, histories):
    line = re.compile(r"\[(\S+) worker\] \S+: assigned .* memberid=(\S+)")
    checked = 0
    for s in SCENARIOS:
        timeline = brokerdata / s / "timeline.tsv"
        joined = defaultdict(set)
        for r in histories[s]:
            joined[r["group_id"]].update(r["members_joined"])
        for text in timeline.read_text(encoding="utf-8").splitlines():
            m = line.search(text)
            if m and m.group(1) in joined:
                assert m.group(2) in joined[m.group(1)], (s, text)
                checked += 1
    assert checked > 10
