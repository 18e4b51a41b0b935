"""Retention expiry and group cleanup at a chosen time `as_of`: replayed tables in, tables after one cleanup pass out.

Mirrors one run of the coordinator's periodic cleanup (spec §6): the old coordinator's
`GroupMetadataManager.cleanupGroupMetadata` + `GroupMetadata.removeExpiredOffsets` (0.9–2.0 rule, KIP-211 rule of
2.1+, KIP-496 subscription rule of 2.4+, KAFKA-13636 "Stable only" of 2.8.2/3.0.1/3.1.1/3.2.0+), and the new
coordinator's `GroupCoordinatorShard.cleanupGroupMetadata` → `OffsetMetadataManager.cleanupExpiredOffsets` →
`GroupMetadataManager.maybeDeleteGroup` (3.7+/4.x). `reference_expiry.py` is the sequential twin of this module.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import reduce

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, IntegerType, StringType, TimestampType

from schemas.tables import columns

SEMANTICS = ("legacy", "modern")

# expiry_rule values: which Kafka rule removed the offset.
RULE_EMPTY_STATE_TS = "empty_group_state_timestamp"  # classic group with a protocol, Empty: since it became Empty
RULE_EMPTY_COMMIT_TS = "empty_group_commit_timestamp"  # same, GroupMetadata without currentStateTimestamp
RULE_SIMPLE = "simple_group_commit_timestamp"  # no protocol type (simple / orphan offsets)
RULE_STABLE_UNSUBSCRIBED = "stable_unsubscribed_topic"  # classic `consumer` group, Stable, topic not subscribed
RULE_CONSUMER_UNSUBSCRIBED = "consumer_group_unsubscribed_topic"  # KIP-848 group, topic outside every subscription
RULE_STREAMS_EMPTY = "streams_group_commit_timestamp"  # KIP-1071 streams group while Empty
RULE_EXPLICIT = "explicit_expire_timestamp"  # OffsetCommitValue v1 expireTimestamp (2.1+: now >= expire)
RULE_PRE_2_1 = "pre_2_1_expire_timestamp"  # 0.9–2.0: expireTimestamp (or commit + retention) < now

# expired_groups.reason values.
REASON_ALL_EXPIRED = "all offsets expired"
REASON_NO_OFFSETS = "empty with no offsets"

# How a group is seen by the emulated coordinator (internal `_kind` column).
KIND_CLASSIC = "classic"
KIND_CONSUMER = "consumer"
KIND_STREAMS = "streams"
KIND_SHARE = "share"
KIND_FOREIGN = "foreign"  # legacy: a KIP-848/share/streams group the old coordinator never built (it skips those keys)
KIND_HIDDEN = "hidden"  # modern: offsets whose group was tombstoned — invisible, never expired (spec §5.5 #4)

_VERSION_RE = re.compile(r"^\s*(\d+)\.(\d+)(?:\.(\d+))?")


def parse_kafka_version(version: str) -> tuple[int, int, int]:
    """'3.9' → (3, 9, 0), '2.8.2' → (2, 8, 2); suffixes such as '-rc3' or '-IV1' are ignored."""
    m = _VERSION_RE.match(str(version))
    if not m:
        raise ValueError(f"kafka_version {version!r} is not of the form MAJOR.MINOR[.PATCH]")
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


@dataclass(frozen=True)
class ExpiryOptions:
    """One cleanup pass: `as_of_ms` is the pass's clock, `retention_minutes` is `offsets.retention.minutes`.

    `semantics` picks the coordinator generation (`legacy` old `GroupMetadataManager`, `modern` the new group
    coordinator); `kafka_version` refines the legacy rules (below 2.1: pre-KIP-211; 2.1–2.3: no subscription rule;
    2.4–2.8.1, 3.0.0, 3.1.0: subscription rule in any non-Empty state, KAFKA-13636 not yet fixed).
    """

    as_of_ms: int
    retention_minutes: int = 10080
    semantics: str = "legacy"
    kafka_version: str = "3.9"

    def __post_init__(self) -> None:
        if self.semantics not in SEMANTICS:
            raise ValueError(f"semantics must be one of {SEMANTICS}, not {self.semantics!r}")
        if int(self.retention_minutes) < 1:
            raise ValueError("retention_minutes must be at least 1 (offsets.retention.minutes atLeast(1))")
        parse_kafka_version(self.kafka_version)

    @property
    def retention_ms(self) -> int:
        return int(self.retention_minutes) * 60_000

    @property
    def version(self) -> tuple[int, int, int]:
        return parse_kafka_version(self.kafka_version)

    @property
    def modern(self) -> bool:
        return self.semantics == "modern"

    @property
    def pre_kip211(self) -> bool:
        """Old coordinator before 2.1: every offset expires at expireTimestamp (or commit + retention) < now."""
        return not self.modern and self.version < (2, 1, 0)

    @property
    def subscription_rule(self) -> bool:
        """KIP-496 (2.4+): Stable `consumer` groups expire offsets of topics nobody subscribes to."""
        return self.modern or self.version >= (2, 4, 0)

    @property
    def stable_only(self) -> bool:
        """KAFKA-13636: the subscription rule applies in Stable only (else in every non-Empty state)."""
        if self.modern:
            return True
        v = self.version
        return not ((2, 4, 0) <= v < (2, 8, 2) or v == (3, 0, 0) or v == (3, 1, 0))


def _is_true(c: Column) -> Column:
    return F.coalesce(c, F.lit(False))


def with_group_kind(groups: DataFrame, options: ExpiryOptions) -> DataFrame:
    """Adds `_kind`: the group as the emulated coordinator holds it (legacy never built non-classic groups)."""
    gt = F.coalesce(F.col("group_type"), F.lit(KIND_CLASSIC))
    if options.modern:
        kind = F.when(gt.isin(KIND_CLASSIC, KIND_CONSUMER, KIND_STREAMS, KIND_SHARE), gt).otherwise(F.lit(KIND_SHARE))
    else:
        kind = F.when(gt == KIND_CLASSIC, F.lit(KIND_CLASSIC)).otherwise(F.lit(KIND_FOREIGN))
    return groups.withColumn("_kind", kind)


def _group_view(tables: dict[str, DataFrame], options: ExpiryOptions) -> DataFrame:
    """Every group the coordinator would hold, one row per group_id, with what the expiry rules read.

    Groups without a group record (offsets only) are synthesized as Kafka does at load: Empty, no protocol type,
    generation 0 (old: `doLoadGroupsAndOffsets`; new: `OffsetMetadataManager.replay` creating a simple group).
    The new coordinator does not re-create a group for `loaded_offsets` whose group record was tombstoned.
    """
    groups = tables["loaded_groups"]
    members = tables["group_members"]
    # A KIP-848 group's subscription is the union over its members (plus resolved regexes, which the replay folds
    # into loaded_groups.subscribed_topics); fall back to the members' lists when the group row has none.
    member_subs = (
        members.filter(F.col("subscribed_topics").isNotNull())
        .groupBy("group_id")
        .agg(F.array_distinct(F.flatten(F.collect_list("subscribed_topics"))).alias("_member_subscribed"))
    )
    real = (
        groups.join(member_subs, "group_id", "left")
        .withColumn(
            "_subscribed",
            F.when(
                F.col("group_type") == KIND_CONSUMER,
                F.coalesce(F.col("subscribed_topics"), F.col("_member_subscribed"), F.array().cast("array<string>")),
            ).otherwise(F.col("subscribed_topics")),
        )
        .select(
            "snapshot_id", "group_id", "offsets_partition", "group_type", "protocol_type", "generation", "state",
            "current_state_timestamp", "member_count", "_subscribed", F.lit(False).alias("_synthetic"),
        )
    )
    orphan_sources = [tables["empty_group_offsets"]]
    if not options.modern:
        orphan_sources.append(tables["loaded_offsets"])
    orphans = reduce(
        DataFrame.unionByName, [o.select("snapshot_id", "group_id", "offsets_partition") for o in orphan_sources]
    )
    synthetic = (
        orphans.join(groups.select("group_id"), "group_id", "left_anti")
        .groupBy("group_id")
        .agg(F.min("snapshot_id").alias("snapshot_id"), F.min("offsets_partition").alias("offsets_partition"))
        .select(
            "snapshot_id", "group_id", "offsets_partition",
            F.lit(KIND_CLASSIC).alias("group_type"),
            F.lit(None).cast(StringType()).alias("protocol_type"),
            F.lit(0).cast(IntegerType()).alias("generation"),
            F.lit("Empty").alias("state"),
            F.lit(None).cast(TimestampType()).alias("current_state_timestamp"),
            F.lit(0).cast(IntegerType()).alias("member_count"),
            F.lit(None).cast(ArrayType(StringType())).alias("_subscribed"),
            F.lit(True).alias("_synthetic"),
        )
    )
    return with_group_kind(real.unionByName(synthetic), options)


def _expiry_condition(options: ExpiryOptions) -> tuple[Column, Column, Column]:
    """(rule, base timestamp, topic-is-subscribed) of the group's expiration condition; rule null = none.

    Old: the `protocolType match` of `GroupMetadata.removeExpiredOffsets`; new: `ClassicGroup`/`ConsumerGroup`/
    `StreamsGroup.offsetExpirationCondition` + `isSubscribedToTopic`. Order matters: an Empty classic group with a
    protocol uses its "became Empty" time before anything else is considered.
    """
    kind = F.col("_kind")
    state = F.col("state")
    ptype = F.col("protocol_type")
    has_protocol = ptype.isNotNull() & (ptype != "")
    subscribed = F.col("_subscribed")
    commit = F.col("commit_timestamp")
    cst = F.col("current_state_timestamp")
    in_subscription = _is_true(F.array_contains(subscribed, F.col("topic")))

    classic = kind == KIND_CLASSIC
    empty_with_protocol = classic & has_protocol & (state == "Empty")
    stable_state = (state == "Stable") if options.stable_only else (_is_true(state != "Empty"))
    stable_sub = classic & (ptype == "consumer") & subscribed.isNotNull() & stable_state
    if not options.subscription_rule:
        stable_sub = F.lit(False)
    simple = (classic & ~has_protocol) | (kind == KIND_FOREIGN)
    consumer = F.lit(options.modern) & (kind == KIND_CONSUMER)
    streams_empty = F.lit(options.modern) & (kind == KIND_STREAMS) & (state == "Empty")

    rule = (
        F.when(empty_with_protocol & cst.isNotNull(), F.lit(RULE_EMPTY_STATE_TS))
        .when(empty_with_protocol, F.lit(RULE_EMPTY_COMMIT_TS))
        .when(stable_sub, F.lit(RULE_STABLE_UNSUBSCRIBED))
        .when(simple, F.lit(RULE_SIMPLE))
        .when(consumer, F.lit(RULE_CONSUMER_UNSUBSCRIBED))
        .when(streams_empty, F.lit(RULE_STREAMS_EMPTY))
    )
    base = F.when(F.col("_rule0") == RULE_EMPTY_STATE_TS, cst).otherwise(commit)
    is_subscribed = (
        F.when(F.col("_rule0") == RULE_STABLE_UNSUBSCRIBED, in_subscription)
        .when(F.col("_rule0") == RULE_CONSUMER_UNSUBSCRIBED, in_subscription)
        .otherwise(F.lit(False))
    )
    return rule, base, is_subscribed


def with_expiry_decision(offsets: DataFrame, options: ExpiryOptions) -> DataFrame:
    """Adds `_expired`, `expiry_rule`, `expiry_base_timestamp` to offsets joined with their group and `_pending`.

    `expiry_base_timestamp` is the instant the rule measures from (deadline = base + retention); for an explicit
    v1 expireTimestamp it is that expireTimestamp itself (the deadline).
    """
    now = F.lit(int(options.as_of_ms)).cast("long")
    retention = F.lit(options.retention_ms).cast("long")
    expire = F.col("expire_timestamp")
    commit = F.col("commit_timestamp")
    in_cache = F.col("_kind").isNotNull() & (F.col("_kind") != KIND_HIDDEN)

    if options.pre_kip211:
        # 0.9–2.0: at load an unset expireTimestamp becomes commit + retention; strictly-before `now` expires,
        # whatever the group's state (GroupMetadata.removeExpiredOffsets [A:1.1.1]).
        deadline = F.coalesce(F.unix_millis(expire), F.unix_millis(commit) + retention)
        return (
            offsets.withColumn("expiry_rule", F.when(in_cache, F.lit(RULE_PRE_2_1)))
            .withColumn("expiry_base_timestamp", F.coalesce(expire, commit))
            .withColumn("_expired", _is_true(in_cache & (deadline < now)))
        )

    rule, base, is_subscribed = _expiry_condition(options)
    with_rule = offsets.withColumn("_rule0", F.when(in_cache, rule))
    explicit = expire.isNotNull() & F.col("_rule0").isNotNull()
    met = F.when(explicit, now >= F.unix_millis(expire)).otherwise(now - F.unix_millis(F.col("_base0")) >= retention)
    expired = F.col("_rule0").isNotNull() & ~F.col("_subscribed0") & met
    if options.modern:
        # OffsetMetadataManager.cleanupExpiredOffsets: never while a transactional offset is pending there.
        expired = expired & ~_is_true(F.col("_pending"))
    return (
        with_rule.withColumn("_base0", base)
        .withColumn("_subscribed0", is_subscribed)
        .withColumn("_expired", _is_true(expired))
        .withColumn("expiry_rule", F.when(explicit, F.lit(RULE_EXPLICIT)).otherwise(F.col("_rule0")))
        .withColumn("expiry_base_timestamp", F.when(explicit, expire).otherwise(F.col("_base0")))
        .drop("_rule0", "_base0", "_subscribed0")
    )


def _deletable(options: ExpiryOptions) -> Column:
    """Which groups may become Dead once they hold no offsets and no open transaction."""
    kind = F.col("_kind")
    if options.modern:
        # maybeDeleteGroup: group.isEmpty(); share groups never expire (shouldExpire = false).
        return kind.isin(KIND_CLASSIC, KIND_CONSUMER, KIND_STREAMS) & (F.col("state") == "Empty")
    # cleanupGroupMetadata: `group.is(Empty) && !group.hasOffsets` ⇒ Dead.
    return (kind == KIND_CLASSIC) & (F.col("state") == "Empty")


def apply_expiry(tables: dict[str, DataFrame], options: ExpiryOptions) -> dict[str, DataFrame]:
    """One coordinator cleanup pass at `options.as_of_ms` over replayed tables (spec §6).

    Returns `tables` with `loaded_offsets`, `empty_group_offsets`, `loaded_groups` and `group_members` after the
    pass, plus `expired_offsets` (what retention removed, with the rule and its base) and `expired_groups`
    (groups that became Dead, with whether the emulated coordinator writes a GroupMetadata/group tombstone:
    old coordinator only for generation > 0, new coordinator always). Other tables pass through unchanged.
    """
    loaded = tables["loaded_offsets"]
    empty = tables["empty_group_offsets"]
    pending = tables["pending_offsets"]
    groups = _group_view(tables, options)

    offsets = loaded.withColumn("_source", F.lit("loaded")).unionByName(
        empty.withColumn("_source", F.lit("empty"))
    )
    pending_partitions = pending.select("group_id", "topic", "partition").distinct().withColumn("_pending", F.lit(True))
    group_cols = groups.select(
        "group_id", "_kind", "protocol_type", "state", "current_state_timestamp", "_subscribed"
    )
    decided = with_expiry_decision(
        offsets.join(group_cols, "group_id", "left")
        .join(pending_partitions, ["group_id", "topic", "partition"], "left")
        .withColumn("_kind", F.coalesce(F.col("_kind"), F.lit(KIND_HIDDEN))),
        options,
    )

    expired_offsets = decided.filter(F.col("_expired")).select(columns("expired_offsets"))
    kept = decided.filter(~F.col("_expired"))
    new_loaded = kept.filter(F.col("_source") == "loaded").select(columns("loaded_offsets"))
    new_empty = kept.filter(F.col("_source") == "empty").select(columns("empty_group_offsets"))

    counts = decided.groupBy("group_id").agg(
        F.count(F.lit(1)).alias("_offsets_before"),
        F.sum(F.when(~F.col("_expired"), 1).otherwise(0)).alias("_offsets_left"),
    )
    open_txn = pending.select("group_id").distinct().withColumn("_open_txn", F.lit(True))
    dead = (
        groups.join(counts, "group_id", "left")
        .join(open_txn, "group_id", "left")
        .filter(_deletable(options))
        .filter(F.coalesce(F.col("_offsets_left"), F.lit(0)) == 0)
        .filter(~_is_true(F.col("_open_txn")))  # never while a transaction of the group is open
        .select(
            "snapshot_id", "group_id", "offsets_partition",
            F.when(F.coalesce(F.col("_offsets_before"), F.lit(0)) > 0, F.lit(REASON_ALL_EXPIRED))
            .otherwise(F.lit(REASON_NO_OFFSETS)).alias("reason"),
            F.col("group_type"),
            F.col("generation"),
            (F.lit(True) if options.modern else _is_true(F.col("generation") > 0)).alias("writes_tombstone"),
        )
        .select(columns("expired_groups"))
    )
    dead_ids = dead.select("group_id")
    out = dict(tables)
    out["loaded_offsets"] = new_loaded
    out["empty_group_offsets"] = new_empty
    for name in ("loaded_groups", "group_members"):
        out[name] = tables[name].join(dead_ids, "group_id", "left_anti").select(columns(name))
    out["expired_offsets"] = expired_offsets
    out["expired_groups"] = dead
    return out
