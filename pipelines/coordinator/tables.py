"""A loaded shard as the snapshot's rows: what `ListGroups`, `DescribeGroups` / `ConsumerGroupDescribe` and
`OffsetFetch` would answer, in the contract's columns (`schemas/tables.py`); timestamps in epoch ms here.

Offsets are split the way the loaders keep them: offsets of an id holding a classic or consumer group
(`loaded_offsets`), and the others (`empty_group_offsets`; modern: only while a simple group exists — a removed
group hides them). `removed_groups`: ids whose latest type-2/type-3 record is a tombstone and that hold no live
classic or consumer group at the end (a simple group holding only offsets may still exist for them).
"""
from __future__ import annotations

import datetime as dt
from typing import Any, Iterable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipelines.coordinator.committed import groups_of
from pipelines.coordinator.groups import (ClassicGroup, ConsumerGroup, GroupEvent, MemberMetadata, SimpleGroup,
                                          StreamsGroup, TopicIdPartitions, classic_group_state, flat_topic_partitions,
                                          group_type, is_live)
from pipelines.coordinator.loader import ShardState
from pipelines.coordinator.offset_metadata import DECIDED_TYPES, is_offset_commit
from pipelines.coordinator.options import REPLAY_TABLES, ReplayOptions
from pipelines.coordinator.partitioner import partition_for
from schemas.tables import HISTORY_MEMBER, TABLES, outcome_rank

Row = dict[str, Any]
#: The tables of committed offsets, built column by column (`offsets_table`): most of a shard's rows.
OFFSET_TABLES = ("loaded_offsets", "empty_group_offsets")
MEMBER_STATES = {0: "STABLE", 1: "UNREVOKED_PARTITIONS", 2: "UNRELEASED_PARTITIONS", 127: "UNKNOWN"}
#: A streams member's (`streams.MemberState.fromValue`: a code it does not name is UNKNOWN)
STREAMS_MEMBER_STATES = {1: "STABLE", 2: "UNREVOKED_TASKS", 3: "UNRELEASED_TASKS", 127: "UNKNOWN"}


def _none_if(v, sentinel=-1):
    return None if v is None or v == sentinel else v


#: (record kind, key type) of the records naming topic ids: ConsumerGroupPartitionMetadata, ShareGroupPartitionMetadata
NAMING_RECORDS = frozenset({("consumer_group", 4), ("share_group", 9)})


def topic_names(rows: Iterable[Row]) -> dict[str, str]:
    """topic id -> name from every ConsumerGroupPartitionMetadata (type 4) and ShareGroupPartitionMetadata (type 9,
    4.0) value, the latest by log position. Topic ids are cluster-wide: a run gathers them over every shard before
    replaying any (`shards`)."""
    best: dict[str, tuple[tuple[int, int], str]] = {}
    for r in rows:
        if (r.get("record_kind"), r.get("key_type")) in NAMING_RECORDS and not r["is_tombstone"]:
            pos = (r["offset"], r["offsets_partition"])
            for t in r.get("topics_metadata") or []:
                if t["topic_id"] not in best or best[t["topic_id"]][0] < pos:
                    best[t["topic_id"]] = (pos, t["topic_name"])
    return {tid: name for tid, (_, name) in best.items()}


def table_schema(table: str) -> pa.Schema:
    """The contract's Arrow schema of `table`."""
    return TABLES[table]


def _timestamps(values) -> pa.Array:
    """Epoch ms (the engine's representation) or datetimes -> UTC microsecond timestamps."""
    ms = [v if v is None or isinstance(v, int) else int(v.replace(tzinfo=v.tzinfo or dt.timezone.utc).timestamp()
                                                          * 1000) for v in values]
    return pa.array(ms, pa.int64()).cast(pa.timestamp("ms", tz="UTC")).cast(pa.timestamp("us", tz="UTC"))


def contract_table(rows: list[Row] | pa.Table, table: str) -> pa.Table:
    """`rows` (the engine's dicts, or a table built column by column) as an Arrow table of the contract's columns
    and types."""
    schema = table_schema(table)
    if isinstance(rows, pa.Table):
        return rows.select(schema.names).cast(schema)
    # Arrow converts the rows' other columns in one pass; a timestamp column is converted on its own (the
    # engine's epoch ms, or datetimes)
    plain = pa.schema([f for f in schema if not pa.types.is_timestamp(f.type)])
    converted = pa.Table.from_pylist(rows, schema=plain)
    arrays = [_timestamps([r.get(f.name) for r in rows]) if pa.types.is_timestamp(f.type)
              else converted.column(f.name) for f in schema]
    return pa.Table.from_arrays(arrays, schema=schema)


def _unset(values: pa.ChunkedArray) -> pa.ChunkedArray:
    """Kafka's -1 for "none" as null."""
    return pc.if_else(pc.fill_null(pc.equal(values, -1), False), pa.scalar(None, values.type), values)


def offsets_table(sid: str, part: int, committed: pa.Table, has_group: bool) -> pa.Table:
    """Committed offsets (`OffsetFetch`'s answer; `committed.SCHEMA` rows) as a `loaded_offsets` /
    `empty_group_offsets` table: a shard holds one per group, topic and partition, most of its rows."""
    schema = table_schema("loaded_offsets")
    n = committed.num_rows
    ts = pa.timestamp("ms", tz="UTC")
    columns = {
        "snapshot_id": pa.repeat(sid, n), "offsets_partition": pa.repeat(part, n),
        "leader_epoch": _unset(committed.column("leader_epoch")),
        "commit_timestamp": committed.column("commit_timestamp").cast(ts),
        "expire_timestamp": _unset(committed.column("expire_timestamp")).cast(ts),
        "has_group_metadata": pa.repeat(has_group, n),
    }
    return pa.Table.from_arrays([(columns[f.name] if f.name in columns else committed.column(f.name)).cast(f.type)
                                 for f in schema], schema=schema)


def pending_table(sid: str, part: int, pending: pa.Table) -> pa.Table:
    """A shard's pending offsets (`committed.SCHEMA` rows, the producer in `producer_id`) as `pending_offsets`
    rows."""
    n = pending.num_rows
    columns = {"snapshot_id": pa.repeat(sid, n), "offsets_partition": pa.repeat(part, n),
               "leader_epoch": _unset(pending.column("leader_epoch")),
               "commit_timestamp": pending.column("commit_timestamp").cast(pa.timestamp("ms", tz="UTC"))}
    schema = table_schema("pending_offsets")
    return pa.Table.from_arrays([(columns[f.name] if f.name in columns else pending.column(f.name)).cast(f.type)
                                 for f in schema], schema=schema)


def _group_base(sid: str, gid: str, part: int, n: int) -> Row:
    return {"snapshot_id": sid, "group_id": gid, "offsets_partition": part,
            "expected_offsets_partition": partition_for(gid, n)}


def simple_group_row(sid: str, gid: str, part: int, n: int, load_time_ms: int | None) -> Row:
    """The one place a simple group is described: classic, no protocol, generation 0, Empty since the load."""
    return {**_group_base(sid, gid, part, n), "group_type": "classic", "protocol_type": None,
            "generation": SimpleGroup.generation, "protocol": None, "leader": None, "state": classic_group_state(()),
            "current_state_timestamp": load_time_ms,
            "member_count": 0, "record_offset": None, "assignment_epoch": None, "subscribed_topics": [],
            "is_simple": True, "unresolved_topic_ids": None}


def _classic_group_out(sid: str, part: int, n: int, g: ClassicGroup, modern: bool) -> tuple[Row, list[Row]]:
    """`readGroupMessageValue` + `GroupMetadata.loadGroup` (legacy) / `replay(GroupMetadataKey, …)` (modern)."""
    protocol_type = g.protocol_type or None
    # GroupMetadata.computeSubscribedTopics: only the consumer protocol's subscriptions are read
    subscribed = None
    if protocol_type == "consumer":
        if not g.members:
            subscribed = []
        elif g.protocol is not None and all(m.subscribed_topics is not None for m in g.members):
            subscribed = sorted({t for m in g.members for t in m.subscribed_topics})
    leader = g.leader
    group = {
        **_group_base(sid, g.group_id, part, n), "group_type": "classic", "protocol_type": protocol_type,
        "generation": g.generation, "protocol": g.protocol, "leader": leader, "state": g.state,
        "current_state_timestamp": _none_if(g.current_state_timestamp), "member_count": len(g.members),
        "record_offset": g.record_offset, "assignment_epoch": None, "subscribed_topics": subscribed,
        "is_simple": False, "unresolved_topic_ids": None,
    }
    out = []
    for m in g.members:
        rebalance = m.rebalance_timeout_ms
        if modern:
            if rebalance is None or rebalance == -1:
                rebalance = m.session_timeout_ms
        elif g.value_version == 0 or rebalance is None:
            rebalance = m.session_timeout_ms
        out.append({
            "snapshot_id": sid, "group_id": g.group_id, "member_id": m.member_id,
            "group_instance_id": m.group_instance_id, "client_id": m.client_id, "client_host": m.client_host,
            "session_timeout_ms": m.session_timeout_ms, "rebalance_timeout_ms": rebalance,
            "subscribed_topics": m.subscribed_topics,
            "assigned_partitions": flat_topic_partitions(m.assigned_partitions),
            "group_type": "classic", "offsets_partition": part, "rack_id": m.rack_id,
            "subscribed_topic_regex": None, "server_assignor": None, "member_epoch": None,
            "previous_member_epoch": None, "member_state": None, "target_partitions": None,
            "partitions_pending_revocation": None, "is_leader": m.member_id == leader,
        })
    return group, out


def _member_state(code: int | None, streams: bool = False) -> str | None:
    if code is None:
        return None
    if streams:
        return STREAMS_MEMBER_STATES.get(code, "UNKNOWN")
    return MEMBER_STATES.get(code, f"UNKNOWN({code})")


def _consumer_group_out(sid: str, part: int, n: int, g: ConsumerGroup,
                        names: dict[str, str]) -> tuple[Row, list[Row]]:
    """A `ConsumerGroup` as `ConsumerGroupDescribe` shows it; state per `ConsumerGroup.maybeUpdateGroupState` (a
    share or streams group as `ShareGroupDescribe` / `StreamsGroupDescribe` do: its type is its protocol type)."""
    unresolved: set[str] = set()

    def resolve(tps: Sequence[TopicIdPartitions]) -> list[tuple[str, int]]:
        out = []
        for tp in tps:
            name = names.get(tp["topic_id"])
            if name is None:
                unresolved.add(tp["topic_id"])
            out.extend((name if name is not None else tp["topic_id"], p) for p in (tp["partitions"] or []))
        return sorted(out)

    members_out = []
    for mid, m in g.members.items():
        f = m.metadata or MemberMetadata()
        target = g.targets.get(mid)
        members_out.append({
            "snapshot_id": sid, "group_id": g.group_id, "member_id": mid,
            "group_instance_id": f.group_instance_id, "client_id": f.client_id, "client_host": f.client_host,
            "session_timeout_ms": f.session_timeout_ms, "rebalance_timeout_ms": f.rebalance_timeout_ms,
            "subscribed_topics": f.subscribed_topics,
            "assigned_partitions": resolve(m.assigned), "group_type": g.group_type, "offsets_partition": part,
            "rack_id": f.rack_id, "subscribed_topic_regex": f.subscribed_topic_regex,
            "server_assignor": f.server_assignor, "member_epoch": m.member_epoch,
            "previous_member_epoch": m.previous_member_epoch,
            "member_state": _member_state(m.state, isinstance(g, StreamsGroup)),
            "target_partitions": None if target is None else resolve(target),
            "partitions_pending_revocation": resolve(m.pending_revocation), "is_leader": None,
        })
    state, protocol = g.state, g.assignor
    subscribed = {t for m in g.members.values() if m.metadata for t in (m.metadata.subscribed_topics or [])}
    subscribed |= {t for topics in g.regexes.values() for t in topics}
    if isinstance(g, StreamsGroup):  # its members name no topics: its topology does (`isSubscribedToTopic`)
        subscribed = set(g.source_topics) if g.has_topology else None
    group = {
        **_group_base(sid, g.group_id, part, n), "group_type": g.group_type, "protocol_type": g.group_type,
        "generation": g.group_epoch, "protocol": protocol, "leader": None, "state": state,
        "current_state_timestamp": None, "member_count": len(g.members), "record_offset": g.last_offset,
        "assignment_epoch": g.assignment_epoch, "subscribed_topics": None if subscribed is None else sorted(subscribed),
        "is_simple": False,
        "unresolved_topic_ids": len(unresolved),
    }
    return group, members_out


def shard_rows(st: ShardState, options: ReplayOptions, n: int, names: dict[str, str]) -> dict[str, Any]:
    """The snapshot's rows of one loaded shard, per replay table (`REPLAY_TABLES`): the engine's dicts, and the
    `OFFSET_TABLES` as Arrow tables of the contract's columns. `n`: the offsets topic's partition count (the
    placement check); `names`: the run's topic id -> name map."""
    sid, part = options.snapshot_id, st.partition
    out: dict[str, Any] = {t: [] for t in REPLAY_TABLES}
    live = st.groups.groups
    committed = st.offsets.table()
    group_ids = committed.column("group_id")
    loaded = pc.is_in(group_ids, value_set=pa.array([gid for gid, g in live.items() if is_live(g)], pa.string()))
    empty = pc.invert(loaded)
    if st.modern:  # a removed group's offsets are invisible
        empty = pc.and_(empty, pc.is_in(group_ids, value_set=pa.array(list(live), pa.string())))
    out["loaded_offsets"] = offsets_table(sid, part, committed.filter(loaded), True)
    empty = committed.filter(empty)
    out["empty_group_offsets"] = offsets_table(sid, part, empty, False)
    offsets_groups = set(empty.column("group_id").unique().to_pylist())
    out["pending_offsets"] = pending_table(sid, part, st.pending)
    offsets_groups |= groups_of(st.pending)
    for g in live.values():
        if isinstance(g, ClassicGroup):
            group, members = _classic_group_out(sid, part, n, g, st.modern)
        elif isinstance(g, ConsumerGroup):
            group, members = _consumer_group_out(sid, part, n, g, names)
        else:
            continue
        out["loaded_groups"].append(group)
        out["group_members"].extend(members)
    # old loader: a new Empty group for every id in emptyGroupOffsets ∪ pendingEmptyGroupOffsets;
    # new coordinator: the simple groups created while replaying offset values
    simple = ({gid for gid, g in live.items() if isinstance(g, SimpleGroup)} if st.modern
              else {gid for gid in offsets_groups if not is_live(live.get(gid))})
    for gid in sorted(simple):
        out["loaded_groups"].append(simple_group_row(sid, gid, part, n, options.load_time_ms))
    for gid, r in st.groups.last_group_record.items():
        if r.is_tombstone and not is_live(live.get(gid)):
            out["removed_groups"].append({
                "snapshot_id": sid, "group_id": gid, "offsets_partition": part,
                "tombstone_record_offset": r.offset, "tombstone_timestamp": _none_if(r.timestamp),
                "group_type": group_type(r.key_type)})
    out["group_history"] = named_group_history(group_history_table(st.groups.history or (), sid, part), names)
    return out


def group_history_table(events: Sequence[GroupEvent], sid: str, part: int) -> pa.Table:
    """The `group_history` rows of a shard's group events (`groups.GroupStore.history`), a KIP-848 member's
    partitions still by topic id: made where the events are, before the run's topic names are known
    (`named_group_history`). Column by column: an event is a tuple of the table's columns but the shard's."""
    schema = table_schema("group_history")
    n = len(events)
    columns = dict(zip(GroupEvent._fields, zip(*events))) if n else dict.fromkeys(GroupEvent._fields, ())
    shard = {"snapshot_id": pa.scalar(sid, pa.string()), "offsets_partition": pa.scalar(part, pa.int32())}
    arrays = [pa.repeat(shard[f.name], n) if f.name in shard
              else _timestamps(columns[f.name]) if pa.types.is_timestamp(f.type)
              else _flat_assignments(pa.array(columns[f.name], _EVENT_MEMBERS), f.type)
              if f.name == "member_assignments" else pa.array(columns[f.name], f.type) for f in schema]
    return pa.Table.from_arrays(arrays, schema=schema)


#: `GroupEvent.member_assignments` as Arrow: each member's partitions as decoded, a classic member's by topic, a
#: consumer member's by topic id (`groups.member_assignments`)
_EVENT_MEMBERS = pa.list_(pa.struct([*(f for f in HISTORY_MEMBER if f.name != "assigned_partitions"), pa.field(
    "assigned_partitions", pa.list_(pa.struct([("topic", pa.string()), ("topic_id", pa.string()),
                                                ("partitions", pa.list_(pa.int32()))])))]))


def _flat_assignments(lists: pa.ListArray, to: pa.ListType) -> pa.ListArray:
    """`_EVENT_MEMBERS` as the history's members (`to`, a list of `HISTORY_MEMBER`): each member's partitions as
    (topic or topic id, partition) pairs, sorted. Column by column: row by row, each pair would be a Python tuple
    made, sorted and converted, for every partition a member holds in every event that names it."""
    members = pc.list_flatten(lists)
    fields = dict(zip(members.type.names, members.flatten()))
    assigned = fields["assigned_partitions"]
    entries = pc.list_flatten(assigned)
    topic, topic_id, partitions = entries.flatten()
    partition = pc.list_flatten(partitions)
    entry = pc.list_parent_indices(partitions)
    owner = pc.take(pc.list_parent_indices(assigned), entry)
    topic = pc.take(pc.coalesce(topic, topic_id), entry)
    member = to.value_type
    pairs_type = member.field("assigned_partitions").type
    pairs = _sorted_pairs(owner, topic, partition, pairs_type.value_type)
    offsets = np.zeros(len(assigned) + 1, np.int32)
    np.cumsum(np.bincount(owner.to_numpy(zero_copy_only=False), minlength=len(assigned)), out=offsets[1:])
    fields["assigned_partitions"] = pa.ListArray.from_arrays(
        pa.array(offsets), pairs, type=pairs_type, mask=assigned.is_null() if assigned.null_count else None)
    members = pa.StructArray.from_arrays(list(fields.values()), fields=list(member),
                                         mask=members.is_null() if members.null_count else None)
    return _rebuilt_list(lists, members, to)


def _sorted_pairs(owner: pa.Array, topic: pa.Array, partition: pa.Array, pair: pa.StructType) -> pa.StructArray:
    """The (topic, partition) `pair`s of members (`owner`: each pair's member), by member, then topic, then
    partition: each member's pairs in the history's order, its members' in theirs."""
    order = pc.sort_indices(pa.table({"m": owner, "t": topic, "p": partition}),
                            [("m", "ascending"), ("t", "ascending"), ("p", "ascending")])
    return pa.StructArray.from_arrays([topic.take(order), partition.take(order)], fields=list(pair))


def named_group_history(table: pa.Table, names: dict[str, str]) -> pa.Table:
    """`group_history_table`'s rows with each KIP-848 (or share) member's topic ids named by the run's map (the id
    itself where the log never named it, as `group_members` does) and its partitions sorted by topic name again.
    Column by column: a log's group history is a row per group record."""
    column = table.column("member_assignments")
    named = pc.and_(pc.is_in(table.column("group_type"), pa.array(["consumer", "share"])), pc.is_valid(column))
    if not names or not pc.any(named).as_py():
        return table
    lists = column.combine_chunks()
    members = pc.list_flatten(lists)
    member_named = pc.take(named.combine_chunks(), pc.list_parent_indices(lists))
    fields = dict(zip(members.type.names, members.flatten()))
    assigned = fields["assigned_partitions"]
    pairs = pc.list_flatten(assigned)
    owner = pc.list_parent_indices(assigned)
    topic, partition = pairs.flatten()
    ids = pa.array(list(names), pa.string())
    renamed = pc.take(pa.array(list(names.values()), pa.string()), pc.index_in(topic, value_set=ids))
    topic = pc.if_else(pc.take(member_named, owner), pc.coalesce(renamed, topic), topic)
    fields["assigned_partitions"] = _rebuilt_list(assigned, _sorted_pairs(owner, topic, partition, pairs.type))
    members = pa.StructArray.from_arrays(list(fields.values()), fields=list(members.type), mask=members.is_null())
    at = table.schema.get_field_index("member_assignments")
    return table.set_column(at, table.schema.field(at), _rebuilt_list(lists, members))


def _rebuilt_list(lists: pa.ListArray, values: pa.Array, type: pa.DataType | None = None) -> pa.ListArray:
    """`lists` (each list's length and validity) over new `values` (`type`: a list of theirs, where their type is
    not the old values'): `pc.list_flatten(lists)` changed in place."""
    lengths = pc.fill_null(pc.list_value_length(lists), 0).to_numpy(zero_copy_only=False)
    offsets = np.zeros(len(lengths) + 1, np.int32)
    np.cumsum(lengths, out=offsets[1:])
    return pa.ListArray.from_arrays(pa.array(offsets), values, type=type or lists.type,
                                    mask=lists.is_null() if lists.null_count else None)


#: The decoded columns `offset_commits_table` reads.
HISTORY_READS = ("record_kind", "offsets_partition", "offset", "group_id", "topic", "partition", "committed_offset",
                 "commit_timestamp", "is_tombstone", "producer_id", "leader_epoch", "metadata", "timestamp",
                 "expire_timestamp", "topic_id", "producer_epoch", "is_transactional", "batch_first_offset",
                 "batch_timestamp")


def offset_commits_table(rows: pa.Table, decided: dict[str, pa.Array], snapshot_id: str) -> pa.Table:
    """The history (`offset_commits`) of the offset-commit records among `rows` (decoded rows the shards were
    loaded from, in log order per offsets partition), column by column; `decided` (`offset_metadata.Decisions.own`,
    in the order of those records) is what each did."""
    # the columns first: a filter copies every column it is given (and none when `rows` are offset commits only)
    commits = rows.select(list(HISTORY_READS))
    picked = is_offset_commit(rows)
    if rows.num_rows and not pc.all(picked).as_py():
        commits = commits.filter(picked)
    n = commits.num_rows
    if any(len(v) != n for v in decided.values()):
        raise ValueError("the decisions are not those of the rows' offset commits")

    def without(name: str, sentinel: int = -1):
        v = commits.column(name)
        return pc.if_else(pc.fill_null(pc.equal(v, sentinel), False), pa.nulls(n, v.type), v)

    def timestamp(v):
        return v.cast(pa.timestamp("ms", tz="UTC")).cast(pa.timestamp("us", tz="UTC"))

    columns = {
        "offsets_partition": commits.column("offsets_partition"), "record_offset": commits.column("offset"),
        "group_id": commits.column("group_id"), "topic": commits.column("topic"),
        "partition": commits.column("partition"), "committed_offset": commits.column("committed_offset"),
        "commit_timestamp": timestamp(commits.column("commit_timestamp")),
        "is_tombstone": commits.column("is_tombstone"),
        "producer_id": pc.fill_null(commits.column("producer_id"), -1), "txn_outcome": decided["txn_outcome"],
        "leader_epoch": without("leader_epoch"), "metadata": commits.column("metadata"),
        "record_timestamp": timestamp(without("timestamp")),
        "snapshot_id": pa.repeat(pa.scalar(snapshot_id, pa.string()), n),
        "expire_timestamp": timestamp(without("expire_timestamp")), "topic_id": commits.column("topic_id"),
        "producer_epoch": commits.column("producer_epoch"),
        "is_transactional": pc.fill_null(commits.column("is_transactional"), False),
        "batch_first_offset": pc.coalesce(commits.column("batch_first_offset"), commits.column("offset")),
        "txn_marker_offset": decided["txn_marker_offset"],
        "txn_marker_timestamp": timestamp(decided["txn_marker_timestamp"]),
        "applied_offset": decided["applied_offset"],
        "applied_timestamp": timestamp(decided["applied_timestamp"]),
        "batch_timestamp": timestamp(without("batch_timestamp")),
    }
    schema = table_schema("offset_commits")
    return once_per_record(pa.Table.from_arrays([columns[f.name].cast(f.type) for f in schema], schema=schema))


def once_per_record(history: pa.Table) -> pa.Table:
    """`history` (`offset_commits` rows in record order per offsets partition) with each (offsets partition, record
    offset) once: an input that holds a record twice (overlapping files, a dump's conflicting rows) keeps the row
    with the most decided `txn_outcome` (`schemas.tables.outcome_rank`), the other columns, ascending with nulls
    last, breaking ties, so the choice does not depend on the order the copies came in."""
    part, offset = history.column("offsets_partition"), history.column("record_offset")
    if history.num_rows < 2:
        return history
    p, o = part.to_numpy(zero_copy_only=False), offset.to_numpy(zero_copy_only=False)
    if not np.any((p[:-1] == p[1:]) & (o[:-1] == o[1:])):
        return history
    keys = ["offsets_partition", "record_offset"]
    ranked = history.append_column("_decided", pc.negate(outcome_rank(history.column("txn_outcome"))))
    order = [(c, "ascending", "at_end") for c in [*keys, "_decided"]] + [
        (c, "ascending", "at_end") for c in history.column_names if c not in keys]
    ranked = ranked.sort_by(order)
    p, o = (ranked.column(k).to_numpy(zero_copy_only=False) for k in keys)
    first = np.ones(len(p), dtype=bool)
    first[1:] = (p[1:] != p[:-1]) | (o[1:] != o[:-1])
    return ranked.filter(pa.array(first)).drop_columns(["_decided"])


def decided_of(partitions, offsets, decided: pa.Table, columns) -> dict[str, pa.ChunkedArray]:
    """Per record (offsets partition, record offset: Arrow columns), `columns` of its row in `decided` (a
    `Decisions.carried` table), null where it has none. A join does not keep row order, so only the keys and the
    row number go through it and the values are placed back by row number (no sort of the records)."""
    n = len(partitions)
    if not decided.num_rows:
        return {c: pa.nulls(n, DECIDED_TYPES[c]) for c in columns}
    keyed = pa.table({"offsets_partition": partitions, "offset": offsets,
                      "__row": pa.array(np.arange(n, dtype=np.int64))})
    found = keyed.join(decided, keys=["offsets_partition", "offset"], join_type="inner")
    where = np.full(n, -1, dtype=np.int64)
    where[found.column("__row").to_numpy()] = np.arange(found.num_rows, dtype=np.int64)
    at = pa.array(where, mask=where < 0)
    return {c: found.column(c).take(at) for c in columns}


def open_transactions(pending_offsets) -> int:
    """Open (producer, offsets partition) transactions at the end of the log, from the `pending_offsets` table."""
    keys = pending_offsets.select(["offsets_partition", "producer_id"])
    return keys.group_by(["offsets_partition", "producer_id"]).aggregate([]).num_rows


def misplaced_count(loaded_groups) -> int:
    """Groups found in an offsets partition other than abs(javaHashCode(group)) % n, from `loaded_groups`."""
    expected, found = loaded_groups.column("expected_offsets_partition"), loaded_groups.column("offsets_partition")
    return pc.sum(pc.fill_null(pc.not_equal(expected, found), False).cast("int64")).as_py() or 0

