"""What the library changes in a PySpark worker process, all of it here.

A PySpark worker calls `importlib.invalidate_caches()` before every task (`pyspark.worker_util.setup_spark_files`).
Before Python 3.12 that makes every `zipimport.zipimporter` re-read its archive's whole directory, in Python, and a
worker's path always holds Spark's own `pyspark.zip` (thousands of entries): about a quarter of a second of every
Python task, whatever the task does, so a job of a dozen small tasks on two cores spends seconds there. Python 3.12
reads the directory again only when an import needs it. Here an archive's directory is read again only when the
file changed (its size or modification time), which is all the invalidation is for.
"""
from __future__ import annotations

import os
import sys
import zipimport

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
