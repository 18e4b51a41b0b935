"""The rows an incremental run keeps: a subset of the replayed log that replays, together with ANY later records,
to the same coordinator state as the whole log would.

Kafka's own answer to "keep less log, same state" is compaction, but the cleaner is not state-preserving here
(a plain tombstone before a later COMMIT marker, KIP-848 records of replaced incarnations, topic names shared
across groups). This subset is derived from the replay's own rules instead, per offsets partition (`replay.py`,
`offsets.py`, `groups.py`, `consumer_groups.py`) and for the run's semantics; a later log can only add records
after every kept position. Kept, by (offsets_partition, offset):

Offset commits, per GroupTopicPartition:
* the last plain (non-transactional) row, the last plain value and the last tombstone of any kind: they fix
  `committed_offsets`' last plain event (legacy: `_t`; modern: `_t` and `_d`) and modern's purge of pending
  entries (`pending_offsets`), now and after any extension;
* the winner of `committed_offsets` (the installed offset, a plain value or a committed transactional entry):
  later records either beat it or remove every current candidate at once, so the losers are never needed;
* every transactional row whose transaction is still open: its pending map is resolved by a later marker;
* modern only, per group: the last offset-commit value (any producer), which decides whether a simple group
  exists after the group's last removal (`group_timeline`'s `ov_offset`);
* the end marker (`filter_end_markers`) of every kept transactional row, so it keeps its outcome.

Group records, per group:
* the last GroupMetadata (type 2) record, which replaces or removes whatever the id held before;
* every KIP-848 record from the live incarnation's boundary on (`kip_boundary`: that last type-2 record or a
  later ConsumerGroupMetadata tombstone), the records `filter_live_incarnation` reads; earlier ones belong to a
  removed or replaced group;
* per topic id, the ConsumerGroupPartitionMetadata (type 4) value that names it (`topic_names`: cluster-wide,
  the latest by log position wins).

Rows of any other kind (none today) are all kept. Error and unknown rows are never part of the state.

`tests/state/test_retained.py` checks the defining property against the sequential reference on generated logs
cut at every batch boundary, both semantics: replay(retained(prefix) ∪ rest) == replay(prefix ∪ rest).
"""
from __future__ import annotations

from functools import reduce

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from pipelines.state import groups as gr
from pipelines.state import offsets as off
from pipelines.state.options import ReplayOptions
from pipelines.state.replay import filter_replayable

PART = "offsets_partition"
POSITION = [PART, "offset"]
GROUP_KEY = [PART, "group_id"]
REPLAYED_KINDS = ("offset_commit", "group_metadata", "consumer_group", "control")


def retained_positions(rows: DataFrame, options: ReplayOptions, steps=None) -> DataFrame:
    """(offsets_partition, offset) of every row to keep, distinct. `rows`: the replayable rows (no error or
    unknown rows, no until bounds); `steps`: the replay's own `ReplaySteps` for these rows when at hand (cached
    while the replay's tables are materialized), else they are computed here the same way."""
    rows = filter_replayable(rows, options)
    offsets = off.offset_rows(rows, options)
    if steps is None:
        txn = off.txn_outcomes(offsets, off.filter_end_markers(rows, options))
        committed = off.committed_offsets(offsets, txn, options)
        group_rows = rows.filter(F.col("record_kind").isin("group_metadata", "consumer_group"))
        timeline = gr.group_timeline(group_rows, offsets, options)
    else:
        txn, committed, timeline = steps.txn, steps.committed, steps.timeline

    # offset commits: last plain row, last plain value, last tombstone per key
    per_key = offsets.groupBy(*off.GTP).agg(
        F.max(F.when(~F.col("is_txn"), F.col("offset"))).alias("_plain"),
        F.max(F.when(~F.col("is_txn") & ~F.col("is_tombstone"), F.col("offset"))).alias("_plain_value"),
        F.max(F.when(F.col("is_tombstone"), F.col("offset"))).alias("_tombstone"))
    kept = [
        per_key.select(PART, F.explode(F.array("_plain", "_plain_value", "_tombstone")).alias("offset")),
        committed.select(*POSITION),  # the installed offsets
        txn.filter(F.col("txn_outcome") == "pending").select(*POSITION),  # open transactions
    ]
    if options.is_modern:  # what makes a simple group: the group's last offset value
        kept.append(offsets.filter(~F.col("is_tombstone")).groupBy(*GROUP_KEY).agg(F.max("offset").alias("offset"))
                    .select(*POSITION))
    offset_pos = reduce(DataFrame.unionByName, kept).filter(F.col("offset").isNotNull()).distinct()
    markers = (offset_pos.join(txn.select(*POSITION, "marker_offset"), POSITION)
               .filter(F.col("marker_offset").isNotNull())
               .select(PART, F.col("marker_offset").alias("offset")))

    # group records: the last type-2 record; KIP-848 records from the live incarnation's boundary on
    bounds = timeline.select(*GROUP_KEY, "c_offset", "kip_boundary")
    group_pos = (
        rows.filter(F.col("record_kind").isin("group_metadata", "consumer_group"))
        .select(*GROUP_KEY, "offset", "record_kind")
        .join(bounds, GROUP_KEY)
        .filter(((F.col("record_kind") == "group_metadata") & (F.col("offset") == F.col("c_offset")))
                | ((F.col("record_kind") == "consumer_group") & (F.col("offset") >= F.col("kip_boundary"))))
        .select(*POSITION)
    )
    # per topic id, the type-4 value that names it (the latest by (offset, partition), as `topic_names`)
    namers = (
        rows.filter((F.col("record_kind") == "consumer_group") & (F.col("key_type") == 4) & ~F.col("is_tombstone"))
        .select(*POSITION, F.explode("topics_metadata").alias("t"))
        .groupBy(F.col("t.topic_id").alias("topic_id"))
        .agg(F.max_by(F.struct(*POSITION), F.struct("offset", PART)).alias("w"))
        .select(F.col(f"w.{PART}").alias(PART), F.col("w.offset").alias("offset"))
    )
    other = rows.filter(~F.col("record_kind").isin(*REPLAYED_KINDS)).select(*POSITION)
    return reduce(DataFrame.unionByName, [offset_pos, markers, group_pos, namers, other]).distinct()


def retained_rows(rows: DataFrame, positions: DataFrame) -> DataFrame:
    """The rows at `positions` (a record is identified by its offsets partition and offset)."""
    return rows.join(positions, POSITION, "left_semi")
