"""Fast path: segment file bytes straight to `DECODED_RECORD_SCHEMA` Arrow batches, column by column.

Produces exactly the rows of ``read_batches_from_file`` + ``to_decoded_row`` / ``problem_to_row`` (same values,
same order) without building a `RecordBatchHeader` / `LogRecord` / row dict per record:

* framing is `framing.frame_entry`'s (in C, `_fastdecode`'s `frame_entry`) over an mmap of the file;
* a magic 2 batch has its CRC-32C checked, its record section decompressed (in C by `_native_codecs.c`, else
  with `codecs.decompress`), then its records walked; the dominant kinds (offset commits: key type 0/1, value
  v0-v4 read by the reference's `messages.offset_commit_value_fields`, tombstones; control records) go straight
  into typed columns: the per-row ("hot") values and the values of the record's batch (location, producer,
  codec, ...);
* the key columns (kind, key type, group, topic, partition) are hot columns too: the Python walk parses each
  distinct key once (`KeyTable`), C reads them from every record's own key bytes; every other column is sparse
  (row index, value) and usually all-null.

With the C extension (`pipelines/decoding/_fastdecode.c`, built by setup.py, used unless
``OFFSETLAKE_PURE_PYTHON=1``: `native`), runs of clean batches are decoded entirely in C into column buffers
(`_fastdecode.decode_entries`, `_fastdecode.Columns`): no Python object per record, nor per key. C
also reads a classic group's GroupMetadata record (v0-v3) and a KIP-848 consumer group's record (types 3-8 and 16,
the 3.8+ layout), appending their values (`GROUP_VALUE_COLUMNS`: a classic member as a tuple of its struct's fields,
`member_tuples`; a KIP-848 record's partitions as the reference's dicts) to the sparse columns; the Python walk
leaves every group record to the reference.
An entry C leaves goes through the pure-Python walk (`_walk_v2`) here, which also decodes every entry without
the extension.

Anything unusual goes to the reference path so the rows are always identical: a record the walk does not fully
understand (a group's record in Python, in C one of another type or layout, unknown versions, odd lengths;
invalid UTF-8 is fine) becomes a
`LogRecord` given to `to_decoded_row`; a batch with a bad CRC, bad framing, record headers, a decompression
failure, or any exception, and every legacy (magic 0/1) entry, is decoded by `batches.decode_entry`.
"""
from __future__ import annotations

import mmap
import operator
import os
import struct
from collections.abc import Callable, Iterator
from typing import Any

import crc32c as _crc32c_mod
import numpy as np
import pyarrow as pa

from pipelines.decoding import codecs
from pipelines.decoding.batches import (
    INT32_MAX,
    RECORD_BATCH_OVERHEAD,
    _CODEC_LABELS,
    _new_header,
    _new_record,
    decode_entry,
    v2_records,
)
from pipelines.decoding.framing import as_long, frame_entry, stop_problem
from pipelines.decoding.offset_order import OffsetOrder, ordered_batches, resumed
from pipelines.decoding.policy import DEFAULT_POLICY, ReadPolicy
from pipelines.decoding.native import MEMBER_FIELDS, fastdecode
from pipelines.decoding.messages import offset_commit_value_fields
from pipelines.decoding.rows import problem_to_row, to_decoded_row
from pipelines.heap import gc_paused
from schemas.decoded import (DECODED_COLUMNS, DECODED_RECORD_SCHEMA, KIND_CONSUMER_GROUP, KIND_CONTROL,
                             KIND_GROUP_METADATA, KIND_OFFSET_COMMIT)
from schemas.messages import CONTROL_TYPE_NAMES
from schemas.records import CREATE_TIME, LOG_APPEND_TIME, NO_SEQUENCE, ReadProblem

__all__ = ["decode_segment_to_arrow", "HAVE_C_EXTENSION"]

# ---------------------------------------------------------------------------------------------- column groups
# per-row tuple, one per row (fast rows build it directly)
# a record's key columns, as its key bytes say them (the Python walk's key-table entries: `KeyTable`)
KEY_COLUMNS = ("record_kind", "key_type", "group_id", "topic", "partition")
HOT_COLUMNS = ("offset", "timestamp", *KEY_COLUMNS, "is_tombstone", "value_version", "committed_offset",
               "leader_epoch", "metadata", "commit_timestamp", "expire_timestamp", "topic_id")
# batch run value, one per batch (and one per fallback-batch row); `source` is the chunk's file (`_Chunk.flush`)
BATCH_COLUMNS = ("offsets_partition", "batch_base_offset", "batch_first_offset", "batch_last_offset",
                 "batch_position", "timestamp_type", "producer_id", "producer_epoch", "is_transactional",
                 "is_control", "magic", "codec")
# the values of a group's record that the C walk reads, in `_fastdecode`'s order (sparse columns): a classic group's,
# then a KIP-848 consumer group's
GROUP_VALUE_COLUMNS = ("protocol_type", "generation", "protocol", "leader", "current_state_timestamp", "members",
                       "member_id", "regex", "layout", "group_epoch", "metadata_hash", "topics_metadata",
                       "group_instance_id", "rack_id", "client_id", "client_host", "subscribed_topics",
                       "subscribed_topic_regex", "rebalance_timeout_ms", "server_assignor", "session_timeout_ms",
                       "assignment_epoch", "assigned_partitions", "member_epoch", "previous_member_epoch",
                       "member_state", "partitions_pending_revocation", "regex_topics", "regex_version",
                       "regex_timestamp")
_GROUPED = {*HOT_COLUMNS, *BATCH_COLUMNS, "source"}
COLD_COLUMNS = tuple(c for c in DECODED_COLUMNS if c not in _GROUPED)
_TYPES = {f.name: f.type for f in DECODED_RECORD_SCHEMA}

_V2_UNPACK = struct.Struct(">qiibIhiqqqhii").unpack_from
_I16 = struct.Struct(">h").unpack_from
_I32 = struct.Struct(">i").unpack_from

_crc32c = _crc32c_mod.crc32c
_KTABLE_MAX = 1 << 18
_CONTROL_KEY = 0  # kcache slot of the control-record key-table entry (ints never equal key bytes)
_CONTROL_ENTRY = (KIND_CONTROL, None, None, None, None)
_CONTROL_NAMES = dict(CONTROL_TYPE_NAMES)
_FALLBACK = -1


class _Bail(Exception):
    """Internal: the fast walk cannot decode this batch; the reference path will."""


# ================================================================================================================
# pure-Python record walk (what the C extension does for clean batches; every entry without it)
# ================================================================================================================
def _parse_key(k) -> tuple | None:
    """OffsetCommitKey (type 0/1) or GroupMetadataKey (type 2) -> key-table entry, or None (reference path). Same
    acceptance as `read_message_key`'s: int16 lengths < 0x8000, exact length."""
    if k is None:
        return None
    n = len(k)
    if n >= 4 and k[0] == 0 and k[1] == 2:
        glen = (k[2] << 8) | k[3]
        if glen >= 0x8000 or 4 + glen != n:
            return None
        return (KIND_GROUP_METADATA, 2, k[4:].decode("utf-8", "replace"), None, None)
    if n < 10 or k[0] != 0 or k[1] > 1:
        return None
    glen = (k[2] << 8) | k[3]
    p = 4 + glen
    if glen >= 0x8000 or p + 2 > n:
        return None
    tlen = (k[p] << 8) | k[p + 1]
    q = p + 2 + tlen
    if tlen >= 0x8000 or q + 4 != n:
        return None
    return (KIND_OFFSET_COMMIT, k[1], k[4:p].decode("utf-8", "replace"), k[p + 2:q].decode("utf-8", "replace"),
            _I32(k, q)[0])


def _key_id(key, kcache: dict, ktable: list) -> int:
    """Key-table index of a new offset-commit or group-metadata key (-1: neither, plainly), cached in ``kcache``."""
    t = _parse_key(key)
    if t is None:
        if key is not None:
            kcache[key] = _FALLBACK
        return _FALLBACK
    kid = len(ktable)
    ktable.append(t)
    kcache[key] = kid
    return kid


def _walk_v2(buf, pos: int, end: int, count: int, base_offset: int, ts_base: int, ts_scale: int, is_control: bool,
             rows: list, row0: int, kcache: dict, ktable: list, ctl_types: list, ctl_epochs: list, pending: list):
    """Walk ``count`` v2 records in ``buf[pos:end]``; returns the first record's offset (None if no records).

    Appends one hot tuple per record to ``rows`` (the batch's rows: chunk row ``row0 + i`` is ``rows[i]``); a
    record it does not decode itself gets a ``None`` placeholder in ``rows`` and ``(row_index, offset_delta,
    timestamp, key, value)`` in ``pending``. Raises (anything) when the batch must go to the reference path; the
    caller rolls back what was appended.
    """
    append = rows.append
    kget = kcache.get
    first = None
    rec_end = pos
    for _start, rec_end, _length, tsd, offd, key, vs, vlen, hs in v2_records(buf, pos, end, count):
        if buf[hs] != 0 or hs + 1 != rec_end:
            raise _Bail  # record headers, or a size that does not add up: the reference path
        pos = hs + 1
        offset = as_long(base_offset + offd)
        if first is None:
            first = offset
        ts = as_long(ts_base + tsd * ts_scale)
        if is_control:
            if key is not None and len(key) >= 4 and key[0] < 0x80:
                ctype = _I16(key, 2)[0]
                if ctype == 0 or ctype == 1:
                    if vlen >= 6 and buf[vs] < 0x80:
                        epoch = _I32(buf, vs + 2)[0]
                    else:
                        epoch = None
                else:
                    epoch = -1
                if epoch is not None:
                    kid = kget(_CONTROL_KEY)
                    if kid is None:
                        kid = kcache[_CONTROL_KEY] = len(ktable)
                        ktable.append(_CONTROL_ENTRY)
                    i = row0 + len(rows)
                    ctl_types.append((i, _CONTROL_NAMES.get(ctype) or f"UNKNOWN({ctype})"))
                    if ctype == 0 or ctype == 1:
                        ctl_epochs.append((i, epoch))
                    append((offset, ts, *ktable[kid], vlen < 0, None, None, None, None, None, None, None))
                    continue
        else:
            kid = kget(key) if key is not None else _FALLBACK
            if kid is None:
                kid = _key_id(key, kcache, ktable)
            if kid >= 0 and key[1] != 2:  # a group's record is the reference path's here (C reads classic ones)
                if vlen < 0:
                    append((offset, ts, *ktable[kid], True, None, None, None, None, None, None, None))
                    continue
                try:  # the reference's reader; a value it refuses goes to the reference path, which says why
                    v = offset_commit_value_fields(buf[vs:vs + vlen])
                except Exception:
                    v = None
                if v is not None:
                    append((offset, ts, *ktable[kid], False, v[0], v[1], v[2], v[3], v[4], v[5] if v[0] == 1 else None,
                            v[6]))
                    continue
        pending.append((row0 + len(rows), offd, ts, key, buf[vs:vs + vlen] if vlen >= 0 else None))
        append(None)
    if rec_end != end:
        raise _Bail
    return first


_c = fastdecode
if _c is not None:
    _c.init(_CONTROL_NAMES, (CREATE_TIME.encode(), LOG_APPEND_TIME.encode()),
            tuple(label.encode() for label in _CODEC_LABELS), KIND_OFFSET_COMMIT, KIND_GROUP_METADATA,
            KIND_CONSUMER_GROUP, KIND_CONTROL)
HAVE_C_EXTENSION = _c is not None


# ================================================================================================================
# columns: typed column builders (the C extension's, or lists)
# ================================================================================================================
_TYPECODES = {pa.int64(): "q", pa.int32(): "i", pa.int16(): "h", pa.int8(): "b", pa.bool_(): "?", pa.string(): "s"}
_HOT_TYPES = [_TYPES[c] for c in HOT_COLUMNS]
_BATCH_TYPES = [_TYPES[c] for c in BATCH_COLUMNS]


class _ListColumns:
    """Rows of Python values kept column by column in lists (the pure-Python build)."""

    def __init__(self, types: list[pa.DataType]):
        self.types = types
        self.cols: list[list] = [[] for _ in types]

    def __len__(self) -> int:
        return len(self.cols[0])

    def append(self, row: tuple) -> None:
        for col, v in zip(self.cols, row):
            col.append(v)

    def extend(self, rows: list[tuple]) -> None:
        for row in rows:
            self.append(row)

    def arrays(self) -> list[pa.Array]:
        out = [pa.array(col, t) for col, t in zip(self.cols, self.types)]
        for col in self.cols:
            col.clear()
        return out


class _CColumns:
    """The same, in the C extension's buffers: a clean record written by `_fastdecode.decode_entries` costs no
    Python object, and the Arrow arrays are made from the buffers as they are."""

    def __init__(self, types: list[pa.DataType]):
        self.types = types
        self.c = _c.Columns("".join(_TYPECODES[t] for t in types))
        self.append = self.c.append
        self.extend = self.c.extend

    def __len__(self) -> int:
        return len(self.c)

    def arrays(self) -> list[pa.Array]:
        n = len(self.c)
        out = []
        for t, (nulls, valid, data, offsets) in zip(self.types, self.c.take()):
            validity = None if valid is None else pa.py_buffer(valid)
            if offsets is None:
                out.append(pa.Array.from_buffers(t, n, [validity, pa.py_buffer(data)], null_count=nulls))
            else:
                out.append(pa.Array.from_buffers(t, n, [validity, pa.py_buffer(offsets), pa.py_buffer(data)],
                                                 null_count=nulls))
        return out


# ================================================================================================================
# chunk: the columns of up to ``batch_rows`` rows
# ================================================================================================================
class KeyTable:
    """The record keys the Python walk has met (`_walk_v2`): key bytes -> the index of their entry (`kcache`), the
    entries (`KEY_COLUMNS` tuples, `ktable`). A task hands one to every segment it decodes
    (`decode_segment_to_arrow(keys=)`): the segments of an offsets partition repeat the same keys, so a table per
    file would parse each key again in every file. Dropped whole past `_KTABLE_MAX` entries, at a chunk's end. The C
    walk needs none: it reads each record's key columns from the record's own key bytes."""

    __slots__ = ("kcache", "ktable")

    def __init__(self) -> None:
        self.kcache: dict = {}
        self.ktable: list = []

    def bound(self) -> None:
        if len(self.ktable) > _KTABLE_MAX:
            self.kcache.clear()
            self.ktable.clear()


class _Chunk:
    """The columns of up to ``batch_rows`` rows of one file (`source`)."""

    __slots__ = ("hot", "batch", "keys", "sparse", "source", "_sources")

    def __init__(self, columns, source: str, keys: KeyTable | None = None):
        self.hot = columns(_HOT_TYPES)
        self.batch = columns(_BATCH_TYPES)
        self.keys = keys if keys is not None else KeyTable()
        self.sparse: dict[str, list] = {c: [] for c in COLD_COLUMNS}
        self.source = source
        self._sources: pa.Array | None = None

    def add_row(self, row: dict[str, Any]) -> None:
        """A row dict from the reference path, with its batch columns."""
        self.hot.append(self._hot_tuple(row, len(self.hot)))
        self.batch.append(tuple(row[c] for c in BATCH_COLUMNS))

    def _hot_tuple(self, row: dict[str, Any], i: int) -> tuple:
        """The hot tuple of a reference row that is chunk row ``i``; its cold columns recorded (its classic members as
        the C walk gives them: `member_tuples`)."""
        sparse = self.sparse
        for c in COLD_COLUMNS:
            v = row[c]
            if v is not None:
                sparse[c].append((i, v if c != "members" else member_tuples(v)))
        return tuple(row[c] for c in HOT_COLUMNS)

    def fill_row(self, rows: list, row0: int, i: int, row: dict[str, Any]) -> None:
        """Fill placeholder ``rows[i - row0]`` (a record of a fast batch, chunk row ``i``) from a reference row."""
        rows[i - row0] = self._hot_tuple(row, i)

    def rollback(self, n: int) -> None:
        for lst in self.sparse.values():
            while lst and lst[-1][0] >= n:
                lst.pop()

    def flush(self) -> pa.RecordBatch:
        n = len(self.hot)
        arrays = dict(zip(HOT_COLUMNS, self.hot.arrays()))
        for c, a in zip(BATCH_COLUMNS, self.batch.arrays()):
            arrays[c] = a
        for c, entries in self.sparse.items():
            if not entries:
                arrays[c] = pa.nulls(n, _TYPES[c])
            else:
                arrays[c] = _scatter(entries, n, _TYPES[c])
                entries.clear()
        arrays["source"] = self._source_column(n)
        self.keys.bound()
        return pa.RecordBatch.from_arrays([arrays[c] for c in DECODED_COLUMNS], schema=DECODED_RECORD_SCHEMA)

    def _source_column(self, n: int) -> pa.Array:
        """The `source` column of `n` rows, all the file's path: the first rows of one array of it, made once per
        file and shared by its chunks: written row by row, every record copied the path into fresh memory, for a
        column the loaders drop."""
        if self._sources is None or len(self._sources) < n:
            size = len(self.source.encode("utf-8"))
            if size * n > np.iinfo(np.int32).max:
                raise OverflowError("string column over 2 GiB in one chunk")
            self._sources = pa.repeat(pa.scalar(self.source, pa.string()), max(n, 1))
        return self._sources.slice(0, n)


def member_tuples(members: list[dict[str, Any]]) -> list[tuple]:
    """A reference row's classic members (dicts, `rows._member_dict`) as the C walk gives them: each a tuple of its
    values in `MEMBER_FIELDS` order, its topic partitions (topic, partitions) tuples. Arrow makes a column's structs
    from all dicts or all tuples, not both (from tuples by position, with no lookup of each field by name)."""
    out = []
    for m in members:
        values = [m.get(f) for f in MEMBER_FIELDS]
        for at in _MEMBER_PARTITIONS:
            tps = values[at]
            if tps is not None:
                values[at] = [(tp["topic"], tp["partitions"]) for tp in tps]
        out.append(tuple(values))
    return out


_MEMBER_PARTITIONS = tuple(MEMBER_FIELDS.index(f) for f in ("owned_partitions", "assigned_partitions"))


def _scatter(entries: list[tuple[int, Any]], n: int, t: pa.DataType) -> pa.Array:
    """An array of `n` rows, null but at the (row, value) `entries` (rows ascending, values not None). Built from the
    k values' own buffers: a `take` of k values into n rows costs a pass per row of every child, which for the
    nested group columns of a chunk was most of its making."""
    k = len(entries)
    # the rows and values by C-level getters (`zip(*entries)` passes every pair as an argument), the validity packed
    # by numpy (an Arrow boolean array made of it only to take its bitmap converts it first)
    rows = np.fromiter(map(_ROW, entries), np.int64, k)
    vals = pa.array(list(map(_VALUE, entries)), t)
    valid = np.zeros(n, dtype=bool)
    valid[rows] = True
    validity = pa.py_buffer(np.packbits(valid, bitorder="little"))
    width = _FIXED_WIDTH.get(t)
    if width is not None:
        data = np.zeros(n, dtype=width)
        data[rows] = np.frombuffer(vals.buffers()[1], dtype=width, count=k)
        return pa.Array.from_buffers(t, n, [validity, pa.py_buffer(data)], null_count=n - k)
    if pa.types.is_string(t) or pa.types.is_binary(t) or pa.types.is_list(t):
        # a value's bytes or items stay where they are: row i's offsets span its value's, empty where null
        offsets = np.frombuffer(vals.buffers()[1], dtype=np.int32, count=k + 1)
        lengths = np.zeros(n, dtype=np.int32)
        lengths[rows] = np.diff(offsets)
        spans = np.zeros(n + 1, dtype=np.int32)
        np.cumsum(lengths, out=spans[1:])
        if pa.types.is_list(t):
            return pa.Array.from_buffers(t, n, [validity, pa.py_buffer(spans)], null_count=n - k,
                                         children=[vals.values])
        return pa.Array.from_buffers(t, n, [validity, pa.py_buffer(spans), vals.buffers()[2]], null_count=n - k)
    where = np.full(n, -1, np.int32)
    where[rows] = np.arange(k, dtype=np.int32)
    return vals.take(pa.array(where, mask=where < 0))


_ROW, _VALUE = operator.itemgetter(0), operator.itemgetter(1)
_FIXED_WIDTH = {pa.int8(): np.int8, pa.int16(): np.int16, pa.int32(): np.int32, pa.int64(): np.int64}


# ================================================================================================================
# public API
# ================================================================================================================
def decode_segment_to_arrow(
    path: str | os.PathLike,
    *,
    offsets_partition: int,
    source: str | None = None,
    batch_rows: int = 20000,
    use_c: bool | None = None,
    start_position: int = 0,
    end_position: int | None = None,
    policy: ReadPolicy = DEFAULT_POLICY,
    keys: KeyTable | None = None,
    order: OffsetOrder | None = None,
) -> Iterator[pa.RecordBatch]:
    """Decoded Arrow batches (`DECODED_RECORD_SCHEMA`) of one segment file: the rows of
    ``read_batches_from_file`` + ``to_decoded_row`` / ``problem_to_row``, in order, in Arrow batches of whole log
    batches: one closes as soon as it holds ``batch_rows`` rows, so its last log batch may take it past that, and no
    log batch straddles two Arrow batches.

    ``use_c``: None = the C extension when built, True = require it, False = pure Python.
    ``start_position``: an entry boundary to start at (incremental runs: where the previous run stopped); the
    rows are those ``read_batches_from_file(..., start_position=)`` gives, positions stay absolute.
    ``end_position``: an entry boundary to stop at (a range of a split partition, `frames.ranges`); None: the
    file's end.
    ``keys``: the key table of the segments decoded before this one (`KeyTable`); None: one of its own.
    ``order``: what the batches' offsets are judged after (`offset_order.OffsetOrder`); None: the file's batches
    before ``start_position`` (`offset_order.resumed`, a walk of their heads). A probe of one entry near a file's end
    gives a new `OffsetOrder`: the walk would cost the whole file's heads.
    """
    if start_position < 0:
        raise ValueError(f"start_position must be >= 0, not {start_position}")
    if use_c and _c is None:
        raise RuntimeError("the _fastdecode C extension is not built")
    c_ext = _c if use_c is not False else None
    src = source if source is not None else os.fspath(path)
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0 or start_position >= size:
            return
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        try:
            end = min(size, len(mm)) if end_position is None else min(size, len(mm), end_position)
            yield from ordered_batches(_without_gc(_decode_buffer(mm, end, src, offsets_partition,
                                                                  max(1, batch_rows), c_ext, start_position, policy,
                                                                  keys)),
                                       resumed(mm, start_position) if order is None else order)
        finally:
            mm.close()


def _without_gc(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Run ``batches`` with the cyclic GC paused while it builds a chunk (`heap.gc_paused`: decoding allocates
    hundreds of thousands of small acyclic objects), restored around every yield: the caller's own code runs with
    the GC in whatever state it was."""
    it = iter(batches)
    try:
        while True:
            with gc_paused():
                try:
                    batch = next(it)
                except StopIteration:
                    return
            yield batch
    finally:
        close = getattr(it, "close", None)
        if close is not None:
            close()


def _decode_buffer(mm, end: int, src: str, part: int, batch_rows: int, c_ext,
                   start: int = 0, policy: ReadPolicy = DEFAULT_POLICY, keys: KeyTable | None = None
                   ) -> Iterator[pa.RecordBatch]:
    """The entries of ``mm[start:end]``: with the C extension, runs of clean batches in C
    (`_fastdecode.decode_entries`), and each entry it leaves (anything unusual) here, one at a time: a v2 batch
    column by column (`_V2Batches`), else, or when that fails, by the reference path (`_decode_reference`)."""
    chunk = _Chunk(_CColumns if c_ext is not None else _ListColumns, src, keys)
    hot = chunk.hot
    max_bytes = policy.max_batch_bytes
    decompress = codecs.decompress

    def decompress_v2(codec_id: int, data: bytes) -> bytes:
        return decompress(codec_id, data, magic=2, max_bytes=max_bytes)

    v2 = _V2Batches(chunk, src, part, decompress_v2)
    c_decode = None if c_ext is None else _c_decoder(c_ext, chunk, part, batch_rows, decompress_v2, max_bytes)
    pos = start
    while True:
        if c_decode is not None:
            pos = c_decode(mm, pos, end)
            if len(hot) >= batch_rows:
                yield chunk.flush()
                continue
        frame = frame_entry(mm, pos, end)
        if frame is None:
            if pos < end:
                chunk.add_row(problem_to_row(stop_problem(mm, pos, end, source=src, offsets_partition=part)))
            break
        total = frame[1]
        entry = mm[pos:pos + total]
        if entry[16] != 2 or total < RECORD_BATCH_OVERHEAD or not v2.decode(entry, total, pos):
            _decode_reference(chunk, entry, total, pos, src, part, policy)
        pos += total
        if len(hot) >= batch_rows:
            yield chunk.flush()
    if len(hot):
        yield chunk.flush()


def _c_decoder(c_ext, chunk: "_Chunk", part: int, batch_rows: int,
               decompress_v2: Callable[[int, bytes], bytes], max_bytes: int) -> Callable[[Any, int, int], int]:
    """`_fastdecode.decode_entries` bound to `chunk`'s columns and key cache: (buffer, position, end) -> the
    position of the first entry it left to Python (or `end`), having filled at most `batch_rows` rows. A record
    section is decompressed in C (`_fastdecode.native_codecs`: snappy, and each codec whose library this machine
    has), else, and whenever C would not take it as it is, by `decompress_v2`."""
    decode = c_ext.decode_entries
    hot, batch = chunk.hot, chunk.batch
    ctl_types, ctl_epochs = chunk.sparse["control_type"], chunk.sparse["coordinator_epoch"]
    group_values = tuple(chunk.sparse[c] for c in GROUP_VALUE_COLUMNS)

    def run(mm, pos: int, end: int) -> int:
        return decode(mm, pos, end, batch_rows, hot.c, batch.c, ctl_types, ctl_epochs, group_values, decompress_v2,
                      max_bytes, part)
    return run


class _V2Batches:
    """Record batches (magic 2) decoded here column by column (`_walk_v2`) into one chunk; a record the walk
    cannot put in columns (a group value, a control record's odd value) is decoded whole and its row filled in."""

    __slots__ = ("chunk", "src", "part", "decompress_v2", "brows", "pending")

    def __init__(self, chunk: "_Chunk", src: str, part: int, decompress_v2: Callable[[int, bytes], bytes]):
        self.chunk, self.src, self.part, self.decompress_v2 = chunk, src, part, decompress_v2
        self.brows: list = []
        self.pending: list = []

    def decode(self, entry: bytes, total: int, pos: int) -> bool:
        """The batch `entry` (at `pos`, `total` bytes) into the chunk; False, with the chunk as it was, when the
        reference path must decode it: a CRC that does not hold, a negative count, anything the walk refuses."""
        (base_offset, _length, leader_epoch, magic, crc, attributes, last_delta, base_ts, max_ts, producer_id,
         producer_epoch, base_sequence, count) = _V2_UNPACK(entry, 0)
        if count < 0 or _crc32c(memoryview(entry)[21:]) != crc:
            return False
        chunk, brows, pending = self.chunk, self.brows, self.pending
        keys, sparse = chunk.keys, chunk.sparse
        row0 = len(chunk.hot)
        codec_id = attributes & 0x07
        log_append = attributes & 0x08
        is_control = (attributes & 0x20) != 0
        try:
            if codec_id == 0:
                buf, bstart, stop = entry, RECORD_BATCH_OVERHEAD, total
            else:
                buf = self.decompress_v2(codec_id, entry[RECORD_BATCH_OVERHEAD:])
                bstart, stop = 0, len(buf)
            first = _walk_v2(buf, bstart, stop, count, base_offset, max_ts if log_append else base_ts,
                             0 if log_append else 1, is_control, brows, row0, keys.kcache, keys.ktable,
                             sparse["control_type"], sparse["coordinator_epoch"], pending)
        except Exception:  # noqa: BLE001 - anything odd: the reference path decodes this batch
            chunk.rollback(row0)
            brows.clear()
            pending.clear()
            return False
        if first is None:
            return True
        if pending:
            header = _new_header(
                self.src, self.part, pos, base_offset, as_long(base_offset + last_delta), total, magic, crc, True,
                attributes, _CODEC_LABELS[codec_id], LOG_APPEND_TIME if log_append else CREATE_TIME,
                (attributes & 0x10) != 0, is_control, base_ts if attributes & 0x40 else None,
                base_ts, max_ts, producer_id, producer_epoch, base_sequence, leader_epoch, count)
            self._fill_pending(header, base_offset, base_sequence, first, row0)
        chunk.hot.extend(brows)
        chunk.batch.extend([(self.part, base_offset, first, as_long(base_offset + last_delta), pos,
                             LOG_APPEND_TIME if log_append else CREATE_TIME, producer_id, producer_epoch,
                             (attributes & 0x10) != 0, is_control, 2, _CODEC_LABELS[codec_id])] * len(brows))
        brows.clear()
        return True

    def _fill_pending(self, header, base_offset: int, base_sequence: int, first: int, row0: int) -> None:
        """The rows the walk left as placeholders, from their records decoded whole; the sequence wraps at
        INT32_MAX as the broker's does."""
        for i, offd, ts, key, value in self.pending:
            if base_sequence >= 0:
                seq = base_sequence + offd
                if seq > INT32_MAX:
                    seq -= 0x80000000
            else:
                seq = NO_SEQUENCE
            rec = _new_record(header, as_long(base_offset + offd), ts, first, seq, key, value, ())
            self.chunk.fill_row(self.brows, row0, i, to_decoded_row(rec))
        self.pending.clear()


def _decode_reference(chunk: "_Chunk", entry: bytes, total: int, pos: int, src: str, part: int,
                      policy: ReadPolicy) -> None:
    """An entry decoded by the reference path (`batches.decode_entry`: every magic, every problem named), row by
    row."""
    for item in decode_entry(entry, 0, total, source=src, offsets_partition=part, position=pos, policy=policy):
        if isinstance(item, ReadProblem):
            chunk.add_row(problem_to_row(item))
        else:
            for rec in item[1]:
                chunk.add_row(to_decoded_row(rec))
