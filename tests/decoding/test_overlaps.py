"""Overlapping segment files of one partition: a record left out as a copy is reported when it differs from the
record loaded at its offset (`decoding.overlaps`)."""
from __future__ import annotations

from pathlib import Path

from pipelines.decoding.batch_writer import write_record_batch
from pipelines.decoding.overlaps import copy_conflicts
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
    _file(d, 3, [[(3, b"D"), (4, b"e")], [(5, b"f")]])  # 3 and 4 were loaded from the file at 1
    assert _conflicts(d) == [(b.name, 0, 1), ("00000000000000000003.log", 0, 3)]
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
    monkeypatch.setattr(overlaps, "_records", lambda seg: (_ for _ in ()).throw(AssertionError(seg.path)))
    assert _conflicts(d) == []


def test_a_legacy_compressed_copy_is_compared_though_its_head_holds_its_last_offset(tmp_path):
    d = tmp_path / "__consumer_offsets-0"
    _file(d, 0, [[(0, b"a"), (1, b"b"), (2, b"c")]], magic=1, codec="gzip")
    _file(d, 1, [[(1, b"b"), (2, b"C"), (3, b"d")]], magic=1, codec="gzip")  # its wrapper's offset: 3
    assert _conflicts(d) == [("00000000000000000001.log", 0, 2)]
