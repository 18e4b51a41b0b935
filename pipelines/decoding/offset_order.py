"""A segment file's offsets as Kafka's log layer writes them (Kafka 0.11-4.x): never negative, and going up from
one batch to the next, each record's within its batch's [baseOffset, lastOffset].

Kafka never appends a batch that breaks this: the leader assigns offsets in order, a follower's append refuses
offsets that do not increase (`UnifiedLog.analyzeAndValidateRecords`: OffsetsOutOfOrderException) or lie below the
log end (UnexpectedAppendOffsetException), and `LogValidator` refuses a batch whose offset range is empty. Its
recovery refuses what a crafted or damaged file may hold anyway: a batch below its segment's base offset
(`LogSegment.recover`'s `ensureOffsetInRange`), an offset no larger than the last one indexed (`OffsetIndex.append`:
InvalidOffsetException, the segment is emptied). Its loaders read without these checks, in file order, so such a
batch would be replayed out of the log's order, or a negative offset compared as a log position; here it is never
state: one row (`negative_offset`, or `offsets_out_of_order` for the rest) at the batch's byte position stands for
its records.

One rule, two readers: `ordered_items` for the reference path's `(header, records)` items (`batches`), and
`ordered_batches` for the decoded Arrow batches of the column path (`columnar`). A batch without records (an empty
batch the cleaner left) holds no offset and is passed over; a file read from the middle (an incremental run's
resume, a range of a split partition) goes on from its batches before (`resumed`).
"""
from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import TYPE_CHECKING

from pipelines.decoding.framing import MAGIC_OFFSET, V2_RECORDS_COUNT_AT, frame_entries, last_offset
from schemas.quarantine import NEGATIVE_OFFSET, OFFSETS_OUT_OF_ORDER
from schemas.records import ReadProblem

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["OffsetOrder", "ordered_batches", "ordered_items", "resumed"]

_INT32 = struct.Struct(">i").unpack_from


class OffsetOrder:
    """The batches of one file read so far: the highest offset of those accepted."""

    __slots__ = ("high",)

    def __init__(self) -> None:
        self.high: int | None = None

    def problem(self, base: int, last: int, low: int, top: int) -> tuple[str, str] | None:
        """Why the batch [base, last] whose records' offsets run from `low` to `top` is not state (None: it is, and
        the file's highest offset moves to `last`)."""
        span = f"batch [{base}, {last}] (its records' offsets {low} to {top})"
        if min(base, last, low) < 0:
            return NEGATIVE_OFFSET, f"{span} holds a negative offset: no log position is negative"
        if last < base or low < base or top > last:
            return OFFSETS_OUT_OF_ORDER, f"{span}: its records' offsets are not within its own range"
        if self.high is not None and base <= self.high:
            return OFFSETS_OUT_OF_ORDER, (f"{span} does not start above offset {self.high} of the batches before it "
                                          f"in its file: a log's offsets only go up")
        self.high = last
        return None


def resumed(buf, start: int) -> OffsetOrder:
    """The order of a file's bytes `buf` read from `start` (an entry boundary): its batches before `start`, from
    their heads (no record read), taken as a reading from the file's start takes them, so an incremental run or a
    range sees a batch that goes back as the whole file's reading does. The heads are walked in C
    (`framing.walk_entry_heads`) up to where it stops (a negative offset among them), then here."""
    order = OffsetOrder()
    if start <= 0:
        return order
    # imported here, not at module level: segments imports the readers that import this module; numpy ~0.1-0.3 s
    import numpy as np

    from pipelines.decoding.framing import walk_entry_heads

    heads = walk_entry_heads(memoryview(buf)[:start])
    if len(heads):
        raw = np.frombuffer(buf, np.uint8, count=start)
        at = heads.positions[:, None]
        bases = raw[at + np.arange(8)].copy().view(">i8").ravel()
        counts = raw[np.minimum(at + V2_RECORDS_COUNT_AT, start - 4) + np.arange(4)].copy().view(">i4").ravel()
        v2 = raw[heads.positions + MAGIC_OFFSET] == 2
        short = heads.positions + V2_RECORDS_COUNT_AT + 4 > np.r_[heads.positions[1:], heads.end]
        held = ~(v2 & (short | (counts <= 0)))  # a batch without records holds no offset
        base, last, v2 = bases[held], heads.last_offsets[held], v2[held]
        low = np.where(v2, base, np.minimum(base, last))
        before = np.maximum.accumulate(np.r_[np.iinfo(np.int64).min, last[:-1]])
        if len(base) and (base >= 0).all() and (low >= base).all() and (last >= base).all() and (base > before).all():
            order.high = int(last[-1])  # the usual file: every batch in order
        else:
            for b, l, lo in zip(base.tolist(), last.tolist(), low.tolist()):
                order.problem(b, l, lo, l)
    for frame in frame_entries(buf, heads.end, start, source="", offsets_partition=-1):
        if type(frame) is not tuple:
            break
        pos, base, total = frame
        magic = buf[pos + MAGIC_OFFSET]
        if magic > 2 or (magic == 2 and (total < V2_RECORDS_COUNT_AT + 4
                                         or _INT32(buf, pos + V2_RECORDS_COUNT_AT)[0] <= 0)):
            continue  # an entry no reader decodes, or no record: no offset
        last = last_offset(buf, pos, base, total)
        order.problem(base, last, base if magic == 2 else min(base, last), last)
    return order


def _problem(found: tuple[str, str], *, source: str, partition: int, position: int, base: int, records: int
             ) -> ReadProblem:
    kind, why = found
    return ReadProblem(source=source, offsets_partition=partition, position=position, kind=kind, offset=base,
                       records=records, reason=f"{why}; its {records} record(s) are not replayed")


def ordered_items(items: Iterator, order: OffsetOrder | None = None) -> Iterator:
    """The `(header, records)` items and ReadProblems of one file, in file order, with each batch whose offsets
    break the order one ReadProblem instead."""
    order = order if order is not None else OffsetOrder()
    for item in items:
        if isinstance(item, ReadProblem) or not item[1]:
            yield item
            continue
        header, records = item
        offsets = [r.offset for r in records]
        found = order.problem(header.base_offset, header.last_offset, min(offsets), max(offsets))
        if found is None:
            yield item
        else:
            yield _problem(found, source=header.source, partition=header.offsets_partition,
                           position=header.position, base=header.base_offset, records=len(records))


def ordered_batches(batches: Iterator[pa.RecordBatch], order: OffsetOrder | None = None
                    ) -> Iterator[pa.RecordBatch]:
    """Decoded Arrow batches of one file (`DECODED_RECORD_SCHEMA`, whole log batches each), with the rows of each
    log batch whose offsets break the order replaced by one error row. The rows of a log batch are those with its
    batch columns (its records, and its records that did not decode); a file's own problems have none."""
    order = order if order is not None else OffsetOrder()
    for b in batches:
        yield _ordered(b, order)


def _ordered(b: pa.RecordBatch, order: OffsetOrder) -> pa.RecordBatch:
    # imported here, not at module level: the reference path's readers (`batches`) need neither (pyarrow ~0.45 s)
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    rows = np.flatnonzero(b.column("batch_base_offset").is_valid().to_numpy(zero_copy_only=False))
    if not len(rows):
        return b

    def ints(name: str) -> np.ndarray:
        # the nulls (a file's own problems) filled first: numpy reads an int64 column with nulls as float64, and an
        # offset past 2**53 then comes back as another (a crafted batch at 2**62 + 105 was taken for one at 2**62)
        return pc.fill_null(b.column(name), 0).to_numpy(zero_copy_only=False)[rows]

    pos = ints("batch_position")
    starts = np.flatnonzero(np.r_[True, pos[1:] != pos[:-1]])
    base = ints("batch_base_offset")[starts]
    last = ints("batch_last_offset")[starts]
    offsets = ints("offset")
    low, top = np.minimum.reduceat(offsets, starts), np.maximum.reduceat(offsets, starts)
    before = np.maximum.accumulate(np.r_[np.iinfo(np.int64).min if order.high is None else order.high, last[:-1]])
    if (base >= 0).all() and (low >= base).all() and (top <= last).all() and (base > before).all():
        order.high = int(last[-1])  # the usual file: every batch in order
        return b
    ends = np.r_[starts[1:], len(rows)]
    pieces, at = [], 0
    for i in range(len(starts)):
        found = order.problem(int(base[i]), int(last[i]), int(low[i]), int(top[i]))
        if found is None:
            continue
        first, stop = int(rows[starts[i]]), int(rows[ends[i] - 1]) + 1
        pieces.append(b.slice(at, first - at))
        pieces.append(_error_batch(_problem(
            found, source=b.column("source")[first].as_py(), partition=b.column("offsets_partition")[first].as_py(),
            position=int(pos[starts[i]]), base=int(base[i]), records=stop - first), b.schema))
        at = stop
    if not pieces:
        return b
    pieces.append(b.slice(at))
    return pa.concat_batches([p for p in pieces if p.num_rows])


def _error_batch(problem: ReadProblem, schema: pa.Schema) -> pa.RecordBatch:
    import pyarrow as pa

    from pipelines.decoding.rows import problem_to_row

    return pa.RecordBatch.from_pylist([problem_to_row(problem)], schema=schema)
