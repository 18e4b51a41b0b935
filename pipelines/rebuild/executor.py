"""Where a run's shards execute: the one place that chooses, and the one reader of the thresholds it chooses with
(`decode.in_process_max_bytes`, `decode.split_bytes`, `decode.load_buffer_bytes`, `rebuild.local_replay_max_rows`,
`rebuild.resume_tasks_min_rows`).

A shard is one offsets partition's coordinator state (`coordinator.shard`). A run builds its shards one of four
ways (`Route`, the name `runs.summary.incremental.replay` reports):

- `SHARDS`: segment input read on Spark. One task per offsets partition decodes its segments a window at a time
  and loads them onto its shard (the saved one, when `--incremental`); a partition of more than `split_bytes` is
  decoded in ranges by tasks of their own and loaded by a second job, in buckets of its groups on every core when
  the run is a full one (`frames.segment_shards`, `frames.ranges`).
  The shards' state tables are then tabulated on Spark.
- `IN_PROCESS`: a decoded log of at most `local_replay_max_rows` rows (`--incremental`: saved shards of at most
  that many state entries, decoded here) replayed in this process (`coordinator.shard.replay_shards`).
- `TASKS`: an incremental run decoded here whose replay holds at least `resume_tasks_min_rows` rows: its saved
  shards resumed on one task per core (`frames.resumed`).
- `SPARK`: any other decoded log (tabular input), one task per offsets partition (`frames.shards`).

Decoding itself is in this process for an input of at most `in_process_max_bytes` (no Python worker to start, no
job to schedule), else on Spark. `choose` decides all of it before the decode, but for a decoded full run, which
replays in process only when its records are few: `Execution.replay_route` settles that once they are counted.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:  # the chooser stays a leaf: these are only its fields' types
    from pipelines.frames.decode import DecodePlan
    from pipelines.incremental.saved import SavedShards


class Route(str, enum.Enum):
    SHARDS = "shards"
    IN_PROCESS = "in-process"
    TASKS = "tasks"
    SPARK = "spark"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Execution:
    """How one run executes (`choose`). `decode_plan`: what the run decodes, decided in this process or on Spark
    (`DecodePlan.in_process`); `previous`: the saved shards (`incremental.saved.SavedShards`) the run loads onto,
    None for a full run."""

    decode_plan: DecodePlan
    loads_shards: bool  # Route.SHARDS: the decode's tasks load the shards
    previous: SavedShards | None
    window_bytes: int
    split_bytes: int
    state_entries: int  # the saved shards' size (0 for a full run)
    max_rows: int
    min_task_rows: int
    cores: int  # Spark's cores, when the route uses them (else 0: `choose` never asked)

    def replay_route(self, records_in: int) -> tuple[Route, int | None]:
        """The route of the replay, and the rows it holds in this process (None on Spark), once the decode has
        counted `records_in`."""
        if self.loads_shards:
            return Route.SHARDS, None
        if self.previous is not None:  # resumed from this process's decoding (`choose`)
            rows = records_in + self.state_entries
            return (Route.TASKS if self.tasks and 0 < self.min_task_rows <= rows else Route.IN_PROCESS), rows
        if 0 < self.max_rows and records_in <= self.max_rows:
            return Route.IN_PROCESS, records_in
        return Route.SPARK, None

    @property
    def split_buckets(self) -> int:
        """The buckets of its groups a split partition is loaded in (`Route.SHARDS`), a task each: one per core for a
        full run; one for an incremental run, which resumes the one shard it saved."""
        return 1 if self.previous is not None else max(1, self.cores)

    @property
    def tasks(self) -> int:
        """The tasks a `Route.TASKS` replay resumes the saved shards on: one per core (none on one core: the
        replay is as fast in this process)."""
        if self.previous is None or self.cores < 2:
            return 0
        return min(self.cores, len(self.previous.partitions))


def choose(conf, inc, cores: Callable[[], int]) -> Execution:
    """How the run planned by `inc` (`incremental.IncrementalStart`) executes, under `conf`
    (`rebuild.request.RunSettings`) on `cores()` Spark cores, asked only by a route that uses them: the shards'
    tasks, or saved shards resumed here that `Route.TASKS` may take. Asking is what starts a session."""
    plan = replace(inc.decode_plan, in_process=inc.decode_plan.total_bytes <= conf.in_process_max_bytes)
    previous = inc.saved_shards()
    resumed_here = (previous is not None and plan.in_process and 0 < conf.local_replay_max_rows
                    and inc.state_entries <= conf.local_replay_max_rows)
    loads = not resumed_here and loads_shards(plan, previous)
    if previous is not None and not (loads or resumed_here):
        # an incremental plan is segments (and discovery problems) only (`incremental.start`)
        raise RuntimeError("an incremental run's input is neither loaded by its shards' tasks nor resumed here")
    return Execution(decode_plan=plan, loads_shards=loads, previous=previous, window_bytes=conf.load_buffer_bytes,
                     split_bytes=conf.split_bytes, state_entries=inc.state_entries if previous is not None else 0,
                     max_rows=conf.local_replay_max_rows, min_task_rows=conf.resume_tasks_min_rows,
                     cores=cores() if loads or (resumed_here and 0 < conf.resume_tasks_min_rows) else 0)


def loads_shards(plan, previous=None) -> bool:
    """Whether `plan` (`frames.decode.DecodePlan`) can take `Route.SHARDS`: segment files only, of known offsets
    partitions, read on Spark. `previous`: an incremental run's saved shards, loaded on by the same tasks (its plan
    may also hold the input's discovery problems: each is a quarantined row of its shard)."""
    if previous is not None:
        return all(i["kind"] in ("segment", "problem") for i in plan.items)
    segments = all(i["kind"] == "segment" and i["offsets_partition"] is not None for i in plan.items)
    return segments and not plan.in_process and bool(plan.items)
