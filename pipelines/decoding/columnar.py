"""Fast path: segment file bytes straight to `DECODED_RECORD_SCHEMA` Arrow batches, column by column.

Produces exactly the rows of ``read_batches_from_file`` + ``to_decoded_row`` / ``problem_to_row`` (same values,
same order) without building a `RecordBatchHeader` / `LogRecord` / row dict per record:

* framing mirrors `batches.read_batches_from_file` over an mmap of the file (one slice per entry);
* a magic 2 batch is unpacked with one precompiled struct, its CRC-32C checked, its record section
  decompressed with `codecs.decompress`, then walked with inlined zig-zag varints (`_walk_v2`);
* per record, the dominant kinds go straight into one tuple of the per-row ("hot") columns: offset commits
  (key type 0/1, value v0-v4, tombstones; key parsing cached per distinct key bytes) and control records;
* the per-batch columns (location, producer, codec, ...) are kept once per batch as runs and expanded with
  Arrow's run-end decoding; the key columns (kind, key type, group, topic, partition) once per distinct key
  and expanded with ``take``; every other column is sparse (row index, value) and usually all-null.

Anything unusual goes to the reference path so the rows are always identical: a record the walker does not
fully understand (group metadata, types 3+, unknown versions, odd lengths, invalid UTF-8 is fine) becomes a
`LogRecord` given to `to_decoded_row`; a batch with a bad CRC, bad framing, record headers, a decompression
failure, or any exception, and every legacy (magic 0/1) entry, is decoded by `batches.decode_entry`.

The record walk is also implemented in C (`pipelines/decoding/_fastdecode.c`, optional extension) with the
same interface as `_walk_v2`; it is used when importable unless ``OFFSETLAKE_PURE_PYTHON=1``.
"""
from __future__ import annotations

import gc
import mmap
import os
import struct
from collections.abc import Iterator
from typing import Any

import crc32c as _crc32c_mod
import pyarrow as pa
import pyarrow.compute as pc

from pipelines.decoding import codecs
from pipelines.decoding.batches import (
    HEADER_SIZE_UP_TO_MAGIC,
    INT32_MAX,
    LEGACY_RECORD_OVERHEAD_V0,
    LOG_OVERHEAD,
    RECORD_BATCH_OVERHEAD,
    _CODEC_LABELS,
    _new_header,
    _new_record,
    _tail_problem,
    _varint,
    decode_entry,
    small_size_problem,
    torn_entry_problem,
)
from pipelines.decoding.policy import DEFAULT_POLICY, ReadPolicy
from pipelines.decoding.primitives import uuid_to_str
from pipelines.decoding.rows import problem_to_row, to_decoded_row
from schemas.decoded import DECODED_COLUMNS, DECODED_RECORD_SCHEMA, KIND_CONTROL, KIND_OFFSET_COMMIT
from schemas.messages import CONTROL_TYPE_NAMES
from schemas.records import CREATE_TIME, LOG_APPEND_TIME, NO_SEQUENCE, ReadProblem

__all__ = ["decode_segment_to_arrow", "HAVE_C_EXTENSION"]

# ---------------------------------------------------------------------------------------------- column groups
# per-row tuple, one per row (fast rows build it directly)
HOT_COLUMNS = ("offset", "timestamp", None, "is_tombstone", "value_version", "committed_offset", "leader_epoch",
               "metadata", "commit_timestamp", "expire_timestamp", "topic_id")  # slot 2 = key-table index
# key table entry, one per distinct key (and one per fallback row)
KEY_COLUMNS = ("record_kind", "key_type", "group_id", "topic", "partition")
# batch run value, one per batch (and one per fallback-batch row)
BATCH_COLUMNS = ("source", "offsets_partition", "batch_base_offset", "batch_first_offset", "batch_last_offset",
                 "batch_position", "timestamp_type", "producer_id", "producer_epoch", "is_transactional",
                 "is_control", "magic", "codec")
_GROUPED = set(HOT_COLUMNS) | set(KEY_COLUMNS) | set(BATCH_COLUMNS)
COLD_COLUMNS = tuple(c for c in DECODED_COLUMNS if c not in _GROUPED)
_HOT_FROM_ROW = tuple(c for c in HOT_COLUMNS if c is not None)
_TYPES = {f.name: f.type for f in DECODED_RECORD_SCHEMA}

_ENTRY_HEAD = struct.Struct(">qi").unpack_from
_V2_UNPACK = struct.Struct(">qiibIhiqqqhii").unpack_from
_I16 = struct.Struct(">h").unpack_from
_I32 = struct.Struct(">i").unpack_from
_I64 = struct.Struct(">q").unpack_from
_V3_HEAD = struct.Struct(">hqiH").unpack_from  # version, offset, leaderEpoch, metadata length
_V1_HEAD = struct.Struct(">hqH").unpack_from  # version, offset, metadata length
_V4_HEAD = struct.Struct(">hqi").unpack_from  # version, offset, leaderEpoch
_QQ = struct.Struct(">qq").unpack_from

_crc32c = _crc32c_mod.crc32c
_KTABLE_MAX = 1 << 18
_CONTROL_KEY = 0  # kcache slot of the control-record key-table entry (ints never equal key bytes)
_CONTROL_ENTRY = (KIND_CONTROL, None, None, None, None)
_CONTROL_NAMES = dict(CONTROL_TYPE_NAMES)
_FALLBACK = -1


class _Bail(Exception):
    """Internal: the fast walk cannot decode this batch; the reference path will."""


# ================================================================================================================
# pure-Python record walk (the reference for the C walker)
# ================================================================================================================
def _parse_key(k) -> tuple | None:
    """OffsetCommitKey (type 0/1) -> key-table entry, or None (reference path). Same acceptance as rows.py's
    fast path and `read_message_key` agree on: int16 lengths < 0x8000, exact length."""
    if k is None:
        return None
    n = len(k)
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


def _key_id(key, kcache: dict, ktable: list, gcache: dict) -> int:
    """Key-table index of a new offset-commit key (-1: not a plain offset-commit key), cached in ``kcache``.

    (``gcache`` is unused: kept for the C walker's call signature.)"""
    t = _parse_key(key)
    if t is None:
        if key is not None:
            kcache[key] = _FALLBACK
        return _FALLBACK
    kid = len(ktable)
    ktable.append(t)
    kcache[key] = kid
    return kid


def _other_value(buf, vs: int, ve: int):
    """OffsetCommitValue v0/v2/v4 at buf[vs:ve] (v1/v3 are inlined) -> (version, offset, leaderEpoch, metadata,
    commitTimestamp, expireTimestamp, topicId), or None for the reference path."""
    n = ve - vs
    if n < 2 or buf[vs] != 0:
        return None
    ver = buf[vs + 1]
    if ver == 0 or ver == 2:
        if n < 12:
            return None
        _, off, ml = _V1_HEAD(buf, vs)
        e = vs + 12 + ml
        if ml >= 0x8000 or e + 8 != ve:
            return None
        return (ver, off, -1, buf[vs + 12:e].decode("utf-8", "replace"), _I64(buf, e)[0], None, None)
    if ver == 4:
        if n < 15:
            return None
        _, off, ep = _V4_HEAD(buf, vs)
        p = vs + 14
        b = buf[p]
        if b == 0 or b >= 0x80:
            return None  # null metadata (an error) or a long metadata: reference path
        e = p + b  # 1 + (length+1) - 1
        if e + 8 > ve:
            return None
        meta = buf[p + 1:e].decode("utf-8", "replace")
        cts = _I64(buf, e)[0]
        p = e + 8
        tid = None
        if p == ve or (p + 1 == ve and buf[p] == 0):
            pass
        elif p + 19 == ve and buf[p] == 1 and buf[p + 1] == 0 and buf[p + 2] == 16:
            tid = uuid_to_str(bytes(buf[p + 3:ve]))
        else:
            return None
        return (4, off, ep, meta, cts, None, tid)
    return None


def _walk_v2(buf, pos: int, end: int, count: int, base_offset: int, ts_base: int, ts_scale: int, is_control: bool,
             rows: list, kcache: dict, ktable: list, gcache: dict, ctl_types: list, ctl_epochs: list,
             pending: list):
    """Walk ``count`` v2 records in ``buf[pos:end]``; returns the first record's offset (None if no records).

    Appends one hot tuple per record to ``rows``; a record it does not decode itself gets a ``None`` placeholder
    in ``rows`` and ``(row_index, offset_delta, timestamp, key, value)`` in ``pending``. Raises (anything) when
    the batch must go to the reference path; the caller rolls back what was appended.
    """
    append = rows.append
    kget = kcache.get
    varint = _varint
    v3h = _V3_HEAD
    v1h = _V1_HEAD
    i64 = _I64
    qq = _QQ
    first = None
    for _ in range(count):
        if pos >= end:
            raise _Bail
        b = buf[pos]
        if b < 0x80:
            length = (b >> 1) ^ -(b & 1)
            pos += 1
        else:
            length, pos = varint(buf, pos, 5)
        if length < 0:
            raise _Bail
        rec_end = pos + length
        if rec_end > end:
            raise _Bail
        pos += 1  # attributes
        b = buf[pos]
        if b < 0x80:
            tsd = (b >> 1) ^ -(b & 1)
            pos += 1
        elif buf[pos + 1] < 0x80:
            raw = (b & 0x7F) | (buf[pos + 1] << 7)
            tsd = (raw >> 1) ^ -(raw & 1)
            pos += 2
        else:
            tsd, pos = varint(buf, pos, 10)
        b = buf[pos]
        if b < 0x80:
            offd = (b >> 1) ^ -(b & 1)
            pos += 1
        else:
            offd, pos = varint(buf, pos, 5)
        b = buf[pos]
        if b < 0x80:
            klen = (b >> 1) ^ -(b & 1)
            pos += 1
        else:
            klen, pos = varint(buf, pos, 5)
        if klen >= 0:
            key = buf[pos:pos + klen]
            pos += klen
        else:
            key = None
        b = buf[pos]
        if b < 0x80:
            vlen = (b >> 1) ^ -(b & 1)
            pos += 1
        else:
            vlen, pos = varint(buf, pos, 5)
        vs = pos
        if vlen >= 0:
            pos += vlen
        if buf[pos] != 0:
            raise _Bail  # record headers: reference path
        pos += 1
        if pos != rec_end:
            raise _Bail
        offset = base_offset + offd
        if first is None:
            first = offset
        ts = ts_base + tsd * ts_scale
        if is_control:
            if key is not None and klen >= 4 and key[0] < 0x80:
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
                    i = len(rows)
                    ctl_types.append((i, _CONTROL_NAMES.get(ctype) or f"UNKNOWN({ctype})"))
                    if ctype == 0 or ctype == 1:
                        ctl_epochs.append((i, epoch))
                    append((offset, ts, kid, vlen < 0, None, None, None, None, None, None, None))
                    continue
        else:
            kid = kget(key) if key is not None else _FALLBACK
            if kid is None:
                kid = _key_id(key, kcache, ktable, gcache)
            if kid >= 0:
                if vlen < 0:
                    append((offset, ts, kid, True, None, None, None, None, None, None, None))
                    continue
                if vlen >= 2 and buf[vs] == 0:
                    ver = buf[vs + 1]
                    if ver == 3:
                        if vlen >= 16:
                            _, off, ep, ml = v3h(buf, vs)
                            e = vs + 16 + ml
                            if e + 8 == pos - 1 and ml < 0x8000:
                                append((offset, ts, kid, False, 3, off, ep,
                                        "" if ml == 0 else buf[vs + 16:e].decode("utf-8", "replace"),
                                        i64(buf, e)[0], None, None))
                                continue
                    elif ver == 1:
                        if vlen >= 12:
                            _, off, ml = v1h(buf, vs)
                            e = vs + 12 + ml
                            if e + 16 == pos - 1 and ml < 0x8000:
                                cts, ets = qq(buf, e)
                                append((offset, ts, kid, False, 1, off, -1,
                                        "" if ml == 0 else buf[vs + 12:e].decode("utf-8", "replace"),
                                        cts, ets, None))
                                continue
                    else:
                        t = _other_value(buf, vs, pos - 1)
                        if t is not None:
                            append((offset, ts, kid, False) + t)
                            continue
        pending.append((len(rows), offd, ts, key, buf[vs:vs + vlen] if vlen >= 0 else None))
        append(None)
    if pos != end:
        raise _Bail
    return first


try:  # pragma: no cover - depends on the build
    if os.environ.get("OFFSETLAKE_PURE_PYTHON") == "1":
        raise ImportError("disabled by OFFSETLAKE_PURE_PYTHON")
    from pipelines.decoding import _fastdecode as _c

    _c.init(_Bail, _key_id, _other_value, _CONTROL_ENTRY, _CONTROL_NAMES)
    _c_walk_v2 = _c.walk_v2
    HAVE_C_EXTENSION = True
except ImportError:
    _c_walk_v2 = None
    HAVE_C_EXTENSION = False


# ================================================================================================================
# chunk: the columns of up to ``batch_rows`` rows
# ================================================================================================================
class _Chunk:
    __slots__ = ("rows", "kcache", "ktable", "key_arrays", "run_ends", "run_vals", "sparse")

    def __init__(self):
        self.rows: list = []
        # The key table outlives a chunk (the same keys recur across the whole segment); its Arrow form is
        # extended with the new entries at each flush, and everything is dropped past _KTABLE_MAX entries.
        self.kcache: dict = {}
        self.ktable: list = []
        self.key_arrays: list[pa.Array] | None = None
        self.run_ends: list[int] = []
        self.run_vals: list[tuple] = []
        self.sparse: dict[str, list] = {c: [] for c in COLD_COLUMNS}

    def add_row(self, row: dict[str, Any], with_batch: bool) -> None:
        """A row dict from the reference path (``with_batch``: its batch columns too, as a run of one)."""
        rows = self.rows
        i = len(rows)
        kid = len(self.ktable)
        self.ktable.append(tuple(row[c] for c in KEY_COLUMNS))
        rows.append((row["offset"], row["timestamp"], kid) + tuple(row[c] for c in _HOT_FROM_ROW[2:]))
        sparse = self.sparse
        for c in COLD_COLUMNS:
            v = row[c]
            if v is not None:
                sparse[c].append((i, v))
        if with_batch:
            vals = tuple(row[c] for c in BATCH_COLUMNS)
            if self.run_vals and self.run_ends[-1] == i and self.run_vals[-1] == vals:
                self.run_ends[-1] = i + 1
            else:
                self.run_ends.append(i + 1)
                self.run_vals.append(vals)

    def fill_row(self, i: int, row: dict[str, Any]) -> None:
        """Fill placeholder ``i`` (a record of a fast batch) from a reference row; batch columns come from the run."""
        kid = len(self.ktable)
        self.ktable.append(tuple(row[c] for c in KEY_COLUMNS))
        self.rows[i] = (row["offset"], row["timestamp"], kid) + tuple(row[c] for c in _HOT_FROM_ROW[2:])
        sparse = self.sparse
        for c in COLD_COLUMNS:
            v = row[c]
            if v is not None:
                sparse[c].append((i, v))

    def rollback(self, n: int) -> None:
        del self.rows[n:]
        for lst in self.sparse.values():
            while lst and lst[-1][0] >= n:
                lst.pop()

    def flush(self) -> pa.RecordBatch:
        rows = self.rows
        n = len(rows)
        arrays: dict[str, pa.Array] = {}
        hot = list(zip(*rows))
        kids = pa.array(hot[2], pa.int32())
        for j, c in enumerate(HOT_COLUMNS):
            if c is not None:
                arrays[c] = pa.array(hot[j], _TYPES[c])
        ktable = self.ktable
        done = 0 if self.key_arrays is None else len(self.key_arrays[0])
        if done < len(ktable):
            new = list(zip(*ktable[done:]))
            fresh = [pa.array(new[j], _TYPES[c]) for j, c in enumerate(KEY_COLUMNS)]
            self.key_arrays = fresh if self.key_arrays is None else [
                pa.concat_arrays([old, f]) for old, f in zip(self.key_arrays, fresh)]
        for j, c in enumerate(KEY_COLUMNS):
            arrays[c] = self.key_arrays[j].take(kids)
        run_idx = pc.run_end_decode(pa.RunEndEncodedArray.from_arrays(
            pa.array(self.run_ends, pa.int32()), pa.array(range(len(self.run_ends)), pa.int32())))
        batch_cols = list(zip(*self.run_vals))
        for j, c in enumerate(BATCH_COLUMNS):
            arrays[c] = pa.array(batch_cols[j], _TYPES[c]).take(run_idx)
        for c, entries in self.sparse.items():
            if not entries:
                arrays[c] = pa.nulls(n, _TYPES[c])
            else:
                full = [None] * n
                for i, v in entries:
                    full[i] = v
                arrays[c] = pa.array(full, _TYPES[c])
                entries.clear()
        rows.clear()
        if len(ktable) > _KTABLE_MAX:
            self.kcache.clear()
            ktable.clear()
            self.key_arrays = None
        self.run_ends.clear()
        self.run_vals.clear()
        return pa.RecordBatch.from_arrays([arrays[c] for c in DECODED_COLUMNS], schema=DECODED_RECORD_SCHEMA)


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
    policy: ReadPolicy = DEFAULT_POLICY,
) -> Iterator[pa.RecordBatch]:
    """Decoded Arrow batches (`DECODED_RECORD_SCHEMA`) of one segment file: the rows of
    ``read_batches_from_file`` + ``to_decoded_row`` / ``problem_to_row``, in order, ``batch_rows`` at most per
    batch (a log batch never straddles two Arrow batches unless it alone exceeds ``batch_rows``).

    ``use_c``: None = the C walker when built, True = require it, False = pure Python.
    ``start_position``: an entry boundary to start at (incremental runs: where the previous run stopped); the
    rows are those ``read_batches_from_file(..., start_position=)`` gives, positions stay absolute.
    """
    if start_position < 0:
        raise ValueError(f"start_position must be >= 0, not {start_position}")
    if use_c is None:
        walk = _c_walk_v2 or _walk_v2
    elif use_c:
        if _c_walk_v2 is None:
            raise RuntimeError("the _fastdecode C extension is not built")
        walk = _c_walk_v2
    else:
        walk = _walk_v2
    src = source if source is not None else os.fspath(path)
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0 or start_position >= size:
            return
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        try:
            yield from _without_gc(_decode_buffer(mm, min(size, len(mm)), src, offsets_partition,
                                                  max(1, batch_rows), walk, start_position, policy))
        finally:
            mm.close()


def _without_gc(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Run ``batches`` with the cyclic GC paused while it builds a chunk, restored around every yield.

    Decoding allocates hundreds of thousands of small, acyclic, long-lived-until-flush objects; each one counts
    towards the GC thresholds and full collections then traverse them all (measured: about half the CPU time).
    Nothing here creates reference cycles, so pausing the collector loses nothing; the caller's own code runs
    with the GC in whatever state it was.
    """
    if not gc.isenabled():
        yield from batches
        return
    it = iter(batches)
    try:
        while True:
            gc.disable()
            try:
                batch = next(it)
            except StopIteration:
                return
            finally:
                gc.enable()
            yield batch
    finally:
        close = getattr(it, "close", None)
        if close is not None:
            close()


def _decode_buffer(mm, end: int, src: str, part: int, batch_rows: int, walk,
                   start: int = 0, policy: ReadPolicy = DEFAULT_POLICY) -> Iterator[pa.RecordBatch]:
    chunk = _Chunk()
    rows = chunk.rows
    kcache = chunk.kcache
    ktable = chunk.ktable
    run_ends = chunk.run_ends
    run_vals = chunk.run_vals
    ctl_types = chunk.sparse["control_type"]
    ctl_epochs = chunk.sparse["coordinator_epoch"]
    gcache: dict = {}
    pending: list = []
    v2_unpack = _V2_UNPACK
    crc32c = _crc32c
    labels = _CODEC_LABELS
    decompress = codecs.decompress
    pos = start
    while True:
        remaining = end - pos
        if remaining <= HEADER_SIZE_UP_TO_MAGIC:
            if remaining > 0:
                tail = mm[pos:end]
                chunk.add_row(problem_to_row(_tail_problem(tail, 0, len(tail), src, part, pos)), True)
            break
        offset0, size = _ENTRY_HEAD(mm, pos)
        if size < LEGACY_RECORD_OVERHEAD_V0:  # read_batches_from_file's problems
            zero = offset0 == 0 and size == 0 and mm[pos:end].count(0) == end - pos
            chunk.add_row(problem_to_row(small_size_problem(src, part, pos, end, offset0, size, zero)), True)
            break
        total = LOG_OVERHEAD + size
        if pos + total > end:
            chunk.add_row(problem_to_row(torn_entry_problem(src, part, pos, total, end, offset0)), True)
            break
        entry = mm[pos:pos + total]
        fast = False
        if entry[16] == 2 and total >= RECORD_BATCH_OVERHEAD:
            (base_offset, _length, leader_epoch, magic, crc, attributes, last_delta, base_ts, max_ts, producer_id,
             producer_epoch, base_sequence, count) = v2_unpack(entry, 0)
            if count >= 0 and crc32c(memoryview(entry)[21:]) == crc:
                n0 = len(rows)
                codec_id = attributes & 0x07
                log_append = attributes & 0x08
                is_control = (attributes & 0x20) != 0
                try:
                    if codec_id == 0:
                        buf, start, stop = entry, RECORD_BATCH_OVERHEAD, total
                    else:
                        buf = decompress(codec_id, entry[RECORD_BATCH_OVERHEAD:], magic=2,
                                         max_bytes=policy.max_batch_bytes)
                        start, stop = 0, len(buf)
                    if log_append:
                        first = walk(buf, start, stop, count, base_offset, max_ts, 0, is_control, rows, kcache,
                                     ktable, gcache, ctl_types, ctl_epochs, pending)
                    else:
                        first = walk(buf, start, stop, count, base_offset, base_ts, 1, is_control, rows, kcache,
                                     ktable, gcache, ctl_types, ctl_epochs, pending)
                    fast = True
                except Exception:  # noqa: BLE001 - anything odd: the reference path decodes this batch
                    chunk.rollback(n0)
                    pending.clear()
                if fast and first is not None:
                    if pending:
                        header = _new_header(
                            src, part, pos, base_offset, base_offset + last_delta, total, magic, crc, True,
                            attributes, labels[codec_id], LOG_APPEND_TIME if log_append else CREATE_TIME,
                            (attributes & 0x10) != 0, is_control, base_ts if attributes & 0x40 else None,
                            base_ts, max_ts, producer_id, producer_epoch, base_sequence, leader_epoch, count)
                        for i, offd, ts, key, value in pending:
                            if base_sequence >= 0:
                                seq = base_sequence + offd
                                if seq > INT32_MAX:
                                    seq -= 0x80000000
                            else:
                                seq = NO_SEQUENCE
                            rec = _new_record(header, base_offset + offd, ts, first, seq, key, value, ())
                            chunk.fill_row(i, to_decoded_row(rec))
                        pending.clear()
                    run_ends.append(len(rows))
                    run_vals.append((src, part, base_offset, first, base_offset + last_delta, pos,
                                     LOG_APPEND_TIME if log_append else CREATE_TIME, producer_id, producer_epoch,
                                     (attributes & 0x10) != 0, is_control, 2, labels[codec_id]))
        if not fast:
            for item in decode_entry(entry, 0, total, source=src, offsets_partition=part, position=pos,
                                     policy=policy):
                if isinstance(item, ReadProblem):
                    chunk.add_row(problem_to_row(item), True)
                else:
                    for rec in item[1]:
                        chunk.add_row(to_decoded_row(rec), True)
        pos += total
        if len(rows) >= batch_rows:
            yield chunk.flush()
    if rows:
        yield chunk.flush()
