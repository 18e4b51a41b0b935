"""The records an incremental run keeps of a shard: a subset of its log that loads, together with ANY later records,
to the same coordinator state as the whole log would.

Kafka's own answer to "keep less log, same state" is compaction, but the cleaner is not state-preserving here
(a plain tombstone before a later COMMIT marker, KIP-848 records of replaced incarnations, topic names shared
across groups). The subset follows the loaders' own rules instead (`loader`, `groups`), for the run's semantics;
a later log can only add records after every kept position. Kept, by offset:

Offset commits, per GroupTopicPartition:
* the last plain (non-transactional) record, the last plain value and the last tombstone of any kind: they fix
  the committed offset's last plain event and the new coordinator's purge of pending entries, now and after any
  extension;
* the installed offset (a plain value or a committed transactional entry): later records either beat it or remove
  every current candidate at once, so the losers are never needed;
* every transactional record whose transaction is still open: its pending map is resolved by a later marker;
* modern only, per group: the last offset-commit value (any producer), which decides whether a simple group
  exists after the group's last removal;
* the end marker of every kept transactional record, so it keeps its outcome.

Group records, per group:
* the last GroupMetadata (type 2) record, which replaces or removes whatever the id held before;
* of the KIP-848 records from the live incarnation's boundary on (that last type-2 record or a later
  ConsumerGroupMetadata tombstone; earlier ones belong to a removed or replaced group), those the group's state
  still depends on (`GroupStore.replay_consumer_group_record`): the first value (it creates the group), the last
  record (the group's last offset), the last epoch (type 3) and assignment epoch (type 6) records, each member's
  last target assignment (type 7), each regex's last record (type 16), each member's last
  ConsumerGroupMemberMetadata tombstone (type 5, it removes the member whole) and, after it, the member's first
  record that creates it, last type-5 value, last current assignment (type 8) value and last type-8 tombstone
  (which resets the epochs and partitions but not the state). A consumer group's records otherwise grow with
  its members' every heartbeat epoch;
* per topic id, the shard's latest ConsumerGroupPartitionMetadata (type 4) value naming it (topic names are
  cluster-wide and the latest by log position wins: each shard keeping its latest keeps the run's latest).

Records of any other kind (none today) are all kept. Error and unknown rows are never part of the state.
`tests/coordinator/test_retained.py` checks the defining property on generated logs cut at every batch
boundary, both semantics: load(retained(prefix) ∪ rest) == load(prefix ∪ rest).
"""
from __future__ import annotations

from collections import defaultdict
from typing import Any, Iterable

from pipelines.coordinator.loader import (
    GroupTopicPartition,
    ShardState,
    group_topic_partition,
    is_end_marker,
    producer_id,
)

Row = dict[str, Any]


def retained_offsets(rows: Iterable[Row], state: ShardState) -> set[int]:
    """The offsets of the shard's records to keep. `rows`: the records the shard was loaded from, in log order
    (no error/unknown rows, no until bounds); `state`: the shard after loading them."""
    modern = state.modern
    keep: set[int] = set()
    plain: dict[GroupTopicPartition, int] = {}
    plain_value: dict[GroupTopicPartition, int] = {}
    tombstone: dict[GroupTopicPartition, int] = {}
    last_value_of_group: dict[str, int] = {}
    marker_of: dict[int, int] = {}  # transactional record -> its end marker's offset
    open_rows: dict[int, list[int]] = defaultdict(list)
    last_type2: dict[str, int] = {}
    last_k3t: dict[str, int] = {}  # last ConsumerGroupMetadata tombstone after the last type-2 record
    kip_rows: dict[str, list[int]] = defaultdict(list)
    namer: dict[str, int] = {}  # topic id -> offset of the latest type-4 value naming it
    for r in rows:
        off, kind = r["offset"], r["record_kind"]
        if kind == "offset_commit":
            k = group_topic_partition(r)
            pid = producer_id(r)
            is_txn = pid != -1 if modern else bool(r.get("is_transactional"))
            if r["is_tombstone"]:
                tombstone[k] = off
            else:
                last_value_of_group[k.group] = off
            if is_txn:
                open_rows[pid].append(off)
            else:
                plain[k] = off
                if not r["is_tombstone"]:
                    plain_value[k] = off
        elif kind == "control":
            if is_end_marker(r, modern):
                for o in open_rows.pop(producer_id(r), ()):
                    marker_of[o] = off
        elif kind == "group_metadata":
            gid = r["group_id"]
            last_type2[gid] = off
            last_k3t.pop(gid, None)
        elif kind == "consumer_group":
            gid = r["group_id"]
            kip_rows[gid].append((off, r.get("key_type"), bool(r["is_tombstone"]), r.get("member_id"), r.get("regex")))
            if r.get("key_type") == 3 and r["is_tombstone"]:
                last_k3t[gid] = off
            if r.get("key_type") == 4 and not r["is_tombstone"]:
                for t in r.get("topics_metadata") or []:
                    namer[t["topic_id"]] = off
        else:
            keep.add(off)  # any other kind: kept whole
    offsets = set(plain.values()) | set(plain_value.values()) | set(tombstone.values())
    offsets.update(o.record_offset for o in state.offsets.values())  # the installed offsets
    for offs in open_rows.values():  # transactions still open
        offsets.update(offs)
    if modern:  # what makes a simple group: the group's last offset value
        offsets.update(last_value_of_group.values())
    keep |= offsets
    keep.update(marker_of[o] for o in offsets if o in marker_of)
    keep.update(last_type2.values())
    for gid, records in kip_rows.items():
        boundary = last_k3t.get(gid, last_type2.get(gid, -1))
        keep |= _live_kip_records([r for r in records if r[0] >= boundary])
    keep.update(namer.values())
    return keep


def _live_kip_records(records: list[tuple]) -> set[int]:
    """The offsets of the KIP-848 records (offset, key type, tombstone, member id, regex) of one group's live
    incarnation, in log order, that its state depends on (see the module docstring)."""
    if not records:
        return set()
    keep = {records[-1][0]}
    first_value = next((off for off, _kt, tomb, _m, _r in records if not tomb), None)
    if first_value is not None:
        keep.add(first_value)
    last: dict[tuple, int] = {}
    member_gone: dict[str, int] = {}  # member id -> its last type-5 tombstone
    for off, kt, tomb, mid, regex in records:
        if kt in (3, 6):
            last[(kt,)] = off
        elif kt == 7:
            last[(7, mid)] = off
        elif kt == 16:
            last[(16, regex)] = off
        elif kt == 5 and tomb:
            member_gone[mid] = off
    keep.update(last.values())
    keep.update(member_gone.values())
    created: dict[str, int] = {}
    member: dict[tuple, int] = {}
    for off, kt, tomb, mid, _r in records:
        if kt not in (5, 8) or off <= member_gone.get(mid, -1) or (kt == 5 and tomb):
            continue
        if not tomb:
            created.setdefault(mid, off)
        member[(kt, tomb, mid)] = off
    keep.update(created.values())
    keep.update(member.values())
    return keep
