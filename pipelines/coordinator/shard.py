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

from pipelines.coordinator.decoded import PART, batch_windows, conform_loaded, loadable
from pipelines.coordinator.expiry import ExpiryOptions, cleanup_group_metadata
from pipelines.coordinator.options import DEFAULT_NUM_OFFSETS_PARTITIONS, REPLAY_TABLES, ReplayOptions
from pipelines.coordinator.saved import SavedShard, saved_shards
from pipelines.coordinator.streamed import WHOLE, LoadMode, StreamedShards
from pipelines.coordinator.tables import OFFSET_TABLES, contract_table, shard_rows, topic_names
from pipelines.heap import gc_paused
from schemas.decoded import DECODED_RECORD_SCHEMA

Row = dict[str, Any]
EXPIRY_TABLES = ("expired_offsets", "expired_groups")
COLUMN_TABLES = (*OFFSET_TABLES, "pending_offsets", "expired_offsets", "group_history")  # a shard's rows of these come as Arrow
SHARD_TABLES = REPLAY_TABLES + EXPIRY_TABLES


@dataclass
class ShardsResult:
    tables: dict[str, pa.Table]  # SHARD_TABLES, contract columns
    saved: dict[int, SavedShard] | None  # each shard as the next incremental run resumes it (None unless kept)
    markers: pa.Table  # the end-transaction markers read (`transaction_markers`), the resumed shards' too


def _num_partitions(options: ReplayOptions, top: int | None) -> int:
    """The offsets topic's partition count for the placement check: the option, else the highest partition seen
    + 1, at least Kafka's default."""
    return options.num_partitions or max(DEFAULT_NUM_OFFSETS_PARTITIONS, (top if top is not None else -1) + 1)


def replay_shards(table: pa.Table, options: ReplayOptions, expiry: ExpiryOptions | None = None,
                  names: dict[str, str] | None = None, keep: bool = False,
                  resume: Mapping[int, SavedShard] | None = None) -> ShardsResult:
    """Every offsets partition in `table` (decoded rows, any order, error/unknown rows allowed) loaded on its own,
    expired with `expiry` (None: the expiry tables stay empty), as the snapshot's tables. `names`: the run's topic
    id -> name map (None: read off `table` and `resume`, which then must hold every partition of the run).
    `keep`: also return each shard as the next incremental run resumes it; `resume`: the shards as the previous
    run saved them (`load_shards`)."""
    loaded = load_shards(table, options, keep=keep, resume=resume)
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


def load_shards(table: pa.Table, options: ReplayOptions, *, keep: bool = False,
                resume: Mapping[int, SavedShard] | None = None, mode: LoadMode = WHOLE,
                window_rows: int | None = None) -> LoadedShards:
    """Every offsets partition in `table` loaded on its own in log order, as `mode` says (`streamed.LoadMode`:
    `WHOLE`, the history has every offset commit; `WHOLE_STATE`, no history; `STATE_ONLY`, `table` holds rows cut
    and reduced already, `until_cut` and `reduction.state_only_mask`, in log order: a restore plan replaying a
    history it already has, on a few columns), each from its shard in `resume` where it has one (every partition of
    `resume` is loaded, new records or not; `resume` is consumed). Needs nothing from other partitions: a Spark task
    loads its partition as soon as it has decoded it. `keep`: each shard to save (`coordinator.saved`), which needs
    the history. The partitions are `streamed.StreamedShards`, the loader a task streaming its segments uses: the
    whole table is one window, or (`window_rows`) each partition is fed windows of that many rows, each to the end
    of its last batch (a task's windows hold whole batches: `frames.segment_shards.decoded_windows`), and the
    history comes back in record order per partition."""
    if keep and mode.history != "every":
        raise ValueError(f"a load that keeps {mode.history} history has no shard to save")
    shards = StreamedShards(options, resume, mode=mode)
    settled = []
    if window_rows is None:
        settled.append(shards.load(table, last=True))
    elif table.num_rows:
        table = loadable(conform_loaded(table), options.unknown_key_types, options.unknown_fields,
                         options.limited_value_versions)
        for at, end in batch_windows(table, window_rows):
            settled.append(shards.load(table.slice(at, end - at)))
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
    out = {t: engine_rows(r) if isinstance(r, pa.Table) else r for t, r in out.items()}
    out["offset_commits"] = engine_rows(loaded.history)
    return out


def engine_rows(table: pa.Table) -> list[Row]:
    """A flat contract table's rows with timestamps as epoch ms, as the engine's rows hold them."""
    for i, f in enumerate(table.schema):
        if pa.types.is_timestamp(f.type):
            table = table.set_column(i, f.name, table.column(i).cast(pa.timestamp("ms", tz="UTC")).cast(pa.int64()))
    return table.to_pylist()
