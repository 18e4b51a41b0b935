"""What a run reports: its stages' progress lines and times as it goes (`Progress`), and the summary the CLI prints
and `runs.summary` stores (`RunSummary`), filled once when the run knows it all (`stages.summarize`)."""
from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from typing import Callable

from pipelines.coordinator.options import DEFAULT_KAFKA_VERSION, DEFAULT_RETENTION_MINUTES, DEFAULT_SEMANTICS
from schemas.tables import GROUP_HISTORY_VERSION


@dataclass
class RunSummary:
    snapshot_id: str
    status: str = "running"
    inputs: list[str] = field(default_factory=list)
    semantics: str = DEFAULT_SEMANTICS
    as_of: str | None = None
    # the newest time the snapshot's log speaks for: its newest record's, or the --until-time cut (None: no record
    # had a time). `--as-of` is the clock of expiry and lag, never a cut: a snapshot holds every record up to this,
    # and its history views (`Snapshot.log_until`) show them, whatever its as_of
    log_until: str | None = None
    retention_minutes: int = DEFAULT_RETENTION_MINUTES
    expiry: bool = True
    kafka_version: str = DEFAULT_KAFKA_VERSION  # the broker version whose expiry rules the run applied
    records_in: int = 0
    records_out: int = 0
    records_quarantined: int = 0
    records_skipped: int = 0
    quarantine_rows: int = 0  # rows of the `quarantine` table (`records_quarantined`: the records they stand for)
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
    log_end_offsets_unknown_at_as_of: int = 0  # a what-if run's: partitions in the log dirs whose end then is unknown
    # offsets partition -> where its log lacks offsets (compacted): {first_offset, compacted_below, compacted_until}
    log_gaps: dict = field(default_factory=dict)
    # the lag in time (`consumer_lag`): data-topic partitions whose segments were read, committed offsets with a
    # lag_seconds, records looked up, and the data logs' notes (`schemas.log_notes`: counts by kind, the first few)
    lag: dict = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    validation: dict = field(default_factory=dict)
    stage_seconds: dict[str, float] = field(default_factory=dict)
    incremental: dict = field(default_factory=dict)
    task_cpu_seconds: dict[str, float] = field(default_factory=dict)  # summed over the tasks, per kind of work
    # the records the shards' tasks handed their Python loaders one at a time (group records, and the offset values
    # that may create a simple group); the rest were replayed column by column. None: the run did not load its
    # shards in Spark's tasks
    records_looped: int | None = None
    # the wall time of the run's first Spark job that ran Python (`frames.python_jobs`; None: it ran none): a new
    # session's pays for starting the Python workers, which later jobs do not
    first_python_job_seconds: float | None = None
    kind: str = "scheduled"  # or what-if: --as-of/--until-* (runs.kind)
    # what the run's group_history events mean (`schemas.tables.GROUP_HISTORY_VERSION`); an incremental run carries
    # its base's events forward only from a state saved by a version that wrote them so (an older one: a full run)
    group_history_version: int = GROUP_HISTORY_VERSION
    # what failed after the snapshot and its runs row were committed (retiring old snapshots, giving the writer
    # lock back): the snapshot stands as recorded; the CLI prints each as a `warning:` line
    after_commit: list[str] = field(default_factory=list)

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

    @property
    def current(self) -> str | None:
        """The stage running now (None between stages and after the last)."""
        return self._stage
