"""Benchmark: a cold `offsetlake rebuild` against the floor of any cold Spark job, in one sitting.

    .venv/bin/python benchmarks/bench_cold.py [--input ../shared/brokerdata/classic-basic/data] [--runs 3]
                                              [--records 300000 2000000 3000000] [--cold-runs 3]

Each run is a new process, as a nightly `spark-submit` or an on-call engineer's CLI is: the floor is a bare session
start plus one tiny job (`spark.range(1).count()`, with the run's settings: the same JVM options and class archive),
the rebuild is the CLI on the input into a fresh warehouse. The two alternate; the medians and their ratio are
printed as one JSON line.

With --records, each size is a generated dump (the bench_rebuild generator, reused from --dir) rebuilt both ways,
beside aiokafka's C reader over the same bytes in the same run: cold (the CLI in a new process, `--cold-runs` times,
the sizes taking turns so a drift of this VM's speed falls on each alike; the median wall) and warm
(`bench_rebuild.py --incremental-percent 0`: a session that has run a small rebuild first). One JSON line per size,
then the table: records/s per core of each, and its share of the floor; the warm run's decoding in its tasks
(records per CPU-second of decoding) and its share of the floor; the warm session's first Python job. Last, the
marginal rate from the smallest size to each larger one: the records more over the seconds more of their median
cold walls, and of each turn's pair (one cold run swings by a second or two here, a marginal of two single runs by
half).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_rebuild import decode_floor  # noqa: E402
from simulator import generate_sample  # noqa: E402

FLOOR = ("from pipelines.config import load_settings; from pipelines.session import get_spark; "
         "get_spark(load_settings(env='local'), app_name='floor').range(1).count()")


def _timed(cmd: list[str]) -> float:
    started = time.monotonic()
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    if r.returncode != 0:
        sys.exit(f"{cmd[:3]}… exited {r.returncode}: {r.stderr.strip().splitlines()[-1:]}")
    return time.monotonic() - started


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--input", type=Path, default=ROOT.parent / "shared" / "brokerdata" / "classic-basic" / "data")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--records", type=int, nargs="*", default=[])
    ap.add_argument("--dir", type=Path, default=Path("/tmp/offsetlake-bench"))
    ap.add_argument("--cold-runs", type=int, default=3, help="cold rebuilds of each --records size, taking turns")
    args = ap.parse_args()
    if not args.input.exists():
        sys.exit(f"no input at {args.input}")
    python = sys.executable
    floor, rebuild = [], []
    work = Path(tempfile.mkdtemp(prefix="offsetlake-bench-cold-"))
    try:
        for i in range(args.runs):
            floor.append(_timed([python, "-c", FLOOR]))
            rebuild.append(_timed([python, "-m", "jobs.cli", "rebuild", "--input", str(args.input), "--warehouse",
                                   str(work / f"wh{i}"), "--snapshot-id", "cold", "--quiet"]))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    f, r = statistics.median(floor), statistics.median(rebuild)
    from pipelines import class_archive

    print(json.dumps({"input": str(args.input), "runs": args.runs, "floor_s": [round(x, 2) for x in floor],
                      "rebuild_s": [round(x, 2) for x in rebuild], "floor_median_s": round(f, 2),
                      "rebuild_median_s": round(r, 2), "rebuild_over_floor": round(r / f, 2),
                      "class_archive": bool(class_archive.java_options())}))
    dumps = {records: _dump_of(records, args.dir) for records in args.records}
    floors = {records: decode_floor(dump) for records, dump in dumps.items()}
    colds: dict[int, list[dict]] = {records: [] for records in dumps}
    for _ in range(max(1, args.cold_runs)):
        for records, dump in dumps.items():
            colds[records].append(cold_rebuild_of(dump))
    rows = []
    for records, runs in colds.items():
        row = _cold_row(dumps[records], runs, floors[records])
        row.update(warm_rebuild_of(records, args.dir, row["floor_records_per_s_per_core"]))
        print(json.dumps(row))
        rows.append(row)
    if rows:
        print(_table(rows))
    for records in sorted(colds)[1:]:
        print(json.dumps(_marginal(colds[min(colds)], colds[records])))


def warm_rebuild_of(records: int, root: Path, floor: float) -> dict:
    """The same dump's full rebuild in a warm session (`bench_rebuild.py`, its own process), against `floor`."""
    groups = max(1, records // 1000)
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_rebuild.py"), "--records", str(records),
                        "--groups", str(groups), "--partitions", "50", "--incremental-percent", "0", "--dir",
                        str(root)], cwd=ROOT, capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    if r.returncode != 0:
        sys.exit(f"warm rebuild of {records} records exited {r.returncode}: {r.stderr.strip().splitlines()[-1:]}")
    at = 0 if r.stdout.startswith("{\n") else r.stdout.rfind("\n{\n") + 1  # its result, printed last
    result = json.loads(r.stdout[at:])
    full = result["full"]
    per_core = full["records"] / full["wall_s"] / (os.cpu_count() or 1)
    decode = full["decode_records_per_s_per_core"]  # records per CPU-second of decoding in the tasks
    return {"warm_wall_s": full["wall_s"], "warm_records_per_s_per_core": round(per_core),
            "warm_of_floor": round(per_core / floor, 3) if floor else None,
            "warm_stage_seconds": full["stage_seconds"], "warm_task_cpu_seconds": full["task_cpu_seconds"],
            "decode_records_per_cpu_s": decode, "decode_of_floor": round(decode / floor, 3) if floor else None,
            "first_python_job_s": result["first_python_job_s"]}


def _table(rows: list[dict]) -> str:
    head = ("| records | floor (records/CPU-s) | cold wall | cold records/s/core | cold / floor | warm wall "
            "| warm records/s/core | warm / floor | decode in the tasks (records/CPU-s) | decode / floor "
            "| first Python job |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        lines.append(f"| {r['records']:,} | {r['floor_records_per_s_per_core']:,} | {r['cold_wall_s']} s "
                     f"| {r['records_per_s_per_core']:,} | {r['of_floor']} | {r['warm_wall_s']} s "
                     f"| {r['warm_records_per_s_per_core']:,} | {r['warm_of_floor']} "
                     f"| {r['decode_records_per_cpu_s']:,} | {r['decode_of_floor']} | {r['first_python_job_s']} s |")
    return "\n".join(lines)


def _dump_of(records: int, root: Path) -> Path:
    """The generated dump of `records` records (1,000 records a group, 50 partitions), made if missing."""
    groups = max(1, records // 1000)
    dump = root / f"dump-{records}-{groups}-50"
    if not dump.exists():
        generate_sample(dump, records=records, groups=groups, partitions=50, seed=1)
    return dump


def cold_rebuild_of(dump: Path) -> dict:
    """A cold CLI rebuild of `dump` into a fresh warehouse: its wall time and its run summary."""
    work = Path(tempfile.mkdtemp(prefix="offsetlake-bench-cold-"))
    try:
        started = time.monotonic()
        r = subprocess.run([sys.executable, "-m", "jobs.cli", "rebuild", "--input", str(dump), "--warehouse",
                            str(work / "wh"), "--snapshot-id", "cold", "--quiet", "--json"], cwd=ROOT,
                           capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
        wall = time.monotonic() - started
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if r.returncode != 0:
        sys.exit(f"cold rebuild of {dump} exited {r.returncode}: {r.stderr.strip().splitlines()[-1:]}")
    return {"wall_s": wall, "summary": json.loads(r.stdout.strip().splitlines()[-1])}


def _cold_row(dump: Path, runs: list[dict], floor: dict) -> dict:
    """A size's cold runs against aiokafka's floor over its bytes: the median run's figures, every run's wall."""
    walls = [run["wall_s"] for run in runs]
    median = sorted(runs, key=lambda run: run["wall_s"])[len(runs) // 2]
    summary, wall = median["summary"], statistics.median(walls)
    per_core = summary["records_in"] / wall / (os.cpu_count() or 1)
    base = floor["records_per_s_per_core"]
    return {"dump": str(dump), "records": summary["records_in"], "cold_wall_s": round(wall, 1),
            "cold_walls_s": [round(w, 1) for w in walls], "records_per_s_per_core": round(per_core),
            "floor_records_per_s_per_core": base, "of_floor": round(per_core / base, 3) if base else None,
            "stage_seconds": {k: round(v, 1) for k, v in median["summary"]["stage_seconds"].items()},
            "cold_first_python_job_s": summary.get("first_python_job_seconds")}


def _marginal(small: list[dict], large: list[dict]) -> dict:
    """Records per second of cold wall between two sizes: of their medians, and of each turn's pair."""
    records = large[0]["summary"]["records_in"] - small[0]["summary"]["records_in"]

    def rate(seconds: float) -> float | None:
        return round(records / seconds) if seconds > 0 else None

    walls_s, walls_l = [r["wall_s"] for r in small], [r["wall_s"] for r in large]
    return {"from_records": small[0]["summary"]["records_in"], "to_records": large[0]["summary"]["records_in"],
            "marginal_records_per_s": rate(statistics.median(walls_l) - statistics.median(walls_s)),
            "marginal_records_per_s_of_turns": [rate(b - a) for a, b in zip(walls_s, walls_l)]}


if __name__ == "__main__":
    main()
