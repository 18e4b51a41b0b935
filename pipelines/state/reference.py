"""Sequential reference replay: a line-by-line port of Kafka's loaders over decoded rows, the oracle for the Spark replay.

Pure Python, no Spark. Slow on purpose and easy to check against Kafka's source:

* legacy: `GroupMetadataManager.doLoadGroupsAndOffsets` + `readGroupMessageValue` / `GroupMetadata.loadGroup`
  (core, Kafka 0.11 - 3.9; spec §5.1, §5.2);
* modern: `OffsetMetadataManager.replay` / `replayEndTransactionMarker` and `GroupMetadataManager.replay` for
  GroupMetadata and the KIP-848 record types 3-8, 16 (group-coordinator, Kafka 3.8 - 4.x; spec §5.3, §2.9).

Rows of different offsets partitions are independent (one coordinator shard each); each is replayed on its own.
Timestamps in the output are epoch milliseconds (ints), `None` where Kafka has none.

Decisions where Kafka would fail the load or never looked (documented once here, mirrored by `replay.py`):

* KIP-848 records (types 3-8, 16) are replayed with the new coordinator's rules under both semantics; the old
  coordinator skipped them as unknown types (3.4.1+), but a rebuild of a mixed log should not lose those groups.
  Under legacy semantics a live consumer group counts as the group of its offsets.
* A KIP-848 record for a non-simple classic group (Kafka: IllegalStateException, load fails) is skipped.
  Tombstones of types 4-8, 16 act only on an existing consumer group; a type-3 tombstone removes a consumer group
  or a simple(-looking) classic group and is ignored otherwise. Tombstone preconditions (§2.9) are not enforced.
* A duplicate `groupInstanceId` in one GroupMetadata value (Kafka: fatal) is loaded as is.
* Topic ids in consumer-group assignments are resolved with every ConsumerGroupPartitionMetadata (type 4) value in
  the input, of any group and partition: topic ids are cluster-wide. Unresolved ids stay as the topic name.
* Share and streams group records are not rebuilt; error / unknown rows are skipped (quarantined elsewhere).
* `removed_groups`: ids whose latest type-2/type-3 record is a tombstone and that hold no live classic or consumer
  group at the end (a simple group holding only offsets may still exist for them).
"""
from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any, Iterable

from pipelines.state.options import DEFAULT_NUM_OFFSETS_PARTITIONS, REPLAY_TABLES, ReplayOptions

Row = dict[str, Any]
Key = tuple[str, str, int]  # GroupTopicPartition: (group, topic, partition)


MEMBER_STATES = {0: "STABLE", 1: "UNREVOKED_PARTITIONS", 2: "UNRELEASED_PARTITIONS", 127: "UNKNOWN"}
SKIPPED_KINDS = ("error", "unknown")


# ---------------------------------------------------------------------------------------------------------------
# Group -> partition mapping (spec §4)
# ---------------------------------------------------------------------------------------------------------------
def java_hash_code(s: str) -> int:
    """`String.hashCode()`: 31*h + c over UTF-16 code units, int32 wrap-around."""
    data = s.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= (1 << 31) else h


def partition_for(group_id: str, num_partitions: int) -> int:
    """`GroupMetadataManager.partitionFor` / `GroupCoordinatorService.partitionFor`: Utils.abs(hashCode) % n."""
    h = java_hash_code(group_id)
    return (0 if h == -(1 << 31) else abs(h)) % num_partitions


def num_offsets_partitions(rows: Iterable[Row], options: ReplayOptions) -> int:
    if options.num_partitions:
        return options.num_partitions
    top = max((r["offsets_partition"] for r in rows if r.get("offsets_partition") is not None), default=-1)
    return max(top + 1, DEFAULT_NUM_OFFSETS_PARTITIONS)


# ---------------------------------------------------------------------------------------------------------------
# Small value helpers
# ---------------------------------------------------------------------------------------------------------------
def _none_if(v, sentinel=-1):
    return None if v is None or v == sentinel else v


def _pid(row: Row) -> int:
    return -1 if row.get("producer_id") is None else row["producer_id"]


def _appended_batch_offset(row: Row) -> int:
    """The old loader's `appendedBatchOffset`: offset of the first record iterated in the batch (§5.1)."""
    return row["offset"] if row.get("batch_first_offset") is None else row["batch_first_offset"]


def _is_first_record_of_batch(row: Row) -> bool:
    return row.get("batch_first_offset") is None or row["offset"] == row["batch_first_offset"]


def _flatten_topic_partitions(tps) -> list[tuple[str, int]] | None:
    if tps is None:
        return None
    return sorted((tp["topic"], p) for tp in tps for p in (tp["partitions"] or []))


def _key(row: Row) -> Key:
    return (row["group_id"], row["topic"], row["partition"])


# ---------------------------------------------------------------------------------------------------------------
# Groups: GroupMetadataManager.replay (types 2, 3-8, 16)
# ---------------------------------------------------------------------------------------------------------------
@dataclass
class ClassicGroup:
    """A group loaded from a GroupMetadataValue (`GroupMetadata.loadGroup` / new `ClassicGroup`)."""

    row: Row

    @property
    def simple_like(self) -> bool:
        """`ClassicGroup.isSimpleGroup`: no protocol type and empty; consumer records may replace it."""
        return not self.row.get("protocol_type") and not (self.row.get("members") or [])


@dataclass
class SimpleGroup:
    """The empty, protocol-less classic group Kafka creates for offsets without a group."""

    group_id: str


@dataclass
class ConsumerMember:
    fields: Row | None = None  # the last type-5 value
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: int = 0  # STABLE: ConsumerGroupMember.Builder's default
    assigned: list = field(default_factory=list)  # TopicIdPartitions
    pending_revocation: list = field(default_factory=list)


@dataclass
class ConsumerGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    targets: dict[str, list] = field(default_factory=dict)
    regexes: dict[str, list] = field(default_factory=dict)
    last_offset: int = -1


class GroupStore:
    """The `groups` map of one coordinator shard, replayed record by record."""

    def __init__(self) -> None:
        self.groups: dict[str, ClassicGroup | SimpleGroup | ConsumerGroup] = {}
        self.last_group_record: dict[str, Row] = {}  # latest type-2 / type-3 record per group id
        self.classic_offset: dict[str, int] = {}

    @staticmethod
    def _replaceable(g) -> bool:
        return isinstance(g, SimpleGroup) or (isinstance(g, ClassicGroup) and g.simple_like)

    def replay_group_metadata(self, row: Row) -> None:
        """`replay(GroupMetadataKey, GroupMetadataValue)`: a tombstone removes any group with the id, a value
        replaces it (old loader: `loadedGroups` / `removedGroups`, same outcome)."""
        gid = row["group_id"]
        self.last_group_record[gid] = row
        if row["is_tombstone"]:
            self.groups.pop(gid, None)
        else:
            self.groups[gid] = ClassicGroup(row)

    def maybe_create_simple_group(self, gid: str) -> None:
        """`OffsetMetadataManager.replay`: an offset value for an unknown group creates a simple classic group."""
        if gid not in self.groups:
            self.groups[gid] = SimpleGroup(gid)

    def _consumer_group(self, gid: str, create: bool) -> ConsumerGroup | None:
        """`getOrMaybeCreatePersistedConsumerGroup`: a simple classic group is silently replaced."""
        g = self.groups.get(gid)
        if isinstance(g, ConsumerGroup):
            return g
        if not create:
            return None
        if g is None or self._replaceable(g):
            g = self.groups[gid] = ConsumerGroup(gid)
            return g
        return None  # Kafka: IllegalStateException "not a consumer group" (load fails); skipped here

    def replay_consumer_record(self, row: Row) -> None:
        """`GroupMetadataManager.replay` for ConsumerGroup* keys (types 3-8, 16)."""
        kt, gid, off = row["key_type"], row["group_id"], row["offset"]
        if kt == 3:
            self.last_group_record[gid] = row
        if row["is_tombstone"]:
            if kt == 3:
                g = self.groups.get(gid)
                if isinstance(g, ConsumerGroup) or self._replaceable(g):
                    del self.groups[gid]
                return
            g = self._consumer_group(gid, create=False)
            if g is None:
                return  # unknown group: tombstone ignored
            g.last_offset = off
            mid = row.get("member_id")
            if kt == 5:
                g.members.pop(mid, None)
            elif kt == 6:
                g.assignment_epoch = -1
            elif kt == 7:
                g.targets.pop(mid, None)
            elif kt == 8:
                m = g.members.get(mid)
                if m is not None:  # unknown member: ignored
                    m.member_epoch = m.previous_member_epoch = -1
                    m.assigned, m.pending_revocation = [], []
            elif kt == 16:
                g.regexes.pop(row.get("regex"), None)
            return
        g = self._consumer_group(gid, create=True)
        if g is None:
            return
        g.last_offset = off
        mid = row.get("member_id")
        if kt == 3:
            g.group_epoch = row["group_epoch"]
        elif kt == 5:
            g.members.setdefault(mid, ConsumerMember()).fields = row
        elif kt == 6:
            g.assignment_epoch = row["assignment_epoch"]
        elif kt == 7:
            g.targets[mid] = list(row.get("assigned_partitions") or [])
        elif kt == 8:
            m = g.members.setdefault(mid, ConsumerMember())
            m.member_epoch, m.previous_member_epoch = row["member_epoch"], row["previous_member_epoch"]
            m.state = row["member_state"]
            m.assigned = list(row.get("assigned_partitions") or [])
            m.pending_revocation = list(row.get("partitions_pending_revocation") or [])
        elif kt == 16:
            g.regexes[row.get("regex")] = list(row.get("regex_topics") or [])
        # type 4 (partition metadata) only matters for topic-id resolution, done over the whole input


# ---------------------------------------------------------------------------------------------------------------
# One offsets partition
# ---------------------------------------------------------------------------------------------------------------
@dataclass
class PartitionState:
    partition: int
    groups: GroupStore
    offsets: dict[Key, Row]  # main committed-offsets map (value rows)
    pending: dict[int, dict[Key, Row]]  # producer id -> open transaction's offsets
    outcomes: dict[int, str | None]  # record offset -> txn outcome of every offset-commit row
    commit_rows: list[Row]
    modern: bool


def _replayable(rows: Iterable[Row], options: ReplayOptions) -> Iterable[Row]:
    for r in rows:
        if r.get("record_kind") in SKIPPED_KINDS:
            continue
        if options.until_offset is not None and r["offset"] > options.until_offset:
            continue
        if options.until_time_ms is not None and r.get("timestamp") is not None and r["timestamp"] > options.until_time_ms:
            continue
        yield r


def do_load_groups_and_offsets(partition: int, rows: Iterable[Row]) -> PartitionState:
    """`GroupMetadataManager.doLoadGroupsAndOffsets` (old coordinator, Kafka 0.11 - 3.9), one partition, log order.

    Offsets are kept with their `appendedBatchOffset` (first record iterated in the batch); a control batch
    (only its first record is read) ends the producer's pending map, installing it on COMMIT where the key is
    absent or the existing entry's batch is older.
    """
    groups = GroupStore()
    loaded: dict[Key, tuple[int, Row]] = {}
    pending: dict[int, dict[Key, tuple[int, Row]]] = {}
    open_rows: dict[int, list[Row]] = defaultdict(list)
    outcomes: dict[int, str | None] = {}
    commit_rows: list[Row] = []
    for row in rows:
        kind = row["record_kind"]
        if kind == "control":
            if not _is_first_record_of_batch(row):
                continue
            pid = _pid(row)
            committed = row.get("control_type") == "COMMIT"
            if committed:
                for k, (abo, r) in pending.get(pid, {}).items():
                    if k not in loaded or loaded[k][0] < abo:
                        loaded[k] = (abo, r)
            pending.pop(pid, None)  # COMMIT, ABORT or any other control type
            for r in open_rows.pop(pid, []):
                outcomes[r["offset"]] = "committed" if committed else "aborted"
        elif kind == "offset_commit":
            commit_rows.append(row)
            k, abo = _key(row), _appended_batch_offset(row)
            if row.get("is_transactional"):
                pid = _pid(row)
                txn = pending.setdefault(pid, {})
                open_rows[pid].append(row)
                if row["is_tombstone"]:
                    txn.pop(k, None)
                else:
                    txn[k] = (abo, row)
            else:
                outcomes[row["offset"]] = None
                if row["is_tombstone"]:
                    loaded.pop(k, None)
                else:
                    loaded[k] = (abo, row)
        elif kind == "group_metadata":
            groups.replay_group_metadata(row)
        elif kind == "consumer_group":
            groups.replay_consumer_record(row)
    for rs in open_rows.values():
        for r in rs:
            outcomes[r["offset"]] = "pending"
    return PartitionState(
        partition, groups, {k: r for k, (_, r) in loaded.items()},
        {pid: {k: r for k, (_, r) in m.items()} for pid, m in pending.items()}, outcomes, commit_rows, modern=False)


def replay_coordinator_shard(partition: int, rows: Iterable[Row]) -> PartitionState:
    """`CoordinatorLoaderImpl` + `GroupCoordinatorShard.replay` (new coordinator, Kafka 3.8 - 4.x), one partition.

    `OffsetMetadataManager.replay`: transactional = producerId != -1; any tombstone deletes the committed offset
    and drops the partition from every open transaction. `replayEndTransactionMarker`: COMMIT installs a pending
    offset only if its record offset is greater than the committed one's; ABORT discards. Control records other
    than COMMIT/ABORT are ignored.
    """
    groups = GroupStore()
    offsets: dict[Key, Row] = {}
    pending: dict[int, dict[Key, Row]] = {}
    open_rows: dict[int, list[Row]] = defaultdict(list)
    outcomes: dict[int, str | None] = {}
    commit_rows: list[Row] = []
    for row in rows:
        kind = row["record_kind"]
        if kind == "control":
            ctype = row.get("control_type")
            if ctype not in ("COMMIT", "ABORT"):
                continue
            pid = _pid(row)
            txn = pending.pop(pid, None)
            if ctype == "COMMIT" and txn:
                for k, r in txn.items():
                    if k not in offsets or r["offset"] > offsets[k]["offset"]:
                        offsets[k] = r
            for r in open_rows.pop(pid, []):
                outcomes[r["offset"]] = "committed" if ctype == "COMMIT" else "aborted"
        elif kind == "offset_commit":
            commit_rows.append(row)
            k, pid = _key(row), _pid(row)
            if pid != -1:
                open_rows[pid].append(row)
            else:
                outcomes[row["offset"]] = None
            if row["is_tombstone"]:
                offsets.pop(k, None)
                for txn in pending.values():
                    txn.pop(k, None)
            else:
                groups.maybe_create_simple_group(k[0])
                if pid == -1:
                    offsets[k] = row
                else:
                    pending.setdefault(pid, {})[k] = row
        elif kind == "group_metadata":
            groups.replay_group_metadata(row)
        elif kind == "consumer_group":
            groups.replay_consumer_record(row)
    for rs in open_rows.values():
        for r in rs:
            outcomes[r["offset"]] = "pending"
    return PartitionState(partition, groups, offsets, pending, outcomes, commit_rows, modern=True)


# ---------------------------------------------------------------------------------------------------------------
# Output rows (schemas/tables.py columns; timestamps in ms)
# ---------------------------------------------------------------------------------------------------------------
def _offset_out(sid: str, part: int, r: Row, has_group: bool) -> Row:
    return {
        "snapshot_id": sid, "group_id": r["group_id"], "topic": r["topic"], "partition": r["partition"],
        "offsets_partition": part, "committed_offset": r["committed_offset"],
        "leader_epoch": _none_if(r.get("leader_epoch")), "metadata": r.get("metadata"),
        "commit_timestamp": r.get("commit_timestamp"), "expire_timestamp": _none_if(r.get("expire_timestamp")),
        "record_offset": r["offset"], "has_group_metadata": has_group, "topic_id": r.get("topic_id"),
        "producer_id": _pid(r),
    }


def _pending_out(sid: str, part: int, pid: int, r: Row) -> Row:
    return {
        "snapshot_id": sid, "producer_id": pid, "group_id": r["group_id"], "topic": r["topic"],
        "partition": r["partition"], "committed_offset": r["committed_offset"], "record_offset": r["offset"],
        "offsets_partition": part, "producer_epoch": r.get("producer_epoch"),
        "leader_epoch": _none_if(r.get("leader_epoch")), "metadata": r.get("metadata"),
        "commit_timestamp": r.get("commit_timestamp"),
    }


def _group_base(sid: str, gid: str, part: int, n: int) -> Row:
    return {"snapshot_id": sid, "group_id": gid, "offsets_partition": part,
            "expected_offsets_partition": partition_for(gid, n)}


def _simple_group_out(sid: str, gid: str, part: int, n: int, load_time_ms: int | None) -> Row:
    return {**_group_base(sid, gid, part, n), "group_type": "classic", "protocol_type": None, "generation": 0,
            "protocol": None, "leader": None, "state": "Empty", "current_state_timestamp": load_time_ms,
            "member_count": 0, "record_offset": None, "assignment_epoch": None, "subscribed_topics": [],
            "is_simple": True, "unresolved_topic_ids": None}


def _classic_group_out(sid: str, part: int, n: int, g: ClassicGroup, modern: bool) -> tuple[Row, list[Row]]:
    """`readGroupMessageValue` + `GroupMetadata.loadGroup` (legacy) / `replay(GroupMetadataKey, …)` (modern)."""
    r = g.row
    members = list(r.get("members") or [])
    leader = r.get("leader")
    if leader is None and members:
        leader = members[0]["member_id"]  # `add`: the first member becomes leader when none is stored
    protocol_type = r.get("protocol_type") or None
    # GroupMetadata.computeSubscribedTopics: only the consumer protocol's subscriptions are read
    subscribed = None
    if protocol_type == "consumer":
        if not members:
            subscribed = []
        elif r.get("protocol") is not None and all(m.get("subscribed_topics") is not None for m in members):
            subscribed = sorted({t for m in members for t in m["subscribed_topics"]})
    group = {
        **_group_base(sid, r["group_id"], part, n), "group_type": "classic", "protocol_type": protocol_type,
        "generation": r.get("generation"), "protocol": r.get("protocol"), "leader": leader,
        "state": "Stable" if members else "Empty",
        "current_state_timestamp": _none_if(r.get("current_state_timestamp")), "member_count": len(members),
        "record_offset": r["offset"], "assignment_epoch": None, "subscribed_topics": subscribed,
        "is_simple": False, "unresolved_topic_ids": None,
    }
    out = []
    for m in members:
        rebalance = m.get("rebalance_timeout_ms")
        if modern:
            if rebalance is None or rebalance == -1:
                rebalance = m.get("session_timeout_ms")
        elif r.get("value_version") == 0 or rebalance is None:
            rebalance = m.get("session_timeout_ms")
        out.append({
            "snapshot_id": sid, "group_id": r["group_id"], "member_id": m["member_id"],
            "group_instance_id": m.get("group_instance_id"), "client_id": m.get("client_id"),
            "client_host": m.get("client_host"), "session_timeout_ms": m.get("session_timeout_ms"),
            "rebalance_timeout_ms": rebalance, "subscribed_topics": m.get("subscribed_topics"),
            "assigned_partitions": _flatten_topic_partitions(m.get("assigned_partitions")),
            "group_type": "classic", "offsets_partition": part, "rack_id": m.get("subscription_rack_id"),
            "subscribed_topic_regex": None, "server_assignor": None, "member_epoch": None,
            "previous_member_epoch": None, "member_state": None, "target_partitions": None,
            "partitions_pending_revocation": None, "is_leader": m["member_id"] == leader,
        })
    return group, out


def _member_state(code: int | None) -> str | None:
    if code is None:
        return None
    return MEMBER_STATES.get(code, f"UNKNOWN({code})")


def _consumer_group_out(sid: str, part: int, n: int, g: ConsumerGroup,
                        topic_names: dict[str, str]) -> tuple[Row, list[Row]]:
    """A `ConsumerGroup` as `ConsumerGroupDescribe` shows it; state per `ConsumerGroup.maybeUpdateGroupState`."""
    unresolved: set[str] = set()

    def resolve(tps) -> list[tuple[str, int]]:
        out = []
        for tp in tps:
            name = topic_names.get(tp["topic_id"])
            if name is None:
                unresolved.add(tp["topic_id"])
            out.extend((name if name is not None else tp["topic_id"], p) for p in (tp["partitions"] or []))
        return sorted(out)

    members_out = []
    for mid, m in g.members.items():
        f = m.fields or {}
        target = g.targets.get(mid)
        members_out.append({
            "snapshot_id": sid, "group_id": g.group_id, "member_id": mid,
            "group_instance_id": f.get("group_instance_id"), "client_id": f.get("client_id"),
            "client_host": f.get("client_host"), "session_timeout_ms": f.get("session_timeout_ms"),
            "rebalance_timeout_ms": f.get("rebalance_timeout_ms"), "subscribed_topics": f.get("subscribed_topics"),
            "assigned_partitions": resolve(m.assigned), "group_type": "consumer", "offsets_partition": part,
            "rack_id": f.get("rack_id"), "subscribed_topic_regex": f.get("subscribed_topic_regex"),
            "server_assignor": f.get("server_assignor"), "member_epoch": m.member_epoch,
            "previous_member_epoch": m.previous_member_epoch, "member_state": _member_state(m.state),
            "target_partitions": None if target is None else resolve(target),
            "partitions_pending_revocation": resolve(m.pending_revocation), "is_leader": None,
        })
    if not g.members:
        state = "Empty"
    elif g.group_epoch > g.assignment_epoch:
        state = "Assigning"
    elif any(not (m.state == 0 and m.member_epoch == g.assignment_epoch) for m in g.members.values()):
        state = "Reconciling"
    else:
        state = "Stable"
    assignors = Counter(m.fields.get("server_assignor") for m in g.members.values()
                        if m.fields and m.fields.get("server_assignor") is not None)
    protocol = min(assignors, key=lambda a: (-assignors[a], a)) if assignors else None
    subscribed = {t for m in g.members.values() if m.fields for t in (m.fields.get("subscribed_topics") or [])}
    subscribed |= {t for topics in g.regexes.values() for t in topics}
    group = {
        **_group_base(sid, g.group_id, part, n), "group_type": "consumer", "protocol_type": "consumer",
        "generation": g.group_epoch, "protocol": protocol, "leader": None, "state": state,
        "current_state_timestamp": None, "member_count": len(g.members), "record_offset": g.last_offset,
        "assignment_epoch": g.assignment_epoch, "subscribed_topics": sorted(subscribed), "is_simple": False,
        "unresolved_topic_ids": len(unresolved),
    }
    return group, members_out


def _topic_names(rows: Iterable[Row]) -> dict[str, str]:
    """topic id -> name from every type-4 value (the latest by log position wins)."""
    best: dict[str, tuple[tuple[int, int], str]] = {}
    for r in rows:
        if r.get("record_kind") == "consumer_group" and r.get("key_type") == 4 and not r["is_tombstone"]:
            pos = (r["offset"], r["offsets_partition"])
            for t in r.get("topics_metadata") or []:
                if t["topic_id"] not in best or best[t["topic_id"]][0] < pos:
                    best[t["topic_id"]] = (pos, t["topic_name"])
    return {tid: name for tid, (_, name) in best.items()}


def _commit_out(sid: str, part: int, r: Row, outcome: str | None) -> Row:
    return {
        "offsets_partition": part, "record_offset": r["offset"], "group_id": r["group_id"], "topic": r["topic"],
        "partition": r["partition"], "committed_offset": r.get("committed_offset"),
        "commit_timestamp": r.get("commit_timestamp"), "is_tombstone": r["is_tombstone"], "producer_id": _pid(r),
        "txn_outcome": outcome, "leader_epoch": _none_if(r.get("leader_epoch")), "metadata": r.get("metadata"),
        "record_timestamp": _none_if(r.get("timestamp")), "snapshot_id": sid,
    }


def replay_reference(rows: Iterable[Row], options: ReplayOptions,
                     states: dict[int, PartitionState] | None = None) -> dict[str, list[Row]]:
    """Replay decoded rows (log order within each offsets partition) into the snapshot tables, sequentially.
    `states`, when given, receives each offsets partition's `PartitionState` (the loaders' maps at the end)."""
    rows = list(rows)
    n = num_offsets_partitions(rows, options)
    kept = list(_replayable(rows, options))
    topic_names = _topic_names(kept)
    by_partition: dict[int, list[Row]] = defaultdict(list)
    for r in kept:
        by_partition[r["offsets_partition"]].append(r)
    sid = options.snapshot_id
    out: dict[str, list[Row]] = {t: [] for t in REPLAY_TABLES}
    for part in sorted(by_partition):
        load = replay_coordinator_shard if options.is_modern else do_load_groups_and_offsets
        st = load(part, by_partition[part])
        if states is not None:
            states[part] = st
        live = st.groups.groups
        # offsets: split into the groups' offsets and emptyGroupOffsets; modern hides offsets of missing groups
        offsets_groups: set[str] = set()
        for k, r in st.offsets.items():
            g = live.get(k[0])
            if isinstance(g, (ClassicGroup, ConsumerGroup)):
                out["loaded_offsets"].append(_offset_out(sid, part, r, True))
            elif g is not None or not st.modern:
                out["empty_group_offsets"].append(_offset_out(sid, part, r, False))
                offsets_groups.add(k[0])
        for pid, txn in st.pending.items():
            for k, r in txn.items():
                out["pending_offsets"].append(_pending_out(sid, part, pid, r))
                offsets_groups.add(k[0])
        for gid, g in live.items():
            if isinstance(g, ClassicGroup):
                group, members = _classic_group_out(sid, part, n, g, st.modern)
            elif isinstance(g, ConsumerGroup):
                group, members = _consumer_group_out(sid, part, n, g, topic_names)
            else:
                continue
            out["loaded_groups"].append(group)
            out["group_members"].extend(members)
        # old loader: a new Empty group for every id in emptyGroupOffsets ∪ pendingEmptyGroupOffsets;
        # new coordinator: the simple groups created while replaying offset values
        simple = ({gid for gid, g in live.items() if isinstance(g, SimpleGroup)} if st.modern
                  else {gid for gid in offsets_groups if gid not in live})
        for gid in sorted(simple):
            out["loaded_groups"].append(_simple_group_out(sid, gid, part, n, options.load_time_ms))
        for gid, r in st.groups.last_group_record.items():
            if r["is_tombstone"] and not isinstance(live.get(gid), (ClassicGroup, ConsumerGroup)):
                out["removed_groups"].append({
                    "snapshot_id": sid, "group_id": gid, "offsets_partition": part,
                    "tombstone_record_offset": r["offset"], "tombstone_timestamp": _none_if(r.get("timestamp")),
                    "group_type": "classic" if r["key_type"] == 2 else "consumer"})
        for r in st.commit_rows:
            out["offset_commits"].append(_commit_out(sid, part, r, st.outcomes.get(r["offset"])))
    return out
