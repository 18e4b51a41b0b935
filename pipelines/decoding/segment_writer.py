"""Writing a segment with its two indexes as a broker appends them: the inverse of `indexes` / `log_segment`, for
tests and the broker simulator (the batches themselves come from `batch_writer`).

Mirrors `LogSegment.append` (Kafka 3.8+: per batch) and `onBecomeInactiveSegment`: the largest timestamp so far and
the last offset of the batch holding it are kept; once more than `index.interval.bytes` were appended since the last
index entry, the batch about to be written gets an offset entry (its last offset, its position) and the time index
`maybeAppend`s (largest timestamp so far, its offset) when that grew; at roll the time index gets its last entry and
both files are trimmed to their entries. `preallocated_index_bytes` leaves them as an unclean shutdown does: sized
to that many bytes, zero-filled past the entries.
"""
from __future__ import annotations

import struct
from pathlib import Path

from pipelines.decoding.framing import frame_entries
from pipelines.decoding.log_segment import NO_TIMESTAMP, read_head

__all__ = ["DEFAULT_INDEX_INTERVAL_BYTES", "SegmentWriter"]

DEFAULT_INDEX_INTERVAL_BYTES = 4096  # index.interval.bytes
_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")


class SegmentWriter:
    """`<dir>/<base>.log`, `.index`, `.timeindex` of one segment, appended batch by batch."""

    def __init__(self, directory: str | Path, base_offset: int, *,
                 index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES):
        self.dir = Path(directory)
        self.base_offset = base_offset
        self.interval = index_interval_bytes
        stem = self.dir / f"{base_offset:020d}"
        self.log_path, self.index_path, self.time_index_path = (stem.with_suffix(s) for s in (".log", ".index",
                                                                                               ".timeindex"))
        self._log = open(self.log_path, "wb")
        self.size = 0
        self._since_entry = 0
        self.max_timestamp, self._max_offset = NO_TIMESTAMP, base_offset
        self.offset_entries: list[tuple[int, int]] = []  # (relative offset, position)
        self.time_entries: list[tuple[int, int]] = []  # (timestamp, relative offset)
        self.next_offset = base_offset

    def append(self, entries: bytes) -> None:
        """Append the framed entries in `entries` (one batch, or a legacy message set), indexing as the broker does."""
        position = self.size
        for frame in frame_entries(entries, 0, len(entries), source=str(self.log_path), offsets_partition=-1):
            if type(frame) is not tuple:
                raise ValueError(f"not whole entries: {frame.reason}")
            pos, _offset, total = frame
            head = read_head(entries, pos, total)
            if head is None:
                raise ValueError(f"entry at byte {pos} has no readable head")
            if head.max_timestamp > self.max_timestamp:
                self.max_timestamp, self._max_offset = head.max_timestamp, head.last_offset
            if self._since_entry > self.interval:
                self.offset_entries.append((head.last_offset - self.base_offset, position))
                self._maybe_append_time()
                self._since_entry = 0
            position += total
            self._since_entry += total
            self.next_offset = head.last_offset + 1
        self._log.write(entries)
        self.size = position

    def _maybe_append_time(self) -> None:
        """`TimeIndex.maybeAppend`: only a timestamp above the last entry's (-1 before the first)."""
        last = self.time_entries[-1][0] if self.time_entries else NO_TIMESTAMP
        if self.max_timestamp > last:
            self.time_entries.append((self.max_timestamp, self._max_offset - self.base_offset))

    def close(self, *, roll: bool = True, preallocated_index_bytes: int = 0) -> None:
        """Finish the segment: `roll` (it is not the active segment any more) adds the time index's last entry;
        `preallocated_index_bytes` writes both indexes at that size, zero-filled past their entries."""
        self._log.close()
        if roll:
            self._maybe_append_time()
        for path, packer, rows in ((self.index_path, _OFFSET_ENTRY, self.offset_entries),
                                   (self.time_index_path, _TIME_ENTRY, self.time_entries)):
            data = b"".join(packer.pack(*row) for row in rows)
            if preallocated_index_bytes > len(data):
                data += bytes(preallocated_index_bytes - len(data))
            path.write_bytes(data)
