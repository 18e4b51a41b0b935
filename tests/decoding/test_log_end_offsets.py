"""Data-topic end offsets from a broker's log dirs (LAG offline), checked against what the brokerdata scenarios'
clients produced (`timeline.tsv`), and against segment tails written by the project's own encoder."""
from __future__ import annotations

import collections
import re

import pytest

from pipelines.decoding.batch_writer import write_control_batch, write_record_batch
from pipelines.decoding.log_end_offsets import (
    SOURCE_CHECKPOINT,
    SOURCE_SEGMENT,
    CheckpointError,
    data_logs,
    log_end_offsets,
    parse_end_offsets_text,
    read_offset_checkpoint,
    segment_log_end_offset,
)

_PRODUCED = re.compile(r"\tproduced (\d+) records to ([\w.-]+)$")
_DELETED = re.compile(r"AdminClient\.delete_topics\(\[([^\]]*)\]\) -> ok")


def _scenarios(brokerdata):
    return sorted(p for p in brokerdata.iterdir() if (p / "timeline.tsv").is_file() and (p / "data").is_dir())


@pytest.mark.shared
def test_high_watermarks_add_up_to_what_the_clients_produced(brokerdata):
    """Every topic a scenario's clients produced to (and did not delete) ends, summed over its partitions, exactly
    where the producers left it; a deleted topic has no end offset."""
    scenarios = _scenarios(brokerdata)
    if not scenarios:
        pytest.skip("no brokerdata scenarios")
    checked = 0
    for s in scenarios:
        produced: collections.Counter = collections.Counter()
        deleted: set[str] = set()
        for line in (s / "timeline.tsv").read_text().splitlines():
            if m := _PRODUCED.search(line):
                produced[m.group(2)] += int(m.group(1))
            if m := _DELETED.search(line):
                deleted |= {t.strip().strip("'\"") for t in m.group(1).split(",")}
        rows, warnings = log_end_offsets([s / "data"])
        assert warnings == [], (s.name, warnings)
        ends: collections.Counter = collections.Counter()
        assert rows and not any(r.topic.startswith("__") for r in rows), s.name  # internal topics left out
        for r in rows:
            assert r.source == SOURCE_CHECKPOINT, (s.name, r)  # the scenarios keep no data-topic segments
            assert r.observed_at_ms and r.log_end_offset >= 0
            ends[r.topic] += r.log_end_offset
        for topic, n in produced.items():
            if topic in deleted:
                assert topic not in ends, (s.name, topic)
            else:
                assert ends[topic] == n, (s.name, topic, ends[topic], n)
                checked += 1
    assert checked >= 20


@pytest.mark.shared
def test_a_partition_dir_input_finds_its_log_dirs_checkpoint(brokerdata):
    s = brokerdata / "kip848" / "data"
    if not s.is_dir():
        pytest.skip("kip848 not present")
    whole, _ = log_end_offsets([s])
    one, _ = log_end_offsets([s / "__consumer_offsets-0"])
    assert one == whole and whole


def _segment(path, batches):
    path.write_bytes(b"".join(batches))


def _records(n, ts=1_000):
    return [(b"k%d" % i, b"v%d" % i, ts + i) for i in range(n)]


def test_segment_tail_is_the_offset_after_the_last_whole_batch(tmp_path):
    d = tmp_path / "orders-3"
    d.mkdir()
    _segment(d / "00000000000000000000.log", [write_record_batch(_records(5), 0)])
    _segment(d / "00000000000000000005.log", [
        write_record_batch(_records(3), 5, codec="zstd"),
        write_record_batch(_records(2), 8, producer_id=7, producer_epoch=0, is_transactional=True),
        write_control_batch(0, 0, 10, 7, 0, 2_000),
    ])
    assert segment_log_end_offset(d) == 11
    # a torn tail is not part of the log (recovery truncates it)
    with open(d / "00000000000000000005.log", "ab") as f:
        f.write(write_record_batch(_records(4), 11)[:-9])
    assert segment_log_end_offset(d) == 11
    # an empty active segment: the log ends where its name says
    (d / "00000000000000000011.log").write_bytes(b"")
    assert segment_log_end_offset(d) == 11
    (d / "00000000000000000042.log").write_bytes(b"")
    assert segment_log_end_offset(d) == 42


def test_after_an_unclean_shutdown_the_log_ends_before_the_first_batch_failing_its_checksum(tmp_path):
    """`LogLoader.recoverLog`: without `.kafka_cleanshutdown`, the segments from the recovery point on are
    recovered; the first batch failing its checksum truncates its segment and the later segments are deleted."""
    d = tmp_path / "orders-0"
    d.mkdir()
    bad = bytearray(write_record_batch(_records(3), 3))
    bad[-2] ^= 0xFF  # a value byte: the batch still frames and parses
    _segment(d / "00000000000000000000.log", [write_record_batch(_records(3), 0), bytes(bad),
                                              write_record_batch(_records(2), 6)])
    _segment(d / "00000000000000000008.log", [write_record_batch(_records(4), 8)])

    def end() -> tuple[int, list[str]]:
        found = data_logs([tmp_path])
        found.close()
        (row,) = found.rows
        return row.log_end_offset, [(n.kind, n.position) for n in found.notes]

    assert end() == (3, [("segment_torn", len(write_record_batch(_records(3), 0)))])  # no recovery point: from 0
    (tmp_path / "recovery-point-offset-checkpoint").write_text("0\n1\norders 0 8\n")
    assert end() == (12, [])  # the damaged batch is below the recovery point: flushed, never recovered
    (tmp_path / "recovery-point-offset-checkpoint").write_text("0\n1\norders 0 4\n")
    assert end()[0] == 3  # the segment holding the recovery point is recovered whole
    (tmp_path / ".kafka_cleanshutdown").write_text("")
    assert end() == (12, [])  # a clean shutdown recovers nothing
    # the broker's high watermark never passes its log's end (UnifiedLog.updateHighWatermark), recovered or not
    (tmp_path / ".kafka_cleanshutdown").unlink()
    (tmp_path / "replication-offset-checkpoint").write_text("0\n1\norders 0 12\n")
    assert end()[0] == 3
    (tmp_path / ".kafka_cleanshutdown").write_text("")
    assert end()[0] == 12


def test_log_dirs_combine_to_the_highest_end_offset(tmp_path):
    a, b = tmp_path / "broker-1", tmp_path / "broker-2"
    for root, hw in ((a, 7), (b, 12)):
        (root / "orders-0").mkdir(parents=True)
        (root / "replication-offset-checkpoint").write_text(f"0\n2\norders 0 {hw}\n__cluster_metadata 0 99\n")
    _segment(a / "orders-0" / "00000000000000000000.log", [write_record_batch(_records(9), 0)])
    rows, warnings = log_end_offsets([a, b])
    assert warnings == []
    assert [(r.topic, r.partition, r.log_end_offset, r.source) for r in rows] == [("orders", 0, 12, SOURCE_CHECKPOINT)]
    rows, _ = log_end_offsets([a])
    assert [(r.log_end_offset, r.source) for r in rows] == [(9, SOURCE_SEGMENT)]  # segment tail past the checkpoint


def test_names_past_kafkas_numbers_are_not_read(tmp_path):
    # Kafka's partitions are ints and its offsets longs: such a name is no log's, and its number would not fit the
    # table's columns
    for d in ("orders-2147483648", "orders-1"):
        (tmp_path / d).mkdir()
    _segment(tmp_path / "orders-2147483648" / "00000000000000000000.log", [write_record_batch(_records(2), 0)])
    _segment(tmp_path / "orders-1" / "00000000000000000000.log", [write_record_batch(_records(3), 0)])
    _segment(tmp_path / "orders-1" / "99999999999999999999.log", [write_record_batch(_records(1), 0)])
    rows, warnings = log_end_offsets([tmp_path])
    assert [(r.topic, r.partition, r.log_end_offset) for r in rows] == [("orders", 1, 3)]
    assert len(warnings) == 1 and "orders-2147483648: names partition 2147483648" in warnings[0]


def test_a_data_partition_number_kafka_parses_is_that_partition(tmp_path):
    # Integer.parseInt of what follows the last dash (4.0 LocalLog.parseTopicPartitionName): `orders-+1` is orders'
    # partition 1 and `orders-02` its partition 2, whose end offsets LAG needs; `orders-+1` was not read, and a digit
    # past the BMP (two surrogates to Java, no digit) was read as a partition Kafka never loads
    for d, n in (("orders-+1", 3), ("orders-02", 4), ("orders-\U0001d7d1", 5)):
        (tmp_path / d).mkdir()
        _segment(tmp_path / d / "00000000000000000000.log", [write_record_batch(_records(n), 0)])
    rows, warnings = log_end_offsets([tmp_path])
    assert sorted((r.topic, r.partition, r.log_end_offset) for r in rows) == [("orders", 1, 3), ("orders", 2, 4)]
    assert warnings == []


@pytest.mark.parametrize("text, why", [
    ("", "empty file"),
    ("1\n0\n", "unrecognized version"),
    ("0\nx\n", "entry count"),
    ("0\n2\norders 0 5\n", "says 2 entries"),
    ("0\n1\norders zero 5\n", "whole numbers"),
    ("0\n1\norders 0 -5\n", "negative"),
    ("0\n1\norders 2147483648 5\n", "partition past 2147483647"),
    ("0\n1\norders 0 9223372036854775808\n", "offset past 9223372036854775807"),
    ("0\n1\norders 0\n", "expected 'topic partition offset'"),
    (b"0\n1\norders\xff 0 5\n", "line 3: byte 10 is not UTF-8"),  # the warning named no file
])
def test_a_bad_checkpoint_is_named_and_never_fails_the_run(tmp_path, text, why):
    (tmp_path / "replication-offset-checkpoint").write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(CheckpointError, match=why):
        read_offset_checkpoint(tmp_path / "replication-offset-checkpoint")
    rows, warnings = log_end_offsets([tmp_path])
    assert rows == [] and len(warnings) == 1 and "replication-offset-checkpoint" in warnings[0]


def test_end_offsets_text_takes_kafka_get_offsets_and_csv():
    assert parse_end_offsets_text("orders:0:1250\norders:1:900\nmy.topic-x:12:0\n") == {
        ("orders", 0): 1250, ("orders", 1): 900, ("my.topic-x", 12): 0}
    assert parse_end_offsets_text("topic,partition,end_offset\n# note\norders,0,1250\n\norders 1 900\n") == {
        ("orders", 0): 1250, ("orders", 1): 900}
    for bad in ("orders:0\n", "orders,zero,1\n", "orders:0:-1\n", "x,0,1\norders,zero,1\n", "orders:2147483648:1\n",
                "orders:0:9223372036854775808\n"):
        with pytest.raises(ValueError, match="line"):
            parse_end_offsets_text(bad)


def test_a_first_line_that_is_neither_a_header_nor_a_row_is_refused():
    """Any first line whose partition and offset were not numbers was skipped as a header, so a file holding only
    `a:b:c` gave no end offsets at all and describe showed LOG-END-OFFSET `-`, exit 0."""
    for bad in ("a:b:c\n", "a,b,c\norders,0,1\n", "# a comment first\na:b:c\n", "topic:partition:end_offset\n"):
        with pytest.raises(ValueError, match=r"^leo\.txt: line [12]: "):
            parse_end_offsets_text(bad, "leo.txt")
    for header in ("topic,partition,end_offset", "TOPIC PARTITION LOG-END-OFFSET", "topic,partition,offset",
                   "# the tool's output\ntopic,partition,end_offset"):
        assert parse_end_offsets_text(header + "\norders,0,5\n") == {("orders", 0): 5}
    with pytest.raises(ValueError, match="line 2"):  # a header is the first line only
        parse_end_offsets_text("orders,0,5\ntopic,partition,end_offset\n")


def test_end_offsets_bytes_that_are_not_utf8_name_the_file_and_line():
    from pipelines.decoding.log_end_offsets import parse_end_offsets_file

    with pytest.raises(ValueError, match=r"^leo\.txt: line 2: not UTF-8 text \(byte 0xff at column 10\)$"):
        parse_end_offsets_file(b"orders:0:1\norders:1:\xff\n", "leo.txt")
    # a byte-order mark (a spreadsheet's CSV) is not part of the header
    assert parse_end_offsets_file("\ufefftopic,partition,end_offset\norders,0,5\n".encode(), "leo.csv") == {
        ("orders", 0): 5}


@pytest.mark.shared
def test_high_watermarks_read_from_a_bucket_equal_the_local_ones(brokerdata, s3_bucket):
    """A broker data dir copied to object storage gives the same checkpoint end offsets (the clients' counts,
    checked above) as on disk."""
    import pyarrow.fs as pafs

    from pipelines.io import storage

    scenarios = _scenarios(brokerdata)
    if not scenarios:
        pytest.skip("no brokerdata scenarios")
    data = scenarios[0] / "data"
    dest = storage.location(f"{s3_bucket}/{scenarios[0].name}")
    pafs.copy_files(str(data), dest.path, source_filesystem=pafs.LocalFileSystem(), destination_filesystem=dest.fs)
    local, local_warnings = log_end_offsets([data])
    remote, remote_warnings = log_end_offsets([dest.uri])
    assert local and local_warnings == remote_warnings == []
    assert [(r.topic, r.partition, r.log_end_offset, r.source) for r in remote] == [
        (r.topic, r.partition, r.log_end_offset, r.source) for r in local]


def test_log_start_from_the_first_retained_batch_or_the_checkpoint(tmp_path):
    """`log-start-offset-checkpoint` is honoured where it says more than the first retained batch (DeleteRecords);
    where retention deleted segments after it was written, the first retained batch says more. A partition the log
    dir holds no segment of takes the checkpoint's start; the newest batch's timestamp type is recorded."""
    root = tmp_path / "broker"
    for name, start in (("orders-0", 0), ("orders-1", 100), ("clicks-0", 0)):
        (root / name).mkdir(parents=True)
    _segment(root / "orders-0" / "00000000000000000000.log", [write_record_batch(_records(10), 0)])
    _segment(root / "orders-1" / "00000000000000000100.log",
             [write_record_batch(_records(5, ts=9_000), 100, timestamp_type="LogAppendTime", log_append_time=9_500)])
    (root / "log-start-offset-checkpoint").write_text("0\n3\norders 0 4\norders 1 20\nmetrics 3 77\n")
    rows, warnings = log_end_offsets([root])
    assert warnings == []
    got = {(r.topic, r.partition): (r.log_start_offset, r.log_start_source, r.log_end_offset, r.timestamp_type,
                                    r.log_start_timestamp_ms) for r in rows}
    assert got == {("orders", 0): (4, "log-start-offset-checkpoint", 10, "CreateTime", 1_004),
                   ("orders", 1): (100, "segment", 105, "LogAppendTime", 9_500)}
    # a partition whose end offset the high watermarks give, without segments: the checkpoint's start
    (root / "replication-offset-checkpoint").write_text("0\n1\nmetrics 3 90\n")
    rows, _ = log_end_offsets([root])
    (m,) = [r for r in rows if r.topic == "metrics"]
    assert (m.log_start_offset, m.log_start_source, m.log_end_offset, m.timestamp_type) == (
        77, "log-start-offset-checkpoint", 90, None)
    (root / "log-start-offset-checkpoint").write_text("0\n2\n")
    rows, warnings = log_end_offsets([root])
    assert len(warnings) == 1 and "log start offsets not read" in warnings[0]
    assert {(r.topic, r.log_start_offset) for r in rows if r.partition == 0} == {("orders", 0)}


def test_a_log_dir_of_more_partitions_than_open_files_is_read_whole(tmp_path):
    """A mapped segment holds a file descriptor: logs kept mapped per partition ran a log dir of more partitions than
    `ulimit -n` out of them, and each partition read after that silently ended at its newest segment's base offset
    (LAG -1, lag in time 0)."""
    import os
    import resource

    from pipelines.decoding.log_end_offsets import data_logs

    n = 400
    for p in range(n):
        (tmp_path / f"orders-{p}").mkdir()
        _segment(tmp_path / f"orders-{p}" / "00000000000000000000.log", [write_record_batch(_records(3), 0)])
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + n // 2, hard))
    try:
        found = data_logs([tmp_path])
        timed = []
        for p in range(n):  # as lag_table asks them: a partition at a time, let go before the next
            timed.append(found.logs[("orders", p)].first_unconsumed(1))
            found.logs[("orders", p)].close()
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert found.warnings == [] and found.notes == []
    assert {(r.log_start_offset, r.log_end_offset) for r in found.rows} == {(0, 3)} and len(found.rows) == n
    assert {(t.offset, t.max_timestamp_ms) for t in timed} == {(1, 1_001)}


def test_a_newest_segment_that_cannot_be_read_gives_no_end_offset(tmp_path, monkeypatch):
    """An OSError reading a partition's newest segment (permission denied, an I/O error) was taken for an empty
    segment: the partition silently ended at that segment's base offset. It is now a warning naming the file, and
    the end offset is the high watermark's alone."""
    from pipelines.decoding.log_segment import LogSegment

    d = tmp_path / "orders-0"
    d.mkdir()
    _segment(d / "00000000000000000000.log", [write_record_batch(_records(5), 0)])
    _segment(d / "00000000000000000005.log", [write_record_batch(_records(4), 5)])
    (tmp_path / "replication-offset-checkpoint").write_text("0\n1\norders 0 7\n")
    real = LogSegment.buf

    def buf(segment):
        if segment.path.endswith("00000000000000000005.log"):
            raise PermissionError(13, "Permission denied", segment.path)
        return real.fget(segment)

    monkeypatch.setattr(LogSegment, "buf", property(buf))
    rows, warnings = log_end_offsets([tmp_path])
    assert [(r.log_end_offset, r.source) for r in rows] == [(7, SOURCE_CHECKPOINT)]
    assert len(warnings) == 1 and "00000000000000000005.log" in warnings[0] and "Permission denied" in warnings[0]
    (tmp_path / "replication-offset-checkpoint").unlink()
    assert log_end_offsets([tmp_path])[0] == []


def test_copies_of_a_topic_under_different_topic_ids_give_no_end_offsets(tmp_path):
    """Two log dirs hold `orders-0` under different topic ids (`partition.metadata`): a deleted topic's stale copy
    beside its successor's. Their end offsets were combined as copies of one log (the stale one's 20 won); the topic
    now has no end offset, with a warning naming both ids. Copies under one id still combine."""
    a, b = tmp_path / "broker-1", tmp_path / "broker-2"
    for root, n, topic_id in ((a, 9, "lEtGfS1_Si-I8Vl7ExUY6g"), (b, 20, "Zm9vYmFyYmF6cXV4cXV1eA")):
        (root / "orders-0").mkdir(parents=True)
        (root / "clicks-0").mkdir()
        _segment(root / "orders-0" / "00000000000000000000.log", [write_record_batch(_records(n), 0)])
        _segment(root / "clicks-0" / "00000000000000000000.log", [write_record_batch(_records(n), 0)])
        (root / "orders-0" / "partition.metadata").write_text(f"version: 0\ntopic_id: {topic_id}")
        (root / "clicks-0" / "partition.metadata").write_text("version: 0\ntopic_id: Y2xpY2tzY2xpY2tzY2xpYw")
        (root / "replication-offset-checkpoint").write_text(f"0\n1\norders 0 {n}\n")
    rows, warnings = log_end_offsets([a, b])
    assert [(r.topic, r.partition, r.log_end_offset) for r in rows] == [("clicks", 0, 20)]
    assert len(warnings) == 1 and "'orders'" in warnings[0]
    assert "lEtGfS1_Si-I8Vl7ExUY6g" in warnings[0] and "Zm9vYmFyYmF6cXV4cXV1eA" in warnings[0]


def test_a_users_topic_named_with_a_leading_double_underscore_has_end_offsets(tmp_path):
    """Kafka's internal topics (`Topic.INTERNAL_TOPICS`, 4.0: `__consumer_offsets`, `__transaction_state`,
    `__share_group_state`) and the KRaft metadata log are left out; a topic a user named `__audit` is none of them
    (`kafka-consumer-groups` shows a group's LAG on it), where every `__` name was left out and its LAG was '-'."""
    (tmp_path / "__audit-0").mkdir()
    (tmp_path / "__transaction_state-0").mkdir()
    _segment(tmp_path / "__audit-0" / "00000000000000000000.log", [write_record_batch(_records(9), 0)])
    _segment(tmp_path / "__transaction_state-0" / "00000000000000000000.log", [write_record_batch(_records(3), 0)])
    (tmp_path / "replication-offset-checkpoint").write_text(
        "0\n5\n__audit 1 4\n__consumer_offsets 0 99\n__transaction_state 0 3\n__share_group_state 0 2\n"
        "__cluster_metadata 0 50\n")
    rows, warnings = log_end_offsets([tmp_path])
    assert warnings == []
    assert [(r.topic, r.partition, r.log_end_offset, r.source, r.log_start_offset) for r in rows] == [
        ("__audit", 0, 9, SOURCE_SEGMENT, 0), ("__audit", 1, 4, SOURCE_CHECKPOINT, None)]


def test_a_former_leaders_copy_past_the_new_leaders_is_set_aside(tmp_path):
    """Two brokers' copies of orders-0 that disagree: broker 1 led epoch 1 and appended 0-119, of which broker 2
    replicated 0-99 before broker 1 died; broker 2, elected for epoch 2 at offset 100 (its leader-epoch-checkpoint
    says so), appended 100-109 of its own. Broker 1's 100-119 are no part of the partition: when it follows again it
    truncates them (OffsetsForLeaderEpoch: epoch 1 ends at 100 in the leader's log). The end was broker 1's 120 (the
    highest), and the lag in time was read from its records; it is broker 2's 110, its records' times, and a
    warning names the copy set aside."""
    a, b = tmp_path / "broker-1", tmp_path / "broker-2"
    for root in (a, b):
        (root / "orders-0").mkdir(parents=True)
    _segment(a / "orders-0" / "00000000000000000000.log", [write_record_batch(_records(120), 0)])
    (a / "orders-0" / "leader-epoch-checkpoint").write_text("0\n1\n1 0\n")
    (a / "replication-offset-checkpoint").write_text("0\n1\norders 0 100\n")
    _segment(b / "orders-0" / "00000000000000000000.log",
             [write_record_batch(_records(100), 0), write_record_batch(_records(10, ts=50_000), 100)])
    (b / "orders-0" / "leader-epoch-checkpoint").write_text("0\n2\n1 0\n2 100\n")
    (b / "replication-offset-checkpoint").write_text("0\n1\norders 0 105\n")
    for order in ([a, b], [b, a]):
        found = data_logs(order)
        try:
            (row,) = found.rows
            assert (row.log_end_offset, row.source) == (110, SOURCE_SEGMENT)
            assert found.logs[("orders", 0)].first_unconsumed(105).timestamp_ms == 50_005
        finally:
            found.close()
        (warning,) = found.warnings
        assert str(a / "orders-0") in warning and "epoch 1 ending at 120" in warning
    # without the new leader's epoch checkpoint nothing tells the copies apart: the furthest is read, as before
    (b / "orders-0" / "leader-epoch-checkpoint").unlink()
    rows, warnings = log_end_offsets([a, b])
    assert [(r.log_end_offset, r.source) for r in rows] == [(120, SOURCE_SEGMENT)] and warnings == []


def _deleted_past_the_checkpointed_start(root, unclean=False):
    """orders-0 holds offsets 0-9 (then 10-14 torn when `unclean`), its log-start-offset-checkpoint says 25 and its
    high watermark 30: segments 10-29 were deleted by hand, or the broker died before they reached the disk."""
    (root / "orders-0").mkdir(parents=True)
    batches = [write_record_batch(_records(10), 0)]
    if unclean:
        batches.append(write_record_batch(_records(5, ts=2_000), 10)[:-3])  # whole batches only: recovery cuts it
    _segment(root / "orders-0" / "00000000000000000000.log", batches)
    (root / "log-start-offset-checkpoint").write_text("0\n1\norders 0 25\n")
    (root / "replication-offset-checkpoint").write_text("0\n1\norders 0 30\n")
    if not unclean:
        (root / ".kafka_cleanshutdown").write_text("")


@pytest.mark.parametrize("unclean", [False, True])
def test_segments_ending_before_the_checkpointed_start_are_deleted_as_the_loader_does(tmp_path, unclean):
    """Kafka's LogLoader (deleteSegmentsIfLogStartGreaterThanLogEnd, 4.0, after recovery) deletes every segment of a
    log that ends before its log-start-offset-checkpoint and opens an empty one there: log start = log end = 25, the
    high watermark kept in [start, end] (UnifiedLog.updateHighWatermark), and no batch of the deleted segments
    gives a timestamp type or a time. The log started at 25 and ended at 10 (or at 30, the high watermark)."""
    root = tmp_path / "broker"
    _deleted_past_the_checkpointed_start(root, unclean)
    found = data_logs([root])
    try:
        (row,) = found.rows
        assert (row.log_start_offset, row.log_start_source, row.log_end_offset) == (
            25, "log-start-offset-checkpoint", 25)
        assert (row.timestamp_type, row.log_start_timestamp_ms) == (None, None)
        assert row.observed_at_ms is not None
        log = found.logs[("orders", 0)]
        assert (log.log_start_offset, log.log_end_offset, log.first_unconsumed(3).offset) == (25, 25, None)
        assert log.end_at(1_003) is None  # the records before 25 were appended at times the log no longer holds
        assert len(found.warnings) == 1 and "deletes them" in found.warnings[0], found.warnings
    finally:
        found.close()
