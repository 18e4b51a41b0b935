"""Segment discovery on disk and reading a whole log in order."""
from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from pipelines.decoding.batch_writer import write_record_batch
from pipelines.decoding.segments import (InputError, SegmentFile, discover_segments, partition_count, read_log,
                                         read_segment_batches)
from schemas.records import LogRecord, ReadProblem


def _seg(d: Path, base: int, n: int = 1, suffix: str = ".log") -> Path:
    d.mkdir(parents=True, exist_ok=True)
    p = d / f"{base:020d}{suffix}"
    p.write_bytes(b"".join(write_record_batch([(b"k%d" % i, b"v", 1000 + i)], base + i) for i in range(n)))
    return p


@pytest.fixture
def logdir(tmp_path: Path) -> Path:
    root = tmp_path / "kafka-logs"
    p3 = root / "__consumer_offsets-3"
    _seg(p3, 0, 2)
    _seg(p3, 100, 1)
    _seg(p3, 20, 3)  # numerically before 100, lexically after "100"? both 20-digit: order by number anyway
    _seg(p3, 9, 1, suffix=".log.deleted")
    _seg(p3, 50, 1, suffix=".log.cleaned")
    _seg(p3, 30, 1, suffix=".log.swap")
    for name in ("00000000000000000000.index", "00000000000000000000.timeindex", "00000000000000000000.txnindex",
                 "00000000000000000123.snapshot", "leader-epoch-checkpoint", "partition.metadata"):
        (p3 / name).write_bytes(b"\x00" * 64)
    _seg(root / "__consumer_offsets-12", 7, 2)
    (root / "__consumer_offsets-1").mkdir()
    (root / "__consumer_offsets-1" / "00000000000000000000.log").write_bytes(b"")  # empty partition
    _seg(root / "__transaction_state-0", 0, 1)
    _seg(root / "orders-0", 0, 1)
    _seg(root / "__consumer_offsets-5.0123456789abcdef0123456789abcdef-delete", 0, 1)
    _seg(root / "__consumer_offsets-6.0123456789abcdef0123456789abcdef-future", 0, 1)
    _seg(root / "__consumer_offsets-8-stray", 0, 1)
    for name in ("replication-offset-checkpoint", "recovery-point-offset-checkpoint", "meta.properties",
                 "cleaner-offset-checkpoint", ".kafka_cleanshutdown"):
        (root / name).write_text("0\n0\n")
    return root


def test_discover_log_dir(logdir):
    segs, problems = discover_segments(logdir)
    # the swap at 30 (below the .cleaned at 50: a finished cleaning's) is read as the segment Kafka renames it to
    assert [(s.offsets_partition, s.base_offset) for s in segs] == [(3, 0), (3, 20), (3, 30), (3, 100), (12, 7)]
    assert all(s.path.endswith((".log", ".log.swap")) and s.size > 0 for s in segs)
    kinds = sorted((p.kind, Path(p.source).name) for p in problems)
    # orders-0 is a data topic's: read for its log's bounds (`log_end_offsets`), not reported
    assert kinds == [("not_offsets_data", "__transaction_state-0")]
    assert all(p.reason for p in problems)


def test_numeric_not_lexical_order(tmp_path):
    d = tmp_path / "bare"
    _seg(d, 9, 1)
    _seg(d, 10, 1)
    (d / "00000000000000000009.log").rename(d / "9.log")  # unpadded bare files still sort numerically
    (d / "00000000000000000010.log").rename(d / "10.log")
    segs, _ = discover_segments(d)
    assert [s.base_offset for s in segs] == [9, 10]
    assert [r.offset for r in read_log(d)] == [9, 10]


def test_a_segment_not_named_as_kafka_names_it_is_not_read_in_a_partition_dir(tmp_path):
    """LogLoader opens the file a `.log`'s base offset names (`LogFileUtils.logFile`: 20 digits), so a renamed copy
    (`9.log`, `0.log` beside `00000000000000000000.log`) is never read by a broker: reported, not read."""
    d = tmp_path / "__consumer_offsets-0"
    _seg(d, 0, 2)
    _seg(d, 9, 1)
    (d / "00000000000000000009.log").rename(d / "9.log")
    (d / "0.log").write_bytes((d / "00000000000000000000.log").read_bytes())
    segs, problems = discover_segments(d)
    assert [Path(s.path).name for s in segs] == ["00000000000000000000.log"]
    assert sorted((Path(p.source).name, p.kind) for p in problems) == [("0.log", "not_offsets_data"),
                                                                       ("9.log", "not_offsets_data")]
    assert "00000000000000000009.log" in next(p.reason for p in problems if p.source.endswith("9.log"))


def test_partition_dir_and_single_file_and_several_paths(logdir):
    segs, problems = discover_segments(logdir / "__consumer_offsets-12")
    assert [(s.offsets_partition, s.base_offset) for s in segs] == [(12, 7)] and problems == []
    one = logdir / "__consumer_offsets-3" / "00000000000000000020.log"
    segs, problems = discover_segments(one)
    assert segs == [SegmentFile(path=str(one), offsets_partition=3, base_offset=20, size=one.stat().st_size)]
    segs, problems = discover_segments([logdir / "__consumer_offsets-12", str(one)])
    assert [(s.offsets_partition, s.base_offset) for s in segs] == [(3, 20), (12, 7)]
    # the same file reached twice is read once
    segs, problems = discover_segments([logdir, one])
    assert len(segs) == 5 and problems == [p for p in problems if p.kind != "duplicate_segment"]


def test_swap_and_foreign_files_given_directly(logdir):
    segs, problems = discover_segments(logdir / "__consumer_offsets-3" / "00000000000000000030.log.swap")
    assert [(s.offsets_partition, s.base_offset) for s in segs] == [(3, 30)] and problems == []
    _, problems = discover_segments(logdir / "__transaction_state-0")
    assert [p.kind for p in problems] == ["not_offsets_data"]
    _, problems = discover_segments(logdir / "__transaction_state-0" / "00000000000000000000.log")
    assert [p.kind for p in problems] == ["not_offsets_data"]
    _, problems = discover_segments(logdir / "__consumer_offsets-3" / "00000000000000000000.index")
    assert [p.kind for p in problems] == ["not_offsets_data"]


def test_missing_path_raises_input_error(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        discover_segments([tmp_path / "nope"])
    with pytest.raises(FileNotFoundError):
        read_log(tmp_path / "nope")  # raised at call time, not on first next()


def test_unreadable_segment_reported(tmp_path):
    d = tmp_path / "__consumer_offsets-2"
    _seg(d, 0, 1)
    os.symlink(d / "missing.bin", d / "00000000000000000005.log")  # dangling: cannot be stat'ed
    segs, problems = discover_segments(d)
    assert [s.base_offset for s in segs] == [0]
    assert [(p.kind, Path(p.source).name) for p in problems] == [("unreadable", "00000000000000000005.log")]


def test_unreadable_at_read_time(tmp_path):
    gone = SegmentFile(path=str(tmp_path / "x.log"), offsets_partition=4, base_offset=0, size=10)
    (p,) = read_segment_batches(gone)
    assert p.kind == "unreadable" and p.offsets_partition == 4


def test_directory_without_offsets_data(tmp_path):
    (tmp_path / "empty").mkdir()
    segs, problems = discover_segments(tmp_path / "empty")
    assert segs == [] and [p.kind for p in problems] == ["not_offsets_data"]


def test_a_segment_that_is_not_a_regular_file_is_reported_not_skipped(tmp_path):
    # a pipe's size is 0, as an empty active segment's is: it was skipped without a word (and reading it would wait
    # for a writer); a directory's size is its own
    d = tmp_path / "__consumer_offsets-2"
    _seg(d, 0, 1)
    os.mkfifo(d / f"{5:020d}.log")
    (d / f"{7:020d}.log").mkdir()
    (d / f"{9:020d}.log").write_bytes(b"")  # an empty active segment: skipped, no problem
    segs, problems = discover_segments(d)
    assert [s.base_offset for s in segs] == [0]
    assert sorted((Path(p.source).name, p.kind, p.offsets_partition) for p in problems) == [
        (f"{5:020d}.log", "unreadable", 2), (f"{7:020d}.log", "unreadable", 2)]
    assert all("is not a regular file" in p.reason for p in problems)
    single, problems = discover_segments(d / f"{5:020d}.log")  # named on its own
    assert single == [] and [p.kind for p in problems] == ["unreadable"]


def test_names_past_kafkas_partitions_and_offsets_are_reported_not_read(tmp_path):
    # a partition id is a Java int, an offset a Java long: past them the name is no log's (and the number would not
    # fit the decoded columns)
    root = tmp_path / "logs"
    _seg(root / "__consumer_offsets-2147483648", 0, 1)
    _seg(root / "__consumer_offsets-4", 0, 1)
    (root / "__consumer_offsets-4" / "99999999999999999999.log").write_bytes(b"x")  # 20 digits, past 2^63 - 1
    segs, problems = discover_segments(root)
    assert [(s.offsets_partition, s.base_offset) for s in segs] == [(4, 0)]
    assert sorted((Path(p.source).name, p.kind) for p in problems) == [
        ("99999999999999999999.log", "not_offsets_data"), ("__consumer_offsets-2147483648", "not_offsets_data")]
    assert all("past Kafka's" in p.reason for p in problems)
    alone, problems = discover_segments(root / "__consumer_offsets-2147483648")  # the directory named on its own
    assert alone == [] and [p.kind for p in problems] == ["not_offsets_data"]
    assert partition_count(root) == 5


def test_bare_log_files_directory(tmp_path):
    d = tmp_path / "copied"
    _seg(d, 40, 1)
    _seg(d, 3, 2)
    segs, problems = discover_segments(d)
    assert [(s.offsets_partition, s.base_offset) for s in segs] == [(-1, 3), (-1, 40)] and problems == []


def test_read_log_order_and_problems_first(logdir):
    items = list(read_log(logdir))
    problems = [i for i in items if isinstance(i, ReadProblem)]
    records = [i for i in items if isinstance(i, LogRecord)]
    assert items[: len(problems)] == problems
    assert [(r.offsets_partition, r.offset) for r in records] == [
        (3, 0), (3, 1), (3, 20), (3, 21), (3, 22), (3, 30), (3, 100), (12, 7), (12, 8)]


def test_read_log_torn_tail_in_middle_segment(tmp_path):
    d = tmp_path / "__consumer_offsets-0"
    _seg(d, 0, 2)
    p = _seg(d, 2, 2)
    _seg(d, 4, 1)
    p.write_bytes(p.read_bytes()[:-5])
    items = list(read_log(d))
    assert [getattr(i, "offset", None) for i in items if isinstance(i, LogRecord)] == [0, 1, 2, 4]
    (prob,) = [i for i in items if isinstance(i, ReadProblem)]
    assert prob.kind == "torn_tail" and prob.source == str(p) and prob.position > 0


def test_realdata_log_dirs_read_clean(realdata):
    roots = sorted(m.parent for m in realdata.glob("seg_*/**/meta.properties"))
    assert len(roots) == 12
    total = 0
    for root in roots:
        segs, problems = discover_segments(root)
        assert problems == [], root
        assert all(0 <= s.offsets_partition < 50 for s in segs)
        items = list(read_log(root))
        assert not [i for i in items if isinstance(i, ReadProblem)]
        total += len(items)
    assert total == 6330


def test_brokerdata_log_dirs_read_clean(brokerdata):
    for scen in sorted(p for p in brokerdata.iterdir() if (p / "data").is_dir()):
        segs, problems = discover_segments(scen / "data")
        assert problems == [] and segs, scen
        dumped = sum(f.read_text().count("| offset:") for f in (scen / "dump_log").glob("*.txt"))
        assert sum(1 for i in read_log(scen / "data") if isinstance(i, LogRecord)) == dumped


def _walkers():
    """The entry-head walkers behind `segments.entry_heads`: the Python reference, and the C one when built."""
    from pipelines.decoding import framing
    from pipelines.decoding.native import fastdecode

    walkers = {"python": framing._walk_entry_heads}
    if fastdecode is not None:
        walkers["c"] = framing._walk_entry_heads_in_c
    return {name: (lambda path, walk=walk: walk(Path(path).read_bytes(), 0)) for name, walk in walkers.items()}


@pytest.mark.parametrize("walker", sorted(_walkers()))
def test_entry_heads_are_the_batches_kafka_dump_log_prints(brokerdata, walker):
    """Every batch's position, last offset and record count as `kafka-dump-log` printed them, and the walk ends at
    the file's end."""
    import re

    walk = _walkers()[walker]
    line = re.compile(r"lastOffset: (\d+) count: (\d+) .* position: (\d+) ")
    checked = 0
    for dump in sorted(brokerdata.glob("*/dump_log/__consumer_offsets-*.txt")):
        segs = sorted((dump.parent.parent / "data" / dump.stem).glob("*.log"))
        if len(segs) != 1:
            continue
        want = [(int(m.group(3)), int(m.group(1)), max(1, int(m.group(2))))
                for m in map(line.search, dump.read_text().splitlines()) if m]
        heads = walk(segs[0])
        assert list(zip(heads.positions.tolist(), heads.last_offsets.tolist(), heads.records.tolist())) == want, dump
        assert heads.end == segs[0].stat().st_size, dump
        checked += 1
    assert checked >= 10


def test_the_c_entry_head_walker_stops_where_the_reference_does_on_damaged_bytes(realdata, tmp_path):
    """Truncated, zeroed and overwritten segments: the same heads and the same stopping place."""
    import random

    walkers = _walkers()
    if "c" not in walkers:
        pytest.skip("the C extension is not built")
    rng = random.Random(5)
    segs = sorted(realdata.glob("seg_*/**/*.log"))
    assert segs
    for n, seg in enumerate(segs[:40]):
        data = bytearray(seg.read_bytes())
        if not data:
            continue
        for case in range(6):
            buf = bytearray(data)
            at = rng.randrange(len(buf))
            if case == 0:
                buf = buf[:at]
            elif case == 1:
                buf[at:at + 64] = bytes(min(64, len(buf) - at))
            else:
                for _ in range(case):
                    buf[rng.randrange(len(buf))] = rng.randrange(256)
            path = tmp_path / f"{n}-{case}.log"
            path.write_bytes(bytes(buf))
            py, c = walkers["python"](path), walkers["c"](path)
            assert (py.positions.tolist(), py.last_offsets.tolist(), py.records.tolist(), py.end) == (
                c.positions.tolist(), c.last_offsets.tolist(), c.records.tolist(), c.end), (seg, case)


def test_a_file_named_like_a_partition_directory_is_reported_not_skipped(tmp_path):
    # a segment copied to `__consumer_offsets-0` (its directory's name) in a log dir: its records were not read
    # and nothing said so
    root = tmp_path / "logs"
    _seg(root / "__consumer_offsets-1", 0, 1)
    (root / "__consumer_offsets-0").write_bytes(_seg(tmp_path / "elsewhere", 0, 2).read_bytes())
    segs, problems = discover_segments(root)
    assert [(s.offsets_partition, s.base_offset) for s in segs] == [(1, 0)]
    assert [(Path(p.source).name, p.kind, p.offsets_partition) for p in problems] == [
        ("__consumer_offsets-0", "unreadable", 0)]
    assert "is a file, not a partition directory" in problems[0].reason


def test_a_log_file_not_named_by_a_base_offset_is_reported_not_skipped(tmp_path):
    # Kafka names a segment by its base offset; a copy's name (`… (copy).log`) or a sign is no segment Kafka would
    # load as one, and such a file was passed over without a word, its records with it
    d = tmp_path / "__consumer_offsets-2"
    _seg(d, 0, 1)
    for name in ("00000000000000000000 (copy).log", "-0000000000000000001.log", ".log"):
        (d / name).write_bytes((d / f"{0:020d}.log").read_bytes())
    segs, problems = discover_segments(d)
    assert [s.base_offset for s in segs] == [0]
    assert sorted((Path(p.source).name, p.kind, p.offsets_partition) for p in problems) == [
        ("-0000000000000000001.log", "not_offsets_data", 2), (".log", "not_offsets_data", 2),
        ("00000000000000000000 (copy).log", "not_offsets_data", 2)]
    assert all("not named by a base offset" in p.reason for p in problems)


def test_a_name_that_is_not_utf8_is_reported_as_utf8_text(tmp_path):
    # Linux names a file with any bytes; a report of one (a file beside the segments, a directory named as the offsets
    # topic's but no partition of it) held Python's surrogate escapes, which no table takes: the run ended as a stack
    # trace at the work table
    from pipelines.decoding.rows import problem_to_row, rows_to_arrow

    d = tmp_path / "__consumer_offsets-2"
    _seg(d, 0, 1)
    os.mkdir(os.fsencode(tmp_path) + b"/__consumer_offsets-\xff")
    with open(os.fsencode(d) + b"/junk\xff.log", "wb") as f:
        f.write(b"x")
    segs, problems = discover_segments(tmp_path)
    assert [s.base_offset for s in segs] == [0]
    assert sorted((Path(p.source).name, p.kind) for p in problems) == [
        ("__consumer_offsets-\\xff", "not_offsets_data"), ("junk\\xff.log", "not_offsets_data")]
    assert "junk\\xff.log is not named by a base offset" in " ".join(p.reason for p in problems)
    assert rows_to_arrow([problem_to_row(p) for p in problems]).num_rows == 2


def test_a_tabular_dump_among_segment_files_is_reported_not_skipped(tmp_path):
    # a directory holding .log files is read as a log: a dump beside them (a .json, a .csv.gz) went unread without
    # a word, its records with it
    bare = tmp_path / "bare"
    _seg(bare, 0, 1)
    (bare / "dump.json").write_text("{}\n")
    part = tmp_path / "logs" / "__consumer_offsets-4"
    _seg(part, 0, 1)
    (part / "export.csv.gz").write_bytes(b"")
    (part / "00000000000000000000.index").write_bytes(b"")  # Kafka's own files stay unmentioned
    for where, name, partition in ((bare, "dump.json", -1), (tmp_path / "logs", "export.csv.gz", 4)):
        segs, problems = discover_segments(where)
        assert len(segs) == 1
        assert [(Path(p.source).name, p.kind, p.offsets_partition) for p in problems] == [
            (name, "not_offsets_data", partition)]
        assert "is a tabular dump among segment files" in problems[0].reason


def _offsets(d: Path) -> list[tuple[int, bytes]]:
    return [(r.offset, r.key) for r in read_log(d) if isinstance(r, LogRecord)]


def _swap(d: Path, base: int, offsets: list[int], key: bytes = b"cleaned") -> Path:
    p = d / f"{base:020d}.log.swap"
    p.write_bytes(b"".join(write_record_batch([(key, b"v", 1000 + o)], o) for o in offsets))
    return p


def test_an_interrupted_swap_replaces_the_segments_it_was_made_of(tmp_path):
    """LogLoader.load: every segment from the swaps' lowest base offset up to their highest next offset is deleted
    and each swap renamed to its .log; so a swap of one segment or of several, at a segment's base offset or not,
    alone or beside .cleaned/.deleted leftovers, is what a broker loads."""
    d = tmp_path / "__consumer_offsets-4"
    for base, n in ((0, 3), (3, 2), (5, 5), (10, 2)):
        _seg(d, base, n)
    _swap(d, 0, [2, 4])  # a cleaning of 0 and 3 into one segment, killed before the rename
    assert _offsets(d) == [(2, b"cleaned"), (4, b"cleaned")] + [(o, b"k%d" % (o - 5)) for o in range(5, 10)] + \
        [(10, b"k0"), (11, b"k1")]
    _, problems = discover_segments(d)
    assert sorted((p.kind, Path(p.source).name) for p in problems) == [
        ("swap_file", "00000000000000000000.log"), ("swap_file", "00000000000000000003.log")]

    (d / "00000000000000000000.log.swap").unlink()
    _swap(d, 6, [7, 9])  # a base offset no segment has: 5 stays (it starts below), 10 stays (at the swap's end)
    assert [o for o, _ in _offsets(d)] == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 7, 9, 10, 11]

    _swap(d, 3, [3, 4])  # two swaps: everything from 3 up to 10 goes, the one at 5 too
    _seg(d, 9, 1, suffix=".log.deleted")
    assert [o for o, _ in _offsets(d)] == [0, 1, 2, 3, 4, 7, 9, 10, 11]


def test_a_swap_not_named_as_kafka_names_it_replaces_nothing_and_is_not_read(tmp_path):
    """LogLoader opens the swap its base offset names (`00000000000000000000.log.swap`): `0.log.swap` is renamed to
    `0.log`, which no broker reads, and the segments it would have replaced stay."""
    d = tmp_path / "__consumer_offsets-4"
    _seg(d, 0, 3)
    _swap(d, 0, [2]).rename(d / "0.log.swap")
    assert _offsets(d) == [(0, b"k0"), (1, b"k1"), (2, b"k2")]
    _, problems = discover_segments(d)
    assert [(p.kind, Path(p.source).name) for p in problems] == [("swap_file", "0.log.swap")]


def test_a_swap_above_the_lowest_cleaned_file_is_an_incomplete_split_and_not_read(tmp_path):
    d = tmp_path / "__consumer_offsets-4"
    _seg(d, 0, 4)
    _swap(d, 0, [0, 1])  # a split of the overflowed 0 in progress: its swaps and .cleaned files
    _swap(d, 2, [2, 3])
    _seg(d, 2, 2, suffix=".log.cleaned")
    # the swap at 0 is below the .cleaned: renamed in place of 0.log (the split's first half)
    assert _offsets(d) == [(0, b"cleaned"), (1, b"cleaned")]
    _, problems = discover_segments(d)
    assert sorted((p.kind, Path(p.source).name) for p in problems) == [
        ("swap_file", "00000000000000000000.log"), ("swap_file", "00000000000000000002.log.swap")]


def test_an_empty_swap_still_replaces_its_own_segment_and_a_swap_alone_is_read(tmp_path):
    d = tmp_path / "__consumer_offsets-4"
    _seg(d, 0, 2)
    _seg(d, 2, 2)
    (d / "00000000000000000002.log.swap").write_bytes(b"")  # a cleaning that kept nothing of 2 and 3
    (d / "00000000000000000002.index.swap").write_bytes(b"\0" * 8)  # an index's swap: no data
    assert [o for o, _ in _offsets(d)] == [0, 1]
    _, problems = discover_segments(d)
    assert [(p.kind, Path(p.source).name) for p in problems] == [("swap_file", "00000000000000000002.log")]

    alone = tmp_path / "__consumer_offsets-5"
    alone.mkdir()
    _swap(alone, 7, [7, 8])
    assert [o for o, _ in _offsets(alone)] == [7, 8]
    assert [o for o, _ in _offsets(tmp_path)] == [0, 1, 7, 8]


def test_a_copy_of_a_partition_directory_under_another_name_is_reported_not_skipped(tmp_path):
    """`__consumer_offsets-3.bak` beside `__consumer_offsets-3`: no directory Kafka loads, and records all the same."""
    _seg(tmp_path / "__consumer_offsets-3", 0, 2)
    _seg(tmp_path / "__consumer_offsets-3.bak", 0, 3)
    _seg(tmp_path / "__consumer_offsets-3.0123456789abcdef0123456789abcdef-delete", 0, 1)  # Kafka's: deleted
    segs, problems = discover_segments(tmp_path)
    assert [(s.offsets_partition, s.base_offset) for s in segs] == [(3, 0)]
    assert [(p.kind, Path(p.source).name) for p in problems] == [("not_offsets_data", "__consumer_offsets-3.bak")]


def test_a_segment_linked_into_two_partition_directories_is_read_for_each(tmp_path):
    """Kafka loads each partition directory's files, whatever they link to: the link in 3 does not hide 4's own."""
    own = _seg(tmp_path / "__consumer_offsets-4", 0, 2)
    (tmp_path / "__consumer_offsets-3").mkdir()
    os.symlink(own, tmp_path / "__consumer_offsets-3" / own.name)
    assert [(r.offsets_partition, r.offset) for r in read_log(tmp_path)] == [(3, 0), (3, 1), (4, 0), (4, 1)]
    segs, problems = discover_segments([tmp_path, own, tmp_path / "__consumer_offsets-3"])  # each reached again
    assert [(s.offsets_partition, s.base_offset) for s in segs] == [(3, 0), (4, 0)] and problems == []


def test_a_directory_kafka_does_not_load_given_by_name_says_why_it_is_not_read(tmp_path):
    d = tmp_path / "__consumer_offsets-5.0123456789abcdef0123456789abcdef-delete"
    _seg(d, 0, 1)
    segs, problems = discover_segments(d)
    assert segs == [] and [(p.kind, Path(p.source).name) for p in problems] == [("not_offsets_data", d.name)]
    assert "-delete" in problems[0].reason
    assert [s.base_offset for s in discover_segments(d / "00000000000000000000.log")[0]] == [0]


@pytest.mark.parametrize("link", ["loop", "dangling"])
def test_a_partition_directory_that_is_a_link_to_nothing_is_reported_and_counts_no_partition(tmp_path, link):
    # a looping link named like a partition directory made the partition count (`DirEntry.is_dir` raises ELOOP)
    # a stack trace after the whole decode; Kafka's LogManager lists partition dirs by File.isDirectory, false for
    # both, so neither is loaded and neither counts
    root = tmp_path / "logs"
    _seg(root / "__consumer_offsets-1", 0, 1)
    gone = root / "__consumer_offsets-7"
    os.symlink(gone if link == "loop" else tmp_path / "nowhere", gone)
    segs, problems = discover_segments(root)
    assert [(s.offsets_partition, s.base_offset) for s in segs] == [(1, 0)]
    assert [(Path(p.source).name, p.kind, p.offsets_partition) for p in problems] == [
        ("__consumer_offsets-7", "unreadable", 7)]
    assert "is a symbolic link to nothing (dangling, or a loop), not a partition directory" in problems[0].reason
    assert partition_count(root) == 2


def test_a_segment_name_ending_in_a_newline_is_not_a_segment(tmp_path):
    # `$` matches before a trailing newline: `00000000000000000005.log\n` was read as the segment of base offset 5,
    # where Kafka's LocalLog.isLogFile (4.0: endsWith(".log")) takes no such file, and its log loads none of it
    root = tmp_path / "logs"
    _seg(root / "__consumer_offsets-0", 0, 2)
    _seg(root / "__consumer_offsets-0", 5, 3, suffix=".log\n")
    segs, _ = discover_segments(root)
    assert [(s.offsets_partition, s.base_offset) for s in segs] == [(0, 0)]
    assert sum(1 for _ in read_log(root)) == 2


@pytest.mark.parametrize("name", ["__consumer_offsets-+1", "__consumer_offsets-01", "__consumer_offsets-\u0661"])
def test_a_partition_number_kafka_parses_is_read_as_that_partition(tmp_path, name):
    # Kafka reads the number after a partition directory's last dash with Integer.parseInt (4.0
    # LocalLog.parseTopicPartitionName; 2.8-3.x Log/LocalLog.parseTopicPartitionName, Scala's toInt): a '+', leading
    # zeros and any decimal digit of the BMP are partition 1; `__consumer_offsets-+1` was reported and not read
    root = tmp_path / "logs"
    _seg(root / "__consumer_offsets-0", 0, 1)
    _seg(root / name, 0, 2)
    segs, problems = discover_segments(root)
    assert [(s.offsets_partition, s.base_offset) for s in segs] == [(0, 0), (1, 0)] and problems == []
    assert [(r.offsets_partition, r.offset) for r in read_log(root)] == [(0, 0), (1, 0), (1, 1)]
    assert partition_count(root) == 2
    assert [s.offsets_partition for s in discover_segments(root / name)[0]] == [1]  # given by itself


@pytest.mark.parametrize("name", ["__consumer_offsets-\U0001d7cf", "__consumer_offsets-+", "__consumer_offsets-++1",
                                  "__consumer_offsets-1\n"])
def test_a_partition_number_kafka_cannot_parse_is_reported_not_read(tmp_path, name):
    # Integer.parseInt reads a string's chars: a digit past the BMP (MATHEMATICAL BOLD DIGIT ONE) is two surrogates,
    # no digit, and Kafka loads no such directory; it was read as partition 1, where `\d` takes it. So was
    # `__consumer_offsets-1\n` (a `$` matches before a trailing newline), beside or instead of `__consumer_offsets-1`,
    # where Integer.parseInt("1\n") throws (4.0 LocalLog.parseTopicPartitionName)
    root = tmp_path / "logs"
    _seg(root / "__consumer_offsets-0", 0, 1)
    _seg(root / name, 0, 2)
    segs, problems = discover_segments(root)
    assert [(s.offsets_partition, s.base_offset) for s in segs] == [(0, 0)]
    assert [(Path(p.source).name, p.kind) for p in problems] == [(name, "not_offsets_data")]
    assert partition_count(root) == 1


def test_a_dash_after_the_last_dash_names_another_topic(tmp_path):
    # parseTopicPartitionName splits at the last dash: `__consumer_offsets--0` is partition 0 of `__consumer_offsets-`,
    # no internal topic of Kafka's (Topic.INTERNAL_TOPICS, 4.0): a data topic, whose end offsets LAG reads
    from pipelines.decoding.log_end_offsets import log_end_offsets

    root = tmp_path / "logs"
    _seg(root / "__consumer_offsets-0", 0, 1)
    _seg(root / "__consumer_offsets--0", 0, 2)
    segs, problems = discover_segments(root)
    assert [(s.offsets_partition, s.base_offset) for s in segs] == [(0, 0)]
    assert problems == []
    assert [(r.topic, r.partition, r.log_end_offset) for r in log_end_offsets([root])[0]] == [
        ("__consumer_offsets-", 0, 2)]


def test_the_offsets_reader_and_lag_agree_on_which_topics_are_kafkas_own(tmp_path):
    """A log dir's partition directories of a data topic are LAG's (`log_end_offsets`), not offsets data left unread,
    whether or not its name starts with `__` (`__audit`: Kafka's internal topics are `Topic.INTERNAL_TOPICS`, 4.0);
    those of Kafka's internal topics are not LAG's, and the offsets reader says it does not read them. `__audit-0`
    was a `not_offsets_data` problem, where `orders-0` is not, while LAG read its end offsets."""
    from pipelines.decoding.log_end_offsets import log_end_offsets

    root = tmp_path / "logs"
    _seg(root / "__consumer_offsets-0", 0, 1)
    for name in ("orders-0", "__audit-0", "__transaction_state-0", "__share_group_state-0", "__cluster_metadata-0"):
        _seg(root / name, 0, 2)
    segs, problems = discover_segments(root)
    assert [(s.offsets_partition, s.base_offset) for s in segs] == [(0, 0)]
    reported = sorted(Path(p.source).name for p in problems if p.kind == "not_offsets_data")
    lag = sorted(f"{r.topic}-{r.partition}" for r in log_end_offsets([root])[0])
    assert lag == ["__audit-0", "orders-0"]
    assert reported == ["__cluster_metadata-0", "__share_group_state-0", "__transaction_state-0"]
    assert not set(reported) & set(lag)


@pytest.mark.parametrize("one, other", [("__consumer_offsets-1", "__consumer_offsets-01"),
                                        ("__consumer_offsets-1", "__consumer_offsets-+1"),
                                        ("orders-3", "orders-+03")])
def test_two_directories_of_one_partition_in_a_log_dir_are_refused(tmp_path, one, other):
    # LogManager.loadLog (2.8-4.x) throws "Duplicate log directories for <tp> are found in both ..." when a second
    # directory parses to a partition it loaded: the broker does not start, so neither is the log Kafka reads. Both
    # were read as copies of one partition (`-01`), or one of them alone (`-+1`)
    from pipelines.decoding.segments import DuplicateLogDirError
    from pipelines.rebuild.failures import UsageError
    from pipelines.rebuild.preflight import plan_and_check

    root = tmp_path / "logs"
    _seg(root / "__consumer_offsets-0", 0, 1)
    _seg(root / one, 0, 1)
    _seg(root / other, 0, 2)
    with pytest.raises(DuplicateLogDirError, match=f"two directories of partition .* {re.escape(repr(other))}"):
        discover_segments(root)
    with pytest.raises(UsageError) as refused:
        plan_and_check([str(root)])
    assert "Duplicate log directories" in str(refused.value) and "\n" not in str(refused.value)
    if one.startswith("__"):  # the two given as inputs themselves: one log dir's still
        with pytest.raises(DuplicateLogDirError, match=re.escape(repr(other))):
            discover_segments([root / one, root / other])
        assert [s.offsets_partition for s in discover_segments([root / one, root / one])[0]] == [1]
    (root / other).rename(root / f"{other}.0123456789abcdef0123456789abcdef-delete")  # Kafka deletes it: no twin
    assert [s.offsets_partition for s in discover_segments(root)[0]] == [0, 1] if one.startswith("__") else [0]
