"""Where each data-topic partition's log starts and ends, read from what a broker left in its log dirs (for LAG and
lag in time offline).

Sources per log dir (spec §1.1 for the dir layout):
- `replication-offset-checkpoint`: the high watermark of every partition the broker hosted, as `ReplicaManager`
  last checkpointed it (every `replica.high.watermark.checkpoint.interval.ms`, 5 s by default, and at a clean
  shutdown). The high watermark is what `kafka-consumer-groups` shows as LOG-END-OFFSET (ListOffsets latest,
  read_uncommitted).
- the partition's own segments (`<topic>-<N>/<base>.log`, `local_log.LocalLog`): the offset after the last whole
  entry of the newest segment, i.e. the log end offset `LogLoader` would recover; the first segment's base offset,
  i.e. the log start offset, with the newest batch's timestamp type. Without `.kafka_cleanshutdown` in the log dir
  (an unclean shutdown) the segments from the partition's `recovery-point-offset-checkpoint` entry on are recovered
  as the broker would: the log ends before the first batch failing its checksum.
- `log-start-offset-checkpoint`: each partition's logStartOffset as the broker last checkpointed it (DeleteRecords
  moves it inside a segment); the log starts at the larger of it and the first segment's base offset.
Several log dirs (one broker's JBOD dirs, or several brokers' copies) are combined per partition by taking the
highest end offset; the row says which source gave it. The log start, its timestamp type and the timestamps lag in
time is measured to come from the copy whose segments reach furthest (`DataLogs.logs`); a former leader's copy on an
older leader epoch (`leader-epoch-checkpoint`) reaching past the copies on the newest is set aside, as its replica
truncates it. Partition dirs of one topic under different topic ids (`partition.metadata`) are two topics sharing a
name: the topic gets no row, and a warning.
"""
from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.fs as pafs

from pipelines.decoding.log_names import PARTITION_DIR, SKIPPED_DIR, is_internal_topic
from pipelines.io import storage
from pipelines.io.cluster import partition_metadata_topic_id
from pipelines.io.storage import Location
from pipelines.times import within_time_ms
from schemas.records import OFFSET_MAX, PARTITION_MAX

if TYPE_CHECKING:  # numpy's import, for the annotations only
    from pipelines.decoding.local_log import LocalLog

__all__ = ["CheckpointError", "DataLogs", "LogEndOffset", "data_logs", "ends_at", "log_end_offsets",
           "log_end_offsets_table",
           "parse_end_offsets_file", "parse_end_offsets_text", "read_offset_checkpoint", "segment_log_end_offset"]

REPLICATION_CHECKPOINT = "replication-offset-checkpoint"
LOG_START_CHECKPOINT = "log-start-offset-checkpoint"  # local_log.SOURCE_LOG_START_CHECKPOINT
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"  # in each partition dir (LeaderEpochCheckpointFile)
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"  # LogLoader.CleanShutdownFileName
SOURCE_CHECKPOINT = "replication-offset-checkpoint"
SOURCE_SEGMENT = "segment"
SOURCE_FILE = "file"

_CHECKPOINT_VERSION = 0  # OffsetCheckpointFile.CurrentVersion (Kafka 0.9-4.x)
# `partition.metadata` GETs in flight at once on an object store (a request waits on the network, not this process)
_METADATA_READERS = 32


def _is_data_topic(topic: str) -> bool:
    """Kafka's internal topics are not what consumer groups lag on. A topic a user named with a leading `__` is
    not one (`Topic.isInternal` names them, 4.0): a group's LAG on it is `kafka-consumer-groups`' like any other."""
    return not is_internal_topic(topic)



class CheckpointError(ValueError):
    """A checkpoint file that is not in `OffsetCheckpointFile`'s format; names the file and the line."""


@dataclass(frozen=True, slots=True)
class LogEndOffset:
    """One data-topic partition's end offset, where it came from, and when that source was written (ms); its start
    offset and where that came from, the timestamp type of its newest batch and the timestamp of the first record
    at its start, where the log dirs tell them."""

    topic: str
    partition: int
    log_end_offset: int
    source: str
    observed_at_ms: int | None
    log_start_offset: int | None = None
    log_start_source: str | None = None  # log-start-offset-checkpoint, segment
    timestamp_type: str | None = None  # CreateTime, LogAppendTime
    log_start_timestamp_ms: int | None = None


@dataclass
class DataLogs:
    """What the inputs' log dirs hold of the data topics: a row per partition, the partitions' logs where their
    segments were read (the copy reaching furthest), what could not be read (warnings) and what was not trusted
    (notes, quarantine-style). `close` lets the logs' files go."""

    rows: list[LogEndOffset]
    logs: dict  # (topic, partition) -> local_log.LocalLog
    warnings: list[str]

    @property
    def notes(self) -> list:
        return [n for log in self.logs.values() for n in log.notes]

    def close(self) -> None:
        for log in self.logs.values():
            log.close()


def read_offset_checkpoint(path: "str | os.PathLike | Location") -> dict[tuple[str, int], int]:
    """`CheckpointFile.read` for `OffsetCheckpointFile`: a version line (0), a count line, then `topic partition
    offset` per line. Raises `CheckpointError` on any other shape, as Kafka does."""
    loc = storage.location(path)
    name = loc.uri
    data = loc.read_bytes()

    def bad(line_no: int, why: str) -> CheckpointError:
        return CheckpointError(f"{name}: line {line_no}: {why}")

    try:
        lines = data.decode("utf-8").splitlines()
    except UnicodeDecodeError as e:  # the broker's reader throws too (CheckpointFile.java, 4.0: UTF_8 reader)
        raise bad(data.count(b"\n", 0, e.start) + 1, f"byte {e.start} is not UTF-8 text") from None

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
        if p > PARTITION_MAX or o > OFFSET_MAX:
            raise bad(i, f"partition past {PARTITION_MAX} or offset past {OFFSET_MAX} in {line!r}")
        out[(topic, p)] = o
    if len(entries) != expected:
        raise bad(2, f"says {expected} entries, the file holds {len(entries)}")
    return out


def segment_log_end_offset(partition_dir: str | os.PathLike) -> int | None:
    """The offset after the last whole entry of the partition's newest segment (its log end offset;
    `LocalLog.log_end_offset`): a v2 batch ends at baseOffset + lastOffsetDelta, a legacy entry (magic 0/1,
    compressed wrapper or not) at its own offset. A torn tail is not part of the log, as recovery truncates it. An
    empty newest segment ends where its name says. None when there is no segment."""
    from pipelines.decoding.local_log import LocalLog  # numpy: not for the serving commands that parse end offsets

    log = LocalLog("", -1, os.fspath(partition_dir))
    try:
        return log.log_end_offset
    finally:
        log.close()


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
            if PARTITION_DIR.match(loc.name) and not (loc / REPLICATION_CHECKPOINT).is_file():
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
    """Every data-topic partition's end offset (and start) found in the inputs' broker log dirs, and warnings for
    what could not be read (`data_logs`)."""
    found = data_logs(paths)
    found.close()
    return found.rows, found.warnings


def _checkpoint(cp: Location, what: str, warnings: list[str]):
    """The entries of an offset checkpoint file and its modification time (ms), or (None, None) when it is absent;
    a bad or unreadable one is a warning."""
    try:
        info = cp.info()
    except (OSError, storage.StorageError) as e:
        warnings.append(f"{what} not read: {e}")
        return None, None
    if info is None or info.type != pafs.FileType.File:
        return None, None
    try:
        return read_offset_checkpoint(cp), _mtime_ms(info)
    except (OSError, UnicodeDecodeError, CheckpointError, storage.StorageError) as e:
        warnings.append(f"{what} not read: {e}")
        return None, None


def data_logs(paths: Iterable["str | os.PathLike | Location"]) -> DataLogs:
    """Every data-topic partition found in the inputs' broker log dirs: its end offset (the highest any source
    gives), its start, and its log where its segments are on a local disk. What cannot be read never fails a
    rebuild: it is a warning, and LAG (or lag in time) goes unknown. On object storage only the checkpoints and each
    partition dir's `partition.metadata` (its topic id) are read: walking a data topic's segments there would take a
    ranged GET per batch, so partitions the replication checkpoint leaves out are counted in a warning instead."""
    from pipelines.decoding.local_log import LocalLog  # here: it imports numpy (~0.1-0.3 s, -X importtime)

    best: dict[tuple[str, int], LogEndOffset] = {}
    starts: dict[tuple[str, int], int] = {}  # log-start-offset-checkpoint, the largest over the log dirs
    logs: dict[tuple[str, int], LocalLog] = {}
    warnings: list[str] = []
    topic_ids: dict[str, dict[str, str]] = {}  # topic -> its partition dirs' topic ids -> a dir naming it
    copies: dict[tuple[str, int], list] = {}  # (latest leader epoch, segment row, log, dir) of each local copy
    high_watermarks: dict[tuple[str, int], list[LogEndOffset]] = {}  # in the order offered

    def offer(row: LogEndOffset) -> None:
        key = (row.topic, row.partition)
        cur = best.get(key)
        if cur is None or row.log_end_offset > cur.log_end_offset:
            best[key] = row

    for log_dir in _log_dirs(paths):
        hw, observed = _checkpoint(log_dir / REPLICATION_CHECKPOINT, "high watermarks", warnings)
        hw = {key: offset for key, offset in (hw or {}).items() if _is_data_topic(key[0])}
        dir_starts, _ = _checkpoint(log_dir / LOG_START_CHECKPOINT, "log start offsets", warnings)
        for key, offset in (dir_starts or {}).items():
            if _is_data_topic(key[0]):
                starts[key] = max(offset, starts.get(key, offset))
        try:
            entries = log_dir.listdir()
        except (OSError, storage.StorageError) as e:
            warnings.append(f"{log_dir}: cannot list directory: {e}")
            entries = []  # its high watermarks still count
        recovery_points = _recovery_points(log_dir, warnings)
        unwalked = 0
        walked: list[LogEndOffset] = []
        partitions = [(e, key) for e in entries if (key := _data_partition(e, warnings)) is not None]
        for (e, key), (named_in, topic_id) in zip(partitions, _topic_ids(log_dir, [e for e, _ in partitions])):
            if topic_id is not None:
                topic_ids.setdefault(key[0], {}).setdefault(topic_id, named_in)
            if log_dir.remote:
                unwalked += key not in best and key not in hw
                continue
            log = LocalLog(key[0], key[1], e.path, (dir_starts or {}).get(key),
                           None if recovery_points is None else recovery_points.get(key, 0))
            try:
                leo = log.log_end_offset
                newest = log.segments[-1].path if log.segments else log.deleted_newest
                newest_info = None if newest is None else log_dir.fs.get_file_info(newest)
            except OSError as err:
                warnings.append(f"{e.path}: log end offset not read: {err}")
                log.close()
                continue
            if leo is None:
                log.close()
                continue
            walked.append(LogEndOffset(key[0], key[1], leo, SOURCE_SEGMENT, _mtime_ms(newest_info)))
            copies.setdefault(key, []).append((_latest_leader_epoch(e.path), walked[-1], log, e.path))
            _bound_high_watermark(log, e.path, hw, warnings)
            # a mapped segment holds a file descriptor: a log kept mapped per partition ran a log dir of more
            # partitions than `ulimit -n` out of them, and every log read after that ended at its newest base offset
            log.close()
            held = logs.get(key)
            if held is None or leo > held.log_end_offset:
                logs[key] = log
        for (topic, partition), offset in hw.items():  # first: on a tie the high watermark is the row's source
            offer(row := LogEndOffset(topic, partition, offset, SOURCE_CHECKPOINT, observed))
            high_watermarks.setdefault((topic, partition), []).append(row)
        for row in walked:
            offer(row)
        if unwalked:
            warnings.append(f"{log_dir}: {unwalked} data-topic partition(s) not in {REPLICATION_CHECKPOINT}: their "
                            "log end offsets are not read from object storage (LAG unknown there)")
    _set_aside_diverged_copies(copies, high_watermarks, best, logs, warnings)
    _drop_topics_of_two_ids(topic_ids, best, logs, warnings)
    rows = [_with_start(row, logs.get(key), starts.get(key)) for key, row in sorted(best.items())]
    return DataLogs(rows, logs, warnings)


def _bound_high_watermark(log: LocalLog, path: str, hw: dict, warnings: list[str]) -> None:
    """A log dir's high watermark of `log` where the broker's load moves it (`UnifiedLog.updateHighWatermark`, 4.0:
    kept in [log start, log end]): down to the end recovery truncated the log to, or to the checkpointed start the
    loader emptied the log at (a warning: segments the dump holds are no part of the log)."""
    key, end = (log.topic, log.partition), log.log_end_offset
    if log.truncated_by_recovery and hw.get(key, -1) > end:
        hw[key] = end
    if log.deleted_below_start is not None:
        warnings.append(f"{path}: its segments end at {log.deleted_below_start}, before the log start {end} of "
                        f"{LOG_START_CHECKPOINT}: Kafka's loader deletes them and starts the log empty at {end}")
        if key in hw:
            hw[key] = end


def _latest_leader_epoch(partition_dir: str) -> int:
    """The latest leader epoch a copy of a partition holds records or leadership of: the last entry of its
    `leader-epoch-checkpoint` (`LeaderEpochCheckpointFile`, 0.11-4.x: a version line 0, a count, then `epoch
    startOffset` per line; a leader's entry is written when it is elected, `Partition.makeLeader`). -1 without a
    file that reads."""
    try:
        fd = os.open(os.path.join(partition_dir, LEADER_EPOCH_CHECKPOINT), os.O_RDONLY | os.O_NONBLOCK)  # a FIFO
        try:
            text = os.read(fd, 1 << 20).decode("utf-8") if stat.S_ISREG(os.fstat(fd).st_mode) else ""
        finally:
            os.close(fd)
        lines = [ln.split() for ln in text.splitlines() if ln.strip()]
        if len(lines) < 3 or lines[0] != ["0"] or len(lines) - 2 != int(lines[1][0]) or len(lines[-1]) != 2:
            return -1
        return max(-1, int(lines[-1][0]))
    except (OSError, UnicodeDecodeError, ValueError, IndexError):
        return -1


def _set_aside_diverged_copies(copies: dict, high_watermarks: dict, best: dict, logs: dict,
                               warnings: list[str]) -> None:
    """Copies of one partition (several brokers' log dirs) on different leader epochs: a copy on an older epoch
    reaching past every copy on the newest is a former leader's log past where the new leader's began (records
    appended on the old epoch and never replicated, an unclean election), which it truncates when it follows again
    (`OffsetsForLeaderEpoch`, `AbstractFetcherThread.truncateToEpochEndOffsets`): no end offset, start nor
    timestamp is read from it, with a warning. A copy without an epoch checkpoint is never set aside."""
    for key, seen in copies.items():
        newest = max(epoch for epoch, *_ in seen)
        reach = max(row.log_end_offset for epoch, row, *_ in seen if epoch == newest)
        stale = [c for c in seen if 0 <= c[0] < newest and c[1].log_end_offset > reach]
        if not stale:
            continue
        kept = [c for c in seen if all(c is not s for s in stale)]
        _, row, log, _ = max(kept, key=lambda c: c[1].log_end_offset)  # the first of the furthest, as the walk
        logs[key] = log
        if key in best:
            best[key] = max(high_watermarks.get(key, []) + [row], key=lambda r: r.log_end_offset)
        for epoch, gone, _, path in stale:
            warnings.append(f"{path}: a copy on leader epoch {epoch} ending at {gone.log_end_offset}, past the copies "
                            f"on epoch {newest} (ending at {reach}): a former leader's records its replica "
                            "truncates; not read")


def _recovery_points(log_dir: Location, warnings: list[str]) -> dict[tuple[str, int], int] | None:
    """None when the broker shut down cleanly (`.kafka_cleanshutdown`: nothing is recovered), else each partition's
    recovery point as `LogManager.loadLogs` takes it: from the checkpoint, 0 for a partition it does not name or
    when it cannot be read (the broker then recovers every segment)."""
    try:
        if (log_dir / CLEAN_SHUTDOWN_FILE).is_file():
            return None
    except (OSError, storage.StorageError):
        pass
    points, _ = _checkpoint(log_dir / RECOVERY_POINT_CHECKPOINT, "recovery points", warnings)
    return points or {}


def ends_at(found: DataLogs, time_ms: int) -> list[LogEndOffset]:
    """The rows of `found` as the log ends stood at `time_ms` (a what-if snapshot's as_of), for its LAG then: from
    the partition's segments, the offset of the first record appended after it (`LocalLog.end_at`; `observed_at` is
    `time_ms` where that is short of the dump's end); a high watermark alone only when its file was written by then.
    A partition whose end then is not known gets no row (LAG unknown), never the dump's end; at or after the time
    the dump saw it, its end is the dump's, observed then, whether its records' times are known or not."""
    out = []
    for row in found.rows:
        log = found.logs.get((row.topic, row.partition))
        if log is None:
            if row.observed_at_ms is not None and row.observed_at_ms <= time_ms:
                out.append(row)
            continue
        end = log.end_at(time_ms)
        log.close()  # mapped again when lag in time reads it
        held = log.log_end_offset
        if end is None and log.segments and row.observed_at_ms is not None and row.observed_at_ms <= time_ms:
            # its records' times do not say when they came (none has one, one cannot be read), but the dump saw
            # them all by as_of: its end, observed when it was, as a log whose times are known has it past the dump
            out.append(row)
        elif end is not None and end < held:
            out.append(replace(row, log_end_offset=end, source=SOURCE_SEGMENT, observed_at_ms=time_ms))
        elif end is not None and row.log_end_offset <= held:
            # every record it holds was appended by then; an as_of past the dump's time is answered with the dump's
            # end, observed when it was, not as if known then
            seen = row.observed_at_ms
            out.append(replace(row, observed_at_ms=time_ms if seen is None or seen > time_ms else seen))
        elif end is not None and row.observed_at_ms is not None and row.observed_at_ms <= time_ms:
            out.append(row)  # a high watermark past the segments, written by then
    return out


def _drop_topics_of_two_ids(topic_ids: dict[str, dict[str, str]], best: dict, logs: dict, warnings: list[str]) -> None:
    """A deleted topic's copy left beside its successor's (a broker offline at the delete, a stray log): the two
    share a name and nothing else, so no end offset of either is the topic's."""
    for topic, ids in sorted(topic_ids.items()):
        if len(ids) > 1:
            named = ", ".join(f"{i} in {path}" for i, path in sorted(ids.items()))
            warnings.append(f"topic {topic!r}: partition dirs of different topic ids ({named}): its end offsets "
                            "are not read (LAG unknown)")
            for key in [k for k in best if k[0] == topic]:
                del best[key]
                logs.pop(key, None)


def _with_start(row: LogEndOffset, log: LocalLog | None, checkpointed: int | None) -> LogEndOffset:
    """`row` with its partition's log start: its local log's (and the first record's time there), else what the
    log dir's checkpoint names."""
    if log is not None:
        start, source = log.log_start
        at = log.first_unconsumed(start) if start is not None else None
        log.close()  # mapped again when lag in time reads it
        return replace(row, log_start_offset=start, log_start_source=source, timestamp_type=log.timestamp_type,
                       log_start_timestamp_ms=None if at is None else at.timestamp_ms)
    if checkpointed is not None:
        return replace(row, log_start_offset=checkpointed, log_start_source=LOG_START_CHECKPOINT)
    return row


def _topic_ids(log_dir: Location, partition_dirs: list) -> list[tuple[str, str | None]]:
    """Each partition dir's name (its path, or its URI on an object store) and the topic id its `partition.metadata`
    names (None without one that reads: brokers write it from 2.8, `PartitionMetadataFile`). On an object store that
    is a GET each, retried as `Location` retries, `_METADATA_READERS` at a time: a log dir of hundreds of partitions
    waits a few round trips, not one per partition."""
    if not log_dir.remote:
        return [(e.path, _topic_id(e.path)) for e in partition_dirs]
    dirs = [log_dir.child_of(e) for e in partition_dirs]
    if not dirs:
        return []
    with ThreadPoolExecutor(min(_METADATA_READERS, len(dirs)), thread_name_prefix="offsetlake-topic-ids") as pool:
        return [(d.uri, topic_id) for d, topic_id in zip(dirs, pool.map(_remote_topic_id, dirs))]


def _remote_topic_id(partition_dir: Location) -> str | None:
    try:
        return partition_metadata_topic_id((partition_dir / "partition.metadata").read_text())
    except (OSError, UnicodeDecodeError, storage.StorageError):  # none (a broker before 2.8), or denied
        return None


def _topic_id(partition_dir: str) -> str | None:
    """`partition_metadata_topic_id` of a local partition dir, None without a file that reads."""
    try:
        fd = os.open(os.path.join(partition_dir, "partition.metadata"), os.O_RDONLY | os.O_NONBLOCK)  # a FIFO: no hang
        try:
            text = os.read(fd, 4096).decode("utf-8") if stat.S_ISREG(os.fstat(fd).st_mode) else ""
        finally:
            os.close(fd)
    except (OSError, UnicodeDecodeError):
        return None
    return partition_metadata_topic_id(text)


def _data_partition(entry, warnings: list[str]) -> tuple[str, int] | None:
    """(topic, partition) of a log dir's entry that is a data topic's partition directory; None for any other (one
    naming a partition past Kafka's ints is a warning)."""
    name = os.path.basename(entry.path)
    m = PARTITION_DIR.match(name)
    if not m or SKIPPED_DIR.search(name) or not _is_data_topic(m.group(1)) or entry.type != pafs.FileType.Directory:
        return None
    if int(m.group(2)) > PARTITION_MAX:
        warnings.append(f"{entry.path}: names partition {m.group(2)}, past Kafka's {PARTITION_MAX}; not read")
        return None
    return m.group(1), int(m.group(2))


def parse_end_offsets_file(data: bytes, source: str = "end offsets") -> dict[tuple[str, int], int]:
    """`parse_end_offsets_text` of a file's bytes: UTF-8, a byte-order mark (a spreadsheet's CSV) dropped; bytes that
    are not UTF-8 are a ValueError naming the line."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        seen = e.object  # after the byte-order mark, which e.start does not count
        line, column = seen.count(b"\n", 0, e.start) + 1, e.start - seen.rfind(b"\n", 0, e.start)
        raise ValueError(f"{source}: line {line}: not UTF-8 text (byte 0x{seen[e.start]:02x} at column {column})") \
            from None
    return parse_end_offsets_text(text, source)


def _is_header(parts: list[str]) -> bool:
    """`topic,partition,end_offset` as the README shows it, or any case of it, with the last column any `…offset`
    (LOG-END-OFFSET): a first line of other words is a mistake, not a header to skip."""
    topic, partition, offset = (p.lower() for p in parts)
    return topic == "topic" and partition == "partition" and offset.endswith("offset")


def parse_end_offsets_text(text: str, source: str = "end offsets") -> dict[tuple[str, int], int]:
    """End offsets a user gives: `kafka-get-offsets` output (`topic:partition:offset`, Kafka 3.0+) or whitespace /
    comma separated `topic partition offset` lines (a first line `topic,partition,end_offset` and `#` comments are
    skipped).

    Raises ValueError naming the line for anything else. A topic name can't hold `:` or whitespace, so a line
    splits unambiguously from the right.
    """
    out: dict[tuple[str, int], int] = {}
    first = True
    for n, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        colon = ":" in line and len(line.split()) == 1
        parts = line.rsplit(":", 2) if colon else line.replace(",", " ").split()
        if len(parts) != 3:
            raise ValueError(f"{source}: line {n}: expected 'topic:partition:offset' or 'topic partition offset', "
                             f"got {raw!r}")
        if first and not colon and _is_header(parts):
            first = False
            continue
        first = False
        topic, partition, offset = parts
        try:
            p, o = int(partition), int(offset)
        except ValueError:
            raise ValueError(f"{source}: line {n}: partition and offset must be integers, got {raw!r}") from None
        if p < 0 or o < 0:
            raise ValueError(f"{source}: line {n}: partition and offset must not be negative, got {raw!r}")
        if p > PARTITION_MAX or o > OFFSET_MAX:
            raise ValueError(f"{source}: line {n}: a partition is at most {PARTITION_MAX} and an offset at most "
                             f"{OFFSET_MAX}, got {raw!r}")
        out[(topic, p)] = o
    return out


def log_end_offsets_table(rows: list[LogEndOffset], snapshot_id: str):
    """The `log_end_offsets` rows of one snapshot as Arrow (the contract's columns, schemas/tables.py)."""
    return pa.table({
        "snapshot_id": pa.repeat(pa.scalar(snapshot_id, pa.string()), len(rows)),
        "topic": pa.array([r.topic for r in rows], pa.string()),
        "partition": pa.array([r.partition for r in rows], pa.int32()),
        "log_end_offset": pa.array([r.log_end_offset for r in rows], pa.int64()),
        "source": pa.array([r.source for r in rows], pa.string()),
        "observed_at": _timestamps([r.observed_at_ms for r in rows]),
        "log_start_offset": pa.array([r.log_start_offset for r in rows], pa.int64()),
        "log_start_source": pa.array([r.log_start_source for r in rows], pa.string()),
        "timestamp_type": pa.array([r.timestamp_type for r in rows], pa.string()),
        "log_start_timestamp": _timestamps([r.log_start_timestamp_ms for r in rows]),
    })


def _timestamps(ms: list[int | None]):
    """Epoch ms as the table's timestamps, an instant past years 1 to 9999 (a crafted record's) as the nearest end
    (`coordinator.decoded.within_time`)."""
    return pa.array([None if v is None else within_time_ms(v) * 1000 for v in ms],
                    pa.timestamp("us", tz="UTC"))
