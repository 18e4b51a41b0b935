"""The writer lock of a warehouse: one run writes (and vacuums) a warehouse at a time.

`<warehouse>/_lock` is created with create-exclusive semantics (`O_CREAT | O_EXCL`) and holds who owns it (host,
pid, process start time, snapshot id, since when, the run's current stage) as JSON. It is also where a run in
flight says what it is doing: the `runs` table is written only when a run ends.

A lock is stale, and the next run takes it over, when its holder is gone:
- same host: the pid no longer exists, or exists but started at another time (a reused pid);
- another host: its heartbeat (the file's mtime, touched by the holder every `heartbeat_seconds`) is older than
  `stale_seconds`.
Taking over renames the stale file away first (an atomic rename: of two runs breaking the same stale lock, one
wins), then creates a fresh one. The broken holder's record is returned so the new run can record that run as
abandoned.

Limitation: create-exclusive and rename are atomic on a local or POSIX shared file system. On object storage
(S3 and the like) they are not (before conditional writes); a warehouse there needs a lock service instead
(e.g. a DynamoDB table as delta-rs uses for its own S3 commits).
"""
from __future__ import annotations

import datetime as _dt
import errno
import json
import os
import socket
import threading
import time
import uuid
from pathlib import Path

LOCK_NAME = "_lock"


class LockHeldError(RuntimeError):
    """Another run holds the warehouse's writer lock (a usage error: one line, exit 2)."""

    def __init__(self, message: str, holder: dict):
        super().__init__(message)
        self.holder = holder


def _proc_start(pid: int) -> str | None:
    """The process' start time in clock ticks since boot (field 22 of /proc/<pid>/stat), None without /proc."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by another user
    return True


def _utc_iso(ts: float) -> str:
    return _dt.datetime.fromtimestamp(ts, _dt.timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def describe_holder(holder: dict) -> str:
    return (f"host {holder.get('host', '?')} pid {holder.get('pid', '?')} snapshot {holder.get('snapshot_id', '?')}"
            f" since {holder.get('since', '?')}" + (f" (stage {holder['stage']})" if holder.get("stage") else ""))


class WriterLock:
    """The `_lock` of one warehouse. `acquire` returns the record of a stale lock it broke (or None)."""

    def __init__(self, warehouse: str | Path, *, stale_seconds: float = 600, heartbeat_seconds: float = 30):
        self.path = Path(warehouse) / LOCK_NAME
        self.stale_seconds = stale_seconds
        self.heartbeat_seconds = heartbeat_seconds
        self.token: str | None = None
        self.record: dict = {}
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None

    # ------------------------------------------------------------------ reading
    def holder(self) -> dict | None:
        """The current lock's record (with `age_seconds`), None when the warehouse is not locked."""
        try:
            text = self.path.read_text()
            age = time.time() - self.path.stat().st_mtime
        except FileNotFoundError:
            return None
        try:
            rec = json.loads(text)
        except ValueError:
            rec = {}  # being written right now (created, not yet filled), or damaged
        rec["age_seconds"] = round(age, 1)
        return rec

    def is_stale(self, holder: dict) -> bool:
        if not holder.get("pid"):  # empty or damaged: a writer between create and write, unless it stays so
            return holder["age_seconds"] > max(60.0, self.heartbeat_seconds)
        if holder.get("host") == socket.gethostname():
            pid = int(holder["pid"])
            if not _pid_alive(pid):
                return True
            start = _proc_start(pid)
            return start is not None and holder.get("pid_start") not in (None, start)
        return holder["age_seconds"] > self.stale_seconds

    # ------------------------------------------------------------------ taking and leaving
    def acquire(self, snapshot_id: str, *, wait_seconds: float = 0, poll_seconds: float = 1.0) -> dict | None:
        """Take the lock, waiting up to `wait_seconds` for a live holder; raises LockHeldError after that."""
        deadline = time.monotonic() + max(0.0, wait_seconds)
        broken = None
        while True:
            if self._create(snapshot_id):
                self._start_heartbeat()
                return broken
            holder = self.holder()
            if holder is None:
                continue  # released between our attempt and the read
            if self.is_stale(holder):
                aside = self.path.with_name(f"{LOCK_NAME}.stale-{uuid.uuid4().hex[:8]}")
                try:
                    os.rename(self.path, aside)
                except FileNotFoundError:
                    continue  # another run broke it first
                try:
                    broken = json.loads(aside.read_text() or "{}")
                except ValueError:
                    broken = {}
                aside.unlink(missing_ok=True)
                continue
            if time.monotonic() >= deadline:
                waited = f" after waiting {wait_seconds:g} s" if wait_seconds else ""
                raise LockHeldError(f"warehouse {self.path.parent} is being written by another run{waited}: "
                                    f"{describe_holder(holder)}; lock file {self.path}", holder)
            time.sleep(poll_seconds)

    def _create(self, snapshot_id: str) -> bool:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        self.token = uuid.uuid4().hex
        now = time.time()
        self.record = dict(host=socket.gethostname(), pid=os.getpid(), pid_start=_proc_start(os.getpid()),
                           snapshot_id=snapshot_id, since=_utc_iso(now), stage="start", token=self.token)
        try:
            os.write(fd, json.dumps(self.record).encode())
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            self.path.unlink(missing_ok=True)
            raise
        os.close(fd)
        return True

    def update(self, **fields) -> None:
        """Record the run's progress (e.g. `stage`) in the lock file (replaced atomically)."""
        if not self.owned():
            return
        self.record.update(fields)
        tmp = self.path.with_name(f"{LOCK_NAME}.{self.token}.tmp")
        tmp.write_text(json.dumps(self.record))
        os.replace(tmp, self.path)

    def owned(self) -> bool:
        if self.token is None:
            return False
        holder = self.holder()
        return holder is not None and holder.get("token") == self.token

    def release(self) -> None:
        self._stop.set()
        if self._beat is not None:
            self._beat.join(timeout=5)
        if self.owned():
            self.path.unlink(missing_ok=True)
        self.token = None

    def _start_heartbeat(self) -> None:
        self._stop.clear()

        def beat():
            while not self._stop.wait(self.heartbeat_seconds):
                try:
                    os.utime(self.path)
                except OSError as e:
                    if e.errno == errno.ENOENT:
                        return

        self._beat = threading.Thread(target=beat, name="offsetlake-lock-heartbeat", daemon=True)
        self._beat.start()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()
