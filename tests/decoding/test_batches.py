"""Reading log entries from real bytes: brokerdata vs kafka-dump-log, realdata segments, kafka-python vectors."""
from __future__ import annotations

import json
import re
import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipelines.decoding.batch_writer import write_control_batch, write_empty_batch, write_record_batch
from pipelines.decoding.batches import read_batches, read_batches_from_file
from pipelines.decoding.policy import ReadPolicy
from schemas.records import ReadProblem

SCENARIOS = ["classic-basic", "compacted", "compression-gzip", "compression-lz4", "compression-snappy",
             "compression-zstd", "deletes", "expiry", "kip848", "many-groups", "simple-consumers", "transactions"]

# README table of realdata: exact record counts per folder
REALDATA_RECORDS = {
    "seg_DEVMasterBros_Mermes": 1130, "seg_mscaldas2012_kafka-connect-spooldir": 225,
    "seg_DanielMorales9_kafkafun": 1565, "seg_Bheem6005_kafka": 8, "seg_marioBarbozaA_AIBulb": 32,
    "seg_RaviAzzuraPutra_LATIHAN-MICROSERVICE-NEW": 14, "seg_shiguang123418_spark_demo_1": 210,
    "seg_hafizhkusuma_BigData-Project1Kafka": 11, "seg_fuzibotond_Experts-in-team-innovation": 83,
    "seg_taha-hachidi_LogFile": 3052,
}

_BATCH_RE = re.compile(
    r"^baseOffset: (?P<base>-?\d+) lastOffset: (?P<last>-?\d+) count: (?P<count>\d+) baseSequence: (?P<bseq>-?\d+) "
    r"lastSequence: -?\d+ producerId: (?P<pid>-?\d+) producerEpoch: (?P<pepoch>-?\d+) "
    r"partitionLeaderEpoch: (?P<ple>-?\d+) isTransactional: (?P<txn>true|false) isControl: (?P<ctl>true|false) "
    r"deleteHorizonMs: (?:OptionalLong\[(?P<horizon>\d+)\]|OptionalLong\.empty) position: (?P<pos>\d+) "
    r"(?P<tstype>CreateTime|LogAppendTime): (?P<maxts>-?\d+) size: (?P<size>\d+) magic: (?P<magic>\d) "
    r"compresscodec: (?P<codec>\w+) crc: (?P<crc>\d+) isvalid: (?P<valid>true|false)$")
_RECORD_RE = re.compile(
    r"^\| offset: (?P<offset>-?\d+) (?:CreateTime|LogAppendTime): (?P<ts>-?\d+) keySize: (?P<ks>-?\d+) "
    r"valueSize: (?P<vs>-?\d+) sequence: (?P<seq>-?\d+) headerKeys: \[\]")


def _parse_dump(path: Path) -> dict[str, list[tuple[dict, list[dict]]]]:
    """kafka-dump-log output → {segment file name: [(batch fields, [record fields])]}."""
    out: dict[str, list] = {}
    current = None
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("Dumping "):
            current = out.setdefault(Path(line.split(" ", 1)[1]).name, [])
        elif line.startswith("baseOffset:"):
            m = _BATCH_RE.match(line)
            assert m, line
            current.append((m.groupdict(), []))
        elif line.startswith("| offset:"):
            m = _RECORD_RE.match(line)
            assert m, line
            current[-1][1].append(m.groupdict())
    return out


def _items(items):
    batches = [i for i in items if not isinstance(i, ReadProblem)]
    problems = [i for i in items if isinstance(i, ReadProblem)]
    return batches, problems


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_brokerdata_matches_kafka_dump_log(brokerdata, scenario):
    """Every batch/record field kafka-dump-log printed for the Kafka 4.0 scenario is what the reader returns."""
    root = brokerdata / scenario
    dumps = sorted((root / "dump_log").glob("__consumer_offsets-*.txt"))
    assert dumps
    n_batches = n_records = 0
    for dump in dumps:
        partition = int(dump.stem.rsplit("-", 1)[1])
        expected = _parse_dump(dump)
        text = dump.read_text(encoding="utf-8")
        assert sum(len(v) for v in expected.values()) == len(re.findall(r"^baseOffset:", text, re.M))
        for seg_name, exp_batches in expected.items():
            seg = root / "data" / f"__consumer_offsets-{partition}" / seg_name
            batches, problems = _items(list(read_batches_from_file(seg, offsets_partition=partition)))
            assert problems == []
            assert len(batches) == len(exp_batches), seg
            for (hdr, recs), (eb, erecs) in zip(batches, exp_batches):
                assert hdr.offsets_partition == partition
                assert hdr.base_offset == int(eb["base"])
                assert hdr.last_offset == int(eb["last"])
                assert hdr.records_count == int(eb["count"]) == len(recs) == len(erecs)
                assert hdr.base_sequence == int(eb["bseq"])
                assert hdr.producer_id == int(eb["pid"])
                assert hdr.producer_epoch == int(eb["pepoch"])
                assert hdr.partition_leader_epoch == int(eb["ple"])
                assert hdr.is_transactional == (eb["txn"] == "true")
                assert hdr.is_control == (eb["ctl"] == "true")
                assert hdr.delete_horizon_ms == (int(eb["horizon"]) if eb["horizon"] else None)
                assert hdr.position == int(eb["pos"])
                assert hdr.timestamp_type == eb["tstype"]
                assert hdr.max_timestamp == int(eb["maxts"])
                assert hdr.size == int(eb["size"])
                assert hdr.magic == int(eb["magic"])
                assert hdr.codec == eb["codec"]
                assert hdr.crc == int(eb["crc"])
                assert hdr.crc_valid is (eb["valid"] == "true") is True
                for r, er in zip(recs, erecs):
                    assert r.offset == int(er["offset"])
                    assert r.timestamp == int(er["ts"])
                    assert (len(r.key) if r.key is not None else -1) == int(er["ks"])
                    assert (len(r.value) if r.value is not None else -1) == int(er["vs"])
                    assert r.sequence == int(er["seq"])
                    assert r.first_offset_in_batch == recs[0].offset
                    assert r.batch is hdr
                n_batches += 1
                n_records += len(recs)
    assert n_batches > 0 and n_records > 0


def test_brokerdata_compacted_has_horizon_and_markers(brokerdata):
    """The compacted scenario: a delete-horizon batch whose record timestamps stay baseTimestamp+delta."""
    seg = brokerdata / "compacted/data/__consumer_offsets-7/00000000000000001727.log"
    batches, problems = _items(list(read_batches_from_file(seg, offsets_partition=7)))
    assert problems == []
    horizon = [b for b in batches if b[0].delete_horizon_ms is not None]
    assert len(horizon) == 1
    hdr, recs = horizon[0]
    assert hdr.delete_horizon_ms == hdr.base_timestamp == 1795294810964
    # the cleaner re-based deltas on the horizon: true commit time < horizon
    assert all(r.timestamp == 1795294808876 for r in recs)
    assert all(r.value is None for r in recs)


def test_file_and_buffer_readers_agree(brokerdata):
    seg = brokerdata / "compression-snappy/data"
    logs = sorted(p for p in seg.glob("__consumer_offsets-*/*.log") if p.stat().st_size)
    assert logs
    for p in logs:
        a = list(read_batches(p.read_bytes(), source=str(p), offsets_partition=3))
        b = list(read_batches_from_file(p, offsets_partition=3))
        assert a == b


def _realdata_logs(realdata: Path, folder: str) -> list[Path]:
    return sorted(p for p in (realdata / folder).rglob("*.log") if p.stat().st_size)


@pytest.mark.parametrize("folder", sorted(REALDATA_RECORDS))
def test_realdata_segments_read_without_problems(realdata, folder):
    total = 0
    for p in _realdata_logs(realdata, folder):
        batches, problems = _items(list(read_batches_from_file(p, offsets_partition=0)))
        assert problems == [], p
        for hdr, recs in batches:
            assert hdr.magic == 2 and hdr.codec == "none" and hdr.crc_valid
            assert not hdr.is_transactional and not hdr.is_control
            assert len(recs) == hdr.records_count
            offs = [r.offset for r in recs]
            assert offs == sorted(offs) and offs[-1] <= hdr.last_offset and offs[0] >= hdr.base_offset
            assert all(r.key is not None for r in recs)
        total += sum(len(r) for _, r in batches)
        # consecutive batches never go backwards in offset
        lasts = [h.last_offset for h, _ in batches]
        assert lasts == sorted(lasts)
    assert total == REALDATA_RECORDS[folder]


# ---------------------------------------------------------------------------------------------------------------
# kafka-python / aiokafka record vectors
# ---------------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def kp_vectors(realdata):
    d = json.loads((realdata / "kafka-python_record_batches/record_batches.json").read_text())
    return d


def _vec(kp_vectors, name):
    return next(v for v in kp_vectors["vectors"] if v["name"] == name)


def test_kafka_python_v2(kp_vectors, realdata):
    v = _vec(kp_vectors, "record_batch_data_v2")
    data = (realdata / "kafka-python_record_batches/record_batch_data_v2.bin").read_bytes()
    assert data.hex() == v["concatenated_hex"]
    exp = v["expected"]
    padded = data + b"\x00" * (exp["total_size_with_4_trailing_zero_bytes"] - len(data))
    items = list(read_batches(padded, source="v2", offsets_partition=-1))
    batches, problems = _items(items)
    assert len(batches) == exp["batches"]
    assert [p.kind for p in problems] == ["zero_tail"]
    assert problems[0].position == exp["valid_bytes"]
    assert sum(h.size for h, _ in batches) == exp["valid_bytes"]
    first_hdr, first = batches[0]
    assert len(first) == exp["first_batch"]["records"]
    assert first[0].value == exp["first_batch"]["value"].encode()
    assert first[0].key is None
    assert first[0].timestamp == exp["first_batch"]["timestamp"]
    assert first_hdr.timestamp_type == "CreateTime"
    assert first[0].header_keys == ()
    assert [r.value for r in batches[1][1]] == [b"", b""]
    last = batches[-1][1]
    assert last[0].value == exp["last_batch"]["value"].encode()
    assert list(last[0].header_keys) == [h[0] for h in exp["last_batch"]["headers"]]
    assert all(h.crc_valid for h, _ in batches)


@pytest.mark.parametrize("name,magic", [("record_batch_data_v1", 1), ("record_batch_data_v0", 0)])
def test_kafka_python_legacy(kp_vectors, realdata, name, magic):
    v = _vec(kp_vectors, name)
    data = (realdata / f"kafka-python_record_batches/{name}.bin").read_bytes()
    exp = v["expected"]
    padded = data + b"\x00" * (exp["total_size_with_4_trailing_zero_bytes"] - len(data))
    batches, problems = _items(list(read_batches(padded, source=name, offsets_partition=-1)))
    assert len(batches) == exp["messages"]
    assert [(p.kind, p.position) for p in problems] == [("zero_tail", exp["valid_bytes"])]
    hdr, recs = batches[0]
    assert hdr.magic == magic and hdr.crc_valid
    assert hdr.crc == exp["first"]["crc"]
    assert recs[0].value == exp["first"]["value"].encode() and recs[0].key is None
    if magic == 1:
        assert recs[0].timestamp == exp["first"]["timestamp"]
        assert hdr.timestamp_type == "CreateTime"
    else:
        assert recs[0].timestamp == -1 and hdr.timestamp_type == "NoTimestampType"
    assert [r.offset for _, rs in batches for r in rs] == [0, 1, 2, 3]
    assert all(h.producer_id == -1 and h.base_offset == h.last_offset for h, _ in batches)


def test_kafka_python_control_batch_bad_crc(kp_vectors, realdata):
    data = (realdata / "kafka-python_record_batches/control_batch_data_v2.bin").read_bytes()
    # by default a batch that fails its CRC is not state: its one record is a quarantine row with its bytes
    (q,) = read_batches(data, source="ctl", offsets_partition=-1)
    assert (q.kind, q.position, q.records, q.unread_to) == ("crc_mismatch", 0, 1, None)
    assert struct.unpack(">hh", q.key) == (0, 0)
    items = list(read_batches(data, source="ctl", offsets_partition=-1,
                              policy=ReadPolicy(replay_corrupt_batches=True)))
    assert isinstance(items[0], ReadProblem) and items[0].kind == "crc_mismatch" and items[0].position == 0
    assert items[0].records == 0  # evidence beside the replayed records
    hdr, recs = items[1]
    assert hdr.is_control and not hdr.crc_valid and len(recs) == 1
    version, ctype = struct.unpack(">hh", recs[0].key)
    assert (version, ctype) == (0, 0)  # ABORT
    assert len(items) == 2


def test_kafka_python_corrupt_vectors(kp_vectors):
    by = {c["name"]: bytes.fromhex(c["hex"]) for c in kp_vectors["corrupt_vectors"]}
    assert list(read_batches(by["empty"], source="e", offsets_partition=-1)) == []
    (p,) = read_batches(by["three_bytes"], source="t", offsets_partition=-1)
    assert p.kind == "zero_tail" and p.position == 0
    # 15 bytes: <= 17 left → Kafka's reader stops (no header to frame); ours reports a torn tail at 0
    (p,) = read_batches(by["offset3_len3_random"], source="r", offsets_partition=-1)
    assert p.kind == "torn_tail" and p.position == 0
    # once it can be framed, a size of 3 < 14 is Kafka's CorruptRecordException
    (p,) = read_batches(by["offset3_len3_random"] + b"\x01" * 8, source="r", offsets_partition=-1)
    assert p.kind == "unframeable" and p.position == 0 and p.offset == 3
    assert (p.unread_to, p.records) == (len(by["offset3_len3_random"]) + 8, 0)


# ---------------------------------------------------------------------------------------------------------------
# damaged real segments
# ---------------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def real_segment(realdata) -> bytes:
    return max(_realdata_logs(realdata, "seg_DanielMorales9_kafkafun"), key=lambda p: p.stat().st_size).read_bytes()


def test_torn_tail_keeps_records_before(real_segment):
    clean, _ = _items(list(read_batches(real_segment, source="s", offsets_partition=0)))
    assert len(clean) > 3
    cut_batch = clean[len(clean) // 2][0]
    cut = cut_batch.position + cut_batch.size // 2
    batches, problems = _items(list(read_batches(real_segment[:cut], source="s", offsets_partition=0)))
    assert batches == clean[: len(clean) // 2]
    assert [(p.kind, p.position) for p in problems] == [("torn_tail", cut_batch.position)]
    # a tail shorter than a header
    cut2 = cut_batch.position + 10
    batches, problems = _items(list(read_batches(real_segment[:cut2], source="s", offsets_partition=0)))
    assert batches == clean[: len(clean) // 2]
    assert [(p.kind, p.position) for p in problems] == [("torn_tail", cut_batch.position)]


def test_zero_filled_tail(real_segment, tmp_path):
    f = tmp_path / "00000000000000000000.log"
    f.write_bytes(real_segment + b"\x00" * 4096)
    items = list(read_batches_from_file(f, offsets_partition=0))
    batches, problems = _items(items)
    assert [(p.kind, p.position) for p in problems] == [("zero_tail", len(real_segment))]
    assert items[-1] is problems[0]
    assert sum(len(r) for _, r in batches) == sum(
        len(r) for _, r in _items(list(read_batches(real_segment, source="s", offsets_partition=0)))[0])


def test_flipped_value_byte_is_crc_mismatch_and_rest_reads(real_segment):
    clean, _ = _items(list(read_batches(real_segment, source="s", offsets_partition=0)))
    hdr, recs = clean[2]
    data = bytearray(real_segment)
    data[hdr.position + hdr.size - 3] ^= 0xFF  # inside the last record's value bytes
    items = list(read_batches(bytes(data), source="s", offsets_partition=0))
    batches, problems = _items(items)
    # not state: one quarantine row per record of the batch, each with its offset, bytes and the batch position
    assert [(p.kind, p.position, p.records, p.offset, p.key) for p in problems] == [
        ("crc_mismatch", hdr.position, 1, r.offset, r.key) for r in recs]
    assert batches == clean[:2] + clean[3:]
    items = list(read_batches(bytes(data), source="s", offsets_partition=0,
                              policy=ReadPolicy(replay_corrupt_batches=True)))
    batches, problems = _items(items)
    assert [(p.kind, p.position) for p in problems] == [("crc_mismatch", hdr.position)]
    assert len(batches) == len(clean)
    bad_hdr, bad_recs = batches[2]
    assert not bad_hdr.crc_valid and len(bad_recs) == len(recs)
    assert batches[:2] == clean[:2] and batches[3:] == clean[3:]


def test_flipped_record_length_is_corrupt_batch_and_reading_continues(real_segment):
    clean, _ = _items(list(read_batches(real_segment, source="s", offsets_partition=0)))
    hdr, recs = clean[1]
    data = bytearray(real_segment)
    data[hdr.position + 61] = 0x7E  # first record's length varint: 63 ≠ real length
    batches, problems = _items(list(read_batches(bytes(data), source="s", offsets_partition=0)))
    # the CRC fails and the records do not parse: the header's count is unverified, so the batch counts no
    # records and its bytes are reported unread
    (corrupt,) = problems
    assert (corrupt.kind, corrupt.position, corrupt.records) == ("crc_mismatch", hdr.position, 0)
    assert corrupt.unread_to == hdr.position + hdr.size
    assert f"byte {hdr.position + 61}" in corrupt.reason
    assert batches == [clean[0]] + clean[2:]


def test_unknown_magic_and_short_v2_batch():
    good = write_record_batch([(b"k", b"v", 5)], 7)
    bad = bytearray(good)
    bad[16] = 9
    items = list(read_batches(bytes(bad) + good, source="m", offsets_partition=1))
    assert isinstance(items[0], ReadProblem) and items[0].kind == "unknown_magic" and "magic 9" in items[0].reason
    assert items[0].unread_to == len(good)
    assert items[1][1][0].offset == 7
    short = struct.pack(">qi", 4, 20) + bytes([0, 0, 0, 0, 2]) + b"\x00" * 15
    (p,) = read_batches(short, source="m", offsets_partition=1)
    assert p.kind == "unframeable" and p.offset == 4 and p.unread_to == len(short)


def test_corrupt_compressed_section_is_decompress_failed():
    good = write_record_batch([(b"k", b"v" * 100, 5)], 0, codec="gzip")
    bad = bytearray(good)
    bad[70:80] = b"\xAA" * 10
    items = list(read_batches(bytes(bad) + good, source="g", offsets_partition=1))
    (p,) = [i for i in items if isinstance(i, ReadProblem)]
    assert p.kind == "crc_mismatch" and "cannot decompress gzip" in p.reason and p.unread_to == len(bad)
    assert items[-1][1][0].value == b"v" * 100


# ---------------------------------------------------------------------------------------------------------------
# semantics the brokerdata does not show: LogAppendTime, empty, control, sequence wrap, legacy compression
# ---------------------------------------------------------------------------------------------------------------
def test_log_append_time_overrides_record_timestamps():
    buf = write_record_batch([(b"a", b"1", 100), (b"b", b"2", 200)], 10, timestamp_type="LogAppendTime",
                             log_append_time=999)
    ((hdr, recs),) = read_batches(buf, source="x", offsets_partition=0)
    assert hdr.timestamp_type == "LogAppendTime" and hdr.max_timestamp == 999
    assert [r.timestamp for r in recs] == [999, 999]


def test_delete_horizon_timestamps_are_base_plus_delta():
    buf = write_record_batch([(b"a", None, 100), (b"b", None, 150)], 0, delete_horizon_ms=5000)
    ((hdr, recs),) = read_batches(buf, source="x", offsets_partition=0)
    assert hdr.delete_horizon_ms == 5000 == hdr.base_timestamp
    assert [r.timestamp for r in recs] == [100, 150]


def test_empty_batch_yields_header_without_records():
    buf = write_empty_batch(40, 44, producer_id=7, producer_epoch=1, is_transactional=True)
    ((hdr, recs),) = read_batches(buf, source="x", offsets_partition=0)
    assert recs == [] and hdr.records_count == 0 and hdr.base_offset == 40 and hdr.last_offset == 44
    assert hdr.producer_id == 7 and hdr.is_transactional and hdr.crc_valid


def test_control_batch_records_as_is():
    buf = write_control_batch(1, 3, 55, 42, 2, 1234)
    ((hdr, recs),) = read_batches(buf, source="x", offsets_partition=0)
    assert hdr.is_control and hdr.is_transactional and hdr.producer_id == 42 and hdr.base_sequence == -1
    assert recs[0].key == b"\x00\x00\x00\x01" and recs[0].value == b"\x00\x00\x00\x00\x00\x03"
    assert recs[0].offset == 55 and recs[0].sequence == -1


def test_sequence_wraps_at_int32_max():
    buf = write_record_batch([(b"a", b"1", 1), (b"b", b"2", 1), (b"c", b"3", 1)], 0,
                             base_sequence=2**31 - 2, producer_id=5, producer_epoch=0)
    ((_, recs),) = read_batches(buf, source="x", offsets_partition=0)
    assert [r.sequence for r in recs] == [2**31 - 2, 2**31 - 1, 0]


def test_first_offset_in_batch_after_compaction_gap():
    buf = write_record_batch([(b"a", b"1", 1), (b"b", b"2", 1)], 100, offset_deltas=[3, 7])
    ((hdr, recs),) = read_batches(buf, source="x", offsets_partition=0)
    assert hdr.base_offset == 100 and hdr.last_offset == 107
    assert [r.offset for r in recs] == [103, 107]
    assert {r.first_offset_in_batch for r in recs} == {103}


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4"])
def test_legacy_v1_wrapper_relative_offsets_and_log_append_time(codec):
    recs_in = [(b"k1", b"v1", 10), (b"k2", None, 20), (None, b"v3", 30)]
    buf = write_record_batch(recs_in, 500, magic=1, codec=codec, offset_deltas=[0, 2, 5])
    ((hdr, recs),) = read_batches(buf, source="x", offsets_partition=0)
    assert (hdr.base_offset, hdr.last_offset, hdr.codec, hdr.magic) == (500, 505, codec, 1)
    assert [(r.offset, r.key, r.value, r.timestamp) for r in recs] == [
        (500, b"k1", b"v1", 10), (502, b"k2", None, 20), (505, None, b"v3", 30)]
    assert {r.first_offset_in_batch for r in recs} == {500}
    lat = write_record_batch(recs_in, 500, magic=1, codec=codec, timestamp_type="LogAppendTime",
                             log_append_time=77)
    ((hdr, recs),) = read_batches(lat, source="x", offsets_partition=0)
    assert hdr.timestamp_type == "LogAppendTime" and [r.timestamp for r in recs] == [77, 77, 77]


def test_legacy_v0_wrapper_absolute_offsets():
    buf = write_record_batch([(b"k", b"v", 0), (b"k", b"w", 0)], 900, magic=0, codec="gzip", offset_deltas=[0, 4])
    ((hdr, recs),) = read_batches(buf, source="x", offsets_partition=0)
    assert [r.offset for r in recs] == [900, 904] and hdr.timestamp_type == "NoTimestampType"
    assert all(r.timestamp == -1 for r in recs)


def test_legacy_v1_wrapper_offset_zero_means_base_zero():
    """librdkafka wrote wrapper offset 0 on produce: inner relative offsets are then taken as they are."""
    buf = bytearray(write_record_batch([(b"k", b"v", 0), (b"k", b"w", 0)], 0, magic=1, codec="gzip",
                                       offset_deltas=[0, 1]))
    struct.pack_into(">q", buf, 0, 0)
    ((hdr, recs),) = read_batches(bytes(buf), source="x", offsets_partition=0)
    assert [r.offset for r in recs] == [0, 1]


# ---------------------------------------------------------------------------------------------------------------
# never crashes
# ---------------------------------------------------------------------------------------------------------------
def _drain(buf: bytes):
    """The reader turns every defect into a ReadProblem: not even a typed DecodeError escapes it."""
    for item in read_batches(buf, source="fuzz", offsets_partition=0):
        if isinstance(item, ReadProblem):
            assert item.kind and 0 <= item.position <= len(buf)
        else:
            hdr, recs = item
            assert len(recs) == hdr.records_count or hdr.magic < 2


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=400))
def test_random_bytes_never_crash(data):
    _drain(data)


_SAMPLE = (write_record_batch([(b"key", b"value", 1)], 0)
           + write_record_batch([(b"k2", b"v" * 50, 2), (b"k3", None, 3)], 1, codec="gzip")
           + write_record_batch([(b"k4", b"x" * 30, 4)], 3, codec="lz4")
           + write_record_batch([(b"k5", b"y" * 30, 4)], 4, codec="snappy")
           + write_record_batch([(b"k6", b"z" * 30, 4)], 5, codec="zstd")
           + write_record_batch([(b"k7", b"z", 4), (b"k8", b"q", 5)], 6, magic=1, codec="snappy")
           + write_record_batch([(b"k9", b"z", 4)], 8, magic=0, codec="lz4")
           + write_control_batch(0, 1, 9, 3, 0, 10))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, len(_SAMPLE) - 1), st.integers(0, 255)), min_size=1, max_size=6),
       st.integers(0, len(_SAMPLE)))
def test_mutated_segments_never_crash(mutations, cut):
    data = bytearray(_SAMPLE)
    for pos, val in mutations:
        data[pos] = val
    _drain(bytes(data[:cut]))
    _drain(bytes(data))


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_mutated_real_segment_never_crashes(real_segment, data):
    buf = bytearray(real_segment[:4000])
    for _ in range(data.draw(st.integers(1, 5))):
        buf[data.draw(st.integers(0, len(buf) - 1))] = data.draw(st.integers(0, 255))
    _drain(bytes(buf))
