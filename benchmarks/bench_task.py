"""One shard task in this process, without Spark: its CPU per record, and where it goes.

    .venv/bin/python benchmarks/bench_task.py [--dir /tmp/offsetlake-bench/dump-3000000-3000-50] [--partitions 6]
                                              [--runs 3] [--profile] [--split]

Runs the first job's executor function (`frames.segment_shards.decode_and_load_task`) over the first `--partitions`
offsets partitions of a dump, as one task of a full run does: streamed in windows, its history written into a
temporary directory with the default settings' suspect filter. No JVM and no other process share the cores, but
this VM's speed still drifts (runs of one version spread by up to 20 %): compare versions alternating, by the best
of several runs, or by a part's own time. A missing dump is generated as `bench_rebuild.py` generates it
(`--records`, `--groups`, 50 partitions). Prints the CPU-seconds of each run and per record; `--profile`: one more
run under cProfile, its CPU split into the task's parts (inclusive, so a part's children are in it) and the
functions that took the most.

`--split`: the tasks of a hot partition instead (`frames.ranges`): the first offsets partition of `--dir` (default:
`bench_skew.py`'s 3 M hot dump) cut in ranges as a 2-core run cuts it, each range's task, then each bucket's split
load (`split_load_task`) of the rows the ranges handed on, one after the other in this process; the CPU of the
ranges and of the split loads apart.
"""
from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

#: The task's parts, each a function of the engine: (label, file suffix, function name).
PARTS = (
    ("decode", "frames/decode.py", "decode_items"),
    ("load: offsets", "coordinator/offset_metadata.py", "replay_offsets"),
    ("load: group records to Python", "coordinator/decoded.py", "group_rows"),
    ("load: group records replayed", "coordinator/loader.py", "replay_group_records"),
    ("load: history rows", "coordinator/streamed.py", "_settled"),
    ("group history tables", "frames/segment_shards.py", "_group_events"),
    ("history suspects and writes", "frames/segment_shards.py", "_history"),
    ("history files closed", "frames/segment_shards.py", "_closed"),
    ("tally", "frames/tally.py", "add"),
    ("tally (end)", "frames/tally.py", "result"),
    ("split: a range's kept rows", "coordinator/reduction.py", "split_mask"),
    ("split: rows handed on", "coordinator/streamed.py", "_pass_on"),
    ("split: rows handed on (end)", "coordinator/streamed.py", "passed_on"),
    ("split: buckets", "coordinator/streamed.py", "by_group"),
    ("split: reduced across ranges", "coordinator/streamed.py", "across_ranges"),
    ("split: loads", "frames/segment_shards.py", "_loaded_split"),
)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", type=Path, default=Path("/tmp/offsetlake-bench/dump-3000000-3000-50"))
    ap.add_argument("--records", type=int, default=3_000_000, help="of a dump generated for a missing --dir")
    ap.add_argument("--groups", type=int, default=3_000)
    ap.add_argument("--partitions", type=int, default=6, help="the first this many offsets partitions")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--split", action="store_true", help="a hot partition's range tasks and split loads")
    args = ap.parse_args()
    if args.split and args.dir == ap.get_default("dir"):
        args.dir = Path(f"/tmp/offsetlake-skew/dump-{args.records}-{args.groups}-50-hot1.0-mixed")

    import pyarrow as pa
    import pyarrow.compute as pc

    from pipelines.config import load_settings
    from pipelines.coordinator.options import ReplayOptions
    from pipelines.frames.decode import plan_inputs, work_batches
    from pipelines.frames.envelope import DecodedTally, decode
    from pipelines.frames.envelope import KeptRowsFile
    from pipelines.frames.ranges import SPLIT_BYTES
    from pipelines.frames.segment_shards import (ShardLoad, WorkUnit, counted_items, decode_and_load_task,
                                                 split_load_task, split_loads, work_units)
    from pipelines.io.blobs import from_blob
    from pipelines.io.scratch import Scratch
    from pipelines.io.warehouse import HistoryStage
    from pipelines.validation.runner import UNKNOWN_CLOCK_MS, history_check
    from simulator import generate_sample

    if not args.dir.exists():
        generate_sample(args.dir, records=args.records, groups=args.groups, partitions=50, seed=1,
                        hot_share=1.0 if args.split else None)
    plan = plan_inputs([args.dir])
    items = pa.Table.from_batches(work_batches(plan))
    parts = sorted(set(items.column("offsets_partition").to_pylist()))[:1 if args.split else args.partitions]
    units = [WorkUnit(p, items.filter(pc.equal(items.column("offsets_partition"), p))) for p in parts]
    if args.split:  # as a 2-core run cuts it: two ranges or a multiple, a bucket per core
        cut = work_units(units[0].items, {parts[0]: list(range(units[0].items.num_rows))}, SPLIT_BYTES, 2)
        units = [cut[k] for k in sorted(cut)]
    options = ReplayOptions(snapshot_id="bench", num_partitions=max(50, parts[-1] + 1))
    check = history_check(load_settings(), as_of_ms=UNKNOWN_CLOCK_MS, num_partitions=options.num_partitions)

    def run() -> int:
        """The task run once; the records it read (its tallies' rows)."""
        out = Path(tempfile.mkdtemp(prefix="offsetlake-bench-task-"))
        try:
            stage = HistoryStage(out.as_uri(), "settled", "pending-settled", options.snapshot_id)
            load = ShardLoad(options=options, scratch=Scratch(str(out / "scratch")), split_by=check, stage=stage,
                             split_bytes=SPLIT_BYTES, buckets=2 if args.split else 1)
            task = decode_and_load_task([units], policy=plan.policy, load=load,
                                        counted=counted_items(pa.concat_tables([u.items for u in units]), [units]))
            envelope = pa.Table.from_batches(list(task(iter([pa.record_batch([pa.array([0])], names=["id"])]))))
            payloads = list(decode(envelope))
            ranged = time.process_time()
            tasks = split_loads([p for p in payloads if isinstance(p, KeptRowsFile)], load.split_buckets, 2)
            for i in range(len(tasks)):  # one after the other, as the bench runs in this process
                for _ in split_load_task(load, tasks)(iter([pa.record_batch([pa.array([i])], names=["id"])])):
                    pass
            split_cpu.append(time.process_time() - ranged)
        finally:
            shutil.rmtree(out, ignore_errors=True)
        return sum(pc.sum(from_blob(p.tally).column("n")).as_py() or 0
                   for p in payloads if isinstance(p, DecodedTally))

    split_cpu: list[float] = []
    records = run()  # and the imports, the first allocations
    split_cpu.clear()
    cpu = []
    for _ in range(args.runs):
        started = time.process_time()
        run()
        cpu.append(time.process_time() - started)
    print(json.dumps({"dump": str(args.dir), "offsets_partitions": parts, "records": records,
                      "cpu_s": [round(c, 3) for c in cpu],
                      "us_per_record": [round(1e6 * c / max(records, 1), 3) for c in cpu],
                      **({"split_load_cpu_s": [round(c, 3) for c in split_cpu]} if args.split else {})}))
    if args.profile:
        profile = cProfile.Profile()
        profile.enable()
        run()
        profile.disable()
        stats = pstats.Stats(profile)
        total = max(v[3] for v in stats.stats.values())
        print(f"under cProfile: {total:.3f} s")
        for label, suffix, name in PARTS:
            spent = sum(v[3] for (path, _, func), v in stats.stats.items() if func == name and path.endswith(suffix))
            print(f"  {label:32s} {spent:7.3f} s  {100 * spent / total:5.1f} %")
        stats.sort_stats("tottime").print_stats(15)


if __name__ == "__main__":
    main()
