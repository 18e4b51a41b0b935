"""Progress lines while a Spark job runs: tasks (or shards) done of total, records and MB handed through, every few
seconds.

The job's tasks report what they processed through accumulators (records, bytes, shards); a daemon thread on the
driver reads them and Spark's status tracker and emits one line per interval. Nothing is printed for a job that
ends before the first interval.
"""
from __future__ import annotations

import contextlib
import threading
import time
from typing import Callable

INTERVAL_SECONDS = 3.0


class TaskCounters:
    """Accumulators the executor side adds to: `add(records, nbytes)` from inside a task."""

    def __init__(self, spark):
        self.records = spark.sparkContext.accumulator(0)
        self.bytes = spark.sparkContext.accumulator(0)
        self.shards = spark.sparkContext.accumulator(0)

    def add(self, records: int, nbytes: int, shards: int = 0) -> None:
        self.records.add(records)
        self.bytes.add(nbytes)
        if shards:
            self.shards.add(shards)


@contextlib.contextmanager
def reporting(spark, emit: Callable[[str], None] | None, what: str, counters: TaskCounters | None = None,
              interval: float | None = None, shards: int | None = None):
    """While the block runs, emit `what: 12/50 tasks done, 1,204,000 records, 80.2 MB at 35.10 MB/s` every `interval`
    seconds (records and MB as the finished tasks reported them); with `shards` (how many the job loads), the
    shards done of that total instead of the tasks."""
    if emit is None:
        yield
        return
    interval = INTERVAL_SECONDS if interval is None else interval
    tracker = spark.sparkContext.statusTracker()
    stop = threading.Event()
    start = time.monotonic()

    def tasks() -> tuple[int, int]:
        done = total = 0
        for sid in tracker.getActiveStageIds():
            info = tracker.getStageInfo(sid)
            if info is not None:
                done += info.numCompletedTasks
                total += info.numTasks
        return done, total

    def line() -> str:
        if shards is not None and counters is not None:
            out = f"          {what}: {counters.shards.value}/{shards} shards done"
        else:
            done, total = tasks()
            out = f"          {what}: {done}/{total} tasks done" if total else f"          {what}: running"
        if counters is not None:
            secs = max(time.monotonic() - start, 1e-6)
            out += (f", {counters.records.value:,} records, "
                    f"{counters.bytes.value / 1e6:,.1f} MB at {counters.bytes.value / 1e6 / secs:,.2f} MB/s")
        return out

    def loop() -> None:
        while not stop.wait(interval):
            try:
                emit(line())
            except Exception:  # noqa: BLE001 - a progress line is never worth failing the run
                return

    thread = threading.Thread(target=loop, name="offsetlake-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=1)
    if shards is not None and counters is not None:  # the shards' totals, once they are all in
        emit(line())
