"""Overlapping segment files of one offsets partition: which entries Kafka's loader reads, and the records it does not.

Kafka's log never holds an offset twice, but an input can: a copied or restored log directory, a replica whose
segments rolled elsewhere, a file renamed. Kafka's loaders (`GroupMetadataManager.doLoadGroupsAndOffsets`,
`CoordinatorLoaderImpl`) read a partition by offset: `log.read(currOffset, offsets.load.buffer.size)` from the
log start while currOffset is below the log end offset (the last segment's next offset), and currOffset becomes the
last batch's next offset. `LocalLog.read` reads from the floor segment of the offset (the highest base offset at or
below it), or the segments after it while one holds nothing at or past it; `LogSegment.read` starts at the segment's
first batch whose last offset is at or past it (`translateOffset`) and hands over the whole batches of the next
`offsets.load.buffer.size` bytes (at least one). So an entry the reading passes over (a copy's records the files
before it went past, an interleaved file's offsets below the next one asked for, a file's tail past the point where
a later file became the floor segment, records past the log end offset) is never loaded, whatever it holds.

`kafka_reading` replays that reading over the entries' heads in the driver, before any record is decoded, and gives
each file's byte ranges it passes over: the decode reads each as one `overlapping_segment` row standing for its
records (`frames.decode`). When a record passed over, or a record of a batch read again for its later offsets,
differs from the record loaded at its offset it is also one `duplicate_conflict` row: its file, its batch's byte
position and its offset (evidence, no record).

Cheap for a log whose files do not overlap (each file's entries above the files' before it and below the next
file's base offset): its heads' first and last offsets say every entry is read (a partition's last file's first
entry alone). Only a partition that overlaps is walked entry by entry, and only its entries that may hold an offset
left out are decoded here, each alone, to compare.
"""
from __future__ import annotations

import bisect
import contextlib
import mmap
import os
import struct
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from pipelines.decoding.batches import decode_entry
from pipelines.decoding.framing import (ENTRY_HEAD, HEADER_SIZE_UP_TO_MAGIC, LOG_OVERHEAD, MAGIC_OFFSET,
                                         walk_entry_heads)
from pipelines.decoding.segments import SegmentFile, entry_heads
from schemas.quarantine import DUPLICATE_CONFLICT, DUPLICATE_SEGMENT, OVERLAPPING_SEGMENT
from schemas.records import LogRecord, ReadProblem

__all__ = ["OFFSETS_LOAD_BUFFER_SIZE", "Reading", "copy_conflicts", "entry_records", "kafka_reading", "local_copy",
           "record_content"]

#: Kafka's `offsets.load.buffer.size` default: how many bytes of a segment one read of the loader hands over
OFFSETS_LOAD_BUFFER_SIZE = 5 * 1024 * 1024
_V2_CRC = HEADER_SIZE_UP_TO_MAGIC  # a v2 batch's CRC-32C, after its partition leader epoch and magic
_LEGACY_CRC = LOG_OVERHEAD  # a magic 0/1 message's CRC-32, first after its size


@dataclass(frozen=True, slots=True)
class _Span:
    first_last: int  # the first entry's last offset
    last: int  # the highest last offset of its entries


@dataclass
class Reading:
    """What Kafka's loader reads of the inputs' segment files: per file (its path) the byte ranges it passes over, as
    (from, to, reason, quarantine kind); and the `duplicate_conflict` problems of the records passed over."""

    unread: dict[str, list[tuple[int, int, str, str]]] = field(default_factory=dict)
    problems: list[ReadProblem] = field(default_factory=list)


def copy_conflicts(segments: list[SegmentFile]) -> list[ReadProblem]:
    """`kafka_reading(segments).problems`."""
    return kafka_reading(segments).problems


def kafka_reading(segments: list[SegmentFile], log_start: dict[int, tuple[int, str]] | None = None,
                  load_buffer_size: int = OFFSETS_LOAD_BUFFER_SIZE) -> Reading:
    """What Kafka's loader reads of `segments` (sorted by partition, then base offset, as `discover_segments` gives
    them), each partition from its logStartOffset: the larger of its first segment's base offset and `log_start`'s
    (partition -> (offset, the checkpoint naming it), `segments.log_start_offsets`). An object-store segment is read
    as a local one (`local_copy`): a partition's last file by its first entry alone (a ranged GET), the others whole."""
    by_partition: dict[int, list[SegmentFile]] = {}
    for seg in segments:
        by_partition.setdefault(seg.offsets_partition, []).append(seg)
    log_start = log_start or {}
    walked = [(p, *_one_per_base(files)) for p, files in by_partition.items()]
    # a partition's last file is asked only where it starts: it is read to its end once the reading reaches it. The
    # walks leave the interpreter (C), side by side: this runs in the driver before any task starts.
    asked = [(seg, seg is not files[-1]) for _, files, _ in walked for seg in files]
    with ThreadPoolExecutor(min(4, os.cpu_count() or 1), thread_name_prefix="offsetlake-overlaps") as pool:
        spans = dict(zip((id(seg) for seg, _ in asked), pool.map(lambda a: _span(*a), asked)))
    reading = Reading()
    for p, files, copies in walked:
        checkpoint, named_in = log_start.get(p, (-1, None))
        start = max(files[0].base_offset, checkpoint)
        if not copies and _read_whole(files, [spans[id(f)] for f in files], start):
            continue
        _partition_reading(files, (start, named_in if start == checkpoint else None), load_buffer_size, reading,
                           copies)
    return reading


def _one_per_base(files: list[SegmentFile]) -> tuple[list[SegmentFile], list[SegmentFile]]:
    """`files` with one file per base offset, and the others. A partition's log holds one file per base offset (its
    name), and a broker refuses to start with a partition in two log dirs (`LogManager.loadLog`: "Duplicate log
    directories"), so two files of one base offset are copies of one log from two dirs (replicas, backups): the one
    whose entries reach the highest offset is the log read (then the larger, then the first named); the others are
    passed over whole, their records accounted for."""
    by_base: dict[int, list[SegmentFile]] = {}
    for f in files:
        by_base.setdefault(f.base_offset, []).append(f)
    if len(by_base) == len(files):
        return files, []
    kept, copies = [], []
    for same in by_base.values():
        if len(same) > 1:
            reach = {id(f): (-1 if (s := _span(f)) is None else s.last, f.size) for f in same}
            same = sorted(same, key=lambda f: reach[id(f)], reverse=True)  # stable: the first named among equals
        kept.append(same[0])
        copies.extend(same[1:])
    return kept, copies


def _span(seg: SegmentFile, whole: bool = True) -> _Span | None:
    """The first entry's last offset of `seg` and (`whole`) the highest last offset of its entries; None: no entry
    frames."""
    try:
        if not whole:
            heads = walk_entry_heads(_first_entry(seg))
        else:
            with (local_copy(seg) as path, open(path, "rb") as f,
                  mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf):
                heads = walk_entry_heads(buf)
    except (OSError, ValueError, struct.error):
        return None  # reported where it is decoded
    if not len(heads):
        return None
    return _Span(first_last=int(heads.last_offsets[0]), last=int(heads.last_offsets.max()))


@contextlib.contextmanager
def local_copy(seg: SegmentFile) -> Iterator[str]:
    """A local path holding `seg`'s bytes: the file, or an object-store segment fetched into a temp file for as long
    as it is walked (entries are framed one after another from the file's start: no ranged read finds the last). A
    store's refusal is an OSError here, as a local file's is: the decode reports it."""
    if "://" not in seg.path:
        yield seg.path
        return
    # imported here, not at module level: pyarrow ~0.45 s, pyarrow.fs ~0.05 s of import (python -X importtime)
    from pipelines.io import storage

    try:
        with storage.location(seg.path).as_local_file() as path:
            yield path
    except storage.StorageError as e:
        raise OSError(str(e)) from None


#: what one ranged GET of an object-store segment's first entry asks for (most entries of the log are far smaller)
_FIRST_ENTRY_READ = 64 * 1024


def _first_entry(seg: SegmentFile) -> bytes:
    """`seg`'s bytes up to the end of its first entry (fewer when the file ends before): one or two ranged reads of an
    object-store segment, never the whole object."""
    if "://" not in seg.path:
        with open(seg.path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            size = ENTRY_HEAD.unpack_from(buf, 0)[1] if len(buf) >= ENTRY_HEAD.size else 0
            want = ENTRY_HEAD.size + max(0, size)
            return buf[:want] if want <= len(buf) else buf[:ENTRY_HEAD.size]  # a slice of a map is a copy
    from pipelines.io import storage

    loc = storage.location(seg.path)

    def read() -> bytes:
        with loc.fs.open_input_file(loc.path) as f:
            head = f.read_at(min(_FIRST_ENTRY_READ, seg.size), 0)
            size = ENTRY_HEAD.unpack_from(head, 0)[1] if len(head) >= ENTRY_HEAD.size else 0
            want = ENTRY_HEAD.size + max(0, size)
            # an entry past the object's end frames nothing: its size is not a reason to read the whole object
            return head[:want] if want <= len(head) or want > seg.size else f.read_at(want, 0)

    try:
        return storage.retried(loc, "read", read)
    except storage.StorageError as e:
        raise OSError(str(e)) from None


def _read_whole(files: list[SegmentFile], spans: list[_Span | None], start: int) -> bool:
    """Whether Kafka's reading from `start` reads every entry of `files` (but those out of their file's order,
    `offset_order`'s rows): each file's first entry is at or past where the reading stands when it gets there, and
    its entries end below the next file's base offset (which the reading would turn to before its end)."""
    at = start
    for i, (seg, span) in enumerate(zip(files, spans)):
        if span is None:
            continue  # no entry: nothing to pass over (a file that frames none is reported where it is decoded)
        if span.first_last < at:
            return False
        if i + 1 < len(files):
            if span.last >= files[i + 1].base_offset:
                return False
            at = span.last + 1
    return True


def _partition_reading(files: list[SegmentFile], log_start: tuple[int, str | None], buffer: int, reading: Reading,
                       copies: list[SegmentFile]) -> None:
    """Kafka's reading of one partition that overlaps, entry by entry (every file's heads walked), from `log_start`
    (its offset, and the checkpoint naming it: None when it is the first segment's base offset); `copies`: files
    of a base offset another of `files` has, passed over whole."""
    with contextlib.ExitStack() as held:
        paths = []
        for seg in [*files, *copies]:
            try:
                paths.append(held.enter_context(local_copy(seg)))
            except OSError:
                paths.append(None)  # reported where it is decoded
        _read_partition(files, log_start, buffer, reading, copies, paths)


def _read_partition(files: list[SegmentFile], log_start: tuple[int, str | None], buffer: int, reading: Reading,
                    copies: list[SegmentFile], paths: list[str | None]) -> None:
    """`_partition_reading` over the files' local `paths` (None: one that cannot be read)."""
    start, named_in = log_start
    heads = []
    for path in paths:
        try:
            heads.append(None if path is None else entry_heads(path))
        except (OSError, ValueError):
            heads.append(None)  # reported where it is decoded
    pos = [np.empty(0, np.int64) if h is None else h.positions for h in heads]
    lasts = [np.empty(0, np.int64) if h is None else h.last_offsets for h in heads]
    ends = [np.empty(0, np.int64) if h is None else np.append(h.positions[1:], h.end) for h in heads]
    # translateOffset looks for the first batch whose last offset is at or past the target: a running maximum makes
    # that a binary search (a batch below the ones before it is `offset_order`'s row in any case)
    tops = [np.maximum.accumulate(x) if len(x) else x for x in lasts]
    read = [np.zeros(len(x), dtype=bool) for x in lasts]
    bases = [s.base_offset for s in files]
    n = len(files)
    # the log end offset: the active (last) segment's next offset, its base offset when it holds nothing past it
    end_offset = max(bases[-1], int(lasts[n - 1][-1]) + 1) if len(lasts[n - 1]) else bases[-1]
    cur = start
    while cur < end_offset:
        i = bisect.bisect_right(bases, cur) - 1  # LocalLog.read: the floor segment, then the ones after it
        k = -1
        while 0 <= i < n:
            k = int(np.searchsorted(tops[i], cur, side="left"))
            if k < len(tops[i]):
                break
            i += 1
        if i < 0 or i >= n:
            break
        # LogSegment.read: the whole batches of `buffer` bytes from the first (at least that one)
        p0 = int(pos[i][k])
        j = max(k + 1, int(np.searchsorted(ends[i], p0 + max(buffer, int(ends[i][k]) - p0), side="right")))
        read[i][k:j] = True
        nxt = int(lasts[i][j - 1]) + 1  # currOffset = the last batch's nextOffset
        cur = nxt if nxt > cur else int(lasts[i][k:j].max()) + 1  # a batch gone back would have Kafka read forever
    kept = {f.base_offset: f.path for f in files}
    for i, seg in enumerate([*files, *copies]):
        runs = _runs(~read[i])
        if not runs:
            continue
        ranges = reading.unread.setdefault(seg.path, [])
        for a, b in runs:
            lo, hi = int(lasts[i][a:b].min()), int(lasts[i][a:b].max())
            what = f"bytes [{int(pos[i][a])}, {int(ends[i][b - 1])}) not read (entries with last offsets {lo}..{hi})"
            if i >= n:
                ranges.append((int(pos[i][a]), int(ends[i][b - 1]),
                               f"{what}: {kept[seg.base_offset]} is also partition {seg.offsets_partition}'s "
                               f"segment of base offset {seg.base_offset} and reaches as far or further; a log holds "
                               f"one file per base offset (a broker refuses a partition in two log dirs), so this "
                               f"copy is not read", DUPLICATE_SEGMENT))
                continue
            if hi < start:
                ranges.append((int(pos[i][a]), int(ends[i][b - 1]),
                               f"{what}: below partition {seg.offsets_partition}'s log start offset {start}"
                               f"{f' ({named_in})' if named_in else ''}, where Kafka's loader starts reading",
                               OVERLAPPING_SEGMENT))
                continue
            ranges.append((int(pos[i][a]), int(ends[i][b - 1]),
                           f"{what}: Kafka's loader reads partition {seg.offsets_partition} by offset (from its log "
                           f"start {start} to its log end offset {end_offset}, each offset from the segment whose "
                           f"base offset is the highest at or below it) and passes over them: this file overlaps "
                           f"another of the partition", OVERLAPPING_SEGMENT))
    reading.problems.extend(_conflicts([*files, *copies], paths, read, pos, ends))


def _runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """The [a, b) index runs where `mask` holds."""
    if not mask.any():
        return []
    edges = np.flatnonzero(np.diff(np.r_[0, mask.view(np.int8), 0]))
    return [(int(a), int(b)) for a, b in zip(edges[0::2], edges[1::2])]


def _entries(seg: SegmentFile, path: str) -> list[tuple[int, int, int, int]]:
    """Each entry of a file (`path`: where its bytes are) as (first offset, last offset, size, stored CRC), in its
    heads' order: two entries alike hold the same records."""
    entries = []
    heads = entry_heads(path)
    after = seg.base_offset  # the lowest offset the next entry may start at
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        for pos, last in zip(heads.positions.tolist(), heads.last_offsets.tolist()):
            base, size = ENTRY_HEAD.unpack_from(buf, pos)
            v2 = buf[pos + MAGIC_OFFSET] >= 2
            if not v2:  # a legacy wrapper's offset is its last record's: its first lies after the entry before it
                base = min(base, after)
            crc_at = pos + (_V2_CRC if v2 else _LEGACY_CRC)
            entries.append((base, last, size, int.from_bytes(buf[crc_at:crc_at + 4], "big")))
            after = max(after, last + 1)
    return entries


def entry_records(seg: SegmentFile, path: str, entries: list[tuple[int, int]]) -> Iterator[LogRecord]:
    """The records of `seg`'s entries at `entries` ((position, end) each, in file order; `path`: where its bytes
    are), each decoded alone."""
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        for at, end in entries:
            for item in decode_entry(buf, at, end, source=seg.path, offsets_partition=seg.offsets_partition,
                                     position=at):
                if type(item) is tuple:
                    yield from item[1]


def record_content(r: LogRecord) -> tuple:
    """What two copies of a record at one offset must share to be one record (`duplicate_conflict` otherwise)."""
    b = r.batch
    return r.key, r.value, r.timestamp, b.producer_id, b.producer_epoch, b.is_transactional, b.is_control


def _conflicts(files: list[SegmentFile], paths: list[str | None], read: list[np.ndarray], pos: list[np.ndarray],
               ends: list[np.ndarray]) -> list[ReadProblem]:
    """A `duplicate_conflict` per record left out whose offset a record loaded holds with other content: a record
    passed over, or one of a batch read again for its later records. Kafka's loaders replay every record of every
    batch a read hands over (`GroupMetadataManager.doLoadGroupsAndOffsets`, 2.8 / 3.9; `CoordinatorLoaderImpl`,
    3.6-4.2), so such a copy is replayed after the one read first; the replay here loads each offset once, the
    first, and the row says where the two differ. Only the entries that may hold such an offset are decoded."""
    try:
        if None in paths:
            raise OSError("a file not read")
        entries = [_entries(f, path) for f, path in zip(files, paths)]
    except (OSError, ValueError, struct.error):
        return []  # a file gone since its heads were walked: reported where it is decoded
    loaded = {e for es, r in zip(entries, read) for e, was in zip(es, r) if was}
    asked = [np.zeros(len(r), dtype=bool) for r in read]  # the entries whose records are compared
    top = -1  # the highest offset read before
    for es, r, a in zip(entries, read, asked):
        for k, (e, was) in enumerate(zip(es, r)):
            a[k] = (not was and e not in loaded) or (was and e[0] <= top)  # not byte copies of one read
        top = max([top, *(e[1] for e, was in zip(es, r) if was)])
    spans = sorted((e[0], e[1]) for es, a in zip(entries, asked) for e, x in zip(es, a) if x)
    if not spans:
        return []
    firsts, lasts = np.array([f for f, _ in spans]), np.maximum.accumulate(np.array([t for _, t in spans]))

    def near(e) -> bool:  # whether an entry's offsets meet one asked: the records it holds may be compared
        k = int(np.searchsorted(firsts, e[1], side="right"))
        return k > 0 and lasts[k - 1] >= e[0]

    problems: list[ReadProblem] = []
    kept: dict[int, tuple[int, str, int]] = {}  # the loaded record at each offset: its content's hash, its place

    def compare(seg: SegmentFile, rec: LogRecord, again: bool = False) -> None:
        other = kept.get(rec.offset)
        if other is None or other[0] == hash(record_content(rec)):
            return  # a copy of the record loaded, or an offset none loaded: the file's unread range says it
        why = (f"offset {rec.offset} of partition {seg.offsets_partition} is also in {other[1]} (batch at "
               f"{other[2]}), with other content: " + (
                   "Kafka's loader reads this batch again for its later offsets and replays this copy after that "
                   "one, so the broker's state follows this copy where they differ; this run loaded that copy only"
                   if again else "that copy is loaded, this one is not"))
        problems.append(ReadProblem(source=seg.path, offsets_partition=seg.offsets_partition,
                                    position=rec.batch.position, kind=DUPLICATE_CONFLICT, offset=rec.offset,
                                    key=rec.key, value=rec.value, reason=why))

    try:
        for i, seg in enumerate(files):  # the entries read, in the loader's order of reading
            at = [(int(pos[i][k]), int(ends[i][k])) for k, e in enumerate(entries[i]) if read[i][k] and near(e)]
            again = {int(pos[i][k]) for k in np.flatnonzero(read[i] & asked[i])}
            for rec in entry_records(seg, paths[i], at):
                if rec.offset not in kept:
                    kept[rec.offset] = (hash(record_content(rec)), rec.batch.source, rec.batch.position)
                elif rec.batch.position in again:
                    compare(seg, rec, again=True)
        for i, seg in enumerate(files):
            left = [(int(pos[i][k]), int(ends[i][k])) for k in np.flatnonzero(~read[i] & asked[i])]
            for rec in entry_records(seg, paths[i], left):
                compare(seg, rec)
    except (OSError, ValueError):
        pass  # a file gone since its heads were walked: reported where it is decoded
    return problems
