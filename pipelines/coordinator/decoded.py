"""Decoded rows as a shard loads them: the columns a loader reads, conformed to the decoded schema, in log order within
each `__consumer_offsets` partition, cut at the run's point in time (`--until-offset`, `--until-time`); the rows
among them that name topics and the end-transaction markers. Both the engine's entry point (`shard`) and the
streamed loader (`streamed`) read them through here.
"""
from __future__ import annotations

from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipelines.coordinator.groups import MEMBER_BYTES
from pipelines.coordinator.loader import KIND_NOT_LOADED, SKIPPED_KINDS, SparseRow
from pipelines.coordinator.offset_metadata import END_MARKER_TYPES, is_control
from pipelines.coordinator.options import ReplayOptions
from pipelines.decoding.native import fastdecode
from pipelines.times import MAX_TIME_MS, MIN_TIME_MS
from schemas.decoded import (DECODED_RECORD_SCHEMA, KIND_CONSUMER_GROUP, KIND_CONTROL, KIND_ERROR, KIND_GROUP_METADATA,
                             KIND_OFFSET_COMMIT, KIND_SHARE_GROUP, KIND_STREAMS_GROUP)

PART = "offsets_partition"
#: The column a shard's rows carry their `batch_times` in (`with_batch_times`), as the histories record it
BATCH_TIME = "batch_timestamp"
#: Decoded columns no loader reads: not shipped to a shard.
UNREAD_COLUMNS = ("key", "value", "source", "error", "batch_position", "codec", "magic", "timestamp_type")
#: Decoded columns only an error row sets: a loader drops error rows (`loadable`), so it would hold them all null.
ERROR_COLUMNS = ("error_kind", "error_records", "unread_bytes")
#: The columns a loader's table holds (`conform_loaded`): every decoded one a loaded record can set. A window's
#: every filter, concatenation and blob copies each column it holds, null or not.
LOADED_SCHEMA = pa.schema([f for f in DECODED_RECORD_SCHEMA if f.name not in UNREAD_COLUMNS + ERROR_COLUMNS])
REPLAY_COLUMNS = tuple(LOADED_SCHEMA.names)


def without_unread(table: pa.Table) -> pa.Table:
    """`table` without the `UNREAD_COLUMNS` it holds."""
    names = set(table.column_names)  # column_names builds a list on every access
    return table.drop_columns([c for c in UNREAD_COLUMNS if c in names])


def conform_decoded(table: pa.Table, schema: pa.Schema = DECODED_RECORD_SCHEMA) -> pa.Table:
    """`table` with exactly `schema`'s columns (default: the decoded schema's) and types (Spark's Arrow and Parquet
    files differ in nullability and metadata only; missing columns — the unread ones, or columns added since a
    state was written — come as nulls; columns `schema` lacks are dropped)."""
    if table.schema.equals(schema):  # conformed already (a window of a conformed table)
        return table
    have = dict(zip(table.column_names, table.columns))
    columns = [pa.nulls(table.num_rows, f.type) if (c := have.get(f.name)) is None
               else c if c.type == f.type else c.cast(f.type) for f in schema]
    return pa.table(columns, schema=schema)


def conform_loaded(table: pa.Table) -> pa.Table:
    """`table` (decoded rows) as a loader holds it: `conform_decoded` to `LOADED_SCHEMA`, and the `batch_timestamp`
    a load gave its rows (`with_batch_times`) kept where they carry it: a range hands on rows it reduced, whose
    batch's newest record may be gone."""
    if BATCH_TIME not in table.column_names:
        return conform_decoded(table, LOADED_SCHEMA)
    times = table.column(BATCH_TIME)
    return conform_decoded(table.drop_columns([BATCH_TIME]), LOADED_SCHEMA).append_column(BATCH_TIME, times)


def loadable(table: pa.Table, unknown_key_types: frozenset[int] = frozenset(),
             unknown_fields: frozenset[str] = frozenset(), known_value_versions: tuple[tuple[int, int], ...] = ()
             ) -> pa.Table:
    """The rows a shard loads (no error/unknown rows, but a marker's: `damaged_markers`), in log order within each
    offsets partition, their times within what the tables hold (`within_time`); the columns of `unknown_fields`
    (fields the coordinator's value classes lack: `ReplayOptions.unknown_fields`) null. A group record of
    `unknown_key_types`, which the run's coordinator skips (`ReplayOptions.unknown_key_types`), and an offset commit
    or group metadata value above `known_value_versions`' version of its key type, on which its load fails
    (`ReplayOptions.known_value_versions`), stay as rows of kind `KIND_NOT_LOADED`: a legacy run of a log with
    KIP-848 groups has some in every window, and filtering them out copied every column of each."""
    for name in unknown_fields:
        at = table.schema.get_field_index(name)
        if at >= 0 and table.column(name).null_count < table.num_rows:
            table = table.set_column(at, table.schema.field(at), pa.nulls(table.num_rows, table.schema.field(at).type))
    kind = table.column("record_kind")
    not_loaded = None
    if unknown_key_types:
        unknown = pc.and_(pc.is_in(kind, pa.array([KIND_OFFSET_COMMIT, KIND_GROUP_METADATA, KIND_CONSUMER_GROUP,
                                                   KIND_SHARE_GROUP, KIND_STREAMS_GROUP])),
                          pc.is_in(table.column("key_type"), pa.array(sorted(unknown_key_types), pa.int16())))
        not_loaded = pc.fill_null(unknown, False)
    if known_value_versions:
        beyond = beyond_value_versions(table, known_value_versions)
        not_loaded = beyond if not_loaded is None else pc.or_(not_loaded, beyond)
    if not_loaded is not None and pc.any(not_loaded).as_py():
        kind = pc.if_else(not_loaded, pa.scalar(KIND_NOT_LOADED), kind)
        table = table.set_column(table.schema.get_field_index("record_kind"), "record_kind", kind)
    skipped = pc.fill_null(pc.is_in(kind, pa.array(SKIPPED_KINDS)), False)
    if pc.any(skipped).as_py():  # a filter copies every column: only when there is something to drop
        marker = damaged_markers(table)
        if pc.any(marker).as_py():
            skipped = pc.and_(skipped, pc.invert(marker))
            table = table.set_column(table.schema.get_field_index("record_kind"), "record_kind",
                                     pc.if_else(marker, pa.scalar(KIND_CONTROL), kind))
        table = table.filter(pc.invert(skipped))
    table = within_time(table)
    if _in_log_order(table):  # what a segment's decoder gives: a sort would only copy every column
        return table
    return table.sort_by([(PART, "ascending"), ("offset", "ascending")])


def beyond_value_versions(table: pa.Table, known_value_versions: tuple[tuple[int, int], ...]) -> pa.ChunkedArray:
    """Which rows are offset commit or group metadata values of a version above the one `known_value_versions`
    gives their key type (a tombstone has none: every reader takes it)."""
    kind, key_type, version = (table.column(c) for c in ("record_kind", "key_type", "value_version"))
    beyond = pa.repeat(pa.scalar(False), table.num_rows)
    for t, highest in known_value_versions:
        beyond = pc.or_(beyond, pc.and_(pc.equal(key_type, t), pc.greater(version, highest)))
    classic = pc.is_in(kind, pa.array([KIND_OFFSET_COMMIT, KIND_GROUP_METADATA]))
    return pc.fill_null(pc.and_(classic, beyond), False)


def damaged_markers(table: pa.Table) -> pa.ChunkedArray:
    """Which error rows are end-transaction markers whose key says COMMIT or ABORT and whose value does not decode:
    Kafka's loaders read a marker's key alone (spec §5.1, §5.3), so the transaction ends as the key says. The value
    stays quarantined as `undecodable_value`; the loaders read the row as the marker."""
    return pc.and_(pc.and_(pc.fill_null(pc.equal(table.column("record_kind"), KIND_ERROR), False),
                           pc.fill_null(table.column("is_control"), False)),
                   pc.fill_null(pc.is_in(table.column("control_type"), pa.array(END_MARKER_TYPES)), False))


#: The decoded columns that hold an instant (epoch ms; -1 where the record has none)
TIME_COLUMNS = ("timestamp", "commit_timestamp", "expire_timestamp", "current_state_timestamp", "regex_timestamp")


def within_time(table: pa.Table) -> pa.Table:
    """`table` with each instant past years 1 to 9999 read as the nearest of them (`times.MIN_TIME_MS`,
    `MAX_TIME_MS`). Kafka takes any long (a crafted record's can be year 146 million), and a table, a run record
    and ISO-8601 text hold those years only. Against any clock a run can have, the nearest end decides as the long
    would (a commit past year 9999 never expires, one before year 1 is as old as can be), and the log's own bytes
    keep the value (`offsetlake decode`)."""
    for name in TIME_COLUMNS:
        at = table.schema.get_field_index(name)
        if at < 0:
            continue
        column = table.column(at)
        low, high = pc.min_max(column).values()
        if low.is_valid and (low.as_py() < MIN_TIME_MS or high.as_py() > MAX_TIME_MS):
            raised = pc.max_element_wise(column, pa.scalar(MIN_TIME_MS, column.type), skip_nulls=False)  # a null stays
            table = table.set_column(at, table.schema.field(at),
                                     pc.min_element_wise(raised, pa.scalar(MAX_TIME_MS, column.type), skip_nulls=False))
    return table


def _in_log_order(table: pa.Table) -> bool:
    part, offset = table.column(PART), table.column("offset")
    if part.null_count or offset.null_count:
        return False
    return in_log_order(part.to_numpy(), offset.to_numpy())


def in_log_order(parts: np.ndarray, offsets: np.ndarray) -> bool:
    """Rows (their offsets partitions and offsets) by partition, then offset: what a shard's decoder gives."""
    p, o = parts, offsets
    return bool(np.all((p[:-1] < p[1:]) | ((p[:-1] == p[1:]) & (o[:-1] <= o[1:]))))


def group_rows(table: pa.Table, keep: np.ndarray, use_c: bool | None = None) -> list[SparseRow]:
    """The rows of `table` that `keep` selects (a mask: `reduction.loader_mask`) as the loaders read them, in order:
    each a `SparseRow` of the columns its record sets, in the table's order (an offset commit's: its kind and group
    id), each value as pyarrow gives it, a classic group's members without their raw bytes (`MEMBER_BYTES`).
    `use_c`: None = the C reader when built (`decoding/_python_rows.c`), True = require it, False = the Python
    reference (pyarrow's rows)."""
    at = np.flatnonzero(keep)
    if not len(at):
        return []
    if use_c and fastdecode is None:
        raise RuntimeError("the _fastdecode C extension is not built")
    table = without_unread(table)
    if BATCH_TIME in table.column_names:  # not a decoded column: the loaders take it beside the rows
        table = table.drop_columns([BATCH_TIME])
    return (_c_rows if use_c is not False and fastdecode is not None else _reference_rows)(table, at)


def looped_batch_times(table: pa.Table, keep: np.ndarray) -> list[int | None]:
    """The `batch_timestamp` of each row `group_rows(table, keep)` gives, in its order (none where `table` has no
    such column)."""
    if BATCH_TIME not in table.column_names:
        return []
    return table.column(BATCH_TIME).take(pa.array(np.flatnonzero(keep))).to_pylist()


#: The columns an offset commit's row holds for the loaders (`loader.replay_group_records`)
_COMMIT_READS = ("record_kind", "group_id")
_SKIPPED_FIELDS = frozenset(MEMBER_BYTES)


def _c_rows(table: pa.Table, at: np.ndarray) -> list[SparseRow]:
    """`group_rows` read from each record batch's buffers in C: only the rows `at` (ascending row numbers) asks
    for are made Python objects, where pyarrow would take them out of every column and convert each column."""
    names = table.column_names
    narrow_columns = np.array([c in _COMMIT_READS for c in names], np.uint8)
    kinds = table.column("record_kind").take(pa.array(at))
    narrow = pc.fill_null(pc.equal(kinds, KIND_OFFSET_COMMIT), False).to_numpy(zero_copy_only=False).astype(np.uint8)
    out: list[SparseRow] = []
    start = 0
    for batch in table.to_batches():
        end = start + batch.num_rows
        a, b = np.searchsorted(at, (start, end)).tolist()
        if b > a:
            schema, array = batch.__arrow_c_array__()
            out += fastdecode.python_rows(schema, array, np.ascontiguousarray(at[a:b] - start, np.int64),
                                          narrow[a:b], narrow_columns, _SKIPPED_FIELDS, SparseRow)
        start = end
    return out


def _reference_rows(table: pa.Table, at: np.ndarray) -> list[SparseRow]:
    """`group_rows` from pyarrow's rows."""
    out = []
    for row in table.take(pa.array(at)).to_pylist():
        if row["record_kind"] == KIND_OFFSET_COMMIT:
            out.append(SparseRow((c, v) for c, v in row.items() if c in _COMMIT_READS and v is not None))
            continue
        kept = SparseRow((c, v) for c, v in row.items() if v is not None)
        if kept.get("members"):
            kept["members"] = [{k: v for k, v in m.items() if k not in _SKIPPED_FIELDS} if m is not None else None
                               for m in kept["members"]]
        out.append(kept)
    return out


NAMING_COLUMNS = ("record_kind", "key_type", "is_tombstone", "offset", PART, "topics_metadata")


def naming_rows(table: pa.Table, options: ReplayOptions | None = None) -> pa.Table:
    """The decoded rows of `table` that name topics (ConsumerGroupPartitionMetadata, type 4; ShareGroupPartition-
    Metadata, type 9), at the run's cut (`until_cut`; all of them without `options`), in `NAMING_COLUMNS`: a few
    rows of any log."""
    kind, key_type = table.column("record_kind"), table.column("key_type")
    mask = pc.fill_null(pc.or_(pc.and_(pc.equal(kind, "consumer_group"), pc.equal(key_type, 4)),
                               pc.and_(pc.equal(kind, "share_group"), pc.equal(key_type, 9))), False)
    if not pc.any(mask).as_py():
        return table.select(list(NAMING_COLUMNS)).slice(0, 0)
    if options is not None and (keep := until_cut_mask(table, options)) is not None:  # a batch's rows cut together
        mask = pc.and_(mask, keep)
    return table.select(list(NAMING_COLUMNS)).filter(mask)


def until_cut(table: pa.Table, options: ReplayOptions) -> pa.Table:
    """The rows a shard loads at the run's point in time: offsets at or before `--until-offset`, records with no
    timestamp or whose batch's newest record is at or before `--until-time` (`batch_times`)."""
    keep = until_cut_mask(table, options)
    return table if keep is None else table.filter(keep)


def until_cut_mask(table: pa.Table, options: ReplayOptions) -> pa.ChunkedArray | None:
    """`until_cut`'s rows as a mask over `table` (which needs only `offset` and `timestamp`, and `offsets_partition`
    and `batch_first_offset` to cut by batch: `batch_times`); None: no cut."""
    keep = None
    if options.until_offset is not None:
        keep = pc.less_equal(table.column("offset"), options.until_offset)
    if options.until_time_ms is not None:
        times = table.column(BATCH_TIME) if BATCH_TIME in table.column_names else batch_times(table)
        in_time = kept_at(times, options.until_time_ms)
        keep = in_time if keep is None else pc.and_kleene(keep, in_time)
    return None if keep is None else pc.fill_null(keep, False)


def kept_at(timestamps: pa.Array | pa.ChunkedArray, until) -> pa.ChunkedArray | pa.Array:
    """Which records a cut at time `until` holds, by their times (`timestamps`: epoch ms with `until` an int, or a
    timestamp column with `until` a datetime; the engine's cut passes each record's batch's newest, `batch_times`):
    those at or before it, and every record with no timestamp (null, or Kafka's -1: a magic 0 message has none), at
    any cut: such a record has a position in the log but no time to leave it out by. `rebuild --until-time` cuts so
    (`until_cut_mask`), and every view that stops at a moment asks this of the history
    (`serving.history.took_effect_by`), so the engine and the views hold one state."""
    stamped = pc.less_equal(timestamps, pa.scalar(until, timestamps.type))
    return pc.fill_null(pc.or_kleene(pc.is_null(timestamps), stamped), False)


def batch_times(table: pa.Table) -> pa.Array | pa.ChunkedArray:
    """Each row's time as a reader of the coordinator could first have seen it: the newest record time of its batch
    (rows of one offsets partition and `batch_first_offset`; a row without one is a batch of its own). Kafka 4.0's
    coordinator gathers the records of several writes into one batch for `group.coordinator.append.linger.ms`
    (CoordinatorRuntime.maybeFlushCurrentBatch: each record stamped at its write, the batch appended whole) and
    answers every read at the last committed offset, a batch end (CoordinatorReadEvent.run, SnapshottableCoordinator
    .updateLastWrittenOffset), so a point in time between a batch's records saw none of them. The old coordinator
    appends each write as a batch of one time (GroupMetadataManager.storeGroup / storeOffsets, 0.11-3.9): there this
    is the record's own time. Null where no record of the batch has a time."""
    ts = table.column("timestamp")
    n = table.num_rows
    if n == 0 or "batch_first_offset" not in table.column_names or PART not in table.column_names:
        return ts
    first = table.column("batch_first_offset")
    if first.null_count == n:
        return ts
    # a row without a batch keeps its own time; the others take their batch's newest
    at = np.flatnonzero(first.is_valid().to_numpy(zero_copy_only=False))
    key = pc.fill_null(table.column(PART), -1).to_numpy(zero_copy_only=False).astype(np.int64)[at] << 43
    key += first.to_numpy(zero_copy_only=False)[at] if not first.null_count else \
        pc.fill_null(first, 0).to_numpy(zero_copy_only=False)[at]
    none = np.iinfo(np.int64).min
    t = np.where(ts.is_valid().to_numpy(zero_copy_only=False),
                 pc.fill_null(ts, 0).to_numpy(zero_copy_only=False).astype(np.int64), none)
    if not np.all(key[1:] >= key[:-1]):  # rows in log order (`loadable`) hold each batch's rows together already
        order = np.argsort(key, kind="stable")
        at, key = at[order], key[order]
    new = np.ones(len(at), dtype=bool)
    new[1:] = key[1:] != key[:-1]
    starts = np.flatnonzero(new)
    newest = np.maximum.reduceat(t[at], starts)
    t[at] = np.repeat(newest, np.diff(np.append(starts, len(at))))
    return pa.array(t, pa.int64(), mask=t == none)


def batch_starts(table: pa.Table) -> np.ndarray:
    """The rows of `table` (in log order per offsets partition) that begin a log batch or a partition (a row without
    a batch is a batch of its own), and `table.num_rows` after them: where a window of whole batches may end."""
    n = table.num_rows
    p = pc.fill_null(table.column(PART), -1).to_numpy(zero_copy_only=False)
    first = table.column("batch_first_offset")
    b = np.where(first.is_valid().to_numpy(zero_copy_only=False),
                 pc.fill_null(first, -1).to_numpy(zero_copy_only=False), -2 - np.arange(n))
    return np.flatnonzero(np.r_[True, (p[1:] != p[:-1]) | (b[1:] != b[:-1]), True])


def batch_windows(table: pa.Table, rows: int) -> Iterator[tuple[int, int]]:
    """(start, end) of `table`'s windows (`loadable` rows: by partition, in log order) of `rows` rows or more, each
    within one partition and ending with a whole batch, as a task's windows do (`frames.segment_shards
    .decoded_windows`): `batch_times` and the cut read a batch in one window."""
    begins = batch_starts(table)
    p = table.column(PART).to_numpy(zero_copy_only=False)
    parts = np.flatnonzero(np.r_[True, p[1:] != p[:-1]]) if len(p) else np.empty(0, np.int64)
    for a, end in zip(parts.tolist(), np.r_[parts[1:], len(p)].tolist()):
        at = a
        while at < end:
            cut = min(int(begins[np.searchsorted(begins, min(at + max(1, rows), end))]), end)
            yield at, cut
            at = cut


def with_batch_times(table: pa.Table) -> pa.Table:
    """`table` (a shard's loadable rows) with `batch_timestamp`: each row's `batch_times`, the moment a reader of the
    coordinator first saw its record. The engine cuts by it (`until_cut`) and records it in both histories, so every
    view that stops at a moment reads the engine's answer (`kept_at` on that column) instead of finding the batches
    again."""
    if BATCH_TIME in table.column_names:
        return table
    return table.append_column(BATCH_TIME, batch_times(table))


MARKER_COLUMNS = (PART, "producer_id", "offset", "control_type")


def transaction_markers(table: pa.Table, options: ReplayOptions) -> pa.Table:
    """The end-transaction markers among decoded rows that the shards read at the run's cut (`until_cut`), as
    (offsets_partition, producer_id, offset, control_type): what a pending offset is checked against."""
    rows = table.select([*MARKER_COLUMNS, "timestamp"]).filter(is_control(table))
    return until_cut(rows, options).select(list(MARKER_COLUMNS))
