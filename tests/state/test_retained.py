"""The incremental state (`pipelines/state/retained.py`) is state-equivalent: for a log cut at a batch boundary,
replay(retained(prefix) ∪ rest) == replay(prefix ∪ rest), every table, both semantics.

The subset is chosen by the Spark code, and the in-process port of its rules (`local_replay`) must choose the
same positions; both replays are the sequential reference (an oracle independent of the
Spark replay the subset's rules were read from). Each example is a batch of generated logs (the differential
tests' generator: interleaved groups, plain and transactional commits of several producers, markers and open
ends, tombstones, classic and KIP-848 records, multi-record batches, gaps, junk), every log cut at three batch
boundaries, each cut in its own offsets partition, all chosen in one Spark job.
"""
from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipelines.state.local_replay import retained_positions_local
from pipelines.state.options import REPLAY_TABLES, ReplayOptions
from pipelines.state.reference import replay_reference
from pipelines.state.retained import retained_positions
from tests.state.harness import canon
from tests.state.rowkit import to_frame
from tests.state.test_replay_differential import HYPO, build_log, kafka_like_log, log_ops

CUTS_PER_LOG = 3


def local_positions(rows, opts: ReplayOptions) -> set[tuple[int, int]]:
    """`local_replay.retained_positions_local` over `rows` (error/unknown rows dropped, as a run does)."""
    rows = sorted((r for r in rows if r["record_kind"] not in ("error", "unknown")),
                  key=lambda r: (r["offsets_partition"], r["offset"]))
    states: dict = {}
    replay_reference(rows, opts, states)
    return retained_positions_local(rows, opts, states)


def _batch_starts(rows) -> list[int]:
    """Indexes where a new batch starts (an incremental run resumes at an entry boundary), and the end."""
    starts = [i for i, r in enumerate(rows) if i == 0 or r["batch_base_offset"] != rows[i - 1]["batch_base_offset"]]
    return starts + [len(rows)]


def _check(spark, semantics: str, batch, seed: int) -> None:
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
    keep = set()
    if replayable:
        keep = {(r["offsets_partition"], r["offset"]) for r in retained_positions(to_frame(spark, replayable), opts)
                .collect()}
    kept = [r for r in replayable if (r["offsets_partition"], r["offset"]) in keep]
    assert len(kept) == len(keep)  # every position names one replayable row
    assert local_positions(replayable, opts) == keep  # the in-process runs' port of the rules
    full = replay_reference(prefix + rest, opts)
    resumed = replay_reference(kept + rest, opts)
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
            assert got == want, (f"{semantics} log {i} cut at row {k}: {t}\nops: {batch[i]}\n"
                                 f"kept: {sorted(o for q, o in keep if q == p)}\nresumed: {got}\nfull:    {want}")


@pytest.mark.spark
@pytest.mark.parametrize("semantics", ["legacy", "modern"])
@pytest.mark.parametrize("ops", [log_ops, kafka_like_log], ids=["any_log", "kafka_like_log"])
@HYPO
@given(data=st.data())
def test_retained_prefix_replays_like_the_whole_prefix(spark, semantics, ops, data):
    batch = data.draw(st.lists(ops, min_size=10, max_size=16), label="batch")
    _check(spark, semantics, batch, data.draw(st.integers(0, 2**32 - 1), label="seed"))


@pytest.mark.spark
def test_retained_drops_superseded_commits(spark):
    """The point of the subset: a key committed many times keeps one row, a finished transaction none of its
    superseded records, an open transaction all of its records."""
    from tests.state.rowkit import Log

    log = Log(partition=0)
    for v in range(50):
        log.commit("g", "t", 0, v)
    log.commit("g", "t", 1, 7, pid=5, epoch=0)
    log.marker(5, "COMMIT")
    log.commit("g", "t", 1, 9)  # plain write after the committed transaction: it wins
    log.commit("g", "t", 2, 1, pid=6, epoch=0)  # open transaction
    log.commit("g", "t", 2, 2, pid=6, epoch=0)
    opts = ReplayOptions(semantics="modern", snapshot_id="ret", load_time_ms=5, num_partitions=50)
    keep = sorted(r["offset"] for r in retained_positions(to_frame(spark, log.rows), opts).collect())
    assert keep == [49, 52, 53, 54]


# --- one scenario per rule: each fails if its rule is left out of `retained_positions` ------------------------
def _resumes_like_full(spark, log, cut: int, semantics: str) -> None:
    rows = log.rows
    prefix, rest = rows[:cut], rows[cut:]
    opts = ReplayOptions(semantics=semantics, snapshot_id="ret", load_time_ms=5, num_partitions=50)
    keep = {r["offset"] for r in retained_positions(to_frame(spark, prefix), opts).collect()}
    assert {o for _p, o in local_positions(prefix, opts)} == keep
    kept = [r for r in prefix if r["offset"] in keep]
    assert len(kept) < len(prefix)  # something was dropped, or the scenario proves nothing
    full, resumed = replay_reference(prefix + rest, opts), replay_reference(kept + rest, opts)
    for t in REPLAY_TABLES:
        if t != "offset_commits":
            assert canon(resumed[t]) == canon(full[t]), f"{semantics} {t}: kept {sorted(keep)}"


@pytest.mark.spark
def test_rule_last_tombstone_hides_an_open_entry_before_it(spark):
    """modern: a tombstone purges pending entries before it, even when a plain value follows it."""
    from tests.state.rowkit import Log

    log = Log(partition=0)
    log.commit("g", "t", 0, 1, pid=3, epoch=0)  # open, before the tombstone
    log.offset_tombstone("g", "t", 0)
    log.commit("g", "t", 0, 2)
    log.commit("g", "t", 0, 3)
    cut = len(log.rows)
    log.commit("h", "t", 0, 1)  # the transaction stays open: its purged entry must not be pending
    _resumes_like_full(spark, log, cut, "modern")


@pytest.mark.spark
@pytest.mark.parametrize("semantics", ["legacy", "modern"])
def test_rule_topic_names_outlive_their_group(spark, semantics):
    """A topic id named only by a removed incarnation's type-4 record still resolves later assignments."""
    from tests.state.rowkit import Log

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
    _resumes_like_full(spark, log, cut, semantics)


@pytest.mark.spark
@pytest.mark.parametrize("semantics", ["legacy", "modern"])
def test_rule_committed_entry_beats_later_plain_tombstone_only_by_its_marker(spark, semantics):
    """A transactional commit resolved after the cut, and plain writes either side of the cut."""
    from tests.state.rowkit import Log

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
    _resumes_like_full(spark, log, cut, semantics)


@pytest.mark.spark
def test_rule_last_offset_value_keeps_a_simple_group(spark):
    """modern: an offset value after the group's removal makes a simple group, even an aborted one."""
    from tests.state.rowkit import Log

    log = Log(partition=0)
    log.group("g", [], protocol_type="")
    log.commit("g", "t", 0, 1)
    log.commit("g", "t", 0, 2)
    log.group_tombstone("g")
    log.commit("g", "t", 1, 1, pid=4, epoch=0)
    log.marker(4, "ABORT")
    cut = len(log.rows)
    log.commit("h", "t", 0, 1)
    _resumes_like_full(spark, log, cut, "modern")
