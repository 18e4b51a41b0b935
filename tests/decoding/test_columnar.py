"""Differential tests: `columnar.decode_segment_to_arrow` == the reference path, row for row.

Reference = `read_batches_from_file` -> `to_decoded_row` / `problem_to_row` -> `rows_to_arrow`. Every test runs
against the pure-Python walk and, when it is built, the `_fastdecode` C extension (which hands what it
leaves to the Python walk).
"""
from __future__ import annotations

import glob
import os
import random
import re
import struct
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipelines.decoding import columnar
from pipelines.decoding.consumer_protocol import write_assignment, write_subscription
from pipelines.decoding.batch_writer import write_control_batch, write_empty_batch, write_record_batch
from pipelines.decoding.batches import read_batches_from_file
from pipelines.decoding.message_writer import (
    write_group_metadata_key,
    write_group_metadata_value,
    write_group_record_key,
    write_group_record_value,
    write_offset_commit_key,
    write_offset_commit_value,
)
from pipelines.decoding.messages import GROUP_RECORD_SCHEMAS
from pipelines.decoding.rows import problem_to_row, rows_to_arrow, to_decoded_row
from schemas.decoded import DECODED_RECORD_SCHEMA
from schemas.records import LOG_APPEND_TIME, ReadProblem

WALKERS = ["python"] + (["c"] if columnar.HAVE_C_EXTENSION else [])
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def reference(path, partition: int, start_position: int = 0) -> list[dict]:
    rows = []
    for item in read_batches_from_file(path, offsets_partition=partition, start_position=start_position):
        if isinstance(item, ReadProblem):
            rows.append(problem_to_row(item))
        else:
            rows.extend(to_decoded_row(r) for r in item[1])
    return rows_to_arrow(rows).to_pylist() if rows else []


def fast(path, partition: int, walker: str, batch_rows: int = 20000) -> list[dict]:
    out, last_position = [], None
    for b in columnar.decode_segment_to_arrow(path, offsets_partition=partition, batch_rows=batch_rows,
                                              use_c=walker == "c"):
        assert b.schema == DECODED_RECORD_SCHEMA
        b.validate(full=True)  # the sparse columns are made from buffers (`columnar._scatter`)
        # whole log batches, never an empty chunk; a chunk closes once it reaches batch_rows, so only its last log
        # batch takes it over, and no log batch straddles two chunks
        positions = b.column("batch_position").to_pylist()
        assert positions and positions[0] != last_position
        assert positions.index(positions[-1]) < batch_rows
        last_position = positions[-1]
        out.extend(b.to_pylist())
    return out


def assert_same(path, partition: int, walker: str, batch_rows: int = 20000) -> int:
    exp = reference(path, partition)
    got = fast(path, partition, walker, batch_rows)
    assert len(got) == len(exp), path
    for i, (a, b) in enumerate(zip(exp, got)):
        assert a == b, (path, i, {k: (a[k], b[k]) for k in a if a[k] != b[k]})
    return len(exp)


def partition_of(path: str) -> int:
    m = re.search(r"-(\d+)$", os.path.basename(os.path.dirname(path)))
    return int(m.group(1)) if m else 0


# ---------------------------------------------------------------------------------------------- real data
@pytest.mark.parametrize("walker", WALKERS)
def test_realdata_segments(realdata, walker):
    logs = sorted(glob.glob(str(realdata / "seg_*" / "**" / "*.log"), recursive=True))
    if not logs:
        pytest.skip("no realdata segments")
    for p in logs:
        assert_same(p, partition_of(p), walker)
        assert_same(p, partition_of(p), walker, batch_rows=3)


@pytest.mark.parametrize("walker", WALKERS)
def test_brokerdata_segments(brokerdata, walker):
    logs = sorted(glob.glob(str(brokerdata / "*" / "data" / "**" / "*.log"), recursive=True))
    if not logs:
        pytest.skip("no brokerdata segments")
    for p in logs:
        assert_same(p, partition_of(p), walker)


# ---------------------------------------------------------------------------------------------- generated
TS = 1_700_000_000_000
TOPIC_ID = "AAECAwQFBgcICQoLDA0ODw"


def oc(group="g", topic="t", partition=0, *, version=3, offset=42, metadata="", ts=TS, key_type=1, **kw):
    return (write_offset_commit_key(group, topic, partition, key_type=key_type),
            write_offset_commit_value(version, offset=offset, metadata=metadata, commit_timestamp=ts, **kw), ts)


def tomb(group="g", topic="t", partition=0, ts=TS):
    return (write_offset_commit_key(group, topic, partition), None, ts)


def gm(group="g", ts=TS):
    member = dict(member_id="m-1", client_id="c", client_host="/h", rebalance_timeout_ms=300000,
                  session_timeout_ms=10000, subscription=b"\x00\x00\x00\x00\x00\x00", assignment=b"")
    return (write_group_metadata_key(group),
            write_group_metadata_value(3, protocol_type="consumer", generation=3, protocol="range", leader="m-1",
                                       current_state_timestamp=ts, members=[member]), ts)


def mixed_records(rng: random.Random, n: int) -> list:
    out = []
    for i in range(n):
        r = rng.random()
        g, t, p = f"grp-{rng.randrange(4)}", f"topic-{rng.randrange(3)}", rng.randrange(3)
        ts = TS + i * rng.randrange(1, 70000)
        if r < 0.5:
            out.append(oc(g, t, p, version=rng.choice([0, 1, 2, 3, 4]), offset=rng.randrange(1 << 45),
                          metadata=rng.choice(["", "", "meta", "ünï", "x" * 200]), ts=ts,
                          leader_epoch=rng.randrange(-1, 9), expire_timestamp=rng.choice([-1, ts + 5]),
                          topic_id=rng.choice([None, TOPIC_ID]), key_type=rng.choice([1, 1, 0])))
        elif r < 0.65:
            out.append(tomb(g, t, p, ts))
        elif r < 0.75:
            out.append(gm(g, ts))
        elif r < 0.8:
            out.append((struct.pack(">h", 99) + b"whatever", b"\x00\x00zz", ts))  # unknown type
        elif r < 0.85:
            k, v, _ = oc(g, t, p)
            out.append((k, struct.pack(">h", 7) + v[2:], ts))  # unknown value version
        elif r < 0.9:
            k, v, _ = oc(g, t, p)
            out.append((k, v[:-3], ts))  # truncated value
        elif r < 0.93:
            out.append((k[:-1] if (k := oc(g, t, p)[0]) else k, oc()[1], ts))  # truncated key
        elif r < 0.96:
            out.append((None, oc()[1], ts))  # no key
        else:
            k = write_offset_commit_key(g, t, p)
            bad = struct.pack(">hqh", 3, 5, 2) + b"\xff\xfe" + struct.pack(">q", ts)  # invalid UTF-8 metadata
            out.append((k, bad[:2] + bad[2:10] + struct.pack(">i", 0) + bad[10:], ts))
    return out


def build_log(rng: random.Random, n_batches: int) -> bytes:
    out = bytearray()
    offset = 0
    pid = 1000
    for _ in range(n_batches):
        kind = rng.random()
        if kind < 0.6:
            n = rng.randrange(1, 12)
            recs = mixed_records(rng, n)
            codec = rng.choice(CODECS)
            txn = rng.random() < 0.15
            kw = {}
            if rng.random() < 0.15:
                kw = dict(timestamp_type=LOG_APPEND_TIME, log_append_time=TS + 999)
            if rng.random() < 0.1:
                kw["delete_horizon_ms"] = TS - 5
            if rng.random() < 0.2:
                kw["offset_deltas"] = sorted(rng.sample(range(n * 3), n))
            out += write_record_batch(recs, offset, codec=codec, base_sequence=rng.choice([-1, 0, 0x7FFFFFFE]),
                                      producer_id=pid if txn else -1, producer_epoch=2 if txn else -1,
                                      is_transactional=txn, **kw)
            offset += 3 * n
        elif kind < 0.7:
            out += write_control_batch(rng.choice([0, 1]), rng.randrange(50), offset, pid, 2, TS)
            offset += 1
        elif kind < 0.75:
            # control record of another type, and a malformed marker
            key = struct.pack(">hh", 0, rng.choice([2, 3, 77]))
            val = rng.choice([b"\x00\x00\x00\x00\x00\x05", None, b"\x00"])
            out += write_record_batch([(key, val, TS)], offset, is_control=True, is_transactional=True,
                                      producer_id=pid, producer_epoch=1)
            offset += 1
        elif kind < 0.8:
            out += write_empty_batch(offset, offset + 4, producer_id=pid, producer_epoch=1)
            offset += 5
        elif kind < 0.85:
            recs = [oc(offset=i) for i in range(rng.randrange(1, 4))]
            out += write_record_batch(recs, offset, codec="none", headers=[[("h", b"v")]] * len(recs))
            offset += len(recs)
        elif kind < 0.95:
            magic = rng.choice([0, 1])
            codec = rng.choice(["none", "gzip", "snappy", "lz4"])
            recs = [oc(offset=i, version=rng.choice([1, 3])) for i in range(rng.randrange(1, 4))] + [tomb()]
            out += write_record_batch(recs, offset, magic=magic, codec=codec)
            offset += len(recs)
        else:
            blob = bytearray(write_record_batch(mixed_records(rng, 3), offset, codec=rng.choice(CODECS)))
            i = rng.randrange(len(blob))
            blob[i] ^= 1 << rng.randrange(8)  # flipped bit anywhere: CRC mismatch / bad framing / bad header
            out += blob
            offset += 3
    return bytes(out)


def write_tmp(tmp_path: Path, data: bytes, name: str = "00000000000000000000.log") -> Path:
    d = tmp_path / "__consumer_offsets-7"
    d.mkdir(exist_ok=True)
    p = d / name
    p.write_bytes(data)
    return p


@pytest.mark.parametrize("walker", WALKERS)
@pytest.mark.parametrize("codec", CODECS)
def test_every_codec(tmp_path, walker, codec):
    recs = [oc("g1", "t1", i, offset=100 + i) for i in range(15)] + [tomb("g1", "t1", 3)]
    data = b"".join(write_record_batch(recs, 16 * i, codec=codec, base_sequence=0) for i in range(40))
    assert assert_same(write_tmp(tmp_path, data), 7, walker) == 40 * 16


@pytest.mark.parametrize("walker", WALKERS)
@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_value_versions(tmp_path, walker, version):
    recs = [oc(version=version, metadata=m, leader_epoch=5, expire_timestamp=TS + 1, topic_id=tid)
            for m in ("", "m", "ünïcode") for tid in (None, TOPIC_ID)]
    assert assert_same(write_tmp(tmp_path, write_record_batch(recs, 0)), 7, walker) == len(recs)


@pytest.mark.parametrize("walker", WALKERS)
def test_any_negative_length_of_a_nullable_field_is_null(tmp_path, walker):
    """Kafka's generated readers (and the Struct schemas before them) test `length < 0` for a nullable string,
    bytes or array: a GroupMetadataValue whose protocol and leader lengths are -2 and -3, and a member whose
    subscription's userData length is -5, load as nulls. They were `undecodable_value` rows (or, for userData, a
    subscription of no known topics): records a broker loads, not state here."""
    subscription = (b"\x00\x00" + b"\x00\x00\x00\x01" + b"\x00\x02t1" + b"\xff\xff\xff\xff")  # v0, ["t1"], null
    member = dict(member_id="m-1", client_id="c", client_host="/h", rebalance_timeout_ms=300000,
                  session_timeout_ms=10000, subscription=subscription, assignment=b"")
    value = write_group_metadata_value(1, protocol_type="consumer", generation=3, protocol=None, leader=None,
                                       members=[member])
    at = 2 + 2 + len("consumer") + 4  # version, protocol type, generation: then protocol's and leader's lengths
    assert value[at:at + 4] == b"\xff\xff\xff\xff"
    odd = bytearray(value[:at] + b"\xff\xfe\xff\xfd" + value[at + 4:])
    odd[odd.rindex(b"\xff\xff\xff\xff") + 3] = 0xfb  # userData's length, -1, as -5
    key = write_group_metadata_key("g")
    rows = {}
    for name, v in (("canonical", value), ("odd", bytes(odd))):
        (tmp_path / name).mkdir()
        path = write_tmp(tmp_path / name, write_record_batch([(key, v, TS)], 0))
        assert_same(path, 7, walker)
        [rows[name]] = fast(path, 7, walker)
    assert rows["odd"]["error_kind"] is None, rows["odd"]["error"]
    assert (rows["odd"]["protocol"], rows["odd"]["leader"]) == (None, None)
    assert [m["subscribed_topics"] for m in rows["odd"]["members"]] == [["t1"]]
    differ = {k for k in rows["odd"] if rows["odd"][k] != rows["canonical"][k]}
    assert differ == {"source", "members"}  # the file, and the member's raw subscription bytes
    assert [{k: v for k, v in m.items() if k != "subscription"} for m in rows["odd"]["members"]] == \
        [{k: v for k, v in m.items() if k != "subscription"} for m in rows["canonical"]["members"]]


@pytest.mark.parametrize("walker", WALKERS)
def test_special_batches(tmp_path, walker):
    data = (write_record_batch([oc(), gm(), tomb()], 0)
            + write_control_batch(1, 7, 3, 555, 1, TS)
            + write_control_batch(0, 8, 4, 556, 1, TS)
            + write_record_batch([oc(offset=9)], 5, producer_id=555, producer_epoch=1, is_transactional=True,
                                 base_sequence=0)
            + write_empty_batch(6, 9)
            + write_record_batch([oc(), oc(version=1)], 10, timestamp_type=LOG_APPEND_TIME, log_append_time=TS + 7)
            + write_record_batch([oc(), tomb()], 12, delete_horizon_ms=TS - 100)
            + write_record_batch([oc(), tomb()], 14, magic=0)
            + write_record_batch([oc(), tomb()], 16, magic=1, codec="gzip")
            + write_record_batch([oc(), tomb()], 18, magic=0, codec="snappy")
            + write_record_batch([oc()], 20, headers=[[("k", None)]]))
    p = write_tmp(tmp_path, data)
    n = assert_same(p, 7, walker)
    assert n >= 15
    assert_same(p, 7, walker, batch_rows=1)


@pytest.mark.parametrize("walker", WALKERS)
def test_offsets_and_times_past_a_long_wrap_as_javas(tmp_path, walker):
    # Kafka sums a batch's base and each record's delta in long arithmetic: a crafted batch at the end of the range
    # wraps to negative offsets, in C, in Python and in the reference alike; no log position is negative, so the
    # batch is one `negative_offset` row standing for its three records (`offset_order`)
    import crc32c

    end = (1 << 63) - 1
    late = bytearray(write_record_batch([oc(ts=TS), oc(ts=TS + 1), oc(ts=TS + 2)], end - 1))
    struct.pack_into(">q", late, 27, end - 1)  # baseTimestamp: the third record's is past a long too
    struct.pack_into(">I", late, 17, crc32c.crc32c(bytes(late[21:])))
    p = write_tmp(tmp_path, write_record_batch([oc()], 0) + bytes(late) + write_record_batch([oc()], 5))
    assert assert_same(p, 7, walker) == 3
    rows = fast(p, 7, walker)
    assert [(r["offset"], r["error_kind"], r["error_records"]) for r in rows] == [
        (0, None, None), (end - 1, "negative_offset", 3), (5, None, None)]
    assert f"batch [{end - 1}, {-end - 1}] (its records' offsets {-end - 1} to {end})" in rows[1]["error"]


@pytest.mark.parametrize("walker", WALKERS)
@pytest.mark.parametrize("codec", ["none", "zstd"])
def test_batches_whose_offsets_are_negative_or_go_back_are_one_row_each_not_records(tmp_path, walker, codec):
    """Kafka's log only goes up: a batch at a negative offset, one that does not start above the batches before it
    in its file, or one whose records lie outside its own [base, last] is one row at its byte position standing for
    its records (C, Python and the reference alike), and the header walk's count still balances. Such batches were
    records: a negative offset became state, and one that went back was sorted into place."""
    import crc32c

    from pipelines.frames.decode import count_segment

    outside = bytearray(write_record_batch([oc(), oc()], 30, codec=codec))
    struct.pack_into(">i", outside, 23, 0)  # lastOffsetDelta 0: its second record (offset 31) is past its last
    struct.pack_into(">I", outside, 17, crc32c.crc32c(bytes(outside[21:])))
    entries = [write_record_batch([oc()], 0, codec=codec), write_record_batch([oc(), oc()], -4, codec=codec),
               write_record_batch([oc()], 10, codec=codec), write_record_batch([oc(), tomb()], 5, codec=codec),
               write_empty_batch(7, 7), write_record_batch([oc()], 11, codec=codec), bytes(outside),
               write_record_batch([oc()], 40, codec=codec)]
    p = write_tmp(tmp_path, b"".join(entries))
    assert assert_same(p, 7, walker) == 7
    rows = fast(p, 7, walker)
    at = [sum(map(len, entries[:i])) for i in range(len(entries))]
    assert [(r["batch_position"], r["offset"], r["error_kind"], r["error_records"]) for r in rows] == [
        (at[0], 0, None, None), (at[1], -4, "negative_offset", 2), (at[2], 10, None, None),
        (at[3], 5, "offsets_out_of_order", 2), (at[5], 11, None, None), (at[6], 30, "offsets_out_of_order", 2),
        (at[7], 40, None, None)]
    assert "does not start above offset 10" in rows[3]["error"] and "not within its own range" in rows[5]["error"]
    counted = count_segment(str(p), 7, use_c=walker == "c")[7]["records_in"]
    assert counted == 4 + 6 == sum(r["error_records"] or 1 for r in rows)
    # read from the middle (an incremental run's resume, a range), a batch goes back as it does in the whole file
    for start in at[2:]:
        whole = [r for r in rows if r["batch_position"] >= start]
        assert [r for b in columnar.decode_segment_to_arrow(p, offsets_partition=7, start_position=start,
                                                            use_c=walker == "c") for r in b.to_pylist()] == whole
        assert [r for r in reference(p, 7, start_position=start)] == whole


@pytest.mark.parametrize("walker", WALKERS)
@pytest.mark.parametrize("tail", ["torn", "short", "zero", "small_size", "flip"])
def test_damaged(tmp_path, walker, tail):
    good = b"".join(write_record_batch([oc(offset=i), tomb()], 2 * i, codec=c) for i, c in enumerate(CODECS))
    if tail == "torn":
        data = good + write_record_batch([oc()], 100)[:-5]
    elif tail == "short":
        data = good + b"\x01\x02\x03"
    elif tail == "zero":
        data = good + bytes(4096)
    elif tail == "small_size":
        data = good + struct.pack(">qi", 5, 3) + b"x" * 30
    else:
        data = bytearray(good)
        for i in (30, 70, 200, 333, len(good) - 4):
            data[i] ^= 0x40
        data = bytes(data)
    assert_same(write_tmp(tmp_path, data), 7, walker)


@pytest.mark.parametrize("walker", WALKERS)
def test_every_byte_flipped_in_a_small_log(tmp_path, walker):
    good = (write_record_batch([oc(), tomb(), gm()], 0)
            + write_record_batch([oc(version=4, topic_id=TOPIC_ID)], 3, codec="lz4")
            + write_control_batch(1, 3, 4, 9, 0, TS))
    for i in range(0, len(good), 3):
        data = bytearray(good)
        data[i] ^= 0xFF
        assert_same(write_tmp(tmp_path, bytes(data)), 7, walker)


@pytest.mark.parametrize("walker", WALKERS)
def test_empty_file(tmp_path, walker):
    assert fast(write_tmp(tmp_path, b""), 7, walker) == []


@pytest.mark.parametrize("walker", WALKERS)
def test_random_mixed_logs(tmp_path, walker):
    for seed in range(12):
        p = write_tmp(tmp_path, build_log(random.Random(seed), 60), f"{seed:020d}.log")
        assert_same(p, 7, walker, batch_rows=random.Random(seed).choice([1, 7, 20000]))


@pytest.mark.parametrize("walker", WALKERS)
def test_a_batch_past_2_53_beside_a_damaged_one_keeps_its_exact_offsets(tmp_path, walker):
    """A damaged batch's row has no batch columns; numpy read the batch columns of a window holding one as float64,
    so batches at 2**62 + 105 and 2**62 + 108 after it were checked as two at 2**62, the second not above the
    first: its records were quarantined (`offsets_out_of_order`) where the reference reader and Kafka read them at
    their offsets. The order check now reads the exact offsets."""
    from tests.badinputs import commit, flip_byte

    damaged = write_record_batch([commit("g", 0, 1, 1_700_000_000_000)], 0)
    damaged = flip_byte(damaged, len(damaged) - 1)  # its CRC no longer holds
    base = (1 << 62) + 105
    far = b"".join(write_record_batch([commit("g", p, 10, 1_700_000_000_000) for p in range(3)], base + 3 * i)
                   for i in range(2))
    path = write_tmp(tmp_path, damaged + far)
    assert assert_same(path, 7, walker) == 7
    rows = fast(path, 7, walker)
    assert [r["offset"] for r in rows[1:]] == list(range(base, base + 6))
    assert [r["record_kind"] for r in rows] == ["error"] + ["offset_commit"] * 6


@pytest.mark.parametrize("walker", WALKERS)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(0, 25), cut=st.integers(0, 64), batch_rows=st.integers(1, 50))
def test_property_random_logs(walker, seed, n, cut, batch_rows):
    data = build_log(random.Random(seed), n)
    if cut and data:
        data = data[:-cut]  # often a torn tail
    with tempfile.TemporaryDirectory() as d:
        assert_same(write_tmp(Path(d), data), 7, walker, batch_rows)


def test_c_extension_matches_python_when_built(tmp_path):
    if not columnar.HAVE_C_EXTENSION:
        pytest.skip("_fastdecode not built")
    p = write_tmp(tmp_path, build_log(random.Random(99), 120))
    assert fast(p, 7, "c") == fast(p, 7, "python")


@pytest.mark.parametrize("walker", WALKERS)
def test_a_key_table_shared_by_segments_and_dropped_at_its_bound_gives_each_record_its_own_key(tmp_path, walker,
                                                                                               monkeypatch):
    """A task's segments share one key table, which the Python walk fills and which is dropped whole once it holds
    more than `_KTABLE_MAX` keys: every record still gets its own key, in every segment, however often that happens.
    The C walk reads every record's key from its own bytes: it keeps no key at all."""
    monkeypatch.setattr(columnar, "_KTABLE_MAX", 150)
    rng = random.Random(5)
    keys = columnar.KeyTable()
    held = []
    for n in range(4):
        data, offset = bytearray(), 0
        for _ in range(120):
            recs = [oc(f"g{rng.randrange(60)}", f"t{rng.randrange(7)}", rng.randrange(9), offset=rng.randrange(99))
                    for _ in range(rng.randrange(1, 9))]
            data += write_record_batch(recs, offset, codec=rng.choice(CODECS))
            offset += len(recs)
        path = write_tmp(tmp_path, bytes(data), f"{n * 10_000:020d}.log")
        got = []
        for b in columnar.decode_segment_to_arrow(path, offsets_partition=7, batch_rows=40, use_c=walker == "c",
                                                  keys=keys):
            got.extend(b.to_pylist())
            held.append(len(keys.ktable))
        assert got == reference(path, 7)
    if walker == "c":
        assert max(held) == 0
    else:
        assert max(held) > 100 and min(held) < 50  # the keys came back after each drop


def fallbacks(monkeypatch, walker: str = "c") -> list:
    """The calls a decode makes to the reference path (1: a batch, 2: a record) and, in C, to the Python walk (3)."""
    calls = []
    monkeypatch.setattr(columnar, "decode_entry", lambda *a, **k: calls.append(1) or [])
    monkeypatch.setattr(columnar, "to_decoded_row", lambda *a, **k: calls.append(2) or {})
    if walker == "c":
        monkeypatch.setattr(columnar, "_walk_v2", lambda *a, **k: calls.append(3))
    return calls


@pytest.mark.parametrize("walker", WALKERS)
def test_clean_batches_take_the_fast_path(tmp_path, walker, monkeypatch):
    """Guard against a silent fallback: plain offset-commit batches never reach the reference path (nor, with the
    extension, leave C for the Python walk)."""
    calls = fallbacks(monkeypatch, walker)
    recs = [oc("g", "t", i % 3, version=v, ts=TS + 70000 * i) for i, v in enumerate([0, 1, 2, 3, 4] * 3)]
    data = b"".join(write_record_batch(recs + [tomb()], 16 * i, codec=c) for i, c in enumerate(CODECS))
    data += write_control_batch(1, 3, 200, 9, 0, TS)
    rows = fast(write_tmp(tmp_path, data), 7, walker)
    assert calls == [] and len(rows) == 5 * 16 + 1


# ---------------------------------------------------------------------------------------------- classic groups
def _subscription(rng: random.Random) -> bytes:
    version = rng.choice([-1, 0, 1, 2, 3, 5])
    owned = {f"topic-{t}": sorted(rng.sample(range(12), rng.randrange(4))) for t in range(rng.randrange(3))}
    raw = write_subscription(min(max(version, 0), 3), [f"topic-{t}" for t in range(rng.randrange(4))],
                             rng.choice([None, b"", b"ud"]), owned, rng.randrange(-1, 9), rng.choice([None, "r1"]))
    return struct.pack(">h", version) + raw[2:]


def _assignment(rng: random.Random) -> bytes:
    assigned = {f"topic-{t}": sorted(rng.sample(range(12), rng.randrange(5))) for t in range(rng.randrange(4))}
    return write_assignment(rng.choice([0, 1, 3]), assigned, rng.choice([None, b"x"]))


def _damaged(rng: random.Random, raw: bytes) -> bytes:
    """`raw` cut short, grown, with a byte changed, or a length field made odd: what the reference refuses or
    reads leniently (a member's subscription or assignment)."""
    r = rng.random()
    if r < 0.25 and raw:
        return raw[:rng.randrange(len(raw))]
    if r < 0.4:
        return raw + bytes(rng.randrange(1, 4))
    b = bytearray(raw)
    if b:
        i = rng.randrange(len(b))
        b[i] = rng.choice([0x00, 0x7F, 0x80, 0xFF, 0xC3, b[i] ^ 1])
    return bytes(b)


def _spoiled(rng: random.Random, key: bytes, value: bytes, odds: tuple[float, float, float], bad_key) -> tuple:
    """(key, value) of a generated group record, at the cumulative `odds` made a tombstone, given a damaged value
    (`_damaged`), or given a bad key (`bad_key()`); else as they are."""
    r = rng.random()
    if r < odds[0]:
        return key, None
    if r < odds[1]:
        return key, _damaged(rng, value)
    if r < odds[2]:
        return bad_key(), value
    return key, value


def classic_group_records(rng: random.Random, n: int) -> list:
    """GroupMetadata records of every value version (v4 is the reference path's), of "consumer" groups and others,
    members with subscriptions and assignments of every version, and some of each damaged."""
    out = []
    for i in range(n):
        version = rng.choice([0, 1, 2, 3, 3, 4])
        members = [dict(member_id=f"m-{j}", group_instance_id=rng.choice([None, f"i-{j}"]), client_id="c\u00fc",
                        client_host="/10.0.0.1", rebalance_timeout_ms=rng.randrange(-1, 300000),
                        session_timeout_ms=10000,
                        subscription=rng.choice([b"", _subscription(rng), _damaged(rng, _subscription(rng))]),
                        assignment=rng.choice([b"", _assignment(rng), _damaged(rng, _assignment(rng))]))
                   for j in range(rng.randrange(4))]
        value = write_group_metadata_value(version, protocol_type=rng.choice(["consumer", "consumer", "connect", ""]),
                                           generation=rng.randrange(-1, 50), protocol=rng.choice([None, "range"]),
                                           leader=rng.choice([None, "m-0"]), current_state_timestamp=TS + i,
                                           members=members)
        key = write_group_metadata_key(rng.choice(["grp-a", "grp-b", "gr\u00fcp"]))
        key, value = _spoiled(rng, key, value, (0.1, 0.3, 0.35), lambda: key[:-1])
        out.append((key, value, TS + i))
    return out


def test_clean_classic_group_records_stay_in_c(tmp_path, monkeypatch):
    """Guard against a silent fallback: an undamaged GroupMetadata record of v0-v3 never leaves C."""
    if not columnar.HAVE_C_EXTENSION:
        pytest.skip("_fastdecode not built")
    calls = fallbacks(monkeypatch)
    rng = random.Random(5)
    clean = [(write_group_metadata_key("g"), write_group_metadata_value(
        version, protocol_type="consumer", generation=1, protocol="range", leader="m",
        members=[dict(member_id="m", subscription=_subscription(rng), assignment=_assignment(rng))]), TS)
        for version in range(4)]
    data = write_record_batch(clean + [oc(), (write_group_metadata_key("g"), None, TS)], 0, codec="lz4")
    rows = fast(write_tmp(tmp_path, data), 7, "c")
    assert calls == [] and [r["value_version"] for r in rows] == [0, 1, 2, 3, 3, None]


# ---------------------------------------------------------------------------------------------- KIP-848 groups
def _topic_partitions(rng: random.Random) -> list[dict]:
    return [{"topicId": rng.choice([TOPIC_ID, "_-8AAQIDBAUGBwgJCgsMDQ"]),
             "partitions": sorted(rng.sample(range(-1, 40), rng.randrange(6)))} for _ in range(rng.randrange(4))]


def _consumer_group_fields(rng: random.Random, key_type: int) -> dict:
    """Kafka-named fields of a type's value in every layout (a layout's writer takes the names it has)."""
    tps = _topic_partitions
    return {
        3: lambda: {"epoch": rng.randrange(-1, 99), "metadataHash": rng.choice([0, 0, -7, 2**62])},
        4: lambda: {"epoch": 3, "topics": [{"topicId": TOPIC_ID, "topicName": rng.choice(["t", "t\u00fc", ""]),
                                            "numPartitions": rng.randrange(-1, 9),
                                            "partitionMetadata": [{"partition": p, "racks": ["r1", ""][:rng.randrange(3)]}
                                                                  for p in range(rng.randrange(3))]}
                                           for _ in range(rng.randrange(3))]},
        5: lambda: {"instanceId": rng.choice([None, "i-1"]), "rackId": rng.choice([None, "", "rack"]),
                    "clientId": "c\u00fc", "clientHost": "/10.0.0.1",
                    "subscribedTopicNames": ["a", "b"][:rng.randrange(3)],
                    "subscribedTopicRegex": rng.choice([None, "t.*"]), "rebalanceTimeoutMs": rng.randrange(-1, 9999),
                    "serverAssignor": rng.choice([None, "uniform"]), "assignors": [],
                    "classicMemberMetadata": rng.choice([None, {"sessionTimeoutMs": 45000, "supportedProtocols": [
                        {"name": "range", "metadata": b"\x00\x01"}][:rng.randrange(2)]}])},
        6: lambda: {"assignmentEpoch": rng.randrange(-1, 99)},
        7: lambda: {"topicPartitions": tps(rng), "error": 0, "metadataVersion": 0, "metadataBytes": b""},
        8: lambda: {"memberEpoch": rng.randrange(-1, 99), "previousMemberEpoch": rng.randrange(-1, 99),
                    "state": rng.choice([0, 1, -1, 2]), "targetMemberEpoch": 1, "assignedPartitions": tps(rng),
                    "partitionsPendingRevocation": tps(rng), "partitionsPendingAssignment": [], "error": 0,
                    "metadataVersion": 0, "metadataBytes": b""},
        16: lambda: {"topics": ["a", "b\u00fc"][:rng.randrange(3)], "version": rng.randrange(-1, 2**40),
                     "timestamp": TS},
        10: lambda: {"rackId": None, "clientId": "c", "clientHost": "h", "subscribedTopicNames": ["a"]},
    }[key_type]()


def consumer_group_records(rng: random.Random, n: int) -> list:
    """KIP-848 consumer-group records (types 3-8, 16) in the 3.8+ and 3.6/3.7 layouts, with unknown tagged fields,
    tombstones, damaged values and keys, and a share group's record (the reference path's)."""
    out = []
    for i in range(n):
        kt = rng.choice([3, 4, 5, 6, 7, 8, 8, 16, 10])
        layouts = [layout for layout, _ in GROUP_RECORD_SCHEMAS[kt]]
        value = write_group_record_value(kt, _consumer_group_fields(rng, kt), rng.choice(layouts))
        if value.endswith(b"\x01\x00\x01\x00") and rng.random() < 0.5:  # a null ClassicMemberMetadata, then a byte
            value = value[:-4] + b"\x01\x00\x02\x00\x00"
        elif value.endswith(b"\x00") and rng.random() < 0.3:  # unknown tags in the value's tag section, or bad ones
            value = value[:-1] + rng.choice([b"\x02\x05\x01\xaa\x07\x00", b"\x01\x09\x00", b"\x02\x07\x00\x05\x00",
                                             b"\x02\x05\x00\x05\x00", b"\x01\x05\x09\x00"])
        key = write_group_record_key(kt, rng.choice(["grp-a", "gr\u00fcp", ""]), member_id=f"m-{rng.randrange(3)}",
                                     regex="t.*")
        key, value = _spoiled(rng, key, value, (0.15, 0.35, 0.4),
                              lambda: rng.choice([key[:-1], key + b"x", key[:2] + b"\xff\xff" + key[4:]]))
        out.append((key, value, TS + i))
    return out


@pytest.mark.parametrize("walker", WALKERS)
@pytest.mark.parametrize("records", [classic_group_records, consumer_group_records])
@settings(max_examples=70, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 12), codec=st.sampled_from(CODECS))
def test_group_records_read_as_the_reference_reads_them(walker, records, seed, n, codec):
    """A group's value the C walk reads gives the reference's row; one it does not read, the reference's own row or
    error. Classic: GroupMetadata v0-v3, its members' consumer protocol bytes leniently, as `rows._member_dict`.
    KIP-848: v0 in the 3.8+ layout, read whole; the 3.6/3.7 layout, damage or another type is the reference's."""
    rng = random.Random(seed)
    recs = records(rng, n)
    data = write_record_batch(recs, 0, codec=codec) + write_record_batch([oc(), gm()] + recs[:2], n)
    with tempfile.TemporaryDirectory() as d:
        assert_same(write_tmp(Path(d), data), 7, walker)


def test_clean_consumer_group_records_stay_in_c(tmp_path, monkeypatch):
    """Guard against a silent fallback: an undamaged 3.8+ record of types 3-8 and 16, and its tombstone, never
    leave C."""
    if not columnar.HAVE_C_EXTENSION:
        pytest.skip("_fastdecode not built")
    calls = fallbacks(monkeypatch)
    rng = random.Random(3)
    recs = []
    for kt in (3, 4, 5, 6, 7, 8, 16):
        key = write_group_record_key(kt, "g", member_id="m", regex="r.*")
        recs += [(key, write_group_record_value(kt, _consumer_group_fields(rng, kt)), TS), (key, None, TS)]
    rows = fast(write_tmp(tmp_path, write_record_batch(recs + [oc()], 0, codec="zstd")), 7, "c")
    assert calls == [] and [r["layout"] for r in rows] == ["3.8+", None] * 7 + [None]
    assert [r["member_id"] for r in rows[:-1]] == [None] * 4 + ["m"] * 2 + [None] * 2 + ["m"] * 4 + [None] * 2
    assert [r["regex"] for r in rows[-3:]] == ["r.*", "r.*", None]
