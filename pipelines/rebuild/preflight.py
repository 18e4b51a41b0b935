"""What a rebuild checks before Spark starts, so that bad usage costs a second, not a JVM start: settings, times and
numbers, the snapshot id, the inputs (present, readable, holding `__consumer_offsets` data), the warehouse
(not inside an input, writable) — and then it takes the warehouse's writer lock (`pipelines/io/lock.py`)."""
from __future__ import annotations

import errno
import math
import os
import re
import time
import uuid
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import pyarrow.fs as pafs

from pipelines.config import ConfigError, Settings
from pipelines.decoding.errors import DecodeError
from pipelines.decoding.framing import HEADER_SIZE_UP_TO_MAGIC, MAGIC_OFFSET, frame_entry
from pipelines.frames.decode import DecodePlan, NoOffsetsDataError, plan_inputs
from pipelines.incremental import is_what_if
from pipelines.io import cluster as clusters
from pipelines.io import delta, storage
from pipelines.io.checkpoint import CHECKPOINT_DIR, STATE_DIR
from pipelines.io.cluster import ClusterIdentity
from pipelines.io.lock import LockHeldError, WriterLock
from pipelines.io.retry import unavailable_cause
from pipelines.io.scratch import SCRATCH_DIR
from pipelines.io.snapshots import DamagedTable
from pipelines.io.warehouse import Warehouse
from pipelines.rebuild.failures import RunFailed, UsageError, cause_of, first_line, recorded_after_all
from pipelines.rebuild.request import RebuildRequest, RunSettings, new_snapshot_id, resolve_settings
from pipelines.session import spark_log_level
from pipelines.times import TimeFormatError, ms_to_iso, parse_time_ms
from pipelines.validation.settings import max_unread_bytes, pandas_max_rows, validation_settings
from schemas.records import OFFSET_MAX, PARTITION_MAX
from schemas.tables import TABLES


@dataclass
class PreparedRun:
    """A request checked and planned: what `run_rebuild` needs besides Spark, and the lock it holds."""

    conf: RunSettings
    inputs: list[str]
    snapshot_id: str
    until_time_ms: int | None
    as_of_ms: int | None
    plan: DecodePlan
    lock: WriterLock
    abandoned: dict | None  # the record of a stale lock this run took over
    cluster: ClusterIdentity | None = None  # of the inputs
    other_cluster: str | None = None  # --other-cluster: why the input is not the history's cluster

    def release(self) -> None:
        self.lock.release()


def prepare_run(settings: Settings, req: RebuildRequest) -> PreparedRun:
    """Every check that needs no Spark; raises UsageError (exit 2) with one line. Takes the writer lock last.

    An object store that kept failing transiently through these checks (`io.retry.StoreUnavailable`) is no
    user's mistake: the run is recorded as failed in stage `preflight` and RunFailed (exit 1) raised."""
    conf = resolve_settings(settings, req)
    # an empty id given (`--snapshot-id "$UNSET"`) is refused with the others, not a new id each run: a rerun
    # would add a snapshot instead of replacing its own
    snapshot_id = new_snapshot_id() if req.snapshot_id is None else req.snapshot_id
    try:
        return _prepare(settings, req, conf, snapshot_id)
    except storage.StoreUnavailable as e:
        raise record_unstarted(settings, req, snapshot_id, e) from None


def _prepare(settings: Settings, req: RebuildRequest, conf: RunSettings, snapshot_id: str) -> PreparedRun:
    try:
        delta.check_partition_value(snapshot_id)
    except ValueError as e:
        raise UsageError(f"--snapshot-id: {e}") from None
    try:
        # an empty TIME given (`--until-time "$UNSET"`) is refused, not read as no cut: a run of the whole log
        until_time_ms = parse_time_ms(req.until_time, what="--until-time") if req.until_time is not None else None
        as_of_ms = parse_time_ms(req.as_of, what="--as-of") if req.as_of is not None else None
    except TimeFormatError as e:
        raise UsageError(str(e)) from None
    if req.until_offset is not None and req.until_offset < 0:
        raise UsageError(f"--until-offset must be 0 or more, not {req.until_offset}")
    if req.until_offset is not None and req.until_offset > OFFSET_MAX:  # an offset is a long
        raise UsageError(f"--until-offset must be 0 to {OFFSET_MAX}, not {req.until_offset}")
    if req.num_partitions is not None and not 1 <= req.num_partitions <= PARTITION_MAX:
        # Kafka's partition count is an int
        raise UsageError(f"--num-partitions must be 1 to {PARTITION_MAX}, not {req.num_partitions}")
    if conf.num_partitions is not None and conf.num_partitions > PARTITION_MAX:
        raise UsageError(f"rebuild.num_offsets_partitions must be at most {PARTITION_MAX}, not {conf.num_partitions}")
    inputs = check_inputs(req.inputs)
    try:
        warehouse = storage.location(req.warehouse)
    except storage.StorageError as e:
        raise UsageError(f"--warehouse {e}") from None
    check_not_nested(inputs, warehouse)
    plan = plan_and_check(inputs)
    if conf.num_partitions is not None and plan.max_partition >= conf.num_partitions:
        # every group of that partition would be placed in another by Kafka's partitioner: the run failed its
        # validation after all its work
        what = "--num-partitions" if req.num_partitions is not None else "rebuild.num_offsets_partitions"
        raise UsageError(f"{what} {conf.num_partitions}: the input holds offsets partition {plan.max_partition}, "
                         f"which a topic of {conf.num_partitions} partition(s) cannot have")
    cluster, other_cluster = check_cluster(plan, warehouse, req.other_cluster)
    check_validation_settings(settings)
    check_log_level(settings)
    lock_settings(settings)
    probe_writable(warehouse, snapshot_id)
    check_tables(warehouse)
    check_runs(warehouse, req, snapshot_id)
    lock, abandoned = take_lock(settings, warehouse, snapshot_id)
    return PreparedRun(conf=conf, inputs=inputs, snapshot_id=snapshot_id, until_time_ms=until_time_ms,
                       as_of_ms=as_of_ms, plan=plan, lock=lock, abandoned=abandoned, cluster=cluster,
                       other_cluster=other_cluster)


def check_tables(warehouse: "storage.Location") -> None:
    """Each table of the warehouse opened: the run commits to every one at its end (and reads `offset_commits` to
    check its cluster), so a damaged Delta log failed it there, after all its work, in a traceback (DeltaError)."""
    for table in TABLES:
        open_or_refuse(warehouse, table)


def open_or_refuse(warehouse: "storage.Location", table: str):
    """The warehouse's `table` (`delta.open_table`); a Delta log that cannot be read is one line (UsageError)."""
    # imported here, not at module level: deltalake ~0.2 s of import (python -X importtime)
    from deltalake.exceptions import DeltaError

    try:
        dt = delta.open_table(warehouse / table)
    except (DeltaError, OSError) as e:
        if isinstance(e, OSError) and e.errno is not None:
            raise  # the disk's or the system's, not the log's: the run reports it as such
        # delta-rs raises a log it cannot list (a file name its object_store path parser refuses) as an OSError
        raise UsageError(f"--warehouse {warehouse}: cannot read its {table} table (its Delta log at "
                         f"{warehouse / table}): {first_line(e)}; restore the table's last commit, or write to "
                         "another --warehouse") from None
    # a directory named as a commit past the table's version: delta-rs reads past it, but each try of the run's commit
    # at that version finds it taken (CommitFailedError after 15), at the end of the run, and the run's failure could
    # not be recorded either (a traceback)
    log = warehouse / table / "_delta_log"
    for info in [] if dt is None else storage.retried(log, "list", log.listdir):
        name = os.path.basename(info.path)
        if info.type == pafs.FileType.Directory and re.fullmatch(r"\d{20}\.json", name) \
                and int(name[:20]) > dt.version():
            raise UsageError(f"--warehouse {warehouse}: {info.path} is a directory where the run commits a version "
                             f"of the {table} table; remove it, or write to another --warehouse")
    return dt


def check_runs(warehouse: "storage.Location", req: RebuildRequest, snapshot_id: str) -> None:
    """The warehouse's `runs` read before Spark starts: one that cannot be read failed the run after all its work,
    and its failure could not be recorded there either (a traceback). A what-if run (`--as-of`, `--until-*`) under the
    id of a succeeded scheduled snapshot is refused: its row would replace the scheduled one, so the served snapshot
    went back to an older one (or to none) and the `--incremental` chain lost its link, while the run said both stay
    on the scheduled runs."""
    try:
        rows = Warehouse(warehouse).snapshots()
    except DamagedTable as e:
        raise UsageError(f"--warehouse {warehouse}: {e}; no run can be recorded in it: restore the table's last "
                         "commit, or write to another --warehouse") from None
    row = next((r for r in rows if r["snapshot_id"] == snapshot_id), None)
    if is_what_if(req) and row is not None and row["status"] == "succeeded" and row["kind"] == "scheduled":
        raise UsageError(f"--snapshot-id {snapshot_id} is a scheduled snapshot of this warehouse: a what-if run "
                         "(--as-of/--until-time/--until-offset) would replace it; give the what-if run another id")


def check_cluster(plan, warehouse: "storage.Location", allowed: bool):
    """The inputs' cluster (`pipelines.io.cluster`), refused when the inputs mix clusters or are not the cluster
    whose records the warehouse's history holds, unless `allowed` (`--other-cluster`): then the reason is returned
    beside it, and the run writes its snapshot without adding its records to that history."""
    identity = clusters.of_inputs(plan)
    why = identity.mixed()
    if why is None and identity.known:
        try:
            held = clusters.of_warehouse(warehouse)
        except clusters.ClusterRecordDamaged as e:
            if not allowed:
                raise UsageError(f"{e}: the cluster of the warehouse's history cannot be checked against the "
                                 f"input's ({identity.describe()}); restore the file, or delete it if the history "
                                 "is this cluster's") from None
            return identity, f"{e}: the warehouse's history cluster is unknown"
        history = open_or_refuse(warehouse, "offset_commits") if held is not None else None
        if history is not None and delta.active_files(history):
            why = identity.differs_from(held)
    if why is not None and not allowed:
        raise UsageError(f"{why}: a warehouse keeps one cluster's history (use another --warehouse, or "
                         "--other-cluster to write the snapshot without adding its records to the history)")
    return identity, why


def check_validation_settings(settings: Settings) -> None:
    """The validation settings are read after the replay: a bad one is reported now, not minutes into the run."""
    try:
        validation_settings(settings)
        pandas_max_rows(settings)
        max_unread_bytes(settings)
    except ConfigError as e:
        raise UsageError(str(e)) from None


def check_log_level(settings: Settings) -> None:
    try:
        spark_log_level(settings)
    except ConfigError as e:
        raise UsageError(str(e)) from None


def check_inputs(inputs) -> list[str]:
    """Each input exists and can be read (a directory: listed and entered) by this process."""
    if not inputs:
        raise UsageError("no --input given")
    out = []
    for p in inputs:
        if "://" in str(p):
            out.append(_check_remote_input(str(p)))
            continue
        path = Path(p)
        if not os.path.lexists(path):
            raise UsageError(f"input {p}: no such file or directory")
        if not path.exists():
            raise UsageError(f"input {p}: a symbolic link to nothing")
        _check_readable(path)
        out.append(str(path.resolve()))
    return out


def _check_remote_input(uri: str) -> str:
    """An object-store input: a URI this project reads, naming an object or a prefix with objects under it."""
    try:
        loc = storage.location(uri)
        # a local `dir/missing/..` is no such directory: the OS resolves each name before the `..`
        if not loc.exists() or not all(d.is_dir() for d in storage.climbed_dirs(uri)):
            raise UsageError(f"input {uri}: no such object or prefix")
    except storage.StorageError as e:
        raise UsageError(f"input {e}") from None
    return loc.uri


def _check_readable(path: Path) -> None:
    if path.is_dir():
        if not os.access(path, os.R_OK | os.X_OK):
            raise UsageError(f"input {path}: directory cannot be listed (permission denied)")
    elif not os.access(path, os.R_OK):
        raise UsageError(f"input {path}: file cannot be read (permission denied)")


def check_not_nested(inputs: list[str], warehouse: "storage.Location") -> None:
    """The warehouse is neither an input, nor inside one, nor holding one: a run would read its own output (or
    write tables among a broker's partition directories)."""
    warehouse = storage.location(warehouse)
    if warehouse.remote:
        wh = PurePosixPath("/" + warehouse.path)
        for p in inputs:
            if not storage.is_remote(p):
                continue
            inp = PurePosixPath("/" + storage.location(p).path)
            if wh == inp or inp in wh.parents:
                raise UsageError(f"--warehouse {warehouse} is inside the input {p}: choose a prefix outside it")
            if wh in inp.parents:
                raise UsageError(f"input {p} is inside the warehouse {warehouse}: a warehouse is not an input")
        return
    wh = Path(os.path.realpath(warehouse.uri))
    for p in inputs:
        if storage.is_remote(p):
            continue
        inp = Path(os.path.realpath(p))
        if wh == inp or inp in wh.parents:
            raise UsageError(f"--warehouse {warehouse} is inside the input {p}: choose a directory outside it")
        if wh in inp.parents:
            raise UsageError(f"input {p} is inside the warehouse {warehouse}: a warehouse is not an input")


def plan_and_check(inputs: list[str]):
    """The decode plan (which files hold what), refused when it reads nothing Kafka wrote or cannot read some of
    it: a snapshot of part of the log would be served as if it were the whole."""
    try:
        plan = plan_inputs(inputs)
    except NoOffsetsDataError as e:
        raise UsageError(str(e)) from None
    except storage.StorageError as e:
        raise UsageError(f"cannot read input: {e}") from None
    except (OSError, DecodeError) as e:
        raise UsageError(f"cannot read input: {e}") from None
    for item in plan.items:
        if storage.is_remote(item["path"]):
            continue  # a GET the store refuses becomes an `unreadable` row, as a file that vanished does
        path = Path(item["path"])
        if item["kind"] == "problem" and item["problem_kind"] == "unreadable" and path.exists():
            # a file or directory the process may not read; a dangling link or a directory named like a segment
            # is damage, and stays a quarantine row
            if not os.access(path, os.R_OK | (os.X_OK if path.is_dir() else 0)):
                raise UsageError(f"cannot read input: {item['problem_reason']} ({path})")
        elif item["kind"] in ("segment", "tabular"):
            if not os.access(path, os.R_OK) or not os.access(path.parent, os.R_OK | os.X_OK):
                raise UsageError(f"cannot read input: {path} (permission denied)")
    segments = [i for i in plan.items if i["kind"] == "segment"]
    if segments and not plan.num_tabular and not any(_starts_like_a_log(i["path"], i["size"]) for i in segments):
        raise UsageError(f"no __consumer_offsets data found under {', '.join(inputs)}: none of the "
                         f"{len(segments)} .log file(s) starts with a Kafka log entry (e.g. {segments[0]['path']})")
    return plan


def _starts_like_a_log(path: str, size: int) -> bool:
    if storage.is_remote(path):
        loc = storage.location(path)

        def read_head() -> bytes:
            with loc.fs.open_input_file(loc.path) as f:
                return f.read(HEADER_SIZE_UP_TO_MAGIC)

        try:
            head = storage.retried(loc, "read", read_head)
        except (OSError, storage.StorageError) as e:  # a refusal; a transient fault past its retries propagates
            raise UsageError(f"cannot read input: {path}: {storage.error_text(e)}") from None
    else:
        try:
            with open(path, "rb") as f:
                head = f.read(HEADER_SIZE_UP_TO_MAGIC)
        except OSError as e:
            raise UsageError(f"cannot read input: {path}: {e.strerror}") from None
    # the head every entry starts with is the same 17 bytes for every message format Kafka ever wrote
    frame = frame_entry(head, 0, size) if len(head) == HEADER_SIZE_UP_TO_MAGIC else None
    return frame is not None and frame[0] >= 0 and head[MAGIC_OFFSET] in (0, 1, 2)


# the directories a run writes into: a file in the place of one failed the run at its write, a traceback
WAREHOUSE_DIRS = (*TABLES, CHECKPOINT_DIR, STATE_DIR, SCRATCH_DIR, "_reports", "_attempts")


def probe_writable(warehouse: "storage.Location", snapshot_id: str | None = None) -> None:
    """Create the warehouse if needed and write (then delete) a probe file: a read-only, full or foreign
    warehouse is reported now, in one line, not by a failed write after minutes of work. With `snapshot_id`, the
    files its run replaces are checked too: a directory in the place of one failed the run at its write (a
    traceback: IsADirectoryError)."""
    warehouse = storage.location(warehouse)
    if warehouse.remote:
        probe = warehouse / f".offsetlake-probe-{uuid.uuid4().hex[:8]}"
        try:
            if warehouse.is_file():
                raise UsageError(f"--warehouse {warehouse} is an object, not a prefix")
            probe.write_bytes(b"offsetlake")
            probe.delete_file()
        except storage.StorageError as e:
            raise UsageError(f"--warehouse {e}") from None
        return
    warehouse = warehouse.local
    if warehouse.exists() and not warehouse.is_dir():
        raise UsageError(f"--warehouse {warehouse} is a file, not a directory")
    for name in WAREHOUSE_DIRS:
        if (warehouse / name).exists() and not (warehouse / name).is_dir():
            raise UsageError(f"--warehouse {warehouse}: {warehouse / name} is a file, not a directory (the run "
                             f"writes into it)")
    replaced = [] if snapshot_id is None else [
        f"_reports/{snapshot_id}.html", f"_reports/{snapshot_id}.json", f"{CHECKPOINT_DIR}/{snapshot_id}.json",
        clusters.CLUSTER_FILE]
    for name in replaced:
        if (warehouse / name).is_dir():
            raise UsageError(f"--warehouse {warehouse}: {warehouse / name} is a directory, not a file (the run "
                             f"writes it)")
    probe = warehouse / f".offsetlake-probe-{uuid.uuid4().hex[:8]}"
    try:
        warehouse.mkdir(parents=True, exist_ok=True)
        fd = os.open(probe, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        try:
            os.write(fd, b"offsetlake" * 410)  # 4 KB: a full disk fails here, not only on metadata
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as e:
        raise UsageError(f"--warehouse {warehouse}: {os_error_text(e)}") from None
    finally:
        try:
            probe.unlink()
        except OSError:
            pass


def os_error_text(e: OSError) -> str:
    """One line for the file system errors a user can act on."""
    reason = {errno.EROFS: "read-only file system", errno.EACCES: "permission denied",
              errno.EPERM: "operation not permitted", errno.ENOSPC: "no space left on device",
              errno.EDQUOT: "disk quota exceeded"}.get(e.errno, e.strerror or str(e))
    where = f" ({e.filename})" if e.filename else ""
    return f"cannot write: {reason}{where}"


def lock_settings(settings: Settings) -> tuple[float, float]:
    """(wait seconds, stale seconds) of the writer lock, from `warehouse:`."""
    w = settings.section("warehouse")
    try:
        wait = float(w.get("lock_wait_seconds") or 0)
        stale = float(w.get("lock_stale_minutes") or 10) * 60
    except (TypeError, ValueError):
        raise UsageError("warehouse.lock_wait_seconds and warehouse.lock_stale_minutes must be numbers") from None
    if not (0 <= wait < math.inf and 0 < stale < math.inf):  # NaN fails every comparison, so it is refused too
        raise UsageError("warehouse.lock_wait_seconds must be >= 0 and warehouse.lock_stale_minutes > 0, both finite")
    return wait, stale


def take_lock(settings: Settings, warehouse: "storage.Location", snapshot_id: str):
    wait, stale = lock_settings(settings)
    lock = WriterLock(warehouse, stale_seconds=stale)
    try:
        abandoned = lock.acquire(snapshot_id, wait_seconds=wait)
    except LockHeldError as e:
        raise UsageError(str(e)) from None
    except storage.StorageError as e:
        raise UsageError(f"--warehouse {e}") from None
    except OSError as e:
        raise UsageError(f"--warehouse {warehouse}: {os_error_text(e)}") from None
    return lock, abandoned


def record_unstarted(settings, req, snapshot_id: str, e: BaseException) -> RunFailed:
    """A run the object store kept from starting (its checks before Spark read the inputs and write the
    warehouse, and a fault outlasted the retries): a failed run, not a user's mistake. Recorded in `runs` as failed
    in stage `preflight` where the warehouse allows it (under its writer lock, taken for the write and given
    back); the one line for the user, to raise."""
    cause = f"object store unavailable: {unavailable_cause(e) or first_line(e)}"
    lock = None
    try:
        conf = resolve_settings(settings, req)
        lock = WriterLock(storage.location(req.warehouse))
        lock.acquire(snapshot_id)
        Warehouse(req.warehouse).record_failure(snapshot_id, dict(
            started_at=ms_to_iso(int(time.time() * 1000)), inputs=list(req.inputs), semantics=conf.semantics,
            retention_minutes=conf.retention_minutes, kind="what-if" if is_what_if(req) else "scheduled",
            summary={"error": cause, "stage": "preflight"}))
        recorded = "recorded as failed"
    except LockHeldError as held:
        recorded = f"not recorded: {held}"
    except Exception as mark_exc:
        recorded = ("recorded as failed" if lock is not None and lock.token is not None
                    and recorded_after_all(Warehouse(req.warehouse), snapshot_id)
                    else f"its failure could not be recorded either ({cause_of(mark_exc)})")
    finally:
        if lock is not None:
            try:
                lock.release()
            except Exception:  # left stale: the next run takes it over
                pass
    return RunFailed(f"run {snapshot_id} failed in stage preflight: {cause}; {recorded}")
