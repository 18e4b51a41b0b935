"""The writer lock on object storage (a local S3-compatible server): the same refusals and takeovers as on disk,
made of conditional PUTs, so that of two runs breaking one stale lock exactly one wins."""
from __future__ import annotations

import json
import socket
import threading
import time

import pytest

from pipelines.io import storage
from pipelines.io.lock import LOCK_NAME, LockHeldError, WriterLock


def _record(wh: str) -> dict:
    return json.loads((storage.location(wh) / LOCK_NAME).read_text())


def _plant(wh: str, **record) -> None:
    (storage.location(wh) / LOCK_NAME).write_text(json.dumps({"since": "2026-11-23T00:00:00Z", **record}))


def test_one_writer_at_a_time_and_the_holder_named(s3_bucket):
    wh = f"{s3_bucket}/wh"
    first = WriterLock(wh)
    assert first.acquire("s1") is None
    first.update(stage="decode")
    assert _record(wh)["stage"] == "decode" and first.owned()
    with pytest.raises(LockHeldError) as e:
        WriterLock(wh).acquire("s2")
    assert f"snapshot s1 since " in str(e.value) and "stage decode" in str(e.value) and wh in str(e.value)
    first.release()
    assert not (storage.location(wh) / LOCK_NAME).exists()
    second = WriterLock(wh)
    assert second.acquire("s2") is None and _record(wh)["snapshot_id"] == "s2"
    second.release()


def test_a_stale_lock_from_another_host_is_taken_over_once(s3_bucket):
    """Eight runs race for one lock whose holder stopped beating: exactly one takes it, and it reports the dead
    run; the others are refused naming the winner."""
    wh = f"{s3_bucket}/wh"
    _plant(wh, host="gone-host", pid=4242, snapshot_id="dead", stage="replay", token="t0", heartbeat_seconds=0.2)
    time.sleep(1.2)
    results: list = []

    def contend(i: int) -> None:
        lock = WriterLock(wh, stale_seconds=1, heartbeat_seconds=0.2)
        try:
            results.append(("won", lock.acquire(f"s{i}", poll_seconds=0.2), lock))
        except LockHeldError as e:
            results.append(("refused", e.holder, lock))

    threads = [threading.Thread(target=contend, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    won = [r for r in results if r[0] == "won"]
    assert len(won) == 1, results
    (_, broken, lock), = won
    assert broken["snapshot_id"] == "dead" and broken["host"] == "gone-host"
    assert _record(wh)["token"] == lock.token
    assert all(r[1]["token"] == lock.token for r in results if r[0] == "refused")
    lock.release()


def test_the_heartbeat_keeps_a_live_lock_fresh_and_a_lost_lock_is_noticed(s3_bucket):
    wh = f"{s3_bucket}/wh"
    lock = WriterLock(wh, heartbeat_seconds=0.3)
    lock.acquire("s1")
    time.sleep(4.0)
    # re-PUT by the heartbeat; S3's Last-Modified has whole seconds, and a loaded machine delays the heartbeat
    assert WriterLock(wh).holder()["age_seconds"] < 3.0
    # another run replaced it (a takeover that believed it stale): this run no longer owns it, updates nothing
    _plant(wh, host="other", pid=1, snapshot_id="s9", token="theirs")
    assert not lock.owned()
    lock.update(stage="write")
    assert _record(wh)["token"] == "theirs"
    lock.release()  # not ours: left in place
    assert _record(wh)["token"] == "theirs"


def test_this_hosts_dead_pid_is_stale_at_once(s3_bucket):
    import subprocess
    import sys

    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    wh = f"{s3_bucket}/wh"
    _plant(wh, host=socket.gethostname(), pid=p.pid, snapshot_id="dead", token="t0")
    lock = WriterLock(wh)
    assert lock.acquire("s1")["snapshot_id"] == "dead"
    lock.release()


def test_an_unreachable_store_is_one_line_naming_the_lock(monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "y")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    with pytest.raises(storage.StorageError, match=r"^s3://bucket/wh/_lock: "):
        WriterLock("s3://bucket/wh").acquire("s1")
