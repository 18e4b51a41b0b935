"""A log's bytes cut into entries, as Kafka's `FileLogInputStream.nextBatch` cuts them (Kafka 0.11-4.x), and the
problem each way the cutting can stop is reported as.

This is the one Python walker of the framing; `_fastdecode.c`'s `frame_entry` is the C one, and the two agree
entry for entry (`tests/decoding/test_segments.py`). Every reader of segment bytes walks with it: the decoders
(`batches`, `columnar`), the counting (`frames.decode.count_segment`), the entry heads of ranges and log end
offsets (`segments.entry_heads`), and preflight's sniff of a file.

An entry is ``LOG_OVERHEAD`` bytes (offset int64, size int32) and then ``size`` bytes: a v2 batch, or a legacy
message (a compressed wrapper included). What is in it is the decoders' business; the walk reads its head only:

    offset: int64 | size: int32 | partitionLeaderEpoch (v2) or crc (v0/v1): int32 | magic: int8 | ...
    |<------------------------- HEADER_SIZE_UP_TO_MAGIC = 17 bytes -------------------------->|

and stops for good (Kafka reads nothing past these either) where
- ``HEADER_SIZE_UP_TO_MAGIC`` bytes or fewer are left: the tail (all zeros: a preallocated tail, else torn);
- ``size`` is below ``LEGACY_RECORD_OVERHEAD_V0``: nothing after can be framed (all zeros: a preallocated tail);
- the entry runs past the end: a torn tail.
"""
from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pipelines.decoding.native import fastdecode
from schemas.records import ReadProblem

if TYPE_CHECKING:
    import numpy as np

LOG_OVERHEAD = 12  # offset + size
HEADER_SIZE_UP_TO_MAGIC = 17  # LOG_OVERHEAD + partitionLeaderEpoch/crc + magic
LEGACY_RECORD_OVERHEAD_V0 = 14  # crc + magic + attributes + keyLength + valueLength: the smallest entry
MAGIC_OFFSET = 16  # the magic byte's place in an entry
ENTRY_HEAD = struct.Struct(">qi")  # offset, size
V2_HEAD_BYTES = 27  # a v2 batch through its lastOffsetDelta (int32 at byte 23)
V2_RECORDS_COUNT_AT = 57  # a v2 batch's recordsCount (int32), the last field of its 61-byte header

_unpack_int32 = struct.Struct(">i").unpack_from
_LONG_MIN, _LONG_MAX = -(1 << 63), (1 << 63) - 1


def as_long(n: int) -> int:
    """`n` as Java's long arithmetic leaves a sum: wrapped into [-2^63, 2^63). Offsets and timestamps are base plus
    delta in Kafka (`DefaultRecord.readFrom`), and a crafted batch near the end of the range wraps there (to a
    negative offset, which validation reports); a Python int would run past what the columns hold."""
    if _LONG_MIN <= n <= _LONG_MAX:
        return n
    return ((n - _LONG_MIN) & ((1 << 64) - 1)) + _LONG_MIN

_unpack_head = ENTRY_HEAD.unpack_from


def last_offset(buf, pos: int, offset: int, total: int) -> int:
    """The last offset of the framed entry at ``buf[pos]`` whose offset field is ``offset``: a v2 batch's
    baseOffset + lastOffsetDelta (when it is long enough to hold it); a legacy entry's own offset (a compressed
    wrapper carries its last inner offset)."""
    if buf[pos + MAGIC_OFFSET] == 2 and total >= V2_HEAD_BYTES:
        return as_long(offset + _unpack_int32(buf, pos + 23)[0])
    return offset


def records_held(buf, pos: int, offset: int, total: int, previous_last: int | None) -> int:
    """The records the framed entry at ``buf[pos]`` holds, as its head tells, at least one: a v2 batch's
    recordsCount; a legacy entry's offsets since ``previous_last``, the last offset of the entry before it (None:
    one). A legacy compressed wrapper's inner count is not in its head; its offset is its last inner one's."""
    if buf[pos + MAGIC_OFFSET] == 2:
        held = _unpack_int32(buf, pos + V2_RECORDS_COUNT_AT)[0] if total >= V2_RECORDS_COUNT_AT + 4 else 1
    else:
        held = 1 if previous_last is None else offset - previous_last
    return max(1, held)


def unread_range(start: int, stop: int) -> str:
    """The unread-range wording every reader uses (the quarantine reason carries it)."""
    return f"bytes [{start}, {stop}) not read ({stop - start} bytes)"


def frame_entry(buf, pos: int, end: int) -> tuple[int, int] | None:
    """The entry at ``buf[pos]`` as ``(offset, total size)`` when it lies whole within ``buf[:end]``; None where
    the walk stops (`stop_problem` says why)."""
    remaining = end - pos
    if remaining <= HEADER_SIZE_UP_TO_MAGIC:
        return None
    offset, size = _unpack_head(buf, pos)
    if size < LEGACY_RECORD_OVERHEAD_V0 or LOG_OVERHEAD + size > remaining:
        return None
    return offset, LOG_OVERHEAD + size


def frame_entries(buf, start: int, end: int, *, source: str, offsets_partition: int,
                  base_position: int = 0) -> Iterator[tuple[int, int, int] | ReadProblem]:
    """``(position, offset, total size)`` of each whole entry of ``buf[start:end]``, in order, then the
    `stop_problem` that ended the walk (none when it ended at ``end`` exactly). Positions are of ``buf``;
    ``base_position`` is ``buf[0]``'s position in ``source``, for the problem."""
    pos = start
    while (frame := frame_entry(buf, pos, end)) is not None:
        yield pos, *frame
        pos += frame[1]
    if pos < end:
        yield stop_problem(buf, pos, end, source=source, offsets_partition=offsets_partition,
                           base_position=base_position)


def stop_problem(buf, pos: int, end: int, *, source: str, offsets_partition: int,
                 base_position: int = 0) -> ReadProblem:
    """Why the walk can't frame an entry at ``buf[pos]`` (`frame_entry` gave None, ``pos < end``): a zero or
    torn tail, an unframeable size, or a torn entry; the bytes to ``end`` are unread."""
    start, stop = base_position + pos, base_position + end
    n = end - pos
    where = dict(source=source, offsets_partition=offsets_partition, position=start, unread_to=stop)
    zero_tail = dict(kind="zero_tail", reason=f"{n} zero bytes at the end of the file (preallocated tail); "
                                              f"{unread_range(start, stop)}", **where)
    if n <= HEADER_SIZE_UP_TO_MAGIC:
        if _all_zero(buf, pos, end):
            return ReadProblem(**zero_tail)
        return ReadProblem(kind="torn_tail", reason=f"{n} bytes left, too few for an entry header "
                                                    f"({HEADER_SIZE_UP_TO_MAGIC + 1} needed); "
                                                    f"{unread_range(start, stop)}", **where)
    offset, size = _unpack_head(buf, pos)
    if size < LEGACY_RECORD_OVERHEAD_V0:
        if offset == 0 and size == 0 and _all_zero(buf, pos, end):
            return ReadProblem(**zero_tail)
        return ReadProblem(kind="unframeable", offset=offset,
                           reason=f"entry size {size} is smaller than the minimum record overhead "
                                  f"({LEGACY_RECORD_OVERHEAD_V0}): the rest of the file cannot be framed; "
                                  f"{unread_range(start, stop)}", **where)
    total = LOG_OVERHEAD + size
    return ReadProblem(kind="torn_tail", offset=offset,
                       reason=f"entry of {total} bytes at position {start} runs past the end ({n} bytes left); "
                              f"{unread_range(start, stop)}", **where)


def _all_zero(buf, pos: int, end: int) -> bool:
    """Whether ``buf[pos:end]`` is all zeros, read a MiB at a time (a preallocated tail may be large)."""
    while pos < end:
        chunk = bytes(buf[pos:min(end, pos + (1 << 20))])
        if chunk.count(0) != len(chunk):
            return False
        pos += len(chunk)
    return True


@dataclass(frozen=True)
class EntryHeads:
    """Where the entries of a segment file sit (a v2 batch, or a legacy message or compressed wrapper), as arrays in
    file order: each entry's position, its last offset (v2: baseOffset + lastOffsetDelta; legacy: the entry's own
    offset, a wrapper's being its last) and the records it holds, as its head tells (v2: recordsCount; legacy: the
    offsets since the entry before it in the file, one for the first: a wrapper's inner count is not in its head);
    at least one each. `end`: where the walk stopped (the file's end, or an entry it could not frame)."""

    positions: np.ndarray  # int64
    last_offsets: np.ndarray  # int64
    records: np.ndarray  # int64
    end: int

    def __len__(self) -> int:
        return len(self.positions)


def walk_entry_heads(buf, start: int = 0) -> EntryHeads:
    """`entry_heads` over bytes already in hand (a mapped segment, or a slice of one: the walk stops at its end, so
    a slice bounds it). In C (`native`), else `_walk_entry_heads`."""
    return (_walk_entry_heads if fastdecode is None else _walk_entry_heads_in_c)(buf, start)


def _walk_entry_heads_in_c(buf, start: int) -> EntryHeads:
    """`_fastdecode.entry_heads` over a segment file's bytes `buf`: the reference's walk, in C."""
    # imported here, not at module level: numpy ~0.1-0.3 s of import (python -X importtime)
    import numpy as np

    positions, lasts, records, end = fastdecode.entry_heads(buf, start)
    return EntryHeads(*(np.frombuffer(a, np.int64) for a in (positions, lasts, records)), end)


def _walk_entry_heads(buf, start: int) -> EntryHeads:
    """The reference walk of `entry_heads` over a segment file's bytes `buf`: `framing.frame_entry`'s entries,
    up to one whose head can't be read (a magic other than 0-2, a negative offset, a v2 batch too short to hold
    its lastOffsetDelta)."""
    # imported here, not at module level: numpy ~0.1-0.3 s of import (python -X importtime)
    import numpy as np

    end, pos = len(buf), start
    positions, lasts, records = [], [], []
    while (frame := frame_entry(buf, pos, end)) is not None:
        offset, total = frame
        magic = buf[pos + MAGIC_OFFSET]
        if offset < 0 or magic > 2 or (magic == 2 and total < V2_HEAD_BYTES):
            break
        records.append(records_held(buf, pos, offset, total, lasts[-1] if lasts else None))
        positions.append(pos)
        lasts.append(last_offset(buf, pos, offset, total))
        pos += total
    return EntryHeads(np.array(positions, np.int64), np.array(lasts, np.int64), np.array(records, np.int64), pos)
