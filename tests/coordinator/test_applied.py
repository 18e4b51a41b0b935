"""What the engine records of each offset commit (`offset_commits.applied_offset` / `applied_timestamp`,
`coordinator/offset_metadata.py`) is what the coordinator did: scenarios named after Kafka's tests, and the engine
as its own oracle on generated logs, both semantics: the committed offsets a replay cut at any position holds are
exactly those the whole log's history says took effect at or before it (per key, the row applied last: a value
holds its offset, a tombstone nothing)."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipelines.coordinator.options import ReplayOptions
from pipelines.coordinator.shard import load_shards, replay_rows
from pipelines.coordinator.streamed import WHOLE_STATE
from tests.coordinator.rowkit import Log, to_table
from tests.coordinator.test_replay_differential import build_log, kafka_like_log, log_ops
from tests.depth import cases

HYPO = settings(max_examples=cases(deep=300, quick=60), deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _history(log: Log, semantics: str) -> dict[int, dict]:
    rows = replay_rows(log.rows, ReplayOptions(semantics=semantics))["offset_commits"]
    return {r["record_offset"]: r for r in rows}


def _applied(log: Log, semantics: str) -> dict[int, int | None]:
    return {o: r["applied_offset"] for o, r in _history(log, semantics).items()}


@pytest.mark.parametrize("semantics", ["legacy", "modern"])
def test_a_transactional_offset_overtaken_before_its_commit_never_takes_effect(semantics):
    """`GroupMetadata.completePendingTxnOffsetCommit` / `replayEndTransactionMarker`: at the COMMIT, a pending value
    older than the committed one (by batch / record offset) is not installed."""
    log = Log()
    log.commit("g", "t", 0, 900, pid=5, epoch=0)  # 0
    log.commit("g", "t", 0, 160)  # 1: plain, after the transactional record
    log.marker(5, "COMMIT")  # 2
    assert _applied(log, semantics) == {0: None, 1: 1}
    assert _history(log, semantics)[0]["txn_outcome"] == "committed"


@pytest.mark.parametrize("semantics", ["legacy", "modern"])
def test_a_committed_transactional_offset_takes_effect_at_its_marker(semantics):
    log = Log()
    log.commit("g", "t", 0, 500)  # 0
    log.commit("g", "t", 0, 100, pid=5, epoch=0)  # 1: lower, but newer than 0
    log.commit("g", "t", 1, 7)  # 2
    commit = log.marker(5, "COMMIT")  # 3
    history = _history(log, semantics)
    assert {o: r["applied_offset"] for o, r in history.items()} == {0: 0, 1: 3, 2: 2}
    assert history[1]["applied_timestamp"] == commit["timestamp"]


@pytest.mark.parametrize("semantics", ["legacy", "modern"])
def test_aborted_replaced_and_open_transactional_offsets_never_take_effect(semantics):
    log = Log()
    log.commit("g", "t", 0, 1, pid=5, epoch=0)  # 0: aborted
    log.marker(5, "ABORT")  # 1
    log.commit("g", "t", 0, 2, pid=6, epoch=0)  # 2: replaced by 3 in its own transaction
    log.commit("g", "t", 0, 3, pid=6, epoch=0)  # 3
    log.marker(6, "COMMIT")  # 4
    log.commit("g", "t", 0, 4, pid=7, epoch=0)  # 5: still open at the end
    assert _applied(log, semantics) == {0: None, 2: None, 3: 4, 5: None}


@pytest.mark.parametrize("semantics", ["legacy", "modern"])
def test_a_tombstone_takes_effect_only_where_it_deletes(semantics):
    log = Log()
    log.offset_tombstone("g", "t", 0)  # 0: nothing to delete
    log.commit("g", "t", 0, 5)  # 1
    log.offset_tombstone("g", "t", 0)  # 2: deletes 1
    log.offset_tombstone("g", "t", 0)  # 3: nothing left
    assert _applied(log, semantics) == {0: None, 1: 1, 2: 2, 3: None}


@pytest.mark.parametrize("semantics", ["legacy", "modern"])
def test_what_a_tombstone_or_an_install_does_depends_on_the_commit_just_before_it_not_on_the_keys_last(semantics):
    """A key committed again after a tombstone or a transaction's marker, in one stretch of log: the tombstone
    still deletes the commit before it, and the install still loses to the plain commit that overtook it."""
    log = Log()
    log.commit("g", "t", 0, 5)  # 0
    log.offset_tombstone("g", "t", 0)  # 1: deletes 0
    log.commit("g", "t", 0, 6)  # 2
    log.commit("g", "t", 0, 9, pid=5, epoch=0)  # 3
    log.commit("g", "t", 0, 7)  # 4: overtakes 3
    log.marker(5, "COMMIT")  # 5: installs nothing
    log.commit("g", "t", 0, 8)  # 6
    assert _applied(log, semantics) == {0: 0, 1: 1, 2: 2, 3: None, 4: 4, 6: 6}


@pytest.mark.parametrize("semantics", ["legacy", "modern"])
def test_a_transactional_tombstone(semantics):
    """legacy: it only drops the key from its own transaction, and never deletes the committed offset; modern: any
    tombstone deletes at its position (spec §5.5 #1)."""
    log = Log()
    log.commit("g", "t", 0, 5)  # 0
    log.offset_tombstone("g", "t", 0, pid=5, epoch=0)  # 1
    log.marker(5, "COMMIT")  # 2
    assert _applied(log, semantics) == {0: 0, 1: None if semantics == "legacy" else 1}


def test_a_modern_transactional_tombstone_takes_effect_at_its_own_time():
    """It deletes at its record, so its time is the record's, whether a marker comes later or never (a marker of
    another transaction earlier in the window says nothing of it)."""
    for closed in (True, False):
        log = Log()
        log.commit("g", "t", 0, 5, pid=7, epoch=0)  # 0
        log.marker(7, "COMMIT")  # 1: installs 0
        tomb = log.offset_tombstone("g", "t", 0, pid=5, epoch=0)  # 2
        if closed:
            log.marker(5, "COMMIT")  # 3
        row = _history(log, "modern")[2]
        assert (row["applied_offset"], row["applied_timestamp"]) == (2, tomb["timestamp"]), closed


@pytest.mark.parametrize("semantics", ["legacy", "modern"])
def test_a_plain_tombstone_before_the_commit_marker(semantics):
    """legacy: the pending value survives the plain tombstone and is installed on the emptied key (resurrected);
    modern: the tombstone dropped it from the transaction."""
    log = Log()
    log.commit("g", "t", 0, 1)  # 0
    log.commit("g", "t", 0, 2, pid=5, epoch=0)  # 1
    log.offset_tombstone("g", "t", 0)  # 2
    log.marker(5, "COMMIT")  # 3
    assert _applied(log, semantics) == {0: 0, 1: 3 if semantics == "legacy" else None, 2: 2}


def _state_at(rows, semantics: str, cut: int) -> dict:
    loaded = load_shards(to_table(rows), ReplayOptions(semantics=semantics, until_offset=cut),
                         mode=WHOLE_STATE)
    return {k: v.committed_offset for s in loaded.states for k, v in s.offsets.items()}


def _from_history(history: list[dict], cut: int) -> dict:
    last: dict = {}
    for r in history:
        a = r["applied_offset"]
        if a is not None and a <= cut:
            key = (r["group_id"], r["topic"], r["partition"])
            if key not in last or last[key][0] < a:
                last[key] = (a, r)
    return {k: r["committed_offset"] for k, (_, r) in last.items() if not r["is_tombstone"]}


@pytest.mark.parametrize("semantics", ["legacy", "modern"])
@pytest.mark.parametrize("ops", [log_ops, kafka_like_log], ids=["any_log", "kafka_like_log"])
@HYPO
@given(data=st.data())
def test_the_history_says_what_every_cut_of_the_log_holds(semantics, ops, data):
    rows = [r for r in build_log(data.draw(ops, label="ops"), partition=0).rows
            if r["record_kind"] not in ("error", "unknown")]
    if not rows:
        return
    history = replay_rows(rows, ReplayOptions(semantics=semantics))["offset_commits"]
    offsets = sorted({r["offset"] for r in rows})
    for cut in [-1, *offsets]:
        got = {(k.group, k.topic, k.partition): v for k, v in _state_at(rows, semantics, cut).items()}
        assert got == _from_history(history, cut), f"{semantics} cut at {cut}"
