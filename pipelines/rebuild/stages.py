"""The stages of a rebuild, in order: plan -> decode -> replay -> assemble -> materialize -> validate -> summarize ->
checkpoint -> write. Each takes the run (`Run`: what it was asked, resolved before the first stage) and the
results of the stages before it, and returns a frozen result of its own. What a stage leaves to release when the
run ends (cached frames, files staged and not yet committed, threads) it hands to the run's exit stack
(`Run.held`). The transforms live in their layers; where the shards execute is `rebuild.executor`'s choice."""
from __future__ import annotations

import contextlib
from collections import Counter
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Callable

import pyarrow as pa

from pipelines import incremental
from pipelines.background import in_thread
from pipelines.config import Settings
from pipelines.coordinator.decoded import REPLAY_COLUMNS, conform_loaded
from pipelines.coordinator.expiry import ExpiryOptions
from pipelines.coordinator.options import ReplayOptions, limited_value_versions, unknown_group_key_types
from pipelines.coordinator.shard import replay_shards
from pipelines.coordinator.tables import misplaced_count, open_transactions
from pipelines.decoding.log_end_offsets import DataLogs, data_logs, ends_at, log_end_offsets_table
from pipelines.decoding.segments import partition_count
from pipelines.frames import segment_shards
from pipelines.frames.decode import SEGMENTS, DecodePlan, decoded_log, reader_counts
from pipelines.frames.progress import TaskCounters, reporting
from pipelines.frames.python_jobs import first_python_job
from pipelines.frames.resumed import resume_on_spark
from pipelines.frames.segment_shards import GROUP_EVENTS_IN_HAND, LoadedOnSpark, tabulate_on_spark
from pipelines.frames.shards import replay_on_spark, topic_names_of
from pipelines.frames.tally import DecodedFacts, Tally, tally
from pipelines.heap import gc_paused
from pipelines.io import storage
from pipelines.io.blobs import BlobRows
from pipelines.io.checkpoint import SavedState, stage_state
from pipelines.io.scratch import new_scratch
from pipelines.io.table_rows import ArrowRows, FrameRows, TableRows
from pipelines.io.warehouse import SCHEDULED, HistoryWrite, StagedHistory
from pipelines.rebuild.coordinator_warnings import (cleanup_failure_warnings, load_failure_warnings,
                                                    semantics_warnings, skipped_group_records, transaction_warnings,
                                                    unknown_key_warnings, unknown_version_warnings)
from pipelines.rebuild.executor import Execution, Route, choose
from pipelines.rebuild.failures import StrictModeError, cause_of, is_failure, shard_errors
from pipelines.rebuild.request import RebuildRequest, RunSettings
from pipelines.rebuild.summary import Progress, RunSummary
from pipelines.session import SessionOnDemand
from pipelines.state.lag import LagFacts, lag_table
from pipelines.state.served import with_served_offsets
from pipelines.times import ms_to_iso
from pipelines.validation.accounting import Accounting, skip_until_offset, skip_until_time
from pipelines.validation.report import render_report
from pipelines.validation.runner import UNKNOWN_CLOCK_MS, ValidationResult, history_check, run_validation
from pipelines.validation.settings import validation_settings
from schemas.decoded import KIND_CONSUMER_GROUP, KIND_ERROR, KIND_GROUP_METADATA
from schemas.tables import SNAPSHOT_TABLES

if TYPE_CHECKING:  # the fields' types only
    from pyspark.sql import DataFrame, SparkSession

    from pipelines.frames.decoded_log import DecodedLog
    from pipelines.incremental.plan import IncrementalStart
    from pipelines.io.warehouse import Warehouse
    from pipelines.rebuild.preflight import PreparedRun
    from pipelines.validation.suspects import Suspects


@dataclass(frozen=True)
class Run:
    """What a run was asked and resolved before its first stage."""

    spark: SparkSession | SessionOnDemand  # on demand: a run whose shards execute in this process starts none
    settings: Settings
    req: RebuildRequest
    prepared: PreparedRun  # settings resolved, inputs, snapshot id, writer lock
    warehouse: Warehouse
    progress: Progress
    started_ms: int
    kind: str  # "scheduled", or "what-if" (--as-of/--until-*: `runs.kind`)
    held: contextlib.ExitStack  # what the stages leave to release when the run ends

    @property
    def conf(self) -> RunSettings:
        return self.prepared.conf

    @property
    def snapshot_id(self) -> str:
        return self.prepared.snapshot_id

    @property
    def saves_shards(self) -> bool:
        """Whether the replay saves the shards the next `--incremental` run resumes: a what-if run is never
        resumed from."""
        return self.kind == "scheduled"


def _quietly(release: Callable[[], None]) -> Callable[[], None]:
    def call():
        try:
            release()
        except Exception:  # a session already stopped: nothing left to drop
            pass
    return call


# ================================================================================================================
# plan
# ================================================================================================================
@dataclass(frozen=True)
class Planned:
    input_plan: DecodePlan  # of the whole input (the checkpoint records it)
    inc: IncrementalStart  # full or incremental, and why
    execution: Execution  # what the run decodes, and where its shards execute
    warnings: tuple[str, ...]


def plan(run: Run) -> Planned:
    """What the input holds, what this run decodes of it (`--incremental`: only the bytes after the previous
    snapshot's checkpoint), and where its shards execute."""
    run.progress.stage("plan", f"{len(run.prepared.inputs)} input path(s)")
    input_plan = replace(run.prepared.plan, policy=run.conf.read_policy)
    warnings = [f"{path}: no producer_id/is_transactional/is_control columns: transactional offset commits "
                "cannot be resolved; every commit is treated as non-transactional"
                for path in input_plan.tabular_without_batch_facts]
    if run.prepared.other_cluster:
        warnings.append(f"--other-cluster: {run.prepared.other_cluster}; this snapshot's records are not added to "
                        "the history (offset_commits)")
    inc = incremental.start(run.warehouse, run.req, run.conf, input_plan, run.snapshot_id)
    run.progress.emit(f"          {inc.progress_line()}")
    execution = choose(run.conf, inc, lambda: run.spark.sparkContext.defaultParallelism)
    return Planned(input_plan=input_plan, inc=inc, execution=execution, warnings=tuple(warnings))


# ================================================================================================================
# decode
# ================================================================================================================
@dataclass(frozen=True)
class Decoded:
    log: DecodedLog  # the decoded rows, kept by Spark or in hand
    loaded: LoadedOnSpark | None  # Route.SHARDS: decoded and loaded per shard
    tally: Tally  # records per partition and type, newest timestamps, past the cut-off
    facts: DecodedFacts  # counts by type, newest timestamp, top partition
    task_cpu_seconds: dict
    records_looped: int | None  # Route.SHARDS: the records the tasks' Python loaders read one at a time
    read_counts: Future  # of frames.decode.reader_counts: the accounting's own walk, run while the run goes on

    @property
    def records_in(self) -> int:
        return sum(self.facts.counts.values())

    @property
    def records_quarantined(self) -> int:
        return sum(v for k, v in self.facts.counts.items() if k.startswith("error"))


def decode(run: Run, planned: Planned) -> Decoded:
    """Every work item decoded into the run's decoded log, kept; the records counted by type. `Route.SHARDS`: the
    same tasks load the shards, one per offsets partition (`frames.segment_shards`)."""
    # imported here, not at module level: pyspark ~0.1 s of import (python -X importtime)
    from pipelines.state.quarantine import first_quarantined, quarantine_table

    ex = planned.execution
    plan = ex.decode_plan
    # the tasks' counters live in the session: a decode in this process has none, and starts none
    counters = None if plan.in_process else TaskCounters(run.spark)
    cut = (run.req.until_offset, run.prepared.until_time_ms)
    described = f"{plan.num_segments} segment(s), {plan.num_tabular} table(s), {plan.total_bytes / 1e6:.1f} MB"
    loaded, cpu_seconds, looped = None, {}, None
    if ex.loads_shards:
        run.progress.stage("decode", described + ", each offsets partition decoded and loaded by one task"
                           + (" onto the shard the previous run saved" if ex.previous is not None else ""))
        stage = run.warehouse.stage_history(run.snapshot_id, mode="full" if run.kind == SCHEDULED else "what-if")
        state_stage = stage_state(run.warehouse, run.snapshot_id) if run.saves_shards else None
        scratch = new_scratch(run.warehouse.root, run.snapshot_id)
        run.held.callback(scratch.discard)  # once the write has read it, or the run failed
        with shard_errors():
            load = segment_shards.ShardLoad(
                options=_load_options(run), scratch=scratch, cut=cut, split_by=_early_history_check(run, plan),
                stage=stage, state_stage=state_stage, previous=ex.previous, window_bytes=ex.window_bytes,
                split_bytes=ex.split_bytes, buckets=ex.split_buckets)
            loaded = segment_shards.load_on_spark(run.spark, plan, load, counters=counters, emit=run.progress.emit)
        log = loaded.log
        run.held.callback(_quietly(log.unpersist))
        run.held.callback(_quietly(loaded.release))
        cpu_seconds = {k: round(v, 3) for k, v in loaded.cpu_seconds.items()}
        looped = loaded.records_looped
        counted = tally(log)
    else:
        run.progress.stage("decode", described)
        log = decoded_log(run.spark, plan, counters, cut=cut).persist()
        run.held.callback(_quietly(log.unpersist))
        if counters is None:
            counted = tally(log, plan.read_before())
        else:
            with reporting(run.spark, run.progress.emit, "decode", counters):
                counted = tally(log, plan.read_before())
    # the reader's own count from batch headers, independent of the decoded rows (`validate`): counted by the tasks
    # that loaded the shards, or a small job of its own, mostly waiting on Spark, so it runs beside the replay
    if loaded is not None:
        read_counts = Future()
        read_counts.set_result(loaded.read_counts)
    else:
        read_counts = in_thread("reader-counts", reader_counts, run.spark, plan)
        run.held.callback(read_counts.exception)  # a run that fails first leaves no job running
    decoded = Decoded(log=log, loaded=loaded, tally=counted, facts=counted.facts(), task_cpu_seconds=cpu_seconds,
                      records_looped=looped, read_counts=read_counts)
    run.progress.emit(f"          decoded {decoded.records_in:,} records "
                      f"({decoded.records_quarantined:,} quarantined)")
    if run.conf.strict and decoded.records_quarantined:
        first = first_quarantined(quarantine_table(log, run.snapshot_id))
        raise StrictModeError(f"--strict: quarantined record at {first['source']} position {first['position']}: "
                              f"{first['reason']}")
    return decoded


def _load_options(run: Run):
    """What loading a shard needs of the run (`coordinator.shard.load_shards`): the semantics, the cut, the id."""
    return ReplayOptions(semantics=run.conf.semantics, until_offset=run.req.until_offset,
                         until_time_ms=run.prepared.until_time_ms, snapshot_id=run.snapshot_id,
                         kafka_version=run.conf.kafka_version)


def _early_history_check(run: Run, plan):
    """The history's suite as a filter before the run's clock is known: the run's own when `--as-of` or
    `--until-time` gives it, else one no run reaches (the replay checks the shards' suspects against the run's)."""
    clock = next((t for t in (run.prepared.as_of_ms, run.prepared.until_time_ms) if t is not None), UNKNOWN_CLOCK_MS)
    return history_check(run.settings, as_of_ms=clock, num_partitions=_partition_count(run, plan.max_partition))


def _partition_count(run: Run, top: int) -> int:
    """The offsets topic's partition count: the setting, else the partition dirs of the input's log dir (a broker
    keeps them all), else Kafka's default of 50; never fewer than the highest partition seen (`top`) + 1."""
    return run.conf.num_partitions or max(partition_count(run.prepared.inputs) or 50, top + 1)


# ================================================================================================================
# replay
# ================================================================================================================
@dataclass(frozen=True)
class Clock:
    """The run-wide facts every shard is tabulated with: the cut, the partition count, the expiry time."""

    options: ReplayOptions
    expiry: ExpiryOptions | None  # None: without expiry
    as_of_ms: int
    max_timestamp: int | None  # the newest record's, the previous run's records too
    max_partition: int
    num_partitions: int
    log_gaps: dict  # offsets partition -> where its log lacks offsets (`incremental.plan.IncrementalStart.log_gaps`)


@dataclass(frozen=True)
class Replayed:
    route: Route
    rows: int | None  # the rows replayed in this process (None: on Spark)
    clock: Clock
    tables: dict  # SHARD_TABLES as Arrow; `offset_commits` as Arrow, the shards' on Spark, or staged files
    markers: pa.Table  # the end-transaction markers read (`coordinator.decoded.transaction_markers`)
    saved: SavedState | dict[int, bytes] | None  # the shards the next --incremental run resumes
    suspects: Suspects | None  # the history as its suite sees it, from the shards on Spark
    ahead: Future  # of `_read_ahead`: what the snapshot adds besides the replay, read while it runs
    counted: dict = field(default_factory=dict)  # rows of a table of `tables` on Spark, counted where they were made


def _clock(run: Run, planned: Planned, decoded: Decoded) -> Clock:
    req, conf, facts, inc = run.req, run.conf, decoded.facts, planned.inc
    until_time_ms = run.prepared.until_time_ms
    max_ts = inc.max_timestamp(facts.max_timestamp)
    # A point-in-time run is as of its cut: --until-time T, else the newest record at or before --until-offset.
    # It is also the load time of the groups the replay synthesizes (a broker loading the log at that point).
    cut_ms = max_ts
    if until_time_ms is not None:
        cut_ms = until_time_ms
    elif req.until_offset is not None:
        cut_ms = facts.max_timestamp_until
    max_part = inc.max_partition(facts.max_partition)
    num_partitions = _partition_count(run, max(planned.execution.decode_plan.max_partition, max_part))
    options = ReplayOptions(semantics=conf.semantics, until_offset=req.until_offset, until_time_ms=until_time_ms,
                            num_partitions=num_partitions, snapshot_id=run.snapshot_id, load_time_ms=cut_ms,
                            kafka_version=conf.kafka_version)
    if run.prepared.as_of_ms is not None:
        as_of_ms = run.prepared.as_of_ms
    else:
        as_of_ms = cut_ms if cut_ms is not None else run.started_ms
    expiry = ExpiryOptions(as_of_ms=as_of_ms, retention_minutes=conf.retention_minutes,
                           semantics=conf.semantics, kafka_version=conf.kafka_version) if conf.expiry else None
    return Clock(options=options, expiry=expiry, as_of_ms=as_of_ms, max_timestamp=max_ts, max_partition=max_part,
                 log_gaps=inc.log_gaps(facts.log_gaps),
                 num_partitions=num_partitions)


def _log_until(clock: Clock) -> str | None:
    """`RunSummary.log_until`: the replay's cut (`_clock`), the time of the log a broker loading it would be at."""
    cut = clock.options.load_time_ms
    return None if cut is None else ms_to_iso(cut)


@dataclass(frozen=True)
class ReadAhead:
    previous_events: pa.Table | None  # the previous snapshot's group history an incremental run carries forward
    log_end_offsets: pa.Table  # the data topics' bounds the input's log dirs hold (LAG as of the dump; a what-if
    # run's are as of its as_of, `assemble`)
    data_logs: DataLogs  # the data partitions' logs, for the lag in time
    warnings: tuple[str, ...]


def _read_ahead(run: Run, planned: Planned, route: Route) -> Future:
    """What the snapshot adds besides the replay, read in a thread while the replay runs: it depends on none of it,
    and a replay on Spark tasks leaves this process waiting. The shards' tasks write their group history on the
    cluster (`Route.SHARDS`): the history carried forward is then read there too, by `assemble`."""
    def read() -> ReadAhead:
        events = planned.inc.previous_group_history(run.warehouse) if route is not Route.SHARDS else None
        found = data_logs(run.prepared.inputs)
        found.close()  # mapped again by the lag's reads, partition by partition
        return ReadAhead(events, log_end_offsets_table(found.rows, run.snapshot_id), found,
                         tuple(found.warnings))
    ahead = in_thread("read-ahead", read)
    run.held.callback(ahead.exception)  # a run that failed before it was needed leaves no thread reading
    return ahead


def replay(run: Run, planned: Planned, decoded: Decoded) -> Replayed:
    """The engine over the rows (`--incremental`: loaded onto the shards the previous run saved), along the route
    the executor chose. Every route gives the snapshot's state tables as Arrow."""
    ex = planned.execution
    route, rows = ex.replay_route(decoded.records_in)
    ahead = _read_ahead(run, planned, route)
    clock = _clock(run, planned, decoded)
    options, expiry = clock.options, clock.expiry
    expiring = f", expiry as of {ms_to_iso(clock.as_of_ms)}" if expiry else ""
    done = dict(route=route, rows=rows, clock=clock, ahead=ahead, saved=None, suspects=None)
    if route in (Route.IN_PROCESS, Route.TASKS):
        where = f"{ex.tasks} tasks" if route is Route.TASKS else "this process"
        onto = (f" ({decoded.records_in:,} new records onto {ex.state_entries:,} saved state entries)"
                if ex.previous is not None else "")
        run.progress.stage("replay", f"semantics {options.semantics}, {rows:,} rows in {where}" + onto + expiring)
        table = conform_loaded(decoded.log.to_arrow(REPLAY_COLUMNS))  # `loadable` drops what no loader reads
        if route is Route.TASKS:
            with shard_errors():
                shards = resume_on_spark(run.spark, table, ex.previous, options, expiry, ex.tasks,
                                         stage_state(run.warehouse, run.snapshot_id) if run.saves_shards else None)
            run.held.callback(_quietly(shards.release))
            return Replayed(**{**done, "saved": shards.saved}, tables=shards.tables, markers=shards.markers)
        # the resumed states are a million objects or more: the collector would walk them all at each full pass
        with gc_paused():
            with shard_errors():
                resume = None if ex.previous is None else ex.previous.all()
            result = replay_shards(table, options, expiry, keep=run.saves_shards, resume=resume)
            del resume
            saved = None if result.saved is None else {p: shard.to_bytes() for p, shard in result.saved.items()}
            replayed = Replayed(**{**done, "saved": saved}, tables=result.tables, markers=result.markers)
            del result  # the states, freed while paused (`heap.gc_paused`)
        return replayed

    check = history_check(run.settings, as_of_ms=clock.as_of_ms, num_partitions=clock.num_partitions)
    if route is Route.SHARDS:
        run.progress.stage("replay", f"semantics {options.semantics}, the state tables of the loaded shards"
                                     + expiring)
        # a group record makes at most one event; an incremental run's history carried forward stays on Spark
        group_records = decoded.facts.records_of(KIND_GROUP_METADATA, KIND_CONSUMER_GROUP)
        in_hand = not planned.inc.is_incremental and group_records <= GROUP_EVENTS_IN_HAND
        with shard_errors():  # its release is the loaded shards' (`decode`)
            shards = tabulate_on_spark(run.spark, decoded.loaded, options, expiry, topic_names_of(decoded.log),
                                       history_check=check, events_in_hand=in_hand)
    else:
        run.progress.stage("replay", f"semantics {options.semantics}, one task per offsets partition" + expiring)
        shards = replay_on_spark(run.spark, decoded.log, options, expiry, topic_names_of(decoded.log),
                                 keep=run.saves_shards, emit=run.progress.emit, history_check=check,
                                 input_bytes=ex.decode_plan.bytes_by_partition())
        run.held.callback(_quietly(shards.release))
    return Replayed(**{**done, "saved": shards.saved, "suspects": shards.suspects}, tables=shards.tables,
                    markers=shards.markers, counted=shards.counted)


# ================================================================================================================
# assemble, materialize
# ================================================================================================================
@dataclass(frozen=True)
class Assembled:
    in_hand: dict  # the state tables, Arrow (the replay's, the group history carried forward, the served offsets...)
    log_sized: dict  # `offset_commits` (merged into the history), the quarantine and the shards' group history
                     # (`Route.SHARDS`), as they come
    checked: dict  # what validation reads of the history: Arrow in hand, the shards' suspects, or the rows
    read_ahead: ReadAhead
    counted: dict  # rows of a table of `log_sized`, counted where they were made (`Replayed.counted`)
    lag: LagFacts  # what the lag in time found


def assemble(run: Run, planned: Planned, decoded: Decoded, replayed: Replayed) -> Assembled:
    """The snapshot's tables: the replay's state tables (Arrow, written as they are by pyarrow), the group history
    carried forward, the served offsets, the data topics' end offsets; the log-sized tables (`offset_commits`,
    merged into the history, the quarantine, and the shards' group history with the one carried forward) as they
    come: Arrow when in hand, else on Spark."""
    # imported here, not at module level: pyspark ~0.1 s of import (python -X importtime)
    from pipelines.state.quarantine import quarantine_table

    ahead: ReadAhead = replayed.ahead.result()
    tables = dict(replayed.tables)
    events = tables.pop("group_history")
    counted = dict(replayed.counted)
    if isinstance(events, pa.Table):
        events = planned.inc.with_previous_history(ahead.previous_events, events, run.snapshot_id)
    else:  # the shards' (`Route.SHARDS`), on Spark
        events = planned.inc.with_previous_history_on_spark(run.spark, run.warehouse, events, run.snapshot_id)
        if planned.inc.is_incremental:  # with the previous snapshot's rows: counted by `materialize`
            counted.pop("group_history", None)
    in_hand = with_served_offsets({t: a for t, a in tables.items() if t in SNAPSHOT_TABLES})
    in_hand["log_end_offsets"] = ahead.log_end_offsets
    if run.kind != SCHEDULED:  # LAG at the what-if moment, against the ends then, not the dump's
        in_hand["log_end_offsets"] = log_end_offsets_table(ends_at(ahead.data_logs, replayed.clock.as_of_ms),
                                                           run.snapshot_id)
    in_hand["consumer_lag"], lag = _lag(run, replayed.clock, in_hand, ahead)
    history = tables["offset_commits"]
    # validated as it came: Arrow in-process (and written from the rows in hand); from Spark, the rows its shards
    # flagged (the rows otherwise)
    if isinstance(history, pa.Table):
        checked = {"offset_commits": history}
    elif replayed.suspects is not None:  # the blobs of the shards' envelope, opened by the write
        checked = {"offset_commits": replayed.suspects}
    else:
        history = history.frame()
        checked = {"offset_commits": history}
    quarantine = quarantine_table(decoded.log, run.snapshot_id, error_rows=decoded.facts.counts.get(KIND_ERROR, 0))
    log_sized = {"offset_commits": history, "quarantine": quarantine}
    (in_hand if isinstance(events, pa.Table) else log_sized)["group_history"] = events
    return Assembled(in_hand=in_hand, log_sized=log_sized, checked=checked, read_ahead=ahead, counted=counted,
                     lag=lag)


def _lag(run: Run, clock: Clock, in_hand: dict, ahead: ReadAhead):
    """Every committed offset's lag at the run's as_of, in offsets and in time (`state.lag`), in this process: one
    batch per distinct asked offset, read from the input's data-topic segments."""
    logs = ahead.data_logs.logs
    run.progress.stage("lag", f"{in_hand['loaded_offsets'].num_rows:,} committed offsets, "
                              f"{len(logs):,} data-topic partition(s) with segments")
    try:
        return lag_table(in_hand["loaded_offsets"], in_hand["log_end_offsets"], logs, clock.as_of_ms,
                         run.snapshot_id, past=run.kind != SCHEDULED,
                         seen={(r.topic, r.partition): r.observed_at_ms for r in ahead.data_logs.rows})
    finally:
        ahead.data_logs.close()


class Staging:
    """The snapshot's tables staged (their files written, uncommitted) while validation reads them: the tables in
    hand in one thread (Parquet encoding and compression leave the interpreter, GX's checks do not), and the
    log-sized ones but the history (`offset_commits` is merged, not staged) by Spark jobs started from another, so
    the executors write them while validation holds the driver. The write takes them; files never taken are
    deleted when the run ends."""

    def __init__(self, run: Run, in_hand: dict[str, pa.Table], on_spark: dict | None = None):
        pieces = [{t: ArrowRows(a) for t, a in in_hand.items()},
                  {t: _table_rows(rows) for t, rows in (on_spark or {}).items()}]
        self._futures = [in_thread("stage", run.warehouse.stage_tables, run.snapshot_id, p) for p in pieces if p]
        run.held.callback(self._discard, run.warehouse)

    def take(self) -> dict:
        """Every staged table (table -> its directory and add actions); a piece that failed raises, and what the
        others staged is deleted when the run ends."""
        futures, self._futures = self._futures, []
        try:
            return {t: staged for f in futures for t, staged in f.result().items()}
        except BaseException:
            self._futures = futures
            raise

    def _discard(self, warehouse) -> None:
        for future in self._futures:
            if future.exception() is None:
                warehouse.discard_staged(future.result())


@dataclass(frozen=True)
class Materialized:
    log_sized: dict  # `Assembled.log_sized`, each computed once (Spark's rows checkpointed)
    stats: dict  # rows per table
    checked: dict  # every table validation reads
    staging: Staging


def materialize(run: Run, replayed: Replayed, assembled: Assembled) -> Materialized:
    """The log-sized tables computed once: validation, the counts and the write then read cached rows."""
    # imported here, not at module level: pyspark ~0.1 s of import (python -X importtime)
    from pipelines.state.materialized import materialize as materialize_tables

    run.progress.stage("materialize")
    # the history the shards counted stays in their kept envelope, and the group history they made is named as it
    # is written: their one reader is the write
    known = dict(assembled.counted)
    if replayed.suspects is not None:
        known["offset_commits"] = replayed.suspects.total
    log_sized = dict(assembled.log_sized)
    stats = materialize_tables(log_sized, known)
    stats.update({t: a.num_rows for t, a in assembled.in_hand.items()})
    arrow = {t: a for t, a in {**log_sized, **assembled.in_hand}.items()
             if t in SNAPSHOT_TABLES and isinstance(a, pa.Table)}
    on_spark = {t: a for t, a in log_sized.items() if t in SNAPSHOT_TABLES and not isinstance(a, pa.Table)}
    return Materialized(log_sized=log_sized, stats=stats,
                        checked={**log_sized, **assembled.checked, **assembled.in_hand},
                        staging=Staging(run, arrow, on_spark))


# ================================================================================================================
# validate, summarize
# ================================================================================================================
@dataclass(frozen=True)
class Validated:
    read_counts: dict  # frames.decode.reader_counts of what this run decoded
    accounting: Accounting
    validation: ValidationResult
    # (offsets partition, group id) of each group record skipped as the coordinator's load fails on it
    # (`coordinator_warnings.skipped_group_records`): this run's, and those of the log the snapshot holds (an
    # incremental run's with the earlier runs')
    skipped_groups: list[tuple[int | None, str]]
    load_failures: list[tuple[int | None, str]]


def validate(run: Run, planned: Planned, decoded: Decoded, replayed: Replayed, assembled: Assembled,
             materialized: Materialized) -> Validated:
    """The great-expectations suites over the snapshot, with the record accounting."""
    run.progress.stage("validate")
    # records_in: the reader's own count from batch headers (frames.decode.reader_counts), independent of the
    # decoded rows, so `accounting.records_accounted` fails when records go missing in decoding.
    read_counts = decoded.read_counts.result()
    # the group records the replay skipped, of this run's records only (an incremental run's history adds the
    # earlier runs' events later, in `assemble`)
    skipped = skipped_group_records(replayed.tables.get("group_history"), decoded.loaded)
    in_log = skipped
    if planned.inc.is_incremental:
        in_log = skipped_group_records(_group_history(assembled), decoded.loaded,
                                       earlier=planned.inc.earlier_load_failures)
    accounting = Accounting.from_tally(decoded.tally, read_counts,
                                       unknown_group_key_types(run.conf.semantics, run.conf.kafka_version),
                                       limited_value_versions(run.conf.semantics, run.conf.kafka_version),
                                       Counter(p for p, _ in skipped))
    validation = run_validation(run.spark, materialized.checked, as_of_ms=replayed.clock.as_of_ms,
                                num_partitions=replayed.clock.num_partitions, settings=run.settings,
                                markers=replayed.markers, accounting=accounting, snapshot_id=run.snapshot_id,
                                row_counts=materialized.stats, semantics=run.conf.semantics)
    return Validated(read_counts=read_counts, accounting=accounting, validation=validation, skipped_groups=skipped,
                     load_failures=in_log)


def summarize(run: Run, planned: Planned, decoded: Decoded, replayed: Replayed, assembled: Assembled,
              materialized: Materialized, validated: Validated) -> RunSummary:
    """The run's summary, filled once from what the stages found."""
    run.progress.stage("summarize")
    conf, stats, plan, inc = run.conf, materialized.stats, planned.input_plan, planned.inc
    accounting = validated.accounting
    # records, as `records_out` and `records_skipped` are: the reader's count, and what the quarantine rows stand for
    # (a corrupt batch's row its records, a discovery problem's none), not the rows
    totals = accounting.totals
    incremental = inc.summary(totals.records_in)
    if inc.is_incremental:  # the replay of the shards' tasks reports as Spark's
        incremental["replay"] = str(Route.SPARK if replayed.route is Route.SHARDS else replayed.route)
    first_python_job = _first_python_job(run)
    if first_python_job is not None:
        run.progress.emit(f"          first Python job {first_python_job:.1f}s")
    return RunSummary(
        snapshot_id=run.snapshot_id, inputs=run.prepared.inputs, semantics=conf.semantics,
        retention_minutes=conf.retention_minutes, expiry=conf.expiry, kafka_version=conf.kafka_version, kind=run.kind,
        bytes_in=plan.total_bytes, segments=plan.num_segments, tabular_files=plan.num_tabular,
        warnings=[*planned.warnings, *assembled.read_ahead.warnings,
                  *semantics_warnings(conf), *unknown_key_warnings(conf, accounting, decoded.tally, decoded.facts),
                  *unknown_version_warnings(conf, decoded.tally), *transaction_warnings(conf, decoded.tally),
                  *_as_of_ahead_of_the_run(run, replayed.clock, stats["expired_offsets"]),
                  *_cut_before_every_record(run, accounting),
                  *load_failure_warnings(validated.load_failures),
                  *cleanup_failure_warnings(replayed.clock.expiry, assembled.in_hand)],
        task_cpu_seconds=decoded.task_cpu_seconds, records_looped=decoded.records_looped,
        first_python_job_seconds=first_python_job,
        record_type_counts=decoded.facts.counts,
        records_in=totals.records_in, records_quarantined=totals.records_quarantined,
        quarantine_rows=decoded.records_quarantined, incremental=incremental,
        as_of=ms_to_iso(replayed.clock.as_of_ms), log_until=_log_until(replayed.clock),
        log_end_offsets=assembled.in_hand["log_end_offsets"].num_rows,
        log_end_offsets_unknown_at_as_of=assembled.read_ahead.log_end_offsets.num_rows
        - assembled.in_hand["log_end_offsets"].num_rows,
        lag=_lag_summary(assembled.lag),
        validation=validated.validation.summary(), bytes_unread=accounting.totals.bytes_unread,
        unread_ranges=[list(r) for r in accounting.totals.unread_ranges],
        groups=stats["loaded_groups"], removed_groups=stats["removed_groups"], offsets=stats["loaded_offsets"],
        empty_group_offsets=stats["empty_group_offsets"], pending_offsets=stats["pending_offsets"],
        pending_transactions=open_transactions(assembled.in_hand["pending_offsets"]),
        expired_offsets=stats["expired_offsets"], expired_groups=stats["expired_groups"],
        records_skipped=accounting.total_skipped, records_out=accounting.total_used,
        misplaced_groups=misplaced_count(assembled.in_hand["loaded_groups"]),
        log_gaps={str(p): g for p, g in sorted(replayed.clock.log_gaps.items())},
        status="validation_failed" if validated.validation.should_fail_run else "succeeded")


def _cut_before_every_record(run: Run, accounting: Accounting) -> list[str]:
    """A --until-time or --until-offset before every record the run read (a year mistyped, 2025 for 2026): the
    replay used none, and the snapshot is as empty as a log without records would leave it, exit 0, where the log
    says nothing of that time. Said in the summary, with how many records lie past the cut."""
    totals = accounting.totals
    if totals.records_used:
        return []
    given = [(f"--until-time {run.req.until_time}", skip_until_time(run.prepared.until_time_ms))
             if run.prepared.until_time_ms is not None else None,
             (f"--until-offset {run.req.until_offset}", skip_until_offset(run.req.until_offset))
             if run.req.until_offset is not None else None]
    cut = {option: totals.records_skipped.get(reason, 0) for option, reason in filter(None, given)}
    if not any(cut.values()):
        return []
    return [f"{' and '.join(cut)} cut every record of the input ({sum(cut.values()):,} past it, none replayed): "
            "this snapshot holds no group and no offset, which says nothing of that time (a mistyped time or "
            "offset?)"]


def _as_of_ahead_of_the_run(run: Run, clock: Clock, expired: int) -> list[str]:
    """A run as of its log's newest record (none given) whose record is after the run's own start, past the
    validation's timestamp skew: no broker's clock had reached it, so a clock ran ahead (or a writer set the time:
    an OffsetCommit v1's commit timestamp), and the expiry judged there removed what a broker would still serve."""
    if run.prepared.as_of_ms is not None or run.prepared.until_time_ms is not None or clock.as_of_ms is None:
        return []
    skew_ms = validation_settings(run.settings)[1] * 60_000
    if clock.as_of_ms <= run.started_ms + skew_ms:
        return []
    ahead = (clock.as_of_ms - run.started_ms) / 86_400_000
    return [f"as_of {ms_to_iso(clock.as_of_ms)} is the log's newest record, {ahead:,.2f} day(s) after this run "
            f"started: a broker's clock ran ahead or a writer set a record's time; retention expiry judged there "
            f"removed {expired} offset(s); give --as-of (e.g. now) to judge at another time"]


def _group_history(assembled: Assembled):
    """The snapshot's `group_history` as `assemble` left it, an incremental run's with the earlier runs' events (the
    records its log still holds): Arrow in hand, else on Spark."""
    events = assembled.in_hand.get("group_history")
    return assembled.log_sized["group_history"] if events is None else events


def _first_python_job(run: Run) -> float | None:
    """The wall time of the run's first Spark job that ran Python, as far as the run has got."""
    spark = run.spark
    if spark is None or (isinstance(spark, SessionOnDemand) and not spark.started):  # no session: no job ran
        return None
    job = first_python_job(spark, since_ms=run.started_ms)
    return None if job is None else job.seconds


def _lag_summary(facts) -> dict:
    """The lag in time in short: partitions read, committed offsets timed, and the data logs' notes (counted by
    kind, the first few in full: `schemas.log_notes`)."""
    notes = facts.notes
    return {"partitions_read": facts.partitions_read, "offsets": facts.offsets, "offsets_timed": facts.offsets_timed,
            "records_read": facts.records_read, "notes": dict(sorted(Counter(n.kind for n in notes).items())),
            "first_notes": [n.as_json() for n in notes[:_NOTES_SHOWN]]}


_NOTES_SHOWN = 20


# ================================================================================================================
# checkpoint, write
# ================================================================================================================
def checkpoint(run: Run, planned: Planned, replayed: Replayed,
               validated: Validated) -> incremental.PendingCheckpoint | None:
    """What this run read, and the shards the next `--incremental` run resumes. A what-if run is never resumed from:
    no state for the chain to pick. A rerun of a served id returns its checkpoint unpublished: `write` publishes it
    once the `runs` row is committed (`incremental.PendingCheckpoint`)."""
    if not run.saves_shards:
        return None
    served = run.warehouse.served_row(run.snapshot_id, partial=True) is not None
    if validated.validation.should_fail_run and served:
        # the id stays served as it was (`write`): its checkpoint and state stay the base of the next --incremental run
        if isinstance(replayed.saved, SavedState):
            replayed.saved.discard()  # what the tasks saved: no checkpoint will name it
        return None
    run.progress.stage("checkpoint", f"state for --incremental -> {run.req.warehouse}/_state/{run.snapshot_id}")
    scans = {s["path"]: s for c in validated.read_counts.values() for s in c[SEGMENTS]}
    pending = incremental.prepare_checkpoint(
        run.warehouse, run.snapshot_id, replayed.saved, planned.input_plan, planned.inc, conf=run.conf, req=run.req,
        scans=scans, started_ms=run.started_ms, max_timestamp=replayed.clock.max_timestamp,
        max_partition=replayed.clock.max_partition, log_gaps=replayed.clock.log_gaps,
        load_failures=len(validated.load_failures))
    if not served:  # saved before the commits: a run killed after its `runs` row still leaves its checkpoint
        pending.publish()
        return None
    run.held.callback(pending.discard)  # a rerun that fails before its `runs` row: no checkpoint will name its state
    pending.stash()
    return pending


def write(run: Run, summary: RunSummary, planned: Planned, assembled: Assembled, materialized: Materialized,
          validated: Validated, pending: incremental.PendingCheckpoint | None = None) -> RunSummary:
    """The validation report, then every table and the `runs` row committed as one snapshot (then `pending`, a
    rerun's checkpoint, published); old snapshots beyond `warehouse.keep_snapshots` retired. Returns the summary with
    the write's own time."""
    req, progress = run.req, run.progress
    progress.stage("write", f"snapshot {run.snapshot_id} -> {req.warehouse}")
    run_row = dict(status=summary.status, started_at=ms_to_iso(run.started_ms), as_of=summary.as_of,
                   retention_minutes=run.conf.retention_minutes, semantics=run.conf.semantics, inputs=summary.inputs,
                   records_in=summary.records_in, records_out=summary.records_out,
                   records_quarantined=summary.records_quarantined, record_type_counts=summary.record_type_counts,
                   validation=summary.validation, kind=summary.kind)
    reports = run.warehouse.root / "_reports"
    (reports / f"{run.snapshot_id}.html").write_text(render_report(validated.validation))
    (reports / f"{run.snapshot_id}.json").write_text(validated.validation.to_json())
    # The summary stored in `runs` is written with the snapshot, so it holds the stages before the write;
    # the printed summary adds the write's own time once it is done.
    run_row["summary"] = replace(summary, stage_seconds=dict(progress.stage_seconds)).to_json()
    tables = {t: _table_rows(a) for t, a in {**materialized.log_sized, **assembled.in_hand}.items()}
    history = tables.pop("offset_commits")
    marks = planned.inc.next_offsets() or {}
    mode = "what-if" if run.kind != SCHEDULED else "incremental" if marks else "full"
    attempt = run.warehouse.write_snapshot(
        run.snapshot_id, tables, run_row, spark=run.spark, expected_rows=dict(materialized.stats),
        # another cluster's history is not this warehouse's
        history=None if run.prepared.other_cluster else HistoryWrite(rows=history, mode=mode, known_below=marks,
                                                                     cluster=run.prepared.cluster),
        staged=materialized.staging.take(), before_commit=lambda: _committing(run.prepared, progress))
    progress.end()
    late = [] if attempt is None else [
        f"snapshot {run.snapshot_id} stays served as its previous run wrote it (and stays the base of --incremental "
        f"runs); this run's {summary.status} row is in {attempt}"]
    if pending is not None and attempt is None:
        pending.committed()
        try:
            storage.retried(run.warehouse.root, "save the checkpoint", pending.publish)
        except BaseException as e:  # committed and recorded: the next --incremental run is a full one, and says why
            if not is_failure(e):
                raise
            late.append(f"snapshot {run.snapshot_id} is committed ({summary.status}); its checkpoint for --incremental "
                        f"was not saved ({cause_of(e)}): the next --incremental run saves the copy kept with its state")
    keep = run.conf.keep_snapshots
    if keep:
        def retire():  # each step finds what is left to do: one that stopped half-way is run again
            run.warehouse.retain(keep, lock=run.prepared.lock, current=run.snapshot_id)
            incremental.clean_state(run.warehouse, progress.emit)

        try:
            storage.retried(run.warehouse.root, "retire old snapshots", retire)
        except BaseException as e:  # committed and recorded: what failed is the clean-up, which the next run redoes
            if not is_failure(e):
                raise
            late.append(f"snapshot {run.snapshot_id} is committed ({summary.status}); retiring older snapshots "
                        f"failed, the next run retries it: {cause_of(e)}")
    # the write's own jobs count when the run started no Python job before it
    first = summary.first_python_job_seconds
    return replace(summary, stage_seconds=dict(progress.stage_seconds), after_commit=late,
                   first_python_job_seconds=_first_python_job(run) if first is None else first)


def _table_rows(table: pa.Table | DataFrame | BlobRows | StagedHistory) -> TableRows:
    """A table of the run as the warehouse writes it (`io.table_rows`): Arrow in this process, a DataFrame of the
    run's (its history each record once, as the shards give it), or rows the write takes as they are (the shards'
    blobs, the history the tasks wrote)."""
    if isinstance(table, pa.Table):
        return ArrowRows(table, clustered=True)
    if isinstance(table, (BlobRows, StagedHistory)):
        return table
    return FrameRows(table, clustered=True)


def _committing(prepared, progress) -> None:
    # recorded in the lock first: a run killed from here on may have replaced some of the id's tables
    prepared.lock.update(stage="commit")
    progress.emit("          commit: every table staged, committing")
