"""The Parquet files a task writes (`io.delta.FileWriter`) close a row group at 262,144 rows, or sooner when the rows
are wide (a group history row carries its record's JSON): what a writer holds stays bounded whatever the rows."""
from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from pipelines.io import delta

SCHEMA = pa.schema([pa.field("n", pa.int64(), nullable=False), pa.field("json", pa.string())])


def _written(tmp_path, batches) -> pq.ParquetFile:
    written = delta.write_batches(iter(batches), str(tmp_path), "w", SCHEMA, 0)
    return pq.ParquetFile(tmp_path / "w" / written.name)


def _batch(start: int, rows: int, width: int) -> pa.RecordBatch:
    return pa.record_batch([pa.array(range(start, start + rows), pa.int64()),
                            pa.array([f"{i:08d}".ljust(width, "x") for i in range(start, start + rows)])],
                           schema=SCHEMA)


def test_wide_rows_close_their_row_groups_by_bytes(tmp_path):
    # 2 KB rows in Spark's batches of 10 k: 200 MB in all, 5 row groups' worth of 64 MiB
    f = _written(tmp_path, [_batch(i, 10_000, 2_048) for i in range(0, 100_000, 10_000)])
    groups = [f.metadata.row_group(g) for g in range(f.num_row_groups)]
    assert [g.num_rows for g in groups] == [40_000, 40_000, 20_000]  # one batch past 64 MiB, then what is left
    assert f.read(columns=["n"]).column("n").to_pylist() == list(range(100_000))


def test_narrow_rows_close_their_row_groups_by_rows(tmp_path):
    # a slice of a large batch counts its own bytes, not its buffers'
    wide = _batch(0, 300_000, 8)
    f = _written(tmp_path, [wide.slice(i, 10_000) for i in range(0, 300_000, 10_000)])
    # held until 262,144 rows or more (27 batches), written in row groups of at most that many
    assert [f.metadata.row_group(g).num_rows for g in range(f.num_row_groups)] == [262_144, 7_856, 30_000]
    assert f.read(columns=["n"]).column("n").to_pylist() == list(range(300_000))
