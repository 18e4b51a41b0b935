"""The JSON answers (HTTP API and `offsetlake lookup` alike), built from one SnapshotIndex.

Each function takes an already resolved index, so an answer never mixes two snapshots.
"""
from __future__ import annotations

import base64
import binascii
import pyarrow as pa
import pyarrow.compute as pc

from pipelines.io.snapshots import SnapshotReader, jsonable
from pipelines.serving.history import group_events, held_at, observed_events, outcome_as_of, snapshot_commits
from pipelines.serving.index import (GROUP_STATES, GROUP_TYPES, LAG_FIELDS, OFFSET_FIELDS, SnapshotIndex,
                                     assignment_strategy, consumer_lag, json_rows)

MAX_PAGE = 1000
DEFAULT_PAGE = 100
MAX_COMMITS = 100_000
DEFAULT_COMMITS = 10_000

GROUP_FIELDS = [
    "group_id",
    "group_type",
    "protocol_type",
    "state",
    "generation",
    "protocol",
    "leader",
    "current_state_timestamp",
    "member_count",
    "offsets_partition",
    "record_offset",
    "assignment_epoch",
    "subscribed_topics",
    "is_simple",
    "expected_offsets_partition",
    "unresolved_topic_ids",
]


class BadParameter(ValueError):
    """A query parameter the caller got wrong (HTTP 400, CLI exit 2)."""


class NotFound(LookupError):
    """A resource (topic, ...) that is not in the snapshot (HTTP 404)."""


def _row(row: dict, fields: list[str] | None = None) -> dict:
    if fields is None:
        return {k: jsonable(v) for k, v in row.items()}
    return {f: jsonable(row.get(f)) for f in fields}


def group_metadata(idx: SnapshotIndex, gid: str) -> dict:
    row = idx.group(gid)
    out = _row(row, GROUP_FIELDS)
    out["assignment_strategy"] = assignment_strategy(row)
    out["offset_count"] = idx.offsets.count(gid)
    return out


def _require(idx: SnapshotIndex, gid: str) -> None:
    if not idx.exists(gid):
        raise idx.not_found(gid)


def group_detail(idx: SnapshotIndex, gid: str) -> dict:
    """`GET /groups/{id}`: metadata, members, committed offsets, open transactional offsets, what expired."""
    _require(idx, gid)
    offsets = with_lag(idx, idx.offsets.json_rows(gid), gid)
    return {
        "snapshot_id": idx.snapshot.snapshot_id,
        "group": group_metadata(idx, gid),
        "members": idx.members.json_rows(gid),
        "offsets": offsets,
        "lag": group_lag_summary(idx, gid),
        # which end offsets the LAG above is measured against (`SnapshotIndex.end_offset_sources`), beside the time
        # the committed offsets are as of: a what-if snapshot's ends are the ones at its as_of (`ends_at`)
        "log_end_offsets": {"sources": idx.end_offset_sources({(o["topic"], o["partition"]) for o in offsets}),
                            "as_of": jsonable(idx.snapshot.as_of), "kind": idx.snapshot.kind},
        "pending": idx.pending.json_rows(gid),
        "expired": {
            "offsets": idx.expired.json_rows(gid),
            "group": _row(idx.expired_groups[gid]) if gid in idx.expired_groups else None,
        },
        "removed": _row(idx.removed_groups[gid]) if gid in idx.removed_groups else None,
    }


def group_offsets(idx: SnapshotIndex, gid: str, topic: str | None = None, partition: int | None = None) -> list[dict]:
    """`GET /groups/{id}/offsets`: `{topic, partition, committed_offset, leader_epoch, metadata, commit_timestamp,
    log_start_offset, log_end_offset, lag, lag_seconds, commit_age_seconds}`."""
    _require(idx, gid)
    rows = idx.group_offsets(gid, OFFSET_FIELDS, iso_time=True)
    if topic is not None:
        rows = [r for r in rows if r["topic"] == topic]
    if partition is not None:
        rows = [r for r in rows if r["partition"] == partition]
    return with_lag(idx, rows, gid)


def with_lag(idx: SnapshotIndex, rows: list[dict], gid: str) -> list[dict]:
    """Each offset row of group `gid` with its partition's bounds and its lag at the snapshot's as_of: `LAG_FIELDS`
    as the rebuild computed them (`consumer_lag`), each null when unknown. A snapshot written before that table has
    the offset lag alone, from its end offsets (`lag_seconds`, `commit_age_seconds` null)."""
    computed = idx.group_lag(gid)
    leo, starts = idx.end_offsets, idx.start_offsets
    for r in rows:
        tp = (r["topic"], r["partition"])
        got = computed.get(tp)
        if got is None:
            end = leo.get(tp)
            got = {"log_start_offset": starts.get(tp), "log_end_offset": end,
                   "lag": consumer_lag(end, r.get("committed_offset")), "lag_seconds": None,
                   "commit_age_seconds": None}
        for f in LAG_FIELDS:
            r[f] = got.get(f)
    return rows


def group_lag_summary(idx: SnapshotIndex, gid: str) -> dict:
    """The group's lag in time as the rebuild judged it (`consumer_lag`: `group_max_lag_seconds`, the row
    `is_group_max`): its largest lag_seconds and the partition holding it, and how many partitions have one."""
    rows = idx.group_lag(gid).values()
    worst = next((r for r in rows if r.get("is_group_max")), None)
    return {"max_lag_seconds": None if worst is None else worst["group_max_lag_seconds"],
            "worst_partition": None if worst is None else {"topic": worst["topic"], "partition": worst["partition"]},
            "partitions_timed": sum(1 for r in rows if r.get("lag_seconds") is not None)}


# --- pagination ---------------------------------------------------------------------------------------------
def encode_cursor(group_id: str) -> str:
    return base64.urlsafe_b64encode(b"g:" + group_id.encode("utf-8")).decode("ascii").rstrip("=")


def decode_cursor(cursor: str | None) -> str | None:
    if cursor is None or cursor == "":
        return None
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        if not raw.startswith(b"g:"):
            raise ValueError
        return raw[2:].decode("utf-8")
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise BadParameter(f"cursor {cursor!r} is not a cursor this API returned") from None


def check_limit(limit: int | None, default: int = DEFAULT_PAGE, maximum: int = MAX_PAGE) -> int:
    if limit is None:
        return default
    if not 1 <= limit <= maximum:
        raise BadParameter(f"limit must be between 1 and {maximum}, got {limit}")
    return limit


def _parse_choices(value: str | None, allowed: tuple[str, ...], what: str) -> set[str] | None:
    """A comma list matched case-insensitively against Kafka's names, like `kafka-consumer-groups --list --state`."""
    if value is None or value.strip() == "":
        return None
    by_lower = {a.lower(): a for a in allowed}
    out = set()
    for part in value.split(","):
        p = part.strip().lower()
        if p not in by_lower:
            raise BadParameter(f"invalid {what} {part.strip()!r}; valid: {', '.join(allowed)}")
        out.add(by_lower[p])
    return out


def list_groups(
    idx: SnapshotIndex,
    *,
    state: str | None = None,
    type: str | None = None,
    protocol_type: str | None = None,
    prefix: str | None = None,
    topic: str | None = None,
    limit: int | None = None,
    cursor: str | None = None,
) -> dict:
    """`GET /groups`: live groups in group-id order, keyset-paginated (the cursor is the last group id)."""
    states = _parse_choices(state, GROUP_STATES, "state")
    types = _parse_choices(type, GROUP_TYPES, "type")
    limit = check_limit(limit)
    after = decode_cursor(cursor)
    if topic is not None and topic != "":
        entry = idx.topics.get(topic)
        candidates = entry.group_ids if entry else []
    else:
        candidates = idx.group_ids
    page, more = [], False
    for gid in idx.groups_after(candidates, after, prefix or None):
        row = idx.groups[gid]
        if row.get("state") == "Dead":
            continue
        if states is not None and row.get("state") not in states:
            continue
        if types is not None and row.get("group_type") not in types:
            continue
        if protocol_type not in (None, "") and row.get("protocol_type") != protocol_type:
            continue
        if len(page) == limit:
            more = True
            break
        page.append(gid)
    return {
        "snapshot_id": idx.snapshot.snapshot_id,
        "groups": [group_summary(idx, g) for g in page],
        "next_cursor": encode_cursor(page[-1]) if more else None,
    }


def group_summary(idx: SnapshotIndex, gid: str) -> dict:
    row = idx.groups[gid]
    return {
        "group_id": gid,
        "group_type": row.get("group_type"),
        "protocol_type": row.get("protocol_type"),
        "state": row.get("state"),
        "generation": row.get("generation"),
        "member_count": row.get("member_count"),
        "offset_count": idx.offsets.count(gid),
    }


def topic_groups(idx: SnapshotIndex, topic: str, *, limit: int | None = None, cursor: str | None = None) -> dict:
    """`GET /topics/{topic}/groups`: the groups with committed offsets on `topic`, each with those offsets."""
    limit = check_limit(limit)
    after = decode_cursor(cursor)
    entry = idx.topics.get(topic)
    if entry is None:
        raise NotFound(f"no group has a committed offset on topic {topic!r} in snapshot {idx.snapshot.snapshot_id!r}")
    page, more = [], False
    for gid in idx.groups_after(entry.group_ids, after, None):
        if len(page) == limit:
            more = True
            break
        page.append(gid)
    groups = []
    for gid in page:
        item = group_summary(idx, gid)
        item["offsets"] = [
            {"partition": r["partition"], "committed_offset": r["committed_offset"],
             "commit_timestamp": jsonable(r["commit_timestamp"])}
            for r in idx.group_offsets(gid, ["topic", "partition", "committed_offset", "commit_timestamp"])
            if r["topic"] == topic
        ]
        groups.append(item)
    return {
        "snapshot_id": idx.snapshot.snapshot_id,
        "topic": topic,
        "groups": groups,
        "next_cursor": encode_cursor(page[-1]) if more else None,
    }


COMMIT_FIELDS = [
    "topic",
    "partition",
    "committed_offset",
    "commit_timestamp",
    "record_timestamp",
    "is_tombstone",
    "txn_outcome",
    "producer_id",
    "offsets_partition",
    "record_offset",
    # where and when the record took effect as the engine recorded it (null: it never did, by the snapshot's as_of)
    "applied_offset",
    "applied_timestamp",
]


def group_commits(
    reader: SnapshotReader,
    idx: SnapshotIndex,
    gid: str,
    *,
    topic: str | None = None,
    partition: int | None = None,
    limit: int | None = None,
) -> dict:
    """`GET /groups/{id}/commits`: the group's offset-commit history from `offset_commits`, up to the end of the
    snapshot's log (`Snapshot.log_until`: a commit the snapshot could not have seen is left out), in log order, at
    most `limit` newest."""
    limit = check_limit(limit, DEFAULT_COMMITS, MAX_COMMITS)
    if partition is not None and topic is None:
        raise BadParameter("partition needs topic")
    flt = [("group_id", "=", gid)]
    if topic is not None:
        flt.append(("topic", "=", topic))
    if partition is not None:
        flt.append(("partition", "=", partition))
    t = snapshot_commits(reader, idx.snapshot, filters=flt,
                         columns=COMMIT_FIELDS + ["group_id", "txn_marker_timestamp", "batch_timestamp"])
    as_of = idx.snapshot.log_until  # the records the state holds: a what-if --as-of before them is no cut
    if t is not None and t.num_rows and as_of is not None:
        # the records `rebuild --until-time` holds there: one with no record time (magic 0) at every cut, whatever
        # commit time its value gives; none of a batch that ends past it
        t = t.filter(held_at(t, as_of))
        t = outcome_as_of(t, as_of)
    # cut first: a what-if snapshot's pinned history is every run's, and a group whose commits all came past its end
    # is one the snapshot does not know (`index.unknown_groups`), as restore-plan and changes say
    if (t is None or t.num_rows == 0) and not idx.exists(gid):
        raise idx.not_found(gid)
    rows: list[dict] = []
    truncated = False
    if t is not None and t.num_rows:
        # in log order, as the coordinator read them (`changes` and the group status order them so): the commit
        # time inside a value is the client's clock where an OffsetCommit v1 request gave one (only -1 becomes the
        # broker's: KafkaApis.handleOffsetCommitRequest 0.10-3.0, OffsetAndMetadata.fromRequest 3.9), so it may go
        # backwards
        t = t.sort_by([("offsets_partition", "ascending"), ("record_offset", "ascending")])
        if t.num_rows > limit:
            truncated = True
            t = t.slice(t.num_rows - limit)
        rows = [_row(r, COMMIT_FIELDS) for r in t.select([c for c in COMMIT_FIELDS if c in t.column_names]).to_pylist()]
    return {"snapshot_id": idx.snapshot.snapshot_id, "group_id": gid, "commits": rows, "truncated": truncated}


HISTORY_FIELDS = ["offsets_partition", "record_offset", "record_timestamp", "group_type", "event", "generation",
                  "assignment_epoch", "protocol", "leader", "state", "member_count", "members_joined", "members_left",
                  # whether a reader could have seen the group as the event left it (`history.observable`)
                  "observable"]


def group_history(reader: SnapshotReader, idx: SnapshotIndex, gid: str, *, limit: int | None = None) -> dict:
    """`GET /groups/{id}/history`: the group's events from the snapshot's log (`group_history`: new generations or
    epochs, members joining and leaving, deletions), in log order, at most `limit` newest, each with whether a
    reader could have seen the group as it left it (`observable`, as `changes` judges the group's changes)."""
    limit = check_limit(limit, DEFAULT_COMMITS, MAX_COMMITS)
    # None for a snapshot written before group_history existed; a damaged one is a DamagedTable, never "no events"
    t = group_events(reader, idx.snapshot, filters=[("group_id", "=", gid)],
                     columns=[*HISTORY_FIELDS[:-1], "group_id", "batch_last_offset"])
    if (t is None or t.num_rows == 0) and not idx.exists(gid):
        raise idx.not_found(gid)
    rows: list[dict] = []
    truncated = False
    if t is not None and t.num_rows:
        t = observed_events(t)  # in log order, as `describe --history` and `changes` read them
        if t.num_rows > limit:
            truncated = True
            t = t.slice(t.num_rows - limit)
        rows = [_row(r, HISTORY_FIELDS) for r in t.to_pylist()]
    return {"snapshot_id": idx.snapshot.snapshot_id, "group_id": gid, "events": rows, "truncated": truncated}


def lookup(idx: SnapshotIndex, *, group: str | None, topic: str | None, partition: int | None) -> dict:
    """`offsetlake lookup`: committed offsets by group / topic / partition (and the group, when one is named), each
    with its partition's bounds and its lag (`with_lag`)."""
    out: dict = {"snapshot_id": idx.snapshot.snapshot_id}
    if group is None:  # one pass over the whole (group, topic, partition)-sorted table instead of a slice per group
        out["offsets"] = _topic_offsets(idx, topic, partition)
        return out
    _require(idx, group)
    out["group"] = group_metadata(idx, group)
    offsets = [r for r in idx.group_offsets(group, ["group_id", *OFFSET_FIELDS], iso_time=True)
               if (topic is None or r["topic"] == topic) and (partition is None or r["partition"] == partition)]
    out["offsets"] = with_lag(idx, offsets, group)
    out["lag"] = group_lag_summary(idx, group)
    return out


_KEYS = ["group_id", "topic", "partition"]


def _topic_offsets(idx: SnapshotIndex, topic: str | None, partition: int | None) -> list[dict]:
    """The committed offsets on `topic` (and `partition`), each with `LAG_FIELDS`: joined column-wise with the
    snapshot's `consumer_lag`, or, for a snapshot without it, the offset lag from its end offsets."""
    t = idx.offsets.table
    if t is None:
        return []
    mask = pc.equal(t.column("topic"), topic)
    if partition is not None:
        mask = pc.and_(mask, pc.equal(t.column("partition"), partition))
    t = t.filter(mask).select([c for c in ["group_id", *OFFSET_FIELDS] if c in t.column_names])
    lag = idx.lag.table
    if lag is None:
        rows = json_rows(t)
        for r in rows:
            tp = (r["topic"], r["partition"])
            end = idx.end_offsets.get(tp)
            r.update(log_start_offset=idx.start_offsets.get(tp), log_end_offset=end,
                     lag=consumer_lag(end, r.get("committed_offset")), lag_seconds=None, commit_age_seconds=None)
        return rows
    lag = lag.select(_KEYS + LAG_FIELDS).cast(pa.schema([t.schema.field(k) for k in _KEYS]
                                                        + [lag.schema.field(f) for f in LAG_FIELDS]))
    joined = t.join(lag, _KEYS, join_type="left outer").sort_by([(k, "ascending") for k in _KEYS])
    return json_rows(joined.select(["group_id", *OFFSET_FIELDS, *LAG_FIELDS]))
