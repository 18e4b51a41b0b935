"""What the library changes in a PySpark worker process, all of it here.

A PySpark worker calls `importlib.invalidate_caches()` before every task (`pyspark.worker_util.setup_spark_files`).
Before Python 3.12 that makes every `zipimport.zipimporter` re-read its archive's whole directory, in Python, and a
worker's path always holds Spark's own `pyspark.zip` (thousands of entries): about a quarter of a second of every
Python task, whatever the task does, so a job of a dozen small tasks on two cores spends seconds there. Python 3.12
reads the directory again only when an import needs it. Here an archive's directory is read again only when the
file changed (its size or modification time), which is all the invalidation is for.

The same zip is where Spark's Python daemon, which forks every worker, imports pyspark from: its path puts the zip
ahead of the installed package, and a zip holds no compiled bytecode, so each session's daemon compiled pyspark
again before its first task (about 0.6 s of a session's first Python job here). Run as the daemon module
(`spark.python.daemon.module`, which `session.spark_builder` sets for a local master), this module drops the zip
from the path when it is the installed package's own copy, so pyspark comes from the package, and its workers
inherit that; it also imports what every task imports (`PRELOAD`) before it forks them, and quickens the task setup
(`quicken_task_setup`) there too: a preloaded `pipelines` is never imported by a worker, so it cannot do it then.
What it imported is frozen out of the cyclic GC for good (`heap.freeze_for_good`), as a pre-forking server's should
be, and so is what survives the collection PySpark runs after each task in a worker (`CollectThenFreeze`).
"""
from __future__ import annotations

import gc
import importlib
import importlib.machinery
import os
import sys
import zipimport
from pathlib import Path

from pipelines import heap

_STAMPS: dict[str, tuple[int, int] | None] = {}  # archive -> (size, mtime) when its directory was last read


def quicken_task_setup() -> None:
    """Make this process's zip importers re-read an archive on invalidation only when it changed (before Python
    3.12; idempotent). `pipelines` calls it on import in a PySpark worker: the first task that runs the library's
    code there, and every task after it in the reused worker, skip the re-read."""
    if sys.version_info >= (3, 12) or getattr(zipimport.zipimporter.invalidate_caches, "_reads_changed_only", False):
        return
    reread = zipimport.zipimporter.invalidate_caches

    def invalidate_caches(self) -> None:
        try:
            st = os.stat(self.archive)
            stamp = (st.st_size, st.st_mtime_ns)
        except OSError:
            stamp = None
        if stamp is not None and _STAMPS.get(self.archive) == stamp:
            return
        reread(self)
        _STAMPS[self.archive] = stamp

    invalidate_caches._reads_changed_only = True
    zipimport.zipimporter.invalidate_caches = invalidate_caches


def installed_pyspark_first() -> None:
    """Drop Spark's `pyspark.zip` from this process's path when it is the zip of the installed pyspark package
    (`<site-packages>/pyspark/python/lib/pyspark.zip`: the same sources), so pyspark is imported from the package,
    with its compiled bytecode, not compiled again from the zip by every new daemon."""
    zips = [p for p in sys.path if os.path.basename(p) == "pyspark.zip"]
    if not zips:
        return
    spec = importlib.machinery.PathFinder.find_spec("pyspark", [p for p in sys.path if p not in zips])
    if spec is None or not spec.submodule_search_locations:
        return
    package = Path(list(spec.submodule_search_locations)[0]).resolve()
    for z in zips:
        parents = Path(z).resolve().parents
        if len(parents) > 2 and parents[2] == package:
            sys.path.remove(z)
            sys.path_importer_cache.pop(z, None)


#: What every task of a run imports: imported once by the daemon, before it forks the workers, so no worker
#: imports them again (Arrow and NumPy, the decoders, the engine, the task functions and what they import on first
#: use: 1.3-1.9 s of each new worker's first task, measured under load). pandas is among them though no task uses it:
#: pyarrow imports it the first time `pa.array` converts a Python sequence (to ask whether it is a pandas object),
#: 1.1 s of a worker's first decoding window on its own; Arrow's grouping (`Table.group_by`, the history's suspects)
#: imports Acero; a rebuild's write task unpickles a function of `io.warehouse`
PRELOAD = ("numpy", "pyarrow", "pyarrow.compute", "pandas", "pyarrow.acero", "pipelines.decoding.columnar",
           "pipelines.coordinator.shard", "pipelines.coordinator.streamed", "pipelines.frames.decode",
           "pipelines.frames.ranges", "pipelines.frames.tally", "pipelines.frames.segment_shards",
           "pipelines.io.warehouse")


def preload() -> tuple[str, ...]:
    """Import `PRELOAD`, and say which it imported; a module that cannot be imported is left to the task that needs
    it, which then says why."""
    done = []
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - never a reason for the daemon not to start
            continue
        done.append(name)
    return tuple(done)


class CollectThenFreeze:
    """The `gc` module as PySpark's daemon calls it in a worker (`pyspark.daemon.gc`): its full collection after each
    task of a reused worker then freezes what survived it (what the tasks imported or cached, alive from then on), so
    the next task's collection walks only what that task left; without it each collection walked everything every
    earlier task had imported (a test module's imports: 63 ms a collection on average over a module of the suite).
    Anything else is the `gc` module's."""

    def __getattr__(self, name: str):
        return getattr(gc, name)

    @staticmethod
    def collect(*args, **kwargs) -> int:
        found = gc.collect(*args, **kwargs)
        heap.freeze_for_good()
        return found


if __name__ == "__main__":  # Spark's Python daemon (`spark.python.daemon.module`, local masters: `session`)
    installed_pyspark_first()
    # before the preload imports `pipelines`: its forks inherit both, and never import `pipelines` themselves
    quicken_task_setup()
    PRELOADED = preload()  # what its forked workers hold already (they share this `__main__`)
    # PySpark's daemon runs a full collection after every task of a reused worker: frozen, the preloaded objects are
    # never traversed there (42 ms a task here), nor written to, so their pages stay shared with the daemon
    heap.freeze_for_good()
    import pyspark.daemon

    pyspark.daemon.gc = CollectThenFreeze()
    pyspark.daemon.manager()
