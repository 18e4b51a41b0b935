"""A hot offsets partition: the peak memory of the Python worker that loads it, and the snapshot it gives.

    python benchmarks/bench_skew.py [--records 3000000] [--groups 3000] [--hot-share 1.0] [--shape mixed]
                                    [--dir /tmp/offsetlake-skew] [--compare-whole] [--compare-unsplit]
                                    [--compare-balanced [--pairs N]] [--same-as WAREHOUSE]

Generates (or reuses) a sample dump whose records are `--hot-share` in one offsets partition (`offsetlake sample
--hot-share`), rebuilds it in this process on Spark (the segment shards: one task per offsets partition, each
streaming its partition in `decode.load_buffer_bytes` windows), and reports the peak resident set of the largest
single Python worker (sampled from /proc every 0.1 s: RSS, the figure a container limit counts; a trace of it on
stderr beside the progress lines tells which stage holds it), the driver's, and the records/s. `--compare-whole`
rebuilds it again with each partition in one window (a task's memory before streaming) and compares: with it, or
with `--same-as W` (another version's rebuild of the same dump, same snapshot id), every table of the snapshot is
compared row for row, the snapshot id aside. `--compare-unsplit` rebuilds it again with the hot partition read by one task
(`decode.split_bytes` 0) and compares the snapshots; `--compare-balanced` rebuilds a dump of the same generator and
size with no hot partition (the groups spread over every offsets partition) and gives the records/s ratio, each
dump's second rebuild in the session against the other's; `--pairs N` rebuilds the two N times, alternating, and
gives each pair's ratio and their median. Each run's wall time is accounted for on stderr and in
its figures (`accounting.py`): a hot run's range tasks and its split loads are Spark jobs of their own.
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
from bench_rebuild import _children, _is_java, _rss_kb  # noqa: E402


class WorkerPeak(threading.Thread):
    """The peak RSS of this process and of any single Python worker under its JVM."""

    def __init__(self):
        super().__init__(daemon=True)
        self.peak = {"python_driver": 0, "largest_python_worker": 0}
        self.stop = threading.Event()

    def run(self):
        me = os.getpid()
        t0, last = time.monotonic(), 0
        while not self.stop.is_set():
            now_kb = 0
            self.peak["python_driver"] = max(self.peak["python_driver"], _rss_kb(me))
            for child in filter(_is_java, _children(me)):
                stack = _children(child)
                while stack:
                    p = stack.pop()
                    rss = _rss_kb(p)
                    now_kb = max(now_kb, rss)
                    self.peak["largest_python_worker"] = max(self.peak["largest_python_worker"], rss)
                    stack += _children(p)
            if abs(now_kb - last) > 100 * 1024:  # a trace on stderr, to tell which stage holds the peak
                print(f"{time.monotonic() - t0:7.1f}s largest python worker {now_kb // 1024} MB", file=sys.stderr)
                last = now_kb
            time.sleep(0.1)


def snapshot_tables(warehouse: Path, snapshot_id: str) -> dict:
    """Every table of a snapshot as sorted rows without the snapshot id (Arrow, read with delta-rs)."""
    import pyarrow.compute as pc
    from deltalake import DeltaTable

    from schemas.tables import TABLES

    out = {}
    for name in TABLES:
        if name == "runs" or not (warehouse / name / "_delta_log").exists():
            continue
        t = DeltaTable(str(warehouse / name)).to_pyarrow_table()
        if "snapshot_id" in t.column_names:
            t = t.filter(pc.equal(t.column("snapshot_id"), snapshot_id)).drop_columns(["snapshot_id"])
        sortable = [c for c in t.column_names if not (t.schema.field(c).type.num_fields
                                                      or str(t.schema.field(c).type).startswith(("list", "large_list",
                                                                                                 "map")))]
        out[name] = t.sort_by([(c, "ascending") for c in sortable]) if t.num_rows else t
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=3_000_000)
    ap.add_argument("--groups", type=int, default=3_000)
    ap.add_argument("--partitions", type=int, default=50)
    ap.add_argument("--hot-share", type=float, default=1.0)
    ap.add_argument("--shape", default="mixed")
    ap.add_argument("--dir", type=Path, default=Path("/tmp/offsetlake-skew"))
    ap.add_argument("--env", default="local")
    ap.add_argument("--same-as", type=Path, help="a warehouse holding the same dump's snapshot to compare with")
    ap.add_argument("--snapshot-id", default="skew")
    ap.add_argument("--split-bytes", type=int, default=None,
                    help="decode.split_bytes of the hot dump's run (default: frames.ranges.SPLIT_BYTES, 64 MiB)")
    ap.add_argument("--compare-unsplit", action="store_true",
                    help="also rebuild with the hot partition in one task (decode.split_bytes 0) and compare")
    ap.add_argument("--compare-balanced", action="store_true",
                    help="also rebuild the same generator's dump with no hot partition: the records/s ratio")
    ap.add_argument("--pairs", type=int, default=1,
                    help="with --compare-balanced: the hot and the balanced rebuild this many times, alternating, "
                         "each pair's ratio and their median (this VM's speed swings within minutes)")
    ap.add_argument("--compare-whole", action="store_true",
                    help="also rebuild with each partition in one window (the memory of a task before streaming) "
                         "and compare the two snapshots")
    args = ap.parse_args()

    from pipelines.config import load_settings
    from pipelines.rebuild import RebuildRequest, run_rebuild
    from pipelines.session import get_spark

    def generated(hot_share: float | None) -> Path:
        dump = args.dir / f"dump-{args.records}-{args.groups}-{args.partitions}-hot{hot_share}-{args.shape}"
        if not dump.exists():
            from simulator import generate_sample

            t = time.monotonic()
            stats = generate_sample(dump, records=args.records, groups=args.groups, partitions=args.partitions,
                                    seed=1, hot_share=hot_share, shape=args.shape)
            print(f"generated {dump} in {time.monotonic() - t:.0f}s: {stats.summary()}", file=sys.stderr)
        return dump

    dump = generated(args.hot_share)
    settings = load_settings(env=args.env)
    spark = get_spark(settings, app_name="offsetlake-bench-skew")
    result = {"dump": str(dump), "cores": os.cpu_count()}

    def timed(name: str, wh: Path, load_buffer_bytes: int | None = None, split_bytes: int | None = None,
              source: Path = dump) -> None:
        from dataclasses import replace

        decode = dict(settings.section("decode"))
        if load_buffer_bytes is not None:
            decode["load_buffer_bytes"] = load_buffer_bytes
        if split_bytes is not None:
            decode["split_bytes"] = split_bytes
        run_settings = replace(settings, raw={**settings.raw, "decode": decode})
        shutil.rmtree(wh, ignore_errors=True)
        sampler = WorkerPeak()
        sampler.start()
        t = time.monotonic()
        clock = StageClock(echo=lambda line: print(f"{time.monotonic() - t:7.1f}s {line}", file=sys.stderr))
        since_ms = epoch_ms()
        summary = run_rebuild(spark, run_settings, RebuildRequest(inputs=(str(source),), warehouse=str(wh),
                                                                  snapshot_id=args.snapshot_id), emit=clock)
        wall = time.monotonic() - t
        sampler.stop.set()
        sampler.join()
        accounted = account(spark, clock, summary.stage_seconds, since_ms=since_ms, wall=wall)
        print(f"{name}, accounted:\n{format_accounting(accounted)}", file=sys.stderr)
        result[name] = {
            "load_buffer_bytes": run_settings.section("decode").get("load_buffer_bytes"),
            "split_bytes": run_settings.section("decode").get("split_bytes"),
            "records": summary.records_in, "mb": round(summary.bytes_in / 1e6, 1), "wall_s": round(wall, 1),
            "records_per_s": round(summary.records_in / wall), "status": summary.status,
            "task_cpu_seconds": summary.task_cpu_seconds,
            "peak_rss_mb": {k: round(v / 1024) for k, v in sampler.peak.items()},
            "accounting": accounted,
        }
        print(f"{name}: {json.dumps(result[name])}", file=sys.stderr)

    wh = args.dir / "warehouse"
    if args.compare_balanced:  # the session's first run pays the Python workers' start: both compared warm
        timed("balanced_first_of_session", args.dir / "warehouse-balanced", source=generated(None))
    from pipelines.frames.ranges import SPLIT_BYTES

    split = SPLIT_BYTES if args.split_bytes is None else args.split_bytes
    if args.compare_balanced:
        # either dump's first rebuild in a session is markedly slower than its next: both are compared on their
        # second
        timed("streamed_first_of_dump", wh, split_bytes=split)
    timed("streamed", wh, split_bytes=split)
    pairs = [("streamed", "balanced")] + [(f"streamed_{i}", f"balanced_{i}") for i in range(2, args.pairs + 1)]
    if args.compare_balanced:
        for hot, balanced in pairs:
            if hot != "streamed":
                timed(hot, wh, split_bytes=split)
            timed(balanced, args.dir / "warehouse-balanced", source=generated(None))
    if args.compare_whole:
        timed("one_window_per_partition", args.dir / "warehouse-whole", 1 << 40, 0)
        args.same_as = args.same_as or args.dir / "warehouse-whole"
    if args.compare_unsplit:
        timed("one_task_per_partition", args.dir / "warehouse-unsplit", split_bytes=0)
        args.same_as = args.same_as or args.dir / "warehouse-unsplit"
    if args.compare_balanced:
        ratios = [result[hot]["records_per_s"] / result[balanced]["records_per_s"] for hot, balanced in pairs]
        result["hot_vs_balanced_records_per_s"] = round(ratios[0], 2)
        if len(ratios) > 1:
            result["hot_vs_balanced_pairs"] = [round(r, 3) for r in ratios]
            result["hot_vs_balanced_median"] = round(statistics.median(ratios), 3)
    if args.same_as is not None:
        mine, theirs = snapshot_tables(wh, args.snapshot_id), snapshot_tables(args.same_as, args.snapshot_id)
        result["same_snapshot_as"] = str(args.same_as)
        result["differing_tables"] = sorted(n for n in set(mine) | set(theirs)
                                            if n not in mine or n not in theirs or not mine[n].equals(theirs[n]))
        result["rows_compared"] = {n: t.num_rows for n, t in mine.items()}
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
