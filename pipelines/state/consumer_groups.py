"""KIP-848 consumer groups (record types 3-8, 16), set-based: the last record per key of the live incarnation.

Mirrors `GroupMetadataManager.replay` for ConsumerGroup* records (Kafka 3.7+, 4.x; spec §2.6, §2.9, §5.3) and
`ConsumerGroup.maybeUpdateGroupState`. Keyed by (offsets_partition, group_id[, member_id | regex]).
"""
from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from pipelines.state.groups import CONSUMER, GROUP_KEY, PART

MEMBER_KEY = [*GROUP_KEY, "member_id"]
MEMBER_STATES = {0: "STABLE", 1: "UNREVOKED_PARTITIONS", 2: "UNRELEASED_PARTITIONS", 127: "UNKNOWN"}


def _type(t: int) -> Column:
    return F.col("key_type") == t


def _value() -> Column:
    return ~F.col("is_tombstone")


def topic_names(rows: DataFrame) -> DataFrame:
    """One row holding `topic_names`: map topic id -> name from every ConsumerGroupPartitionMetadata (type 4) value
    of the input (topic ids are cluster-wide; the latest record by log position wins)."""
    t = rows.filter((F.col("record_kind") == "consumer_group") & _type(4) & _value()).select(
        "offset", PART, F.explode("topics_metadata").alias("t"))
    latest = t.groupBy(F.col("t.topic_id").alias("topic_id")).agg(
        F.max_by(F.col("t.topic_name"), F.struct("offset", PART)).alias("topic_name"))
    return latest.agg(F.map_from_entries(F.collect_list(F.struct("topic_id", "topic_name"))).alias("topic_names"))


def filter_live_incarnation(rows: DataFrame, timeline: DataFrame) -> DataFrame:
    """KIP-848 records of groups that end as consumer groups, from the first value after `kip_boundary` (the last
    GroupMetadata record or type-3 tombstone): records before it belong to a removed or replaced group, and
    tombstones before the group exists are ignored by Kafka (unknown group)."""
    live = timeline.filter(F.col("group_state") == CONSUMER).select(*GROUP_KEY, "kip_boundary", "kip_after_c")
    k = rows.filter(F.col("record_kind") == "consumer_group").join(live, GROUP_KEY)
    # Unordered window: the incarnation's first record, the first value after the boundary.
    start = F.min(F.when(_value() & (F.col("offset") > F.col("kip_boundary")), F.col("offset"))).over(
        Window.partitionBy(*GROUP_KEY))
    return k.withColumn("_start", start).filter(F.col("offset") >= F.col("_start")).drop("_start")


def _resolve(col: Column, names: Column) -> Column:
    """TopicIdPartitions -> sorted [(topic, partition)], topic ids resolved by name where known."""
    return F.array_sort(F.flatten(F.transform(
        F.coalesce(col, F.array()),
        lambda tp: F.transform(tp["partitions"], lambda p: F.struct(
            F.coalesce(F.try_element_at(names, tp["topic_id"]), tp["topic_id"]).alias("topic"),
            p.alias("partition"))))))


def _unresolved_ids(col: Column, names: Column) -> Column:
    return F.filter(F.transform(F.coalesce(col, F.array()), lambda tp: tp["topic_id"]),
                    lambda i: ~F.coalesce(F.map_contains_key(names, i), F.lit(False)))


def _member_state(code: Column) -> Column:
    expr = F.when(code.isNull(), F.lit(None).cast("string"))
    for k, name in MEMBER_STATES.items():
        expr = expr.when(code == k, name)
    return expr.otherwise(F.concat(F.lit("UNKNOWN("), code.cast("string"), F.lit(")")))


def consumer_members(k: DataFrame, names: DataFrame) -> DataFrame:
    """Members of the live incarnation: `replay(ConsumerGroupMemberMetadata…)` (5), `…CurrentMemberAssignment` (8),
    `…TargetAssignmentMember` (7). A type-5 tombstone deletes the member; a type-5 or type-8 value (re)creates it;
    a type-8 tombstone of an existing member sets both epochs to -1 and clears its partitions."""
    per_member = Window.partitionBy(*MEMBER_KEY)  # unordered: positions of the member's resets
    m = k.filter(_type(5) | _type(8))
    m = m.withColumn("_removed", F.max(F.when(_type(5) & F.col("is_tombstone"), F.col("offset"))).over(per_member))
    m = m.filter(F.col("offset") > F.coalesce(F.col("_removed"), F.lit(-1)))
    m = m.withColumn("_created", F.min(F.when(_value(), F.col("offset"))).over(per_member))
    effective8 = _type(8) & (_value() | (F.col("offset") > F.col("_created")))
    current = F.struct("is_tombstone", "member_epoch", "previous_member_epoch", "assigned_partitions",
                       "partitions_pending_revocation")
    fields = F.struct("group_instance_id", "client_id", "client_host", "session_timeout_ms",
                      "rebalance_timeout_ms", "subscribed_topics", "rack_id", "subscribed_topic_regex",
                      "server_assignor")
    members = m.groupBy(*MEMBER_KEY).agg(
        F.min("_created").alias("_created"),
        F.max_by(fields, F.when(_type(5), F.col("offset"))).alias("f"),
        F.max_by(current, F.when(effective8, F.col("offset"))).alias("cur"),
        F.max_by(F.col("member_state"), F.when(_type(8) & _value(), F.col("offset"))).alias("_state"),
    ).filter(F.col("_created").isNotNull())
    targets = k.filter(_type(7)).groupBy(*MEMBER_KEY).agg(
        F.max_by(F.struct("is_tombstone", "assigned_partitions"), F.col("offset")).alias("t"))
    cleared = F.coalesce(F.col("cur.is_tombstone"), F.lit(False))
    no_current = F.col("cur").isNull()
    mm = members.join(targets, MEMBER_KEY, "left").crossJoin(names)
    target = F.when(F.col("t").isNull() | F.col("t.is_tombstone"), F.lit(None)).otherwise(
        F.col("t.assigned_partitions"))
    assigned = F.when(no_current | cleared, F.array()).otherwise(F.col("cur.assigned_partitions"))
    revoking = F.when(no_current | cleared, F.array()).otherwise(F.col("cur.partitions_pending_revocation"))
    n = F.col("topic_names")
    return mm.select(
        *MEMBER_KEY, "f.*",
        F.when(no_current, 0).when(cleared, -1).otherwise(F.col("cur.member_epoch")).alias("member_epoch"),
        F.when(no_current, 0).when(cleared, -1).otherwise(F.col("cur.previous_member_epoch")).alias(
            "previous_member_epoch"),
        F.coalesce(F.col("_state"), F.lit(0)).alias("member_state_code"),
        _resolve(assigned, n).alias("assigned_partitions"),
        _resolve(revoking, n).alias("partitions_pending_revocation"),
        F.when(target.isNull(), F.lit(None)).otherwise(_resolve(target, n)).alias("target_partitions"),
        F.concat(_unresolved_ids(assigned, n), _unresolved_ids(revoking, n), _unresolved_ids(target, n)).alias(
            "_unresolved"),
    )


def consumer_groups(rows: DataFrame, timeline: DataFrame) -> tuple[DataFrame, DataFrame]:
    """Consumer groups and their members; state per `ConsumerGroup.maybeUpdateGroupState`: no members ⇒ Empty;
    groupEpoch > assignmentEpoch ⇒ Assigning; a member not STABLE at the assignment epoch ⇒ Reconciling;
    else Stable. Subscribed topics = members' topic names ∪ resolved regex topics."""
    k = filter_live_incarnation(rows, timeline)
    names = topic_names(rows)
    members = consumer_members(k, names)
    group_level = k.groupBy(*GROUP_KEY).agg(
        F.coalesce(F.max_by("group_epoch", F.when(_type(3), F.col("offset"))), F.lit(0)).alias("group_epoch"),
        F.coalesce(F.max_by(F.when(F.col("is_tombstone"), F.lit(-1)).otherwise(F.col("assignment_epoch")),
                            F.when(_type(6), F.col("offset"))), F.lit(0)).alias("assignment_epoch"),
        F.first("kip_after_c").alias("record_offset"),
    )
    regexes = k.filter(_type(16)).groupBy(*GROUP_KEY, "regex").agg(
        F.max_by(F.when(_value(), F.coalesce(F.col("regex_topics"), F.array())), F.col("offset")).alias("topics")
    ).groupBy(*GROUP_KEY).agg(F.flatten(F.collect_list("topics")).alias("regex_topics"))
    gm = members.join(group_level.select(*GROUP_KEY, "assignment_epoch"), GROUP_KEY)
    member_level = gm.groupBy(*GROUP_KEY).agg(
        F.count("*").cast("int").alias("member_count"),
        F.max(~((F.col("member_state_code") == 0) & (F.col("member_epoch") == F.col("assignment_epoch")))).alias(
            "_reconciling"),
        F.mode("server_assignor", deterministic=True).alias("protocol"),
        F.flatten(F.collect_list(F.coalesce(F.col("subscribed_topics"), F.array().cast("array<string>")))).alias(
            "_topics"),
        F.size(F.array_distinct(F.flatten(F.collect_list("_unresolved")))).alias("_unresolved"),
    )
    g = group_level.join(member_level, GROUP_KEY, "left").join(regexes, GROUP_KEY, "left")
    count = F.coalesce(F.col("member_count"), F.lit(0))
    state = (
        F.when(count == 0, "Empty")
        .when(F.col("group_epoch") > F.col("assignment_epoch"), "Assigning")
        .when(F.col("_reconciling"), "Reconciling")
        .otherwise("Stable")
    )
    topics = F.array_sort(F.array_distinct(F.concat(
        F.coalesce(F.col("_topics"), F.array().cast("array<string>")),
        F.coalesce(F.col("regex_topics"), F.array().cast("array<string>")))))
    groups = g.select(
        *GROUP_KEY, F.lit("consumer").alias("group_type"), F.lit("consumer").alias("protocol_type"),
        F.col("group_epoch").alias("generation"), "protocol", F.lit(None).cast("string").alias("leader"),
        state.alias("state"), F.lit(None).cast("timestamp").alias("current_state_timestamp"),
        count.cast("int").alias("member_count"), "record_offset", "assignment_epoch",
        topics.alias("subscribed_topics"), F.lit(False).alias("is_simple"),
        F.coalesce(F.col("_unresolved"), F.lit(0)).cast("int").alias("unresolved_topic_ids"),
    )
    members_df = members.select(
        "group_id", "member_id", "group_instance_id", "client_id", "client_host", "session_timeout_ms",
        "rebalance_timeout_ms", "subscribed_topics", "assigned_partitions", F.lit("consumer").alias("group_type"),
        PART, "rack_id", "subscribed_topic_regex", "server_assignor", "member_epoch", "previous_member_epoch",
        _member_state(F.col("member_state_code")).alias("member_state"), "target_partitions",
        "partitions_pending_revocation", F.lit(None).cast("boolean").alias("is_leader"),
    )
    return groups, members_df
