"""Typed decoding errors. Every reader raises only these; each names the field and the byte position."""
from __future__ import annotations


class DecodeError(Exception):
    """Base of every decoding error. `position` is a byte position within the buffer being read."""

    kind = "decode_error"

    def __init__(self, message: str, *, position: int | None = None, field: str | None = None):
        self.position = position
        self.field = field
        where = []
        if field:
            where.append(f"field {field}")
        if position is not None:
            where.append(f"byte {position}")
        super().__init__(message + (f" ({', '.join(where)})" if where else ""))


class TruncatedError(DecodeError):
    """The buffer ended before a field did (Kafka: BufferUnderflowException / SchemaException)."""

    kind = "truncated"


class TrailingBytesError(DecodeError):
    """A value was fully read but bytes remained after it."""

    kind = "trailing_bytes"


class UnknownVersionError(DecodeError):
    """A value version no Kafka release defines for this record type (Kafka fails the load)."""

    kind = "unknown_version"


class UnknownKeyTypeError(DecodeError):
    """A key type this topic never carries (Kafka 3.4.1+/3.6+ warns and skips it)."""

    kind = "unknown_key_type"


class InvalidFieldError(DecodeError):
    """A field holds an impossible value (negative length other than -1, bad UTF-8, bad varint...)."""

    kind = "invalid_field"


class CorruptBatchError(DecodeError):
    """A record batch or legacy entry cannot be framed or decompressed."""

    kind = "corrupt_batch"


class BadCodecError(CorruptBatchError):
    """A compression codec id Kafka does not define, or zstd in a magic 0/1 entry (`CompressionType.forId`)."""

    kind = "bad_codec"


class DecompressionTooLargeError(CorruptBatchError):
    """A record section that decompresses to more than the configured cap (`decode.max_batch_bytes`)."""

    kind = "decompression_too_large"
