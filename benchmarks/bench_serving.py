"""Serving benchmark: a 1M-offset snapshot, one `offsetlake serve` process, point lookups over HTTP
(p50/p99 latency, requests/s, from benchmarks/loadgen.c built with gcc) and the wall time of `describe` /
`lookup` as a user runs them (`python -m jobs.cli`, a new process each time).

Phases: every group's offsets once (each answer built from the index), then random groups (answers from the
response cache) over 1 and 4 connections, every group's detail once, /health.

    .venv/bin/python benchmarks/bench_serving.py [--offsets 1000000] [--groups 10000] [--duration 10]
                                                 [--warehouse DIR] [--json]
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
import time
from pathlib import Path

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


def build_loadgen() -> str:
    """Compile benchmarks/loadgen.c (a closed-loop keep-alive HTTP client in C) with the machine's gcc: a Python
    client costs more per request than the server under test and, on 2 cores, would measure itself."""
    out = Path(tempfile.mkdtemp(prefix="loadgen-")) / "loadgen"
    subprocess.run(["gcc", "-O2", "-pthread", "-o", str(out), str(ROOT / "benchmarks" / "loadgen.c")], check=True)
    return str(out)


def load(loadgen: str, base: str, paths: list[str], duration: float, connections: int, once: bool = False) -> dict:
    """Requests over `connections` keep-alive connections for `duration` s (with `once`: each path exactly once)."""
    host, port = base.split("//", 1)[1].rsplit(":", 1)
    with tempfile.NamedTemporaryFile("w", suffix=".paths", delete=False) as f:
        f.write("\n".join(paths) + "\n")
    try:
        cmd = [loadgen, host, port, str(duration), str(connections), f.name] + (["once"] if once else [])
        res = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    finally:
        os.unlink(f.name)
    res["connections"] = connections
    for k in ("p50", "p90", "p99", "p999", "max"):
        res[f"{k}_ms"] = round(res.pop(f"{k}_us") / 1000, 3)
    return res


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
    ap.add_argument("--warehouse", type=Path, default=None, help="reuse/keep this warehouse directory")
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
    loadgen = build_loadgen()
    rnd = random.Random(7)
    offsets_paths = [f"/groups/{g}/offsets" for g in gids]
    detail_paths = [f"/groups/{g}" for g in gids]
    rnd.shuffle(offsets_paths)
    rnd.shuffle(detail_paths)
    t0 = time.perf_counter()
    with running_server(root, timeout=600) as base:
        res["server_ready_s"] = round(time.perf_counter() - t0, 2)  # process start + 1M-offset index build
        load(loadgen, base, ["/health"], 1.0, 1)  # warm-up (connections, code paths)
        # every group once: each answer is built from the index (no response cached yet)
        res["offsets_lookup_uncached"] = load(loadgen, base, offsets_paths, 600, 1, once=True)
        # random groups from then on: answers come from the response cache
        res["offsets_lookup"] = load(loadgen, base, offsets_paths, a.duration, 1)
        res["offsets_lookup_4_connections"] = load(loadgen, base, offsets_paths, a.duration, 4)
        res["group_detail_uncached"] = load(loadgen, base, detail_paths, 600, 1, once=True)
        res["health"] = load(loadgen, base, ["/health"], a.duration / 2, 1)
    py = [sys.executable, "-m", "jobs.cli"]
    g = gids[len(gids) // 2]
    res["describe_wall_s"] = wall(py + ["describe", "--warehouse", str(root), g])
    res["lookup_group_wall_s"] = wall(py + ["lookup", "--warehouse", str(root), "--group", g])
    res["lookup_topic_partition_wall_s"] = wall(py + ["lookup", "--warehouse", str(root), "--topic", "topic-03", "--partition", "1"])
    res["lookup_topic_partition_rows"] = a.groups  # every group commits partition 1 of every topic
    res["cli_help_wall_s"] = wall(py + ["describe", "--help"])
    res["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(res, indent=None if a.json else 2))


if __name__ == "__main__":
    main()
