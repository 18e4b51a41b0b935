"""Rows of a small, clean snapshot (every table, markers, accounting) that passes every suite.

Rows are plain dicts so a test can break exactly one value before the frames are built. Row 0 of each table is
chosen to have no dependants (no members, no empty-group copy), so breaking it cannot cascade into another table.
"""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pyarrow as pa

from pipelines.coordinator.decoded import MARKER_COLUMNS
from pipelines.coordinator.partitioner import partition_for
from pipelines.io.delta import spark_schema
from schemas.decoded import DECODED_RECORD_SCHEMA
from schemas.tables import TABLES

UTC = timezone.utc
N = 8  # offsets-topic partitions in the fixture
AS_OF = datetime(2024, 6, 1, tzinfo=UTC)
AS_OF_MS = int(AS_OF.timestamp() * 1000)
SID = "snap-1"


def ts(days_before: float = 1.0) -> datetime:
    return AS_OF - timedelta(days=days_before)


def p(group_id: str) -> int:
    return partition_for(group_id, N)


def tp(topic: str, partition: int) -> dict:
    return {"topic": topic, "partition": partition}


def _offset(group_id, topic, partition, committed, record_offset, **kw) -> dict:
    row = {
        "snapshot_id": SID, "group_id": group_id, "topic": topic, "partition": partition,
        "offsets_partition": p(group_id), "committed_offset": committed, "leader_epoch": 3, "metadata": "",
        "commit_timestamp": ts(2), "expire_timestamp": None, "record_offset": record_offset,
        "has_group_metadata": True, "topic_id": None, "producer_id": -1,
    }
    row.update(kw)
    return row


def _group(group_id, group_type, protocol_type, state, members, record_offset, **kw) -> dict:
    row = {
        "snapshot_id": SID, "group_id": group_id, "offsets_partition": p(group_id), "group_type": group_type,
        "protocol_type": protocol_type, "generation": 4, "protocol": "range", "leader": None, "state": state,
        "current_state_timestamp": ts(3), "member_count": members, "record_offset": record_offset,
        "assignment_epoch": None, "subscribed_topics": None, "is_simple": False,
        "expected_offsets_partition": p(group_id), "unresolved_topic_ids": 0,
    }
    row.update(kw)
    return row


def _member(group_id, member_id, group_type, subscribed, assigned, **kw) -> dict:
    row = {
        "snapshot_id": SID, "group_id": group_id, "member_id": member_id, "group_instance_id": None,
        "client_id": "c", "client_host": "/10.0.0.1", "session_timeout_ms": 45000, "rebalance_timeout_ms": 300000,
        "subscribed_topics": subscribed, "assigned_partitions": assigned, "group_type": group_type,
        "offsets_partition": p(group_id),
    }
    row.update(kw)
    return row


def clean_rows() -> dict[str, list[dict]]:
    """A snapshot that satisfies every invariant, including the legitimate edge cases the checks must allow."""
    loaded_offsets = [
        _offset("g-classic", "orders", 0, 42, 10),
        _offset("g-classic", "payments", 1, -1, 11),  # -1: Kafka's INVALID_OFFSET, stored as sent
        _offset("g-kip848", "orders", 2, 7, 12, expire_timestamp=AS_OF + timedelta(days=400)),  # explicit retention
        _offset("simple-1", "orders", 0, 5, 13, has_group_metadata=False),
        _offset("", "orders", 1, 0, 14, has_group_metadata=False),  # group id "" (old clients) is legal: partition 0
    ]
    empty_group_offsets = [
        _offset("simple-1", "orders", 0, 5, 13, has_group_metadata=False),
        _offset("", "orders", 1, 0, 14, has_group_metadata=False),
    ]
    expired_offsets = [
        dict(_offset("g-old", "orders", 0, 3, 2, commit_timestamp=ts(30)),
             expiry_base_timestamp=ts(30), expiry_rule="commit_timestamp"),
    ]
    pending_offsets = [
        {"snapshot_id": SID, "producer_id": 1000, "group_id": "g-classic", "topic": "orders", "partition": 5,
         "committed_offset": 99, "record_offset": 120, "offsets_partition": p("g-classic"), "producer_epoch": 0,
         "leader_epoch": None, "metadata": "", "commit_timestamp": ts(0.01)},
    ]
    loaded_groups = [
        _group("g-empty", "classic", "consumer", "Empty", 0, 20, protocol=None),
        _group("g-classic", "classic", "consumer", "Stable", 2, 21, leader="m1"),
        _group("g-connect", "classic", "connect", "Stable", 1, 22, protocol="sessioned", leader="w1"),
        _group("g-kip848", "consumer", "consumer", "Stable", 1, 23, protocol="uniform", assignment_epoch=4),
        _group("g-kip848-assigning", "consumer", "consumer", "Assigning", 1, 24, assignment_epoch=3),
        _group("g-regex", "consumer", "consumer", "Stable", 1, 25, assignment_epoch=4),
        _group("日本語-😀", "classic", "consumer", "Empty", 0, 26, protocol=None,
               current_state_timestamp=None),  # v0/v1 value: no state timestamp
    ]
    group_members = [
        _member("g-classic", "m2", "classic", ["payments"], [tp("payments", 1)]),
        _member("g-classic", "m1", "classic", ["orders", "payments"], [tp("orders", 0), tp("payments", 0)]),
        # not consumer protocol: assignment bytes mean something else, never checked
        _member("g-connect", "w1", "classic", ["configs"], [tp("anything", 0)]),
        _member("g-kip848", "k1", "consumer", ["orders"], [tp("orders", 2)]),
        # Assigning: the target assignment does not reflect the new subscription yet
        _member("g-kip848-assigning", "k2", "consumer", ["payments"], [tp("orders", 3)]),
        # regex subscriber: its topics are not in the name list
        _member("g-regex", "r1", "consumer", [], [tp("orders", 4)], subscribed_topic_regex="ord.*"),
    ]
    removed_groups = [
        {"snapshot_id": SID, "group_id": "g-gone", "offsets_partition": p("g-gone"),
         "tombstone_record_offset": 30, "tombstone_timestamp": ts(5), "group_type": "classic"},
    ]
    expired_groups = [
        {"snapshot_id": SID, "group_id": "g-old", "offsets_partition": p("g-old"), "reason": "offsets expired",
         "group_type": "classic", "generation": 0, "writes_tombstone": True},
    ]
    offset_commits = [
        {"offsets_partition": p("g-classic"), "record_offset": 10, "group_id": "g-classic", "topic": "orders",
         "partition": 0, "committed_offset": 42, "commit_timestamp": ts(2), "is_tombstone": False,
         "producer_id": -1, "txn_outcome": None, "snapshot_id": SID},
        {"offsets_partition": p("g-classic"), "record_offset": 15, "group_id": "g-classic", "topic": "orders",
         "partition": 9, "committed_offset": None, "commit_timestamp": None, "is_tombstone": True,
         "producer_id": -1, "txn_outcome": None, "snapshot_id": SID},
        {"offsets_partition": p("g-old"), "record_offset": 2, "group_id": "g-old", "topic": "orders",
         "partition": 0, "committed_offset": 3, "commit_timestamp": ts(30), "is_tombstone": False,
         "producer_id": -1, "txn_outcome": None, "snapshot_id": SID},
    ]
    quarantine = [
        {"snapshot_id": SID, "source": "00000000000000000000.log", "offsets_partition": 3, "position": 4096,
         "reason": "unknown value version 9", "key_hex": "0001", "value_hex": "0009", "kind": "value",
         "offset": 17},
    ]
    markers = [
        {"offsets_partition": p("g-classic"), "producer_id": 1000, "offset": 100, "control_type": "COMMIT"},
        {"offsets_partition": p("g-classic"), "producer_id": 2000, "offset": 300, "control_type": "ABORT"},
        # same producer id, another offsets partition: a different transaction
        {"offsets_partition": (p("g-classic") + 1) % N, "producer_id": 1000, "offset": 500,
         "control_type": "COMMIT"},
    ]
    accounting = {
        "partitions": {
            "0": {"records_in": 10, "records_used": 8, "records_quarantined": 1,
                  "records_skipped": {"unknown key type": 1}},
            "3": {"records_in": 5, "records_used": 5, "records_quarantined": 0, "records_skipped": {}},
        }
    }
    return {
        "loaded_offsets": loaded_offsets, "empty_group_offsets": empty_group_offsets,
        "expired_offsets": expired_offsets, "pending_offsets": pending_offsets, "loaded_groups": loaded_groups,
        "group_members": group_members, "removed_groups": removed_groups, "expired_groups": expired_groups,
        "offset_commits": offset_commits, "quarantine": quarantine, "markers": markers, "accounting": accounting,
    }


# the markers as the shards give them: the decoded rows' marker columns (`coordinator.shard.transaction_markers`)
MARKERS_SCHEMA = pa.schema([DECODED_RECORD_SCHEMA.field(c) for c in MARKER_COLUMNS])


def _relaxed(schema: pa.Schema) -> pa.Schema:
    """The contract schema with every field nullable, so a test can put a null into a key column."""
    return pa.schema([f.with_nullable(True) for f in schema])


def build_inputs(spark, rows: dict, *, arrow: bool = False) -> dict:
    """Inputs for `run_validation`: {"tables": …, "markers": …, "accounting": Accounting}. The tables and markers
    are Spark DataFrames, or Arrow tables when `arrow` (as the routes give the state tables; the pandas engine then
    validates them with no Spark job to collect them)."""
    from pipelines.validation.accounting import Accounting

    tables = {}
    for name, data in rows.items():
        if name in ("markers", "accounting"):
            continue
        schema = _relaxed(TABLES[name])
        if arrow:
            tables[name] = pa.Table.from_pylist(data, schema=schema)
        else:
            tables[name] = spark.createDataFrame([tuple(r.get(f) for f in schema.names) for r in data],
                                                 spark_schema(schema))
    markers = pa.Table.from_pylist(rows["markers"], schema=MARKERS_SCHEMA)
    if not arrow:
        markers = spark.createDataFrame(markers)
    return {"tables": tables, "markers": markers, "accounting": Accounting.from_dict(rows["accounting"])}
