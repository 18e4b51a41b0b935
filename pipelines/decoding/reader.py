"""Every input (segment files, tabular dumps) as decoded rows in log order: the pure-Python decoding pipeline."""
from __future__ import annotations

from pathlib import Path
from typing import Iterable, Iterator

from pipelines.decoding.batches import read_batches_from_file
from pipelines.decoding.dump_files import is_dump_name
from pipelines.decoding.segments import discover_segments
from schemas.records import LogRecord, ReadProblem

def is_tabular(path: str | Path) -> bool:
    # imported here, not at module level: pyarrow ~0.45 s, pyarrow.fs ~0.05 s of import (python -X importtime)
    from pipelines.io import storage

    if storage.is_remote(str(path)):
        # imported here, not at module level: pyarrow.fs ~0.13 s of import (python -X importtime)
        import pyarrow.fs as pafs

        loc = storage.location(str(path))
        if not loc.is_dir():
            return is_dump_name(loc.name)
        entries = [(Path(i.path).name, i.type == pafs.FileType.File) for i in loc.listdir()]
        return any(is_file and is_dump_name(n) for n, is_file in entries) and not any(
            n.endswith(".log") or n.startswith("__consumer_offsets-") for n, _ in entries)
    p = Path(path)
    if p.is_dir():
        return any(is_dump_name(f.name) for f in p.iterdir() if f.is_file()) and not any(
            f.suffix == ".log" or f.name.startswith("__consumer_offsets-") for f in p.iterdir()
        )
    return is_dump_name(p.name)


def iter_segment_items(segment) -> Iterator[LogRecord | ReadProblem]:
    """Records and problems of one segment file, in file order."""
    for item in read_batches_from_file(segment.path, offsets_partition=segment.offsets_partition):
        if isinstance(item, ReadProblem):
            yield item
        else:
            _header, records = item
            yield from records


def iter_decoded_rows(paths: Iterable[str | Path]) -> Iterator[dict]:
    """All records of all inputs as DECODED rows (segments: per partition, in base-offset order).

    Problems found while discovering or reading (torn tails, bad CRCs, foreign data) come out as rows of
    record_kind `error`, so that every byte range is accounted for.
    """
    # imported here, not at module level: pyarrow ~0.45 s of import (python -X importtime)
    from pipelines.decoding.rows import problem_to_row, to_decoded_row

    paths = [Path(p) for p in paths]
    segment_paths = [p for p in paths if not is_tabular(p)]
    tabular_paths = [p for p in paths if is_tabular(p)]
    if segment_paths:
        segments, problems = discover_segments(segment_paths)
        for problem in problems:
            yield problem_to_row(problem)
        for segment in segments:
            for item in iter_segment_items(segment):
                yield problem_to_row(item) if isinstance(item, ReadProblem) else to_decoded_row(item)
    for tp in tabular_paths:
        # imported here, not at module level: pyarrow ~0.15 s of import (python -X importtime)
        from pipelines.decoding.tabular import read_tabular_dump

        for item in read_tabular_dump(tp).records():
            yield problem_to_row(item) if isinstance(item, ReadProblem) else to_decoded_row(item)
