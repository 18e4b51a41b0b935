"""A run's decoded log: every decoded row (`schemas/decoded.py`), held as Arrow IPC blobs keyed by offsets partition.

Spark schedules, keeps and moves the blobs; the rows' ~60 columns (nested member lists and topic metadata among
them) never become Spark rows. Converting them into the JVM and back would cost more than decoding and replaying
them, and the replay needs them only in a Python worker, one offsets partition at a time (`frames.shards`).
The few questions asked of the whole log (record counts, markers, topic names, the quarantine, the accounting)
read a view of it: the columns and kinds they need, unpacked in the Python workers (`DecodedLog.frame`).

A small run decodes in the driver (`frames.decode.DecodePlan.in_process`): the log is then an Arrow table in hand
and the same views come from it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Iterator

import pyarrow as pa
import pyarrow.compute as pc

from pipelines.coordinator.decoded import PART, conform_decoded, naming_rows
from pipelines.coordinator.options import ReplayOptions
from pipelines.frames.tally import tally_rows
from pipelines.io.blobs import from_blob, to_blob
from schemas.decoded import DECODED_RECORD_SCHEMA, KIND_ERROR

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

LOG_DDL = "offsets_partition int, payload binary, tally binary, named binary"


def _first_position(table: pa.Table) -> tuple:
    p, o = table.column(PART)[0].as_py(), table.column("offset")[0].as_py()
    return (p is None, p or 0, o is None, o or 0)


def from_blobs(blobs: Iterable[bytes], schema: pa.Schema = DECODED_RECORD_SCHEMA) -> pa.Table:
    """The rows of `blobs`, the blobs ordered by their first (offsets partition, offset): a shuffle hands a
    partition's blobs over in any order, each in log order inside."""
    tables = [t for t in (from_blob(b) for b in blobs) if t.num_rows]
    tables.sort(key=_first_position)
    return pa.concat_tables(tables) if tables else schema.empty_table()


def _by_partition(batch: pa.RecordBatch) -> Iterator[tuple[int | None, pa.RecordBatch]]:
    parts = batch.column(PART)
    values = pc.unique(parts).to_pylist()
    if len(values) == 1:
        yield values[0], batch
        return
    for p in values:
        yield p, batch.filter(pc.is_null(parts) if p is None else pc.fill_null(pc.equal(parts, p), False))


def _raw_bytes_of_errors_only(batch: pa.RecordBatch) -> pa.RecordBatch:
    """The record's raw key and value kept on quarantined rows only: the quarantine shows them, and every other
    reader takes the decoded columns; kept on every row they would make the log as big as its input."""
    if "key" not in batch.schema.names:
        return batch
    is_error = pc.fill_null(pc.equal(batch.column("record_kind"), KIND_ERROR), False)
    if pc.all(is_error).as_py():
        return batch
    columns = list(batch.columns)
    for name in ("key", "value"):
        i = batch.schema.get_field_index(name)
        columns[i] = pc.if_else(is_error, batch.column(i), pa.nulls(batch.num_rows, batch.schema.field(i).type))
    return pa.RecordBatch.from_arrays(columns, schema=batch.schema)


def pack(batches: Iterable[pa.RecordBatch], cut: tuple | None = None) -> Iterator[pa.RecordBatch]:
    """Decoded row batches -> (offsets_partition, blob, tally, named) rows: one per offsets partition a batch holds
    (a segment's batch holds one; a tabular dump's, several). With ``cut`` (until_offset, until_time_ms), each
    blob's tally (`frames.tally`) is taken while its rows are in hand and kept beside it as a blob (else null).
    `named`: the blob's rows that name topics, at the cut (`coordinator.shard.naming_rows`; null when none): the
    run's topic names without another pass over the log."""
    at_cut = _at_cut(cut)
    for batch in batches:
        if batch.num_rows == 0:
            continue
        batch = _raw_bytes_of_errors_only(batch)
        parts, blobs, tallies, named = [], [], [], []
        for p, rows in _by_partition(batch):
            parts.append(p)
            blobs.append(to_blob(rows))
            tallies.append(None if cut is None else to_blob(tally_rows(rows, *cut)))
            names = naming_rows(pa.Table.from_batches([rows]), at_cut)
            named.append(to_blob(names) if names.num_rows else None)
        yield pa.record_batch([pa.array(parts, pa.int32()), pa.array(blobs, pa.binary()),
                               pa.array(tallies, pa.binary()), pa.array(named, pa.binary())],
                              names=[PART, "payload", "tally", "named"])


def _at_cut(cut: tuple | None):
    """A log's cut (until_offset, until_time_ms) as the engine's options (None: no cut)."""
    return None if cut is None else ReplayOptions(until_offset=cut[0], until_time_ms=cut[1])


def _select(table: pa.Table, columns: tuple[str, ...] | None, kinds: tuple[str, ...] | None,
            exclude: tuple[str, ...] | None) -> pa.Table:
    # the rows picked first, the columns cut next, then filtered once, if at all: a filter copies every column
    kind = table.column("record_kind")
    keep = None
    if kinds is not None:
        keep = pc.fill_null(pc.is_in(kind, pa.array(kinds, pa.string())), False)
    if exclude:
        kept = pc.invert(pc.fill_null(pc.is_in(kind, pa.array(exclude, pa.string())), False))
        keep = kept if keep is None else pc.and_(keep, kept)
    if columns is not None:
        table = table.select(list(columns))
    return table if keep is None or pc.all(keep).as_py() is not False else table.filter(keep)


def _schema(columns: tuple[str, ...] | None) -> pa.Schema:
    if columns is None:
        return DECODED_RECORD_SCHEMA
    return pa.schema([DECODED_RECORD_SCHEMA.field(c) for c in columns])


def _unpacker(columns, kinds, exclude):
    """The task function of a view: blobs in, the view's rows out (a picklable closure over plain values)."""
    schema = _schema(columns)

    def unpack(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for blob in batch.column("payload").to_pylist():
                table = _select(from_blob(blob), columns, kinds, exclude)
                if table.num_rows:
                    yield from table.cast(schema).to_batches()
    return unpack


@dataclass
class DecodedLog:
    """The decoded rows of a run: `blobs`, a DataFrame of (offsets_partition, payload, tally, named) kept by Spark, or
    `table`, the rows in hand. Exactly one is set. `cut`: the (until_offset, until_time_ms) the blobs' tallies were
    taken at (None: not tallied; `frames.tally.tally` reads them)."""

    spark: SparkSession
    blobs: DataFrame | None = None  # LOG_DDL
    table: pa.Table | None = None
    cut: tuple | None = None
    collected: pa.Table | None = None  # the blobs' `tally` and `named` columns, when already collected

    def side_blobs(self, column: str) -> list[bytes]:
        """The non-null `tally` or `named` blobs of every row of `blobs` (collected unless they are at hand)."""
        if self.collected is not None:
            values = self.collected.column(column)
        else:
            values = self.blobs.select(column).where(f"{column} is not null").toArrow().column(column)
        return [b for b in values.to_pylist() if b is not None]

    @classmethod
    def from_frame(cls, spark, frame) -> "DecodedLog":
        """A DataFrame of decoded rows (the saved state of an incremental run, tests) as a log."""
        def pack_rows(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            return pack(b for t in batches for b in conform_decoded(pa.Table.from_batches([t])).to_batches())
        return cls(spark, blobs=frame.mapInArrow(pack_rows, LOG_DDL))

    @property
    def in_hand(self) -> bool:
        return self.table is not None

    def frame(self, columns: Iterable[str] | None = None, kinds: Iterable[str] | None = None,
              exclude: Iterable[str] | None = None):
        """A DataFrame of the rows whose record_kind is in `kinds` (all: None) and not in `exclude`, with only
        `columns` (all: None), in the decoded schema's types."""
        # imported here, not at module level: pyspark ~0.1 s of import (python -X importtime)
        from pyspark.sql.pandas.types import from_arrow_schema

        columns = tuple(columns) if columns is not None else None
        kinds = tuple(kinds) if kinds is not None else None
        exclude = tuple(exclude) if exclude is not None else None
        spark_schema = from_arrow_schema(_schema(columns))
        if self.table is not None:
            return self.spark.createDataFrame(_select(self.table, columns, kinds, exclude).cast(_schema(columns)),
                                              schema=spark_schema)
        return self.blobs.select("payload").mapInArrow(_unpacker(columns, kinds, exclude), spark_schema)

    def to_arrow(self, columns: Iterable[str] | None = None, kinds: Iterable[str] | None = None,
                 exclude: Iterable[str] | None = None) -> pa.Table:
        """`frame`'s rows as an Arrow table in the driver (a small run's replay)."""
        columns = tuple(columns) if columns is not None else None
        kinds = tuple(kinds) if kinds is not None else None
        exclude = tuple(exclude) if exclude is not None else None
        if self.table is not None:
            return _select(self.table, columns, kinds, exclude)
        blobs = self.blobs.select("payload").toArrow().column("payload").to_pylist()
        return _select(from_blobs(blobs), columns, kinds, exclude)

    def blob_frame(self):
        """The log as (offsets_partition, payload, tally, named) rows on Spark, whichever way it is held."""
        if self.blobs is not None:
            return self.blobs
        schema = pa.schema([(PART, pa.int32()), ("payload", pa.binary()), ("tally", pa.binary()),
                            ("named", pa.binary())])
        table = pa.Table.from_batches(list(pack(self.table.to_batches(), self.cut)), schema=schema)
        # imported here, not at module level: pyspark ~0.1 s of import (python -X importtime)
        from pyspark.sql.pandas.types import from_arrow_schema

        return self.spark.createDataFrame(table, schema=from_arrow_schema(schema))

    def naming_rows(self) -> pa.Table:
        """Every row that names topics (`coordinator.shard.naming_rows`) at the cut the log was decoded with: the
        few rows its tasks kept beside the blobs, collected."""
        if self.table is not None:
            return naming_rows(self.table, _at_cut(self.cut))
        parts = [from_blob(b) for b in self.side_blobs("named")]
        return pa.concat_tables(parts) if parts else naming_rows(DECODED_RECORD_SCHEMA.empty_table())

    def partitions(self) -> int:
        """How many offsets partitions (shards) the log holds rows of (rows without one count as one more)."""
        if self.table is not None:
            return len(pc.unique(self.table.column(PART)))
        return self.blobs.select(PART).distinct().count()

    def persist(self) -> "DecodedLog":
        """Kept by Spark on local disk: every later step reads the log once or twice, and decoding it again would
        cost more than keeping its compressed blobs. Never in memory: the blobs are log-sized, and a JVM heap sized
        for the state would run out holding them."""
        # imported here, not at module level: pyspark ~0.1 s of import (python -X importtime)
        from pyspark import StorageLevel

        if self.blobs is not None:
            self.blobs = self.blobs.persist(StorageLevel.DISK_ONLY)
        return self

    def unpersist(self) -> None:
        if self.blobs is not None:
            self.blobs.unpersist()
