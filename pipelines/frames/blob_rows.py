"""A log-sized table's rows on Spark as Arrow IPC blobs: kept and moved by Spark, opened only in a Python worker.

The history a run's shards return is millions of rows that one more step reads: the write, which turns them into
Parquet with pyarrow. Made into Spark rows first, they would cross into the JVM and back out for nothing; as
blobs, the task that writes a file opens them itself (`batches`). Whoever needs them as a DataFrame (a merge with
the history already written, a check on Spark) gets one (`frame`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator

import pyarrow as pa

from pipelines.frames.decoded_log import from_blob

PAYLOAD = "payload"


def unpacked(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The rows of the blobs in `batches` (a `payload` column)."""
    for batch in batches:
        for blob in batch.column(PAYLOAD).to_pylist():
            yield from from_blob(blob).to_batches()


@dataclass(frozen=True)
class BlobRows:
    """`blobs`: a DataFrame with a `payload` column of Arrow IPC streams, each of rows of `schema` (a Spark
    StructType)."""

    blobs: Any
    schema: Any

    def frame(self):
        """The rows as a DataFrame (unpacked in the Python workers)."""
        return self.blobs.select(PAYLOAD).mapInArrow(unpacked, self.schema)
