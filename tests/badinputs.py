"""Builders of bad `__consumer_offsets` inputs for the rebuild tests: real encoders, one defect each, good records
around it so a test can check both the quarantine row and that what surrounds it still made the snapshot.

Every group name is chosen so that Kafka's partitioner puts it in the offsets partition it is written to
(`partition_for(group, 50)`), so the placement checks of the validation have nothing to say about these inputs.
"""
from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path

from pipelines.decoding import batch_writer as bw
from pipelines.decoding import message_writer as mw
from pipelines.coordinator.partitioner import partition_for

NUM_PARTITIONS = 50
T0 = 1_793_491_200_000  # 2026-11-01T00:00:00Z
TOPIC = "orders"
METADATA = "meta-ok"


def group_in(partition: int, stem: str) -> str:
    """A group id that `partition_for(_, 50)` maps to `partition`."""
    for i in range(100_000):
        g = f"{stem}-{i}"
        if partition_for(g, NUM_PARTITIONS) == partition:
            return g
    raise AssertionError(f"no group for partition {partition}")


def commit(group: str, partition: int, offset: int, ts: int, *, version: int = 3, topic: str = TOPIC):
    """(key, value, timestamp) of an OffsetCommit record."""
    key = mw.write_offset_commit_key(group, topic, partition)
    value = mw.write_offset_commit_value(version, offset=offset, metadata=METADATA, commit_timestamp=ts,
                                         leader_epoch=0 if version >= 3 else -1)
    return key, value, ts


def commit_unknown_version(group: str, partition: int, offset: int, ts: int, version: int = 9):
    """An OffsetCommit whose value says version `version` (a v3 body): Kafka fails the load on it."""
    key, value, ts = commit(group, partition, offset, ts)
    return key, struct.pack(">h", version) + value[2:], ts


def unknown_key_record(key_type: int, ts: int):
    """A record of a key type this topic never carries (Kafka 3.4.1+ skips it with a warning)."""
    key = struct.pack(">h", key_type) + struct.pack(">h", 5) + b"thing"
    return key, b"\x00\x00opaque", ts


def batch(records, base_offset: int) -> bytes:
    return bw.write_record_batch(list(records), base_offset)


def write_segment(part_dir: Path, base_offset: int, data: bytes) -> Path:
    part_dir.mkdir(parents=True, exist_ok=True)
    p = part_dir / f"{base_offset:020d}.log"
    p.write_bytes(data)
    return p


def flip_byte(data: bytes, at: int, mask: int = 0x01) -> bytes:
    return data[:at] + bytes([data[at] ^ mask]) + data[at + 1:]


def set_int32(data: bytes, at: int, value: int) -> bytes:
    return data[:at] + struct.pack(">i", value) + data[at + 4:]


@dataclass
class Expect:
    """What one bad-input kind must produce: the quarantine rows and the good offsets around them."""

    kind: str
    offsets_partition: int | None = None
    group: str | None = None
    source: str | None = None  # a path (a quarantine row's source must equal or contain it)
    reasons: list[str] = field(default_factory=list)  # one substring per expected quarantine row
    positions: list[int] = field(default_factory=list)  # expected byte positions (row numbers for dumps)
    committed: dict[int, int] = field(default_factory=dict)  # topic partition -> committed offset in the snapshot
    absent: list[int] = field(default_factory=list)  # topic partitions that must have no committed offset
    kinds: list[str] = field(default_factory=list)  # expected quarantine kinds (same order as reasons)


def group_record(group: str, ts: int):
    """(key, value, timestamp) of a classic consumer group's GroupMetadata (v3, Empty, generation 1): gives the
    group a live group record, so its offsets are served (`loaded_offsets`) under both semantics."""
    key = mw.write_group_metadata_key(group)
    value = mw.write_group_metadata_value(3, protocol_type="consumer", generation=1, protocol=None, leader=None,
                                          current_state_timestamp=ts, members=[])
    return key, value, ts


def build_combined(root: Path) -> tuple[list[str], dict[str, Expect]]:
    """One log dir + one tabular dump dir holding every kind of bad input beside good data.

    Each offsets partition starts with its group's GroupMetadata record at offset 0; the defect and the good
    commits around it follow. Returns the `--input` paths and, per kind, what the rebuild must produce for it.
    """
    logdir = root / "logs"
    logdir.mkdir(parents=True)
    ex: dict[str, Expect] = {}

    def pdir(n: int) -> Path:
        return logdir / f"__consumer_offsets-{n}"

    def head(g: str) -> bytes:
        return batch([group_record(g, T0)], 0)

    # -- p0: a flipped byte inside a record value -> crc_mismatch; the record still parses but is not state
    #    (rebuild.replay_corrupt_batches is off): one quarantine row at the batch's byte position.
    g = group_in(0, "crc")
    bad = batch([commit(g, 1, 20, T0 + 2)], 2)
    bad = flip_byte(bad, bad.index(METADATA.encode()) + 1)  # "meta-ok" -> "mdta-ok": still decodable
    before = head(g) + batch([commit(g, 0, 10, T0 + 1)], 1)
    seg = write_segment(pdir(0), 0, before + bad + batch([commit(g, 2, 30, T0 + 3)], 3))
    ex["crc_mismatch"] = Expect("crc_mismatch", 0, g, str(seg), ["CRC-32C"], [len(before)], {0: 10, 2: 30},
                                absent=[1], kinds=["crc_mismatch"])

    # -- p1: a garbled entry size (3, below the 14-byte minimum) -> corrupt_batch; reading of that file stops,
    #    the next segment file of the partition is read as usual.
    g = group_in(1, "size")
    bad = set_int32(batch([commit(g, 1, 101, T0 + 2)], 2), 8, 3)
    before = head(g) + batch([commit(g, 0, 100, T0 + 1)], 1)
    seg = write_segment(pdir(1), 0, before + bad)
    write_segment(pdir(1), 6, batch([commit(g, 2, 106, T0 + 6)], 6))
    ex["corrupt_size"] = Expect("corrupt_size", 1, g, str(seg), [f"bytes [{len(before)}, {len(before + bad)})"],
                                [len(before)], {0: 100, 2: 106}, absent=[1], kinds=["unframeable"])

    # -- p8: a garbled recordsCount (7 for 2 records) -> one crc_mismatch for that batch, its bytes unread (the
    #    count is unverified); framing is intact, so the batch after it in the same file is read.
    g = group_in(8, "count")
    bad = set_int32(batch([commit(g, 1, 802, T0 + 2), commit(g, 2, 803, T0 + 2)], 2), 57, 7)
    before = head(g) + batch([commit(g, 0, 801, T0 + 1)], 1)
    seg = write_segment(pdir(8), 0, before + bad + batch([commit(g, 3, 804, T0 + 4)], 4))
    ex["corrupt_count"] = Expect("corrupt_count", 8, g, str(seg), ["batch declares 7 records but holds 2"],
                                 [len(before)], {0: 801, 3: 804}, absent=[1, 2], kinds=["crc_mismatch"])

    # -- p2: a torn tail (the last batch cut in half, as a crash mid-append leaves it)
    g = group_in(2, "torn")
    last = batch([commit(g, 2, 203, T0 + 3)], 3)
    before = head(g) + batch([commit(g, 0, 201, T0 + 1)], 1) + batch([commit(g, 1, 202, T0 + 2)], 2)
    seg = write_segment(pdir(2), 0, before + last[: len(last) // 2])
    ex["torn_tail"] = Expect("torn_tail", 2, g, str(seg), ["runs past the end"], [len(before)], {0: 201, 1: 202},
                             absent=[2], kinds=["torn_tail"])

    # -- p3: an OffsetCommit value of version 9 -> quarantined (Kafka would fail the load); the commits before
    #    and after it are used.
    g = group_in(3, "ver")
    before = head(g) + batch([commit(g, 0, 301, T0 + 1)], 1)
    seg = write_segment(pdir(3), 0, before + batch([commit_unknown_version(g, 0, 999, T0 + 2)], 2)
                        + batch([commit(g, 1, 303, T0 + 3)], 3))
    ex["unknown_version"] = Expect("unknown_version", 3, g, str(seg), ["unknown OffsetCommitValue version 9"],
                                   [len(before)], {0: 301, 1: 303}, kinds=["unknown_version"])

    # -- p4: a record of key type 42 -> skipped with a reason (accounting), never quarantined
    g = group_in(4, "key")
    write_segment(pdir(4), 0, head(g) + batch([commit(g, 0, 401, T0 + 1)], 1)
                  + batch([unknown_key_record(42, T0 + 2)], 2) + batch([commit(g, 1, 403, T0 + 3)], 3))
    ex["unknown_key_type"] = Expect("unknown_key_type", 4, g, None, [], [], {0: 401, 1: 403})

    # -- p5: a 0-byte active segment beside data: normal, nothing to quarantine
    g = group_in(5, "empty")
    write_segment(pdir(5), 0, head(g) + batch([commit(g, 0, 501, T0 + 1)], 1))
    empty = write_segment(pdir(5), 2, b"")
    ex["empty_segment"] = Expect("empty_segment", 5, g, str(empty), [], [], {0: 501})

    # -- p6: unreadable segments: a directory named like a segment, a dangling symlink, a pipe; a readable one
    g = group_in(6, "unread")
    (pdir(6) / f"{0:020d}.log").mkdir(parents=True)
    os.symlink(logdir / "nowhere" / "gone.log", pdir(6) / f"{7:020d}.log")
    write_segment(pdir(6), 3, batch([group_record(g, T0 + 3)], 3) + batch([commit(g, 0, 604, T0 + 4)], 4))
    ex["unreadable_dir"] = Expect("unreadable_dir", 6, g, str(pdir(6) / f"{0:020d}.log"), ["not a regular file"],
                                  [-1], {0: 604}, kinds=["unreadable"])
    ex["unreadable_symlink"] = Expect("unreadable_symlink", 6, g, str(pdir(6) / f"{7:020d}.log"),
                                      ["cannot stat segment"], [-1], {0: 604}, kinds=["unreadable"])
    os.mkfifo(pdir(6) / f"{9:020d}.log")  # a pipe named like a segment: its size is 0, as an empty segment's
    ex["unreadable_pipe"] = Expect("unreadable_pipe", 6, g, str(pdir(6) / f"{9:020d}.log"), ["not a regular file"],
                                   [-1], {0: 604}, kinds=["unreadable"])

    # -- p7: a batch at a negative base offset (crafted: Kafka never writes one) -> negative_offset, its record not
    #    state; the batches after it are read. In a second segment of p7, a batch whose offsets go back below the
    #    batch before it in its file -> offsets_out_of_order: neither replayed in file order (Kafka's loader) nor
    #    sorted into place. (p7: a log dir's partition count is its highest directory + 1, and 10 divides 50.)
    g = group_in(7, "neg")
    before = head(g) + batch([commit(g, 0, 701, T0 + 1)], 1)
    seg = write_segment(pdir(7), 0, before + batch([commit(g, 1, 702, T0 + 2)], -3)
                        + batch([commit(g, 2, 703, T0 + 3)], 3))
    ex["negative_offset"] = Expect("negative_offset", 7, g, str(seg), ["holds a negative offset"], [len(before)],
                                   {0: 701, 2: 703}, absent=[1], kinds=["negative_offset"])
    g = group_in(7, "back")
    before = (batch([group_record(g, T0 + 10)], 10) + batch([commit(g, 0, 711, T0 + 11)], 11)
              + batch([commit(g, 0, 750, T0 + 15)], 15))
    seg = write_segment(pdir(7), 10, before + batch([commit(g, 0, 730, T0 + 13), commit(g, 1, 731, T0 + 13)], 13)
                        + batch([commit(g, 2, 716, T0 + 16)], 16))
    ex["offsets_out_of_order"] = Expect("offsets_out_of_order", 7, g, str(seg), ["does not start above offset 15"],
                                        [len(before)], {0: 750, 2: 716}, absent=[1], kinds=["offsets_out_of_order"])

    # -- another internal topic's partition dir beside the offsets partitions: reported, not read; a data topic's is
    # read for its log's bounds (LAG), never quarantined
    txn = logdir / "__transaction_state-3"
    write_segment(txn, 0, batch([(b"txn-id", b"\x00\x01state", T0)], 0))
    orders = logdir / "orders-0"
    write_segment(orders, 0, batch([(None, b"order-1", T0)], 0))
    ex["not_offsets_txn"] = Expect("not_offsets_txn", -1, None, str(txn), ["partition directory of another topic"],
                                   [-1], kinds=["not_offsets_data"])
    ex["data_topic_orders"] = Expect("data_topic_orders", -1, None, str(orders), [], [], kinds=[])

    # -- p9: a tabular dump in two part files that disagree on offset 2 (and repeat offset 3 identically)
    dumps = root / "dump"
    dumps.mkdir()
    g = group_in(9, "dup")
    rows_a = [group_record(g, T0), commit(g, 0, 901, T0 + 1), commit(g, 1, 902, T0 + 2), commit(g, 2, 903, T0 + 3)]
    rows_b = [commit(g, 1, 9999, T0 + 2), commit(g, 2, 903, T0 + 3)]
    write_kafka_source_parquet(dumps / "part-0000.parquet", 9, [0, 1, 2, 3], rows_a)
    write_kafka_source_parquet(dumps / "part-0001.parquet", 9, [2, 3], rows_b)
    # the conflicting row is row 4 of the dump (the first of part-0001, after part-0000's four rows); row 5, repeating
    # row 3, is a duplicate_row
    ex["duplicate_conflict"] = Expect("duplicate_conflict", 9, g, str(dumps), ["appears twice with different content",
                                                                              "rows 5-5: the records of partition 9"],
                                      [4, 5], {0: 901, 1: 902, 2: 903}, kinds=["duplicate_conflict", "duplicate_row"])
    return [str(logdir), str(dumps)], ex


def write_kafka_source_parquet(path: Path, partition: int, offsets: list[int], records) -> None:
    """Rows as the Spark Kafka source gives them (key, value, topic, partition, offset, timestamp, timestampType)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({
        "key": pa.array([k for k, _v, _t in records], pa.binary()),
        "value": pa.array([v for _k, v, _t in records], pa.binary()),
        "topic": pa.array(["__consumer_offsets"] * len(records)),
        "partition": pa.array([partition] * len(records), pa.int32()),
        "offset": pa.array(offsets, pa.int64()),
        "timestamp": pa.array([t for _k, _v, t in records], pa.timestamp("ms", tz="UTC")),
        "timestampType": pa.array([0] * len(records), pa.int32()),
    })
    pq.write_table(table, path)


def torn_only(root: Path) -> Path:
    """A small log dir whose only defect is a torn tail at offset 2 of partition 2 (for `--strict`)."""
    g = group_in(2, "strict")
    last = batch([commit(g, 2, 2, T0 + 2)], 2)
    write_segment(root / "__consumer_offsets-2", 0, batch([commit(g, 0, 0, T0)], 0)
                  + batch([commit(g, 1, 1, T0 + 1)], 1) + last[: len(last) // 2])
    return root


def parse_summary(stdout: str) -> dict:
    """The `--json` summary: the last line of stdout that parses as a JSON object."""
    for line in reversed(stdout.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            return json.loads(line)
    raise AssertionError(f"no JSON summary in output:\n{stdout[-2000:]}")


def clean_small(root: Path) -> tuple[Path, str]:
    """A tiny healthy log dir: partition 0 with its group record and five commits (offsets 0-5)."""
    g = group_in(0, "clean")
    write_segment(root / "__consumer_offsets-0", 0,
                  batch([group_record(g, T0)], 0)
                  + b"".join(batch([commit(g, i, 100 + i, T0 + i + 1)], i + 1) for i in range(5)))
    return root, g


def real_and_damaged_inputs(shared_dir: Path, tmp_path: Path, brokers: int | None = None) -> list[Path]:
    """Broker data dirs (the first `brokers`, all when None), six real segment dirs, and a small log whose last batch
    is torn and followed by a garbage tail; [] when ../shared holds fewer than two real inputs."""
    inputs = sorted(shared_dir.glob("brokerdata/*/data"))[:brokers]
    inputs += sorted({p.parent.parent for p in shared_dir.glob("realdata/**/__consumer_offsets-*/*.log")})[:6]
    if len(inputs) < 2:
        return []
    damaged, _g = clean_small(tmp_path / "damaged")
    seg = next(damaged.rglob("*.log"))
    seg.write_bytes(seg.read_bytes()[:-7] + b"\xff" * 40)
    return inputs + [damaged]


# ---------------------------------------------------------------------------------------------- attacks on real data
REAL_PARTITION_DIR = "realdata/seg_DanielMorales9_kafkafun/data/kafka/__consumer_offsets-13"
REAL_PARTITION_DIR_2 = "realdata/seg_DanielMorales9_kafkafun/data/kafka/__consumer_offsets-39"


@dataclass
class Flipped:
    """A real segment with one bit flipped inside the committed offset of its newest commit for one key."""

    data: bytes
    batch_position: int
    record_offset: int
    group: str
    topic: str
    partition: int
    good_offset: int
    corrupt_offset: int


def flip_committed_offset(data: bytes, bit: int = 28) -> Flipped:
    """Flip `bit` of the committed offset (OffsetCommitValue v1/v3 bytes 2-9) of the last commit in `data` that
    is the newest of its (group, topic, partition) and sits in an uncompressed batch: the offset a reader would
    serve. Bit 28 turns 1010 into 268436466."""
    from pipelines.decoding.batches import read_batches
    from pipelines.decoding.rows import to_decoded_row
    from schemas.records import ReadProblem

    newest: dict[tuple, tuple] = {}
    for item in read_batches(data, source="x", offsets_partition=0):
        if isinstance(item, ReadProblem):
            continue
        hdr, recs = item
        for rec in recs:
            row = to_decoded_row(rec)
            if row["record_kind"] != "offset_commit":
                continue
            key = (row["group_id"], row["topic"], row["partition"])
            newest[key] = (hdr, rec, row)
    for (group, topic, part), (hdr, rec, row) in sorted(newest.items(), key=lambda kv: -kv[1][1].offset):
        if hdr.codec != "none" or row["is_tombstone"] or row["value_version"] not in (1, 3):
            continue
        at = data.find(rec.value, hdr.position, hdr.position + hdr.size)
        if at < 0 or data.find(rec.value, at + 1, hdr.position + hdr.size) >= 0:
            continue
        byte = at + 2 + (7 - bit // 8)
        flipped = flip_byte(data, byte, 1 << (bit % 8))
        return Flipped(flipped, hdr.position, rec.offset, group, topic, part, row["committed_offset"],
                       row["committed_offset"] ^ (1 << bit))
    raise AssertionError("no uncompressed offset commit to flip")


def entry_positions(data: bytes) -> list[int]:
    """Byte positions of the entries of an intact segment."""
    out, pos = [], 0
    while pos + 17 <= len(data):
        (size,) = struct.unpack_from(">i", data, pos + 8)
        if size < 14 or pos + 12 + size > len(data):
            break
        out.append(pos)
        pos += 12 + size
    return out


def records_before(data: bytes, position: int) -> int:
    """Records of the batches of an intact segment that start before `position`."""
    from pipelines.decoding.batches import read_batches
    from schemas.records import ReadProblem

    return sum(len(it[1]) for it in read_batches(data[:position], source="x", offsets_partition=0)
               if not isinstance(it, ReadProblem))


def zstd_bomb_segment(uncompressed: int = 256 << 20) -> bytes:
    """One magic 2 batch, one record whose zstd-compressed value is `uncompressed` zero bytes: a few KB on disk.
    The record section is compressed by the real codec; the batch's CRC is valid."""
    import crc32c

    from pipelines.decoding import codecs

    value_len = uncompressed - 16
    def varint(n: int) -> bytes:
        z = (n << 1) ^ (n >> 63)
        out = bytearray()
        while True:
            b = z & 0x7F
            z >>= 7
            if z:
                out.append(b | 0x80)
            else:
                out.append(b)
                return bytes(out)
    body = b"\x00" + varint(0) + varint(0) + varint(-1) + varint(value_len)
    rec_len = len(body) + value_len + 1
    head = varint(rec_len) + body
    import cramjam
    comp = cramjam.zstd.Compressor()
    comp.compress(head)
    chunk = bytes(1 << 20)
    left = value_len
    while left:
        n = min(left, len(chunk))
        comp.compress(chunk[:n])
        left -= n
    comp.compress(b"\x00")
    section = bytes(comp.finish())
    assert codecs.ZSTD == 4
    after_crc = struct.pack(">hiqqqhii", 4, 0, T0, T0, -1, -1, -1, 1) + section
    crc = crc32c.crc32c(after_crc)
    batch = struct.pack(">qiib", 0, 9 + len(after_crc), 0, 2) + struct.pack(">I", crc) + after_crc
    return batch


# Odd log dirs a broker's loader reads by offset (`decoding.overlaps`): the local tests of that reading and the ones
# that upload the same dirs to an object store (`tests/integration/test_s3_inputs.py`) build them here.
def overlapping_files(root: Path) -> tuple[Path, Path]:
    """Two files of partition 0 both holding offset 1, with different commits: the log dir and the second file."""
    g = group_in(0, "overlap")
    part = root / "__consumer_offsets-0"
    write_segment(part, 0, batch([commit(g, 0, 10, T0)], 0) + batch([commit(g, 0, 20, T0 + 1)], 1))
    copy = write_segment(part, 1, batch([commit(g, 0, 77, T0 + 1)], 1) + batch([commit(g, 1, 30, T0 + 2)], 2))
    return root, copy


def interleaved_files(root: Path) -> tuple[Path, Path]:
    """A holds offsets 0 and 2, B (base 1) 1 and 3: the log dir and B."""
    g = group_in(0, "interleaved")
    part = root / "__consumer_offsets-0"
    write_segment(part, 0, batch([commit(g, 0, 10, T0)], 0) + batch([commit(g, 2, 20, T0 + 2)], 2))
    b = write_segment(part, 1, batch([commit(g, 1, 11, T0 + 1)], 1) + batch([commit(g, 3, 33, T0 + 3)], 3))
    return root, b


def copies_in_two_log_dirs(root: Path) -> tuple[list[Path], Path]:
    """Partition 0's segment of base offset 0 in two log dirs, the second a longer copy: the log dirs and the
    shorter copy."""
    g = group_in(0, "two-dirs")
    older = batch([commit(g, 0, 10, T0)], 0)
    short = write_segment(root / "b1" / "__consumer_offsets-0", 0, older)
    write_segment(root / "b2" / "__consumer_offsets-0", 0, older + batch([commit(g, 0, 20, T0 + 1)], 1))
    return [root / "b1", root / "b2"], short


def log_start_inside_first_segment(root: Path) -> tuple[Path, Path]:
    """A log dir whose `log-start-offset-checkpoint` puts partition 0's log start at 2, inside its only segment of
    commits at offsets 0-3: the log dir and the segment."""
    g = group_in(0, "log-start")
    seg = write_segment(root / "__consumer_offsets-0", 0, b"".join(
        batch([commit(g, p, 10 * (o + 1), T0 + o)], o) for o, p in enumerate((0, 1, 1, 2))))
    (root / "log-start-offset-checkpoint").write_text("0\n2\n__consumer_offsets 0 2\nother 0 7\n")
    return root, seg


def offsets_topics_of_two_ids(root: Path) -> Path:
    """A log dir whose `__consumer_offsets-0` and `-1` name two topic ids in their `partition.metadata` (a recreated
    offsets topic, or another cluster's partition dir copied in)."""
    for p, topic_id in ((0, "lEtGfS1_Si-I8Vl7ExUY6g"), (1, "jGxhuB3FQUWVdY1V5Sl7jg")):
        g = group_in(p, "recreated")
        part = root / f"__consumer_offsets-{p}"
        write_segment(part, 0, batch([commit(g, 0, 10, T0)], 0))
        (part / "partition.metadata").write_text(f"version: 0\ntopic_id: {topic_id}\n")
    return root


def data_topic_of_two_ids(root: Path) -> list[Path]:
    """Two log dirs holding `orders-0` under different topic ids (`partition.metadata`: a deleted topic's stray copy
    beside its successor's) and `clicks-0` under one, with their high watermarks (orders 9 and 20) and no data
    segments, as a broker's log dir copied for its offsets: the log dirs, the first holding a commit on each."""
    dirs = [root / "broker-1", root / "broker-2"]
    g = group_in(0, "two-topic-ids")
    commits = [commit(g, 0, 5, T0), commit(g, 0, 7, T0, topic="clicks")]
    write_segment(dirs[0] / "__consumer_offsets-0", 0, batch(commits, 0))
    for log_dir, end, topic_id in zip(dirs, (9, 20), ("lEtGfS1_Si-I8Vl7ExUY6g", "Zm9vYmFyYmF6cXV4cXV1eA")):
        for topic, tid in (("orders", topic_id), ("clicks", "Y2xpY2tzY2xpY2tzY2xpYw")):
            (log_dir / f"{topic}-0").mkdir(parents=True)
            (log_dir / f"{topic}-0" / "partition.metadata").write_text(f"version: 0\ntopic_id: {tid}\n")
        (log_dir / "replication-offset-checkpoint").write_text(f"0\n2\norders 0 {end}\nclicks 0 {end}\n")
    return dirs
