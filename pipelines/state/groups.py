"""Which group each id holds at the end of the log (classic, consumer, simple or none), and classic groups' rows.

Set-based form of `GroupMetadataManager.replay` over a group id's records, per (offsets_partition, group_id):
let c be the group's last GroupMetadata (type 2) record, which replaces or removes whatever group the id had.
* c is a value of a real classic group ⇒ classic (later KIP-848 records would be fatal in Kafka; skipped).
* otherwise look at the KIP-848 records after c: the last value or type-3 tombstone decides — a value ⇒ a consumer
  group whose incarnation starts at the first value after the last type-3 tombstone; a tombstone ⇒ removed.
* none of those and c is a simple-looking value ⇒ classic.
* modern only: an offset value after all that ⇒ a simple group (`OffsetMetadataManager.replay` creates one).
The rules are documented once in `pipelines/state/reference.py`.
"""
from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from pipelines.state.options import ReplayOptions

PART = "offsets_partition"
GROUP_KEY = [PART, "group_id"]

CLASSIC, CONSUMER, SIMPLE = "classic", "consumer", "simple"


def _is(kind: str) -> Column:
    return F.col("record_kind") == kind


def _simple_like() -> Column:
    """`ClassicGroup.isSimpleGroup`: no protocol type and no members (consumer records may replace it)."""
    return (F.coalesce(F.col("protocol_type"), F.lit("")) == "") & (F.coalesce(F.size("members"), F.lit(0)) <= 0)


def group_timeline(rows: DataFrame, offsets: DataFrame, options: ReplayOptions) -> DataFrame:
    """One row per (offsets_partition, group_id) with `group_state` (classic / consumer / simple / null) and the
    positions later steps need: `c_offset` (last type-2 record), `kip_after_c` (last KIP-848 record after it),
    `kip_boundary` (where the live consumer group's history may start), and the last type-2/3 record.

    `rows`: the GroupMetadata and KIP-848 records (a small part of the log); `offsets`: the offset-commit rows,
    which only count for modern semantics (an offset value creates a simple group), through one hash aggregate.
    Ids with offset commits only have no state under legacy semantics and are left out there."""
    ev = rows.filter(_is("group_metadata") | _is("consumer_group")).select(
        PART, "group_id", "offset", "timestamp", "record_kind", "key_type", "is_tombstone",
        (_is("group_metadata") & ~F.col("is_tombstone") & _simple_like()).alias("simple_like"))
    # Unordered window: the position of the group's last GroupMetadata record, which wipes everything before it.
    ev = ev.withColumn("c_offset", F.max(F.when(_is("group_metadata"), F.col("offset"))).over(
        Window.partitionBy(*GROUP_KEY)))
    after_c = F.col("offset") > F.coalesce(F.col("c_offset"), F.lit(-1))
    kv = _is("consumer_group") & ~F.col("is_tombstone")
    k3t = _is("consumer_group") & (F.col("key_type") == 3) & F.col("is_tombstone")
    k_event = after_c & (kv | k3t)
    g = ev.groupBy(*GROUP_KEY).agg(
        F.first("c_offset").alias("c_offset"),
        F.max_by(F.struct("is_tombstone", "simple_like"), F.when(_is("group_metadata"), F.col("offset"))).alias("c"),
        F.max(F.when(k_event, F.col("offset"))).alias("k_offset"),
        F.max_by(kv, F.when(k_event, F.col("offset"))).alias("k_is_value"),
        F.max(F.when(after_c & k3t, F.col("offset"))).alias("k3t_offset"),
        F.max(F.when(after_c & _is("consumer_group"), F.col("offset"))).alias("kip_after_c"),
        F.max_by(F.struct(F.col("offset").alias("tombstone_record_offset"), "is_tombstone",
                          F.col("timestamp").alias("tombstone_timestamp"), "key_type"),
                 F.when(_is("group_metadata") | (_is("consumer_group") & (F.col("key_type") == 3)),
                        F.col("offset"))).alias("last23"),
    )
    real_classic = F.col("c_offset").isNotNull() & ~F.col("c.is_tombstone") & ~F.col("c.simple_like")
    simple_classic = F.col("c_offset").isNotNull() & ~F.col("c.is_tombstone") & F.col("c.simple_like")
    state = (
        F.when(real_classic, F.lit(CLASSIC))
        .when(F.coalesce(F.col("k_is_value"), F.lit(False)), F.lit(CONSUMER))
        .when(F.col("k_offset").isNull() & simple_classic, F.lit(CLASSIC))
    )
    if options.is_modern:
        ov = offsets.filter(~F.col("is_tombstone")).groupBy(*GROUP_KEY).agg(F.max("offset").alias("ov_offset"))
        g = g.join(ov, GROUP_KEY, "full")
        last_removal = F.greatest(F.coalesce("c_offset", F.lit(-1)), F.coalesce("k_offset", F.lit(-1)))
        state = state.when(F.col("ov_offset") > last_removal, F.lit(SIMPLE))
    return g.select(
        *GROUP_KEY, state.alias("group_state"), "c_offset", "kip_after_c",
        F.greatest(F.coalesce("c_offset", F.lit(-1)), F.coalesce("k3t_offset", F.lit(-1))).alias("kip_boundary"),
        "last23",
    )


def removed_groups(timeline: DataFrame) -> DataFrame:
    """Ids whose latest GroupMetadata / ConsumerGroupMetadata record is a tombstone and that hold no live classic
    or consumer group (old loader's `removedGroups`; type 3 for KIP-848 groups)."""
    return timeline.filter(
        F.col("last23.is_tombstone") & ~F.coalesce(F.col("group_state").isin(CLASSIC, CONSUMER), F.lit(False))
    ).select(
        *GROUP_KEY, "last23.tombstone_record_offset",
        F.timestamp_millis(F.nullif(F.col("last23.tombstone_timestamp"), F.lit(-1))).alias("tombstone_timestamp"),
        F.when(F.col("last23.key_type") == 2, "classic").otherwise("consumer").alias("group_type"),
    )


def _flatten_topic_partitions(col: str) -> Column:
    return F.array_sort(F.flatten(F.transform(
        col, lambda tp: F.transform(tp["partitions"], lambda p: F.struct(tp["topic"].alias("topic"),
                                                                          p.alias("partition"))))))


def classic_groups(rows: DataFrame, timeline: DataFrame, options: ReplayOptions) -> tuple[DataFrame, DataFrame]:
    """Groups loaded from their last GroupMetadataValue and their members.

    `readGroupMessageValue` + `GroupMetadata.loadGroup` (legacy, 0.9-3.9) / `replay(GroupMetadataKey, …)` (modern):
    Empty if no members else Stable; protocolType "" ⇒ none; a null leader makes the first member leader;
    rebalance timeout = session timeout for v0 values (legacy) / a stored -1 (modern); subscribed topics per
    `computeSubscribedTopics` (consumer protocol only, unknown if a subscription is unreadable).
    """
    live = timeline.filter(F.col("group_state") == CLASSIC).select(*GROUP_KEY, F.col("c_offset").alias("offset"))
    g = rows.filter(_is("group_metadata")).join(live, [*GROUP_KEY, "offset"], "left_semi")
    members = F.coalesce(F.col("members"), F.array())
    g = g.withColumn("_members", members).withColumn(
        "_leader", F.coalesce(F.col("leader"), F.get(F.col("_members"), 0)["member_id"]))
    protocol_type = F.nullif(F.col("protocol_type"), F.lit(""))
    subs = F.col("_members.subscribed_topics")
    subscribed = (
        F.when(~protocol_type.eqNullSafe("consumer"), F.lit(None))
        .when(F.size("_members") == 0, F.array().cast("array<string>"))
        .when(F.col("protocol").isNull() | F.exists(subs, lambda s: s.isNull()), F.lit(None))
        .otherwise(F.array_sort(F.array_distinct(F.flatten(subs))))
    )
    groups = g.select(
        *GROUP_KEY, F.lit("classic").alias("group_type"), protocol_type.alias("protocol_type"), "generation",
        "protocol", F.col("_leader").alias("leader"),
        F.when(F.size("_members") > 0, "Stable").otherwise("Empty").alias("state"),
        F.timestamp_millis(F.nullif(F.col("current_state_timestamp"), F.lit(-1))).alias("current_state_timestamp"),
        F.size("_members").alias("member_count"), F.col("offset").alias("record_offset"),
        F.lit(None).cast("int").alias("assignment_epoch"), subscribed.alias("subscribed_topics"),
        F.lit(False).alias("is_simple"), F.lit(None).cast("int").alias("unresolved_topic_ids"),
    )
    m = g.select(*GROUP_KEY, "value_version", "_leader", F.explode("_members").alias("m"))
    stored = F.col("m.rebalance_timeout_ms")
    if options.is_modern:
        rebalance = F.when(stored.isNull() | (stored == -1), F.col("m.session_timeout_ms")).otherwise(stored)
    else:
        rebalance = F.when(stored.isNull() | (F.col("value_version") == 0), F.col("m.session_timeout_ms")).otherwise(
            stored)
    members_df = m.select(
        "group_id", F.col("m.member_id").alias("member_id"), "m.group_instance_id", "m.client_id", "m.client_host",
        "m.session_timeout_ms", rebalance.alias("rebalance_timeout_ms"), "m.subscribed_topics",
        _flatten_topic_partitions("m.assigned_partitions").alias("assigned_partitions"),
        F.lit("classic").alias("group_type"), PART, F.col("m.subscription_rack_id").alias("rack_id"),
        (F.col("m.member_id") == F.col("_leader")).alias("is_leader"),
    )
    return groups, members_df
