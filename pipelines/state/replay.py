"""Replay decoded `__consumer_offsets` rows into the coordinator's collections, on Spark, set-based.

`replay(decoded, options)` is the distributed equivalent of `pipelines/state/reference.py` (the sequential port of
`doLoadGroupsAndOffsets` / the new coordinator's replay): every step is keyed by offsets partition and record key,
ordered by log position, and ends in a select of the contract's columns (`schemas/tables.py`).
"""
from __future__ import annotations

from typing import Callable, NamedTuple

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from pipelines.state import consumer_groups as cg
from pipelines.state import groups as gr
from pipelines.state import offsets as off
from pipelines.state.options import DEFAULT_NUM_OFFSETS_PARTITIONS, ReplayOptions
from schemas.tables import TABLES, columns

PART = "offsets_partition"
GROUP_KEY = [PART, "group_id"]


def filter_replayable(decoded: DataFrame, options: ReplayOptions) -> DataFrame:
    """Rows the loaders would read: no quarantined (error) or unknown-type rows (Kafka 3.4.1+/3.6+ skip unknown
    types), and only up to the point in time asked for (`until_offset` per partition, `until_time_ms`)."""
    rows = decoded.filter(~F.col("record_kind").isin("error", "unknown"))
    if options.until_offset is not None:
        rows = rows.filter(F.col("offset") <= F.lit(options.until_offset))
    if options.until_time_ms is not None:
        rows = rows.filter(F.col("timestamp").isNull() | (F.col("timestamp") <= F.lit(options.until_time_ms)))
    return rows


def java_hash_code(group_id: Column) -> Column:
    """`String.hashCode()` as a Spark expression: 31*h + c over UTF-16 code units, int32 wrap-around.

    The UTF-16BE hex is split into 4-digit code units outside the lambda, so each unit is converted once."""
    hx = F.hex(F.encode(group_id, "UTF-16BE"))
    units = F.filter(F.split(F.regexp_replace(hx, "(.{4})", "$1,"), ","), lambda u: F.length(u) == 4)
    h = F.aggregate(units, F.lit(0).cast("long"),
                    lambda acc, u: (acc * 31 + F.conv(u, 16, 10).cast("long")) % F.lit(1 << 32))
    return h - F.when(h >= F.lit(1 << 31), F.lit(1 << 32)).otherwise(F.lit(0))


def _utils_abs_mod(h: Column, num_partitions: Column) -> Column:
    return (F.when(h == F.lit(-(1 << 31)), F.lit(0)).otherwise(F.abs(h)) % num_partitions).cast("int")


def partition_for(group_id: Column, num_partitions: Column) -> Column:
    """`partitionFor`: Utils.abs(hashCode) % numPartitions (MIN_VALUE ⇒ 0, not `& 0x7fffffff`; spec §4)."""
    return _utils_abs_mod(java_hash_code(group_id), num_partitions)


def with_expected_offsets_partition(groups: DataFrame, decoded: DataFrame, options: ReplayOptions) -> DataFrame:
    """Adds `expected_offsets_partition` for the placement check; n = options.num_partitions, else the highest
    partition seen + 1, at least 50 (a one-row aggregate joined in, never collected)."""
    if options.num_partitions:
        n = groups.withColumn("_n", F.lit(options.num_partitions))
    else:
        top = decoded.agg(F.greatest(F.coalesce(F.max(PART) + 1, F.lit(0)),
                                     F.lit(DEFAULT_NUM_OFFSETS_PARTITIONS)).alias("_n"))
        n = groups.crossJoin(F.broadcast(top))
    # the hash is materialized once: `_utils_abs_mod` reads it three times
    return (n.withColumn("_h", java_hash_code(F.col("group_id")))
            .withColumn("expected_offsets_partition", _utils_abs_mod(F.col("_h"), F.col("_n"))).drop("_n", "_h"))


def misplaced_groups(loaded_groups: DataFrame) -> DataFrame:
    """Groups found in an offsets partition other than `partitionFor(group)`: Kafka loads them anyway (§4)."""
    return loaded_groups.filter(F.col("expected_offsets_partition") != F.col(PART))


def _contract(df: DataFrame, table: str, options: ReplayOptions) -> DataFrame:
    """The final select: exactly the contract's columns and types."""
    df = df.withColumn("snapshot_id", F.lit(options.snapshot_id))
    return df.select(*[F.col(f.name).cast(f.dataType).alias(f.name) for f in TABLES[table].fields])


def _ms(col: str) -> Column:
    return F.timestamp_millis(F.nullif(F.col(col), F.lit(-1)))


def _offset_columns(has_group: bool) -> list[Column]:
    return [
        "group_id", "topic", "partition", PART, "committed_offset",
        F.nullif(F.col("leader_epoch"), F.lit(-1)).alias("leader_epoch"), "metadata",
        F.timestamp_millis("commit_timestamp").alias("commit_timestamp"), _ms("expire_timestamp").alias(
            "expire_timestamp"),
        F.col("offset").alias("record_offset"), F.lit(has_group).alias("has_group_metadata"), "topic_id",
        F.col("pid").alias("producer_id"),
    ]


def replay(decoded: DataFrame, options: ReplayOptions) -> dict[str, DataFrame]:
    """The coordinator's state after loading the log: `loaded_offsets`, `empty_group_offsets`, `loaded_groups`,
    `group_members`, `removed_groups`, `pending_offsets`, `offset_commits`.

    legacy: `GroupMetadataManager.doLoadGroupsAndOffsets` (Kafka 0.11-3.9); modern: the new coordinator's
    `OffsetMetadataManager.replay/replayEndTransactionMarker` + `GroupMetadataManager.replay` (3.8+/4.x).
    """
    rows = filter_replayable(decoded, options)
    # Each record kind is cut down to what its steps read, once: offset commits (most of the log) to
    # `OFFSET_COLUMNS`; transactional records are the only offset rows that get sorted.
    offsets = off.offset_rows(rows, options)
    group_rows = rows.filter(F.col("record_kind").isin("group_metadata", "consumer_group"))
    txn = off.txn_outcomes(offsets, off.filter_end_markers(rows, options))
    history = off.with_txn_outcome(offsets, txn)
    committed = off.committed_offsets(offsets, txn, options)
    pending = off.pending_offsets(offsets, txn, options)
    timeline = gr.group_timeline(group_rows, offsets, options)

    # Offsets are split by the group their id holds at the end: a live group record ⇒ the group's offsets;
    # otherwise `emptyGroupOffsets` (modern: only while a simple group exists; a removed group hides them).
    state = timeline.select(*GROUP_KEY, "group_state")
    placed = committed.join(state, GROUP_KEY, "left")
    has_group = F.coalesce(F.col("group_state").isin(gr.CLASSIC, gr.CONSUMER), F.lit(False))
    loaded_offsets = placed.filter(has_group).select(*_offset_columns(True))
    empty = placed.filter(~has_group)
    if options.is_modern:
        empty = empty.filter(F.col("group_state") == gr.SIMPLE)
    empty_group_offsets = empty.select(*_offset_columns(False))

    classic, classic_members = gr.classic_groups(group_rows, timeline, options)
    consumer, consumer_members = cg.consumer_groups(group_rows, timeline)
    if options.is_modern:
        simple_ids = timeline.filter(F.col("group_state") == gr.SIMPLE).select(*GROUP_KEY)
    else:
        # old loader: a new Empty group per id in emptyGroupOffsets ∪ pendingEmptyGroupOffsets
        with_offsets = committed.select(*GROUP_KEY).unionByName(pending.select(*GROUP_KEY)).distinct()
        simple_ids = with_offsets.join(
            timeline.filter(F.col("group_state").isin(gr.CLASSIC, gr.CONSUMER)), GROUP_KEY, "left_anti")
    load_time = F.lit(options.load_time_ms).cast("long")
    simple = simple_ids.select(
        *GROUP_KEY, F.lit("classic").alias("group_type"), F.lit(None).cast("string").alias("protocol_type"),
        F.lit(0).alias("generation"), F.lit(None).cast("string").alias("protocol"),
        F.lit(None).cast("string").alias("leader"), F.lit("Empty").alias("state"),
        F.timestamp_millis(load_time).alias("current_state_timestamp"), F.lit(0).alias("member_count"),
        F.lit(None).cast("long").alias("record_offset"), F.lit(None).cast("int").alias("assignment_epoch"),
        F.array().cast("array<string>").alias("subscribed_topics"), F.lit(True).alias("is_simple"),
        F.lit(None).cast("int").alias("unresolved_topic_ids"),
    )
    groups = classic.unionByName(consumer).unionByName(simple)
    groups = with_expected_offsets_partition(groups, decoded, options)
    members = classic_members.unionByName(consumer_members, allowMissingColumns=True)

    pending_out = pending.select(
        F.col("pid").alias("producer_id"), "group_id", "topic", "partition", "committed_offset",
        F.col("offset").alias("record_offset"), PART, "producer_epoch",
        F.nullif(F.col("leader_epoch"), F.lit(-1)).alias("leader_epoch"), "metadata",
        F.timestamp_millis("commit_timestamp").alias("commit_timestamp"))
    commits = history.select(
        PART, F.col("offset").alias("record_offset"), "group_id", "topic", "partition", "committed_offset",
        F.timestamp_millis("commit_timestamp").alias("commit_timestamp"), "is_tombstone",
        F.col("pid").alias("producer_id"), "txn_outcome",
        F.nullif(F.col("leader_epoch"), F.lit(-1)).alias("leader_epoch"), "metadata",
        _ms("timestamp").alias("record_timestamp"))

    out = {
        "loaded_offsets": loaded_offsets,
        "empty_group_offsets": empty_group_offsets,
        "loaded_groups": groups,
        "group_members": members,
        "removed_groups": gr.removed_groups(timeline),
        "pending_offsets": pending_out,
        "offset_commits": commits,
    }
    result = {t: _contract(df, t, options) for t, df in out.items()}
    for t, df in result.items():
        assert df.columns == columns(t), t
    # Steps several tables read: computed once per table otherwise when tables are computed one job each.
    shared = ReplaySteps(txn, committed, pending, timeline)
    for df in result.values():
        df.__dict__[_SHARED_ATTR] = shared
    return result


_SHARED_ATTR = "_replay_shared"


class ReplaySteps(NamedTuple):
    """The intermediate steps `replay`'s tables share (and `retained.retained_positions` reads)."""

    txn: DataFrame  # transactional offset rows with their marker and outcome
    committed: DataFrame  # the installed offset per GroupTopicPartition (any group state)
    pending: DataFrame  # open transactional entries
    timeline: DataFrame  # per group: what the id holds at the end, and the positions that decide it


def replay_steps(tables: dict[str, DataFrame]) -> ReplaySteps | None:
    """The `ReplaySteps` behind tables `replay` returned (None for tables from elsewhere)."""
    for df in tables.values():
        steps = df.__dict__.get(_SHARED_ATTR)
        if steps is not None:
            return steps
    return None


def persist_shared(tables: dict[str, DataFrame]) -> Callable[[], None]:
    """Caches the intermediate steps `replay` output tables share (transaction outcomes, committed and pending
    offsets, the group timeline; all keyed and small next to the log), so computing the tables one job each
    (`accounting_frames.materialize`) computes them once. Call before any of the tables is computed (Spark picks
    up a cache when a query is first planned); returns the release hook that unpersists them. Tables that don't
    come from `replay` have nothing to share: the hook does nothing then.

    Nothing is cached by `replay` itself: one job over all tables (the tests' harness) reuses the shared
    exchanges anyway, and a cache nobody releases would outlive the replay."""
    shared: dict[int, DataFrame] = {}
    for df in tables.values():
        for s in df.__dict__.get(_SHARED_ATTR, ()):
            shared.setdefault(id(s), s)
    cached = [s.persist(StorageLevel.MEMORY_AND_DISK) for s in shared.values()]

    def release() -> None:
        for s in cached:
            s.unpersist()

    return release
