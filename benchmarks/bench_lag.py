"""What the data topics' bounds and timestamps (lag in time) add to a rebuild.

    python benchmarks/bench_lag.py [--records 10000000] [--groups 10000] [--partitions 50]
                                   [--data-partitions 1000] [--data-segments 10] [--data-batches 64]
                                   [--rounds 2] [--dir /tmp/offsetlake-lag-bench]

Generates (or reuses) the bench's sample dump (`offsetlake sample` with the same arguments as `bench_rebuild.py`)
with the data topics' own partitions beside it: `--data-partitions` of them, `--data-segments` segments each of
`--data-batches` batches, with the broker's indexes. The same offsets topic without them is a second input (its
`__consumer_offsets-N` dirs and high watermarks linked, no data-topic dir): the rebuild then has end offsets but
no bounds or timestamps to read. Both are rebuilt `--rounds` times in this process, alternating (which goes first
alternates too), warm (the dump's files read once into the page cache, a small rebuild first), each into an empty
warehouse, and the line says what the data topics added: the wall time of each and their ratio (medians), the
driver's CPU seconds of each, the run's `lag` stage (the lookups, after the replay) and the bounds read alongside
the replay (timed apart, in this process, as `data_logs` reads them), with the records looked up.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _without_data_topics(dump: Path, out: Path) -> Path:
    """The same offsets topic and high watermarks, linked, and none of the data topics' partitions."""
    if out.exists():
        return out
    out.mkdir(parents=True)
    for p in dump.iterdir():
        if p.name.startswith("__consumer_offsets-") or p.name == "replication-offset-checkpoint":
            os.symlink(p, out / p.name)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=10_000_000)
    ap.add_argument("--groups", type=int, default=10_000)
    ap.add_argument("--partitions", type=int, default=50)
    ap.add_argument("--data-partitions", type=int, default=1000)
    ap.add_argument("--data-segments", type=int, default=10)
    ap.add_argument("--data-batches", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--dir", type=Path, default=Path("/tmp/offsetlake-lag-bench"))
    ap.add_argument("--env", default="local")
    args = ap.parse_args()

    from pipelines.config import load_settings
    from pipelines.decoding.log_end_offsets import data_logs
    from pipelines.rebuild import RebuildRequest, run_rebuild
    from pipelines.session import get_spark
    from simulator import generate_sample

    name = (f"dump-{args.records}-{args.groups}-{args.partitions}-data-{args.data_partitions}x{args.data_segments}"
            f"x{args.data_batches}")
    dump = args.dir / name
    if not dump.exists():
        t = time.monotonic()
        stats = generate_sample(dump, records=args.records, groups=args.groups, partitions=args.partitions, seed=1,
                                data_segments=args.data_segments, data_batches=args.data_batches,
                                data_partitions=args.data_partitions)
        print(f"generated {dump} in {time.monotonic() - t:.0f}s: {stats.data_topics}", file=sys.stderr)
    bare = _without_data_topics(dump, args.dir / (name + "-offsets-only"))
    warm = args.dir / "warm"
    if not warm.exists():
        generate_sample(warm, records=5000, groups=50, partitions=4, seed=2, data_segments=2)

    # the bounds alone, as the run's read-ahead reads them beside the replay
    t = time.monotonic()
    found = data_logs([str(dump)])
    bounds_s = time.monotonic() - t
    segments = sum(len(log.segments) for log in found.logs.values())
    found.close()

    for f in dump.rglob("*"):  # the page cache holds the dump for every run alike
        if f.is_file():
            with open(f, "rb") as fh:
                while fh.read(1 << 22):
                    pass
    settings = load_settings(env=args.env)
    spark = get_spark(settings, app_name="offsetlake-lag-bench")
    for d in ("warehouse-warm", "warehouse-data", "warehouse-bare"):
        shutil.rmtree(args.dir / d, ignore_errors=True)
    run_rebuild(spark, settings, RebuildRequest(inputs=(str(warm),), warehouse=str(args.dir / "warehouse-warm"),
                                                snapshot_id="warm"))
    walls: dict[str, list[float]] = {"with": [], "without": []}
    cpu: dict[str, list[float]] = {"with": [], "without": []}
    lag_stage: list[float] = []
    summary = None
    for i in range(args.rounds):
        pair = (("without", bare, "warehouse-bare"), ("with", dump, "warehouse-data"))
        for kind, inputs, wh in (pair if i % 2 == 0 else pair[::-1]):
            shutil.rmtree(args.dir / wh, ignore_errors=True)  # each into an empty warehouse: no history to merge
            t, c = time.monotonic(), time.process_time()
            s = run_rebuild(spark, settings, RebuildRequest(inputs=(str(inputs),), warehouse=str(args.dir / wh),
                                                            snapshot_id=f"r{i}"))
            walls[kind].append(time.monotonic() - t)
            cpu[kind].append(time.process_time() - c)
            if kind == "with":
                lag_stage.append(s.stage_seconds.get("lag", 0.0))
                summary = s
            print(f"round {i} {kind} data topics: {walls[kind][-1]:.1f}s, driver CPU {cpu[kind][-1]:.1f}s "
                  f"(stages {json.dumps({k: round(v, 1) for k, v in s.stage_seconds.items()})})", file=sys.stderr)
    med = {k: statistics.median(v) for k, v in walls.items()}
    result = {
        "records": summary.records_in, "load_avg": [round(x, 2) for x in os.getloadavg()],
        "data_partitions": summary.lag.get("partitions_read"), "data_segments": segments,
        "offsets": summary.lag.get("offsets"), "offsets_timed": summary.lag.get("offsets_timed"),
        "records_looked_up": summary.lag.get("records_read"), "notes": summary.lag.get("notes"),
        "wall_s_without": [round(x, 1) for x in walls["without"]], "wall_s_with": [round(x, 1) for x in walls["with"]],
        "wall_ratio_median": round(med["with"] / med["without"], 3),
        "driver_cpu_s_without": [round(x, 1) for x in cpu["without"]],
        "driver_cpu_s_with": [round(x, 1) for x in cpu["with"]],
        "lag_stage_s": [round(x, 2) for x in lag_stage], "bounds_s": round(bounds_s, 2),
        "bounds_and_lag_share_of_rebuild": round((bounds_s + statistics.median(lag_stage)) / med["without"], 3),
    }
    print(f"lag in time: {result['data_partitions']} data partitions x {args.data_segments} segments, "
          f"{result['records_looked_up']:,} records looked up for {result['offsets_timed']:,} of "
          f"{result['offsets']:,} offsets: rebuild {med['without']:.1f}s without the data topics, {med['with']:.1f}s "
          f"with (x{result['wall_ratio_median']}), driver CPU {statistics.median(cpu['without']):.1f}s and "
          f"{statistics.median(cpu['with']):.1f}s; bounds {bounds_s:.1f}s beside the replay + lag stage "
          f"{statistics.median(lag_stage):.1f}s = {100 * result['bounds_and_lag_share_of_rebuild']:.1f}% of the "
          "rebuild", file=sys.stderr)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
