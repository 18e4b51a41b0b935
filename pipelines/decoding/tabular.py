"""Tabular dumps of `__consumer_offsets` (Spark Kafka-source rows in Parquet, JSON lines or CSV) into records.

The Spark Kafka source (`spark-sql-kafka-0-10`, `KafkaRecordToRowConverter`) gives one row per record with
``key, value, topic, partition, offset, timestamp, timestampType``. Such a dump carries no batch facts: the Kafka
consumer under it never returns control records (transaction markers) and says nothing of producer ids, so
transactional offset commits cannot be resolved unless the optional columns ``producer_id, producer_epoch,
is_transactional, is_control, batch_base_offset`` are present (`TabularDump.has_batch_facts`).

Each row becomes a `LogRecord` with a synthetic `RecordBatchHeader` (position -1, codec "none", crc -1): rows
sharing (partition, batch_base_offset) form one batch, otherwise each row is its own batch. Rows are replayed in
(partition, offset) order whatever order the file holds them in. In text formats key and value are base64 or hex
(detected from the keys, or ``encoding=``). ReadProblem positions are log offsets.

* Same (partition, offset) twice: collapsed when identical; otherwise the first row is kept and
  ``duplicate_conflict`` reports the other one.
* Rows of another topic: one ``not_offsets_data`` problem per topic (with the row count), not read.
* Rows with a null partition/offset or undecodable key/value text: ``invalid_row``.
"""
from __future__ import annotations

import base64
import binascii
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone

import pyarrow as pa
import pyarrow.compute as pc

from pipelines.decoding.errors import InvalidFieldError
from pipelines.decoding.segments import InputError
from schemas.records import CREATE_TIME, LOG_APPEND_TIME, LogRecord, ReadProblem, RecordBatchHeader

__all__ = ["BATCH_FACT_COLUMNS", "KAFKA_SOURCE_COLUMNS", "TabularDump", "read_tabular_dump"]

OFFSETS_TOPIC = "__consumer_offsets"
KAFKA_SOURCE_COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp", "timestampType")
BATCH_FACT_COLUMNS = ("producer_id", "producer_epoch", "is_transactional", "is_control", "batch_base_offset")
_REQUIRED = ("key", "value", "partition", "offset")
_FORMATS = {".parquet": "parquet", ".pq": "parquet", ".json": "json", ".jsonl": "json", ".ndjson": "json",
            ".csv": "csv"}
_HEX_RE = re.compile(r"^(?:[0-9a-fA-F]{2})*$")
_DETECT_SAMPLE = 1000


@dataclass
class TabularDump:
    """An opened tabular dump: its format, the key/value text encoding, and whether batch facts are present."""

    path: str
    fmt: str
    encoding: str | None  # "base64" | "hex" for text key/value columns; None for binary columns
    columns: tuple[str, ...]
    has_batch_facts: bool
    _table: pa.Table = field(repr=False)

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
    `InvalidFieldError` for a table without the key/value/partition/offset columns.
    """
    p = os.fspath(path)
    if not os.path.exists(p):
        raise InputError(f"input path does not exist: {p}")
    files = _files(p)
    if not files:
        raise InputError(f"no data files in {p}")
    fmt = fmt or _detect_format(files[0])
    if fmt not in ("parquet", "json", "csv"):
        raise InvalidFieldError(f"unknown dump format {fmt!r}", field="fmt")
    if encoding not in (None, "base64", "hex"):
        raise InvalidFieldError(f"unknown key/value encoding {encoding!r}", field="encoding")
    tables = [_read_file(f, fmt) for f in files]
    try:
        table = pa.concat_tables(tables, promote_options="permissive") if len(tables) > 1 else tables[0]
    except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
        raise InvalidFieldError(f"part files of {p} have incompatible schemas: {e}", field="schema") from None
    missing = [c for c in _REQUIRED if c not in table.column_names]
    if missing:
        raise InvalidFieldError(f"dump {p} lacks column(s) {', '.join(missing)}", field=missing[0])
    text = pa.types.is_string(table.schema.field("key").type) or pa.types.is_large_string(
        table.schema.field("key").type)
    if text and encoding is None:
        encoding = _detect_encoding(table)
    elif not text:
        encoding = None
    facts = all(c in table.column_names for c in ("producer_id", "is_transactional", "is_control"))
    return TabularDump(path=p, fmt=fmt, encoding=encoding, columns=tuple(table.column_names),
                       has_batch_facts=facts, _table=table)


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
            out.append(os.path.join(root, n))
    return out


def _detect_format(path: str) -> str:
    name = path.lower()
    for suffix in (".gz", ".bz2", ".zst"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    ext = os.path.splitext(name)[1]
    if ext in _FORMATS:
        return _FORMATS[ext]
    with open(path, "rb") as f:
        head = f.read(4096)
    if head.startswith(b"PAR1"):
        return "parquet"
    if head.lstrip()[:1] == b"{":
        return "json"
    return "csv"


def _read_file(path: str, fmt: str) -> pa.Table:
    try:
        if fmt == "parquet":
            import pyarrow.parquet as pq

            return pq.read_table(path)
        if fmt == "json":
            import pyarrow.json as pj

            schema = pa.schema([("key", pa.string()), ("value", pa.string()), ("topic", pa.string())])
            return pj.read_json(path, parse_options=pj.ParseOptions(explicit_schema=schema,
                                                                    unexpected_field_behavior="infer"))
        import pyarrow.csv as pcsv

        types = {"key": pa.string(), "value": pa.string(), "topic": pa.string(), "timestamp": pa.string()}
        return pcsv.read_csv(path, convert_options=pcsv.ConvertOptions(
            column_types=types, strings_can_be_null=True, quoted_strings_can_be_null=False, null_values=[""]))
    except (pa.ArrowInvalid, OSError) as e:
        raise InvalidFieldError(f"cannot read {fmt} dump {path}: {e}", field="file") from None


def _detect_encoding(table: pa.Table) -> str:
    """hex when every sampled non-null key is even-length hex, else base64 (keys start 0x00: "AA…" vs "00…")."""
    keys = [k for k in table.column("key").slice(0, _DETECT_SAMPLE).to_pylist() if k]
    if keys and all(_HEX_RE.match(k) for k in keys):
        return "hex"
    return "base64"


def _decoder(encoding: str | None):
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
    if isinstance(v, (int, float)):
        return int(v)
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


def _ts_type(v) -> str:
    if v in (1, "1", LOG_APPEND_TIME):
        return LOG_APPEND_TIME
    return CREATE_TIME


def _col(table: pa.Table, name: str, n: int, default):
    if name in table.column_names:
        return table.column(name).to_pylist()
    return [default] * n


def _iter_records(dump: TabularDump) -> Iterator[LogRecord | ReadProblem]:
    table = dump._table
    src = dump.path
    n = table.num_rows
    # other topics: reported once per topic, not read
    if "topic" in table.column_names:
        topics = table.column("topic")
        is_offsets = pc.fill_null(pc.equal(topics, OFFSETS_TOPIC), True)
        others = table.filter(pc.invert(is_offsets))
        if others.num_rows:
            counts = {}
            for t, off, part in zip(others.column("topic").to_pylist(), others.column("offset").to_pylist(),
                                    others.column("partition").to_pylist()):
                c = counts.setdefault(t, [0, off, part])
                c[0] += 1
            for t, (cnt, off, part) in counts.items():
                yield ReadProblem(source=src, offsets_partition=part if part is not None else -1,
                                  position=off if off is not None else -1, kind="not_offsets_data",
                                  reason=f"{cnt} row(s) of topic {t!r}, not {OFFSETS_TOPIC}; not read")
            table = table.filter(is_offsets)
            n = table.num_rows
    # null partition / offset
    valid = pc.and_(pc.is_valid(table.column("partition")), pc.is_valid(table.column("offset")))
    bad = table.filter(pc.invert(valid))
    for off, part in zip(bad.column("offset").to_pylist(), bad.column("partition").to_pylist()):
        yield ReadProblem(source=src, offsets_partition=part if part is not None else -1,
                          position=off if off is not None else -1, kind="invalid_row",
                          reason="row without a partition or an offset")
    table = table.filter(valid)
    n = table.num_rows
    if n == 0:
        return
    order = pc.sort_indices(table, sort_keys=[("partition", "ascending"), ("offset", "ascending")])
    table = table.take(order)

    parts = table.column("partition").to_pylist()
    offs = table.column("offset").to_pylist()
    keys = table.column("key").to_pylist()
    vals = table.column("value").to_pylist()
    tss = _ts_millis(table.column("timestamp")) if "timestamp" in table.column_names else [-1] * n
    tts = _col(table, "timestampType", n, 0)
    pids = _col(table, "producer_id", n, -1)
    peps = _col(table, "producer_epoch", n, -1)
    txns = _col(table, "is_transactional", n, False)
    ctls = _col(table, "is_control", n, False)
    bases = _col(table, "batch_base_offset", n, None)
    decode = _decoder(dump.encoding)

    rows: list[tuple] = []  # decoded rows of the batch being built
    prev: tuple | None = None  # (partition, offset, key, value, ts) of the last kept row
    for i in range(n):
        part, off = int(parts[i]), int(offs[i])
        try:
            key = decode(keys[i]) if keys[i] is not None else None
            value = decode(vals[i]) if vals[i] is not None else None
        except (ValueError, binascii.Error, TypeError) as e:
            yield ReadProblem(source=src, offsets_partition=part, position=off, offset=off, kind="invalid_row",
                              reason=f"key/value not valid {dump.encoding}: {e}")
            continue
        ts = tss[i] if tss[i] is not None else -1
        if prev is not None and prev[0] == part and prev[1] == off:
            if (key, value, ts) != prev[2:]:
                yield ReadProblem(source=src, offsets_partition=part, position=off, offset=off, key=key,
                                  value=value, kind="duplicate_conflict",
                                  reason=f"offset {off} of partition {part} appears twice with different "
                                         f"content; the first row is kept")
            continue
        prev = (part, off, key, value, ts)
        base = bases[i]
        batch_key = (part, int(base) if base is not None else off, pids[i], bool(txns[i]), bool(ctls[i]))
        if rows and rows[0][0] != batch_key:
            yield from _emit(rows, src)
            rows = []
        rows.append((batch_key, off, ts, key, value, _ts_type(tts[i]), peps[i]))
    if rows:
        yield from _emit(rows, src)


def _emit(rows: list[tuple], src: str) -> Iterator[LogRecord]:
    (part, base, pid, txn, ctl), first_off = rows[0][0], rows[0][1]
    pid = int(pid) if pid is not None else -1
    pep = rows[0][6]
    pep = int(pep) if pep is not None else -1
    ts_type = rows[0][5]
    timestamps = [r[2] for r in rows]
    attributes = (0x08 if ts_type == LOG_APPEND_TIME else 0) | (0x10 if txn else 0) | (0x20 if ctl else 0)
    header = RecordBatchHeader(
        source=src, offsets_partition=part, position=-1, base_offset=min(base, first_off),
        last_offset=rows[-1][1], size=-1, magic=2, crc=-1, crc_valid=True, attributes=attributes, codec="none",
        timestamp_type=ts_type, is_transactional=txn, is_control=ctl, delete_horizon_ms=None,
        base_timestamp=timestamps[0], max_timestamp=max(timestamps), producer_id=pid, producer_epoch=pep,
        base_sequence=-1, partition_leader_epoch=-1, records_count=len(rows))
    for _, off, ts, key, value, _, _ in rows:
        yield LogRecord(batch=header, offset=off, timestamp=ts, first_offset_in_batch=first_off, sequence=-1,
                        key=key, value=value)
