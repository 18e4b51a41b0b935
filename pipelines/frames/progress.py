"""Progress lines while a Spark job runs: tasks done of total, records and MB handed through, every few seconds.

The job's tasks report what they processed through two accumulators (records, bytes); a daemon thread on the
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

    def add(self, records: int, nbytes: int) -> None:
        self.records.add(records)
        self.bytes.add(nbytes)


@contextlib.contextmanager
def reporting(spark, emit: Callable[[str], None] | None, what: str, counters: TaskCounters | None = None,
              interval: float = INTERVAL_SECONDS):
    """While the block runs, emit `what: 12/50 tasks done, 1,204,000 records, 80.2 MB at 35.10 MB/s` every `interval`
    seconds (records and MB as the finished tasks reported them)."""
    if emit is None:
        yield
        return
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

    def loop() -> None:
        while not stop.wait(interval):
            try:
                done, total = tasks()
                line = f"          {what}: {done}/{total} tasks done" if total else f"          {what}: running"
                if counters is not None:
                    secs = max(time.monotonic() - start, 1e-6)
                    line += (f", {counters.records.value:,} records, "
                             f"{counters.bytes.value / 1e6:,.1f} MB at {counters.bytes.value / 1e6 / secs:,.2f} MB/s")
                emit(line)
            except Exception:  # noqa: BLE001 - a progress line is never worth failing the run
                return

    thread = threading.Thread(target=loop, name="offsetlake-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=1)
