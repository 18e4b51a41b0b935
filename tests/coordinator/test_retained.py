"""The incremental state (`pipelines/coordinator/retained.py`) is state-equivalent: for a log cut at a batch boundary,
load(retained(prefix) ∪ rest) == load(prefix ∪ rest), every table, both semantics.

The subset is chosen by the engine as a run chooses it (`coordinator.shard.replay_shards(..., retain=True)`); both
sides are then loaded by the engine. Each example is a batch of generated logs (interleaved groups, plain and
transactional commits of several producers, markers and open ends, tombstones, classic and KIP-848 records,
multi-record batches, gaps, junk), every log cut at three batch boundaries, each cut in its own offsets partition.
"""
from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipelines.coordinator.options import REPLAY_TABLES, ReplayOptions
from pipelines.coordinator.shard import replay_rows, replay_shards
from tests.coordinator.harness import canon
from tests.coordinator.rowkit import to_table

from tests.coordinator.test_replay_differential import build_log, kafka_like_log, log_ops

HYPO = settings(max_examples=25, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

CUTS_PER_LOG = 3


def positions(rows, opts: ReplayOptions) -> set[tuple[int, int]]:
    """(offsets_partition, offset) of the rows a run keeps of `rows` (error/unknown rows are never kept)."""
    if not rows:
        return set()
    kept = replay_shards(to_table(rows), opts, retain=True).retained
    return set(zip(kept.column("offsets_partition").to_pylist(), kept.column("offset").to_pylist()))


def _batch_starts(rows) -> list[int]:
    """Indexes where a new batch starts (an incremental run resumes at an entry boundary), and the end."""
    starts = [i for i, r in enumerate(rows) if i == 0 or r["batch_base_offset"] != rows[i - 1]["batch_base_offset"]]
    return starts + [len(rows)]


def _check(semantics: str, batch, seed: int) -> None:
    rnd = random.Random(seed)
    prefix, rest, labels = [], [], {}
    part = 0
    for i, ops in enumerate(batch):
        starts = _batch_starts(build_log(ops, partition=0).rows)
        for k in rnd.sample(starts, min(CUTS_PER_LOG, len(starts))):
            rows = build_log(ops, partition=part).rows
            prefix += rows[:k]
            rest += rows[k:]
            labels[part] = (i, k)
            part += 1
    opts = ReplayOptions(semantics=semantics, snapshot_id="ret", load_time_ms=5, num_partitions=part + 1)
    replayable = [r for r in prefix if r["record_kind"] not in ("error", "unknown")]
    keep = positions(prefix, opts)
    kept = [r for r in replayable if (r["offsets_partition"], r["offset"]) in keep]
    assert len(kept) == len(keep)  # every position names one replayable row
    full = replay_rows(prefix + rest, opts)
    resumed = replay_rows(kept + rest, opts)
    for t in REPLAY_TABLES:
        for p, (i, k) in labels.items():
            want = canon([r for r in full[t] if r["offsets_partition"] == p])
            got = canon([r for r in resumed[t] if r["offsets_partition"] == p])
            if t == "offset_commits":
                # history: the kept records (with the outcome the full log gives them) and every later one
                later = {r["offset"] for r in rest if r["offsets_partition"] == p}
                assert set(got) <= set(want), f"{semantics} log {i} cut {k}: {t}"
                assert {x for x in want if dict(x)["record_offset"] in later} <= set(got)
                continue
            if t == "group_history":
                # events: an incremental run keeps the previous snapshot's and adds those of the later records,
                # which must be exactly the full log's (same membership before them: the state is the same)
                later = {r["offset"] for r in rest if r["offsets_partition"] == p}
                assert [x for x in got if dict(x)["record_offset"] in later] == \
                    [x for x in want if dict(x)["record_offset"] in later], f"{semantics} log {i} cut {k}: {t}"
                continue
            assert got == want, (f"{semantics} log {i} cut at row {k}: {t}\nops: {batch[i]}\n"
                                 f"kept: {sorted(o for q, o in keep if q == p)}\nresumed: {got}\nfull:    {want}")


@pytest.mark.parametrize("semantics", ["legacy", "modern"])
@pytest.mark.parametrize("ops", [log_ops, kafka_like_log], ids=["any_log", "kafka_like_log"])
@HYPO
@given(data=st.data())
def test_retained_prefix_replays_like_the_whole_prefix(semantics, ops, data):
    batch = data.draw(st.lists(ops, min_size=10, max_size=16), label="batch")
    _check(semantics, batch, data.draw(st.integers(0, 2**32 - 1), label="seed"))


def test_retained_drops_superseded_commits():
    """The point of the subset: a key committed many times keeps one row, a finished transaction none of its
    superseded records, an open transaction all of its records."""
    from tests.coordinator.rowkit import Log

    log = Log(partition=0)
    for v in range(50):
        log.commit("g", "t", 0, v)
    log.commit("g", "t", 1, 7, pid=5, epoch=0)
    log.marker(5, "COMMIT")
    log.commit("g", "t", 1, 9)  # plain write after the committed transaction: it wins
    log.commit("g", "t", 2, 1, pid=6, epoch=0)  # open transaction
    log.commit("g", "t", 2, 2, pid=6, epoch=0)
    opts = ReplayOptions(semantics="modern", snapshot_id="ret", load_time_ms=5, num_partitions=50)
    keep = sorted(o for _p, o in positions(log.rows, opts))
    assert keep == [49, 52, 53, 54]


# --- one scenario per rule: each fails if its rule is left out of `retained_offsets` ------------------------
def _resumes_like_full(log, cut: int, semantics: str) -> None:
    rows = log.rows
    prefix, rest = rows[:cut], rows[cut:]
    opts = ReplayOptions(semantics=semantics, snapshot_id="ret", load_time_ms=5, num_partitions=50)
    keep = {o for _p, o in positions(prefix, opts)}
    kept = [r for r in prefix if r["offset"] in keep]
    assert len(kept) < len(prefix)  # something was dropped, or the scenario proves nothing
    full, resumed = replay_rows(prefix + rest, opts), replay_rows(kept + rest, opts)
    for t in REPLAY_TABLES:
        if t not in ("offset_commits", "group_history"):
            assert canon(resumed[t]) == canon(full[t]), f"{semantics} {t}: kept {sorted(keep)}"


def test_rule_last_tombstone_hides_an_open_entry_before_it():
    """modern: a tombstone purges pending entries before it, even when a plain value follows it."""
    from tests.coordinator.rowkit import Log

    log = Log(partition=0)
    log.commit("g", "t", 0, 1, pid=3, epoch=0)  # open, before the tombstone
    log.offset_tombstone("g", "t", 0)
    log.commit("g", "t", 0, 2)
    log.commit("g", "t", 0, 3)
    cut = len(log.rows)
    log.commit("h", "t", 0, 1)  # the transaction stays open: its purged entry must not be pending
    _resumes_like_full(log, cut, "modern")


@pytest.mark.parametrize("semantics", ["legacy", "modern"])
def test_rule_topic_names_outlive_their_group(semantics):
    """A topic id named only by a removed incarnation's type-4 record still resolves later assignments."""
    from tests.coordinator.rowkit import Log

    log = Log(partition=0)
    log.cg_topics("old", [("ID-A", "a", 4)])
    log.cg_epoch("old", 1)
    log.cg_topics("old", [("ID-B", "b", 4)])  # no longer names ID-A
    log.cg_tombstone("old")
    for _ in range(3):
        log.cg_epoch("new", 2)
    cut = len(log.rows)
    log.cg_member("new", "m")
    log.cg_current("new", "m", 2, [("ID-A", [0, 1])])
    _resumes_like_full(log, cut, semantics)


@pytest.mark.parametrize("semantics", ["legacy", "modern"])
def test_rule_committed_entry_beats_later_plain_tombstone_only_by_its_marker(semantics):
    """A transactional commit resolved after the cut, and plain writes either side of the cut."""
    from tests.coordinator.rowkit import Log

    log = Log(partition=0)
    for v in range(5):
        log.commit("g", "t", 0, v)
    log.commit("g", "t", 0, 10, pid=4, epoch=0)
    log.offset_tombstone("g", "t", 0)
    log.commit("g", "t", 1, 3)
    log.commit("g", "t", 1, 4, pid=5, epoch=0)
    log.marker(5, "COMMIT")  # before the cut: the installed offset of t-1 is this transactional entry
    cut = len(log.rows)
    log.marker(4, "COMMIT")  # legacy resurrects the entry (§5.5 #1); modern keeps the key empty
    _resumes_like_full(log, cut, semantics)


def test_rule_last_offset_value_keeps_a_simple_group():
    """modern: an offset value after the group's removal makes a simple group, even an aborted one."""
    from tests.coordinator.rowkit import Log

    log = Log(partition=0)
    log.group("g", [], protocol_type="")
    log.commit("g", "t", 0, 1)
    log.commit("g", "t", 0, 2)
    log.group_tombstone("g")
    log.commit("g", "t", 1, 1, pid=4, epoch=0)
    log.marker(4, "ABORT")
    cut = len(log.rows)
    log.commit("h", "t", 0, 1)
    _resumes_like_full(log, cut, "modern")


def test_a_shard_of_only_quarantined_and_unknown_rows_loads_to_nothing():
    """A partition whose every record was quarantined or is of an unknown type (a corrupt offsets partition):
    the shard loads, empty, and keeps nothing (a Spark task gets exactly such a group)."""
    from tests.coordinator.rowkit import Log

    log = Log(partition=7)
    log.error()
    log.unknown()
    result = replay_shards(to_table(log.rows), ReplayOptions(num_partitions=50), retain=True)
    assert {t: a.num_rows for t, a in result.tables.items()} == dict.fromkeys(result.tables, 0)
    assert result.retained.num_rows == 0


# KIP-848 records of a live group: only those its state still depends on are kept (each case fails without its rule)
def _first_value_creates_the_group(log):
    """A consumer group whose only member left still exists (empty): the member's first value created it."""
    for _ in range(2):
        log.cg_member("g", "m1")
    log.cg_member_tombstone("g", "m1")


def _member_tombstone_removes_the_member_whole(log):
    """The group's first value is the member's own record: its later type-5 tombstone must still remove it."""
    _first_value_creates_the_group(log)
    log.cg_epoch("g", 2)


def _current_assignment_tombstone_needs_its_member(log):
    """A type-8 tombstone resets a member that exists (epochs -1) and is ignored before the member does: the
    member's first record must stay ahead of it."""
    log.cg_epoch("g", 1)
    for _ in range(2):
        log.cg_topics("g", [("ID-A", "a", 4)])
    log.cg_member("g", "m1")
    log.cg_current_tombstone("g", "m1")
    log.cg_member("g", "m1", assignor="range")


def _current_assignment_tombstone_keeps_the_state(log):
    """A type-8 tombstone after the last type-8 value: epochs -1, the value's state kept."""
    for epoch in (2, 3, 4):
        log.cg_current("g", "m1", epoch, [("ID-A", [0])], state=1)
    log.cg_current_tombstone("g", "m1")
    log.cg_epoch("g", 5)


def _last_record_is_the_groups_last_offset(log):
    """The group's last record (here a type-4 tombstone, kept by no other rule) is its `record_offset`."""
    for epoch in (1, 1, 1):
        log.cg_epoch("g", epoch)
    log.cg_topics_tombstone("g")


@pytest.mark.parametrize("semantics", ["legacy", "modern"])
@pytest.mark.parametrize("prefix", [_first_value_creates_the_group, _member_tombstone_removes_the_member_whole,
                                    _current_assignment_tombstone_needs_its_member,
                                    _current_assignment_tombstone_keeps_the_state,
                                    _last_record_is_the_groups_last_offset], ids=lambda f: f.__name__.strip("_"))
def test_rule_kip_live_group_records(prefix, semantics):
    from tests.coordinator.rowkit import Log

    log = Log(partition=0)
    prefix(log)
    cut = len(log.rows)
    log.commit("h", "t", 0, 1)  # a later record of another group: the case's group as the cut left it
    _resumes_like_full(log, cut, semantics)
