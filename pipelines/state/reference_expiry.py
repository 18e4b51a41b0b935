"""Sequential twin of `expiry.py`: one coordinator cleanup pass over list-of-dict tables, group by group as Kafka does.

Works on the tables of `pipelines/state/reference.py` (`dict[str, list[dict]]`, contract column names). Written
the way the coordinators iterate (old: `cleanupGroupMetadata` → `removeExpiredOffsets`; new:
`GroupCoordinatorShard.cleanupGroupMetadata` → `cleanupExpiredOffsets` → `maybeDeleteGroup`) so that the
differential tests compare two independent formulations of spec §6. Never imports pyspark's session machinery.
"""
from __future__ import annotations

from datetime import datetime
from typing import Any

from pipelines.state.expiry import (
    KIND_CLASSIC,
    KIND_CONSUMER,
    KIND_FOREIGN,
    KIND_SHARE,
    KIND_STREAMS,
    REASON_ALL_EXPIRED,
    REASON_NO_OFFSETS,
    RULE_CONSUMER_UNSUBSCRIBED,
    RULE_EMPTY_COMMIT_TS,
    RULE_EMPTY_STATE_TS,
    RULE_EXPLICIT,
    RULE_PRE_2_1,
    RULE_SIMPLE,
    RULE_STABLE_UNSUBSCRIBED,
    RULE_STREAMS_EMPTY,
    ExpiryOptions,
)
from schemas.tables import columns

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


def _decide(offset: Row, group: Row | None, pending: bool, options: ExpiryOptions) -> tuple[bool, str | None, Any]:
    """(expired, rule, base cell) for one committed offset."""
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
    rule, uses_subscription = _condition(group, options)
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


def reference_apply_expiry(tables: dict[str, list[Row]], options: ExpiryOptions) -> dict[str, list[Row]]:
    """Sequential version of `expiry.apply_expiry` with the same output tables (list of dicts, contract columns)."""
    groups = _groups(tables, options)
    pending_partitions = {(p["group_id"], p["topic"], p["partition"]) for p in tables.get("pending_offsets", [])}
    open_txn_groups = {p["group_id"] for p in tables.get("pending_offsets", [])}

    out = dict(tables)
    expired_offsets: list[Row] = []
    before: dict[str, int] = {}
    left: dict[str, int] = {}
    for name in ("loaded_offsets", "empty_group_offsets"):
        kept: list[Row] = []
        for o in tables.get(name, []):
            gid = o["group_id"]
            group = groups.get(gid)
            pending = (gid, o["topic"], o["partition"]) in pending_partitions
            expired, rule, base = _decide(o, group, pending, options)
            before[gid] = before.get(gid, 0) + 1
            if expired:
                row = {c: o.get(c) for c in columns(name)}
                row["expiry_base_timestamp"] = base
                row["expiry_rule"] = rule
                expired_offsets.append({c: row.get(c) for c in columns("expired_offsets")})
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
