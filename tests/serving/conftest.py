"""Serving fixtures: a small warehouse with a story in it, and a real `offsetlake serve` process on loopback."""
from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from .warehouse_kit import WarehouseKit, commit, group, member, offset, ts

ROOT = Path(__file__).resolve().parents[2]


def build_story(root: Path) -> WarehouseKit:
    """s1: a Stable group, an Empty group, a simple consumer, a group with an open transaction.
    s2 (later): `payments` rewound on orders-0 (an incident), advanced elsewhere; `batch` expired;
    `simple` deleted; `fresh` created; `payments` has an expired offset. s3: a failed run (not readable)."""
    k = WarehouseKit(root)
    k.snapshot(
        "s1",
        groups=[
            group("payments", members=2, leader="c-1", generation=5, protocol="range"),
            group("batch", "Empty", members=0, generation=3, protocol=""),
            group("txn", "Empty", members=0, generation=1, protocol=""),
        ],
        members=[
            member("payments", "c-1", [("orders", 0), ("orders", 1)], client_id="pay-1", host="/10.0.0.1"),
            member("payments", "c-2", [("refunds", 0)], client_id="pay-2", host="/10.0.0.2", instance="pay-static-2"),
        ],
        offsets=[
            offset("payments", "orders", 0, 1200, leader_epoch=3, t=10),
            offset("payments", "orders", 1, 900, leader_epoch=3, t=10),
            offset("payments", "refunds", 0, 40, t=10),
            offset("payments", "audit", 0, 7, t=5),
            offset("batch", "orders", 0, 100, t=1),
            offset("txn", "orders", 2, 55, t=2),
        ],
        empty_group_offsets=[offset("simple", "orders", 0, 300, t=3, has_group_metadata=False)],
        pending=[{"producer_id": 7, "group_id": "txn", "topic": "orders", "partition": 2, "committed_offset": 60,
                  "record_offset": 77, "offsets_partition": 0}],
        commits=[commit("payments", "orders", 0, o, t=i) for i, o in enumerate((1000, 1100, 1200), start=8)],
        as_of=ts(20),
    )
    k.snapshot(
        "s2",
        groups=[
            group("payments", members=2, leader="c-1", generation=6, protocol="range"),
            group("txn", "Empty", members=0, generation=1, protocol=""),
            group("fresh", "Stable", members=1, generation=1, protocol="roundrobin", group_type="classic"),
        ],
        members=[
            member("payments", "c-1", [("orders", 0), ("orders", 1)], client_id="pay-1", host="/10.0.0.1"),
            member("payments", "c-2", [("refunds", 0)], client_id="pay-2", host="/10.0.0.2", instance="pay-static-2"),
            member("fresh", "f-1", [("orders", 0)], client_id="fresh-1"),
        ],
        offsets=[
            offset("payments", "orders", 0, 17, leader_epoch=4, t=30),  # rewound: 1200 -> 17
            offset("payments", "orders", 1, 950, leader_epoch=4, t=30),
            offset("payments", "refunds", 0, 40, t=10),
            offset("txn", "orders", 2, 55, t=2),
            offset("fresh", "orders", 0, 5, t=31),
        ],
        expired_offsets=[{**offset("payments", "audit", 0, 7, t=5), "expiry_rule": "commit_timestamp"},
                         {**offset("batch", "orders", 0, 100, t=1), "expiry_rule": "current_state_timestamp"}],
        expired_groups=[{"group_id": "batch", "reason": "all offsets expired", "group_type": "classic"}],
        removed_groups=[{"group_id": "simple", "tombstone_record_offset": 99}],
        commits=[commit("payments", "orders", 0, 17, t=30)],
        # the dump's log dir left high watermarks for orders (not refunds)
        log_end_offsets=[{"topic": "orders", "partition": p, "log_end_offset": o, "observed_at": ts(39)}
                         for p, o in ((0, 1300), (1, 950), (2, 60))],
        as_of=ts(40),
    )
    k.snapshot("s3", status="failed", groups=[group("ghost")])
    return k


@pytest.fixture(scope="session")
def story(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("story")
    build_story(root)
    return root


def damaged_copy(warehouse: Path, to: Path, tables) -> Path:
    """`warehouse` copied to `to`, every Parquet file of `tables` overwritten past its first half with zeros (its
    size kept, as the Delta log records it): what a torn copy or a disk error leaves."""
    shutil.copytree(warehouse, to)
    for table in tables:
        for f in (to / table).rglob("*.parquet"):
            data = f.read_bytes()
            f.write_bytes(data[:len(data) // 2] + bytes(len(data) - len(data) // 2))
    return to


def free_port() -> int:
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def running_server(warehouse: Path, *extra: str, timeout: float = 60.0, until: tuple[str, ...] = ("ok", "empty")):
    """`offsetlake serve` in a subprocess on a free loopback port; yields its base URL once /health's status is one
    of `until` (a server that cannot index its snapshot says `error`, a 503)."""
    port = free_port()
    cmd = [sys.executable, "-m", "jobs.cli", "serve", "--warehouse", str(warehouse), "--port", str(port),
           "--log-level", "warning", *extra]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    # drained as it comes: a server that logs more than a pipe holds (64 KB) would block on its next line, and every
    # request after it with it
    output: list[str] = []
    drain = threading.Thread(target=lambda: output.extend(proc.stdout), daemon=True)
    drain.start()
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                drain.join(5)
                raise RuntimeError(f"server exited with {proc.returncode}: {''.join(output)}")
            try:
                r = httpx.get(base + "/health", timeout=2)
                if r.status_code in (200, 503) and r.json()["status"] in until:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("server did not become healthy")
            time.sleep(0.05)
        yield base
    finally:
        stop_process(proc)


def stop_process(proc: subprocess.Popen) -> None:
    """Terminate, and kill if it has not exited after 10 s."""
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="module")
def server(story):
    with running_server(story, "--refresh-interval", "0.2") as base:
        yield base
