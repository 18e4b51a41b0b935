"""Finding `__consumer_offsets-N` segment files on disk and reading them in log order.

Mirrors what `UnifiedLog`/`LogLoader` (Kafka 2.8-4.x) treat as a partition's data: the `<20-digit base>.log` files
of a `__consumer_offsets-N` directory, in numeric base-offset order (spec §1.1). Index, time-index, txn-index,
producer snapshots and checkpoints are not data; `.deleted`/`.cleaned` files and `-delete`/`-future`/`-stray`
directories are skipped; a `.swap` file (a cleaned segment awaiting rename) is reported, not read.
"""
from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from pipelines.decoding.batches import BatchItem, read_batches_from_file
from pipelines.decoding.policy import DEFAULT_POLICY, ReadPolicy
from schemas.records import LogRecord, ReadProblem

__all__ = ["InputError", "SegmentFile", "discover_segments", "read_log", "read_segment_batches"]

OFFSETS_TOPIC = "__consumer_offsets"
_OFFSETS_DIR = re.compile(r"^__consumer_offsets-(\d+)$")
_TOPIC_PARTITION_DIR = re.compile(r"^(.+)-(\d+)$")
_SKIPPED_DIR = re.compile(r"-(delete|future|stray)$")  # `<tp>.<uuid>-delete`, `<tp>.<uuid>-future`, `<tp>-stray`
_SEGMENT_NAME = re.compile(r"^(\d+)\.log$")
_SKIPPED_SUFFIXES = (".deleted", ".cleaned")
_SWAP_SUFFIX = ".swap"

PathArg = str | os.PathLike


class InputError(FileNotFoundError):
    """An input path given by the user does not exist (the CLI maps this to exit code 2)."""


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
    exist. Empty (0-byte) `.log` files are an empty partition's active segment and are skipped without a problem.
    The same segment reached twice through different paths is read once; two different files claiming the same
    (partition, base offset) keep the first and report `duplicate_segment`.
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    segments: list[SegmentFile] = []
    problems: list[ReadProblem] = []
    for p in paths:
        p = os.fspath(p)
        if not os.path.lexists(p):
            raise InputError(f"input path does not exist: {p}")
        _discover_path(p, segments, problems)

    seen_real: set[str] = set()
    seen_key: dict[tuple[int, int], str] = {}
    unique: list[SegmentFile] = []
    for seg in segments:
        real = os.path.realpath(seg.path)
        if real in seen_real:
            continue
        seen_real.add(real)
        key = (seg.offsets_partition, seg.base_offset)
        if seg.offsets_partition >= 0 and key in seen_key:
            problems.append(_problem(seg.path, seg.offsets_partition, "duplicate_segment",
                                     f"segment with base offset {seg.base_offset} of partition "
                                     f"{seg.offsets_partition} already read from {seen_key[key]}; not read"))
            continue
        seen_key[key] = seg.path
        unique.append(seg)
    unique.sort(key=lambda s: (s.offsets_partition, s.base_offset, s.path))
    return unique, problems


def read_segment_batches(seg: SegmentFile, policy: ReadPolicy = DEFAULT_POLICY) -> Iterator[BatchItem | ReadProblem]:
    """All entries of one segment, as `read_batches_from_file` yields them; an OS error becomes `unreadable`."""
    try:
        yield from read_batches_from_file(seg.path, offsets_partition=seg.offsets_partition, policy=policy)
    except OSError as e:
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
    return ReadProblem(source=path, offsets_partition=partition, position=-1, kind=kind, reason=reason)


def _discover_path(p: str, segments: list[SegmentFile], problems: list[ReadProblem]) -> None:
    name = os.path.basename(os.path.normpath(p))
    if os.path.isdir(p):
        m = _OFFSETS_DIR.match(name)
        if m:
            _discover_partition_dir(p, int(m.group(1)), segments, problems)
            return
        if _SKIPPED_DIR.search(name):
            return
        if _TOPIC_PARTITION_DIR.match(name) and not _lists_partition_dirs(p):
            problems.append(_problem(p, -1, "not_offsets_data",
                                     f"{name} is a partition directory of another topic; not read"))
            return
        _discover_log_dir(p, segments, problems)
        return
    # a single file
    parent = os.path.basename(os.path.dirname(os.path.abspath(p)))
    m = _OFFSETS_DIR.match(parent)
    partition = int(m.group(1)) if m else -1
    if m is None and _TOPIC_PARTITION_DIR.match(parent):
        problems.append(_problem(p, -1, "not_offsets_data",
                                 f"{p} belongs to {parent}, not to {OFFSETS_TOPIC}; not read"))
        return
    if name.endswith(_SWAP_SUFFIX):
        problems.append(_swap_problem(p, partition))
        return
    if not name.endswith(".log"):
        problems.append(_problem(p, partition, "not_offsets_data", f"{name} is not a .log segment; not read"))
        return
    sm = _SEGMENT_NAME.match(name)
    _add_segment(p, partition, int(sm.group(1)) if sm else 0, segments, problems)


def _lists_partition_dirs(p: str) -> bool:
    try:
        return any(_OFFSETS_DIR.match(e.name) and e.is_dir() for e in os.scandir(p))
    except OSError:
        return False


def _discover_log_dir(p: str, segments: list[SegmentFile], problems: list[ReadProblem]) -> None:
    """A broker log dir: every `__consumer_offsets-N` child; other topics' partition dirs are reported."""
    try:
        entries = sorted(os.scandir(p), key=lambda e: e.name)
    except OSError as e:
        problems.append(_problem(p, -1, "unreadable", f"cannot list directory: {e}"))
        return
    found = False
    bare_logs = False
    for e in entries:
        try:
            is_dir = e.is_dir()
        except OSError:
            is_dir = False
        if is_dir:
            m = _OFFSETS_DIR.match(e.name)
            if m:
                found = True
                _discover_partition_dir(e.path, int(m.group(1)), segments, problems)
            elif _SKIPPED_DIR.search(e.name):
                continue
            elif _TOPIC_PARTITION_DIR.match(e.name):
                problems.append(_problem(e.path, -1, "not_offsets_data",
                                         f"{e.name} is a partition directory of another topic; not read"))
        elif e.name.endswith(".log") or e.name.endswith(".log" + _SWAP_SUFFIX):
            bare_logs = True
    if not found:
        if bare_logs:
            _discover_partition_dir(p, -1, segments, problems)
        else:
            problems.append(_problem(p, -1, "not_offsets_data",
                                     f"no {OFFSETS_TOPIC}-N directories and no .log files in {p}"))


def _discover_partition_dir(p: str, partition: int, segments: list[SegmentFile],
                            problems: list[ReadProblem]) -> None:
    """The `.log` files of one partition directory (`LogLoader.loadSegmentFiles`, data files only)."""
    try:
        entries = list(os.scandir(p))
    except OSError as e:
        problems.append(_problem(p, partition, "unreadable", f"cannot list directory: {e}"))
        return
    for e in entries:
        name = e.name
        if name.endswith(_SKIPPED_SUFFIXES):
            continue
        if name.endswith(_SWAP_SUFFIX):
            if name[: -len(_SWAP_SUFFIX)].endswith(".log"):
                problems.append(_swap_problem(e.path, partition))
            continue
        m = _SEGMENT_NAME.match(name)
        if m is None:
            continue  # .index, .timeindex, .txnindex, .snapshot, checkpoints, partition.metadata, ...
        _add_segment(e.path, partition, int(m.group(1)), segments, problems)


def _swap_problem(path: str, partition: int) -> ReadProblem:
    return _problem(path, partition, "swap_file",
                    "a .swap file is a cleaned segment awaiting rename (interrupted log cleaning); Kafka's "
                    "recovery would prefer it over the .log it replaces; not read")


def _add_segment(path: str, partition: int, base_offset: int, segments: list[SegmentFile],
                 problems: list[ReadProblem]) -> None:
    try:
        st = os.stat(path)
    except OSError as e:
        problems.append(_problem(path, partition, "unreadable", f"cannot stat segment: {e}"))
        return
    if st.st_size == 0:
        return  # an empty partition's active segment
    if not os.access(path, os.R_OK):
        problems.append(_problem(path, partition, "unreadable", "segment is not readable (permission denied)"))
        return
    segments.append(SegmentFile(path=path, offsets_partition=partition, base_offset=base_offset, size=st.st_size))


def partition_count(paths: PathArg | Iterable[PathArg]) -> int | None:
    """The `__consumer_offsets` partition count a broker log dir shows: max N + 1 over its `__consumer_offsets-N`
    directories (a broker keeps every partition's directory, empty ones included). None when the input names no
    log dir (single partition dirs or files say nothing about the topic's partition count)."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    best = None
    for p in paths:
        p = os.fspath(p)
        if not os.path.isdir(p) or _OFFSETS_DIR.match(os.path.basename(os.path.normpath(p))):
            continue
        for name in os.listdir(p):
            m = _OFFSETS_DIR.match(name)
            if m and os.path.isdir(os.path.join(p, name)):
                best = max(best or 0, int(m.group(1)) + 1)
    return best
