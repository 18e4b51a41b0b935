"""Incremental checkpoints and saved shards in a warehouse on object storage (a local S3-compatible server):
what is written reads back as on disk, and the state of deleted snapshots is removed."""
from __future__ import annotations

from pipelines.io import checkpoint as cp
from pipelines.io import storage


def test_checkpoint_and_saved_shards_round_trip_on_s3(s3_bucket, tmp_path):
    shards = {0: b"shard zero", 3: b"shard three"}
    data = {"format": 2, "partitions": {"3": {"next_offset": 10}}}
    for wh in (f"{s3_bucket}/wh", str(tmp_path / "wh")):
        assert cp.read_checkpoint(wh, "s1") is None
        cp.write_checkpoint(wh, "s1", data)
        assert cp.read_checkpoint(wh, "s1") == data
        saved = cp.write_state(wh, "s1", shards, 7)
        state = saved.stage.uri
        assert saved.entries == 7 and cp.state_file_partitions(saved.files) == {0, 3}
        assert [cp.read_state_files(state, saved.files, p) for p in (0, 3, 5)] == \
            [[b"shard zero"], [b"shard three"], []]
        # a task's file of the same directory that no checkpoint names (a failed attempt's) is not read
        failed = cp.StateStage(state).write(b"a failed attempt", 3)
        assert cp.read_state_files(state, saved.files, 3) == [b"shard three"]
        # a split partition's buckets each save a file of the partition: all of them are its
        assert sorted(cp.read_state_files(state, [*saved.files, failed], 3)) == [b"a failed attempt", b"shard three"]
        again = cp.write_state(wh, "s1", {0: b"rerun"}, 1)  # a rerun writes a state of its own
        cp.remove_other_states(wh, "s1", keep=again.stage.name)
        assert cp.read_state_files(again.stage.uri, again.files, 0) == [b"rerun"] and not storage.location(state).exists()
        again.discard()  # no checkpoint named it: deleted
        assert not storage.location(again.stage.uri).exists()
    remote = storage.location(f"{s3_bucket}/wh")
    assert (remote / "_checkpoints" / "s1.json").is_file()


def test_the_state_of_deleted_snapshots_is_removed_on_s3(s3_bucket):
    wh = f"{s3_bucket}/wh"
    for sid in ("kept", "gone", "also-gone"):
        cp.write_checkpoint(wh, sid, {"format": 2})
        cp.write_state(wh, sid, {1: b"x"}, 1)
    assert cp.remove_orphaned_state(wh, ["kept"]) == ["also-gone", "gone"]
    root = storage.location(wh)
    assert [root.child_of(i).name for i in (root / "_state").listdir()] == ["kept"]
    assert [root.child_of(i).name for i in (root / "_checkpoints").listdir()] == ["kept.json"]
