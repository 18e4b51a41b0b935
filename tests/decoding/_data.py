"""Shared helpers for decoding tests: iterate the real segments under ../shared."""
from __future__ import annotations

import glob
import os
from pathlib import Path

from pipelines.decoding.segments import discover_segments, read_segment_batches
from schemas.records import ReadProblem


def segment_roots(shared: Path) -> list[str]:
    real = sorted({os.path.dirname(p) for p in glob.glob(str(shared / "realdata/seg_*/**/meta.properties"),
                                                          recursive=True)})
    broker = sorted(glob.glob(str(shared / "brokerdata/*/data")))
    return real + broker


def iter_batches(root: str):
    segments, _ = discover_segments([root])
    for seg in segments:
        for item in read_segment_batches(seg):
            if not isinstance(item, ReadProblem):
                yield item
