"""Finding `__consumer_offsets-N` segment files on disk and reading them in log order.

Mirrors what `UnifiedLog`/`LogLoader` (Kafka 2.8-4.x) treat as a partition's data: the `<20-digit base>.log` files
of a `__consumer_offsets-N` directory, in numeric base-offset order (spec §1.1). Index, time-index, txn-index,
producer snapshots and checkpoints are not data; `.deleted`/`.cleaned` files and `-delete`/`-future`/`-stray`
directories are skipped; a `.log.swap` file (a cleaned or split segment awaiting rename) is read in place of the
segments Kafka's recovery deletes for it (`_InterruptedSwaps`), which are reported; a `.log` not named by a base
offset, or in a partition directory not by the 20 digits Kafka names it with (`9.log`: `LogSegment.open` opens
`00000000000000000009.log`), a file named like a partition directory and a directory named like a copy of one
(`__consumer_offsets-3.bak`) are reported, not read.

An input may also be an object-store URI (`s3://bucket/prefix`, `pipelines/io/storage.py`): its keys are listed
once and walked as the same directory tree (key prefixes are the directories); the segments keep their URIs.
"""
from __future__ import annotations

import mmap
import os
import re
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from pipelines.decoding.batches import BatchItem, read_batches_from_file
from pipelines.decoding.dump_files import is_dump_name
from pipelines.decoding.framing import EntryHeads, walk_entry_heads
from pipelines.decoding.log_names import (OFFSETS_PARTITION_DIR, PARTITION_DIR, SEGMENT_NAME, SKIPPED_DIR,
                                          duplicate_partition_dirs, is_internal_topic)
from pipelines.decoding.policy import DEFAULT_POLICY, ReadPolicy
from schemas.records import OFFSET_MAX, PARTITION_MAX, LogRecord, ReadProblem

__all__ = ["DuplicateLogDirError", "InputError", "SegmentFile", "discover_segments", "entry_heads", "read_log",
           "read_segment_batches"]

OFFSETS_TOPIC = "__consumer_offsets"
_SKIPPED_SUFFIXES = (".deleted", ".cleaned")
_SWAP_SUFFIX = ".swap"

PathArg = str | os.PathLike


class _Entry:
    """What `os.scandir` gives, for a key listed from an object store."""

    __slots__ = ("name", "path", "size", "_dir")

    def __init__(self, name: str, path: str, is_dir: bool, size: int):
        self.name, self.path, self._dir, self.size = name, path, is_dir, size

    def is_dir(self) -> bool:
        return self._dir


class _LocalTree:
    """The file system calls discovery makes, on disk."""

    lexists = staticmethod(os.path.lexists)
    isdir = staticmethod(os.path.isdir)
    realpath = staticmethod(os.path.realpath)

    @staticmethod
    def scandir(p: str) -> list:
        with os.scandir(p) as it:
            return list(it)

    @staticmethod
    def abspath(p: str) -> str:
        return os.path.abspath(p)

    @staticmethod
    def size(p: str) -> int:
        return os.stat(p).st_size

    @staticmethod
    def regular(p: str) -> bool:
        return stat.S_ISREG(os.stat(p).st_mode)

    @staticmethod
    def readable(p: str) -> bool:
        return os.access(p, os.R_OK)


class _ObjectTree:
    """The same calls over one recursive listing of an object-store prefix (`s3://…`); `recursive=False`: over its
    children alone (a listing's requests follow the keys it lists, and a dump's keys are mostly segment files')."""

    def __init__(self, uri: str, recursive: bool = True):
        # imported here, not at module level: pyarrow ~0.45 s, pyarrow.fs ~0.05 s of import (python -X importtime)
        import pyarrow.fs as pafs

        from pipelines.io import storage

        self._root = storage.location(uri)
        self._scheme = self._root.uri.split("://", 1)[0] + "://"
        self._kids: dict[str, list[_Entry]] = {}
        self._sizes: dict[str, int] = {}
        root_info = self._root.info()
        self._root_type = root_info.type
        if root_info.type == pafs.FileType.File:
            self._sizes[self._root.uri] = int(root_info.size)
            return
        for info in self._root.listdir(recursive=recursive):
            uri = self._scheme + info.path
            parent, name = uri.rsplit("/", 1)
            is_dir = info.type == pafs.FileType.Directory
            self._kids.setdefault(parent, []).append(_Entry(name, uri, is_dir, 0 if is_dir else int(info.size)))
            if is_dir:
                self._kids.setdefault(uri, [])
            else:
                self._sizes[uri] = int(info.size)
        if root_info.type == pafs.FileType.Directory:
            self._kids.setdefault(self._root.uri, [])

    def lexists(self, p: str) -> bool:
        p = p.rstrip("/")
        return p in self._kids or p in self._sizes

    def isdir(self, p: str) -> bool:
        return p.rstrip("/") in self._kids

    def realpath(self, p: str) -> str:
        return p.rstrip("/")

    def scandir(self, p: str) -> list:
        return sorted(self._kids.get(p.rstrip("/"), []), key=lambda e: e.name)

    def abspath(self, p: str) -> str:
        return p.rstrip("/")

    def size(self, p: str) -> int:
        return self._sizes[p]

    def regular(self, p: str) -> bool:
        return p in self._sizes  # an object, not a prefix

    def readable(self, p: str) -> bool:
        return True  # a denied GET is reported by the reader, as an `unreadable` row


def _tree(p: str, recursive: bool = True):
    # imported here, not at module level: pyarrow ~0.45 s, pyarrow.fs ~0.05 s of import (python -X importtime)
    from pipelines.io import storage

    return _ObjectTree(p, recursive) if storage.is_remote(p) else _LocalTree


class InputError(FileNotFoundError):
    """An input path given by the user does not exist (the CLI maps this to exit code 2)."""


class DuplicateLogDirError(InputError):
    """Two directories of one log dir name one partition (`log_names.duplicate_partition_dirs`): Kafka's broker does
    not start on it, so no log of that partition is the one Kafka would read (exit code 2)."""


@dataclass(frozen=True, slots=True)
class SegmentFile:
    """One `.log` segment: its path, the N of `__consumer_offsets-N` (-1 if unknown), base offset and size."""

    path: str
    offsets_partition: int
    base_offset: int
    size: int


def discover_segments(paths: PathArg | Iterable[PathArg]) -> tuple[list[SegmentFile], list[ReadProblem]]:
    """Resolve input paths into segment files sorted by (partition, numeric base offset), plus what was not read.

    Each path may be a broker log dir (holding `__consumer_offsets-N` dirs), one `__consumer_offsets-N` dir, a
    directory of bare `.log` files (partition -1), or a single `.log` file. Raises `InputError` if a path does not
    exist, `DuplicateLogDirError` if a log dir holds two directories of one partition. Empty (0-byte) `.log` files
    are an empty partition's active segment and are skipped without a problem. The same segment reached twice
    through different paths is read once (once per partition directory it is linked into); two different files
    claiming the same (partition, base offset) (a partition's copies from two log dirs) are both given: which one
    Kafka's reading takes is `overlaps.kafka_reading`'s, the other's records a `duplicate_segment` row.
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    segments: list[SegmentFile] = []
    problems: list[ReadProblem] = []
    given: dict[str, set[str]] = {}  # a log dir -> its `__consumer_offsets-N` directories given as inputs themselves
    for p in paths:
        p = os.fspath(p)
        tree = _tree(p)
        if not tree.lexists(p):
            raise InputError(f"input path does not exist: {p}")
        log_dir, name = os.path.split(tree.abspath(p).rstrip("/") if "://" in p else os.path.abspath(p))
        if OFFSETS_PARTITION_DIR.match(name) and tree.isdir(p):
            given.setdefault(log_dir, set()).add(name)
        _discover_path(p, tree, segments, problems)
    for log_dir, names in given.items():  # as a log dir's own listing is (`_discover_log_dir`)
        _refuse_duplicates(log_dir, names)

    seen_real: dict[str, set[int]] = {}  # a file -> the partitions it was read for
    unique: list[SegmentFile] = []
    for seg in segments:
        real = seg.path if "://" in seg.path else os.path.realpath(seg.path)
        read_for = seen_real.setdefault(real, set())
        # one file linked into two partition directories is each one's segment, as Kafka loads each directory
        if seg.offsets_partition in read_for or (read_for and (seg.offsets_partition < 0 or min(read_for) < 0)):
            continue
        read_for.add(seg.offsets_partition)
        unique.append(seg)
    unique.sort(key=lambda s: (s.offsets_partition, s.base_offset, s.path))
    return unique, problems


def read_segment_batches(seg: SegmentFile, policy: ReadPolicy = DEFAULT_POLICY) -> Iterator[BatchItem | ReadProblem]:
    """All entries of one segment, as `read_batches_from_file` yields them; an OS error becomes `unreadable`."""
    # imported here, not at module level: pyarrow ~0.45 s, pyarrow.fs ~0.05 s of import (python -X importtime)
    from pipelines.io import storage

    try:
        with storage.location(seg.path).as_local_file() as local:  # an object is fetched into a temp file first
            yield from read_batches_from_file(local, offsets_partition=seg.offsets_partition, policy=policy,
                                              source=seg.path)
    except (OSError, storage.StorageError) as e:
        yield _problem(seg.path, seg.offsets_partition, "unreadable", f"cannot read segment: {e}")


def read_log(paths: PathArg | Iterable[PathArg]) -> Iterator[LogRecord | ReadProblem]:
    """Every record of every discovered segment in log order (partition, then base offset, then file order).

    Discovery runs eagerly (so a missing path raises `InputError` at call time); discovery problems come first.
    """
    segments, problems = discover_segments(paths)
    return _iter_log(segments, problems)


def _iter_log(segments: list[SegmentFile], problems: list[ReadProblem]) -> Iterator[LogRecord | ReadProblem]:
    yield from problems
    for seg in segments:
        for item in read_segment_batches(seg):
            if type(item) is tuple:
                yield from item[1]
            else:
                yield item


# ----------------------------------------------------------------------------------------------------------------
def _problem(path: str, partition: int, kind: str, reason: str) -> ReadProblem:
    return ReadProblem(source=as_text(path), offsets_partition=partition, position=-1, kind=kind,
                       reason=as_text(reason))


def as_text(s: str) -> str:
    """`s` as UTF-8 text: a name that is not UTF-8 (Python's surrogate escapes of its bytes, as `os.scandir` gives
    it) with those bytes as ``\\xNN``. A report names such a file; the tables, like Arrow, hold UTF-8 only."""
    try:
        s.encode("utf-8")
        return s
    except UnicodeEncodeError:
        return s.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def _beyond(name: str, n: int, what: str, limit: int) -> str:
    return f"{name} names {what} {n}, past Kafka's {limit}; not read"


def _partition_past_max(path: str, name: str, m: re.Match, problems: list[ReadProblem]) -> bool:
    """Whether the `__consumer_offsets-N` directory `name` (`m`: its match) names a partition Kafka cannot have
    (reported, then)."""
    n = int(m.group(1))
    if n <= PARTITION_MAX:
        return False
    problems.append(_problem(path, -1, "not_offsets_data", _beyond(name, n, "partition", PARTITION_MAX)))
    return True


def _discover_path(p: str, tree, segments: list[SegmentFile], problems: list[ReadProblem]) -> None:
    name = os.path.basename(p.rstrip("/") if "://" in p else os.path.normpath(p))
    if tree.isdir(p):
        m = OFFSETS_PARTITION_DIR.match(name)
        if m:
            if not _partition_past_max(p, name, m, problems):
                _discover_partition_dir(p, tree, int(m.group(1)), segments, problems)
            return
        if SKIPPED_DIR.search(name):  # given by name: the user is told why nothing of it is read
            problems.append(_problem(p, -1, "not_offsets_data",
                                     f"{name} is a partition directory Kafka deletes or has not made the partition's "
                                     f"log yet (-delete, -future, -stray); not read (give its files to read them)"))
            return
        if PARTITION_DIR.match(name) and not _lists_partition_dirs(p, tree):
            problems.append(_problem(p, -1, "not_offsets_data",
                                     f"{name} is a partition directory of another topic; not read"))
            return
        _discover_log_dir(p, tree, segments, problems)
        return
    # a single file
    parent = os.path.basename(os.path.dirname(tree.abspath(p)))
    m = OFFSETS_PARTITION_DIR.match(parent)
    if m and _partition_past_max(p, parent, m, problems):
        return
    partition = int(m.group(1)) if m else -1
    if m is None and PARTITION_DIR.match(parent):
        problems.append(_problem(p, -1, "not_offsets_data",
                                 f"{p} belongs to {parent}, not to {OFFSETS_TOPIC}; not read"))
        return
    if name.endswith(".log" + _SWAP_SUFFIX):  # the segment Kafka's recovery renames it to (`_InterruptedSwaps`)
        name = name[: -len(_SWAP_SUFFIX)]
    if not name.endswith(".log"):
        problems.append(_problem(p, partition, "not_offsets_data", f"{name} is not a .log segment; not read"))
        return
    sm = SEGMENT_NAME.match(name)
    _add_segment(p, tree, partition, int(sm.group(1)) if sm else 0, segments, problems, name)


def _lists_partition_dirs(p: str, tree) -> bool:
    try:
        return any(OFFSETS_PARTITION_DIR.match(e.name) and _is_dir(e) for e in tree.scandir(p))
    except OSError:
        return False


def _refuse_duplicates(log_dir: str, names: Iterable[str]) -> None:
    """`DuplicateLogDirError` when two of `names`, directories of `log_dir`, name one partition."""
    if twice := duplicate_partition_dirs(names):
        topic, partition, one, other = twice
        raise DuplicateLogDirError(f"{log_dir} holds two directories of partition {partition} of {as_text(topic)}: "
                                   f"{as_text(one)!r} and {as_text(other)!r} (Kafka reads the number after the last "
                                   f"dash as an int; its LogManager refuses to start with both: 'Duplicate log "
                                   f"directories'); keep one")


def _discover_log_dir(p: str, tree, segments: list[SegmentFile], problems: list[ReadProblem]) -> None:
    """A broker log dir: every `__consumer_offsets-N` child. A data topic's partition dir is left to
    `log_end_offsets` (its bounds and timestamps, for LAG); another internal topic's is reported."""
    try:
        entries = sorted(tree.scandir(p), key=lambda e: e.name)
    except OSError as e:
        problems.append(_problem(p, -1, "unreadable", f"cannot list directory: {e}"))
        return
    _refuse_duplicates(p, (e.name for e in entries if _is_dir(e)))
    found = False
    bare_logs = False
    for e in entries:
        if _is_dir(e):
            m = OFFSETS_PARTITION_DIR.match(e.name)
            if m:
                found = True
                if not _partition_past_max(e.path, e.name, m, problems):
                    _discover_partition_dir(e.path, tree, int(m.group(1)), segments, problems)
            elif SKIPPED_DIR.search(e.name):
                continue
            elif tp := PARTITION_DIR.match(e.name):
                if is_internal_topic(tp.group(1)):  # a data topic's (`__audit-0` too) is `log_end_offsets`'
                    problems.append(_problem(e.path, -1, "not_offsets_data",
                                             f"{e.name} is a partition directory of another topic (one of "
                                             f"Kafka's internal topics); not read"))
            elif e.name.startswith(OFFSETS_TOPIC):  # a copy (`-3.bak`): Kafka loads no such name, its records go unread
                problems.append(_problem(e.path, -1, "not_offsets_data",
                                         f"{e.name} is not named as a partition directory ({OFFSETS_TOPIC}-N); "
                                         f"not read"))
        elif m := OFFSETS_PARTITION_DIR.match(e.name):  # Kafka lists only directories: its records would go unread
            found = True
            what = "a symbolic link to nothing (dangling, or a loop)" if _leads_nowhere(e) else "a file"
            problems.append(_problem(e.path, int(m.group(1)) if int(m.group(1)) <= PARTITION_MAX else -1,
                                     "unreadable", f"{e.name} is {what}, not a partition directory; not read"))
        elif e.name.endswith(".log") or e.name.endswith(".log" + _SWAP_SUFFIX):
            bare_logs = True
        elif is_dump_name(e.name):
            problems.append(_dump_beside_segments(e.path))
    if not found:
        if bare_logs:
            _discover_partition_dir(p, tree, -1, segments, problems)
        else:
            problems.append(_problem(p, -1, "not_offsets_data",
                                     f"no {OFFSETS_TOPIC}-N directories and no .log files in {p}"))


def _discover_partition_dir(p: str, tree, partition: int, segments: list[SegmentFile],
                            problems: list[ReadProblem]) -> None:
    """The `.log` files of one partition directory (`LogLoader.loadSegmentFiles`, data files only), after
    `LogLoader.load`'s recovery of an interrupted swap (`_InterruptedSwaps`)."""
    try:
        entries = list(tree.scandir(p))
    except OSError as e:
        problems.append(_problem(p, partition, "unreadable", f"cannot list directory: {e}"))
        return
    swaps = _InterruptedSwaps(entries, tree, partition, problems)
    for e in entries:
        name = e.name
        if name.endswith(_SKIPPED_SUFFIXES) or name.endswith(_SWAP_SUFFIX):
            continue
        m = SEGMENT_NAME.match(name)
        if m is None:
            if name.endswith(".log"):  # a copy's name, a sign: no segment Kafka loads, and records all the same
                problems.append(_problem(e.path, partition, "not_offsets_data",
                                         f"{name} is not named by a base offset; not read"))
            elif is_dump_name(name) and partition >= 0:  # a bare-.log directory's own were seen by its log dir walk
                problems.append(_dump_beside_segments(e.path, partition))
            continue  # .index, .timeindex, .txnindex, .snapshot, checkpoints, partition.metadata, ...
        if partition >= 0 and name != (named := f"{int(m.group(1)):020d}.log"):
            # LogSegment.open opens the file its base offset names (LogFileUtils.logFile), whatever file gave it
            problems.append(_problem(e.path, partition, "not_offsets_data",
                                     f"{name} is not the name Kafka gives the segment of its base offset ({named}): "
                                     f"a broker loading the directory opens {named}, never this file; not read"))
            continue
        if (by := swaps.replacing(int(m.group(1)))) is not None:
            problems.append(_problem(e.path, partition, "swap_file",
                                     f"replaced by {by}, an interrupted swap Kafka's recovery renames in its place "
                                     f"(LogLoader deletes the segments from the swaps' first base offset up to their "
                                     f"last next offset); not read"))
            continue
        _add_segment(e.path, tree, partition, int(m.group(1)), segments, problems, name)
    for e, base in swaps.segments:
        _add_segment(e.path, tree, partition, base, segments, problems, e.name)


def _offset_from_file(name: str) -> int | None:
    """`LogFileUtils.offsetFromFile`: the number before a file name's first dot (None: the name holds none)."""
    head = name.split(".", 1)[0]
    return int(head) if "." in name and head.isdigit() else None


class _InterruptedSwaps:
    """What `LogLoader.load` (Kafka 3.0-4.x) makes of the `.swap` files of a partition directory: a log cleaning or
    a segment split stopped after writing its result as `<base>.log.swap` and before renaming it. A swap at or
    above the lowest `.cleaned` file's offset is an incomplete split's and is deleted; the others are renamed to
    `.log`, after every segment from the lowest swap's base offset up to (not including) the highest swap's next
    offset was deleted, and a `.log` of a swap's own name is replaced by the rename."""

    def __init__(self, entries: list, tree, partition: int, problems: list[ReadProblem]):
        self.segments: list[tuple[object, int]] = []  # (the swap's entry, its base offset)
        self._bases: dict[int, str] = {}
        self._first = self._end = 0
        cleaned = [o for e in entries if e.name.endswith(".cleaned") and (o := _offset_from_file(e.name)) is not None]
        min_cleaned = min(cleaned, default=OFFSET_MAX + 1)
        for e in sorted(entries, key=lambda e: e.name):
            if not e.name.endswith(_SWAP_SUFFIX) or _is_dir(e):
                continue
            sm = SEGMENT_NAME.match(e.name[: -len(_SWAP_SUFFIX)])
            if sm is None:
                continue  # an index's swap: renamed too, and no data
            base = int(sm.group(1))
            if partition >= 0 and e.name != f"{base:020d}.log{_SWAP_SUFFIX}":
                # LogSegment.open reads the swap its base offset names: this one is renamed to a .log never read
                problems.append(_problem(e.path, partition, "swap_file",
                                         f"{e.name} is not the name Kafka gives the swap of its base offset "
                                         f"({base:020d}.log{_SWAP_SUFFIX}): a broker's recovery renames it to a "
                                         f".log it never reads, and replaces no segment with it; not read"))
                continue
            if base >= min_cleaned:
                problems.append(_problem(e.path, partition, "swap_file",
                                         f"an incomplete split's swap (at or above the lowest .cleaned file's offset "
                                         f"{min_cleaned}): Kafka's recovery deletes it; not read"))
                continue
            try:
                end = _next_offset(e.path, base)
            except (OSError, ValueError) as err:
                problems.append(_problem(e.path, partition, "unreadable", f"cannot read swap segment: {err}"))
                continue
            if not self._bases:
                self._first, self._end = base, end
            self._first, self._end = min(self._first, base), max(self._end, end)
            self._bases[base] = e.name
            self.segments.append((e, base))

    def replacing(self, base_offset: int) -> str | None:
        """The swap file that replaces the `.log` segment of `base_offset`, if one does."""
        if base_offset in self._bases:
            return self._bases[base_offset]
        if self._bases and self._first <= base_offset < self._end:
            return ", ".join(sorted(self._bases.values()))
        return None


def _is_dir(e) -> bool:
    """Whether a listed entry is a directory or a link to one; a link that loops is neither (`DirEntry.is_dir`
    raises ELOOP for it, where `File.isDirectory`, which Kafka's `LogManager` lists partition dirs by, says false)."""
    try:
        return e.is_dir()
    except OSError:
        return False


def _leads_nowhere(e) -> bool:
    """Whether a listed entry is a symbolic link that resolves to no file (dangling, or a loop)."""
    if isinstance(e, _Entry):  # an object store's key is no link
        return False
    try:
        return e.is_symlink() and not os.path.exists(e.path)
    except OSError:
        return False


def _next_offset(path: str, base_offset: int) -> int:
    """`LogSegment.readNextOffset` of a segment file: after the last entry its heads frame (its base offset when it
    holds none)."""
    # imported here, not at module level: pyarrow ~0.45 s, pyarrow.fs ~0.05 s of import (python -X importtime)
    from pipelines.io import storage

    try:
        with storage.location(path).as_local_file() as local:  # an object is fetched into a temp file first
            if os.path.getsize(local) == 0:
                return base_offset
            heads = entry_heads(local)
    except storage.StorageError as e:
        raise OSError(str(e)) from None
    return int(heads.last_offsets[-1]) + 1 if len(heads) else base_offset


def _dump_beside_segments(path: str, partition: int = -1) -> ReadProblem:
    """A tabular dump among segment files: the directory is read as a log, so its rows would go unread."""
    return _problem(path, partition, "not_offsets_data", f"{os.path.basename(path)} is a tabular dump among segment "
                                                          f"files; not read (give it as an --input of its own)")


def _add_segment(path: str, tree, partition: int, base_offset: int, segments: list[SegmentFile],
                 problems: list[ReadProblem], name: str) -> None:
    if base_offset > OFFSET_MAX:
        problems.append(_problem(path, partition, "not_offsets_data", _beyond(name, base_offset, "base offset",
                                                                              OFFSET_MAX)))
        return
    try:
        regular = tree.regular(path)
        size = tree.size(path) if regular else 0
    except OSError as e:
        problems.append(_problem(path, partition, "unreadable", f"cannot stat segment: {e}"))
        return
    if not regular:  # a directory, or a pipe or device whose size says nothing (a pipe's 0 is not an empty segment)
        problems.append(_problem(path, partition, "unreadable", f"cannot read segment: {path} is not a regular file"))
        return
    if size == 0:
        return  # an empty partition's active segment
    if not tree.readable(path):
        problems.append(_problem(path, partition, "unreadable", "segment is not readable (permission denied)"))
        return
    segments.append(SegmentFile(path=path, offsets_partition=partition, base_offset=base_offset, size=size))


def log_start_offsets(segments: Iterable[SegmentFile]) -> dict[int, tuple[int, str]]:
    """Per offsets partition, the logStartOffset its log dir's `log-start-offset-checkpoint` names, and that file:
    `LogManager` writes it for a log whose start is past its first segment's base offset, and `LogLoader` starts the
    log at the larger of the two, where the coordinator's loader starts reading. A checkpoint that does not parse is
    passed over, as `LogManager` does (it starts the log at its first segment). A log dir on an object store is read
    as a local one: one GET of its checkpoint."""
    from pipelines.decoding.log_end_offsets import LOG_START_CHECKPOINT, CheckpointError, read_offset_checkpoint
    from pipelines.io import storage

    held: dict[str, set[int]] = {}  # a log dir -> the offsets partitions whose segments it holds
    for seg in segments:
        part_dir = os.path.dirname(seg.path)
        if seg.offsets_partition >= 0 and OFFSETS_PARTITION_DIR.match(os.path.basename(part_dir)):
            held.setdefault(os.path.dirname(part_dir), set()).add(seg.offsets_partition)
    out: dict[int, tuple[int, str]] = {}
    for log_dir, parts in held.items():
        remote = "://" in log_dir
        cp = f"{log_dir}/{LOG_START_CHECKPOINT}" if remote else os.path.join(log_dir, LOG_START_CHECKPOINT)
        try:  # an object that is not there is a FileNotFoundError: no HEAD asked first
            entries = read_offset_checkpoint(cp) if remote or os.path.isfile(cp) else {}
        except (OSError, UnicodeDecodeError, CheckpointError, storage.StorageError):
            continue
        for p in parts:
            start = entries.get((OFFSETS_TOPIC, p))
            if start is not None and start > out.get(p, (-1, ""))[0]:  # a replica's start follows the leader's
                out[p] = (start, cp)
    return out


def partition_count(paths: PathArg | Iterable[PathArg]) -> int | None:
    """The `__consumer_offsets` partition count a broker log dir shows: max N + 1 over its `__consumer_offsets-N`
    directories (a broker keeps every partition's directory, empty ones included). None when the input names no
    log dir (single partition dirs or files say nothing about the topic's partition count)."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    best = None
    for p in paths:
        p = os.fspath(p)
        tree = _tree(p, recursive=False)  # the log dir's children alone: not every segment's key again
        if not tree.isdir(p) or OFFSETS_PARTITION_DIR.match(os.path.basename(p.rstrip("/") if "://" in p
                                                                     else os.path.normpath(p))):
            continue
        for e in tree.scandir(p):
            m = OFFSETS_PARTITION_DIR.match(e.name)
            if m and int(m.group(1)) <= PARTITION_MAX and _is_dir(e):
                best = max(best or 0, int(m.group(1)) + 1)
    return best


def entry_heads(path: PathArg, start_position: int = 0) -> EntryHeads:
    """The entries of a local segment file from `start_position` (an entry boundary), read from their heads only
    (`FileLogInputStream` framing, no record or CRC read). The walk stops at the first entry that can't be framed:
    what follows is the decoder's to report (a torn tail, zeros, garbage): `framing.walk_entry_heads`."""
    import numpy as np  # here: the serving commands read this module and start without numpy (`jobs/cli.py`)

    with open(path, "rb") as f:
        size_of_file = os.fstat(f.fileno()).st_size
        if size_of_file <= start_position:
            return EntryHeads(np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.int64), start_position)
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            return walk_entry_heads(mm, start_position)
