"""The writer lock: one run per warehouse, a clear refusal naming the holder, stale locks taken over (dead pid on
this host, old heartbeat from another host), and a vacuum that refuses to run under another writer."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time

import pytest

from pipelines.io.lock import LOCK_NAME, LockHeldError, WriterLock, _proc_start


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def _plant(wh, **record):
    wh.mkdir(parents=True, exist_ok=True)
    (wh / LOCK_NAME).write_text(json.dumps({"since": "2026-11-23T00:00:00Z", "stage": "replay", **record}))


def test_second_writer_is_refused_with_the_holder_named(tmp_path):
    first = WriterLock(tmp_path)
    assert first.acquire("s1") is None
    first.update(stage="decode")
    t0 = time.monotonic()
    with pytest.raises(LockHeldError) as e:
        WriterLock(tmp_path).acquire("s2")
    assert time.monotonic() - t0 < 1
    msg = str(e.value)
    assert f"host {socket.gethostname()} pid {os.getpid()} snapshot s1 since " in msg and "stage decode" in msg
    first.release()
    assert not (tmp_path / LOCK_NAME).exists()
    second = WriterLock(tmp_path)
    assert second.acquire("s2") is None
    second.release()


def test_a_waiting_writer_gets_the_lock_when_the_holder_leaves(tmp_path):
    first = WriterLock(tmp_path)
    first.acquire("s1")
    threading.Timer(0.5, first.release).start()
    second = WriterLock(tmp_path)
    t0 = time.monotonic()
    second.acquire("s2", wait_seconds=10, poll_seconds=0.05)
    assert 0.4 < time.monotonic() - t0 < 5
    assert json.loads((tmp_path / LOCK_NAME).read_text())["snapshot_id"] == "s2"
    second.release()
    with pytest.raises(LockHeldError, match="after waiting 0.2 s"):
        held = WriterLock(tmp_path)
        held.acquire("s3")
        WriterLock(tmp_path).acquire("s4", wait_seconds=0.2, poll_seconds=0.05)


def test_lock_of_a_dead_process_on_this_host_is_taken_over(tmp_path):
    pid = _dead_pid()
    _plant(tmp_path, host=socket.gethostname(), pid=pid, snapshot_id="killed")
    lock = WriterLock(tmp_path)
    broken = lock.acquire("next")
    assert broken["pid"] == pid and broken["snapshot_id"] == "killed" and broken["stage"] == "replay"
    assert lock.owned()
    assert not list(tmp_path.glob(LOCK_NAME + ".stale-*"))
    lock.release()


def test_a_reused_pid_does_not_keep_a_dead_runs_lock(tmp_path):
    # our own (live) pid, but recorded with another start time: the process that took the lock is gone
    _plant(tmp_path, host=socket.gethostname(), pid=os.getpid(), pid_start="1", snapshot_id="old")
    if _proc_start(os.getpid()) is None:
        pytest.skip("no /proc")
    lock = WriterLock(tmp_path)
    assert lock.acquire("next")["snapshot_id"] == "old"
    lock.release()


@pytest.mark.parametrize("pid", ["x", 10 ** 20, -1, 0, True, 1.5])
def test_a_lock_naming_no_pid_a_process_can_have_is_damaged_not_a_traceback(tmp_path, pid):
    """A lock file of this host whose pid is no process id (edited or damaged): before, a traceback (ValueError,
    OverflowError) or, for -1, a lock held for ever (os.kill(-1, 0) asks every process). Now it is a damaged lock:
    held while it may be being written, taken over once it stays so."""
    _plant(tmp_path, host=socket.gethostname(), pid=pid, snapshot_id="edited")
    with pytest.raises(LockHeldError, match="snapshot edited"):
        WriterLock(tmp_path).acquire("mine")
    old = time.time() - 61
    os.utime(tmp_path / LOCK_NAME, (old, old))
    lock = WriterLock(tmp_path, heartbeat_seconds=0.1)
    assert lock.acquire("mine", poll_seconds=0.05)["snapshot_id"] == "edited"
    lock.release()


def test_another_hosts_lock_is_stale_only_after_its_heartbeat_stops(tmp_path):
    _plant(tmp_path, host="elsewhere.example", pid=1, snapshot_id="remote", heartbeat_seconds=0.2)
    with pytest.raises(LockHeldError, match="host elsewhere.example pid 1 snapshot remote"):
        WriterLock(tmp_path, stale_seconds=600, heartbeat_seconds=0.2).acquire("mine")
    old = time.time() - 601
    os.utime(tmp_path / LOCK_NAME, (old, old))
    lock = WriterLock(tmp_path, stale_seconds=600, heartbeat_seconds=0.2)
    t0 = time.monotonic()
    assert lock.acquire("mine", poll_seconds=0.05)["snapshot_id"] == "remote"
    assert time.monotonic() - t0 > 0.6  # watched for three of its heartbeats first
    lock.release()


def test_a_live_lock_of_a_host_whose_clock_is_behind_ours_is_not_taken_over(tmp_path):
    """Our clock a day ahead of the holder's (or of the store's, whose clock stamps the heartbeat): its heartbeat
    looks a day old while its holder beats. Before, the lock was judged stale by that age and taken over at once,
    and two runs wrote (and vacuumed) one warehouse. Now a heartbeat that moves while watched is a live holder's."""
    _plant(tmp_path, host="elsewhere.example", pid=1, snapshot_id="live", heartbeat_seconds=0.2)
    stop = threading.Event()

    def beat():  # the live holder on the host behind, touching its lock as a heartbeat does
        while not stop.wait(0.1):
            then = time.time() - 86_400
            os.utime(tmp_path / LOCK_NAME, (then, then))

    threading.Thread(target=beat, daemon=True).start()
    try:
        with pytest.raises(LockHeldError, match="snapshot live"):
            WriterLock(tmp_path, stale_seconds=600, heartbeat_seconds=0.2).acquire("mine", wait_seconds=1.5,
                                                                                   poll_seconds=0.05)
        assert json.loads((tmp_path / LOCK_NAME).read_text())["snapshot_id"] == "live"
    finally:
        stop.set()


def test_another_hosts_lock_stamped_ahead_of_our_clock_is_judged_by_whether_its_heartbeat_moves(tmp_path):
    """A lock whose mtime is a day ahead (its host's clock ahead): before, every run was refused until that day had
    passed plus lock_stale_minutes. Now a heartbeat that stays put while watched for three beats is a dead
    holder's, taken over; one that moves is a live holder's, refused once wait_seconds is over."""
    _plant(tmp_path, host="elsewhere.example", pid=1, snapshot_id="ahead", heartbeat_seconds=0.2)
    ahead = time.time() + 86_400
    os.utime(tmp_path / LOCK_NAME, (ahead, ahead))
    lock = WriterLock(tmp_path, stale_seconds=600, heartbeat_seconds=0.2)
    t0 = time.monotonic()
    assert lock.acquire("mine", poll_seconds=0.05)["snapshot_id"] == "ahead"
    assert 0.6 < time.monotonic() - t0 < 30
    lock.release()

    _plant(tmp_path, host="elsewhere.example", pid=1, snapshot_id="live", heartbeat_seconds=0.2)
    stop = threading.Event()

    def beat():  # the live holder on the host ahead, touching its lock as a heartbeat does
        while not stop.wait(0.1):
            now = time.time() + 86_400
            os.utime(tmp_path / LOCK_NAME, (now, now))

    threading.Thread(target=beat, daemon=True).start()
    try:
        with pytest.raises(LockHeldError, match="snapshot live"):
            WriterLock(tmp_path, stale_seconds=600, heartbeat_seconds=0.2).acquire("mine", poll_seconds=0.05)
        assert json.loads((tmp_path / LOCK_NAME).read_text())["snapshot_id"] == "live"
    finally:
        stop.set()


@pytest.mark.parametrize("record", [dict(host="elsewhere.example", pid=1, heartbeat_seconds=1e308),
                                    dict(host=socket.gethostname(), pid="x")])
def test_a_lock_stamped_ahead_with_a_record_edited_is_watched_for_a_bounded_time(tmp_path, record):
    """A damaged record (no pid to ask) a day ahead was never stale for a day (its age was judged); one naming a
    heartbeat of 1e308 s was watched for ever. Both are watched as long as a heartbeat that stopped is stale."""
    _plant(tmp_path, snapshot_id="edited", **record)
    ahead = time.time() + 86_400
    os.utime(tmp_path / LOCK_NAME, (ahead, ahead))
    lock = WriterLock(tmp_path, stale_seconds=0.3, heartbeat_seconds=0.1)
    t0 = time.monotonic()
    assert lock.acquire("mine", poll_seconds=0.05)["snapshot_id"] == "edited"
    assert time.monotonic() - t0 < 30
    lock.release()


def test_heartbeat_keeps_a_long_run_fresh(tmp_path):
    lock = WriterLock(tmp_path, heartbeat_seconds=0.1)
    lock.acquire("long")
    old = time.time() - 10_000
    os.utime(tmp_path / LOCK_NAME, (old, old))
    time.sleep(0.5)
    assert lock.holder()["age_seconds"] < 5
    lock.release()


def test_only_the_owner_releases(tmp_path):
    a = WriterLock(tmp_path)
    a.acquire("a")
    b = WriterLock(tmp_path)
    with pytest.raises(LockHeldError):
        b.acquire("b")
    b.release()  # not its lock: nothing happens
    assert (tmp_path / LOCK_NAME).exists()
    a.release()


def test_vacuum_refuses_to_run_under_another_writer(tmp_path):
    from pipelines.io.warehouse import Warehouse, WarehouseError

    wh = Warehouse(tmp_path)
    other = WriterLock(tmp_path)
    other.acquire("in-flight")
    with pytest.raises(WarehouseError, match="snapshot in-flight"):
        wh.retain(keep=1)
    mine = WriterLock(tmp_path)
    with pytest.raises(LockHeldError):
        mine.acquire("x")
    other.release()
    mine.acquire("x")
    assert wh.retain(keep=1, lock=mine)["deleted"] == []  # its own lock: allowed
    mine.release()


def test_a_run_starting_while_retain_deletes_is_refused_and_loses_nothing(tmp_path, monkeypatch):
    """`retain` without a run's lock looked at the lock once, before deleting: a run that took the lock just after
    it staged its files, and the vacuum (every file no commit references) deleted them, then dropped the partitions
    of the snapshot it committed. Paused past its guard (deterministically: `snapshots` is its first read), the
    clean-up now holds the lock, so the run is refused; once it is done the lock is free again."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from deltalake import write_deltalake

    from pipelines.io.warehouse import Warehouse

    table = tmp_path / "loaded_offsets"
    write_deltalake(str(table), pa.table({"snapshot_id": ["s1"], "x": [1]}), partition_by=["snapshot_id"])
    wh = Warehouse(tmp_path)
    past_guard, resume = threading.Event(), threading.Event()
    real = Warehouse.snapshots

    def paused(self):
        past_guard.set()
        assert resume.wait(60)
        return real(self)

    monkeypatch.setattr(Warehouse, "snapshots", paused)
    done: dict = {}

    def clean_up():
        try:
            done["report"] = wh.retain(keep=1)
        except BaseException as e:  # noqa: BLE001 - handed to the test's thread
            done["error"] = e

    worker = threading.Thread(target=clean_up)
    worker.start()
    assert past_guard.wait(60)
    run = WriterLock(tmp_path)
    staged = table / "snapshot_id=s2" / "part-00000-staged.parquet"
    try:
        run.acquire("s2")
    except LockHeldError as e:
        refused = str(e)
    else:  # the run goes on: Spark stages its files before the commit
        refused = None
        staged.parent.mkdir(parents=True)
        pq.write_table(pa.table({"x": [2]}), staged)
    resume.set()
    worker.join(60)
    assert "error" not in done, done
    fate = "survived" if staged.exists() else "was deleted"
    assert refused is not None, f"a run started under retain; its staged file {fate}"
    assert "snapshot (retain)" in refused and "stage retain" in refused
    assert run.acquire("s2") is None  # the clean-up gave the lock back
    run.release()


def test_retain_leaves_a_stale_lock_to_the_next_run(tmp_path):
    """A lock whose run died is refused, not broken: the next run takes it over and records that run as
    abandoned, which a clean-up breaking it would have lost."""
    from pipelines.io.warehouse import Warehouse, WarehouseError

    _plant(tmp_path, host=socket.gethostname(), pid=_dead_pid(), snapshot_id="died", token="t-died")
    with pytest.raises(WarehouseError, match="snapshot died .*taken over, and the run recorded, by the next rebuild"):
        Warehouse(tmp_path).retain(keep=1)
    assert json.loads((tmp_path / LOCK_NAME).read_text())["token"] == "t-died"
    nxt = WriterLock(tmp_path)
    assert nxt.acquire("next")["snapshot_id"] == "died"
    nxt.release()
