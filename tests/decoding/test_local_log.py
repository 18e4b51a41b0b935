"""A data partition's bounds and the timestamp at any offset (`local_log`, `log_segment`, `indexes`), against ground
truth: segments a real broker wrote (`../shared`) scanned whole by aiokafka's own record reader, and generated
segments (the project's writers, indexes as the broker appends them, then damaged) decoded whole by the project's
reader. The answer is held to the full scan's; the index path to at most one decoded batch per asked offset."""
from __future__ import annotations

import bisect
import contextlib
import os
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipelines.decoding import log_segment
from pipelines.decoding.batch_writer import write_control_batch, write_empty_batch, write_record_batch
from pipelines.decoding.batches import read_batches_from_file
from pipelines.decoding.local_log import SOURCE_LOG_START_CHECKPOINT, LocalLog
from pipelines.decoding.segment_writer import SegmentWriter
from schemas.log_notes import INDEX_MISMATCH, INDEX_MISSING, INDEX_TORN, LOG_NOTE_KINDS, SEGMENT_TORN
from tests.depth import cases


@pytest.fixture
def indexes_always(monkeypatch):
    """Every segment read through its indexes, however small (a small one is otherwise read from its headers)."""
    monkeypatch.setattr(log_segment, "SMALL_SEGMENT_BYTES", 0)


@contextlib.contextmanager
def _small_segments(limit: int):
    before = log_segment.SMALL_SEGMENT_BYTES
    log_segment.SMALL_SEGMENT_BYTES = limit
    try:
        yield
    finally:
        log_segment.SMALL_SEGMENT_BYTES = before


# ---------------------------------------------------------------------------------------------------------------
# the truth: every batch of the log in order, from a full scan
# ---------------------------------------------------------------------------------------------------------------
class Truth:
    """The answers a full scan gives: `batches` in log order as (max_timestamp, is_control, [(offset, timestamp)])."""

    def __init__(self, batches: list[tuple[int, bool, list[tuple[int, int]]]], first: int | None, end: int | None):
        self.batches, self.first, self.end = batches, first, end
        self.handed = []  # (offset, timestamp, batch index, index in batch) of every record a consumer is handed
        for b, (_mx, control, records) in enumerate(batches):
            if not control:
                self.handed += [(o, t, b, i) for i, (o, t) in enumerate(records)]
        self._offsets = [h[0] for h in self.handed]

    def at(self, offset: int) -> tuple[int, int, int] | None:
        """(offset, own timestamp, largest timestamp up to it) of the first record handed at or after `offset`."""
        k = bisect.bisect_left(self._offsets, offset)
        if k == len(self.handed):
            return None
        o, t, b, i = self.handed[k]
        largest = max([-1] + [mx for mx, _c, _r in self.batches[:b]] + [ts for _o, ts in self.batches[b][2][:i + 1]])
        return o, t, largest


def _expect(log: LocalLog, truth: Truth, offsets) -> None:
    assert (log.log_start_offset, log.log_end_offset) == (truth.first, truth.end)
    for o in offsets:
        got = log.first_unconsumed(o)
        want = truth.at(max(o, truth.first))
        if want is None:
            assert got.offset is None, (o, got)
            continue
        no = (lambda v: None if v == -1 else v)
        assert (got.offset, got.timestamp_ms, got.max_timestamp_ms) == (want[0], no(want[1]), no(want[2])), (o, got,
                                                                                                            want)


def _aiokafka_truth(partition_dir: Path) -> Truth:
    """aiokafka's pure-Python record reader over every segment, whole: an implementation of the format that shares
    nothing with ours."""
    from aiokafka.record.memory_records import _MemoryRecordsPy

    batches, end = [], None
    for f in sorted(partition_dir.glob("*.log"), key=lambda p: int(p.stem)):
        data = f.read_bytes()
        if not data:
            continue
        mr = _MemoryRecordsPy(data)
        while (b := mr.next_batch()) is not None:
            records = [(r.offset, r.timestamp) for r in b]
            batches.append((b.max_timestamp, b.is_control_batch, records))
            end = b.next_offset
    return Truth(batches, _kafka_log_start(partition_dir) if batches else None, end)


def _kafka_log_start(d: Path) -> int:
    """`LogLoader.load`'s logStartOffset without a checkpoint: the first segment's base offset, its name (a compacted
    log's cleaner removes the records at its head and keeps the name)."""
    return min(int(p.stem) for p in d.glob("*.log"))


def _real_partition_dirs(*roots: Path) -> list[Path]:
    out = []
    for root in roots:
        for d in sorted(root.rglob("__consumer_offsets-*")):
            if d.is_dir() and any(f.stat().st_size for f in d.glob("*.log")):
                out.append(d)
    return out


@pytest.mark.shared
@pytest.mark.parametrize("through_indexes", [True, False], ids=["indexes", "small-from-headers"])
def test_real_segments_bounds_and_timestamps_equal_a_full_scan(realdata, brokerdata, through_indexes):
    """Every non-empty partition a real broker wrote (Kafka 1.0-4.0: compressed batches, transaction markers,
    trimmed indexes, missing ones): the log's bounds, and at every offset the record handed, its timestamp and the
    largest up to it, as aiokafka's full scan gives them. Where the broker left its indexes, read through them
    (however small the segment), they are what was used (no note, no header walk of the segment); read as a small
    segment is (from its headers), the answers are the same."""
    dirs = _real_partition_dirs(realdata, brokerdata)
    assert len(dirs) > 100
    indexed = 0
    for d in dirs:
        truth = _aiokafka_truth(d)
        log = LocalLog("__consumer_offsets", int(d.name.rsplit("-", 1)[1]), str(d))
        try:
            with _small_segments(0 if through_indexes else log_segment.SMALL_SEGMENT_BYTES):
                _expect(log, truth, range(truth.first, truth.end + 2))
            if not through_indexes:
                continue
            with_indexes = all(os.path.exists(s.path[:-4] + ".index") and os.path.exists(s.path[:-4] + ".timeindex")
                               for s in log.segments if s.size)
            if with_indexes:
                indexed += 1
                assert log.notes == [], (d, log.notes)
                assert not any("_all_heads" in s.__dict__ for s in log.segments), d
            else:
                assert log.notes and {n.kind for n in log.notes} == {INDEX_MISSING}, (d, log.notes)
        finally:
            log.close()
    assert indexed >= 20 or not through_indexes


@pytest.mark.shared
def test_real_batch_headers_equal_a_full_scan(realdata, brokerdata):
    """The head of every batch as `LogSegment.heads` reads it (offsets, largest timestamp, type, control, count)
    equals aiokafka's decoded batch."""
    from aiokafka.record.memory_records import _MemoryRecordsPy

    checked = 0
    for d in _real_partition_dirs(realdata, brokerdata):
        for f in sorted(d.glob("*.log")):
            if not f.stat().st_size:
                continue
            seg = log_segment.LogSegment(str(f), int(f.stem), f.stat().st_size, [])
            mr = _MemoryRecordsPy(f.read_bytes())
            ours = list(seg.heads(0))
            theirs = []
            while (b := mr.next_batch()) is not None:
                theirs.append((b.base_offset, b.next_offset - 1, b.max_timestamp,
                               "LogAppendTime" if b.timestamp_type else "CreateTime", b.is_control_batch,
                               len(list(b))))
            seg.close()
            assert [(h.offset, h.last_offset, h.max_timestamp, h.timestamp_type, h.is_control, h.records)
                    for h in ours] == theirs, f
            checked += len(theirs)
    assert checked > 1000


# ---------------------------------------------------------------------------------------------------------------
# generated segments: the project's writers, indexes as the broker appends them, then damaged
# ---------------------------------------------------------------------------------------------------------------
DAMAGES = ("none", "no_index", "no_timeindex", "index_cut_mid_entry", "index_zero_tail", "timeindex_zero_tail",
           "index_entry_out_of_order", "index_entry_moved", "time_entry_inflated", "log_torn_tail")


@st.composite
def partitions(draw):
    """A partition's segments: each a list of batches (v2 of every codec, CreateTime going backwards or
    LogAppendTime, compacted gaps; transaction markers; emptied batches; legacy v0/v1 messages and wrappers), an
    index interval, and one damage per segment."""
    rng = random.Random(draw(st.integers(0, 2**32)))
    n_segments = draw(st.integers(1, 4))
    legacy = draw(st.booleans())
    offset = draw(st.integers(0, 10_000))
    ts = 1_700_000_000_000
    segments = []
    for _ in range(n_segments):
        batches = []
        for _ in range(rng.randint(1, 40)):
            kind = rng.random()
            if kind < 0.08:
                batches.append((write_control_batch(rng.randint(0, 1), 0, offset, 7, 0, ts + rng.randint(-5000, 5000)),
                                1))
                offset += 1
                continue
            if kind < 0.13:
                last = offset + rng.randint(0, 5)
                batches.append((write_empty_batch(offset, last, max_timestamp=rng.choice([-1, ts - 10_000])),
                                last - offset + 1))
                offset = last + 1
                continue
            n = rng.randint(1, 6)
            recs = []
            for _ in range(n):
                ts += rng.randint(-3000, 6000)  # CreateTime goes backwards now and then
                recs.append((b"k%d" % rng.randint(0, 99), b"v" * rng.randint(0, 300), max(0, ts)))
            gaps = [0] + [rng.randint(1, 3) for _ in range(n - 1)]
            deltas = [sum(gaps[:i + 1]) for i in range(n)]
            magic = rng.choice([0, 1, 2, 2, 2]) if legacy else 2
            codec = rng.choice(["none", "none", "gzip", "snappy", "lz4"] + (["zstd"] if magic == 2 else []))
            kw = dict(magic=magic, codec=codec, offset_deltas=deltas)
            if magic > 0 and rng.random() < 0.15:
                ts += 1000
                kw.update(timestamp_type="LogAppendTime", log_append_time=ts)
            batches.append((write_record_batch(recs, offset, **kw), deltas[-1] + 1))
            offset += deltas[-1] + 1
        segments.append(batches)
    interval = draw(st.sampled_from([0, 64, 200, 512, 4096]))
    damages = [draw(st.sampled_from(DAMAGES)) for _ in segments]
    return segments, interval, damages


def _write(d: Path, segments, interval: int, damages) -> None:
    base = None
    for k, (batches, damage) in enumerate(zip(segments, damages)):
        first = batches[0][0]
        base = int.from_bytes(first[:8], "big") if magic_of(first) == 2 else _first_legacy_offset(first)
        w = SegmentWriter(d, base, index_interval_bytes=interval)
        for data, _n in batches:
            w.append(data)
        last = k == len(segments) - 1
        w.close(roll=not last, preallocated_index_bytes=4096 if damage in ("index_zero_tail",
                                                                           "timeindex_zero_tail") else 0)
        _damage(w, damage)


def magic_of(entry: bytes) -> int:
    return entry[16]


def _first_legacy_offset(entry: bytes) -> int:
    """The first offset a legacy entry holds (a wrapper's first inner one, by decoding it)."""
    from pipelines.decoding.batches import read_batches

    item = next(iter(read_batches(entry, source="x", offsets_partition=-1)))
    return item[0].base_offset


def _damage(w: SegmentWriter, damage: str) -> None:
    idx, tix = w.index_path, w.time_index_path
    if damage == "no_index":
        idx.unlink()
    elif damage == "no_timeindex":
        tix.unlink()
    elif damage == "index_cut_mid_entry":
        data = idx.read_bytes()
        idx.write_bytes(data[:max(0, len(data) - 3)])
    elif damage == "timeindex_zero_tail":  # both were written preallocated: the offset index trimmed again
        idx.write_bytes(b"".join(e.to_bytes(4, "big", signed=True) + p.to_bytes(4, "big", signed=True)
                                 for e, p in w.offset_entries))
    elif damage == "index_zero_tail":  # the time index trimmed again
        tix.write_bytes(b"".join(t.to_bytes(8, "big", signed=True) + o.to_bytes(4, "big", signed=True)
                                 for t, o in w.time_entries))
    elif damage == "index_entry_out_of_order" and len(w.offset_entries) >= 2:
        data = bytearray(idx.read_bytes())
        data[8:12] = (0).to_bytes(4, "big")  # the second entry's offset below the first's
        idx.write_bytes(bytes(data))
    elif damage == "index_entry_moved" and w.offset_entries:
        data = bytearray(idx.read_bytes())
        k = len(w.offset_entries) // 2
        data[8 * k + 4:8 * k + 8] = (w.offset_entries[k][1] + 5).to_bytes(4, "big")  # into the middle of a batch
        idx.write_bytes(bytes(data))
    elif damage == "time_entry_inflated" and w.time_entries:
        data = bytearray(tix.read_bytes())
        t, _o = w.time_entries[-1]
        data[-12:-4] = (t + 86_400_000).to_bytes(8, "big")  # still in order: only the segment can tell
        tix.write_bytes(bytes(data))
    elif damage == "log_torn_tail":
        with open(w.log_path, "ab") as f:
            f.write(b"\x00\x00\x00\x00\x00\x00\x99\x99\x00\x00\x01\x00garbage")


def _project_truth(d: Path) -> Truth:
    """The project's own reader over every segment, whole (what the index path must agree with)."""
    batches, end = [], None
    for f in sorted(d.glob("*.log"), key=lambda p: int(p.stem)):
        for item in read_batches_from_file(f, offsets_partition=-1):
            if type(item) is not tuple:
                continue  # the torn tail a damage appended: not part of the log
            header, records = item
            batches.append((header.max_timestamp, header.is_control, [(r.offset, r.timestamp) for r in records]))
            end = header.last_offset + 1
    return Truth(batches, _kafka_log_start(d) if batches else None, end)


@settings(max_examples=cases(400, 60), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                             HealthCheck.too_slow])
@given(partitions())
def test_timestamp_at_every_offset_equals_a_full_decode(tmp_path_factory, case):
    """Generated partitions, their indexes whole, missing, torn or pointing wrong, their CreateTime going backwards:
    at every offset the record handed, its own timestamp and the largest up to it are the full decode's. A damage
    the answers ran into leaves a note; none leaves a wrong answer."""
    segments, interval, damages = case
    d = tmp_path_factory.mktemp("orders-0")
    _write(d, segments, interval, damages)
    truth = _project_truth(d)
    with _small_segments(log_segment.SMALL_SEGMENT_BYTES):  # small ones from their headers: the same answers
        _expect(LocalLog("orders", 0, str(d)), truth, range(truth.first - 1, truth.end + 2, 3))
    log = LocalLog("orders", 0, str(d))
    try:
        with _small_segments(0):
            _expect(log, truth, range(truth.first - 1, truth.end + 2))
        kinds = {n.kind for n in log.notes}
        assert kinds <= set(LOG_NOTE_KINDS)
        if set(damages) == {"none"}:
            assert log.notes == []  # the broker's own indexes are trusted, and hold
        if damages[-1] == "log_torn_tail":
            assert SEGMENT_TORN in kinds  # the log end is read past the last index entry, to the tear
    finally:
        log.close()


def _segmented(tmp_path: Path, n_batches: int = 400, records: int = 3, interval: int = 256) -> tuple[Path, Truth]:
    """Four segments of `n_batches` / 4 batches, indexed every `interval` bytes, CreateTime going backwards."""
    rng = random.Random(5)
    d = tmp_path / "orders-1"
    d.mkdir()
    offset, ts = 0, 1_700_000_000_000
    for seg in range(4):
        w = SegmentWriter(d, offset, index_interval_bytes=interval)
        for _ in range(n_batches // 4):
            recs = []
            for _ in range(records):
                ts += rng.randint(-500, 2000)
                recs.append((None, b"x" * 40, ts))
            w.append(write_record_batch(recs, offset, codec=rng.choice(["none", "lz4"])))
            offset += records
        w.close(roll=seg < 3)
    return d, _project_truth(d)


def test_a_lookup_reads_one_batch_and_no_segment_whole(tmp_path, monkeypatch, indexes_always):
    """With the broker's indexes whole, each asked offset decodes one batch and no segment's headers are walked
    whole: the cost is the indexes, a few headers and that batch (O(segments + asked offsets))."""
    d, truth = _segmented(tmp_path)
    decoded = []
    real = log_segment.LogSegment._records

    def counting(self, head, target):
        decoded.append(head.position)
        return real(self, head, target)

    monkeypatch.setattr(log_segment.LogSegment, "_records", counting)
    log = LocalLog("orders", 1, str(d))
    log.log_start, log.log_end_offset  # noqa: B018
    decoded.clear()
    asked = list(range(0, truth.end, 37))
    _expect(log, truth, asked)
    assert len(decoded) == len(asked)
    assert not any("_all_heads" in s.__dict__ for s in log.segments)
    assert log.notes == []


def test_without_indexes_the_headers_answer_the_same_with_a_note(tmp_path, indexes_always):
    d, truth = _segmented(tmp_path)
    for f in list(d.glob("*.index")) + list(d.glob("*.timeindex")):
        f.unlink()
    log = LocalLog("orders", 1, str(d))
    _expect(log, truth, range(0, truth.end, 11))
    assert {n.kind for n in log.notes} == {INDEX_MISSING}
    sources = [n.source for n in log.notes]
    assert len(sources) == len(set(sources)) >= 4  # one per missing file the answers needed
    assert all(n.position == -1 and n.source.endswith(("index", "timeindex")) for n in log.notes)


def test_a_torn_index_is_used_up_to_its_tear(tmp_path, indexes_always):
    d, truth = _segmented(tmp_path)
    idx = sorted(d.glob("*.index"))[1]
    data = idx.read_bytes()
    idx.write_bytes(data[:40] + b"\x00" * 4096)  # five entries, then a preallocated tail
    log = LocalLog("orders", 1, str(d))
    _expect(log, truth, range(0, truth.end, 5))
    (note,) = log.notes
    assert (note.kind, note.source, note.position) == (INDEX_TORN, str(idx), 40)
    assert "zero-filled" in note.reason


def test_an_index_pointing_wrong_is_caught_against_the_segment(tmp_path, indexes_always):
    d, truth = _segmented(tmp_path)
    tix = sorted(d.glob("*.timeindex"))[0]
    data = bytearray(tix.read_bytes())
    for k in range(len(data) // 12):  # every entry a day later: in order, and wrong
        t = int.from_bytes(data[12 * k:12 * k + 8], "big")
        data[12 * k:12 * k + 8] = (t + 86_400_000).to_bytes(8, "big")
    tix.write_bytes(bytes(data))
    log = LocalLog("orders", 1, str(d))
    _expect(log, truth, range(0, truth.end, 3))
    assert [n.kind for n in log.notes] == [INDEX_MISMATCH] and log.notes[0].source == str(tix)


def test_the_log_start_honours_the_checkpoint_and_retention(tmp_path):
    """DeleteRecords moved the start inside the first segment: the checkpoint says so. Retention deleted the oldest
    segment after the checkpoint was written: the first segment's base offset says more than the checkpoint."""
    d, truth = _segmented(tmp_path)
    log = LocalLog("orders", 1, str(d), checkpoint_start=130)
    assert log.log_start == (130, SOURCE_LOG_START_CHECKPOINT)
    assert log.first_unconsumed(10).offset == 130
    first = sorted(d.glob("*.log"), key=lambda p: int(p.stem))[0]
    for suffix in (".log", ".index", ".timeindex"):
        first.with_suffix(suffix).unlink()
    log = LocalLog("orders", 1, str(d), checkpoint_start=0)
    second = sorted(int(p.stem) for p in d.glob("*.log"))[0]
    assert log.log_start == (second, "segment")
    got = log.first_unconsumed(0)
    assert got.offset == second
    # the largest timestamp counts only what the log dir still holds
    held = Truth([b for b in truth.batches if b[2] and b[2][0][0] >= second], second, truth.end)
    assert got.max_timestamp_ms == held.at(second)[2]


def test_a_compacted_log_starts_at_its_first_segments_base_offset(tmp_path):
    """The cleaner removed the records at the head of the first segment and kept its name: Kafka's log start is still
    that base offset (`LogLoader`: the larger of the checkpoint and the first segment's base offset), which
    ListOffsets EARLIEST answers; a commit in the gap is not below the log start, and it is handed the first record
    kept after it."""
    d = tmp_path / "orders-0"
    d.mkdir()
    (d / "00000000000000000000.log").write_bytes(
        write_record_batch([(b"k5", b"v", 1_005), (b"k6", b"v", 1_006)], 5)
        + write_record_batch([(b"k9", b"v", 1_009)], 9))
    log = LocalLog("orders", 0, str(d))
    assert (log.log_start, log.log_end_offset) == ((0, "segment"), 10)
    got = log.first_unconsumed(2)
    assert (got.offset, got.timestamp_ms) == (5, 1_005)
    assert LocalLog("orders", 0, str(d), checkpoint_start=3).log_start == (3, SOURCE_LOG_START_CHECKPOINT)


def test_an_empty_or_unframeable_log(tmp_path):
    d = tmp_path / "orders-2"
    d.mkdir()
    (d / "00000000000000000042.log").write_bytes(b"")
    log = LocalLog("orders", 2, str(d))
    assert (log.log_start_offset, log.log_end_offset) == (42, 42)
    assert log.first_unconsumed(0).offset is None
    (d / "00000000000000000042.log").write_bytes(b"\x01" * 100)
    log = LocalLog("orders", 2, str(d))
    assert log.log_end_offset == 42
    (torn,) = [n for n in log.notes if n.kind == SEGMENT_TORN]
    assert torn.position == 0 and torn.source.endswith("42.log")


def test_big_segments_below_an_asked_one_are_read_from_their_indexes_last_entries(tmp_path):
    """Segments over `SMALL_SEGMENT_BYTES`: an asked offset's segment is read through its indexes, and each segment
    below it counts with its indexes' last entries alone (not read whole: a 1 GB segment's are megabytes) and the
    headers after the last offset entry; a last time entry that does not hold against the segment sends that
    segment back to its whole indexes, with a note, and the answer stays the full decode's."""
    d, truth = _segmented(tmp_path, n_batches=3200)
    sizes = sorted(p.stat().st_size for p in d.glob("*.log"))
    assert sizes[0] > log_segment.SMALL_SEGMENT_BYTES
    asked = list(range(truth.end - 300, truth.end, 7))  # in the last segment
    log = LocalLog("orders", 1, str(d))
    _expect(log, truth, asked)
    below = log.segments[:-1]
    assert not any("offset_index" in s.__dict__ or "time_index" in s.__dict__ for s in below)
    assert "offset_index" in log.segments[-1].__dict__ and log.notes == []
    tix = sorted(d.glob("*.timeindex"))[1]
    data = bytearray(tix.read_bytes())
    data[-12:-4] = (int.from_bytes(data[-12:-4], "big") + 3_600_000).to_bytes(8, "big")
    tix.write_bytes(bytes(data))
    log = LocalLog("orders", 1, str(d))
    _expect(log, truth, asked)
    assert [(n.kind, n.source) for n in log.notes] == [(INDEX_MISMATCH, str(tix))]


def test_a_small_segment_is_read_from_its_headers(tmp_path):
    d, truth = _segmented(tmp_path)
    assert all(p.stat().st_size <= log_segment.SMALL_SEGMENT_BYTES for p in d.glob("*.log"))
    for f in d.glob("*.index"):
        f.unlink()
    log = LocalLog("orders", 1, str(d))
    _expect(log, truth, range(0, truth.end, 5))
    assert log.notes == [] and all("offset_index" not in s.__dict__ for s in log.segments)


def test_a_segment_below_the_asked_one_that_cannot_be_read_leaves_the_time_unknown(tmp_path, monkeypatch):
    """The largest timestamp up to a record counts every segment before it: one that could not be read (permission
    denied, an I/O error) was left out, so a record after a producer's clock went back looked older than it is (a
    lag in time too large, silently). The answer is now unknown, with the segment's note."""
    d = tmp_path / "orders-0"
    d.mkdir()
    (d / "00000000000000000000.log").write_bytes(write_record_batch([(b"k", b"v", 9_000 + i) for i in range(5)], 0))
    (d / "00000000000000000005.log").write_bytes(write_record_batch([(b"k", b"v", 1_000 + i) for i in range(5)], 5))
    got = LocalLog("orders", 0, str(d)).first_unconsumed(6)
    assert (got.offset, got.timestamp_ms, got.max_timestamp_ms) == (6, 1_001, 9_004)
    real = log_segment.LogSegment.buf

    def buf(segment):
        if segment.path.endswith("00000000000000000000.log"):
            raise PermissionError(13, "Permission denied", segment.path)
        return real.fget(segment)

    monkeypatch.setattr(log_segment.LogSegment, "buf", property(buf))
    log = LocalLog("orders", 0, str(d))
    assert log.first_unconsumed(6) is None
    assert [n.kind for n in log.notes] == ["segment_unreadable"] and log.notes[0].source.endswith("000.log")


@pytest.mark.parametrize("name", [".index", ".timeindex"])
def test_a_fifo_named_like_an_index_is_read_past_not_waited_on(tmp_path, indexes_always, name):
    """A FIFO (a named pipe) beside a segment under an index's name: opening it to read waited for a writer forever,
    and the rebuild hung. It is now an index not read (a note), the headers standing in for it."""
    import threading

    d, truth = _segmented(tmp_path)
    index = sorted(d.glob("*" + name))[-1]
    index.unlink()
    os.mkfifo(index)
    got = []
    reader = threading.Thread(target=lambda: got.append(LocalLog("orders", 1, str(d))), daemon=True)
    reader.start()
    reader.join(30)
    assert got, "hung on the FIFO"
    log = got[0]
    answers = []
    reader = threading.Thread(target=lambda: answers.extend(log.first_unconsumed(o) for o in (0, truth.end - 2)),
                              daemon=True)
    reader.start()
    reader.join(30)
    assert len(answers) == 2, "hung on the FIFO"
    assert [(a.offset, a.max_timestamp_ms) for a in answers] == [truth.at(0)[::2], truth.at(truth.end - 2)[::2]]
    assert any(n.source == str(index) and "not a regular file" in n.reason for n in log.notes)


def test_the_end_at_a_time_counts_a_batch_the_cleaner_emptied_as_appended_when_its_timestamp_says(tmp_path):
    """A compacted topic's batch whose records the cleaner all removed is kept empty, with its base and last offsets
    and its maxTimestamp (`MemoryRecords.filterTo`, 4.0: the producer's last batch). Its records were appended when
    that timestamp says, after an as_of it passes: the log end then was at most its base offset. The end was
    unknown (its batch read as unreadable); Kafka's `FileRecords.searchForTimestamp` steps over it to a record
    appended later still (6 here), which would count records appended after as_of as written by then."""
    d = tmp_path / "orders-0"
    d.mkdir()
    w = SegmentWriter(d, 0)
    w.append(write_record_batch([(b"a", b"v", 1_000), (b"b", b"v", 1_001), (b"c", b"v", 1_002)], 0))
    w.append(write_empty_batch(3, 5, producer_id=7, producer_epoch=0, base_sequence=0, max_timestamp=2_000))
    w.append(write_record_batch([(b"d", b"v", 3_000), (b"e", b"v", 3_001), (b"f", b"v", 3_002)], 6))
    w.close(roll=False)
    log = LocalLog("orders", 0, str(d))
    try:
        assert [log.end_at(t) for t in (1_001, 1_500, 1_999, 2_000, 3_000, 3_002)] == [2, 3, 3, 6, 7, 9]
        assert log.notes == []
    finally:
        log.close()


def test_the_end_at_a_time_before_every_record_held_is_unknown_behind_an_emptied_segment(tmp_path):
    """The cleaner removed every record of the oldest segment and kept it, empty, under its name (`Cleaner.
    cleanSegments` replaces the segments it cleaned with the one it wrote, whatever it holds; 4.0): records 0-9
    were appended before record 10 at times the log dir no longer holds, so the end at a time before record 10's
    is not known, as it is not where the cleaner emptied the head of a segment holding records after it. It was
    answered 10, the empty segment's records taken as appended by then."""
    d = tmp_path / "orders-0"
    d.mkdir()
    (d / f"{0:020d}.log").write_bytes(b"")
    w = SegmentWriter(d, 10)
    w.append(write_record_batch([(b"a", b"v", 1_000), (b"b", b"v", 1_001), (b"c", b"v", 1_002)], 10))
    w.close(roll=False)
    log = LocalLog("orders", 0, str(d))
    try:
        assert (log.log_start_offset, log.log_end_offset) == (0, 13)
        assert [log.end_at(t) for t in (500, 999, 1_000, 1_002)] == [None, None, 11, 13]
    finally:
        log.close()
    (d / f"{0:020d}.log").unlink()  # retention, not the cleaner: the same
    log = LocalLog("orders", 0, str(d))
    try:
        assert [log.end_at(t) for t in (500, 1_000)] == [None, 11]
    finally:
        log.close()


@pytest.mark.parametrize("clean", [True, False], ids=["clean-shutdown", "recovered"])
def test_the_timestamp_type_is_the_newest_batchs_behind_an_empty_newest_segment(tmp_path, clean):
    """A newest segment left empty (a follower truncated to its base offset, `LocalLog.truncateTo` keeping the
    segment it truncates, 4.0) ends the log at its base offset, and the log's timestamp type is still its newest
    batch's, in the segment before it: it was none, where the README says the newest batch's."""
    d = tmp_path / "orders-0"
    d.mkdir()
    w = SegmentWriter(d, 0)
    w.append(write_record_batch([(b"a", b"v", 1_000), (b"b", b"v", 1_001)], 0, timestamp_type="LogAppendTime",
                                log_append_time=5_000))
    w.close()
    (d / f"{2:020d}.log").write_bytes(b"")
    log = LocalLog("orders", 0, str(d), recovery_point=None if clean else 0)
    try:
        assert (log.log_end_offset, log.timestamp_type) == (2, "LogAppendTime")
    finally:
        log.close()


def test_the_end_at_a_time_is_a_log_append_time_batchs_base_offset_whatever_the_cleaner_kept(tmp_path):
    """A LogAppendTime batch was appended whole at its maxTimestamp. The cleaner removed the records at its head
    (10 and 11) and kept its base offset (`MemoryRecords.buildRetainedRecordsInto`, 4.0): the log ended at 10 until
    that batch came, so the end at a moment before it is 10, exact as the README says of LogAppendTime. It was 12,
    the first record kept, as Kafka's ListOffsets finds it."""
    d = tmp_path / "orders-0"
    d.mkdir()
    w = SegmentWriter(d, 0)
    lat = dict(timestamp_type="LogAppendTime")
    w.append(write_record_batch([(b"k%d" % i, b"v", 900) for i in range(10)], 0, log_append_time=1_000, **lat))
    w.append(write_record_batch([(b"a", b"v", 1_900), (b"b", b"v", 1_900)], 10, offset_deltas=[2, 3],
                                log_append_time=2_000, **lat))
    w.close(roll=False)
    log = LocalLog("orders", 0, str(d))
    try:
        assert [log.end_at(t) for t in (999, 1_000, 1_999, 2_000)] == [0, 10, 10, 14]
        assert log.notes == []
    finally:
        log.close()


def test_an_aborted_transactions_record_is_handed_to_a_consumer_its_marker_is_not(tmp_path):
    """The README's promise: a consumer of the default isolation.level (read_uncommitted, ConsumerConfig 4.0) is
    handed an aborted transaction's records, so the first record a group at 0 has not consumed is record 0; a
    group at the ABORT marker is handed the record after it."""
    d = tmp_path / "orders-0"
    d.mkdir()
    w = SegmentWriter(d, 0)
    w.append(write_record_batch([(b"a", b"v", 1_000), (b"b", b"v", 1_001)], 0, producer_id=7, producer_epoch=0,
                                base_sequence=0, is_transactional=True))
    w.append(write_control_batch(0, 0, 2, 7, 0, 1_500))
    w.append(write_record_batch([(b"c", b"v", 1_200)], 3))
    w.close(roll=False)
    log = LocalLog("orders", 0, str(d))
    try:
        assert [(p.offset, p.timestamp_ms, p.max_timestamp_ms) for p in map(log.first_unconsumed, (0, 2))] == [
            (0, 1_000, 1_000), (3, 1_200, 1_500)]
    finally:
        log.close()
