"""`pipelines.heap`: a long-lived state frozen out of the collector's walks while it grows, handed back after (but
where objects were frozen before it, as in a PySpark worker: then it is freed by reference counting alone, which
a shard's state allows: it holds no reference cycle)."""
from __future__ import annotations

import gc
import subprocess
import sys
import textwrap
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


_LOADED = textwrap.dedent("""
    import gc, glob, os, sys
    from pipelines.coordinator.options import ReplayOptions
    from pipelines.coordinator.streamed import StreamedShards
    from pipelines.decoding.columnar import decode_segment_to_arrow
    from simulator import generate_sample

    out = sys.argv[1]
    generate_sample(out, records=6000, groups=40, partitions=2, seed=11)
    logs = sorted(glob.glob(os.path.join(out, "__consumer_offsets-*", "*.log")))

    def load(semantics):
        loader = StreamedShards(ReplayOptions(semantics=semantics, snapshot_id="s"))
        for log in logs:
            part = int(os.path.basename(os.path.dirname(log)).rsplit("-", 1)[1])
            for batch in decode_segment_to_arrow(log, offsets_partition=part):
                loader.load(pyarrow.Table.from_batches([batch]))
        done = loader.finish()
        return len(done.states), sum(len(s.offsets) for s in done.states)
""")


def _run(script: str, tmp_path) -> list[str]:
    out = subprocess.run([sys.executable, "-c", "import pyarrow\n" + _LOADED + textwrap.dedent(script),
                          str(tmp_path / "dump")], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def test_a_shards_state_holds_no_reference_cycle(tmp_path):
    """What lets a worker leave a state frozen: dropped, it is freed whole by reference counting."""
    found = _run("""
        for semantics in ("legacy", "modern"):
            gc.collect()
            shards, offsets = load(semantics)
            assert shards and offsets, (shards, offsets)  # a state was built
            print(gc.collect())  # the unreachable objects the load left to the collector
    """, tmp_path)
    assert found == ["0", "0"]


def test_what_was_frozen_before_a_load_stays_frozen_and_loads_leave_nothing_frozen(tmp_path):
    """A PySpark worker's daemon froze its imports before forking it (`pyspark_worker`): loads in it leave them
    frozen, and nothing of their own (the collection PySpark runs after every task walks only the task's objects)."""
    counts = _run("""
        load("legacy"), load("modern")  # what a first load imports or caches is there for good
        gc.collect()
        from pipelines import heap
        heap.freeze_for_good()  # as the daemon does
        counts = [gc.get_freeze_count()]
        for semantics in ("legacy", "modern", "legacy", "modern"):
            load(semantics)
            counts.append(gc.get_freeze_count())
        print(*counts)
    """, tmp_path)
    before, first, *later = map(int, counts)
    assert before > 10_000  # the imports: numpy, pyarrow, the engine
    assert before <= first <= before + 5  # still frozen, and with them the few objects of this script's frame
    assert later == [first] * 3  # load after load, nothing more
