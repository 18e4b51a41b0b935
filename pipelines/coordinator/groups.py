"""The groups of one coordinator shard: classic, simple and consumer (KIP-848) groups as types, and the `groups` map
that `GroupMetadataManager.replay` maintains record by record (types 2, 3-8, 16).

Decisions where Kafka would fail the load or never looked (spec §2.9, §5.3):

* KIP-848 records are replayed with the new coordinator's rules under both semantics; the old coordinator skipped
  them as unknown types (3.4.1+), but a rebuild of a mixed log should not lose those groups.
* A KIP-848 record for a non-simple classic group (Kafka: IllegalStateException, the load fails) is skipped.
  Tombstones of types 4-8, 16 act only on an existing consumer group; a type-3 tombstone removes a consumer group
  or a simple(-looking) classic group and is ignored otherwise. Tombstone preconditions are not enforced.
* A duplicate `groupInstanceId` in one GroupMetadata value (Kafka: fatal) is loaded as is.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

Row = dict[str, Any]


@dataclass(slots=True)
class ClassicMember:
    """A member of a classic group as its GroupMetadataValue stores it, with the consumer protocol's view of its
    subscription and assignment (`MemberMetadata`)."""

    member_id: str
    group_instance_id: str | None
    client_id: str | None
    client_host: str | None
    rebalance_timeout_ms: int | None
    session_timeout_ms: int | None
    subscribed_topics: list[str] | None
    assigned_partitions: list[Row] | None  # [{topic, partitions}], the consumer protocol's assignment
    rack_id: str | None

    @staticmethod
    def of(m: Row) -> "ClassicMember":
        return ClassicMember(m["member_id"], m.get("group_instance_id"), m.get("client_id"), m.get("client_host"),
                             m.get("rebalance_timeout_ms"), m.get("session_timeout_ms"), m.get("subscribed_topics"),
                             m.get("assigned_partitions"), m.get("subscription_rack_id"))


@dataclass(slots=True)
class ClassicGroup:
    """A group loaded from a GroupMetadataValue (`GroupMetadata.loadGroup` / the new coordinator's
    `ClassicGroup`)."""

    group_id: str
    protocol_type: str | None
    generation: int | None
    protocol: str | None
    stored_leader: str | None
    current_state_timestamp: int | None  # -1: none
    value_version: int | None
    record_offset: int
    members: list[ClassicMember]

    @staticmethod
    def of_record(row: Row) -> "ClassicGroup":
        """`readGroupMessageValue`: the group a GroupMetadataValue record stores."""
        return ClassicGroup(row["group_id"], row.get("protocol_type"), row.get("generation"), row.get("protocol"),
                            row.get("leader"), row.get("current_state_timestamp"), row.get("value_version"),
                            row["offset"], [ClassicMember.of(m) for m in row.get("members") or ()])

    @property
    def state(self) -> str:
        """`GroupMetadata.loadGroup` / the new coordinator's `ClassicGroup`: a loaded group is Empty without members,
        else Stable; no other state is ever restored."""
        return "Stable" if self.members else "Empty"

    @property
    def leader(self) -> str | None:
        """`GroupMetadata.add`: the first member becomes leader when none is stored."""
        if self.stored_leader is None and self.members:
            return self.members[0].member_id
        return self.stored_leader

    @property
    def is_simple_group(self) -> bool:
        """`ClassicGroup.isSimpleGroup`: no protocol type and empty; consumer records may replace it."""
        return not self.protocol_type and not self.members


@dataclass(slots=True)
class SimpleGroup:
    """The empty, protocol-less classic group Kafka creates for offsets without a group: the new coordinator when it
    replays an offset value of an unknown id, the old loader for every id of `emptyGroupOffsets`."""

    group_id: str


@dataclass(slots=True)
class MemberMetadata:
    """A KIP-848 member's ConsumerGroupMemberMetadataValue (type 5)."""

    group_instance_id: str | None
    client_id: str | None
    client_host: str | None
    session_timeout_ms: int | None
    rebalance_timeout_ms: int | None
    subscribed_topics: list[str] | None
    rack_id: str | None
    subscribed_topic_regex: str | None
    server_assignor: str | None

    @staticmethod
    def of(row: Row) -> "MemberMetadata":
        return MemberMetadata(row.get("group_instance_id"), row.get("client_id"), row.get("client_host"),
                              row.get("session_timeout_ms"), row.get("rebalance_timeout_ms"),
                              row.get("subscribed_topics"), row.get("rack_id"), row.get("subscribed_topic_regex"),
                              row.get("server_assignor"))


@dataclass(slots=True)
class ConsumerGroupMember:
    metadata: MemberMetadata | None = None  # the last ConsumerGroupMemberMetadataValue (type 5)
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: int = 0  # STABLE: ConsumerGroupMember.Builder's default
    assigned: list = field(default_factory=list)  # TopicIdPartitions (type 8)
    pending_revocation: list = field(default_factory=list)


@dataclass(slots=True)
class ConsumerGroup:
    """A KIP-848 group (`ConsumerGroup`): epochs, members, target assignments, resolved regexes."""

    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ConsumerGroupMember] = field(default_factory=dict)
    targets: dict[str, list] = field(default_factory=dict)
    regexes: dict[str, list] = field(default_factory=dict)
    last_offset: int = -1

    @property
    def state(self) -> str:
        """`ConsumerGroup.maybeUpdateGroupState`: Empty, Assigning, Reconciling or Stable."""
        if not self.members:
            return "Empty"
        if self.group_epoch > self.assignment_epoch:
            return "Assigning"
        if any(not (m.state == 0 and m.member_epoch == self.assignment_epoch) for m in self.members.values()):
            return "Reconciling"
        return "Stable"

    @property
    def assignor(self) -> str | None:
        """The server assignor most members name (ties: the smallest name); None when none names one."""
        counts: dict[str, int] = {}
        for m in self.members.values():
            a = m.metadata.server_assignor if m.metadata else None
            if a is not None:
                counts[a] = counts.get(a, 0) + 1
        return min(counts, key=lambda a: (-counts[a], a)) if counts else None


@dataclass(slots=True, frozen=True)
class GroupRecord:
    """Where a group id's latest type-2 / type-3 record is: what `removed_groups` reports of a tombstone."""

    offset: int
    timestamp: int | None
    key_type: int
    is_tombstone: bool

    @staticmethod
    def of(row: Row) -> "GroupRecord":
        return GroupRecord(row["offset"], row.get("timestamp"), row["key_type"], bool(row["is_tombstone"]))


Group = ClassicGroup | SimpleGroup | ConsumerGroup


def is_live(group: Group | None) -> bool:
    """A group record holds the id (a classic or consumer group), as opposed to nothing or a simple group."""
    return isinstance(group, (ClassicGroup, ConsumerGroup))


def member_ids(group: Group | None) -> set[str]:
    if isinstance(group, ClassicGroup):
        return {m.member_id for m in group.members}
    if isinstance(group, ConsumerGroup):
        return set(group.members)
    return set()


class GroupStore:
    """The `groups` map of one coordinator shard, replayed record by record. `history` (when kept) receives one
    event per group record (types 2-8, 16), with the group as it stands after it: a new classic generation, a
    consumer group's epochs, members joining, updated or leaving, assignments, deletions, ignored tombstones."""

    __slots__ = ("groups", "last_group_record", "history")

    def __init__(self, keep_history: bool = True) -> None:
        self.groups: dict[str, Group] = {}
        self.last_group_record: dict[str, GroupRecord] = {}  # latest type-2 / type-3 record per group id
        self.history: list[Row] | None = [] if keep_history else None

    def resumed(self) -> "GroupStore":
        """The store to go on loading from: the same groups (loading mutates them), the events of what is loaded
        from now on only."""
        store = GroupStore(keep_history=self.history is not None)
        store.groups, store.last_group_record = self.groups, self.last_group_record
        return store

    @staticmethod
    def union(stores: list["GroupStore"]) -> "GroupStore":
        """The groups of `stores`, which hold no id in common (the buckets of a split partition's groups,
        `coordinator.streamed.by_group`), with their events not yet taken."""
        out = GroupStore(keep_history=stores[0].history is not None)
        for s in stores:
            out.groups.update(s.groups)
            out.last_group_record.update(s.last_group_record)
            if out.history is not None and s.history:
                out.history.extend(s.history)
        return out

    def _record(self, event: str, row: Row, before: set[str]) -> None:
        if self.history is None:
            return
        g = self.groups.get(row["group_id"])
        after = member_ids(g)
        ts = row.get("timestamp")
        out = {"group_id": row["group_id"], "record_offset": row["offset"],
               "record_timestamp": None if ts is None or ts < 0 else ts,
               "group_type": "classic" if row["key_type"] == 2 else "consumer", "event": event,
               "generation": None, "assignment_epoch": None, "protocol": None, "leader": None, "state": None,
               "member_count": len(after), "members_joined": sorted(after - before),
               "members_left": sorted(before - after), "member_assignments": member_assignments(g, row),
               "record_json": record_json(row)}
        if isinstance(g, ClassicGroup):
            out.update(generation=g.generation, protocol=g.protocol, leader=g.leader, state=g.state)
        elif isinstance(g, ConsumerGroup):
            out.update(generation=g.group_epoch, assignment_epoch=g.assignment_epoch, protocol=g.assignor,
                       state=g.state)
        elif isinstance(g, SimpleGroup):
            out.update(generation=0, state="Empty")
        self.history.append(out)

    @staticmethod
    def _replaceable(g: Group | None) -> bool:
        return isinstance(g, SimpleGroup) or (isinstance(g, ClassicGroup) and g.is_simple_group)

    def replay_group_metadata(self, row: Row) -> None:
        """`replay(GroupMetadataKey, GroupMetadataValue)` (type 2): a tombstone removes any group with the id, a
        value replaces it (old loader: `loadedGroups` / `removedGroups`, same outcome)."""
        gid = row["group_id"]
        self.last_group_record[gid] = GroupRecord.of(row)
        before = member_ids(self.groups.get(gid))
        if row["is_tombstone"]:
            existed = self.groups.pop(gid, None) is not None
            self._record("deleted" if existed else "tombstone", row, before)
        else:
            self.groups[gid] = ClassicGroup.of_record(row)
            self._record("generation", row, before)

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

    def replay_consumer_group_record(self, row: Row) -> None:
        """`GroupMetadataManager.replay` for the ConsumerGroup* keys (types 3-8, 16), one method per record type."""
        before = member_ids(self.groups.get(row["group_id"]))
        kt = row["key_type"]
        if kt == 3:
            event = self.replay_consumer_group_metadata(row)
        else:
            g = self._consumer_group(row["group_id"], create=not row["is_tombstone"])
            if g is None:  # unknown group: a tombstone is ignored; a value of a classic group's id is skipped
                event = f"{_EVENTS.get(kt, 'record')}_tombstone" if row["is_tombstone"] else "skipped"
            else:
                g.last_offset = row["offset"]
                replay = self._CONSUMER_REPLAYS.get(kt)
                event = _EVENTS.get(kt, "record") if replay is None else replay(self, g, row)
        self._record(event, row, before)

    def replay_consumer_group_metadata(self, row: Row) -> str:
        """`replay(ConsumerGroupMetadataKey, …)` (type 3): the group epoch; a tombstone removes a consumer group
        (or a simple-looking classic one) and is ignored otherwise."""
        gid = row["group_id"]
        self.last_group_record[gid] = GroupRecord.of(row)
        if row["is_tombstone"]:
            g = self.groups.get(gid)
            if isinstance(g, ConsumerGroup) or self._replaceable(g):
                del self.groups[gid]
                return "deleted"
            return "tombstone"
        g = self._consumer_group(gid, create=True)
        if g is None:
            return "skipped"  # Kafka: IllegalStateException, the id holds a classic group
        g.last_offset = row["offset"]
        g.group_epoch = row["group_epoch"]
        return _EVENTS[3]

    def replay_consumer_group_partition_metadata(self, g: ConsumerGroup, row: Row) -> str:
        """Type 4: only topic-id resolution reads it (`tables.topic_names`: cluster-wide)."""
        return _EVENTS[4] + ("_tombstone" if row["is_tombstone"] else "")

    def replay_consumer_group_member_metadata(self, g: ConsumerGroup, row: Row) -> str:
        """Type 5: a member joins or is updated; its tombstone removes it."""
        mid = row.get("member_id")
        if row["is_tombstone"]:
            return "member_left" if g.members.pop(mid, None) is not None else "member_tombstone"
        existed = mid in g.members
        g.members.setdefault(mid, ConsumerGroupMember()).metadata = MemberMetadata.of(row)
        return "member_updated" if existed else "member_joined"

    def replay_consumer_group_target_assignment_metadata(self, g: ConsumerGroup, row: Row) -> str:
        """Type 6: the assignment epoch (a tombstone: -1)."""
        g.assignment_epoch = -1 if row["is_tombstone"] else row["assignment_epoch"]
        return _EVENTS[6] + ("_tombstone" if row["is_tombstone"] else "")

    def replay_consumer_group_target_assignment_member(self, g: ConsumerGroup, row: Row) -> str:
        """Type 7: a member's target assignment."""
        mid = row.get("member_id")
        if row["is_tombstone"]:
            g.targets.pop(mid, None)
        else:
            g.targets[mid] = list(row.get("assigned_partitions") or [])
        return _EVENTS[7] + ("_tombstone" if row["is_tombstone"] else "")

    def replay_consumer_group_current_member_assignment(self, g: ConsumerGroup, row: Row) -> str:
        """Type 8: a member's epochs, state and assignment (a tombstone resets a known member's)."""
        mid = row.get("member_id")
        if row["is_tombstone"]:
            m = g.members.get(mid)
            if m is not None:  # unknown member: ignored
                m.member_epoch = m.previous_member_epoch = -1
                m.assigned, m.pending_revocation = [], []
            return _EVENTS[8] + "_tombstone"
        m = g.members.setdefault(mid, ConsumerGroupMember())
        m.member_epoch, m.previous_member_epoch = row["member_epoch"], row["previous_member_epoch"]
        m.state = row["member_state"]
        m.assigned = list(row.get("assigned_partitions") or [])
        m.pending_revocation = list(row.get("partitions_pending_revocation") or [])
        return _EVENTS[8]

    def replay_consumer_group_regular_expression(self, g: ConsumerGroup, row: Row) -> str:
        """Type 16: a resolved regular expression's topics."""
        if row["is_tombstone"]:
            g.regexes.pop(row.get("regex"), None)
        else:
            g.regexes[row.get("regex")] = list(row.get("regex_topics") or [])
        return _EVENTS[16] + ("_tombstone" if row["is_tombstone"] else "")

    _CONSUMER_REPLAYS = {4: replay_consumer_group_partition_metadata, 5: replay_consumer_group_member_metadata,
                         6: replay_consumer_group_target_assignment_metadata,
                         7: replay_consumer_group_target_assignment_member,
                         8: replay_consumer_group_current_member_assignment,
                         16: replay_consumer_group_regular_expression}


def flat_topic_partitions(tps, topic: str = "topic") -> list[tuple[str, int]] | None:
    """A member's partitions (`[{topic, partitions}]`, the topic under `topic`) as sorted (topic, partition)
    pairs."""
    if tps is None:
        return None
    return sorted((tp[topic], p) for tp in tps for p in (tp["partitions"] or []))


def member_assignments(g: Group | None, row: Row) -> list[Row] | None:
    """The members a group record set, as they stand after it (`group_history.member_assignments`): a classic
    generation's every member, or the one member a KIP-848 member (type 5) or member-assignment (type 8) record
    touched. A consumer member's partitions are by topic id here, sorted by id: `tables.named_group_history` names
    them once the run's topic names are known."""
    if row["is_tombstone"]:
        return None
    if isinstance(g, ClassicGroup) and row["key_type"] == 2:
        return [{"member_id": m.member_id, "group_instance_id": m.group_instance_id, "client_id": m.client_id,
                 "client_host": m.client_host, "subscribed_topics": m.subscribed_topics,
                 "assigned_partitions": flat_topic_partitions(m.assigned_partitions)} for m in g.members]
    if isinstance(g, ConsumerGroup) and row["key_type"] in (5, 8):
        m = g.members.get(row.get("member_id"))
        if m is None:
            return None
        f = m.metadata
        return [{"member_id": row.get("member_id"), "group_instance_id": f and f.group_instance_id,
                 "client_id": f and f.client_id, "client_host": f and f.client_host,
                 "subscribed_topics": f and f.subscribed_topics,
                 "assigned_partitions": flat_topic_partitions(m.assigned, "topic_id")}]
    return None


#: Decoded columns a group record's `record_json` leaves out: where it is (the history row says), raw bytes.
_NOT_IN_RECORD = frozenset({"source", "key", "value", "batch_position", "codec", "magic", "timestamp_type"})
_RAW_MEMBER_BYTES = ("subscription", "assignment")


def record_json(row: Row) -> str:
    """The group record as `group_history.record_json` keeps it: its decoded columns that are set (a member's raw
    subscription and assignment bytes left out: no loader reads them, their parsed topics are kept), as JSON, so a
    restore plan can hand the same record to the loaders again."""
    import orjson

    out = {k: v for k, v in row.items() if v is not None and k not in _NOT_IN_RECORD}
    if out.get("members"):
        out["members"] = [{k: v for k, v in m.items() if k not in _RAW_MEMBER_BYTES} for m in out["members"]]
    return orjson.dumps(out).decode()


#: history event of a KIP-848 record value, by key type (tombstones: `<event>_tombstone`)
_EVENTS = {3: "group_epoch", 4: "partition_metadata", 5: "member", 6: "assignment_epoch", 7: "target_assignment",
           8: "member_assignment", 16: "regex"}
