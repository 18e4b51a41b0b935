"""Composition only: read -> decode -> replay -> expire -> validate -> write. Transforms live in their layers."""
from __future__ import annotations

import datetime as dt
import json
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from pipelines.config import Settings


class UsageError(Exception):
    """Bad usage or unreadable input: exit code 2, with a message naming what and where."""


class StrictModeError(Exception):
    """`--strict` and a quarantined record: the run stops (exit 1)."""


class RunFailed(Exception):
    """The run failed after it started (a full disk, a file system gone read-only): recorded as failed where
    that was possible; one line for the user, exit 1."""


@dataclass(frozen=True)
class RebuildRequest:
    inputs: tuple[str, ...]
    warehouse: str
    snapshot_id: str | None = None
    as_of: str | None = None  # ISO-8601 (UTC if no zone) or "now"; None = newest record timestamp (at the cut)
    retention_minutes: int | None = None
    no_expiry: bool = False
    semantics: str | None = None
    until_time: str | None = None
    until_offset: int | None = None
    incremental: bool = False
    strict: bool = False
    num_partitions: int | None = None
    kafka_version: str | None = None
    replay_corrupt_batches: bool = False


@dataclass
class RunSummary:
    snapshot_id: str
    status: str = "running"
    inputs: list[str] = field(default_factory=list)
    semantics: str = "legacy"
    as_of: str | None = None
    retention_minutes: int = 10080
    expiry: bool = True
    records_in: int = 0
    records_out: int = 0
    records_quarantined: int = 0
    records_skipped: int = 0
    record_type_counts: dict[str, int] = field(default_factory=dict)
    bytes_in: int = 0
    bytes_unread: int = 0  # bytes no record was read from (zero tails apart): see unread_ranges
    unread_ranges: list = field(default_factory=list)  # [source, from, to, kind] per unread byte range
    segments: int = 0
    tabular_files: int = 0
    groups: int = 0
    removed_groups: int = 0
    offsets: int = 0
    empty_group_offsets: int = 0
    pending_offsets: int = 0
    pending_transactions: int = 0
    expired_offsets: int = 0
    expired_groups: int = 0
    misplaced_groups: int = 0
    log_end_offsets: int = 0  # data-topic partitions whose end offset the input's log dirs gave (for LAG)
    warnings: list[str] = field(default_factory=list)
    validation: dict = field(default_factory=dict)
    stage_seconds: dict[str, float] = field(default_factory=dict)
    incremental: dict = field(default_factory=dict)
    kind: str = "scheduled"  # or what-if: --as-of/--until-* (runs.kind)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True, default=str)


def parse_time_ms(text: str, *, what: str) -> int:
    """ISO-8601 (UTC when no zone) or `now` -> epoch ms."""
    if text == "now":
        return int(time.time() * 1000)
    try:
        t = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(f"{what}: {text!r} is not an ISO-8601 time (e.g. 2026-11-21T20:52:00Z) or 'now'") from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.timezone.utc)
    return int(t.timestamp() * 1000)


def ms_to_iso(ms: int | None) -> str | None:
    if ms is None:
        return None
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.timezone.utc).isoformat(timespec="milliseconds")


class Progress:
    """Stage timing and progress lines (stage, records, MB, time) on a callback (stderr by default)."""

    def __init__(self, emit: Callable[[str], None] | None, on_stage: Callable[[str], None] | None = None):
        self.emit = emit or (lambda _m: None)
        self.on_stage = on_stage or (lambda _s: None)
        self.t0 = time.monotonic()
        self.stage_seconds: dict[str, float] = {}
        self._stage: str | None = None
        self._start = 0.0

    def stage(self, name: str, detail: str = ""):
        self.end()
        self._stage, self._start = name, time.monotonic()
        self.on_stage(name)
        self.emit(f"[{time.monotonic() - self.t0:7.1f}s] {name}{(': ' + detail) if detail else ''}")

    def end(self):
        if self._stage:
            self.stage_seconds[self._stage] = round(time.monotonic() - self._start, 3)
            self._stage = None


@dataclass(frozen=True)
class RunSettings:
    """A run's settings, resolved once from `conf/` and the request (the request wins)."""

    semantics: str
    retention_minutes: int
    expiry: bool
    kafka_version: str
    num_partitions: int | None  # the offsets topic's partition count setting; None: from the input
    strict: bool
    local_replay_max_rows: int
    read_policy: object  # decoding.policy.ReadPolicy


def resolve_settings(settings: Settings, req: RebuildRequest) -> RunSettings:
    r = settings.section("rebuild")
    semantics = req.semantics or r.get("semantics", "legacy")
    if semantics not in ("legacy", "modern"):
        raise UsageError(f"--semantics must be legacy or modern, not {semantics!r}")
    from pipelines.decoding.policy import ReadPolicy

    try:
        policy = ReadPolicy(
            replay_corrupt_batches=req.replay_corrupt_batches or bool(r.get("replay_corrupt_batches", False)),
            max_batch_bytes=settings.section("decode").get("max_batch_bytes", ReadPolicy().max_batch_bytes))
    except ValueError as e:
        raise UsageError(str(e)) from None
    retention = req.retention_minutes if req.retention_minutes is not None else int(r.get("retention_minutes", 10080))
    if retention < 1:
        raise UsageError("--retention-minutes must be at least 1")
    return RunSettings(
        semantics=semantics,
        retention_minutes=retention,
        expiry=not req.no_expiry and bool(r.get("expiry", True)),
        kafka_version=str(req.kafka_version or r.get("kafka_version", "3.9")),
        num_partitions=req.num_partitions or r.get("num_offsets_partitions"),
        strict=req.strict or bool(r.get("strict", False)),
        local_replay_max_rows=_non_negative_int(r.get("local_replay_max_rows", 0), "rebuild.local_replay_max_rows"),
        read_policy=policy,
    )


def _non_negative_int(value, what: str) -> int:
    try:
        n = int(value or 0)
    except (TypeError, ValueError):
        raise UsageError(f"{what} must be a whole number, not {value!r}") from None
    if n < 0:
        raise UsageError(f"{what} must be 0 or more, not {n}")
    return n


def new_snapshot_id() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-" + uuid.uuid4().hex[:6]


def count_by_type(decoded) -> dict[str, int]:
    """records in per record type: `offset_commit:1`, `group_metadata:2`, `control:COMMIT`, `error`, ..."""
    from pipelines.state.accounting_frames import record_type_label

    rows = decoded.groupBy(record_type_label(decoded).alias("t")).count().collect()
    return {r["t"]: int(r["count"]) for r in rows}


def run_rebuild(spark, settings: Settings, req: RebuildRequest, emit: Callable[[str], None] | None = None,
                prepared=None) -> RunSummary:
    """The whole pipeline for one snapshot. Raises UsageError (exit 2) for bad usage or unreadable input.

    `prepared` is `pipelines.preflight.prepare_run`'s result when the caller checked the request before starting
    Spark (the CLI does); this function releases its writer lock when it returns or raises."""
    from pipelines.preflight import prepare_run

    prepared = prepared or prepare_run(settings, req)
    try:
        return _run_locked(spark, settings, req, emit, prepared)
    finally:
        prepared.release()


# Text of the errors a full or read-only file system gives in Python, Spark (Java) and delta-rs (Rust).
_DISK_FULL = ("No space left on device", "os error 28", "Disk quota exceeded", "os error 122")
_NOT_WRITABLE = ("Read-only file system", "os error 30", "Permission denied", "os error 13")


def _storage_error(exc: BaseException) -> str | None:
    """'disk full' / 'not writable' when `exc` (or what it wraps) is the file system refusing a write."""
    import errno

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


def _first_line(exc: BaseException) -> str:
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    return f"{type(exc).__name__}: {lines[0][:300] if lines else ''}"


def _run_locked(spark, settings: Settings, req: RebuildRequest, emit, prepared) -> RunSummary:
    from pipelines.io.warehouse import Warehouse

    from dataclasses import replace

    from pipelines.incremental import is_what_if

    conf, inputs, snapshot_id = prepared.conf, prepared.inputs, prepared.snapshot_id
    plan = replace(prepared.plan, policy=conf.read_policy)
    warehouse = Warehouse(req.warehouse)
    progress = Progress(emit, on_stage=lambda name: prepared.lock.update(stage=name))
    if prepared.abandoned is not None:
        _record_abandoned(warehouse, prepared.abandoned, progress.emit)
    summary = RunSummary(snapshot_id=snapshot_id, inputs=inputs, semantics=conf.semantics,
                         retention_minutes=conf.retention_minutes, expiry=conf.expiry,
                         kind="what-if" if is_what_if(req) else "scheduled")
    started_ms = int(time.time() * 1000)

    progress.stage("plan", f"{len(inputs)} input path(s)")
    summary.bytes_in, summary.segments, summary.tabular_files = plan.total_bytes, plan.num_segments, plan.num_tabular
    for path in plan.tabular_without_batch_facts:
        summary.warnings.append(
            f"{path}: no producer_id/is_transactional/is_control columns: transactional offset commits "
            "cannot be resolved; every commit is treated as non-transactional")

    try:
        return _run_planned(spark, settings, req, conf, plan, summary, progress, warehouse, started_ms,
                            prepared.until_time_ms, prepared)
    except BaseException as e:
        if isinstance(e, (KeyboardInterrupt, SystemExit)):
            raise
        stage = progress._stage or "end"
        storage = _storage_error(e)
        recorded = getattr(e, "offsetlake_failure_recorded", False)
        if not recorded:
            try:
                warehouse.record_failure(snapshot_id, dict(
                    started_at=ms_to_iso(started_ms), inputs=inputs, semantics=conf.semantics,
                    retention_minutes=conf.retention_minutes,
                    summary={"error": _first_line(e), "stage": stage}, kind=summary.kind))
            except Exception as mark_exc:
                if storage is None and _storage_error(mark_exc) is None:
                    raise
                raise RunFailed(f"run {snapshot_id} failed in stage {stage}: {storage or 'storage error'}: "
                                f"{_first_line(e)}; its failure could not be recorded either "
                                f"({_first_line(mark_exc)})") from None
        if storage == "not writable":
            raise UsageError(f"--warehouse {req.warehouse}: cannot write ({_first_line(e)}); "
                             f"run {snapshot_id} recorded as failed") from None
        if storage == "disk full" or type(e).__name__ == "PanicException":
            raise RunFailed(f"run {snapshot_id} failed in stage {stage}: {storage or 'delta-rs panic'}: "
                            f"{_first_line(e)}; recorded as failed") from None
        from pipelines.io.delta import DeltaWriteError
        from pipelines.io.warehouse import WarehouseError

        if isinstance(e, (WarehouseError, DeltaWriteError)):  # the write refused what it was given: said in full
            raise RunFailed(f"run {snapshot_id} failed in stage {stage}: {e}; recorded as failed") from None
        raise


def _committing(prepared, progress) -> None:
    # recorded in the lock first: a run killed from here on may have replaced some of the id's tables
    prepared.lock.update(stage="commit")
    progress.emit("          commit: every table staged, committing")


def _record_abandoned(warehouse, holder: dict, emit) -> None:
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


def _log_end_offsets(summary: RunSummary):
    """The data-topic partitions' end offsets the input's broker log dirs hold (LAG as of the dump)."""
    from pipelines.decoding.log_end_offsets import log_end_offsets, log_end_offsets_table

    rows, warnings = log_end_offsets(summary.inputs)
    summary.warnings.extend(warnings)
    summary.log_end_offsets = len(rows)
    return log_end_offsets_table(rows, summary.snapshot_id)


def _run_planned(spark, settings, req, conf, plan, summary, progress, warehouse, started_ms, until_time_ms,
                 prepared):
    from pyspark import StorageLevel

    from pipelines.frames.decode import decoded_frame_from_plan, reader_counts
    from pipelines.state import accounting_frames as acct
    from pipelines.coordinator.expiry import ExpiryOptions
    from pipelines.coordinator.options import ReplayOptions
    from pipelines.state.quarantine import quarantine_table
    from pipelines.state.served import with_served_offsets
    from pipelines.validation.accounting import Accounting
    from pipelines.validation.runner import markers_from_arrow, markers_from_decoded, run_validation

    snapshot_id = summary.snapshot_id
    # --incremental: decode only the bytes after the previous snapshot's checkpoint (pipelines/incremental.py);
    # from here on `plan` is what this run decodes, `input_plan` the whole input (for the checkpoint).
    from pipelines import incremental

    input_plan = plan
    inc = incremental.start(warehouse, req, conf, plan, snapshot_id)
    plan = inc.decode_plan
    progress.emit(f"          {inc.progress_line()}")
    progress.stage("decode", f"{plan.num_segments} segment(s), {plan.num_tabular} table(s), "
                             f"{plan.total_bytes / 1e6:.1f} MB")
    # Kept on local disk, not in the JVM heap: the decoded log is the one frame that grows with the input (10 M
    # records are several GB deserialized), and every later step reads it once or twice.
    from pipelines.frames.progress import TaskCounters, reporting

    decode_counters = TaskCounters(spark)
    decoded = decoded_frame_from_plan(spark, plan, decode_counters).persist(StorageLevel.DISK_ONLY)
    with reporting(spark, progress.emit, "decode", decode_counters):
        counts = count_by_type(decoded)
    summary.record_type_counts = counts
    summary.records_in = sum(counts.values())
    summary.records_quarantined = sum(v for k, v in counts.items() if k.startswith("error"))
    progress.emit(f"          decoded {summary.records_in:,} records "
                  f"({summary.records_quarantined:,} quarantined)")
    if conf.strict and summary.records_quarantined:
        first = quarantine_table(decoded, snapshot_id).limit(1).collect()[0]
        raise StrictModeError(f"--strict: quarantined record at {first['source']} position {first['position']}: "
                              f"{first['reason']}")
    inc.new_records = summary.records_in
    summary.incremental = inc.summary()
    # the rows replay reads (incremental: new rows ∪ the previous state); counts above are the new rows only
    replayed = inc.replayable(spark, decoded)
    local = inc.local_replay_rows(summary.records_in, conf.local_replay_max_rows)
    if inc.is_incremental:
        summary.incremental["replay"] = "spark" if local is None else "in-process"
    if inc.is_incremental and local is None:
        replayed = replayed.persist(StorageLevel.MEMORY_AND_DISK)

    max_ts = inc.max_timestamp(acct.max_record_timestamp(decoded))
    # A point-in-time run is as of its cut: --until-time T, else the newest record at or before --until-offset.
    # It is also the load time of the groups the replay synthesizes (a broker loading the log at that point).
    cut_ms = max_ts
    if until_time_ms is not None:
        cut_ms = until_time_ms
    elif req.until_offset is not None:
        cut_ms = acct.max_record_timestamp(decoded, until_offset=req.until_offset)
    max_part = inc.max_partition(acct.max_partition(decoded))
    # The topic's partition count: the setting, else the partition dirs of the input's log dir (a broker keeps
    # them all), else Kafka's default of 50; never fewer than the highest partition seen.
    from pipelines.decoding.segments import partition_count

    num_partitions = conf.num_partitions or max(partition_count(summary.inputs) or 50, plan.max_partition + 1,
                                                   max_part + 1)
    options = ReplayOptions(semantics=conf.semantics, until_offset=req.until_offset, until_time_ms=until_time_ms,
                            num_partitions=num_partitions, snapshot_id=snapshot_id, load_time_ms=cut_ms)

    if prepared.as_of_ms is not None:
        as_of_ms = prepared.as_of_ms
    else:
        as_of_ms = cut_ms if cut_ms is not None else started_ms
    summary.as_of = ms_to_iso(as_of_ms)
    expiry = ExpiryOptions(as_of_ms=as_of_ms, retention_minutes=conf.retention_minutes,
                           semantics=conf.semantics, kafka_version=conf.kafka_version) if conf.expiry else None
    retain = summary.kind == "scheduled"  # a what-if run saves no checkpoint, so it needs no retained rows
    release = None
    if local is not None:
        # a small run: the engine runs in this process, over the rows as Arrow
        progress.stage("replay", f"semantics {conf.semantics}, {local:,} rows in this process"
                                 + (f", expiry as of {summary.as_of}" if expiry else ""))
        from pipelines.coordinator.shard import replay_shards

        rows = inc.replayable_arrow(decoded)
        result = replay_shards(rows, options, expiry, retain=retain)
        replayed_tables, retained = result.tables, result.retained
        # the transaction markers validation reads, from the rows in hand rather than a scan of the state files
        markers = spark.createDataFrame(markers_from_arrow(rows, until_offset=req.until_offset,
                                                           until_time_ms=until_time_ms))
        del rows, result
    else:
        # one Spark task per offsets partition runs the same engine (pipelines/frames/shards.py)
        progress.stage("replay", f"semantics {conf.semantics}, one task per offsets partition"
                                 + (f", expiry as of {summary.as_of}" if expiry else ""))
        from pipelines.frames.shards import replay_on_spark, topic_names_on_spark

        replayed_tables, retained, release = replay_on_spark(spark, replayed, options, expiry,
                                                             topic_names_on_spark(replayed), retain, progress.emit)
        markers = markers_from_decoded(replayed, until_offset=req.until_offset, until_time_ms=until_time_ms)
    # The state tables are Arrow in hand (sized by the coordinator's state), written as they are (pyarrow);
    # validation reads them as DataFrames. The history is Arrow in-process, a DataFrame from the shards.
    import pyarrow as pa

    from schemas.tables import SNAPSHOT_TABLES, TABLES

    replayed_tables["group_history"] = inc.with_previous_history(warehouse, replayed_tables["group_history"],
                                                                 snapshot_id)
    in_hand = with_served_offsets({t: a for t, a in replayed_tables.items()
                                   if t in SNAPSHOT_TABLES and isinstance(a, pa.Table)})
    tables = {t: spark.createDataFrame(a, schema=TABLES[t]) if isinstance(a, pa.Table) else a
              for t, a in replayed_tables.items()}
    del replayed_tables
    tables = with_served_offsets(tables)
    tables["quarantine"] = quarantine_table(decoded, snapshot_id)
    in_hand["log_end_offsets"] = _log_end_offsets(summary)

    # Materialize every table once: validation, counts and the write then read cached rows instead of
    # re-running replay and expiry for each of them.
    progress.stage("materialize")
    # (the in-process replay's tables too: a frame built from Arrow ships its rows from the driver again for
    # every job that reads it, and validation and the write run dozens)
    stats = acct.materialize(tables)

    progress.stage("validate")
    # records_in: the reader's own count from batch headers (frames.decode.reader_counts), independent of the
    # decoded rows, so `accounting.records_accounted` fails when records go missing in decoding.
    accounting = Accounting.from_decoded(decoded, reader_counts(spark, plan), until_offset=req.until_offset,
                                         until_time_ms=until_time_ms)
    result = run_validation(spark, tables, as_of_ms=as_of_ms, num_partitions=num_partitions, settings=settings,
                            markers=markers, accounting=accounting, snapshot_id=snapshot_id, row_counts=stats)
    summary.validation = result.summary()
    summary.bytes_unread = accounting.totals.bytes_unread
    summary.unread_ranges = [list(r) for r in accounting.totals.unread_ranges]

    progress.stage("summarize")
    summary.groups = stats["loaded_groups"]
    summary.removed_groups = stats["removed_groups"]
    summary.offsets = stats["loaded_offsets"]
    summary.empty_group_offsets = stats["empty_group_offsets"]
    summary.pending_offsets = stats["pending_offsets"]
    summary.pending_transactions = acct.open_transactions(tables["pending_offsets"])
    summary.expired_offsets = stats["expired_offsets"]
    summary.expired_groups = stats["expired_groups"]
    summary.records_skipped = accounting.total_skipped
    summary.records_out = accounting.total_used
    summary.misplaced_groups = acct.misplaced_count(tables["loaded_groups"])

    failed = result.should_fail_run
    summary.status = "validation_failed" if failed else "succeeded"
    if summary.kind == "scheduled":  # a what-if run is never resumed from: no state for the chain to pick
        progress.stage("checkpoint", f"state for --incremental -> {req.warehouse}/_state/{snapshot_id}")
        incremental.save_checkpoint(spark, warehouse, snapshot_id, retained, input_plan, inc,
                                    conf=conf, req=req, max_timestamp=max_ts, max_partition=max_part)
    progress.stage("write", f"snapshot {snapshot_id} -> {req.warehouse}")
    run_row = dict(status=summary.status, started_at=ms_to_iso(started_ms), as_of=ms_to_iso(as_of_ms),
                   retention_minutes=conf.retention_minutes, semantics=conf.semantics, inputs=summary.inputs,
                   records_in=summary.records_in, records_out=summary.records_out,
                   records_quarantined=summary.records_quarantined, record_type_counts=counts,
                   validation=summary.validation, kind=summary.kind)
    report_dir = Path(req.warehouse) / "_reports"
    report_dir.mkdir(parents=True, exist_ok=True)
    from pipelines.validation.report import write_report

    write_report(result, report_dir / f"{snapshot_id}.html")
    (report_dir / f"{snapshot_id}.json").write_text(result.to_json())
    # The summary stored in `runs` is written with the snapshot, so it holds the stages before the write;
    # the printed summary adds the write's own time once it is done.
    summary.stage_seconds = dict(progress.stage_seconds)
    run_row["summary"] = summary.to_json()
    expected = dict(stats)
    expected.update({t: a.num_rows for t, a in in_hand.items()})
    warehouse.write_snapshot(spark, snapshot_id, {**tables, **in_hand}, run_row, expected_rows=expected,
                             before_commit=lambda: _committing(prepared, progress))
    progress.end()
    summary.stage_seconds = dict(progress.stage_seconds)
    keep = settings.section("warehouse").get("keep_snapshots")
    if keep:
        warehouse.retain(int(keep), lock=prepared.lock)
        incremental.clean_state(warehouse, progress.emit)
    if release is not None:
        release()
    if inc.is_incremental and local is None:
        replayed.unpersist()
    decoded.unpersist()
    return summary
