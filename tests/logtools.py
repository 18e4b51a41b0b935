"""Test and benchmark tooling over broker log dirs: cut a log at an offset (what yesterday's dump looked like)."""
from __future__ import annotations

import shutil
from pathlib import Path

from pipelines.decoding.batches import read_batches_from_file
from pipelines.decoding.segments import discover_segments
from schemas.records import ReadProblem


def cut_log_dir(src: Path, dst: Path, *, fraction: float | None = None,
                until_offset: dict[int, int] | None = None) -> dict[int, int]:
    """Copy the broker log dir `src` to `dst`, keeping per partition only the batches whose last offset is below
    the cut (a prefix of the log, cut at a batch boundary as a broker's log end would be).

    The cut is either `fraction` of each partition's records or an explicit next-offset per partition.
    Returns the next offset (log end) kept per partition.
    """
    segments, _ = discover_segments([src])
    by_part: dict[int, list] = {}
    for s in segments:
        s = type(s)(path=Path(s.path), offsets_partition=s.offsets_partition, base_offset=s.base_offset, size=s.size)
        by_part.setdefault(s.offsets_partition, []).append(s)
    dst.mkdir(parents=True, exist_ok=True)
    # Empty partitions and non-segment files come along unchanged.
    for d in Path(src).iterdir():
        if d.is_dir() and d.name.startswith("__consumer_offsets-"):
            (dst / d.name).mkdir(exist_ok=True)
            for f in d.iterdir():
                if f.suffix != ".log":
                    shutil.copy2(f, dst / d.name / f.name)
    kept: dict[int, int] = {}
    for part, segs in by_part.items():
        ends = []  # (file, byte end, next offset) after every batch
        for s in segs:
            for item in read_batches_from_file(s.path, offsets_partition=part):
                if isinstance(item, ReadProblem):
                    continue
                header, _records = item
                ends.append((s, header.position + header.size, header.last_offset + 1))
        if until_offset is not None:
            cut_next = until_offset.get(part, ends[-1][2] if ends else 0)
        else:
            total = ends[-1][2] if ends else 0
            cut_next = int(total * fraction)
        keep = [e for e in ends if e[2] <= cut_next]
        kept[part] = keep[-1][2] if keep else 0
        last_pos: dict[Path, int] = {}
        for s, end, _ in keep:
            last_pos[s.path] = end
        for s in segs:
            target = dst / s.path.parent.name / s.path.name
            # Segments wholly after the cut did not exist yet; the one holding the cut ends at a batch boundary.
            if s.path in last_pos:
                with open(s.path, "rb") as fin, open(target, "wb") as fout:
                    fout.write(fin.read(last_pos[s.path]))
    return kept
