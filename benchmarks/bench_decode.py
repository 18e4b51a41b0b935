"""Decode throughput: our segment reader vs aiokafka's C record reader (the floor), and full record decoding.

Generates a dump of `__consumer_offsets` segments (OffsetCommit key v1 / value v3 records, built inline with
struct; batches of 1-20 records; codecs mixed none/gzip/snappy/lz4/zstd) with the project's batch writer, then
measures records per second per core (CPU time of this one process) for:

  (a)  `read_batches` over the in-memory segment bytes (the same input aiokafka gets),
  (a') `read_batches_from_file` streaming each segment from disk,
  (b)  aiokafka's Cython `MemoryRecords`/`DefaultRecordBatch` iterating the same bytes, touching key/value/offset,
  (c)  (a) + `pipelines.decoding.rows.to_decoded_row` per record, when that module exists,
  (c') the slow full decode as the executors ran it before the fast path: `iter_segment_items` (file) +
       `to_decoded_row` + `rows_to_arrow` every 20k rows,
  (d)  the columnar fast path `pipelines.decoding.columnar.decode_segment_to_arrow` (file -> Arrow batches):
       pure Python, and with the optional `_fastdecode` C extension when it is built.

``--path columnar`` runs only the floor (b) and the columnar path (d).

Run: ``.venv/bin/python benchmarks/bench_decode.py [--mb 100] [--keep DIR]``.
"""
from __future__ import annotations

import argparse
import random
import struct
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipelines.decoding.batch_writer import write_record_batch  # noqa: E402
from pipelines.decoding.batches import read_batches, read_batches_from_file  # noqa: E402

CODEC_MIX = [("none", 0.6), ("gzip", 0.1), ("snappy", 0.1), ("lz4", 0.1), ("zstd", 0.1)]
POOL_PER_CODEC = 400
SEGMENT_BYTES = 16 * 1024 * 1024


def _s(text: str) -> bytes:
    b = text.encode()
    return struct.pack(">h", len(b)) + b


def offset_commit_key(group: str, topic: str, partition: int) -> bytes:
    """OffsetCommitKey v1: int16 version, string group, string topic, int32 partition."""
    return struct.pack(">h", 1) + _s(group) + _s(topic) + struct.pack(">i", partition)


def offset_commit_value_v3(offset: int, leader_epoch: int, metadata: str, commit_ts: int) -> bytes:
    """OffsetCommitValue v3: int16 version, int64 offset, int32 leaderEpoch, string metadata, int64 commitTs."""
    return struct.pack(">hqi", 3, offset, leader_epoch) + _s(metadata) + struct.pack(">q", commit_ts)


def _batch_pool(rng: random.Random, codec: str) -> list[tuple[bytes, int]]:
    pool = []
    ts = 1_700_000_000_000
    for _ in range(POOL_PER_CODEC):
        n = rng.choice([1, 1, 1, 2, 3, 5, 8, 13, 20])
        group = f"group-{rng.randrange(5000)}"
        topic = f"topic-{rng.randrange(200)}"
        recs = []
        for i in range(n):
            ts += rng.randrange(1, 50)
            value = (offset_commit_value_v3(rng.randrange(1 << 40), rng.randrange(-1, 20), "", ts)
                     if rng.random() > 0.02 else None)
            recs.append((offset_commit_key(group, topic, i), value, ts))
        pool.append((write_record_batch(recs, 0, codec=codec, base_sequence=0), n))
    return pool


def generate(out_dir: Path, mb: int, seed: int = 7) -> tuple[int, int]:
    """Write ≥ ``mb`` MiB of segments into ``out_dir/__consumer_offsets-0``; returns (bytes, records).

    Batches are drawn from a pool per codec and re-based: baseOffset (bytes 0-7) is outside the CRC-32C range, so
    patching it keeps every batch valid.
    """
    rng = random.Random(seed)
    pools = {c: _batch_pool(rng, c) for c, _ in CODEC_MIX}
    names, weights = zip(*CODEC_MIX)
    part = out_dir / "__consumer_offsets-0"
    part.mkdir(parents=True, exist_ok=True)
    target = mb * 1024 * 1024
    total = records = 0
    offset = 0
    while total < target:
        seg = bytearray()
        base = offset
        while len(seg) < SEGMENT_BYTES and total + len(seg) < target:
            batch, n = rng.choice(pools[rng.choices(names, weights)[0]])
            start = len(seg)
            seg += batch
            struct.pack_into(">q", seg, start, offset)
            offset += n
            records += n
        (part / f"{base:020d}.log").write_bytes(seg)
        total += len(seg)
    return total, records


def _cpu(fn) -> tuple[int, float]:
    t0 = time.process_time()
    n = fn()
    return n, time.process_time() - t0


def bench(out_dir: Path, path: str = "all") -> list[tuple[str, int, float]]:
    segs = sorted((out_dir / "__consumer_offsets-0").glob("*.log"))
    blobs = [p.read_bytes() for p in segs]
    results = []

    def ours_mem():
        n = 0
        for blob in blobs:
            for item in read_batches(blob, source="bench", offsets_partition=0):
                for r in item[1]:
                    r.key, r.value, r.offset
                    n += 1
        return n

    def ours_file():
        n = 0
        for p in segs:
            for item in read_batches_from_file(p, offsets_partition=0):
                n += len(item[1])
        return n

    if path != "columnar":
        results.append(("(a) offsetlake read_batches (bytes)", *_cpu(ours_mem)))
        results.append(("(a') offsetlake read_batches_from_file", *_cpu(ours_file)))

    try:
        from aiokafka.record._crecords import MemoryRecords
    except ImportError:  # pragma: no cover
        MemoryRecords = None
    if MemoryRecords is not None:
        def aiokafka_c():
            n = 0
            for blob in blobs:
                mr = MemoryRecords(blob)
                while True:
                    b = mr.next_batch()
                    if b is None:
                        break
                    for r in b:
                        r.key, r.value, r.offset
                        n += 1
            return n

        results.append(("(b) aiokafka C DefaultRecordBatch (floor)", *_cpu(aiokafka_c)))

    try:
        from pipelines.decoding.rows import to_decoded_row
    except ImportError:
        to_decoded_row = None
    if to_decoded_row is not None:
        def full():
            n = 0
            for blob in blobs:
                for item in read_batches(blob, source="bench", offsets_partition=0):
                    for r in item[1]:
                        to_decoded_row(r)
                        n += 1
            return n

        if path != "columnar":
            results.append(("(c) read_batches + to_decoded_row", *_cpu(full)))

        def full_arrow():
            from pipelines.decoding.reader import iter_segment_items
            from pipelines.decoding.rows import problem_to_row, rows_to_arrow
            from pipelines.decoding.segments import SegmentFile
            from schemas.records import ReadProblem

            n = 0
            for p in segs:
                rows = []
                seg = SegmentFile(path=p, offsets_partition=0, base_offset=int(p.stem), size=p.stat().st_size)
                for rec in iter_segment_items(seg):
                    rows.append(problem_to_row(rec) if isinstance(rec, ReadProblem) else to_decoded_row(rec))
                    if len(rows) >= 20_000:
                        n += rows_to_arrow(rows).num_rows
                        rows = []
                if rows:
                    n += rows_to_arrow(rows).num_rows
            return n

        if path != "columnar":
            results.append(("(c') slow full decode -> Arrow (file)", *_cpu(full_arrow)))

    try:
        from pipelines.decoding import columnar
    except ImportError:  # pragma: no cover
        columnar = None
    if columnar is not None:
        def columnar_run(use_c):
            def run():
                n = 0
                for p in segs:
                    for b in columnar.decode_segment_to_arrow(p, offsets_partition=0, use_c=use_c):
                        n += b.num_rows
                return n
            return run

        results.append(("(d) columnar fast path, pure Python", *_cpu(columnar_run(False))))
        if columnar.HAVE_C_EXTENSION:
            results.append(("(d) columnar fast path, C extension", *_cpu(columnar_run(True))))
    return results


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=100, help="size of the generated dump in MiB (default 100)")
    ap.add_argument("--keep", type=Path, default=None, help="write the dump here and keep it")
    ap.add_argument("--path", choices=("all", "columnar"), default="all",
                    help="columnar: only the floor (b) and the columnar fast path (d)")
    ap.add_argument("--reuse", action="store_true", help="with --keep: reuse a dump already there")
    args = ap.parse_args(argv)
    tmp = None
    if args.keep is None:
        tmp = tempfile.TemporaryDirectory(prefix="offsetlake-bench-")
        out_dir = Path(tmp.name)
    else:
        out_dir = args.keep
    try:
        t0 = time.perf_counter()
        if args.reuse and args.keep is not None and (out_dir / "records.txt").exists():
            size, records = map(int, (out_dir / "records.txt").read_text().split())
        else:
            size, records = generate(out_dir, args.mb)
            (out_dir / "records.txt").write_text(f"{size} {records}")
        print(f"generated {size / 2**20:.1f} MiB, {records:,} records "
              f"(codecs {', '.join(f'{c} {int(w * 100)}%' for c, w in CODEC_MIX)}) "
              f"in {time.perf_counter() - t0:.1f}s")
        try:
            from pipelines.decoding._fastdecode import native_codecs
            native = {1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
            print("decompressed in the C walk: " + (", ".join(native[c] for c in native_codecs()) or "none")
                  + " (the rest through codecs.py)")
        except ImportError:
            pass
        results = bench(out_dir, args.path)
        floor = next((n / t for name, n, t in results if name.startswith("(b)")), None)
        print(f"{'reader':45} {'records':>12} {'cpu s':>8} {'records/s/core':>15} {'vs floor':>9}")
        for name, n, t in results:
            rate = n / t if t else float("inf")
            rel = f"{rate / floor:8.1%}" if floor else "     n/a"
            print(f"{name:45} {n:12,} {t:8.2f} {rate:15,.0f} {rel:>9}")
            if n != records:
                print(f"  !! {name} saw {n} records, expected {records}")
                return 1
    finally:
        if tmp is not None:
            tmp.cleanup()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
