"""Work a run starts in a thread of its own and collects later: a Spark job the driver would otherwise wait on
(reading ahead, the accounting's count, the group history in hand), or files written while validation reads."""
from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable


def in_thread(name: str, fn: Callable, *args) -> Future:
    """`fn(*args)` started in a thread of its own (`offsetlake-<name>`)."""
    pool = ThreadPoolExecutor(1, thread_name_prefix=f"offsetlake-{name}")
    try:
        return pool.submit(fn, *args)
    finally:
        pool.shutdown(wait=False)
