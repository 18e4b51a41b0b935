"""Mutation fuzzing of the segment readers over real segments (`../shared/realdata`): they never raise, never hang.

Each case takes one real segment, applies one seeded mutation (byte flips, a truncation, an insertion, a zeroed
range, or a corrupted length field: entry size, batch length, recordsCount, a record's length varint), then runs
both readers the pipeline has:

* the reference path, `batches.read_batches_from_file` + `rows.to_decoded_row` / `rows.problem_to_row`;
* the executor fast path, `columnar.decode_segment_to_arrow` (the C extension when built, every fourth case the
  pure-Python walker);
* the accounting's header walk, `frames.decode.count_segment`, which must balance every case: records in =
  records decoded + records quarantined (each quarantine row says how many it stands for), the same bytes
  reported unread by both walks, and never more records than the bytes could hold (no unverified header count).

Neither may raise — not even the typed `DecodeError`s (readers turn bad bytes into problem / error rows) — and
each case must finish within `CASE_SECONDS` (a timer for Python code, `faulthandler` for a hang inside C). The
seeds are fixed (case number), so a failure names a reproducible case. 5 kinds x 400 cases
(2 000 with OFFSETLAKE_TEST_DEPTH=deep, tests/depth.py).
"""
from __future__ import annotations

import faulthandler
import random
import signal
import struct
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from pipelines.decoding.batches import read_batches_from_file
from pipelines.decoding.columnar import HAVE_C_EXTENSION, decode_segment_to_arrow
from pipelines.decoding.errors import DecodeError
from pipelines.decoding.rows import problem_to_row, to_decoded_row
from pipelines.frames.decode import count_segment
from schemas.decoded import DECODED_RECORD_SCHEMA
from schemas.quarantine import QUARANTINE_KINDS
from schemas.records import ReadProblem
from tests.badinputs import entry_positions as entry_starts
from tests.depth import cases

pytestmark = pytest.mark.shared

CASES_PER_KIND = cases(deep=2000, quick=400)
CASE_SECONDS = 5.0
MAX_SEGMENT_BYTES = 48 * 1024  # keeps a case in the low milliseconds; the large segments add no new layouts
KINDS = ("flip", "truncate", "insert", "zero", "length")


class CaseTimeout(Exception):
    pass


@pytest.fixture(scope="module")
def segments(realdata) -> list[bytes]:
    paths = sorted(p for p in Path(realdata).rglob("*.log") if 0 < p.stat().st_size <= MAX_SEGMENT_BYTES)
    if not paths:
        pytest.skip("no real segments")
    return [p.read_bytes() for p in paths]




INTERESTING_INT32 = (0, 1, -1, 13, 14, 17, 48, 49, 60, 61, 0x7FFFFFFF, -0x80000000, 0x10000, 1 << 30)


def mutate(data: bytes, kind: str, rng: random.Random) -> bytes:
    n = len(data)
    buf = bytearray(data)
    if kind == "flip":
        for _ in range(rng.choice((1, 1, 2, 3, 8))):
            i = rng.randrange(n)
            buf[i] ^= 1 << rng.randrange(8) if rng.random() < 0.5 else rng.randrange(1, 256)
    elif kind == "truncate":
        del buf[rng.randrange(n):]
    elif kind == "insert":
        i = rng.randrange(n + 1)
        buf[i:i] = bytes(rng.randrange(256) for _ in range(rng.choice((1, 2, 4, 7, 16, 61))))
    elif kind == "zero":
        i = rng.randrange(n)
        j = min(n, i + rng.choice((1, 4, 12, 61, 200, n)))
        buf[i:j] = bytes(j - i)
    else:  # length fields
        starts = entry_starts(data) or [0]
        pos = rng.choice(starts)
        field = rng.choice(("size", "size", "records_count", "record_length", "varint"))
        value = rng.choice(INTERESTING_INT32) if rng.random() < 0.6 else rng.randrange(-(1 << 31), 1 << 31)
        if field == "size" and pos + 12 <= n:
            if rng.random() < 0.3:
                (old,) = struct.unpack_from(">i", data, pos + 8)
                value = max(-(1 << 31), min((1 << 31) - 1, old + rng.choice((-3, -1, 1, 2, 100))))
            struct.pack_into(">i", buf, pos + 8, value)
        elif field == "records_count" and pos + 61 <= n:
            struct.pack_into(">i", buf, pos + 57, value)
        elif field == "record_length" and pos + 62 <= n:
            buf[pos + 61] = rng.randrange(256)  # first record's zig-zag length varint (uncompressed batches)
        elif pos + 70 <= n:
            # a run of continuation bytes: an over-long varint somewhere in the first record
            i = pos + 61 + rng.randrange(8)
            buf[i:i + 6] = b"\xff" * 6
    return bytes(buf)


def _alarm(_signum, _frame):
    raise CaseTimeout


MIN_V2_RECORD_BYTES = 7  # length, attributes, timestamp/offset deltas, key/value lengths, header count: 1 byte each


def run_readers(buf: bytes, path: Path, *, use_c: bool | None) -> None:
    """Both readers over one buffer; returns only when neither raised and the accounting balances."""
    n_ref = 0
    ref_records = ref_unread = 0
    path.write_bytes(buf)
    for item in read_batches_from_file(path, source="fuzz", offsets_partition=3):
        if isinstance(item, ReadProblem):
            problem_to_row(item)
            n_ref += 1
            ref_records += item.records
            if item.unread_to is not None and item.kind != "zero_tail":
                ref_unread += item.unread_to - item.position
        else:
            for rec in item[1]:
                to_decoded_row(rec)
                n_ref += 1
                ref_records += 1
    table = pa.Table.from_batches(list(decode_segment_to_arrow(path, offsets_partition=3, use_c=use_c,
                                                                batch_rows=512)), schema=DECODED_RECORD_SCHEMA)
    n_col = table.num_rows
    # one row per record or problem on both paths (file and buffer framing agree)
    assert n_col == n_ref, ("rows", n_col, n_ref)
    errors = pc.equal(table.column("record_kind"), "error")
    used = n_col - (pc.sum(errors.cast("int64")).as_py() or 0)
    quarantined = pc.sum(table.filter(errors).column("error_records")).as_py() or 0
    unread_rows = table.filter(pc.and_(errors, pc.not_equal(table.column("error_kind"), "zero_tail")))
    col_unread = pc.sum(unread_rows.column("unread_bytes")).as_py() or 0
    # the accounting's header walk: records in = decoded + quarantined; the same bytes unread
    c = count_segment(str(path), 3, use_c=use_c).get(3, {})
    assert c.get("records_in", 0) == used + quarantined == ref_records, (
        "records_in", c.get("records_in"), used, quarantined, ref_records)
    assert c.get("bytes_unread", 0) == col_unread == ref_unread, ("bytes_unread", c, col_unread, ref_unread)
    ranges = sorted(r[1:3] for r in c.get("unread_ranges", []))
    assert all(0 <= a < b <= len(buf) for a, b in ranges) and all(
        b1 <= a2 for (_a1, b1), (a2, _b2) in zip(ranges, ranges[1:])), ranges
    # no record count is taken from an unverified header: the bytes bound what the records can be
    assert c.get("records_in", 0) * MIN_V2_RECORD_BYTES <= len(buf), ("records_in", c.get("records_in"), len(buf))
    kinds = set(pc.unique(table.filter(errors).column("error_kind")).to_pylist())
    assert kinds <= set(QUARANTINE_KINDS), kinds


@pytest.mark.parametrize("kind", KINDS)
def test_mutated_real_segments_never_raise_nor_hang(segments, kind, tmp_path):
    path = tmp_path / f"{0:020d}.log"
    failures: list[str] = []
    previous = signal.signal(signal.SIGALRM, _alarm)
    try:
        for case in range(CASES_PER_KIND):
            rng = random.Random(f"{kind}-{case}")
            original = segments[rng.randrange(len(segments))]
            buf = mutate(original, kind, rng)
            use_c = None if case % 4 else False
            faulthandler.dump_traceback_later(CASE_SECONDS * 4, exit=True)  # a hang inside C: abort loudly
            signal.setitimer(signal.ITIMER_REAL, CASE_SECONDS)
            try:
                run_readers(buf, path, use_c=use_c)
            except CaseTimeout:
                failures.append(f"{kind}-{case}: no result within {CASE_SECONDS}s")
            except DecodeError as e:
                failures.append(f"{kind}-{case}: typed {type(e).__name__}: {e}")
            except AssertionError as e:
                failures.append(f"{kind}-{case}: counts disagree {e}")
            except Exception as e:  # noqa: BLE001 - the point of the test
                failures.append(f"{kind}-{case}: {type(e).__name__}: {e}")
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
                faulthandler.cancel_dump_traceback_later()
            if len(failures) >= 20:
                break
    finally:
        signal.signal(signal.SIGALRM, previous)
    assert not failures, "\n".join(failures)


def test_fuzz_covers_the_c_extension_when_built(tmp_path, monkeypatch):
    """The fast path fuzzed above (`use_c=None`) is the one executors run: the C extension when it is built, which
    decodes clean batches without the Python walk."""
    if not HAVE_C_EXTENSION:
        pytest.skip("C extension not built; the pure-Python walker was fuzzed")
    from pipelines.decoding import columnar
    from pipelines.decoding.batch_writer import write_record_batch
    from tests.decoding.test_columnar import oc

    monkeypatch.setattr(columnar, "_walk_v2", lambda *a, **k: pytest.fail("clean batch left C"))
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(b"".join(write_record_batch([oc(offset=i)], i) for i in range(5)))
    assert len(list(decode_segment_to_arrow(path, offsets_partition=3, use_c=None))[0]) == 5
