"""The groups of one coordinator shard: classic, simple, consumer (KIP-848), share (KIP-932) and streams (KIP-1071)
groups as types, and the `groups` map that `GroupMetadataManager.replay` maintains record by record, one replay per
record type (types 2, 3-8, 16; share 9-15, streams 17, 19-23), dispatched on the key type as
`GroupCoordinatorShard.replay` does.

Decisions where Kafka would fail the load or never looked (spec §2.9, §5.3):

* Consumer (KIP-848), share and streams group records reach the store only where the emulated coordinator knows
  their key types (`options.unknown_group_key_types`: never the old one, whose `readMessageKey` knows 0-2 and
  skips the rest, so its ids are the groups its offsets and GroupMetadata build; the new one's by version); a
  share or streams group is kept as a consumer group is (epochs, members, target assignments), its own state rule
  apart.
* A KIP-848 record for a non-simple classic group (Kafka: IllegalStateException, the load fails) is skipped, and
  so is a share group record for any group of another type, a simple one too (`getOrMaybeCreatePersistedShareGroup`
  replaces none), a streams group record for a simple group's id before 4.2 (KAFKA-19862 made it replace it), and
  a consumer group record for one before 4.0. 3.6-3.9's consumer group replays, as 4.0's share group replays
  (`GroupStore.early`), also fail on a record of no group (but a metadata or member metadata value) or of no member
  (its assignment, its metadata's tombstone).
  Its event is `skipped`, which the run's summary names as a partition the broker would not load.
  Tombstones of types 3-8, 16 act on an existing consumer group, or on the empty consumer group that replaces a
  simple(-looking) classic group (Kafka's `getOrMaybeCreatePersistedConsumerGroup(id, false)`: a type-3 tombstone
  then removes it), and are ignored for an absent id only: for an id holding a group of another type that the
  record's kind does not replace, `getOrMaybeCreatePersisted…Group(id, false)` throws as for a value (4.0+), so the
  tombstone is skipped too, as is one out of the coordinator's deletion order (its replay's preconditions).
* A GroupMetadata value the load cannot add every member of is skipped alike (`refused_member`): one listing a
  member after a repeated member id (every version), or a static member id twice (3.0+).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Final, NamedTuple, Sequence, Sized, TypedDict

import orjson

from schemas.record_types import CoordinatorRecordType

Row = dict[str, Any]

# The state types are slotted; those a record replaces whole are frozen too. ClassicGroup and ClassicMember are not:
# a GroupMetadata record builds one per member, and a frozen dataclass's __init__ costs 5x (3.3 vs 0.65 us for 9
# fields): frozen, replaying a simulator sample's 20k group records without history took 1.15x the time of the
# if/elif replay before this one, instead of 0.89x. Nothing mutates them after `of`.


class TopicPartitions(TypedDict):
    """An element of a classic member's assignment (`schemas.decoded.TOPIC_PARTITIONS`, the consumer protocol's
    `TopicPartition`), as decoded."""

    topic: str
    partitions: list[int] | None


class TopicIdPartitions(TypedDict):
    """An element of a KIP-848 value's assignment (`schemas.decoded.TOPIC_ID_PARTITIONS`), as decoded; the run
    names its topic (`tables.topic_names`)."""

    topic_id: str
    partitions: list[int] | None


# A member keeps its record's decoded assignment list itself (a record's lists are its own and nothing changes
# them): typing each topic as it is replayed (a dataclass or a tuple per topic) made the group replay 20-50% slower.


def classic_group_state(members: Sized) -> str:
    """`GroupMetadata.loadGroup` / the new coordinator's `ClassicGroup`: a loaded group is Empty without members,
    else Stable; no other state is ever restored. A simple group has no members: Empty."""
    return "Stable" if len(members) else "Empty"


@functools.cache
def _all_slots(cls: type) -> tuple[str, ...]:
    """The slots of `cls` and its bases, the bases' first: a subclass's `__slots__` names its own only (a share or
    streams group's none of the consumer group's it extends)."""
    return tuple(name for c in reversed(cls.__mro__) for name in c.__dict__.get("__slots__", ()))


def _slots_state(self) -> tuple:
    """`__getstate__` of the mutable state types: their slots' values in order (a saved shard pickles them)."""
    return tuple([getattr(self, name) for name in _all_slots(type(self))])


def _set_slots(self, state: tuple) -> None:
    """`__setstate__` of the mutable state types. Defined, not left to pickle's default, because a saved shard is read
    back from the warehouse: pickle's BUILD on the class itself, not an instance, would set the class's attributes
    for the rest of the process (a tampered file turning `ClassicGroup.state` into "Dead" for every group the run
    writes); with one, that BUILD is a call without its state and fails (`coordinator.saved`)."""
    for name, value in zip(_all_slots(type(self)), state, strict=True):
        object.__setattr__(self, name, value)


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
    assigned_partitions: list[TopicPartitions] | None
    rack_id: str | None

    __getstate__, __setstate__ = _slots_state, _set_slots

    @staticmethod
    def of(m: Row) -> ClassicMember:
        return ClassicMember(m["member_id"], m["group_instance_id"], m["client_id"], m["client_host"],
                             m["rebalance_timeout_ms"], m["session_timeout_ms"], m["subscribed_topics"],
                             m["assigned_partitions"], m["subscription_rack_id"])


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

    __getstate__, __setstate__ = _slots_state, _set_slots

    @staticmethod
    def of_record(row: Row) -> ClassicGroup:
        """`readGroupMessageValue`: the group a GroupMetadataValue record stores."""
        # `add` puts each member in a map by its id: an id listed twice is one member, the later entry's
        members = {m["member_id"]: ClassicMember.of(m) for m in row.get("members") or ()}
        return ClassicGroup(row["group_id"], row.get("protocol_type"), row.get("generation"), row.get("protocol"),
                            row.get("leader"), row.get("current_state_timestamp"), row.get("value_version"),
                            row["offset"], list(members.values()))

    @property
    def state(self) -> str:
        return classic_group_state(self.members)

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


@dataclass(frozen=True, slots=True)
class SimpleGroup:
    """The empty, protocol-less classic group Kafka creates for offsets without a group: the new coordinator when it
    replays an offset value of an unknown id, the old loader for every id of `emptyGroupOffsets`."""

    group_id: str

    generation = 0  # `ClassicGroup`'s initial generation

    @property
    def state(self) -> str:
        return classic_group_state(())


@dataclass(frozen=True, slots=True)
class MemberMetadata:
    """A KIP-848 member's ConsumerGroupMemberMetadataValue (type 5)."""

    group_instance_id: str | None = None
    client_id: str | None = None
    client_host: str | None = None
    session_timeout_ms: int | None = None
    rebalance_timeout_ms: int | None = None
    subscribed_topics: list[str] | None = None
    rack_id: str | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None

    @staticmethod
    def of(row: Row) -> MemberMetadata:
        return MemberMetadata(row.get("group_instance_id"), row.get("client_id"), row.get("client_host"),
                              row.get("session_timeout_ms"), row.get("rebalance_timeout_ms"),
                              row.get("subscribed_topics"), row.get("rack_id"), row.get("subscribed_topic_regex"),
                              row.get("server_assignor"))


#: `MemberState.STABLE`: what `ConsumerGroupMember.Builder` starts a member in
MEMBER_STATE_STABLE: Final = 0
#: A streams member's `streams.MemberState.STABLE`: its own codes (1 STABLE, 2 UNREVOKED_TASKS, 3 UNRELEASED_TASKS,
#: 127 UNKNOWN; any other, 0 too, reads UNKNOWN), and `StreamsGroupMember.Builder` starts a member in none
STREAMS_MEMBER_STATE_STABLE: Final = 1
#: `ConsumerGroupHeartbeatRequest.LEAVE_GROUP_MEMBER_EPOCH`: a member whose assignment record was deleted
LEAVE_GROUP_MEMBER_EPOCH: Final = -1


@dataclass(frozen=True, slots=True)
class ConsumerGroupMember:
    """A KIP-848 member (`ConsumerGroupMember`): built anew by each of its records, as Kafka's
    `ConsumerGroupMember.Builder(old).updateWith(value).build()` does."""

    metadata: MemberMetadata | None = None  # the last ConsumerGroupMemberMetadataValue (type 5)
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: int | None = MEMBER_STATE_STABLE  # a streams member: None until its assignment record
    assigned: Sequence[TopicIdPartitions] = ()  # type 8
    pending_revocation: Sequence[TopicIdPartitions] = ()

    def with_metadata(self, metadata: MemberMetadata) -> ConsumerGroupMember:
        """`Builder.updateWith(ConsumerGroupMemberMetadataValue)`."""
        return ConsumerGroupMember(metadata, self.member_epoch, self.previous_member_epoch, self.state,
                                   self.assigned, self.pending_revocation)

    def with_assignment(self, row: Row) -> ConsumerGroupMember:
        """`Builder.updateWith(ConsumerGroupCurrentMemberAssignmentValue)`."""
        return ConsumerGroupMember(self.metadata, row["member_epoch"], row["previous_member_epoch"],
                                   row["member_state"], row.get("assigned_partitions") or (),
                                   row.get("partitions_pending_revocation") or ())

    def left(self) -> ConsumerGroupMember:
        """`replay(ConsumerGroupCurrentMemberAssignmentKey, null)`: epochs to LEAVE_GROUP_MEMBER_EPOCH, nothing
        assigned or pending."""
        return ConsumerGroupMember(self.metadata, LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_MEMBER_EPOCH, self.state)


@dataclass(slots=True)
class ConsumerGroup:
    """A KIP-848 group (`ConsumerGroup`): epochs, members, target assignments, resolved regexes. Its records update
    it in place, as Kafka's timeline maps do (its members are replaced whole, by `put_member` and `remove_member`
    only: they keep the tallies its state and assignor are read from, so a record costs the same in a group of a
    thousand members as in one of three)."""

    group_type: ClassVar[str] = "consumer"  # `group_history.group_type`, `loaded_groups.group_type`
    stable_member_state: ClassVar[int] = MEMBER_STATE_STABLE

    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ConsumerGroupMember] = field(default_factory=dict)
    targets: dict[str, Sequence[TopicIdPartitions]] = field(default_factory=dict)
    regexes: dict[str, list[str]] = field(default_factory=dict)
    last_offset: int = -1
    stable_at: dict[int, int] = field(default_factory=dict)  # member epoch -> the Stable members at it
    assignors: dict[str, int] = field(default_factory=dict)  # server assignor -> the members naming it

    __getstate__, __setstate__ = _slots_state, _set_slots

    def put_member(self, member_id: str, member: ConsumerGroupMember) -> None:
        old = self.members.get(member_id)
        if old is not None:
            self._tally(old, -1)
        self.members[member_id] = member
        self._tally(member, 1)

    def remove_member(self, member_id: str) -> ConsumerGroupMember | None:
        old = self.members.pop(member_id, None)
        if old is not None:
            self._tally(old, -1)
        return old

    def _tally(self, m: ConsumerGroupMember, by: int) -> None:
        if m.state == self.stable_member_state:
            _add(self.stable_at, m.member_epoch, by)
        if m.metadata is not None and m.metadata.server_assignor is not None:
            _add(self.assignors, m.metadata.server_assignor, by)

    @property
    def state(self) -> str:
        """`ConsumerGroup.maybeUpdateGroupState`: Empty, Assigning, Reconciling (a member is not Stable at the
        assignment epoch) or Stable."""
        if not self.members:
            return "Empty"
        if self.group_epoch > self.assignment_epoch:
            return "Assigning"
        if self.stable_at.get(self.assignment_epoch, 0) < len(self.members):
            return "Reconciling"
        return "Stable"

    @property
    def assignor(self) -> str | None:
        """The server assignor most members name (ties: the smallest name); None when none names one."""
        counts = self.assignors
        return min(counts, key=lambda a: (-counts[a], a)) if counts else None


@dataclass(slots=True)
class ShareGroup(ConsumerGroup):
    """A KIP-932 share group (`ShareGroup`): a group epoch, members with their subscriptions and assignments, a
    target assignment, kept as a consumer group's. `ShareGroup.maybeUpdateGroupState`: Empty without members, else
    Stable (a share group has no reconciliation)."""

    group_type: ClassVar[str] = "share"

    @property
    def state(self) -> str:
        return "Stable" if self.members else "Empty"


@dataclass(slots=True)
class StreamsGroup(ConsumerGroup):
    """A KIP-1071 streams group (`StreamsGroup`): epochs, members and their tasks' epochs as a consumer group's,
    and its topology as a StreamsGroupTopology record (type 23) holds it: its epoch and the topics its
    subtopologies read (`StreamsTopology.sourceTopicMap`)."""

    group_type: ClassVar[str] = "streams"
    stable_member_state: ClassVar[int] = STREAMS_MEMBER_STATE_STABLE
    topology_epoch: int | None = None  # None: no topology record
    source_topics: Sequence[str] = ()
    validated_topology_epoch: int = -1  # StreamsGroupMetadataValue's (4.2+; a 4.1 writer's: none, -1)

    @property
    def has_topology(self) -> bool:
        return self.topology_epoch is not None

    @property
    def state(self) -> str:
        """`StreamsGroup.maybeUpdateGroupState`: Empty without members, NotReady unless the topology's epoch is the
        validated one (4.2+; 4.1 waits for a configured topology, which no record holds: a loaded 4.1 group
        with members is NotReady, as its records, which carry no validated epoch, say here), then as a consumer
        group: Assigning, Reconciling (a member not Stable at the assignment epoch: `isReconciledTo`) or
        Stable."""
        if not self.members:
            return "Empty"
        if self.topology_epoch is None or self.topology_epoch != self.validated_topology_epoch:
            return "NotReady"
        return ConsumerGroup.state.fget(self)


def _add(counts: dict, key: Any, by: int) -> None:
    n = counts.get(key, 0) + by
    if n:
        counts[key] = n
    else:
        del counts[key]


@dataclass(slots=True, frozen=True)
class GroupRecord:
    """Where a group id's latest type-2 / type-3 record is: what `removed_groups` reports of a tombstone."""

    offset: int
    timestamp: int | None
    key_type: int
    is_tombstone: bool

    @staticmethod
    def of(row: Row) -> GroupRecord:
        return GroupRecord(row["offset"], row.get("timestamp"), row["key_type"], bool(row["is_tombstone"]))


Group = ClassicGroup | SimpleGroup | ConsumerGroup | ShareGroup | StreamsGroup


class GroupEvent(NamedTuple):
    """What one group record did (`GroupStore.history`): a `group_history` row but for the shard's columns (snapshot
    id, offsets partition: `tables.group_history_table` adds them), the group as it stands after the record. A tuple,
    not a dict: a shard's events become the table column by column, which Arrow does faster than it converts rows
    of dicts."""

    group_id: str
    record_offset: int
    record_timestamp: int | None  # epoch ms; None: the record has none
    group_type: str
    event: str
    generation: int | None
    assignment_epoch: int | None
    protocol: str | None
    leader: str | None
    state: str | None
    member_count: int
    members_joined: list[str]
    members_left: list[str]
    member_assignments: list[Row] | None
    record_json: str
    batch_last_offset: int | None = None  # None: the input does not say where the record's batch ends
    batch_timestamp: int | None = None  # epoch ms (`decoded.with_batch_times`); None: its batch has no time


def _time(ms: int | None) -> int | None:
    """A record's time as the history holds it: none for Kafka's -1 (a magic 0 record has no time)."""
    return None if ms is None or ms < 0 else ms


def is_live(group: Group | None) -> bool:
    """A group record holds the id (a classic or consumer group), as opposed to nothing or a simple group."""
    return isinstance(group, (ClassicGroup, ConsumerGroup))


def member_ids(group: Group | None) -> set[str]:
    if isinstance(group, ClassicGroup):
        return {m.member_id for m in group.members}
    if isinstance(group, ConsumerGroup):
        return set(group.members)
    return set()


def group_type(key_type: int) -> str:
    """`group_history.group_type` / `removed_groups.group_type` of a group record."""
    if key_type == CoordinatorRecordType.GROUP_METADATA:
        return "classic"
    return _TYPED_GROUPS.get(key_type, ConsumerGroup).group_type


#: `getOrMaybeCreatePersisted…Group` of trunk: a consumer or streams group's record (4.2+, KAFKA-19862) replaces a
#: simple group of offsets; a share group's never does (`options.simple_group_replaced_by`). A tuple: a saved shard
#: pickles it, and reads back no frozenset (`coordinator.saved`)
SIMPLE_REPLACED_BY: Final = ("consumer", "streams")


class GroupStore:
    """The `groups` map of one coordinator shard, replayed record by record (`replay`). `history` (when kept)
    receives one event per group record (types 2-8, 16), with the group as it stands after it: a new classic
    generation, a consumer group's epochs, members joining, updated or leaving, assignments, deletions, ignored
    tombstones."""

    __slots__ = ("groups", "last_group_record", "history", "simple_replaced_by", "early", "unique_static_members",
                 "batch_time")
    #: what a saved shard pickles: every slot but `batch_time`, the record being replayed's (so a shard saved before
    #: it existed reads back as one saved now)
    _SAVED = __slots__[:-1]

    def __getstate__(self) -> tuple:
        return tuple([getattr(self, name) for name in self._SAVED])

    def __setstate__(self, state: tuple) -> None:  # see `_set_slots`
        for name, value in zip(self._SAVED, state, strict=True):
            object.__setattr__(self, name, value)
        self.batch_time = None

    def __init__(self, keep_history: bool = True, simple_replaced_by: tuple[str, ...] = SIMPLE_REPLACED_BY,
                 early: tuple[str, ...] = (), unique_static_members: bool = True) -> None:
        self.groups: dict[str, Group] = {}
        self.last_group_record: dict[str, GroupRecord] = {}  # latest type-2 / type-3 record per group id
        self.history: list[GroupEvent] | None = [] if keep_history else None
        #: when a reader first saw the record being replayed (`decoded.with_batch_times`), for its event
        self.batch_time: int | None = None
        # the group types whose records replace a simple group (`options.simple_group_replaced_by`)
        self.simple_replaced_by = simple_replaced_by
        # the group types replayed as their first releases did (`options.early_replays`): 4.0's share replays and
        # 3.x's consumer group replays: all but a …GroupMetadata or …GroupMemberMetadata value ask
        # `getOrMaybeCreatePersisted…Group(id, false)` and a member's (…CurrentMemberAssignment, a …MemberMetadata
        # tombstone) `getOrMaybeCreateMember(id, false)`, catching nothing: a missing one fails the load, where the
        # next release creates it for a value and ignores a tombstone; 4.0's shard replays no type 15
        self.early = early
        # `GroupMetadata.add` refuses a static member id already in the group (`options.unique_static_members`)
        self.unique_static_members = unique_static_members

    def resumed(self) -> GroupStore:
        """The store to go on loading from: the same groups (loading mutates them), the events of what is loaded
        from now on only."""
        store = GroupStore(self.history is not None, self.simple_replaced_by, self.early, self.unique_static_members)
        store.groups, store.last_group_record = self.groups, self.last_group_record
        return store

    @staticmethod
    def union(stores: list[GroupStore]) -> GroupStore:
        """The groups of `stores`, which hold no id in common (the buckets of a split partition's groups,
        `coordinator.streamed.by_group`), with their events not yet taken."""
        first = stores[0]
        out = GroupStore(first.history is not None, first.simple_replaced_by, first.early, first.unique_static_members)
        for s in stores:
            out.groups.update(s.groups)
            out.last_group_record.update(s.last_group_record)
            if out.history is not None and s.history:
                out.history.extend(s.history)
        return out

    def replay(self, row: Row) -> None:
        """`GroupCoordinatorShard.replay` of a group record (types 2-8, 16): the `GroupMetadataManager.replay`
        overload of its key type; other key types are not group records and change nothing here."""
        key_type = row["key_type"]
        replay = _REPLAYS.get(key_type)
        if replay is None:
            return
        if row.get("layout") == UNPARSED and not row["is_tombstone"]:
            # a share / streams value no layout reads (its fields unknown): Kafka's load fails on it; skipped here
            replay = _skipped
        elif "share" in self.early and key_type == _T.SHARE_GROUP_STATE_PARTITION_METADATA:
            replay = _skipped  # 4.0's `GroupCoordinatorShard.replay`: "unknown record type", the load fails
        elif (key_type in _SHARE_LAYOUT_CHANGED and row.get("layout") == EARLY_SHARE_LAYOUT
              and "share" not in self.early):
            # a 4.0 writer's value, which 4.1's reader cannot read (MetadataHash, InitializingTopics came before the
            # fields it has): deserializing it throws and the load fails
            replay = _skipped
        if self.history is None:
            replay(self, row)
            return
        g = self.groups.get(row["group_id"])
        if isinstance(g, ConsumerGroup) and key_type in _IN_PLACE:
            # the record changes its consumer group in place, and its members by the record's member id alone
            mid = row.get("member_id")
            had = mid in g.members
            event = replay(self, row)
            has = mid in g.members
            self._record(event, row, len(g.members), [mid] if has > had else [], [mid] if had > has else [])
            return
        before = member_ids(g)
        event = replay(self, row)
        after = member_ids(self.groups.get(row["group_id"]))
        self._record(event, row, len(after), sorted(after - before), sorted(before - after))

    def _record(self, event: str, row: Row, member_count: int, joined: list[str], left: list[str]) -> None:
        g = self.groups.get(row["group_id"])
        ts = row.get("timestamp")
        if isinstance(g, ClassicGroup):
            generation, epoch, protocol, leader, state = g.generation, None, g.protocol, g.leader, g.state
        elif isinstance(g, ConsumerGroup):
            generation, epoch, protocol, leader, state = g.group_epoch, g.assignment_epoch, g.assignor, None, g.state
        elif isinstance(g, SimpleGroup):
            generation, epoch, protocol, leader, state = g.generation, None, None, None, g.state
        else:
            generation = epoch = protocol = leader = state = None
        self.history.append(GroupEvent(
            row["group_id"], row["offset"], _time(ts), group_type(row["key_type"]), event,
            generation, epoch, protocol, leader, state, member_count, joined, left, member_assignments(g, row),
            record_json(row), row.get("batch_last_offset"), _time(self.batch_time)))

    @staticmethod
    def _replaceable(g: Group | None) -> bool:
        return isinstance(g, SimpleGroup) or (isinstance(g, ClassicGroup) and g.is_simple_group)

    def maybe_create_simple_group(self, gid: str) -> None:
        """An offset value for an unknown group creates a simple classic group: the new coordinator's replay does
        (`OffsetMetadataManager.replay`, 4.0), and the old coordinator did when it wrote the commit, plain or
        transactional, whatever the transaction's outcome (`GroupCoordinator.handleCommitOffsets` /
        `handleTxnCommitOffsets`: `addGroup(new GroupMetadata(groupId, Empty, time))`, 0.11 - 3.9), so a group
        tombstone after it deleted a group in either semantics (event `deleted`); the old coordinator writes none
        for a group of generation 0 (`cleanupGroupMetadata`, 0.11 - 3.9), so a log holds one there where the new
        coordinator wrote it (a 4.0 broker's DeleteGroups or expiry). The old loader builds no group while it reads
        (`doLoadGroupsAndOffsets` makes one for `emptyGroupOffsets` at its end only): a legacy replay's simple
        groups name the history's deletions, and its snapshot's are its offsets' (`tables.shard_rows`)."""
        if gid not in self.groups:
            self.groups[gid] = SimpleGroup(gid)

    def replay_group_metadata(self, row: Row) -> str:
        """`replay(GroupMetadataKey, GroupMetadataValue)` (type 2): a tombstone removes any group with the id, a
        value replaces it (old loader, `doLoadGroupsAndOffsets`: `loadedGroups` / `removedGroups`, same outcome),
        unless adding its members throws (`refused_member`): the load fails, and the record is skipped."""
        gid = row["group_id"]
        if row["is_tombstone"]:
            self.last_group_record[gid] = GroupRecord.of(row)
            return "deleted" if self.groups.pop(gid, None) is not None else "tombstone"
        group = ClassicGroup.of_record(row)
        members = row.get("members") or ()
        if len(group.members) < len(members) or (self.unique_static_members and _repeats_instance_id(members)):
            if refused_member(members, self.unique_static_members):
                return "skipped"  # not the id's latest group record either (`removed_groups`)
        self.last_group_record[gid] = GroupRecord.of(row)
        self.groups[gid] = group
        return "generation"

    def _consumer_group(self, gid: str, create: bool, kind: type[ConsumerGroup] = ConsumerGroup
                        ) -> ConsumerGroup | None:
        """`getOrMaybeCreatePersistedConsumerGroup` (`…ShareGroup`, `…StreamsGroup`: `kind`): a simple classic
        group is silently replaced, whatever `create` says (a tombstone's replay asks with False, and Kafka replaces
        it there too: only an absent id is "not found")."""
        g = self.groups.get(gid)
        if type(g) is kind:
            return g
        if g is None and not create:
            return None
        if g is None or (kind.group_type in self.simple_replaced_by and self._replaceable(g)):
            g = self.groups[gid] = kind(gid)
            return g
        return None  # Kafka: IllegalStateException "not a <kind> group" (load fails); skipped here

    def replay_consumer_group_metadata(self, row: Row) -> str:
        """`replay(ConsumerGroupMetadataKey, ConsumerGroupMetadataValue)` (type 3; ShareGroupMetadata, type 11, and
        StreamsGroupMetadata, type 17, alike): the group epoch; a tombstone removes a group of its kind (or a
        simple-looking classic one the kind replaces), is ignored for an absent id, and skipped for another's."""
        event = self._replay_group_epoch(row)
        if event != "skipped":  # a record the load fails on is not the id's latest group record (`removed_groups`)
            self.last_group_record[row["group_id"]] = GroupRecord.of(row)
        return event

    def _replay_group_epoch(self, row: Row) -> str:
        gid = row["group_id"]
        kind = _TYPED_GROUPS.get(row["key_type"], ConsumerGroup)
        if row["is_tombstone"]:
            g = self.groups.get(gid)
            if type(g) is kind or (kind.group_type in self.simple_replaced_by and self._replaceable(g)):
                if _holds_state(g if type(g) is kind else kind(gid)):
                    return "skipped"  # Kafka: IllegalStateException "Received a tombstone record to delete group"
                del self.groups[gid]
                return "deleted"
            if g is not None or kind.group_type in self.early:
                return "skipped"  # Kafka: "Group … is not a <kind> group"; an early replay's "… group … not found"
            return "tombstone"
        g = self._consumer_group(gid, create=True, kind=kind)
        if g is None:
            return "skipped"  # Kafka: IllegalStateException, the id holds a classic group
        g.last_offset = row["offset"]
        g.group_epoch = row["group_epoch"]
        if isinstance(g, StreamsGroup):
            validated = row.get("validated_topology_epoch")
            g.validated_topology_epoch = -1 if validated is None else validated
        return "group_epoch"

    # Types 4-8, 16 act on the consumer group of the record's id (`_of_consumer_group`): they return the event
    # and never see an unknown group.

    def replay_consumer_group_partition_metadata(self, g: ConsumerGroup, row: Row) -> str:
        """`replay(ConsumerGroupPartitionMetadataKey, …)` (type 4): only topic-id resolution reads it
        (`tables.topic_names`: cluster-wide)."""
        return "partition_metadata_tombstone" if row["is_tombstone"] else "partition_metadata"

    def replay_consumer_group_member_metadata(self, g: ConsumerGroup, row: Row) -> str:
        """`replay(ConsumerGroupMemberMetadataKey, …)` (type 5): a member joins or is updated; its tombstone
        removes it."""
        mid = row.get("member_id")
        if row["is_tombstone"]:
            m = g.members.get(mid)
            if m is not None and (m.member_epoch != LEAVE_GROUP_MEMBER_EPOCH or mid in g.targets):
                # Kafka: IllegalStateException "Received a tombstone record to delete member … but did not receive
                # …CurrentMemberAssignmentValue (…TargetAssignmentMetadataValue) tombstone": the load fails
                return "skipped"
            return "member_left" if g.remove_member(mid) is not None else "member_tombstone"
        m = g.members.get(mid)
        g.put_member(mid, (m or _new_member(g)).with_metadata(MemberMetadata.of(row)))
        return "member_joined" if m is None else "member_updated"

    def replay_consumer_group_target_assignment_metadata(self, g: ConsumerGroup, row: Row) -> str:
        """`replay(ConsumerGroupTargetAssignmentMetadataKey, …)` (type 6): the assignment epoch (a tombstone:
        -1)."""
        if row["is_tombstone"]:
            if g.targets:
                return "skipped"  # Kafka: IllegalStateException "… but the assignment still has N members"
            g.assignment_epoch = -1
            return "assignment_epoch_tombstone"
        g.assignment_epoch = row["assignment_epoch"]
        return "assignment_epoch"

    def replay_consumer_group_target_assignment_member(self, g: ConsumerGroup, row: Row) -> str:
        """`replay(ConsumerGroupTargetAssignmentMemberKey, …)` (type 7): a member's target assignment."""
        mid = row.get("member_id")
        if row["is_tombstone"]:
            g.targets.pop(mid, None)
            return "target_assignment_tombstone"
        g.targets[mid] = row.get("assigned_partitions") or ()
        return "target_assignment"

    def replay_consumer_group_current_member_assignment(self, g: ConsumerGroup, row: Row) -> str:
        """`replay(ConsumerGroupCurrentMemberAssignmentKey, …)` (type 8): a member's epochs, state and assignment
        (a tombstone resets a known member's; an unknown member's is ignored)."""
        mid = row.get("member_id")
        m = g.members.get(mid)
        if row["is_tombstone"]:
            if m is not None:
                g.put_member(mid, m.left())
            return "member_assignment_tombstone"
        g.put_member(mid, (m or _new_member(g)).with_assignment(row))
        return "member_assignment"

    def replay_streams_group_topology(self, g: ConsumerGroup, row: Row) -> str:
        """`replay(StreamsGroupTopologyKey, …)` (type 23): the group's topology (a tombstone: none)."""
        if isinstance(g, StreamsGroup):
            tombstone = row["is_tombstone"]
            g.topology_epoch = None if tombstone else row["topology_epoch"]
            g.source_topics = () if tombstone else tuple(row.get("topology_source_topics") or ())
        return "topology_tombstone" if row["is_tombstone"] else "topology"

    def replay_consumer_group_regular_expression(self, g: ConsumerGroup, row: Row) -> str:
        """`replay(ConsumerGroupRegularExpressionKey, …)` (type 16): a resolved regular expression's topics."""
        if row["is_tombstone"]:
            g.regexes.pop(row.get("regex"), None)
            return "regex_tombstone"
        g.regexes[row.get("regex")] = list(row.get("regex_topics") or [])
        return "regex"


def refused_member(members: Sequence[Row], unique_static_members: bool) -> bool:
    """Whether loading a GroupMetadata value throws as it adds `members` one by one (`GroupMetadata.loadGroup`, the
    new coordinator's `replay(GroupMetadataKey, GroupMetadataValue)`, each calling the group's `add`):
    `supportsProtocols` asks every protocol of the member to be supported by as many members as the group holds, and
    a loaded member supports the value's one protocol, so after an id listed twice (one member in the map, two in the
    protocol's count) any further member fails it; with `unique_static_members` (3.0+), so does a
    `groupInstanceId` already in the group. The last entry may repeat an id: nothing is added after it."""
    ids: set[str] = set()
    static: set[str] = set()
    for added, m in enumerate(members):
        instance = m["group_instance_id"]
        if unique_static_members and instance is not None:
            if instance in static:
                return True
            static.add(instance)
        if len(ids) != added:
            return True
        ids.add(m["member_id"])
    return False


def _repeats_instance_id(members: Sequence[Row]) -> bool:
    static = [i for m in members if (i := m["group_instance_id"]) is not None]
    return len(set(static)) < len(static)


def _holds_state(g: ConsumerGroup) -> bool:
    """What its group tombstone's replay refuses to delete (the load fails): members, a target assignment (not a
    streams group's: its replay asks not) or an assignment epoch its tombstone did not set to -1. A simple group the
    tombstone's kind replaces is a new group of that kind, whose epoch is 0."""
    return bool(g.members) or (bool(g.targets) and not isinstance(g, StreamsGroup)) or g.assignment_epoch != -1


_NEW_MEMBER: Final = ConsumerGroupMember()
_NEW_STREAMS_MEMBER: Final = ConsumerGroupMember(state=None)


def _new_member(g: ConsumerGroup) -> ConsumerGroupMember:
    """`getOrCreateUninitializedMember`'s member: a consumer (or share) member starts Stable, a streams member in
    no state (`StreamsGroupMember.Builder`), so it is not reconciled until its assignment record says."""
    return _NEW_STREAMS_MEMBER if isinstance(g, StreamsGroup) else _NEW_MEMBER
#: `GroupRecordValue.layout` of a share / streams value no known layout reads (`decoding.messages`)
UNPARSED: Final = "unparsed"
#: `GroupRecordValue.layout` of a value as Kafka 4.0 (KIP-932 early access) wrote it, and the share record types whose
#: value 4.1 changed incompatibly (ShareGroupMetadataValue's untagged MetadataHash, ShareGroupStatePartitionMetadata's
#: leading InitializingTopics)
EARLY_SHARE_LAYOUT: Final = "4.0"
_SHARE_LAYOUT_CHANGED: Final = frozenset({int(CoordinatorRecordType.SHARE_GROUP_METADATA),
                                          int(CoordinatorRecordType.SHARE_GROUP_STATE_PARTITION_METADATA)})


def _skipped(store: GroupStore, row: Row) -> str:
    return "skipped"

ConsumerGroupReplay = Callable[[GroupStore, ConsumerGroup, Row], str]


def _of_consumer_group(replay: ConsumerGroupReplay, event: str, kind: type[ConsumerGroup] = ConsumerGroup
                       ) -> Callable[[GroupStore, Row], str]:
    """The replay of a type 4-8 or 16 record (of a share or streams group's record: `kind`): on the id's group of
    that kind (a value creates it in place of nothing, a tombstone too in place of a simple group). Without one, a
    tombstone is ignored (`<event>_tombstone`) where the id is absent; a record of another group's id is skipped."""
    unknown_tombstone = event + "_tombstone"

    def on_group(store: GroupStore, row: Row) -> str:
        tombstone = row["is_tombstone"]
        early = kind.group_type in store.early
        create = not tombstone and (not early or row["key_type"] in _MEMBER_METADATA)
        g = store._consumer_group(row["group_id"], create=create, kind=kind)
        if g is None:
            # only an absent id is "not found" (ignored); a tombstone for another type's group throws as a value does
            absent = row["group_id"] not in store.groups
            return unknown_tombstone if tombstone and absent and not early else "skipped"
        if early and row.get("member_id") not in g.members and (
                row["key_type"] in _CURRENT_MEMBER_ASSIGNMENT or tombstone and row["key_type"] in _MEMBER_METADATA):
            return "skipped"
        g.last_offset = row["offset"]
        return replay(store, g, row)

    return on_group


_T = CoordinatorRecordType
#: the records whose value an early replay (`GroupStore.early`) creates its group for, and their member's assignment
_MEMBER_METADATA: Final = frozenset({_T.CONSUMER_GROUP_MEMBER_METADATA, _T.SHARE_GROUP_MEMBER_METADATA})
_CURRENT_MEMBER_ASSIGNMENT: Final = frozenset({_T.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT,
                                               _T.SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT})
#: `GroupCoordinatorShard.replay`'s switch, for the group records: key type -> the replay of its record type
_REPLAYS: Final[dict[int, Callable[[GroupStore, Row], str]]] = {int(t): r for t, r in {
    _T.GROUP_METADATA: GroupStore.replay_group_metadata,
    _T.CONSUMER_GROUP_METADATA: GroupStore.replay_consumer_group_metadata,
    _T.CONSUMER_GROUP_PARTITION_METADATA:
        _of_consumer_group(GroupStore.replay_consumer_group_partition_metadata, "partition_metadata"),
    _T.CONSUMER_GROUP_MEMBER_METADATA: _of_consumer_group(GroupStore.replay_consumer_group_member_metadata, "member"),
    _T.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA:
        _of_consumer_group(GroupStore.replay_consumer_group_target_assignment_metadata, "assignment_epoch"),
    _T.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER:
        _of_consumer_group(GroupStore.replay_consumer_group_target_assignment_member, "target_assignment"),
    _T.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT:
        _of_consumer_group(GroupStore.replay_consumer_group_current_member_assignment, "member_assignment"),
    _T.CONSUMER_GROUP_REGULAR_EXPRESSION:
        _of_consumer_group(GroupStore.replay_consumer_group_regular_expression, "regex"),
}.items()}

#: The share (KIP-932) and streams (KIP-1071) group records: their group's kind by key type
_TYPED_GROUPS: Final[dict[int, type[ConsumerGroup]]] = {
    **{int(t): ShareGroup for t in (_T.SHARE_GROUP_PARTITION_METADATA, _T.SHARE_GROUP_MEMBER_METADATA,
                                   _T.SHARE_GROUP_METADATA, _T.SHARE_GROUP_TARGET_ASSIGNMENT_METADATA,
                                   _T.SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER, _T.SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT,
                                   _T.SHARE_GROUP_STATE_PARTITION_METADATA)},
    **{int(t): StreamsGroup for t in (_T.STREAMS_GROUP_METADATA, _T.STREAMS_GROUP_MEMBER_METADATA,
                                     _T.STREAMS_GROUP_TARGET_ASSIGNMENT_METADATA,
                                     _T.STREAMS_GROUP_TARGET_ASSIGNMENT_MEMBER,
                                     _T.STREAMS_GROUP_CURRENT_MEMBER_ASSIGNMENT, _T.STREAMS_GROUP_TOPOLOGY)}}
# `GroupMetadataManager.replay`'s share and streams overloads do to their group what the consumer group's do to
# theirs; a streams member's tasks are not decoded (no partitions assigned), and a share group's partition and state
# metadata (types 9, 15) only name topics
_REPLAYS.update({int(t): r for t, r in {
    _T.SHARE_GROUP_METADATA: GroupStore.replay_consumer_group_metadata,
    _T.STREAMS_GROUP_METADATA: GroupStore.replay_consumer_group_metadata,
    _T.SHARE_GROUP_PARTITION_METADATA: _of_consumer_group(
        GroupStore.replay_consumer_group_partition_metadata, "partition_metadata", ShareGroup),
    _T.SHARE_GROUP_STATE_PARTITION_METADATA: _of_consumer_group(
        GroupStore.replay_consumer_group_partition_metadata, "partition_metadata", ShareGroup),
    **{t: _of_consumer_group(GroupStore.replay_consumer_group_member_metadata, "member", kind)
       for t, kind in ((_T.SHARE_GROUP_MEMBER_METADATA, ShareGroup), (_T.STREAMS_GROUP_MEMBER_METADATA, StreamsGroup))},
    **{t: _of_consumer_group(GroupStore.replay_consumer_group_target_assignment_metadata, "assignment_epoch", kind)
       for t, kind in ((_T.SHARE_GROUP_TARGET_ASSIGNMENT_METADATA, ShareGroup),
                       (_T.STREAMS_GROUP_TARGET_ASSIGNMENT_METADATA, StreamsGroup))},
    **{t: _of_consumer_group(GroupStore.replay_consumer_group_target_assignment_member, "target_assignment", kind)
       for t, kind in ((_T.SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER, ShareGroup),
                       (_T.STREAMS_GROUP_TARGET_ASSIGNMENT_MEMBER, StreamsGroup))},
    **{t: _of_consumer_group(GroupStore.replay_consumer_group_current_member_assignment, "member_assignment", kind)
       for t, kind in ((_T.SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT, ShareGroup),
                       (_T.STREAMS_GROUP_CURRENT_MEMBER_ASSIGNMENT, StreamsGroup))},
    _T.STREAMS_GROUP_TOPOLOGY: _of_consumer_group(GroupStore.replay_streams_group_topology, "topology", StreamsGroup),
}.items()})


def flat_topic_partitions(tps: Sequence[TopicPartitions] | Sequence[TopicIdPartitions] | None, topic: str = "topic"
                          ) -> list[tuple[str, int]] | None:
    """A member's partitions (the topic under `topic`) as sorted (topic, partition) pairs."""
    if tps is None:
        return None
    out = [(tp[topic], p) for tp in tps for p in (tp["partitions"] or ())]  # sorted in place: 2x sorted(<genexpr>)
    out.sort()
    return out


def member_assignments(g: Group | None, row: Row) -> list[Row] | None:
    """The members a group record set, as they stand after it (`group_history.member_assignments`): a classic
    generation's every member, or the one member a KIP-848 member (type 5) or member-assignment (type 8) record
    touched. A member's partitions are its decoded assignment's, by topic (a classic member's) or by topic id (a
    consumer member's): `tables.group_history_table` makes them the history's sorted pairs, column by column, and
    `tables.named_group_history` names a consumer member's topics once the run's topic names are known."""
    if row["is_tombstone"]:
        return None
    kt = row["key_type"]
    if isinstance(g, ClassicGroup) and kt == _T.GROUP_METADATA:
        return [{"member_id": m.member_id, "group_instance_id": m.group_instance_id, "client_id": m.client_id,
                 "client_host": m.client_host, "subscribed_topics": m.subscribed_topics,
                 "assigned_partitions": m.assigned_partitions} for m in g.members]
    if isinstance(g, ConsumerGroup) and kt in _MEMBER_RECORDS:
        m = g.members.get(row.get("member_id"))
        if m is None:
            return None
        f = m.metadata
        return [{"member_id": row.get("member_id"), "group_instance_id": f and f.group_instance_id,
                 "client_id": f and f.client_id, "client_host": f and f.client_host,
                 "subscribed_topics": f and f.subscribed_topics,
                 "assigned_partitions": m.assigned}]
    return None


#: The key types whose records change a consumer (share, streams) group in place (`_of_consumer_group`): types 4-8,
#: 16 and the share and streams groups' but their metadata's
_IN_PLACE: Final = frozenset({_T.CONSUMER_GROUP_PARTITION_METADATA, _T.CONSUMER_GROUP_MEMBER_METADATA,
                              _T.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA, _T.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER,
                              _T.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT, _T.CONSUMER_GROUP_REGULAR_EXPRESSION,
                              *(t for t in _TYPED_GROUPS if t not in (_T.SHARE_GROUP_METADATA,
                                                                      _T.STREAMS_GROUP_METADATA))})
_MEMBER_RECORDS: Final = frozenset({_T.CONSUMER_GROUP_MEMBER_METADATA, _T.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT,
                                    _T.SHARE_GROUP_MEMBER_METADATA, _T.SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT,
                                    _T.STREAMS_GROUP_MEMBER_METADATA, _T.STREAMS_GROUP_CURRENT_MEMBER_ASSIGNMENT})


#: Decoded columns a group record's `record_json` leaves out: where it is (the history row says), raw bytes.
_NOT_IN_RECORD = frozenset({"source", "key", "value", "batch_position", "codec", "magic", "timestamp_type"})
#: A classic member's raw consumer-protocol bytes: no loader reads them (their topics are decoded beside them), and
#: `record_json` leaves them out (`decoded.group_rows` gives the loaders members without them).
MEMBER_BYTES = ("subscription", "assignment")


def record_json(row: Row) -> str:
    """The group record as `group_history.record_json` keeps it: its decoded columns that are set (a member's raw
    subscription and assignment bytes left out: no loader reads them, their parsed topics are kept), as JSON, so a
    restore plan can hand the same record to the loaders again."""
    members = row.get("members")
    raw = bool(members) and any(k in m for m in members for k in MEMBER_BYTES)  # a decoded table's rows have them
    if not raw and None not in row.values() and _NOT_IN_RECORD.isdisjoint(row):
        # most of the loaders' rows (`decoded.group_rows`): every column they hold is set, none is left out
        return orjson.dumps(row).decode()
    out = {k: v for k, v in row.items() if v is not None and k not in _NOT_IN_RECORD}
    if raw:
        out["members"] = [{k: v for k, v in m.items() if k not in MEMBER_BYTES} for m in members]
    return orjson.dumps(out).decode()
