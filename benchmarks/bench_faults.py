"""Figures: rebuilds from a bucket into a bucket while a share of the store's requests fail, as the README quotes them.

    .venv/bin/python benchmarks/bench_faults.py --rate 0.05 --runs 10
    .venv/bin/python benchmarks/bench_faults.py --rate 0.30 --runs 10 [--reset 0.1] [--slow 0.1]
                                                [--conf storage.retry_attempts=2 …]

A local S3 server (moto) behind the fault-injecting proxy of the tests (tests/faultproxy.py): `--rate` of the
requests answered 503 SlowDown (and of CompleteMultipartUpload calls failed inside a 200), `--reset` of the GETs
cut mid-body, `--slow` answered 0.3 s late. A sample dump is rebuilt once locally (the clean answer), then `--runs`
times through the proxy into one warehouse, each run a new CLI process with the settings as they are (or as
`--conf` overrides them: a short retry budget shows the failures) and `--quiet` (stderr holds only what offsetlake
says). Per run, one JSON line: exit code, seconds, stderr lines, whether a
traceback or exit 2 appeared, the runs row (status, stage, error), whether the snapshot served after it equals the
clean answer (a success) or the one served before (a failure); then the totals.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CREDS = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench-secret", "AWS_REGION": "us-east-1"}
SERVED = """
import json, sys
from pipelines.io.warehouse import Warehouse
wh = Warehouse(sys.argv[1])
sid = wh.latest_snapshot_id()
rows = {} if sid is None else {t: sorted(json.dumps(r, default=str, sort_keys=True)
                                         for r in wh.read_table(t, sid, columns=cols).to_pylist())
        for t, cols in {"loaded_offsets": ["group_id", "topic", "partition", "committed_offset", "leader_epoch",
                                           "metadata", "commit_timestamp", "expire_timestamp", "record_offset"],
                        "loaded_groups": ["group_id", "group_type", "protocol_type", "generation", "protocol",
                                          "leader", "state", "member_count"],
                        "pending_offsets": ["producer_id", "group_id", "topic", "partition", "committed_offset"],
                        "removed_groups": ["group_id", "tombstone_record_offset"]}.items()}
runs = {r["snapshot_id"]: {"status": r["status"], "summary": r.get("summary")} for r in wh.snapshots()}
print(json.dumps({"served": sid, "rows": rows, "runs": runs}, default=str))
"""


def _moto() -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(300):
        try:
            socket.create_connection(("127.0.0.1", port), 1).close()
            return proc, f"http://127.0.0.1:{port}"
        except OSError:
            time.sleep(0.1)
    proc.kill()
    sys.exit("moto did not start")


def _cli(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "jobs.cli", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=3600)


def _served(env: dict, warehouse: str) -> dict:
    r = subprocess.run([sys.executable, "-c", SERVED, warehouse], cwd=ROOT, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"cannot read {warehouse}: {r.stderr[-2000:]}")
    return json.loads(r.stdout)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rate", type=float, default=0.05, help="share of requests answered 503 SlowDown")
    ap.add_argument("--reset", type=float, default=0.0, help="share of GETs cut mid-body")
    ap.add_argument("--slow", type=float, default=0.0, help="share of requests answered 0.3 s late")
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--records", type=int, default=3000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--conf", action="append", default=[], help="a setting for the faulty runs: section.key=value")
    args = ap.parse_args()
    from tests.faultproxy import FaultProxy

    work = Path(tempfile.mkdtemp(prefix="offsetlake-bench-faults-"))
    moto, endpoint = _moto()
    env = {**os.environ, **CREDS, "AWS_ENDPOINT_URL": endpoint, "PYTHONPATH": str(ROOT)}
    try:
        import pyarrow.fs as pafs

        fs = pafs.S3FileSystem(access_key=CREDS["AWS_ACCESS_KEY_ID"], secret_key=CREDS["AWS_SECRET_ACCESS_KEY"],
                               region="us-east-1", endpoint_override=endpoint.split("://", 1)[1], scheme="http",
                               allow_bucket_creation=True)
        fs.create_dir("bench")
        r = _cli(env, "sample", str(work / "dump"), "--records", str(args.records), "--groups", "40",
                 "--partitions", "4", "--seed", "11")
        if r.returncode != 0:
            sys.exit(r.stderr)
        pafs.copy_files(str(work / "dump"), "bench/dump", source_filesystem=pafs.LocalFileSystem(),
                        destination_filesystem=fs)
        r = _cli(env, "rebuild", "--input", str(work / "dump"), "--warehouse", str(work / "clean"), "--snapshot-id",
                 "clean", "--env", "ci", "--quiet")
        if r.returncode != 0:
            sys.exit(r.stderr)
        clean = _served(env, str(work / "clean"))["rows"]
        totals = {"runs": 0, "succeeded_clean": 0, "failed_recorded": 0, "exit_2": 0, "tracebacks": 0,
                  "other": 0, "max_stderr_lines": 0}
        with FaultProxy(endpoint, seed=args.seed, slowdown=args.rate, complete_error=args.rate, reset=args.reset,
                        slow=args.slow) as proxy:
            through = {**env, "AWS_ENDPOINT_URL": proxy.url}
            before = None
            conf = [a for c in args.conf for a in ("--conf", c)]
            for i in range(args.runs):
                sid = f"run-{i}"
                started = time.monotonic()
                r = _cli(through, "rebuild", "--input", "s3://bench/dump", "--warehouse", "s3://bench/wh",
                         "--snapshot-id", sid, "--env", "ci", "--quiet", *conf)
                took = time.monotonic() - started
                after = _served(env, "s3://bench/wh")
                lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
                row = after["runs"].get(sid) or {}
                summary = json.loads(row["summary"]) if row.get("summary") else {}
                ok = (r.returncode == 0 and after["served"] == sid and after["rows"] == clean
                      and row.get("status") == "succeeded")
                recorded = (r.returncode == 1 and row.get("status") == "failed" and bool(summary.get("stage"))
                            and (before is None or after["served"] == before["served"]
                                 and after["rows"] == before["rows"]))
                totals["runs"] += 1
                totals["succeeded_clean"] += ok
                totals["failed_recorded"] += recorded
                totals["exit_2"] += r.returncode == 2
                totals["tracebacks"] += "Traceback" in r.stderr
                totals["other"] += not (ok or recorded)
                totals["max_stderr_lines"] = max(totals["max_stderr_lines"], len(lines))
                print(json.dumps({"run": sid, "exit": r.returncode, "seconds": round(took, 1),
                                  "stderr_lines": len(lines), "served_clean": ok, "failed_recorded": recorded,
                                  "status": row.get("status"), "stage": summary.get("stage"),
                                  "error": (summary.get("error") or "")[:200], "stderr": lines[:3]}), flush=True)
                before = after
            counts = proxy.counts
        print(json.dumps({"rate": args.rate, "reset": args.reset, "slow": args.slow, "conf": args.conf, **totals,
                          "requests": counts}), flush=True)
    finally:
        moto.terminate()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
