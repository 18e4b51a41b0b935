"""Encoding records into log entries: magic 2 record batches, legacy magic 0/1 message sets, control and empty batches.

The inverse of `batches.py`, for tests, property round trips and the broker simulator (`simulator/`). Mirrors
`MemoryRecordsBuilder` / `DefaultRecordBatch.writeHeader` / `DefaultRecord.writeTo` (magic 2),
`LegacyRecord.write` with `AbstractLegacyRecordBatch` wrappers (magic 0/1),
`MemoryRecords.writeEndTransactionalMarker` and `DefaultRecordBatch.writeEmptyHeader` (Kafka 0.11-4.x).
Only frames bytes: keys and values come from the message encoder.
"""
from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence

import crc32c as _crc32c_mod

from pipelines.decoding import codecs
from pipelines.decoding.errors import InvalidFieldError
from pipelines.decoding.primitives import write_uvarint
from schemas.records import CREATE_TIME, LOG_APPEND_TIME

__all__ = ["encode_varint", "write_control_batch", "write_empty_batch", "write_record_batch"]

_crc32c = _crc32c_mod.crc32c

_V2_PREFIX = struct.Struct(">qiibI")  # baseOffset, batchLength, partitionLeaderEpoch, magic, crc
_V2_AFTER_CRC = struct.Struct(">hiqqqhii")  # attributes .. recordsCount (CRC-covered header part)
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_ENTRY_HEAD = struct.Struct(">qi")

ControlType = int
ABORT, COMMIT = 0, 1

Record = tuple[bytes | None, bytes | None, int]  # (key, value, timestamp)

_U64 = (1 << 64) - 1


def encode_varint(n: int) -> bytes:
    """Zig-zag LEB128 (`ByteUtils.writeVarint`/`writeVarlong`), for int and long ranges alike: zig-zag, then the
    unsigned varint."""
    return write_uvarint(((n << 1) ^ (n >> 63)) & _U64)


# Small varints encoded once: a record has six (its length, two deltas, key and value lengths, the header count)
# and the simulator writes millions of records.
_N_SMALL = 1 << 14
_SMALL_VARINTS = tuple(encode_varint(i) for i in range(_N_SMALL))
_NULL = encode_varint(-1)
_NO_HEADERS = encode_varint(0)


def _varint(n: int) -> bytes:
    return _SMALL_VARINTS[n] if 0 <= n < _N_SMALL else encode_varint(n)


def _v2_headers(headers: Sequence[tuple[str, bytes | None]]) -> bytes:
    out = [_varint(len(headers))]
    for hk, hv in headers:
        kb = hk.encode("utf-8")
        out += [_varint(len(kb)), kb]
        out += [_NULL] if hv is None else [_varint(len(hv)), hv]
    return b"".join(out)


def _v2_records(records: Sequence[Record], base_ts: int, deltas: Sequence[int] | None,
                headers: Sequence[Sequence[tuple[str, bytes | None]]] | None) -> tuple[bytes, int]:
    """`DefaultRecord.writeTo` (magic 2) for every record: the batch's records section, uncompressed, and the
    largest timestamp. `deltas` None: offset deltas 0..n-1."""
    small, n_small = _SMALL_VARINTS, _N_SMALL
    parts = []
    max_ts = records[0][2]
    for i, (key, value, ts) in enumerate(records):
        if ts > max_ts:
            max_ts = ts
        d = ts - base_ts
        od = i if deltas is None else deltas[i]
        if key is None:
            klen, key = _NULL, b""
        else:
            kl = len(key)
            klen = small[kl] if kl < n_small else encode_varint(kl)
        if value is None:
            vlen, value = _NULL, b""
        else:
            vl = len(value)
            vlen = small[vl] if vl < n_small else encode_varint(vl)
        body = b"".join((b"\x00",  # attributes
                         small[d] if 0 <= d < n_small else encode_varint(d),
                         small[od] if 0 <= od < n_small else encode_varint(od),
                         klen, key, vlen, value, _v2_headers(headers[i]) if headers else _NO_HEADERS))
        bl = len(body)
        parts.append(small[bl] if bl < n_small else encode_varint(bl))
        parts.append(body)
    return b"".join(parts), max_ts


def _v2_batch(base_offset: int, partition_leader_epoch: int, attributes: int, last_offset_delta: int,
              base_timestamp: int, max_timestamp: int, producer_id: int, producer_epoch: int, base_sequence: int,
              records_count: int, section: bytes) -> bytes:
    """`DefaultRecordBatch.writeHeader` (its fields in the header's order) + CRC-32C over attributes..end."""
    after_crc = _V2_AFTER_CRC.pack(attributes, last_offset_delta, base_timestamp, max_timestamp, producer_id,
                                   producer_epoch, base_sequence, records_count)
    crc = _crc32c(section, _crc32c(after_crc))  # the section is not copied to be checksummed
    batch_length = 4 + 1 + 4 + len(after_crc) + len(section)  # partitionLeaderEpoch + magic + crc + rest
    return b"".join((_V2_PREFIX.pack(base_offset, batch_length, partition_leader_epoch, 2, crc), after_crc, section))


def write_record_batch(
    records: Sequence[Record],
    base_offset: int,
    *,
    magic: int = 2,
    codec: str = "none",
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    is_transactional: bool = False,
    is_control: bool = False,
    timestamp_type: str = CREATE_TIME,
    partition_leader_epoch: int = 0,
    offset_deltas: Sequence[int] | None = None,
    delete_horizon_ms: int | None = None,
    snappy_framing: str = "xerial",
    log_append_time: int | None = None,
    headers: Sequence[Sequence[tuple[str, bytes | None]]] | None = None,
) -> bytes:
    """Encode records as one magic 2 batch, or (magic 0/1) as plain messages / one compressed wrapper entry.

    Mirrors `MemoryRecordsBuilder` (Kafka 0.11-4.x): baseTimestamp = first record's timestamp (or the delete
    horizon when ``delete_horizon_ms`` is set, KIP-534), deltas relative to it; maxTimestamp = the largest record
    timestamp, or ``log_append_time`` for LogAppendTime. Offsets are ``base_offset + offset_deltas[i]``
    (default 0..n-1; gaps model compaction).
    """
    n = len(records)
    deltas = None if offset_deltas is None else list(offset_deltas)
    if deltas is not None and len(deltas) != n:
        raise InvalidFieldError("offset_deltas must have one entry per record", field="offset_deltas")
    codec_id = codecs.CODEC_IDS.get(codec)
    if codec_id is None:
        raise InvalidFieldError(f"unknown codec {codec!r}", field="codec")
    if timestamp_type != CREATE_TIME and timestamp_type != LOG_APPEND_TIME:
        raise InvalidFieldError(f"timestamp type {timestamp_type!r}", field="timestamp_type")
    log_append = timestamp_type == LOG_APPEND_TIME
    if magic == 2:
        if n == 0:
            raise InvalidFieldError("use write_empty_batch for a batch without records", field="records")
        if headers is not None and len(headers) != n:
            raise InvalidFieldError("headers must have one entry per record", field="headers")
        base_ts = delete_horizon_ms if delete_horizon_ms is not None else records[0][2]
        body, max_ts = _v2_records(records, base_ts, deltas, headers)
        if log_append and log_append_time is not None:
            max_ts = log_append_time
        section = codecs.compress(codec_id, body, magic=2, snappy_framing=snappy_framing) if codec_id else body
        attributes = (codec_id | (0x08 if log_append else 0) | (0x10 if is_transactional else 0)
                      | (0x20 if is_control else 0) | (0x40 if delete_horizon_ms is not None else 0))
        return _v2_batch(base_offset, partition_leader_epoch, attributes, n - 1 if deltas is None else max(deltas),
                         base_ts, max_ts, producer_id, producer_epoch, base_sequence, n, section)
    if deltas is None:
        deltas = range(n)
    if magic not in (0, 1):
        raise InvalidFieldError(f"unknown magic {magic}", field="magic")
    if is_transactional or is_control or producer_id != -1:
        raise InvalidFieldError("legacy message sets carry no producer/transaction fields", field="magic")
    if n == 0:
        raise InvalidFieldError("a legacy message set needs at least one message", field="records")
    ts_attr = 0x08 if (log_append and magic == 1) else 0
    if codec_id == 0:
        return b"".join(_legacy_message(base_offset + d, magic, ts_attr, ts, k, v)
                        for (k, v, ts), d in zip(records, deltas))
    # compressed wrapper: v0 inner offsets absolute, v1 relative (deltas)
    inner = b"".join(_legacy_message(base_offset + d if magic == 0 else d, magic, 0, ts, k, v)
                     for (k, v, ts), d in zip(records, deltas))
    value = codecs.compress(codec_id, inner, magic=magic, snappy_framing=snappy_framing)
    wrapper_ts = max(r[2] for r in records)
    if log_append and log_append_time is not None:
        wrapper_ts = log_append_time
    return _legacy_message(base_offset + max(deltas), magic, codec_id | ts_attr, wrapper_ts, None, value)


def _legacy_message(offset: int, magic: int, attributes: int, timestamp: int, key: bytes | None,
                    value: bytes | None) -> bytes:
    """`LegacyRecord.write` with its log-entry head (offset, size); CRC-32 over magic..end."""
    body = bytearray()
    body.append(magic)
    body.append(attributes)
    if magic == 1:
        body += struct.pack(">q", timestamp)
    body += _I32.pack(-1) if key is None else _I32.pack(len(key)) + key
    body += _I32.pack(-1) if value is None else _I32.pack(len(value)) + value
    crc = zlib.crc32(body)
    return _ENTRY_HEAD.pack(offset, 4 + len(body)) + struct.pack(">I", crc) + bytes(body)


def write_control_batch(control_type: ControlType, coordinator_epoch: int, offset: int, producer_id: int,
                        producer_epoch: int, timestamp: int, *, partition_leader_epoch: int = 0) -> bytes:
    """`MemoryRecords.writeEndTransactionalMarker`: one control record, key = version 0 + type, value =
    `EndTxnMarker` v0 (int16 version, int32 coordinatorEpoch); transactional + control, baseSequence -1."""
    key = _I16.pack(0) + _I16.pack(control_type)
    value = _I16.pack(0) + _I32.pack(coordinator_epoch)
    return write_record_batch([(key, value, timestamp)], offset, producer_id=producer_id,
                              producer_epoch=producer_epoch, base_sequence=-1, is_transactional=True,
                              is_control=True, partition_leader_epoch=partition_leader_epoch)


def write_empty_batch(base_offset: int, last_offset: int, *, producer_id: int = -1, producer_epoch: int = -1,
                      base_sequence: int = -1, is_transactional: bool = False, is_control: bool = False,
                      max_timestamp: int = -1, partition_leader_epoch: int = 0,
                      delete_horizon_ms: int | None = None) -> bytes:
    """`DefaultRecordBatch.writeEmptyHeader` (what the log cleaner keeps for producer state): no records,
    baseTimestamp -1 (or the delete horizon), lastOffsetDelta kept."""
    attributes = (0x10 if is_transactional else 0) | (0x20 if is_control else 0) | (
        0x40 if delete_horizon_ms is not None else 0)
    return _v2_batch(base_offset, partition_leader_epoch, attributes, last_offset - base_offset,
                     delete_horizon_ms if delete_horizon_ms is not None else -1, max_timestamp, producer_id,
                     producer_epoch, base_sequence, 0, b"")
