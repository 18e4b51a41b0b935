"""Scenario tests named after Kafka's `GroupMetadataManagerTest` / `OffsetMetadataManagerTest`, on tiny inline logs.

Every scenario is a small log on its own offsets partition. Each test checks that the engine, in-process, gives
the outcome Kafka produces for its scenario (no JVM); one Spark test replays all of them in ONE Spark job per
semantics through the engine's Spark boundary and checks it gives the engine's tables, partition by partition.
"""
from __future__ import annotations

import pytest

from pipelines.coordinator.options import ReplayOptions
from pipelines.coordinator.partitioner import partition_for
from pipelines.coordinator.shard import replay_rows
from tests.coordinator.harness import assert_same, by_partition, spark_tables
from tests.coordinator.rowkit import Log, member

SCENARIOS: dict[str, callable] = {}


def scenario(fn):
    SCENARIOS[fn.__name__] = fn
    return fn


def _partition(name: str) -> int:
    return sorted(SCENARIOS).index(name)


# ----------------------------------------------------------------------------------------------------------------
# Logs
# ----------------------------------------------------------------------------------------------------------------
@scenario
def offsets_without_group(log: Log):
    log.commit("g", "foo", 0, 23)
    log.commit("g", "foo", 1, 455)
    log.commit("g", "bar", 0, 8992)


@scenario
def offsets_with_tombstones(log: Log):
    log.commit("g", "foo", 0, 23)
    log.commit("g", "foo", 1, 455)
    log.offset_tombstone("g", "foo", 1)
    log.commit("g", "bar", 0, 8992)


@scenario
def txn_commit_marker(log: Log):
    with log.batch(pid=1000, epoch=2, txn=True):
        log.commit("g", "foo", 0, 23)
        log.commit("g", "foo", 1, 455)
    log.marker(1000, "COMMIT")


@scenario
def txn_abort_marker(log: Log):
    with log.batch(pid=1000, epoch=2, txn=True):
        log.commit("g", "foo", 0, 23)
        log.commit("g", "foo", 1, 455)
    log.marker(1000, "ABORT")


@scenario
def consumer_wins(log: Log):
    # txn offset, then a plain commit of the same partition, then the COMMIT marker: the later record wins
    log.commit("g", "foo", 0, 100, pid=1000)
    log.commit("g", "foo", 0, 200)
    log.marker(1000, "COMMIT")
    log.group("g", [member("m1", topics=["foo"], assigned=[("foo", [0])])])


@scenario
def transaction_wins(log: Log):
    log.commit("g", "foo", 0, 200)
    log.commit("g", "foo", 0, 100, pid=1000)
    log.marker(1000, "COMMIT")
    log.group("g", [member("m1", topics=["foo"], assigned=[("foo", [0])])])


@scenario
def committed_and_aborted(log: Log):
    log.commit("g", "foo", 0, 10, pid=1, epoch=0)
    log.commit("g", "foo", 1, 20, pid=2, epoch=0)
    log.commit("g", "foo", 0, 11, pid=2, epoch=0)
    log.marker(1, "COMMIT")
    log.marker(2, "ABORT")
    log.commit("g", "foo", 2, 30, pid=3, epoch=7)  # still open at the end of the log


@scenario
def group_with_tombstone(log: Log):
    log.group("g", [member("m1")], generation=15)
    log.group_tombstone("g")


@scenario
def corrupted_log(log: Log):
    log.commit("g", "foo", 0, 23)
    log.error("value: truncated OffsetCommitValue")
    log.unknown(key_type=99)
    log.group("g", [member("m1", topics=["foo"], assigned=[("foo", [0])])], generation=3)
    log.error("key: unknown key version")
    log.commit("g", "foo", 1, 45)


@scenario
def offsets_and_group(log: Log):
    log.commit("g", "foo", 0, 23, leader_epoch=5, metadata="meta", expire=1_700_000_999_999, version=1)
    log.group("g", [member("m1", topics=["foo", "bar"], assigned=[("foo", [0]), ("bar", [1, 0])]),
                    member("m2", topics=["foo", "bar"], assigned=[("foo", [1])])],
              generation=7, protocol="range", state_ts=1_700_000_000_500)


@scenario
def large_group_metadata(log: Log):
    members = [member(f"consumer-{i:04d}-" + "x" * 200, topics=[f"topic-{j}" for j in range(20)],
                      assigned=[(f"topic-{i % 20}", list(range(8)))]) for i in range(300)]
    log.group("big", members, generation=42)
    log.commit("big", "topic-0", 0, 1)


@scenario
def tombstone_during_open_txn(log: Log):
    log.group("g", [member("m1", topics=["foo"], assigned=[("foo", [0])])])
    log.commit("g", "foo", 0, 5)
    log.commit("g", "foo", 0, 10, pid=7, epoch=1)
    log.offset_tombstone("g", "foo", 0)
    log.marker(7, "COMMIT")


@scenario
def leader_change_control_batch(log: Log):
    log.commit("g", "foo", 0, 10, pid=7, epoch=1)
    log.marker(7, "LEADER_CHANGE")
    log.marker(7, "COMMIT")


@scenario
def only_first_control_record_legacy(log: Log):
    log.commit("g", "foo", 0, 10, pid=7, epoch=1)
    log.control_batch(7, ("ABORT", "COMMIT"))


@scenario
def pid_without_txn_bit(log: Log):
    log.commit("g", "foo", 0, 10, pid=33, txn=False)


@scenario
def group_tombstone_after_offsets(log: Log):
    log.group("g", [member("m1")], generation=2)
    log.commit("g", "foo", 0, 10)
    log.group("g", [], generation=3, protocol_type="consumer")
    log.group_tombstone("g")


@scenario
def v0_members_and_null_leader(log: Log):
    log.group("g", [member("m1", rebalance=None, session=6000), member("m2", rebalance=None, session=7000)],
              leader=None, version=0, generation=1)


@scenario
def misplaced_group(log: Log):
    log.group("placed-elsewhere", [member("m1")])


@scenario
def consumer_group_stable(log: Log):
    log.cg_topics("cg", [("TOPIC-A", "a", 3), ("TOPIC-B", "b", 1)])
    log.cg_member("cg", "m1", topics=["a"], assignor="uniform")
    log.cg_member("cg", "m2", topics=["a", "b"], assignor="uniform", instance_id="static-2", rack="r1")
    log.cg_epoch("cg", 3)
    log.cg_target("cg", "m1", [("TOPIC-A", [0, 1])])
    log.cg_target("cg", "m2", [("TOPIC-A", [2]), ("TOPIC-B", [0])])
    log.cg_assignment_epoch("cg", 3)
    log.cg_current("cg", "m1", 3, [("TOPIC-A", [1, 0])])
    log.cg_current("cg", "m2", 3, [("TOPIC-A", [2]), ("TOPIC-B", [0])])
    log.cg_regex("cg", "a.*", ["a", "aa"])
    log.commit("cg", "a", 0, 99)


@scenario
def consumer_group_reconciling_and_unresolved(log: Log):
    log.cg_member("cg", "m1", topics=["a"], assignor="range")
    log.cg_epoch("cg", 5)
    log.cg_assignment_epoch("cg", 5)
    log.cg_target("cg", "m1", [("UNKNOWN-ID", [0])])
    log.cg_current("cg", "m1", 4, [("UNKNOWN-ID", [0])], state=1, revoking=[("UNKNOWN-ID", [1])])


@scenario
def consumer_group_assigning(log: Log):
    log.cg_member("cg", "m1", topics=["a"])
    log.cg_epoch("cg", 6)
    log.cg_assignment_epoch("cg", 5)
    log.cg_current("cg", "m1", 5, [])


@scenario
def consumer_group_member_left(log: Log):
    log.cg_member("cg", "m1")
    log.cg_member("cg", "m2")
    log.cg_epoch("cg", 2)
    log.cg_assignment_epoch("cg", 2)
    log.cg_current("cg", "m1", 2)
    log.cg_current("cg", "m2", 2)
    log.cg_current_tombstone("cg", "m2")
    log.cg_target_tombstone("cg", "m2")
    log.cg_member_tombstone("cg", "m2")
    log.cg_epoch("cg", 3)
    log.cg_assignment_epoch("cg", 3)
    log.cg_current("cg", "m1", 3)


@scenario
def consumer_group_deleted(log: Log):
    log.commit("cg", "a", 0, 5)
    log.cg_member("cg", "m1")
    log.cg_epoch("cg", 1)
    log.cg_assignment_epoch("cg", 1)
    log.cg_current("cg", "m1", 1)
    log.cg_current_tombstone("cg", "m1")
    log.cg_target_tombstone("cg", "m1")
    log.cg_assignment_epoch_tombstone("cg")
    log.cg_member_tombstone("cg", "m1")
    log.cg_topics_tombstone("cg")
    log.cg_tombstone("cg")


@scenario
def consumer_replaces_simple_group(log: Log):
    log.commit("g", "a", 0, 1)
    log.cg_member("g", "m1")
    log.cg_epoch("g", 1)


@scenario
def classic_to_consumer_migration(log: Log):
    log.group("g", [member("m1")], generation=4)
    log.commit("g", "a", 0, 10)
    log.group_tombstone("g")
    log.cg_member("g", "m1", topics=["a"])
    log.cg_epoch("g", 5)
    log.cg_assignment_epoch("g", 5)
    log.cg_current("g", "m1", 5)


@scenario
def consumer_to_classic_downgrade(log: Log):
    log.cg_topics("g", [("FOO", "foo", 6), ("BAR", "bar", 3)])
    for m, parts in (("m1", [("FOO", [0, 1, 2]), ("BAR", [0, 1])]), ("m2", [("FOO", [3, 4, 5]), ("BAR", [2])])):
        log.cg_member("g", m, topics=["foo", "bar"], assignor="range")
        log.cg_target("g", m, parts)
    log.cg_epoch("g", 10)
    log.cg_assignment_epoch("g", 10)
    log.cg_current("g", "m1", 10, [("FOO", [0, 1, 2]), ("BAR", [0, 1])])
    log.cg_current("g", "m2", 10, [("FOO", [3, 4, 5]), ("BAR", [2])])
    log.commit("g", "foo", 0, 42)
    with log.batch(one_time=True):  # m2 leaves: the group's tombstones, then the classic group (one write)
        for write in (log.cg_current_tombstone, log.cg_target_tombstone):
            write("g", "m1")
            write("g", "m2")
        log.cg_assignment_epoch_tombstone("g")
        log.cg_member_tombstone("g", "m1")
        log.cg_member_tombstone("g", "m2")
        log.cg_topics_tombstone("g")
        log.cg_tombstone("g")
        log.group("g", [member("m1", topics=["foo", "bar"], assigned=[("foo", [0, 1, 2]), ("bar", [0, 1])])],
                  generation=10, protocol="range")


@scenario
def empty_consumer_group_after_members_left(log: Log):
    log.cg_member("cg", "m1")
    log.cg_epoch("cg", 1)
    log.cg_current("cg", "m1", 1)
    log.cg_current_tombstone("cg", "m1")
    log.cg_member_tombstone("cg", "m1")
    log.cg_epoch("cg", 2)
    log.cg_assignment_epoch("cg", 2)


@scenario
def pending_commits_only(log: Log):
    with log.batch(pid=1000, epoch=2, txn=True):
        log.commit("g", "foo", 0, 23)
        log.commit("g", "foo", 1, 455)
        log.commit("g", "bar", 0, 8992)


@scenario
def committed_aborted_pending_one_producer(log: Log):
    with log.batch(pid=1000, epoch=2, txn=True):  # 0-2
        log.commit("g", "foo", 0, 23)
        log.commit("g", "foo", 1, 455)
        log.commit("g", "bar", 0, 8992)
    log.marker(1000, "COMMIT", epoch=2)  # 3
    with log.batch(pid=1000, epoch=2, txn=True):  # 4-6
        log.commit("g", "foo", 2, 231)
        log.commit("g", "foo", 3, 4551)
        log.commit("g", "bar", 1, 89921)
    log.marker(1000, "ABORT", epoch=2)  # 7
    with log.batch(pid=1000, epoch=2, txn=True):  # 8-10, never ended
        log.commit("g", "foo", 3, 2312)
        log.commit("g", "foo", 4, 45512)
        log.commit("g", "bar", 2, 899212)


@scenario
def offset_write_after_group_removed(log: Log):
    log.group("g", [member("98098230493")], generation=293)
    log.group_tombstone("g")
    log.commit("g", "foo", 0, 23)
    log.commit("g", "foo", 1, 455)
    log.commit("g", "bar", 0, 8992)


@scenario
def offsets_of_a_removed_group_then_a_commit(log: Log):
    log.group("g", [member("m1")], generation=4)
    log.commit("g", "foo", 0, 5)
    log.group_tombstone("g")
    log.commit("g", "foo", 1, 7)


@scenario
def tombstones_with_pending_transactional_offsets(log: Log):
    log.commit("foo", "bar", 0, 100)  # 0
    log.commit("foo", "bar", 0, 100, pid=10, epoch=0)  # 1
    log.commit("foo", "bar", 1, 100, pid=10, epoch=0)  # 2
    log.offset_tombstone("foo", "bar", 0)  # 3
    log.offset_tombstone("foo", "bar", 1)  # 4


@scenario
def group_deleted_with_pending_transaction(log: Log):
    log.group("foo", [], generation=3, protocol_type="consumer")  # 0: Empty, so DeleteGroups may delete it
    log.commit("foo", "bar-0", 0, 100)  # 1
    log.commit("foo", "bar-0", 1, 100)  # 2
    log.commit("foo", "bar-1", 0, 100)  # 3
    log.commit("foo", "bar-1", 0, 101, pid=10, epoch=0)  # 4
    log.commit("foo", "bar-2", 0, 100, pid=10, epoch=0)  # 5
    with log.batch(one_time=True):  # 6-10: DeleteGroups, one write
        log.offset_tombstone("foo", "bar-1", 0)
        log.offset_tombstone("foo", "bar-0", 0)
        log.offset_tombstone("foo", "bar-0", 1)
        log.offset_tombstone("foo", "bar-2", 0)
        log.group_tombstone("foo")
    log.marker(10, "COMMIT")  # 11


@scenario
def point_in_time(log: Log):
    log.commit("g", "a", 0, 1)                       # offset 0
    log.commit("g", "a", 0, 2, pid=5, epoch=0)       # offset 1
    log.commit("g", "a", 1, 7)                       # offset 2
    log.marker(5, "COMMIT")                          # offset 3: after the bound below


def _build(name: str) -> Log:
    log = Log(partition=_partition(name), start=0)
    SCENARIOS[name](log)
    return log


UNTIL_OFFSET = 2  # only for point_in_time (a separate replay)


@pytest.fixture(scope="module")
def logs() -> dict[str, Log]:
    return {name: _build(name) for name in SCENARIOS}


def _options(semantics: str, kafka_version: str = "4.0") -> ReplayOptions:
    """A 4.0 broker's coordinator: the new one knows every KIP-848 record type then (16 came with 4.0)."""
    return ReplayOptions(semantics=semantics, snapshot_id="s1", load_time_ms=1_800_000_000_000,
                         kafka_version=kafka_version)


@pytest.fixture(scope="module")
def replayed(logs):
    """Both semantics, every scenario replayed in-process: {semantics: {scenario: tables}}."""
    return {semantics: {name: replay_rows(log.rows, _options(semantics)) for name, log in logs.items()}
            for semantics in ("legacy", "modern")}


@pytest.mark.parametrize("semantics", ["legacy", "modern"])
def test_spark_boundary_gives_the_engine_tables_on_every_scenario(spark, logs, replayed, semantics):
    all_rows = [r for log in logs.values() for r in log.rows]
    parts = by_partition(spark_tables(spark, all_rows, _options(semantics)))
    for name, log in logs.items():
        assert_same(parts[log.partition], replayed[semantics][name], f"{semantics}/{name}")


def offsets(tables, table="loaded_offsets"):
    return {(r["group_id"], r["topic"], r["partition"]): r["committed_offset"] for r in tables[table]}


def groups(tables):
    return {r["group_id"]: r for r in tables["loaded_groups"]}


BOTH = pytest.mark.parametrize("semantics", ["legacy", "modern"])


# ----------------------------------------------------------------------------------------------------------------
# Tests
# ----------------------------------------------------------------------------------------------------------------
@BOTH
def test_load_offsets_without_group(replayed, semantics):
    t = replayed[semantics]["offsets_without_group"]
    assert offsets(t) == {}
    assert offsets(t, "empty_group_offsets") == {("g", "foo", 0): 23, ("g", "foo", 1): 455, ("g", "bar", 0): 8992}
    assert all(r["has_group_metadata"] is False for r in t["empty_group_offsets"])
    g = groups(t)["g"]
    assert (g["group_type"], g["state"], g["generation"], g["protocol_type"], g["is_simple"], g["member_count"]) == (
        "classic", "Empty", 0, None, True, 0)
    assert g["current_state_timestamp"] == 1_800_000_000_000  # the load time, as Kafka sets it


@BOTH
def test_load_offsets_with_tombstones(replayed, semantics):
    t = replayed[semantics]["offsets_with_tombstones"]
    assert offsets(t, "empty_group_offsets") == {("g", "foo", 0): 23, ("g", "bar", 0): 8992}
    assert sorted(r["is_tombstone"] for r in t["offset_commits"]) == [False, False, False, True]


@BOTH
def test_load_transactional_offset_commits_with_commit_marker(replayed, semantics):
    t = replayed[semantics]["txn_commit_marker"]
    assert offsets(t, "empty_group_offsets") == {("g", "foo", 0): 23, ("g", "foo", 1): 455}
    assert {r["producer_id"] for r in t["empty_group_offsets"]} == {1000}
    assert t["pending_offsets"] == []
    assert {r["txn_outcome"] for r in t["offset_commits"]} == {"committed"}


def test_load_transactional_offset_commits_with_abort_marker_legacy(replayed):
    t = replayed["legacy"]["txn_abort_marker"]
    assert offsets(t) == {} and offsets(t, "empty_group_offsets") == {}
    assert t["loaded_groups"] == []  # no group for an aborted transaction (spec §5.5 #3)
    assert {r["txn_outcome"] for r in t["offset_commits"]} == {"aborted"}


def test_load_transactional_offset_commits_with_abort_marker_modern(replayed):
    t = replayed["modern"]["txn_abort_marker"]
    assert offsets(t) == {} and offsets(t, "empty_group_offsets") == {}
    # OffsetMetadataManager.replay created a simple group before the ABORT (spec §5.5 #3)
    assert [(g["group_id"], g["is_simple"], g["state"]) for g in t["loaded_groups"]] == [("g", True, "Empty")]


@BOTH
def test_group_load_with_consumer_and_transactional_offset_commits_consumer_wins(replayed, semantics):
    t = replayed[semantics]["consumer_wins"]
    assert offsets(t) == {("g", "foo", 0): 200}
    assert t["loaded_offsets"][0]["producer_id"] == -1 and t["loaded_offsets"][0]["has_group_metadata"]


@BOTH
def test_group_load_with_consumer_and_transactional_offset_commits_transaction_wins(replayed, semantics):
    t = replayed[semantics]["transaction_wins"]
    assert offsets(t) == {("g", "foo", 0): 100}
    assert t["loaded_offsets"][0]["producer_id"] == 1000


@BOTH
def test_load_with_committed_and_aborted_transactional_offset_commits(replayed, semantics):
    t = replayed[semantics]["committed_and_aborted"]
    assert offsets(t, "empty_group_offsets") == {("g", "foo", 0): 10}
    assert [(r["producer_id"], r["topic"], r["partition"], r["committed_offset"], r["producer_epoch"])
            for r in t["pending_offsets"]] == [(3, "foo", 2, 30, 7)]
    outcome = {(r["producer_id"], r["committed_offset"]): r["txn_outcome"] for r in t["offset_commits"]}
    assert outcome == {(1, 10): "committed", (2, 20): "aborted", (2, 11): "aborted", (3, 30): "pending"}


@BOTH
def test_load_group_with_tombstone(replayed, semantics):
    t = replayed[semantics]["group_with_tombstone"]
    assert t["loaded_groups"] == [] and t["group_members"] == []
    [r] = t["removed_groups"]
    assert (r["group_id"], r["group_type"], r["tombstone_record_offset"]) == ("g", "classic", 1)


@BOTH
def test_load_group_and_offsets_with_corrupted_log(replayed, semantics):
    t = replayed[semantics]["corrupted_log"]
    assert offsets(t) == {("g", "foo", 0): 23, ("g", "foo", 1): 45}
    assert groups(t)["g"]["generation"] == 3
    assert len(t["offset_commits"]) == 2  # error / unknown rows are not offset commits


@BOTH
def test_load_offsets_and_group(replayed, semantics):
    t = replayed[semantics]["offsets_and_group"]
    [o] = t["loaded_offsets"]
    assert (o["committed_offset"], o["leader_epoch"], o["metadata"], o["expire_timestamp"], o["has_group_metadata"]) \
        == (23, 5, "meta", 1_700_000_999_999, True)
    g = groups(t)["g"]
    assert (g["state"], g["generation"], g["protocol"], g["protocol_type"], g["leader"], g["member_count"]) == (
        "Stable", 7, "range", "consumer", "m1", 2)
    assert g["current_state_timestamp"] == 1_700_000_000_500
    assert g["subscribed_topics"] == ["bar", "foo"]
    m1 = next(m for m in t["group_members"] if m["member_id"] == "m1")
    assert m1["assigned_partitions"] == [("bar", 0), ("bar", 1), ("foo", 0)] and m1["is_leader"]
    assert t["empty_group_offsets"] == []


@BOTH
def test_load_group_with_large_group_metadata_record(replayed, semantics):
    t = replayed[semantics]["large_group_metadata"]
    g = groups(t)["big"]
    assert g["member_count"] == 300 and g["state"] == "Stable"
    assert len(t["group_members"]) == 300
    assert len(g["subscribed_topics"]) == 20
    assert offsets(t) == {("big", "topic-0", 0): 1}


def test_offset_tombstone_during_open_transaction_legacy_resurrects(replayed):
    t = replayed["legacy"]["tombstone_during_open_txn"]
    assert offsets(t) == {("g", "foo", 0): 10}  # spec §5.5 #1


def test_offset_tombstone_during_open_transaction_modern_stays_deleted(replayed):
    t = replayed["modern"]["tombstone_during_open_txn"]
    assert offsets(t) == {}


def test_non_transactional_control_type_ends_transaction_legacy(replayed):
    t = replayed["legacy"]["leader_change_control_batch"]
    assert offsets(t, "empty_group_offsets") == {}  # pending map dropped by the LEADER_CHANGE batch (§5.5 #5)
    assert t["offset_commits"][0]["txn_outcome"] == "aborted"


def test_non_transactional_control_type_ignored_modern(replayed):
    t = replayed["modern"]["leader_change_control_batch"]
    assert offsets(t, "empty_group_offsets") == {("g", "foo", 0): 10}


def test_only_first_record_of_control_batch_read_legacy(replayed):
    assert offsets(replayed["legacy"]["only_first_control_record_legacy"], "empty_group_offsets") == {}


def test_every_control_record_read_modern(replayed):
    # ABORT ends the transaction first; the COMMIT then finds no pending map
    assert offsets(replayed["modern"]["only_first_control_record_legacy"], "empty_group_offsets") == {}


def test_producer_id_without_transactional_bit(replayed):
    legacy, modern = replayed["legacy"]["pid_without_txn_bit"], replayed["modern"]["pid_without_txn_bit"]
    assert offsets(legacy, "empty_group_offsets") == {("g", "foo", 0): 10} and legacy["pending_offsets"] == []
    assert offsets(modern, "empty_group_offsets") == {}  # pending transactional in the new coordinator (§5.5 #6)
    assert [r["producer_id"] for r in modern["pending_offsets"]] == [33]


def test_group_tombstone_after_offsets_legacy_recreates_simple_group(replayed):
    t = replayed["legacy"]["group_tombstone_after_offsets"]
    assert offsets(t, "empty_group_offsets") == {("g", "foo", 0): 10}
    assert groups(t)["g"]["is_simple"] and [r["group_id"] for r in t["removed_groups"]] == ["g"]


def test_group_tombstone_after_offsets_modern_hides_offsets(replayed):
    t = replayed["modern"]["group_tombstone_after_offsets"]
    assert offsets(t) == {} and offsets(t, "empty_group_offsets") == {} and t["loaded_groups"] == []
    assert [r["group_id"] for r in t["removed_groups"]] == ["g"]  # §5.5 #4


@BOTH
def test_v0_member_rebalance_timeout_and_null_leader(replayed, semantics):
    t = replayed[semantics]["v0_members_and_null_leader"]
    assert groups(t)["g"]["leader"] == "m1"
    assert {m["member_id"]: (m["rebalance_timeout_ms"], m["is_leader"]) for m in t["group_members"]} == {
        "m1": (6000, True), "m2": (7000, False)}


@BOTH
def test_expected_offsets_partition(replayed, semantics):
    g = groups(replayed[semantics]["misplaced_group"])["placed-elsewhere"]
    assert g["expected_offsets_partition"] == partition_for("placed-elsewhere", 50)
    assert g["expected_offsets_partition"] != g["offsets_partition"]


def test_load_consumer_group_stable(replayed):
    t = replayed["modern"]["consumer_group_stable"]
    g = groups(t)["cg"]
    assert (g["group_type"], g["state"], g["generation"], g["assignment_epoch"], g["protocol"], g["member_count"],
            g["unresolved_topic_ids"]) == ("consumer", "Stable", 3, 3, "uniform", 2, 0)
    assert g["subscribed_topics"] == ["a", "aa", "b"]  # members' topics ∪ resolved regex topics
    m = {r["member_id"]: r for r in t["group_members"]}
    assert m["m1"]["assigned_partitions"] == [("a", 0), ("a", 1)] == m["m1"]["target_partitions"]
    assert m["m2"]["assigned_partitions"] == [("a", 2), ("b", 0)]
    assert (m["m2"]["group_instance_id"], m["m2"]["rack_id"], m["m2"]["member_state"]) == ("static-2", "r1", "STABLE")
    assert offsets(t) == {("cg", "a", 0): 99}


def test_the_new_coordinator_before_4_0_skips_the_regex_record(logs):
    """Kafka 3.9's new coordinator maps key types 0-8 only: a ConsumerGroupRegularExpression record (16, from 4.0)
    is an unknown record type, skipped, so the regex's topics are not among the group's subscribed topics."""
    t = replay_rows(logs["consumer_group_stable"].rows, _options("modern", "3.9"))
    g = groups(t)["cg"]
    assert (g["group_type"], g["state"], g["subscribed_topics"]) == ("consumer", "Stable", ["a", "b"])
    assert "regex" not in [e["event"] for e in t["group_history"]]


def test_load_consumer_group_reconciling_with_unresolved_topic(replayed):
    t = replayed["modern"]["consumer_group_reconciling_and_unresolved"]
    g = groups(t)["cg"]
    assert (g["state"], g["unresolved_topic_ids"], g["protocol"]) == ("Reconciling", 1, "range")
    [m] = t["group_members"]
    assert m["assigned_partitions"] == [("UNKNOWN-ID", 0)]
    assert m["partitions_pending_revocation"] == [("UNKNOWN-ID", 1)]
    assert m["member_state"] == "UNREVOKED_PARTITIONS"


def test_load_consumer_group_assigning(replayed):
    semantics = "modern"
    assert groups(replayed[semantics]["consumer_group_assigning"])["cg"]["state"] == "Assigning"


def test_load_consumer_group_member_left(replayed):
    t = replayed["modern"]["consumer_group_member_left"]
    assert [m["member_id"] for m in t["group_members"]] == ["m1"]
    assert groups(t)["cg"]["state"] == "Stable" and groups(t)["cg"]["generation"] == 3


def test_load_consumer_group_deleted(replayed):
    t = replayed["modern"]["consumer_group_deleted"]
    assert t["group_members"] == []
    [r] = t["removed_groups"]
    assert r["group_type"] == "consumer"
    assert t["loaded_groups"] == [] and offsets(t, "empty_group_offsets") == {}  # group gone, offsets hidden


def test_consumer_records_replace_simple_group(replayed):
    t = replayed["modern"]["consumer_replaces_simple_group"]
    g = groups(t)["g"]
    assert (g["group_type"], g["is_simple"]) == ("consumer", False)
    assert offsets(t) == {("g", "a", 0): 1} and t["loaded_offsets"][0]["has_group_metadata"]


def test_classic_to_consumer_migration(replayed):
    t = replayed["modern"]["classic_to_consumer_migration"]
    g = groups(t)["g"]
    assert (g["group_type"], g["state"], g["generation"]) == ("consumer", "Stable", 5)
    assert offsets(t) == {("g", "a", 0): 10}
    assert t["removed_groups"] == []


@BOTH
def test_last_consumer_protocol_member_leaving_consumer_group(replayed, semantics):
    """4.0 `testLastConsumerProtocolMemberLeavingConsumerGroup`: the last member of the consumer protocol leaves a
    group whose other member uses the classic one, and the coordinator converts it (`convertToClassicGroup`): the
    consumer group's tombstones (`ConsumerGroup.createGroupTombstoneRecords`) then its GroupMetadata record. Loaded,
    it is that classic group, Stable at generation 10 with member 1, holding the group's offsets; the old
    coordinator skips the consumer records and reads the same GroupMetadata record."""
    t = replayed[semantics]["consumer_to_classic_downgrade"]
    g = groups(t)["g"]
    assert (g["group_type"], g["state"], g["generation"], g["protocol_type"], g["protocol"], g["leader"],
            g["member_count"], g["is_simple"]) == ("classic", "Stable", 10, "consumer", "range", "m1", 1, False)
    [m] = t["group_members"]
    assert (m["member_id"], m["assigned_partitions"]) == ("m1", [("bar", 0), ("bar", 1), ("foo", 0), ("foo", 1),
                                                                 ("foo", 2)])
    assert offsets(t) == {("g", "foo", 0): 42} and t["removed_groups"] == []
    if semantics == "modern":
        assert "skipped" not in [e["event"] for e in t["group_history"]]


def test_consumer_group_empty_after_members_left(replayed):
    semantics = "modern"
    g = groups(replayed[semantics]["empty_consumer_group_after_members_left"])["cg"]
    assert (g["state"], g["member_count"], g["generation"]) == ("Empty", 0, 2)


@pytest.mark.parametrize("name, simple, removed", [
    ("consumer_group_stable", {("cg", "a", 0): 99}, []),
    ("consumer_group_assigning", {}, []),
    ("consumer_group_deleted", {("cg", "a", 0): 5}, []),
    ("consumer_replaces_simple_group", {("g", "a", 0): 1}, []),
    ("classic_to_consumer_migration", {("g", "a", 0): 10}, ["g"]),
])
def test_the_old_coordinator_skips_consumer_group_records(replayed, name, simple, removed):
    """`GroupMetadataManager.readMessageKey` knows key types 0-2 only: a KIP-848 record is an `UnknownKey`, skipped
    (3.4.1+), so an id holds what its offset commits and GroupMetadata records build: a simple group where it has
    offsets, no group where it has none, a migrated group's classic tombstone standing."""
    t = replayed["legacy"][name]
    assert {g: (r["group_type"], r["is_simple"]) for g, r in groups(t).items()} == {
        g: ("classic", True) for g, _, _ in simple}
    assert offsets(t, "empty_group_offsets") == simple and offsets(t) == {}
    assert t["group_members"] == [] and [r["group_id"] for r in t["removed_groups"]] == removed


@BOTH
def test_group_loaded_with_pending_commits(replayed, semantics):
    """3.9 `testGroupLoadedWithPendingCommits`: a transaction never ended loads its group, Empty, with the offsets
    pending and none committed (`doLoadGroupsAndOffsets`: a group for every id of `pendingEmptyGroupOffsets`; 4.0
    `OffsetMetadataManager.replay` creates the simple group at the transactional value)."""
    t = replayed[semantics]["pending_commits_only"]
    assert offsets(t) == {} and offsets(t, "empty_group_offsets") == {}
    assert [(g["group_id"], g["is_simple"], g["state"]) for g in t["loaded_groups"]] == [("g", True, "Empty")]
    assert {(r["producer_id"], r["producer_epoch"], r["topic"], r["partition"], r["committed_offset"])
            for r in t["pending_offsets"]} == {(1000, 2, "foo", 0, 23), (1000, 2, "foo", 1, 455),
                                               (1000, 2, "bar", 0, 8992)}


@BOTH
def test_load_with_committed_and_aborted_and_pending_transactional_offset_commits(replayed, semantics):
    """3.9 `testLoadWithCommittedAndAbortedAndPendingTransactionalOffsetCommits`: one producer commits a
    transaction, aborts the next and leaves a third open: only the first is committed (at the records of its batch),
    foo-3's aborted offset is gone and its later one pending with the rest of the open transaction."""
    t = replayed[semantics]["committed_aborted_pending_one_producer"]
    assert {k: (o["committed_offset"], o["record_offset"], o["producer_id"])
            for o in t["empty_group_offsets"] for k in [(o["topic"], o["partition"])]} == {
        ("foo", 0): (23, 0, 1000), ("foo", 1): (455, 1, 1000), ("bar", 0): (8992, 2, 1000)}
    assert {(r["topic"], r["partition"], r["committed_offset"], r["record_offset"]) for r in t["pending_offsets"]} \
        == {("foo", 3, 2312, 8), ("foo", 4, 45512, 9), ("bar", 2, 899212, 10)}
    assert [r["txn_outcome"] for r in t["offset_commits"]] == ["committed"] * 3 + ["aborted"] * 3 + ["pending"] * 3
    assert [(g["group_id"], g["is_simple"]) for g in t["loaded_groups"]] == [("g", True)]


@BOTH
def test_offset_write_after_group_removed(replayed, semantics):
    """3.9 `testOffsetWriteAfterGroupRemoved`: a group removed (its GroupMetadata tombstone), then offsets committed
    for its id by a simple consumer: the id loads as an Empty simple group holding them (`doLoadGroupsAndOffsets`:
    `emptyGroupOffsets` makes a new group, so `removedGroups` raises nothing; 4.0: the first value creates the
    simple group again, `OffsetMetadataManager.replay`)."""
    t = replayed[semantics]["offset_write_after_group_removed"]
    assert offsets(t) == {}
    assert offsets(t, "empty_group_offsets") == {("g", "foo", 0): 23, ("g", "foo", 1): 455, ("g", "bar", 0): 8992}
    [g] = t["loaded_groups"]
    assert (g["group_id"], g["is_simple"], g["state"], g["generation"], g["member_count"]) == ("g", True, "Empty", 0, 0)
    assert t["group_members"] == [] and [r["group_id"] for r in t["removed_groups"]] == ["g"]


@BOTH
def test_offsets_a_group_tombstone_hid_come_back_with_the_next_commit(replayed, semantics):
    """modern: the tombstone removes the group only (4.0 `GroupMetadataManager.removeGroup`: `groups.remove`); its
    offsets stay in `OffsetMetadataManager.offsets`, unseen while no group has the id, and the next value's simple
    group (`OffsetMetadataManager.replay`) serves them all again (`fetchAllOffsets` reads the offsets map). legacy:
    the loader never hid them (3.9 `doLoadGroupsAndOffsets`: `emptyGroupOffsets`)."""
    t = replayed[semantics]["offsets_of_a_removed_group_then_a_commit"]
    assert offsets(t) == {} and offsets(t, "empty_group_offsets") == {("g", "foo", 0): 5, ("g", "foo", 1): 7}
    assert [(g["group_id"], g["is_simple"]) for g in t["loaded_groups"]] == [("g", True)]


def test_tombstones_drop_pending_transactional_offsets_modern(replayed):
    """4.0 `testReplayWithTombstoneAndPendingTransactionalOffsets`: plain tombstones of two partitions, one committed
    and pending in an open transaction, the other pending only: neither is committed, and the tombstones dropped
    both from the transaction (`OffsetMetadataManager.replay`: `openTransactions.forEach(...)`.remove)."""
    t = replayed["modern"]["tombstones_with_pending_transactional_offsets"]
    assert offsets(t) == {} and offsets(t, "empty_group_offsets") == {} and t["pending_offsets"] == []
    assert [(g["group_id"], g["is_simple"]) for g in t["loaded_groups"]] == [("foo", True)]


def test_tombstones_leave_pending_transactional_offsets_legacy(replayed):
    """The old loader removes a plain tombstone's key from `loadedOffsets` only (3.9 `doLoadGroupsAndOffsets`): the
    open transaction still holds both offsets, so the group loads with them pending."""
    t = replayed["legacy"]["tombstones_with_pending_transactional_offsets"]
    assert offsets(t) == {} and offsets(t, "empty_group_offsets") == {}
    assert {(r["producer_id"], r["topic"], r["partition"], r["committed_offset"]) for r in t["pending_offsets"]} == {
        (10, "bar", 0, 100), (10, "bar", 1, 100)}
    assert [(g["group_id"], g["is_simple"]) for g in t["loaded_groups"]] == [("foo", True)]


def test_deleted_group_stays_deleted_after_its_open_transaction_commits_modern(replayed):
    """4.0 `testDeleteGroupAllOffsetsWithPendingTransactionalOffsets`: DeleteGroups writes a tombstone for every
    partition with a committed or a pending offset, then the group's; replayed, they drop the open transaction's
    offsets, so its later COMMIT installs nothing and no group comes back (`replayEndTransactionMarker` creates
    none)."""
    t = replayed["modern"]["group_deleted_with_pending_transaction"]
    assert offsets(t) == {} and offsets(t, "empty_group_offsets") == {} and t["pending_offsets"] == []
    assert t["loaded_groups"] == [] and [r["group_id"] for r in t["removed_groups"]] == ["foo"]
    txn = [r for r in t["offset_commits"] if r["producer_id"] == 10]
    assert [(r["txn_outcome"], r["applied_offset"]) for r in txn] == [("committed", None)] * 2


def test_deleted_group_comes_back_with_its_open_transaction_legacy(replayed):
    """The old loader: the plain tombstones leave the transaction's `pendingOffsets`, its COMMIT installs both on
    the emptied keys, and the id loads as a simple group holding them (3.9 `doLoadGroupsAndOffsets`;
    spec §5.5 #1)."""
    t = replayed["legacy"]["group_deleted_with_pending_transaction"]
    assert offsets(t) == {}
    assert offsets(t, "empty_group_offsets") == {("foo", "bar-1", 0): 101, ("foo", "bar-2", 0): 100}
    assert [(g["group_id"], g["is_simple"]) for g in t["loaded_groups"]] == [("foo", True)]
    txn = [r for r in t["offset_commits"] if r["producer_id"] == 10]
    assert [(r["txn_outcome"], r["applied_offset"]) for r in txn] == [("committed", 11)] * 2


@BOTH
def test_point_in_time_until_offset(spark, semantics):
    log = Log(partition=0)
    SCENARIOS["point_in_time"](log)
    opts = ReplayOptions(semantics=semantics, until_offset=UNTIL_OFFSET)
    ref = replay_rows(log.rows, opts)
    assert offsets(ref, "empty_group_offsets") == {("g", "a", 0): 1, ("g", "a", 1): 7}
    assert [(r["producer_id"], r["committed_offset"]) for r in ref["pending_offsets"]] == [(5, 2)]
    until_time = ReplayOptions(semantics=semantics, until_time_ms=log.rows[2]["timestamp"])
    assert replay_rows(log.rows, until_time)["pending_offsets"] == ref["pending_offsets"]
    assert_same(spark_tables(spark, log.rows, opts), ref, "until_offset")


@BOTH
def test_until_time_takes_a_batch_whole(semantics):
    """A batch of several writes, each record stamped at its write (the new coordinator's append linger,
    CoordinatorRuntime.maybeFlushCurrentBatch, 4.0): no reader saw any of it before its newest record, so a
    --until-time between its records replays none of it; the old coordinator's batches are one write of one time
    (GroupMetadataManager.storeGroup / storeOffsets, 0.11-3.9), which the same rule cuts as before."""
    log = Log(partition=0)
    log.commit("g", "a", 0, 1)
    with log.batch():
        log.commit("g", "a", 0, 2)
        log.group("h", [member("m1")])
        log.commit("h", "a", 0, 5)
    first, newest = log.rows[1]["timestamp"], log.rows[-1]["timestamp"]
    assert log.rows[0]["timestamp"] < first < newest
    for t in (first, newest - 1):
        inside = replay_rows(log.rows, ReplayOptions(semantics=semantics, until_time_ms=t))
        assert offsets(inside, "empty_group_offsets") == {("g", "a", 0): 1} and "h" not in groups(inside)
        assert offsets(inside) == {}
    whole = replay_rows(log.rows, ReplayOptions(semantics=semantics, until_time_ms=newest))
    assert offsets(whole, "empty_group_offsets") == {("g", "a", 0): 2} and offsets(whole) == {("h", "a", 0): 5}
    assert groups(whole)["h"]["state"] == "Stable"


def test_misplaced_groups():
    log = Log(partition=partition_for("here", 50))
    log.group("here", [member("m1")])
    log.group("elsewhere", [member("m1")]) if partition_for("elsewhere", 50) != log.partition else None
    res = replay_rows(log.rows, ReplayOptions(num_partitions=50))
    assert [g["group_id"] for g in res["loaded_groups"]
            if g["expected_offsets_partition"] != g["offsets_partition"]] == ["elsewhere"]


@BOTH
def test_load_offsets_with_empty_control_batch(tmp_path, semantics):
    """3.9 `testLoadOffsetsWithEmptyControlBatch` (and `testLoadEmptyGroupWithOffsets`'s group): a control batch
    without records (the cleaner keeps one empty, `DefaultRecordBatch.writeEmptyHeader`) ends no transaction: the
    old loader reads a control batch's first record only if it has one, the new one every record it has (4.0
    `CoordinatorLoaderImpl`), so the transaction before it stays open until its real marker. Its bytes, decoded as a
    run decodes them."""
    import pyarrow as pa

    from pipelines.coordinator.shard import replay_shards
    from pipelines.decoding import columnar
    from pipelines.decoding.batch_writer import write_control_batch, write_empty_batch, write_record_batch
    from pipelines.decoding import message_writer as mw

    ts = 1_700_000_000_000

    def commit(topic: str, partition: int, offset: int):
        return (mw.write_offset_commit_key("g", topic, partition),
                mw.write_offset_commit_value(3, offset=offset, commit_timestamp=ts), ts)

    empty_group = (mw.write_group_metadata_key("g"), mw.write_group_metadata_value(
        3, protocol_type="consumer", generation=15, protocol=None, leader=None, members=[]), ts)
    txn = dict(producer_id=7, producer_epoch=0, is_transactional=True)
    segment = b"".join([
        write_empty_batch(0, 0, **txn, is_control=True, max_timestamp=ts),
        write_record_batch([commit("foo", 0, 23), commit("foo", 1, 455), commit("bar", 0, 8992), empty_group], 1),
        write_record_batch([commit("baz", 0, 42)], 5, base_sequence=0, **txn),
        write_empty_batch(6, 6, **txn, is_control=True, max_timestamp=ts),
    ])
    log = tmp_path / "__consumer_offsets-0" / "00000000000000000000.log"
    log.parent.mkdir()
    options = ReplayOptions(semantics=semantics, snapshot_id="t", num_partitions=50)

    def replayed(data: bytes) -> dict:
        log.write_bytes(data)
        table = pa.concat_tables([pa.Table.from_batches([b]) for b in columnar.decode_segment_to_arrow(
            log, offsets_partition=0)])
        return {t: v.to_pylist() for t, v in replay_shards(table, options).tables.items()}

    t = replayed(segment)
    [g] = t["loaded_groups"]
    assert (g["state"], g["generation"], g["protocol_type"], g["leader"], g["protocol"], g["is_simple"]) == (
        "Empty", 15, "consumer", None, None, False)
    assert offsets(t) == {("g", "foo", 0): 23, ("g", "foo", 1): 455, ("g", "bar", 0): 8992}
    assert [(r["producer_id"], r["committed_offset"]) for r in t["pending_offsets"]] == [(7, 42)]
    t = replayed(segment + write_control_batch(1, 0, 7, 7, 0, ts))  # ControlRecordType.COMMIT
    assert offsets(t)[("g", "baz", 0)] == 42 and t["pending_offsets"] == []


@pytest.mark.parametrize("version, installed", [("3.7", True), ("3.8", False), ("4.0", False)])
def test_the_new_coordinator_of_3_7_installs_a_committed_offset_over_a_newer_one(version, installed):
    """4.0 `testReplayTransactionEndMarkerKeepsTheMostRecentCommittedOffset` (3.9's `...ConsumerWins`): a plain
    commit after the transactional one, then the COMMIT: from 3.8 `replayEndTransactionMarker` keeps the newer plain
    offset (KAFKA-14505 [7/N]); 3.7's installed every pending offset at the marker, whatever was committed since."""
    log = Log()
    log.commit("g", "foo", 0, 23, pid=1000, epoch=2)  # 0
    log.commit("g", "foo", 0, 24)  # 1
    log.marker(1000, "COMMIT", epoch=2)  # 2
    t = replay_rows(log.rows, _options("modern", version))
    assert offsets(t, "empty_group_offsets") == {("g", "foo", 0): 23 if installed else 24}
    assert [r["applied_offset"] for r in t["offset_commits"]] == [2 if installed else None, 1]


@pytest.mark.parametrize("version, kept", [("3.7", True), ("3.8", False), ("4.0", False)])
def test_the_new_coordinator_of_3_7_keeps_open_transactions_through_a_tombstone(version, kept):
    """4.0 `testReplayWithTombstoneAndPendingTransactionalOffsets`: from 3.8 an offset tombstone, plain or
    transactional, also drops its partition from every open transaction (KAFKA-14505 [8/8]), so their COMMIT
    installs nothing there; 3.7's `OffsetMetadataManager.replay` removed the committed offset only, and the COMMIT
    installed the pending one on the emptied key."""
    log = Log()
    log.commit("g", "foo", 0, 5)  # 0
    log.commit("g", "foo", 0, 10, pid=7, epoch=0)  # 1
    log.offset_tombstone("g", "foo", 0)  # 2: plain
    log.commit("g", "foo", 1, 1, pid=8, epoch=0)  # 3
    log.offset_tombstone("g", "foo", 1, pid=8, epoch=0)  # 4: in the same transaction
    log.marker(7, "COMMIT")  # 5
    log.marker(8, "COMMIT")  # 6
    t = replay_rows(log.rows, _options("modern", version))
    assert offsets(t, "empty_group_offsets") == ({("g", "foo", 0): 10, ("g", "foo", 1): 1} if kept else {})
    assert [r["applied_offset"] for r in t["offset_commits"]] == [0, 5 if kept else None, 2, 6 if kept else None, None]
