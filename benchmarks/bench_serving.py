"""Serving benchmark: a 1M-offset snapshot, one `offsetlake serve` process, point lookups over HTTP
(p50/p99 latency, requests/s) and the wall time of `describe` / `lookup` as a user runs them.

    .venv/bin/python benchmarks/bench_serving.py [--offsets 1000000] [--groups 10000] [--duration 10]
                                                 [--concurrency 4] [--warehouse DIR] [--json]
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import pyarrow as pa

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from serving.conftest import running_server  # noqa: E402
from serving.warehouse_kit import T0, WarehouseKit  # noqa: E402


def build(root: Path, n_offsets: int, n_groups: int) -> list[str]:
    """n_groups groups, each committed on n_offsets/n_groups partitions spread over 10 topics."""
    per_group = n_offsets // n_groups
    topics, parts = 10, max(1, per_group // 10)
    gids = [f"group-{i:06d}" for i in range(n_groups)]
    g_col, t_col, p_col = [], [], []
    for g in gids:
        for t in range(topics):
            for p in range(parts):
                g_col.append(g)
                t_col.append(f"topic-{t:02d}")
                p_col.append(p)
    n = len(g_col)
    ts = pa.array([T0] * n, pa.timestamp("us", tz="UTC"))
    offsets = pa.table({
        "group_id": g_col, "topic": t_col, "partition": pa.array(p_col, pa.int32()),
        "offsets_partition": pa.array([hash(g) % 50 for g in g_col], pa.int32()),
        "committed_offset": pa.array(range(n), pa.int64()), "leader_epoch": pa.array([1] * n, pa.int32()),
        "metadata": [""] * n, "commit_timestamp": ts, "expire_timestamp": pa.nulls(n, pa.timestamp("us", tz="UTC")),
        "record_offset": pa.array(range(n), pa.int64()), "has_group_metadata": [True] * n,
        "topic_id": pa.nulls(n, pa.string()), "producer_id": pa.array([-1] * n, pa.int64()),
    })
    groups = pa.table({
        "group_id": gids, "offsets_partition": pa.array([0] * n_groups, pa.int32()),
        "group_type": ["classic"] * n_groups, "protocol_type": ["consumer"] * n_groups,
        "generation": pa.array([3] * n_groups, pa.int32()), "protocol": ["range"] * n_groups,
        "leader": [f"{g}-m0" for g in gids], "state": ["Stable"] * n_groups,
        "current_state_timestamp": pa.array([T0] * n_groups, pa.timestamp("us", tz="UTC")),
        "member_count": pa.array([2] * n_groups, pa.int32()), "record_offset": pa.array(range(n_groups), pa.int64()),
    })
    members = []
    for g in gids:
        for m in range(2):
            members.append({"group_id": g, "member_id": f"{g}-m{m}", "client_id": f"client-{m}", "client_host": "/10.0.0.1",
                            "assigned_partitions": [{"topic": f"topic-{t:02d}", "partition": p}
                                                    for t in range(m * 5, m * 5 + 5) for p in range(parts)]})
    kit = WarehouseKit(root)
    from serving.warehouse_kit import arrow_schema

    def full(table: str, t: pa.Table) -> pa.Table:
        schema = arrow_schema(table)
        cols = {f.name: (t.column(f.name) if f.name in t.column_names else pa.nulls(t.num_rows, f.type)) for f in schema}
        cols["snapshot_id"] = pa.nulls(t.num_rows, pa.string())
        return pa.table(cols).drop_columns(["snapshot_id"])

    mem = pa.Table.from_pylist(members)
    kit.snapshot("bench", tables={
        "loaded_offsets": full("loaded_offsets", offsets),
        "loaded_groups": full("loaded_groups", groups),
        "group_members": full("group_members", pa.table({
            "group_id": mem.column("group_id"), "member_id": mem.column("member_id"),
            "client_id": mem.column("client_id"), "client_host": mem.column("client_host"),
            "assigned_partitions": mem.column("assigned_partitions").cast(arrow_schema("group_members").field("assigned_partitions").type),
        })),
    })
    return gids


def load(base: str, gids: list[str], duration: float, concurrency: int, path_fmt: str) -> dict:
    lat: list[float] = []
    lock = threading.Lock()
    stop = time.monotonic() + duration
    errors = [0]

    def worker(seed: int):
        rnd = random.Random(seed)
        local = []
        with httpx.Client(base_url=base, timeout=30) as c:
            while time.monotonic() < stop:
                g = rnd.choice(gids)
                t0 = time.perf_counter()
                r = c.get(path_fmt.format(g))
                local.append(time.perf_counter() - t0)
                if r.status_code != 200:
                    errors[0] += 1
        with lock:
            lat.extend(local)

    started = time.monotonic()
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - started
    lat.sort()
    return {
        "requests": len(lat),
        "errors": errors[0],
        "req_per_s": round(len(lat) / elapsed, 1),
        "p50_ms": round(1000 * lat[len(lat) // 2], 2),
        "p99_ms": round(1000 * lat[min(len(lat) - 1, int(len(lat) * 0.99))], 2),
        "mean_ms": round(1000 * statistics.fmean(lat), 2),
    }


def wall(cmd: list[str], runs: int = 3) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        times.append(time.perf_counter() - t0)
    return round(statistics.median(times), 3)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--offsets", type=int, default=1_000_000)
    ap.add_argument("--groups", type=int, default=10_000)
    ap.add_argument("--duration", type=float, default=10.0)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--warehouse", type=Path, default=None, help="reuse/keep this warehouse directory")
    ap.add_argument("--hot-groups", type=int, default=1000,
                    help="size of the hot set for the cached-lookup phase (answers served from the response cache)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()

    root = a.warehouse or Path(tempfile.mkdtemp(prefix="bench-serving-"))
    t0 = time.perf_counter()
    if (root / "runs").is_dir():
        gids = [f"group-{i:06d}" for i in range(a.groups)]
        build_s = None
    else:
        gids = build(root, a.offsets, a.groups)
        build_s = round(time.perf_counter() - t0, 1)

    res: dict = {"offsets": a.offsets, "groups": a.groups, "warehouse_build_s": build_s,
                 "loadavg_start": [round(x, 2) for x in os.getloadavg()]}
    t0 = time.perf_counter()
    with running_server(root, timeout=600) as base:
        res["server_ready_s"] = round(time.perf_counter() - t0, 2)  # process start + 1M-offset index build
        load(base, gids, 2.0, a.concurrency, "/groups/{}/offsets")  # warm-up
        # random over all groups: with 10k groups most requests are a group's first (uncached) lookup
        res["offsets_lookup"] = load(base, gids, a.duration, a.concurrency, "/groups/{}/offsets")
        hot = gids[: a.hot_groups]
        load(base, hot, 2.0, a.concurrency, "/groups/{}/offsets")  # fill the response cache for the hot set
        res["offsets_lookup_hot"] = load(base, hot, a.duration, a.concurrency, "/groups/{}/offsets")
        res["group_detail"] = load(base, gids, a.duration / 2, a.concurrency, "/groups/{}")
        res["health"] = load(base, gids, a.duration / 2, a.concurrency, "/health?{}")
    py = [sys.executable, "-m", "jobs.cli"]
    g = gids[len(gids) // 2]
    res["describe_wall_s"] = wall(py + ["describe", "--warehouse", str(root), g])
    res["lookup_group_wall_s"] = wall(py + ["lookup", "--warehouse", str(root), "--group", g])
    res["lookup_topic_partition_wall_s"] = wall(py + ["lookup", "--warehouse", str(root), "--topic", "topic-03", "--partition", "1"])
    res["cli_help_wall_s"] = wall(py + ["describe", "--help"])
    res["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(res, indent=None if a.json else 2))


if __name__ == "__main__":
    main()
