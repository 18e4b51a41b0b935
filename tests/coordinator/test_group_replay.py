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


@pytest.mark.parametrize("semantics", ["legacy", "modern"])
def test_every_consumer_group_record_type_is_replayed(semantics):
    """One record of each KIP-848 type (3-8, 16) builds the group ConsumerGroupDescribe would show: nothing is
    dropped on the way to its replay, and each leaves its own event."""
    log = Log()
    rows = [log.cg_epoch("g", 3), log.cg_topics("g", [("ID-A", "a", 2)]), log.cg_member("g", "m"),
            log.cg_assignment_epoch("g", 3), log.cg_target("g", "m", [("ID-A", [0, 1])]),
            log.cg_current("g", "m", 3, [("ID-A", [0, 1])]), log.cg_regex("g", "a.*", ["a"])]
    tables = replay_rows(rows, ReplayOptions(semantics=semantics, snapshot_id="t", num_partitions=50))
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
    tables = replay_rows(log.rows, ReplayOptions(semantics="modern", snapshot_id="t", num_partitions=50))
    [group] = tables["loaded_groups"]
    assert (group["group_type"], group["state"], group["is_simple"]) == ("consumer", "Empty", False)
    assert [(o["group_id"], o["committed_offset"]) for o in tables["loaded_offsets"]] == [("g", 5)]
    assert not tables["empty_group_offsets"]

    log.cg_tombstone("g")  # and the group's own tombstone then deletes it, as it deletes a simple group
    tables = replay_rows(log.rows, ReplayOptions(semantics="modern", snapshot_id="t", num_partitions=50))
    assert not tables["loaded_groups"] and not tables["loaded_offsets"] and not tables["empty_group_offsets"]


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
