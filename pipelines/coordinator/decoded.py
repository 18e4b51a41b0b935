"""Decoded rows as a shard loads them: the columns a loader reads, conformed to the decoded schema, in log order within
each `__consumer_offsets` partition, cut at the run's point in time (`--until-offset`, `--until-time`); the rows
among them that name topics and the end-transaction markers. Both the engine's entry point (`shard`) and the
streamed loader (`streamed`) read them through here.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipelines.coordinator.groups import MEMBER_BYTES
from pipelines.coordinator.loader import SKIPPED_KINDS, SparseRow
from pipelines.coordinator.offset_metadata import is_control
from pipelines.coordinator.options import ReplayOptions
from schemas.decoded import DECODED_RECORD_SCHEMA, KIND_OFFSET_COMMIT

PART = "offsets_partition"
#: Decoded columns no loader reads: not shipped to a shard.
UNREAD_COLUMNS = ("key", "value", "source", "error", "batch_position", "codec", "magic", "timestamp_type")
REPLAY_COLUMNS = tuple(f.name for f in DECODED_RECORD_SCHEMA if f.name not in UNREAD_COLUMNS)


def without_unread(table: pa.Table) -> pa.Table:
    """`table` without the `UNREAD_COLUMNS` it holds."""
    names = set(table.column_names)  # column_names builds a list on every access
    return table.drop_columns([c for c in UNREAD_COLUMNS if c in names])


def conform_decoded(table: pa.Table) -> pa.Table:
    """`table` with exactly the decoded schema's columns and types (Spark's Arrow and Parquet files differ in
    nullability and metadata only; missing columns — the unread ones, or columns added since a state was
    written — come as nulls)."""
    if table.schema.equals(DECODED_RECORD_SCHEMA):  # conformed already (a window of a conformed table)
        return table
    have = dict(zip(table.column_names, table.columns))
    columns = [pa.nulls(table.num_rows, f.type) if (c := have.get(f.name)) is None
               else c if c.type == f.type else c.cast(f.type) for f in DECODED_RECORD_SCHEMA]
    return pa.table(columns, schema=DECODED_RECORD_SCHEMA)


def loadable(table: pa.Table) -> pa.Table:
    """The rows a shard loads (no error/unknown rows), in log order within each offsets partition."""
    skipped = pc.fill_null(pc.is_in(table.column("record_kind"), pa.array(SKIPPED_KINDS)), False)
    if pc.any(skipped).as_py():  # a filter copies every column: only when there is something to drop
        table = table.filter(pc.invert(skipped))
    if _in_log_order(table):  # what a segment's decoder gives: a sort would only copy every column
        return table
    return table.sort_by([(PART, "ascending"), ("offset", "ascending")])


def _in_log_order(table: pa.Table) -> bool:
    part, offset = table.column(PART), table.column("offset")
    if part.null_count or offset.null_count:
        return False
    return in_log_order(part.to_numpy(), offset.to_numpy())


def in_log_order(parts: np.ndarray, offsets: np.ndarray) -> bool:
    """Rows (their offsets partitions and offsets) by partition, then offset: what a shard's decoder gives."""
    p, o = parts, offsets
    return bool(np.all((p[:-1] < p[1:]) | ((p[:-1] == p[1:]) & (o[:-1] <= o[1:]))))


def group_rows(table: pa.Table, keep: np.ndarray) -> list[SparseRow]:
    """The rows of `table` that `keep` selects (a mask: `reduction.loader_mask`) as the loaders read them, in order:
    each a `SparseRow` of the columns its kind of record fills (an offset value's: its kind and group id), a classic
    group's members without their raw bytes (`MEMBER_BYTES`)."""
    return _sparse_rows(without_unread(table), np.flatnonzero(keep))


def _sparse_rows(table: pa.Table, at: np.ndarray) -> list[SparseRow]:
    """`table`'s rows at `at` (row numbers, in order), each a `SparseRow` of the columns its kind of record (kind,
    key type, tombstone or value) fills anywhere among them; an offset commit's, of those the loaders read."""
    if not len(at):
        return []
    kinds = table.select(["record_kind", "key_type", "is_tombstone"]).take(pa.array(at))
    kind = pc.binary_join_element_wise(
        kinds.column("record_kind"), pc.cast(kinds.column("key_type"), pa.string()),
        pc.cast(kinds.column("is_tombstone"), pa.string()), "/", null_handling="replace", null_replacement="-")
    encoded = pc.dictionary_encode(kind).combine_chunks()
    codes = encoded.indices.to_numpy(zero_copy_only=False)
    # the rows of each kind side by side (one take, then slices: a filter per kind copies every column each time)
    order = np.argsort(codes, kind="stable")
    bounds = np.searchsorted(codes[order], np.arange(len(encoded.dictionary) + 1))
    by_kind = _without_member_bytes(table.take(pa.array(at[order])))
    labels = encoded.dictionary.to_pylist()
    # which columns each kind fills, and every column's Python values, each found once for all kinds: per kind
    # and column, a slice's null count and `to_pylist` cost more than the values they hand over
    names = by_kind.column_names
    filled = np.add.reduceat(np.stack([by_kind.column(c).is_valid().to_numpy(zero_copy_only=False) for c in names],
                                      axis=1), bounds[:-1], axis=0) > 0
    commits = np.array([label.startswith(KIND_OFFSET_COMMIT + "/") for label in labels])
    read = {"record_kind", "group_id"}
    wanted = filled[~commits].any(axis=0) | np.array([c in read for c in names]) & filled.any(axis=0)
    values = {c: by_kind.column(c).to_pylist() for c, w in zip(names, wanted.tolist()) if w}
    groups = []
    for code in range(len(labels)):
        a, b = int(bounds[code]), int(bounds[code + 1])
        cols = [c for c, f in zip(names, filled[code].tolist()) if f and (not commits[code] or c in read)]
        groups.append(iter([SparseRow(zip(cols, v)) for v in zip(*(values[c][a:b] for c in cols))]))
    return [next(groups[c]) for c in codes.tolist()]


def _without_member_bytes(table: pa.Table) -> pa.Table:
    """`table` with its classic members' `MEMBER_BYTES` left out: made Python objects, they would be two bytes
    objects per member that nothing reads."""
    if "members" not in table.column_names or not table.num_rows:
        return table
    lists = table.column("members").combine_chunks()
    members = lists.values
    kept = [i for i, f in enumerate(members.type) if f.name not in MEMBER_BYTES]
    fields = [members.type.field(i) for i in kept]
    members = pa.StructArray.from_arrays([members.field(i) for i in kept], fields=fields,
                                         mask=members.is_null() if members.null_count else None)
    lists = pa.ListArray.from_arrays(lists.offsets, members, type=pa.list_(pa.struct(fields)),
                                     mask=lists.is_null() if lists.null_count else None)
    return table.set_column(table.schema.get_field_index("members"), "members", lists)


NAMING_COLUMNS = ("record_kind", "key_type", "is_tombstone", "offset", PART, "topics_metadata")


def naming_rows(table: pa.Table, options: ReplayOptions | None = None) -> pa.Table:
    """The decoded rows of `table` that name topics (ConsumerGroupPartitionMetadata, type 4), at the run's cut
    (`until_cut`; all of them without `options`), in `NAMING_COLUMNS`: a few rows of any log."""
    kind = table.column("record_kind")
    mask = pc.fill_null(pc.and_(pc.equal(kind, "consumer_group"), pc.equal(table.column("key_type"), 4)), False)
    if not pc.any(mask).as_py():
        return table.select(list(NAMING_COLUMNS)).slice(0, 0)
    named = table.select([*NAMING_COLUMNS, "timestamp"]).filter(mask)
    if options is not None:
        named = until_cut(named, options)
    return named.select(list(NAMING_COLUMNS))


def until_cut(table: pa.Table, options: ReplayOptions) -> pa.Table:
    """The rows a shard loads at the run's point in time: offsets at or before `--until-offset`, records with no
    timestamp or one at or before `--until-time`."""
    keep = until_cut_mask(table, options)
    return table if keep is None else table.filter(keep)


def until_cut_mask(table: pa.Table, options: ReplayOptions) -> pa.ChunkedArray | None:
    """`until_cut`'s rows as a mask over `table` (which needs only `offset` and `timestamp`); None: no cut."""
    keep = None
    if options.until_offset is not None:
        keep = pc.less_equal(table.column("offset"), options.until_offset)
    if options.until_time_ms is not None:
        ts = table.column("timestamp")
        in_time = pc.or_kleene(pc.is_null(ts), pc.less_equal(ts, options.until_time_ms))
        keep = in_time if keep is None else pc.and_kleene(keep, in_time)
    return None if keep is None else pc.fill_null(keep, False)


MARKER_COLUMNS = (PART, "producer_id", "offset", "control_type")


def transaction_markers(table: pa.Table, options: ReplayOptions) -> pa.Table:
    """The end-transaction markers among decoded rows that the shards read at the run's cut (`until_cut`), as
    (offsets_partition, producer_id, offset, control_type): what a pending offset is checked against."""
    rows = table.select([*MARKER_COLUMNS, "timestamp"]).filter(is_control(table))
    return until_cut(rows, options).select(list(MARKER_COLUMNS))
