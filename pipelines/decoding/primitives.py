"""Kafka message-generator primitives: readers `(buf, pos) -> (value, pos)` and the matching writers.

Layouts (`generator/.../MessageDataGenerator.java`, `clients/.../protocol/{ByteUtils,MessageUtil}.java`):

    int8/16/32/64, uint16   big-endian two's complement (uint16 unsigned)
    uuid                    16 bytes: msb int64, lsb int64; shown as URL-safe base64 without padding
    string / bytes          int16 / int32 length, -1 = null (and any negative length: the generated
                            readers test `length < 0`)                           (non-flexible versions)
    compact string / bytes  uvarint (length + 1), 0 = null                        (flexible versions)
    array                   int32 count, -1 = null | compact: uvarint (count + 1), 0 = null
    uvarint                 unsigned LEB128, 7 bits per byte, least significant group first (no zig-zag)
    tagged-field section    uvarint count, then per field: uvarint tag, uvarint size, payload

Strings are decoded like Java's `new String(bytes, UTF_8)`: malformed UTF-8 becomes U+FFFD, as Kafka reads it.
Every reader raises only `DecodeError` subclasses naming the field and the byte position.
"""
from __future__ import annotations

import base64
import struct
from collections.abc import Callable
from typing import Any

from pipelines.decoding.errors import InvalidFieldError, TruncatedError

INT8 = struct.Struct(">b")
INT16 = struct.Struct(">h")
UINT16 = struct.Struct(">H")
INT32 = struct.Struct(">i")
INT64 = struct.Struct(">q")
UUID = struct.Struct(">16s")

ZERO_UUID = "AAAAAAAAAAAAAAAAAAAAAA"  # Uuid.ZERO_UUID.toString()

Reader = Callable[[bytes, int], tuple[Any, int]]


def _need(buf: bytes, pos: int, n: int, field: str) -> None:
    if pos + n > len(buf):
        raise TruncatedError(f"need {n} bytes, {max(len(buf) - pos, 0)} left", position=pos, field=field)


def _fixed(s: struct.Struct, name: str):
    size = s.size
    unpack_from = s.unpack_from

    def reader(buf: bytes, pos: int, field: str = name) -> tuple[int, int]:
        if pos + size > len(buf):
            raise TruncatedError(f"need {size} bytes for {name}, {max(len(buf) - pos, 0)} left", position=pos,
                                 field=field)
        return unpack_from(buf, pos)[0], pos + size

    reader.__name__ = f"read_{name}"
    return reader


read_int8 = _fixed(INT8, "int8")
read_int16 = _fixed(INT16, "int16")
read_uint16 = _fixed(UINT16, "uint16")
read_int32 = _fixed(INT32, "int32")
read_int64 = _fixed(INT64, "int64")


def read_uvarint(buf: bytes, pos: int, field: str = "uvarint") -> tuple[int, int]:
    """Unsigned varint (`ByteUtils.readUnsignedVarint`): at most 5 bytes, a 5th byte > 0x0f is invalid."""
    result = 0
    shift = 0
    start = pos
    n = len(buf)
    while True:
        if pos >= n:
            raise TruncatedError("varint runs past the end", position=start, field=field)
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift >= 35:
            raise InvalidFieldError("varint longer than 5 bytes", position=start, field=field)


def decode_utf8(raw: bytes) -> str:
    """Java's `new String(bytes, UTF_8)`: never fails, malformed input becomes U+FFFD."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("utf-8", "replace")


def read_string(buf: bytes, pos: int, field: str = "string") -> tuple[str, int]:
    """Non-nullable string: int16 length + UTF-8. A negative length is invalid here."""
    n, p = read_nullable_string(buf, pos, field)
    if n is None:
        raise InvalidFieldError("null for a non-nullable string", position=pos, field=field)
    return n, p


def read_nullable_string(buf: bytes, pos: int, field: str = "string") -> tuple[str | None, int]:
    if pos + 2 > len(buf):
        raise TruncatedError("string length runs past the end", position=pos, field=field)
    (length,) = INT16.unpack_from(buf, pos)
    pos += 2
    if length < 0:  # Kafka's generated readers (and the old Struct schemas) read any negative length as null
        return None, pos
    end = pos + length
    if end > len(buf):
        raise TruncatedError(f"string of {length} bytes runs past the end", position=pos, field=field)
    return decode_utf8(buf[pos:end]), end


def read_nullable_bytes(buf: bytes, pos: int, field: str = "bytes") -> tuple[bytes | None, int]:
    if pos + 4 > len(buf):
        raise TruncatedError("bytes length runs past the end", position=pos, field=field)
    (length,) = INT32.unpack_from(buf, pos)
    pos += 4
    if length < 0:  # as a string's
        return None, pos
    end = pos + length
    if end > len(buf):
        raise TruncatedError(f"{length} bytes run past the end", position=pos, field=field)
    return bytes(buf[pos:end]), end


def read_bytes(buf: bytes, pos: int, field: str = "bytes") -> tuple[bytes, int]:
    v, p = read_nullable_bytes(buf, pos, field)
    if v is None:
        raise InvalidFieldError("null for non-nullable bytes", position=pos, field=field)
    return v, p


def read_compact_nullable_string(buf: bytes, pos: int, field: str = "string") -> tuple[str | None, int]:
    n, p = read_uvarint(buf, pos, field)
    if n == 0:
        return None, p
    end = p + n - 1
    if end > len(buf):
        raise TruncatedError(f"compact string of {n - 1} bytes runs past the end", position=p, field=field)
    return decode_utf8(buf[p:end]), end


def read_compact_string(buf: bytes, pos: int, field: str = "string") -> tuple[str, int]:
    v, p = read_compact_nullable_string(buf, pos, field)
    if v is None:
        raise InvalidFieldError("null for a non-nullable compact string", position=pos, field=field)
    return v, p


def read_compact_nullable_bytes(buf: bytes, pos: int, field: str = "bytes") -> tuple[bytes | None, int]:
    n, p = read_uvarint(buf, pos, field)
    if n == 0:
        return None, p
    end = p + n - 1
    if end > len(buf):
        raise TruncatedError(f"compact bytes of {n - 1} bytes run past the end", position=p, field=field)
    return bytes(buf[p:end]), end


def read_compact_bytes(buf: bytes, pos: int, field: str = "bytes") -> tuple[bytes, int]:
    v, p = read_compact_nullable_bytes(buf, pos, field)
    if v is None:
        raise InvalidFieldError("null for non-nullable compact bytes", position=pos, field=field)
    return v, p


def uuid_to_str(raw: bytes) -> str:
    """`Uuid.toString()`: URL-safe base64 of the 16 bytes, without padding."""
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def uuid_from_str(s: str) -> bytes:
    raw = base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))
    if len(raw) != 16:
        raise ValueError(f"not a Kafka uuid: {s!r}")
    return raw


def read_uuid(buf: bytes, pos: int, field: str = "uuid") -> tuple[str, int]:
    _need(buf, pos, 16, field)
    return uuid_to_str(buf[pos:pos + 16]), pos + 16


def read_array_count(buf: bytes, pos: int, field: str = "array") -> tuple[int | None, int]:
    """Non-flexible array count: int32, -1 (any negative count, as Kafka's generated readers test it) = null."""
    n, p = read_int32(buf, pos, field)
    if n < 0:
        return None, p
    # every element takes at least one byte: a count beyond what is left is corrupt, not a huge allocation
    if n > len(buf) - p:
        raise TruncatedError(f"array of {n} elements cannot fit in {len(buf) - p} bytes", position=pos, field=field)
    return n, p


def read_compact_array_count(buf: bytes, pos: int, field: str = "array") -> tuple[int | None, int]:
    n, p = read_uvarint(buf, pos, field)
    if n == 0:
        return None, p
    if n - 1 > len(buf) - p:
        raise TruncatedError(f"array of {n - 1} elements cannot fit in {len(buf) - p} bytes", position=pos,
                             field=field)
    return n - 1, p


def read_tagged_fields(buf: bytes, pos: int, field: str = "_tagged_fields") -> tuple[dict[int, bytes], int]:
    """A tagged-field section: `{tag: raw payload}`. Tags must ascend (Kafka rejects duplicates / disorder)."""
    count, pos = read_uvarint(buf, pos, field)
    tags: dict[int, bytes] = {}
    prev = -1
    for _ in range(count):
        start = pos
        tag, pos = read_uvarint(buf, pos, field)
        if tag <= prev:
            raise InvalidFieldError(f"tag {tag} after tag {prev}", position=start, field=field)
        prev = tag
        size, pos = read_uvarint(buf, pos, field)
        end = pos + size
        if end > len(buf):
            raise TruncatedError(f"tagged field {tag} of {size} bytes runs past the end", position=pos, field=field)
        tags[tag] = bytes(buf[pos:end])
        pos = end
    return tags, pos


# ---------------------------------------------------------------------------------------------- writers


def write_int8(v: int) -> bytes:
    return INT8.pack(v)


def write_int16(v: int) -> bytes:
    return INT16.pack(v)


def write_uint16(v: int) -> bytes:
    return UINT16.pack(v)


def write_int32(v: int) -> bytes:
    return INT32.pack(v)


def write_int64(v: int) -> bytes:
    return INT64.pack(v)


_ONE_BYTE = tuple(bytes((i,)) for i in range(0x80))


def write_uvarint(v: int) -> bytes:
    """Unsigned LEB128 (`ByteUtils.writeUnsignedVarint`): the one varint encoder; a magic 2 record's signed
    varints are these after zig-zag (`batch_writer.encode_varint`)."""
    if 0 <= v < 0x80:  # lengths and counts of compact fields, tags: nearly always one byte
        return _ONE_BYTE[v]
    if v < 0:
        raise ValueError("uvarint must be >= 0")
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def write_string(s: str | None) -> bytes:
    if s is None:
        return INT16.pack(-1)
    raw = s.encode("utf-8")
    return INT16.pack(len(raw)) + raw


def write_bytes(b: bytes | None) -> bytes:
    if b is None:
        return INT32.pack(-1)
    return INT32.pack(len(b)) + bytes(b)


def write_compact_string(s: str | None) -> bytes:
    if s is None:
        return b"\x00"
    raw = s.encode("utf-8")
    return write_uvarint(len(raw) + 1) + raw


def write_compact_bytes(b: bytes | None) -> bytes:
    if b is None:
        return b"\x00"
    return write_uvarint(len(b) + 1) + bytes(b)


def write_uuid(s: str) -> bytes:
    return uuid_from_str(s)


def write_array_count(n: int | None) -> bytes:
    return INT32.pack(-1 if n is None else n)


def write_compact_array_count(n: int | None) -> bytes:
    return b"\x00" if n is None else write_uvarint(n + 1)


def write_tagged_fields(tags: dict[int, bytes] | None = None) -> bytes:
    tags = tags or {}
    out = [write_uvarint(len(tags))]
    for tag in sorted(tags):
        out += [write_uvarint(tag), write_uvarint(len(tags[tag])), tags[tag]]
    return b"".join(out)
