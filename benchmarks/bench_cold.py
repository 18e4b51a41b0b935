"""Benchmark: a cold `offsetlake rebuild` against the floor of any cold Spark job, in one sitting.

    .venv/bin/python benchmarks/bench_cold.py [--input ../shared/brokerdata/classic-basic/data] [--runs 3]

Each run is a new process, as a nightly `spark-submit` or an on-call engineer's CLI is: the floor is a bare session
start plus one tiny job (`spark.range(1).count()`, with the run's settings: the same JVM options and class archive),
the rebuild is the CLI on the input into a fresh warehouse. The two alternate; the medians and their ratio are
printed as one JSON line.
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


if __name__ == "__main__":
    main()
