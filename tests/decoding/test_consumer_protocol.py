"""ConsumerProtocol Subscription / Assignment v0-v3, lenient where real clients are sloppy."""
from __future__ import annotations

import pytest

from pipelines.decoding.consumer_protocol import read_assignment, read_subscription, subscribed_topics
from pipelines.decoding.message_writer import write_consumer_assignment, write_consumer_subscription


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_subscription_versions(version):
    raw = write_consumer_subscription(version, ["a", "b"], user_data=b"\x01\x02", owned_partitions={"a": [1, 0]},
                                      generation_id=7, rack_id="r1")
    s = read_subscription(raw)
    assert (s.version, s.topics, s.user_data, s.complete) == (version, ("a", "b"), b"\x01\x02", True)
    assert s.owned_partitions == ((("a", (1, 0)),) if version >= 1 else None)
    assert s.generation_id == (7 if version >= 2 else None)
    assert s.rack_id == ("r1" if version >= 3 else None)


def test_higher_version_reads_with_highest_layout_and_kafka_view():
    raw = write_consumer_subscription(3, ["t"], rack_id=None)[2:]
    s = read_subscription(b"\x00\x07" + raw + b"future-fields")
    assert s.version == 7 and s.topics == ("t",) and s.complete
    assert subscribed_topics(b"\x00\x07" + raw) == ("t",)


def test_kafka_go_style_v1_without_owned_partitions():
    raw = write_consumer_subscription(0, ["orders"], user_data=None)
    claims_v1 = b"\x00\x01" + raw[2:]
    s = read_subscription(claims_v1)
    assert s.version == 1 and s.topics == ("orders",) and s.user_data is None
    assert s.owned_partitions is None and not s.complete
    assert subscribed_topics(claims_v1) == ("orders",)


def test_unparseable_is_none():
    assert read_subscription(b"") is None
    assert read_subscription(b"\x00") is None
    assert read_subscription(b"\x00\x00\x00\x00\x00\x05\x00\x01a") is None  # topics run out
    assert subscribed_topics(None) is None


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_assignment_versions(version):
    raw = write_consumer_assignment(version, {"a": [0, 1], "b": []}, user_data=b"u")
    a = read_assignment(raw)
    assert (a.version, a.assigned_partitions, a.user_data) == (version, (("a", (0, 1)), ("b", ())), b"u")


def test_empty_assignment_is_no_assignment():
    assert read_assignment(b"") is None
    assert read_assignment(None) is None
    assert read_assignment(b"\x00\x00\x00\x00\x00\x01") is None


def test_negative_version_is_read_as_v0_as_the_coordinators_read_it():
    """`GroupMetadata.computeSubscribedTopics` / `ClassicGroup.computeSubscribedTopics` read the version without
    checking it (`ConsumerProtocol.deserializeVersion`) and parse the rest as v0: a subscription claiming -1 names
    its topics, and a Stable group of such members expires the offsets of other topics. It was unknown (None), so
    nothing of that group expired."""
    raw = b"\xff\xff" + write_consumer_subscription(3, ["orders"], user_data=b"u", owned_partitions={"x": [0]})[2:]
    s = read_subscription(raw)
    assert (s.version, s.topics, s.user_data, s.owned_partitions) == (-1, ("orders",), b"u", None)
    assert subscribed_topics(raw) == ("orders",)
