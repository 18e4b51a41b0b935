"""Retention expiry and group cleanup at a chosen time `as_of`: one pass of the coordinator's periodic cleanup over
a loaded shard's rows (spec §6), group by group as Kafka iterates.

The old coordinator's `GroupMetadataManager.cleanupGroupMetadata` + `GroupMetadata.removeExpiredOffsets` (0.9–2.0
rule, KIP-211 rule of 2.1+, KIP-496 subscription rule of 2.4+, KAFKA-13636 "Stable only" of 2.8.2/3.0.1/3.1.1/
3.2.0+), and the new coordinator's `GroupCoordinatorShard.cleanupGroupMetadata` → `OffsetMetadataManager
.cleanupExpiredOffsets` → `GroupMetadataManager.maybeDeleteGroup` (3.7+/4.x).
"""
from __future__ import annotations

import functools
import re
from datetime import datetime
from dataclasses import dataclass

from typing import Any

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


@functools.lru_cache(maxsize=64)  # read for every offset an expiry pass checks
@functools.lru_cache(maxsize=64)  # asked once per offset through ExpiryOptions' rules
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


Row = dict[str, Any]


def to_ms(ts: Any) -> int | None:
    """A timestamp cell as epoch ms: datetimes (aware, or naive as Spark collects them) or ints already in ms."""
    if ts is None:
        return None
    if isinstance(ts, datetime):
        return int(round(ts.timestamp() * 1000))
    return int(ts)


def _kind(group: Row, options: ExpiryOptions) -> str:
    gt = group.get("group_type") or KIND_CLASSIC
    if options.modern:
        return gt if gt in (KIND_CLASSIC, KIND_CONSUMER, KIND_STREAMS, KIND_SHARE) else KIND_SHARE
    # The old coordinator skips KIP-848/share/streams keys: their offsets look like those of a group-less id.
    return KIND_CLASSIC if gt == KIND_CLASSIC else KIND_FOREIGN


def _groups(tables: dict[str, list[Row]], options: ExpiryOptions) -> dict[str, Row]:
    """group_id → the group the coordinator holds after load (including the synthesized simple groups)."""
    subs_by_group: dict[str, set[str]] = {}
    for m in tables.get("group_members", []):
        if m.get("subscribed_topics") is not None:
            subs_by_group.setdefault(m["group_id"], set()).update(m["subscribed_topics"])
    groups: dict[str, Row] = {}
    for g in tables.get("loaded_groups", []):
        view = dict(g)
        view["_kind"] = _kind(g, options)
        subscribed = g.get("subscribed_topics")
        if g.get("group_type") == KIND_CONSUMER and subscribed is None:
            subscribed = subs_by_group.get(g["group_id"], set())
        view["_subscribed"] = None if subscribed is None else set(subscribed)
        view["_synthetic"] = False
        groups[g["group_id"]] = view
    # Old loader: a new Empty group (protocolType None, generation 0) for every id in emptyGroupOffsets — and, for
    # the old coordinator, that is every offset whose group record is absent. New coordinator: a simple group is
    # created when an offset is replayed for an unknown id, but a later GroupMetadata tombstone removes it again.
    orphan_tables = ["empty_group_offsets"] + ([] if options.modern else ["loaded_offsets"])
    for name in orphan_tables:
        for o in tables.get(name, []):
            gid = o["group_id"]
            if gid in groups:
                continue
            groups[gid] = {
                "snapshot_id": o["snapshot_id"], "group_id": gid, "offsets_partition": o.get("offsets_partition"),
                "group_type": KIND_CLASSIC, "protocol_type": None, "generation": 0, "state": "Empty",
                "current_state_timestamp": None, "member_count": 0, "_kind": KIND_CLASSIC, "_subscribed": None,
                "_synthetic": True,
            }
    return groups


def _condition(group: Row, options: ExpiryOptions) -> tuple[str | None, bool]:
    """(rule, uses_subscription) of the group's expiration condition; rule None: nothing of it expires."""
    kind = group["_kind"]
    state = group.get("state")
    ptype = group.get("protocol_type") or None
    if kind == KIND_CLASSIC:
        if ptype is not None and state == "Empty":
            known = group.get("current_state_timestamp") is not None
            return (RULE_EMPTY_STATE_TS if known else RULE_EMPTY_COMMIT_TS), False
        if ptype == "consumer" and group.get("_subscribed") is not None and options.subscription_rule:
            if state == "Stable" if options.stable_only else (state is not None and state != "Empty"):
                return RULE_STABLE_UNSUBSCRIBED, True
        if ptype is None:
            return RULE_SIMPLE, False
        return None, False
    if kind == KIND_FOREIGN:
        return RULE_SIMPLE, False
    if options.modern and kind == KIND_CONSUMER:
        return RULE_CONSUMER_UNSUBSCRIBED, True
    if options.modern and kind == KIND_STREAMS and state == "Empty":
        return RULE_STREAMS_EMPTY, False
    return None, False


def _decide(offset: Row, group: Row | None, pending: bool, options: ExpiryOptions,
            condition: tuple[str | None, bool] | None = None) -> tuple[bool, str | None, Any]:
    """(expired, rule, base cell) for one committed offset; `condition`: the group's `_condition`, if known."""
    now = int(options.as_of_ms)
    expire = offset.get("expire_timestamp")
    commit = offset.get("commit_timestamp")
    if group is None:  # new coordinator: offsets of a tombstoned group are invisible and never expire
        return False, None, None
    if expire is None and commit is None:
        return False, None, None
    if options.pre_kip211:
        deadline = to_ms(expire) if expire is not None else to_ms(commit) + options.retention_ms
        return deadline < now, RULE_PRE_2_1, expire if expire is not None else commit
    rule, uses_subscription = _condition(group, options) if condition is None else condition
    if rule is None:
        return False, None, None
    if uses_subscription and offset["topic"] in (group.get("_subscribed") or set()):
        return False, None, None
    if expire is not None:
        met, rule, base = now >= to_ms(expire), RULE_EXPLICIT, expire
    else:
        base = group.get("current_state_timestamp") if rule == RULE_EMPTY_STATE_TS else commit
        if base is None:
            return False, None, None
        met = now - to_ms(base) >= options.retention_ms
    if options.modern and pending:
        met = False
    return met, rule, base


def _deletable(group: Row, options: ExpiryOptions) -> bool:
    if options.modern:
        return group["_kind"] in (KIND_CLASSIC, KIND_CONSUMER, KIND_STREAMS) and group.get("state") == "Empty"
    return group["_kind"] == KIND_CLASSIC and group.get("state") == "Empty"


def cleanup_group_metadata(tables: dict[str, list[Row]], options: ExpiryOptions) -> dict[str, list[Row]]:
    """The shard's tables after one cleanup pass at `options.as_of_ms`, plus `expired_offsets` and `expired_groups`
    (list of dicts, contract columns)."""
    groups = _groups(tables, options)
    pending_partitions = {(p["group_id"], p["topic"], p["partition"]) for p in tables.get("pending_offsets", [])}
    open_txn_groups = {p["group_id"] for p in tables.get("pending_offsets", [])}

    out = dict(tables)
    expired_offsets: list[Row] = []
    before: dict[str, int] = {}
    left: dict[str, int] = {}
    conditions = {gid: _condition(g, options) for gid, g in groups.items()}  # a group's offsets share it
    for name in ("loaded_offsets", "empty_group_offsets"):
        kept: list[Row] = []
        # the expired row: `expired_offsets`' columns, the offset's where it has them, with the rule's
        own = set(columns(name))
        expired_columns = [(c, c in own) for c in columns("expired_offsets")]
        for o in tables.get(name, []):
            gid = o["group_id"]
            group = groups.get(gid)
            pending = (gid, o["topic"], o["partition"]) in pending_partitions
            expired, rule, base = _decide(o, group, pending, options, conditions.get(gid))
            before[gid] = before.get(gid, 0) + 1
            if expired:
                row = {c: o.get(c) if has else None for c, has in expired_columns}
                row["expiry_base_timestamp"] = base
                row["expiry_rule"] = rule
                expired_offsets.append(row)
            else:
                left[gid] = left.get(gid, 0) + 1
                kept.append(o)
        out[name] = kept

    expired_groups: list[Row] = []
    for gid, g in groups.items():
        if not _deletable(g, options) or left.get(gid, 0) > 0 or gid in open_txn_groups:
            continue
        expired_groups.append({
            "snapshot_id": g["snapshot_id"],
            "group_id": gid,
            "offsets_partition": g.get("offsets_partition"),
            "reason": REASON_ALL_EXPIRED if before.get(gid, 0) > 0 else REASON_NO_OFFSETS,
            "group_type": g.get("group_type"),
            "generation": g.get("generation"),
            "writes_tombstone": True if options.modern else (g.get("generation") or 0) > 0,
        })
    dead = {g["group_id"] for g in expired_groups}
    out["loaded_groups"] = [g for g in tables.get("loaded_groups", []) if g["group_id"] not in dead]
    out["group_members"] = [m for m in tables.get("group_members", []) if m["group_id"] not in dead]
    out["expired_offsets"] = expired_offsets
    out["expired_groups"] = expired_groups
    return out
