"""The writer lock of a warehouse: one run writes (and vacuums) a warehouse at a time.

`<warehouse>/_lock` is created with create-exclusive semantics (`O_CREAT | O_EXCL`) and holds who owns it (host,
pid, process start time, snapshot id, since when, the run's current stage) as JSON. It is also where a run in
flight says what it is doing: the `runs` table is written only when a run ends.

A lock is stale, and the next run takes it over, when its holder is gone:
- same host: the pid no longer exists, or exists but started at another time (a reused pid);
- another host: its heartbeat (the file's mtime, touched by the holder every `heartbeat_seconds`) is older than
  `stale_seconds`, or in the future (the holder's clock, or whoever set the mtime, is ahead of ours), and it does
  not move while this run watches it for a few of the holder's heartbeats: a live holder touches it, a dead one's
  stays put. The age alone compares two clocks: judged by it, a lock stamped a day ahead would refuse every run for
  a day after its holder died, and a run on a host whose clock is ahead of the holder's by more than
  `stale_seconds` would take over a live run's lock, two runs then writing (and vacuuming) one warehouse.
Taking over renames the stale file away first (an atomic rename: of two runs breaking the same stale lock, one
wins), then creates a fresh one. The broken holder's record is returned so the new run can record that run as
abandoned.

On a local or POSIX shared file system create-exclusive and rename are atomic. On object storage (`s3://`) the
same steps are conditional writes (through obstore; pyarrow's filesystem cannot express them): create is a PUT
with `If-None-Match: *`, a heartbeat or a stage update re-PUTs the record with `If-Match` on the holder's own
ETag (which also moves `Last-Modified`, the heartbeat), and a takeover replaces the stale record with
`If-Match` on the ETag it read, so of two runs breaking one stale lock exactly one wins. AWS S3 has had both
conditions since 2024, as have MinIO and moto; a store without them refuses the request and the run exits 2
naming it. Release deletes the record after checking it is still ours (S3 has no conditional DELETE here, so a
takeover landing between the check and the delete is the one window left). The heartbeat there is
`Last-Modified`, the store's clock, watched as above.
"""
from __future__ import annotations

import datetime as _dt
import errno
import json
import math
import os
import socket
import threading
import time
import uuid
from pathlib import Path

from pipelines.io import retry, storage

LOCK_NAME = "_lock"
SKEW_SECONDS = 60  # a heartbeat further ahead of our clock than this is read as the holder's clock being ahead


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


class _LocalLockFile:
    """The lock record as a local file: create-exclusive, replace by rename, heartbeat by mtime."""

    def __init__(self, path: Path):
        self.path = path

    def read(self) -> tuple[bytes, float, str | None] | None:
        """(record bytes, the last heartbeat's time, version: the e-tag on object storage) or None when there is
        no lock."""
        try:
            data = self.path.read_bytes()
            beat = self.path.stat().st_mtime
        except FileNotFoundError:
            return None
        return data, beat, None

    def create(self, data: bytes) -> bool:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        try:
            os.write(fd, data)
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            self.path.unlink(missing_ok=True)
            raise
        os.close(fd)
        return True

    def take_over(self, version) -> bytes | None:
        """Move the stale record out of the way (atomic rename: one of two breakers wins); its bytes, or None when
        another run broke it first. The caller then creates its own."""
        aside = self.path.with_name(f"{LOCK_NAME}.stale-{uuid.uuid4().hex[:8]}")
        try:
            os.rename(self.path, aside)
        except FileNotFoundError:
            return None
        try:
            return aside.read_bytes()
        finally:
            aside.unlink(missing_ok=True)

    def replace_own(self, data: bytes, token: str) -> bool:
        tmp = self.path.with_name(f"{LOCK_NAME}.{token}.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, self.path)
        return True

    def heartbeat(self, data: bytes) -> bool:
        try:
            os.utime(self.path)
        except OSError as e:
            if e.errno == errno.ENOENT:
                return False
        return True

    def delete(self) -> None:
        self.path.unlink(missing_ok=True)

    def __str__(self) -> str:
        return str(self.path)


class _ObjectLockFile:
    """The lock record as an object, every change a conditional PUT (see the module docstring)."""

    def __init__(self, loc: storage.Location):
        # imported here, not at module level: obstore ~0.05 s of import (python -X importtime)
        from obstore.store import S3Store

        bucket, _, self.key = loc.path.partition("/")
        s = storage.S3Settings.from_env()
        kwargs: dict = {}
        if s.endpoint:
            kwargs["endpoint"] = s.endpoint
        if s.region:
            kwargs["region"] = s.region
        if s.access_key and s.secret_key:
            kwargs.update(access_key_id=s.access_key, secret_access_key=s.secret_key)
            if s.session_token:
                kwargs["session_token"] = s.session_token
        # the store's own retries of a throttled or dropped request, as every client's (`io.retry`)
        retry_config, client_options = retry.policy().obstore_config()
        kwargs["retry_config"] = retry_config
        kwargs["client_options"] = {**client_options, **({"allow_http": True} if s.endpoint_scheme == "http" else {})}
        self.store = S3Store(bucket, **kwargs)
        self.uri = loc.uri
        self.etag: str | None = None  # of the record this process last wrote

    def _failed(self, e: Exception) -> Exception:
        """A request that failed after the store's own retries: transient (the run fails) or a refusal."""
        if retry.transient(e):
            return retry.StoreUnavailable(f"{self.uri}: {storage.error_text(e)}")
        return storage.StorageError(f"{self.uri}: {storage.error_text(e)}")

    def read(self) -> tuple[bytes, float, str | None] | None:
        # imported here, not at module level: obstore ~0.05 s of import (python -X importtime)
        import obstore
        from obstore.exceptions import NotFoundError

        def get():  # a body cut mid-way is read again: a GET changes nothing
            got = obstore.get(self.store, self.key)
            return bytes(got.bytes()), got.meta

        try:
            data, meta = retry.call(get, f"{self.uri} (read)")
        except (NotFoundError, FileNotFoundError):
            return None
        except retry.StoreUnavailable:
            raise
        except Exception as e:
            raise self._failed(e) from e
        return data, meta["last_modified"].timestamp(), meta["e_tag"]

    def _put(self, data: bytes, mode) -> str | None:
        # imported here, not at module level: obstore ~0.05 s of import (python -X importtime)
        import obstore
        from obstore.exceptions import AlreadyExistsError, PreconditionError

        try:
            return obstore.put(self.store, self.key, data, mode=mode)["e_tag"]
        except (AlreadyExistsError, PreconditionError):
            return None
        except Exception as e:
            raise self._failed(e) from e

    def create(self, data: bytes) -> bool:
        self.etag = self._put(data, "create")
        return self.etag is not None

    def take_over(self, version) -> bytes | None:
        """Nothing to move aside: the caller's create after this fails, so the stale record is replaced in one
        conditional PUT by `replace_stale`."""
        raise NotImplementedError

    def replace_stale(self, data: bytes, version) -> bool:
        if version is None:
            return False
        etag = self._put(data, {"e_tag": version})
        if etag is None:
            return False
        self.etag = etag
        return True

    def replace_own(self, data: bytes, token: str) -> bool:
        if self.etag is None:
            return False
        etag = self._put(data, {"e_tag": self.etag})
        if etag is None:
            # replaced by a run that took the lock over, or by this very write: it landed, its answer was lost and
            # the store's retry of it was refused, as the ETag had moved. Taken for a takeover, every later beat
            # was refused too and the live run's lock went stale
            got = self.read()
            if got is None or got[0] != data:
                return False
            etag = got[2]
        self.etag = etag
        return True

    def heartbeat(self, data: bytes) -> bool:
        return self.replace_own(data, "")

    def delete(self) -> None:
        # imported here, not at module level: obstore ~0.05 s of import (python -X importtime)
        import obstore
        from obstore.exceptions import NotFoundError

        try:
            retry.call(lambda: obstore.delete(self.store, self.key), f"{self.uri} (delete)")
        except (NotFoundError, FileNotFoundError):
            pass
        except retry.StoreUnavailable:
            raise
        except Exception as e:
            raise self._failed(e) from e

    def __str__(self) -> str:
        return self.uri


class WriterLock:
    """The `_lock` of one warehouse. `acquire` returns the record of a stale lock it broke (or None)."""

    def __init__(self, warehouse: "str | Path | storage.Location", *, stale_seconds: float = 600,
                 heartbeat_seconds: float = 30):
        root = storage.location(warehouse)
        self.warehouse = root
        self.file = _ObjectLockFile(root / LOCK_NAME) if root.remote else _LocalLockFile(root.local / LOCK_NAME)
        self.path = self.file.path if isinstance(self.file, _LocalLockFile) else root / LOCK_NAME
        self.stale_seconds = stale_seconds
        self.heartbeat_seconds = heartbeat_seconds
        self.token: str | None = None
        self.record: dict = {}
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None
        self._write = threading.Lock()  # the heartbeat and update() both re-PUT the record on object storage

    # ------------------------------------------------------------------ reading
    def _read(self) -> tuple[dict, str | None] | None:
        got = self.file.read()
        if got is None:
            return None
        data, beat, version = got
        age = time.time() - beat
        try:
            rec = json.loads(data.decode() or "{}")
        except ValueError:
            rec = {}  # being written right now (created, not yet filled), or damaged
        if not isinstance(rec, dict):
            rec = {}
        rec["age_seconds"] = round(age, 1)
        return rec, version, (data, beat, version)

    def holder(self) -> dict | None:
        """The current lock's record (with `age_seconds`), None when the warehouse is not locked."""
        got = self._read()
        return None if got is None else got[0]

    def holder_and_beat(self) -> tuple[dict, tuple] | None:
        """The current lock's record and what identifies its last heartbeat (it changes at each beat: a watcher's
        way to tell a live holder from a dead one when the heartbeat's age says nothing, see `ahead`)."""
        got = self._read()
        return None if got is None else (got[0], got[2])

    @staticmethod
    def ahead(holder: dict) -> bool:
        """The lock's heartbeat is further in our future than clocks drift under NTP."""
        return holder["age_seconds"] < -SKEW_SECONDS

    @staticmethod
    def _asked(holder: dict) -> bool:
        """A lock of this host naming a process id: whether its holder lives is asked of the process table, no clock
        involved."""
        pid = holder.get("pid")
        return (isinstance(pid, int) and not isinstance(pid, bool) and 0 < pid < 1 << 31
                and holder.get("host") == socket.gethostname())

    def _watched(self, holder: dict) -> bool:
        """A lock of another host or damaged (no pid to ask) whose heartbeat says its holder may be gone: older than
        `stale_seconds`, or in our future by more than clocks drift under NTP. Either may be our clock against the
        holder's (or the store's, whose clock stamps `Last-Modified`): a clock ahead of theirs makes a live holder's
        heartbeat look old, one behind makes it look young for ever. So such a lock is stale only when its
        heartbeat also stays put while this run watches it (see the module docstring)."""
        return not self._asked(holder) and (self.ahead(holder) or self.is_stale(holder))

    def _watch_seconds(self, holder: dict) -> float:
        """How long a heartbeat must stay put to be a dead holder's: three of the holder's beats
        (one may be lost to a blip of the store) and a margin."""
        beat = holder.get("heartbeat_seconds")
        if not isinstance(beat, (int, float)) or isinstance(beat, bool) or not 0 < beat < math.inf:
            beat = self.heartbeat_seconds
        # an edited record's huge heartbeat (1e308) watched no longer than a heartbeat that stopped is stale
        return min(3 * max(beat, self.heartbeat_seconds), max(self.stale_seconds, 3 * self.heartbeat_seconds)) + 5

    def is_stale(self, holder: dict) -> bool:
        pid = holder.get("pid")
        if not isinstance(pid, int) or isinstance(pid, bool) or not 0 < pid < 1 << 31:
            # empty or damaged (no process has that pid: "x", 10**20, -1, which os.kill takes for every process):
            # a writer between create and write, unless it stays so
            return holder["age_seconds"] > max(60.0, self.heartbeat_seconds)
        if holder.get("host") == socket.gethostname():
            if not _pid_alive(pid):
                return True
            start = _proc_start(pid)
            return start is not None and holder.get("pid_start") not in (None, start)
        return holder["age_seconds"] > self.stale_seconds

    # ------------------------------------------------------------------ taking and leaving
    def acquire(self, snapshot_id: str, *, wait_seconds: float = 0, poll_seconds: float = 1.0,
                take_over: bool = True) -> dict | None:
        """Take the lock, waiting up to `wait_seconds` for a live holder; raises LockHeldError after that.
        `take_over=False`: any holder, stale or not, is refused at once (LockHeldError), and a stale lock is left to
        the next run, which records the run it names as abandoned."""
        deadline = time.monotonic() + max(0.0, wait_seconds)
        broken = None
        watched = None  # (what we read of a lock judged by its heartbeat, when we first read it so)
        beat_seen = False  # that lock moved while we watched it: its holder lives (or another run took it over)
        while True:
            record = self._new_record(snapshot_id)
            if self.file.create(json.dumps(record).encode()):
                self._own(record)
                return broken
            got = self._read()
            if got is None:
                continue  # released between our attempt and the read
            holder, version, seen = got
            if holder.get("token") == record["token"]:  # our create landed, its answer was lost: a retry failed
                self._own(record)
                if isinstance(self.file, _ObjectLockFile):
                    self.file.etag = version
                return broken
            if not take_over:
                raise LockHeldError(f"warehouse {self.warehouse} is locked by {describe_holder(holder)} (lock file "
                                    f"{self.file}; a lock its run left when it died is taken over, and the run "
                                    "recorded, by the next rebuild)", holder)
            if self._watched(holder):
                if watched is None or watched[0] != seen:
                    beat_seen = beat_seen or watched is not None
                    watched = (seen, time.monotonic())
                stale = time.monotonic() - watched[1] > self._watch_seconds(holder)
                judged = beat_seen  # a lock only watched so far is waited on, past wait_seconds, until judged
            else:
                watched, judged = None, True
                stale = self.is_stale(holder)
            if stale:
                if isinstance(self.file, _ObjectLockFile):
                    if self.file.replace_stale(json.dumps(record).encode(), version):
                        self._own(record)
                        return {k: v for k, v in holder.items() if k != "age_seconds"}
                    continue  # another run took it over first, or it was released
                data = self.file.take_over(version)
                if data is None:
                    continue  # another run broke it first
                try:
                    broken = json.loads(data.decode() or "{}")
                except ValueError:
                    broken = {}
                continue
            if time.monotonic() >= deadline and judged:
                waited = f" after waiting {wait_seconds:g} s" if wait_seconds else ""
                raise LockHeldError(f"warehouse {self.warehouse} is being written by another run{waited}: "
                                    f"{describe_holder(holder)}; lock file {self.file}", holder)
            time.sleep(poll_seconds)

    def _new_record(self, snapshot_id: str) -> dict:
        return dict(host=socket.gethostname(), pid=os.getpid(), pid_start=_proc_start(os.getpid()),
                    snapshot_id=snapshot_id, since=_utc_iso(time.time()), stage="start", token=uuid.uuid4().hex,
                    heartbeat_seconds=self.heartbeat_seconds)

    def _own(self, record: dict) -> None:
        self.record = record
        self.token = record["token"]
        self._start_heartbeat()

    @property
    def stage(self) -> str | None:
        """The run's stage as this process last recorded it (`update`)."""
        return self.record.get("stage")

    def update(self, **fields) -> None:
        """Record the run's progress (e.g. `stage`) in the lock file (replaced atomically)."""
        if not self.owned():
            return
        self.record.update(fields)
        with self._write:
            self.file.replace_own(json.dumps(self.record).encode(), self.token)

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
            self.file.delete()
        self.token = None

    def _start_heartbeat(self) -> None:
        self._stop.clear()

        def beat():
            while not self._stop.wait(self.heartbeat_seconds):
                try:
                    with self._write:
                        alive = self.file.heartbeat(json.dumps(self.record).encode())
                except (OSError, storage.StorageError, retry.StoreUnavailable):
                    continue  # a blip of the store: the next beat tries again
                if not alive:
                    return

        self._beat = threading.Thread(target=beat, name="offsetlake-lock-heartbeat", daemon=True)
        self._beat.start()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()
