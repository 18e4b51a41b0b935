"""Composition only: one function per stage over a run context (`Run`): plan -> decode -> replay -> assemble ->
materialize -> validate -> summarize -> checkpoint -> write. Transforms live in their layers."""
from __future__ import annotations

import contextlib
import datetime as dt
import json
import re
import time
import uuid
from dataclasses import asdict, dataclass, field
from typing import Callable

from pipelines.config import Settings
from pipelines.times import ms_to_iso


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
    other_cluster: bool = False  # write a snapshot of another cluster's dump, not adding to the history


@dataclass
class RunSummary:
    snapshot_id: str
    status: str = "running"
    inputs: list[str] = field(default_factory=list)
    semantics: str = "legacy"
    as_of: str | None = None
    retention_minutes: int = 10080
    expiry: bool = True
    kafka_version: str = "3.9"  # the broker version whose expiry rules the run applied
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
    task_cpu_seconds: dict[str, float] = field(default_factory=dict)  # summed over the tasks, per kind of work
    kind: str = "scheduled"  # or what-if: --as-of/--until-* (runs.kind)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True, default=str)


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
    resume_tasks_min_rows: int  # an incremental run resumed from the driver's decoding, this big, uses the cores
    in_process_max_bytes: int  # inputs up to this size are decoded and counted in the driver
    load_buffer_bytes: int  # a shard task decodes and loads its segments this many bytes at a time
    split_bytes: int  # an offsets partition of more segment bytes is decoded in ranges of this size (0: never)
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
        resume_tasks_min_rows=_non_negative_int(r.get("resume_tasks_min_rows", 0), "rebuild.resume_tasks_min_rows"),
        in_process_max_bytes=_non_negative_int(settings.section("decode").get("in_process_max_bytes", 0),
                                               "decode.in_process_max_bytes"),
        load_buffer_bytes=_load_buffer_bytes(settings.section("decode").get("load_buffer_bytes")),
        split_bytes=_split_bytes(settings.section("decode").get("split_bytes")),
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


def _load_buffer_bytes(value) -> int:
    from pipelines.frames.segment_shards import LOAD_BUFFER_BYTES

    n = LOAD_BUFFER_BYTES if value is None else _non_negative_int(value, "decode.load_buffer_bytes")
    if n < 1:
        raise UsageError("decode.load_buffer_bytes must be 1 or more, not 0")
    return n


def _split_bytes(value) -> int:
    return _non_negative_int(value, "decode.split_bytes")


def new_snapshot_id() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-" + uuid.uuid4().hex[:6]


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


@dataclass
class Run:
    """One run's context: what it was asked and resolved once, then what each stage adds, in stage order."""

    spark: object
    settings: Settings
    req: RebuildRequest
    conf: RunSettings
    prepared: object  # preflight.PreparedRun: inputs, snapshot id, writer lock
    warehouse: object  # io.warehouse.Warehouse
    progress: Progress
    summary: RunSummary
    started_ms: int
    input_plan: object = None  # frames.decode.DecodePlan of the whole input (the checkpoint records it)
    inc: object = None  # incremental.IncrementalStart: full or incremental, and what to decode
    # decode
    decoded: object = None  # frames.decoded_log.DecodedLog: the decoded rows, kept by Spark or in hand
    loaded: object = None  # frames.segment_shards.LoadedOnSpark: segment input decoded and loaded per shard
    tally: object = None  # frames.tally.Tally: records per partition and type, newest timestamps, past the cut-off
    facts: object = None  # frames.tally.DecodedFacts: counts by type, newest timestamp, top partition
    # replay
    max_ts: int | None = None
    max_part: int = -1
    num_partitions: int = 0
    as_of_ms: int = 0
    local_rows: int | None = None  # rows replayed in this process; None: on Spark, one task per offsets partition
    ahead: object = None  # concurrent.futures.Future of `_read_ahead`, read while the replay runs
    suspects: object = None  # validation.suspects.Suspects: the history as its suite sees it, from the shards
    markers: object = None
    saved: object = None  # the shards the next --incremental run resumes (io.checkpoint.SavedState, or bytes)
    release: Callable[[], None] | None = None
    # the snapshot
    tables: dict = field(default_factory=dict)  # the replay's tables, then the log-sized ones as DataFrames
    in_hand: dict = field(default_factory=dict)  # the state tables, Arrow, written as they are
    checked: dict = field(default_factory=dict)  # every table validation reads
    stats: dict = field(default_factory=dict)
    read_counts: dict = field(default_factory=dict)  # frames.decode.reader_counts of what this run decoded
    accounting: object = None
    validation: object = None
    staging: object = None  # concurrent.futures.Future of `_stage_ahead`, until the write takes its files

    @property
    def snapshot_id(self) -> str:
        return self.summary.snapshot_id


def _run_locked(spark, settings: Settings, req: RebuildRequest, emit, prepared) -> RunSummary:
    from pipelines.incremental import is_what_if
    from pipelines.io.warehouse import Warehouse

    conf = prepared.conf
    warehouse = Warehouse(req.warehouse)
    progress = Progress(emit, on_stage=lambda name: prepared.lock.update(stage=name))
    if prepared.abandoned is not None:
        _record_abandoned(warehouse, prepared.abandoned, progress.emit)
    summary = RunSummary(snapshot_id=prepared.snapshot_id, inputs=prepared.inputs, semantics=conf.semantics,
                         retention_minutes=conf.retention_minutes, expiry=conf.expiry,
                         kafka_version=conf.kafka_version, kind="what-if" if is_what_if(req) else "scheduled")
    run = Run(spark=spark, settings=settings, req=req, conf=conf, prepared=prepared, warehouse=warehouse,
              progress=progress, summary=summary, started_ms=int(time.time() * 1000))
    try:
        plan(run)
        decode(run)
        replay(run)
        assemble(run)
        materialize(run)
        validate(run)
        summarize(run)
        checkpoint(run)
        write(run)
        return run.summary
    except BaseException as e:
        if isinstance(e, (KeyboardInterrupt, SystemExit)):
            raise
        _record_failure(run, e)
        raise
    finally:
        _release(run)


def plan(run: Run) -> None:
    """What the input holds, and what this run decodes of it (`--incremental`: only the bytes after the previous
    snapshot's checkpoint)."""
    from dataclasses import replace

    from pipelines import incremental

    run.progress.stage("plan", f"{len(run.summary.inputs)} input path(s)")
    run.input_plan = replace(run.prepared.plan, policy=run.conf.read_policy,
                             in_process_max_bytes=run.conf.in_process_max_bytes)
    s = run.summary
    s.bytes_in, s.segments, s.tabular_files = (run.input_plan.total_bytes, run.input_plan.num_segments,
                                               run.input_plan.num_tabular)
    for path in run.input_plan.tabular_without_batch_facts:
        s.warnings.append(
            f"{path}: no producer_id/is_transactional/is_control columns: transactional offset commits "
            "cannot be resolved; every commit is treated as non-transactional")
    if run.prepared.other_cluster:
        s.warnings.append(f"--other-cluster: {run.prepared.other_cluster}; this snapshot's records are not added to "
                          "the history (offset_commits)")
    run.inc = incremental.start(run.warehouse, run.req, run.conf, run.input_plan, run.snapshot_id)
    run.progress.emit(f"          {run.inc.progress_line()}")


def decode(run: Run) -> None:
    """Every work item decoded into the run's decoded log, kept; the records counted by type. Segment input of a
    full run on Spark is loaded in the same tasks, one per offsets partition (`frames.segment_shards`)."""
    from pipelines.frames import segment_shards
    from pipelines.frames.decode import decoded_log
    from pipelines.frames.progress import TaskCounters, reporting
    from pipelines.frames.tally import tally
    from pipelines.state.quarantine import quarantine_table

    plan, s = run.inc.decode_plan, run.summary
    counters = TaskCounters(run.spark)
    cut = (run.req.until_offset, run.prepared.until_time_ms)
    described = (f"{plan.num_segments} segment(s), {plan.num_tabular} table(s), {plan.total_bytes / 1e6:.1f} MB")
    previous = None if run.inc.resumes_in_process(run.conf.local_replay_max_rows) else run.inc.saved_shards()
    if segment_shards.applies(plan, previous):
        from pipelines.io.checkpoint import stage_state

        run.progress.stage("decode", described + ", each offsets partition decoded and loaded by one task"
                           + (" onto the shard the previous run saved" if previous is not None else ""))
        stage = run.warehouse.stage_history(run.snapshot_id, adds_only=s.kind != "scheduled")
        state_stage = stage_state(run.warehouse, run.snapshot_id) if _saves_shards(run) else None
        with _resuming():
            run.loaded = segment_shards.load_on_spark(run.spark, plan, _load_options(run), cut,
                                                      _early_history_check(run), stage, counters, run.progress.emit,
                                                      state_stage, previous, run.conf.load_buffer_bytes,
                                                      run.conf.split_bytes)
        run.release = run.loaded.release
        run.decoded = run.loaded.log
        s.task_cpu_seconds = {k: round(v, 3) for k, v in run.loaded.cpu_seconds.items()}
        run.tally = tally(run.decoded)
    else:
        run.progress.stage("decode", described)
        run.decoded = decoded_log(run.spark, plan, counters, cut=cut).persist()
        with reporting(run.spark, run.progress.emit, "decode", counters):
            run.tally = tally(run.decoded)
    run.facts = run.tally.facts()
    s.record_type_counts = run.facts.counts
    s.records_in = sum(run.facts.counts.values())
    s.records_quarantined = sum(v for k, v in run.facts.counts.items() if k.startswith("error"))
    run.progress.emit(f"          decoded {s.records_in:,} records ({s.records_quarantined:,} quarantined)")
    if run.conf.strict and s.records_quarantined:
        first = quarantine_table(run.decoded, run.snapshot_id).limit(1).collect()[0]
        raise StrictModeError(f"--strict: quarantined record at {first['source']} position {first['position']}: "
                              f"{first['reason']}")
    run.inc.new_records = s.records_in
    s.incremental = run.inc.summary()


@contextlib.contextmanager
def _resuming():
    """A saved shard that does not load (`coordinator.saved.SavedShardError`: damaged or altered since its run
    wrote it), or a shard's task out of memory (`frames.segment_shards.ShardMemoryError`), here or in a task, as
    one line for the user instead of a task's traceback."""
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


def _saves_shards(run: Run) -> bool:
    """Whether the replay saves the shards the next `--incremental` run resumes: a what-if run saves no
    checkpoint."""
    return run.summary.kind == "scheduled"


def _early_history_check(run: Run):
    """The history's suite as a filter before the run's clock is known: the run's own when `--as-of` or
    `--until-time` gives it, else one no run reaches (the replay checks the shards' suspects against the run's)."""
    from pipelines.validation.runner import UNKNOWN_CLOCK_MS, history_check

    clock = next((t for t in (run.prepared.as_of_ms, run.prepared.until_time_ms) if t is not None), UNKNOWN_CLOCK_MS)
    return history_check(run.settings, as_of_ms=clock,
                          num_partitions=_partition_count(run, run.inc.decode_plan.max_partition))


def _load_options(run: Run):
    """What loading a shard needs of the run (`coordinator.shard.load_shards`): the semantics, the cut, the id."""
    from pipelines.coordinator.options import ReplayOptions

    return ReplayOptions(semantics=run.conf.semantics, until_offset=run.req.until_offset,
                         until_time_ms=run.prepared.until_time_ms, snapshot_id=run.snapshot_id)


def _replay_options(run: Run):
    """The cut, the partition count and the expiry time every shard is loaded with."""
    from pipelines.coordinator.expiry import ExpiryOptions
    from pipelines.coordinator.options import ReplayOptions

    req, conf, facts = run.req, run.conf, run.facts
    until_time_ms = run.prepared.until_time_ms
    run.max_ts = run.inc.max_timestamp(facts.max_timestamp)
    # A point-in-time run is as of its cut: --until-time T, else the newest record at or before --until-offset.
    # It is also the load time of the groups the replay synthesizes (a broker loading the log at that point).
    cut_ms = run.max_ts
    if until_time_ms is not None:
        cut_ms = until_time_ms
    elif req.until_offset is not None:
        cut_ms = facts.max_timestamp_until
    run.max_part = run.inc.max_partition(facts.max_partition)
    run.num_partitions = _partition_count(run, max(run.inc.decode_plan.max_partition, run.max_part))
    options = ReplayOptions(semantics=conf.semantics, until_offset=req.until_offset, until_time_ms=until_time_ms,
                            num_partitions=run.num_partitions, snapshot_id=run.snapshot_id, load_time_ms=cut_ms)
    if run.prepared.as_of_ms is not None:
        run.as_of_ms = run.prepared.as_of_ms
    else:
        run.as_of_ms = cut_ms if cut_ms is not None else run.started_ms
    run.summary.as_of = ms_to_iso(run.as_of_ms)
    expiry = ExpiryOptions(as_of_ms=run.as_of_ms, retention_minutes=conf.retention_minutes,
                           semantics=conf.semantics, kafka_version=conf.kafka_version) if conf.expiry else None
    return options, expiry


def _partition_count(run: Run, top: int) -> int:
    """The offsets topic's partition count: the setting, else the partition dirs of the input's log dir (a broker
    keeps them all), else Kafka's default of 50; never fewer than the highest partition seen (`top`) + 1."""
    from pipelines.decoding.segments import partition_count

    return run.conf.num_partitions or max(partition_count(run.summary.inputs) or 50, top + 1)


def _resume_tasks(run: Run, saved) -> int:
    """The Spark tasks (one per core) an incremental run decoded in this process resumes its `saved` shards on
    (`frames.resumed`), when its replay holds at least `rebuild.resume_tasks_min_rows` rows; 0: in this process."""
    cores = run.spark.sparkContext.defaultParallelism
    if saved is None or cores < 2 or not 0 < run.conf.resume_tasks_min_rows <= run.local_rows:
        return 0
    return min(cores, len(saved.partitions))


def _in_thread(name: str, fn: Callable, *args):
    """`fn(*args)` started in a thread of its own: its `concurrent.futures.Future`."""
    from concurrent.futures import ThreadPoolExecutor

    pool = ThreadPoolExecutor(1, thread_name_prefix=f"offsetlake-{name}")
    try:
        return pool.submit(fn, *args)
    finally:
        pool.shutdown(wait=False)


def _read_ahead(run: Run):
    """What the snapshot adds besides the replay (the previous snapshot's group history an incremental run carries
    forward, the data topics' end offsets), read in a thread while the replay runs: it depends on none of it, and
    a replay on Spark tasks leaves this process waiting."""
    return _in_thread("read-ahead",
                      lambda: (run.inc.previous_group_history(run.warehouse), _log_end_offsets(run.summary)))


def replay(run: Run) -> None:
    """The engine over the rows (when incremental, loaded onto the shards the previous run saved): in this process
    for a small run, else one Spark task per offsets partition (the shards the decode loaded: their state tables).
    All give the snapshot's state tables as Arrow."""
    run.ahead = _read_ahead(run)
    inc, s = run.inc, run.summary
    run.local_rows = None if run.loaded is not None else inc.local_replay_rows(s.records_in,
                                                                               run.conf.local_replay_max_rows)
    saved = inc.saved_shards() if run.local_rows is not None else None
    tasks = _resume_tasks(run, saved)
    if inc.is_incremental:
        s.incremental["replay"] = "spark" if run.local_rows is None else "tasks" if tasks else "in-process"
    options, expiry = _replay_options(run)
    keep = _saves_shards(run)
    expiring = f", expiry as of {s.as_of}" if expiry else ""
    if run.local_rows is not None:
        from pipelines.coordinator.loader import SKIPPED_KINDS
        from pipelines.coordinator.shard import REPLAY_COLUMNS, conform_decoded, replay_shards
        from pipelines.heap import gc_paused

        where = f"{tasks} tasks" if tasks else "this process"
        onto = (f" ({s.records_in:,} new records onto {inc.state_entries:,} saved state entries)"
                if inc.is_incremental else "")
        run.progress.stage("replay", f"semantics {options.semantics}, {run.local_rows:,} rows in {where}"
                                     + onto + expiring)
        rows = conform_decoded(run.decoded.to_arrow(REPLAY_COLUMNS, exclude=SKIPPED_KINDS))
        if tasks:
            from pipelines.frames.resumed import resume_on_spark
            from pipelines.io.checkpoint import stage_state

            with _resuming():
                shards = resume_on_spark(run.spark, rows, saved, options, expiry, tasks,
                                         stage_state(run.warehouse, run.snapshot_id) if keep else None)
            run.tables, run.markers, run.saved, run.release = (shards.tables, shards.markers, shards.saved,
                                                               shards.release)
            return
        # the resumed states are a million objects or more: the collector would walk them all at each full pass
        with gc_paused():
            with _resuming():
                resume = None if saved is None else saved.all()
            result = replay_shards(rows, options, expiry, keep=keep, resume=resume)
            del resume
            run.tables, run.markers = result.tables, result.markers
            if result.saved is not None:
                run.saved = {p: shard.to_bytes() for p, shard in result.saved.items()}
            del result  # the states, freed while paused (`heap.gc_paused`)
        return
    from pipelines.frames.shards import replay_on_spark, topic_names_of
    from pipelines.validation.runner import history_check

    check = history_check(run.settings, as_of_ms=run.as_of_ms, num_partitions=run.num_partitions)
    if run.loaded is not None:
        from pipelines.frames.segment_shards import tabulate_on_spark

        run.progress.stage("replay", f"semantics {options.semantics}, the state tables of the loaded shards"
                                     + expiring)
        with _resuming():
            shards = tabulate_on_spark(run.spark, run.loaded, options, expiry, topic_names_of(run.decoded),
                                       history_check=check)
    else:
        if inc.is_incremental:  # `decode` sends every incremental run to the shards or resumes it in process
            raise RuntimeError("an incremental run reached the replay of a decoded log without its saved shards")
        run.progress.stage("replay", f"semantics {options.semantics}, one task per offsets partition" + expiring)
        shards = replay_on_spark(run.spark, run.decoded, options, expiry, topic_names_of(run.decoded), keep,
                                 run.progress.emit, input_bytes=inc.decode_plan.bytes_by_partition(),
                                 history_check=check)
    run.tables, run.saved, run.release = shards.tables, shards.saved, shards.release
    run.markers, run.suspects = shards.markers, shards.suspects


def assemble(run: Run) -> None:
    """The snapshot's tables: the replay's state tables (Arrow, written as they are by pyarrow), the history carried
    forward, the served offsets, the data topics' end offsets; the log-sized tables (`offset_commits`, merged into
    the history, and the quarantine) as they come: Arrow when in hand, else on Spark."""
    import pyarrow as pa

    from pipelines.state.quarantine import quarantine_table
    from pipelines.state.served import with_served_offsets
    from schemas.decoded import KIND_ERROR
    from schemas.tables import SNAPSHOT_TABLES

    previous_events, log_end_offsets = run.ahead.result()
    replayed = run.tables
    replayed["group_history"] = run.inc.with_previous_history(previous_events, replayed["group_history"],
                                                              run.snapshot_id)
    run.in_hand = with_served_offsets({t: a for t, a in replayed.items() if t in SNAPSHOT_TABLES})
    run.in_hand["log_end_offsets"] = log_end_offsets
    history = replayed["offset_commits"]
    # validated as it came: Arrow in-process (and written from the rows in hand); from Spark, the rows its shards
    # flagged (the rows otherwise)
    if isinstance(history, pa.Table):
        run.checked = {"offset_commits": history}
    elif run.suspects is not None:  # the blobs of the shards' envelope, opened by the write
        run.checked = {"offset_commits": run.suspects}
    else:
        history = history.frame()
        run.checked = {"offset_commits": history}
    run.tables = {"offset_commits": history, "quarantine": quarantine_table(
        run.decoded, run.snapshot_id, error_rows=run.facts.counts.get(KIND_ERROR, 0))}


def materialize(run: Run) -> None:
    """The log-sized tables computed once: validation, the counts and the write then read cached rows."""
    from pipelines.state.materialized import materialize as materialize_tables

    run.progress.stage("materialize")
    # the history the shards counted stays in their kept envelope: its one reader is the write
    known = {"offset_commits": run.suspects.total} if run.suspects is not None else {}
    run.stats = materialize_tables(run.tables, known)
    run.stats.update({t: a.num_rows for t, a in run.in_hand.items()})
    run.checked = {**run.tables, **run.checked, **run.in_hand}
    run.staging = _stage_ahead(run)


def _stage_ahead(run: Run):
    """The snapshot's tables in hand, their files written (uncommitted) in a thread while validation reads them:
    Parquet encoding and compression leave the interpreter, GX's checks do not. The write commits them."""
    import pyarrow as pa

    from schemas.tables import SNAPSHOT_TABLES

    arrow = {t: a for t, a in {**run.tables, **run.in_hand}.items() if t in SNAPSHOT_TABLES and isinstance(a, pa.Table)}
    return _in_thread("stage", run.warehouse.stage_tables, None, run.snapshot_id, arrow)


def validate(run: Run) -> None:
    """The great-expectations suites over the snapshot, with the record accounting."""
    from pipelines.frames.decode import reader_counts
    from pipelines.validation.accounting import Accounting
    from pipelines.validation.runner import run_validation

    run.progress.stage("validate")
    # records_in: the reader's own count from batch headers (frames.decode.reader_counts), independent of the
    # decoded rows, so `accounting.records_accounted` fails when records go missing in decoding.
    run.read_counts = reader_counts(run.spark, run.inc.decode_plan)
    run.accounting = Accounting.from_tally(run.tally, run.read_counts)
    run.validation = run_validation(run.spark, run.checked, as_of_ms=run.as_of_ms, num_partitions=run.num_partitions,
                                    settings=run.settings, markers=run.markers, accounting=run.accounting,
                                    snapshot_id=run.snapshot_id, row_counts=run.stats)
    run.summary.validation = run.validation.summary()
    run.summary.bytes_unread = run.accounting.totals.bytes_unread
    run.summary.unread_ranges = [list(r) for r in run.accounting.totals.unread_ranges]


def summarize(run: Run) -> None:
    from pipelines.coordinator.tables import misplaced_count, open_transactions

    run.progress.stage("summarize")
    s, stats = run.summary, run.stats
    s.groups = stats["loaded_groups"]
    s.removed_groups = stats["removed_groups"]
    s.offsets = stats["loaded_offsets"]
    s.empty_group_offsets = stats["empty_group_offsets"]
    s.pending_offsets = stats["pending_offsets"]
    s.pending_transactions = open_transactions(run.in_hand["pending_offsets"])
    s.expired_offsets = stats["expired_offsets"]
    s.expired_groups = stats["expired_groups"]
    s.records_skipped = run.accounting.total_skipped
    s.records_out = run.accounting.total_used
    s.misplaced_groups = misplaced_count(run.in_hand["loaded_groups"])
    s.status = "validation_failed" if run.validation.should_fail_run else "succeeded"


def checkpoint(run: Run) -> None:
    """What this run read, and the shards the next `--incremental` run resumes. A what-if run is never resumed from:
    no state for the chain to pick."""
    from pipelines import incremental
    from pipelines.frames.decode import SEGMENTS

    if run.summary.kind != "scheduled":
        return
    run.progress.stage("checkpoint", f"state for --incremental -> {run.req.warehouse}/_state/{run.snapshot_id}")
    scans = {s["path"]: s for c in run.read_counts.values() for s in c[SEGMENTS]}
    incremental.save_checkpoint(run.warehouse, run.snapshot_id, run.saved, run.input_plan, run.inc,
                                conf=run.conf, req=run.req, scans=scans, max_timestamp=run.max_ts,
                                max_partition=run.max_part)


def write(run: Run) -> None:
    """The validation report, then every table and the `runs` row committed as one snapshot; old snapshots
    beyond `warehouse.keep_snapshots` retired."""
    from pipelines import incremental
    from pipelines.validation.report import render_report

    s, req, progress = run.summary, run.req, run.progress
    progress.stage("write", f"snapshot {run.snapshot_id} -> {req.warehouse}")
    run_row = dict(status=s.status, started_at=ms_to_iso(run.started_ms), as_of=ms_to_iso(run.as_of_ms),
                   retention_minutes=run.conf.retention_minutes, semantics=run.conf.semantics, inputs=s.inputs,
                   records_in=s.records_in, records_out=s.records_out, records_quarantined=s.records_quarantined,
                   record_type_counts=run.facts.counts, validation=s.validation, kind=s.kind)
    reports = run.warehouse.root / "_reports"
    (reports / f"{run.snapshot_id}.html").write_text(render_report(run.validation))
    (reports / f"{run.snapshot_id}.json").write_text(run.validation.to_json())
    # The summary stored in `runs` is written with the snapshot, so it holds the stages before the write;
    # the printed summary adds the write's own time once it is done.
    s.stage_seconds = dict(progress.stage_seconds)
    run_row["summary"] = s.to_json()
    expected = dict(run.stats)
    staging, run.staging = run.staging, None
    staged = staging.result() if staging is not None else None
    tables = {t: a for t, a in {**run.tables, **run.in_hand}.items()
              if not (t == "offset_commits" and run.prepared.other_cluster)}
    run.warehouse.write_snapshot(run.spark, run.snapshot_id, tables, run_row,
                                 expected_rows=expected, before_commit=lambda: _committing(run.prepared, progress),
                                 history_known_below=run.inc.next_offsets(), history_clustered=True, staged=staged,
                                 history_adds_only=s.kind != "scheduled", cluster=run.prepared.cluster)
    progress.end()
    s.stage_seconds = dict(progress.stage_seconds)
    keep = run.settings.section("warehouse").get("keep_snapshots")
    if keep:
        run.warehouse.retain(int(keep), lock=run.prepared.lock, current=run.snapshot_id)
        incremental.clean_state(run.warehouse, progress.emit)


def _release(run: Run) -> None:
    """The run's cached frames and kept envelope dropped (the process may go on: tests, the API), its read-ahead
    done (a run that failed before it was needed leaves no thread reading), the files it staged and never handed
    to the write deleted."""
    if run.ahead is not None:
        run.ahead.exception()
    if run.staging is not None and run.staging.exception() is None:
        run.warehouse.discard_staged(run.staging.result())
    try:
        if run.release is not None:
            run.release()
        if run.decoded is not None:
            run.decoded.unpersist()
    except Exception:  # a session already stopped: nothing left to drop
        pass


def _record_failure(run: Run, e: BaseException) -> None:
    """A run that failed after it started: recorded in `runs` where the storage still allows it; a storage
    refusal or a refused write becomes one line for the user (UsageError / RunFailed)."""
    from pipelines.io.delta import DeltaWriteError
    from pipelines.io.storage import StorageError
    from pipelines.io.warehouse import WarehouseError

    sid, req, conf = run.snapshot_id, run.req, run.conf
    stage = run.progress._stage or "end"
    storage = _storage_error(e)
    if not getattr(e, "offsetlake_failure_recorded", False):
        try:
            run.warehouse.record_failure(sid, dict(
                started_at=ms_to_iso(run.started_ms), inputs=run.summary.inputs, semantics=conf.semantics,
                retention_minutes=conf.retention_minutes,
                summary={"error": _first_line(e), "stage": stage}, kind=run.summary.kind))
        except Exception as mark_exc:
            if storage is None and _storage_error(mark_exc) is None:
                raise
            raise RunFailed(f"run {sid} failed in stage {stage}: {storage or 'storage error'}: "
                            f"{_first_line(e)}; its failure could not be recorded either "
                            f"({_first_line(mark_exc)})") from None
    if storage == "not writable":
        raise UsageError(f"--warehouse {req.warehouse}: cannot write ({_first_line(e)}); "
                         f"run {sid} recorded as failed") from None
    if storage == "disk full" or type(e).__name__ == "PanicException":
        raise RunFailed(f"run {sid} failed in stage {stage}: {storage or 'delta-rs panic'}: "
                        f"{_first_line(e)}; recorded as failed") from None
    if isinstance(e, (WarehouseError, DeltaWriteError, StorageError)):  # refused, or the store failed: said in full
        raise RunFailed(f"run {sid} failed in stage {stage}: {e}; recorded as failed") from None


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
