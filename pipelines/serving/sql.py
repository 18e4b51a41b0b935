"""`offsetlake sql`: DuckDB over a warehouse, one view per contract table, snapshot tables restricted to one
snapshot (`offset_commits` and `runs` whole).

The views scan the Delta tables through delta-rs' pyarrow datasets from the snapshot reader: a snapshot table is
its snapshot's partition at the Delta version the run pinned (`pipelines/io/snapshots.py`), DuckDB pushing the
query's filters down, so nothing is loaded up front. File access from SQL is switched off and the
configuration locked: a query can read the warehouse, nothing else, and cannot write.

`runs.validation` and `runs.summary`, stored as JSON text, are DuckDB JSON in the views, so `->`/`->>` work on them
and every column of type JSON is printed as JSON (`--format json`: nested in the row). Intervals and durations are
printed as ISO-8601 durations (`PT2H15M55S`), timestamps as ISO-8601 instants, booleans as true/false.
A result is fetched from DuckDB and printed a batch at a time (`stream`, `printed`): memory holds a batch, whatever
the result's size.
"""
from __future__ import annotations

import csv
import datetime as dt
import decimal
import io
import json
import math
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import duckdb
import pyarrow as pa

from pipelines.io.snapshots import DeltaWarehouseReader, Snapshot, jsonable
from pipelines.serving.cells import cell
from pipelines.times import iso_duration
from schemas.tables import SNAPSHOT_TABLES, TABLES

FORMATS = ("table", "csv", "json")
# Columns written as JSON text (schemas/tables.py), typed JSON in the views.
JSON_COLUMNS = {"runs": ("validation", "summary")}


# DuckDB's names of the contract's scalar column types (schemas/tables.py), for columns an older snapshot lacks
_DUCK_TYPES = {str(pa.string()): "VARCHAR", str(pa.int64()): "BIGINT", str(pa.int32()): "INTEGER",
               str(pa.float64()): "DOUBLE", str(pa.bool_()): "BOOLEAN", str(pa.timestamp("us", tz="UTC")): "TIMESTAMPTZ"}


def _quote(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def connect(reader: DeltaWarehouseReader, snapshot: Snapshot) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect(":memory:")
    for name, schema in TABLES.items():
        if name in SNAPSHOT_TABLES:  # the snapshot's partition at the version its run pinned
            source = reader.snapshot_dataset(name, snapshot)
        else:  # the history as the snapshot's run left it (`runs`: the latest, every run's)
            source = reader.history_dataset(name, snapshot.version_of(name))
        if source is None:  # a table the pipeline has not written yet: an empty view with the contract's columns
            source = schema.empty_table()
        con.register(f"__delta_{name}", source)
        # the dataset holds the snapshot's files only; the filter keeps the view right for the empty stand-in too
        where = f" WHERE snapshot_id = {_quote(snapshot.snapshot_id)}" if name in SNAPSHOT_TABLES else ""
        # TRY_CAST: text that is not JSON (a hand-edited row) reads as NULL rather than failing every query
        as_json = [f'TRY_CAST("{c}" AS JSON) AS "{c}"' for c in JSON_COLUMNS.get(name, ()) if c in source.schema.names]
        star = f"* REPLACE ({', '.join(as_json)})" if as_json else "*"
        # a snapshot written before a column existed reads it as null, so one query runs on every snapshot
        added = "".join(f', CAST(NULL AS {_DUCK_TYPES[str(f.type)]}) AS "{f.name}"' for f in schema
                        if f.name not in source.schema.names and str(f.type) in _DUCK_TYPES)
        con.execute(f'CREATE VIEW "{name}" AS SELECT {star}{added} FROM "__delta_{name}"{where}')
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")
    return con


#: The rows DuckDB hands over at a time (its vector size): a result is fetched, converted and printed a batch at a
#: time, so memory holds a batch and what `printed` holds back, however many rows the query answers
BATCH_ROWS = 2048
#: A table of up to this many rows and characters of text is printed once it is whole, each column as wide as its
#: widest value; past either bound its rows are printed as they are fetched (`printed`)
HELD_ROWS = 10_000
HELD_CHARS = 16 * 2**20


@dataclass(frozen=True)
class Result:
    """A query's column names and its rows, fetched from DuckDB as `batches` is iterated: lists of rows of Arrow's
    Python values, a JSON column's values parsed and wrapped in JsonValue (so `printed` tells them from strings)."""

    columns: list[str]
    batches: Iterator[list[tuple]]


def stream(con: duckdb.DuckDBPyConnection, query: str, batch_rows: int = BATCH_ROWS) -> Result:
    """Run the query (raises duckdb.Error with DuckDB's message on a bad one, KeyboardInterrupt on Ctrl-C while
    DuckDB runs it). Its rows are fetched as the result's batches are read: `select * from range(1e11)`, or a join
    mistyped into a cross product, starts printing at once instead of filling memory before its first line."""
    # DuckDB runs every statement and answers the last: the others' rows were dropped without a word
    count = len(con.extract_statements(query))
    if count > 1:
        raise duckdb.InvalidInputException(f"the query holds {count} SQL statements: run one at a time")
    try:
        cur = con.execute(query)
    except RuntimeError as e:
        # DuckDB's Python client checks for a signal while it executes and answers one with this RuntimeError
        # (DuckDBPyConnection::CompletePendingQuery): Ctrl-C, as the command reports it, not a stack trace
        if str(e) == "Query interrupted":
            raise KeyboardInterrupt from None
        raise
    if cur is None:  # DuckDB's answer to text without a statement ('', ';', a comment alone)
        raise duckdb.InvalidInputException(f"no SQL statement in {query!r}")
    if cur.description is None:
        return Result([], iter(()))
    cols = [d[0] for d in cur.description]
    # Through Arrow: DuckDB's own Python conversion of timestamptz needs pytz.
    return Result(cols, _batches(cur.to_arrow_reader(batch_rows), cols, cur.description))


def run(con: duckdb.DuckDBPyConnection, query: str) -> tuple[list[str], list[tuple]]:
    """`stream`'s column names and all its rows, fetched at once."""
    result = stream(con, query)
    return result.columns, [r for batch in result.batches for r in batch]


def _batches(reader: pa.RecordBatchReader, cols: list[str], description: list) -> Iterator[list[tuple]]:
    is_json = [str(d[1]) == "JSON" for d in description]
    for batch in reader:
        if not batch.num_columns or not batch.num_rows:
            continue
        t = pa.Table.from_batches([batch])
        columns = [[_parsed(v) for v in c.to_pylist()] if j else _values(c, name, d[1]) for c, j, name, d in
                   zip(t.columns, is_json, cols, description)]
        yield list(zip(*columns))


# DuckDB's infinite instants as its Arrow export holds them: the largest value of the type and its negation
_INFINITE = {2**63 - 1: "infinity", -(2**63 - 1): "-infinity"}
_INFINITE_DAYS = {2**31 - 1: "infinity", -(2**31 - 1): "-infinity"}


def _values(col: pa.ChunkedArray, name: str, duck_type: Any) -> list:
    """A column's Python values. A timestamp or date past Python's years 1-9999 (`'infinity'::TIMESTAMP`,
    `to_timestamp(1e12)`, a date BC) was a traceback: it prints as DuckDB's `infinity` / `-infinity` or as an
    ISO-8601 instant with an expanded year (`+33658-09-27T01:46:40Z`); `'infinity'::TIMESTAMP_NS`, which Python
    holds, printed as 2262-04-11T23:47:16.854775807Z."""
    if pa.types.is_timestamp(col.type) or pa.types.is_date32(col.type):
        return _instants(col)
    try:
        if _WIDE_INTEGERS & set(_type_ids(duck_type)):
            values = [_wide_integers(v, duck_type) for v in col.to_pylist()]
            return [_as_json_maps(v, col.type) for v in values] if _holds_map(col.type) else values
        if _holds_map(col.type):  # Arrow gives a map as a list of pairs, an empty one as [], printed as a list
            return [_as_json_maps(v, col.type) for v in col.to_pylist()]
        return col.to_pylist()
    except (OverflowError, ValueError) as e:  # such an instant nested in a list, struct or map
        raise duckdb.InvalidInputException(
            f"column {name!r} holds a value Python cannot hold ({e}): cast it to VARCHAR") from None


# DuckDB's integer types that Arrow does not carry as integers: a VARINT (BIGNUM) is exported as its own bytes, an
# UHUGEINT as a decimal128 whose top bit is read as a sign (2**128 - 1 read back as -1)
_WIDE_INTEGERS = frozenset({"bignum", "varint", "uhugeint"})


def _type_ids(t: Any) -> list[str]:
    """The ids of a DuckDB type and of every type nested in it."""
    ids = [t.id]
    if t.id in ("list", "array", "struct", "map"):
        for _, child in t.children:
            ids += _type_ids(child)
    return ids


def _wide_integers(v: Any, t: Any) -> Any:
    """A value with each VARINT and UHUGEINT in it as its number, by its DuckDB type: a VARINT printed as the hex
    of DuckDB's encoding (`12345::VARINT` as 8000023039), an UHUGEINT from 2**127 on as a negative number."""
    if v is None:
        return None
    if t.id in ("bignum", "varint"):
        return bignum(v)
    if t.id == "uhugeint":
        return v if v >= 0 else decimal.Decimal(int(v) + 2**128)
    if t.id in ("list", "array"):
        child = t.children[0][1]
        return [_wide_integers(x, child) for x in v]
    if t.id == "struct":
        return {name: _wide_integers(v.get(name), child) for name, child in t.children}
    if t.id == "map":  # Arrow's list of (key, value) pairs
        (_, key_t), (_, value_t) = t.children
        return [(_wide_integers(k, key_t), _wide_integers(x, value_t)) for k, x in v]
    return v


def bignum(b: bytes) -> int:
    """DuckDB's VARINT (BIGNUM) bytes as the integer: a 3-byte header (top bit set for a number >= 0, then the
    count of bytes that follow), the magnitude big-endian; a negative number is the same with every bit flipped."""
    if not b[0] & 0x80:
        return -int.from_bytes(bytes(x ^ 0xFF for x in b[3:]), "big")
    return int.from_bytes(b[3:], "big")


def _is_list(t: pa.DataType) -> bool:
    return pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)


def _holds_map(t: pa.DataType) -> bool:
    if pa.types.is_map(t):
        return True
    if pa.types.is_struct(t):
        return any(_holds_map(f.type) for f in t)
    return _is_list(t) and _holds_map(t.value_type)


def _as_json_maps(v: Any, t: pa.DataType) -> Any:
    """A value with each map in it as a dict (keys as text), by its type: an empty map is `{}`, not `[]`."""
    if v is None:
        return None
    if pa.types.is_map(t):
        return {str(k): _as_json_maps(x, t.item_type) for k, x in v}
    if pa.types.is_struct(t):
        return {f.name: _as_json_maps(v.get(f.name), f.type) for f in t}
    if _is_list(t):
        return [_as_json_maps(x, t.value_type) for x in v]
    return v


def _instants(col: pa.ChunkedArray) -> list:
    is_date = pa.types.is_date32(col.type)
    raw = col.cast(pa.int32() if is_date else pa.int64()).to_pylist()
    infinite = _INFINITE_DAYS if is_date else _INFINITE
    if not any(v in infinite for v in raw):
        try:
            return col.to_pylist()
        except (OverflowError, ValueError):
            pass
    unit = "D" if is_date else col.type.unit
    out = []
    for v, scalar in zip(raw, (s for chunk in col.chunks for s in chunk)):
        if v is None or v in infinite:
            out.append(None if v is None else infinite[v])
            continue
        try:
            out.append(scalar.as_py())
        except (OverflowError, ValueError):
            out.append(_far_instant(v, unit))
    return out


_PER_SECOND = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}


def _far_instant(v: int, unit: str) -> str:
    """An instant past Python's years 1-9999 in ISO-8601's expanded form (a signed year, year 0 = 1 BC): a date
    when the unit is days, else UTC with a Z and the fraction of a second when there is one."""
    if unit == "D":
        days, secs, frac = v, 0, 0
    else:
        secs, frac = divmod(v, _PER_SECOND[unit])
        days, secs = divmod(secs, 86400)
    y, m, d = _civil(days)
    date = f"{y:04d}-{m:02d}-{d:02d}" if 0 <= y <= 9999 else f"{y:+05d}-{m:02d}-{d:02d}"
    if unit == "D":
        return date
    hh, rest = divmod(secs, 3600)
    fraction = ""
    if frac:  # as datetime.isoformat prints one: six digits (nine for nanoseconds)
        fraction = f".{frac:09d}" if unit == "ns" else f".{frac * 1_000_000 // _PER_SECOND[unit]:06d}"
    return f"{date}T{hh:02d}:{rest // 60:02d}:{rest % 60:02d}{fraction}Z"


def _civil(days: int) -> tuple[int, int, int]:
    """Days since 1970-01-01 -> proleptic Gregorian (year, month, day), any year (H. Hinnant's civil_from_days)."""
    z = days + 719468
    era = z // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    m = mp + 3 if mp < 10 else mp - 9
    return yoe + era * 400 + (m <= 2), m, doy - (153 * mp + 2) // 5 + 1


def _parsed(v: str | None) -> Any:
    return None if v is None else JsonValue(json.loads(v))


class JsonValue:
    """A JSON column's value, kept apart from a string column's: printed as its JSON text, nested as itself."""

    __slots__ = ("value",)

    def __init__(self, value: Any):
        self.value = value


def _plain(v: Any) -> Any:
    """A result value as JSON holds it: a JSON column's value as parsed, intervals as ISO-8601 durations, the
    rest as the API gives it (jsonable: instants as ISO-8601, maps as objects, bytes as hex)."""
    return jsonable(v, _sql_leaf)


def _sql_leaf(v: Any) -> Any:
    if isinstance(v, JsonValue):
        return v.value
    if isinstance(v, pa.MonthDayNano):
        return iso_duration(v.months, v.days, v.nanoseconds)
    if isinstance(v, dt.timedelta):  # Arrow duration columns
        return iso_duration(0, v.days, (v.seconds * 1_000_000 + v.microseconds) * 1000)
    if isinstance(v, float) and not math.isfinite(v):  # JSON has no NaN or infinity: printed as in the table
        return str(v)
    if isinstance(v, int) and not isinstance(v, bool) and not -2**63 <= v < 2**64:
        # a VARINT past 64 bits: its digits as a string, as a HUGEINT's (a decimal) are; a BIGINT's or UBIGINT's,
        # which every reader of an offset holds, stay numbers
        return str(v)
    return NotImplemented


def _cell(v: Any) -> str:
    """A value in the table and CSV formats: strings as they are, everything else as its JSON text."""
    if v is None:
        return "NULL"
    j = _plain(v)
    if isinstance(v, JsonValue) or isinstance(j, (bool, list, dict)):
        return json.dumps(j, default=str, ensure_ascii=False)
    return str(j)  # a string as it is; a number (decimals too) as its digits


def render(cols: list[str], rows: list[tuple], fmt: str) -> str:
    """A whole result's text in the format."""
    return "".join(printed(cols, iter([rows] if rows else []), fmt))


def printed(cols: list[str], batches: Iterator[list[tuple]], fmt: str) -> Iterator[str]:
    """A result's text in the format, in pieces as its batches are fetched: CSV and JSON a piece a batch (the same
    text as whole). The table is one piece up to HELD_ROWS rows and HELD_CHARS characters, its columns as wide as
    their widest value; past them, the rows held back, then a piece a batch: the columns as wide as their widest
    value among the rows held back, and a later value wider than its column widens the column from its row on,
    below a separator line at the new widths (each row lines up with the separator above it)."""
    if fmt == "json":
        # an object holds a name once: `SELECT * FROM a JOIN b ON …` kept b's snapshot_id, record_offset, … alone
        twice = [f"{n} columns named {c!r}" for c, n in Counter(cols).items() if n > 1]
        if twice:
            raise duckdb.InvalidInputException(
                f"the result has {', '.join(twice)}, and a JSON object holds one value per name: name them apart "
                "(AS), or use --format csv or table")
        # json.dumps of the list, written an object at a time: `[`, the objects joined by ", ", `]`
        texts = (", ".join(json.dumps({c: _plain(v) for c, v in zip(cols, r)}, default=str, ensure_ascii=False)
                           for r in b) for b in batches)
        yield from _joined(texts, "[", ", ", "]\n")
    elif fmt == "csv":
        yield from _joined((_csv_lines(b) for b in batches), _csv_lines([cols], raw=True), "", "")
    else:
        yield from _table(cols, batches)


def _held(pieces: Iterator[tuple[Any, int, int]]) -> tuple[list, Iterator[tuple[Any, int, int]] | None]:
    """The pieces (each with its rows and characters) up to HELD_ROWS rows and HELD_CHARS characters, and the
    iterator of the pieces after them: None when the result ended within the bounds."""
    held, rows, chars = [], 0, 0
    for piece, n, size in pieces:
        held.append(piece)
        rows, chars = rows + n, chars + size
        if rows > HELD_ROWS or chars > HELD_CHARS:
            return held, pieces
    return held, None


def _joined(texts: Iterator[str], head: str, between: str, tail: str) -> Iterator[str]:
    """head, the batches' texts joined by `between`, tail; a piece a batch, the head with the first."""
    before, empty = head, True
    for text in texts:
        yield before + text
        before, empty = between, False
    if empty or tail:
        yield (head if empty else "") + tail


def _csv_lines(rows: list, raw: bool = False) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    for r in rows:
        w.writerow(r if raw else ["" if v is None else _cell(v) for v in r])
    return buf.getvalue()


def _table(cols: list[str], batches: Iterator[list[tuple]]) -> Iterator[str]:
    cells = ([[cell(_cell(v)) for v in r] for r in b] for b in batches)
    held, rest = _held((c, len(c), sum(len(v) for r in c for v in r)) for c in cells)
    rows = [r for c in held for r in c]
    widths = [max([len(c)] + [len(r[i]) for r in rows]) for i, c in enumerate(cols)]
    out = [_separator(widths), _line(cols, widths), _separator(widths)] + [_line(r, widths) for r in rows]
    count = len(rows)
    if rest is not None:
        yield "\n".join(out) + "\n"
        for c, _, _ in rest:
            out = []
            for r in c:
                wider = [max(w, len(v)) for w, v in zip(widths, r)]
                if wider != widths:
                    widths = wider
                    out.append(_separator(widths))
                out.append(_line(r, widths))
            count += len(c)
            yield "\n".join(out) + "\n"
        out = []
    yield "\n".join(out + [_separator(widths), f"({count} row{'s' if count != 1 else ''})"]) + "\n"


def _separator(widths: list[int]) -> str:
    return "+" + "+".join("-" * (w + 2) for w in widths) + "+"


def _line(values: list[str], widths: list[int]) -> str:
    return "| " + " | ".join(v.ljust(w) for v, w in zip(values, widths)) + " |"
