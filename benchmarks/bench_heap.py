"""The JVM holds no log: an uncompacted offsets partition far larger than the driver's heap rebuilds under it.

    python benchmarks/bench_heap.py [--records 30000000] [--groups 300] [--heap 1g --heap 4g]
                                    [--dir /tmp/offsetlake-heap] [--compare-unsplit]

Generates (or reuses) the log a dead log cleaner leaves (`offsetlake sample --partitions 1 --shape cleaner-died`:
every record in one offsets partition, few keys committed again and again), rebuilds it with the CLI once per
`--heap` (`spark.driver.memory`: a local run's driver JVM is its executor too), and reports for each the wall time and
the peak resident set of every process of the run, sampled from /proc every 0.5 s: the JVM, the CLI's Python, the
largest Python worker, and all of them together. Every run's snapshot is compared table by table with the first's;
`--compare-unsplit` adds a run at the smallest heap with the partition read whole by one task (`decode.split_bytes`
0). A run that fails says so (its one line) and the comparison stops there.
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_rebuild import _children, _rss_kb  # noqa: E402

CLI = [sys.executable, "-m", "jobs.cli"]
COMPARED = ("loaded_offsets", "empty_group_offsets", "loaded_groups", "group_members", "removed_groups",
            "pending_offsets", "expired_offsets", "expired_groups", "offset_commits", "group_history")


def _tree(root: int) -> list[int]:
    out, todo = [], [root]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += _children(p)
    return out


def _kind(pid: int) -> str | None:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    if argv[0].endswith(b"java"):
        return "jvm"
    joined = b" ".join(argv)
    return "python_worker" if b"pyspark" in joined or b"pyspark_worker" in joined else "cli_python"


class Peaks(threading.Thread):
    """The peak RSS of each kind of process under `pid`, and of their sum."""

    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.pid, self.peak, self.stop = pid, {"all": 0}, threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            total = 0
            for p in _tree(self.pid):
                kind, rss = _kind(p), _rss_kb(p)
                if kind is None:
                    continue
                self.peak[kind] = max(self.peak.get(kind, 0), rss)
                total += rss
            self.peak["all"] = max(self.peak["all"], total)
            self.stop.wait(0.5)


def rebuild(dump: Path, warehouse: Path, heap: str, *conf: str) -> dict:
    shutil.rmtree(warehouse, ignore_errors=True)
    args = [*CLI, "rebuild", "--input", str(dump), "--warehouse", str(warehouse), "--snapshot-id", "heap", "--quiet",
            "--conf", f"spark.spark.driver.memory={heap}", *(x for c in conf for x in ("--conf", c))]
    started = time.monotonic()
    proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    peaks = Peaks(proc.pid)
    peaks.start()
    _, err = proc.communicate()
    peaks.stop.set()
    peaks.join()
    return {"heap": heap, "conf": list(conf), "exit": proc.returncode, "wall_s": round(time.monotonic() - started, 1),
            "peak_mb": {k: round(v / 1024) for k, v in sorted(peaks.peak.items())}, "error": err.strip()[-500:]}


def tables(warehouse: Path) -> dict[str, tuple]:
    """Per table of the served snapshot (the history included): its rows and an order-free hash of them (DuckDB,
    over the files: the history has a row per record)."""
    from pipelines.io.snapshots import DeltaWarehouseReader, resolve_snapshot
    from pipelines.serving import sql

    reader = DeltaWarehouseReader(str(warehouse))
    con = sql.connect(reader, resolve_snapshot(reader, None))
    return {t: con.execute(f'SELECT count(*), sum(hash(r)::HUGEINT) FROM (SELECT * EXCLUDE (snapshot_id) '
                           f'FROM "{t}") r').fetchone() for t in COMPARED}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=30_000_000)
    ap.add_argument("--groups", type=int, default=300)
    ap.add_argument("--heap", action="append", help="spark.driver.memory of a run (repeatable; default 1g and 4g)")
    ap.add_argument("--dir", default="/tmp/offsetlake-heap")
    ap.add_argument("--compare-unsplit", action="store_true")
    a = ap.parse_args()
    heaps = a.heap or ["1g", "4g"]
    base = Path(a.dir)
    dump = base / f"dump-{a.records}-{a.groups}"
    if not (dump / "__consumer_offsets-0").exists():
        subprocess.run([*CLI, "sample", str(dump), "--records", str(a.records), "--groups", str(a.groups),
                        "--partitions", "1", "--shape", "cleaner-died", "--data-segments", "0", "--force"],
                       cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    size = sum(f.stat().st_size for f in (dump / "__consumer_offsets-0").glob("*.log"))
    print(f"log: {a.records:,} records in one offsets partition, {size / 2 ** 30:.2f} GiB of segments ({dump})")
    runs = [(heap, ()) for heap in heaps]
    if a.compare_unsplit:
        runs.append((min(heaps, key=_bytes), ("decode.split_bytes=0",)))
    first = None
    for i, (heap, conf) in enumerate(runs):
        wh = base / f"wh-{i}"
        r = rebuild(dump, wh, heap, *conf)
        shown = ", ".join(f"{k} {v:,} MB" for k, v in r["peak_mb"].items())
        label = f"spark.driver.memory={heap}" + "".join(f" {c}" for c in conf)
        print(f"{label}: exit {r['exit']}, {r['wall_s']} s; peak RSS {shown}")
        if r["exit"] != 0:
            print(f"  {r['error'].splitlines()[-1] if r['error'] else ''}")
            return 1
        got = tables(wh)
        if first is None:
            first = (label, got)
        else:
            same = got == first[1]
            print(f"  snapshot {'the same as' if same else 'DIFFERS from'} {first[0]}'s, table by table")
            if not same:
                return 1
    return 0


def _bytes(heap: str) -> int:
    units = {"k": 2 ** 10, "m": 2 ** 20, "g": 2 ** 30}
    return int(heap[:-1]) * units[heap[-1].lower()] if heap[-1].lower() in units else int(heap)


if __name__ == "__main__":
    sys.exit(main())
