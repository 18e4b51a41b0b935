"""End-to-end rebuild benchmark: records/s, time per stage, peak memory of the driver and the workers.

    python benchmarks/bench_rebuild.py [--records 10000000] [--groups 10000] [--partitions 50] [--dir /tmp/ol-bench]
                                       [--incremental-percent 1] [--repeat 1]

Generates (or reuses) a sample dump with mixed codecs, measures the decode floor on its bytes (aiokafka's C
record reader, records/s per core), warms the JVM and Spark's Python workers (a first Python job of a session costs
seconds whatever it does: timed as `first_python_job_s`) and runs a small rebuild along the route the timed runs take
(its tasks decode and load the shards), then times a full rebuild in this process.
Each timed run's wall time is accounted for (`accounting.py`): per driver stage, the Spark jobs in it (their tasks'
time, of it the JVM's CPU and garbage collection, and the cores left idle) and the driver's own time, summed back
against the wall time. Each run gives its records/s as a share of the floor on every core (`of_floor`) and the share
of its records the Python loaders read one at a time (`looped_share`).
Memory is the peak resident set of each role, sampled from /proc every 0.2 s: the Python driver, the driver JVM,
and the Python workers (their proportional set sizes summed at each sample, so pages the forked workers share
are counted once; with how many workers were alive then). The driver's figure is the process's peak so far: a
run after an incremental run reports at least that run's peak.

With --incremental-percent P (default 1): "yesterday's dump" is the same log with the last P % of every
partition cut off (at a batch boundary, tests/logtools.py); it is rebuilt first, then `--incremental` runs over
the whole dump (the P % of new records), and the full rebuild of the whole dump (timed first, in a warehouse of
its own) is the baseline.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from accounting import StageClock, account, epoch_ms, format_accounting  # noqa: E402


def _proc_kb(pid: int, file: str, field: str) -> int | None:
    """A `field:` line (kB) of /proc/<pid>/<file>; None when the process is gone or the file has no such line."""
    try:
        for line in Path(f"/proc/{pid}/{file}").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        pass
    return None


def _rss_kb(pid: int) -> int:
    return _proc_kb(pid, "status", "VmRSS") or 0


def _pss_kb(pid: int) -> int:
    """Proportional set size: pages shared by forked Python workers are split between them, not counted per
    worker (summing RSS over a fork tree counts the shared pages once per process)."""
    pss = _proc_kb(pid, "smaps_rollup", "Pss")
    return _rss_kb(pid) if pss is None else pss


def _children(pid: int) -> list[int]:
    """Child pids of `pid` (a process may exit while it is read: it then has none)."""
    out = []
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return out
    for task in tasks:
        try:
            out += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            pass
    return out


class MemorySampler(threading.Thread):
    """Peak memory of each role, sampled every `EVERY_S`. The workers' proportional set size is read only when the
    sum of their resident sets (cheap to read, and never below it) passes its highest so far by `PSS_GROWTH`, that
    is when the workers grow: the kernel walks every page of a process to answer it (~12 ms for 500 MB here), and
    read for every worker at each sample it took a twentieth of the machine's two cores from the tasks being timed.
    The JVM's children are listed every `FIND_EVERY_S`: a JVM lists its children per thread (about a hundred
    files)."""

    EVERY_S, FIND_EVERY_S, PSS_GROWTH = 0.2, 1.0, 1.02

    def __init__(self):
        super().__init__(daemon=True)
        self.peak = {"python_driver": 0, "driver_jvm": 0, "python_workers": 0, "python_workers_count": 0}
        self.stop = threading.Event()
        self.cpu_s = 0.0

    def run(self):
        me = os.getpid()
        rss_high = 0
        jvms: list[int] = []
        daemons: list[int] = []  # the JVM's children: PySpark's worker daemon, which forks the workers
        found_at = float("-inf")
        while not self.stop.is_set():
            now = time.monotonic()
            self.peak["python_driver"] = max(self.peak["python_driver"], _rss_kb(me))
            if now - found_at >= self.FIND_EVERY_S:
                jvms = [c for c in _children(me) if _is_java(c)]
                daemons = [d for j in jvms for d in _children(j)]
                found_at = now
            workers: list[int] = []
            for j in jvms:
                self.peak["driver_jvm"] = max(self.peak["driver_jvm"], _rss_kb(j))
            stack = list(daemons)
            while stack:
                p = stack.pop()
                workers.append(p)
                stack += _children(p)
            rss = sum(_rss_kb(p) for p in workers)
            if workers and rss > rss_high * self.PSS_GROWTH:
                pss = sum(_pss_kb(p) for p in workers)
                if pss > self.peak["python_workers"]:
                    self.peak["python_workers"], self.peak["python_workers_count"] = pss, len(workers)
                rss_high = rss
            time.sleep(self.EVERY_S)
        self.cpu_s = time.thread_time()


def _is_java(pid: int) -> bool:
    try:
        return b"java" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def decode_floor(dump: Path) -> dict:
    """aiokafka's C record reader (`MemoryRecords`, decompressing each batch) over every segment of `dump`,
    touching each record's key, value and offset: the records/s one core can walk these bytes at. Legacy (magic
    0/1) entries are not read by it and are not counted."""
    from aiokafka.record._crecords import MemoryRecords

    records, cpu = 0, 0.0
    for seg in sorted(dump.glob("__consumer_offsets-*/*.log")):
        blob = seg.read_bytes()
        t = time.process_time()
        mr = MemoryRecords(blob)
        while True:
            try:
                batch = mr.next_batch()
            except Exception:  # a legacy entry or a torn tail: the C reader stops there
                break
            if batch is None:
                break
            for r in batch:
                r.key, r.value, r.offset
                records += 1
        cpu += time.process_time() - t
    return {"records": records, "cpu_s": round(cpu, 2), "records_per_s_per_core": round(records / cpu) if cpu else None}


def _passed_through(batches):
    yield from batches


def first_python_job(spark) -> float:
    """Seconds of the session's first job that runs Python (Spark starts its Python workers and its JVM takes the
    Arrow path for the first time: ~3 s on this machine, whatever the job does). A nightly run pays it once; the
    runs timed here come after it."""
    t = time.monotonic()
    spark.range(0, 4, 1, numPartitions=4).mapInArrow(_passed_through, "id long").toArrow()
    return round(time.monotonic() - t, 2)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=10_000_000)
    ap.add_argument("--groups", type=int, default=10_000)
    ap.add_argument("--partitions", type=int, default=50)
    ap.add_argument("--dir", type=Path, default=Path("/tmp/offsetlake-bench"))
    ap.add_argument("--semantics", default="legacy")
    ap.add_argument("--env", default="local")
    ap.add_argument("--incremental-percent", type=float, default=1.0,
                    help="also time --incremental over this %% of new records (0: full run only)")
    ap.add_argument("--repeat", type=int, default=1,
                    help="time the full rebuild this many times, each into a fresh warehouse: this VM's speed drifts "
                         "by 10-20 %% between identical runs, so a figure is the median of several")
    args = ap.parse_args()

    from pipelines.config import load_settings
    from pipelines.rebuild import RebuildRequest, run_rebuild
    from simulator import generate_sample
    from pipelines.session import get_spark

    dump = args.dir / f"dump-{args.records}-{args.groups}-{args.partitions}"
    if not dump.exists():
        t = time.monotonic()
        generate_sample(dump, records=args.records, groups=args.groups, partitions=args.partitions, seed=1)
        print(f"generated {dump} in {time.monotonic() - t:.0f}s", file=sys.stderr)
    warm = args.dir / "warm"
    if not warm.exists():
        generate_sample(warm, records=5000, groups=50, partitions=4, seed=2)
    settings = load_settings(env=args.env)
    spark = get_spark(settings, app_name="offsetlake-bench")
    # fresh warehouses: the full rebuild in one, yesterday's run and the incremental run in another (so the
    # incremental run's history merge meets exactly yesterday's history)
    wh, wh_full = args.dir / "warehouse", args.dir / "warehouse-full"
    for d in (wh, wh_full, args.dir / "warehouse-warm"):
        shutil.rmtree(d, ignore_errors=True)
    result = {"cores": os.cpu_count(), "load_avg_start": [round(x, 2) for x in os.getloadavg()],
              "first_python_job_s": first_python_job(spark)}
    # the small rebuild along the timed runs' route (its tasks decode and load the shards), not decoded in this
    # process as its size alone would have it: the JVM has then run each of that route's jobs once
    run_rebuild(spark, load_settings(env=args.env, overrides={"decode": {"in_process_max_bytes": 0}}),
                RebuildRequest(inputs=(str(warm),), warehouse=str(args.dir / "warehouse-warm"), snapshot_id="warm",
                               semantics=args.semantics))
    result["decode_floor_aiokafka"] = decode_floor(dump)
    print(f"decode floor (aiokafka C reader, same bytes): {json.dumps(result['decode_floor_aiokafka'])}",
          file=sys.stderr)

    floor = result["decode_floor_aiokafka"]["records_per_s_per_core"] or 0
    cores = os.cpu_count() or 1

    def timed(name: str, inputs: Path, snapshot_id: str, incremental: bool = False, wh: Path = wh) -> dict:
        sampler = MemorySampler()
        sampler.start()
        clock = StageClock()
        since_ms = epoch_ms()
        t = time.monotonic()
        summary = run_rebuild(spark, settings, RebuildRequest(inputs=(str(inputs),), warehouse=str(wh),
                                                              snapshot_id=snapshot_id, semantics=args.semantics,
                                                              incremental=incremental), emit=clock)
        wall = time.monotonic() - t
        sampler.stop.set()
        sampler.join()
        accounted = account(spark, clock, summary.stage_seconds, since_ms=since_ms, wall=wall)
        print(f"{name}, accounted:\n{format_accounting(accounted)}", file=sys.stderr)
        out = {
            "records": summary.records_in, "mb": round(summary.bytes_in / 1e6, 1), "wall_s": round(wall, 1),
            "records_per_s": round(summary.records_in / wall),
            # the records/s against the floor's on every core, measured in this sitting
            "of_floor": round(summary.records_in / wall / (floor * cores), 3) if floor else None,
            # the share of the records the Python loaders read one at a time (the rest: column by column)
            "records_looped": summary.records_looped,
            "looped_share": round(summary.records_looped / summary.records_in, 4)
            if summary.records_looped is not None and summary.records_in else None,
            "accounting": accounted,
            # records per CPU-second of decoding, to hold against the floor's records/s/core: what the tasks
            # measured when they decode and load in one task, else the decode stage on every core
            "decode_records_per_s_per_core": round(
                summary.records_in / summary.task_cpu_seconds["decode"] if summary.task_cpu_seconds.get("decode")
                else summary.records_in / (summary.stage_seconds.get("decode") or 1) / (os.cpu_count() or 1)),
            "task_cpu_seconds": summary.task_cpu_seconds,
            "stage_seconds": {k: round(v, 1) for k, v in summary.stage_seconds.items()},
            "run_first_python_job_s": summary.first_python_job_seconds,
            "peak_rss_mb": {k: round(v / 1024) for k, v in sampler.peak.items() if not k.endswith("_count")},
            "python_workers_at_peak": sampler.peak["python_workers_count"],
            "sampler_cpu_s": round(sampler.cpu_s, 2),  # the memory sampler's own CPU: taken from the run's cores
            "load_avg_end": [round(x, 2) for x in os.getloadavg()],
        }
        if incremental:
            out["incremental"] = summary.incremental
        result[name] = out
        print(f"{name}: {json.dumps(out)}", file=sys.stderr)
        return out

    def repeated(full: dict) -> None:
        """The full rebuild timed `--repeat` times in all: each run's `of_floor`, their median, and the floor
        measured again after them (the drift the runs met)."""
        runs = [full]
        for k in range(2, args.repeat + 1):
            shutil.rmtree(wh_full, ignore_errors=True)
            runs.append(timed(f"full_{k}", dump, "full", wh=wh_full))
        if args.repeat > 1:
            result["full_of_floor_runs"] = [r["of_floor"] for r in runs]
            result["full_of_floor_median"] = statistics.median(r["of_floor"] for r in runs if r["of_floor"])
            result["decode_floor_aiokafka_after"] = decode_floor(dump)

    if args.incremental_percent:
        sys.path.insert(0, str(ROOT / "tests"))
        from logtools import cut_log_dir

        base = args.dir / f"{dump.name}-minus-{args.incremental_percent}pct"
        if not base.exists():
            cut_log_dir(dump, base, fraction=1 - args.incremental_percent / 100)
        full = timed("full", dump, "full", wh=wh_full)
        repeated(full)
        timed("previous_full", base, "previous")
        inc = timed("incremental", dump, "incremental", incremental=True)
        state = wh_full / "_state" / "full"
        result["state_mb"] = round(sum(f.stat().st_size for f in state.rglob("*") if f.is_file()) / 1e6, 1)
        result["incremental_fraction_of_full"] = round(inc["wall_s"] / full["wall_s"], 3)
    else:
        repeated(timed("full", dump, "full", wh=wh_full))
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
