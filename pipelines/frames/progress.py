"""Progress lines while a Spark job runs: tasks (or shards) done of total, records and MB handed through, every few
seconds.

The job's tasks report what they processed through accumulators (records, bytes, shards); a daemon thread on the
driver reads them and Spark's status tracker and emits one line per interval. Nothing is printed for a job that
ends before the first interval.

Spark hands a task's accumulator updates to the driver only when the task ends, and a run packs its offsets
partitions into a few tasks per core (each Python task has a fixed cost): the counts would stand still until the
first task ends, most of the job. So each task also sends its running counts to the driver as it goes (`_Live`: a
UDP datagram at most every `SEND_SECONDS` and at each shard done, to a port the driver listens on), and a line shows
the larger of the two. Best effort: where executors cannot reach the driver that way, the lines wait for tasks to
end as before; the final counts are the accumulators' either way.
"""
from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
import weakref
from typing import Callable

INTERVAL_SECONDS = 3.0
SEND_SECONDS = 1.0


class TaskCounters:
    """Accumulators the executor side adds to: `add(records, nbytes)` from inside a task; their values, with what
    running tasks sent so far, on the driver (`totals`). `close` when the job is done (`reporting` does)."""

    def __init__(self, spark):
        sc = spark.sparkContext
        self.records = sc.accumulator(0)
        self.bytes = sc.accumulator(0)
        self.shards = sc.accumulator(0)
        self._live = _Live.open(sc)
        self.address = None if self._live is None else self._live.address
        if self._live is not None:  # a job that failed before its `reporting` leaves no socket open
            weakref.finalize(self, self._live.close)

    # a task gets the accumulators and the driver's address, and counts what it adds itself
    def __getstate__(self):
        return {"records": self.records, "bytes": self.bytes, "shards": self.shards, "address": self.address}

    def __setstate__(self, state) -> None:
        self.__dict__.update(state)
        self._live, self._sent, self._tally = None, 0.0, [0, 0, 0]

    def add(self, records: int, nbytes: int, shards: int = 0) -> None:
        self.records.add(records)
        self.bytes.add(nbytes)
        if shards:
            self.shards.add(shards)
        if self._live is None and self.address is not None:  # in a task
            self._send(records, nbytes, shards)

    def _send(self, records: int, nbytes: int, shards: int) -> None:
        tally = self._tally
        tally[0] += records
        tally[1] += nbytes
        tally[2] += shards
        now = time.monotonic()
        if not shards and now - self._sent < SEND_SECONDS:
            return
        self._sent = now
        try:
            # imported here, not at module level: pyspark ~0.2 s of import (python -X importtime)
            from pyspark import TaskContext

            ctx = TaskContext.get()
            task = [-1, -1, 0] if ctx is None else [ctx.stageId(), ctx.partitionId(), ctx.attemptNumber()]
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
                sock.sendto(json.dumps([*task, *tally]).encode(), tuple(self.address))
        except Exception:  # noqa: BLE001 - progress is never worth failing a task
            self.address = None

    def totals(self) -> tuple[int, int, int]:
        """(records, bytes, shards) so far: the ended tasks' accumulators, or what the running ones sent when more."""
        done = (self.records.value, self.bytes.value, self.shards.value)
        if self._live is None:
            return done
        return tuple(max(a, b) for a, b in zip(done, self._live.sums()))

    def close(self) -> None:
        if self._live is not None:
            self._live.close()


class _Live:
    """The driver's end of the tasks' running counts: the latest (records, bytes, shards) each task attempt sent."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.address = list(sock.getsockname()[:2])
        self._latest: dict[tuple[int, int], tuple[int, int, int, int]] = {}  # (stage, partition) -> attempt, counts
        self._lock = threading.Lock()
        self._closed = threading.Event()
        threading.Thread(target=self._receive, name="offsetlake-progress-live", daemon=True).start()

    @staticmethod
    def open(sc) -> "_Live | None":
        """A socket on the address executors know the driver by (loopback in local mode); None if none opens."""
        local = (sc.master or "").startswith("local")
        host = "127.0.0.1" if local else sc.getConf().get("spark.driver.host", "127.0.0.1")
        try:
            sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            sock.bind((socket.gethostbyname(host), 0))
            sock.settimeout(0.2)
        except OSError:
            return None
        return _Live(sock)

    def _receive(self) -> None:
        while not self._closed.is_set():
            try:
                data = self.sock.recv(512)
                stage, part, attempt, records, nbytes, shards = json.loads(data)
                if not all(isinstance(v, int) for v in (stage, part, attempt, records, nbytes, shards)):
                    continue
            except (socket.timeout, ValueError, TypeError):
                continue
            except OSError:
                return
            with self._lock:
                previous = self._latest.get((stage, part))
                if previous is None or attempt >= previous[0]:  # a retried task starts again from 0
                    self._latest[(stage, part)] = (attempt, records, nbytes, shards)

    def sums(self) -> tuple[int, int, int]:
        with self._lock:
            values = list(self._latest.values())
        return tuple(sum(v[i] for v in values) for i in (1, 2, 3))

    def close(self) -> None:
        self._closed.set()
        self.sock.close()


@contextlib.contextmanager
def reporting(spark, emit: Callable[[str], None] | None, what: str, counters: TaskCounters | None = None,
              interval: float | None = None, shards: int | None = None):
    """While the block runs, emit `what: 12/50 tasks done, 1,204,000 records, 80.2 MB at 35.10 MB/s` every `interval`
    seconds (records and MB as the finished tasks reported them); with `shards` (how many the job loads), the
    shards done of that total instead of the tasks."""
    if emit is None:
        try:
            yield
        finally:
            if counters is not None:
                counters.close()
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
        totals = counters.totals() if counters is not None else None
        if shards is not None and counters is not None:
            out = f"          {what}: {totals[2]}/{shards} shards done"
        else:
            done, total = tasks()
            out = f"          {what}: {done}/{total} tasks done" if total else f"          {what}: running"
        if counters is not None:
            secs = max(time.monotonic() - start, 1e-6)
            out += (f", {totals[0]:,} records, "
                    f"{totals[1] / 1e6:,.1f} MB at {totals[1] / 1e6 / secs:,.2f} MB/s")
        return out

    def loop() -> None:
        while not stop.wait(interval):
            try:
                emit(line())
            except Exception:  # noqa: BLE001 - a progress line is never worth failing the run
                return

    thread = threading.Thread(target=loop, name="offsetlake-progress", daemon=True)
    thread.start()
    succeeded = False
    try:
        yield
        succeeded = True
    finally:
        stop.set()
        thread.join(timeout=1)
        if succeeded and shards is not None and counters is not None:  # the shards' totals, once all are in
            emit(line())
        if counters is not None:
            counters.close()
