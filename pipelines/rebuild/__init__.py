"""A rebuild: one snapshot of the coordinator state from a `__consumer_offsets` dump.

`request` (what was asked, the settings resolved once) -> `preflight` (every check that needs no Spark, the
writer lock) -> `stages` (each returns a frozen result the next takes; `executor` chooses where the shards
execute) -> `summary`. `failures` holds the errors the CLI maps to exit codes."""
from __future__ import annotations

import contextlib
import time
from dataclasses import replace
from typing import Callable

from pipelines.config import Settings
from pipelines.io.retry import StoreUnavailable
from pipelines.rebuild import stages
from pipelines.rebuild.failures import (RunFailed, StrictModeError, UsageError, heap_advice, is_failure,
                                       jvm_heap_exhausted, record_abandoned, record_failure)
from pipelines.rebuild.request import RebuildRequest, RunSettings, new_snapshot_id, resolve_settings
from pipelines.rebuild.summary import Progress, RunSummary
from pipelines.session import jvm_exit_status
from pipelines.times import ms_to_iso
from pipelines.session import SessionOnDemand

__all__ = ["RebuildRequest", "RunFailed", "RunSettings", "RunSummary", "StrictModeError", "UsageError",
           "new_snapshot_id", "resolve_settings", "run_rebuild"]


def run_rebuild(spark, settings: Settings, req: RebuildRequest, emit: Callable[[str], None] | None = None,
                prepared=None) -> RunSummary:
    """The whole pipeline for one snapshot. Raises UsageError (exit 2) for bad usage or unreadable input.
    `spark`: a SparkSession, or a `session.SessionOnDemand`, which a run whose shards execute in this process never
    starts.

    `prepared` is `rebuild.preflight.prepare_run`'s result when the caller checked the request before starting
    Spark (the CLI does); this function releases its writer lock when it returns or raises."""
    # imported here, not at module level: deltalake ~0.2 s, numpy ~0.1-0.3 s, pyarrow ~0.45 s, pyarrow.fs ~0.05 s,
    # pyarrow.parquet ~0.05 s of import (python -X importtime)
    from pipelines.rebuild.preflight import prepare_run

    prepared = prepared or prepare_run(settings, req)
    try:
        summary = _run_locked(spark, settings, req, emit, prepared)
    except BaseException:
        try:
            prepared.release()
        except Exception:  # the run's own error is the one to report; the lock left behind goes stale
            pass
        raise
    try:
        prepared.release()
    except Exception as e:  # the snapshot is recorded as it is: say what was left behind
        from pipelines.rebuild.failures import cause_of

        summary = replace(summary, after_commit=[
            *summary.after_commit, f"the writer lock {prepared.lock.path} was not released ({cause_of(e)}): the "
                                   "next run takes it over once it is stale"])
    return summary


def _failed_in(lock, progress: Progress) -> str | None:
    """The stage a run failed in: its progress's, but the commit once the lock says the run got there (a step of the
    write stage that only the lock records, before the first table's commit). The write records where it stopped
    itself, unless its record cannot be written either (a full disk): then this names it."""
    return "commit" if lock.stage == "commit" else progress.current


def _note_stage(lock, name: str) -> None:
    """The stage in the writer lock, for the record of a run killed in it. A lock that cannot be written (a full
    disk) leaves the stage before: the stage's own writes then fail with what they met, in their stage. (The
    commit's note is not this one: `stages._committing` must not go on without it.)"""
    # imported here, not at module level: pyarrow ~0.45 s, pyarrow.fs ~0.05 s of import (python -X importtime)
    from pipelines.io.storage import StorageError

    try:
        lock.update(stage=name)
    except (OSError, StorageError, StoreUnavailable):
        pass


def heap_ran_out(settings: Settings, prepared, e: BaseException) -> str | None:
    """The one line's cause when a JVM's heap ran out: what said so, which heap to raise and the largest offsets
    partition of the input (the task that needs the most); None otherwise."""
    said = jvm_heap_exhausted(e, jvm_exit_status())
    if said is None:
        return None
    conf = settings.spark_conf
    master = settings.spark_master_from_env or conf.get("spark.master", "local[*]")
    local = master.startswith("local")
    sizes = {p: n for p, n in prepared.plan.bytes_by_partition().items() if p is not None and p >= 0}
    largest = max(sizes, key=sizes.get) if sizes else None
    where = None if largest is None else (
        f"offsets partition {largest}, the largest ({sizes[largest] / 2 ** 20:,.0f} MiB of segments)")
    return heap_advice(said, local, conf.get("spark.driver.memory" if local else "spark.executor.memory"), where)


def _run_locked(spark, settings: Settings, req: RebuildRequest, emit, prepared) -> RunSummary:
    # imported here, not at module level: deltalake ~0.2 s, numpy ~0.1-0.3 s, pyarrow ~0.45 s, pyarrow.fs ~0.05 s,
    # pyarrow.parquet ~0.05 s of import (python -X importtime)
    from pipelines.incremental import is_what_if
    from pipelines.io.warehouse import Warehouse

    warehouse = Warehouse(req.warehouse)
    progress = Progress(emit, on_stage=lambda name: _note_stage(prepared.lock, name))
    if prepared.abandoned is not None:
        record_abandoned(warehouse, prepared.abandoned, progress.emit)
    with contextlib.ExitStack() as held:
        run = stages.Run(spark=spark, settings=settings, req=req, prepared=prepared,
                         warehouse=warehouse, progress=progress, started_ms=int(time.time() * 1000),
                         kind="what-if" if is_what_if(req) else "scheduled", held=held)
        try:
            planned = stages.plan(run)
            decoded = stages.decode(run, planned)
            replayed = stages.replay(run, planned, decoded)
            assembled = stages.assemble(run, planned, decoded, replayed)
            materialized = stages.materialize(run, replayed, assembled)
            validated = stages.validate(run, planned, decoded, replayed, assembled, materialized)
            summary = stages.summarize(run, planned, decoded, replayed, assembled, materialized, validated)
            pending = stages.checkpoint(run, planned, replayed, validated)
            return stages.write(run, summary, planned, assembled, materialized, validated, pending)
        except BaseException as e:
            if not is_failure(e):  # an interrupt: the next run records it as abandoned (its lock says the stage)
                raise
            conf = run.conf
            stage = "start" if isinstance(spark, SessionOnDemand) and spark.start_failed else _failed_in(prepared.lock,
                                                                                                      progress)
            record_failure(warehouse, run.snapshot_id, stage or "end", dict(
                started_at=ms_to_iso(run.started_ms), inputs=prepared.inputs, semantics=conf.semantics,
                retention_minutes=conf.retention_minutes, kind=run.kind), e, req.warehouse,
                heap=heap_ran_out(settings, prepared, e))
            raise
