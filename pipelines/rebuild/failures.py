"""How a rebuild fails: the three errors the CLI maps to exit codes, and a failure after the run started recorded
in `runs` (where the storage still allows it) and said in one line."""
from __future__ import annotations

import contextlib
import datetime
import errno
import re

from pipelines.io.retry import causes, plain, unavailable_cause


class UsageError(Exception):
    """Bad usage or unreadable input: exit code 2, with a message naming what and where."""


class StrictModeError(Exception):
    """`--strict` and a quarantined record: the run stops (exit 1)."""


class RunFailed(Exception):
    """The run failed after it started (a full disk, a file system gone read-only, an object store that kept
    failing past its retries): recorded as failed where that was possible; one line for the user, exit 1."""


# Text of the errors a full or read-only file system gives in Python, Spark (Java) and delta-rs (Rust).
_DISK_FULL = ("No space left on device", "os error 28", "Disk quota exceeded", "os error 122")
_NOT_WRITABLE = ("Read-only file system", "os error 30", "Permission denied", "os error 13")


def storage_error(exc: BaseException) -> str | None:
    """'disk full' / 'not writable' when `exc` (or what it wraps) is the file system refusing a write."""
    for e in causes(exc):
        if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
            return "disk full"
        if isinstance(e, OSError) and e.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
            return "not writable"
        text = str(e)
        if any(t in text for t in _DISK_FULL):
            return "disk full"
        if any(t in text for t in _NOT_WRITABLE):
            return "not writable"
    return None


# The exit status of a JVM whose heap ran out: 3 with -XX:+ExitOnOutOfMemoryError (conf/base), 52 from Spark's own
# handler (`SparkExitCode.OOM`, an executor's); and how Spark or a cluster manager reports either
_JVM_OOM_EXITS = (3, 52)
_HEAP = re.compile(r"java\.lang\.OutOfMemoryError[^\n]*|exit(?:ed with)? (?:code|status)[: ]+52\b")


def jvm_heap_exhausted(exc: BaseException, jvm_exit: int | None = None) -> str | None:
    """What says a JVM ran out of heap (`java.lang.OutOfMemoryError: Java heap space`, or its exit status), when
    `exc` (or what it wraps) or the driver JVM's exit status (`jvm_exit`: a local run's) says so; else None."""
    if jvm_exit in _JVM_OOM_EXITS:
        return f"java.lang.OutOfMemoryError, the driver JVM exited with status {jvm_exit}"

    for e in causes(exc):
        found = _HEAP.search(str(e))
        if found is not None:
            return found.group(0).strip()[:200]
    return None


def heap_advice(said: str, local: bool, memory: str | None, partition: str | None) -> str:
    """The one line's cause: the heap ran out (`said`: what said so), where, and which setting to raise from what."""
    setting = "spark.driver.memory" if local else "spark.executor.memory (spark.driver.memory for the driver's)"
    now = f" (now {memory})" if memory else ""
    at = f" at {partition}" if partition else ""
    return f"the JVM's heap ran out ({said}){at}: raise {setting}{now}; the README's \"Memory\" sizes it"


def is_failure(exc: BaseException) -> bool:
    """An error a run reports as its failure: an Exception, or a Rust panic a dependency raised (pyo3's
    PanicException derives from BaseException); not an interrupt or an exit."""
    return isinstance(exc, Exception) or type(exc).__name__ == "PanicException"


def cause_of(exc: BaseException) -> str:
    """What went wrong, on one line: the object store's fault when it was one, a full or read-only disk, else the
    error's first line."""
    unavailable = unavailable_cause(exc)
    if unavailable is not None:
        return f"object store unavailable: {unavailable}"
    storage = storage_error(exc)
    return f"{storage}: {first_line(exc)}" if storage else first_line(exc)


# The line a Python traceback ends with (not indented, unlike its frames): `OSError: [Errno 28] …`.
_RAISED = re.compile(r"^((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Unavailable|Exit|Panic)\w*: .*)$", re.M)
_TRACEBACK = "Traceback (most recent call last):"


def first_line(exc: BaseException) -> str:
    """The error's type and first line; for a Spark task's error (Spark's wrapper around the task's traceback),
    the Python error the task ended with."""
    text = str(exc)
    if _TRACEBACK in text:
        raised = _RAISED.search(text.rsplit(_TRACEBACK, 1)[1])
        if raised is not None:
            return raised.group(1).strip()[:300]
    lines = [ln.strip() for ln in plain(text).splitlines() if ln.strip()]
    return f"{type(exc).__name__}: {lines[0][:300] if lines else ''}"


def java_cause(exc: BaseException) -> str:
    """What a Py4J call's Java exception said (`: org.…Exception: [CLASS] message`, the line under Py4J's own
    "An error occurred while calling …"), else the error's first line."""
    for line in str(exc).splitlines():
        if line.startswith(": ") and "Exception" in line.split(":", 2)[1]:
            return line.split(": ", 2)[-1].strip()[:300]
    return first_line(exc)


@contextlib.contextmanager
def shard_errors():
    """A saved shard that does not load (`coordinator.saved.SavedShardError`: damaged or altered since its run
    wrote it), or a shard's task out of memory (`frames.segment_shards.ShardMemoryError`), here or in a Spark
    task, as one line for the user instead of a task's traceback. A task's error reaches the driver as Spark's
    text only: its first line names the error's class."""
    # here, not at module level: deltalake ~0.2 s, numpy ~0.1-0.3 s, pyarrow ~0.45 s of import (python -X importtime)
    from pipelines.coordinator.saved import SavedShardError
    from pipelines.frames.segment_shards import ShardMemoryError

    try:
        yield
    except SavedShardError as e:
        raise RunFailed(f"{e}: run again without --incremental to rebuild in full") from None
    except ShardMemoryError as e:
        raise RunFailed(str(e)) from None
    except Exception as e:
        found = re.search(r"SavedShardError: (.*)", str(e))
        if found is not None:
            raise RunFailed(f"{found.group(1)}: run again without --incremental to rebuild in full") from None
        found = re.search(r"ShardMemoryError: (.*)", str(e))
        if found is not None:
            raise RunFailed(found.group(1)) from None
        raise


def record_failure(warehouse, snapshot_id: str, stage: str, row: dict, e: BaseException, warehouse_uri: str,
                   heap: str | None = None) -> None:
    """A run that failed after it started: recorded in `runs` (`row`: what the run knew of itself) unless the
    snapshot's write recorded it already (`io.warehouse.Warehouse.write_snapshot`); a storage refusal, a refused
    write or an object store that kept failing becomes one line for the user (UsageError / RunFailed). Returns
    when `e` should propagate as it is."""
    # here, not at module level: deltalake ~0.2 s, pyarrow ~0.45 s of import (python -X importtime)
    from pipelines.io.delta import DeltaWriteError
    from pipelines.io.storage import StorageError
    from pipelines.io.warehouse import WarehouseError

    stage = warehouse.recorded_stage(snapshot_id) or stage  # the write's own record names where it stopped
    storage = storage_error(e) if heap is None else None
    unavailable = unavailable_cause(e) if storage is None and heap is None else None
    cause = (heap if heap is not None else f"object store unavailable: {unavailable}" if unavailable is not None
             else "Spark did not start: " + java_cause(e).rstrip(".") if stage == "start" else first_line(e))
    if not warehouse.failure_recorded(snapshot_id):
        try:
            warehouse.record_failure(snapshot_id, {**row, "summary": {"error": cause, "stage": stage}})
        except Exception as mark_exc:
            if storage is None and unavailable is None and storage_error(mark_exc) is None \
                    and unavailable_cause(mark_exc) is None:
                raise
            if not recorded_after_all(warehouse, snapshot_id):
                raise RunFailed(f"run {snapshot_id} failed in stage {stage}: "
                                f"{cause if unavailable is not None else (storage or 'storage error') + ': ' + cause}"
                                f"; its failure could not be recorded either ({cause_of(mark_exc)})") from None
    if unavailable is not None or heap is not None:
        raise RunFailed(f"run {snapshot_id} failed in stage {stage}: {cause}; recorded as failed") from None
    if stage == "start":  # Spark refused to start (a setting it rejects, a JVM that would not run): not a bug of ours
        raise RunFailed(f"run {snapshot_id} failed in stage start: {cause}; recorded as failed") from None
    if storage == "not writable":
        raise UsageError(f"--warehouse {warehouse_uri}: cannot write ({first_line(e)}); "
                         f"run {snapshot_id} recorded as failed") from None
    if storage == "disk full" or type(e).__name__ == "PanicException":
        raise RunFailed(f"run {snapshot_id} failed in stage {stage}: {storage or 'delta-rs panic'}: "
                        f"{first_line(e)}; recorded as failed") from None
    if isinstance(e, (WarehouseError, DeltaWriteError, StorageError)):  # refused, or the store failed: said in full
        raise RunFailed(f"run {snapshot_id} failed in stage {stage}: {e}; recorded as failed") from None


def recorded_after_all(warehouse, snapshot_id: str) -> bool:
    """Whether `snapshot_id`'s `failed` row is there though writing it raised: the commit landed and what followed
    it failed (its answer lost, its post-commit work), which only a read can tell."""
    try:
        return any(r["snapshot_id"] == snapshot_id and r["status"] == "failed" for r in warehouse.snapshots())
    except Exception:  # the store still fails: say it was not recorded, as far as this run can tell
        return False


def _lock_time(since) -> str | None:
    """A lock's `since` as its run's start, when it is an ISO-8601 time (it is, unless the file was edited or
    damaged: then the run's start is unknown, not a traceback of the run that took the lock over)."""
    if not isinstance(since, str):
        return None
    try:
        datetime.datetime.fromisoformat(since.replace("Z", "+00:00"))
    except ValueError:
        return None
    return since


def record_abandoned(warehouse, holder: dict, emit) -> None:
    """A run whose lock this run took over died (killed, crashed, host lost): record it as failed."""
    sid = holder.get("snapshot_id")
    stage = holder.get("stage") or "start"
    if not isinstance(stage, str):
        stage = str(stage)
    said = {k: "?" if holder.get(k) is None else holder[k] for k in ("snapshot_id", "pid", "host", "since")}
    reason = (f"abandoned: process {said['pid']} on {said['host']} stopped during stage {stage} "
              f"(its lock, taken {said['since']}, was stale)")
    emit(f"          took over a stale writer lock: run {said['snapshot_id']} {reason}")
    if not sid or not isinstance(sid, str):
        return
    # here, not at module level: deltalake ~0.2 s, pyarrow ~0.45 s of import (python -X importtime)
    from pipelines.io import delta

    try:
        delta.check_partition_value(sid)
    except ValueError:
        return
    warehouse.record_failure(sid, dict(started_at=_lock_time(holder.get("since")),
                                       summary={"error": reason, "stage": stage}),
                             partial=stage == "commit")
