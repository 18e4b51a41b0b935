"""Hypothesis round trips writer -> reader for every key type and value version; random bytes never crash."""
from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipelines.decoding import message_writer as w
from pipelines.decoding.consumer_protocol import read_assignment, read_subscription
from pipelines.decoding.errors import DecodeError
from pipelines.decoding.messages import (
    GROUP_RECORD_SCHEMAS,
    read_control_record_key,
    read_end_txn_marker,
    read_group_message_value,
    read_group_record_value,
    read_message_key,
    read_offset_message_value,
)
from pipelines.decoding.primitives import uuid_to_str

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
text = st.text(max_size=20)
i32 = st.integers(-(2**31), 2**31 - 1)
i64 = st.integers(-(2**63), 2**63 - 1)
uuids = st.binary(min_size=16, max_size=16).map(uuid_to_str)
parts = st.dictionaries(text, st.lists(i32, max_size=4), max_size=3)


@SETTINGS
@given(text, text, i32, st.sampled_from([0, 1]))
def test_offset_key(group, topic, partition, kt):
    k = read_message_key(w.write_offset_commit_key(group, topic, partition, key_type=kt))
    assert (k.key_type, k.group, k.topic, k.partition) == (kt, group, topic, partition)


@SETTINGS
@given(st.sampled_from([0, 1, 2, 3, 4]), i64, text, i64, i32, i64, st.none() | uuids)
def test_offset_value(version, offset, metadata, ts, epoch, expire, tid):
    raw = w.write_offset_commit_value(version, offset=offset, metadata=metadata, commit_timestamp=ts,
                                      leader_epoch=epoch, expire_timestamp=expire, topic_id=tid)
    v = read_offset_message_value(raw)
    assert (v.version, v.offset, v.metadata, v.commit_timestamp) == (version, offset, metadata, ts)
    assert v.leader_epoch == (epoch if version >= 3 else -1)
    assert v.expire_timestamp == (expire if version == 1 else -1)
    assert v.topic_id == (tid if version == 4 else None)


member = st.fixed_dictionaries({
    "member_id": text, "group_instance_id": st.none() | text, "client_id": text, "client_host": text,
    "rebalance_timeout_ms": i32, "session_timeout_ms": i32, "subscription": st.binary(max_size=30),
    "assignment": st.binary(max_size=30)})


@SETTINGS
@given(st.sampled_from([0, 1, 2, 3, 4]), text, i32, st.none() | text, st.none() | text, i64,
       st.lists(member, max_size=3))
def test_group_value(version, ptype, gen, protocol, leader, ts, members):
    raw = w.write_group_metadata_value(version, protocol_type=ptype, generation=gen, protocol=protocol,
                                       leader=leader, current_state_timestamp=ts, members=members)
    g = read_group_message_value(raw)
    assert (g.protocol_type, g.generation, g.protocol, g.leader) == (ptype, gen, protocol, leader)
    assert g.current_state_timestamp == (ts if version >= 2 else -1)
    for m, d in zip(g.members, members, strict=True):
        assert (m.member_id, m.client_id, m.client_host, m.session_timeout) == (
            d["member_id"], d["client_id"], d["client_host"], d["session_timeout_ms"])
        assert m.group_instance_id == (d["group_instance_id"] if version >= 3 else None)
        assert m.rebalance_timeout == (d["rebalance_timeout_ms"] if version >= 1 else -1)
        assert (m.subscription, m.assignment) == (d["subscription"], d["assignment"])


@SETTINGS
@given(st.sampled_from([0, 1, 2, 3]), st.lists(text, max_size=4), st.none() | st.binary(max_size=8), parts, i32,
       st.none() | text)
def test_consumer_protocol(version, topics, user_data, owned, gen, rack):
    s = read_subscription(w.write_consumer_subscription(version, topics, user_data, owned, gen, rack))
    assert (s.topics, s.user_data, s.complete) == (tuple(topics), user_data, True)
    if version >= 1:
        assert dict((t, list(p)) for t, p in s.owned_partitions) == owned
    a = read_assignment(w.write_consumer_assignment(version, owned, user_data))
    assert dict((t, list(p)) for t, p in a.assigned_partitions) == owned and a.user_data == user_data


tp = st.lists(st.fixed_dictionaries({"topic_id": uuids, "partitions": st.lists(i32, max_size=3)}), max_size=3)


@SETTINGS
@given(st.sampled_from([3, 4, 5, 6, 7, 8, 16]), st.sampled_from(["3.8+", "3.7"]), text, text, i32, i32, tp,
       st.none() | i32, st.lists(text, max_size=3))
def test_consumer_group_records(kt, layout, group, member_id, e1, e2, partitions, session, topics):
    cols = {"group_epoch": e1, "assignment_epoch": e1, "member_epoch": e1, "previous_member_epoch": e2,
            "member_state": 0, "assigned_partitions": partitions, "partitions_pending_revocation": partitions,
            "client_id": "c", "client_host": "h", "subscribed_topics": topics, "session_timeout_ms": session,
            "regex_topics": topics, "regex_version": e2, "regex_timestamp": e1,
            "topics_metadata": [{"topic_id": p["topic_id"], "topic_name": "t", "num_partitions": e2}
                                for p in partitions]}
    k, v = w.write_consumer_group_record(kt, group, cols, member_id=member_id, regex="re", layout=layout)
    key = read_message_key(k)
    assert key.group_id == group
    val = read_group_record_value(kt, v)
    # 3.7 and 3.8+ layouts of a type can be byte-ambiguous; the reader prefers 3.8+ when both read fully
    expected = layout if layout in dict(GROUP_RECORD_SCHEMAS[kt]) else "3.8+"
    if val.layout != expected:
        assert expected == "3.7" and val.layout == "3.8+"
        return
    f = val.fields
    if kt == 8:
        assert (f["memberEpoch"], f["previousMemberEpoch"]) == (e1, e2)
        assert [p["topicId"] for p in f["assignedPartitions"]] == [p["topic_id"] for p in partitions]
    if kt == 5:
        assert f["subscribedTopicNames"] == topics
        if layout == "3.8+":
            cm = f["classicMemberMetadata"]
            assert (cm and cm["sessionTimeoutMs"]) == session or (cm is None and session is None)
    if kt == 16:
        assert (f["topics"], f["version"], f["timestamp"]) == (topics, e2, e1)


@SETTINGS
@given(st.integers(0, 20), i32)
def test_control(ctype, epoch):
    k, v = w.write_control_record(ctype, epoch)
    assert read_control_record_key(k).type == ctype
    assert read_end_txn_marker(v).coordinator_epoch == epoch


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=80), st.integers(3, 23))
def test_random_bytes_raise_only_decode_errors(raw, kt):
    for fn in (read_message_key, read_offset_message_value, read_group_message_value, read_control_record_key,
               read_end_txn_marker, read_subscription, read_assignment):
        try:
            fn(raw)
        except DecodeError:
            pass
    if kt in GROUP_RECORD_SCHEMAS:
        try:
            read_group_record_value(kt, raw)
        except DecodeError:
            pass
    from pipelines.decoding.rows import to_decoded_row
    from tests.decoding.test_messages import _rec
    row = to_decoded_row(_rec(raw[:10] or None, raw[10:] or None))
    assert row["record_kind"] in ("error", "offset_commit", "group_metadata", "consumer_group", "share_group",
                                  "streams_group", "unknown")


@settings(max_examples=200, deadline=None)
@given(st.sampled_from([0, 1, 2, 3, 4]), st.binary(max_size=60))
def test_prefixed_random_values_raise_only_decode_errors(version, body):
    raw = version.to_bytes(2, "big") + body
    for fn in (read_offset_message_value, read_group_message_value):
        try:
            fn(raw)
        except DecodeError:
            pass
