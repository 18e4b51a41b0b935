"""A run's scratch directory (`io.scratch`), on disk and on object storage (a local S3-compatible server): what a
task writes there another reads back whole, the run deletes it as it ends, and the next run deletes what a killed
run left."""
from __future__ import annotations

import pickle

import pyarrow as pa
import pytest

from pipelines.io import storage
from pipelines.io.scratch import SCRATCH_DIR, new_scratch


@pytest.fixture(params=["local", "s3"])
def warehouse(request, tmp_path) -> storage.Location:
    if request.param == "local":
        return storage.location(str(tmp_path / "wh"))
    return storage.location(f"{request.getfixturevalue('s3_bucket')}/wh")


def _entries(warehouse: storage.Location, *parts: str) -> list[str]:
    return [warehouse.join(*parts).child_of(i).name for i in warehouse.join(*parts).listdir(recursive=True)]


def _rows(p: int) -> pa.Table:
    """Rows of a partition, with a nested column (as group events and kept rows have), large enough to compress."""
    return pa.table({"p": pa.array([p] * 20_000, pa.int32()),
                     "members": pa.array([[{"id": f"m{i}", "topics": ["t"] * (i % 3)}] for i in range(20_000)])})


def test_a_file_written_by_one_task_is_read_whole_by_another(warehouse):
    scratch = new_scratch(warehouse, "run-1")
    moved = pickle.loads(pickle.dumps(scratch))  # as a task receives it
    names = [moved.write_rows(_rows(p), p) for p in (3, 3, 12)]
    assert len(set(names)) == 3 and all(n.startswith(f"part-{p:05d}-") for n, p in zip(names, (3, 3, 12)))
    assert all(scratch.read_rows(n).equals(_rows(p)) for n, p in zip(names, (3, 3, 12)))
    got = scratch.read_all_rows(names[::-1])
    assert all(t.equals(_rows(p)) for t, p in zip(got, (12, 3, 3)))
    # on an object store the file is compressed (`io.blobs`), on a disk it is read mapped: either way a reader
    # holds rows that outlive the file (the run discards its scratch while the write may still hold them)
    scratch.discard()
    assert all(t.equals(_rows(p)) for t, p in zip(got, (12, 3, 3)))
    assert not _entries(warehouse, SCRATCH_DIR)
    scratch.discard()  # nothing left to delete: no error


def test_a_new_run_deletes_what_a_killed_run_left_and_only_that(warehouse):
    stopped = new_scratch(warehouse, "run-1")
    stopped.write_rows(_rows(0), 0)
    warehouse.join(SCRATCH_DIR, "stray-file").write_bytes(b"x")
    warehouse.join("_state", "kept").write_bytes(b"y")
    fresh = new_scratch(warehouse, "run-2")
    assert fresh != stopped and not _entries(warehouse, SCRATCH_DIR)
    assert warehouse.join("_state", "kept").read_bytes() == b"y"
    assert fresh.read_rows(fresh.write_rows(_rows(1), 1)).equals(_rows(1))
