"""What a shard's task hands back across the Spark boundary: one frozen class per kind of payload, each with its own
fields, and the one encoder between them and the envelope's rows (`encode` / `decode`).

The envelope is one Spark frame (`FUSED_DDL`) of every kind, so that one job's output can be kept, filtered and
collected as one. Its columns are physical: `table` says the kind, `payload` holds the kind's main bytes,
`tally` / `named` a decoded log's sides (or the groups of a group events file's skipped events), `seq` / `bucket` a
range's place in its partition's log and its bucket of groups (or a group events file's row count). Only this module
reads or writes them by position or tag; the Spark side selects a kind's rows with `of_kind` and the views below, the
Python side sees the classes.
"""
from __future__ import annotations

import functools
import json
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, ClassVar, Iterable, Iterator, Union

import pyarrow as pa
import pyarrow.compute as pc

from pipelines.io.blobs import PAYLOAD, to_blob
from pipelines.io.delta import WrittenFile
from schemas.decoded import DECODED_RECORD_SCHEMA

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

FUSED_DDL = "table string, shard int, payload binary, tally binary, named binary, seq int, bucket int"
ENVELOPE_SCHEMA = pa.schema([("table", pa.string()), ("shard", pa.int32()), (PAYLOAD, pa.binary()),
                             ("tally", pa.binary()), ("named", pa.binary()), ("seq", pa.int32()),
                             ("bucket", pa.int32())])
HISTORY = "offset_commits"


@dataclass(frozen=True, slots=True, kw_only=True)
class QuarantinedRows:
    """A window's quarantined rows (decoded rows of kind error, a blob): the decoded log the run keeps."""

    TAG: ClassVar[str] = "_log"
    shard: int
    rows: bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class DecodedTally:
    """What a shard's task decoded, at its end: the tally of every row it read (`frames.tally`) and the rows that
    name topics (`coordinator.shard.naming_rows`; None: none), blobs. A row of the decoded log with no rows."""

    TAG: ClassVar[str] = "_log"
    shard: int
    tally: bytes
    named: bytes | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Markers:
    """The end-transaction markers a shard read (`coordinator.shard.MARKER_COLUMNS`, a blob)."""

    TAG: ClassVar[str] = "_markers"
    shard: int
    rows: bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class ShardStates:
    """A loaded shard's state (`coordinator.loader.ShardState`s, pickled: none or one), tabulated by a second job
    once the run's clock and topic names are known."""

    TAG: ClassVar[str] = "_states"
    shard: int
    states: bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class HistoryRows:
    """`offset_commits` rows of a shard, a blob of at most `frames.shards.CHUNK_ROWS`: Spark keeps them until the
    write opens them."""

    TAG: ClassVar[str] = HISTORY
    shard: int
    rows: bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class HistorySuspects:
    """The history's rows its suite might reject, with the counts of all of them (`validation.suspects`, a blob)."""

    TAG: ClassVar[str] = "_suspects"
    shard: int
    rows: bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class WrittenHistory:
    """A file of a shard's history its task wrote (`io.warehouse.HistoryWriter`); `aside`: of the rows of
    transactions still open."""

    TAG: ClassVar[str] = "_written"
    shard: int
    file: WrittenFile
    aside: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class SavedFile:
    """The file of the shard the next `--incremental` run resumes, as its task wrote it (`io.checkpoint.StateStage`),
    of `entries` state entries and `size` bytes."""

    TAG: ClassVar[str] = "_saved_file"
    shard: int
    file: str
    entries: int
    size: int
    sha256: str | None = None  # of its bytes, for the checkpoint (`io.checkpoint.read_state_files` checks it)


@dataclass(frozen=True, slots=True, kw_only=True)
class SavedShardBytes:
    """The shard the next `--incremental` run resumes (`coordinator.saved.SavedShard.to_bytes`), collected whole."""

    TAG: ClassVar[str] = "_saved"
    shard: int
    data: bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupEventsFile:
    """A file of the run's scratch (`io.scratch.Scratch`) a task wrote: `group_history` rows of the group events a
    load took (`coordinator.tables.group_history_table`), a blob of `count` rows whose KIP-848 members' topic ids
    are named once the run's topic names are known. The envelope carries its name, not its rows: the write opens
    it where it writes, and Spark never holds its bytes; and the group ids of its events `skipped` (a record the
    coordinator's load fails on: `rebuild.coordinator_warnings`), which the run names without reading the rows."""

    TAG: ClassVar[str] = "_group_events_file"
    shard: int
    file: str
    count: int
    skipped: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class KeptRowsFile:
    """What a range of a split partition hands on to its partition's load (`frames.ranges`): a file of the run's
    scratch (`io.scratch.Scratch`) holding the rows of one `bucket` of the partition's groups
    (`coordinator.streamed.by_group`), from the range `range_index` in the partition's log order, as a blob. The
    envelope carries its name: the load reads it as it comes to that range, and Spark never holds its rows."""

    TAG: ClassVar[str] = "_kept_file"
    shard: int
    file: str
    range_index: int
    bucket: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ShardProgress:
    """A shard's records and input bytes, counted for the progress lines and dropped."""

    TAG: ClassVar[str] = "_progress"
    shard: int
    records: int
    input_bytes: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ReaderCounts:
    """The reader's own count of a task's work items (`frames.decode.count_items`'s rows, a blob), for the
    accounting: it walks entry heads, never the decoded rows."""

    TAG: ClassVar[str] = "_reader_counts"
    shard: int
    rows: bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class StateTable:
    """Rows of one of a shard's state tables (`coordinator.shard.SHARD_TABLES` but the history), a blob."""

    shard: int
    table: str
    rows: bytes


Payload = Union[QuarantinedRows, DecodedTally, Markers, ShardStates, HistoryRows, HistorySuspects, WrittenHistory,
                SavedFile, SavedShardBytes, GroupEventsFile, KeptRowsFile, ShardProgress, ReaderCounts, StateTable]


@functools.cache
def _no_quarantine() -> bytes:
    return to_blob(DECODED_RECORD_SCHEMA.empty_table())


def _columns(p: Payload) -> tuple:
    """(table, payload, tally, named, seq, bucket) of `p`."""
    if isinstance(p, StateTable):
        if p.table.startswith("_") or p.table == HISTORY:
            raise ValueError(f"{p.table!r} is not a state table")
        return p.table, p.rows, None, None, None, None
    if isinstance(p, DecodedTally):  # the decoded log's row: its quarantine is empty
        return p.TAG, _no_quarantine(), p.tally, p.named, None, None
    if isinstance(p, GroupEventsFile):
        return p.TAG, p.file.encode(), None, json.dumps(p.skipped).encode() if p.skipped else None, p.count, None
    if isinstance(p, KeptRowsFile):
        return p.TAG, p.file.encode(), None, None, p.range_index, p.bucket
    if isinstance(p, WrittenHistory):
        return p.TAG, json.dumps([asdict(p.file), p.aside]).encode(), None, None, None, None
    if isinstance(p, SavedFile):
        return p.TAG, json.dumps({"file": p.file, "entries": p.entries, "bytes": p.size,
                                         "sha256": p.sha256}).encode(), None, None, \
            None, None
    if isinstance(p, ShardProgress):
        return p.TAG, f"{p.records},{p.input_bytes}".encode(), None, None, None, None
    if isinstance(p, ShardStates):
        return p.TAG, p.states, None, None, None, None
    if isinstance(p, SavedShardBytes):
        return p.TAG, p.data, None, None, None, None
    return p.TAG, p.rows, None, None, None, None


def encode(payloads: Iterable[Payload]) -> pa.RecordBatch:
    """The envelope rows of `payloads`, in order (`ENVELOPE_SCHEMA`)."""
    rows = [(p.shard, *_columns(p)) for p in payloads]
    shard, table, payload, tally, named, seq, bucket = zip(*rows) if rows else ((),) * 7
    return pa.record_batch([pa.array(table, pa.string()), pa.array(shard, pa.int32()),
                            pa.array(payload, pa.binary()), pa.array(tally, pa.binary()),
                            pa.array(named, pa.binary()), pa.array(seq, pa.int32()), pa.array(bucket, pa.int32())],
                           schema=ENVELOPE_SCHEMA)


def _payload(table: str, shard: int, payload: bytes | None, tally: bytes | None, named: bytes | None,
             seq: int | None, bucket: int | None) -> Payload | None:
    if table == QuarantinedRows.TAG:
        if tally is not None:
            return DecodedTally(shard=shard, tally=tally, named=named)
        # collected without its rows (`segment_shards._collected` keeps only the sides): nothing to give
        return None if payload is None else QuarantinedRows(shard=shard, rows=payload)
    if table == WrittenHistory.TAG:
        file, aside = json.loads(payload)
        return WrittenHistory(shard=shard, file=WrittenFile(**file), aside=aside)
    if table == SavedFile.TAG:
        f = json.loads(payload)
        return SavedFile(shard=shard, file=f["file"], entries=f["entries"], size=f["bytes"], sha256=f.get("sha256"))
    if table == ShardProgress.TAG:
        records, nbytes = map(int, payload.decode().split(","))
        return ShardProgress(shard=shard, records=records, input_bytes=nbytes)
    if table == GroupEventsFile.TAG:
        return GroupEventsFile(shard=shard, file=payload.decode(), count=seq,
                               skipped=tuple(json.loads(named)) if named is not None else ())
    if table == KeptRowsFile.TAG:
        return KeptRowsFile(shard=shard, file=payload.decode(), range_index=seq, bucket=bucket)
    if table == ShardStates.TAG:
        return ShardStates(shard=shard, states=payload)
    if table == SavedShardBytes.TAG:
        return SavedShardBytes(shard=shard, data=payload)
    for kind in (Markers, HistoryRows, HistorySuspects, ReaderCounts):
        if table == kind.TAG:
            return kind(shard=shard, rows=payload)
    return StateTable(shard=shard, table=table, rows=payload)


def decode(rows: pa.Table | pa.RecordBatch) -> Iterator[Payload]:
    """The payloads of envelope rows (any subset of `ENVELOPE_SCHEMA`'s columns with `table` and `shard`)."""
    names = set(rows.schema.names)
    columns = [rows.column(c).to_pylist() if c in names else [None] * rows.num_rows
               for c in ENVELOPE_SCHEMA.names]
    for values in zip(*columns):
        got = _payload(*values)
        if got is not None:
            yield got


def taken(batch: pa.RecordBatch, kind: type) -> tuple[list[Payload], pa.RecordBatch]:
    """`batch`'s payloads of `kind` (a tagged payload class), and its other rows as they are (their blobs not
    copied out of Arrow)."""
    is_kind = pc.equal(batch.column("table"), kind.TAG)
    return list(decode(batch.filter(is_kind))), batch.filter(pc.invert(is_kind))


def of_kind(frame: DataFrame, *kinds: type) -> DataFrame:
    """The rows of `frame` (an envelope) of `kinds` (tagged payload classes)."""
    return frame.where(_is_kind(kinds))


def not_of_kind(frame: DataFrame, *kinds: type) -> DataFrame:
    """The rows of `frame` (an envelope) of any kind but `kinds`."""
    return frame.where(f"NOT ({_is_kind(kinds)})")


def _is_kind(kinds: tuple[type, ...]) -> str:
    tags = sorted({k.TAG for k in kinds})
    return "`table` IN (" + ", ".join(f"'{t}'" for t in tags) + ")"


def blob_column(frame: DataFrame, kind: type) -> DataFrame:
    """The blobs of `frame`'s rows of `kind` (`HistoryRows`) as `io.blobs.BlobRows` read them: one
    `payload` column."""
    return of_kind(frame, kind).select(PAYLOAD)


def log_blobs(frame: DataFrame, part: str) -> DataFrame:
    """The decoded log's rows of an envelope (`QuarantinedRows`, `DecodedTally`) as `frames.decoded_log.LOG_DDL`
    (`part`: its offsets partition column)."""
    return of_kind(frame, QuarantinedRows).selectExpr(f"shard AS {part}", PAYLOAD, "tally", "named")


def collected_rows(frame: DataFrame, *kinds: type, blobs_left: tuple[type, ...] = ()) -> DataFrame:
    """`frame`'s rows of `kinds` as the driver collects them: the payloads of the `blobs_left` kinds (log-sized: they
    stay on Spark) null, their sides kept."""
    payload = f"CASE WHEN {_is_kind(blobs_left)} THEN NULL ELSE {PAYLOAD} END AS {PAYLOAD}" if blobs_left else PAYLOAD
    return of_kind(frame, *kinds).selectExpr("table", "shard", payload, "tally", "named", "seq", "bucket")

