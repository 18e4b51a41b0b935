"""Compression codecs of record batches: gzip, snappy (xerial framing), lz4 (Kafka's LZ4 frame), zstd.

Mirrors `org.apache.kafka.common.compress.{GzipCompression,SnappyCompression,Lz4Compression,ZstdCompression}`
and `Lz4BlockInputStream`/`Lz4BlockOutputStream` (formerly `KafkaLZ4BlockInputStream`/`KafkaLZ4BlockOutputStream`).
Codec ids are `CompressionType.id` (attributes bits 0-2). Every failure raises `CorruptBatchError`.

LZ4 frame as Kafka writes it (spec §1.7)::

    magic     uint32 LE  0x184D2204
    FLG       uint8      version(bits 6-7)=01 | blockIndependence(5) | blockChecksum(4) | contentSize(3)
                         | contentChecksum(2) | reserved(1)=0 | dictId(0)=0
    BD        uint8      reserved(7)=0 | blockMaxSize(4-6): 4=64KiB 5=256KiB 6=1MiB 7=4MiB | reserved(0-3)=0
    [contentSize uint64 LE]
    HC        uint8      (xxhash32(FLG..before HC, seed 0) >> 8) & 0xFF;  magic 0: hash over magic..BD (KAFKA-3160
                         quirk) and never verified on read
    blocks    int32 LE size (bit 31 set => stored uncompressed) | data | [int32 block checksum]
    end mark  int32 0
    [int32 content checksum]

Kafka's reader skips block and content checksums without verifying them; so does this one.
"""
from __future__ import annotations

import functools
import struct
import threading
import zlib

import cramjam
import zstandard

from pipelines.decoding.errors import BadCodecError, CorruptBatchError, DecompressionTooLargeError

NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4
CODEC_IDS = {"none": NONE, "gzip": GZIP, "snappy": SNAPPY, "lz4": LZ4, "zstd": ZSTD}

# --- snappy-java SnappyOutputStream framing ---------------------------------------------------------------------
XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_HEADER_SIZE = 16  # magic + int32 BE version (1) + int32 BE compatible version (1)
XERIAL_BLOCK_SIZE = 32 * 1024  # SnappyOutputStream default block size

# --- LZ4 frame ----------------------------------------------------------------------------------------------------
LZ4_MAGIC = 0x184D2204
LZ4_FLG_VERSION = 1
LZ4_BLOCK_SIZES = {4: 1 << 16, 5: 1 << 18, 6: 1 << 20, 7: 1 << 22}
LZ4_UNCOMPRESSED_MASK = 0x80000000
_I32LE = struct.Struct("<i")
_U32LE = struct.Struct("<I")
_I32BE = struct.Struct(">i")

# --- xxhash32 (only the LZ4 frame descriptor checksum needs it; a handful of bytes) ---------------------------------
_P1, _P2, _P3, _P4, _P5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
_M32 = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def xxhash32(data: bytes, seed: int = 0) -> int:
    """XXH32 as `net.jpountz.xxhash.XXHash32` computes it (pure Python; used on a few header bytes only)."""
    n = len(data)
    i = 0
    if n >= 16:
        v1 = (seed + _P1 + _P2) & _M32
        v2 = (seed + _P2) & _M32
        v3 = seed & _M32
        v4 = (seed - _P1) & _M32
        while i + 16 <= n:
            a, b, c, d = struct.unpack_from("<4I", data, i)
            v1 = (_rotl((v1 + a * _P2) & _M32, 13) * _P1) & _M32
            v2 = (_rotl((v2 + b * _P2) & _M32, 13) * _P1) & _M32
            v3 = (_rotl((v3 + c * _P2) & _M32, 13) * _P1) & _M32
            v4 = (_rotl((v4 + d * _P2) & _M32, 13) * _P1) & _M32
            i += 16
        h = (_rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)) & _M32
    else:
        h = (seed + _P5) & _M32
    h = (h + n) & _M32
    while i + 4 <= n:
        h = (h + _U32LE.unpack_from(data, i)[0] * _P3) & _M32
        h = (_rotl(h, 17) * _P4) & _M32
        i += 4
    while i < n:
        h = (h + data[i] * _P5) & _M32
        h = (_rotl(h, 11) * _P1) & _M32
        i += 1
    h ^= h >> 15
    h = (h * _P2) & _M32
    h ^= h >> 13
    h = (h * _P3) & _M32
    h ^= h >> 16
    return h


@functools.lru_cache(maxsize=64)
def _lz4_header_checksum(descriptor: bytes) -> int:
    # a log's frames share a handful of descriptors: the pure-Python hash once each, not once per batch
    return (xxhash32(descriptor, 0) >> 8) & 0xFF


# ================================================================================================================
# decompression
# ================================================================================================================
#: Default cap on the decompressed bytes of one batch (Kafka's own batches stay below max.message.bytes, 1 MiB by
#: default, times the codec's ratio): a 64 MiB section is far beyond any producer's, far below a bomb's.
DEFAULT_MAX_BATCH_BYTES = 64 << 20


def decompress(codec_id: int, data: bytes, *, magic: int, max_bytes: int | None = None) -> bytes:
    """Decompress one compressed unit: a v2 batch's record section, or a legacy wrapper's value.

    Mirrors `CompressionType.wrapForInput` (Kafka 0.10-4.x). zstd is valid only for magic 2 and any codec above 4
    is unknown (`CompressionType.forId` throws); both raise `BadCodecError`. ``max_bytes`` (default
    `DEFAULT_MAX_BATCH_BYTES`) caps the output: more raises `DecompressionTooLargeError`, and no codec produces
    more than about that many bytes on the way (streamed or sized from the format's own length fields).
    """
    limit = DEFAULT_MAX_BATCH_BYTES if max_bytes is None else int(max_bytes)
    try:
        if codec_id == GZIP:
            return _gunzip(data, limit)
        if codec_id == SNAPPY:
            return _unsnappy(data, limit)
        if codec_id == LZ4:
            return _lz4_frame_decompress(data, verify_header_checksum=magic >= 1, limit=limit)
        if codec_id == ZSTD:
            if magic < 2:
                raise BadCodecError(f"zstd compression is not allowed for magic {magic}", field="attributes")
            return _unzstd(data, limit)
        if codec_id == NONE:
            return bytes(data)
    except CorruptBatchError:
        raise
    except (cramjam.DecompressionError, zlib.error, ValueError, struct.error, IndexError, EOFError) as e:
        raise CorruptBatchError(f"cannot decompress {_name(codec_id)} data: {e}", field="records") from None
    raise BadCodecError(f"unknown compression codec id {codec_id}", field="attributes")


def _too_large(codec_id: int, limit: int) -> DecompressionTooLargeError:
    return DecompressionTooLargeError(f"{_name(codec_id)} data decompresses to more than {limit} bytes "
                                      f"(decode.max_batch_bytes)", field="records")


_zstd_contexts = threading.local()


def _one_frame_zstd(data: bytes, size: int) -> bytes | None:
    """`data` as exactly one zstd frame of at most `size` bytes, decompressed with this thread's reused context;
    None for anything else (more frames, trailing bytes, a bigger or broken frame), which `_unzstd`'s general
    path reads. Most of a log's batches are small, and creating a zstd context for each (what a one-shot call
    does) cost more than decompressing them."""
    dctx = getattr(_zstd_contexts, "dctx", None)
    if dctx is None:
        dctx = _zstd_contexts.dctx = zstandard.ZstdDecompressor()
    if _zstd_frame_end(data) != len(data):
        return None
    try:
        declared = zstandard.get_frame_parameters(data).content_size
        if declared != zstandard.CONTENTSIZE_UNKNOWN and declared > size:
            return None  # a one-shot call would allocate what the header claims, past any cap
        return dctx.decompress(data, max_output_size=size)  # the first frame only, bounded
    except zstandard.ZstdError:
        return None


_ZSTD_MAGIC = 0xFD2FB528


def _zstd_frame_end(data: bytes) -> int | None:
    """Where the zstd frame at the start of `data` ends, from its header and block headers (RFC 8878 3.1.1, what
    `ZSTD_findFrameCompressedSize` reads, which python-zstandard does not expose); None: no whole frame there. The
    one-frame path needs it: a decompressor reads the first frame and says nothing of the bytes after it."""
    n = len(data)
    if n < 5 or _U32LE.unpack_from(data, 0)[0] != _ZSTD_MAGIC:
        return None
    fhd = data[4]
    if fhd & 0x08:  # the reserved bit
        return None
    single_segment = fhd & 0x20
    fcs = (1 if single_segment else 0, 2, 4, 8)[fhd >> 6]
    pos = 5 + (0 if single_segment else 1) + (0, 1, 2, 4)[fhd & 3] + fcs
    while True:
        if pos + 3 > n:
            return None
        header = data[pos] | data[pos + 1] << 8 | data[pos + 2] << 16
        kind, block = (header >> 1) & 3, header >> 3
        if kind == 3:  # reserved block type
            return None
        pos += 3 + (1 if kind == 1 else block)  # an RLE block holds one byte
        if header & 1:  # the last block
            break
    pos += 4 if fhd & 0x04 else 0  # the content checksum
    return pos if pos <= n else None


def _unzstd(data: bytes, limit: int) -> bytes:
    """zstd into a bounded buffer, grown x8 while the output does not fit, never past ``limit + 1`` bytes.

    Kafka's zstd-jni stream writes no content size, so the size is found by trying: a normal batch fits the first
    buffer; a bomb costs a few attempts and at most ``limit`` bytes of memory.
    """
    size = min(limit + 1, max(1 << 16, 16 * len(data)))
    out = _one_frame_zstd(data, size)
    if out is not None:
        if len(out) > limit:
            raise _too_large(ZSTD, limit)
        return out
    while True:
        buf = bytearray(size)
        try:
            n = cramjam.zstd.decompress_into(data, buf)
        except cramjam.DecompressionError as e:
            if "whole buffer" not in str(e):
                raise
            if size > limit:
                raise _too_large(ZSTD, limit) from None
            size = min(limit + 1, size * 8)
            continue
        if n > limit:
            raise _too_large(ZSTD, limit)
        return bytes(memoryview(buf)[:n])


def _name(codec_id: int) -> str:
    return {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}.get(codec_id, str(codec_id))


def _gunzip(data: bytes, limit: int) -> bytes:
    """RFC 1952 stream; concatenated members are read in sequence like `java.util.zip.GZIPInputStream`."""
    out = []
    total = 0
    rest = bytes(data)
    if not rest:
        raise CorruptBatchError("empty gzip stream", field="records", position=0)
    while rest:
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        chunk = d.decompress(rest, limit + 1 - total)
        total += len(chunk)
        if total > limit or d.unconsumed_tail:
            raise _too_large(GZIP, limit)
        out.append(chunk)
        if not d.eof:
            raise CorruptBatchError("truncated gzip stream", field="records")
        rest = d.unused_data
    return b"".join(out)


def _unsnappy(data: bytes, limit: int) -> bytes:
    """snappy-java `SnappyInputStream`: xerial framing when the 8-byte magic is present, else one raw block.

    Only the magic is checked, not the version ints (some producers write them little-endian). Concatenated
    xerial streams (a magic header again between blocks) are accepted as snappy-java does.
    """
    data = bytes(data)
    if not data.startswith(XERIAL_MAGIC):
        if _snappy_raw_len(data) > limit:
            raise _too_large(SNAPPY, limit)
        return bytes(cramjam.snappy.decompress_raw(data))
    out = []
    total = 0
    pos = XERIAL_HEADER_SIZE
    n = len(data)
    if n < XERIAL_HEADER_SIZE:
        raise CorruptBatchError("truncated xerial snappy header", field="records", position=0)
    while pos < n:
        if data.startswith(XERIAL_MAGIC, pos):
            pos += XERIAL_HEADER_SIZE
            continue
        if pos + 4 > n:
            raise CorruptBatchError("truncated xerial snappy block length", field="records", position=pos)
        (length,) = _I32BE.unpack_from(data, pos)
        pos += 4
        if length < 0 or pos + length > n:
            raise CorruptBatchError(f"xerial snappy block length {length} overruns the stream", field="records",
                                    position=pos - 4)
        block = data[pos:pos + length]
        total += _snappy_raw_len(block)
        if total > limit:
            raise _too_large(SNAPPY, limit)
        out.append(bytes(cramjam.snappy.decompress_raw(block)))
        pos += length
    return b"".join(out)


def _snappy_raw_len(block: bytes) -> int:
    """The uncompressed length a raw snappy block declares (its leading varint), before decompressing it."""
    try:
        return int(cramjam.snappy.decompress_raw_len(block))
    except cramjam.DecompressionError as e:
        raise CorruptBatchError(f"cannot decompress snappy data: {e}", field="records") from None


_local = threading.local()


def _scratch(size: int) -> bytearray:
    """A per-thread reusable output buffer for LZ4 blocks (avoids zeroing up to 4 MiB per batch)."""
    buf = getattr(_local, "buf", None)
    if buf is None or len(buf) < size:
        buf = _local.buf = bytearray(size)
    return buf


def _lz4_frame_decompress(data: bytes, *, verify_header_checksum: bool, limit: int = DEFAULT_MAX_BATCH_BYTES
                          ) -> bytes:
    """`Lz4BlockInputStream.readHeader` + `readBlock` (Kafka 0.10+): header checksum verified unless magic 0."""
    data = bytes(data)
    n = len(data)
    if n < 7:
        raise CorruptBatchError("truncated lz4 frame header", field="records", position=0)
    if _U32LE.unpack_from(data, 0)[0] != LZ4_MAGIC:
        raise CorruptBatchError("invalid lz4 frame magic", field="records", position=0)
    flg, bd = data[4], data[5]
    if (flg >> 6) & 3 != LZ4_FLG_VERSION or flg & 0x03:
        raise CorruptBatchError(f"unsupported lz4 FLG byte 0x{flg:02x}", field="records", position=4)
    if bd & 0x8F:
        raise CorruptBatchError(f"invalid lz4 BD byte 0x{bd:02x}", field="records", position=5)
    max_block = LZ4_BLOCK_SIZES.get((bd >> 4) & 7)
    if max_block is None:
        raise CorruptBatchError(f"invalid lz4 block max size in BD 0x{bd:02x}", field="records", position=5)
    block_checksum = bool(flg & 0x10)
    content_size = bool(flg & 0x08)
    pos = 6 + (8 if content_size else 0)
    if pos >= n:
        raise CorruptBatchError("truncated lz4 frame header", field="records", position=n)
    if verify_header_checksum:
        expected = _lz4_header_checksum(data[4:pos])
        if data[pos] != expected:
            raise CorruptBatchError(
                f"lz4 frame descriptor checksum mismatch (0x{data[pos]:02x} != 0x{expected:02x})",
                field="records", position=pos)
    pos += 1
    out = []
    total = 0
    scratch = _scratch(max_block)
    while True:
        if pos + 4 > n:
            raise CorruptBatchError("lz4 frame ends without an end mark", field="records", position=pos)
        (raw,) = _U32LE.unpack_from(data, pos)
        pos += 4
        if raw == 0:
            break  # end mark; a content checksum may follow (not verified, as in Kafka)
        size = raw & 0x7FFFFFFF
        if size > max_block or pos + size > n:
            raise CorruptBatchError(f"lz4 block size {size} invalid (max {max_block})", field="records",
                                    position=pos - 4)
        block = data[pos:pos + size]
        pos += size
        if raw & LZ4_UNCOMPRESSED_MASK:
            out.append(block)
        else:
            # output_len: a frame's block has no size prefix. Without it cramjam guesses: it reads the block's
            # first 4 bytes as one when they fit the buffer and the rest decodes, returning the wrong bytes, not
            # an error. The buffer is this frame's block max, not the whole scratch (as large as the largest
            # block max this thread has seen): a block is never read differently after another frame.
            written = cramjam.lz4.decompress_block_into(block, memoryview(scratch)[:max_block],
                                                        output_len=max_block)
            out.append(bytes(memoryview(scratch)[:written]))
        total += len(out[-1])
        if total > limit:
            raise _too_large(LZ4, limit)
        if block_checksum:
            pos += 4
    return b"".join(out)


# ================================================================================================================
# compression (the batch writer's side)
# ================================================================================================================
def compress(codec_id: int, data: bytes, *, magic: int, snappy_framing: str = "xerial") -> bytes:
    """Compress one unit the way Kafka's producer does (`CompressionType.wrapForOutput`).

    lz4 for magic 0 writes Kafka's wrong frame-descriptor checksum (`Lz4BlockOutputStream` with
    `useBrokenFlagDescriptorChecksum`); `snappy_framing="raw"` writes one raw block (third-party producers).
    """
    data = bytes(data)
    if codec_id == NONE:
        return data
    if codec_id == GZIP:
        return zlib.compress(data, 6, 16 + zlib.MAX_WBITS)
    if codec_id == SNAPPY:
        if snappy_framing == "raw":
            return bytes(cramjam.snappy.compress_raw(data))
        parts = [XERIAL_MAGIC, _I32BE.pack(1), _I32BE.pack(1)]
        for i in range(0, len(data), XERIAL_BLOCK_SIZE):
            block = bytes(cramjam.snappy.compress_raw(data[i:i + XERIAL_BLOCK_SIZE]))
            parts.append(_I32BE.pack(len(block)))
            parts.append(block)
        return b"".join(parts)
    if codec_id == LZ4:
        return _lz4_frame_compress(data, broken_header_checksum=magic == 0)
    if codec_id == ZSTD:
        if magic < 2:
            raise CorruptBatchError(f"zstd compression is not allowed for magic {magic}", field="attributes")
        return bytes(cramjam.zstd.compress(data))
    raise CorruptBatchError(f"unknown compression codec id {codec_id}", field="attributes")


# `Lz4BlockOutputStream`'s frame header: magic, FLG 0x60, BD 0x40 (64 KiB), then the checksum over FLG and BD
# (Kafka's broken one, for magic 0, over magic..BD too)
_LZ4_MAGIC_DESCRIPTOR = _U32LE.pack(LZ4_MAGIC) + bytes((0x60, 0x40))
_LZ4_FRAME_HEADER = _LZ4_MAGIC_DESCRIPTOR + bytes((_lz4_header_checksum(_LZ4_MAGIC_DESCRIPTOR[4:]),))
_LZ4_BROKEN_FRAME_HEADER = _LZ4_MAGIC_DESCRIPTOR + bytes((_lz4_header_checksum(_LZ4_MAGIC_DESCRIPTOR),))


def _lz4_frame_compress(data: bytes, *, broken_header_checksum: bool) -> bytes:
    """`Lz4BlockOutputStream`: FLG 0x60, BD 0x40 (64 KiB), no content size, no checksums."""
    parts = [_LZ4_BROKEN_FRAME_HEADER if broken_header_checksum else _LZ4_FRAME_HEADER]
    block_size = LZ4_BLOCK_SIZES[4]
    for i in range(0, len(data), block_size):
        chunk = data[i:i + block_size]
        packed = bytes(cramjam.lz4.compress_block(chunk, store_size=False))
        if len(packed) >= len(chunk):
            parts.append(_U32LE.pack(len(chunk) | LZ4_UNCOMPRESSED_MASK))
            parts.append(chunk)
        else:
            parts.append(_U32LE.pack(len(packed)))
            parts.append(packed)
    parts.append(b"\x00\x00\x00\x00")
    return b"".join(parts)
