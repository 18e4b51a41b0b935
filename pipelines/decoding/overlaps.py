"""Overlapping segment files of one offsets partition: the records that are not loaded, and which of them differ.

Kafka's log never holds an offset twice, but an input can: a copied or restored log directory, a replica whose
segments rolled elsewhere, a file renamed. Kafka's loader reads a partition by offset (`LocalLog.read` from the
segment whose base offset is the highest at or below the next offset it wants, on through the segments after it),
so a record at or below an offset the files before it already went past is never read again; the replay does the
same (`coordinator.streamed`: a record at or below its partition's high water is a copy, not loaded). When the
record left out has the same content as the one loaded that is no loss; when it differs, it is one
`duplicate_conflict` row: its file, its batch's byte position and its offset.

Not reported: a record at an offset no file before it holds while they hold offsets past it (a hole the log
cleaner left in a file the copy overlaps). Kafka's loader never reads it; the replay may load it (a window's rows
are replayed in offset order), which this module does not change.

Found in the driver before any record is decoded: each segment file's first and last offsets from its entry heads
(`framing.walk_entry_heads`; a partition's last file's first entry alone), and only the files that overlap one before
them are decoded here, to compare.
"""
from __future__ import annotations

import mmap
import os
import struct
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from pipelines.decoding.framing import (ENTRY_HEAD, HEADER_SIZE_UP_TO_MAGIC, LOG_OVERHEAD, MAGIC_OFFSET,
                                         walk_entry_heads)
from pipelines.decoding.segments import SegmentFile, entry_heads, read_segment_batches
from schemas.records import LogRecord, ReadProblem

__all__ = ["copy_conflicts"]

_V2_CRC = HEADER_SIZE_UP_TO_MAGIC  # a v2 batch's CRC-32C, after its partition leader epoch and magic
_LEGACY_CRC = LOG_OVERHEAD  # a magic 0/1 message's CRC-32, first after its size


@dataclass(frozen=True, slots=True)
class _Span:
    first: int  # the first entry's base offset
    last: int  # the highest last offset of its entries


def copy_conflicts(segments: list[SegmentFile]) -> list[ReadProblem]:
    """A `duplicate_conflict` problem per record of `segments` (sorted by partition, then base offset, as
    `discover_segments` gives them) the replay leaves out as a copy of a loaded record whose content differs.
    Object-store segments are not compared (their bytes would be fetched into the driver)."""
    by_partition: dict[int, list[SegmentFile]] = {}
    for seg in segments:
        by_partition.setdefault(seg.offsets_partition, []).append(seg)
    compared = [files for files in by_partition.values()
                if len(files) > 1 and not any("://" in f.path for f in files)]
    # a partition's last file is asked only where it starts: no file after it asks how far it goes. The walks leave
    # the interpreter (C), side by side: this runs in the driver before any task starts.
    asked = [(seg, seg is not files[-1]) for files in compared for seg in files]
    with ThreadPoolExecutor(min(4, os.cpu_count() or 1), thread_name_prefix="offsetlake-overlaps") as pool:
        spans = dict(zip((id(seg) for seg, _ in asked), pool.map(lambda a: _span(*a), asked)))
    problems: list[ReadProblem] = []
    for files in compared:
        problems.extend(_partition_conflicts(files, [spans[id(f)] for f in files]))
    return problems


def _span(seg: SegmentFile, whole: bool = True) -> _Span | None:
    """Where `seg`'s entries start, and (`whole`) the highest offset they reach; None: no entry frames."""
    try:
        with open(seg.path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            if whole:
                heads = walk_entry_heads(buf)
            else:  # the first entry alone
                size = ENTRY_HEAD.unpack_from(buf, 0)[1] if len(buf) >= ENTRY_HEAD.size else 0
                heads = walk_entry_heads(buf[:ENTRY_HEAD.size + max(0, size)])
            if not len(heads):
                return None
            first = ENTRY_HEAD.unpack_from(buf, int(heads.positions[0]))[0]
    except (OSError, ValueError, struct.error):
        return None  # reported where it is decoded
    # a legacy compressed wrapper's head holds its last offset, not its first: a file's name bounds it (a segment
    # holds no offset below its base offset, or Kafka's recovery refuses it)
    return _Span(first=min(first, int(heads.last_offsets[0]), seg.base_offset), last=int(heads.last_offsets.max()))


def _entries(seg: SegmentFile) -> list[tuple[int, int, int, int]]:
    """Each entry of a file as (first offset, last offset, size, stored CRC): two entries alike hold the same
    records (read only for files that overlap)."""
    entries = []
    heads = entry_heads(seg.path)
    after = seg.base_offset  # the lowest offset the next entry may start at
    with open(seg.path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        for pos, last in zip(heads.positions.tolist(), heads.last_offsets.tolist()):
            base, size = ENTRY_HEAD.unpack_from(buf, pos)
            v2 = buf[pos + MAGIC_OFFSET] >= 2
            if not v2:  # a legacy wrapper's offset is its last record's: its first lies after the entry before it
                base = min(base, after)
            crc_at = pos + (_V2_CRC if v2 else _LEGACY_CRC)
            entries.append((base, last, size, int.from_bytes(buf[crc_at:crc_at + 4], "big")))
            after = max(after, last + 1)
    return entries


def _records(seg: SegmentFile) -> Iterator[LogRecord]:
    for item in read_segment_batches(seg):
        if type(item) is tuple:
            yield from item[1]


def _content(r: LogRecord) -> tuple:
    b = r.batch
    return r.key, r.value, r.timestamp, b.producer_id, b.producer_epoch, b.is_transactional, b.is_control


def _partition_conflicts(files: list[SegmentFile], spans: list[_Span | None]) -> list[ReadProblem]:
    high: list[int] = []  # per file: the highest offset of the files before it (-1: none)
    top = -1
    for s in spans:
        high.append(top)
        if s is not None:
            top = max(top, s.last)
    problems: list[ReadProblem] = []
    for i, (seg, span) in enumerate(zip(files, spans)):
        if span is None or span.first > high[i]:
            continue
        lo, hi = span.first, high[i]
        try:
            before = {e for j in range(i) if spans[j] is not None and spans[j].last >= lo and spans[j].first <= hi
                      for e in _entries(files[j]) if e[1] >= lo and e[0] <= hi and e[0] > high[j]}  # loaded
            if all(e in before for e in _entries(seg) if e[0] <= hi):
                continue  # each entry it repeats is one a file before it holds, alike: copies of what is loaded
        except (OSError, ValueError, struct.error):
            pass  # compared record by record
        kept: dict[int, tuple[int, str, int]] = {}  # the loaded record at each offset repeated: content's hash, place
        for j in range(i):
            sj = spans[j]
            if sj is None or sj.last < lo or sj.first > hi:
                continue
            for r in _records(files[j]):
                if lo <= r.offset <= hi and r.offset > high[j] and r.offset not in kept:
                    kept[r.offset] = (hash(_content(r)), r.batch.source, r.batch.position)
        for r in _records(seg):
            if r.offset > hi:
                continue
            other = kept.get(r.offset)
            if other is None or other[0] == hash(_content(r)):
                continue  # a copy of the record loaded; or a hole in the files before it: see the module's note
            why = (f"offset {r.offset} of partition {seg.offsets_partition} is also in {other[1]} (batch at "
                   f"{other[2]}), with other content: that copy is loaded, this one is not")
            problems.append(ReadProblem(source=seg.path, offsets_partition=seg.offsets_partition,
                                        position=r.batch.position, kind="duplicate_conflict", offset=r.offset,
                                        key=r.key, value=r.value, reason=why))
    return problems
