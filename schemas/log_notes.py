"""The fixed list of data-log note kinds: what reading a data topic's log dir (its bounds and timestamps, for lag in
time) could not trust, and fell back from. One value per `LogNote.kind`.

A note is quarantine-style (kind, file, byte position, reason) but quarantines nothing: the segment's records are
still read, from the batch headers instead of an index, so a note never costs a wrong timestamp, only time. A
rebuild lists them in its summary (`log_notes`, `runs.summary`); they never fail a run.
"""
from __future__ import annotations

from dataclasses import dataclass

INDEX_MISSING = "index_missing"
"""A segment without its `.index` or `.timeindex` file (position -1): that segment is read from its batch headers."""
INDEX_TORN = "index_torn"
"""An index file whose entries stop being valid at `position` (a size that is not a whole number of entries, a
zero-filled tail a broker preallocated and never trimmed, entries out of order or past the segment): the entries
before it are used, the rest of the segment is read from its batch headers."""
INDEX_MISMATCH = "index_mismatch"
"""An index entry that disagrees with the segment when checked against it (a position that is not a batch, a
batch past the entry's offset, a time entry above its batch's largest timestamp): the index is not trusted from
that entry on."""
SEGMENT_TORN = "segment_torn"
"""A segment whose bytes stop framing before its end (not a zero-filled tail): what follows `position` is not part
of the log, as the broker's recovery would truncate it. After an unclean shutdown (no `.kafka_cleanshutdown`), also a
batch from the recovery point on that fails its checksum: the log ends before it, and the later segments are gone."""
BATCH_UNREADABLE = "batch_unreadable"
"""The batch holding an asked offset fails its checksum or cannot be decoded (`position`: the batch's): that
record's timestamp is unknown, so is the lag in time measured to it (null, never a guess)."""
SEGMENT_UNREADABLE = "segment_unreadable"
"""A segment, index or checkpoint that cannot be opened or read (permissions, a dangling link): the partition's
bounds and timestamps come from what could be read."""

LOG_NOTE_KINDS: tuple[str, ...] = (INDEX_MISSING, INDEX_TORN, INDEX_MISMATCH, SEGMENT_TORN, BATCH_UNREADABLE,
                                   SEGMENT_UNREADABLE)


@dataclass(frozen=True, slots=True)
class LogNote:
    """One thing a data log's reader did not trust: its kind (`LOG_NOTE_KINDS`), the file, the byte position in it
    (-1: the file as a whole) and why."""

    kind: str
    source: str
    position: int
    reason: str

    def as_json(self) -> dict:
        return {"kind": self.kind, "source": self.source, "position": self.position, "reason": self.reason}
