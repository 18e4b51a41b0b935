"""Tabular dumps given together that hold the same records: which rows a run loads, and the copies it does not.

Kafka's log holds an offset once, but a run's inputs can hold it twice: a dump given twice, two exports of one
partition, a part file written again. Within one dump the reader folds a row repeating an offset (`tabular`: the
first row is loaded). Across dumps the same rule holds, in the order the inputs are given: the first dump's record at a
(partition, offset) is loaded, and a later dump's record there is not. A run of such rows that repeat the record
loaded (its key, value, timestamp, producer and flags, as `overlaps` compares segment copies) is one `duplicate_row`
quarantine row at its first row, standing for their records; a row that differs from it is a `duplicate_conflict` row,
as it is within a dump. `dump_copies` reads the dumps in the driver, before any task decodes them, and gives each
dump's copies as row ranges; the decode reads a dump without them (`without_copies`), and the reader's count counts
every row, so each copy is a record in, quarantined.
"""
from __future__ import annotations

import bisect
from collections.abc import Iterator

from pipelines.decoding.overlaps import record_content
from pipelines.decoding.tabular import read_tabular_dump
from schemas.quarantine import DUPLICATE_CONFLICT, DUPLICATE_ROW
from schemas.records import LogRecord, ReadProblem

__all__ = ["dump_copies", "without_copies"]

CopyRange = tuple[int, int, str, str]  # [from row, to row), reason, quarantine kind


def dump_copies(paths: list[str]) -> list[list[CopyRange]]:
    """Per dump of `paths` (the inputs, in their order; a dump given twice is two of them): the row ranges of its
    records that an earlier one holds, each of one partition, one kind and one earlier dump."""
    held: dict[tuple[int, int], tuple[int, int]] = {}  # (partition, offset) -> the loaded record's content, its input
    out: list[list[CopyRange]] = []
    for i, path in enumerate(paths):
        copies: list[tuple[int, int, str, int]] = []  # (row, partition, kind, the input holding the loaded record)
        for rec in read_tabular_dump(path).records():
            if not isinstance(rec, LogRecord):
                continue
            at = (rec.offsets_partition, rec.offset)
            content = hash(record_content(rec))
            first = held.setdefault(at, (content, i))
            if first[1] != i:
                copies.append((rec.batch.position, at[0], DUPLICATE_ROW if first[0] == content else DUPLICATE_CONFLICT,
                               first[1]))
        out.append([(a, b, _reason(kind, part, paths[first], paths[first] == path), kind)
                    for a, b, kind, part, first in _ranges(sorted(copies))])
    return out


def _ranges(copies: list[tuple[int, int, str, int]]) -> list[tuple[int, int, str, int, int]]:
    """(from row, to row, kind, partition, earlier input): consecutive rows of one partition, kind and earlier input
    as one range; a conflict is a range of its own."""
    out: list[list] = []
    for row, part, kind, first in copies:
        last = out[-1] if out else None
        if last is not None and kind == DUPLICATE_ROW and last[1] == row and last[2:] == [kind, part, first]:
            last[1] = row + 1
            continue
        out.append([row, row + 1, kind, part, first])
    return [tuple(r) for r in out]


def _reason(kind: str, partition: int, first: str, again: bool) -> str:
    where = f"{first}, given before as an input too," if again else first
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
