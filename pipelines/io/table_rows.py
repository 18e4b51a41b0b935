"""A table's rows as a warehouse write takes them (`io.warehouse`), wherever they are held: in this process
(`ArrowRows`), on Spark (`FrameRows`; packed in blobs, `io.blobs.BlobRows`), or written already by the tasks that
built them (`io.warehouse.StagedHistory`). Each holder conforms its rows to the contract and writes them from where
they are, so a write picks its way by what the rows allow, never by their Python type.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, ClassVar, Iterator, Literal, Protocol

import pyarrow as pa

from pipelines.io import delta
from schemas.tables import TABLES
from schemas.tables import columns as table_columns

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from pipelines.io.storage import Location

#: Where a table's rows are: in this process (written and merged here), on Spark (written by the tasks holding
#: them), or already written as files of the table (committed as they are where they can be).
Held = Literal["in_hand", "spark", "staged"]
#: An executor-side map over the batches a write task is given (`delta.write_frame_files`' `opened`).
BatchMap = Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]
#: Files written: those of the write directory, or (theirs, the set-aside ones') when rows were set aside.
Written = list[delta.WrittenFile] | tuple[list[delta.WrittenFile], list[delta.WrittenFile]]
#: A batch's mask of the rows set aside, and the directory they go to.
Aside = tuple[Callable[[pa.RecordBatch], pa.Array], str]


@dataclass(frozen=True)
class StagedFiles:
    """Rows written already as files of a table, uncommitted: the settled rows' directory and files, the set-aside
    (pending) rows' directory and files. `filtered`: they hold only rows the table lacked when they were written.
    `committed` is told whether a commit of them went through (or may have: then they are the table's)."""

    settled_dir: str
    pending_dir: str
    settled: tuple[delta.WrittenFile, ...]
    pending: tuple[delta.WrittenFile, ...]
    filtered: bool
    committed: Callable[[bool], None]


class TableRows(Protocol):
    """One table's rows as a warehouse write takes them. `clustered`: each record once and, within each task's
    share, grouped by offsets partition in record order (what the replay's shards give,
    `coordinator.tables.once_per_record`): a history write then neither deduplicates nor sorts them again."""

    held: ClassVar[Held]

    @property
    def clustered(self) -> bool: ...

    @property
    def column_names(self) -> list[str]: ...

    def conformed(self, table: str, snapshot_id: str | None) -> TableRows:
        """The rows as the contract's columns and types of `table` (`snapshot_id`: set on every row)."""

    def to_arrow(self) -> pa.Table:
        """The rows brought into this process (for rows sized by the state)."""

    def to_frame(self, spark: SparkSession | None) -> DataFrame:
        """The rows as a DataFrame."""

    def staged(self) -> StagedFiles | None:
        """The files the rows are written as already (None: not written yet)."""

    def write_files(self, table_path: str | Location, rel_dir: str, table_schema: pa.Schema, *,
                    partition_columns: tuple[str, ...] = (), split_by: str | None = None,
                    aside: Aside | None = None, through: BatchMap | None = None) -> Written:
        """The rows written as Parquet files of `<table_path>/<rel_dir>` from where they are held, uncommitted
        (`delta.write_frame_files`' `split_by` and `aside`); `through`: what each writer does to its batches first
        (with their contract columns)."""


def check_columns(columns: list[str], table: str, snapshot_id: str | None) -> list[str]:
    """What `columns` lack or hold beyond the contract's of `table`, as the words of an error (empty: they match);
    `snapshot_id` given: that column may be absent (the write sets it)."""
    wanted = table_columns(table)
    missing = [c for c in wanted if c not in columns and not (c == "snapshot_id" and snapshot_id is not None)]
    extra = [c for c in columns if c not in set(wanted)]
    return [*([f"missing {missing}"] if missing else []), *([f"unknown {extra}"] if extra else [])]


def with_snapshot_id(rows: pa.Table | pa.RecordBatch, snapshot_id: str) -> pa.Table | pa.RecordBatch:
    """A batch (or table) of rows with `snapshot_id` set on every row (the column added when absent)."""
    value = pa.repeat(pa.scalar(snapshot_id, pa.string()), rows.num_rows)
    names, arrays = list(rows.schema.names), list(rows.columns)
    if "snapshot_id" in names:
        arrays[names.index("snapshot_id")] = value
    else:
        names, arrays = [*names, "snapshot_id"], [*arrays, value]
    return type(rows).from_arrays(arrays, names=names)


@dataclass(frozen=True)
class ArrowRows:
    """Rows in this process (a run replayed here, the state tables): written and merged by this process."""

    held: ClassVar[Held] = "in_hand"
    table: pa.Table
    clustered: bool = False

    @property
    def column_names(self) -> list[str]:
        return list(self.table.column_names)

    def conformed(self, table: str, snapshot_id: str | None) -> ArrowRows:
        rows = self.table if snapshot_id is None else with_snapshot_id(self.table, snapshot_id)
        bad = [f.name for f in TABLES[table] if not f.nullable and f.name in rows.column_names
               and rows.column(f.name).null_count]
        if bad:
            raise delta.DeltaWriteError(f"{table}: nulls in non-nullable column(s) {', '.join(bad)}")
        wanted = [c for c in table_columns(table) if c in rows.column_names]
        schema = pa.schema([TABLES[table].field(c) for c in wanted])
        return ArrowRows(rows.select(wanted).cast(schema), self.clustered)

    def to_arrow(self) -> pa.Table:
        return self.table

    def staged(self) -> None:
        return None

    def to_frame(self, spark: SparkSession | None) -> DataFrame:
        if spark is None:
            raise delta.DeltaWriteError("rows in this process need a Spark session to be merged on Spark")
        schema = pa.schema([f.with_nullable(True) for f in self.table.schema])
        return spark.createDataFrame(self.table, schema=delta.spark_schema(schema))

    def write_files(self, table_path: str | Location, rel_dir: str, table_schema: pa.Schema, *,
                    partition_columns: tuple[str, ...] = (), split_by: str | None = None,
                    aside: Aside | None = None, through: BatchMap | None = None) -> Written:
        table = self.table
        if through is not None:
            batches = list(through(iter(table.to_batches())))
            table = (pa.concat_tables([pa.Table.from_batches([b]) for b in batches], promote_options="permissive")
                     if batches else table.slice(0, 0))
        return delta.write_table_files(table, table_path, rel_dir, table_schema, partition_columns,
                                       split_by=split_by, aside=aside)


@dataclass(frozen=True)
class FrameRows:
    """Rows on Spark as Spark rows: the tasks that hold them write them. `clustered`: see `TableRows` (a frame of
    the run's own shards is; any other may hold a record twice, in any order)."""

    held: ClassVar[Held] = "spark"
    frame: DataFrame
    clustered: bool = False

    @property
    def column_names(self) -> list[str]:
        return list(self.frame.columns)

    def conformed(self, table: str, snapshot_id: str | None) -> FrameRows:
        # pyspark.sql costs 0.24-1.6 s to import (-X importtime here): rows on Spark have loaded it already
        from pyspark.sql import functions as F

        exprs = []
        for f in delta.spark_schema(TABLES[table]).fields:
            if f.name == "snapshot_id" and snapshot_id is not None:
                exprs.append(F.lit(snapshot_id).cast(f.dataType).alias(f.name))
            else:
                exprs.append(F.col(f.name).cast(f.dataType).alias(f.name))
        return FrameRows(self.frame.select(*exprs), self.clustered)

    def to_arrow(self) -> pa.Table:
        return self.frame.toArrow()

    def staged(self) -> None:
        return None

    def to_frame(self, spark: SparkSession | None) -> DataFrame:
        return self.frame

    def write_files(self, table_path: str | Location, rel_dir: str, table_schema: pa.Schema, *,
                    partition_columns: tuple[str, ...] = (), split_by: str | None = None,
                    aside: Aside | None = None, through: BatchMap | None = None) -> Written:
        frame = self.frame
        if through is not None:  # `opened` takes every column: the files' are picked by the writer
            frame = frame.select(*[c for c in table_schema.names if c not in partition_columns])
        return delta.write_frame_files(frame, table_path, rel_dir, table_schema, partition_columns,
                                       split_by=split_by, aside=aside, opened=through)
