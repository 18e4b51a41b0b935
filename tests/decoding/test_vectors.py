"""Golden byte vectors with their sources' expected decodings (realdata/konsumer_offsets, burrow, issue_threads)."""
from __future__ import annotations

import json

import pytest

from pipelines.decoding.consumer_protocol import read_assignment, read_subscription
from pipelines.decoding.errors import DecodeError, TrailingBytesError, TruncatedError
from pipelines.decoding.messages import (
    _read_group,
    _read_offset_v0,
    _read_offset_v3,
    _read_offset_v4,
    read_control_record_key,
    read_group_message_value,
    read_message_key,
    read_offset_message_value,
)
from schemas.messages import GroupMetadataKey, OffsetCommitKey, UnknownKey


def _load(realdata, rel):
    return json.loads((realdata / rel).read_text())


# ------------------------------------------------------------------------------------------ konsumer


def test_konsumer_offsets_vectors(realdata):
    vectors = _load(realdata, "konsumer_offsets/konsumer_offsets_vectors.json")["vectors"]
    assert len(vectors) == 10
    for v in vectors:
        e = v["expected"]
        key = read_message_key(bytes.fromhex(v["key_hex"]))
        assert key.key_type == e["message_version"]
        assert key.group == e["group"]
        if isinstance(key, OffsetCommitKey):
            assert (key.topic, key.partition) == (e["topic"], e["partition"])
            val = read_offset_message_value(bytes.fromhex(v["value_hex"]))
            assert val.version == e["schema_version"]
            assert (val.offset, val.leader_epoch, val.metadata, val.commit_timestamp, val.expire_timestamp) == (
                e["offset"], e["leader_epoch"], e["metadata"], e["commit_timestamp"], e["expire_timestamp"])
            continue
        assert isinstance(key, GroupMetadataKey)
        val = read_group_message_value(bytes.fromhex(v["value_hex"]))
        assert val.version == e["schema_version"]
        assert val.protocol_type == e["protocol_type"]
        assert val.generation == e["generation"]
        assert (val.protocol or "") == e["protocol"]  # the crate prints null strings as ""
        assert (val.leader or "") == e["leader"]
        assert val.current_state_timestamp == e["current_state_timestamp"]
        assert len(val.members) == len(e["members"])
        for m, em in zip(val.members, e["members"]):
            assert m.member_id == em["id"]
            assert (m.group_instance_id or "") == em["group_instance_id"]
            assert (m.client_id, m.client_host) == (em["client_id"], em["client_host"])
            assert (m.rebalance_timeout, m.session_timeout) == (em["rebalance_timeout"], em["session_timeout"])
            sub = read_subscription(m.subscription)
            es = em["subscription"]
            assert sub.version == es["schema_version"]
            assert list(sub.topics) == es["subscribed_topics"]
            assert list(sub.user_data or b"") == es["user_data"]
            assert [{"topic": t, "partitions": list(p)} for t, p in sub.owned_partitions or ()] == es[
                "owned_topic_partitions"]
            assert (sub.generation_id if sub.generation_id is not None else -1) == es["generation_id"]
            asg = read_assignment(m.assignment)
            ea = em["assignment"]
            assert asg.version == ea["schema_version"]
            assert [{"topic": t, "partitions": list(p)} for t, p in asg.assigned_partitions] == ea[
                "assigned_topic_partitions"]
            assert list(asg.user_data or b"") == ea["user_data"]


# -------------------------------------------------------------------------------------------- burrow


def _burrow(realdata):
    return _load(realdata, "burrow/burrow_vectors.json")


def _full_value(v):
    return bytes.fromhex(v["value_hex"])


def test_burrow_full_records(realdata):
    by_name = {v["name"]: v for v in _burrow(realdata)["vectors"]}
    v = by_name["full_offset_commit_key_v1_value_v0"]
    key = read_message_key(bytes.fromhex(v["key_hex"]))
    val = read_offset_message_value(_full_value(v))
    assert (key.group, key.topic, key.partition) == ("testgroup", "testtopic", 11)
    assert (val.version, val.offset, val.metadata, val.commit_timestamp) == (0, 8372, "testdata", 1637)

    v = by_name["full_group_metadata_key_v2_value_v1"]
    assert read_message_key(bytes.fromhex(v["key_hex"])).group == "testgroup"
    g = read_group_message_value(_full_value(v))
    assert (g.version, g.protocol_type, g.generation, g.protocol, g.leader) == (
        1, "consumer", 1, "testprotocol", "testleader")
    (m,) = g.members
    assert (m.member_id, m.client_id, m.client_host, m.rebalance_timeout, m.session_timeout) == (
        "testmemberid", "testclientid", "testclienthost", 4, 8)
    assert m.subscription == b""
    assert read_subscription(m.subscription) is None
    assert read_assignment(m.assignment).assigned_partitions == (("topic1", (11,)),)

    v = by_name["full_group_metadata_value_v2_with_member"]
    g = read_group_message_value(_full_value(v))
    e = v["expected"]
    assert (g.version, g.protocol_type, g.generation, g.protocol, g.leader, g.current_state_timestamp) == (
        2, e["protocol_type"], e["generation"], e["protocol"], e["leader"], e["current_state_timestamp"])
    em = v["not_asserted_but_in_bytes"]["members"][0]
    (m,) = g.members
    assert (m.client_id, m.client_host, m.rebalance_timeout, m.session_timeout) == (
        em["client_id"], em["client_host"], em["rebalance_timeout"], em["session_timeout"])
    assert list(read_subscription(m.subscription).topics) == em["subscription"]["topics"]
    assert dict((t, list(p)) for t, p in read_assignment(m.assignment).assigned_partitions) == em["assignment"][
        "topics"]

    v = by_name["full_group_metadata_value_v3_static_member_fields"]
    g = read_group_message_value(_full_value(v))
    e = v["expected"]
    assert (g.version, g.protocol, g.generation, g.current_state_timestamp) == (
        3, e["protocol"], e["generation"], e["current_state_timestamp"])
    (m,) = g.members
    assert (m.member_id, m.group_instance_id, m.rebalance_timeout, m.session_timeout) == ("member", None, -1, 30000)
    sub = read_subscription(m.subscription)  # claims v1, has no owned partitions: lenient
    assert sub.version == 1 and sub.topics == ("topic1",) and not sub.complete and sub.owned_partitions is None
    assert read_assignment(m.assignment).assigned_partitions == (("topic1", (0,)),)


@pytest.mark.parametrize("name,version,reader", [
    ("offset_value_v0_body", 0, _read_offset_v0),
    ("offset_value_v3_body", 3, _read_offset_v3),
    ("offset_value_v4_body_burrow_style", 4, _read_offset_v4),
])
def test_burrow_offset_bodies(realdata, name, version, reader):
    v = {x["name"]: x for x in _burrow(realdata)["vectors"]}[name]
    val = reader(bytes.fromhex(v["value_hex"]), 0)
    e = v["expected"]
    assert (val.offset, val.metadata, val.commit_timestamp) == (e["offset"], e["metadata"], e["commit_timestamp"])
    if "leader_epoch" in e:
        assert val.leader_epoch == e["leader_epoch"]


def test_burrow_v4_without_tag_section_is_read_as_no_tagged_fields(realdata):
    """The lenient flexible rule: ending exactly where the tagged-field section starts = no tagged fields."""
    v = {x["name"]: x for x in _burrow(realdata)["vectors"]}["offset_value_v4_with_version_burrow_style"]
    val = read_offset_message_value(_full_value(v))
    assert (val.version, val.offset, val.commit_timestamp, val.leader_epoch, val.topic_id) == (4, 8372, 1637, 0, None)
    key = read_message_key(b"\x00\x01" + bytes.fromhex(v["key_hex"]))
    assert (key.group, key.topic, key.partition) == ("testgroup", "testtopic", 11)
    # ... but a byte more that is not a valid tag section is still an error
    with pytest.raises(DecodeError):
        read_offset_message_value(_full_value(v) + b"\x05")


def test_burrow_bodies_members_and_assignment(realdata):
    vs = {x["name"]: x for x in _burrow(realdata)["vectors"]}
    # group header + members bodies: prefix them with a version to read them as whole values
    hdr = bytes.fromhex(vs["group_metadata_header_v0_body"]["value_hex"])
    g = _read_group(hdr + b"\x00\x00\x00\x00", 0, 0)
    assert (g.protocol_type, g.generation, g.protocol, g.leader) == ("testtype", 1, "testprotocol", "testleader")
    for name, version in (("group_member_v1_body", 1), ("group_member_v3_body", 3)):
        body = bytes.fromhex(vs[name]["value_hex"])
        prefix = hdr if version < 2 else hdr + b"\x00" * 8
        g = _read_group(prefix + b"\x00\x00\x00\x01" + body, 0, version)
        (m,) = g.members
        e = vs[name]["expected"]
        assert (m.member_id, m.client_id, m.client_host, m.rebalance_timeout, m.session_timeout) == (
            e["member_id"], e["client_id"], e["client_host"], e["rebalance_timeout"], e["session_timeout"])
        assert dict((t, list(p)) for t, p in read_assignment(m.assignment).assigned_partitions) == e["assignment"][
            "topics"]
    asg = read_assignment(b"\x00\x00" + bytes.fromhex(vs["consumer_protocol_assignment_v0"]["value_hex"]))
    assert asg.assigned_partitions == (("topic1", (0,)),) and asg.user_data == b""


def _error_target(v):
    """How to read an error vector: (reader, bytes)."""
    name = v["name"]
    key_first = ("truncated_key", "record_key", "group_metadata_truncated_key")
    if v.get("key_hex") and not v.get("value_hex") or name.startswith(key_first):
        raw = bytes.fromhex(v["key_hex"])
        if not v.get("key_has_version"):
            raw = (b"\x00\x02" if "group_metadata" in name else b"\x00\x01") + raw
        return read_message_key, raw
    raw = bytes.fromhex(v["value_hex"])
    if v.get("value_has_version"):
        if "group_metadata" in name or "group_" in name:
            return read_group_message_value, raw
        return read_offset_message_value, raw
    # bodies: give them the version their test targets
    if "offset_value_v0" in name:
        return read_offset_message_value, b"\x00\x00" + raw
    if "offset_value_v3" in name:
        return read_offset_message_value, b"\x00\x03" + raw
    if "offset_value_v4" in name:
        return read_offset_message_value, b"\x00\x04" + raw
    if "assignment_v0" in name:
        return read_assignment, b"\x00\x00" + raw
    if name.startswith(("truncated_group_header", "group_metadata_v1_body")):
        return read_group_message_value, b"\x00\x01" + raw
    if name.startswith("bad_member_v1"):
        hdr = bytes.fromhex("0008746573747479706500000001000c7465737470726f746f636f6c000a746573746c6561646572")
        return read_group_message_value, b"\x00\x01" + hdr + b"\x00\x00\x00\x01" + raw
    raise AssertionError(f"unclassified vector {name}")


def test_burrow_error_vectors(realdata):
    """Every Burrow error vector raises a typed DecodeError, except where Kafka accepts the bytes:
    * record_key_version_3_unknown: type 3 is ConsumerGroupMetadataKey in Kafka 3.7+; its key decodes as such
      (GroupId "testgroup") and its trailing bytes (Burrow's offset-key body) are an error;
    * bad_member_v1_consumer_protocol_version / bad_member_v1_assignment: the member record itself is fine
      (Kafka stores the bytes opaquely); only the embedded assignment is unreadable -> read_assignment None;
    * truncated assignment bodies: read_assignment returns None (unparseable = no assignment), never raises;
    * offset_value_version_2_with_v0_layout: OffsetCommitValue v2 *is* the v0 layout (IBP 2.1-IV0), so Kafka
      reads it (Burrow's v2 reader is wrong) -> offset 8372, metadata "testdata".
    """
    vectors = _burrow(realdata)["error_vectors"]
    assert len(vectors) == 47
    raised = 0
    for v in vectors:
        reader, raw = _error_target(v)
        if reader is read_assignment:
            assert read_assignment(raw) is None, v["name"]
            continue
        if v["name"] == "offset_value_version_2_with_v0_layout":
            val = reader(raw)
            assert (val.version, val.offset, val.metadata, val.commit_timestamp) == (2, 8372, "testdata", 1637)
            continue
        if v["name"] in ("bad_member_v1_consumer_protocol_version", "bad_member_v1_assignment"):
            g = reader(raw)
            assert read_assignment(g.members[0].assignment) is None, v["name"]
            continue
        with pytest.raises(DecodeError) as exc:
            reader(raw)
        assert exc.value.position is not None, v["name"]
        raised += 1
    assert raised >= 38


def test_burrow_key_type_3_is_a_consumer_group_key_in_modern_kafka(realdata):
    v = {x["name"]: x for x in _burrow(realdata)["error_vectors"]}["record_key_version_3_unknown"]
    raw = bytes.fromhex(v["key_hex"])
    with pytest.raises(TrailingBytesError):
        read_message_key(raw)
    assert read_message_key(raw[:13]).group_id == "testgroup"
    assert isinstance(read_message_key(b"\x00\x12" + raw[2:]), UnknownKey)  # 18: never released


# -------------------------------------------------------------------------------------------- issues


def test_issue_vectors(realdata):
    vs = {v["name"]: v for v in _load(realdata, "issue_threads/issue_vectors.json")["vectors"]}
    v = vs["kafka_4_1_0_offset_commit_value_v4"]
    val = read_offset_message_value(bytes.fromhex(v["value_hex"]))
    e = v["expected_stated_in_source"]
    assert (val.version, val.offset, val.leader_epoch, val.commit_timestamp) == (
        e["value_version"], e["offset"], e["leader_epoch"], e["commit_timestamp"])
    assert val.metadata == "" and val.topic_id is None

    v = vs["redpanda_group_metadata_value_v3_connect_with_member_version_prefix"]
    with pytest.raises(DecodeError):  # a strict Apache Kafka reader rejects Redpanda's extra member prefix
        read_group_message_value(bytes.fromhex(v["value_hex"]))

    v = vs["transaction_commit_marker_key_seen_in___consumer_offsets"]
    ck = read_control_record_key(bytes.fromhex(v["key_hex"]))
    assert (ck.version, ck.type, ck.type_name) == (0, 1, "COMMIT")


def test_truncated_errors_name_field_and_position():
    with pytest.raises(TruncatedError) as exc:
        read_offset_message_value(bytes.fromhex("0003000000000000") )
    assert exc.value.field == "offset" and exc.value.position == 2
