"""A segment's two index files as a broker leaves them beside `<base>.log`: `OffsetIndex` (`.index`) and `TimeIndex`
(`.timeindex`), Kafka 0.10.1-4.x (`storage/.../log/OffsetIndex.java`, `TimeIndex.java`, `LogSegment.append`).

Both are sparse: the broker adds an entry when more than `index.interval.bytes` (4096) were appended since the last
one, so the two files are written at the same points, and on roll (`onBecomeInactiveSegment`) the time index gets a
last entry and both are trimmed to their entries. Big-endian::

    .index      relativeOffset int32 | position int32     (8 bytes)
    .timeindex  timestamp int64 | relativeOffset int32     (12 bytes)

An offset entry (E, P): the batch (Kafka < 3.8: the append of one or more batches) starting at byte P of the log
ends at offset E; every batch before P ends before it. A time entry (T, O): the largest timestamp of the segment's
records up to that point is T, held by a record at or below offset O (its batch's last offset). Entries only grow:
offsets strictly, positions strictly (never 0: the first entry comes after 4 KB), timestamps strictly (the broker
appends one only when the largest timestamp grew), time-entry offsets never go back.

Reading keeps the longest prefix of entries that obeys those rules and says where the rest began (a file of a
size that is not a whole number of entries, a zero-filled tail the broker preallocated and never trimmed after an
unclean shutdown, entries out of order): `schemas.log_notes.INDEX_TORN`. Whether an entry agrees with the segment
is `log_segment`'s to check before it trusts one.
"""
from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass

import numpy as np

from schemas.log_notes import INDEX_TORN, LogNote

__all__ = ["OFFSET_ENTRY_BYTES", "TIME_ENTRY_BYTES", "OffsetIndex", "TimeIndex", "open_index", "read_offset_index",
           "read_time_index"]

OFFSET_ENTRY_BYTES = 8
TIME_ENTRY_BYTES = 12
_OFFSET_ENTRY = np.dtype([("relative_offset", ">i4"), ("position", ">i4")])
_TIME_ENTRY = np.dtype([("timestamp", ">i8"), ("relative_offset", ">i4")])
_CHUNK_ENTRIES = 8192  # entries read at a time: a preallocated 10 MB index is read only up to its first zeros
_TAIL_SAMPLE = 1 << 20  # bytes of what follows the valid entries looked at to name it (zeros, or not)


@dataclass(frozen=True)
class OffsetIndex:
    """The valid entries of a `.index`: absolute offsets (each the last offset of the batch, or append, at that
    position) and byte positions in the log, both strictly increasing."""

    path: str
    base_offset: int
    offsets: np.ndarray  # int64
    positions: np.ndarray  # int64

    def __len__(self) -> int:
        return len(self.offsets)

    def lookup(self, target: int) -> int:
        """`OffsetIndex.lookup`: the entry with the largest offset at or below `target`, as its index; -1 when none
        is (the segment's start is the place to read from)."""
        return int(np.searchsorted(self.offsets, target, side="right")) - 1


@dataclass(frozen=True)
class TimeIndex:
    """The valid entries of a `.timeindex`: timestamps (strictly increasing) and the absolute offsets at or below
    which a record holds each (never decreasing)."""

    path: str
    base_offset: int
    timestamps: np.ndarray  # int64
    offsets: np.ndarray  # int64

    def __len__(self) -> int:
        return len(self.timestamps)

    def lookup_offset(self, target: int) -> int:
        """The last entry whose offset is at or below `target`, as its index (-1: none): its timestamp is the
        largest the index knows among the records up to `target`."""
        return int(np.searchsorted(self.offsets, target, side="right")) - 1


def read_offset_index(path: str, base_offset: int, log_size: int) -> tuple[OffsetIndex, LogNote | None]:
    """The `.index` at `path` of the segment based at `base_offset` whose log is `log_size` bytes: its valid entries,
    and a note where they stop before the file's end. Raises OSError (a missing file is the caller's note)."""
    def valid(entries, last_rel, last_pos):
        rel = entries["relative_offset"].astype(np.int64)
        pos = entries["position"].astype(np.int64)
        ok = (rel >= 0) & (pos > 0) & (pos < log_size) & _grows(rel, last_rel) & _grows(pos, last_pos)
        return rel, pos, ok

    rel, pos, note = _read_prefix(path, _OFFSET_ENTRY, valid, "offset",
                                  "entries before it used, the segment past them read from its batch headers")
    return OffsetIndex(path, base_offset, rel + base_offset, pos), note


def read_time_index(path: str, base_offset: int) -> tuple[TimeIndex, LogNote | None]:
    """The `.timeindex` at `path` of the segment based at `base_offset`: its valid entries, and a note where they stop
    before the file's end. Raises OSError."""
    def valid(entries, last_ts, last_rel):
        ts = entries["timestamp"].astype(np.int64)
        rel = entries["relative_offset"].astype(np.int64)
        ok = (rel >= 0) & (ts >= 0) & ~((ts == 0) & (rel == 0))  # a zero entry is preallocated space, not data
        ok &= _grows(ts, last_ts) & _grows(rel, last_rel, strictly=False)
        return ts, rel, ok

    ts, rel, note = _read_prefix(path, _TIME_ENTRY, valid, "time",
                                 "the time index is not used: largest timestamps read from the batch headers")
    return TimeIndex(path, base_offset, ts, rel + base_offset), note


def _grows(values: np.ndarray, before: int, strictly: bool = True) -> np.ndarray:
    """Whether each value is above (`strictly`) or at least the one before it (`before` for the first)."""
    out = np.empty(len(values), bool)
    if len(values):
        out[0] = values[0] > before if strictly else values[0] >= before
        np.greater(values[1:], values[:-1], out=out[1:]) if strictly else np.greater_equal(values[1:], values[:-1],
                                                                                          out=out[1:])
    return out


def open_index(path: str):
    """An index file opened for reading, once it is a regular file: a FIFO (or a device) named like one would block
    the read forever, so it is an OSError, as an unreadable index is."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", path)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _read_prefix(path: str, dtype: np.dtype, valid, what: str, consequence: str):
    """The leading entries of an index file that pass `valid` (each chunk checked against the entry before it),
    read a chunk at a time up to the first that does not; then the note for what follows, if anything."""
    size = dtype.itemsize
    firsts, seconds = [], []
    last_a, last_b = np.int64(-1), np.int64(-1)  # before the first entry: anything valid follows
    bad_at = None  # byte position of the first entry not kept
    with open_index(path) as f:
        file_size = os.fstat(f.fileno()).st_size
        if file_size == 0:  # a segment under index.interval.bytes: no entry
            return np.empty(0, np.int64), np.empty(0, np.int64), None
        whole = file_size - file_size % size
        read = 0
        while read < whole:
            chunk = f.read(min(_CHUNK_ENTRIES * size, whole - read))
            if len(chunk) < size:
                break
            entries = np.frombuffer(chunk[:len(chunk) - len(chunk) % size], dtype)
            a, b, ok = valid(entries, last_a, last_b)
            n_ok = len(ok) if ok.all() else int(np.argmin(ok))
            firsts.append(a[:n_ok])
            seconds.append(b[:n_ok])
            if n_ok:
                last_a, last_b = a[n_ok - 1], b[n_ok - 1]
            if n_ok < len(ok):
                bad_at = read + n_ok * size
                break
            read += len(entries) * size
        if bad_at is None and file_size % size:
            bad_at = whole
        note = None
        if bad_at is not None:
            f.seek(bad_at)
            sample = f.read(_TAIL_SAMPLE)
            rest = file_size - bad_at
            if sample.count(0) == len(sample):
                why = (f"{rest} zero-filled bytes from byte {bad_at} (an index the broker preallocated and never "
                       "trimmed: an unclean shutdown)")
            elif file_size % size and bad_at == whole:
                why = f"{rest} trailing bytes, less than one {size}-byte entry"
            else:
                why = f"the {what} index entry at byte {bad_at} is out of order or past the segment"
            note = LogNote(INDEX_TORN, path, bad_at, f"{why}; {consequence}")
    cat = (lambda xs: np.concatenate(xs) if xs else np.empty(0, np.int64))
    return cat(firsts), cat(seconds), note
