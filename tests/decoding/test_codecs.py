"""Codecs: real Kafka 4.0 compressed sections, framing quirks (xerial, LZ4 header checksum), round trips."""
from __future__ import annotations

import gzip
import struct

import cramjam
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from pipelines.decoding import codecs
from pipelines.decoding.batch_writer import _legacy_message
from pipelines.decoding.batches import read_batches_from_file
from pipelines.decoding.codecs import compress, decompress, xxhash32
from pipelines.decoding.errors import CorruptBatchError
from schemas.records import ReadProblem

CODECS = {"gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def test_xxhash32_reference_vectors():
    # reference values from the xxHash project (XXH32, seed 0 / seed 1)
    assert xxhash32(b"") == 0x02CC5D05
    assert xxhash32(b"a") == 0x550D7456
    assert xxhash32(b"abc") == 0x32D153FF
    assert xxhash32(b"Nobody inspects the spammish repetition") == 0xE2293B2F
    assert xxhash32(b"", 1) == 0x0B2CB792


@pytest.mark.parametrize("codec", sorted(CODECS))
def test_real_kafka_sections_decompress_and_recompress(brokerdata, codec):
    """Take every compressed record section Kafka 4.0 wrote, decompress it with the codec alone, and check that
    our own compression of the result decompresses to the same bytes."""
    logs = sorted(p for p in (brokerdata / f"compression-{codec}/data").glob("*/*.log") if p.stat().st_size)
    n = 0
    for p in logs:
        data = p.read_bytes()
        for item in read_batches_from_file(p, offsets_partition=0):
            assert not isinstance(item, ReadProblem)
            hdr, recs = item
            if hdr.codec != codec:
                continue
            section = data[hdr.position + 61: hdr.position + hdr.size]
            plain = decompress(CODECS[codec], section, magic=2)
            assert len(plain) >= sum(len(r.key) + len(r.value or b"") for r in recs)
            assert recs[-1].key in plain
            assert decompress(CODECS[codec], compress(CODECS[codec], plain, magic=2), magic=2) == plain
            if codec == "snappy":
                assert section.startswith(codecs.XERIAL_MAGIC)  # Kafka writes xerial framing
            if codec == "lz4":
                assert section[4:6] == b"\x60\x40"  # FLG/BD as Lz4BlockOutputStream writes them
            n += 1
    assert n >= 60


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=70_000), st.sampled_from(sorted(CODECS)), st.sampled_from([0, 1, 2]))
def test_round_trip_every_codec_and_magic(data, codec, magic):
    cid = CODECS[codec]
    if cid == 4 and magic < 2:
        with pytest.raises(CorruptBatchError):
            compress(cid, data, magic=magic)
        return
    assert decompress(cid, compress(cid, data, magic=magic), magic=magic) == data


def test_lz4_magic0_header_checksum_quirk():
    """Magic 0: Kafka writes HC over magic+FLG+BD and never checks it; magic 1/2 verify the correct HC."""
    data = b"consumer offsets " * 300
    v0 = compress(3, data, magic=0)
    v1 = compress(3, data, magic=1)
    assert v0[:6] == v1[:6] and v0[7:] == v1[7:]
    assert v0[6] == (xxhash32(v0[:6]) >> 8) & 0xFF  # the broken one
    assert v1[6] == (xxhash32(v1[4:6]) >> 8) & 0xFF
    assert v0[6] != v1[6]
    assert decompress(3, v0, magic=0) == data
    assert decompress(3, v1, magic=0) == data  # not verified for magic 0
    with pytest.raises(CorruptBatchError, match="checksum"):
        decompress(3, v0, magic=1)
    assert decompress(3, v1, magic=2) == data


def _lz4_frame(blocks: list[bytes], *, content_size: int | None, block_checksum: bool, content_checksum: bool,
               bd: int = 0x40) -> bytes:
    flg = 0x60 | (0x10 if block_checksum else 0) | (0x08 if content_size is not None else 0) | (
        0x04 if content_checksum else 0)
    desc = bytes((flg, bd)) + (struct.pack("<Q", content_size) if content_size is not None else b"")
    out = struct.pack("<I", 0x184D2204) + desc + bytes(((xxhash32(desc) >> 8) & 0xFF,))
    for b in blocks:
        packed = bytes(cramjam.lz4.compress_block(b, store_size=False))
        out += struct.pack("<I", len(packed)) + packed
        if block_checksum:
            out += struct.pack("<I", xxhash32(packed))
    out += b"\x00\x00\x00\x00"
    if content_checksum:
        out += struct.pack("<I", xxhash32(b"".join(blocks)))
    return out


def test_lz4_accepts_content_size_and_checksums():
    blocks = [b"a" * 1000 + bytes(range(256)), b"tail" * 50]
    frame = _lz4_frame(blocks, content_size=sum(map(len, blocks)), block_checksum=True, content_checksum=True,
                       bd=0x70)
    assert decompress(3, frame, magic=2) == b"".join(blocks)


def test_lz4_block_is_not_read_as_size_prefixed():
    """A frame's block has no size prefix. The magic-0 message set [(None, None, 0)] compresses to a block that
    starts 16 00 01 00 (65558 as a uint32): cramjam, not told the output size, read that as a prefix when the
    per-thread scratch held it (a 4 MiB block max here) and returned the block's last 15 bytes."""
    inner = _legacy_message(0, 0, 0, 0, None, None)
    packed = bytes(cramjam.lz4.compress_block(inner, store_size=False))
    assert len(inner) == 26 and struct.unpack_from("<I", packed)[0] <= 1 << 22  # looks like a size prefix
    for bd in (0x70, 0x40):  # 4 MiB first: the scratch is then at least that large for the 64 KiB frame too
        frame = _lz4_frame([inner], content_size=None, block_checksum=False, content_checksum=False, bd=bd)
        assert decompress(3, frame, magic=0) == inner
        assert decompress(3, frame, magic=2) == inner


def test_lz4_block_larger_than_the_block_max_is_corrupt():
    """Kafka decompresses each block into a buffer of the frame's block max: more is an error, not more data."""
    big = _lz4_frame([b"z"], content_size=None, block_checksum=False, content_checksum=False, bd=0x70)
    assert decompress(3, big, magic=2) == b"z"  # this thread's scratch buffer now holds 4 MiB
    frame = _lz4_frame([b"z" * ((1 << 16) + 1)], content_size=None, block_checksum=False, content_checksum=False)
    with pytest.raises(CorruptBatchError, match="lz4"):
        decompress(3, frame, magic=2)


def test_lz4_uncompressed_block_flag():
    payload = bytes(range(256)) * 4
    frame = (struct.pack("<I", 0x184D2204) + b"\x60\x40" + bytes(((xxhash32(b"\x60\x40") >> 8) & 0xFF,))
             + struct.pack("<I", len(payload) | 0x80000000) + payload + b"\x00" * 4)
    assert decompress(3, frame, magic=2) == payload


@pytest.mark.parametrize("frame,msg", [
    (b"\x04\x22\x4d\x18", "truncated"),
    (b"\x00\x22\x4d\x18\x60\x40\x82\x00\x00\x00\x00", "magic"),
    (b"\x04\x22\x4d\x18\xa0\x40\x82\x00\x00\x00\x00", "FLG"),
    (b"\x04\x22\x4d\x18\x60\x40\x83\x00\x00\x00\x00", "checksum"),
    (b"\x04\x22\x4d\x18\x60\x40\x82\x05\x00\x00\x00abc", "block size 5"),
])
def test_lz4_bad_frames(frame, msg):
    with pytest.raises(CorruptBatchError, match=msg):
        decompress(3, frame, magic=2)


def test_lz4_missing_end_mark_and_oversized_block():
    good = compress(3, b"x" * 5000, magic=2)
    with pytest.raises(CorruptBatchError, match="end mark"):
        decompress(3, good[:-4], magic=2)
    big = bytearray(good)
    struct.pack_into("<I", big, 7, 70_000)
    with pytest.raises(CorruptBatchError):
        decompress(3, bytes(big), magic=2)


def test_snappy_raw_block_fallback_and_le_version_ints():
    data = b"offsets" * 1000
    assert decompress(2, compress(2, data, magic=2, snappy_framing="raw"), magic=2) == data
    # a producer writing the xerial version ints little-endian: only the magic matters
    raw = bytes(cramjam.snappy.compress_raw(data))
    le = codecs.XERIAL_MAGIC + struct.pack("<ii", 1, 1) + struct.pack(">i", len(raw)) + raw
    assert decompress(2, le, magic=1) == data


def test_snappy_xerial_multi_block_and_concatenated_streams():
    data = bytes(range(256)) * 400  # > 32 KiB → several blocks
    framed = compress(2, data, magic=2)
    assert framed.count(b"\x82SNAPPY\x00") == 1
    assert decompress(2, framed, magic=2) == data
    assert decompress(2, framed + framed, magic=2) == data + data


def test_snappy_bad_block_length():
    framed = bytearray(compress(2, b"abc" * 100, magic=2))
    struct.pack_into(">i", framed, 16, 10_000)
    with pytest.raises(CorruptBatchError, match="overruns"):
        decompress(2, bytes(framed), magic=2)


def test_gzip_concatenated_members_and_truncation():
    a, b = b"first member ", b"second member"
    assert decompress(1, gzip.compress(a) + gzip.compress(b), magic=1) == a + b
    with pytest.raises(CorruptBatchError):
        decompress(1, gzip.compress(a * 100)[:-12], magic=2)


def test_zstd_frame_without_content_size():
    c = cramjam.zstd.Compressor()
    c.compress(b"streamed " * 1000)
    frame = bytes(c.finish())
    assert frame[4] & 0xC0 == 0 and not frame[4] & 0x20  # no Frame_Content_Size field
    assert decompress(4, frame, magic=2) == b"streamed " * 1000


def _zstd_frame(data: bytes) -> bytes:
    c = cramjam.zstd.Compressor()  # as zstd-jni's stream writes it: no content size
    c.compress(data)
    return bytes(c.finish())


@settings(max_examples=100, deadline=None)
@given(st.lists(st.binary(max_size=3000), min_size=1, max_size=3), st.binary(max_size=8), st.integers(0, 12))
def test_zstd_reads_what_a_fresh_context_reads(parts, tail, cut):
    """The reused context's one-frame path and the general path agree on every input: one frame, several,
    trailing bytes, a truncated frame (the same bytes, or the same error)."""
    data = b"".join(_zstd_frame(p) for p in parts) + tail
    data = data[:len(data) - cut] if cut < len(data) else data

    def general(buf):
        # room for all of it: the parts are at most 9,000 bytes, and 8 bytes of tail can't hold a frame (a 9-byte
        # RLE block is the smallest that expands); the cap's 64 MiB buffer, zeroed per example, took most of the time
        out = bytearray(1 << 20)
        try:
            return bytes(memoryview(out)[:cramjam.zstd.decompress_into(buf, out)])
        except cramjam.DecompressionError:
            return CorruptBatchError

    try:
        got = decompress(4, data, magic=2)
    except CorruptBatchError:
        got = CorruptBatchError
    assert got == general(data)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from([b"", b"\x00" * 200_000, b"kafka offsets " * 900]) | st.binary(max_size=2000),
                min_size=1, max_size=4).map(b"".join),
       st.booleans(), st.booleans(), st.binary(max_size=6))
@example(b"\x00" * 200_000, False, False, b"")  # a compressed block, then an RLE one
def test_zstd_frame_end_is_where_the_decompressor_stops(data, checksum, content_size, tail):
    """A frame's end read from its block headers is where libzstd's streaming reader stops (its unused data
    begins), whatever the frame holds: raw, RLE and compressed blocks, several blocks, a checksum, a content
    size or none; a frame cut short has no end."""
    import zstandard

    frame = zstandard.ZstdCompressor(write_checksum=checksum, write_content_size=content_size).compress(data)
    reader = zstandard.ZstdDecompressor().decompressobj()
    assert reader.decompress(frame + tail) == data
    assert reader.unused_data == tail
    assert codecs._zstd_frame_end(frame + tail) == len(frame)
    assert codecs._zstd_frame_end(frame[:-1]) is None


def test_zstd_frame_claiming_a_huge_content_size_is_not_allocated():
    """A frame header may claim any content size (here 327 GB, from a mutated segment): nothing is allocated from
    the claim; the section is corrupt."""
    claim = b"(\xb5/\xfd\xd0'\x85\x00\x00PL\x00\x00\x00\x04k6<z\x00\x01\x0078\x02"
    with pytest.raises(CorruptBatchError):
        decompress(4, claim, magic=2)


def test_zstd_one_frame_past_the_cap_is_too_large_unread():
    from pipelines.decoding.errors import DecompressionTooLargeError

    bomb = _zstd_frame(bytes(5_000_000))
    assert len(bomb) < 1000
    with pytest.raises(DecompressionTooLargeError):
        decompress(4, bomb, magic=2, max_bytes=1 << 20)
    assert decompress(4, bomb, magic=2, max_bytes=5_000_000) == bytes(5_000_000)


def test_zstd_not_valid_for_legacy_and_unknown_codec():
    with pytest.raises(CorruptBatchError, match="zstd"):
        decompress(4, compress(4, b"x", magic=2), magic=1)
    with pytest.raises(CorruptBatchError, match="unknown compression codec id 6"):
        decompress(6, b"x", magic=2)


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 4), st.binary(max_size=200), st.sampled_from([0, 1, 2]))
def test_garbage_raises_only_corrupt_batch_error(cid, data, magic):
    try:
        decompress(cid, data, magic=magic)
    except CorruptBatchError:
        pass
