"""Group -> offsets partition (`Utils.abs(hashCode) % n`) against the 4.0 broker's own placement."""
from __future__ import annotations

import json

import pytest

from pipelines.coordinator.partitioner import INT_MIN, java_string_hash, partition_for, utils_abs


def test_many_groups_partitions_match_the_broker(brokerdata):
    expected = json.loads((brokerdata / "many-groups/group_partitions.json").read_text(encoding="utf-8"))
    assert len(expected) == 320
    assert any(ord(c) > 0xFFFF for g in expected for c in g)  # emoji outside the BMP are covered
    wrong = {g: (p, partition_for(g, 50)) for g, p in expected.items() if partition_for(g, 50) != p}
    assert wrong == {}


def test_many_groups_records_live_in_their_partition(brokerdata):
    from tests.decoding._data import iter_batches
    from pipelines.decoding.rows import to_decoded_row

    seen = 0
    for header, records in iter_batches(str(brokerdata / "many-groups/data")):
        for rec in records:
            row = to_decoded_row(rec)
            if row["group_id"] is not None:
                assert partition_for(row["group_id"], 50) == header.offsets_partition
                seen += 1
    assert seen > 1000


@pytest.mark.parametrize("s,h", [("", 0), ("a", 97), ("hello", 99162322), ("polygenelubricants", INT_MIN),
                                 ("\U0001F600", 0xD83D * 31 + 0xDE00)])
def test_java_hash_code(s, h):
    assert java_string_hash(s) == h


def test_abs_of_min_value_is_zero_not_negative():
    assert utils_abs(INT_MIN) == 0
    assert partition_for("polygenelubricants", 50) == 0


def test_negative_hash_uses_abs_not_to_positive():
    h = java_string_hash("orders-consumer")
    assert h == -1204742690
    assert partition_for("orders-consumer", 50) == 40  # Utils.abs: 1204742690 % 50
    assert (h & 0x7FFFFFFF) % 50 == 8  # Utils.toPositive (the producer's function) would say 8


def test_bad_partition_count():
    with pytest.raises(ValueError):
        partition_for("g", 0)
