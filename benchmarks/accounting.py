"""A run's wall time accounted for, second by second: the driver's stages, the Spark jobs inside each, the tasks'
time in each job (the JVM's CPU, its garbage collection and the rest: the Python workers and what the task waits
on) and the cores left idle while a job ran, beside the driver's own time in the stage.

    clock = StageClock()                       # passed as run_rebuild's emit
    jobs_from = epoch_ms()
    ... run ...
    print(format_accounting(account(spark, clock, summary.stage_seconds, since_ms=jobs_from, wall=wall)))

Where each figure comes from: a stage's wall time from the run's own progress lines (`rebuild.summary.Progress`,
timed here as they are emitted); each job's interval and its tasks' metrics from Spark's status store (the same
store `frames.python_jobs` reads; it keeps them with the UI off); the driver's CPU from this process's CPU clock at
each stage's start. So in each stage: the jobs' wall time (their union, clipped to the stage) is what Spark ran, and
of it `cores x wall` core-seconds are the tasks' time (a job's counted in each stage it spans, by the share of
its wall time there: one started from a thread runs on beside the driver's next stages) or idle; the rest of the
stage is the driver's alone (planning, collects it reads after a job, delta-rs writes, Python in the driver). The
parts are added back up and held against the wall time the caller measured: what nothing accounts for is the time
outside every stage.
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass, field

_STAGE_LINE = re.compile(r"^\[\s*[\d.]+s\] (?P<name>[\w-]+)(?::|$)")


def epoch_ms() -> int:
    return int(time.time() * 1000)


class StageClock:
    """`run_rebuild`'s `emit`: the epoch time and this process's CPU time at each stage's progress line."""

    def __init__(self, echo=None) -> None:
        self.marks: list[tuple[str, float, float]] = []
        self.echo = echo

    def __call__(self, line: str) -> None:
        got = _STAGE_LINE.match(line)
        if got:
            self.marks.append((got["name"], time.time(), time.process_time()))
        if self.echo is not None:
            self.echo(line)


@dataclass
class JobTime:
    job_id: int
    name: str
    start: float  # epoch seconds
    end: float
    tasks: int = 0
    task_s: float = 0.0  # the tasks' run, deserialization and result serialization time, summed
    jvm_cpu_s: float = 0.0  # of it, the task threads' CPU in the JVM
    gc_s: float = 0.0

    @property
    def wall(self) -> float:
        return self.end - self.start


@dataclass
class StageTime:
    name: str
    wall: float
    jobs: list[JobTime] = field(default_factory=list)
    jobs_wall: float = 0.0  # the union of its jobs' intervals within the stage
    driver_cpu_s: float = 0.0
    bounds: tuple[float, float] = (0.0, 0.0)  # its start and end, epoch seconds


def spark_jobs(spark, since_ms: int) -> list[JobTime]:
    """Every job the session's status store holds submitted at or after `since_ms`, ended, with its stages' task
    metrics summed (a skipped stage ran nothing)."""
    store = spark.sparkContext._jsc.sc().statusStore()
    jobs = store.jobsList(None)
    out = []
    for i in range(jobs.size()):
        job = jobs.apply(i)
        submitted, completed = job.submissionTime(), job.completionTime()
        if submitted.isEmpty() or completed.isEmpty() or submitted.get().getTime() < since_ms:
            continue
        description = job.description()
        name = description.get() if not description.isEmpty() else job.name()
        got = JobTime(int(job.jobId()), str(name).split("\n")[0][:60], submitted.get().getTime() / 1000,
                      completed.get().getTime() / 1000)
        stage_ids = job.stageIds()
        for k in range(stage_ids.size()):
            try:
                stage = store.lastStageAttempt(int(stage_ids.apply(k)))
            except Exception:  # noqa: BLE001 - a stage the job skipped (its shuffle output was there) has no attempt
                continue
            got.tasks += int(stage.numCompleteTasks())
            got.task_s += (int(stage.executorRunTime()) + int(stage.executorDeserializeTime())
                           + int(stage.resultSerializationTime())) / 1000
            got.jvm_cpu_s += (int(stage.executorCpuTime()) + int(stage.executorDeserializeCpuTime())) / 1e9
            got.gc_s += int(stage.jvmGcTime()) / 1000
        out.append(got)
    return sorted(out, key=lambda j: j.start)


def _union(intervals: list[tuple[float, float]]) -> float:
    total, reach = 0.0, float("-inf")
    for a, b in sorted(intervals):
        if b <= reach:
            continue
        total += b - max(a, reach)
        reach = b
    return total


def _share(job: JobTime, start: float, end: float) -> float:
    """The share of `job`'s wall time within [start, end) (a job of no length: all of it if it started there)."""
    if job.wall <= 0:
        return 1.0 if start <= job.start < end else 0.0
    return max(min(job.end, end) - max(job.start, start), 0.0) / job.wall


def account(spark, clock: StageClock, stage_seconds: dict[str, float], *, since_ms: int, wall: float,
            cores: int | None = None) -> dict:
    """The run's wall time (`wall`, measured by the caller from `since_ms`) in parts (see the module's docstring),
    as a dict `format_accounting` prints. The time outside the stages is timed apart: before the first stage's
    line, between stages and after the last."""
    started = since_ms / 1000
    cores = cores or int(spark.sparkContext.defaultParallelism)
    jobs = spark_jobs(spark, since_ms)
    marks = [m for m in clock.marks if m[0] in stage_seconds]
    stages: list[StageTime] = []
    for i, (name, start, cpu_at) in enumerate(marks):
        end = start + stage_seconds[name]
        cpu_end = marks[i + 1][2] if i + 1 < len(marks) else time.process_time()
        stage = StageTime(name, stage_seconds[name], driver_cpu_s=cpu_end - cpu_at)
        stage.jobs = [j for j in jobs if _share(j, start, end) > 0]
        stage.jobs_wall = _union([(max(j.start, start), min(j.end, end)) for j in stage.jobs])
        stage.bounds = (start, end)
        stages.append(stage)
    staged = sum(s.wall for s in stages)
    if marks:
        ends = [start + stage_seconds[name] for name, start, _ in marks]
        outside = (marks[0][1] - started) + sum(max(marks[i + 1][1] - ends[i], 0.0) for i in range(len(marks) - 1)) \
            + max(started + wall - ends[-1], 0.0)
    else:
        outside = wall
    rows = []
    for s in stages:
        # a job that runs on while the driver moves on to the next stage (one started from a thread of its own)
        # counts in each stage for the share of its wall time spent there
        task_s = sum(j.task_s * _share(j, *s.bounds) for j in s.jobs)
        rows.append({
            "stage": s.name, "wall_s": round(s.wall, 2),
            "spark_jobs_s": round(s.jobs_wall, 2),
            "tasks_s": round(task_s / cores, 2),  # core-seconds over the cores: wall seconds of the jobs
            "idle_cores_s": round(max(s.jobs_wall - task_s / cores, 0.0), 2),
            "driver_only_s": round(s.wall - s.jobs_wall, 2),
            "driver_cpu_s": round(s.driver_cpu_s, 2),
            "jobs": [{"job": j.job_id, "name": j.name, "wall_s": round(j.wall, 2), "tasks": j.tasks,
                      "task_core_s": round(j.task_s, 2), "jvm_cpu_core_s": round(j.jvm_cpu_s, 2),
                      "gc_core_s": round(j.gc_s, 2),
                      "python_and_waits_core_s": round(j.task_s - j.jvm_cpu_s - j.gc_s, 2),
                      "idle_core_s": round(max(j.wall * cores - j.task_s, 0.0), 2)} for j in s.jobs],
        })
    parts = sum(r["tasks_s"] + r["idle_cores_s"] + r["driver_only_s"] for r in rows)
    return {"wall_s": round(wall, 2), "cores": cores, "stages": rows,
            "outside_stages_s": round(outside, 2),
            "sum_s": round(parts + outside, 2),
            "sum_of_wall": round((parts + outside) / wall, 3) if wall else None,
            "stages_of_wall": round(staged / wall, 3) if wall else None,
            "totals": {k: round(sum(r[k] for r in rows), 2)
                       for k in ("tasks_s", "idle_cores_s", "driver_only_s", "driver_cpu_s")},
            "jobs_outside_stages": [j.job_id for j in jobs
                                    if not any(j in s.jobs for s in stages)]}


def format_accounting(got: dict) -> str:
    """The accounting as lines: per stage its wall time, its jobs' tasks and idle cores (in wall seconds: core
    seconds over the cores), the driver's part; then the parts' sum against the wall time."""
    lines = [f"wall {got['wall_s']:.1f} s on {got['cores']} cores"]
    for r in got["stages"]:
        lines.append(f"  {r['stage']:<16} {r['wall_s']:6.2f} s = Spark jobs {r['spark_jobs_s']:.2f} "
                     f"(tasks {r['tasks_s']:.2f} + idle cores {r['idle_cores_s']:.2f}) "
                     f"+ driver only {r['driver_only_s']:.2f}   [driver CPU {r['driver_cpu_s']:.2f} s]")
        for j in r["jobs"]:
            lines.append(f"      job {j['job']:>3} {j['name'][:40]:<40} {j['wall_s']:6.2f} s, {j['tasks']:>3} tasks: "
                         f"{j['task_core_s']:.1f} core-s (JVM CPU {j['jvm_cpu_core_s']:.1f}, GC {j['gc_core_s']:.1f}, "
                         f"Python and waits {j['python_and_waits_core_s']:.1f}), idle {j['idle_core_s']:.1f} core-s")
    t = got["totals"]
    lines.append(f"  {'outside stages':<16} {got['outside_stages_s']:6.2f} s")
    lines.append(f"  sum {got['sum_s']:.2f} s = {100 * (got['sum_of_wall'] or 0):.1f} % of the wall time "
                 f"(tasks {t['tasks_s']:.2f}, idle cores {t['idle_cores_s']:.2f}, driver only "
                 f"{t['driver_only_s']:.2f}, outside stages {got['outside_stages_s']:.2f})")
    return "\n".join(lines)
