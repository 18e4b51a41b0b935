"""A dump on an object store is read as the same dump on a local disk: the odd log dirs of the local tests of
Kafka's reading by offset (`decoding.overlaps`: overlapping and interleaved files, a partition copied from two log
dirs, a log start inside the first segment), uploaded to a local S3-compatible server (moto), rebuild to the same
tables and quarantine rows (their files named by URI) as rebuilt from the disk. The rebuilds run in this process."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests import badinputs as bi

pytestmark = [pytest.mark.integration]


def _upload(local: Path, uri: str) -> None:
    import pyarrow.fs as pafs

    from pipelines.io import storage

    loc = storage.location(uri)
    pafs.copy_files(str(local), loc.path, source_filesystem=pafs.LocalFileSystem(), destination_filesystem=loc.fs)


def _rebuilt(no_spark, settings, inputs: list[str], warehouse: Path) -> tuple[tuple, dict]:
    """The run's record accounting, and its snapshot's tables (rows sorted; a path named by `str`)."""
    from pipelines.io.warehouse import Warehouse
    from pipelines.rebuild import RebuildRequest, run_rebuild
    from schemas.tables import SNAPSHOT_TABLES

    summary = run_rebuild(no_spark, settings, RebuildRequest(inputs=tuple(inputs), warehouse=str(warehouse),
                                                          snapshot_id="s"))
    assert summary.status == "succeeded", summary.validation
    wh = Warehouse(warehouse)
    # when a high watermark was seen is its file's time: an object's is when it was uploaded, not the file's mtime
    tables = {t: sorted(repr({k: v for k, v in row.items() if k != "observed_at"})
                        for row in wh.read_table(t, "s").to_pylist())
              for t in SNAPSHOT_TABLES}
    return (summary.records_in, summary.records_out, summary.records_quarantined, summary.quarantine_rows), tables


def _same_as_local(no_spark, settings, tmp_path: Path, bucket: str, inputs: list[Path],
                   spelled: str = "") -> tuple[tuple, dict]:
    """`inputs` (log dirs under `tmp_path/in`) rebuilt from the disk and from the bucket: the two must agree, the
    bucket's rows naming each file by its URI where the disk's name its path. `spelled`: what both spellings of
    each input end with (`/.`)."""
    here = tmp_path / "in"
    uris = [f"{bucket}/in/{p.relative_to(here).as_posix()}" for p in inputs]
    for p, uri in zip(inputs, uris):
        _upload(p, uri)
    local = _rebuilt(no_spark, settings, [str(p) + spelled for p in inputs], tmp_path / "wh-local")
    remote = _rebuilt(no_spark, settings, [uri + spelled for uri in uris], tmp_path / "wh-remote")
    named = {t: sorted(r.replace(str(here), f"{bucket}/in") for r in rows) for t, rows in local[1].items()}
    assert remote == (local[0], named)
    return remote


def test_overlapping_files_on_s3_are_read_by_offset_as_on_disk(no_spark, settings, tmp_path, s3_bucket):
    """The object store's copy of a partition whose two files both hold offset 1 was read whole (every record
    state, no `duplicate_conflict`); it is read by offset as the disk's is."""
    root, _ = bi.overlapping_files(tmp_path / "in" / "data")
    counts, tables = _same_as_local(no_spark, settings, tmp_path, s3_bucket, [root])
    assert counts == (4, 3, 1, 2)
    assert sorted("'kind': 'duplicate_conflict'" in r for r in tables["quarantine"]) == [False, True]


def test_an_interleaved_file_on_s3_is_read_by_offset_as_on_disk(no_spark, settings, tmp_path, s3_bucket):
    root, _ = bi.interleaved_files(tmp_path / "in" / "data")
    counts, tables = _same_as_local(no_spark, settings, tmp_path, s3_bucket, [root])
    assert counts == (4, 3, 1, 1)


def test_a_partition_copied_into_two_log_dirs_on_s3_is_read_once_as_on_disk(no_spark, settings, tmp_path,
                                                                            s3_bucket):
    dirs, _ = bi.copies_in_two_log_dirs(tmp_path / "in")
    counts, tables = _same_as_local(no_spark, settings, tmp_path, s3_bucket, dirs)
    assert counts == (3, 2, 1, 1)


def test_records_below_the_log_start_of_a_log_dir_on_s3_are_not_state_as_on_disk(no_spark, settings, tmp_path,
                                                                                 s3_bucket):
    """The log dir's `log-start-offset-checkpoint` was read for local dirs only: on an object store the commits below
    the log start were state; they are an `overlapping_segment` row naming the checkpoint's URI, as on disk."""
    root, _ = bi.log_start_inside_first_segment(tmp_path / "in" / "data")
    counts, tables = _same_as_local(no_spark, settings, tmp_path, s3_bucket, [root])
    assert counts == (4, 2, 2, 1)
    assert f"log start offset 2 ({s3_bucket}/in/data/log-start-offset-checkpoint)" in tables["quarantine"][0]


def test_a_partitions_last_file_on_s3_is_read_by_its_first_entry_alone(tmp_path, s3_bucket, monkeypatch):
    """Kafka's reading of a partition of one file (the common one: the active segment) needs its first entry only:
    on an object store that is a ranged read, never the whole object fetched into the driver."""
    from pipelines.decoding.overlaps import kafka_reading
    from pipelines.decoding.segments import discover_segments, log_start_offsets
    from pipelines.io import storage

    root, _ = bi.clean_small(tmp_path / "data")
    _upload(root, f"{s3_bucket}/data")
    segments, problems = discover_segments([f"{s3_bucket}/data"])
    assert [s.path for s in segments] == [f"{s3_bucket}/data/__consumer_offsets-0/00000000000000000000.log"]

    def fetched(*_a, **_k):
        raise AssertionError("a segment was fetched whole")

    monkeypatch.setattr(storage.Location, "as_local_file", fetched)
    reading = kafka_reading(segments, log_start_offsets(segments))
    assert (reading.unread, reading.problems, problems) == ({}, [], [])


def test_a_first_entry_claiming_more_than_its_object_is_not_read_whole(tmp_path, s3_bucket):
    """A segment whose first entry's size says more than the file holds frames nothing: on an object store its head
    is read, not the object; on disk its map is not copied whole."""
    import struct

    from pipelines.decoding import overlaps
    from pipelines.decoding.segments import SegmentFile

    data = struct.pack(">qi", 0, 1 << 30) + bytes(200_000)
    (tmp_path / "seg.log").write_bytes(data)
    _upload(tmp_path / "seg.log", f"{s3_bucket}/seg.log")
    remote = SegmentFile(f"{s3_bucket}/seg.log", 0, 0, len(data))
    local = SegmentFile(str(tmp_path / "seg.log"), 0, 0, len(data))
    assert overlaps._span(remote, whole=False) is overlaps._span(local, whole=False) is None
    assert len(overlaps._first_entry(remote)) == overlaps._FIRST_ENTRY_READ
    assert len(overlaps._first_entry(local)) < overlaps._FIRST_ENTRY_READ  # nor a copy of the file's map


def test_partition_dirs_of_two_offsets_topics_on_s3_are_refused_as_on_disk(tmp_path, s3_bucket):
    """The topic-id check reads the partition dirs' `partition.metadata` on an object store too: one line, exit 2,
    naming both ids and the objects."""
    import subprocess
    import sys

    data = bi.offsets_topics_of_two_ids(tmp_path / "data")
    _upload(data, f"{s3_bucket}/data")
    r = subprocess.run([sys.executable, "-m", "jobs.cli", "rebuild", "--input", f"{s3_bucket}/data", "--warehouse",
                        str(tmp_path / "wh"), "--env", "ci", "--quiet"], cwd=Path(__file__).resolve().parents[2],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 2, r.stdout + r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert "different __consumer_offsets topics" in line
    assert f"lEtGfS1_Si-I8Vl7ExUY6g ({s3_bucket}/data/__consumer_offsets-0/partition.metadata)" in line
    assert f"jGxhuB3FQUWVdY1V5Sl7jg ({s3_bucket}/data/__consumer_offsets-1/partition.metadata)" in line


def test_the_partition_count_of_a_log_dir_on_s3_lists_its_children_alone(tmp_path, s3_bucket, monkeypatch):
    """The partition count a log dir shows (its `__consumer_offsets-N` dirs) listed every key below it again, twice
    a run (a request per 1000 keys, most of them segments'): it lists the log dir's children, and counts as on disk."""
    from pipelines.decoding.segments import partition_count
    from pipelines.io import storage

    data = bi.offsets_topics_of_two_ids(tmp_path / "data")
    (data / "__consumer_offsets-7").mkdir()
    (data / "__consumer_offsets-7" / "00000000000000000000.log").write_bytes(b"")
    _upload(data, f"{s3_bucket}/data")
    listed = storage.Location.listdir

    def children_only(self, recursive: bool = False):
        assert not recursive, f"{self} listed recursively"
        return listed(self, recursive)

    monkeypatch.setattr(storage.Location, "listdir", children_only)
    assert partition_count(f"{s3_bucket}/data") == partition_count(data) == 8


def test_a_data_topic_of_two_topic_ids_on_s3_has_no_end_offsets_as_on_disk(no_spark, settings, tmp_path, s3_bucket):
    """Two copies of `orders` under different topic ids (a deleted topic's stray dir beside its successor's): the disk's
    run gives it no end offset (LAG unknown) and warns; the object store's read no `partition.metadata` and took the
    higher high watermark (20) for the topic's."""
    dirs = bi.data_topic_of_two_ids(tmp_path / "in")
    counts, tables = _same_as_local(no_spark, settings, tmp_path, s3_bucket, dirs)
    assert [(r.count("'clicks'"), r.count("'orders'")) for r in tables["log_end_offsets"]] == [(1, 0)]
    assert sorted(("'log_end_offset': None" in r, "'clicks'" in r) for r in tables["consumer_lag"]) == [
        (False, True), (True, False)]


@pytest.mark.parametrize("spelled", ["/.", "/./__consumer_offsets-0//..", "/"])
def test_a_log_dir_on_s3_spelled_as_on_disk_reads_as_on_disk(no_spark, settings, tmp_path, s3_bucket, spelled):
    """`--input s3://bucket/dir/.` was refused (no such object or prefix: a `.` was read as a key's name, an empty
    name was a traceback) where the disk's `dir/.` reads `dir`: every spelling of a dir reads it, as on disk."""
    root, _ = bi.overlapping_files(tmp_path / "in" / "data")
    counts, _ = _same_as_local(no_spark, settings, tmp_path, s3_bucket, [root], spelled)
    assert counts == (4, 3, 1, 2)


@pytest.mark.parametrize("spelled", ["/missing/..", "/__consumer_offsets-0/00000000000000000000.log/.."])
def test_a_log_dir_on_s3_spelled_through_what_is_not_a_dir_is_refused_as_on_disk(tmp_path, s3_bucket, spelled):
    """The OS resolves `dir/missing/..` (or `dir/file/..`) to no directory: the disk's input is refused, one line, and
    the object store's is refused alike, not read as `dir`."""
    from pipelines.rebuild.failures import UsageError
    from pipelines.rebuild.preflight import check_inputs

    root, _ = bi.overlapping_files(tmp_path / "data")
    _upload(root, f"{s3_bucket}/data")
    with pytest.raises(UsageError, match="no such file or directory"):
        check_inputs([str(root) + spelled])
    with pytest.raises(UsageError, match="no such object or prefix"):
        check_inputs([f"{s3_bucket}/data{spelled}"])
    assert check_inputs([f"{s3_bucket}/data/__consumer_offsets-0/.."]) == [f"{s3_bucket}/data"]


def test_a_shards_task_fetches_each_segment_once_for_its_decode_and_its_count(tmp_path, s3_bucket, monkeypatch):
    """The reader's own count (the accounting's `records_in`) walks each file the task decoded: on an object store,
    from the copy the decode fetched, not a second download of every segment; and it counts what the reader's
    count over the plan counts."""
    import pyarrow as pa

    from pipelines.coordinator.options import ReplayOptions
    from pipelines.frames.decode import count_items, plan_inputs, summed_counts, work_batches, work_table
    from pipelines.frames.envelope import ReaderCounts, decode
    from pipelines.io import storage
    from pipelines.io.blobs import from_blob
    from pipelines.io.scratch import Scratch
    from pipelines.frames.segment_shards import ShardLoad, WorkUnit, counted_items, decode_and_load_task

    g = bi.group_in(0, "fetched")
    part = tmp_path / "data" / "__consumer_offsets-0"
    for base in (0, 3, 6):  # three segments, the last the active one
        bi.write_segment(part, base, b"".join(bi.batch([bi.commit(g, 0, 100 + o, bi.T0 + o)], o)
                                              for o in range(base, base + 3)))
    _upload(tmp_path / "data", f"{s3_bucket}/data")
    plan = plan_inputs([f"{s3_bucket}/data"])
    work = work_table(plan)
    want = summed_counts(r for b in count_items(iter(work_batches(plan)), plan.policy) for r in b.to_pylist())
    assert want[0]["records_in"] == 9 and len(want[0]["segments"]) == 3

    fetched: list[str] = []
    as_local_file = storage.Location.as_local_file

    def counting(self, *a, **k):
        fetched.append(self.uri)
        return as_local_file(self, *a, **k)

    monkeypatch.setattr(storage.Location, "as_local_file", counting)
    slices = [[WorkUnit(0, work)]]
    task = decode_and_load_task(slices, policy=plan.policy, counted=counted_items(work, slices), load=ShardLoad(
        options=ReplayOptions(snapshot_id="s"), scratch=Scratch(str(tmp_path / "scratch"))))
    out = pa.Table.from_batches(list(task(iter([pa.record_batch([pa.array([0])], names=["id"])]))))
    got = summed_counts(r for p in decode(out) if isinstance(p, ReaderCounts) for r in from_blob(p.rows).to_pylist())
    assert got == want
    assert sorted(fetched) == sorted(work.column("path").to_pylist())  # each once
