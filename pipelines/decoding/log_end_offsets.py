"""Where each data-topic partition's log ended, read from what a broker left in its log dirs (for LAG offline).

Two sources per log dir (spec §1.1 for the dir layout):
- `replication-offset-checkpoint`: the high watermark of every partition the broker hosted, as `ReplicaManager`
  last checkpointed it (every `replica.high.watermark.checkpoint.interval.ms`, 5 s by default, and at a clean
  shutdown). The high watermark is what `kafka-consumer-groups` shows as LOG-END-OFFSET (ListOffsets latest,
  read_uncommitted).
- the tail of the partition's own segments (`<topic>-<N>/<base>.log`): the offset after the last whole entry of
  the newest segment, i.e. the log end offset `LogLoader` would recover.
Several log dirs (one broker's JBOD dirs, or several brokers' copies) are combined per partition by taking the
highest end offset; the row says which source gave it.
"""
from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass

import pyarrow.fs as pafs

from pipelines.decoding.segments import entry_heads
from pipelines.io import storage
from pipelines.io.storage import Location

__all__ = ["CheckpointError", "LogEndOffset", "log_end_offsets", "log_end_offsets_table", "parse_end_offsets_text",
           "read_offset_checkpoint", "segment_log_end_offset"]

REPLICATION_CHECKPOINT = "replication-offset-checkpoint"
SOURCE_CHECKPOINT = "replication-offset-checkpoint"
SOURCE_SEGMENT = "segment"
SOURCE_FILE = "file"

_CHECKPOINT_VERSION = 0  # OffsetCheckpointFile.CurrentVersion (Kafka 0.9-4.x)
_PARTITION_DIR = re.compile(r"^(.+)-(\d+)$")
_SKIPPED_DIR = re.compile(r"-(delete|future|stray)$")
_SEGMENT_NAME = re.compile(r"^(\d+)\.log$")


def _is_data_topic(topic: str) -> bool:
    """Kafka's internal topics (`__consumer_offsets`, `__transaction_state`, `__cluster_metadata`, …) are not
    what consumer groups lag on."""
    return not topic.startswith("__")



class CheckpointError(ValueError):
    """A checkpoint file that is not in `OffsetCheckpointFile`'s format; names the file and the line."""


@dataclass(frozen=True, slots=True)
class LogEndOffset:
    """One data-topic partition's end offset, where it came from, and when that source was written (ms)."""

    topic: str
    partition: int
    log_end_offset: int
    source: str
    observed_at_ms: int | None


def read_offset_checkpoint(path: "str | os.PathLike | Location") -> dict[tuple[str, int], int]:
    """`CheckpointFile.read` for `OffsetCheckpointFile`: a version line (0), a count line, then `topic partition
    offset` per line. Raises `CheckpointError` on any other shape, as Kafka does."""
    loc = storage.location(path)
    name = loc.uri
    lines = loc.read_bytes().decode("utf-8").splitlines()

    def bad(line_no: int, why: str) -> CheckpointError:
        return CheckpointError(f"{name}: line {line_no}: {why}")

    if not lines:
        raise bad(1, "empty file (expected the version line)")
    if lines[0].strip() != str(_CHECKPOINT_VERSION):
        raise bad(1, f"unrecognized version {lines[0].strip()!r} (expected {_CHECKPOINT_VERSION})")
    if len(lines) < 2 or not lines[1].strip().isdigit():
        raise bad(2, "expected the entry count")
    expected = int(lines[1])
    out: dict[tuple[str, int], int] = {}
    entries = [ln for ln in lines[2:] if ln.strip()]
    for i, line in enumerate(entries, start=3):
        parts = line.split()
        if len(parts) != 3:
            raise bad(i, f"expected 'topic partition offset', got {line!r}")
        topic, partition, offset = parts
        try:
            p, o = int(partition), int(offset)
        except ValueError:
            raise bad(i, f"partition and offset must be whole numbers, got {line!r}") from None
        if p < 0 or o < 0:
            raise bad(i, f"negative partition or offset in {line!r}")
        out[(topic, p)] = o
    if len(entries) != expected:
        raise bad(2, f"says {expected} entries, the file holds {len(entries)}")
    return out


def segment_log_end_offset(partition_dir: str | os.PathLike) -> int | None:
    """The offset after the last whole entry of the partition's newest segment (its log end offset).

    Walks the newest segment's entry heads only (`FileLogInputStream` framing): a v2 batch ends at
    baseOffset + lastOffsetDelta, a legacy entry (magic 0/1, compressed wrapper or not) at its own offset.
    The walk stops at the first entry that can't be framed (a torn tail is not part of the log, as recovery
    truncates it). An empty newest segment ends where its name says. None when there is no segment.
    """
    d = os.fspath(partition_dir)
    segments = sorted((int(m.group(1)), e.path) for e in os.scandir(d)
                      if (m := _SEGMENT_NAME.match(e.name)) and e.is_file())
    if not segments:
        return None
    base, path = segments[-1]
    heads = entry_heads(path)
    return max(base, int(heads.last_offsets.max()) + 1) if len(heads) else base


def _mtime_ms(info) -> int | None:
    return int(info.mtime.timestamp() * 1000) if info is not None and info.mtime is not None else None


def _log_dirs(paths: Iterable["str | os.PathLike | Location"]) -> list[Location]:
    """The broker log dirs among the inputs: a dir holding partition dirs or a replication checkpoint, or the
    parent of a given `__consumer_offsets-N` dir when that parent holds the checkpoint."""
    out: list[Location] = []
    for p in paths:
        try:
            loc = storage.location(p)
            if not loc.is_dir():
                continue
            if _PARTITION_DIR.match(loc.name) and not (loc / REPLICATION_CHECKPOINT).is_file():
                if (loc.parent / REPLICATION_CHECKPOINT).is_file():
                    loc = loc.parent
                else:
                    continue
        except (OSError, storage.StorageError):
            continue  # the decode reports an unreadable input; LAG only goes unknown
        if loc not in out:
            out.append(loc)
    return out


def log_end_offsets(paths: Iterable["str | os.PathLike | Location"]) -> tuple[list[LogEndOffset], list[str]]:
    """Every data-topic partition's end offset found in the inputs' broker log dirs, and warnings for what could
    not be read (a bad checkpoint, an unreadable segment): those never fail a rebuild, they only leave LAG unknown.

    On object storage only the replication checkpoint is read: walking a data topic's newest segment there would
    take a ranged GET per batch, so partitions the checkpoint leaves out are counted in a warning instead.
    """
    best: dict[tuple[str, int], LogEndOffset] = {}
    warnings: list[str] = []

    def offer(row: LogEndOffset) -> None:
        key = (row.topic, row.partition)
        cur = best.get(key)
        if cur is None or row.log_end_offset > cur.log_end_offset:
            best[key] = row

    for log_dir in _log_dirs(paths):
        cp = log_dir / REPLICATION_CHECKPOINT
        try:
            cp_info = cp.info()
        except (OSError, storage.StorageError) as e:
            warnings.append(f"high watermarks not read: {e}")
            cp_info = None
        if cp_info is not None and cp_info.type == pafs.FileType.File:
            try:
                hw = read_offset_checkpoint(cp)
            except (OSError, UnicodeDecodeError, CheckpointError, storage.StorageError) as e:
                warnings.append(f"high watermarks not read: {e}")
            else:
                observed = _mtime_ms(cp_info)
                for (topic, partition), offset in hw.items():
                    if _is_data_topic(topic):
                        offer(LogEndOffset(topic, partition, offset, SOURCE_CHECKPOINT, observed))
        try:
            entries = log_dir.listdir()
        except (OSError, storage.StorageError) as e:
            warnings.append(f"{log_dir}: cannot list directory: {e}")
            continue
        unwalked = 0
        for e in entries:
            name = os.path.basename(e.path)
            m = _PARTITION_DIR.match(name)
            if not m or _SKIPPED_DIR.search(name) or not _is_data_topic(m.group(1)) or e.type != pafs.FileType.Directory:
                continue
            if log_dir.remote:
                unwalked += (m.group(1), int(m.group(2))) not in best
                continue
            try:
                leo = segment_log_end_offset(e.path)
                newest = max((x for x in os.scandir(e.path) if _SEGMENT_NAME.match(x.name)), default=None,
                             key=lambda x: int(_SEGMENT_NAME.match(x.name).group(1)))
                newest_info = None if newest is None else log_dir.fs.get_file_info(newest.path)
            except OSError as err:
                warnings.append(f"{e.path}: log end offset not read: {err}")
                continue
            if leo is not None:
                offer(LogEndOffset(m.group(1), int(m.group(2)), leo, SOURCE_SEGMENT, _mtime_ms(newest_info)))
        if unwalked:
            warnings.append(f"{log_dir}: {unwalked} data-topic partition(s) not in {REPLICATION_CHECKPOINT}: their "
                            "log end offsets are not read from object storage (LAG unknown there)")
    return sorted(best.values(), key=lambda r: (r.topic, r.partition)), warnings


def _is_int(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return True


def parse_end_offsets_text(text: str, source: str = "end offsets") -> dict[tuple[str, int], int]:
    """End offsets a user gives: `kafka-get-offsets` output (`topic:partition:offset`, Kafka 3.0+) or whitespace /
    comma separated `topic partition offset` lines (a header line and `#` comments are skipped).

    Raises ValueError naming the line for anything else. A topic name can't hold `:` or whitespace, so a line
    splits unambiguously from the right.
    """
    out: dict[tuple[str, int], int] = {}
    for n, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if ":" in line and len(line.split()) == 1:
            parts = line.rsplit(":", 2)
        else:
            parts = line.replace(",", " ").split()
        if len(parts) != 3:
            raise ValueError(f"{source}: line {n}: expected 'topic:partition:offset' or 'topic partition offset', "
                             f"got {raw!r}")
        topic, partition, offset = parts
        if n == 1 and not _is_int(partition) and not _is_int(offset):
            continue  # a header line (`topic,partition,end_offset`)
        try:
            p, o = int(partition), int(offset)
        except ValueError:
            raise ValueError(f"{source}: line {n}: partition and offset must be integers, got {raw!r}") from None
        if p < 0 or o < 0:
            raise ValueError(f"{source}: line {n}: partition and offset must not be negative, got {raw!r}")
        out[(topic, p)] = o
    return out


def log_end_offsets_table(rows: list[LogEndOffset], snapshot_id: str):
    """The `log_end_offsets` rows of one snapshot as Arrow (the contract's columns, schemas/tables.py)."""
    import pyarrow as pa

    return pa.table({
        "snapshot_id": pa.array([snapshot_id] * len(rows), pa.string()),
        "topic": pa.array([r.topic for r in rows], pa.string()),
        "partition": pa.array([r.partition for r in rows], pa.int32()),
        "log_end_offset": pa.array([r.log_end_offset for r in rows], pa.int64()),
        "source": pa.array([r.source for r in rows], pa.string()),
        "observed_at": pa.array([None if r.observed_at_ms is None else r.observed_at_ms * 1000 for r in rows],
                                pa.timestamp("us", tz="UTC")),
    })
