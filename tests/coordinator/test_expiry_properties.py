"""Properties of one cleanup pass over random coordinator states: monotone in `as_of`, nothing before any commit,
a partition of the input offsets."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pipelines.coordinator.expiry import REASON_NO_OFFSETS, ExpiryOptions, cleanup_group_metadata, to_ms
from tests.coordinator.harness import as_rows
from tests.coordinator.test_expiry import (
    MIN,
    T0,
    group,
    member,
    offset,
    pending,
    tables,
)
from tests.depth import cases

TOPICS = ["a", "b", "c"]
SPAN = 30 * MIN  # commit timestamps spread over half an hour; retention is drawn between 1 and 20 minutes


@st.composite
def group_and_offsets(draw, gid: str):
    kind = draw(st.sampled_from(["classic", "classic_stable", "simple_row", "orphan", "consumer", "share"]))
    subs = draw(st.one_of(st.none(), st.lists(st.sampled_from(TOPICS), unique=True, max_size=2)))
    g, members = None, []
    if kind == "classic":
        cst = draw(st.one_of(st.none(), st.integers(T0, T0 + SPAN)))
        g = group(gid, protocol_type=draw(st.sampled_from(["consumer", "connect"])), state="Empty", cst_ms=cst,
                  generation=draw(st.integers(0, 5)), subscribed=[])
    elif kind == "classic_stable":
        g = group(gid, protocol_type=draw(st.sampled_from(["consumer", "connect"])), state="Stable",
                  cst_ms=draw(st.integers(T0, T0 + SPAN)), generation=draw(st.integers(1, 5)), subscribed=subs,
                  member_count=1)
        members = [member(gid, "m1", subs)]
    elif kind == "simple_row":
        g = group(gid, protocol_type=None, state="Empty", generation=0, is_simple=True, cst_ms=T0 + SPAN)
    elif kind == "consumer":
        n = draw(st.integers(0, 2))
        msubs = [draw(st.lists(st.sampled_from(TOPICS), unique=True, max_size=2)) for _ in range(n)]
        g = group(gid, group_type="consumer", state=("Empty" if n == 0 else draw(st.sampled_from(["Stable", "Reconciling"]))),
                  generation=draw(st.integers(1, 9)), member_count=n,
                  subscribed=sorted({t for s in msubs for t in s}))
        members = [member(gid, f"m{i}", s, group_type="consumer") for i, s in enumerate(msubs)]
    elif kind == "share":
        g = group(gid, group_type="share", protocol_type=None, state="Empty", generation=1)
    parts = draw(st.lists(st.tuples(st.sampled_from(TOPICS), st.integers(0, 1)), unique=True, max_size=3))
    offs = []
    for topic, p in parts:
        commit = draw(st.integers(T0, T0 + SPAN))
        # A v1 value's expireTimestamp is commit + the retention the client asked for (never before the commit).
        expire = draw(st.one_of(st.none(), st.none(), st.integers(commit, commit + SPAN)))
        offs.append(offset(gid, topic, p, commit, expire_ms=expire, has_group_metadata=kind != "orphan"))
    pend = [pending(gid, t, p) for t, p in draw(st.lists(st.tuples(st.sampled_from(TOPICS), st.integers(0, 1)),
                                                         unique=True, max_size=1))]
    return kind, g, members, offs, pend


@st.composite
def coordinator_states(draw):
    loaded, empty, groups, members, pend = [], [], [], [], []
    for i in range(draw(st.integers(1, 4))):
        kind, g, ms, offs, ps = draw(group_and_offsets(f"g{i}"))
        if g is not None:
            groups.append(g)
        members += ms
        (empty if kind in ("orphan", "simple_row") else loaded).extend(offs)
        pend += ps
    return tables(loaded=loaded, empty=empty, groups=groups, members=members, pending_=pend)


options_strategy = st.builds(
    lambda semantics, version, retention: (semantics, version, retention),
    st.sampled_from(["legacy", "modern"]),
    st.sampled_from(["4.1", "4.0", "3.9", "3.7", "2.8.1", "2.2", "2.0"]),
    st.integers(1, 20),
)


def _opts(as_of, o):
    semantics, version, retention = o
    return ExpiryOptions(as_of_ms=as_of, retention_minutes=retention, semantics=semantics, kafka_version=version)


def _expired_sets(state, options):
    res = as_rows(cleanup_group_metadata(state, options))
    offs = {(r["group_id"], r["topic"], r["partition"]) for r in res["expired_offsets"]}
    return offs, {r["group_id"] for r in res["expired_groups"]}, res


def _all_timestamps(state):
    for name in ("loaded_offsets", "empty_group_offsets"):
        for o in state[name]:
            yield to_ms(o["commit_timestamp"])
            if o["expire_timestamp"] is not None:
                yield to_ms(o["expire_timestamp"])
    for g in state["loaded_groups"]:
        if g["current_state_timestamp"] is not None:
            yield to_ms(g["current_state_timestamp"])


@settings(max_examples=cases(deep=150, quick=50), deadline=None)
@given(coordinator_states(), options_strategy, st.lists(st.integers(0, 4 * SPAN), min_size=2, max_size=4))
def test_expired_set_is_monotone_in_as_of(state, o, deltas):
    previous_offsets, previous_groups = set(), set()
    for as_of in sorted(T0 + d for d in deltas):
        offs, groups, _ = _expired_sets(state, _opts(as_of, o))
        assert previous_offsets <= offs
        assert previous_groups <= groups
        previous_offsets, previous_groups = offs, groups


@settings(max_examples=cases(deep=150, quick=50), deadline=None)
@given(coordinator_states(), options_strategy, st.integers(1, 10 * MIN))
def test_as_of_before_every_timestamp_removes_no_offset(state, o, before):
    earliest = min(_all_timestamps(state), default=T0)
    offs, groups, res = _expired_sets(state, _opts(earliest - before, o))
    assert offs == set()
    # Only groups that held nothing at all can go (Kafka removes an Empty group with no offsets at once).
    assert all(g["reason"] == REASON_NO_OFFSETS for g in res["expired_groups"])
    assert len(res["loaded_offsets"]) == len(state["loaded_offsets"])


@settings(max_examples=cases(deep=150, quick=50), deadline=None)
@given(coordinator_states(), options_strategy, st.integers(0, 4 * SPAN))
def test_pass_partitions_offsets_and_removes_only_offsetless_groups(state, o, delta):
    res = as_rows(cleanup_group_metadata(state, _opts(T0 + delta, o)))
    key = lambda r: (r["group_id"], r["topic"], r["partition"])  # noqa: E731
    before = sorted(map(key, state["loaded_offsets"] + state["empty_group_offsets"]))
    after = sorted(map(key, res["loaded_offsets"] + res["empty_group_offsets"] + res["expired_offsets"]))
    assert before == after
    dead = {g["group_id"] for g in res["expired_groups"]}
    left = {r["group_id"] for r in res["loaded_offsets"] + res["empty_group_offsets"]}
    pending_groups = {p["group_id"] for p in state["pending_offsets"]}
    assert not dead & left
    # an open transaction keeps its group: the old coordinator's always, the new one's from 4.0.1, and from 3.8 where
    # the group had committed offsets (KAFKA-19163; 3.7 reads none)
    semantics, version, _ = o
    had = {r["group_id"] for r in state["loaded_offsets"] + state["empty_group_offsets"]}
    kept = {g for g in pending_groups if semantics == "legacy" or version == "4.1"
            or (version in ("3.9", "4.0") and g in had)}
    assert not dead & kept
    assert {g["group_id"] for g in res["loaded_groups"]} == {g["group_id"] for g in state["loaded_groups"]} - dead
    for r in res["expired_offsets"]:
        if r["expiry_rule"] not in ("pre_2_1_expire_timestamp",):
            assert r["expiry_base_timestamp"] is not None
