"""The server's view of a warehouse over time: which snapshots exist, which one is served by default, and the
in-memory indexes of the snapshots being asked for.

A new snapshot is noticed by watching the `runs` table's commit number (a directory listing, at most once per
`refresh_interval`). Its index is built in the background while the previous latest keeps answering, then the
default switches over in one assignment: each request resolves its snapshot once and answers from one index.
"""
from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict

from pipelines.io.snapshots import (DamagedTable, Snapshot, SnapshotNotFound, SnapshotReader, pick_snapshot,
                                    snapshots_from_runs)
from pipelines.serving.index import SnapshotIndex, load_index

log = logging.getLogger(__name__)


class SnapshotCatalog:
    def __init__(self, reader: SnapshotReader, *, refresh_interval: float = 1.0, max_indexes: int = 3,
                 retry_interval: float = 30.0):
        self.reader = reader
        self.refresh_interval = refresh_interval
        # while nothing is served, how often the refresher builds the latest snapshot's failed index again: a table
        # repaired in place adds no run, and a load balancer sends no request to a server whose /health is a 503
        self.retry_interval = retry_interval
        self.max_indexes = max(2, max_indexes)
        self._lock = threading.Lock()  # guards the fields below
        self._runs_version: int | None = -1  # never read: a Delta version is >= 0, None a missing `runs`
        self._checked_at = 0.0
        self._snapshots: list[Snapshot] = []
        self._indexes: OrderedDict[tuple, SnapshotIndex] = OrderedDict()
        self._building: dict[tuple, threading.Event] = {}
        self._serving: Snapshot | None = None  # the default snapshot whose index is ready
        self._latest: Snapshot | None = None
        self._by_id: dict[str, Snapshot] = {}
        self.last_error: str | None = None
        self._last_damage = False  # the last build failed on a damaged table (`DamagedTable`), not on a bug
        self._damaged_table: str | None = None  # its name (the exception is not kept: its frames hold the read)
        # per snapshot whose last index build failed, until one succeeds: its error, damaged table (or None), and
        # when it failed (time.monotonic())
        self._failed: dict[tuple, tuple[str, str | None, float]] = {}
        self._refresher: threading.Thread | None = None
        self._stop = threading.Event()

    # --- runs ----------------------------------------------------------------------------------------------
    def refresh(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._checked_at < self.refresh_interval:
            return
        version = self.reader.runs_version()
        with self._lock:
            self._checked_at = now
            if version == self._runs_version and not force:
                return
        snaps = snapshots_from_runs(self.reader.runs())
        with self._lock:
            self._runs_version = version
            self._snapshots = snaps
            self._by_id = {x.snapshot_id: x for x in snaps}
            try:
                latest = pick_snapshot(snaps, None)
            except SnapshotNotFound:
                latest = None
            previous, self._latest = self._latest, latest
            if latest is not None and self._serving is not None and latest.cache_key != self._serving.cache_key:
                if latest.cache_key in self._indexes:
                    self._serving = latest
                else:
                    self._start_build(latest)
            elif (latest is not None and self._serving is None and self._refresher is not None
                  and (previous is None or latest.cache_key != previous.cache_key)):
                # nothing served yet (the first latest could not be indexed): a new run's snapshot is indexed as it
                # comes, as it would replace a served one, rather than when a request happens to ask for it
                self._start_build(latest)

    def _maybe_refresh(self) -> None:
        """Requests do not look at the Delta log while the background refresher runs (warm() starts it)."""
        if self._refresher is None:
            self.refresh()

    def _refresh_loop(self) -> None:
        while not self._stop.wait(max(self.refresh_interval, 0.05)):
            try:
                self.refresh(force=False)
            except Exception:  # a half-written runs commit, a transient I/O error: try again next tick
                log.exception("checking the runs table failed")
            self._retry_latest()

    def _retry_latest(self) -> None:
        with self._lock:
            latest, failed = self._latest, self._failed.get(self._latest.cache_key) if self._latest else None
            if (self._serving is None and failed is not None and latest.cache_key not in self._building
                    and time.monotonic() - failed[2] >= self.retry_interval):
                self._start_build(latest)

    def start_refresher(self) -> None:
        with self._lock:
            if self._refresher is not None:
                return
            self._refresher = threading.Thread(target=self._refresh_loop, name="runs-refresher", daemon=True)
        self._refresher.start()

    def stop(self) -> None:
        self._stop.set()

    def snapshots(self) -> list[Snapshot]:
        self._maybe_refresh()
        return list(self._snapshots)

    def ready_index(self, snapshot_id: str | None = None) -> SnapshotIndex | None:
        """The index that answers a request if it is already built, without blocking or reading anything;
        None when the caller must take the slow path (resolve(), which may wait for a build or raise)."""
        if self._refresher is None:
            return None
        if snapshot_id is None:
            snap = self._serving
        else:
            snap = self._by_id.get(snapshot_id)
            if snap is None or not snap.readable:
                return None
        if snap is None:
            return None
        return self._indexes.get(snap.cache_key)  # dict read: atomic under the GIL

    # --- indexes -------------------------------------------------------------------------------------------
    def _start_build(self, snap: Snapshot) -> threading.Event:
        """Build `snap`'s index in a thread (lock held by the caller); one build per snapshot at a time."""
        ev = self._building.get(snap.cache_key)
        if ev is not None:
            return ev
        ev = self._building[snap.cache_key] = threading.Event()
        threading.Thread(target=self._build, args=(snap, ev), name=f"index-{snap.snapshot_id}", daemon=True).start()
        return ev

    def _build(self, snap: Snapshot, ev: threading.Event) -> None:
        try:
            started = time.perf_counter()
            idx = load_index(self.reader, snap)
            log.info("indexed snapshot %s in %.2fs", snap.snapshot_id, time.perf_counter() - started)
            with self._lock:
                self._indexes[snap.cache_key] = idx
                self._indexes.move_to_end(snap.cache_key)
                latest = self._latest
                if latest is not None and latest.cache_key == snap.cache_key:
                    self._serving = snap
                self._evict()
                self.last_error = None
                self._failed.pop(snap.cache_key, None)
        except Exception as e:  # keep serving the previous snapshot; the request that waits sees the error
            damaged = isinstance(e, DamagedTable)
            error = f"indexing snapshot {snap.snapshot_id!r} failed: {e}"
            with self._lock:
                again = self._failed.get(snap.cache_key, (None,))[0] == error
                self.last_error = error
                self._last_damage = damaged
                self._damaged_table = e.table if damaged else None
                self._failed[snap.cache_key] = (error, self._damaged_table, time.monotonic())
            if again:  # a retry (a request's, the refresher's) failing as the last one did: said once already
                log.debug("%s", error)
            elif damaged:  # the warehouse's damage, said in one line: a traceback would say nothing more
                log.error("indexing snapshot %s failed: %s", snap.snapshot_id, e)
            else:
                log.exception("indexing snapshot %s failed", snap.snapshot_id)
        finally:
            with self._lock:
                self._building.pop(snap.cache_key, None)
            ev.set()

    def _evict(self) -> None:
        keep = {s.cache_key for s in (self._serving, self._latest) if s is not None}
        while len(self._indexes) > self.max_indexes:
            for key in self._indexes:
                if key not in keep:
                    del self._indexes[key]
                    break
            else:
                return

    def index_for(self, snap: Snapshot, timeout: float = 300.0) -> SnapshotIndex:
        while True:
            with self._lock:
                idx = self._indexes.get(snap.cache_key)
                if idx is not None:
                    self._indexes.move_to_end(snap.cache_key)
                    return idx
                ev = self._start_build(snap)
            if not ev.wait(timeout):
                raise TimeoutError(f"indexing snapshot {snap.snapshot_id!r} takes longer than {timeout}s")
            with self._lock:
                if snap.cache_key not in self._indexes and self.last_error:
                    # a damaged table is the API's JSON 500 naming it (as a history read's is), not a bare one
                    if self._last_damage:
                        raise DamagedTable(self.last_error, self._damaged_table)
                    raise RuntimeError(self.last_error)

    def resolve(self, snapshot_id: str | None = None) -> SnapshotIndex:
        """The index that answers a request: the named snapshot, or the default (latest ready) one."""
        self._maybe_refresh()
        if snapshot_id is not None:
            return self.index_for(pick_snapshot(self._snapshots, snapshot_id))
        with self._lock:
            serving = self._serving
        if serving is None:  # first request: wait for the latest snapshot
            snap = pick_snapshot(self._snapshots, None)
            idx = self.index_for(snap)
            with self._lock:
                if self._serving is None:
                    self._serving = snap
            return idx
        return self.index_for(serving)

    def status(self) -> dict:
        """What `/health` says. `latest_failed`: the latest snapshot's last index build failed and none has
        succeeded since, as (error, damaged table or None); with nothing served the server cannot answer by
        default until its table is repaired (a request or the refresher, every `retry_interval`, builds it again)
        or a run adds a snapshot that indexes."""
        self._maybe_refresh()
        with self._lock:
            latest = self._latest
            failed = None
            if latest is not None and latest.cache_key in self._failed:  # a retry under way has not mended it yet
                failed = self._failed[latest.cache_key][:2]
            return {
                "serving": self._serving,
                "latest": latest,
                "indexing": [k[0] for k in self._building],
                "cached": [k[0] for k in self._indexes],
                "error": self.last_error,
                "latest_failed": failed,
            }

    def warm(self) -> None:
        """Start indexing the latest snapshot right away (the server calls this at startup)."""
        self.refresh(force=True)
        with self._lock:
            if self._latest is not None and self._serving is None:
                self._start_build(self._latest)
        self.start_refresher()
