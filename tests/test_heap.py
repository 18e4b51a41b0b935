"""`pipelines.heap`: a long-lived state frozen out of the collector's walks while it grows, handed back after."""
from __future__ import annotations

import gc
import weakref

import pyarrow as pa

from pipelines.coordinator.options import ReplayOptions
from pipelines.coordinator.streamed import StreamedShards
from pipelines.heap import gc_paused, thawed
from tests.coordinator.rowkit import to_table


class _Node:
    pass


def test_kept_objects_are_frozen_and_still_freed():
    thawed()
    with gc_paused(keep=True):
        kept = [_Node() for _ in range(1000)]
        dropped = _Node()
        gone = weakref.ref(dropped)
        del dropped
    assert gone() is None  # reference counting frees what nothing holds
    assert gc.get_freeze_count() >= 1000  # out of the collector's walks
    loop = _Node()
    loop.me = loop  # a cycle made after the pause: the collector still collects it
    cycle = weakref.ref(loop)
    del loop
    gc.collect()
    assert cycle() is None and gc.get_freeze_count() >= 1000  # what was frozen stays out of the walks
    thawed()
    assert gc.get_freeze_count() == 0 and len(kept) == 1000


def test_a_streamed_load_hands_its_state_back_to_the_collector():
    thawed()
    rows = [{"offsets_partition": 0, "offset": i, "record_kind": "offset_commit", "group_id": "g", "topic": "t",
             "partition": i % 3, "committed_offset": i, "batch_first_offset": i, "timestamp": 1}
            for i in range(50)]
    loader = StreamedShards(ReplayOptions(semantics="modern", snapshot_id="s"))
    loader.load(to_table(rows))
    assert gc.get_freeze_count() > 0  # the state, grown by the window, out of the collector's walks
    done = loader.finish()
    assert gc.get_freeze_count() == 0
    assert done.state is not None and isinstance(done.pending, pa.Table)
