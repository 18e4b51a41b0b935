"""Replay a small log in one process, as Kafka's own loader does: the path of `rebuild --incremental` runs.

An incremental run replays the previous snapshot's state (`state.retained`: sized by the coordinator's state,
not the log) plus the new records, typically a few hundred thousand rows. On Spark that is ~100 small jobs whose
fixed cost dominates (the 10 M-record benchmark's state: 46 s of replay for 354k rows); in one process the
sequential loaders of `state.reference` (the line-by-line ports of `doLoadGroupsAndOffsets` and of the new
coordinator's replay, which the Spark replay is tested against table by table) replay the same rows in seconds.

Used when the rows to replay are at most ``rebuild.local_replay_max_rows`` (0 turns it off); the snapshot is the
one the Spark replay gives (tests/test_incremental.py compares an incremental run on this path with a full run on
Spark, table by table). The rows are held on the driver, so the setting bounds the driver's memory (about 1 GB per
million offset-commit rows as Python objects).

Also here: `retained_positions_local`, the sequential form of `retained.retained_positions` (same rules, read
off the loaders' end state), so the run's own state for the next incremental run is computed without Spark too.
"""
from __future__ import annotations

import contextlib
import datetime as dt
import gc
from collections import defaultdict
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from pipelines.state.options import ReplayOptions
from pipelines.state.reference import PartitionState, _is_first_record_of_batch, _pid, replay_reference
from schemas.decoded import DECODED_RECORD_SCHEMA

Row = dict[str, Any]
PART = "offsets_partition"

#: The columns the sequential loaders read of an offset-commit row (most of the log); other kinds keep all columns
#: but the raw bytes and provenance, which no loader reads.
OFFSET_ROW_COLUMNS = (PART, "offset", "record_kind", "key_type", "batch_first_offset", "timestamp", "producer_id",
                      "producer_epoch", "is_transactional", "is_tombstone", "group_id", "topic", "partition",
                      "committed_offset", "leader_epoch", "metadata", "commit_timestamp", "expire_timestamp",
                      "topic_id")
UNREAD_COLUMNS = ("key", "value", "source", "error", "batch_position", "codec", "magic", "timestamp_type")


def conform_decoded(table: pa.Table) -> pa.Table:
    """`table` with exactly the decoded schema's columns and types (Spark's Arrow and Parquet files differ in
    nullability and metadata only; state rows written before a column was added get it as nulls)."""
    columns = [table.column(f.name).cast(f.type) if f.name in table.column_names else pa.nulls(table.num_rows, f.type)
               for f in DECODED_RECORD_SCHEMA]
    return pa.table(columns, schema=DECODED_RECORD_SCHEMA)


def rows_in_log_order(table: pa.Table) -> list[Row]:
    """Decoded rows (no error/unknown rows) as dicts for the loaders, in log order within each offsets partition;
    offset commits projected to `OFFSET_ROW_COLUMNS`."""
    table = table.sort_by([(PART, "ascending"), ("offset", "ascending")])
    table = table.drop_columns([c for c in UNREAD_COLUMNS if c in table.column_names])
    is_offset = pc.equal(table.column("record_kind"), "offset_commit").to_pylist()
    offset_rows = iter(table.filter(pa.array(is_offset)).select(list(OFFSET_ROW_COLUMNS)).to_pylist())
    other_rows = iter(table.filter(pc.invert(pa.array(is_offset))).to_pylist())
    return [next(offset_rows) if o else next(other_rows) for o in is_offset]


# ---------------------------------------------------------------------------------------------------------------
# the retained rows, read off the loaders' end state (same rules as `retained.retained_positions`)
# ---------------------------------------------------------------------------------------------------------------
def _is_end_marker(row: Row, modern: bool) -> bool:
    """`offsets.filter_end_markers`: modern reads every control record, only COMMIT/ABORT end a transaction;
    legacy reads the first record of a control batch, any control type ends it."""
    if modern:
        return row.get("control_type") in ("COMMIT", "ABORT")
    return _is_first_record_of_batch(row)


def retained_positions_local(rows: list[Row], options: ReplayOptions,
                             states: dict[int, PartitionState]) -> set[tuple[int, int]]:
    """(offsets_partition, offset) of every row to keep: `retained.retained_positions`' rules, sequentially.
    `rows`: replayable rows in log order per partition; `states`: the loaders' end states for those rows."""
    modern = options.is_modern
    keep: set[tuple[int, int]] = set()
    # offset commits, per GroupTopicPartition: last plain row, last plain value, last tombstone
    plain: dict[tuple, int] = {}
    plain_value: dict[tuple, int] = {}
    tombstone: dict[tuple, int] = {}
    last_value_of_group: dict[tuple[int, str], int] = {}
    marker_of: dict[tuple[int, int], int] = {}  # transactional row -> its end marker's offset
    open_rows: dict[tuple[int, int], list[int]] = defaultdict(list)
    # group records
    last_type2: dict[tuple[int, str], int] = {}
    last_k3t: dict[tuple[int, str], int] = {}  # last ConsumerGroupMetadata tombstone after the last type-2 record
    kip_rows: dict[tuple[int, str], list[int]] = defaultdict(list)
    namer: dict[str, tuple[int, int]] = {}  # topic id -> (offset, partition) of the latest type-4 value naming it
    for r in rows:
        part, off, kind = r[PART], r["offset"], r["record_kind"]
        if kind == "offset_commit":
            gtp = (part, r["group_id"], r["topic"], r["partition"])
            pid = _pid(r)
            is_txn = pid != -1 if modern else bool(r.get("is_transactional"))
            if r["is_tombstone"]:
                tombstone[gtp] = off
            else:
                last_value_of_group[(part, r["group_id"])] = off
            if is_txn:
                open_rows[(part, pid)].append(off)
            else:
                plain[gtp] = off
                if not r["is_tombstone"]:
                    plain_value[gtp] = off
        elif kind == "control":
            if _is_end_marker(r, modern):
                for o in open_rows.pop((part, _pid(r)), ()):
                    marker_of[(part, o)] = off
        elif kind == "group_metadata":
            g = (part, r["group_id"])
            last_type2[g] = off
            last_k3t.pop(g, None)
        elif kind == "consumer_group":
            g = (part, r["group_id"])
            kip_rows[g].append(off)
            if r.get("key_type") == 3 and r["is_tombstone"]:
                last_k3t[g] = off
            if r.get("key_type") == 4 and not r["is_tombstone"]:
                for t in r.get("topics_metadata") or []:
                    tid = t["topic_id"]
                    if tid not in namer or namer[tid] < (off, part):
                        namer[tid] = (off, part)
        else:
            keep.add((part, off))  # any other kind: kept whole
    offset_pos = {(k[0], o) for d in (plain, plain_value, tombstone) for k, o in d.items()}
    for part, st in states.items():
        offset_pos.update((part, r["offset"]) for r in st.offsets.values())  # the installed offsets
    for (part, _pid_), offs in open_rows.items():  # transactions still open
        offset_pos.update((part, o) for o in offs)
    if modern:  # what makes a simple group: the group's last offset value
        offset_pos.update((g[0], o) for g, o in last_value_of_group.items())
    keep |= offset_pos
    keep.update((p, marker_of[(p, o)]) for p, o in offset_pos if (p, o) in marker_of)
    keep.update((g[0], o) for g, o in last_type2.items())
    for g, offs in kip_rows.items():
        boundary = last_k3t.get(g, last_type2.get(g, -1))
        keep.update((g[0], o) for o in offs if o >= boundary)
    keep.update((part, off) for off, part in namer.values())
    return keep


def select_positions(table: pa.Table, positions: set[tuple[int, int]]) -> pa.Table:
    """The rows of `table` at `positions`."""
    mask = [(p, o) in positions for p, o in zip(table.column(PART).to_pylist(), table.column("offset").to_pylist())]
    return table.filter(pa.array(mask, pa.bool_()))


# ---------------------------------------------------------------------------------------------------------------
# contract tables from the loaders' rows
# ---------------------------------------------------------------------------------------------------------------
def _timestamps(values: list) -> pa.Array:
    """Epoch ms (the loaders' representation) or datetimes -> UTC microsecond timestamps."""
    ms = [v if v is None or isinstance(v, int) else int(v.replace(tzinfo=v.tzinfo or dt.timezone.utc).timestamp()
                                                          * 1000) for v in values]
    return pa.array(ms, pa.int64()).cast(pa.timestamp("ms", tz="UTC")).cast(pa.timestamp("us", tz="UTC"))


def contract_table(rows: list[Row], table: str) -> pa.Table:
    """`rows` (the loaders' dicts) as an Arrow table of the contract's columns and types."""
    from pipelines.io.delta import arrow_schema
    from schemas.tables import TABLES

    schema = arrow_schema(TABLES[table])
    arrays = []
    for f in schema:
        values = [r.get(f.name) for r in rows]
        arrays.append(_timestamps(values) if pa.types.is_timestamp(f.type) else pa.array(values, f.type))
    return pa.Table.from_arrays(arrays, schema=schema)


@contextlib.contextmanager
def gc_paused():
    """Python's cyclic garbage collector off meanwhile. The loaders build a few million small objects that hold no
    cycles; each full collection walks every live object, and those collections took ~40 % of the replay (9.3 s
    against 5.3 s for the 10 M benchmark's state). Reference counting still frees everything; the collector is
    back on afterwards."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def replay_locally(table: pa.Table, options: ReplayOptions, expiry=None) -> tuple[dict[str, pa.Table], pa.Table]:
    """Replay the decoded rows `table` (no error/unknown rows) in this process: the snapshot tables (expiry applied
    with `expiry`, an `ExpiryOptions`, else empty expiry tables) and the rows to keep for the next run."""
    with gc_paused():
        return _replay_locally(table, options, expiry)


def _replay_locally(table: pa.Table, options: ReplayOptions, expiry) -> tuple[dict[str, pa.Table], pa.Table]:
    from pipelines.state.reference_expiry import reference_apply_expiry

    table = conform_decoded(table)
    rows = rows_in_log_order(table)
    states: dict[int, PartitionState] = {}
    tables = replay_reference(rows, options, states)
    keep = retained_positions_local(rows, options, states)
    del rows
    if expiry is not None:
        tables = reference_apply_expiry(tables, expiry)
    else:
        tables = {**tables, "expired_offsets": [], "expired_groups": []}
    return {t: contract_table(r, t) for t, r in tables.items()}, select_positions(table, keep)
