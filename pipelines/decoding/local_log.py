"""One data-topic partition's log as a broker's log dir holds it (`<topic>-<N>/`, Kafka's `LocalLog`/`UnifiedLog`,
0.10.1-4.x): its segments in base-offset order, its bounds, and the timestamp at any offset, with no live cluster.

* logStartOffset: the first segment's base offset, or the log dir's `log-start-offset-checkpoint` when that says
  more (`LogLoader`: the larger of the two: DeleteRecords moves the start inside a segment, retention deletes whole
  segments after the checkpoint was written); a checkpoint past the segments' end empties the log there
  (`LogLoader.deleteSegmentsIfLogStartGreaterThanLogEnd`, 4.0: start = end = the checkpoint);
* logEndOffset: after the last whole batch of the newest segment (what recovery would keep), the newest segment's
  base offset when it is empty;
* the first record a consumer is handed at or after an offset (`first_unconsumed`): its own timestamp, read from the
  one batch holding it, and the largest timestamp of the records the log dir holds up to it, which is what lag in
  time is measured to (a producer's clock going backwards never makes a later record look older than one before it).

What is read: each segment's name, the newest segment's tail from its last index entry; per asked offset, its
segment's indexes, a few headers and one batch (`log_segment`); per segment below an asked one, its time index's last
entry and the headers after its last offset-index entry. O(segments + asked offsets), never the whole log, unless an
index is missing or torn (then that segment's headers, with a note).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cached_property

from pipelines.decoding.log_names import SEGMENT_NAME
from pipelines.decoding.log_segment import NO_TIMESTAMP, UNREADABLE, Found, LogSegment
from schemas.log_notes import SEGMENT_UNREADABLE, LogNote
from schemas.records import NO_TIMESTAMP_TYPE, OFFSET_MAX

__all__ = ["LocalLog", "Position", "SOURCE_LOG_START_CHECKPOINT", "SOURCE_SEGMENT_START"]

SOURCE_LOG_START_CHECKPOINT = "log-start-offset-checkpoint"
SOURCE_SEGMENT_START = "segment"


@dataclass(frozen=True, slots=True)
class Position:
    """Where a consumer at some offset stands in the log: the first record it would be handed (None: none is left
    before the log end, only transaction markers if anything), its own timestamp and the largest timestamp of the
    records the log dir holds up to it (both None when unknown: no such record read, or a magic 0 one)."""

    offset: int | None
    timestamp_ms: int | None
    max_timestamp_ms: int | None
    timestamp_type: str | None


class LocalLog:
    """The segments of one `<topic>-<N>` directory. `checkpoint_start`: the log dir's `log-start-offset-checkpoint`
    value for the partition, if it has one. `recovery_point`: None when the broker shut down cleanly, else where
    its recovery starts (`recovery-point-offset-checkpoint`, 0 without one). Files are mapped as they are read;
    `close` lets them go."""

    def __init__(self, topic: str, partition: int, path: str, checkpoint_start: int | None = None,
                 recovery_point: int | None = None):
        self.topic = topic
        self.partition = partition
        self.path = path
        self.checkpoint_start = checkpoint_start
        self.recovery_point = recovery_point
        self.truncated_by_recovery = False  # a batch from the recovery point on failed: the log ends before it
        # the end its segments reached when the log-start-offset-checkpoint names an offset past it: the loader
        # deleted them (None: it did not)
        self.deleted_below_start: int | None = None
        self.deleted_newest: str | None = None  # the newest of those segments' path
        self.notes: list[LogNote] = []
        self.segments: list[LogSegment] = []
        try:
            entries = list(os.scandir(path))
        except OSError as e:
            self.notes.append(LogNote(SEGMENT_UNREADABLE, path, -1, f"partition directory not listed: {e}"))
            entries = []
        found = []
        for e in entries:
            m = SEGMENT_NAME.match(e.name)
            if m is None:
                continue  # .index, .timeindex, .txnindex, .snapshot, .deleted, .cleaned, .swap, checkpoints
            if int(m.group(1)) > OFFSET_MAX:
                self.notes.append(LogNote(SEGMENT_UNREADABLE, e.path, -1,
                                          f"segment not read: its name is past Kafka's offsets ({OFFSET_MAX})"))
                continue
            try:
                if not e.is_file():
                    continue
                st = e.stat()
                found.append(LogSegment(e.path, int(m.group(1)), st.st_size, self.notes, st.st_mtime_ns // 1_000_000))
            except OSError as err:
                self.notes.append(LogNote(SEGMENT_UNREADABLE, e.path, -1, f"segment not read: {err}"))
        self.segments = sorted(found, key=lambda s: s.base_offset)
        self._largest_below: dict[int, int] = {}  # segment index -> largest timestamp of the segments before it

    def __repr__(self) -> str:
        return f"LocalLog({self.topic!r}, {self.partition}, {len(self.segments)} segments)"

    def close(self) -> None:
        for s in self.segments:
            s.close()

    def _safely(self, segment: LogSegment, read, default):
        try:
            return read()
        except OSError as e:
            self.notes.append(LogNote(SEGMENT_UNREADABLE, segment.path, -1, f"segment not read: {e}"))
            return default

    # -- bounds --------------------------------------------------------------------------------------------------
    @cached_property
    def log_start(self) -> tuple[int | None, str | None]:
        """(logStartOffset, where it came from: `log-start-offset-checkpoint` or `segment`) as `LogLoader.load` sets
        it: the larger of the checkpoint and the first segment's base offset, its name and never its batches (the
        cleaner keeps a cleaned segment's base offset though the records at its head are gone, so a compacted log
        still starts there, as ListOffsets EARLIEST says); (None, None) without a segment or a checkpoint."""
        first = self.segments[0].base_offset if self.segments else None
        cp = self.checkpoint_start
        if cp is not None and (first is None or cp > first):
            return cp, SOURCE_LOG_START_CHECKPOINT
        return first, None if first is None else SOURCE_SEGMENT_START

    @property
    def log_start_offset(self) -> int | None:
        return self.log_start[0]

    @cached_property
    def _end(self) -> tuple[int | None, str | None]:
        """(logEndOffset, the newest batch's timestamp type): after the newest segment's last whole batch; its base
        offset when it holds none (recovery truncates what does not frame, and the segment stays, named after its
        base offset; a follower's truncation to its base offset empties it, `LocalLog.truncateTo`), the type then
        the newest batch's of a segment before it; None without segments. An OSError reading the newest segment is
        raised, never taken for an empty segment: its base offset would be a silently wrong end."""
        if not self.segments:
            return None, None
        if self.recovery_point is not None:
            end = self._recovered_end()
        else:
            s = self.segments[-1]
            tail = s.tail()
            end = (s.base_offset, self._newest_type_before(len(self.segments) - 1)) if tail is None else (
                max(s.base_offset, tail.last_offset + 1), tail.timestamp_type)
        cp = self.checkpoint_start
        if cp is not None and end[0] < cp:
            # LogLoader.deleteSegmentsIfLogStartGreaterThanLogEnd (4.0; after recovery, clean shutdown or not):
            # segments ending before the checkpointed start (a crash, files deleted by hand) are deleted and an
            # empty segment is opened at the start, so the log starts and ends there and holds no batch
            self.deleted_below_start, self.deleted_newest = end[0], self.segments[-1].path
            self.close()
            self.segments = []
            return cp, None
        return end

    def _newest_type_before(self, k: int) -> str | None:
        """The timestamp type of the newest batch of the segments before segment `k` (None: they hold none, or the
        one holding it cannot be read: a note)."""
        for s in reversed(self.segments[:k]):
            tail = self._safely(s, s.tail, None)
            if tail is not None:
                return tail.timestamp_type
        return None

    def _recovered_end(self) -> tuple[int, str | None]:
        """`LogLoader.recoverLog` after an unclean shutdown: each segment from the one holding the recovery point on
        is recovered (`LogSegment.recover`), the first batch failing its checksum truncates the log, and the later
        segments are deleted, so their records are no part of it."""
        tail, base = None, self.segments[0].base_offset
        for k in range(self._segment_of(self.recovery_point), len(self.segments)):
            s = self.segments[k]
            tail, truncated = s.recover()
            base = s.base_offset
            if truncated:
                self.truncated_by_recovery = True
                for gone in self.segments[k + 1:]:
                    gone.close()
                del self.segments[k + 1:]
                break
        if tail is None:
            return base, self._newest_type_before(k)
        return max(base, tail.last_offset + 1), tail.timestamp_type

    @property
    def log_end_offset(self) -> int | None:
        return self._end[0]

    @property
    def timestamp_type(self) -> str | None:
        """The timestamp type of the newest batch (the topic's `message.timestamp.type` as it was last written)."""
        return self._end[1]

    # -- timestamps ----------------------------------------------------------------------------------------------
    def _segment_of(self, offset: int) -> int:
        """The index of the segment whose base offset is the largest at or below `offset` (0 below the first)."""
        lo, hi = 0, len(self.segments)
        while lo < hi:
            mid = (lo + hi) // 2
            if self.segments[mid].base_offset <= offset:
                lo = mid + 1
            else:
                hi = mid
        return max(0, lo - 1)

    def _largest_before_segment(self, k: int) -> int | None:
        """The largest timestamp of the records of segments 0..k-1 (each read from its indexes: `largest_timestamp`);
        None when one of them cannot be read (a note): leaving it out could only make a record look older."""
        done = max((i for i in self._largest_below if i <= k), default=0)
        best = self._largest_below.get(done, NO_TIMESTAMP)
        for i in range(done, k):
            if best is None:
                break
            s = self.segments[i]
            got = self._safely(s, s.largest_timestamp, None)
            best = None if got is None else max(best, got)
            self._largest_below[i + 1] = best
        return best

    def first_unconsumed(self, offset: int) -> Position | None:
        """Where a consumer whose next offset is `offset` stands: the first record at or after it (at or after the
        log start when it is below it) that a consumer is handed, its timestamp, and the largest timestamp up to it.
        None when the answer is unknown (the batch holding it, or a segment before it, cannot be read). A Position
        with offset None: nothing a consumer is handed lies between `offset` and the log end."""
        start = self.log_start_offset
        if start is not None and offset < start:
            offset = start
        end = self.log_end_offset
        if end is None or offset >= end:
            return Position(None, None, None, None)
        k = self._segment_of(offset)
        while k < len(self.segments):
            s = self.segments[k]
            found = self._safely(s, lambda: s.find(offset), UNREADABLE)
            if found is UNREADABLE:
                return None
            if isinstance(found, Found):
                before = self._largest_before_segment(k)
                if before is None:
                    return None
                largest = max(found.max_timestamp, before)
                return Position(found.offset, None if found.timestamp == NO_TIMESTAMP else found.timestamp,
                                None if largest == NO_TIMESTAMP else largest,
                                None if found.timestamp_type == NO_TIMESTAMP_TYPE else found.timestamp_type)
            k += 1
        return Position(None, None, None, None)

    def _held_nothing_by(self, time_ms: int) -> bool:
        """Whether a log that holds no record (its one segment empty: a new partition, retention's roll, a follower's
        truncation) was already so at `time_ms`. Kafka counts such a segment's largest timestamp as its file's last
        modification (`LogSegment.largestTimestamp`, 4.0: `lastModified()` without a record's), so ListOffsets for
        a time up to it finds that segment after the time, and none there: the segment was created (or emptied)
        later, and what the log held before it, the records below its base offset, is not known."""
        modified = self.segments[-1].last_modified_ms
        return modified is not None and modified <= time_ms

    def end_at(self, time_ms: int) -> int | None:
        """The log end offset as it stood at `time_ms`: the offset of the first record appended after it, which is
        what `ListOffsets` for `time_ms + 1` gives (`UnifiedLog.fetchOffsetByTimestamp`: the first segment, then
        batch, whose largest timestamp so far passes it, then its first record that does; a batch the cleaner
        emptied, its base offset: `log_segment.LogSegment.first_after`), the log end when none does. "So far"
        because a producer's CreateTime may go backwards: a record stamped earlier but written after a later-stamped
        one was appended after that one. None when unknown: a record up to it cannot be read, the
        log has no timestamps (magic 0), the first record after `time_ms` is the oldest the log dir holds and
        records before it are gone (retention, the cleaner), whose times are not known, or the log holds no record
        and its segment was modified after `time_ms` (`_held_nothing_by`)."""
        end = self.log_end_offset
        if end is None:
            return None
        if not self.segments:
            return None  # the loader deleted every segment below its start: those records' times are not known
        k, largest = 0, NO_TIMESTAMP
        while k < len(self.segments):
            largest = self._largest_before_segment(k + 1)
            if largest is None:
                return None
            if largest > time_ms:
                break
            k += 1
        else:
            # (an empty active segment, just rolled, says nothing of the records before it)
            if largest == NO_TIMESTAMP and end > self.segments[0].base_offset:
                return None
            if largest == NO_TIMESTAMP and not self._held_nothing_by(time_ms):
                return None
            return end
        s = self.segments[k]
        found = self._safely(s, lambda: s.first_after(time_ms), UNREADABLE)
        if found is UNREADABLE or found is None:
            return None  # its batch cannot be read, or its index says a record passes the time its batches do not
        offset, first_held = found
        # (a segment before it may be empty: the cleaner keeps the segment it cleaned every record out of)
        if first_held and offset > 0 and all(held.size == 0 for held in self.segments[:k]):
            return None  # the records before the oldest held one were appended before it, at times not known
        return min(offset, end)
