"""The Python heap while the engine builds or reads millions of small objects."""
from __future__ import annotations

import contextlib
import gc

#: Whether this process froze objects for good (`freeze_for_good`: a pre-forking parent's imports, `pyspark_worker`),
#: which a load's `thawed()` must leave frozen: they are not the state's.
_frozen_for_good = False


def freeze_for_good() -> None:
    """What is alive now, frozen out of the collector's walks for the life of this process and of its forks (a
    pre-forking server's imports): `thawed()` leaves it, and whatever a load froze, frozen from then on. Said
    here, not counted by each load: `gc.get_freeze_count()` walks every frozen object."""
    global _frozen_for_good
    _frozen_for_good = True
    gc.freeze()


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
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if keep:
            gc.freeze()
        if was_enabled:
            gc.enable()


def thawed() -> None:
    """Whatever `gc_paused(keep=True)` froze, in the collector's sight again (a cycle among it is collected from
    then on); but in a process that froze objects for good (`freeze_for_good`: a PySpark worker, forked from a
    daemon that froze its imports), nothing is thawed: a thaw cannot tell those from the state, and the collection
    PySpark runs after each task would walk them all again (60-190 ms a task here). The state's objects are freed
    by reference counting as they are dropped, frozen or not: a shard's state holds no reference cycle
    (`tests/test_heap.py`)."""
    if not _frozen_for_good:
        gc.unfreeze()
