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


#: The columns of an offset-commit row any step (or output table) reads; decoded rows have ~63 (nested members
#: included), and offset commits are most of the log, so they are cut down to these before anything else.
OFFSET_COLUMNS = (PART, "offset", "batch_first_offset", "timestamp", "producer_id", "producer_epoch",
                  "is_transactional", "is_tombstone", "group_id", "topic", "partition", "committed_offset",
                  "leader_epoch", "metadata", "commit_timestamp", "expire_timestamp", "topic_id")


def offset_rows(rows: DataFrame, options: ReplayOptions) -> DataFrame:
    """The offset-commit rows, projected to `OFFSET_COLUMNS`, with `pid` and `is_txn` (`with_txn_flag`)."""
    return with_txn_flag(rows.filter(F.col("record_kind") == "offset_commit").select(*OFFSET_COLUMNS), options)


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


def _outcome() -> Column:
    return (
        F.when(~F.col("is_txn"), F.lit(None).cast("string"))
        .when(F.col("marker_offset").isNull(), "pending")
        .when(F.col("marker_type") == "COMMIT", "committed")
        .otherwise("aborted")
    )


def txn_outcomes(offsets: DataFrame, markers: DataFrame) -> DataFrame:
    """The transactional records only, each with its transaction = the first end marker of its producer at or after
    it in the same partition (`marker_offset`, `marker_type`); `txn_outcome` committed / aborted / pending (no marker
    by the end of the log). Transactional records are a small part of the log: only they are sorted."""
    txn = offsets.filter("is_txn").withColumn("is_marker", F.lit(False))
    marks = markers.withColumn("is_marker", F.lit(True)).withColumn("offset", F.col("marker_offset")).drop(
        "marker_offset")
    both = txn.unionByName(marks, allowMissingColumns=True)
    # Ordered by log position: the producer's records between two markers form one pending map.
    upcoming = Window.partitionBy(PART, "pid").orderBy("offset").rowsBetween(Window.currentRow,
                                                                             Window.unboundedFollowing)
    return (
        both.withColumn("marker_offset", F.first(F.when(F.col("is_marker"), F.col("offset")), True).over(upcoming))
        .withColumn("marker_type", F.first(F.when(F.col("is_marker"), F.col("marker_type")), True).over(upcoming))
        .filter(~F.col("is_marker"))
        .drop("is_marker")
        .withColumn("txn_outcome", _outcome())
    )


def _as_plain(offsets: DataFrame) -> DataFrame:
    """Non-transactional rows in `txn_outcomes`' shape: no marker, no outcome."""
    return (offsets.withColumn("marker_offset", F.lit(None).cast("long"))
            .withColumn("marker_type", F.lit(None).cast("string"))
            .withColumn("txn_outcome", F.lit(None).cast("string")))


def with_txn_outcome(offsets: DataFrame, txn: DataFrame) -> DataFrame:
    """Every offset-commit row with `marker_offset`, `marker_type`, `txn_outcome` (null if not transactional):
    `txn_outcomes` for the transactional rows, the plain rows as they are (no shuffle)."""
    return txn.unionByName(_as_plain(offsets.filter(~F.col("is_txn"))))


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


def committed_offsets(offsets: DataFrame, txn: DataFrame, options: ReplayOptions) -> DataFrame:
    """The main offsets map at the end of the log: one row per GroupTopicPartition.

    Legacy (`doLoadGroupsAndOffsets`): after the last plain event at T0 (a put or a removal), only COMMIT markers
    change the key; each installs its pending entry if the key is absent or the installed entry's batch is older.
    So candidates = the plain write at T0 ∪ committed entries whose marker comes after T0, and the greatest
    appendedBatchOffset wins (a plain tombstone then a later COMMIT resurrects, §5.5 #1).
    Modern (`OffsetMetadataManager`): any tombstone at D empties the key and purges every pending map; plain puts
    overwrite, COMMIT installs only a greater record offset. So candidates = plain values and committed entries
    with record offset > D, and the greatest record offset wins.

    Set-based without sorting the log: per key, one hash aggregate finds the last plain event (and, modern, the last
    tombstone) by position; the plain row there is fetched by (offsets_partition, offset), which identifies a record
    (the decoder keeps one row per partition offset), through a broadcast semi join. Only the few candidates per key
    (that row and the committed transactional entries) are then ranked.
    """
    entries = filter_last_in_transaction(txn, options)
    committed = with_appended_batch_offset(entries.filter(F.col("txn_outcome") == "committed"))
    if options.is_modern:
        per_key = offsets.groupBy(*GTP).agg(
            F.max(F.when(~F.col("is_txn") & ~F.col("is_tombstone"), F.col("offset"))).alias("_t"),
            F.max(F.when(F.col("is_tombstone"), F.col("offset"))).alias("_d"))
        last = F.coalesce(F.col("_d"), F.lit(-1))
        plain_at = per_key.filter(F.col("_t") > last).select(PART, F.col("_t").alias("offset"))
        cands = committed.join(per_key.select(*GTP, "_d"), GTP, "left").filter(F.col("offset") > last).drop("_d")
        rank = F.col("offset").desc()
    else:
        per_key = offsets.filter(~F.col("is_txn")).groupBy(*GTP).agg(F.max("offset").alias("_t"))
        plain_at = per_key.select(PART, F.col("_t").alias("offset"))
        cands = committed.join(per_key, GTP, "left").filter(
            F.col("marker_offset") > F.coalesce(F.col("_t"), F.lit(-1))).drop("_t")
        rank = F.col("abo").desc()
    # the last plain record per key (a value: a plain tombstone leaves only later committed entries)
    plain = offsets.filter(~F.col("is_txn") & ~F.col("is_tombstone")).join(
        F.broadcast(plain_at), [PART, "offset"], "left_semi")
    plain = with_appended_batch_offset(_as_plain(plain))
    cands = plain.unionByName(cands)
    # The later log position wins (old: batch first offset; new: record offset), never a commit timestamp.
    winner = Window.partitionBy(*GTP).orderBy(rank, F.col("offset").desc())
    return cands.withColumn("_rn", F.row_number().over(winner)).filter(F.col("_rn") == 1).drop("_rn")


def pending_offsets(offsets: DataFrame, txn: DataFrame, options: ReplayOptions) -> DataFrame:
    """Open transactions at the end of the log (`pendingOffsets` / `pendingTransactionalOffsets`): per producer
    and key the last pending value; modern drops keys tombstoned after it (any producer's tombstone purges)."""
    entries = filter_last_in_transaction(txn, options).filter(
        F.col("txn_outcome") == "pending")
    if not options.is_modern:
        return entries
    deletes = offsets.filter("is_tombstone").groupBy(*GTP).agg(F.max("offset").alias("_last_delete"))
    return entries.join(deletes, GTP, "left").filter(
        F.col("offset") > F.coalesce(F.col("_last_delete"), F.lit(-1))).drop("_last_delete")
