"""A hot offsets partition cut into byte ranges, decoded in parallel and loaded in one pass.

Every group lives in one offsets partition, so one busy group (or a log cleaner that died) puts most of a log in one
partition, and one task per partition would be one long task. A partition of more than `decode.split_bytes` of
segment bytes is cut at entry boundaries (between segment files, or inside a large one) into as many ranges as that
size goes into it, each holding about as many records (`log_ranges`). Each range is decoded by a task of its own
(`frames.segment_shards`), which loads no state (`coordinator.streamed.StreamedShards` in `RANGE` mode): it gives
the history rows of its plain values (each took effect where it stands, whatever the state), its tally and
quarantine, and the rows its partition's load reads (`coordinator.reduction.split_mask`: every group record, marker,
transactional record and tombstone, and per key the plain values a decision or the end state reads). The ranges'
kept rows are then loaded in log order, as the windows of one streamed shard (`coordinator.streamed.load_split`),
which decides what every other offset commit did and writes its history. The state is the one the whole log
gives, and so is every decision.

That load is the partition's one sequential pass, so a full run makes it one per core: each range hands on its kept
and held rows in buckets of the partition's groups (`coordinator.streamed.by_group`), every control record in every
bucket, and a task per bucket loads them. A group's records change only that group's state, and a transaction's
open offsets are keyed by group, so the buckets' shards share no key: each bucket's tables are its groups' rows of
the partition's, and the next `--incremental` run resumes their saved shards as the partition's one
(`coordinator.saved.SavedShard.union`), in one load.

An offset is loaded once, as in a whole partition's load: each range starts above the highest offset of every
entry in the ranges before it (`LogRange.floor`), so a copy of a record an earlier range read (overlapping segment
files) is tallied but not loaded or written again. The heads of the partition's entries are walked here, in the
driver, to find the cuts and the floors (`decoding.segments.entry_heads`: a few bytes of every entry, walked in C).
"""
from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pyarrow.compute as pc

from pipelines.decoding.columnar import decode_segment_to_arrow
from pipelines.decoding.offset_order import OffsetOrder
from pipelines.decoding.segments import entry_heads
from pipelines.frames.decode import FILE_END, end_position, read_before
from pipelines.io import storage

#: A range size that suits most (`decode.split_bytes`; the setting's default, 0, never splits).
SPLIT_BYTES = 64 * 1024 * 1024
NO_FLOOR = -1  # offsets are never negative: a range that follows none loads every offset


@dataclass(frozen=True)
class LogRange:
    """One piece of an offsets partition's log: its work items (`frames.decode.WORK_SCHEMA` dicts, each a whole
    file or the part of one between `start_position` and `end_position`), its place in the partition's log order,
    and the highest offset the ranges before it hold (`NO_FLOOR`: none)."""

    partition: int
    index: int
    items: tuple[dict, ...]
    floor: int
    # the offset of the last record the ranges before it hold (None: none, or a reading that starts inside a file):
    # where a run of missing offsets reaching into this range begins (`frames.tally`). A batch the log cleaner
    # thinned keeps its last offset, so `floor` can lie past its last record
    read_floor: int | None = None

    @property
    def bytes(self) -> int:
        return sum(_end(i) - (i.get("start_position") or 0) for i in self.items)


def _end(item: dict) -> int:
    end = end_position(item)
    return item["size"] or 0 if end is None else end


def log_ranges(partition: int, items: list[dict], split_bytes: int, cores: int = 1) -> list[LogRange] | None:
    """`items` (one offsets partition's work items, in log order) cut at entry boundaries into as many ranges as
    `split_bytes` goes into their bytes, rounded up to a multiple of `cores` (the ranges' tasks run side by side: 5
    ranges on 2 cores take as long as 6), each holding about as many records: a range's cost is its records, and a
    compressed batch holds many in few bytes. None: the partition is read whole (it is no larger, it holds something
    other than local segment files, or it has no boundary to cut at)."""
    total = sum(_end(i) - (i.get("start_position") or 0) for i in items)
    if split_bytes <= 0 or total <= split_bytes:
        return None
    if any(i["kind"] != "segment" or storage.is_remote(i["path"]) for i in items):
        return None
    count = -(-total // split_bytes)
    count = -(-count // max(1, cores)) * max(1, cores)
    try:
        return _cut(partition, items, count)
    except OSError:  # a file gone or unreadable: the whole partition's task reports it as a quarantined row
        return None


def _heads(item: dict):
    return entry_heads(item["path"], item.get("start_position") or 0)


def _cut(partition: int, items: list[dict], count: int) -> list[LogRange] | None:
    # the files' heads are walked twice, a few files at a time (the C walk leaves the interpreter): once for the
    # records they hold, then to cut. Held all at once, a partition's heads are 24 bytes an entry in the driver
    # (16.7 M entries in an uncompacted 3.8 GB partition)
    with ThreadPoolExecutor(min(8, os.cpu_count() or 1), thread_name_prefix="offsetlake-heads") as pool:
        total = sum(pool.map(lambda i: int(_heads(i).records.sum()), items))
    per_range = max(1, -(-total // count))
    ranges: list[LogRange] = []
    current: list[dict] = []
    taken, floor, top = 0, NO_FLOOR, NO_FLOOR  # records in `current`; the floor of `current`; the highest offset read
    # the read floor of `current`, and the last record offset of the items placed whole so far
    read_floor = last_record = read_before(items).get(partition)

    def close(next_read_floor: int | None):
        nonlocal current, taken, floor, read_floor
        if current:
            ranges.append(LogRange(partition, len(ranges), tuple(current), floor, read_floor))
        current, taken, floor, read_floor = [], 0, top, next_read_floor

    def place(item: dict, heads) -> None:
        nonlocal taken, top, last_record
        if taken >= per_range:
            close(last_record)
        piece_start = item.get("start_position") or 0
        positions, lasts = heads.positions, _read_lasts(item, heads)
        held = np.concatenate(([0], np.cumsum(heads.records)))  # held[k]: the records of the entries before k
        done = 0  # the entries before `piece_start`
        while True:
            # the first entry after the piece's first at which it holds `per_range`: the cut falls before it
            at = max(done + 1, int(np.searchsorted(held, held[done] + per_range - taken)))
            if at >= len(positions):
                break
            top = max(top, int(lasts[done:at].max()))
            current.append(dict(item, start_position=piece_start, end_position=int(positions[at])))
            close(_last_record_offset(item, heads, at, last_record))
            piece_start, done = int(positions[at]), at
        if done < len(positions):
            top = max(top, int(lasts[done:].max()))
        current.append(dict(item, start_position=piece_start, end_position=FILE_END))
        taken += int(held[-1] - held[done])
        last_record = _last_record_offset(item, heads, len(positions), last_record)

    with ThreadPoolExecutor(min(8, os.cpu_count() or 1), thread_name_prefix="offsetlake-heads") as pool:
        for item, heads in zip(items, pool.map(_heads, items)):  # in log order
            place(item, heads)
    close(None)
    return ranges if len(ranges) > 1 else None


def _read_lasts(item: dict, heads) -> np.ndarray:
    """The entries' last offsets, `NO_FLOOR` for those Kafka's loader passes over (`decoding.overlaps`): a copy's
    offsets are no floor of the ranges after it, which may read them from another file."""
    lasts = heads.last_offsets
    unread = json.loads(item.get("unread") or "[]")
    if not unread:
        return lasts
    lasts = lasts.copy()
    for a, b, *_ in unread:
        lasts[(heads.positions >= a) & (heads.positions < b)] = NO_FLOOR
    return lasts


def _last_record_offset(item: dict, heads, before: int, fallback: int | None) -> int | None:
    """The offset of the last record in `item`'s entries before the `before`th, decoded from the last entry back (a
    batch the cleaner emptied holds none, and a head does not say where a thinned batch's last record is); else
    `fallback`. One batch decoded per cut and per file, as a rule."""
    for j in range(before - 1, -1, -1):
        start = int(heads.positions[j])
        end = int(heads.positions[j + 1]) if j + 1 < len(heads.positions) else int(heads.end)
        tops = [pc.max(b.column("offset")).as_py() for b in decode_segment_to_arrow(
            item["path"], offsets_partition=item["offsets_partition"], start_position=start, end_position=end,
            source=item["path"], order=OffsetOrder()) if b.num_rows]
        tops = [t for t in tops if t is not None]
        if tops:
            return max(tops)
    return fallback
