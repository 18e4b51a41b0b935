"""Decoding of log entries: magic 2 record batches and legacy magic 0/1 message sets, into records.

Mirrors `DefaultRecordBatch` + `DefaultRecord.readFrom` (magic 2) and `LegacyRecord` +
`AbstractLegacyRecordBatch.DeepRecordsIterator` (magic 0/1), Kafka 0.10-4.x (spec §1.1-1.5), over the entries
`framing` cuts a log into.

Every entry starts ``int64 offset | int32 size`` and its magic byte sits at byte 16 in both layouts.

Magic 2 batch (61-byte header, big-endian)::

    0  baseOffset int64 | 8 batchLength int32 | 12 partitionLeaderEpoch int32 | 16 magic int8
    17 crc uint32 (CRC-32C of [21, end)) | 21 attributes int16 | 23 lastOffsetDelta int32
    27 baseTimestamp int64 | 35 maxTimestamp int64 | 43 producerId int64 | 51 producerEpoch int16
    53 baseSequence int32 | 57 recordsCount int32 | 61 records (compressed as one stream when codec != 0)

    attributes: bits 0-2 codec, bit 3 timestampType (1 = LogAppendTime), bit 4 isTransactional,
                bit 5 isControl, bit 6 hasDeleteHorizonMs

Magic 2 record (zig-zag varints)::

    length varint | attributes int8 | timestampDelta varlong | offsetDelta varint | keyLength varint | key
    | valueLength varint | value | headerCount varint | (headerKeyLength varint | key | headerValueLength varint
    | value)*

Legacy message (magic 0/1)::

    0 offset int64 | 8 size int32 | 12 crc uint32 (CRC-32 of [16, end)) | 16 magic int8 | 17 attributes int8
    | [18 timestamp int64, v1 only] | keyLength int32 | key | valueLength int32 | value

Choices where Kafka has none to copy:

* CRC. Kafka's recovery truncates a log at its first batch whose CRC does not verify; its loaders then read
  without checks. Here a batch whose CRC fails is never state by default (`policy.ReadPolicy`): each record that
  still parses becomes a ``crc_mismatch`` ReadProblem carrying its key and value (``records=1``); a batch whose
  records do not parse is one ``crc_mismatch`` whose bytes are unread (its header's count is unverified, so it
  counts no records). ``replay_corrupt_batches`` yields the batch (``crc_valid=False``) after one evidence row.
* A batch whose CRC verifies but that cannot be decoded (record framing, codec, decompression, the decompressed
  size cap) yields one ReadProblem of that kind standing for its verified record count, and none of its records
  (a batch is atomic); reading resumes at the next entry because the size field framed this one.
* A size field that cannot frame an entry (``unframeable``), a tail too short for an entry header or an entry
  running past the end (``torn_tail``), a tail of zero bytes (``zero_tail``, a preallocated segment): reading
  of the file stops there and the rest of the file is an unread byte range (``unread_to``).

Every ReadProblem says how many records it stands for (``records``) and which bytes were not read
(``[position, unread_to)``), so the accounting counts what was verified and reports every byte.
"""
from __future__ import annotations

import dataclasses
import mmap
import os
import struct
import zlib
from collections.abc import Iterator

import crc32c as _crc32c_mod

from pipelines.decoding import codecs
from pipelines.decoding.errors import DecodeError
from pipelines.decoding.framing import (
    ENTRY_HEAD,
    LEGACY_RECORD_OVERHEAD_V0,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    as_long,
    frame_entries,
    unread_range,
)
from pipelines.decoding.offset_order import ordered_items, resumed
from pipelines.decoding.policy import DEFAULT_POLICY, ReadPolicy
from schemas.records import (
    CODEC_NAMES,
    CREATE_TIME,
    LOG_APPEND_TIME,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    NO_TIMESTAMP_TYPE,
    LogRecord,
    ReadProblem,
    RecordBatchHeader,
)

__all__ = [
    "BatchItem",
    "RECORD_BATCH_OVERHEAD",
    "decode_entry",
    "read_batches",
    "read_batches_from_file",
]

RECORD_BATCH_OVERHEAD = 61
LEGACY_RECORD_OVERHEAD_V1 = 22
NO_PARTITION_LEADER_EPOCH = -1
INT32_MAX = 0x7FFFFFFF

COMPRESSION_CODEC_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_FLAG_MASK = 0x10
CONTROL_FLAG_MASK = 0x20
DELETE_HORIZON_FLAG_MASK = 0x40

_V2_HEADER = struct.Struct(">qiibIhiqqqhii")
_LEGACY_HEAD = struct.Struct(">qiIbb")  # offset, size, crc, magic, attributes
_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")

_crc32c = _crc32c_mod.crc32c
_crc32 = zlib.crc32

BatchItem = tuple[RecordBatchHeader, list[LogRecord]]

_CODEC_LABELS = tuple(CODEC_NAMES.get(i, f"unknown({i})") for i in range(8))
_V2_UNPACK = _V2_HEADER.unpack_from


def _positional_constructor(cls, expected: tuple[str, ...]):
    """A positional constructor for a frozen, slotted dataclass that sets its slots directly.

    Frozen dataclasses assign every field through `object.__setattr__` in `__init__`, which costs ~3x more than
    the slot descriptors' own setters; the readers build one header per batch and one record per record, so
    they use this. Only valid for classes without `__post_init__` whose fields are exactly ``expected`` (in
    order); otherwise it falls back to the class itself called with keywords.
    """
    names = tuple(f.name for f in dataclasses.fields(cls))
    if names != expected:
        raise RuntimeError(f"{cls.__name__} fields changed: {names} != {expected}; update batches.py")
    slots = getattr(cls, "__slots__", ())
    if hasattr(cls, "__post_init__") or set(slots) != set(names):
        def make(*args):
            return cls(**dict(zip(names, args)))
        return make
    env = {"_new": object.__new__, "_cls": cls}
    body = []
    for i, n in enumerate(names):
        env[f"_s{i}"] = cls.__dict__[n].__set__
        body.append(f"    _s{i}(o, {n})")
    src = f"def make({', '.join(names)}):\n    o = _new(_cls)\n" + "\n".join(body) + "\n    return o\n"
    exec(src, env)  # noqa: S102 - generated from dataclass field names only
    return env["make"]


_new_header = _positional_constructor(RecordBatchHeader, (
    "source", "offsets_partition", "position", "base_offset", "last_offset", "size", "magic", "crc", "crc_valid",
    "attributes", "codec", "timestamp_type", "is_transactional", "is_control", "delete_horizon_ms",
    "base_timestamp", "max_timestamp", "producer_id", "producer_epoch", "base_sequence", "partition_leader_epoch",
    "records_count"))
_new_record = _positional_constructor(LogRecord, (
    "batch", "offset", "timestamp", "first_offset_in_batch", "sequence", "key", "value", "header_keys"))


class _RecordError(Exception):
    """Internal: a record inside a batch is malformed; carries the byte position within the decoded section."""

    def __init__(self, message: str, position: int):
        super().__init__(message)
        self.position = position


# ================================================================================================================
# public API
# ================================================================================================================
def read_batches(
    buf: bytes | bytearray | memoryview,
    *,
    source: str,
    offsets_partition: int,
    base_position: int = 0,
    policy: ReadPolicy = DEFAULT_POLICY,
) -> Iterator[BatchItem | ReadProblem]:
    """Iterate the entries of a log buffer: ``(header, records)`` per batch, ``ReadProblem`` for what is unusable.

    Framed by `framing.frame_entries` (`ByteBufferLogInputStream.nextBatch`), decoded as `DefaultRecordBatch` /
    `AbstractLegacyRecordBatch` (Kafka 0.11-4.x). ``base_position`` is the byte position of ``buf[0]`` in
    ``source`` (positions in headers and problems are file positions). The entries are taken as they come: a
    segment file's order is `read_batches_from_file`'s to check.
    """
    data = buf if type(buf) is bytes else bytes(buf)
    decode_v2 = _decode_v2
    for frame in frame_entries(data, 0, len(data), source=source, offsets_partition=offsets_partition,
                               base_position=base_position):
        if type(frame) is not tuple:
            yield frame
            return
        pos, _offset, total = frame
        if data[pos + MAGIC_OFFSET] == 2:  # fast path: no keyword call, single-item list unpacked
            items = decode_v2(data, pos, pos + total, source, offsets_partition, base_position + pos, policy)
        else:
            items = decode_entry(data, pos, pos + total, source=source, offsets_partition=offsets_partition,
                                 position=base_position + pos, policy=policy)
        if len(items) == 1:
            yield items[0]
        else:
            yield from items


def read_batches_from_file(
    path: str | os.PathLike,
    *,
    offsets_partition: int,
    source: str | None = None,
    start_position: int = 0,
    policy: ReadPolicy = DEFAULT_POLICY,
) -> Iterator[BatchItem | ReadProblem]:
    """Stream the entries of one segment file, mapped into memory and copied one entry at a time.

    Framed by `framing.frame_entries` (`FileLogInputStream.nextBatch`, Kafka 0.11-4.x). ``start_position``: the
    byte position of an entry boundary to start reading at (an incremental run resumes where the previous run
    stopped); positions in headers and problems stay absolute file positions. A batch whose offsets are negative or
    go back is one ReadProblem (`offset_order`).
    """
    if start_position < 0:
        raise ValueError(f"start_position must be >= 0, not {start_position}")
    order = None
    if start_position:
        with open(path, "rb") as f:
            if os.fstat(f.fileno()).st_size > start_position:
                with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                    order = resumed(mm, start_position)
    return ordered_items(_read_file_entries(path, offsets_partition, source, start_position, policy), order)


def _read_file_entries(path, offsets_partition: int, source: str | None, start_position: int, policy: ReadPolicy
                       ) -> Iterator[BatchItem | ReadProblem]:
    src = source if source is not None else os.fspath(path)
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size <= start_position:
            return
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            for frame in frame_entries(mm, start_position, len(mm), source=src, offsets_partition=offsets_partition):
                if type(frame) is not tuple:
                    yield frame
                    return
                pos, _offset, total = frame
                yield from decode_entry(mm[pos:pos + total], 0, total, source=src,
                                        offsets_partition=offsets_partition, position=pos, policy=policy)


def decode_entry(
    data: bytes,
    start: int,
    end: int,
    *,
    source: str,
    offsets_partition: int,
    position: int,
    policy: ReadPolicy = DEFAULT_POLICY,
) -> list[BatchItem | ReadProblem]:
    """Decode one framed entry ``data[start:end]`` (already known to fit): a v2 batch or a legacy entry.

    ``position`` is the entry's byte position in ``source``. Returns at most one ``(header, records)`` plus
    ReadProblems; never raises for bad bytes.
    """
    magic = data[start + 16]
    if magic == 2:
        return _decode_v2(data, start, end, source, offsets_partition, position, policy)
    if magic == 0 or magic == 1:
        return _decode_legacy(data, start, end, source, offsets_partition, position, policy)
    stop = position + end - start
    return [ReadProblem(source=source, offsets_partition=offsets_partition, position=position,
                        kind="unknown_magic", offset=_I64.unpack_from(data, start)[0],
                        reason=f"unknown magic {magic} at byte {position + 16}; {unread_range(position, stop)}",
                        unread_to=stop)]


# ================================================================================================================
# magic 2
# ================================================================================================================
def _decode_v2(data: bytes, start: int, end: int, source: str, partition: int, position: int,
               policy: ReadPolicy = DEFAULT_POLICY) -> list:
    """`DefaultRecordBatch` (Kafka 0.11-4.x): header, CRC-32C check, then `DefaultRecord.readFrom` per record.

    Returns the items for this entry: ``[(header, records)]`` in the common case, ReadProblems before it or
    instead of it otherwise (see the module docstring for what a failed check gives).
    """
    size = end - start
    stop = position + size
    if size < RECORD_BATCH_OVERHEAD:
        return [ReadProblem(source=source, offsets_partition=partition, position=position, kind="unframeable",
                            offset=_I64.unpack_from(data, start)[0], unread_to=stop,
                            reason=f"record batch size {size} is smaller than the batch overhead "
                                   f"({RECORD_BATCH_OVERHEAD}); {unread_range(position, stop)}")]
    (base_offset, _length, leader_epoch, magic, crc, attributes, last_offset_delta, base_ts, max_ts,
     producer_id, producer_epoch, base_sequence, count) = _V2_UNPACK(data, start)
    computed = _crc32c(data[start + 21:end])
    crc_valid = computed == crc
    codec_id = attributes & COMPRESSION_CODEC_MASK
    log_append = attributes & TIMESTAMP_TYPE_MASK
    header = _new_header(
        source, partition, position, base_offset, as_long(base_offset + last_offset_delta), size, magic, crc, crc_valid,
        attributes, _CODEC_LABELS[codec_id], LOG_APPEND_TIME if log_append else CREATE_TIME,
        (attributes & TRANSACTIONAL_FLAG_MASK) != 0, (attributes & CONTROL_FLAG_MASK) != 0,
        base_ts if attributes & DELETE_HORIZON_FLAG_MASK else None, base_ts, max_ts, producer_id, producer_epoch,
        base_sequence, leader_epoch, count)
    if count < 0:
        records, kind, why = None, "corrupt_batch", f"invalid record count {count} at byte {position + 57}"
    else:
        records, kind, why = _v2_records(data, start, end, count, header, position, codec_id, log_append, max_ts,
                                         base_ts, base_offset, base_sequence, policy)
    if not crc_valid:
        return _crc_failed(header, records, why, f"stored CRC-32C {crc} != computed {computed}", policy)
    if records is None:
        # the header is verified: its record count is what this batch held (a negative one counts none)
        return [ReadProblem(source=source, offsets_partition=partition, position=position, kind=kind,
                            offset=base_offset, records=max(count, 0), reason=why,
                            unread_to=stop if count < 0 else None)]
    return [(header, records)]


def _v2_records(data, start, end, count, header, position, codec_id, log_append, max_ts, base_ts, base_offset,
                base_sequence, policy) -> tuple[list | None, str | None, str | None]:
    """The records of a framed v2 batch: ``(records, None, None)`` or ``(None, kind, reason)``."""
    if codec_id == 0:
        section, sec_start, sec_end, sec_pos = data, start + RECORD_BATCH_OVERHEAD, end, position
    else:
        try:
            section = codecs.decompress(codec_id, data[start + RECORD_BATCH_OVERHEAD:end], magic=2,
                                        max_bytes=policy.max_batch_bytes)
        except DecodeError as e:
            kind = e.kind if e.kind in ("bad_codec", "decompression_too_large") else "decompress_failed"
            return None, kind, f"{header.codec} record section at byte {position + RECORD_BATCH_OVERHEAD}: {e}"
        sec_start, sec_end, sec_pos = 0, len(section), None
    try:
        records = _read_v2_records(section, sec_start, sec_end, count, header, base_offset,
                                   max_ts if log_append else None, base_ts, base_sequence)
    except _RecordError as e:
        if sec_pos is None:
            where = f"byte {e.position} of the decompressed record section"
        else:
            where = f"byte {sec_pos + (e.position - start)}"
        return None, "corrupt_batch", f"{e} at {where}"
    return records, None, None


def _crc_failed(header: RecordBatchHeader, records: list | None, why: str | None, mismatch: str,
                policy: ReadPolicy) -> list:
    """A batch (or legacy entry) whose checksum does not verify: never state unless the policy says so."""
    src, part, pos = header.source, header.offsets_partition, header.position
    stop = pos + header.size
    if records is None:
        return [ReadProblem(source=src, offsets_partition=part, position=pos, kind="crc_mismatch",
                            offset=header.base_offset, unread_to=stop,
                            reason=f"{mismatch}; its records cannot be read either ({why}), so its record count is "
                                   f"unverified; {unread_range(pos, stop)}")]
    if not records:
        return [ReadProblem(source=src, offsets_partition=part, position=pos, kind="crc_mismatch",
                            offset=header.base_offset, reason=f"{mismatch}; the batch holds no records")]
    if policy.replay_corrupt_batches:
        return [ReadProblem(source=src, offsets_partition=part, position=pos, kind="crc_mismatch",
                            offset=header.base_offset,
                            reason=f"{mismatch} (batch replayed anyway: rebuild.replay_corrupt_batches)"),
                (header, records)]
    return [ReadProblem(source=src, offsets_partition=part, position=pos, kind="crc_mismatch", offset=r.offset,
                        key=r.key, value=r.value, records=1,
                        reason=f"{mismatch}: record at offset {r.offset} of a batch that fails its checksum; "
                               f"not replayed (rebuild.replay_corrupt_batches)")
            for r in records]


def v2_records(buf, pos: int, end: int, count: int) -> Iterator[tuple]:
    """`DefaultRecord.readFrom` up to the headers, for each of the ``count`` records in ``buf[pos:end]`` (Kafka
    0.11-4.x): ``(start, end, length, timestampDelta, offsetDelta, key, valueStart, valueLength, headersStart)``.
    The one Python reader of the record layout; each caller reads the headers and checks they end at ``end``.

    Zig-zag varints are inlined for 1 byte (and 2 bytes for the length and timestamp delta, which usually need
    them); longer ones go through `_varint`. Raises `_RecordError`.
    """
    varint = _varint
    try:
        for i in range(count):
            if pos >= end:
                raise _RecordError(f"batch declares {count} records but holds {i}", pos)
            rec_start = pos
            b = buf[pos]
            if b < 0x80:
                length = (b >> 1) ^ -(b & 1)
                pos += 1
            elif buf[pos + 1] < 0x80:
                raw = (b & 0x7F) | (buf[pos + 1] << 7)
                length = (raw >> 1) ^ -(raw & 1)
                pos += 2
            else:
                length, pos = varint(buf, pos, 5)
            if length < 0:
                raise _RecordError(f"negative record length {length}", rec_start)
            rec_end = pos + length
            if rec_end > end:
                raise _RecordError(f"record of {length} bytes runs past the batch end", rec_start)
            pos += 1  # attributes (unused)
            b = buf[pos]
            if b < 0x80:
                ts_delta = (b >> 1) ^ -(b & 1)
                pos += 1
            elif buf[pos + 1] < 0x80:
                raw = (b & 0x7F) | (buf[pos + 1] << 7)
                ts_delta = (raw >> 1) ^ -(raw & 1)
                pos += 2
            else:
                ts_delta, pos = varint(buf, pos, 10)
            b = buf[pos]
            if b < 0x80:
                off_delta = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                off_delta, pos = varint(buf, pos, 5)
            b = buf[pos]
            if b < 0x80:
                klen = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                klen, pos = varint(buf, pos, 5)
            if klen >= 0:
                key = buf[pos:pos + klen]
                pos += klen
            else:
                key = None
            b = buf[pos]
            if b < 0x80:
                vlen = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                vlen, pos = varint(buf, pos, 5)
            yield rec_start, rec_end, length, ts_delta, off_delta, key, pos, vlen, pos + vlen if vlen > 0 else pos
            pos = rec_end
    except IndexError:
        raise _RecordError("record runs past the end of the batch", pos) from None


def _read_v2_records(buf: bytes, pos: int, end: int, count: int, header: RecordBatchHeader, base_offset: int,
                     log_append_time: int | None, base_ts: int, base_sequence: int) -> list[LogRecord]:
    """`DefaultRecord.readFrom` x recordsCount (`v2_records`), then Kafka's "records still remaining" check
    (0.11-4.x)."""
    out: list[LogRecord] = []
    append = out.append
    first_offset = None
    make = _new_record
    empty = ()
    # LogAppendTime: every record carries maxTimestamp (DefaultRecordBatch.iterator's logAppendTime)
    if log_append_time is not None:
        ts_base, ts_scale = log_append_time, 0
    else:
        ts_base, ts_scale = base_ts, 1
    has_seq = base_sequence >= 0
    hs = pos
    try:
        for rec_start, pos, length, ts_delta, off_delta, key, vs, vlen, hs in v2_records(buf, pos, end, count):
            value = buf[vs:vs + vlen] if vlen >= 0 else None
            if buf[hs] == 0:
                hend = hs + 1
                hkeys = empty
            else:
                hkeys, hend = _headers(buf, hs, pos)
            if hend != pos:
                raise _RecordError(f"invalid record size: expected to read {length} bytes in record payload, "
                                   f"but instead read {hend - (pos - length)}", rec_start)
            offset = as_long(base_offset + off_delta)
            if first_offset is None:
                first_offset = offset
            if has_seq:
                seq = base_sequence + off_delta  # DefaultRecordBatch.incrementSequence: wraps past Int32.MAX
                if seq > INT32_MAX:
                    seq -= 0x80000000
            else:
                seq = NO_SEQUENCE
            append(make(header, offset, as_long(ts_base + ts_delta * ts_scale), first_offset, seq, key, value, hkeys))
    except IndexError:  # the header count, or a header, past the buffer
        raise _RecordError("record runs past the end of the batch", hs) from None
    if pos != end:
        raise _RecordError(f"incorrect declared batch size: {end - pos} bytes remain after {count} records", pos)
    return out


def _varint(buf: bytes, pos: int, max_bytes: int) -> tuple[int, int]:
    """Zig-zag varint/varlong (`ByteUtils.readVarint`/`readVarlong`): at most 5 / 10 bytes."""
    raw = 0
    shift = 0
    start = pos
    while True:
        b = buf[pos]
        pos += 1
        raw |= (b & 0x7F) << shift
        if b < 0x80:
            return (raw >> 1) ^ -(raw & 1), pos
        shift += 7
        if pos - start >= max_bytes:
            raise _RecordError(f"varint longer than {max_bytes} bytes", start)


def _headers(buf: bytes, pos: int, rec_end: int) -> tuple[tuple[str, ...], int]:
    """Record headers (`DefaultRecord.readHeaders`): keys kept (UTF-8), values skipped."""
    start = pos
    n, pos = _varint(buf, pos, 5)
    if n < 0:
        raise _RecordError(f"found invalid number of record headers {n}", start)
    keys = []
    for _ in range(n):
        if pos >= rec_end:
            raise _RecordError("record headers run past the record end", pos)
        klen, pos = _varint(buf, pos, 5)
        if klen < 0:
            raise _RecordError(f"invalid negative header key size {klen}", pos)
        keys.append(buf[pos:pos + klen].decode("utf-8", "replace"))
        pos += klen
        vlen, pos = _varint(buf, pos, 5)
        if vlen > 0:
            pos += vlen
    return tuple(keys), pos


# ================================================================================================================
# magic 0 / 1
# ================================================================================================================
def _decode_legacy(data: bytes, start: int, end: int, source: str, partition: int, position: int,
                   policy: ReadPolicy = DEFAULT_POLICY) -> list:
    """`AbstractLegacyRecordBatch` (Kafka 0.10-4.x): a plain message, or a compressed wrapper and its inner set."""
    (offset, _size, crc, magic, attributes) = _LEGACY_HEAD.unpack_from(data, start)
    computed = _crc32(data[start + 16:end])
    crc_valid = computed == crc
    codec_id = attributes & COMPRESSION_CODEC_MASK
    log_append = magic == 1 and bool(attributes & TIMESTAMP_TYPE_MASK)
    ts_type = NO_TIMESTAMP_TYPE if magic == 0 else (LOG_APPEND_TIME if log_append else CREATE_TIME)

    def make_header(base_offset: int, n: int, timestamp: int) -> RecordBatchHeader:
        return RecordBatchHeader(
            source=source, offsets_partition=partition, position=position, base_offset=base_offset,
            last_offset=offset, size=end - start, magic=magic, crc=crc, crc_valid=crc_valid, attributes=attributes,
            codec=CODEC_NAMES.get(codec_id, f"unknown({codec_id})"), timestamp_type=ts_type,
            is_transactional=False, is_control=False, delete_horizon_ms=None, base_timestamp=timestamp,
            max_timestamp=timestamp, producer_id=NO_PRODUCER_ID, producer_epoch=NO_PRODUCER_EPOCH,
            base_sequence=NO_SEQUENCE, partition_leader_epoch=NO_PARTITION_LEADER_EPOCH, records_count=n)

    header, records, kind, why = _legacy_records(data, start, end, offset, magic, codec_id, log_append, policy,
                                                 position, make_header)
    if not crc_valid:
        if header is None:
            header = make_header(offset, 0, -1)
        return _crc_failed(header, records, why, f"stored CRC-32 {crc} != computed {computed}", policy)
    if records is None:
        # a verified entry is one message (a wrapper: one entry of the log) whatever it held
        return [ReadProblem(source=source, offsets_partition=partition, position=position, kind=kind,
                            offset=offset, records=1, reason=why)]
    return [(header, records)]


def _legacy_records(data, start, end, offset, magic, codec_id, log_append, policy, position, make_header):
    """``(header, records, None, None)`` of a legacy entry, or ``(None, None, kind, reason)``."""
    try:
        timestamp, key, value = _parse_legacy_message(data, start, end)
    except _RecordError as e:
        return None, None, "corrupt_batch", f"{e} at byte {position + (e.position - start)}"
    if codec_id == 0:
        header = make_header(offset, 1, timestamp)
        return header, [LogRecord(batch=header, offset=offset, timestamp=timestamp, first_offset_in_batch=offset,
                                  sequence=NO_SEQUENCE, key=key, value=value)], None, None
    if value is None:
        return None, None, "corrupt_batch", "compressed wrapper message has a null value"
    try:
        inner = codecs.decompress(codec_id, value, magic=magic, max_bytes=policy.max_batch_bytes)
    except DecodeError as e:
        kind = e.kind if e.kind in ("bad_codec", "decompression_too_large") else "decompress_failed"
        return None, None, kind, f"wrapper value ({CODEC_NAMES.get(codec_id, codec_id)}): {e}"
    try:
        inner_msgs = _parse_inner_set(inner)
    except _RecordError as e:
        return None, None, "corrupt_batch", f"{e} at byte {e.position} of the decompressed inner message set"
    if magic >= 1 and offset != 0:
        # v1 inner offsets are relative; absolute = wrapperOffset - lastInnerRelative + innerRelative
        delta = as_long(offset - inner_msgs[-1][0])
    else:
        delta = 0  # v0: absolute; v1 wrapper offset 0 (librdkafka produce quirk): base 0
    first = as_long(inner_msgs[0][0] + delta)
    header = make_header(first, len(inner_msgs), timestamp)
    records = []
    for inner_offset, inner_magic, inner_ts, ikey, ivalue in inner_msgs:
        if log_append:
            ts = timestamp
        else:
            ts = inner_ts if inner_magic >= 1 else -1
        records.append(LogRecord(batch=header, offset=as_long(inner_offset + delta), timestamp=ts,
                                 first_offset_in_batch=first, sequence=NO_SEQUENCE, key=ikey, value=ivalue))
    return header, records, None, None


def _parse_legacy_message(data: bytes, start: int, end: int) -> tuple[int, bytes | None, bytes | None]:
    """`LegacyRecord` fields of the entry ``data[start:end]``: (timestamp, key, value). Raises `_RecordError`."""
    magic = data[start + 16]
    size = end - start - LOG_OVERHEAD
    minimum = LEGACY_RECORD_OVERHEAD_V1 if magic == 1 else LEGACY_RECORD_OVERHEAD_V0
    if size < minimum:
        raise _RecordError(f"message size {size} is less than the minimum record overhead {minimum} "
                           f"for magic {magic}", start + 8)
    pos = start + 18
    if magic == 1:
        (timestamp,) = _I64.unpack_from(data, pos)
        pos += 8
    else:
        timestamp = -1
    (klen,) = _I32.unpack_from(data, pos)
    pos += 4
    if klen >= 0:
        if pos + klen + 4 > end:
            raise _RecordError(f"key length {klen} overruns the message", pos - 4)
        key = data[pos:pos + klen]
        pos += klen
    elif klen == -1:
        key = None
    else:
        raise _RecordError(f"invalid key length {klen}", pos - 4)
    (vlen,) = _I32.unpack_from(data, pos)
    pos += 4
    if vlen >= 0:
        if pos + vlen > end:
            raise _RecordError(f"value length {vlen} overruns the message", pos - 4)
        value = data[pos:pos + vlen]
        pos += vlen
    elif vlen == -1:
        value = None
    else:
        raise _RecordError(f"invalid value length {vlen}", pos - 4)
    if pos != end:
        raise _RecordError(f"{end - pos} bytes remain after the message value", pos)
    return timestamp, key, value


def _parse_inner_set(inner: bytes) -> list[tuple[int, int, int, bytes | None, bytes | None]]:
    """`DeepRecordsIterator`: the uncompressed inner messages of a wrapper, as (offset, magic, ts, key, value)."""
    out = []
    pos = 0
    n = len(inner)
    while pos < n:
        if n - pos < LOG_OVERHEAD + LEGACY_RECORD_OVERHEAD_V0:
            raise _RecordError(f"{n - pos} trailing bytes in the inner message set", pos)
        inner_offset, size = ENTRY_HEAD.unpack_from(inner, pos)
        entry_end = pos + LOG_OVERHEAD + size
        if size < LEGACY_RECORD_OVERHEAD_V0 or entry_end > n:
            raise _RecordError(f"inner message size {size} invalid", pos + 8)
        magic = inner[pos + 16]
        if magic > 1:
            raise _RecordError(f"inner message has magic {magic}", pos + 16)
        if inner[pos + 17] & COMPRESSION_CODEC_MASK:
            raise _RecordError("inner message is itself compressed", pos + 17)
        ts, key, value = _parse_legacy_message(inner, pos, entry_end)
        out.append((inner_offset, magic, ts, key, value))
        pos = entry_end
    if not out:
        raise _RecordError("found invalid compressed record set with no inner records", 0)
    return out

