"""Retention expiry and group cleanup (spec §6) on tiny inline tables: every rule, its boundary, both coordinators.

Each case asserts Kafka's outcome on the engine's `cleanup_group_metadata` (no JVM). Scenario names follow Kafka's
`GroupMetadataManagerTest` / `OffsetMetadataManagerTest`.
"""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pytest

from pipelines.coordinator.expiry import (
    REASON_ALL_EXPIRED,
    REASON_NO_OFFSETS,
    RULE_CONSUMER_UNSUBSCRIBED,
    RULE_EMPTY_COMMIT_TS,
    RULE_EMPTY_STATE_TS,
    RULE_EXPLICIT,
    RULE_PRE_2_1,
    RULE_SIMPLE,
    RULE_STABLE_UNSUBSCRIBED,
    RULE_STREAMS_EMPTY,
    RULE_STREAMS_UNSUBSCRIBED,
    ExpiryOptions,
    cleanup_group_metadata,
    parse_kafka_version,
    to_ms,
)
from schemas.tables import TABLES, columns

SNAP = "snap-1"
T0 = 1_790_000_000_000  # epoch ms
SEC = 1000
MIN = 60 * SEC
RETENTION_MIN = 10
RET = RETENTION_MIN * MIN
OUT_TABLES = ("loaded_offsets", "empty_group_offsets", "loaded_groups", "group_members", "expired_offsets",
              "expired_groups")


def ts(ms: int | None):
    return None if ms is None else datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(milliseconds=ms)


# -- inline table builders (contract columns, nothing from replay) ---------------------------------------------

_record_offset = iter(range(10**6))


def offset(group_id, topic, partition, commit_ms, *, expire_ms=None, offsets_partition=0, has_group_metadata=True,
           committed_offset=42):
    row = {c: None for c in columns("loaded_offsets")}
    row.update(snapshot_id=SNAP, group_id=group_id, topic=topic, partition=partition,
               offsets_partition=offsets_partition, committed_offset=committed_offset, metadata="",
               commit_timestamp=ts(commit_ms), expire_timestamp=ts(expire_ms), record_offset=next(_record_offset),
               has_group_metadata=has_group_metadata, producer_id=-1)
    return row


def group(group_id, *, group_type="classic", protocol_type="consumer", state="Empty", cst_ms=None, generation=1,
          subscribed=None, member_count=0, is_simple=False, offsets_partition=0):
    row = {c: None for c in columns("loaded_groups")}
    row.update(snapshot_id=SNAP, group_id=group_id, offsets_partition=offsets_partition, group_type=group_type,
               protocol_type=protocol_type, generation=generation, state=state, current_state_timestamp=ts(cst_ms),
               member_count=member_count, record_offset=next(_record_offset), subscribed_topics=subscribed,
               is_simple=is_simple)
    return row


def member(group_id, member_id, subscribed, *, group_type="classic"):
    row = {c: None for c in columns("group_members")}
    row.update(snapshot_id=SNAP, group_id=group_id, member_id=member_id, client_id="c", client_host="/127.0.0.1",
               session_timeout_ms=45000, rebalance_timeout_ms=300000, subscribed_topics=subscribed,
               group_type=group_type, offsets_partition=0)
    return row


def pending(group_id, topic, partition, *, producer_id=7):
    row = {c: None for c in columns("pending_offsets")}
    row.update(snapshot_id=SNAP, producer_id=producer_id, group_id=group_id, topic=topic, partition=partition,
               committed_offset=99, record_offset=next(_record_offset), offsets_partition=0)
    return row


def tables(*, loaded=(), empty=(), groups=(), members=(), pending_=()):
    t = {name: [] for name in TABLES}
    t.update(loaded_offsets=list(loaded), empty_group_offsets=list(empty), loaded_groups=list(groups),
             group_members=list(members), pending_offsets=list(pending_))
    return t


# -- running both implementations --------------------------------------------------------------------------

def _norm_value(v):
    if isinstance(v, datetime):
        return to_ms(v)
    if isinstance(v, list):
        return tuple(_norm_value(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted((k, _norm_value(x)) for k, x in v.items()))
    if hasattr(v, "asDict"):
        return _norm_value(v.asDict())
    return v


def normalize(rows, table):
    """Rows as sorted tuples of the contract columns, timestamps as epoch ms (Spark collects naive local times)."""
    cols = columns(table)
    out = []
    for r in rows.to_pylist() if isinstance(rows, pa.Table) else rows:
        d = r.asDict() if hasattr(r, "asDict") else r
        out.append(tuple(_norm_value(d.get(c)) for c in cols))
    return sorted(out, key=repr)


def as_dicts(rows, table):
    return [dict(zip(columns(table), r)) for r in rows]


def run(t, options):
    """The outcome of one cleanup pass, normalized (contract columns, timestamps as epoch ms)."""
    res = cleanup_group_metadata(t, options)
    return {name: as_dicts(normalize(res[name], name), name) for name in OUT_TABLES}


def expired_keys(res):
    return sorted((r["group_id"], r["topic"], r["partition"]) for r in res["expired_offsets"])


def dead(res):
    return {r["group_id"]: r for r in res["expired_groups"]}


def opts(as_of, semantics="legacy", version="3.9"):
    return ExpiryOptions(as_of_ms=as_of, retention_minutes=RETENTION_MIN, semantics=semantics, kafka_version=version)


BOTH = pytest.mark.parametrize("semantics", ["legacy", "modern"])


# -- classic group that became Empty ---------------------------------------------------------------------------

@BOTH
def test_empty_classic_group_expires_from_current_state_timestamp(semantics):
    # Offsets committed before and after the group became Empty both count from the "became Empty" time.
    cst = T0 + 30 * SEC
    t = tables(groups=[group("g", state="Empty", cst_ms=cst, generation=3)],
               loaded=[offset("g", "a", 0, T0), offset("g", "a", 1, T0 + 50 * SEC)])
    before = run(t, opts(cst + RET - 1, semantics))
    assert before["expired_offsets"] == [] and before["expired_groups"] == []
    assert len(before["loaded_offsets"]) == 2 and [g["group_id"] for g in before["loaded_groups"]] == ["g"]

    at = run(t, opts(cst + RET, semantics))
    assert expired_keys(at) == [("g", "a", 0), ("g", "a", 1)]
    assert {r["expiry_rule"] for r in at["expired_offsets"]} == {RULE_EMPTY_STATE_TS}
    assert {r["expiry_base_timestamp"] for r in at["expired_offsets"]} == {cst}
    assert at["loaded_offsets"] == [] and at["loaded_groups"] == []
    g = dead(at)["g"]
    assert (g["reason"], g["writes_tombstone"], g["generation"], g["snapshot_id"]) == (REASON_ALL_EXPIRED, True, 3, SNAP)


@BOTH
def test_empty_classic_group_without_state_timestamp_uses_commit_timestamps(semantics):
    # GroupMetadataValue v0/v1 (or -1): each offset falls back to its own commitTimestamp.
    t = tables(groups=[group("g", state="Empty", cst_ms=None, generation=2)],
               loaded=[offset("g", "a", 0, T0), offset("g", "a", 1, T0 + 40 * SEC)])
    assert run(t, opts(T0 + RET - 1, semantics))["expired_offsets"] == []
    first = run(t, opts(T0 + RET, semantics))
    assert expired_keys(first) == [("g", "a", 0)]
    assert first["expired_offsets"][0]["expiry_rule"] == RULE_EMPTY_COMMIT_TS
    assert first["expired_offsets"][0]["expiry_base_timestamp"] == T0
    assert first["expired_groups"] == [] and [o["partition"] for o in first["loaded_offsets"]] == [1]
    assert run(t, opts(T0 + 40 * SEC + RET - 1, semantics))["expired_groups"] == []
    last = run(t, opts(T0 + 40 * SEC + RET, semantics))
    assert expired_keys(last) == [("g", "a", 0), ("g", "a", 1)]
    assert dead(last)["g"]["reason"] == REASON_ALL_EXPIRED


@BOTH
def test_empty_group_with_other_protocol_type_expires(semantics):
    t = tables(groups=[group("connect-g", protocol_type="connect", state="Empty", cst_ms=T0, generation=5)],
               loaded=[offset("connect-g", "a", 0, T0 + SEC)])
    assert run(t, opts(T0 + RET - 1, semantics))["expired_offsets"] == []
    res = run(t, opts(T0 + RET, semantics))
    assert res["expired_offsets"][0]["expiry_rule"] == RULE_EMPTY_STATE_TS
    assert "connect-g" in dead(res)


# -- simple groups (no protocol type) ------------------------------------------------------------------------

@pytest.mark.parametrize("semantics,tombstone", [("legacy", False), ("modern", True)])
def test_simple_group_without_group_record_expires_by_commit_and_is_deleted(semantics, tombstone):
    # Offsets with no GroupMetadata: Kafka synthesizes an Empty group, protocolType None, generation 0.
    t = tables(empty=[offset("s", "a", 0, T0, has_group_metadata=False),
                      offset("s", "b", 0, T0 + 40 * SEC, has_group_metadata=False)])
    assert run(t, opts(T0 + RET - 1, semantics))["expired_offsets"] == []
    mid = run(t, opts(T0 + RET, semantics))
    assert expired_keys(mid) == [("s", "a", 0)] and mid["expired_groups"] == []
    assert mid["expired_offsets"][0]["expiry_rule"] == RULE_SIMPLE
    assert [o["topic"] for o in mid["empty_group_offsets"]] == ["b"]
    end = run(t, opts(T0 + 40 * SEC + RET, semantics))
    assert end["empty_group_offsets"] == []
    g = dead(end)["s"]
    # Old coordinator: no GroupMetadata tombstone at generation 0; new coordinator: one for any classic group.
    assert (g["reason"], g["generation"], g["group_type"], g["writes_tombstone"]) == (REASON_ALL_EXPIRED, 0, "classic", tombstone)


@pytest.mark.parametrize("semantics,tombstone", [("legacy", False), ("modern", True)])
def test_simple_group_row_from_replay(semantics, tombstone):
    t = tables(groups=[group("s", protocol_type=None, state="Empty", generation=0, is_simple=True, cst_ms=T0 - 10 * MIN)],
               empty=[offset("s", "a", 0, T0, has_group_metadata=False)])
    assert run(t, opts(T0 + RET - 1, semantics))["expired_offsets"] == []
    res = run(t, opts(T0 + RET, semantics))
    assert res["expired_offsets"][0]["expiry_rule"] == RULE_SIMPLE  # not the (load-time) state timestamp
    assert res["loaded_groups"] == [] and dead(res)["s"]["writes_tombstone"] is tombstone


# -- Stable classic `consumer` groups (KIP-496, KAFKA-13636) -------------------------------------------------

def _stable_classic(subscribed=("a",), protocol_type="consumer", state="Stable"):
    subs = None if subscribed is None else list(subscribed)
    return tables(groups=[group("st", protocol_type=protocol_type, state=state, cst_ms=T0 - MIN, generation=4,
                                subscribed=subs, member_count=1)],
                  members=[member("st", "m1", subs)],
                  loaded=[offset("st", "a", 0, T0), offset("st", "b", 0, T0), offset("st", "b", 1, T0 + SEC)])


@BOTH
def test_stable_group_expires_only_unsubscribed_topics(semantics):
    t = _stable_classic()
    assert run(t, opts(T0 + RET - 1, semantics))["expired_offsets"] == []
    at = run(t, opts(T0 + RET, semantics))
    assert expired_keys(at) == [("st", "b", 0)]
    assert at["expired_offsets"][0]["expiry_rule"] == RULE_STABLE_UNSUBSCRIBED
    assert at["expired_offsets"][0]["expiry_base_timestamp"] == T0
    late = run(t, opts(T0 + 100 * RET, semantics))
    assert expired_keys(late) == [("st", "b", 0), ("st", "b", 1)]
    # The subscribed topic is kept forever, the group stays, its members too.
    assert [(o["topic"], o["partition"]) for o in late["loaded_offsets"]] == [("a", 0)]
    assert late["expired_groups"] == [] and len(late["group_members"]) == 1


@BOTH
@pytest.mark.parametrize("subscribed,protocol_type", [(None, "consumer"), (("a",), "connect")])
def test_stable_group_with_unknown_subscription_or_other_protocol_never_expires(semantics, subscribed, protocol_type):
    t = _stable_classic(subscribed=subscribed, protocol_type=protocol_type)
    res = run(t, opts(T0 + 1000 * RET, semantics))
    assert res["expired_offsets"] == [] and res["expired_groups"] == [] and len(res["loaded_offsets"]) == 3


@pytest.mark.parametrize("version,expires", [("2.1", False), ("2.3.1", False), ("2.4", True), ("3.9", True)])
def test_legacy_subscription_rule_arrived_in_2_4(version, expires):
    res = run(_stable_classic(), opts(T0 + 100 * RET, "legacy", version))
    assert expired_keys(res) == ([("st", "b", 0), ("st", "b", 1)] if expires else [])


@pytest.mark.parametrize("version,expires", [("2.8.1", True), ("3.0.0", True), ("3.1.0", True),
                                             ("2.8.2", False), ("3.0.1", False), ("3.2", False), ("3.9", False)])
def test_legacy_kafka_13636_stable_only(version, expires):
    # Before KAFKA-13636 the subscription rule also fired while rebalancing.
    res = run(_stable_classic(state="PreparingRebalance"), opts(T0 + 100 * RET, "legacy", version))
    assert bool(res["expired_offsets"]) is expires


# -- explicit v1 expireTimestamp -------------------------------------------------------------------------------

@BOTH
def test_explicit_expire_timestamp_wins_at_or_after_it(semantics):
    expire = T0 + 3 * MIN  # shorter than retention
    t = tables(empty=[offset("s", "a", 0, T0, expire_ms=expire, has_group_metadata=False)],
               groups=[group("e", state="Empty", cst_ms=T0, generation=1)],
               loaded=[offset("e", "a", 0, T0, expire_ms=T0 + 100 * RET)])
    assert run(t, opts(expire - 1, semantics))["expired_offsets"] == []
    at = run(t, opts(expire, semantics))
    assert expired_keys(at) == [("s", "a", 0)]
    assert at["expired_offsets"][0]["expiry_rule"] == RULE_EXPLICIT
    assert at["expired_offsets"][0]["expiry_base_timestamp"] == expire
    # The explicit timestamp also wins when it is later than the Empty group's retention deadline.
    later = run(t, opts(T0 + RET, semantics))
    assert ("e", "a", 0) not in expired_keys(later)
    assert ("e", "a", 0) in expired_keys(run(t, opts(T0 + 100 * RET, semantics)))


@BOTH
def test_explicit_expire_timestamp_does_not_override_subscription(semantics):
    t = _stable_classic()
    t["loaded_offsets"][0]["expire_timestamp"] = ts(T0 + SEC)  # topic a, subscribed
    res = run(t, opts(T0 + 100 * RET, semantics))
    assert ("st", "a", 0) not in expired_keys(res)


# -- before KIP-211 (0.9–2.0) ------------------------------------------------------------------------------------

def test_pre_2_1_expires_strictly_after_deadline_regardless_of_state():
    t = _stable_classic()
    t["loaded_offsets"][2]["expire_timestamp"] = ts(T0 + 2 * MIN)
    # Exactly at the deadline nothing expires (strict <) ...
    assert expired_keys(run(t, opts(T0 + 2 * MIN, "legacy", "2.0"))) == []
    one = run(t, opts(T0 + 2 * MIN + 1, "legacy", "2.0"))
    assert expired_keys(one) == [("st", "b", 1)]
    assert one["expired_offsets"][0]["expiry_rule"] == RULE_PRE_2_1
    assert one["expired_offsets"][0]["expiry_base_timestamp"] == T0 + 2 * MIN
    assert expired_keys(run(t, opts(T0 + RET, "legacy", "2.0"))) == [("st", "b", 1)]
    # ... and a Stable group loses even its subscribed topic's offsets, but is not removed.
    all_ = run(t, opts(T0 + RET + 1, "legacy", "2.0"))
    assert expired_keys(all_) == [("st", "a", 0), ("st", "b", 0), ("st", "b", 1)]
    assert {r["expiry_base_timestamp"] for r in all_["expired_offsets"] if r["topic"] == "a"} == {T0}
    assert all_["expired_groups"] == [] and len(all_["loaded_groups"]) == 1


def test_pre_2_1_empty_group_is_removed():
    t = tables(groups=[group("g", state="Empty", cst_ms=T0 + 5 * MIN, generation=2)], loaded=[offset("g", "a", 0, T0)])
    res = run(t, opts(T0 + RET + 1, "legacy", "1.1.1"))  # the state timestamp plays no part
    assert expired_keys(res) == [("g", "a", 0)] and dead(res)["g"]["writes_tombstone"] is True


# -- KIP-848 consumer groups (new coordinator) ---------------------------------------------------------------

def _consumer_group(state, members_subs, regex_topics=()):
    subs = sorted(set(t for s in members_subs for t in s) | set(regex_topics))
    return tables(
        groups=[group("k", group_type="consumer", protocol_type="consumer", state=state, generation=7,
                      subscribed=subs, member_count=len(members_subs), cst_ms=None)],
        members=[member("k", f"m{i}", list(s), group_type="consumer") for i, s in enumerate(members_subs)],
        loaded=[offset("k", "a", 0, T0), offset("k", "b", 0, T0 + SEC), offset("k", "re-1", 0, T0)])


@pytest.mark.parametrize("state", ["Stable", "Reconciling", "Assigning"])
def test_consumer_group_expires_unsubscribed_topics_in_any_state(state):
    t = _consumer_group(state, [["a"]], regex_topics=["re-1"])
    assert run(t, opts(T0 + SEC + RET - 1, "modern"))["expired_offsets"] == []
    res = run(t, opts(T0 + SEC + RET, "modern"))
    assert expired_keys(res) == [("k", "b", 0)]
    assert res["expired_offsets"][0]["expiry_rule"] == RULE_CONSUMER_UNSUBSCRIBED
    assert res["expired_groups"] == [] and len(res["group_members"]) == 1


def test_empty_consumer_group_expires_by_commit_then_is_deleted():
    t = _consumer_group("Empty", [])
    t["loaded_groups"][0]["current_state_timestamp"] = ts(T0 + 5 * MIN)  # never a base for KIP-848 groups
    assert run(t, opts(T0 + RET - 1, "modern"))["expired_offsets"] == []
    mid = run(t, opts(T0 + RET, "modern"))
    assert expired_keys(mid) == [("k", "a", 0), ("k", "re-1", 0)] and mid["expired_groups"] == []
    end = run(t, opts(T0 + SEC + RET, "modern"))
    g = dead(end)["k"]
    assert (g["group_type"], g["reason"], g["writes_tombstone"]) == ("consumer", REASON_ALL_EXPIRED, True)
    assert end["loaded_groups"] == [] and end["loaded_offsets"] == []


def test_consumer_group_subscription_falls_back_to_members():
    t = _consumer_group("Stable", [["a"], ["b"]])
    t["loaded_groups"][0]["subscribed_topics"] = None
    assert expired_keys(run(t, opts(T0 + 100 * RET, "modern"))) == [("k", "re-1", 0)]


def test_legacy_sees_consumer_group_offsets_as_group_less():
    # The old coordinator skips KIP-848 keys: the offsets belong to a group it never built.
    t = _consumer_group("Stable", [["a"]])
    res = run(t, opts(T0 + 100 * RET, "legacy"))
    assert expired_keys(res) == [("k", "a", 0), ("k", "b", 0), ("k", "re-1", 0)]
    assert {r["expiry_rule"] for r in res["expired_offsets"]} == {RULE_SIMPLE}
    assert res["expired_groups"] == [] and len(res["loaded_groups"]) == 1


@pytest.mark.parametrize("version,deleted", [("4.0", True), ("4.1", False), ("4.2", False)])
def test_an_empty_share_group_without_offsets_is_deleted_by_4_0_only(version, deleted):
    """4.1 added `ShareGroup.shouldExpire` (false): its cleanup skips share groups. 4.0's asks every group, and a
    share group with no offsets and no open transaction is all expired, so `maybeDeleteGroup` deletes it when
    Empty (`isEmpty`); one with members stays."""
    t = tables(groups=[group("sh", group_type="share", protocol_type="share", state="Empty", generation=3),
                       group("busy", group_type="share", protocol_type="share", state="Stable", generation=3,
                             member_count=1)])
    res = run(t, opts(T0, "modern", version))
    assert [(g["group_id"], g["reason"]) for g in res["expired_groups"]] == (
        [("sh", REASON_NO_OFFSETS)] if deleted else [])
    assert sorted(g["group_id"] for g in res["loaded_groups"]) == (["busy"] if deleted else ["busy", "sh"])


def test_share_group_never_expires():
    t = tables(groups=[group("sh", group_type="share", protocol_type=None, state="Empty", generation=1)],
               loaded=[offset("sh", "a", 0, T0)])
    res = run(t, opts(T0 + 1000 * RET, "modern"))
    assert res["expired_offsets"] == [] and res["expired_groups"] == []


@pytest.mark.parametrize("version,fails", [("4.0", True), ("4.1", False)])
def test_a_share_group_with_offsets_fails_4_0s_whole_cleanup_pass(version, fails):
    """4.0's `ShareGroup.offsetExpirationCondition` throws, so the pass of a partition holding a share group with
    offsets ends there and writes nothing: no other group's offsets expire and no group is deleted. 4.1's
    `shouldExpire` skips the share group and the rest expire."""
    t = tables(groups=[group("sh", group_type="share", protocol_type="share", state="Empty", generation=1),
                       group("idle", group_type="share", protocol_type="share", state="Empty", generation=1),
                       group("c", group_type="consumer", protocol_type="consumer", state="Empty", generation=1)],
               loaded=[offset("sh", "a", 0, T0), offset("c", "a", 0, T0)], empty=[offset("simple", "a", 0, T0)])
    res = run(t, opts(T0 + 1000 * RET, "modern", version))
    assert expired_keys(res) == ([] if fails else [("c", "a", 0), ("simple", "a", 0)])
    assert sorted(dead(res)) == ([] if fails else ["c", "simple"])
    assert len(res["loaded_offsets"]) + len(res["empty_group_offsets"]) == (3 if fails else 1)


_BOTH = {"a": RULE_STREAMS_EMPTY, "b": RULE_STREAMS_EMPTY}


@pytest.mark.parametrize("version,state,subscribed,expired", [
    ("4.2", "Empty", ["a"], _BOTH), ("4.2", "NotReady", None, _BOTH),
    ("4.2", "NotReady", ["a"], {"b": RULE_STREAMS_UNSUBSCRIBED}),
    ("4.2", "Stable", ["a"], {"b": RULE_STREAMS_UNSUBSCRIBED}),
    ("4.1", "Stable", ["a"], _BOTH), ("4.1", "NotReady", ["a"], _BOTH)])
def test_streams_group_offsets_expire_by_commit_time_unless_its_topology_reads_their_topic(version, state, subscribed,
                                                                                         expired):
    """`StreamsGroup.isSubscribedToTopic`: no topic while Empty, nor without a topology; with one, 4.2+ keeps the
    offsets of its source topics (`sourceTopicMap`: here `subscribed_topics`) in any other state, and 4.1 asks a
    configured topology no record holds (none after a load), so all of a 4.1 group's offsets expire on
    commitTimestamp + retention (`StreamsGroupTest.testIsSubscribedToTopic`)."""
    t = tables(groups=[group("st", group_type="streams", protocol_type="streams", state=state, generation=4,
                             subscribed=subscribed, member_count=0 if state == "Empty" else 1)],
               loaded=[offset("st", "a", 0, T0), offset("st", "b", 0, T0)])
    assert run(t, opts(T0 + RET - 1, "modern", version))["expired_offsets"] == []
    res = run(t, opts(T0 + RET, "modern", version))
    assert {r["topic"]: r["expiry_rule"] for r in res["expired_offsets"]} == expired


# -- transactions ----------------------------------------------------------------------------------------------

def test_modern_pending_transactional_offset_blocks_partition_and_group():
    t = tables(empty=[offset("s", "a", 0, T0, has_group_metadata=False), offset("s", "a", 1, T0, has_group_metadata=False)],
               pending_=[pending("s", "a", 0)])
    res = run(t, opts(T0 + 100 * RET, "modern"))
    assert expired_keys(res) == [("s", "a", 1)] and res["expired_groups"] == []


def test_modern_3_7_expires_offsets_and_groups_whatever_is_pending():
    """3.7's `OffsetMetadataManager.cleanupExpiredOffsets` (branch 3.7) reads no pending transactional offset: the
    partition's offset expires and the group, all its offsets gone, is deleted; the checks came with 3.8
    (KAFKA-14505 [8/8])."""
    simple = group("s", protocol_type=None, state="Empty", generation=0, is_simple=True, cst_ms=T0)
    t = tables(groups=[simple], empty=[offset("s", "a", p, T0, has_group_metadata=False) for p in (0, 1)],
               pending_=[pending("s", "a", 0)])
    res = run(t, opts(T0 + 100 * RET, "modern", "3.7"))
    assert expired_keys(res) == [("s", "a", 0), ("s", "a", 1)] and list(dead(res)) == ["s"]


def test_legacy_pending_transactional_offset_blocks_only_the_group():
    t = tables(empty=[offset("s", "a", 0, T0, has_group_metadata=False), offset("s", "a", 1, T0, has_group_metadata=False)],
               pending_=[pending("s", "a", 0)])
    res = run(t, opts(T0 + 100 * RET, "legacy"))
    assert expired_keys(res) == [("s", "a", 0), ("s", "a", 1)] and res["expired_groups"] == []


@pytest.mark.parametrize("semantics,version,deleted", [
    ("legacy", "3.9", False), ("modern", "3.7", True), ("modern", "3.8", True), ("modern", "3.9", True),
    ("modern", "4.0", True), ("modern", "4.0.1", False), ("modern", "4.1", False)])
def test_group_with_open_transaction_only(semantics, version, deleted):
    """An Empty group whose only offsets are pending in an open transaction. The old coordinator keeps it
    (`GroupMetadata.hasOffsets` counts pending ones). The new one's `cleanupExpiredOffsets` answered "all expired"
    for a group without committed offsets, open transactions or not, so `maybeDeleteGroup` deleted it, until
    KAFKA-19163 (4.0.1, 4.1.0; 3.8, 3.9 and 4.0.0 lack it: `return true`); a group that had committed offsets was
    kept for its open transactions from 3.8 (`!openTransactionsByGroup.containsKey(groupId)`)."""
    t = tables(groups=[group("g", state="Empty", generation=3, cst_ms=T0)], pending_=[pending("g", "a", 0)])
    assert list(dead(run(t, opts(T0 + 100 * RET, semantics, version)))) == (["g"] if deleted else [])
    t = tables(groups=[group("g", state="Empty", generation=3, cst_ms=T0)], loaded=[offset("g", "b", 0, T0)],
               pending_=[pending("g", "a", 0)])
    res = run(t, opts(T0 + 100 * RET, semantics, version))
    assert expired_keys(res) == [("g", "b", 0)]
    assert list(dead(res)) == (["g"] if version == "3.7" else [])


# -- cleanup of groups with no offsets -----------------------------------------------------------------------

@pytest.mark.parametrize("semantics,generation,tombstone", [("legacy", 0, False), ("legacy", 2, True),
                                                            ("modern", 0, True), ("modern", 2, True)])
def test_empty_group_with_no_offsets_is_removed_at_any_time(semantics, generation, tombstone):
    t = tables(groups=[group("g", state="Empty", generation=generation, cst_ms=T0),
                       group("live", state="Stable", generation=1, subscribed=["a"], member_count=1)],
               members=[member("live", "m1", ["a"])])
    res = run(t, opts(T0 - 1000 * RET, semantics))  # no retention wait
    assert dead(res)["g"]["reason"] == REASON_NO_OFFSETS
    assert dead(res)["g"]["writes_tombstone"] is tombstone
    assert [g["group_id"] for g in res["loaded_groups"]] == ["live"] and len(res["group_members"]) == 1


def test_modern_offsets_of_tombstoned_group_are_never_expired():
    # Spec §5.5 #4: new coordinator keeps them invisible; old coordinator re-creates a simple group.
    t = tables(loaded=[offset("gone", "a", 0, T0, has_group_metadata=True)])
    modern = run(t, opts(T0 + 100 * RET, "modern"))
    assert modern["expired_offsets"] == [] and modern["expired_groups"] == []
    legacy = run(t, opts(T0 + 100 * RET, "legacy"))
    assert expired_keys(legacy) == [("gone", "a", 0)]
    assert dead(legacy)["gone"]["writes_tombstone"] is False


# -- options ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs", [dict(semantics="new"), dict(retention_minutes=0), dict(kafka_version="latest")])
def test_options_reject_bad_values(kwargs):
    with pytest.raises(ValueError):
        ExpiryOptions(as_of_ms=T0, **kwargs)


def test_parse_kafka_version():
    assert parse_kafka_version("3.9") == (3, 9, 0)
    assert parse_kafka_version("2.8.2") == (2, 8, 2)
    assert parse_kafka_version("3.9.0-rc3") == (3, 9, 0)
    assert ExpiryOptions(as_of_ms=0, kafka_version="2.0.1").pre_kip211
    assert not ExpiryOptions(as_of_ms=0, kafka_version="2.0", semantics="modern").pre_kip211
    assert ExpiryOptions(as_of_ms=0, retention_minutes=1).retention_ms == 60_000


@BOTH
def test_group_with_members_and_an_empty_protocol_type_never_expires(semantics):
    """A GroupMetadata value with protocolType "" and members: `GroupMetadata.loadGroup` / the new coordinator's
    replay give the group no protocol type, then `add` gives it the first member's, "", which is present; neither
    `removeExpiredOffsets` nor `ClassicGroup.offsetExpirationCondition` has a rule for a Stable group of a protocol
    type other than consumer. Its offsets were expired by commit timestamp, as a simple group's."""
    from pipelines.coordinator.options import ReplayOptions
    from pipelines.coordinator.shard import replay_rows
    from tests.coordinator.rowkit import Log
    from tests.coordinator.rowkit import member as group_member

    log = Log()
    log.commit("g", "t", 0, 5)
    log.group("g", [group_member("m1", topics=None)], protocol_type="", protocol="range")
    res = replay_rows(log.rows, ReplayOptions(semantics=semantics),
                      ExpiryOptions(as_of_ms=log.ts + 1000 * RET, retention_minutes=RETENTION_MIN, semantics=semantics))
    assert res["expired_offsets"] == [] and res["expired_groups"] == []
    assert [(o["group_id"], o["committed_offset"]) for o in res["loaded_offsets"]] == [("g", 5)]


@BOTH
@pytest.mark.parametrize("walker", ["python", "c"])
def test_stable_group_of_members_claiming_a_negative_subscription_version(tmp_path, semantics, walker):
    """The coordinators read a member's subscription version without checking it and parse the rest as v0
    (`GroupMetadata.computeSubscribedTopics`, `ClassicGroup.computeSubscribedTopics`): a Stable `consumer` group
    whose member claims version -1 knows its topics and expires the offsets of the others. The subscription read as
    unknown, so none of that group's offsets ever expired."""
    from pipelines.coordinator.options import ReplayOptions
    from pipelines.coordinator.shard import replay_shards
    from pipelines.decoding import columnar
    from pipelines.decoding.batch_writer import write_record_batch
    from pipelines.decoding.message_writer import (write_consumer_subscription, write_group_metadata_key,
                                                   write_group_metadata_value, write_offset_commit_key,
                                                   write_offset_commit_value)

    if walker == "c" and not columnar.HAVE_C_EXTENSION:
        pytest.skip("_fastdecode not built")
    subscription = b"\xff\xff" + write_consumer_subscription(0, ["a"])[2:]
    member_ = dict(member_id="m", client_id="c", client_host="/h", rebalance_timeout_ms=1000,
                   session_timeout_ms=1000, subscription=subscription, assignment=b"")
    records = [(write_offset_commit_key("g", t, 0), write_offset_commit_value(3, offset=5, commit_timestamp=T0), T0)
               for t in ("a", "b")]
    records.append((write_group_metadata_key("g"), write_group_metadata_value(
        3, protocol_type="consumer", generation=1, protocol="range", leader="m", members=[member_]), T0))
    log = tmp_path / "__consumer_offsets-0" / "00000000000000000000.log"
    log.parent.mkdir()
    log.write_bytes(write_record_batch(records, 0))
    table = pa.concat_tables([pa.Table.from_batches([b]) for b in columnar.decode_segment_to_arrow(
        log, offsets_partition=0, use_c=walker == "c")])
    res = replay_shards(table, ReplayOptions(semantics=semantics), opts(T0 + RET, semantics)).tables
    assert res["loaded_groups"].column("subscribed_topics").to_pylist() == [["a"]]
    assert [(r["topic"], r["expiry_rule"]) for r in res["expired_offsets"].to_pylist()] == [
        ("b", RULE_STABLE_UNSUBSCRIBED)]
