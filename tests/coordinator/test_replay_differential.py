"""Generated logs: the engine through its Spark boundary == in-process, both semantics; compaction invariance.

Each example is a batch of independent logs (interleaved groups, plain and transactional commits of several
producers with COMMIT / ABORT / other control types / open ends, tombstones, classic and KIP-848 group records,
multi-record batches, compaction-like gaps, junk rows); every log gets its own offsets partition and the whole
batch is replayed in one Spark job (one task per log). Compaction invariance is checked in-process over many more logs.
"""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from pipelines.coordinator.options import ReplayOptions
from pipelines.coordinator.shard import replay_rows
from tests.coordinator.harness import assert_same, by_partition, canon, spark_tables
from tests.coordinator.rowkit import Log, compact, member
from tests.depth import cases

GROUPS = ["g0", "g1", "g2"]
MEMBERS = ["m0", "m1", "m2"]
PIDS = [1, 2, 3]
TOPIC_IDS = ["ID-A", "ID-B", "ID-X"]  # ID-X is never named by a type-4 record

gid = st.sampled_from(GROUPS)
mid = st.sampled_from(MEMBERS)
tp = st.tuples(st.sampled_from(["a", "b"]), st.integers(0, 1))
pid = st.sampled_from(PIDS)
assignment = st.lists(st.tuples(st.sampled_from(TOPIC_IDS), st.lists(st.integers(0, 3), max_size=3, unique=True)),
                      max_size=2, unique_by=lambda x: x[0])

offset_op = st.one_of(
    st.tuples(st.just("commit"), gid, tp, st.integers(0, 999), st.sampled_from([-1, -1, 1, 2, 3])),
    st.tuples(st.just("tomb"), gid, tp, st.sampled_from([-1, -1, 1, 2])),
)
op = st.one_of(
    offset_op, offset_op, offset_op,
    st.tuples(st.just("marker"), pid, st.sampled_from(["COMMIT", "COMMIT", "ABORT", "LEADER_CHANGE"])),
    st.tuples(st.just("control_batch"), pid, st.lists(st.sampled_from(["COMMIT", "ABORT"]), min_size=2, max_size=2)),
    st.tuples(st.just("batch"), st.sampled_from([-1, 1, 2]), st.lists(offset_op, min_size=1, max_size=3)),
    st.tuples(st.just("pid_no_txn"), gid, tp, st.integers(0, 999)),
    st.tuples(st.just("group"), gid, st.integers(0, 2), st.sampled_from(["consumer", "", "connect"]), st.booleans()),
    st.tuples(st.just("group_tomb"), gid),
    st.tuples(st.just("cg_epoch"), gid, st.integers(0, 4)),
    st.tuples(st.just("cg_tomb"), gid),
    st.tuples(st.just("cg_member"), gid, mid, st.sampled_from(["uniform", "range", None])),
    st.tuples(st.just("cg_member_tomb"), gid, mid),
    st.tuples(st.just("cg_aepoch"), gid, st.integers(-1, 4)),
    st.tuples(st.just("cg_aepoch_tomb"), gid),
    st.tuples(st.just("cg_target"), gid, mid, assignment),
    st.tuples(st.just("cg_target_tomb"), gid, mid),
    st.tuples(st.just("cg_current"), gid, mid, st.integers(0, 4), st.sampled_from([0, 0, 1, 2]), assignment),
    st.tuples(st.just("cg_current_tomb"), gid, mid),
    st.tuples(st.just("cg_regex"), gid, st.sampled_from(["a.*", "b.*"]), st.lists(st.sampled_from(["a", "b", "c"]),
                                                                                     max_size=2, unique=True)),
    st.tuples(st.just("cg_regex_tomb"), gid, st.sampled_from(["a.*", "b.*"])),
    st.tuples(st.just("cg_topics"), gid),
    st.tuples(st.just("gap"), st.integers(1, 3)),
    st.tuples(st.just("junk"), st.booleans()),
)
log_ops = st.lists(op, max_size=30)

# Records as the coordinators write them, for the compaction property: the cleaner only preserves state for logs
# whose tombstones follow the records they delete. Kafka deletes a group (DeleteGroups, the expiration pass) only
# after a tombstone for each of its offsets (§2.9 deletion order); a bare GroupMetadata tombstone is written only by
# the classic → consumer conversion, followed by the consumer group's records. A bare group tombstone over live
# offsets is not compaction-invariant in Kafka itself: the offsets stay hidden (§5 #4) until a later commit
# re-creates the group, and the cleaner drops that commit once it is tombstoned.
#
# Only the coordinator writes offset tombstones, never inside a transaction: the new coordinator applies a
# tombstone whatever its transaction's outcome, while the cleaner drops an aborted one.
txn_commit_op = st.tuples(st.just("commit"), gid, tp, st.integers(0, 999), st.sampled_from([1, 2, 3]))
plain_offset_op = st.one_of(st.tuples(st.just("commit"), gid, tp, st.integers(0, 999), st.just(-1)),
                            st.tuples(st.just("tomb"), gid, tp, st.just(-1)))
kafka_like_op = st.one_of(
    plain_offset_op, plain_offset_op, txn_commit_op,
    st.tuples(st.just("marker"), pid, st.sampled_from(["COMMIT", "ABORT"])),
    st.tuples(st.just("batch"), st.just(-1), st.lists(plain_offset_op, min_size=1, max_size=3)),
    st.tuples(st.just("batch"), st.sampled_from([1, 2]), st.lists(
        st.tuples(st.just("commit"), gid, tp, st.integers(0, 999), st.just(-1)), min_size=1, max_size=3)),
    st.tuples(st.just("group"), gid, st.integers(0, 2), st.sampled_from(["consumer", ""]), st.booleans()),
    st.tuples(st.just("group_delete"), gid),
    st.tuples(st.just("cg_convert"), gid, mid, st.integers(1, 5), assignment),
    st.tuples(st.just("cg_join"), gid, mid, st.integers(1, 5), assignment),
    st.tuples(st.just("cg_leave"), gid, mid),
    st.tuples(st.just("cg_delete"), gid),
    st.tuples(st.just("gap"), st.integers(1, 3)),
)
kafka_like_log = st.lists(kafka_like_op, max_size=30)


def _apply_offset_op(log: Log, o) -> None:
    if o[0] == "commit":
        _, g, (t, p), v, producer = o
        log.commit(g, t, p, v, pid=producer, epoch=0 if producer != -1 else -1)
    else:
        _, g, (t, p), producer = o
        log.offset_tombstone(g, t, p, pid=producer, epoch=0 if producer != -1 else -1)


def _offset_tombstones(log: Log, group: str) -> None:
    for t in ("a", "b"):
        for p in (0, 1):
            log.offset_tombstone(group, t, p)


def build_log(ops, partition: int) -> Log:
    log = Log(partition=partition)
    for o in ops:
        kind = o[0]
        if kind in ("commit", "tomb"):
            _apply_offset_op(log, o)
        elif kind == "marker":
            log.marker(o[1], o[2])
        elif kind == "control_batch":
            log.control_batch(o[1], tuple(o[2]))
        elif kind == "batch":
            with log.batch(pid=o[1], epoch=0 if o[1] != -1 else -1, txn=o[1] != -1):
                for sub in o[2]:
                    _apply_offset_op(log, sub)
        elif kind == "pid_no_txn":
            _, g, (t, p), v = o
            log.commit(g, t, p, v, pid=9, txn=False)
        elif kind == "group":
            _, g, n, ptype, null_leader = o
            members = [member(f"{g}-m{i}", topics=["a"] if ptype == "consumer" else None,
                              rebalance=-1 if i else 1000) for i in range(n)]
            log.group(g, members, generation=len(log.rows), protocol_type=ptype,
                      leader=None if null_leader else "__first__", version=0 if null_leader else 3)
        elif kind == "group_tomb":
            log.group_tombstone(o[1])
        elif kind == "cg_epoch":
            log.cg_epoch(o[1], o[2])
        elif kind == "cg_tomb":
            log.cg_tombstone(o[1])
        elif kind == "cg_member":
            log.cg_member(o[1], o[2], assignor=o[3], topics=["a"] if o[3] else None)
        elif kind == "cg_member_tomb":
            log.cg_member_tombstone(o[1], o[2])
        elif kind == "cg_aepoch":
            log.cg_assignment_epoch(o[1], o[2])
        elif kind == "cg_aepoch_tomb":
            log.cg_assignment_epoch_tombstone(o[1])
        elif kind == "cg_target":
            log.cg_target(o[1], o[2], o[3])
        elif kind == "cg_target_tomb":
            log.cg_target_tombstone(o[1], o[2])
        elif kind == "cg_current":
            log.cg_current(o[1], o[2], o[3], o[5], state=o[4])
        elif kind == "cg_current_tomb":
            log.cg_current_tombstone(o[1], o[2])
        elif kind == "cg_regex":
            log.cg_regex(o[1], o[2], o[3])
        elif kind == "cg_regex_tomb":
            log.cg_regex_tombstone(o[1], o[2])
        elif kind == "cg_topics":
            log.cg_topics(o[1], [("ID-A", "a", 4), ("ID-B", "b", 4)])
        elif kind == "group_delete":
            with log.batch(pid=-1, epoch=-1, txn=False):
                _offset_tombstones(log, o[1])
                log.group_tombstone(o[1])
        elif kind in ("cg_join", "cg_convert"):
            _, g, m, epoch, parts = o
            if kind == "cg_convert":
                log.group_tombstone(g)
            log.cg_topics(g, [("ID-A", "a", 4), ("ID-B", "b", 4)])
            log.cg_member(g, m)
            log.cg_epoch(g, epoch)
            log.cg_target(g, m, parts)
            log.cg_assignment_epoch(g, epoch)
            log.cg_current(g, m, epoch, parts)
        elif kind == "cg_leave":
            log.cg_current_tombstone(o[1], o[2])
            log.cg_target_tombstone(o[1], o[2])
            log.cg_member_tombstone(o[1], o[2])
        elif kind == "cg_delete":
            g = o[1]
            _offset_tombstones(log, g)
            for m in MEMBERS:
                log.cg_current_tombstone(g, m)
            for m in MEMBERS:
                log.cg_target_tombstone(g, m)
            log.cg_assignment_epoch_tombstone(g)
            for m in MEMBERS:
                log.cg_member_tombstone(g, m)
            log.cg_topics_tombstone(g)
            log.cg_tombstone(g)
        elif kind == "gap":
            log.gap(o[1])
        elif kind == "junk":
            log.error() if o[1] else log.unknown()
    return log


# No shrinking: every shrink step is a Spark job; a failure names the log and prints its rows instead.
HYPO = settings(max_examples=4, deadline=None, database=None, phases=[Phase.explicit, Phase.generate],
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture])


@pytest.mark.spark
@pytest.mark.parametrize("semantics", ["legacy", "modern"])
@HYPO
@given(batch=st.lists(log_ops, min_size=12, max_size=24))
def test_spark_shards_equal_in_process_on_generated_logs(spark, semantics, batch):
    logs = [build_log(ops, partition=i) for i, ops in enumerate(batch)]
    # one log in four is also replayed after compaction, as another partition
    logs += [_as_partition(compact(log.rows), len(batch) + i) for i, log in enumerate(logs[::4])]
    rows = [r for log in logs for r in log.rows]
    opts = ReplayOptions(semantics=semantics, snapshot_id="diff", load_time_ms=5)
    parts = by_partition(spark_tables(spark, rows, opts))
    # in-process over the same batch: topic-id names are cluster-wide (every type-4 record of the input)
    ref = by_partition(replay_rows(rows, opts))
    for i, log in enumerate(logs):
        assert_same(parts[i], ref[i], f"{semantics} log {i}: ops {batch[i] if i < len(batch) else 'compacted'}")


class _Rows:
    def __init__(self, rows):
        self.rows = rows


def _as_partition(rows, partition: int) -> _Rows:
    return _Rows([{**r, "offsets_partition": partition} for r in rows])


def _state_for_compaction(tables) -> dict:
    """Everything compaction must not change. Simple groups are left out when nothing they hold survives: the new
    coordinator creates one for any offset value (even aborted or later deleted), which compaction removes."""
    held = {r["group_id"] for t in ("empty_group_offsets", "pending_offsets") for r in tables[t]}
    groups = [g for g in tables["loaded_groups"] if not g["is_simple"] or g["group_id"] in held]
    keep = ("loaded_offsets", "empty_group_offsets", "group_members", "removed_groups", "pending_offsets")
    return {**{t: canon(tables[t]) for t in keep}, "loaded_groups": canon(groups)}


# derandomize: CI runs the same 100 logs every time (300 deep, tests/depth.py); 9,000 random ones passed when the generator last changed.
@settings(max_examples=cases(deep=300, quick=100), deadline=None, database=None, derandomize=True)
@given(ops=kafka_like_log)
def test_compaction_invariance_modern(ops):
    """The new coordinator's state is the same after the cleaner: last record per key, aborted data dropped. From
    4.0 only: 3.x's load fails once the cleaner leaves a consumer group's offsets or member assignment ahead of the
    records that create its group (`test_group_replay`)."""
    log = build_log(ops, partition=0)
    opts = ReplayOptions(semantics="modern", kafka_version="4.0")
    assert _state_for_compaction(replay_rows(compact(log.rows), opts)) == _state_for_compaction(
        replay_rows(log.rows, opts))


def test_compaction_changes_legacy_resurrection():
    """Legacy is not compaction-invariant: the txn offset a plain tombstone 'resurrects' at COMMIT (§5.5 #1) is a
    superseded record for the cleaner, so a compacted log loads without it — as the old coordinator would."""
    log = Log()
    log.commit("g", "a", 0, 10, pid=7, epoch=0)
    log.offset_tombstone("g", "a", 0)
    log.marker(7, "COMMIT")
    opts = ReplayOptions(semantics="legacy")
    assert [r["committed_offset"] for r in replay_rows(log.rows, opts)["empty_group_offsets"]] == [10]
    assert replay_rows(compact(log.rows), opts)["empty_group_offsets"] == []
