"""The column-wise reduction (`pipelines/coordinator/reduction.py`) is state-equivalent: the loaders give the same
state tables, transaction outcomes and group history from the reduced log as from the whole log, both semantics,
on generated logs (interleaved groups, plain and transactional commits of several producers, markers and open ends,
tombstones, classic and KIP-848 records, multi-record batches, gaps, junk) and on the real broker scenarios."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipelines.coordinator.expiry import ExpiryOptions, cleanup_group_metadata
from pipelines.coordinator.loader import SKIPPED_KINDS, load_shard
from pipelines.coordinator.options import ReplayOptions
from pipelines.coordinator.reduction import state_relevant_rows
from pipelines.coordinator.shard import loader_rows
from pipelines.coordinator.tables import shard_rows, topic_names
from tests.coordinator.harness import as_rows, canon
from tests.coordinator.rowkit import Log, to_table
from tests.coordinator.test_replay_differential import build_log, kafka_like_log, log_ops
from tests.depth import cases

HYPO = settings(max_examples=cases(deep=300, quick=50), deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _loaded(rows, opts: ReplayOptions, names) -> dict:
    state = load_shard(rows[0]["offsets_partition"] if rows else 0, loader_rows(to_table(rows)) if rows else [], opts)
    tables = shard_rows(state, opts, 50, names)
    tables = as_rows(cleanup_group_metadata(tables, ExpiryOptions(as_of_ms=10**13, retention_minutes=1,
                                                                  semantics=opts.semantics, kafka_version="3.9")))
    return {"outcomes": sorted(state.outcomes.items()), **{t: canon(r) for t, r in tables.items()
                                                            if t != "group_history"},
            "group_history": tables.get("group_history")}


def _reduced(rows, semantics: str, keep_outcomes: bool = True):
    kept = state_relevant_rows(to_table(rows), semantics == "modern", keep_outcomes=keep_outcomes)
    offsets = set(kept.column("offset").to_pylist())
    assert len(offsets) == kept.num_rows
    return [r for r in rows if r["offset"] in offsets]


def check_equivalent(rows, semantics: str, keep_outcomes: bool = True) -> int:
    """Asserts the reduced log loads like the whole one (without `keep_outcomes`, all but the transaction
    outcomes); returns how many rows it dropped."""
    return check_reductions(rows, semantics, (keep_outcomes,))


def check_reductions(rows, semantics: str, keep_outcomes=(True, False)) -> int:
    """`check_equivalent` for each of `keep_outcomes`, the whole log loaded once; the rows dropped, summed."""
    rows = [r for r in rows if r["record_kind"] not in SKIPPED_KINDS]
    opts = ReplayOptions(semantics=semantics, snapshot_id="red", load_time_ms=5, num_partitions=50)
    names = topic_names(rows)
    whole = _loaded(rows, opts, names)
    dropped = 0
    for keep in keep_outcomes:
        reduced = _reduced(rows, semantics, keep)
        full, got = dict(whole), _loaded(reduced, opts, names)
        if not keep:
            del full["outcomes"], got["outcomes"]
        for t in full:
            assert got[t] == full[t], f"{semantics} {t} keep_outcomes={keep}\nkept: {[r['offset'] for r in reduced]}"
        dropped += len(rows) - len(reduced)
    return dropped


@pytest.mark.parametrize("semantics", ["legacy", "modern"])
@pytest.mark.parametrize("ops", [log_ops, kafka_like_log], ids=["any_log", "kafka_like_log"])
@HYPO
@given(data=st.data())
def test_reduced_log_loads_like_the_whole_log(semantics, ops, data):
    check_equivalent(build_log(data.draw(ops, label="ops"), partition=0).rows, semantics)


@pytest.mark.parametrize("semantics", ["legacy", "modern"])
@pytest.mark.parametrize("ops", [log_ops, kafka_like_log], ids=["any_log", "kafka_like_log"])
@HYPO
@given(data=st.data())
def test_state_only_reduction_loads_like_the_whole_log(semantics, ops, data):
    """keep_outcomes=False (a restore plan's replay of the history): the same state, groups and group history."""
    check_equivalent(build_log(data.draw(ops, label="ops"), partition=0).rows, semantics, keep_outcomes=False)


@pytest.mark.parametrize("semantics", ["legacy", "modern"])
def test_state_only_reduction_drops_ended_transactions_a_plain_commit_overwrites(semantics):
    """Not vacuous: of two transactions on one key, the one a later plain commit overwrites goes with its marker;
    the one still open, the one ended after the plain commit, and an aborted tombstone's marker stay."""
    log = Log(partition=0)
    log.commit("g", "t", 0, 1, pid=5, epoch=0)  # 0: overwritten by 4
    log.marker(5, "COMMIT")  # 1: ends only 0
    log.commit("g", "t", 0, 2, pid=6, epoch=0)  # 2: its marker (5) comes after 4
    log.offset_tombstone("g", "t", 1, pid=7, epoch=0)  # 3: a tombstone: kept, and its marker
    log.commit("g", "t", 0, 3)  # 4: the last plain commit
    log.marker(6, "COMMIT")  # 5
    log.marker(7, "ABORT")  # 6
    log.commit("g", "t", 0, 4, pid=8, epoch=0)  # 7: open at the end
    kept = _reduced([r for r in log.rows if r["record_kind"] not in SKIPPED_KINDS], semantics, keep_outcomes=False)
    # modern keeps the group's first value too (it creates the simple group): 0, so 1 that ends it
    assert [r["offset"] for r in kept] == ([0, 1] if semantics == "modern" else []) + [2, 3, 4, 5, 6, 7]
    assert check_equivalent(log.rows, semantics, keep_outcomes=False) == (0 if semantics == "modern" else 2)
    assert check_equivalent(log.rows, semantics) == 0


@pytest.mark.parametrize("semantics", ["legacy", "modern"])
def test_state_only_reduction_keeps_a_value_whose_marker_follows_a_plain_tombstone(semantics):
    """legacy: a plain tombstone leaves the open transaction alone, so its COMMIT after the tombstone installs the
    value on the emptied key (modern: the tombstone dropped it from the transaction)."""
    log = Log(partition=0)
    log.commit("g", "t", 0, 1, pid=6, epoch=0)
    log.commit("g", "t", 0, 2)
    log.offset_tombstone("g", "t", 0)
    log.marker(6, "COMMIT")
    kept = _reduced([r for r in log.rows if r["record_kind"] not in SKIPPED_KINDS], semantics, keep_outcomes=False)
    assert 0 in [r["offset"] for r in kept]
    check_equivalent(log.rows, semantics, keep_outcomes=False)


@pytest.mark.parametrize("semantics", ["legacy", "modern"])
def test_reduction_drops_superseded_plain_commits(semantics):
    """Not vacuous: a key committed many times keeps its last commit; transactions and group records stay."""
    log = Log(partition=0)
    for v in range(50):
        log.commit("g", "t", 0, v)
    log.commit("g", "t", 1, 7, pid=5, epoch=0)
    log.marker(5, "COMMIT")
    log.offset_tombstone("g", "t", 0)
    log.commit("g", "t", 0, 99)
    kept = _reduced([r for r in log.rows if r["record_kind"] not in SKIPPED_KINDS], semantics)
    # modern keeps the group's first value too (it creates the simple group)
    assert [r["offset"] for r in kept] == ([0] if semantics == "modern" else []) + [50, 51, 52, 53]
    assert check_equivalent(log.rows, semantics) == 50 - (1 if semantics == "modern" else 0)


@pytest.mark.parametrize("semantics", ["legacy", "modern"])
def test_reduction_keeps_the_value_that_recreates_a_simple_group(semantics):
    """modern: a value after the group's removal creates a simple group again; the history shows the removal."""
    log = Log(partition=0)
    log.commit("g", "t", 0, 1)
    log.commit("g", "t", 0, 2)
    log.group("g", [], generation=1, protocol_type="consumer")
    log.group_tombstone("g")
    log.commit("g", "t", 0, 3)
    log.commit("g", "t", 0, 4)
    check_equivalent(log.rows, semantics)


def test_reduction_on_real_logs(shared_dir):
    """Every real log (the Kafka 4.0 broker scenarios, the segments of brokers 1.0 - 3.8) loads the same reduced,
    every partition, both semantics."""
    from pipelines.decoding.reader import iter_decoded_rows

    dirs = sorted(shared_dir.glob("brokerdata/*/data"))
    dirs += sorted({p.parent.parent for p in shared_dir.glob("realdata/**/__consumer_offsets-*/*.log")})
    if not dirs:
        pytest.skip("no real logs")
    dropped = 0
    for d in dirs:
        rows = list(iter_decoded_rows([d]))
        for part in sorted({r["offsets_partition"] for r in rows}):
            part_rows = sorted((r for r in rows if r["offsets_partition"] == part), key=lambda r: r["offset"])
            for semantics in ("legacy", "modern"):
                dropped += check_reductions(part_rows, semantics)
    assert dropped > 0


@pytest.mark.parametrize("semantics", ["legacy", "modern"])
def test_reduction_keeps_a_plain_tombstone_before_a_transactional_one(semantics):
    """legacy: a transactional tombstone only leaves its own transaction, so the plain tombstone before it is what
    removes the committed offset (the last plain record, not the last tombstone)."""
    log = Log(partition=0)
    log.commit("g", "t", 0, 1)
    log.offset_tombstone("g", "t", 0)
    log.offset_tombstone("g", "t", 0, pid=5, epoch=0)
    log.marker(5, "COMMIT")
    check_equivalent(log.rows, semantics)
