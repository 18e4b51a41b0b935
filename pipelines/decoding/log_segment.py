"""One segment of a data-topic partition with the indexes beside it (Kafka's `LogSegment`, 0.10.1-4.x), read for
what lag in time needs: where the batch holding an offset starts (`OffsetIndex.lookup`, then the batch headers as
`FileRecords.searchForOffsetWithSize` walks them), the timestamp of the first record a consumer is handed at or
after that offset, read from that one batch, and the largest timestamp of the segment's records up to it.

The indexes are hints, checked before they are trusted: an offset entry is used only once the bytes at its position
frame a batch whose checksum holds and that ends at or below the entry's offset (so every batch before it ends
before the asked offset, whatever else the index says); a time entry only once the batch holding its offset has a
largest timestamp at least the entry's. The time index is used only when it is whole (`indexes` found nothing
torn). Whatever is not trusted is read from the batch headers instead (`framing.walk_entry_heads`, the framing
walk, in C) with one `schemas.log_notes` note per file, so a bad index costs time, never a wrong timestamp.

What is read per asked offset: an index lookup, the headers from the index point to the batch (the broker indexes
every `index.interval.bytes`, 4 KB; walked in C once per index entry and kept), that one batch (its offsets and
timestamps, once its checksum holds), and, once per time entry used, the header of the batch it names. A segment
below an asked one is read from its indexes' last entries and the headers after them. A segment of at most
`SMALL_SEGMENT_BYTES` is read from its headers alone: fewer bytes than its indexes cost to open. Control batches
(transaction markers) and batches the cleaner emptied are stepped over: no consumer is handed them, but their
timestamps count towards the largest so far, as the broker's own time index counts them.

Header fields (spec §1.2-1.3): v2 attributes at byte 21 (int16; bit 3 LogAppendTime, bit 5 control), maxTimestamp
at 35, recordsCount at 57; v1 attributes at 17 and the (wrapper's) timestamp at 18; v0 has no timestamp (-1).
"""
from __future__ import annotations

import mmap
import os
import struct
import zlib
from dataclasses import dataclass
from functools import cached_property

import crc32c as _crc32c_mod
import numpy as np

from pipelines.decoding import codecs
from pipelines.decoding.batches import decode_entry, v2_records
from pipelines.decoding.framing import frame_entry
from pipelines.decoding.indexes import OffsetIndex, TimeIndex, open_index, read_offset_index, read_time_index
from pipelines.decoding.policy import DEFAULT_POLICY
from pipelines.decoding.framing import walk_entry_heads
from schemas.log_notes import (BATCH_UNREADABLE, INDEX_MISMATCH, INDEX_MISSING, SEGMENT_TORN, SEGMENT_UNREADABLE,
                               LogNote)
from schemas.records import CREATE_TIME, LOG_APPEND_TIME, NO_TIMESTAMP_TYPE

__all__ = ["Found", "Head", "LogSegment", "NO_TIMESTAMP", "UNREADABLE"]

NO_TIMESTAMP = -1  # RecordBatch.NO_TIMESTAMP: a magic 0 record, an empty batch
V2_HEADER_BYTES = 61
# Past an index's last entry the headers are walked in Python up to this many bytes (a broker indexes every 4 KB);
# a longer stretch (an index.interval.bytes far above the default, an index emptied by hand) is walked in C once.
_LONGEST_WALK = 1 << 20
# A segment this small is read from its headers, never its indexes: a walk in C of at most a few hundred heads costs
# less than opening, reading and checking its two index files (16 index entries at the default 4 KB interval).
SMALL_SEGMENT_BYTES = 1 << 16
_I16, _I32, _I64, _U32 = struct.Struct(">h"), struct.Struct(">i"), struct.Struct(">q"), struct.Struct(">I")
_crc32c = _crc32c_mod.crc32c


class _Unreadable:
    """The batch holding an asked offset could not be read: the answer is unknown (never guessed)."""

    def __repr__(self) -> str:
        return "UNREADABLE"


UNREADABLE = _Unreadable()


@dataclass(frozen=True, slots=True)
class Head:
    """What an entry's head says without decoding its records."""

    position: int
    total: int  # bytes of the entry (LOG_OVERHEAD + size)
    offset: int  # v2: baseOffset; legacy: the entry's own offset (a compressed wrapper's last inner one)
    last_offset: int
    magic: int
    max_timestamp: int  # v2: maxTimestamp; v1: the (wrapper's) timestamp; v0: NO_TIMESTAMP
    timestamp_type: str
    is_control: bool
    records: int  # v2: recordsCount; legacy: 1 (a wrapper's inner count is not in its head)


@dataclass(frozen=True, slots=True)
class Found:
    """The first record a consumer is handed at or after an asked offset."""

    offset: int
    timestamp: int  # its own (ms since the epoch; NO_TIMESTAMP for a magic 0 record)
    max_timestamp: int  # the largest timestamp of the segment's records up to and including it (NO_TIMESTAMP: none)
    timestamp_type: str  # of its batch: CreateTime, LogAppendTime, NoTimestampType
    position: int  # its batch's byte position in the segment


def read_head(buf, pos: int, total: int) -> Head | None:
    """The head of the framed entry at `buf[pos]`, None when it cannot be one (a magic above 2, a v2 entry shorter
    than its header, a negative offset)."""
    magic = buf[pos + 16]
    offset = _I64.unpack_from(buf, pos)[0]
    if offset < 0 or magic > 2:
        return None
    if magic == 2:
        if total < V2_HEADER_BYTES:
            return None
        attributes = _I16.unpack_from(buf, pos + 21)[0]
        return Head(pos, total, offset, offset + _I32.unpack_from(buf, pos + 23)[0], 2,
                    _I64.unpack_from(buf, pos + 35)[0], LOG_APPEND_TIME if attributes & 0x08 else CREATE_TIME,
                    bool(attributes & 0x20), _I32.unpack_from(buf, pos + 57)[0])
    if magic == 1:
        if total < 26:
            return None
        return Head(pos, total, offset, offset, 1, _I64.unpack_from(buf, pos + 18)[0],
                    LOG_APPEND_TIME if buf[pos + 17] & 0x08 else CREATE_TIME, False, 1)
    return Head(pos, total, offset, offset, 0, NO_TIMESTAMP, NO_TIMESTAMP_TYPE, False, 1)


def checksum_holds(buf, pos: int, total: int) -> bool:
    """The entry's stored CRC matches its bytes: CRC-32C of [21, end) for v2, CRC-32 of [16, end) for legacy."""
    end = pos + total
    if buf[pos + 16] == 2:
        return _crc32c(buf[pos + 21:end]) == _U32.unpack_from(buf, pos + 17)[0]
    return zlib.crc32(buf[pos + 16:end]) == _U32.unpack_from(buf, pos + 12)[0]


@dataclass(frozen=True)
class _AllHeads:
    """Every entry of the segment from its headers (the fallback where no index is trusted): positions, last
    offsets, and the largest timestamp of each entry and of every entry before it (`running`)."""

    positions: np.ndarray
    last_offsets: np.ndarray
    running: np.ndarray  # running[k]: the largest max_timestamp among entries 0..k (NO_TIMESTAMP: none)
    end: int


def _largest_timestamps(buf, walked) -> np.ndarray:
    """Each walked entry's largest timestamp (v2 maxTimestamp, v1 timestamp, NO_TIMESTAMP otherwise), gathered from
    the mapped bytes at once."""
    pos = walked.positions
    ts = np.full(len(pos), NO_TIMESTAMP, np.int64)
    if not len(pos):
        return ts
    data = np.frombuffer(buf, np.uint8)
    totals = np.diff(np.append(pos, walked.end))
    magic = data[pos + 16]
    for m, at, least in ((2, 35, V2_HEADER_BYTES), (1, 18, 26)):
        sel = (magic == m) & (totals >= least)
        if sel.any():
            idx = pos[sel][:, None] + at + np.arange(8)
            ts[sel] = np.ascontiguousarray(data[idx]).view(">i8").ravel()
    return ts


def _last_entry(path: str, size: int, layout: str) -> tuple[int, int] | None:
    """An index file's last entry, read alone: None when the file is missing, empty, not a whole number of entries
    or ends in a zero entry (preallocated space)."""
    try:
        with open_index(path) as f:
            end = os.fstat(f.fileno()).st_size
            if end == 0 or end % size:
                return None
            raw = os.pread(f.fileno(), size, end - size)
    except OSError:
        return None
    a, b = struct.unpack(layout, raw)
    return None if a == 0 and b == 0 else (a, b)


class LogSegment:
    """`<base>.log` of a data-topic partition, `.index` and `.timeindex` beside it. Notes go to `notes` (the
    partition's list). Holds the file mapped until `close`."""

    def __init__(self, path: str, base_offset: int, size: int, notes: list[LogNote],
                 last_modified_ms: int | None = None):
        self.path = path
        self.base_offset = base_offset
        self.size = size
        # the file's modification time (ms), Kafka's `LogSegment.lastModified`: None when not known
        self.last_modified_ms = last_modified_ms
        self.notes = notes
        self._mm: mmap.mmap | None = None
        self._verified: set[int] = set()  # offset-index entries checked against the segment
        self._trusted_entries: int | None = None  # offset-index entries usable (a mismatch cuts them)
        self._time_trusted = True
        self._time_checked: set[int] = set()
        self._offset_index_whole = True
        self._stretches: dict[int, _AllHeads] = {}  # offset-index entry -> the heads up to the next one

    def __repr__(self) -> str:
        return f"LogSegment({self.path!r}, base_offset={self.base_offset})"

    # -- the bytes ----------------------------------------------------------------------------------------------
    @property
    def buf(self):
        if self._mm is None:
            with open(self.path, "rb") as f:
                self._mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        return self._mm

    def close(self) -> None:
        if self._mm is not None:
            try:
                self._mm.close()
            except BufferError:  # a view of it still held somewhere: it goes with that view
                pass
            self._mm = None

    def _index_path(self, suffix: str) -> str:
        return self.path[: -len(".log")] + suffix

    # -- the indexes ---------------------------------------------------------------------------------------------
    def _read_index(self, suffix: str, read, missing: str, what: str):
        """`read(path)` of the index beside the segment: (index, note), the note kept; or None with a note of its own
        when the file is missing or unreadable (the batches' headers then stand in for it)."""
        path = self._index_path(suffix)
        try:
            index, note = read(path)
        except FileNotFoundError:
            self.notes.append(LogNote(INDEX_MISSING, path, -1, missing))
        except OSError as e:
            self.notes.append(LogNote(SEGMENT_UNREADABLE, path, -1, f"{what} not read: {e}"))
        else:
            if note is not None:
                self.notes.append(note)
            return index, note
        return None

    @cached_property
    def offset_index(self) -> OffsetIndex | None:
        read = self._read_index(".index", lambda path: read_offset_index(path, self.base_offset, self.size),
                                "no offset index beside the segment: batches located from their headers",
                                "offset index")
        if read is None:
            return None
        index, note = read
        self._offset_index_whole = note is None and self._offset_index_whole
        self._trusted_entries = len(index)
        return index

    @cached_property
    def time_index(self) -> TimeIndex | None:
        """The time index when it is whole: a torn or missing one is not used at all (the largest timestamps are
        then read from the batch headers)."""
        read = self._read_index(".timeindex", lambda path: read_time_index(path, self.base_offset),
                                "no time index beside the segment: largest timestamps read from the batch headers",
                                "time index")
        return None if read is None or read[1] is not None else read[0]  # a torn one: not used at all

    def _entry_holds(self, i: int) -> bool:
        """Offset-index entry `i` agrees with the segment: a batch whose checksum holds starts at its position and
        ends at or below its offset, at or above the segment's base. The first entry that does not cuts the index
        there (one note)."""
        if i in self._verified:
            return True
        index = self.offset_index
        if i >= (self._trusted_entries or 0):
            return False
        pos, entry_offset = int(index.positions[i]), int(index.offsets[i])
        buf = self.buf
        frame = frame_entry(buf, pos, self.size)
        head = None if frame is None else read_head(buf, pos, frame[1])
        if head is None or not (self.base_offset <= head.offset and head.last_offset <= entry_offset) \
                or not checksum_holds(buf, pos, head.total):
            first = self._trusted_entries == len(index)
            self._trusted_entries = i
            if first:
                self.notes.append(LogNote(INDEX_MISMATCH, self._index_path(".index"), i * 8,
                                          f"entry {i} (offset {entry_offset}, position {pos}) does not point at a "
                                          "batch ending at or below its offset: the entries before it are used"))
            return False
        self._verified.add(i)
        return True

    def _index_point(self, target: int) -> tuple[int, int | None, int] | None:
        """(position, entry offset, entry) of the last trusted offset-index entry at or below `target` ((0, None,
        -1): the segment's start), when the index bounds the walk from there to `target`; None when it does not (no
        index, or the index tore or was cut below `target`): then the headers are the way."""
        if self.size <= SMALL_SEGMENT_BYTES:
            return None
        index = self.offset_index
        if index is None:
            return None
        i = index.lookup(target)
        while i >= 0 and not self._entry_holds(i):
            i = min(i, self._trusted_entries) - 1
        position = 0 if i < 0 else int(index.positions[i])
        if i + 1 >= self._trusted_entries:  # no trusted entry above: only a whole index bounds the walk from here
            cut = self._trusted_entries < len(index) or not self._offset_index_whole
            if cut or self.size - position > _LONGEST_WALK:
                return None
        return (0, None, -1) if i < 0 else (position, int(index.offsets[i]), i)

    def _stretch(self, i: int) -> _AllHeads:
        """The heads from offset-index entry `i`'s position (-1: the segment's start) to the next trusted entry's
        (the last: the segment's end), walked in C once and kept: every offset asked under the entry is found in
        them (the broker indexes every `index.interval.bytes`, so a stretch is a few KB of heads)."""
        got = self._stretches.get(i)
        if got is None:
            index = self.offset_index
            start = 0 if i < 0 else int(index.positions[i])
            stop = int(index.positions[i + 1]) if i + 1 < self._trusted_entries else self.size
            view = memoryview(self.buf)[:stop]  # the walk stops at the next entry's batch
            walked = walk_entry_heads(view, start)
            ts = _largest_timestamps(view, walked)
            del view
            got = self._stretches[i] = _AllHeads(walked.positions, walked.last_offsets,
                                                 np.maximum.accumulate(ts) if len(ts) else ts, walked.end)
        return got

    def _locate(self, target: int) -> tuple[int, int] | None:
        """(the position of the first entry ending at or above `target`, or where the heads stop before one; the
        largest timestamp of the segment's entries before it), through the indexes where they are trusted, else
        the headers; None when the segment holds no such entry."""
        point = self._index_point(target)
        if point is not None:
            position, entry_offset, i = point
            before = NO_TIMESTAMP if entry_offset is None else self._largest_before(entry_offset)
            if before is not None:
                heads = self._stretch(i)
                k = int(np.searchsorted(heads.last_offsets, target, side="left"))
                walked = int(heads.running[k - 1]) if k else NO_TIMESTAMP
                if k < len(heads.positions):
                    return int(heads.positions[k]), max(before, walked)
                # past the stretch: the batch at the next entry (or the few after it, in an older broker's
                # multi-batch append) holds it
                position, more, _ = self.walk_to(heads.end, target)
                return position, max(before, walked, more)
        heads = self._all_heads
        k = int(np.searchsorted(heads.last_offsets, target, side="left"))
        if k >= len(heads.positions):
            return None
        return int(heads.positions[k]), int(heads.running[k - 1]) if k else NO_TIMESTAMP

    def _time_entry_holds(self, j: int) -> bool:
        """Time-index entry `j` agrees with the segment: the batch holding its offset has a largest timestamp at
        least the entry's. The first that does not makes the time index unused (one note)."""
        if j in self._time_checked:
            return True
        index = self.time_index
        ts, at = int(index.timestamps[j]), int(index.offsets[j])
        head = self._batch_holding(at)
        if head is None or head.max_timestamp < ts:
            self._time_trusted = False
            self.notes.append(LogNote(INDEX_MISMATCH, self._index_path(".timeindex"), j * 12,
                                      f"entry {j} (timestamp {ts}, offset {at}) is above the largest timestamp of "
                                      "the batch holding that offset: the time index is not used"))
            return False
        self._time_checked.add(j)
        return True

    def _largest_before(self, entry_offset: int) -> int | None:
        """The largest timestamp of the segment's records at or below `entry_offset` (an offset-index entry's, so
        the time index was appended at the same point), from the time index; None when it is not trusted."""
        index = self.time_index
        if index is None or not self._time_trusted:
            return None
        j = index.lookup_offset(entry_offset)
        if j < 0:
            return NO_TIMESTAMP
        return int(index.timestamps[j]) if self._time_entry_holds(j) else None

    # -- the headers ---------------------------------------------------------------------------------------------
    def heads(self, position: int):
        """The entries' heads from `position` (an entry boundary) to the first that cannot be framed."""
        buf, size = self.buf, self.size
        while (frame := frame_entry(buf, position, size)) is not None:
            head = read_head(buf, position, frame[1])
            if head is None:
                return
            yield head
            position += head.total

    def walk_to(self, position: int, offset: int) -> tuple[int, int, int]:
        """From the entry boundary `position`: (the position of the first entry whose last offset is at or above
        `offset`, the largest timestamp of the entries before it, where the walk stopped). The position is the stop
        when no entry reaches `offset`. Reads each head's last offset and largest timestamp only (the index bounds
        the walk to a few of them)."""
        buf, size = self.buf, self.size
        largest = NO_TIMESTAMP
        while (frame := frame_entry(buf, position, size)) is not None:
            base, total = frame
            magic = buf[position + 16]
            if magic == 2:
                if total < V2_HEADER_BYTES or base < 0:
                    break
                last = base + _I32.unpack_from(buf, position + 23)[0]
                ts = _I64.unpack_from(buf, position + 35)[0]
            elif magic < 2 and base >= 0:
                last = base
                ts = _I64.unpack_from(buf, position + 18)[0] if magic == 1 and total >= 26 else NO_TIMESTAMP
            else:
                break
            if last >= offset:
                return position, largest, position
            if ts > largest:
                largest = ts
            position += total
        return position, largest, position

    def _batch_holding(self, offset: int) -> Head | None:
        """The head of the first entry whose last offset is at or above `offset`."""
        point = self._index_point(offset)
        if point is None:
            heads = self._all_heads
            k = int(np.searchsorted(heads.last_offsets, offset, side="left"))
            if k >= len(heads.positions):
                return None
            pos = int(heads.positions[k])
        else:
            heads = self._stretch(point[2])
            k = int(np.searchsorted(heads.last_offsets, offset, side="left"))
            pos = int(heads.positions[k]) if k < len(heads.positions) else self.walk_to(heads.end, offset)[0]
        frame = frame_entry(self.buf, pos, self.size)
        return None if frame is None else read_head(self.buf, pos, frame[1])

    @cached_property
    def _all_heads(self) -> _AllHeads:
        """Every entry's head, walked in C, with their largest timestamps gathered from the mapped bytes."""
        buf = self.buf
        walked = walk_entry_heads(buf, 0)
        pos = walked.positions
        self._note_tail(walked.end)
        if not len(pos):
            empty = np.empty(0, np.int64)
            return _AllHeads(empty, empty, empty, walked.end)
        return _AllHeads(pos, walked.last_offsets, np.maximum.accumulate(_largest_timestamps(buf, walked)),
                         walked.end)

    def _note_tail(self, end: int) -> None:
        """A walk that stopped before the file's end at anything but zeros: a torn segment (one note)."""
        if end >= self.size or any(n.kind == SEGMENT_TORN and n.source == self.path for n in self.notes):
            return
        rest = self.buf[end:min(self.size, end + (1 << 20))]
        if rest.count(0) != len(rest):
            self.notes.append(LogNote(SEGMENT_TORN, self.path, end,
                                      f"bytes [{end}, {self.size}) do not frame a batch: not part of the log"))

    # -- answers -------------------------------------------------------------------------------------------------
    def tail(self) -> Head | None:
        """The head of the segment's last whole entry (the broker's recovery ends the log after it), walked from
        the last trusted offset-index entry."""
        if self.size == 0:
            return None
        point = self._index_point(1 << 62)
        heads = self._all_heads if point is None else self._stretch(point[2])
        self._note_tail(heads.end)
        if not len(heads.positions):
            return None
        pos = int(heads.positions[-1])
        return read_head(self.buf, pos, heads.end - pos)

    def recover(self) -> tuple[Head | None, bool]:
        """`LogSegment.recover` after an unclean shutdown: every entry checked (`ensureValid`: its checksum), the
        segment ending at the first that fails. (The head of the last valid entry, None when there is none; whether
        an entry failed, after which the broker deletes the later segments too.) Reads the whole segment."""
        if self.size == 0:
            return None, False
        last = None
        for head in self.heads(0):
            if not checksum_holds(self.buf, head.position, head.total):
                self.notes.append(LogNote(SEGMENT_TORN, self.path, head.position,
                                          "batch fails its checksum after an unclean shutdown: the broker's recovery "
                                          "truncates the log here"))
                return last, True
            last = head
        end = 0 if last is None else last.position + last.total
        if end < self.size:
            self._note_tail(end)
        # bytes past the last whole entry (torn, or zeros) are truncated bytes too: the later segments go
        return last, end < self.size

    def first_after(self, time_ms: int) -> tuple[int, bool] | _Unreadable | None:
        """`LogSegment.findOffsetByTimestamp` for `time_ms + 1`: (the offset of the first record whose timestamp, or
        that of a record before it in the segment, is past `time_ms`; whether it is the segment's first entry).
        A batch the cleaner emptied whose largest timestamp passes it (`MemoryRecords.filterTo` keeps the batch's
        base and last offsets and its maxTimestamp, 4.0) gives its base offset: its records were appended after
        `time_ms`, where `FileRecords.searchForTimestamp` steps over it to a record appended later still. So does a
        v2 LogAppendTime batch (its maxTimestamp is when it was appended): the cleaner may have removed the records
        at its head and kept its base offset (`buildRetainedRecordsInto`), where Kafka gives the first one kept.
        None when no batch's largest timestamp passes it; UNREADABLE when that batch cannot be read (a note)."""
        heads = self._all_heads
        j = int(np.searchsorted(heads.running, time_ms, side="right"))
        if j >= len(heads.positions):
            return None
        pos = int(heads.positions[j])
        head = read_head(self.buf, pos, (int(heads.positions[j + 1]) if j + 1 < len(heads.positions) else heads.end)
                         - pos)
        if head is not None and head.magic == 2 and (head.records <= 0 or head.timestamp_type == LOG_APPEND_TIME) \
                and checksum_holds(self.buf, pos, head.total):
            return head.offset, j == 0  # the whole batch was appended at once, after `time_ms`
        records = None if head is None else self._records(head, head.offset)
        if not records:
            return UNREADABLE
        k = next((i for i, (_o, ts) in enumerate(records) if ts > time_ms), None)
        if k is None:
            return UNREADABLE  # a batch whose header's largest timestamp none of its records has
        return records[k][0], j == 0 and k == 0

    def largest_timestamp(self) -> int:
        """The largest timestamp of the segment's records (NO_TIMESTAMP: none has one): the time index's last entry
        and the headers after the last offset-index entry (read alone, `_from_last_entries`, or from the whole
        indexes), or every header."""
        if self.size == 0:
            return NO_TIMESTAMP
        if self.size > SMALL_SEGMENT_BYTES and "offset_index" not in self.__dict__:
            got = self._from_last_entries()
            if got is not None:
                return got
        point = self._index_point(1 << 62)
        index = None if point is None else self.time_index
        if point is not None and index is not None and self._time_trusted:
            last = len(index) - 1
            if last < 0 or self._time_entry_holds(last):
                best = int(index.timestamps[last]) if last >= 0 else NO_TIMESTAMP
                heads = self._stretch(point[2])
                self._note_tail(heads.end)
                return max(best, int(heads.running[-1])) if len(heads.running) else best
        heads = self._all_heads
        return int(heads.running[-1]) if len(heads.running) else NO_TIMESTAMP

    def _from_last_entries(self) -> int | None:
        """The largest timestamp from the two indexes' last entries alone (what a segment below an asked one needs:
        its indexes are not read whole, a 1 GB segment's are megabytes): the last offset entry (E, P), checked as
        `_entry_holds` checks one, starts the walk of the tail in C; the last time entry (T, O) counts when the batch
        holding O is in that tail and its largest timestamp is at least T (the broker's last entry at roll names the
        segment's last batches). None when any of it does not hold: then the indexes are read whole."""
        last = _last_entry(self._index_path(".index"), 8, ">ii")
        last_time = _last_entry(self._index_path(".timeindex"), 12, ">qi")
        if last is None or last_time is None:
            return None
        (rel, pos), (ts, rel_time) = last, last_time
        entry = self.base_offset + rel
        buf = self.buf
        frame = frame_entry(buf, pos, self.size) if 0 < pos < self.size else None
        head = None if frame is None else read_head(buf, pos, frame[1])
        if head is None or not self.base_offset <= head.offset <= head.last_offset <= entry \
                or not checksum_holds(buf, pos, head.total) or ts <= 0 or self.base_offset + rel_time < entry:
            return None
        view = memoryview(buf)[:self.size]
        walked = walk_entry_heads(view, pos)
        stamps = _largest_timestamps(view, walked)
        del view
        self._note_tail(walked.end)
        k = int(np.searchsorted(walked.last_offsets, self.base_offset + rel_time, side="left"))
        if k >= len(stamps) or stamps[k] < ts:
            return None
        return max(ts, int(stamps.max()))

    def _records(self, head: Head, target: int) -> list[tuple[int, int]] | None:
        """(offset, timestamp) of each record of the batch at `head`, in order; None when it cannot be read (a note).
        A v2 batch whose checksum holds is read here, offsets and timestamps only (`batches.v2_records`, the record
        layout's one reader; its records must end where the batch does); anything else, or any doubt, is decoded
        by `batches.decode_entry`, the reference, as `columnar` does."""
        buf, pos, total = self.buf, head.position, head.total
        if head.magic == 2 and head.records > 0:
            try:
                data = buf[pos:pos + total]
                if _crc32c(data[21:]) == _U32.unpack_from(data, 17)[0]:
                    attributes = _I16.unpack_from(data, 21)[0]
                    codec = attributes & 0x07
                    if codec:
                        section = codecs.decompress(codec, data[V2_HEADER_BYTES:], magic=2,
                                                    max_bytes=DEFAULT_POLICY.max_batch_bytes)
                        start, end = 0, len(section)
                    else:
                        section, start, end = data, V2_HEADER_BYTES, total
                    # LogAppendTime: every record carries the batch's maxTimestamp
                    ts_base, ts_scale = ((_I64.unpack_from(data, 35)[0], 0) if attributes & 0x08
                                         else (_I64.unpack_from(data, 27)[0], 1))
                    out, last_end = [], start
                    for _s, last_end, _n, ts_delta, off_delta, *_rest in v2_records(section, start, end, head.records):
                        out.append((head.offset + off_delta, ts_base + ts_delta * ts_scale))
                    if last_end == end:
                        return out
            except Exception:  # noqa: BLE001 - anything odd: the reference decodes it and says what
                pass
        items = decode_entry(bytes(buf[pos:pos + total]), 0, total, source=self.path, offsets_partition=-1,
                             position=pos)
        batch = next((x for x in items if type(x) is tuple), None)
        if batch is None:
            problem = items[0]
            self.notes.append(LogNote(BATCH_UNREADABLE, self.path, pos,
                                      f"the batch holding offset {target}: {problem.kind}: {problem.reason}"))
            return None
        return [(r.offset, r.timestamp) for r in batch[1]]

    def find(self, target: int) -> Found | _Unreadable | None:
        """The first record at or after offset `target` that a consumer is handed (control batches and emptied
        batches stepped over), its own timestamp and the largest of the segment's records up to it; None when the
        segment holds none at or after `target`; UNREADABLE when its batch cannot be read."""
        if self.size == 0:
            return None
        located = self._locate(target)
        if located is None:
            return None
        position, largest = located
        end = position
        for head in self.heads(position):
            end = head.position + head.total
            if head.last_offset < target or head.is_control or (head.magic == 2 and head.records <= 0):
                largest = max(largest, head.max_timestamp)
                continue
            records = self._records(head, target)
            if records is None:
                return UNREADABLE
            for offset, ts in records:
                if ts > largest:
                    largest = ts
                if offset >= target:
                    return Found(offset, ts, largest, head.timestamp_type, head.position)
        self._note_tail(end)
        return None
