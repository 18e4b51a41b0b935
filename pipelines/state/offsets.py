"""Committed and pending offsets, set-based: transactions, markers and the last-writer rules of both coordinators.

Every step is keyed by (offsets_partition, producer_id) or (offsets_partition, GroupTopicPartition); nothing is
collected and the log is never walked row by row. `pipelines/state/reference.py` is the sequential oracle.
"""
from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from pipelines.state.options import ReplayOptions

PART = "offsets_partition"
GTP = [PART, "group_id", "topic", "partition"]  # GroupTopicPartition within one coordinator shard


def _pid() -> Column:
    return F.coalesce(F.col("producer_id"), F.lit(-1).cast("long"))


def with_txn_flag(offset_rows: DataFrame, options: ReplayOptions) -> DataFrame:
    """`is_txn`: legacy reads the batch's transactional bit (`batch.isTransactional`); the new coordinator treats
    any producerId != -1 as transactional (`OffsetMetadataManager.replay`, spec §5.5 #6)."""
    txn = (_pid() != -1) if options.is_modern else F.coalesce(F.col("is_transactional"), F.lit(False))
    return offset_rows.withColumn("pid", _pid()).withColumn("is_txn", txn)


def filter_end_markers(rows: DataFrame, options: ReplayOptions) -> DataFrame:
    """Control records that end a producer's transaction in this shard.

    Legacy (`doLoadGroupsAndOffsets`): only the first record of a control batch is read, and any control type
    drops the producer's pending offsets. Modern (`CoordinatorLoaderImpl`): every control record is read; only
    COMMIT and ABORT reach `replayEndTransactionMarker`, other types are ignored.
    """
    control = rows.filter(F.col("record_kind") == "control")
    if options.is_modern:
        control = control.filter(F.col("control_type").isin("COMMIT", "ABORT"))
    else:
        control = control.filter(F.col("offset") == F.coalesce(F.col("batch_first_offset"), F.col("offset")))
    return control.select(
        PART, _pid().alias("pid"), F.col("offset").alias("marker_offset"), F.col("control_type").alias("marker_type"))


def with_txn_outcome(offsets: DataFrame, markers: DataFrame) -> DataFrame:
    """Each transactional record's transaction = the first end marker of its producer at or after it in the same
    partition; `txn_outcome` committed / aborted / pending (no marker by the end of the log), null if not txn."""
    txn = offsets.filter("is_txn").withColumn("is_marker", F.lit(False))
    marks = markers.withColumn("is_marker", F.lit(True)).withColumn("offset", F.col("marker_offset")).drop(
        "marker_offset")
    both = txn.unionByName(marks, allowMissingColumns=True)
    # Ordered by log position: the producer's records between two markers form one pending map.
    upcoming = Window.partitionBy(PART, "pid").orderBy("offset").rowsBetween(Window.currentRow,
                                                                             Window.unboundedFollowing)
    txn = (
        both.withColumn("marker_offset", F.first(F.when(F.col("is_marker"), F.col("offset")), True).over(upcoming))
        .withColumn("marker_type", F.first(F.when(F.col("is_marker"), F.col("marker_type")), True).over(upcoming))
        .filter(~F.col("is_marker"))
        .drop("is_marker")
    )
    plain = offsets.filter(~F.col("is_txn")).withColumn("marker_offset", F.lit(None).cast("long")).withColumn(
        "marker_type", F.lit(None).cast("string"))
    outcome = (
        F.when(~F.col("is_txn"), F.lit(None).cast("string"))
        .when(F.col("marker_offset").isNull(), "pending")
        .when(F.col("marker_type") == "COMMIT", "committed")
        .otherwise("aborted")
    )
    return txn.unionByName(plain).withColumn("txn_outcome", outcome)


def with_appended_batch_offset(offsets: DataFrame) -> DataFrame:
    """The old loader's `appendedBatchOffset`: offset of the first record iterated in the batch (§5.1)."""
    return offsets.withColumn("abo", F.coalesce(F.col("batch_first_offset"), F.col("offset")))


def filter_last_in_transaction(txn_offsets: DataFrame, options: ReplayOptions) -> DataFrame:
    """The producer's pending map at its marker: per transaction and key the last record wins. Legacy: a txn
    tombstone removes the key from the pending map (so the last record must be a value). Modern: tombstones never
    enter a pending map (they purge it, handled by `filter_after_last_tombstone`), so the last value counts."""
    if options.is_modern:
        txn_offsets = txn_offsets.filter(~F.col("is_tombstone"))
    # Log position orders writes within one transaction: the later put overwrites the earlier one.
    latest = Window.partitionBy("pid", F.coalesce(F.col("marker_offset"), F.lit(-1)), *GTP).orderBy(
        F.col("offset").desc())
    return (
        txn_offsets.withColumn("_rn", F.row_number().over(latest))
        .filter((F.col("_rn") == 1) & ~F.col("is_tombstone"))
        .drop("_rn")
    )


def committed_offsets(offsets: DataFrame, options: ReplayOptions) -> DataFrame:
    """The main offsets map at the end of the log: one row per GroupTopicPartition.

    Legacy (`doLoadGroupsAndOffsets`): after the last plain event at T0 (a put or a removal), only COMMIT markers
    change the key; each installs its pending entry if the key is absent or the installed entry's batch is older.
    So candidates = the plain write at T0 ∪ committed entries whose marker comes after T0, and the greatest
    appendedBatchOffset wins (a plain tombstone then a later COMMIT resurrects, §5.5 #1).
    Modern (`OffsetMetadataManager`): any tombstone at D empties the key and purges every pending map; plain puts
    overwrite, COMMIT installs only a greater record offset. So candidates = plain values and committed entries
    with record offset > D, and the greatest record offset wins.
    """
    offsets = with_appended_batch_offset(offsets)
    entries = filter_last_in_transaction(offsets.filter("is_txn"), options)
    committed = entries.filter(F.col("txn_outcome") == "committed").withColumn("src", F.lit("txn"))
    plain = offsets.filter(~F.col("is_txn")).withColumn("src", F.lit("plain"))
    per_key = Window.partitionBy(*GTP)
    if options.is_modern:
        tombstones = offsets.filter("is_tombstone").withColumn("src", F.lit("tomb"))
        cands = plain.filter(~F.col("is_tombstone")).unionByName(committed).unionByName(tombstones)
        cands = cands.withColumn(
            "_last_delete", F.max(F.when(F.col("src") == "tomb", F.col("offset"))).over(per_key)
        ).filter((F.col("src") != "tomb") & (F.col("offset") > F.coalesce(F.col("_last_delete"), F.lit(-1))))
        rank = F.col("offset").desc()
    else:
        cands = plain.unionByName(committed)
        cands = cands.withColumn("_t0", F.max(F.when(F.col("src") == "plain", F.col("offset"))).over(per_key))
        cands = cands.filter(
            ((F.col("src") == "plain") & (F.col("offset") == F.col("_t0")) & ~F.col("is_tombstone"))
            | ((F.col("src") == "txn") & (F.col("marker_offset") > F.coalesce(F.col("_t0"), F.lit(-1))))
        )
        rank = F.col("abo").desc()
    # The later log position wins (old: batch first offset; new: record offset), never a commit timestamp.
    winner = Window.partitionBy(*GTP).orderBy(rank, F.col("offset").desc())
    return cands.withColumn("_rn", F.row_number().over(winner)).filter(F.col("_rn") == 1).drop("_rn")


def pending_offsets(offsets: DataFrame, options: ReplayOptions) -> DataFrame:
    """Open transactions at the end of the log (`pendingOffsets` / `pendingTransactionalOffsets`): per producer
    and key the last pending value; modern drops keys tombstoned after it (any producer's tombstone purges)."""
    entries = filter_last_in_transaction(offsets.filter("is_txn"), options).filter(
        F.col("txn_outcome") == "pending")
    if not options.is_modern:
        return entries
    deletes = offsets.filter("is_tombstone").groupBy(*GTP).agg(F.max("offset").alias("_last_delete"))
    return entries.join(deletes, GTP, "left").filter(
        F.col("offset") > F.coalesce(F.col("_last_delete"), F.lit(-1))).drop("_last_delete")
