"""The Python heap while the engine builds or reads millions of small objects."""
from __future__ import annotations

import contextlib
import gc

#: How many objects were frozen before this process's first `gc_paused(keep=True)` since the last `thawed()`
#: (None: none since): what a pre-forking parent froze before the fork (`pyspark_worker`) is not the state's.
_frozen_before: int | None = None


@contextlib.contextmanager
def gc_paused(keep: bool = False):
    """Python's cyclic garbage collector off meanwhile. The decoder, the loaders and a saved shard's unpickling
    build hundreds of thousands of small objects that hold no cycles; each one counts towards the collector's
    thresholds, and each full collection walks every live object (measured: ~40 % of a replay, 80 % of resuming
    50 saved shards in the driver). Reference counting still frees everything; the collector is back on
    afterwards. Drop such objects before the pause ends where they are not needed after it: every object made
    during the pause is in the youngest generation, so the first collection after it walks all that survive
    (measured: 0.15 s for the 50 resumed shards kept one statement too long).

    `keep`: what is alive as the pause ends is long-lived (a shard's state, grown window by window): it is frozen
    out of the collector's sight (`gc.freeze`), so the collections that the rest of the task's allocations trigger
    do not walk the whole state again each time it has grown (measured: a fifth of a split partition's bucket load,
    a seventh of a hot partition's). Frozen objects are still freed when nothing refers to them; `thawed()` hands
    them back to the collector once the state is handed on."""
    global _frozen_before
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if keep:
            if _frozen_before is None:
                _frozen_before = gc.get_freeze_count()
            gc.freeze()
        if was_enabled:
            gc.enable()


def thawed() -> None:
    """Whatever `gc_paused(keep=True)` froze, in the collector's sight again (a cycle among it is collected from
    then on); but where objects were frozen before the first of them (a PySpark worker, forked from a daemon that
    froze its imports: `pyspark_worker`), nothing is thawed: a thaw cannot tell those from the state, and the
    collection PySpark runs after each task would walk them all again (60-190 ms a task here). The state's objects
    are freed by reference counting as they are dropped, frozen or not: a shard's state holds no reference cycle
    (`tests/test_heap.py`)."""
    global _frozen_before
    before, _frozen_before = _frozen_before, None
    if not before:
        gc.unfreeze()
