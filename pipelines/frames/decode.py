"""Inputs -> a Spark DataFrame of decoded rows (DECODED_RECORD_SCHEMA), parallel over files.

The driver only lists files; each task opens its own files and streams decoded rows back as Arrow batches
through `mapInArrow` (the single Spark<->Python boundary). Nothing is collected to the driver.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

import pyarrow as pa

from schemas.decoded import DECODED_RECORD_SCHEMA

ARROW_BATCH_ROWS = 20_000

# A work item: one segment file, or one tabular dump file, or a discovery problem to turn into a row.
WORK_SCHEMA = pa.schema(
    [
        ("kind", pa.string()),  # segment | tabular | problem
        ("path", pa.string()),
        ("offsets_partition", pa.int32()),
        ("base_offset", pa.int64()),
        ("size", pa.int64()),
        ("problem_kind", pa.string()),
        ("problem_reason", pa.string()),
    ]
)


@dataclass(frozen=True)
class DecodePlan:
    """What the driver found: the work items, and facts the run reports (inputs, bytes, tabular caveats)."""

    items: list[dict]
    total_bytes: int
    num_segments: int
    num_tabular: int
    tabular_without_batch_facts: list[str]
    max_partition: int


def plan_inputs(paths: Iterable[str | Path]) -> DecodePlan:
    """Discover segment files and tabular dumps; discovery problems become work items too (never dropped)."""
    from pipelines.decoding.reader import is_tabular
    from pipelines.decoding.segments import discover_segments

    paths = [Path(p) for p in paths]
    items: list[dict] = []
    seg_paths = [p for p in paths if not is_tabular(p)]
    tab_paths: list[Path] = []
    for p in paths:
        if is_tabular(p):
            tab_paths.extend(sorted(f for f in p.iterdir() if f.is_file()) if p.is_dir() else [p])
    max_partition = -1
    total = 0
    nseg = 0
    if seg_paths:
        segments, problems = discover_segments(seg_paths)
        for s in segments:
            items.append(dict(kind="segment", path=str(s.path), offsets_partition=s.offsets_partition,
                              base_offset=s.base_offset, size=s.size, problem_kind=None, problem_reason=None))
            total += s.size
            nseg += 1
            max_partition = max(max_partition, s.offsets_partition)
        for pr in problems:
            items.append(dict(kind="problem", path=pr.source, offsets_partition=pr.offsets_partition,
                              base_offset=pr.position, size=0, problem_kind=pr.kind, problem_reason=pr.reason))
    for tp in tab_paths:
        size = tp.stat().st_size
        items.append(dict(kind="tabular", path=str(tp), offsets_partition=-1, base_offset=0, size=size,
                          problem_kind=None, problem_reason=None))
        total += size
    without_facts = []
    if tab_paths:
        from pipelines.decoding.tabular import read_tabular_dump

        for tp in tab_paths:
            dump = read_tabular_dump(tp)
            if not dump.has_batch_facts:
                without_facts.append(str(tp))
            max_partition = max(max_partition, getattr(dump, "max_partition", -1) or -1)
    return DecodePlan(items, total, nseg, len(tab_paths), without_facts, max_partition)


def _decode_items(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Executor side: decode every work item in the incoming batches, streaming Arrow batches out."""
    from pipelines.decoding.rows import problem_to_row, rows_to_arrow, to_decoded_row
    from pipelines.decoding.segments import SegmentFile
    from schemas.records import ReadProblem

    def flush(rows):
        return rows_to_arrow(rows)

    for batch in batches:
        for item in batch.to_pylist():
            rows: list[dict] = []
            if item["kind"] == "segment":
                # fast path: segment bytes straight to Arrow columns (same rows as the reference path)
                from pipelines.decoding.columnar import decode_segment_to_arrow

                seg = SegmentFile(path=Path(item["path"]), offsets_partition=item["offsets_partition"],
                                  base_offset=item["base_offset"], size=item["size"])
                yield from decode_segment_to_arrow(seg.path, offsets_partition=seg.offsets_partition,
                                                   batch_rows=ARROW_BATCH_ROWS)
                continue
            elif item["kind"] == "tabular":
                from pipelines.decoding.tabular import read_tabular_dump

                source = read_tabular_dump(item["path"]).records()
            else:
                source = iter([ReadProblem(source=item["path"], offsets_partition=item["offsets_partition"],
                                           position=item["base_offset"], kind=item["problem_kind"],
                                           reason=item["problem_reason"])])
            for rec in source:
                rows.append(problem_to_row(rec) if isinstance(rec, ReadProblem) else to_decoded_row(rec))
                if len(rows) >= ARROW_BATCH_ROWS:
                    yield flush(rows)
                    rows = []
            if rows:
                yield flush(rows)


def decoded_spark_schema():
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(DECODED_RECORD_SCHEMA)


def decoded_frame_from_plan(spark, plan: DecodePlan):
    """The decoded-records DataFrame for a plan: one task per group of files, balanced by size."""
    items = sorted(plan.items, key=lambda i: -(i["size"] or 0))
    parallelism = max(1, min(len(items), spark.sparkContext.defaultParallelism * 4))
    # Greedy size balancing: each slice gets the next-largest file; tasks then do similar work.
    for i, item in enumerate(items):
        item["slot"] = i % parallelism
    table = pa.Table.from_pylist(items, schema=WORK_SCHEMA.append(pa.field("slot", pa.int32())))
    if table.num_rows == 0:
        return spark.createDataFrame([], decoded_spark_schema())
    work = spark.createDataFrame(table.to_pandas()).repartition(parallelism, "slot").drop("slot")
    return work.mapInArrow(_decode_items, decoded_spark_schema())


def decoded_frame(spark, paths: Iterable[str | Path]):
    """Inputs -> DataFrame of decoded rows (errors and problems included as record_kind 'error')."""
    return decoded_frame_from_plan(spark, plan_inputs(paths))
