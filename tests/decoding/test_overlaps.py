"""Overlapping segment files of one partition: what Kafka's loader reads of them by offset, and a record it passes
over reported when it differs from the record loaded at its offset (`decoding.overlaps`)."""
from __future__ import annotations

from pathlib import Path

from pipelines.decoding.batch_writer import write_record_batch
from pipelines.decoding.overlaps import copy_conflicts, kafka_reading
from pipelines.decoding.segments import discover_segments


def _file(d: Path, base: int, batches: list[list[tuple[int, bytes]]], **kw) -> Path:
    """A segment named `base` holding one batch per list of (offset, value): offsets consecutive in a batch."""
    d.mkdir(parents=True, exist_ok=True)
    p = d / f"{base:020d}.log"
    p.write_bytes(b"".join(write_record_batch([(b"k%d" % o, v, 1000 + o) for o, v in b], b[0][0], **kw)
                           for b in batches))
    return p


def _conflicts(d: Path) -> list[tuple[str, int, int]]:
    segs, _ = discover_segments(d)
    return [(Path(p.source).name, p.position, p.offset) for p in copy_conflicts(segs) if p.kind == "duplicate_conflict"]


def test_a_copy_alike_is_no_conflict_whatever_its_batches(tmp_path):
    d = tmp_path / "__consumer_offsets-0"
    _file(d, 0, [[(0, b"a"), (1, b"b")], [(2, b"c")]])
    _file(d, 1, [[(1, b"b")], [(2, b"c"), (3, b"d")]])  # the same records, batched otherwise
    _file(d, 2, [[(2, b"c"), (3, b"d")]])  # a byte copy of what the file before it loaded
    assert _conflicts(d) == []


def test_a_record_left_out_that_differs_from_the_loaded_one_is_reported_where_it_is(tmp_path):
    d = tmp_path / "__consumer_offsets-0"
    _file(d, 0, [[(0, b"a")], [(1, b"b")], [(2, b"c")]])
    b = _file(d, 1, [[(1, b"B")], [(2, b"c")], [(3, b"d")], [(4, b"e")]])
    _file(d, 3, [[(3, b"D"), (4, b"e")], [(5, b"f")]])
    # after the file at 0 the loader asks for offset 3: the file at 3 is its floor segment, so 3 and 4 are loaded
    # from there, and the file at 1 is never read (its 1 and 3 differ from the records loaded)
    assert _conflicts(d) == [(b.name, 0, 1), (b.name, 142, 3)]
    segs, _ = discover_segments(d)
    (first, _) = copy_conflicts(segs)
    assert "00000000000000000000.log" in first.reason and first.key == b"k1" and first.value == b"B"


def test_a_copy_whose_batch_says_otherwise_differs(tmp_path):
    """The same key and value in a transactional batch is another record: its marker decides it."""
    d = tmp_path / "__consumer_offsets-0"
    _file(d, 0, [[(0, b"a"), (1, b"b")]])
    _file(d, 1, [[(1, b"b")]], producer_id=7, producer_epoch=0, is_transactional=True)
    assert _conflicts(d) == [("00000000000000000001.log", 0, 1)]


def test_a_file_that_overlaps_none_is_not_decoded(tmp_path, monkeypatch):
    from pipelines.decoding import overlaps

    d = tmp_path / "__consumer_offsets-0"
    _file(d, 0, [[(0, b"a"), (1, b"b")]])
    _file(d, 2, [[(2, b"c")]])
    monkeypatch.setattr(overlaps, "entry_records", lambda seg: (_ for _ in ()).throw(AssertionError(seg.path)))
    assert _conflicts(d) == []


def test_a_legacy_compressed_copy_is_compared_though_its_head_holds_its_last_offset(tmp_path):
    d = tmp_path / "__consumer_offsets-0"
    _file(d, 0, [[(0, b"a"), (1, b"b"), (2, b"c")]], magic=1, codec="gzip")
    _file(d, 1, [[(1, b"b"), (2, b"C"), (3, b"d")]], magic=1, codec="gzip")  # its wrapper's offset: 3
    assert _conflicts(d) == [("00000000000000000001.log", 0, 2)]


def _unread(d: Path, **kw) -> dict[str, list[tuple[int, int]]]:
    segs, _ = discover_segments(d)
    return {Path(p).name: [(a, b) for a, b, *_ in r] for p, r in kafka_reading(segs, **kw).unread.items()}


def test_an_interleaved_file_is_read_from_the_offset_the_loader_asks_for(tmp_path):
    """A holds 0 and 2, B (base 1) holds 1 and 3: after A the loader asks for 3, whose floor segment is B; B's 1 is
    never read."""
    d = tmp_path / "__consumer_offsets-0"
    _file(d, 0, [[(0, b"a")], [(2, b"c")]])
    b = _file(d, 1, [[(1, b"b")], [(3, b"d")]])
    first = len(write_record_batch([(b"k1", b"b", 1001)], 1))
    assert _unread(d) == {b.name: [(0, first)]}
    assert _conflicts(d) == []  # no record read holds offset 1: the range stands for it


def test_a_file_is_left_for_the_later_one_that_becomes_the_floor_segment_within_it(tmp_path):
    """The loader reads `offsets.load.buffer.size` bytes at a time: once the next offset it asks for is past a later
    file's base offset, it reads on from that file, and the rest of the earlier one is passed over."""
    d = tmp_path / "__consumer_offsets-0"
    a = _file(d, 0, [[(o, b"x")] for o in range(6)])
    _file(d, 2, [[(o, b"x")] for o in range(2, 8)])
    size = len(write_record_batch([(b"k0", b"x", 1000)], 0))
    assert _unread(d) == {"00000000000000000002.log": [(0, 4 * size)]}  # one read of A: 0..5, then 6 from B
    assert _unread(d, load_buffer_size=2 * size) == {a.name: [(2 * size, 6 * size)]}  # 0, 1; then B from 2 on


def test_records_past_the_log_end_offset_or_below_the_log_start_are_passed_over(tmp_path):
    d = tmp_path / "__consumer_offsets-0"
    a = _file(d, 0, [[(o, b"x")] for o in range(6)])
    _file(d, 2, [[(2, b"x")]])  # the active segment: the log ends at 3
    size = len(write_record_batch([(b"k0", b"x", 1000)], 0))
    assert _unread(d, load_buffer_size=size) == {a.name: [(2 * size, 6 * size)]}  # 0, 1 from A, 2 from B: the end
    assert _unread(d) == {"00000000000000000002.log": [(0, size)]}  # one read of A went past the log end
    e = tmp_path / "x" / "__consumer_offsets-0"
    c = _file(e, 5, [[(o, b"x")] for o in range(3, 8)])  # batches below the file's base offset
    assert _unread(e) == {c.name: [(0, 2 * size)]}


def test_files_that_do_not_overlap_are_read_whole(tmp_path):
    d = tmp_path / "__consumer_offsets-0"
    _file(d, 0, [[(0, b"a"), (1, b"b")]])
    _file(d, 2, [[(5, b"c")]])  # a cleaned segment: its first batch past its base offset
    _file(d, 9, [[(9, b"c")], [(12, b"d")]])
    assert _unread(d) == {}


def test_of_two_files_of_one_base_offset_the_one_reaching_further_is_read(tmp_path):
    """Two log dirs' copies of a partition's segment: a log holds one file per base offset; the other copy is passed
    over whole (`duplicate_segment`), and a record of it that differs from the one read is a conflict."""
    short = _file(tmp_path / "b1" / "__consumer_offsets-0", 0, [[(0, b"A")]])
    _file(tmp_path / "b2" / "__consumer_offsets-0", 0, [[(0, b"a")], [(1, b"b")]])
    segs, _ = discover_segments([tmp_path / "b1", tmp_path / "b2"])
    reading = kafka_reading(segs)
    assert [(a, b, kind) for a, b, _, kind in reading.unread[str(short)]] == \
        [(0, short.stat().st_size, "duplicate_segment")] and list(reading.unread) == [str(short)]
    assert [(p.kind, p.source, p.offset) for p in reading.problems] == [("duplicate_conflict", str(short), 0)]


def test_a_batch_read_again_for_its_later_offsets_is_replayed_after_the_copy_read_first(tmp_path):
    """A holds one batch of offsets 0..3, B (base 2) one batch of 2..5 whose 2 differs: after A the loader asks for
    4, whose floor segment is B, and `LogSegment.read` hands over B's batch from its start (its last offset reaches
    4). Both loaders replay every record of a batch handed over, so B's 2 is replayed after A's: its row must not
    say the broker skips it."""
    d = tmp_path / "__consumer_offsets-0"
    _file(d, 0, [[(o, b"x") for o in range(4)]])
    b = _file(d, 2, [[(2, b"B"), (3, b"x"), (4, b"x"), (5, b"x")]])
    assert _unread(d) == {}  # every entry is read: none passed over
    segs, _ = discover_segments(d)
    (row,) = copy_conflicts(segs)
    assert (row.kind, row.source, row.position, row.offset, row.value) == ("duplicate_conflict", str(b), 0, 2, b"B")
    assert "replays this copy after that one" in row.reason and "this one is not" not in row.reason
