"""A run's scratch directory (`io.scratch`), on disk and on object storage (a local S3-compatible server): what a
task writes there another reads back whole, the run deletes it as it ends, and the next run deletes what a killed
run left."""
from __future__ import annotations

import pickle

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


def test_a_file_written_by_one_task_is_read_whole_by_another(warehouse):
    scratch = new_scratch(warehouse, "run-1")
    moved = pickle.loads(pickle.dumps(scratch))  # as a task receives it
    names = [moved.write(bytes([p]) * 100_000, p) for p in (3, 3, 12)]
    assert len(set(names)) == 3 and all(n.startswith(f"part-{p:05d}-") for n, p in zip(names, (3, 3, 12)))
    assert [scratch.read(n) for n in names] == [bytes([p]) * 100_000 for p in (3, 3, 12)]
    assert scratch.read_all(names[::-1]) == [bytes([p]) * 100_000 for p in (12, 3, 3)]
    scratch.discard()
    assert not _entries(warehouse, SCRATCH_DIR)
    scratch.discard()  # nothing left to delete: no error


def test_a_new_run_deletes_what_a_killed_run_left_and_only_that(warehouse):
    stopped = new_scratch(warehouse, "run-1")
    stopped.write(b"left", 0)
    warehouse.join(SCRATCH_DIR, "stray-file").write_bytes(b"x")
    warehouse.join("_state", "kept").write_bytes(b"y")
    fresh = new_scratch(warehouse, "run-2")
    assert fresh != stopped and not _entries(warehouse, SCRATCH_DIR)
    assert warehouse.join("_state", "kept").read_bytes() == b"y"
    assert fresh.read(fresh.write(b"new", 1)) == b"new"
