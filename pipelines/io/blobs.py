"""Rows as Arrow IPC blobs (lz4): how Spark keeps and moves rows it never needs to read as Spark rows.

A blob is one Arrow IPC stream of rows (`to_blob` / `from_blob`). The decoded log and the shards' envelope are
made of them, and a log-sized table the shards return (the history) stays in them until it is written: made into
Spark rows first, its rows would cross into the JVM and back out for nothing; as blobs, the task that writes a file
opens them itself (`unpacked`). Whoever needs them as a DataFrame (a merge with the history already written, a
check on Spark) gets one (`BlobRows.frame`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterator

import pyarrow as pa

PAYLOAD = "payload"
# lz4 keeps a large blob about a third of its Arrow size at a cost far below decoding it. But it frames every
# buffer of every column on its own, a fixed ~0.6 ms each way for a decoded table's 66 columns: ten times what a
# blob of a few rows costs uncompressed, to save a few kilobytes or none. So a blob of under COMPRESS_CELLS values
# (rows times columns, ~64 KiB) is written plain; the stream says per message whether it is compressed, and
# readers take either. Counted in values, not `nbytes`: that walks the buffers, and crashed on a batch Spark
# handed a Python worker.
_LZ4 = pa.ipc.IpcWriteOptions(compression="lz4")
_PLAIN = pa.ipc.IpcWriteOptions()
COMPRESS_CELLS = 1 << 13


def to_blob(table: pa.Table | pa.RecordBatch) -> bytes:
    sink = pa.BufferOutputStream()
    options = _LZ4 if table.num_rows * table.num_columns >= COMPRESS_CELLS else _PLAIN
    with pa.ipc.new_stream(sink, table.schema, options=options) as w:
        w.write(table)
    return sink.getvalue().to_pybytes()


def from_blob(blob: bytes) -> pa.Table:
    with pa.ipc.open_stream(blob) as reader:
        return reader.read_all()


def opened(blobs) -> pa.Table | None:
    """The rows of `blobs` (an iterable of blobs) as one table; None when there are none."""
    tables = [from_blob(b) for b in blobs]
    return pa.concat_tables(tables) if tables else None


def unpacked(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The rows of the blobs in `batches` (a `payload` column)."""
    for batch in batches:
        for blob in batch.column(PAYLOAD).to_pylist():
            yield from from_blob(blob).to_batches()


@dataclass(frozen=True)
class BlobRows:
    """`blobs`: a DataFrame with a `payload` column of blobs, whose rows (of `schema`, a Spark StructType) `opener`
    gives: the executor function from batches of blobs to batches of rows (`unpacked`, or one that also finishes
    them, as the group history's names its members' topics)."""

    blobs: Any
    schema: Any
    opener: Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]] = unpacked

    def frame(self):
        """The rows as a DataFrame (opened in the Python workers)."""
        return self.blobs.select(PAYLOAD).mapInArrow(self.opener, self.schema)

    def to_arrow(self, schema: pa.Schema) -> pa.Table:
        """The rows collected into this process as one table of `schema` (for rows sized by the state)."""
        blobs = pa.array([r[PAYLOAD] for r in self.blobs.select(PAYLOAD).collect()], pa.binary())
        batches = list(self.opener(iter([pa.record_batch([blobs], names=[PAYLOAD])])))
        return pa.Table.from_batches(batches).cast(schema) if batches else schema.empty_table()
