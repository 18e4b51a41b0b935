"""Tabular dumps of `__consumer_offsets` (Spark Kafka-source rows in Parquet, JSON lines or CSV) into records.

The Spark Kafka source (`spark-sql-kafka-0-10`, `KafkaRecordToRowConverter`) gives one row per record with
``key, value, topic, partition, offset, timestamp, timestampType``. Such a dump carries no batch facts: the Kafka
consumer under it never returns control records (transaction markers) and says nothing of producer ids, so
transactional offset commits cannot be resolved unless the optional columns ``producer_id, producer_epoch,
is_transactional, is_control, batch_base_offset`` are present (`TabularDump.has_batch_facts`).

Each row becomes a `LogRecord` with a synthetic `RecordBatchHeader` (position: its row, codec "none", crc -1): rows
sharing (partition, batch_base_offset) form one batch, otherwise each row is its own batch. Rows are replayed in
(partition, offset) order whatever order the file holds them in. In text formats key and value are base64 or hex
(detected from the keys, or ``encoding=``); a text file may be compressed whole (``READ_COMPRESSIONS``, told by its
name, as Spark's ``compression`` option writes ``part-0000.json.gz``). ReadProblem positions are row numbers of the
dump (0-based, in part file order, malformed lines included); each stands for one record (`ReadProblem.records`).

* Same (partition, offset) twice: the first row is kept; the other is a ``duplicate_row`` (one per run of such rows)
  when identical, else a ``duplicate_conflict``.
* Rows of another topic: one ``not_offsets_data`` problem per topic (with the row count), not read.
* Rows with a null partition/offset, one past Kafka's (a partition past 2^31 - 1, an offset past 2^63 - 1),
  undecodable key/value text, a batch flag that is no boolean (`true`/`false` in any case, 1/0: the text
  `false` is false), a producer id, epoch or batch base offset that is no long, short or log position, a
  timestamp that is no time in a long of milliseconds, or a timestampType that names no `TimestampType` (its id
  -1/0/1, or its name, in any case): ``invalid_row``; a negative offset or partition: ``negative_offset``.
* A JSON file that is one array of objects (an export as a JSON document) holds a row per element.
* Text that is not UTF-8 (a key, a value, a topic) is read with U+FFFD for each byte that is not, in every format:
  such a key or value is undecodable text, such a topic another topic's.
* A part file that is no regular file (a pipe, a socket, a device) is refused by name before it is opened.
* A JSON line that does not parse, a CSV row with the wrong number of fields, a partition/offset that is not a
  whole number: ``malformed_row``; the other rows are read (the file is parsed line by line when Arrow's reader
  refuses it).
"""
from __future__ import annotations

import base64
import binascii
import csv
import io
import json
import os
import re
import stat
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv
import pyarrow.json as pj

from pipelines.decoding.errors import InvalidFieldError
from pipelines.decoding.dump_files import COMPRESSION_SUFFIXES, dump_suffix
from pipelines.decoding.segments import InputError
from schemas.records import (CREATE_TIME, LOG_APPEND_TIME, NO_TIMESTAMP_TYPE, OFFSET_MAX, PARTITION_MAX, LogRecord,
                             ReadProblem, RecordBatchHeader)

__all__ = ["BATCH_FACT_COLUMNS", "KAFKA_SOURCE_COLUMNS", "TabularDump", "read_tabular_dump"]

OFFSETS_TOPIC = "__consumer_offsets"
KAFKA_SOURCE_COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp", "timestampType")
BATCH_FACT_COLUMNS = ("producer_id", "producer_epoch", "is_transactional", "is_control", "batch_base_offset")
_REQUIRED = ("key", "value", "partition", "offset")
_FORMATS = {".parquet": "parquet", ".pq": "parquet", ".json": "json", ".jsonl": "json", ".ndjson": "json",
            ".csv": "csv"}
READ_COMPRESSIONS = (".gz", ".bz2", ".zst", ".lz4")  # what Arrow's readers decompress, told by the file's name
# what the hex decoder (`bytes.fromhex`) reads, matched whole: pairs of hex digits, ASCII whitespace around them
_HEX_RE = re.compile(r"[ \t\n\r\x0b\x0c]*(?:[0-9a-fA-F]{2}[ \t\n\r\x0b\x0c]*)*\Z")
_DETECT_SAMPLE = 1000


@dataclass
class TabularDump:
    """An opened tabular dump: its format, the key/value text encoding, and whether batch facts are present."""

    path: str
    fmt: str
    encoding: str | None  # "base64" | "hex" for text key/value columns; None for binary columns
    columns: tuple[str, ...]
    has_batch_facts: bool
    _table: pa.Table = field(repr=False)  # the rows read, with their row number in ROW_COLUMN
    malformed: list[tuple[int, str]] = field(default_factory=list)  # (row number, reason) of unparsable lines

    def __iter__(self) -> Iterator[LogRecord | ReadProblem]:
        return self.records()

    @property
    def num_rows(self) -> int:
        return self._table.num_rows

    def records(self) -> Iterator[LogRecord | ReadProblem]:
        """Records in (partition, offset) order, plus ReadProblems for rows that cannot be used."""
        return _iter_records(self)


def read_tabular_dump(path: str | os.PathLike, *, fmt: str | None = None, encoding: str | None = None
                      ) -> TabularDump:
    """Open a Parquet / JSON lines / CSV dump (a file, or a directory of part files as Spark writes them).

    Iterate the result (or call `.records()`) for ``LogRecord | ReadProblem``; `.has_batch_facts` says whether
    transactional records can be resolved. ``fmt`` in {"parquet", "json", "csv"}; ``encoding`` in
    {"base64", "hex"} (text formats; detected when omitted). Raises `InputError` for a missing path and
    `InvalidFieldError` for a table without the key/value/partition/offset columns (or whose key and value are
    not both bytes or both text).
    """
    p = os.fspath(path)
    # imported here, not at module level: pyarrow.fs ~0.05 s of import (python -X importtime)
    from pipelines.io import storage

    if storage.is_remote(p):
        return _read_remote_dump(p, fmt=fmt, encoding=encoding)
    if not os.path.exists(p):
        raise InputError(f"input path does not exist: {p}")
    files = _files(p)
    if not files:
        raise InputError(f"no data files in {p}")
    fmt = fmt or _one_format(p, files)
    if fmt not in ("parquet", "json", "csv"):
        raise InvalidFieldError(f"unknown dump format {fmt!r}", field="fmt")
    if encoding not in (None, "base64", "hex"):
        raise InvalidFieldError(f"unknown key/value encoding {encoding!r}", field="encoding")
    for f in files:
        _refuse_compression(f, fmt)
    tables = []
    malformed: list[tuple[int, str]] = []
    first_row = 0
    for f in files:
        t, bad, n_rows = _read_file(f, fmt)
        if ROW_COLUMN in t.column_names:  # parsed line by line: its rows' numbers in the file
            rows = pc.add(t.column(ROW_COLUMN), pa.scalar(first_row, pa.int64()))
            t = t.set_column(t.column_names.index(ROW_COLUMN), ROW_COLUMN, rows)
        else:
            t = t.append_column(ROW_COLUMN, pa.array(range(first_row, first_row + t.num_rows), pa.int64()))
        tables.append(t)
        malformed.extend((first_row + i, f"{os.path.basename(f)}: {why}") for i, why in bad)
        first_row += n_rows
    try:
        table = pa.concat_tables(_facts_alike(tables), promote_options="permissive") if len(tables) > 1 \
            else tables[0]
    except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
        raise InvalidFieldError(f"part files of {p} have incompatible schemas: {e}", field="schema") from None
    missing = [c for c in _REQUIRED if c not in table.column_names]
    if missing:
        raise InvalidFieldError(f"dump {p} lacks column(s) {', '.join(missing)}", field=missing[0])
    if not _whole_positions(table):  # a Parquet dump's own types
        c = next(c for c in _INT_COLUMNS if not pa.types.is_integer(table.schema.field(c).type))
        raise InvalidFieldError(f"dump {p}: its {c} column holds {table.schema.field(c).type}, not whole numbers",
                                field=c)
    text = _bytes_columns(table, p)
    if text and encoding is None:
        encoding = _detect_encoding(table)
    elif not text:
        encoding = None
    facts = all(c in table.column_names for c in ("producer_id", "is_transactional", "is_control"))
    return TabularDump(path=p, fmt=fmt, encoding=encoding,
                       columns=tuple(c for c in table.column_names if c != ROW_COLUMN),
                       has_batch_facts=facts, _table=table, malformed=malformed)


def _bytes_columns(table: pa.Table, p: str) -> bool:
    """Whether the key and value columns hold text (else bytes); a column of anything else, or one of bytes beside
    one of text, is no dump of records: its values would reach the decoders as they are."""
    kinds = {}
    for c in ("key", "value"):
        t = table.schema.field(c).type
        if pa.types.is_string(t) or pa.types.is_large_string(t):
            kinds[c] = "text"
        elif pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
            kinds[c] = "bytes"
        elif not pa.types.is_null(t):  # a column of nulls only goes with either
            raise InvalidFieldError(f"dump {p}: its {c} column holds {t}, not bytes or text", field=c)
    if len(set(kinds.values())) > 1:
        raise InvalidFieldError(f"dump {p}: its key column holds {table.schema.field('key').type} and its value "
                                f"column {table.schema.field('value').type}: both bytes or both text", field="value")
    return "text" in kinds.values()


def _read_remote_dump(uri: str, *, fmt: str | None, encoding: str | None) -> TabularDump:
    """A dump on object storage: its part files fetched into a temporary directory (a dump is read whole into
    memory anyway), read as a local dump, and named by their URIs."""
    # imported here, not at module level: pyarrow.fs ~0.05 s of import (python -X importtime)
    from pipelines.io import storage

    loc = storage.location(uri)
    if not loc.exists():
        raise InputError(f"input path does not exist: {uri}")
    with loc.as_local_copy() as local:
        try:
            dump = read_tabular_dump(local, fmt=fmt, encoding=encoding)
        except (InputError, InvalidFieldError) as e:
            e.args = (str(e).replace(local, uri),) + e.args[1:]
            raise
    dump.path = uri
    return dump


# ----------------------------------------------------------------------------------------------------------------
def _files(p: str) -> list[str]:
    if os.path.isfile(p):
        return [p]
    out = []
    for root, dirs, names in os.walk(p):
        dirs[:] = sorted(d for d in dirs if not d.startswith((".", "_")))
        for n in sorted(names):
            if n.startswith((".", "_")) or n.endswith(".crc"):
                continue  # _SUCCESS, .part-….crc
            _refuse_special(os.path.join(root, n))
            out.append(os.path.join(root, n))
    return out


def _refuse_special(path: str) -> None:
    """A pipe, socket or device among a dump's part files is refused before it is opened: opening a pipe to read
    waits for a writer, so a run hung there without a line said (a dangling link is the reader's to report)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return
    if not stat.S_ISREG(mode):
        raise InvalidFieldError(f"dump file {path} is not a regular file (a pipe, socket or device); move it out of "
                                f"the dump", field="file")


def _one_format(p: str, files: list[str]) -> str:
    """The format of a dump's part files, each told by its own name (or bytes): a directory that mixes them (a file
    dropped beside Spark's parts) had every file read in the first one's, its rows each a malformed row."""
    formats: dict[str, str] = {}
    for f in files:
        formats.setdefault(_detect_format(f), os.path.basename(f))
    if len(formats) > 1:
        mixed = ", ".join(f"{fmt}: {name}" for fmt, name in sorted(formats.items()))
        raise InvalidFieldError(f"dump {p} holds part files of more than one format ({mixed}): give each format as "
                                f"an --input of its own", field="fmt")
    return next(iter(formats))


def _detect_format(path: str) -> str:
    ext = dump_suffix(path)
    if ext in _FORMATS:
        return _FORMATS[ext]
    with open(path, "rb") as f:
        head = f.read(4096)
    if head.startswith(b"PAR1"):
        return "parquet"
    if head.lstrip()[:1] == b"{":
        return "json"
    return "csv"


def _refuse_compression(path: str, fmt: str) -> None:
    """A file compressed whole is read when it is text (JSON lines, CSV) in a codec Arrow's readers decompress by
    its name; Parquet compresses inside its pages, so a Parquet file compressed again is refused, as is any other
    codec (Hadoop's snappy and deflate framings are not Arrow's): one line, not a file taken for a segment."""
    ext = os.path.splitext(path.lower())[1]
    if ext not in COMPRESSION_SUFFIXES:
        return
    if fmt == "parquet" or ext not in READ_COMPRESSIONS:
        raise InvalidFieldError(f"dump file {path} is a {fmt} file compressed as {ext}: only JSON lines and CSV "
                                f"compressed as {', '.join(READ_COMPRESSIONS)} are read; decompress it first",
                                field="file")


ROW_COLUMN = "__row"  # the row number of each row in the dump (a quarantine row's position)


def _read_file(path: str, fmt: str) -> tuple[pa.Table, list[tuple[int, str]], int]:
    """(rows, malformed (row number in the file, reason), rows in the file) of one part file.

    Arrow reads a well-formed file; a text file it refuses (one bad line fails the whole file) is parsed line
    by line instead, so one bad line costs one quarantine row, not the dump.
    """
    try:
        if fmt == "parquet":
            # imported here, not at module level: pyarrow.parquet ~0.012 s of import (python -X importtime)
            import pyarrow.parquet as pq

            t = _text_as_utf8(pq.read_table(path))
            return t, [], t.num_rows
        if fmt == "json":
            schema = pa.schema([("key", pa.string()), ("value", pa.string()), ("topic", pa.string())])
            t = pj.read_json(path, parse_options=pj.ParseOptions(explicit_schema=schema,
                                                                 unexpected_field_behavior="infer"))
            # the explicit schema gives a key or value column no line may name (a dump of `k`/`v`): all null, each
            # row was quarantined and the run succeeded, where the line reader, as a CSV dump's header, finds it absent
            unnamed = t.num_rows and any(t.column(c).null_count == t.num_rows for c in ("key", "value"))
            if _whole_positions(t) and not _facts_as_doubles(t) and not _not_utf8(t) and not unnamed:
                return t, [], t.num_rows
            return _read_lines(path, fmt)
        refused = []
        types = {"key": pa.string(), "value": pa.string(), "topic": pa.string(), "timestamp": pa.string()}
        t = pcsv.read_csv(path, parse_options=pcsv.ParseOptions(
            invalid_row_handler=lambda row: refused.append(row) or "skip"), convert_options=pcsv.ConvertOptions(
            column_types=types, strings_can_be_null=True, quoted_strings_can_be_null=False, null_values=[""]))
        _refuse_repeated_columns(t.column_names, path)
        if not refused and _whole_positions(t) and not _facts_as_doubles(t):
            return t, [], t.num_rows
    except OSError as e:
        raise InvalidFieldError(f"cannot read {fmt} dump {path}: {e}", field="file") from None
    except pa.ArrowInvalid as e:
        if fmt == "parquet":
            raise InvalidFieldError(f"cannot read {fmt} dump {path}: {e}", field="file") from None
    except UnicodeDecodeError as e:  # a column's name that is not UTF-8 (Arrow checks the values, not the names)
        if fmt == "parquet":
            raise InvalidFieldError(f"cannot read {fmt} dump {path}: a column name is not UTF-8: {e}",
                                    field="file") from None
    try:
        return _read_lines(path, fmt)
    except OSError as e:  # a compressed file that is damaged past where Arrow's reader gave up on its text
        raise InvalidFieldError(f"cannot read {fmt} dump {path}: {e}", field="file") from None


_INT_COLUMNS = ("partition", "offset")


def _not_utf8(table: pa.Table) -> list[str]:
    """The text columns holding a value that is not UTF-8: Arrow's JSON and Parquet readers take a string's bytes
    as they are (its CSV reader checks them), and the first such value read into Python raised UnicodeDecodeError,
    a stack trace, wherever the rows were read."""
    bad = []
    for name in table.column_names:
        typ = table.schema.field(name).type
        if pa.types.is_string(typ) or pa.types.is_large_string(typ):
            try:
                table.column(name).validate(full=True)
            except pa.ArrowInvalid:
                bad.append(name)
    return bad


def _text_as_utf8(table: pa.Table) -> pa.Table:
    """`table` with each byte of its text columns that is not UTF-8 as U+FFFD, as the line reader reads a text
    file: such a key or value is no hex or base64 (an invalid row), such a topic another topic's."""
    for name in _not_utf8(table):
        typ = table.schema.field(name).type
        raw = table.column(name).cast(pa.large_binary() if pa.types.is_large_string(typ) else pa.binary())
        text = pa.array([None if b is None else b.decode("utf-8", "replace") for b in raw.to_pylist()], typ)
        table = table.set_column(table.column_names.index(name), name, text)
    return table


def _refuse_repeated_columns(names: list[str], path: str) -> None:
    """A CSV header naming a column twice: which of the two is the offset is anyone's guess (Arrow keeps both, a
    line's dict the last)."""
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise InvalidFieldError(f"dump {path} names column(s) {', '.join(twice)} more than once", field=twice[0])


def _whole_positions(table: pa.Table) -> bool:
    """Whether the partitions and offsets Arrow's reader found are whole numbers: it types a column by its values,
    and one past a long (or with a fraction) makes it a column of doubles; the rows are then read one at a time."""
    return all(pa.types.is_integer(t) or pa.types.is_null(t)
               for t in (table.schema.field(c).type for c in _INT_COLUMNS if c in table.column_names))


# a text dump's columns of whole numbers a row may hold past its type (`row_faults` finds that row)
_FACT_COLUMNS = ("producer_id", "producer_epoch", "batch_base_offset", "timestampType", "timestamp")


def _facts_as_doubles(table: pa.Table) -> bool:
    """Whether Arrow's reader typed a text dump's batch facts or timestamps as doubles: one value past a long (or
    with a fraction) does that to its whole column, and every other row's value, read as a double, is no whole
    number to `row_faults` (a long past 2**53 comes back as another): the rows are then read one at a time."""
    return any(pa.types.is_floating(table.schema.field(c).type) for c in _FACT_COLUMNS if c in table.column_names)


#: the batch facts and timestamps `row_faults` reads row by row, whatever a part file typed them as
_ROW_CHECKED = (*_FACT_COLUMNS, "is_transactional", "is_control")


def _facts_alike(tables: list[pa.Table]) -> list[pa.Table]:
    """The part files of one dump with each batch fact typed alike: where the parts type one differently (a part
    holding one value past a long or with a fraction keeps it as text, `_read_lines`, or as doubles, beside a part of
    longs), every part's as the text `row_faults` reads, each value exact. Joined as they were, the parts were one
    `incompatible schemas` refusal of the whole dump, or longs rounded to doubles, for the one row that is
    invalid."""
    for name in _ROW_CHECKED:
        types = {t.schema.field(name).type for t in tables if name in t.column_names}
        if len(types) < 2 or all(pa.types.is_integer(x) or pa.types.is_null(x) for x in types):
            continue
        for i, t in enumerate(tables):
            if name in t.column_names and not pa.types.is_string(t.schema.field(name).type):
                values = [None if v is None else _as_text(v) for v in t.column(name).to_pylist()]
                tables[i] = t.set_column(t.column_names.index(name), name, pa.array(values, pa.string()))
    return tables


def _read_lines(path: str, fmt: str) -> tuple[pa.Table, list[tuple[int, str]], int]:
    """A JSON-lines or CSV file, one line at a time: good rows as a table, the others as (row, reason)."""
    rows: list[dict] = []
    bad: list[tuple[int, str]] = []
    # Arrow's stream decompresses a file compressed whole, told by its name, as its readers do
    with io.TextIOWrapper(pa.input_stream(path), newline="", encoding="utf-8", errors="replace") as f:
        if fmt == "json":
            text = f.read()
            for i, obj in _json_rows(text):
                if isinstance(obj, ValueError):
                    bad.append((i, f"line is not JSON: {obj}"))
                elif not isinstance(obj, dict):
                    bad.append((i, "line is not a JSON object"))
                else:
                    rows.append((i, obj))
            n = len(rows) + len(bad)
        else:
            # a field as long as the file: Python's reader refuses one past 128 KiB (a stack trace), where a big
            # GroupMetadata value in hex is megabytes; Arrow's reader, tried first, has no such limit
            csv.field_size_limit(sys.maxsize)
            reader = csv.reader(f)
            header = next(reader, None) or []
            _refuse_repeated_columns(header, path)
            n = 0
            for i, fields in enumerate(reader):
                n += 1
                if len(fields) != len(header):
                    bad.append((i, f"CSV row has {len(fields)} field(s), the header {len(header)}"))
                    continue
                rows.append((i, {h: (_csv_value(v) if h not in ("key", "value", "topic", "timestamp") else v)
                                 if v != "" else None for h, v in zip(header, fields)}))
    good = []
    for i, obj in rows:
        why = _malformed(obj)
        if why:
            bad.append((i, why))
            continue
        obj = {k: (_as_text(v) if k in ("key", "value", "topic", "timestamp") and v is not None else v)
               for k, v in obj.items()}
        obj[ROW_COLUMN] = i
        good.append(obj)
    bad.sort()
    names = list(dict.fromkeys(k for o in good for k in o)) or ["key", "value", "partition", "offset", ROW_COLUMN]
    cols = {}
    for name in names:
        vals = [o.get(name) for o in good]
        typ = {"key": pa.string(), "value": pa.string(), "topic": pa.string(), "timestamp": pa.string(),
               "partition": pa.int32(), "offset": pa.int64(), ROW_COLUMN: pa.int64()}.get(name)
        try:
            col = pa.array(vals, typ)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
            col = None
        if col is None or (name in _FACT_COLUMNS and pa.types.is_floating(col.type)):  # `_facts_as_doubles`
            col = pa.array([None if v is None else _as_text(v) for v in vals], pa.string())
        cols[name] = col
    return pa.table(cols), bad, n


def _json_rows(text: str) -> Iterator[tuple[int, object]]:
    """(row number, its JSON value, or the ValueError it raised) of each line of a JSON-lines text; of each element
    of a text that is one JSON array (an export as a JSON document, not lines), which was one row per line of it,
    none of them a record."""
    if text.lstrip().startswith("["):
        try:
            whole = json.loads(text)
        except (ValueError, RecursionError):
            whole = None
        if isinstance(whole, list):
            yield from enumerate(whole)
            return
    for i, line in enumerate(ln for ln in io.StringIO(text, newline="") if ln.strip()):
        try:
            yield i, json.loads(line)
        except ValueError as e:
            yield i, e
        except RecursionError:  # Python's parser recurses per level: a line of 1000 `[` was a stack trace
            yield i, ValueError(f"nested deeper than {sys.getrecursionlimit()} levels")


def _csv_value(v: str):
    if v in ("true", "false"):
        return v == "true"
    try:
        return int(v)
    except ValueError:
        return v


def _malformed(obj: dict) -> str | None:
    for c in _INT_COLUMNS:
        v = obj.get(c)
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, int):
            if isinstance(v, str) and re.fullmatch(r"-?\d+", v.strip()):
                obj[c] = int(v)
            else:
                return f"{c} {v!r} is not a whole number"
        if not -(1 << 63) <= obj[c] < (1 << 63) or (c == "partition" and not -(1 << 31) <= obj[c] < (1 << 31)):
            return f"{c} {obj[c]} is out of range"
    for c in ("key", "value"):
        if obj.get(c) is not None and not isinstance(obj[c], str):
            return f"{c} is not a string"
    return None


def _detect_encoding(table: pa.Table) -> str:
    """hex when most sampled non-null keys are even-length hex, else base64 (keys start 0x00: "AA…" vs "00…").
    Most, not all: one damaged key is one invalid row, where it read every other row of a hex dump as base64
    (hex digits are base64 letters too), each of them garbage."""
    keys = [k for k in table.column("key").slice(0, _DETECT_SAMPLE).to_pylist() if k]
    if keys and 2 * sum(1 for k in keys if _HEX_RE.match(k)) > len(keys):
        return "hex"
    return "base64"


def value_decoder(encoding: str | None):
    """The function that turns a dump's key or value text in `encoding` (`hex`, `base64`; None: bytes already)
    into bytes."""
    if encoding is None:
        return lambda v: v
    if encoding == "hex":
        return bytes.fromhex
    return lambda v: base64.b64decode(v, validate=True)


def _ts_millis(col: pa.ChunkedArray) -> list[int | None]:
    t = col.type
    if pa.types.is_timestamp(t):
        return pc.cast(pc.cast(col, pa.timestamp("ms", tz=t.tz)), pa.int64()).to_pylist()
    if pa.types.is_integer(t):
        return col.to_pylist()
    out: list[int | None] = []
    for v in col.to_pylist():
        out.append(_parse_ts(v) if v is not None else None)
    return out


def _parse_ts(v) -> int | None:
    if isinstance(v, float):
        return _whole(v)  # a fraction of a millisecond, or a double past 2**53, is no long Kafka wrote
    if isinstance(v, int):
        return v
    s = str(v).strip()
    if re.fullmatch(r"-?\d+", s):
        return int(s)
    try:
        d = datetime.fromisoformat(s.replace("Z", "+00:00"))
    except ValueError:
        return None
    if d.tzinfo is None:
        d = d.replace(tzinfo=timezone.utc)  # Spark writes session-time-zone strings; UTC is assumed
    return int(d.timestamp() * 1000)


# Kafka's `TimestampType` (0.10-4.x) as a dump writes it: its id (the Spark Kafka source's int), its name or its Java
# constant, in any case
_TIMESTAMP_TYPES = {spelling: name for name, spellings in (
    (NO_TIMESTAMP_TYPE, ("-1", "notimestamptype", "no_timestamp_type")),
    (CREATE_TIME, ("0", "createtime", "create_time")),
    (LOG_APPEND_TIME, ("1", "logappendtime", "log_append_time"))) for spelling in spellings}


def _ts_type(v) -> str | None:
    """A row's timestampType as its batch's (a cell left empty: CreateTime); None when it names no `TimestampType`,
    where a guess gave the batch a clock it never had."""
    if v is None:
        return CREATE_TIME
    if isinstance(v, float):  # a whole double: pandas writes an integer column holding a null as doubles
        v = _whole(v)
    if isinstance(v, bool) or not isinstance(v, (int, str)):
        return None
    return _TIMESTAMP_TYPES.get(str(v).strip().lower())


def _flag(v) -> bool | None:
    """A batch flag as a dump holds it (a boolean, 0 or 1, or their text in any case) as a boolean; None when it is
    none of these. Python's truth would take the text `false` for true."""
    if v is None or isinstance(v, bool):
        return bool(v)
    if isinstance(v, float):
        v = _whole(v)
    if isinstance(v, int):
        return {0: False, 1: True}.get(v)
    if isinstance(v, str):
        s = v.strip().lower()
        return True if s in ("true", "1") else False if s in ("false", "0") else None
    return None


_LONG = (-(1 << 63), (1 << 63) - 1)
# a batch's whole-number facts and the values Kafka's batch holds: a long, a short, a log position
_WHOLE_FACTS = (("producer_id", _LONG), ("producer_epoch", (-(1 << 15), (1 << 15) - 1)),
                ("batch_base_offset", (0, OFFSET_MAX)))


#: A double holds every whole number up to this exactly; past it, the long a writer stored as one may have been
#: rounded (pandas writes an integer column holding a null as doubles)
_EXACT_IN_A_DOUBLE = 1 << 53


def _whole(v) -> int | None:
    if isinstance(v, int) and not isinstance(v, bool):
        return v
    if isinstance(v, float):
        return int(v) if v.is_integer() and abs(v) <= _EXACT_IN_A_DOUBLE else None
    if isinstance(v, str) and re.fullmatch(r"\s*-?\d+\s*", v):
        return int(v)
    return None


def _within(col: pa.ChunkedArray, lo: int, hi: int) -> bool:
    """Whether a column is whole numbers from lo to hi, by its type and its extremes (no row by row look)."""
    if pa.types.is_null(col.type):
        return True
    if not pa.types.is_integer(col.type):
        return False
    ends = pc.min_max(col)
    return ends["min"].as_py() is None or (lo <= ends["min"].as_py() and ends["max"].as_py() <= hi)


def row_faults(table: pa.Table) -> list[str | None]:
    """Per row, why its timestamp or one of its batch facts is no value Kafka's batch holds (None when all are):
    such a row is an `invalid_row`, not a guess, nor a value past its column (`frames.decode.count_tabular` counts
    it as one)."""
    faults: list[str | None] = [None] * table.num_rows
    for name in ("is_transactional", "is_control"):
        if name not in table.column_names or pa.types.is_boolean(table.schema.field(name).type):
            continue
        for i, v in enumerate(table.column(name).to_pylist()):
            if faults[i] is None and _flag(v) is None:
                faults[i] = f"{name} {v!r} is not a boolean"
    for name, (lo, hi) in _WHOLE_FACTS:
        if name not in table.column_names or _within(table.column(name), lo, hi):
            continue
        for i, v in enumerate(table.column(name).to_pylist()):
            n = lo if v is None else _whole(v)
            if faults[i] is None and (n is None or not lo <= n <= hi):
                faults[i] = _inexact(name, v) or f"{name} {v!r} is not a whole number from {lo} to {hi}"
    if "timestampType" in table.column_names and not _within(table.column("timestampType"), -1, 1):
        for i, v in enumerate(table.column("timestampType").to_pylist()):
            if faults[i] is None and _ts_type(v) is None:
                faults[i] = f"timestampType {v!r} is not CreateTime (0), LogAppendTime (1) or NoTimestampType (-1)"
    col = table.column("timestamp") if "timestamp" in table.column_names else None
    if col is not None and not pa.types.is_timestamp(col.type) and not _within(col, *_LONG):
        for i, (v, ms) in enumerate(zip(col.to_pylist(), _ts_millis(col))):
            if faults[i] is None and v is not None and (ms is None or not _LONG[0] <= ms <= _LONG[1]):
                faults[i] = _inexact("timestamp", v) or f"timestamp {v!r} is no time a long of milliseconds holds"
    return faults


def _as_text(v) -> str:
    """A text dump's cell as the text `row_faults` reads: a whole double that holds its long exactly (a writer that
    writes an integer column holding a null as doubles, pandas' `to_json`) as that long."""
    w = _whole(v) if isinstance(v, float) else None
    return str(v if w is None else w)


def _inexact(name: str, v) -> str | None:
    """Why a whole double is no value of `name` taken as it is: past 2**53 the long it was written from may have been
    rounded to it (None: another fault, or none). A text dump's cell holds the double as text (`_as_text`)."""
    if isinstance(v, str) and not re.fullmatch(r"\s*-?\d+\s*", v):
        try:
            v = float(v)
        except ValueError:
            return None
    if isinstance(v, float) and v.is_integer() and abs(v) > _EXACT_IN_A_DOUBLE:
        return f"{name} {v!r} is a double past 2**53, where the long it stood for may have been rounded"
    return None


def _col(table: pa.Table, name: str, n: int, default):
    if name in table.column_names:
        return table.column(name).to_pylist()
    return [default] * n


def _iter_records(dump: TabularDump) -> Iterator[LogRecord | ReadProblem]:
    src = dump.path
    for row, why in dump.malformed:
        yield ReadProblem(source=src, offsets_partition=-1, position=row, kind="malformed_row", records=1,
                          reason=f"row {row}: {why}")
    table, other_topics = _offsets_topic_rows(dump._table, src)
    yield from other_topics
    table, unpositioned = _positioned_rows(table, src)
    yield from unpositioned
    if table.num_rows == 0:
        return
    order = pc.sort_indices(table, sort_keys=[("partition", "ascending"), ("offset", "ascending")])
    yield from _records_in_log_order(table.take(order), src, dump.encoding)


def _offsets_topic_rows(table: pa.Table, src: str) -> tuple[pa.Table, list[ReadProblem]]:
    """The rows of `__consumer_offsets` (a row without a topic is taken for one); other topics' rows are reported
    once per topic and not read."""
    if "topic" not in table.column_names:
        return table, []
    is_offsets = pc.fill_null(pc.equal(table.column("topic"), OFFSETS_TOPIC), True)
    others = table.filter(pc.invert(is_offsets))
    if not others.num_rows:
        return table, []
    counts = {}
    for t, off, part, row in zip(others.column("topic").to_pylist(), others.column("offset").to_pylist(),
                                 others.column("partition").to_pylist(), others.column(ROW_COLUMN).to_pylist()):
        c = counts.setdefault(t, [0, off, part, row])
        c[0] += 1
    problems = [ReadProblem(source=src, offsets_partition=part if part is not None else -1, position=row,
                            offset=off, kind="not_offsets_data", records=1,
                            reason=f"{cnt} row(s) of topic {t!r}, not {OFFSETS_TOPIC}; not read")
                for t, (cnt, off, part, row) in counts.items()]
    return table.filter(is_offsets), problems


def _positioned_rows(table: pa.Table, src: str) -> tuple[pa.Table, list[ReadProblem]]:
    """The rows with a log position: one without a partition or an offset, or with a negative one, is never state
    and is reported."""
    valid = pc.and_(pc.is_valid(table.column("partition")), pc.is_valid(table.column("offset")))
    bad = table.filter(pc.invert(valid))
    problems = [ReadProblem(source=src, offsets_partition=part if part is not None else -1, position=row,
                            offset=off, kind="invalid_row", records=1, reason="row without a partition or an offset")
                for off, part, row in zip(bad.column("offset").to_pylist(), bad.column("partition").to_pylist(),
                                          bad.column(ROW_COLUMN).to_pylist())]
    table = table.filter(valid)
    negative = pc.or_(_compared(pc.less, table.column("offset"), 0),
                      _compared(pc.less, table.column("partition"), 0))
    neg = table.filter(negative)
    problems += [ReadProblem(source=src, offsets_partition=max(part, -1), position=row, offset=off,
                             kind="negative_offset", records=1,
                             reason=f"row {row}: offset {off} of partition {part}: a log position is never negative")
                 for off, part, row in zip(neg.column("offset").to_pylist(), neg.column("partition").to_pylist(),
                                           neg.column(ROW_COLUMN).to_pylist())]
    table = table.filter(pc.invert(negative))
    beyond = pc.or_(_compared(pc.greater, table.column("offset"), OFFSET_MAX),
                    _compared(pc.greater, table.column("partition"), PARTITION_MAX))
    past = table.filter(beyond)
    problems += [ReadProblem(source=src, offsets_partition=-1, position=row, kind="invalid_row", records=1,
                             reason=f"row {row}: offset {off} of partition {part}: past Kafka's partitions "
                                    f"({PARTITION_MAX}) or offsets ({OFFSET_MAX})")
                 for off, part, row in zip(past.column("offset").to_pylist(), past.column("partition").to_pylist(),
                                           past.column(ROW_COLUMN).to_pylist())]
    return table.filter(pc.invert(beyond)), problems


def _compared(op, column: pa.ChunkedArray, bound: int) -> pa.ChunkedArray:
    """`op(column, bound)` for any integer column: a bound given as a Python int is taken as a long, and Arrow casts
    a column of unsigned longs (a Parquet writer's `uint64` offset) to longs to compare it, failing on a value past
    2**63 - 1, which is no log position and was a stack trace instead of that row's `invalid_row`."""
    return op(column, pa.scalar(bound, pa.uint64()) if pa.types.is_uint64(column.type) else bound)


def _records_in_log_order(table: pa.Table, src: str, encoding: str | None) -> Iterator[LogRecord | ReadProblem]:
    """The rows (sorted by partition and offset) as records, grouped into their batches; a row repeating an offset
    is not read: a `duplicate_conflict` when its content differs from the first, else a `duplicate_row`."""
    n = table.num_rows
    parts = table.column("partition").to_pylist()
    offs = table.column("offset").to_pylist()
    keys = table.column("key").to_pylist()
    vals = table.column("value").to_pylist()
    tss = _ts_millis(table.column("timestamp")) if "timestamp" in table.column_names else [-1] * n
    tts = _col(table, "timestampType", n, 0)
    peps = _col(table, "producer_epoch", n, -1)
    pids = _col(table, "producer_id", n, -1)
    txns = _col(table, "is_transactional", n, False)
    ctls = _col(table, "is_control", n, False)
    bases = _col(table, "batch_base_offset", n, None)
    decode = value_decoder(encoding)
    row_numbers = table.column(ROW_COLUMN).to_pylist()
    faults = row_faults(table)

    rows: list[tuple] = []  # decoded rows of the batch being built
    prev: tuple | None = None  # (partition, offset, key, value, ts) of the last kept row
    repeats: list[tuple[int, int]] = []  # (row, partition) of each row repeating the kept row of its offset
    for i in range(n):
        part, off = int(parts[i]), int(offs[i])
        try:
            key = decode(keys[i]) if keys[i] is not None else None
            value = decode(vals[i]) if vals[i] is not None else None
        except (ValueError, binascii.Error, TypeError) as e:
            yield ReadProblem(source=src, offsets_partition=part, position=row_numbers[i], offset=off,
                              kind="invalid_row", records=1, reason=f"key/value not valid {encoding}: {e}")
            continue
        if faults[i] is not None:
            yield ReadProblem(source=src, offsets_partition=part, position=row_numbers[i], offset=off, key=key,
                              value=value, kind="invalid_row", records=1, reason=f"row {row_numbers[i]}: {faults[i]}")
            continue
        ts = tss[i] if tss[i] is not None else -1
        if prev is not None and prev[0] == part and prev[1] == off:
            if (key, value, ts) != prev[2:]:
                yield ReadProblem(source=src, offsets_partition=part, position=row_numbers[i], offset=off, key=key,
                                  value=value, kind="duplicate_conflict", records=1,
                                  reason=f"offset {off} of partition {part} appears twice with different "
                                         f"content; the first row is kept")
            else:
                repeats.append((row_numbers[i], part))
            continue
        prev = (part, off, key, value, ts)
        base = bases[i]
        batch_key = (part, int(base) if base is not None else off, pids[i], _flag(txns[i]), _flag(ctls[i]))
        if rows and rows[0][0] != batch_key:
            yield from _emit(rows, src)
            rows = []
        rows.append((batch_key, off, ts, key, value, _ts_type(tts[i]), peps[i], row_numbers[i]))
    if rows:
        yield from _emit(rows, src)
    yield from _repeated(repeats, src)


def _repeated(repeats: list[tuple[int, int]], src: str) -> Iterator[ReadProblem]:
    """One `duplicate_row` problem per run of consecutive rows of one partition that repeat rows before them (a part
    file written twice, a dump appended to itself), standing for their records: the record is loaded once, from the
    first row, and each copy is accounted for where it lies, as a later dump's copies are (`dump_copies`)."""
    runs: list[list[int]] = []  # [from row, to row, partition]
    for row, part in sorted(repeats):
        if runs and runs[-1][1] == row and runs[-1][2] == part:
            runs[-1][1] = row + 1
        else:
            runs.append([row, row + 1, part])
    for a, b, part in runs:
        yield ReadProblem(source=src, offsets_partition=part, position=a, kind="duplicate_row", records=b - a,
                          reason=f"rows {a}-{b - 1}: the records of partition {part} at their offsets are in rows "
                                 f"before them, identical: loaded from those; not read ({b - a} record(s))")


def _emit(rows: list[tuple], src: str) -> Iterator[LogRecord]:
    (part, base, pid, txn, ctl), first_off = rows[0][0], rows[0][1]
    pid = int(pid) if pid is not None else -1
    pep = rows[0][6]
    pep = int(pep) if pep is not None else -1
    ts_type = rows[0][5]
    timestamps = [r[2] for r in rows]
    attributes = (0x08 if ts_type == LOG_APPEND_TIME else 0) | (0x10 if txn else 0) | (0x20 if ctl else 0)
    header = RecordBatchHeader(
        source=src, offsets_partition=part, position=rows[0][7], base_offset=min(base, first_off),
        last_offset=rows[-1][1], size=-1, magic=2, crc=-1, crc_valid=True, attributes=attributes, codec="none",
        timestamp_type=ts_type, is_transactional=txn, is_control=ctl, delete_horizon_ms=None,
        base_timestamp=timestamps[0], max_timestamp=max(timestamps), producer_id=pid, producer_epoch=pep,
        base_sequence=-1, partition_leader_epoch=-1, records_count=len(rows))
    for _, off, ts, key, value, _, _, row in rows:
        # a record's position is its row in the dump, as for the dump's other problems: a record that fails to
        # decode is quarantined with the row to look at
        yield LogRecord(batch=replace(header, position=row), offset=off, timestamp=ts, first_offset_in_batch=first_off,
                        sequence=-1, key=key, value=value)
