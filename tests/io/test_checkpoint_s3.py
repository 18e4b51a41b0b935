"""Incremental checkpoints and saved state rows in a warehouse on object storage (a local S3-compatible server):
what is written reads back as on disk, and the state of deleted snapshots is removed."""
from __future__ import annotations

import pyarrow as pa

from pipelines.io import checkpoint as cp
from pipelines.io import storage


def test_checkpoint_and_state_rows_round_trip_on_s3(s3_bucket, tmp_path):
    rows = pa.table({"offsets_partition": pa.array([0, 3], pa.int32()), "record_offset": pa.array([7, 9], pa.int64())})
    data = {"format": 1, "partitions": {"3": {"next_offset": 10}}}
    for wh in (f"{s3_bucket}/wh", str(tmp_path / "wh")):
        assert cp.read_checkpoint(wh, "s1") is None
        cp.write_checkpoint(wh, "s1", data)
        assert cp.read_checkpoint(wh, "s1") == data
        saved = cp.write_state_rows(wh, "s1", rows)
        state = saved.stage.uri
        assert cp.read_state_rows(state, saved.files).equals(rows) and cp.count_state_rows(state, saved.files) == 2
        # a task's file of the same directory that no checkpoint names (a failed attempt's) is not read
        cp.StateStage(state).write(rows, "other")
        assert cp.count_state_rows(state, saved.files) == 2 and cp.count_state_rows(state) == 4
        again = cp.write_state_rows(wh, "s1", rows.slice(0, 1))  # a rerun writes a state of its own
        cp.remove_other_states(wh, "s1", keep=again.stage.name)
        assert cp.count_state_rows(again.stage.uri, again.files) == 1 and not storage.location(state).exists()
        again.discard()  # no checkpoint named it: deleted
        assert not storage.location(again.stage.uri).exists()
    remote = storage.location(f"{s3_bucket}/wh")
    assert (remote / "_checkpoints" / "s1.json").is_file()


def test_the_state_of_deleted_snapshots_is_removed_on_s3(s3_bucket):
    wh = f"{s3_bucket}/wh"
    rows = pa.table({"x": [1]})
    for sid in ("kept", "gone", "also-gone"):
        cp.write_checkpoint(wh, sid, {"format": 1})
        cp.write_state_rows(wh, sid, rows)
    assert cp.remove_orphaned_state(wh, ["kept"]) == ["also-gone", "gone"]
    root = storage.location(wh)
    assert [root.child_of(i).name for i in (root / "_state").listdir()] == ["kept"]
    assert [root.child_of(i).name for i in (root / "_checkpoints").listdir()] == ["kept.json"]
