"""The decoded log's tally: records per offsets partition and record type, the newest timestamps, and the records past
the run's cut-off, from one pass over the log in the Python workers.

Two questions are asked of every decoded row: what the run read (`Tally.facts`: counts by record type, the newest
timestamp, the top partition; for the summary and the replay's options) and where each record went
(`validation.accounting.Accounting.from_tally`). Both are sums and maxima, so each task tallies the blobs it holds
with Arrow's group-by and the driver adds up a few rows per blob: the log's rows never become Spark rows.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

import pyarrow as pa
import pyarrow.compute as pc

from pipelines.coordinator.decoded import batch_times, in_log_order
from pipelines.io.blobs import from_blob
from pipelines.times import within_time_ms
from schemas.decoded import (DECODED_RECORD_SCHEMA, KIND_CONTROL, KIND_ERROR, KIND_GROUP_METADATA, KIND_OFFSET_COMMIT,
                             KIND_UNKNOWN)

#: the decoded columns a tally reads
TALLY_COLUMNS = ("offsets_partition", "record_kind", "control_type", "key_type", "value_version", "timestamp",
                 "offset", "error_records", "batch_first_offset")
TALLY_SCHEMA = pa.schema([
    ("offsets_partition", pa.int32()),
    ("label", pa.string()),  # `record_type_label`
    # of an offset commit's or group metadata's value (null: a tombstone, another kind, a tally before it was kept):
    # a coordinator's load fails on one above the versions it reads (`coordinator.options.known_value_versions`)
    ("value_version", pa.int16()),
    ("n", pa.int64()),  # rows
    ("quarantined", pa.int64()),  # records the error rows stand for (`error_records`, 1 when absent)
    ("late_offset", pa.int64()),  # usable records past --until-offset
    ("late_time", pa.int64()),  # usable records past --until-time (and not past --until-offset)
    ("ts", pa.int64()),  # newest timestamp of a record that has one (not an error row)
    ("ts_until", pa.int64()),  # the same, among the records at or before --until-offset
    # the partition's offsets read (its rows', whatever their label): the first, and where the last run of missing
    # offsets ends (the first offset read after it) with the newest timestamp up to there. The log cleaner removes
    # records below its cleaned offset only, so past `gap_end` the partition's log is whole
    ("first_offset", pa.int64()),
    ("gap_end", pa.int64()),
    ("gap_ts", pa.int64()),
    # the newest timestamp among all the offsets these rows' piece of the partition read (a task's, or a running
    # tally's group): a gap in a later piece is dated by it too (`_gap_times`)
    ("span_ts", pa.int64()),
])
_SUMS = ("n", "quarantined", "late_offset", "late_time")
_MAXES = ("ts", "ts_until", "gap_end", "gap_ts", "span_ts")
_MINS = ("first_offset",)
_SPAN_MAXES = ("gap_end", "span_ts")  # and `gap_ts`, the one of the piece holding the last `gap_end` (`_gap_times`)


@dataclass(frozen=True)
class DecodedFacts:
    """What a run reports and cuts by."""

    counts: dict[str | None, int]  # records per record type label
    max_timestamp: int | None  # newest record timestamp (error rows and timestamp -1 aside)
    max_timestamp_until: int | None  # the same among records at or before --until-offset
    max_partition: int  # highest offsets partition with a row (-1: none)
    log_gaps: dict[int, dict] = field(default_factory=dict)  # `Tally.log_gaps`

    def records_of(self, *kinds: str) -> int:
        """The records of these record kinds (`record_type_label`'s part before its colon)."""
        return sum(n for label, n in self.counts.items() if label is not None and label.split(":")[0] in kinds)


@dataclass(frozen=True)
class Tally:
    """One row per (offsets partition, record type label, value version) of a decoded log (`TALLY_SCHEMA`), with
    the cut-offs it was taken with."""

    table: pa.Table
    until_offset: int | None = None
    until_time_ms: int | None = None

    def facts(self) -> DecodedFacts:
        t = self.table
        counts: dict[str | None, int] = {}
        for label, n in zip(t.column("label").to_pylist(), t.column("n").to_pylist()):
            counts[label] = counts.get(label, 0) + n
        part = pc.max(t.column("offsets_partition")).as_py() if t.num_rows else None
        # the clock of a run as of its newest record: an instant the tables hold (`decoded.within_time`)
        return DecodedFacts(counts=counts, max_timestamp=within_time_ms(pc.max(t.column("ts")).as_py()),
                            max_timestamp_until=within_time_ms(pc.max(t.column("ts_until")).as_py()),
                            max_partition=-1 if part is None else part, log_gaps=self.log_gaps())

    def log_gaps(self) -> dict[int, dict]:
        """Per offsets partition read: `first_offset`, and where its log lacks offsets (compacted by the log cleaner,
        or unreadable: see the quarantine) `compacted_below`, the first offset read after the last missing one (the
        log is whole from there on), and `compacted_until`, the newest timestamp read up to it (both None where
        nothing is missing; a time within years 1 to 9999, as the loaders read one)."""
        t = self.table
        if not t.num_rows:
            return {}
        by = t.group_by("offsets_partition", use_threads=False).aggregate(
            [("first_offset", "min"), ("gap_end", "max"), ("gap_ts", "max")])
        out = {}
        for p, first, end, ts in zip(*(by.column(c).to_pylist() for c in (
                "offsets_partition", "first_offset_min", "gap_end_max", "gap_ts_max"))):
            if p is not None:
                out[p] = {"first_offset": first, "compacted_below": end, "compacted_until": within_time_ms(ts)}
        return out

    def partitions_with_key_types_beyond(self, known: frozenset[int]) -> list[int]:
        """The offsets partitions holding a record (not an error row, not a marker) of a key type not in `known`."""
        out = set()
        for p, label in zip(*(self.table.column(c).to_pylist() for c in ("offsets_partition", "label"))):
            key_type = label_key_type(label)
            if p is not None and label != KIND_ERROR and key_type is not None and key_type not in known:
                out.add(p)
        return sorted(out)

    def beyond_value_versions(self, known: tuple[tuple[int, int], ...]) -> dict[tuple[int | None, str, int], int]:
        """(offsets partition, label, value version) -> the records of an offset commit or group metadata value
        above the version `known` (`coordinator.options.known_value_versions`) gives its key type."""
        highest = dict(known)
        out: dict[tuple[int | None, str, int], int] = {}
        if not highest or "value_version" not in self.table.column_names:
            return out
        for p, label, version, n in zip(*(self.table.column(c).to_pylist()
                                          for c in ("offsets_partition", "label", "value_version", "n"))):
            kind, key_type = (label or "").partition(":")[0], label_key_type(label)
            if (kind in (KIND_OFFSET_COMMIT, KIND_GROUP_METADATA) and version is not None
                    and version > highest.get(key_type, version)):
                out[(p, label, version)] = out.get((p, label, version), 0) + n
        return out

    def by_partition(self, unknown_key_types: frozenset[int] = frozenset(),
                     known_value_versions: tuple[tuple[int, int], ...] = ()) -> dict[int | None, dict[str, int]]:
        """Per offsets partition: rows (`n`), `quarantined`, `error_rows`, `unknown`, `unknown_version`,
        `late_offset`, `late_time`. `unknown` holds the records of a key type the decoder does not know, and those
        of `unknown_key_types` (the run's coordinator does not know them:
        `coordinator.options.unknown_group_key_types`), `unknown_version` those of a value version above
        `known_value_versions`' (`beyond_value_versions`), wherever they are: a loader skips them before any cut-off
        would."""
        out: dict[int | None, dict[str, int]] = {}
        beyond = self.beyond_value_versions(known_value_versions)
        for r in self.table.to_pylist():
            c = out.setdefault(r["offsets_partition"], dict.fromkeys(
                ("n", "quarantined", "error_rows", "unknown", "unknown_version", "late_offset", "late_time"), 0))
            label = r["label"] or ""
            if label != KIND_ERROR and (label.startswith(KIND_UNKNOWN + ":")
                                        or label_key_type(label) in unknown_key_types):
                c["n"] += r["n"]
                c["unknown"] += r["n"]
                continue
            if beyond and (r["offsets_partition"], label, r.get("value_version")) in beyond:
                c["n"] += r["n"]
                c["unknown_version"] += r["n"]
                continue
            for k in _SUMS:
                c[k] += r[k]
            if label == KIND_ERROR:
                c["error_rows"] += r["n"]
        return out


def label_key_type(label: str | None) -> int | None:
    """The key type a record type label names (`share_group:11` -> 11, `unknown:-3` -> -3); None for a control
    record's, an error's, no label."""
    _, _, key_type = (label or "").partition(":")
    return int(key_type) if key_type.removeprefix("-").isdigit() else None


def record_type_label(table: pa.Table) -> pa.Array:
    """`offset_commit:1`, `group_metadata:2`, `consumer_group:5`, `control:COMMIT`, `unknown:42`, `error`; null
    for a row without a record kind."""
    kind = table.column("record_kind")
    key_type = pc.coalesce(pc.cast(table.column("key_type"), pa.string()), pa.scalar("?"))
    control = pc.binary_join_element_wise(pa.scalar(KIND_CONTROL), pc.coalesce(table.column("control_type"),
                                                                               pa.scalar("?")), ":")
    return pc.if_else(pc.fill_null(pc.equal(kind, KIND_ERROR), False), pa.scalar(KIND_ERROR),
                      pc.if_else(pc.fill_null(pc.equal(kind, KIND_CONTROL), False), control,
                                 pc.binary_join_element_wise(kind, key_type, ":")))


def _batch_times(table: pa.Table, usable) -> pa.Array:
    """`decoded.batch_times` over the rows a shard loads (neither error nor unknown rows: `loadable`), as the
    engine's cut reads them; null for the other rows."""
    rows = pc.fill_null(usable, False)
    if pc.all(rows).as_py():
        return batch_times(table)
    if not pc.any(rows).as_py():
        return pa.nulls(table.num_rows, pa.int64())
    times = batch_times(table.filter(rows))
    at = np.cumsum(rows.to_numpy(zero_copy_only=False)) - 1
    return pc.if_else(rows, pc.take(times, pa.array(np.maximum(at, 0))), pa.scalar(None, pa.int64()))


def tally_rows(table: pa.Table, until_offset: int | None = None, until_time_ms: int | None = None,
               after: dict[int, int] | None = None, newest: dict[int, int] | None = None) -> pa.Table:
    """The tally (`TALLY_SCHEMA`) of decoded rows: any table with the `TALLY_COLUMNS` (`error_records` may be
    missing: each error row then stands for one record; `value_version` too: none known). `after`: offsets
    partition -> the highest offset read of it before these rows (a run of missing offsets may begin there);
    `newest`: -> the newest timestamp read of it before these rows (a run of missing offsets that ends among them
    is dated by it too)."""
    n = table.num_rows
    if n == 0:
        return TALLY_SCHEMA.empty_table()
    names = set(table.column_names)  # column_names builds a list on every access
    table = pa.table({c: table.column(c).cast(DECODED_RECORD_SCHEMA.field(c).type) if c in names
                      else pa.nulls(n, DECODED_RECORD_SCHEMA.field(c).type)
                      for c in TALLY_COLUMNS if c in names or c in ("value_version", "batch_first_offset")})
    kind = table.column("record_kind")
    ts = table.column("timestamp")
    offset = table.column("offset")
    is_error = pc.fill_null(pc.equal(kind, KIND_ERROR), False)
    usable = pc.fill_null(pc.and_(pc.not_equal(kind, KIND_ERROR), pc.not_equal(kind, KIND_UNKNOWN)), False)
    timed = pc.and_(pc.fill_null(pc.not_equal(kind, KIND_ERROR), False), pc.fill_null(pc.greater_equal(ts, 0), False))
    weight = (pc.coalesce(table.column("error_records"), pa.scalar(1, pa.int64()))
              if "error_records" in table.column_names else pa.scalar(1, pa.int64()))
    no = pa.scalar(False)
    late_offset = (pc.fill_null(pc.greater(offset, until_offset), False) if until_offset is not None
                   else pa.repeat(no, n))
    late_time = (pc.and_(pc.fill_null(pc.greater(_batch_times(table, usable), until_time_ms), False),
                         pc.invert(late_offset))
                 if until_time_ms is not None else pa.repeat(no, n))
    null_ts = pa.scalar(None, pa.int64())
    until = (pc.and_(timed, pc.fill_null(pc.less_equal(offset, until_offset), False)) if until_offset is not None
             else pa.repeat(no, n))
    # grouped by what makes the label first: a label is a string built per row
    rows = pa.table({
        "offsets_partition": pc.cast(table.column("offsets_partition"), pa.int32()),
        "record_kind": kind, "key_type": table.column("key_type"), "control_type": table.column("control_type"),
        "value_version": table.column("value_version"),
        "n": pa.repeat(pa.scalar(1, pa.int64()), n),
        "quarantined": pc.if_else(is_error, pc.cast(weight, pa.int64()), pa.scalar(0, pa.int64())),
        "late_offset": pc.cast(pc.and_(usable, late_offset), pa.int64()),
        "late_time": pc.cast(pc.and_(usable, late_time), pa.int64()),
        "ts": pc.if_else(timed, pc.cast(ts, pa.int64()), null_ts),
        "ts_until": pc.if_else(until, pc.cast(ts, pa.int64()), null_ts),
    })
    by = ["offsets_partition", "record_kind", "key_type", "control_type", "value_version"]
    kinds = rows.group_by(by, use_threads=False).aggregate([(c, "sum") for c in _SUMS]
                                                           + [(c, "max") for c in ("ts", "ts_until")])
    spans = _spans(rows.column("offsets_partition"), offset, rows.column("ts"), after or {}, newest or {})
    at = pc.index_in(kinds.column("offsets_partition"), value_set=spans.column("offsets_partition"))
    return _combine(pa.table({"offsets_partition": kinds.column("offsets_partition"),
                              "label": record_type_label(kinds), "value_version": kinds.column("value_version"),
                              **{c: kinds.column(f"{c}_sum") for c in _SUMS},
                              **{c: kinds.column(f"{c}_max") for c in ("ts", "ts_until")},
                              **{c: pc.take(spans.column(c), at)
                                 for c in ("first_offset", "gap_end", "gap_ts", "span_ts")}}))


def _spans(parts, offsets, times, after: dict[int, int], newest_before: dict[int, int]) -> pa.Table:
    """Per offsets partition among rows: the first offset read, the end of the last run of missing offsets (the
    first offset read after it, counting from `after`'s offset), the newest timestamp up to it (counting from
    `newest_before`'s) and the newest of all the offsets read."""
    p = pc.fill_null(parts, -1).to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    o = pc.fill_null(offsets, 0).to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    ts = pc.fill_null(times, np.iinfo(np.int64).min).to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    # every partition heads a run of its rows: the runs' heads are few (rows come partition by partition)
    parts_all = np.unique(p[np.r_[True, p[1:] != p[:-1]]]) if len(p) else p
    valid = o >= 0  # no log position is negative: a batch quarantined for holding one has no place in the log
    if offsets.null_count:
        valid &= offsets.is_valid().to_numpy(zero_copy_only=False)
    if not valid.all():
        p, o, ts = p[valid], o[valid], ts[valid]
    else:  # written below (a partition's first timestamp): a copy, not the column's own buffer
        ts = ts.copy()
    # a shard's rows come in log order: a sort (a stable one, so ties keep their order) would only copy them
    if not in_log_order(p, o):
        order = np.lexsort((o, p))
        p, o, ts = p[order], o[order], ts[order]
    n = len(p)
    first_of = np.ones(n, bool)
    first_of[1:] = p[1:] != p[:-1]
    prev = np.empty(n, np.int64)
    prev[1:] = o[:-1]
    known = ~first_of.copy()
    for i in np.flatnonzero(first_of).tolist():  # a partition's first row: after the rows read before, if any
        if int(p[i]) in after:
            prev[i], known[i] = after[int(p[i])], True
    gap = known & (o > prev + 1)
    # the newest timestamp up to each row, per partition: a running maximum that restarts at each partition (a
    # window holds few partitions, a task's one)
    newest = np.empty(n, np.int64)
    starts = np.flatnonzero(first_of)
    for a, b in zip(starts.tolist(), [*starts[1:].tolist(), n]):
        before = newest_before.get(int(p[a]))
        if before is not None:
            ts[a] = max(int(ts[a]), before)
        np.maximum.accumulate(ts[a:b], out=newest[a:b])
    first, gap_end, gap_ts, span_ts = {}, {}, {}, {}
    for i in np.flatnonzero(first_of).tolist():
        first[int(p[i])] = int(o[i])
    for i in np.flatnonzero(gap).tolist():  # in order: the last one of a partition wins
        gap_end[int(p[i])] = int(o[i])
        gap_ts[int(p[i])] = None if newest[i] == np.iinfo(np.int64).min else int(newest[i])
    for i in [*(starts[1:] - 1).tolist(), n - 1] if n else ():  # a partition's last row: the newest of it all
        span_ts[int(p[i])] = None if newest[i] == np.iinfo(np.int64).min else int(newest[i])
    keys = [int(x) for x in parts_all.tolist()]
    return pa.table({"offsets_partition": pa.array(keys, pa.int32()),
                     "first_offset": pa.array([first.get(k) for k in keys], pa.int64()),
                     "gap_end": pa.array([gap_end.get(k) for k in keys], pa.int64()),
                     "gap_ts": pa.array([gap_ts.get(k) for k in keys], pa.int64()),
                     "span_ts": pa.array([span_ts.get(k) for k in keys], pa.int64())})


class RunningTally:
    """The tally of a stream of decoded windows (a shard's load), grouped once per `rows` rows or more: a window
    of one small log batch costs a selection of its tally columns, not a grouping of its own. What it holds is
    bounded: the tally columns of under `rows` rows, and of the decoder batches those windows were cut from."""

    def __init__(self, until_offset: int | None = None, until_time_ms: int | None = None, rows: int = 1 << 16,
                 after: dict[int, int] | None = None):
        self._cut, self._rows = (until_offset, until_time_ms), rows
        self._held: list[pa.Table] = []
        self._held_rows = 0
        self._tallies: list[pa.Table] = []
        self._after = dict(after or {})  # offsets partition -> the highest offset read of it so far
        self._newest: dict[int, int] = {}  # offsets partition -> the newest timestamp read of it so far

    def add(self, window: pa.Table) -> None:
        names = set(window.column_names)
        self._held.append(window.select([c for c in TALLY_COLUMNS if c in names]))
        self._held_rows += window.num_rows
        if self._held_rows >= self._rows:
            self._group()

    def _group(self) -> None:
        if self._held:
            rows = pa.concat_tables(self._held, promote_options="default")
            tallied = tally_rows(rows, *self._cut, after=self._after, newest=self._newest)
            self._tallies.append(tallied)
            for p, ts in zip(*(tallied.column(c).to_pylist() for c in ("offsets_partition", "span_ts"))):
                if p is not None and ts is not None:
                    self._newest[p] = max(ts, self._newest.get(p, ts))
            highest = rows.group_by("offsets_partition", use_threads=False).aggregate([("offset", "max")])
            for p, top in zip(*(highest.column(c).to_pylist() for c in ("offsets_partition", "offset_max"))):
                if p is not None and top is not None:
                    self._after[p] = max(top, self._after.get(p, top))
            self._held, self._held_rows = [], 0

    def result(self) -> pa.Table:
        self._group()
        return _combine(pa.concat_tables(self._tallies)) if self._tallies else TALLY_SCHEMA.empty_table()


def _combine(rows: pa.Table) -> pa.Table:
    """Tally rows added up by (offsets partition, label, value version)."""
    if rows.num_rows == 0:
        return TALLY_SCHEMA.empty_table()
    rows = rows.select([f.name for f in TALLY_SCHEMA if f.name in rows.column_names])  # a tally of an older version
    for f in TALLY_SCHEMA:
        if f.name not in rows.column_names:
            rows = rows.append_column(f.name, pa.nulls(rows.num_rows, f.type))
    out = rows.group_by(["offsets_partition", "label", "value_version"], use_threads=False).aggregate(
        [(c, "sum") for c in _SUMS] + [(c, "max") for c in _MAXES] + [(c, "min") for c in _MINS])

    def agg(name: str) -> str:
        return name if name in ("offsets_partition", "label", "value_version") else \
            f"{name}_{'max' if name in _MAXES else 'min' if name in _MINS else 'sum'}"

    combined = pa.table({f.name: pc.cast(out.column(agg(f.name)), f.type) for f in TALLY_SCHEMA}, schema=TALLY_SCHEMA)
    # where a partition's log lacks offsets is the partition's, whichever piece of it saw which labels: every row of
    # a partition carries the partition's (as a tally of the whole partition at once does)
    spans = combined.group_by("offsets_partition", use_threads=False).aggregate(
        [(c, "max") for c in _SPAN_MAXES] + [(c, "min") for c in _MINS])
    gap_times = _gap_times(rows)
    spans = spans.append_column("gap_ts", pa.array(
        [gap_times.get(p) for p in spans.column("offsets_partition").to_pylist()], pa.int64()))
    at = pc.index_in(combined.column("offsets_partition"), value_set=spans.column("offsets_partition"))
    sources = {c: f"{c}_max" for c in _SPAN_MAXES} | {c: f"{c}_min" for c in _MINS} | {"gap_ts": "gap_ts"}
    for c, source in sources.items():
        combined = combined.set_column(combined.schema.get_field_index(c), c, pc.take(spans.column(source), at))
    return combined


def _gap_times(rows: pa.Table) -> dict[int, int | None]:
    """Per offsets partition, the newest timestamp read up to the end of its last run of missing offsets, from the
    tally rows of its pieces (a running tally's groups, a task's blobs: each read a run of the partition's offsets,
    and its rows carry its spans): the pieces holding that end date it up to there, and every piece that starts
    before them with all it read. (A record read twice on either side of two pieces' boundary, from overlapping
    inputs, leaves the order of those two pieces unknown: the later one counts as read after.)"""
    keys = ["offsets_partition", "first_offset", "gap_end", "gap_ts", "span_ts"]
    pieces = rows.group_by(keys, use_threads=False).aggregate([])
    by_partition: dict[int, list[tuple]] = {}
    for p, *piece in zip(*(pieces.column(c).to_pylist() for c in keys)):
        if p is not None and piece[0] is not None:
            by_partition.setdefault(p, []).append(tuple(piece))
    out = {}
    for p, read in by_partition.items():
        end = max((r[1] for r in read if r[1] is not None), default=None)
        if end is None:
            continue
        holding = [r for r in read if r[1] == end]
        start = max(r[0] for r in holding)
        times = [r[2] for r in holding] + [r[3] for r in read if r[0] < start]
        out[p] = max((t for t in times if t is not None), default=None)
    return out


def tally(log, read_before: dict[int, int] | None = None) -> Tally:
    """The tally of a decoded log (`frames.decoded_log.DecodedLog`) at the cut-offs it was decoded with: over the
    rows in hand, or the tallies its tasks packed beside the blobs (a few rows each), added up here.
    `read_before` (`frames.decode.DecodePlan.read_before`): where each partition's reading started."""
    if log.cut is None:
        raise ValueError("this decoded log was not tallied (frames.decode.decoded_log tallies what it decodes)")
    until_offset, until_time_ms = log.cut
    if log.in_hand:
        rows = tally_rows(log.table, until_offset, until_time_ms, after=read_before)
    else:
        parts = [from_blob(b) for b in log.side_blobs("tally")]
        rows = _combine(pa.concat_tables(parts).cast(TALLY_SCHEMA)) if parts else TALLY_SCHEMA.empty_table()
    return Tally(rows, until_offset, until_time_ms)
