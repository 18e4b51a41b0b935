"""Retention expiry and group cleanup at a chosen time `as_of`: one pass of the coordinator's periodic cleanup over
a loaded shard's tables (spec §6): each group's expiration condition, as Kafka decides it group by group, applied
to all of the group's committed offsets at once (the offsets are Arrow columns: most of a shard's rows).

The old coordinator's `GroupMetadataManager.cleanupGroupMetadata` + `GroupMetadata.removeExpiredOffsets` (0.9–2.0
rule, KIP-211 rule of 2.1+, KIP-496 subscription rule of 2.4+, KAFKA-13636 "Stable only" of 2.8.2/3.0.1/3.1.1/
3.2.0+), and the new coordinator's `GroupCoordinatorShard.cleanupGroupMetadata` → `OffsetMetadataManager
.cleanupExpiredOffsets` → `GroupMetadataManager.maybeDeleteGroup` (3.7+/4.x).
"""
from __future__ import annotations

from datetime import datetime
from dataclasses import dataclass

from typing import Any, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipelines.coordinator.options import (DEFAULT_KAFKA_VERSIONS, DEFAULT_RETENTION_MINUTES, DEFAULT_SEMANTICS,
                                          OPEN_TRANSACTION_KEEPS_GROUP_SINCE, PENDING_OFFSET_RULES_SINCE, SEMANTICS,
                                          parse_kafka_version)
from pipelines.coordinator.tables import OFFSET_TABLES, contract_table, table_schema


# expiry_rule values: which Kafka rule removed the offset.
RULE_EMPTY_STATE_TS = "empty_group_state_timestamp"  # classic group with a protocol, Empty: since it became Empty
RULE_EMPTY_COMMIT_TS = "empty_group_commit_timestamp"  # same, GroupMetadata without currentStateTimestamp
RULE_SIMPLE = "simple_group_commit_timestamp"  # no protocol type (simple / orphan offsets)
RULE_STABLE_UNSUBSCRIBED = "stable_unsubscribed_topic"  # classic `consumer` group, Stable, topic not subscribed
RULE_CONSUMER_UNSUBSCRIBED = "consumer_group_unsubscribed_topic"  # KIP-848 group, topic outside every subscription
RULE_STREAMS_EMPTY = "streams_group_commit_timestamp"  # KIP-1071 streams group subscribing to no topic
RULE_STREAMS_UNSUBSCRIBED = "streams_group_unsubscribed_topic"  # 4.2+ streams group, topic its topology never reads
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
KIND_FOREIGN = "foreign"  # legacy: a KIP-848/share/streams group the old coordinator never builds (an older snapshot's)
KIND_HIDDEN = "hidden"  # modern: offsets whose group was tombstoned — invisible, never expired (spec §5.5 #4)

@dataclass(frozen=True)
class ExpiryOptions:
    """One cleanup pass: `as_of_ms` is the pass's clock, `retention_minutes` is `offsets.retention.minutes`.

    `semantics` picks the coordinator generation (`legacy` old `GroupMetadataManager`, `modern` the new group
    coordinator); `kafka_version` refines the legacy rules (below 2.1: pre-KIP-211; 2.1–2.3: no subscription rule;
    2.4–2.8.1, 3.0.0, 3.1.0: subscription rule in any non-Empty state, KAFKA-13636 not yet fixed).
    """

    as_of_ms: int
    retention_minutes: int = DEFAULT_RETENTION_MINUTES
    semantics: str = DEFAULT_SEMANTICS
    kafka_version: str | None = None  # None: the semantics' DEFAULT_KAFKA_VERSIONS

    def __post_init__(self) -> None:
        if self.semantics not in SEMANTICS:
            raise ValueError(f"semantics must be one of {SEMANTICS}, not {self.semantics!r}")
        if self.kafka_version is None:
            object.__setattr__(self, "kafka_version", DEFAULT_KAFKA_VERSIONS[self.semantics])
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
    def share_offsets_fail_cleanup(self) -> bool:
        """4.0's cleanup asks every group its `offsetExpirationCondition`, which a share group's throws
        (`UnsupportedOperationException`): a partition holding a share group with offsets fails its whole pass, its
        tombstones never written (the timer retries it, failing again). 4.1's `ShareGroup.shouldExpire` skips it."""
        return self.modern and self.version < (4, 1, 0)

    @property
    def pending_keeps_offset(self) -> bool:
        """An offset with a pending transactional offset on its partition does not expire: the new coordinator's
        `cleanupExpiredOffsets` from 3.8 (`hasPendingTransactionalOffsets`, KAFKA-14505 [8/8]); 3.7's and the old
        coordinator's expire it."""
        return self.modern and self.version >= PENDING_OFFSET_RULES_SINCE

    def open_transaction_keeps_group(self, had_offsets: bool) -> bool:
        """Whether an open transaction of a group keeps it from deletion when its committed offsets are gone
        (`had_offsets`: it had some before the pass, all expired in it). The old coordinator: always (`hasOffsets`
        counts pending ones); the new one: never in 3.7, only where it had committed offsets in 3.8 - 4.0.0
        (`cleanupExpiredOffsets` answered true for a group with none, open transactions or not, and
        `maybeDeleteGroup` deleted it), always from 4.0.1 (KAFKA-19163; 4.1.0 too)."""
        if not self.modern:
            return True
        if self.version < PENDING_OFFSET_RULES_SINCE:
            return False
        return had_offsets or self.version >= OPEN_TRANSACTION_KEEPS_GROUP_SINCE

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


def _group_codes(offsets: pa.Table) -> tuple[list[str], np.ndarray, np.ndarray]:
    """(group ids in order of first appearance, each offset's index into them, each id's first offset)."""
    if not offsets.num_rows:
        return [], np.zeros(0, np.int64), np.zeros(0, np.int64)
    encoded = pc.dictionary_encode(offsets.column("group_id")).combine_chunks()
    codes = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    _, first = np.unique(codes, return_index=True)
    return encoded.dictionary.to_pylist(), codes, first


def _groups(tables: Mapping[str, Any], offsets: dict[str, pa.Table], coded: dict, options: ExpiryOptions
            ) -> dict[str, Row]:
    """group_id → the group the coordinator holds after load (including the synthesized simple groups)."""
    subs_by_group: dict[str, set[str]] = {}
    for m in tables.get("group_members") or ():
        if m.get("subscribed_topics") is not None:
            subs_by_group.setdefault(m["group_id"], set()).update(m["subscribed_topics"])
    groups: dict[str, Row] = {}
    for g in tables.get("loaded_groups") or ():
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
        ids, _, first = coded[name]
        if not ids:
            continue
        firsts = offsets[name].select(["snapshot_id", "offsets_partition"]).take(pa.array(first))
        for gid, sid, part in zip(ids, firsts.column(0).to_pylist(), firsts.column(1).to_pylist()):
            if gid in groups:
                continue
            groups[gid] = {
                "snapshot_id": sid, "group_id": gid, "offsets_partition": part,
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
        if ptype is None and not group.get("member_count"):
            return RULE_SIMPLE, False
        # with members, no protocol type is "": `GroupMetadata.add` / `ClassicGroup.add` give the group its first
        # member's protocol type, the value's "", so it is present, and no rule of a group with members takes it
        return None, False
    if kind == KIND_FOREIGN:
        return RULE_SIMPLE, False
    if options.modern and kind == KIND_CONSUMER:
        return RULE_CONSUMER_UNSUBSCRIBED, True
    # `StreamsGroup.isSubscribedToTopic`: no topic while Empty, nor without a topology; with one, 4.2+ asks its
    # source and repartition source topics (`sourceTopicMap`), 4.1 its configured topology, which only a member's
    # heartbeat builds (no record holds it): none after a load, so every offset of a 4.1 group expires on time
    if options.modern and kind == KIND_STREAMS:
        if state == "Empty" or group.get("_subscribed") is None or options.version < (4, 2, 0):
            return RULE_STREAMS_EMPTY, False
        return RULE_STREAMS_UNSUBSCRIBED, True
    return None, False


#: The rules a group's condition can name, then the two an offset's own timestamps name (`_RULE_NAMES` codes).
_RULE_NAMES = (RULE_EMPTY_STATE_TS, RULE_EMPTY_COMMIT_TS, RULE_SIMPLE, RULE_STABLE_UNSUBSCRIBED,
               RULE_CONSUMER_UNSUBSCRIBED, RULE_STREAMS_EMPTY, RULE_STREAMS_UNSUBSCRIBED, RULE_EXPLICIT, RULE_PRE_2_1)
_CODE = {rule: code for code, rule in enumerate(_RULE_NAMES)}


def _ms(column) -> tuple[np.ndarray, np.ndarray]:
    """A timestamp column as (epoch ms, valid)."""
    us = pc.cast(column, pa.timestamp("us", tz="UTC")).cast(pa.int64())
    if isinstance(us, pa.ChunkedArray):
        us = us.combine_chunks()
    return (pc.fill_null(us, 0).to_numpy(zero_copy_only=False) // 1000,
            pc.is_valid(us).to_numpy(zero_copy_only=False))


def _expired(offsets: pa.Table, ids: list[str], codes: np.ndarray, groups: dict[str, Row],
             conditions: dict[str, tuple[str | None, bool]], pending: set[tuple], options: ExpiryOptions
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(expired, rule code, base ms) of each committed offset in `offsets`, whose group is `ids[codes[i]]`: the
    group's condition (`_condition`) decides with the offset's timestamps. Comparisons are written so that no
    timestamp is added to: a forged timestamp near the ends of the int64 range cannot wrap."""
    now, retention = int(options.as_of_ms), options.retention_ms
    commit, has_commit = _ms(offsets.column("commit_timestamp"))
    expire, has_expire = _ms(offsets.column("expire_timestamp"))
    # new coordinator: the offsets of a tombstoned group are invisible and never expire
    known = np.array([gid in groups for gid in ids], bool)[codes]
    dated = known & (has_commit | has_expire)
    if options.pre_kip211:  # deadline: expireTimestamp, else commit + retention; expired when deadline < now
        expired = dated & np.where(has_expire, expire < now, commit < now - retention)
        return expired, np.full(len(codes), _CODE[RULE_PRE_2_1]), np.where(has_expire, expire, commit)
    condition = [conditions.get(gid, (None, False)) for gid in ids]
    rule = np.array([-1 if r is None else _CODE[r] for r, _ in condition], np.int64)[codes]
    # the rule of an Empty group's state timestamp is only ever a group's that has one
    state_ms = np.array([to_ms(groups[gid].get("current_state_timestamp")) or 0 if gid in groups else 0
                         for gid in ids], np.int64)[codes]
    candidate = dated & (rule >= 0)
    # the subscription rules keep the offsets of topics the group subscribes to
    by_subscription = candidate & np.array([u for _, u in condition], bool)[codes]
    if by_subscription.any():
        at = np.flatnonzero(by_subscription)
        subscribed = [(groups[gid].get("_subscribed") or set()) if gid in groups else set() for gid in ids]
        topics = offsets.column("topic").take(pa.array(at)).to_pylist()
        candidate[at] = [t not in subscribed[c] for t, c in zip(topics, codes[at].tolist())]
    # the base: expireTimestamp when the offset has one, else the group's state timestamp (Empty since) or the
    # commit timestamp, as the rule says (a dated offset without expireTimestamp has a commit timestamp)
    base = np.where(has_expire, expire, np.where(rule == _CODE[RULE_EMPTY_STATE_TS], state_ms, commit))
    expired = candidate & np.where(has_expire, expire <= now, base <= now - retention)
    if options.pending_keeps_offset and pending and expired.any():  # a pending transactional commit keeps it
        at = np.flatnonzero(expired)
        keys = offsets.select(["group_id", "topic", "partition"]).take(pa.array(at))
        expired[at] = [k not in pending for k in zip(*(c.to_pylist() for c in keys.columns))]
    return expired, np.where(has_expire, _CODE[RULE_EXPLICIT], rule), base


def _deletable(group: Row, options: ExpiryOptions) -> bool:
    if options.modern:
        # a share group is never cleaned up from 4.1 (`ShareGroup.shouldExpire`); 4.0's cleanup asks it as any
        # other, and `maybeDeleteGroup` deletes it when Empty (its offsets, which it cannot expire, aside)
        kinds = (KIND_CLASSIC, KIND_CONSUMER, KIND_STREAMS) + ((KIND_SHARE,) if options.version < (4, 1, 0) else ())
        return group["_kind"] in kinds and group.get("state") == "Empty"
    return group["_kind"] == KIND_CLASSIC and group.get("state") == "Empty"


def cleanup_group_metadata(tables: Mapping[str, Any], options: ExpiryOptions) -> dict[str, Any]:
    """The shard's tables after one cleanup pass at `options.as_of_ms`, plus `expired_offsets` and
    `expired_groups`. The offsets (`tables.OFFSET_TABLES`: Arrow tables, or the engine's dicts) come out as Arrow
    tables of the contract's columns, `expired_offsets` too; the groups and members as dicts."""
    offsets = {name: contract_table(tables.get(name) or [], name) if not isinstance(tables.get(name), pa.Table)
               else tables[name] for name in OFFSET_TABLES}
    coded = {name: _group_codes(t) for name, t in offsets.items()}
    groups = _groups(tables, offsets, coded, options)
    pending_rows = _rows_of(tables.get("pending_offsets"))
    pending_partitions = {(p["group_id"], p["topic"], p["partition"]) for p in pending_rows}
    open_txn_groups = {p["group_id"] for p in pending_rows}

    out = dict(tables)
    schema = table_schema("expired_offsets")
    if share_groups_failing_cleanup(groups, coded, options):
        out.update(offsets, expired_offsets=schema.empty_table(), expired_groups=[])
        return out
    expired_offsets: list[pa.Table] = []
    before: dict[str, int] = {}
    left: dict[str, int] = {}
    conditions = {gid: _condition(g, options) for gid, g in groups.items()}  # a group's offsets share it
    for name in OFFSET_TABLES:
        table, (ids, codes, _) = offsets[name], coded[name]
        expired, rule, base = _expired(table, ids, codes, groups, conditions, pending_partitions, options)
        for gid, n, kept in zip(ids, np.bincount(codes, minlength=len(ids)).tolist(),
                                np.bincount(codes[~expired], minlength=len(ids)).tolist()):
            before[gid] = before.get(gid, 0) + n
            left[gid] = left.get(gid, 0) + kept
        out[name] = table.filter(pa.array(~expired))
        if expired.any():
            gone = table.filter(pa.array(expired))
            extra = {"expiry_base_timestamp": pa.array(base[expired], pa.int64()).cast(pa.timestamp("ms", tz="UTC")),
                     "expiry_rule": pa.array([_RULE_NAMES[c] for c in rule[expired].tolist()], pa.string())}
            expired_offsets.append(pa.Table.from_arrays(
                [gone.column(f.name) if f.name in gone.column_names else extra[f.name] for f in schema],
                schema=pa.schema([gone.schema.field(f.name) if f.name in gone.column_names else
                                  pa.field(f.name, extra[f.name].type) for f in schema])).cast(schema))

    expired_groups: list[Row] = []
    for gid, g in groups.items():
        if not _deletable(g, options) or left.get(gid, 0) > 0 or (
                gid in open_txn_groups and options.open_transaction_keeps_group(before.get(gid, 0) > 0)):
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
    out["loaded_groups"] = [g for g in tables.get("loaded_groups") or () if g["group_id"] not in dead]
    out["group_members"] = [m for m in tables.get("group_members") or () if m["group_id"] not in dead]
    out["expired_offsets"] = pa.concat_tables(expired_offsets) if expired_offsets else schema.empty_table()
    out["expired_groups"] = expired_groups
    return out


def share_groups_failing_cleanup(groups: Mapping[str, Row], coded: Mapping[str, tuple], options: ExpiryOptions
                                 ) -> list[str]:
    """The share groups of a shard holding offsets where they fail its cleanup pass
    (`ExpiryOptions.share_offsets_fail_cleanup`); `coded`: each offset table's `_group_codes`."""
    if not options.share_offsets_fail_cleanup:
        return []
    held = {gid for ids, _, _ in coded.values() for gid in ids}
    return sorted(gid for gid, g in groups.items() if g["_kind"] == KIND_SHARE and gid in held)


def _rows_of(table) -> list:
    """A shard's rows of a table: the engine's dicts, or an Arrow table's (few: pending offsets)."""
    if table is None:
        return []
    return table.select(["group_id", "topic", "partition"]).to_pylist() if isinstance(table, pa.Table) else table
