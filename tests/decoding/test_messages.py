"""Keys and values: Kafka's dispatch, every version, layouts, typed errors; every real record decodes."""
from __future__ import annotations

import collections

import pytest

from pipelines.decoding import message_writer as w
from pipelines.decoding.errors import (
    DecodeError,
    InvalidFieldError,
    TrailingBytesError,
    TruncatedError,
    UnknownVersionError,
)
from pipelines.decoding.messages import (
    read_control_record_key,
    read_end_txn_marker,
    read_group_message_value,
    read_group_record_value,
    read_message_key,
    read_offset_message_value,
    read_record,
)
from pipelines.decoding.rows import problem_to_row, rows_to_arrow, to_decoded_row
from schemas.decoded import DECODED_COLUMNS
from schemas.messages import GroupRecordKey, UnknownKey
from schemas.records import LogRecord, ReadProblem, RecordBatchHeader
from tests.decoding._data import iter_batches, segment_roots


def _header(**kw):
    base = dict(source="t", offsets_partition=3, position=0, base_offset=10, last_offset=10, size=100, magic=2,
                crc=0, crc_valid=True, attributes=0, codec="none", timestamp_type="CreateTime",
                is_transactional=False, is_control=False, delete_horizon_ms=None, base_timestamp=0, max_timestamp=0,
                producer_id=-1, producer_epoch=-1, base_sequence=0, partition_leader_epoch=0, records_count=1)
    base.update(kw)
    return RecordBatchHeader(**base)


def _rec(key, value, **kw):
    return LogRecord(batch=_header(**kw), offset=10, timestamp=5, first_offset_in_batch=10, sequence=0, key=key,
                     value=value)


# ---------------------------------------------------------------------------------------------- keys


def test_every_key_type_dispatch():
    assert read_message_key(w.write_offset_commit_key("g", "t", 4, key_type=0)).key_type == 0
    k = read_message_key(w.write_offset_commit_key("g", "t", 4))
    assert (k.key_type, k.group, k.topic, k.partition) == (1, "g", "t", 4)
    assert read_message_key(w.write_group_metadata_key("g")).group == "g"
    for t in (3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 19, 20, 21, 22, 23):
        k = read_message_key(w.write_group_record_key(t, "grp", member_id="m", regex="r.*"))
        assert isinstance(k, GroupRecordKey) and k.group_id == "grp" and k.key_type == t
        assert k.member_id == ("m" if t in (5, 7, 8, 10, 13, 14, 19, 21, 22) else None)
        assert k.regular_expression == ("r.*" if t == 16 else None)
    for t in (18, 24, 99, -1):
        k = read_message_key(t.to_bytes(2, "big", signed=True) + b"\x00\x01g")
        assert isinstance(k, UnknownKey) and k.key_type == t


def test_key_errors():
    with pytest.raises(TruncatedError):
        read_message_key(b"\x00")
    with pytest.raises(TruncatedError):
        read_message_key(b"\x00\x01\x00\x05ab")
    with pytest.raises(TrailingBytesError):
        read_message_key(w.write_group_metadata_key("g") + b"x")
    with pytest.raises(InvalidFieldError):
        read_message_key(b"\x00\x02\xff\xff")  # null group
    with pytest.raises(InvalidFieldError):
        read_message_key(None)


def test_control_key_and_marker():
    k, v = w.write_control_record(1, 7)
    assert read_control_record_key(k).type_name == "COMMIT"
    assert read_end_txn_marker(v).coordinator_epoch == 7
    assert read_control_record_key(b"\x00\x05\x00\x00").type_name == "ABORT"  # higher key version read as v0
    assert read_end_txn_marker(b"\x00\x03\x00\x00\x00\x09extra").coordinator_epoch == 9  # higher value version
    with pytest.raises(InvalidFieldError):
        read_control_record_key(b"\xff\xff\x00\x01")
    with pytest.raises(TruncatedError):
        read_control_record_key(b"\x00\x00\x00")


# -------------------------------------------------------------------------------------------- values


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_offset_commit_value_versions(version):
    raw = w.write_offset_commit_value(version, offset=42, metadata="m\u00e9", commit_timestamp=1000, leader_epoch=5,
                                      expire_timestamp=2000)
    v = read_offset_message_value(raw)
    assert (v.version, v.offset, v.metadata, v.commit_timestamp) == (version, 42, "m\u00e9", 1000)
    assert v.leader_epoch == (5 if version >= 3 else -1)
    assert v.expire_timestamp == (2000 if version == 1 else -1)
    with pytest.raises(TrailingBytesError):
        read_offset_message_value(raw + b"\x00\x00")


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_a_common_value_read_whole_reads_as_field_by_field(version):
    """v0-v3 values are read in one unpack of their head (`messages._common_offset_value`) when they add up; every
    cut, extension and length field of them reads, or fails, exactly as the field-by-field reading says."""
    from pipelines.decoding.messages import _offset_value_by_field, offset_commit_value_fields

    def outcome(read, buf):
        try:
            return read(buf)
        except DecodeError as e:
            return type(e), str(e)

    for metadata in ("", "m", "m\u00e9" * 40):
        raw = w.write_offset_commit_value(version, offset=-1, metadata=metadata, commit_timestamp=-5, leader_epoch=7,
                                          expire_timestamp=2**62)
        at = 14 if version == 3 else 10  # the metadata length
        variants = [raw[:n] for n in range(len(raw) + 1)] + [raw + b"\x00", raw + b"\x00" * 8]
        variants += [raw[:at] + length.to_bytes(2, "big", signed=True) + raw[at + 2:]
                     for length in (-1, -2, len(metadata.encode()) + 1, 0x7FFF)]
        variants.append(raw[:at + 2] + b"\xff\xfe" + raw[at + 4:] if metadata else raw)  # not UTF-8
        for buf in variants:
            want = outcome(_offset_value_by_field, buf)
            assert outcome(read_offset_message_value, buf) == want, buf
            fields = outcome(offset_commit_value_fields, buf)
            assert fields == want if isinstance(want, tuple) else fields == (
                want.version, want.offset, want.leader_epoch, want.metadata, want.commit_timestamp,
                want.expire_timestamp, want.topic_id), buf


def test_offset_commit_v4_topic_id_and_unknown_tags():
    tid = "NWb_qg89SheqWCDovTRFMQ"
    raw = w.write_offset_commit_value(4, offset=1, commit_timestamp=2, topic_id=tid)
    assert read_offset_message_value(raw).topic_id == tid
    # unknown tag 5 skipped by size
    body = raw[:-(1 + 1 + 1 + 16)] + bytes([2, 0, 16]) + raw[-16:] + bytes([5, 3]) + b"abc"
    assert read_offset_message_value(body).topic_id == tid
    with pytest.raises(InvalidFieldError):  # topicId tag of the wrong size
        read_offset_message_value(raw[:-(1 + 1 + 1 + 16)] + bytes([1, 0, 2, 1, 2]))


def test_unknown_value_versions():
    with pytest.raises(UnknownVersionError):
        read_offset_message_value(b"\x00\x05" + b"\x00" * 30)
    with pytest.raises(UnknownVersionError):
        read_group_message_value(b"\xff\xff")
    with pytest.raises(UnknownVersionError):
        read_group_record_value(3, b"\x00\x01\x00\x00\x00\x01\x00")


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_group_metadata_value_versions(version):
    sub = w.write_consumer_subscription(1, ["a", "b"], owned_partitions={"a": [0]})
    asg = w.write_consumer_assignment(0, {"a": [0, 1]})
    member = dict(member_id="m1", group_instance_id="i1", client_id="c", client_host="/h", rebalance_timeout_ms=300,
                  session_timeout_ms=45, subscription=sub, assignment=asg)
    raw = w.write_group_metadata_value(version, protocol_type="consumer", generation=3, protocol="range", leader="m1",
                                       current_state_timestamp=99, members=[member, dict(member, member_id="m2",
                                                                                         group_instance_id=None)])
    g = read_group_message_value(raw)
    assert (g.version, g.protocol_type, g.generation, g.protocol, g.leader) == (version, "consumer", 3, "range", "m1")
    assert g.current_state_timestamp == (99 if version >= 2 else -1)
    assert [m.member_id for m in g.members] == ["m1", "m2"]
    assert g.members[0].group_instance_id == ("i1" if version >= 3 else None)
    assert g.members[0].rebalance_timeout == (300 if version >= 1 else -1)
    assert (g.members[0].subscription, g.members[0].assignment) == (sub, asg)
    with pytest.raises(TrailingBytesError):
        read_group_message_value(raw + b"\x01\x02")


def test_consumer_group_layouts_38_and_37():
    tp = [{"topic_id": "NWb_qg89SheqWCDovTRFMQ", "partitions": [0, 2]}]
    cases = {
        4: {"topics_metadata": [{"topic_id": "yO3Ef_xxQaK173dufCZtPQ", "topic_name": "k-c", "num_partitions": 2}],
            "group_epoch": 4},
        5: {"client_id": "c", "client_host": "/h", "subscribed_topics": ["x"], "rebalance_timeout_ms": 10,
            "session_timeout_ms": 45000},
        7: {"assigned_partitions": tp},
        8: {"member_epoch": 3, "previous_member_epoch": 2, "member_state": 0, "assigned_partitions": tp,
            "partitions_pending_revocation": []},
    }
    for t, cols in cases.items():
        for layout in ("3.8+", "3.7"):
            k, v = w.write_consumer_group_record(t, "g", cols, member_id="m", layout=layout)
            key, val = read_record(k, v)
            assert val.layout == layout, (t, layout)
            row = to_decoded_row(_rec(k, v))
            assert row["record_kind"] == "consumer_group" and row["layout"] == layout and row["error"] is None
            if t == 8:
                assert row["assigned_partitions"] == tp and row["member_epoch"] == 3
            if t == 5 and layout == "3.8+":
                assert row["session_timeout_ms"] == 45000


def test_consumer_group_garbage_is_an_error_share_garbage_is_unparsed():
    with pytest.raises(TruncatedError):
        read_group_record_value(8, b"\x00\x00\x00\x00\x00\x01")
    row = to_decoded_row(_rec(w.write_group_record_key(14, "sg", member_id="m"), b"\x00\x00\xff"))
    assert row["record_kind"] == "share_group" and row["layout"] == "unparsed" and row["error"] is None
    assert (row["group_id"], row["member_id"]) == ("sg", "m")


def test_share_group_metadata_41_and_40_layouts():
    from pipelines.decoding.message_writer import write_group_record_value
    v41 = write_group_record_value(11, {"epoch": 5, "metadataHash": 77}, "4.1+")
    v40 = write_group_record_value(11, {"epoch": 5}, "4.0")
    assert read_group_record_value(11, v41).layout == "4.1+"
    assert read_group_record_value(11, v40).layout == "4.0"
    row = to_decoded_row(_rec(w.write_group_record_key(11, "sg"), v41))
    assert (row["group_epoch"], row["metadata_hash"], row["record_kind"]) == (5, 77, "share_group")


# ----------------------------------------------------------------------------------------------- rows


def test_row_shapes_and_kinds():
    k, v = w.write_offset_commit_key("g", "t", 1), w.write_offset_commit_value(3, offset=9, commit_timestamp=8)
    row = to_decoded_row(_rec(k, v))
    assert tuple(row) == DECODED_COLUMNS
    assert (row["record_kind"], row["committed_offset"], row["leader_epoch"], row["expire_timestamp"]) == (
        "offset_commit", 9, -1, None)
    assert row["key"] is None and row["value"] is None
    tomb = to_decoded_row(_rec(k, None))
    assert tomb["is_tombstone"] and tomb["value_version"] is None and tomb["group_id"] == "g"
    v1 = to_decoded_row(_rec(k, w.write_offset_commit_value(1, offset=9, commit_timestamp=8, expire_timestamp=7)))
    assert v1["expire_timestamp"] == 7
    bad = to_decoded_row(_rec(k, b"\x00\x09abc"))
    assert bad["record_kind"] == "error" and bad["error"].startswith("UnknownVersionError:")
    assert bad["key"] == k and bad["value"] == b"\x00\x09abc" and bad["group_id"] == "g"
    unk = to_decoded_row(_rec(b"\x00\x12\x00\x01g", b"\x00\x00"))
    assert unk["record_kind"] == "unknown" and unk["key_type"] == 18 and unk["key"] is not None
    ck, cv = w.write_control_record(0, 3)
    ctl = to_decoded_row(_rec(ck, cv, is_control=True, is_transactional=True, producer_id=7))
    assert (ctl["record_kind"], ctl["control_type"], ctl["coordinator_epoch"], ctl["key_type"]) == (
        "control", "ABORT", 3, None)
    prob = problem_to_row(ReadProblem(source="f", offsets_partition=1, position=77, kind="torn_tail", reason="x"))
    assert (prob["record_kind"], prob["batch_position"], prob["error"]) == ("error", 77, "x")
    batch = rows_to_arrow([row, tomb, v1, bad, unk, ctl, prob])
    assert batch.num_rows == 7


def test_every_real_record_decodes(shared_dir):
    """All records of realdata/seg_* and brokerdata/*/data: zero error rows, rows fit the Arrow schema."""
    kinds = collections.Counter()
    layouts = collections.Counter()
    for root in segment_roots(shared_dir):
        rows = []
        for header, records in iter_batches(root):
            for rec in records:
                row = to_decoded_row(rec)
                assert row["record_kind"] != "error", (root, rec.offset, row["error"])
                if header.is_control:
                    assert row["control_type"] in ("COMMIT", "ABORT")
                rows.append(row)
                kinds[row["record_kind"]] += 1
                if row["layout"]:
                    layouts[row["layout"]] += 1
        rows_to_arrow(rows)
    assert kinds["offset_commit"] == 7981 and kinds["group_metadata"] == 857
    assert kinds["consumer_group"] == 506 and kinds["control"] == 14
    assert set(layouts) == {"3.8+"}


def test_kafka_go_subscription_group_in_realdata(realdata):
    """seg_RaviAzzuraPutra: a kafka-go member claims subscription v1 without owned partitions."""
    seen = 0
    for root in segment_roots(realdata.parent):
        if "RaviAzzuraPutra" not in root:
            continue
        for _, records in iter_batches(root):
            for rec in records:
                row = to_decoded_row(rec)
                for m in row["members"] or []:
                    if m["subscription_version"] == 1 and m["owned_partitions"] is None:
                        assert m["subscribed_topics"]
                        seen += 1
    assert seen > 0
