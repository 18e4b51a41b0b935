"""A Spark standalone master and worker on loopback, started from pyspark's own launcher and stopped by pid."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spark_bin(name: str) -> str:
    return str(Path(sys.executable).parent / name)


def wait_for_port(port: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.3)
    raise TimeoutError(f"nothing listening on 127.0.0.1:{port} after {timeout}s")


class StandaloneCluster:
    """`spark-class org.apache.spark.deploy.master.Master` + one `...worker.Worker`, loopback only."""

    def __init__(self, workdir: Path, cores: int = 2, memory: str = "2g"):
        self.workdir = workdir
        self.cores, self.memory = cores, memory
        self.procs: list[subprocess.Popen] = []
        self.port = free_port()
        self.master_url = f"spark://127.0.0.1:{self.port}"

    def _start(self, args: list[str], log: str) -> subprocess.Popen:
        # No PYTHONPATH: executors inherit the worker's, and they must import what the application ships them.
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        env.update(SPARK_LOCAL_IP="127.0.0.1", SPARK_MASTER_HOST="127.0.0.1", PYSPARK_PYTHON=sys.executable,
                   SPARK_WORKER_DIR=str(self.workdir / "work"))
        out = open(self.workdir / log, "wb")
        p = subprocess.Popen([spark_bin("spark-class"), *args], stdout=out, stderr=subprocess.STDOUT, env=env,
                             start_new_session=True)
        self.procs.append(p)
        return p

    def __enter__(self):
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._start(["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(self.port),
                     "--webui-port", str(free_port())], "master.log")
        wait_for_port(self.port)
        self._start(["org.apache.spark.deploy.worker.Worker", self.master_url, "--host", "127.0.0.1",
                     "--cores", str(self.cores), "--memory", self.memory, "--webui-port", str(free_port())],
                    "worker.log")
        # The worker registers with the master within a few seconds; give it time before submitting.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if b"Successfully registered with master" in (self.workdir / "worker.log").read_bytes():
                return self
            time.sleep(0.5)
        raise TimeoutError("worker did not register with the master:\n" +
                           (self.workdir / "worker.log").read_text(errors="replace")[-3000:])

    def __exit__(self, *exc):
        for p in reversed(self.procs):
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for p in self.procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
