"""Records a run's inputs hold twice: which copy a run loads, and the copies it does not, in tabular dumps.

Kafka's log holds an offset once, but a run's inputs can hold it twice: a dump given twice, two exports of one
partition, a part file written again, a dump exported from the very log dir given beside it. Within one dump the
reader folds a row repeating an offset (`tabular`: the first row is loaded). Across inputs the same rule holds:
the segment files' records are loaded first, as Kafka's loader reads them (`overlaps`): they are the broker's own
bytes, which an export copied; then the dumps', in the order the inputs are given. A dump's record at a (partition,
offset) a segment or an earlier dump holds is not loaded. A run of such rows that repeat the record loaded (its
key, value, timestamp and, when the dump holds them, producer and flags, as `overlaps` compares segment copies) is
one `duplicate_row` quarantine row at its first row, standing for their records; a row that differs from it is a
`duplicate_conflict` row, as it is within a dump. `dump_copies` reads the dumps in the driver, before any task
decodes them, and gives each dump's copies as row ranges; the decode reads a dump without them (`without_copies`),
and the reader's count counts every row, so each copy is a record in, quarantined.

Only the segment entries that may hold an offset a dump holds are decoded (a binary search of each file's entry
heads, a file at a time): memory is the dumps' offsets, which the dumps' own tables already outweigh.
"""
from __future__ import annotations

import bisect
from collections.abc import Iterator

import numpy as np
import pyarrow.compute as pc

from pipelines.decoding.overlaps import entry_records, local_copy, record_content
from pipelines.decoding.segments import SegmentFile, entry_heads
from pipelines.decoding.tabular import read_tabular_dump
from schemas.quarantine import DUPLICATE_CONFLICT, DUPLICATE_ROW
from schemas.records import LogRecord, ReadProblem

__all__ = ["dump_copies", "without_copies"]

CopyRange = tuple[int, int, str, str]  # [from row, to row), reason, quarantine kind
_SEGMENT = -1  # the input holding a loaded record: a segment file (its path beside it), not a dump


def dump_copies(paths: list[str], segments: list[SegmentFile] = (),
                unread: dict[str, list[tuple[int, int, str, str]]] | None = None) -> list[list[CopyRange]]:
    """Per dump of `paths` (the tabular inputs, in their order; a dump given twice is two of them): the row ranges of
    its records that a segment of `segments` (as `discover_segments` gives them; `unread`: the byte ranges Kafka's
    loader passes over, `overlaps.Reading.unread`, whose records are not loaded) or an earlier dump holds, each of
    one partition, one kind and one earlier input."""
    dumps = [read_tabular_dump(path) for path in paths]
    # (partition, offset) -> the loaded record's content (all of it; without its batch facts), its input, its file
    held: dict[tuple[int, int], tuple[int, int, int, str]] = {}
    if segments:
        held = _segment_records(segments, unread or {}, [d._table for d in dumps])
    out: list[list[CopyRange]] = []
    for i, (path, dump) in enumerate(zip(paths, dumps)):
        copies: list[tuple[int, int, str, int, str]] = []  # (row, partition, kind, the input holding it, its file)
        for rec in dump.records():
            if not isinstance(rec, LogRecord):
                continue
            at = (rec.offsets_partition, rec.offset)
            content = record_content(rec)
            whole, short = hash(content), hash(content[:3])
            first = held.setdefault(at, (whole, short, i, path))
            if first[2] != i:
                # a dump without batch facts says nothing of the producer or flags: its record is compared by what
                # it holds, as a copy exported from the log the segment holds would be
                same = first[0] == whole if dump.has_batch_facts else first[1] == short
                copies.append((rec.batch.position, at[0], DUPLICATE_ROW if same else DUPLICATE_CONFLICT, first[2],
                               first[3]))
        out.append([(a, b, _reason(kind, part, source, source == path, origin == _SEGMENT), kind)
                    for a, b, kind, part, origin, source in _ranges(sorted(copies))])
    return out


def _segment_records(segments: list[SegmentFile], unread: dict[str, list[tuple[int, int, str, str]]],
                     tables: list) -> dict[tuple[int, int], tuple[int, int, int, str]]:
    """The records Kafka's loader reads from `segments` at the offsets the dumps' `tables` hold: (partition, offset)
    -> (content hash, hash of its key, value and timestamp, `_SEGMENT`, the file). Only the entries whose offsets
    may reach such an offset are decoded: none when the dumps and the segments hold no partition in common."""
    wanted: dict[int, np.ndarray] = {}
    for t in tables:
        if not {"partition", "offset"} <= set(t.column_names) or not t.num_rows:
            continue
        parts, offs = pc.fill_null(t.column("partition"), -1), pc.fill_null(t.column("offset"), -1)
        for p in pc.unique(parts).to_pylist():
            mine = pc.filter(offs, pc.equal(parts, p)).to_numpy(zero_copy_only=False)
            wanted[p] = np.union1d(wanted.get(p, np.empty(0, np.int64)), mine.astype(np.int64))
    held: dict[tuple[int, int], tuple[int, int, int, str]] = {}
    for seg in segments:
        want = wanted.get(seg.offsets_partition)
        if want is None or not len(want) or want[-1] < seg.base_offset:
            continue
        try:
            with local_copy(seg) as path:
                heads = entry_heads(path)
                if not len(heads.positions):
                    continue
                ends = np.append(heads.positions[1:], heads.end)
                # the first entry whose last offset reaches each wanted offset (a running maximum: an entry below
                # the ones before it is `offset_order`'s row)
                k = np.unique(np.searchsorted(np.maximum.accumulate(heads.last_offsets), want, side="left"))
                k = k[k < len(heads.positions)]
                passed = unread.get(seg.path, [])
                at = [(int(heads.positions[j]), int(ends[j])) for j in k.tolist()
                      if not any(a <= heads.positions[j] < b for a, b, _, _ in passed)]
                for rec in entry_records(seg, path, at):
                    i = np.searchsorted(want, rec.offset)
                    if i < len(want) and want[i] == rec.offset:
                        content = record_content(rec)
                        held.setdefault((seg.offsets_partition, rec.offset),
                                        (hash(content), hash(content[:3]), _SEGMENT, seg.path))
        except (OSError, ValueError):
            continue  # reported where it is decoded
    return held


def _ranges(copies: list[tuple[int, int, str, int, str]]) -> list[tuple[int, int, str, int, int, str]]:
    """(from row, to row, kind, partition, earlier input, its file): consecutive rows of one partition, kind and
    earlier input as one range; a conflict is a range of its own."""
    out: list[list] = []
    for row, part, kind, first, source in copies:
        last = out[-1] if out else None
        if last is not None and kind == DUPLICATE_ROW and last[1] == row and last[2:] == [kind, part, first, source]:
            last[1] = row + 1
            continue
        out.append([row, row + 1, kind, part, first, source])
    return [tuple(r) for r in out]


def _reason(kind: str, partition: int, first: str, again: bool, segment: bool) -> str:
    where = f"{first}, given before as an input too," if again else first
    if segment:
        where = f"the segment file {first} (the broker's own bytes, loaded before any tabular dump)"
    if kind == DUPLICATE_ROW:
        return f"the records of partition {partition} repeat those {where} holds at their offsets; not read"
    return f"its offset of partition {partition} is also in {where} with other content: that record is loaded"


def without_copies(items: Iterator[LogRecord | ReadProblem], copies: list[CopyRange], source: str
                   ) -> Iterator[LogRecord | ReadProblem]:
    """A dump's records and problems (`TabularDump.records`) without the records `copies` names (`dump_copies`):
    a `duplicate_conflict` row for each that differs from the record loaded, and after them one `duplicate_row`
    row per range standing for the records it holds."""
    copies = sorted(copies)
    starts = [c[0] for c in copies]
    counted = [0] * len(copies)
    partitions = [-1] * len(copies)
    for it in items:
        k = bisect.bisect_right(starts, it.batch.position) - 1 if isinstance(it, LogRecord) else -1
        if k < 0 or it.batch.position >= copies[k][1]:
            yield it
            continue
        _, _, why, kind = copies[k]
        if kind == DUPLICATE_CONFLICT:
            yield ReadProblem(source=source, offsets_partition=it.offsets_partition, position=it.batch.position,
                              offset=it.offset, key=it.key, value=it.value, kind=kind, records=1,
                              reason=f"row {it.batch.position}: offset {it.offset}: {why}")
            continue
        counted[k] += 1
        partitions[k] = it.offsets_partition
    for (a, b, why, kind), n, part in zip(copies, counted, partitions):
        if n:
            yield ReadProblem(source=source, offsets_partition=part, position=a, kind=kind, records=n,
                              reason=f"rows {a}-{b - 1}: {why} ({n} record(s))")
