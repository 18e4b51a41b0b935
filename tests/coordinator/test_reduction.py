"""The column-wise reductions (`pipelines/coordinator/reduction.py`) hold their defining properties on generated
logs (interleaved groups, plain and transactional commits of several producers, markers and open ends, tombstones,
classic and KIP-848 records, multi-record batches, gaps, junk) and on the real broker scenarios, both semantics:

* `split_mask` (what a range of a split partition hands on): a load of the kept rows ends in the state, groups and
  group history of the whole log's, and decides every offset commit it reads but the plain values (the history a
  split partition's load writes) as the whole log's load does; the rows it drops are plain values;
* `state_only_mask` (a restore plan's replay): a load of the kept rows ends in the state of the whole log's.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipelines.coordinator.expiry import ExpiryOptions, cleanup_group_metadata
from pipelines.coordinator.loader import SKIPPED_KINDS
from pipelines.coordinator.offset_metadata import _codes, plain_values
from pipelines.coordinator.options import ReplayOptions
from pipelines.coordinator.reduction import split_mask, state_only_mask
from pipelines.coordinator.streamed import SPLIT, STATE_ONLY, WHOLE, StreamedShards
from pipelines.coordinator.tables import shard_rows, topic_names
from tests.coordinator.harness import as_rows, canon
from tests.coordinator.rowkit import Log, to_table
from tests.coordinator.test_replay_differential import build_log, kafka_like_log, log_ops
from tests.depth import cases

HYPO = settings(max_examples=cases(deep=300, quick=50), deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
DECIDED = ("txn_outcome", "txn_marker_offset", "applied_offset", "applied_timestamp")


def _loaded(rows, opts: ReplayOptions, names, mode) -> dict:
    """The state tables (expired once), the group history and the decisions of a load of `rows` in `mode`."""
    shards = StreamedShards(opts, mode=mode)
    settled = shards.load(to_table(rows), last=True) if rows else None
    state = shards.finish().state
    out = {}
    if state is not None:
        tables = shard_rows(state, opts, 50, names)
        tables = as_rows(cleanup_group_metadata(tables, ExpiryOptions(
            as_of_ms=10**13, retention_minutes=1, semantics=opts.semantics, kafka_version="3.9")))
        out = {t: canon(r) for t, r in tables.items() if t != "group_history"}
        if mode.group_events:
            out["group_history"] = tables.get("group_history")
    decided = {} if settled is None else {r["record_offset"]: tuple(r[c] for c in DECIDED)
                                          for r in settled.to_pylist()}
    return {"tables": out, "decided": decided}


def _reduced(rows, semantics: str, mask) -> list:
    table = to_table(rows)
    keep = mask(table, semantics == "modern")
    return rows if keep is None else [r for r, k in zip(rows, keep.tolist()) if k]


def check_split(rows, semantics: str) -> int:
    """Asserts a load of the rows `split_mask` keeps ends as the whole log's and decides as it does; returns how
    many rows it dropped."""
    rows = [r for r in rows if r["record_kind"] not in SKIPPED_KINDS]
    opts = ReplayOptions(semantics=semantics, snapshot_id="red", load_time_ms=5, num_partitions=50)
    names = topic_names(rows)
    whole = _loaded(rows, opts, names, WHOLE)
    kept = _reduced(rows, semantics, split_mask)
    got = _loaded(kept, opts, names, SPLIT)
    assert got["tables"] == whole["tables"], f"{semantics}\nkept: {[r['offset'] for r in kept]}"
    kept_offsets = {r["offset"] for r in kept}
    plain = set(to_table(rows).filter(plain_values(to_table(rows), semantics == "modern")).column("offset")
                .to_pylist()) if rows else set()
    assert {r["offset"] for r in rows if r["offset"] not in kept_offsets} <= plain
    assert got["decided"] == {o: d for o, d in whole["decided"].items() if o not in plain}, \
        f"{semantics}\nkept: {[r['offset'] for r in kept]}"
    return len(rows) - len(kept)


def check_state_only(rows, semantics: str) -> int:
    """Asserts a load of the rows `state_only_mask` keeps ends in the whole log's state; returns how many rows it
    dropped."""
    rows = [r for r in rows if r["record_kind"] not in SKIPPED_KINDS]
    opts = ReplayOptions(semantics=semantics, snapshot_id="red", load_time_ms=5, num_partitions=50)
    names = topic_names(rows)
    whole = _loaded(rows, opts, names, STATE_ONLY)
    kept = _reduced(rows, semantics, state_only_mask)
    got = _loaded(kept, opts, names, STATE_ONLY)
    assert got["tables"] == whole["tables"], f"{semantics}\nkept: {[r['offset'] for r in kept]}"
    return len(rows) - len(kept)


def check_reductions(rows, semantics: str) -> int:
    return check_split(rows, semantics) + check_state_only(rows, semantics)


@pytest.mark.parametrize("semantics", ["legacy", "modern"])
@pytest.mark.parametrize("ops", [log_ops, kafka_like_log], ids=["any_log", "kafka_like_log"])
@HYPO
@given(data=st.data())
def test_split_reduction_loads_and_decides_like_the_whole_log(semantics, ops, data):
    check_split(build_log(data.draw(ops, label="ops"), partition=0).rows, semantics)


@pytest.mark.parametrize("semantics", ["legacy", "modern"])
@pytest.mark.parametrize("ops", [log_ops, kafka_like_log], ids=["any_log", "kafka_like_log"])
@HYPO
@given(data=st.data())
def test_state_only_reduction_loads_like_the_whole_log(semantics, ops, data):
    """A restore plan's replay of the history: the same state."""
    check_state_only(build_log(data.draw(ops, label="ops"), partition=0).rows, semantics)


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
    kept = _reduced([r for r in log.rows if r["record_kind"] not in SKIPPED_KINDS], semantics, state_only_mask)
    # modern keeps the group's first value too (it creates the simple group): 0, so 1 that ends it
    assert [r["offset"] for r in kept] == ([0, 1] if semantics == "modern" else []) + [2, 3, 4, 5, 6, 7]
    assert check_state_only(log.rows, semantics) == (0 if semantics == "modern" else 2)
    assert check_split(log.rows, semantics) == 0


@pytest.mark.parametrize("semantics", ["legacy", "modern"])
def test_state_only_reduction_keeps_a_value_whose_marker_follows_a_plain_tombstone(semantics):
    """legacy: a plain tombstone leaves the open transaction alone, so its COMMIT after the tombstone installs the
    value on the emptied key (modern: the tombstone dropped it from the transaction)."""
    log = Log(partition=0)
    log.commit("g", "t", 0, 1, pid=6, epoch=0)
    log.commit("g", "t", 0, 2)
    log.offset_tombstone("g", "t", 0)
    log.marker(6, "COMMIT")
    kept = _reduced([r for r in log.rows if r["record_kind"] not in SKIPPED_KINDS], semantics, state_only_mask)
    assert 0 in [r["offset"] for r in kept]
    check_state_only(log.rows, semantics)


@pytest.mark.parametrize("semantics", ["legacy", "modern"])
def test_split_reduction_drops_plain_commits_nothing_reads(semantics):
    """Not vacuous: of a key committed many times, the split load reads the first commit (the tombstone after them
    deletes what it committed), the first after the tombstone and the last; transactions and markers stay."""
    log = Log(partition=0)
    for v in range(50):
        log.commit("g", "t", 0, v)
    log.commit("g", "t", 1, 7, pid=5, epoch=0)
    log.marker(5, "COMMIT")
    log.offset_tombstone("g", "t", 0)
    log.commit("g", "t", 0, 99)
    log.commit("g", "t", 0, 100)
    log.commit("g", "t", 0, 101)
    kept = _reduced([r for r in log.rows if r["record_kind"] not in SKIPPED_KINDS], semantics, split_mask)
    assert [r["offset"] for r in kept] == [0, 50, 51, 52, 53, 55]
    assert check_split(log.rows, semantics) == 49 + 1


@pytest.mark.parametrize("semantics", ["legacy", "modern"])
def test_split_reduction_keeps_the_plain_commit_that_overtakes_a_transaction(semantics):
    """A transactional value overtaken by a plain commit before its COMMIT never took effect: the split load reads
    the first plain commit after the value, though a later one of the key is the one the key ends with."""
    log = Log(partition=0)
    log.commit("g", "t", 0, 900, pid=5, epoch=0)  # 0
    log.commit("g", "t", 0, 160)  # 1: overtakes 0
    log.commit("g", "t", 0, 161)  # 2
    log.marker(5, "COMMIT")  # 3: installs nothing
    log.commit("g", "t", 0, 162)  # 4
    kept = _reduced(log.rows, semantics, split_mask)
    assert [r["offset"] for r in kept] == [0, 1, 3, 4]
    check_split(log.rows, semantics)


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
    check_reductions(log.rows, semantics)


@pytest.mark.slow  # every real log, both semantics
def test_reduction_on_real_logs(shared_dir):
    """Every real log (the Kafka 4.0 broker scenarios, the segments of brokers 1.0 - 3.8) loads and decides the same
    reduced, every partition, both semantics."""
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
    check_reductions(log.rows, semantics)


def test_the_python_loaders_read_the_group_records_and_few_offset_values(shared_dir):
    """On every real log, each partition loaded whole: the Python loaders read the group records of the key types the
    coordinator knows and, per group, at most one offset value after each of its records, one before the first and
    its last (the values that may create a simple group: the new coordinator's replay does, the old coordinator did
    when it wrote them); every other offset commit and marker is replayed column by column."""
    from pipelines.coordinator.reduction import GROUP_KINDS
    from pipelines.decoding.reader import iter_decoded_rows

    dirs = sorted(shared_dir.glob("brokerdata/*/data"))
    dirs += sorted({p.parent.parent for p in shared_dir.glob("realdata/**/__consumer_offsets-*/*.log")})
    if not dirs:
        pytest.skip("no real logs")
    looped = records = 0
    for d in dirs:
        rows = [r for r in iter_decoded_rows([d]) if r["record_kind"] not in SKIPPED_KINDS]
        for semantics in ("legacy", "modern"):
            options = ReplayOptions(semantics=semantics, snapshot_id="l", num_partitions=50)
            shards = StreamedShards(options)
            shards.load(to_table(rows), last=True)
            got = shards.finish().looped
            # the records of key types the coordinator does not know are skipped before its loaders
            group = [r["group_id"] for r in rows
                     if r["record_kind"] in GROUP_KINDS and r["key_type"] not in options.unknown_key_types]
            values = sum(1 for r in rows if r["record_kind"] == "offset_commit" and not r["is_tombstone"])
            assert len(group) <= got <= len(group) + min(values, len(group) + 2 * len(set(group) | {
                r["group_id"] for r in rows if r["record_kind"] == "offset_commit"})), d
            looped, records = looped + got, records + len(rows)
    assert 0 < looped < records


_COLUMN = st.one_of(st.lists(st.integers(-3, 3), min_size=1, max_size=60),  # a table of every possible key
                    st.lists(st.integers(0, 5000), min_size=1, max_size=60),  # one sort
                    st.lists(st.integers(-2**62, 2**62), min_size=1, max_size=60))  # a lexical sort


@settings(max_examples=cases(deep=1000, quick=150), deadline=None, database=None)
@given(st.data(), st.integers(1, 4))
def test_key_codes_are_dense_equal_for_equal_keys_and_ordered_as_the_keys(data, width):
    """The reductions' and the replay's keys (`offset_metadata._codes`): one code per distinct tuple, numbered
    0..k-1 in the tuples' order, whatever the columns' spans."""
    first = data.draw(_COLUMN)
    columns = [first] + [data.draw(st.lists(st.sampled_from(data.draw(_COLUMN)), min_size=len(first),
                                            max_size=len(first))) for _ in range(width - 1)]
    codes = _codes(*(np.array(c, np.int64) for c in columns)).tolist()
    tuples = list(zip(*columns))
    ranked = {t: i for i, t in enumerate(sorted(set(tuples)))}
    assert codes == [ranked[t] for t in tuples]


@given(st.lists(st.integers(0, 70_000), max_size=300), st.sampled_from([1, 3, 1 << 20]))
def test_a_stable_order_is_numpys_stable_argsort(codes, scale):
    """`stable_order` (a radix sort of codes that fit 16 bits) orders any codes as a stable merge sort does,
    ties in their order, whether they fit 16 bits or not."""
    from pipelines.coordinator.offset_metadata import stable_order

    a = np.asarray(codes, np.int64) // scale
    assert stable_order(a).tolist() == np.argsort(a, kind="mergesort").tolist()
