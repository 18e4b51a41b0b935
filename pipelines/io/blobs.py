"""Rows as Arrow IPC blobs (lz4): how Spark keeps and moves rows it never needs to read as Spark rows.

A blob is one Arrow IPC stream of rows (`to_blob` / `from_blob`). The decoded log and the shards' envelope are
made of them, and a log-sized table the shards return (the history) stays in them until it is written: made into
Spark rows first, its rows would cross into the JVM and back out for nothing; as blobs, the task that writes a file
opens them itself (`unpacked`). Whoever needs them as a DataFrame (a merge with the history already written, a
check on Spark) gets one (`BlobRows.frame`).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Iterator

import pyarrow as pa

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

    from pipelines.io.storage import Location
    from pipelines.io.table_rows import Aside, BatchMap, Held, Written

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


def from_plain_blob(blob: bytes) -> pa.Table:
    """The rows of a blob written uncompressed, read back from a store a reader does not trust (a saved shard's
    tables: `coordinator.saved`): a compressed message is refused before it is decompressed, as a few KB of zstd
    zeros are gigabytes once opened, and the rows are checked against their buffers' sizes (a batch claiming more
    rows than its buffers hold is read past their end)."""
    for message in pa.ipc.MessageReader.open_stream(blob):
        if message.type in ("record batch", "dictionary") and _compressed(message.metadata.to_pybytes(),
                                                                          message.type == "dictionary"):
            raise ValueError("a compressed Arrow IPC message where the writer writes none")
    table = from_blob(blob)
    table.validate()
    return table


def _compressed(meta: bytes, dictionary: bool) -> bool:
    """Whether an IPC message's metadata (`Message.fbs`, a flatbuffer) sets its record batch's `compression`."""
    def u(pos: int, size: int, signed: bool = False) -> int:
        if not 0 <= pos <= len(meta) - size:
            raise ValueError("an Arrow IPC message whose metadata is cut short")
        return int.from_bytes(meta[pos:pos + size], "little", signed=signed)

    def field(table: int, i: int) -> int | None:  # where field `i` of the table at `table` is (None: absent)
        vtable = table - u(table, 4, signed=True)
        if 4 + 2 * i + 2 > u(vtable, 2):
            return None
        at = u(vtable + 4 + 2 * i, 2)
        return table + at if at else None

    def deref(pos: int | None) -> int:
        if pos is None:
            raise ValueError("an Arrow IPC message without its header")
        return pos + u(pos, 4)

    batch = deref(field(deref(0), 2))  # Message.header
    if dictionary:
        batch = deref(field(batch, 1))  # DictionaryBatch.data
    return field(batch, 3) is not None  # RecordBatch.compression


def opened(blobs) -> pa.Table | None:
    """The rows of `blobs` (an iterable of blobs) as one table; None when there are none."""
    tables = [from_blob(b) for b in blobs]
    return pa.concat_tables(tables) if tables else None


def unpacked(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The rows of the blobs in `batches` (a `payload` column)."""
    for batch in batches:
        for blob in batch.column(PAYLOAD).to_pylist():
            yield from from_blob(blob).to_batches()


def _opened_then(batches: Iterator[pa.RecordBatch], opener: BatchMap, then: BatchMap) -> Iterator[pa.RecordBatch]:
    return then(opener(batches))


@dataclass(frozen=True)
class BlobRows:
    """`blobs`: a DataFrame with a `payload` column of blobs, whose rows (of `schema`) `opener` gives: the executor
    function from batches of blobs to batches of rows (`unpacked`, or one that also finishes them, as the group
    history's names its members' topics). A write's rows (`io.table_rows.TableRows`): the tasks that write them open
    them, so they never cross into the JVM; a history of blobs is the shards', each record once."""

    held: ClassVar[Held] = "spark"
    clustered: ClassVar[bool] = True
    blobs: DataFrame
    schema: StructType
    opener: BatchMap = unpacked

    @property
    def column_names(self) -> list[str]:
        return list(self.schema.fieldNames())

    def conformed(self, table: str, snapshot_id: str | None) -> BlobRows:
        """As they are: the writing tasks cast what `opener` gives to the contract's types."""
        return self

    def frame(self) -> DataFrame:
        """The rows as a DataFrame (opened in the Python workers)."""
        return self.blobs.select(PAYLOAD).mapInArrow(self.opener, self.schema)

    def to_frame(self, spark: SparkSession | None) -> DataFrame:
        return self.frame()

    def to_arrow(self, schema: pa.Schema | None = None) -> pa.Table:
        """The rows collected into this process as one table of `schema` (default: `schema`'s; for rows sized by
        the state)."""
        from pipelines.io import delta  # see `write_files`

        schema = delta.arrow_schema(self.schema) if schema is None else schema
        blobs = pa.array([r[PAYLOAD] for r in self.blobs.select(PAYLOAD).collect()], pa.binary())
        batches = list(self.opener(iter([pa.record_batch([blobs], names=[PAYLOAD])])))
        return pa.Table.from_batches(batches).cast(schema) if batches else schema.empty_table()

    def staged(self) -> None:
        return None

    def write_files(self, table_path: str | Location, rel_dir: str, table_schema: pa.Schema, *,
                    partition_columns: tuple[str, ...] = (), split_by: str | None = None,
                    aside: Aside | None = None, through: BatchMap | None = None) -> Written:
        # io.delta (deltalake, pyarrow.parquet) costs 0.45-0.55 s to import after pyarrow (measured here): every
        # Python worker that opens a blob imports this module, and few of them write
        from pipelines.io import delta

        opener = self.opener if through is None else functools.partial(_opened_then, opener=self.opener,
                                                                          then=through)
        return delta.write_frame_files(self.blobs.select(PAYLOAD), table_path, rel_dir, table_schema,
                                       partition_columns, split_by=split_by, aside=aside, opened=opener)
