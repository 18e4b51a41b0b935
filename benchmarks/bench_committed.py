"""A shard's committed offsets read and changed a window at a time, in stores of growing size.

    .venv/bin/python benchmarks/bench_committed.py [--stored 50000 500000 2000000] [--window 20000]

`coordinator.committed.CommittedOffsets` holds a shard's offsets as one Arrow table; each window of a load looks up
the keys it commits (`lookup`) and puts its new offsets in place (`apply`). Prints the CPU-seconds of each per
window (the median of 4, after one that warms the allocator up), for a window of `--window` keys (all held but one,
the same every window) at each store size: a big partition's load runs a window per 16 MiB of its log, so what a
window costs with the whole store behind it is paid hundreds of times.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipelines.coordinator.committed import KEY, SCHEMA, CommittedOffsets  # noqa: E402


def stored(n: int) -> pa.Table:
    """`n` offsets of 20,000 groups, each key once."""
    i = np.arange(n)
    return pa.table({"group_id": pa.array([f"group-{g}" for g in (i % 20_000).tolist()]),
                     "topic": pa.array([f"topic-{t}" for t in (i // 20_000).tolist()]),
                     "partition": pa.array(i % 7, pa.int32()),
                     **{f.name: pa.nulls(n, f.type) for f in SCHEMA if f.name not in KEY}}).cast(SCHEMA)


def per_window(n: int, window: int, rng: np.random.Generator, windows: int = 4) -> dict:
    """The median CPU-seconds of `lookup` and of `apply` over `windows` windows, after one that warms the
    allocator up (a first window pays the page faults of every buffer it makes)."""
    store = CommittedOffsets(stored(n))
    # the consumers that commit: the same keys every window, as live groups commit every partition they own
    picked = store.table().take(pa.array(np.unique(rng.integers(0, n, window))))
    keys = pa.concat_tables([picked.select(KEY), pa.table({"group_id": ["new"], "topic": ["t"],
                                                           "partition": pa.array([0], pa.int32())})])
    spent = []
    for _ in range(windows + 1):
        started = time.process_time()
        store.lookup(keys)
        looked = time.process_time()
        store.apply(picked, SCHEMA.empty_table().select(KEY))
        spent.append((looked - started, time.process_time() - looked))
    lookup, apply = np.median(np.array(spent[1:]), axis=0)
    return {"lookup_s": round(float(lookup), 4), "apply_s": round(float(apply), 4)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--stored", type=int, nargs="+", default=[50_000, 500_000, 2_000_000])
    ap.add_argument("--window", type=int, default=20_000)
    args = ap.parse_args()
    rng = np.random.default_rng(1)
    print(json.dumps({"window_keys": args.window,
                      "per_window": {n: per_window(n, args.window, rng) for n in args.stored}}))


if __name__ == "__main__":
    main()
