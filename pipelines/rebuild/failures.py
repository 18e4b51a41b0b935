"""How a rebuild fails: the three errors the CLI maps to exit codes, and a failure after the run started recorded
in `runs` (where the storage still allows it) and said in one line."""
from __future__ import annotations

import contextlib
import errno
import re


class UsageError(Exception):
    """Bad usage or unreadable input: exit code 2, with a message naming what and where."""


class StrictModeError(Exception):
    """`--strict` and a quarantined record: the run stops (exit 1)."""


class RunFailed(Exception):
    """The run failed after it started (a full disk, a file system gone read-only): recorded as failed where
    that was possible; one line for the user, exit 1."""


# Text of the errors a full or read-only file system gives in Python, Spark (Java) and delta-rs (Rust).
_DISK_FULL = ("No space left on device", "os error 28", "Disk quota exceeded", "os error 122")
_NOT_WRITABLE = ("Read-only file system", "os error 30", "Permission denied", "os error 13")


def storage_error(exc: BaseException) -> str | None:
    """'disk full' / 'not writable' when `exc` (or what it wraps) is the file system refusing a write."""
    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return "disk full"
        if isinstance(exc, OSError) and exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
            return "not writable"
        text = str(exc)
        if any(t in text for t in _DISK_FULL):
            return "disk full"
        if any(t in text for t in _NOT_WRITABLE):
            return "not writable"
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return None


def first_line(exc: BaseException) -> str:
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    return f"{type(exc).__name__}: {lines[0][:300] if lines else ''}"


@contextlib.contextmanager
def shard_errors():
    """A saved shard that does not load (`coordinator.saved.SavedShardError`: damaged or altered since its run
    wrote it), or a shard's task out of memory (`frames.segment_shards.ShardMemoryError`), here or in a Spark
    task, as one line for the user instead of a task's traceback. A task's error reaches the driver as Spark's
    text only: its first line names the error's class."""
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


def record_failure(warehouse, snapshot_id: str, stage: str, row: dict, e: BaseException, warehouse_uri: str) -> None:
    """A run that failed after it started: recorded in `runs` (`row`: what the run knew of itself) unless the
    snapshot's write recorded it already (`io.warehouse.Warehouse.write_snapshot`); a storage refusal or a refused
    write becomes one line for the user (UsageError / RunFailed). Returns when `e` should propagate as it is."""
    from pipelines.io.delta import DeltaWriteError
    from pipelines.io.storage import StorageError
    from pipelines.io.warehouse import WarehouseError

    storage = storage_error(e)
    if not warehouse.failure_recorded(snapshot_id):
        try:
            warehouse.record_failure(snapshot_id, {**row, "summary": {"error": first_line(e), "stage": stage}})
        except Exception as mark_exc:
            if storage is None and storage_error(mark_exc) is None:
                raise
            raise RunFailed(f"run {snapshot_id} failed in stage {stage}: {storage or 'storage error'}: "
                            f"{first_line(e)}; its failure could not be recorded either "
                            f"({first_line(mark_exc)})") from None
    if storage == "not writable":
        raise UsageError(f"--warehouse {warehouse_uri}: cannot write ({first_line(e)}); "
                         f"run {snapshot_id} recorded as failed") from None
    if storage == "disk full" or type(e).__name__ == "PanicException":
        raise RunFailed(f"run {snapshot_id} failed in stage {stage}: {storage or 'delta-rs panic'}: "
                        f"{first_line(e)}; recorded as failed") from None
    if isinstance(e, (WarehouseError, DeltaWriteError, StorageError)):  # refused, or the store failed: said in full
        raise RunFailed(f"run {snapshot_id} failed in stage {stage}: {e}; recorded as failed") from None


def record_abandoned(warehouse, holder: dict, emit) -> None:
    """A run whose lock this run took over died (killed, crashed, host lost): record it as failed."""
    sid = holder.get("snapshot_id")
    stage = holder.get("stage") or "start"
    reason = (f"abandoned: process {holder.get('pid')} on {holder.get('host')} stopped during stage {stage} "
              f"(its lock, taken {holder.get('since')}, was stale)")
    emit(f"          took over a stale writer lock: run {sid} {reason}")
    if not sid:
        return
    from pipelines.io import delta

    try:
        delta.check_partition_value(sid)
    except ValueError:
        return
    warehouse.record_failure(sid, dict(started_at=holder.get("since"), summary={"error": reason, "stage": stage}),
                             partial=stage == "commit")
