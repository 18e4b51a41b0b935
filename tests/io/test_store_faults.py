"""Every way offsetlake reads and writes an object store, through a proxy that misbehaves as S3 does under
throttling (tests/faultproxy.py in front of moto): 503 SlowDown, connections reset mid-body, slow answers,
CompleteMultipartUpload failing inside a 200, a request whose answer is lost. What is retried comes out exactly as
without faults; a fault that outlasts the retries is `StoreUnavailable` naming the URI; a refusal is never retried.
No JVM: the reads and writes a Spark task makes are made here, by the same functions."""
from __future__ import annotations

import json
import os

import pyarrow as pa
import pytest

from pipelines.io import delta, retry, storage
from pipelines.io.retry import StoreRetry, StoreUnavailable
from tests.faultproxy import FaultProxy

# quick to give up, so the outlasting faults take a second, not two minutes
POLICY = StoreRetry(attempts=8, first_backoff_seconds=0.02, max_backoff_seconds=0.2, total_seconds=20,
                    request_timeout_seconds=10, connect_timeout_seconds=5)


@pytest.fixture
def proxy(s3_server, s3_bucket, monkeypatch):
    """The proxy in front of the test's bucket's server, the AWS environment pointing at it, and this process
    retrying with POLICY."""
    with FaultProxy(s3_server, seed=11) as p:
        monkeypatch.setenv("AWS_ENDPOINT_URL", p.url)
        monkeypatch.setattr(retry, "_policy", POLICY)
        p.bucket = s3_bucket
        yield p


@pytest.mark.slow  # waits out 30 % of the store's requests failing
def test_location_operations_outlast_throttling_and_resets(proxy):
    proxy.set_rates(slowdown=0.3, reset=0.3, slow=0.1, slow_seconds=0.05)
    root = storage.location(proxy.bucket + "/wh")
    data = os.urandom(2 << 20)  # 2 MiB: several reads, each of which may be cut
    for i in range(3):
        (root / f"d/{i}.bin").write_bytes(data[i:])
    assert [i.path.rsplit("/", 1)[1] for i in root.listdir(recursive=True) if i.size] == [f"{i}.bin" for i in range(3)]
    for i in range(3):
        f = root / f"d/{i}.bin"
        assert f.exists() and f.size() == len(data) - i
        assert f.read_bytes() == data[i:]
        with f.as_local_file(start=1 << 20, head=16) as local:
            got = open(local, "rb").read()
        assert got[:16] == data[i:i + 16] and got[1 << 20:] == data[i + (1 << 20):]
    (root / "d/0.bin").delete_file()
    root.join("d").delete_dir()
    assert not root.join("d").is_dir()
    counts = proxy.counts
    assert counts["slowdown"] > 5 and counts["reset"] > 2, counts


def test_a_fault_that_outlasts_the_retries_names_the_uri(proxy, monkeypatch):
    monkeypatch.setattr(retry, "_policy", StoreRetry(attempts=3, first_backoff_seconds=0.01,
                                                     max_backoff_seconds=0.05, total_seconds=5))
    f = storage.location(proxy.bucket + "/x.json")
    f.write_text("{}")
    proxy.set_rates(slowdown=1.0)
    with pytest.raises(StoreUnavailable) as e:
        f.read_text()
    assert str(e.value).startswith(f"{f.uri} (read): ") and "503" in str(e.value)
    assert "still failing after 3 tries" in str(e.value)
    assert not isinstance(e.value, (OSError, storage.StorageError))  # never a quarantine row nor a usage error


def test_a_refusal_is_not_retried(proxy):
    proxy.set_rates(slowdown=0.0)
    with pytest.raises((storage.StorageError, FileNotFoundError)) as e:  # no such bucket: the user's to fix
        storage.location("s3://no-such-bucket-offsetlake/x").read_bytes()
    assert not isinstance(e.value, StoreUnavailable)
    assert proxy.counts["forwarded"] <= 2  # asked once (a HEAD, a GET), never again


def test_the_writer_lock_under_throttling(proxy):
    from pipelines.io.lock import WriterLock

    proxy.set_rates(slowdown=0.3, reset=0.3)
    for n in range(3):
        lock = WriterLock(proxy.bucket + "/wh")
        assert lock.acquire(f"run-{n}") is None
        lock.update(stage="decode")
        assert lock.holder()["stage"] == "decode" and lock.owned()
        lock.release()
        assert WriterLock(proxy.bucket + "/wh").holder() is None
    assert proxy.injected() > 3


def test_a_lock_whose_create_answer_was_lost_is_ours(proxy):
    from pipelines.io.lock import WriterLock

    proxy.fail_next(1, method="PUT", path_contains="/wh/_lock", fault="lost")
    lock = WriterLock(proxy.bucket + "/wh")
    assert lock.acquire("run", wait_seconds=0) is None and lock.owned()
    lock.release()
    assert proxy.counts["lost"] == 1


def test_a_lock_whose_update_answer_was_lost_is_still_ours(proxy):
    """An update (or heartbeat) lands and its answer is lost: the store's retry of the conditional PUT is refused
    (the ETag moved), and the holder took its own write for a takeover: every later update and heartbeat was refused
    too, so a live run's lock went stale and another run could take it over. The holder now finds its own record."""
    from pipelines.io.lock import WriterLock

    lock = WriterLock(proxy.bucket + "/wh", heartbeat_seconds=3600)
    assert lock.acquire("run") is None
    proxy.fail_next(1, method="PUT", path_contains="/wh/_lock", fault="lost")
    lock.update(stage="decode")
    assert proxy.counts["lost"] == 1 and lock.holder()["stage"] == "decode"
    lock.update(stage="write")
    assert lock.holder()["stage"] == "write" and lock.owned()
    assert lock.file.heartbeat(json.dumps(lock.record).encode())  # the heartbeat's own call: still alive
    lock.release()
    assert WriterLock(proxy.bucket + "/wh").holder() is None


def _runs_table(n: int) -> pa.Table:
    from schemas.tables import TABLES

    return pa.Table.from_pylist([{"snapshot_id": f"s{i}", "status": "succeeded"} for i in range(n)],
                                schema=TABLES["runs"])


def test_a_commit_whose_answer_was_lost_is_committed_once(proxy):
    """object_store retries the PUT of the commit file whose 200 the proxy replaced by a 503, finds the file there,
    and delta-rs would commit the same files again at the next version; the commit finds its own token instead."""
    from schemas.tables import TABLES

    uri = proxy.bucket + "/wh/runs"
    dt = delta.ensure_table(uri, TABLES["runs"])
    rel = delta.new_write_dir()
    written = delta.write_table_files(_runs_table(3), uri, rel, TABLES["runs"])
    adds = delta.collect_add_actions(uri, rel, TABLES["runs"], None, written)
    proxy.fail_next(1, method="PUT", path_contains="_delta_log/00000000000000000001.json", fault="lost")
    assert delta.commit(dt, TABLES["runs"], adds) == 1
    again = delta.open_table(uri)
    assert again.version() == 1 and [h["operation"] for h in again.history()] == ["WRITE", "CREATE TABLE"]
    assert again.to_pyarrow_table().num_rows == 3 and proxy.counts["lost"] == 1


def test_parquet_files_written_and_read_under_faults(proxy):
    """A table's files as a task writes them (written locally, uploaded whole, CompleteMultipartUpload failing
    inside its 200 too) and reads them (a read cut mid-file goes on after the batches already given)."""
    from schemas.tables import TABLES

    proxy.set_rates(slowdown=0.3, reset=0.3, complete_error=0.5)
    uri = proxy.bucket + "/wh/runs"
    rel = delta.new_write_dir()
    table = _runs_table(200_000)
    written = delta.write_table_files(table, uri, rel, TABLES["runs"])
    back = delta.read_table_files(uri, [f"{rel}/{w.name}" for w in written], TABLES["runs"])
    assert back.column("snapshot_id").to_pylist() == table.column("snapshot_id").to_pylist()
    assert proxy.counts["reset"] > 0, proxy.counts


@pytest.mark.slow  # waits out 30 % of the store's requests failing
def test_a_warehouse_written_and_read_under_throttling(proxy):
    """The `runs` rows a run writes (a predicate overwrite of delta-rs) and reads back, at 30 %."""
    from pipelines.io.warehouse import Warehouse

    proxy.set_rates(slowdown=0.3, reset=0.2)
    wh = Warehouse(proxy.bucket + "/wh")
    for i in range(3):
        wh.mark_run(f"s{i}", {"status": "succeeded", "kind": "scheduled"})
    wh.mark_run("s1", {"status": "failed", "summary": {"error": "x", "stage": "decode"}})
    assert [(r["snapshot_id"], r["status"]) for r in wh.snapshots()] == [
        ("s0", "succeeded"), ("s1", "failed"), ("s2", "succeeded")]
    assert proxy.injected() > 3


def test_a_commit_whose_outcome_is_unknown_keeps_its_files(proxy, monkeypatch):
    """The history's commit lands, its answer is lost, and every read of the log fails after it, past the retries:
    the run cannot tell whether it landed. Its files must stay (a vacuum judges them later): deleting them left a
    history that referenced files it no longer had, and every later run failed reading it."""
    from deltalake import DeltaTable

    from pipelines.io.table_rows import ArrowRows
    from pipelines.io.warehouse import Warehouse
    from tests.io.io_warehouse_data import offset_commit_rows
    from tests.io.stats_data import arrow_table

    monkeypatch.setattr(retry, "_policy", StoreRetry(attempts=2, first_backoff_seconds=0.01,
                                                     max_backoff_seconds=0.05, total_seconds=3))
    wh = Warehouse(proxy.bucket + "/wh")
    dt = delta.ensure_table(wh.root / "offset_commits", arrow_table("offset_commits", []).schema)
    rows = arrow_table("offset_commits", offset_commit_rows([(p, o, None) for p in range(2) for o in range(5)]))
    proxy.fail_next(1, method="PUT", path_contains="_delta_log/00000000000000000001.json", fault="lost")
    # the reads that would tell whether it landed fail too
    proxy.fail_next(10 ** 6, method="GET", path_contains="_delta_log", after_lost=True)
    with pytest.raises(StoreUnavailable):
        wh._write_history(dt, "s1", ArrowRows(rows, clustered=True))
    proxy.clear()
    landed = DeltaTable(str(wh.root / "offset_commits"), storage_options=storage.storage_options(str(wh.root)))
    assert landed.version() == 1
    assert landed.to_pyarrow_table().num_rows == 10  # every file the commit references is there
