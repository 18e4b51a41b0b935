"""The served view of offsets: Kafka's `groupOffsets` / `emptyGroupOffsets` split -> the contract's tables.

Replay and expiry keep the loader's split (offsets of groups with a live group record vs. offsets of groups
without one, for which the coordinator creates a simple Empty group). The coordinator serves both, so the
contract's `loaded_offsets` holds every served offset — `has_group_metadata` says which side it came from — and
`empty_group_offsets` the subset without a group record (`GroupMetadataManager.doLoadGroupsAndOffsets`,
Kafka 0.11-3.9; the new coordinator's simple groups likewise).
"""
from __future__ import annotations

import pyarrow as pa

from schemas.tables import columns


def with_served_offsets(tables: dict) -> dict:
    """`loaded_offsets` := group offsets ∪ empty-group offsets; `empty_group_offsets` unchanged (Arrow tables)."""
    out = dict(tables)
    cols = columns("loaded_offsets")
    out["loaded_offsets"] = pa.concat_tables([tables["loaded_offsets"].select(cols),
                                              tables["empty_group_offsets"].select(cols)])
    return out
