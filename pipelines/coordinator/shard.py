"""One coordinator shard, records in, the snapshot's rows out: the engine's single entry point.

`replay_shards` takes decoded rows (Arrow, `schemas/decoded.py`) of one or more `__consumer_offsets` partitions,
loads each partition on its own in log order (`streamed.StreamedShards`, the loader a task streaming its segments
uses too; `loader`: the old `doLoadGroupsAndOffsets` or the new coordinator's replay), applies one cleanup pass (`expiry`) to each loaded shard, and returns every table as Arrow in the
contract's columns, plus each shard as the next `--incremental` run resumes it (`saved`). A Spark task calls it for one
partition (`pipelines/frames/shards.py`); a small run, the tests and the benchmark call it in-process.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipelines.coordinator.expiry import ExpiryOptions, cleanup_group_metadata
from pipelines.coordinator.loader import SKIPPED_KINDS, SparseRow
from pipelines.coordinator.options import DEFAULT_NUM_OFFSETS_PARTITIONS, REPLAY_TABLES, ReplayOptions
from pipelines.coordinator.saved import SavedShard, saved_shards
from pipelines.coordinator.tables import OFFSET_TABLES, contract_table, shard_rows, topic_names
from pipelines.heap import gc_paused
from schemas.decoded import DECODED_RECORD_SCHEMA, KIND_OFFSET_COMMIT

Row = dict[str, Any]
PART = "offsets_partition"
EXPIRY_TABLES = ("expired_offsets", "expired_groups")
COLUMN_TABLES = (*OFFSET_TABLES, "pending_offsets", "expired_offsets", "group_history")  # a shard's rows of these come as Arrow
SHARD_TABLES = REPLAY_TABLES + EXPIRY_TABLES

#: Decoded columns no loader reads: not shipped to a shard.
UNREAD_COLUMNS = ("key", "value", "source", "error", "batch_position", "codec", "magic", "timestamp_type")
REPLAY_COLUMNS = tuple(f.name for f in DECODED_RECORD_SCHEMA if f.name not in UNREAD_COLUMNS)


def without_unread(table: pa.Table) -> pa.Table:
    """`table` without the `UNREAD_COLUMNS` it holds."""
    names = set(table.column_names)  # column_names builds a list on every access
    return table.drop_columns([c for c in UNREAD_COLUMNS if c in names])


@dataclass
class ShardsResult:
    tables: dict[str, pa.Table]  # SHARD_TABLES, contract columns
    saved: dict[int, SavedShard] | None  # each shard as the next incremental run resumes it (None unless kept)
    markers: pa.Table  # the end-transaction markers read (`transaction_markers`), the resumed shards' too


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
    p, o = part.to_numpy(), offset.to_numpy()
    return bool(np.all((p[:-1] < p[1:]) | ((p[:-1] == p[1:]) & (o[:-1] <= o[1:]))))


def group_rows(table: pa.Table, keep: np.ndarray) -> list[SparseRow]:
    """The rows of `table` that `keep` selects (a mask: `reduction.loader_mask`) as the loaders read them, in order:
    each a `SparseRow` of the columns its kind of record fills (an offset value's: its kind and group id)."""
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
    bounds = np.searchsorted(codes[order], np.arange(len(encoded.dictionary) + 1)).tolist()
    by_kind = table.take(pa.array(at[order]))
    groups = []
    for code, label in enumerate(encoded.dictionary.to_pylist()):
        sub = by_kind.slice(bounds[code], bounds[code + 1] - bounds[code])
        if label.startswith(KIND_OFFSET_COMMIT + "/"):
            sub = sub.select(["record_kind", "group_id"])
        filled = [c for c in sub.column_names if sub.column(c).null_count < sub.num_rows]
        values = [sub.column(c).to_pylist() for c in filled]
        groups.append(iter([SparseRow(zip(filled, v)) for v in zip(*values)]))
    return [next(groups[c]) for c in codes.tolist()]


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


def _num_partitions(options: ReplayOptions, top: int | None) -> int:
    """The offsets topic's partition count for the placement check: the option, else the highest partition seen
    + 1, at least Kafka's default."""
    return options.num_partitions or max(DEFAULT_NUM_OFFSETS_PARTITIONS, (top if top is not None else -1) + 1)


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
    from pipelines.coordinator.offset_metadata import is_control

    rows = table.select([*MARKER_COLUMNS, "timestamp"]).filter(is_control(table))
    return until_cut(rows, options).select(list(MARKER_COLUMNS))


def replay_shards(table: pa.Table, options: ReplayOptions, expiry: ExpiryOptions | None = None,
                  names: dict[str, str] | None = None, keep: bool = False,
                  resume: Mapping[int, SavedShard] | None = None) -> ShardsResult:
    """Every offsets partition in `table` (decoded rows, any order, error/unknown rows allowed) loaded on its own,
    expired with `expiry` (None: the expiry tables stay empty), as the snapshot's tables. `names`: the run's topic
    id -> name map (None: read off `table` and `resume`, which then must hold every partition of the run).
    `keep`: also return each shard as the next incremental run resumes it; `resume`: the shards as the previous
    run saved them (`load_shards`)."""
    loaded = load_shards(table, options, keep, resume)
    if names is None:
        names = topic_names(loaded.naming.to_pylist())
    tables = tabulate_shards(loaded.states, options, expiry, names)
    tables["offset_commits"] = loaded.history
    return ShardsResult(tables, loaded.saved, loaded.markers)


@dataclass
class LoadedShards:
    """What loading gives before the run-wide facts are known: each shard's state (`ShardState`, picklable), the
    history (every offset commit it loaded, with its outcome: a transaction's outcome is known once its shard is
    loaded; resumed, also the previous run's open transactions' records, decided or not), the end-transaction
    markers (`transaction_markers`, and the resumed shards'), the records naming topics (`naming_rows`, and the
    resumed shards' namers) and, when kept, each shard to save (`coordinator.saved`)."""

    states: list
    history: pa.Table
    markers: pa.Table
    naming: pa.Table
    saved: dict[int, SavedShard] | None


def load_shards(table: pa.Table, options: ReplayOptions, keep: bool = False,
                resume: Mapping[int, SavedShard] | None = None, history: bool = True,
                window_rows: int | None = None, relevant: bool = False) -> LoadedShards:
    """Every offsets partition in `table` loaded on its own in log order (the history has every offset commit),
    each from its shard in `resume` where it has one (every partition of `resume` is loaded, new records or not;
    `resume` is consumed). Needs nothing from other partitions: a Spark task loads its partition as soon as it has
    decoded it. `keep`: each shard to save (`coordinator.saved`). `relevant`: `table` holds rows cut and reduced
    already (`until_cut`, `reduction.state_only_mask`), in log order, and no history is kept (a restore plan
    replaying a history it already has, on a few columns). `history=False` alone: no history either. The partitions
    are `streamed.StreamedShards`, the loader a task streaming its segments uses: the whole table is one window, or
    (`window_rows`) each partition is fed windows of that many rows, as a task feeds it, and the history comes back
    in record order per partition."""
    from pipelines.coordinator.streamed import STATE_ONLY, WHOLE, LoadMode, StreamedShards

    if relevant and (history or keep):
        raise ValueError("a table of state-relevant rows has no history to write")
    mode = STATE_ONLY if relevant else WHOLE if history or keep else LoadMode(
        cut=True, state=True, history="none", group_events=False)
    shards = StreamedShards(options, resume, mode=mode)
    settled = []
    if window_rows is None:
        settled.append(shards.load(table, last=True))
    elif table.num_rows:
        table = loadable(conform_decoded(table))
        p = table.column(PART).to_numpy(zero_copy_only=False)
        starts = np.flatnonzero(np.r_[True, p[1:] != p[:-1]])  # `loadable`: sorted by partition
        for a, b in zip(starts, np.r_[starts[1:], len(p)]):
            for at in range(int(a), int(b), max(1, window_rows)):
                settled.append(shards.load(table.slice(at, min(window_rows, int(b) - at))))
    done = shards.finish()
    if mode.history == "none":
        history_rows = pa.table({})
    else:
        rows = [t for t in [*settled, done.pending] if t is not None and t.num_rows]
        history_rows = pa.concat_tables(rows) if len(rows) > 1 else rows[0] if rows else done.pending
        if window_rows is not None:
            history_rows = _in_record_order(history_rows)
    saved = saved_shards(done.states, history_rows, done.naming, done.markers) if keep else None
    return LoadedShards(done.states, history_rows, done.markers, done.naming, saved)


def _in_record_order(history: pa.Table) -> pa.Table:
    """`history` sorted by (offsets partition, record offset) unless it already is (a streamed shard hands back
    the rows of a transaction when its marker comes)."""
    if history.num_rows < 2:
        return history
    p = history.column(PART).to_numpy(zero_copy_only=False)
    o = history.column("record_offset").to_numpy(zero_copy_only=False)
    if bool(np.all((p[:-1] < p[1:]) | ((p[:-1] == p[1:]) & (o[:-1] <= o[1:])))):
        return history
    return history.sort_by([(PART, "ascending"), ("record_offset", "ascending")])


def tabulate_shards(states: Iterable, options: ReplayOptions, expiry: ExpiryOptions | None,
                    names: dict[str, str], top_partition: int | None = None) -> dict[str, pa.Table]:
    """The state tables (every `SHARD_TABLES` table but the history) of loaded shards, each expired with `expiry`:
    the part of a replay that needs the run-wide facts (the expiry clock, the topic names). `top_partition`: the
    run's highest offsets partition (default: the highest of `states`) for the placement check when `options`
    has no partition count."""
    rows = _tabulate(states, options, expiry, names, top_partition)
    # each table's engine rows dropped as it is converted: a big shard's rows and tables are not all held at once
    return {t: contract_table(rows.pop(t), t) for t in list(rows)}


def _tabulate(states, options, expiry, names, top_partition=None) -> dict[str, Any]:
    """`tabulate_shards`' tables: the engine's rows, and the `OFFSET_TABLES` and `expired_offsets` as Arrow."""
    states = list(states)
    if top_partition is None:
        top_partition = max((s.partition for s in states), default=None)
    n = _num_partitions(options, top_partition)
    out: dict[str, list] = {t: [] for t in SHARD_TABLES if t != "offset_commits"}
    with gc_paused():
        for state in states:
            tables = shard_rows(state, options, n, names)
            if expiry is not None:
                tables = cleanup_group_metadata(tables, expiry)
            for t, parts in out.items():
                got = tables.get(t, ())
                if isinstance(got, pa.Table):
                    parts.append(got)
                else:
                    parts.extend(got)
    return {t: pa.concat_tables(parts) if t in COLUMN_TABLES and parts else parts for t, parts in out.items()}


def replay_rows(rows: Iterable[Row], options: ReplayOptions, expiry: ExpiryOptions | None = None
                ) -> dict[str, list[Row]]:
    """`replay_shards` over decoded rows given as dicts (tests, small tools): the tables as lists of dicts, in the
    engine's representation (timestamps in epoch ms)."""
    table = pa.Table.from_pylist(list(rows), schema=DECODED_RECORD_SCHEMA)
    loaded = load_shards(table, options)
    out = _tabulate(loaded.states, options, expiry, topic_names(loaded.naming.to_pylist()))
    out = {t: _engine_rows(r) if isinstance(r, pa.Table) else r for t, r in out.items()}
    out["offset_commits"] = _engine_rows(loaded.history)
    return out


def _engine_rows(table: pa.Table) -> list[Row]:
    """A flat contract table's rows with timestamps as epoch ms, as the engine's rows hold them."""
    for i, f in enumerate(table.schema):
        if pa.types.is_timestamp(f.type):
            table = table.set_column(i, f.name, table.column(i).cast(pa.timestamp("ms", tz="UTC")).cast(pa.int64()))
    return table.to_pylist()
