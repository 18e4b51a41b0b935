"""The C decoder's codecs (`_fastdecode.decompress`: the machine's zlib, liblz4, libzstd, and its own snappy)
against the reference, `codecs.decompress`: a section C takes has the reference's bytes, a section the reference
refuses C leaves to it, and the sections Kafka writes C takes."""
from __future__ import annotations

import gzip
import struct
import zlib

import cramjam
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from pipelines.decoding import codecs
from pipelines.decoding.batches import read_batches_from_file
from pipelines.decoding.errors import CorruptBatchError

fastdecode = pytest.importorskip("pipelines.decoding._fastdecode")

GZIP, SNAPPY, LZ4, ZSTD = codecs.GZIP, codecs.SNAPPY, codecs.LZ4, codecs.ZSTD
NATIVE = (GZIP, SNAPPY, LZ4, ZSTD)
LIMIT = codecs.DEFAULT_MAX_BATCH_BYTES


@pytest.fixture(autouse=True, scope="module")
def _libraries():
    missing = [c for c in NATIVE if c not in fastdecode.native_codecs()]
    if missing:  # the decoder then leaves these codecs to Python: nothing of theirs to compare
        pytest.skip(f"no system library for codecs {missing} on this machine")


def reference(codec: int, data: bytes, limit: int = LIMIT) -> bytes | None:
    try:
        return codecs.decompress(codec, data, magic=2, max_bytes=limit)
    except CorruptBatchError:  # DecompressionTooLargeError and BadCodecError are kinds of it
        return None


def agrees(codec: int, data: bytes, limit: int = LIMIT) -> bytes | None:
    """C's result, asserted to be the reference's or left to it."""
    native = fastdecode.decompress(codec, data, limit)
    if native is not None:
        assert native == reference(codec, data, limit)
    return native


def lz4_frame(blocks: list[bytes], *, flg: int = 0x60, bd: int = 0x40, content_size: int | None = None,
              stored: bool = False, block_checksum: bool = False, tail: bytes = b"") -> bytes:
    descriptor = bytes((flg | (0x08 if content_size is not None else 0) | (0x10 if block_checksum else 0), bd))
    if content_size is not None:
        descriptor += struct.pack("<Q", content_size)
    out = struct.pack("<I", codecs.LZ4_MAGIC) + descriptor + bytes(((codecs.xxhash32(descriptor) >> 8) & 0xFF,))
    size = codecs.LZ4_BLOCK_SIZES[(bd >> 4) & 7]
    for b in (piece[i:i + size] for piece in blocks for i in range(0, len(piece), size)):
        packed = b if stored else bytes(cramjam.lz4.compress_block(b, store_size=False))
        out += struct.pack("<I", len(packed) | (codecs.LZ4_UNCOMPRESSED_MASK if stored else 0)) + packed
        out += b"\xde\xad\xbe\xef" if block_checksum else b""
    return out + b"\x00\x00\x00\x00" + tail


def sections(data: bytes) -> list[tuple[int, bytes, bool]]:
    """The shapes each codec's writers give a section of `data` (Kafka's, and other producers'), each with whether
    C takes it (else the reference reads it)."""
    out = [(c, codecs.compress(c, data, magic=2), True) for c in NATIVE]
    unsized = zstandard.ZstdCompressor(write_content_size=False, write_checksum=True).compress(data)
    xerial = codecs.compress(SNAPPY, data, magic=2)
    out += [
        (SNAPPY, codecs.compress(SNAPPY, data, magic=2, snappy_framing="raw"), True),
        (SNAPPY, xerial * 2, True),  # two streams, the second's header read past
        (SNAPPY, xerial + codecs.XERIAL_MAGIC[:5], False),  # a torn block length

        (GZIP, gzip.compress(data[: len(data) // 2]) + gzip.compress(data[len(data) // 2:]), True),  # two members
        (GZIP, gzip.compress(data, mtime=0) + b"\x00", False),  # trailing garbage: refused
        (LZ4, lz4_frame([data[:100], data[100:]], content_size=len(data), block_checksum=True), True),
        (LZ4, lz4_frame([data], stored=True, bd=0x50), True),
        (LZ4, lz4_frame([data], tail=b"\x01\x02\x03\x04"), True),  # a content checksum after the end mark
        (ZSTD, unsized, len(data) <= max(1 << 16, 16 * len(unsized))),  # else it needs more than one buffer
        (ZSTD, zstandard.ZstdCompressor().compress(data), True),  # with its size
        (ZSTD, zstandard.ZstdCompressor().compress(data) * 2, False),  # two frames: the reference's
        (ZSTD, zstandard.ZstdCompressor().compress(data) + b"\x00", False),  # refused
    ]
    return out


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=5000) | st.sampled_from([b"", b"\x00" * 300_000, b"offsets " * 40_000]))
def test_every_shape_of_section_gives_the_reference_bytes(data):
    for codec, section, taken in sections(data):
        assert (agrees(codec, section) is not None) == taken


@settings(max_examples=300, deadline=None)
@given(st.binary(min_size=1, max_size=3000), st.data())
def test_damaged_sections_are_left_to_the_reference_or_read_as_it_reads_them(data, draw):
    codec, section, _ = draw.draw(st.sampled_from(sections(data)))
    buf = bytearray(section)
    for _ in range(draw.draw(st.integers(1, 3))):
        buf[draw.draw(st.integers(0, len(buf) - 1))] ^= draw.draw(st.integers(1, 255))
    cut = draw.draw(st.integers(0, len(buf)))
    agrees(codec, bytes(buf))
    agrees(codec, bytes(buf[:cut]))


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(NATIVE), st.binary(max_size=300))
def test_garbage_is_left_to_the_reference(codec, data):
    assert agrees(codec, data) is None or reference(codec, data) is not None


@pytest.mark.parametrize("codec", NATIVE)
def test_the_cap_on_decompressed_bytes_is_the_references(codec):
    data = b"kafka offsets " * 20_000
    section = codecs.compress(codec, data, magic=2)
    assert agrees(codec, section, len(data)) == data
    assert agrees(codec, section, len(data) - 1) is None
    with pytest.raises(codecs.DecompressionTooLargeError):
        codecs.decompress(codec, section, magic=2, max_bytes=len(data) - 1)


@pytest.mark.parametrize("codec", NATIVE)
def test_what_kafka_writes_is_read_in_c(codec):
    data = b"".join(struct.pack(">hi", 1, i) + b"group-%d" % i for i in range(3000))
    for part in (data[:150], data):
        assert agrees(codec, codecs.compress(codec, part, magic=2)) == part


def test_a_zstd_frame_claiming_more_than_the_cap_is_not_allocated():
    frame = zstandard.ZstdCompressor().compress(b"x" * 1000)
    assert agrees(ZSTD, frame, 999) is None


def test_a_zstd_frame_of_no_stated_size_past_the_cap_is_left_to_the_reference():
    frame = zstandard.ZstdCompressor(write_content_size=False).compress(b"x" * 1000)
    assert agrees(ZSTD, frame, 1000) == b"x" * 1000
    assert agrees(ZSTD, frame, 999) is None


@pytest.mark.parametrize("descriptor,read", [(0x50, True), (0x88, True), (0x89, False), (0xF8, False)])
def test_a_zstd_window_past_the_streaming_limit_is_left_to_the_reference(descriptor, read):
    """A frame (one raw byte, its checksum) whose window descriptor claims more than 2^27 + 1 bytes: the streaming
    decoders Kafka and the reference read with refuse it, though its content is one byte (found by the property
    above: C's one-shot call read it)."""
    frame = b"\x28\xb5\x2f\xfd\x04" + bytes((descriptor,)) + b"\x09\x00\x00\x00" + b"\x68\x27\x05\xdb"
    assert agrees(ZSTD, frame) == (b"\x00" if read else None)
    assert (reference(ZSTD, frame) is not None) is read


@pytest.mark.parametrize("flg,bd", [(flg, bd) for flg in (0x60, 0x40, 0x20, 0xA0, 0x61, 0x62, 0x64)
                                    for bd in range(0, 0x100, 0x10)] + [(0x60, 0x41), (0x60, 0xC0)])
def test_every_lz4_frame_descriptor_is_read_as_the_reference_reads_it(flg, bd):
    """Each descriptor with its right checksum: the block sizes Kafka knows (64 KiB - 4 MiB) read, the rest and
    the reserved bits refused, as the reference does."""
    frame = struct.pack("<I", codecs.LZ4_MAGIC) + bytes((flg, bd, (codecs.xxhash32(bytes((flg, bd))) >> 8) & 0xFF))
    frame += struct.pack("<I", 9 | codecs.LZ4_UNCOMPRESSED_MASK) + b"offsets !" + bytes(4)
    taken = agrees(LZ4, frame)
    assert (taken is not None) == (reference(LZ4, frame) is not None)


@pytest.mark.parametrize("stored", [True, False])
def test_an_lz4_block_past_its_frames_block_max_is_refused(stored):
    block = bytes(range(256)) * 257  # 65,792 bytes: past the 64 KiB of BD 0x40
    packed = block if stored else bytes(cramjam.lz4.compress_block(block, store_size=False))
    header = struct.pack("<I", codecs.LZ4_MAGIC) + bytes((0x60, 0x40, (codecs.xxhash32(b"\x60\x40") >> 8) & 0xFF))
    frame = header + struct.pack("<I", len(packed) | (codecs.LZ4_UNCOMPRESSED_MASK if stored else 0)) + packed
    assert agrees(LZ4, frame + bytes(4)) is None


def test_a_wrong_lz4_header_checksum_is_the_references_error():
    frame = bytearray(lz4_frame([b"offsets" * 50]))
    frame[6] ^= 0xFF
    assert agrees(LZ4, bytes(frame)) is None
    with pytest.raises(CorruptBatchError, match="descriptor checksum"):
        codecs.decompress(LZ4, bytes(frame), magic=2)


def test_real_kafka_sections_are_read_in_c(brokerdata):
    """Every compressed section a Kafka 4.0 broker wrote, of the codecs C reads: taken, with the reference's
    bytes."""
    n = 0
    for name, codec in (("gzip", GZIP), ("snappy", SNAPPY), ("lz4", LZ4), ("zstd", ZSTD)):
        for p in sorted(p for p in (brokerdata / f"compression-{name}/data").glob("*/*.log") if p.stat().st_size):
            data = p.read_bytes()
            for hdr, _ in read_batches_from_file(p, offsets_partition=0):
                if hdr.codec == name:
                    section = data[hdr.position + 61: hdr.position + hdr.size]
                    assert agrees(codec, section) is not None
                    n += 1
    assert n >= 60


def _raw(declared: int, *elements: bytes) -> bytes:
    out = bytearray()
    while True:  # the length as a varint
        out.append(declared & 0x7F | (0x80 if declared > 0x7F else 0))
        declared >>= 7
        if not declared:
            return bytes(out) + b"".join(elements)


LIT = b"\x0cabcd"  # a literal of 4 bytes
SNAPPY_BLOCKS = [
    (_raw(4, LIT), True),
    (_raw(12, LIT, b"\x11\x04"), True),  # a copy of 8 from 4 back, overlapping what it writes (tag 1)
    (_raw(9, LIT, b"\x12\x04\x00"), True),  # tag 2: 5 from 4 back
    (_raw(9, LIT, b"\x13\x04\x00\x00\x00"), True),  # tag 3
    (_raw(70, b"\xf0\x45" + bytes(range(70))), True),  # a literal's length in the byte after its tag (60)
    (_raw(70, b"\xf4\x45\x00" + bytes(range(70))), True),  # ... in two bytes (61)
    (_raw(70, b"\xfc\x45\x00\x00\x00" + bytes(range(70))), True),  # ... in four (63)
    (_raw(12, LIT, b"\x11\x00"), False),  # a copy from 0 back
    (_raw(12, LIT, b"\x11\x05"), False),  # from before the start
    (_raw(11, LIT, b"\x11\x04"), False),  # past the declared length
    (_raw(13, LIT, b"\x11\x04"), False),  # short of it
    (_raw(4, LIT, b"\x00"), False),  # a literal after the end
    (_raw(5, b"\x10abcd"), False),  # a literal past the input
    (_raw(12, LIT, b"\x11"), False),  # a torn copy
    (_raw(4, b"\xfc\xff\xff"), False),  # a torn literal length
    (b"\xff\xff\xff\xff\x7f" + LIT, False),  # a length past 32 bits
    (b"\xff\xff\xff\xff\xff\x01", False),  # a length of six bytes
    (b"", False),
]


@pytest.mark.parametrize("block,taken", SNAPPY_BLOCKS)
def test_each_snappy_element_is_read_as_the_reference_reads_it(block, taken):
    assert (agrees(SNAPPY, block) is not None) == taken
    framed = codecs.XERIAL_MAGIC + bytes(8) + struct.pack(">i", len(block)) + block
    assert (agrees(SNAPPY, framed) is not None) == taken


def test_gzip_members_are_read_to_the_end():
    data = b"offsets " * 1000
    two = zlib.compress(data[:10], wbits=31) + zlib.compress(data[10:], wbits=31)
    assert agrees(GZIP, two) == data
    assert agrees(GZIP, two[:-1]) is None
