"""`group_history` against the broker: every group event the engine reports is read straight off
`kafka-dump-log --offsets-decoder`'s output (Kafka's own decoder, not ours) for every brokerdata scenario, every
member the scenario's clients were assigned as (`timeline.tsv`) is reported joining its group, and every KIP-848
member assignment is reported with the partitions the dump shows, by the topic names the log gives their ids.
"""
from __future__ import annotations

import json
import re
from collections import defaultdict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipelines.coordinator.groups import GroupEvent
from pipelines.coordinator.options import ReplayOptions
from pipelines.coordinator.shard import replay_rows
from pipelines.coordinator.tables import group_history_table, named_group_history
from tests.coordinator.rowkit import Log
from tests.depth import cases

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


def _histories(brokerdata, semantics: str, kafka_version: str) -> dict:
    """Each broker scenario's group history as the engine replays its log under `semantics`."""
    reader = pytest.importorskip("pipelines.decoding.reader")
    out = {}
    for s in SCENARIOS:
        rows = list(reader.iter_decoded_rows([brokerdata / s / "data"]))
        out[s] = replay_rows(rows, ReplayOptions(semantics=semantics, snapshot_id="h", num_partitions=50,
                                                 kafka_version=kafka_version))["group_history"]
    return out


@pytest.fixture(scope="module")
def histories(brokerdata):
    return _histories(brokerdata, "modern", "4.0")


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


@pytest.fixture(scope="module")
def legacy_histories(brokerdata):
    return _histories(brokerdata, "legacy", "3.9")


@pytest.mark.shared
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_a_legacy_history_deletes_the_groups_the_broker_deleted(brokerdata, histories, legacy_histories, scenario):
    """Replayed as the old coordinator, a GroupMetadata record's event is the one Kafka's dump shows: a new
    generation, and a tombstone `deleted` where the id held a group, the simple group its offset commits made too
    (the broker's DeleteGroups of `dl-del-simple`, its expiry of `ex-simple` and `ex-simple-late`). The old
    coordinator made that group when it wrote the commit, as the new one does (3.9
    GroupCoordinator.handleCommitOffsets / handleTxnCommitOffsets: addGroup), though its load builds one only for
    the offsets it ends with. Ids of KIP-848 records apart: the old coordinator skips those records."""
    kip848 = {r["group_id"] for r in histories[scenario] if r["group_type"] != "classic"}
    want, _ = dump_log_events(brokerdata / scenario)
    want = {at: (gid, event) for at, (gid, event, _, _) in want.items()
            if event in ("generation", "deleted") and gid not in kip848}
    got = {(r["offsets_partition"], r["record_offset"]): (r["group_id"], r["event"])
           for r in legacy_histories[scenario] if r["group_id"] not in kip848 and r["event"] != "tombstone"}
    assert got == want


@pytest.mark.parametrize("semantics", ["legacy", "modern"])
def test_a_simple_group_a_commit_made_again_is_deleted_again(semantics):
    """DeleteGroups of a simple consumer group (its offset tombstones and the group tombstone, one batch at one
    time), a commit of the id after it, plain or transactional, and DeleteGroups again: the commit made the group
    again (3.9 GroupCoordinator.handleCommitOffsets / handleTxnCommitOffsets add an Empty group; 4.0
    OffsetMetadataManager.replay a simple classic group), so each tombstone after a commit is `deleted` in the
    group history, in either semantics, and one right after another is a tombstone that found nothing. Each agrees
    with the replay of the log cut just before its batch (`rebuild --until-time`): the group is loaded there, and
    removed at the tombstone's time; nothing is loaded before the last one."""
    log = Log()
    log.commit("s", "t", 0, 10)  # 0: makes the group
    deletions = [log.offset_tombstone("s", "t", 0), log.group_tombstone("s")]  # 1, 2
    log.commit("s", "t", 0, 20)  # 3: makes it again
    deletions += [log.offset_tombstone("s", "t", 0), log.group_tombstone("s")]  # 4, 5
    log.commit("s", "t", 0, 30, pid=7, epoch=0)  # 6: a transactional commit makes it again
    log.marker(7, "COMMIT")  # 7
    deletions += [log.offset_tombstone("s", "t", 0), log.group_tombstone("s")]  # 8, 9
    deletions += [log.group_tombstone("s")]  # 10: nothing left to delete
    for tombstone, group_tombstone in zip(deletions[0:6:2], deletions[1:6:2]):
        group_tombstone["timestamp"] = tombstone["timestamp"]  # one batch, one append time
    history = replay_rows(log.rows, ReplayOptions(semantics=semantics, snapshot_id="h"))["group_history"]
    events = [(r["record_offset"], r["event"]) for r in history]
    assert events == [(2, "deleted"), (5, "deleted"), (9, "deleted"), (10, "tombstone")]

    def cut(t: int) -> dict:
        tables = replay_rows(log.rows, ReplayOptions(semantics=semantics, until_time_ms=t, snapshot_id="cut",
                                                     load_time_ms=t))
        return {"loaded": {r["group_id"] for r in tables["loaded_groups"]},
                "removed": {r["group_id"] for r in tables["removed_groups"]}}

    for at, event in events:
        batch_time = log.rows[at - 1 if event == "deleted" else at]["timestamp"]
        assert ("s" in cut(batch_time - 1)["loaded"]) == (event == "deleted"), at
        assert cut(log.rows[at]["timestamp"]) == {"loaded": set(), "removed": {"s"}}, at


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


def dump_log_assignments(scenario_dir):
    """(offsets partition, offset) -> the sorted (topic name, partition) pairs of every KIP-848 member-assignment
    value (type 8) in Kafka's dump, its topic ids named by the dump's partition-metadata values (type 4)."""
    names, assignments = {}, {}
    for f in sorted((scenario_dir / "dump_log").glob("__consumer_offsets-*.txt")):
        part = int(f.stem.rsplit("-", 1)[1])
        for line in f.read_text(encoding="utf-8").splitlines():
            m = LINE.search(line)
            if not m or m.group(3).strip() in ("<DELETE>", "null"):
                continue
            key, value = json.loads(m.group(2)), json.loads(m.group(3))["data"]
            if key["type"] == "4":
                names.update({t["topicId"]: t["topicName"] for t in value["topics"]})
            elif key["type"] == "8":
                assignments[(part, int(m.group(1)))] = [(t["topicId"], p) for t in value["assignedPartitions"]
                                                        for p in t["partitions"]]
    return {at: sorted((names.get(tid, tid), p) for tid, p in pairs) for at, pairs in assignments.items()}


@pytest.mark.shared
@pytest.mark.parametrize("scenario", ["expiry", "kip848", "many-groups"])
def test_member_assignments_are_the_dump_logs_by_topic_name(brokerdata, histories, scenario):
    want = dump_log_assignments(brokerdata / scenario)
    got = {(r["offsets_partition"], r["record_offset"]): [(tp["topic"], tp["partition"])
                                                          for tp in r["member_assignments"][0]["assigned_partitions"]]
           for r in histories[scenario] if r["event"] == "member_assignment" and r["member_assignments"]}
    assert want and got == want


_IDS = st.sampled_from(["zz-id", "aa-id", "mm-id", "unnamed-id"])
_PAIRS = st.lists(st.tuples(_IDS, st.integers(0, 3)), max_size=5)
_MEMBER = st.fixed_dictionaries({"member_id": st.sampled_from(["m1", "m2"]), "pairs": st.none() | _PAIRS})


@given(events=st.lists(st.tuples(st.sampled_from(["classic", "consumer"]), st.none() | st.lists(_MEMBER, max_size=3)),
                       max_size=8),
       names=st.dictionaries(st.sampled_from(["zz-id", "aa-id", "mm-id"]), st.sampled_from(["a", "b", "n", "z"])))
@settings(max_examples=cases(deep=300, quick=60), deadline=None, database=None)
def test_naming_a_history_gives_the_rows_the_names_would_have_given(events, names):
    """A KIP-848 member's topic ids named after the rows were made (`named_group_history`) give the rows that
    events carrying the names from the start give: each member's partitions sorted by name, a classic member's and
    a null list untouched, an id the log never named kept as it is."""
    def history(name_of):
        out = []
        for i, (group_type, members) in enumerate(events):
            rename = name_of if group_type == "consumer" else (lambda t: t)
            out.append(GroupEvent(
                "g", i, None, group_type, "member", None, None, None, None, None, 0, [], [],
                None if members is None else [
                    {"member_id": m["member_id"], "assigned_partitions": None if m["pairs"] is None else
                     [{"topic" if group_type == "classic" else "topic_id": rename(t), "partitions": [p]}
                      for t, p in m["pairs"]]} for m in members], "{}"))
        return group_history_table(out, "s", 3)

    got = named_group_history(history(lambda t: t), names)
    assert got.to_pylist() == history(lambda t: names.get(t, t)).to_pylist()


_DECODED = st.lists(st.fixed_dictionaries({"topic": st.sampled_from(["b", "a", "é", "B"]),
                                           "partitions": st.none() | st.lists(st.integers(0, 40), max_size=4)}),
                    max_size=4)


@given(st.lists(st.none() | st.lists(st.fixed_dictionaries({
    "member_id": st.sampled_from(["m1", "m2"]), "client_id": st.none() | st.just("c"),
    "subscribed_topics": st.none() | st.lists(st.sampled_from(["a", "b"]), max_size=2),
    "assigned_partitions": st.none() | _DECODED}), max_size=3), max_size=6))
@settings(max_examples=cases(deep=300, quick=60), deadline=None, database=None)
def test_a_members_partitions_are_its_assignments_pairs_sorted(events):
    """A history member's `assigned_partitions` are its decoded assignment's (topic, partition) pairs, sorted by
    topic (code point order) then partition, duplicates kept; a null assignment stays null, a topic with no
    partitions gives none; every other field is the member's."""
    table = group_history_table([GroupEvent("g", i, None, "classic", "generation", None, None, None, None, None, 0, [],
                                            [], members, "{}") for i, members in enumerate(events)], "s", 3)
    want = [None if members is None else [
        {"member_id": m["member_id"], "group_instance_id": None, "client_id": m["client_id"], "client_host": None,
         "subscribed_topics": m["subscribed_topics"],
         "assigned_partitions": None if m["assigned_partitions"] is None else [
             {"topic": t, "partition": p} for t, p in sorted((tp["topic"], p) for tp in m["assigned_partitions"]
                                                             for p in tp["partitions"] or ())]}
        for m in members] for members in events]
    assert table.column("member_assignments").to_pylist() == want
