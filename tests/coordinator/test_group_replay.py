"""The group replay's dispatch: the record types it names are Kafka's registry (spec §2.3), every group record
the decoder emits reaches the replay of its record type, and a consumer group's events read its members as they
stand."""
from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipelines.coordinator.groups import GroupStore
from pipelines.coordinator.loader import replay_group_records
from pipelines.coordinator.options import ReplayOptions
from pipelines.coordinator.shard import replay_rows
from schemas.record_types import CoordinatorRecordType
from tests.coordinator.rowkit import Log
from tests.depth import cases

_ROW = re.compile(r"^\| (\d+) \| ([^|]+)\|")


def _upper_snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).upper()


def test_record_types_are_the_specs_registry(shared_dir):
    """Every released key type of the spec's record-type registry, by its (latest) Kafka name; 18 never shipped."""
    spec = (shared_dir / "spec" / "offsets-topic.md").read_text()
    section = spec[spec.index("### 2.3 Record-type registry"):]
    section = section[:section.index("\n#", 1)]
    registry = {}
    for m in filter(None, map(_ROW.match, section.splitlines())):
        if not m.group(2).strip().startswith("("):  # parenthesized: never released
            registry[int(m.group(1))] = _upper_snake(re.findall(r"(\w+)Key\b", m.group(2))[-1])
    assert len(registry) == 23
    assert {t.value: t.name for t in CoordinatorRecordType} == registry


def test_every_consumer_group_record_type_is_replayed():
    """One record of each KIP-848 type (3-8, 16) builds the group ConsumerGroupDescribe would show (the new
    coordinator of 4.0, which knows them all): nothing is dropped on the way to its replay, and each leaves its own
    event."""
    log = Log()
    rows = [log.cg_epoch("g", 3), log.cg_topics("g", [("ID-A", "a", 2)]), log.cg_member("g", "m"),
            log.cg_assignment_epoch("g", 3), log.cg_target("g", "m", [("ID-A", [0, 1])]),
            log.cg_current("g", "m", 3, [("ID-A", [0, 1])]), log.cg_regex("g", "a.*", ["a"])]
    tables = replay_rows(rows, ReplayOptions("modern", snapshot_id="t", num_partitions=50, kafka_version="4.0"))
    [group] = tables["loaded_groups"]
    assert (group["group_type"], group["generation"], group["assignment_epoch"], group["state"]) == \
        ("consumer", 3, 3, "Stable")
    [member] = tables["group_members"]
    assert member["assigned_partitions"] == member["target_partitions"] == [("a", 0), ("a", 1)]
    assert [e["event"] for e in tables["group_history"]] == [
        "group_epoch", "partition_metadata", "member_joined", "assignment_epoch", "target_assignment",
        "member_assignment", "regex"]


def test_rows_that_are_not_group_records_change_nothing():
    """A decode error or unknown key type among the loader's rows (whatever its key type) is no group record."""
    log = Log()
    store = GroupStore()
    replay_group_records(store, [{**log.error(), "key_type": 2, "group_id": "g"}, log.unknown(99)])
    assert store.groups == {} and store.history == []


_MEMBER_IDS = st.sampled_from(["m1", "m2", "m3", "m4"])
_EPOCHS = st.integers(0, 3)
_KIP848_RECORDS = st.lists(st.one_of(
    st.tuples(st.just("epoch"), _EPOCHS), st.tuples(st.just("tombstone")),
    st.tuples(st.just("member"), _MEMBER_IDS, st.sampled_from([None, "range", "uniform"])),
    st.tuples(st.just("member_tombstone"), _MEMBER_IDS),
    st.tuples(st.just("assignment_epoch"), _EPOCHS),
    st.tuples(st.just("current"), _MEMBER_IDS, _EPOCHS, st.sampled_from([0, 1, 2])),
    st.tuples(st.just("current_tombstone"), _MEMBER_IDS)), max_size=40)


def _kafka_state(g) -> str:
    """`ConsumerGroup.maybeUpdateGroupState`, read off every member."""
    if not g.members:
        return "Empty"
    if g.group_epoch > g.assignment_epoch:
        return "Assigning"
    if any(m.state != 0 or m.member_epoch != g.assignment_epoch for m in g.members.values()):
        return "Reconciling"
    return "Stable"


def _most_named_assignor(g) -> str | None:
    named = [m.metadata.server_assignor for m in g.members.values()
             if m.metadata is not None and m.metadata.server_assignor is not None]
    return min(set(named), key=lambda a: (-named.count(a), a)) if named else None


@given(records=_KIP848_RECORDS)
@settings(max_examples=cases(deep=400, quick=80), deadline=None, database=None)
def test_a_consumer_groups_events_read_its_members_as_they_stand(records):
    """Each KIP-848 record's event gives the group's state, its server assignor, its member count and the members
    that joined or left as every member of the group after the record says (the replay keeps tallies of them, so
    as not to read every member at every record)."""
    log, store = Log(), GroupStore()
    make = {"epoch": log.cg_epoch, "tombstone": log.cg_tombstone, "member_tombstone": log.cg_member_tombstone,
            "assignment_epoch": log.cg_assignment_epoch, "current_tombstone": log.cg_current_tombstone,
            "member": lambda g, m, a: log.cg_member(g, m, assignor=a),
            "current": lambda g, m, e, s: log.cg_current(g, m, e, state=s)}
    for kind, *args in records:
        before = set(getattr(store.groups.get("g"), "members", ()))
        store.replay(make[kind]("g", *args))
        g = store.groups.get("g")
        after = set(getattr(g, "members", ()))
        event = store.history[-1]
        assert (event.members_joined, event.members_left, event.member_count) == \
            (sorted(after - before), sorted(before - after), len(after))
        if g is not None:
            assert (event.state, event.protocol) == (_kafka_state(g), _most_named_assignor(g))


@pytest.mark.parametrize("semantics", ["legacy", "modern"])
def test_a_member_id_a_group_record_repeats_is_one_member_the_last(semantics):
    """`GroupMetadata.add` / `ClassicGroup.add` put each member in a map by its id: a GroupMetadataValue that lists
    an id twice loads one member, with the later entry's metadata. It was two `group_members` rows of one key and a
    member_count of 2."""
    from tests.coordinator.rowkit import member

    log = Log()
    rows = [log.group("g", [member("m1", client_id="first"), member("m2"), member("m1", client_id="second")])]
    tables = replay_rows(rows, ReplayOptions(semantics=semantics, snapshot_id="t", num_partitions=50))
    [group] = tables["loaded_groups"]
    assert group["member_count"] == 2
    assert sorted((m["member_id"], m["client_id"]) for m in tables["group_members"]) == [
        ("m1", "second"), ("m2", "client")]


def _generations(semantics: str, kafka_version: str, members) -> tuple[list, list, list]:
    """(loaded group's generation and member ids, group_history events, removed_groups) of generation 1 with one
    member, then generation 2 listing `members`."""
    from tests.coordinator.rowkit import member

    log = Log()
    rows = [log.group("g", [member("m0")]), log.group("g", [member(*m[:1], instance_id=m[1]) for m in members],
                                                     generation=2)]
    tables = replay_rows(rows, ReplayOptions(semantics=semantics, snapshot_id="t", num_partitions=50,
                                             kafka_version=kafka_version))
    loaded = [(g["generation"], sorted(m["member_id"] for m in tables["group_members"])) for g in
              tables["loaded_groups"]]
    return loaded, [e["event"] for e in tables["group_history"]], tables["removed_groups"]


@pytest.mark.parametrize("semantics,kafka_version", [("legacy", "2.8"), ("legacy", "3.9"), ("modern", "4.0")])
def test_a_member_after_a_repeated_member_id_fails_the_load(semantics, kafka_version):
    """`GroupMetadata.add` / `ClassicGroup.add` ask `supportsProtocols`: the value's protocol must be supported by as
    many members as the group holds. An id listed twice is one member in the map but two in the protocol's count, so
    the next member added fails it (Scala's `assert`, Java's IllegalStateException) and the partition's load fails:
    the record is skipped and the run says its broker would not load the partition. It loaded two members."""
    loaded, events, _ = _generations(semantics, kafka_version, [("m1", None), ("m1", None), ("m2", None)])
    assert loaded == [(1, ["m0"])] and events == ["generation", "skipped"]
    # the repeated id last: nothing is added after it, the group loads with the later entry
    loaded, events, _ = _generations(semantics, kafka_version, [("m1", None), ("m2", None), ("m1", None)])
    assert loaded == [(2, ["m1", "m2"])] and events == ["generation", "generation"]


@pytest.mark.parametrize("semantics,kafka_version,fails", [
    ("legacy", "2.8", False), ("legacy", "3.0", True), ("legacy", "3.9", True), ("modern", "3.7", True),
    ("modern", "4.0", True)])
def test_a_static_member_listed_twice_fails_the_load_from_3_0(semantics, kafka_version, fails):
    """3.0's `GroupMetadata.add` (and the new coordinator's `ClassicGroup.add`) throws "Static member with
    groupInstanceId=… cannot be added to group … since it is already a member" at a second member of one instance id,
    the last listed too; 2.x's `loadGroup` only mapped the id to the later member. It loaded both members."""
    loaded, events, _ = _generations(semantics, kafka_version, [("m1", "i"), ("m2", None), ("m3", "i")])
    if fails:
        assert loaded == [(1, ["m0"])] and events == ["generation", "skipped"]
    else:
        assert loaded == [(2, ["m1", "m2", "m3"])] and events == ["generation", "generation"]


def test_a_group_whose_load_fails_keeps_its_latest_tombstone():
    """A skipped value is not the group's latest record: a tombstone before it still names the group removed."""
    from tests.coordinator.rowkit import member

    log = Log()
    rows = [log.group("g", [member("m0")]), log.group_tombstone("g"),
            log.group("g", [member("m1", instance_id="i"), member("m2", instance_id="i")], generation=2)]
    tables = replay_rows(rows, ReplayOptions(semantics="modern", snapshot_id="t", num_partitions=50))
    assert not tables["loaded_groups"]
    assert [g["group_id"] for g in tables["removed_groups"]] == ["g"]


_TOMBSTONES = {"partition_metadata": lambda log: log.cg_topics_tombstone("g"),
               "member": lambda log: log.cg_member_tombstone("g", "m"),
               "assignment_epoch": lambda log: log.cg_assignment_epoch_tombstone("g"),
               "target_assignment": lambda log: log.cg_target_tombstone("g", "m"),
               "member_assignment": lambda log: log.cg_current_tombstone("g", "m"),
               "regex": lambda log: log.cg_regex_tombstone("g", "a.*")}


@pytest.mark.parametrize("kind", sorted(_TOMBSTONES))
def test_a_consumer_group_tombstone_replaces_a_simple_group(kind):
    """The new coordinator replays a type 4-8 or 16 tombstone through `getOrMaybeCreatePersistedConsumerGroup(id,
    false)`, which replaces a simple classic group (the one an offset value created) with an empty consumer group:
    Kafka lists `g` as an Empty consumer group holding the offset. The tombstone was ignored, leaving the simple
    classic group."""
    log = Log()
    log.commit("g", "t", 0, 5)
    _TOMBSTONES[kind](log)
    tables = replay_rows(log.rows, ReplayOptions("modern", snapshot_id="t", num_partitions=50, kafka_version="4.0"))
    [group] = tables["loaded_groups"]
    assert (group["group_type"], group["state"], group["is_simple"]) == ("consumer", "Empty", False)
    assert [(o["group_id"], o["committed_offset"]) for o in tables["loaded_offsets"]] == [("g", 5)]
    assert not tables["empty_group_offsets"]

    # the group's own tombstone then deletes it once its assignment epoch's tombstone set -1; before, its replay
    # throws (IllegalStateException, the load fails): skipped, the group staying
    log.cg_tombstone("g")
    tables = replay_rows(log.rows, ReplayOptions("modern", snapshot_id="t", num_partitions=50, kafka_version="4.0"))
    deleted = kind == "assignment_epoch"
    assert len(tables["loaded_groups"]) == len(tables["loaded_offsets"]) == (0 if deleted else 1)
    assert tables["offset_commits"] and tables["group_history"][-1]["event"] == ("deleted" if deleted else "skipped")


@pytest.mark.parametrize("pending,state,member_state", [
    ((), "Stable", "STABLE"),
    ((("revocation", [1]),), "Reconciling", "UNREVOKED_PARTITIONS"),
    ((("assignment", [1]),), "Reconciling", "UNRELEASED_PARTITIONS")])
@pytest.mark.parametrize("walker", ["python", "c"])
def test_a_member_in_the_3_7_layout_has_the_state_its_writer_derived(tmp_path, walker, pending, state, member_state):
    """The 3.6/3.7 ConsumerGroupCurrentMemberAssignmentValue stores no State: 3.7's `ConsumerGroupMember.Builder
    .build` derived it (REVOKING while partitions are pending revocation, ASSIGNING while some are pending
    assignment, else STABLE) and `ConsumerGroup.maybeUpdateGroupState` counted a STABLE member at the assignment
    epoch reconciled. Such a member had no state, so a fully reconciled 3.7 group read Reconciling forever."""
    import pyarrow as pa

    from pipelines.coordinator.shard import replay_shards
    from pipelines.decoding import columnar
    from pipelines.decoding.batch_writer import write_record_batch
    from pipelines.decoding.message_writer import write_group_record_key, write_group_record_value

    if walker == "c" and not columnar.HAVE_C_EXTENSION:
        pytest.skip("_fastdecode not built")
    tid, ts = "AAAAAAAAAAAAAAAAAAAAAQ", 1_700_000_000_000
    owned = [{"topicId": tid, "partitions": [0]}]
    lists = {"revocation": [], "assignment": []}
    for kind, partitions in pending:
        lists[kind] = [{"topicId": tid, "partitions": partitions}]
    values = [
        (5, "m", dict(instanceId=None, rackId=None, clientId="c", clientHost="h", subscribedTopicNames=["a"],
                      subscribedTopicRegex=None, rebalanceTimeoutMs=1, serverAssignor="uniform", assignors=[])),
        (3, None, dict(epoch=2)),
        (7, "m", dict(error=0, topicPartitions=owned, metadataVersion=0, metadataBytes=b"")),
        (6, None, dict(assignmentEpoch=2)),
        (8, "m", dict(memberEpoch=2, previousMemberEpoch=1, targetMemberEpoch=2, assignedPartitions=owned,
                      partitionsPendingRevocation=lists["revocation"],
                      partitionsPendingAssignment=lists["assignment"], error=0, metadataVersion=0,
                      metadataBytes=b""))]
    records = [(write_group_record_key(t, "cg", m), write_group_record_value(
        t, v, layout="3.8+" if t in (3, 6) else "3.7"), ts) for t, m, v in values]
    log = tmp_path / "__consumer_offsets-0" / "00000000000000000000.log"
    log.parent.mkdir()
    log.write_bytes(write_record_batch(records, 0))
    table = pa.concat_tables([pa.Table.from_batches([b]) for b in columnar.decode_segment_to_arrow(
        log, offsets_partition=0, use_c=walker == "c")])
    assert table.column("layout").to_pylist() == ["3.7", "3.8+", "3.7", "3.8+", "3.7"]
    tables = replay_shards(table, ReplayOptions(semantics="modern", snapshot_id="t", num_partitions=50)).tables
    assert tables["loaded_groups"].column("state").to_pylist() == [state]
    assert tables["group_members"].column("member_state").to_pylist() == [member_state]


def _decoded(tmp_path, records):
    """`records` (key, value, timestamp) as one batch of a segment, decoded as a run decodes it."""
    import pyarrow as pa

    from pipelines.decoding import columnar
    from pipelines.decoding.batch_writer import write_record_batch

    log = tmp_path / "__consumer_offsets-0" / "00000000000000000000.log"
    log.parent.mkdir(exist_ok=True)
    log.write_bytes(write_record_batch(records, 0))
    return pa.concat_tables([pa.Table.from_batches([b]) for b in columnar.decode_segment_to_arrow(
        log, offsets_partition=0)])


_TS = 1_700_000_000_000
_TID = "AAAAAAAAAAAAAAAAAAAAAQ"


def _commit(group: str, offset: int):
    from pipelines.decoding.message_writer import write_offset_commit_key, write_offset_commit_value

    value = write_offset_commit_value(3, offset=offset, commit_timestamp=_TS)
    return write_offset_commit_key(group, "t", 0), value, _TS


def _record(key_type: int, group: str, value: dict | None, member: str | None = None, layout: str | None = None):
    from pipelines.decoding.message_writer import write_group_record_key, write_group_record_value

    return (write_group_record_key(key_type, group, member),
            None if value is None else write_group_record_value(key_type, value, layout), _TS)


def _share_group(group: str, version: str = "4.0"):
    """A share group's records as 4.0 (`version`: 4.1+) writes them: its epoch, a member, the assignment epoch, the
    member's assignment."""
    metadata = _record(11, group, dict(epoch=2), layout="4.0") if version == "4.0" else _record(
        11, group, dict(epoch=2, metadataHash=0), layout="4.1+")
    return [metadata,
            _record(10, group, dict(rackId=None, clientId="c", clientHost="h", subscribedTopicNames=["t"]), "m"),
            _record(12, group, dict(assignmentEpoch=2)),
            _record(14, group, dict(memberEpoch=2, previousMemberEpoch=1, state=0,
                                    assignedPartitions=[{"topicId": _TID, "partitions": [0]}]), "m")]


def _streams_group(group: str, topology: bool, member_state: int = 1):
    """A streams group's records as 4.1 writes them: its epoch, a member, the assignment epoch, the member's
    tasks' epochs (Stable: `streams.MemberState.STABLE` is 1) and (`topology`) its topology."""
    tasks = dict(activeTasks=[], standbyTasks=[], warmupTasks=[], activeTasksPendingRevocation=[],
                 standbyTasksPendingRevocation=[], warmupTasksPendingRevocation=[])
    records = [_record(17, group, dict(epoch=4, metadataHash=9)),
               _record(19, group, dict(instanceId=None, rackId=None, clientId="c", clientHost="h",
                                       rebalanceTimeoutMs=1000, topologyEpoch=1, processId="p", userEndpoint=None,
                                       clientTags=[]), "m"),
               _record(20, group, dict(assignmentEpoch=4)),
               _record(22, group, dict(memberEpoch=4, previousMemberEpoch=3, state=member_state, **tasks), "m")]
    if topology:
        records.append(_record(23, group, dict(epoch=1, subtopologies=[])))
    return records


def _replayed(table, semantics: str, version: str):
    from pipelines.coordinator.shard import replay_shards

    tables = replay_shards(table, ReplayOptions(semantics=semantics, snapshot_id="t", num_partitions=50,
                                                kafka_version=version)).tables
    return {t: v.to_pylist() if hasattr(v, "to_pylist") else v for t, v in tables.items()}


@pytest.mark.parametrize("semantics,version,typed", [
    ("legacy", "4.1", set()), ("modern", "3.9", set()), ("modern", "4.0", {"sg"}), ("modern", "4.1", {"sg"}),
    ("modern", "4.2", {"sg", "st"})])
def test_a_share_or_streams_group_record_replaces_the_simple_group_of_its_offsets(tmp_path, semantics, version, typed):
    """Offsets committed for an id, then its streams group's records (a share group's, then offsets for its id):
    where the emulated coordinator knows their key types (the new one: share groups from 4.0, streams groups from
    4.1) the typed group holds the id (the streams group replacing the simple group the offsets made from 4.2,
    KAFKA-19862's `getOrMaybeCreatePersistedStreamsGroup`: 4.1's load fails), so they are its group's offsets;
    elsewhere the records are skipped and the id is a simple group's."""
    table = _decoded(tmp_path, [_commit("st", 7), *_share_group("sg", version), _commit("sg", 5),
                                *_streams_group("st", topology=True)])
    tables = _replayed(table, semantics, version)
    groups = {g["group_id"]: g for g in tables["loaded_groups"]}
    # a 4.1 writer's streams group loads NotReady: its metadata record names no validated topology epoch
    expected = {"sg": ("share", "share", "Stable", 2, 2, 1, False), "st": ("streams", "streams", "NotReady", 4, 4, 1,
                                                                          False)}
    for gid in ("sg", "st"):
        g = groups[gid]
        got = (g["group_type"], g["protocol_type"], g["state"], g["generation"], g["assignment_epoch"],
               g["member_count"], g["is_simple"])
        assert got == (expected[gid] if gid in typed else ("classic", None, "Empty", 0, None, 0, True))
    assert {o["group_id"] for o in tables["loaded_offsets"]} == typed
    assert {o["group_id"] for o in tables["empty_group_offsets"]} == {"sg", "st"} - typed
    members = {(m["group_id"], m["member_id"], m["group_type"], m["member_state"]) for m in tables["group_members"]}
    assert members == {(gid, "m", expected[gid][0], "STABLE") for gid in typed}
    assert {(e["group_id"], e["group_type"]) for e in tables["group_history"] if e["event"] != "skipped"} == {
        (gid, expected[gid][0]) for gid in typed}


def test_a_streams_group_without_topology_is_not_ready_and_its_tombstones_delete_it(tmp_path):
    """`StreamsGroup.maybeUpdateGroupState`: members and no topology is NotReady. The tombstones the coordinator
    writes to delete the group (spec §2.9: 22, 21, 20, 19, 17, 23) leave no group, and its offsets are then a
    removed group's (invisible), as a consumer group's are."""
    records = [_commit("st", 7), *_streams_group("st", topology=False)]
    [group] = _replayed(_decoded(tmp_path, records), "modern", "4.2")["loaded_groups"]
    assert (group["group_type"], group["state"], group["member_count"]) == ("streams", "NotReady", 1)

    deleting = [_record(22, "st", None, "m"), _record(21, "st", None, "m"), _record(20, "st", None),
                _record(19, "st", None, "m"), _record(17, "st", None), _record(23, "st", None)]
    tables = _replayed(_decoded(tmp_path, records + deleting), "modern", "4.2")
    assert not tables["loaded_groups"] and not tables["loaded_offsets"] and not tables["empty_group_offsets"]
    assert [(r["group_id"], r["group_type"]) for r in tables["removed_groups"]] == [("st", "streams")]


def test_a_share_group_record_of_a_classic_groups_id_leaves_the_classic_group(tmp_path):
    """A share group record for an id that holds a classic group with a protocol (Kafka: IllegalStateException,
    the load fails) is skipped, as a consumer group record is: the classic group stays."""
    from pipelines.decoding.message_writer import write_group_metadata_key, write_group_metadata_value

    classic = (write_group_metadata_key("g"), write_group_metadata_value(
        3, protocol_type="consumer", generation=1, protocol=None, leader=None, current_state_timestamp=_TS,
        members=[]), _TS)
    [group] = _replayed(_decoded(tmp_path, [classic, *_share_group("g")]), "modern", "4.0")["loaded_groups"]
    assert (group["group_type"], group["protocol_type"], group["generation"]) == ("classic", "consumer", 1)


def test_a_streams_or_share_value_no_layout_reads_changes_nothing(tmp_path):
    """A share / streams value that no known layout reads is decoded by its key alone (layout "unparsed", no
    fields): Kafka's load fails on it. It is skipped (an event that says so), never replayed as a value without
    epochs: that read as a group epoch of None and the run failed with a TypeError."""
    from pipelines.decoding.primitives import write_int16

    def junk(key_type: int, member: str | None = None):
        return _record(key_type, "st", None, member)[0], write_int16(0) + b"\x01\x02", _TS

    records = [junk(17), *_streams_group("st", topology=True)[1:2], junk(20), junk(22, "m"), junk(23)]
    tables = _replayed(_decoded(tmp_path, records), "modern", "4.1")
    [group] = tables["loaded_groups"]
    assert (group["group_type"], group["state"], group["generation"], group["member_count"]) == \
        ("streams", "NotReady", 0, 1)
    assert [e["event"] for e in tables["group_history"]] == ["skipped", "member_joined", "skipped", "skipped",
                                                             "skipped"]


def test_a_share_groups_partition_metadata_names_its_members_topics(tmp_path):
    """4.0's ShareGroupPartitionMetadata (type 9) names the topic ids of its subscription, as a consumer group's
    type 4 does: a share member's assignment shows the topic's name, not its id."""
    named = _record(9, "sg", dict(topics=[{"topicId": _TID, "topicName": "t", "numPartitions": 1,
                                          "partitionMetadata": []}]))
    tables = _replayed(_decoded(tmp_path, [*_share_group("sg"), named]), "modern", "4.0")
    [member] = tables["group_members"]
    assert member["assigned_partitions"] == [{"topic": "t", "partition": 0}]
    [group] = tables["loaded_groups"]
    assert group["unresolved_topic_ids"] == 0


def _topology(group: str):
    """`StreamsGroupTest.testIsSubscribedToTopic`'s topology: a subtopology reading test-topic1 and the repartition
    topic test-topic2 it also writes."""
    info = dict(name="test-topic2", partitions=0, replicationFactor=0, topicConfigs=[])
    return _record(23, group, dict(epoch=1, subtopologies=[dict(
        subtopologyId="test-subtopology", sourceTopics=["test-topic1"], sourceTopicRegex=[], stateChangelogTopics=[],
        repartitionSinkTopics=["test-topic2"], repartitionSourceTopics=[info], copartitionGroups=[])]))


def _offset(group: str, topic: str):
    from pipelines.decoding.message_writer import write_offset_commit_key, write_offset_commit_value

    return write_offset_commit_key(group, topic, 0), write_offset_commit_value(3, offset=1, commit_timestamp=_TS), _TS


@pytest.mark.parametrize("version,validated,state,kept", [
    ("4.2", None, "NotReady", {"test-topic1", "test-topic2"}), ("4.2", 1, "Stable", {"test-topic1", "test-topic2"}),
    ("4.2", 0, "NotReady", {"test-topic1", "test-topic2"}), ("4.1", 1, "NotReady", set())])
def test_a_streams_groups_topology_keeps_the_offsets_of_the_topics_it_reads(tmp_path, version, validated, state, kept):
    """A streams group's state waits for its topology's epoch to be the validated one its metadata record names
    (4.2+ `StreamsGroup.maybeUpdateGroupState`; 4.1 for a configured topology no record holds: NotReady). Its offsets
    then expire on commit time unless 4.2+'s `isSubscribedToTopic` finds their topic among its topology's source or
    repartition source topics (`StreamsGroupTest.testIsSubscribedToTopic`), in any state but Empty."""
    from pipelines.coordinator.expiry import ExpiryOptions, cleanup_group_metadata

    metadata = dict(epoch=4, metadataHash=9) | ({} if validated is None else dict(validatedTopologyEpoch=validated))
    records = [_record(17, "st", metadata), *_streams_group("st", topology=False)[1:], _topology("st"),
               *(_offset("st", t) for t in ("test-topic1", "test-topic2", "non-existent-topic"))]
    tables = _replayed(_decoded(tmp_path, records), "modern", version)
    [group] = tables["loaded_groups"]
    assert (group["state"], group["subscribed_topics"]) == (state, ["test-topic1", "test-topic2"])

    retention = 7 * 24 * 60
    cleaned = cleanup_group_metadata(tables, ExpiryOptions(as_of_ms=_TS + retention * 60_000, semantics="modern",
                                                           kafka_version=version, retention_minutes=retention))
    assert set(cleaned["loaded_offsets"].column("topic").to_pylist()) == kept
    assert cleaned["expired_groups"] == []


@pytest.mark.parametrize("member_state,named,state", [
    (1, "STABLE", "Stable"), (2, "UNREVOKED_TASKS", "Reconciling"), (3, "UNRELEASED_TASKS", "Reconciling"),
    (0, "UNKNOWN", "Reconciling"), (127, "UNKNOWN", "Reconciling"), (None, None, "Reconciling")])
def test_a_streams_members_state_is_read_with_the_streams_codes(tmp_path, member_state, named, state):
    """`streams.MemberState` numbers its states from 1 (STABLE 1, UNREVOKED_TASKS 2, UNRELEASED_TASKS 3, UNKNOWN
    127; `fromValue` reads any other code as UNKNOWN), where a consumer member's STABLE is 0: a streams member is
    reconciled (`isReconciledTo`) at state 1, and one with no assignment record yet is in no state
    (`StreamsGroupMember.Builder`), so its group is Reconciling."""
    metadata = _record(17, "st", dict(epoch=4, metadataHash=9, validatedTopologyEpoch=1))
    records = [metadata, *_streams_group("st", topology=False, member_state=member_state or 0)[1:], _topology("st")]
    if member_state is None:
        records = [r for r in records if r[0][:2] != b"\x00\x16"]  # no StreamsGroupCurrentMemberAssignment
    tables = _replayed(_decoded(tmp_path, records), "modern", "4.2")
    [group], [member] = tables["loaded_groups"], tables["group_members"]
    assert (group["state"], member["member_state"]) == (state, named)


def test_a_share_group_record_of_a_simple_groups_id_is_skipped(tmp_path):
    """`getOrMaybeCreatePersistedShareGroup` (4.0 to trunk) replaces no group of another type, a simple group of
    offsets included (Kafka: IllegalStateException, the load fails): a share group's records, values or tombstones,
    for the id of offsets already committed are skipped as a consumer group record of a classic group's id is, and
    the id stays the simple group of its offsets (which expire), not a share group's (which never do). Its tombstones
    throw there as well (only an absent id is "not found")."""
    records = [_commit("sg", 5), *_share_group("sg"), _record(14, "sg", None, "m"), _record(11, "sg", None)]
    tables = _replayed(_decoded(tmp_path, records), "modern", "4.1")
    [group] = tables["loaded_groups"]
    assert (group["group_type"], group["is_simple"]) == ("classic", True)
    assert [o["group_id"] for o in tables["empty_group_offsets"]] == ["sg"] and not tables["loaded_offsets"]
    assert [e["event"] for e in tables["group_history"]] == ["skipped"] * 6


_SHARE_RECORDS_OF_NO_GROUP = {
    "partition metadata (9)": [_record(9, "sg", dict(topics=[]))],
    "target assignment epoch (12)": [_record(12, "sg", dict(assignmentEpoch=2))],
    "target assignment (13)": [_record(13, "sg", dict(topicPartitions=[{"topicId": _TID, "partitions": [0]}]), "m")],
    "member assignment (14)": [_record(14, "sg", dict(memberEpoch=2, previousMemberEpoch=1, state=0,
                                                      assignedPartitions=[]), "m")],
    "member assignment of no member (14)": [_record(11, "sg", dict(epoch=1), layout="4.0"),
                                            _record(14, "sg", dict(memberEpoch=2, previousMemberEpoch=1, state=0,
                                                                   assignedPartitions=[]), "m")],
    "member tombstone (10)": [_record(10, "sg", None, "m")],
    "member tombstone of no member (10)": [_record(11, "sg", dict(epoch=1), layout="4.0"),
                                           _record(10, "sg", None, "m")],
    "group tombstone (11)": [_record(11, "sg", None)],
    "state partition metadata (15)": [_record(11, "sg", dict(epoch=1), layout="4.0"),
                                      _record(15, "sg", dict(initializedTopics=[], deletingTopics=[]), layout="4.0")],
}


@pytest.mark.parametrize("case", sorted(_SHARE_RECORDS_OF_NO_GROUP))
def test_4_0s_share_records_of_no_group_or_member_fail_the_load(tmp_path, case):
    """4.0's share replays (KIP-932 early access) find their group with `getOrMaybeCreatePersistedShareGroup(id,
    false)` for all but a ShareGroupMetadata or ShareGroupMemberMetadata value, and their member with
    `getOrMaybeCreateMember(id, false)` for a member's assignment or tombstone, catching nothing: a missing one fails
    the load, as any type 15 record does (4.0's shard replays none). The record is skipped, its event `skipped` (the
    run names its partition). 4.1 creates the group (and member) for a value and ignores a tombstone."""
    records = _SHARE_RECORDS_OF_NO_GROUP[case]
    tables = _replayed(_decoded(tmp_path, records), "modern", "4.0")
    assert tables["group_history"][-1]["event"] == "skipped"
    assert [(g["group_id"], g["member_count"]) for g in tables["loaded_groups"]] == (
        [("sg", 0)] if len(records) == 2 else [])
    if records[-1][0][:2] in (b"\x00\x09", b"\x00\x0f"):
        return  # 4.1 knows no type 9, and writes type 15 in another layout
    as_4_1 = [_record(11, "sg", dict(epoch=1, metadataHash=0), layout="4.1+") if r[0][:2] == b"\x00\x0b" and r[1]
              else r for r in records]  # 4.1 cannot read 4.0's ShareGroupMetadataValue
    later = _replayed(_decoded(tmp_path, as_4_1), "modern", "4.1")
    assert "skipped" not in [e["event"] for e in later["group_history"]]
    assert [g["group_id"] for g in later["loaded_groups"]] == (
        [] if case in ("member tombstone (10)", "group tombstone (11)") else ["sg"])


@pytest.mark.parametrize("version", ["4.0", "4.1"])
def test_a_share_group_tombstone_of_a_group_with_members_or_an_assignment_epoch_fails_the_load(tmp_path, version):
    """`replay(ShareGroupMetadataKey, null)` (4.0 and 4.1, as the consumer and streams groups' do) throws while the
    group has members, a target assignment or an assignment epoch its tombstone did not set to -1: the load fails.
    The tombstone is skipped, the group staying whole, where it deleted the group with its members. After the
    deletion the coordinator writes (14, 13, 12, 10 tombstones), it deletes the group."""
    layout = "4.0" if version == "4.0" else "4.1+"
    metadata = dict(epoch=2) | ({} if version == "4.0" else dict(metadataHash=0))
    group = [_record(11, "sg", metadata, layout=layout), *_share_group("sg")[1:],
             _record(13, "sg", dict(topicPartitions=[{"topicId": _TID, "partitions": [0]}]), "m")]
    tables = _replayed(_decoded(tmp_path, [*group, _record(11, "sg", None)]), "modern", version)
    assert [(g["group_id"], g["member_count"]) for g in tables["loaded_groups"]] == [("sg", 1)]
    assert tables["group_history"][-1]["event"] == "skipped"

    deletion = [_record(14, "sg", None, "m"), _record(13, "sg", None, "m"), _record(12, "sg", None),
                _record(10, "sg", None, "m"), _record(11, "sg", None)]
    tables = _replayed(_decoded(tmp_path, [*group, *deletion]), "modern", version)
    assert not tables["loaded_groups"] and tables["group_history"][-1]["event"] == "deleted"


def test_a_member_or_assignment_epoch_tombstone_out_of_the_deletion_order_fails_the_load(tmp_path):
    """`replay(…MemberMetadataKey, null)` throws unless the member's assignment tombstone set its epoch to
    LEAVE_GROUP_MEMBER_EPOCH and its target assignment is gone, and `replay(…TargetAssignmentMetadataKey, null)`
    unless no member has a target assignment (consumer, share and streams groups alike): the load fails. Such a
    tombstone is skipped, the member (the epoch) staying, where it removed the member (set -1)."""
    group = [_record(11, "sg", dict(epoch=2, metadataHash=0), layout="4.1+"), *_share_group("sg")[1:],
             _record(13, "sg", dict(topicPartitions=[{"topicId": _TID, "partitions": [0]}]), "m")]
    early = _replayed(_decoded(tmp_path, [*group, _record(10, "sg", None, "m"), _record(12, "sg", None)]),
                      "modern", "4.1")
    assert [e["event"] for e in early["group_history"][-2:]] == ["skipped", "skipped"]
    [g] = early["loaded_groups"]
    assert (g["member_count"], g["assignment_epoch"]) == (1, 2)

    in_order = [_record(14, "sg", None, "m"), _record(13, "sg", None, "m"), _record(12, "sg", None),
                _record(10, "sg", None, "m")]
    tables = _replayed(_decoded(tmp_path, [*group, *in_order]), "modern", "4.1")
    [g] = tables["loaded_groups"]
    assert (g["member_count"], g["assignment_epoch"]) == (0, -1)
    assert "skipped" not in [e["event"] for e in tables["group_history"]]


def _classic_group(group: str):
    """A classic group with a protocol type and no members, as a GroupMetadata value stores it: no simple group."""
    from pipelines.decoding.message_writer import write_group_metadata_key, write_group_metadata_value

    return write_group_metadata_key(group), write_group_metadata_value(
        3, protocol_type="consumer", generation=1, protocol=None, leader=None, current_state_timestamp=_TS,
        members=[]), _TS


#: (key type, a version whose coordinator replays it): every consumer, share and streams record type
_TOMBSTONE_OF_ANOTHER_TYPE = [*((t, v) for t in (3, 4, 5, 6, 7, 8, 16) for v in ("4.0", "4.1", "4.2")),
                              (9, "4.0"), *((t, v) for t in (10, 11, 12, 13, 14) for v in ("4.0", "4.1")),
                              (15, "4.1"), *((t, v) for t in (17, 19, 20, 21, 22, 23) for v in ("4.1", "4.2"))]


@pytest.mark.parametrize("key_type,version", _TOMBSTONE_OF_ANOTHER_TYPE)
def test_a_tombstone_of_another_group_types_id_fails_the_load(tmp_path, key_type, version):
    """A tombstone's replay finds its group with `getOrMaybeCreatePersisted…Group(id, false)`, which ignores an
    absent id (GroupIdNotFoundException) but throws for a group of another type as for a value (4.1+
    IllegalStateException "Group g is not a … group"; 4.0's share groups GroupIdNotFoundException, which their
    replays do not catch): the load fails. The tombstone is skipped, as a value is, where it was ignored; the
    classic group stays. For an absent id it is still ignored."""
    from pipelines.decoding.message_writer import GROUP_RECORD_TYPES

    tombstone = _record(key_type, "g", None, "m" if GROUP_RECORD_TYPES[key_type][1] == "memberId" else None)
    tables = _replayed(_decoded(tmp_path, [_classic_group("g"), tombstone]), "modern", version)
    assert [e["event"] for e in tables["group_history"]] == ["generation", "skipped"]
    assert [(g["group_id"], g["group_type"], g["protocol_type"]) for g in tables["loaded_groups"]] == [
        ("g", "classic", "consumer")]
    if version != "4.0" or key_type < 9:  # 4.0's share replays fail on an absent group too
        absent = _replayed(_decoded(tmp_path, [_classic_group("other"), tombstone]), "modern", version)
        assert absent["group_history"][-1]["event"] != "skipped"


@pytest.mark.parametrize("version,replaced", [("4.1", False), ("4.2", True)])
def test_a_streams_tombstone_of_a_simple_groups_id_replaces_it_from_4_2_only(tmp_path, version, replaced):
    """A streams group's tombstone for the id of a simple group of offsets: 4.2's
    `getOrMaybeCreatePersistedStreamsGroup(id, false)` replaces the simple group with an empty streams group
    (KAFKA-19862), 4.1's throws "Group st is not a streams group" (the load fails: skipped, the simple group stays)."""
    tables = _replayed(_decoded(tmp_path, [_commit("st", 7), _record(21, "st", None, "m")]), "modern", version)
    assert tables["group_history"][-1]["event"] == ("target_assignment_tombstone" if replaced else "skipped")
    [group] = tables["loaded_groups"]
    assert group["group_type"] == ("streams" if replaced else "classic")


def _consumer_group(group: str):
    """A consumer group's records as 3.8+ writes them on a member's join: its epoch, the member's metadata, its
    target assignment, the assignment epoch and the member's assignment."""
    assigned = [{"topicId": _TID, "partitions": [0]}]
    return [_record(3, group, dict(epoch=2), layout="3.8+"),
            _record(5, group, dict(instanceId=None, rackId=None, clientId="c", clientHost="h", subscribedTopicNames=["t"],
                                   subscribedTopicRegex=None, serverAssignor=None, rebalanceTimeoutMs=1000,
                                   classicMemberMetadata=None), "m"),
            _record(7, group, dict(topicPartitions=assigned), "m"),
            _record(6, group, dict(assignmentEpoch=2), layout="3.8+"),
            _record(8, group, dict(memberEpoch=2, previousMemberEpoch=1, state=0, assignedPartitions=assigned,
                                   partitionsPendingRevocation=[]), "m")]


_CONSUMER_RECORDS_3X_FAILS_ON = {
    # the cleaner removed the first type 3 and 5 records: a later epoch's type 3 comes after the offsets
    "after its offsets (a simple group)": ([_commit("cg", 5)], slice(None), 5),
    # the cleaner left the member's assignment ahead of its group's later records
    "its member's assignment first": ([], slice(4, 5), 1),
    "its assignment epoch first": ([], slice(3, 4), 1),
    "a tombstone of no group": ([_record(3, "cg", None)], slice(0, 0), 1),
    "a member tombstone of no member": ([*_consumer_group("cg")[:1], _record(5, "cg", None, "m")], slice(0, 0), 1),
}


@pytest.mark.parametrize("case", sorted(_CONSUMER_RECORDS_3X_FAILS_ON))
def test_3_xs_consumer_group_records_of_no_group_or_member_fail_the_load(tmp_path, case):
    """3.6-3.9's consumer group replays find their group with `getOrMaybeCreate(Persisted)ConsumerGroup(id, false)`
    for all but a ConsumerGroupMetadata or ConsumerGroupMemberMetadata value, and their member with
    `getOrMaybeCreateMember(id, false)` for its assignment or its metadata's tombstone, catching nothing; and they
    replace no group of another type, the simple group of offsets included ("Group cg is not a consumer group"):
    the load fails. Such a record is skipped (the run names its partition). 4.0 creates the group (and member) for
    a value, ignores a tombstone of no group or member, and replaces a simple group."""
    before, kept, skipped = _CONSUMER_RECORDS_3X_FAILS_ON[case]
    records = [*before, *_consumer_group("cg")[kept]]
    early = _replayed(_decoded(tmp_path, records), "modern", "3.9")
    events = [e["event"] for e in early["group_history"]]
    assert events.count("skipped") == skipped and events[-1] == "skipped"
    later = _replayed(_decoded(tmp_path, records), "modern", "4.0")
    assert "skipped" not in [e["event"] for e in later["group_history"]]
    if case == "after its offsets (a simple group)":
        [group] = early["loaded_groups"]
        assert (group["group_type"], group["is_simple"]) == ("classic", True)
        assert [g["group_type"] for g in later["loaded_groups"]] == ["consumer"]


@pytest.mark.parametrize("version,records", [
    ("4.1", [_commit("sg", 5), _record(11, "sg", None)]),  # no share group replaces a simple one
    ("4.0", [_record(11, "sg", None)]),  # 4.0's share group tombstone of no group
    ("4.1", [_classic_group("sg"), _record(3, "sg", None)]),  # a classic group's id
    ("3.9", [_commit("sg", 5), _record(3, "sg", None)])])  # 3.x's consumer group replaces no simple group
def test_a_group_tombstone_the_load_fails_on_removes_no_group(tmp_path, version, records):
    """A group tombstone (type 3, 11, 17) the replay skips, as the coordinator's load fails on it, is no trace of a
    removed group: the id is not in `removed_groups` (it was, as the id's latest group record, beside the simple or
    classic group still loaded for it)."""
    tables = _replayed(_decoded(tmp_path, records), "modern", version)
    assert tables["group_history"][-1]["event"] == "skipped"
    assert tables["removed_groups"] == []
    assert [g["group_id"] for g in tables["loaded_groups"]] == (["sg"] if len(records) == 2 else [])


@pytest.mark.parametrize("key_type", [11, 15])
def test_a_share_value_4_0_wrote_fails_4_1s_load(tmp_path, key_type):
    """4.1 made share groups' ShareGroupMetadataValue (an untagged MetadataHash after the Epoch) and
    ShareGroupStatePartitionMetadataValue (InitializingTopics ahead) incompatible with 4.0's: a value a 4.0 broker
    wrote (KIP-932 early access) fails 4.1's deserializer, so its load fails there. Such a value is skipped; 4.0
    replays its ShareGroupMetadataValue (and skips any type 15, which its shard replays not)."""
    values = {11: dict(epoch=3), 15: dict(initializedTopics=[], deletingTopics=[])}
    records = [_record(11, "sg", dict(epoch=2, metadataHash=0), layout="4.1+"),
               _record(key_type, "sg", values[key_type], layout="4.0")]
    for version in ("4.1", "4.2"):
        tables = _replayed(_decoded(tmp_path, records), "modern", version)
        assert [e["event"] for e in tables["group_history"]] == ["group_epoch", "skipped"]
        assert [g["generation"] for g in tables["loaded_groups"]] == [2]
    if key_type == 11:
        tables = _replayed(_decoded(tmp_path, [records[1]]), "modern", "4.0")
        assert [(e["event"], e["generation"]) for e in tables["group_history"]] == [("group_epoch", 3)]
