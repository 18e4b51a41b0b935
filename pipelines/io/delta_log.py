"""The commit files of a Delta table's log, as a reader checks them before it trusts what delta-rs made of them.

delta-rs replays a commit file that holds no action (emptied, or `{}` lines) as a commit that changed nothing, and
a commit stripped of its add and remove actions the same way: a table whose commits were replaced by valid but empty
JSON read as an empty table, or as an older run's rows. Every commit a read replays (those after the newest
checkpoint at or below its version) must therefore hold actions, each line one action, and as many adds and
removes as its `commitInfo` counted (delta-rs' `operationMetrics`, `offsetlake.added_files`); the commit a snapshot
pinned must be its run's write, whose adds are the snapshot's partition there (the write replaced the partition).
"""
from __future__ import annotations

import json
import os
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from pipelines.io.storage import Location, StorageError, retried

# Delta protocol's action names ("Actions" in PROTOCOL.md)
ACTIONS = frozenset({"add", "remove", "metaData", "protocol", "commitInfo", "txn", "cdc", "domainMetadata",
                     "checkpointMetadata", "sidecar"})
# What `pipelines/io/delta.py` `commit` writes in a commitInfo: how many add actions it committed
ADDED_FILES = "offsetlake.added_files"
# The operations whose commit a run pins (`runs.table_versions`): a snapshot's write, and a repair that re-adds its
# files with new statistics (`stats_repair.repin`)
_WRITE, _REPAIR = "write_snapshot", "repair_stats"
_READERS = 8  # threads reading an object store's commit files
# a name matched whole: `$` would take `<v>.json` and a newline, a file delta-rs never reads as a commit or checkpoint
_COMMIT = re.compile(r"(\d{20})\.json\Z")
_CHECKPOINT = re.compile(r"(\d{20})\.checkpoint(\.\d+\.\d+)?\.parquet\Z")


# delta-rs' JSON reader recurses once per level of an array: a commit line nested some 30,000 deep (a damaged or
# hostile `_delta_log`) overflowed its stack, a SIGSEGV that ended the process without a word (deltalake 1.x). Such
# a line takes two bytes a level, so only a commit file past this size can hold one, and is read first.
_DEEP_COMMIT_BYTES = 16 << 10
_MAX_NESTING = 1000  # a Delta action nests a few levels
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"')
_NOT_BRACKETS = bytes(sorted(set(range(256)) - set(b"[]{}")))
#: (log, commit file, size, mtime) of the commit files found shallow: each is read once in a process (a server
#: opens its tables again and again, and a history's commit of many files is past the size above)
_SHALLOW: set[tuple] = set()


def _nesting(line: bytes) -> int:
    """How deep the brackets of a JSON line go (those inside its strings aside), valid JSON or not."""
    depth = top = 0
    for c in _STRING.sub(b"", line).translate(None, _NOT_BRACKETS):
        depth += 1 if c in b"[{" else -1
        top = max(top, depth)
    return top


def refuse_deep_commits(loc: Location, version: int | None = None) -> None:
    """Raise delta-rs' own DeltaError (what every reader and writer already says in one line) for a commit file that
    an open of the table at `version` (None: its latest) replays, the commits after the newest checkpoint at or
    below it, holding a line nested deeper than any Delta action."""
    log = loc / "_delta_log"
    try:
        listing = retried(log, "list", lambda: _listing(loc))
    except (OSError, StorageError):
        return  # delta-rs says it
    for name in _replayed_names(listing, version).values():
        size, mtime = listing[name]
        key = (str(log), name, size, mtime)
        if (size or 0) < _DEEP_COMMIT_BYTES or key in _SHALLOW:
            continue
        for n, line in enumerate(retried(log, "read", (log / name).read_bytes).split(b"\n"), start=1):
            if line.count(b"[") + line.count(b"{") > _MAX_NESTING and _nesting(line) > _MAX_NESTING:
                from deltalake.exceptions import DeltaError

                raise DeltaError(f"{name} line {n} is nested deeper than any Delta action ({_MAX_NESTING} levels): "
                                 "not read")
        _SHALLOW.add(key)


class LogDamage(Exception):
    """A commit file the read replays is not what its writer wrote; the message names it and says why."""


class Commit:
    """One commit file's actions, read and checked (`LogDamage` otherwise)."""

    def __init__(self, name: str, text: str) -> None:
        self.name = name
        self.actions: list[tuple[str, dict]] = []
        # one action a line, lines ended by \n (PROTOCOL.md "Delta Log Entries"): str.splitlines also ends one at
        # U+2028, U+2029 and U+0085, which JSON writers leave raw inside strings (a group id in an add's stats)
        for n, line in enumerate(text.split("\n"), start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except ValueError:
                raise LogDamage(f"{name} line {n} is not JSON") from None
            except RecursionError:  # Python's parser recurses a level at a time, to about 1000
                raise LogDamage(f"{name} line {n} is nested deeper than any Delta action") from None
            kind = next(iter(obj), None) if isinstance(obj, dict) and len(obj) == 1 else None
            if kind not in ACTIONS or not isinstance(obj[kind], dict):
                raise LogDamage(f"{name} line {n} is no Delta action: {line.strip()[:60]}")
            self.actions.append((kind, obj[kind]))
        if not self.actions:
            raise LogDamage(f"{name} holds no action (emptied?)")
        for kind, action in self.actions:
            if kind in ("add", "remove") and not _inside(action.get("path")):
                raise LogDamage(f"{name}: an {kind} action's path is not a file inside the table: "
                                f"{str(action.get('path'))[:80]!r}")
        info = self.info
        counted = {"add": info.get(ADDED_FILES)}
        metrics = info.get("operationMetrics")
        if isinstance(metrics, dict):
            counted["add"] = metrics.get("num_added_files", counted["add"])
            counted["remove"] = metrics.get("num_removed_files")
        for kind, expected in counted.items():
            held = sum(1 for k, _ in self.actions if k == kind)
            if expected is not None and str(expected) != str(held):
                raise LogDamage(f"{name} holds {held} {kind} action(s), its commitInfo counted {expected}")

    @property
    def info(self) -> dict[str, Any]:
        return next((a for k, a in self.actions if k == "commitInfo"), {})

    def paths(self, kind: str, partition: dict[str, str]) -> set[str]:
        return {unquote(a.get("path", "")) for k, a in self.actions if k == kind
                and all((a.get("partitionValues") or {}).get(c) == v for c, v in partition.items())}


_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*:")


def _inside(path: Any) -> bool:
    """A data file's path as a writer of the table writes it: relative to the table's root, within it. With an
    absolute path, a URL or a `..` segment in an add, delta-rs' pruned read of the snapshot's partition listed no
    file (`sql` answered the table empty), and a read joining the path to the table's root read outside it."""
    if not isinstance(path, str) or not path:
        return False
    p = unquote(path)
    return not (p.startswith(("/", "\\")) or _SCHEME.match(p) or ".." in re.split(r"[/\\]", p))


def _listing(path: "Path | Location") -> dict[str, tuple]:
    """File name -> (size, mtime) of the table's `_delta_log`."""
    if isinstance(path, Location):
        return {os.path.basename(i.path): (i.size, i.mtime_ns) for i in (path / "_delta_log").listdir()}
    out = {}
    with os.scandir(Path(path) / "_delta_log") as it:
        for entry in it:
            st = entry.stat()
            out[entry.name] = (st.st_size, st.st_mtime_ns)
    return out


def _replayed_names(listing: dict[str, tuple], version: int | None) -> dict[int, str]:
    """Version -> commit file name, for each commit an open at `version` (None: the log's last) replays, as delta-rs
    does: those after the newest checkpoint at or below it, in version order."""
    commits = {int(m.group(1)): name for name in listing if (m := _COMMIT.match(name))}
    top = max(commits, default=-1) if version is None else version
    since = max((int(m.group(1)) for m in map(_CHECKPOINT.match, listing) if m and int(m.group(1)) <= top),
                default=-1)
    return {v: commits[v] for v in sorted(commits) if since < v <= top}


def _read(path: "Path | Location", name: str) -> str:
    where = path / "_delta_log" / name
    raw = where.read_bytes() if isinstance(where, Location) else Path(where).read_bytes()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise LogDamage(f"{name} is not UTF-8 text") from None


class LogChecker:
    """Checks the commits a read replays; a commit file once found sound (same name, size and time) is not read
    again, so a long-running server pays for each commit once."""

    def __init__(self) -> None:
        self._sound: dict[tuple, Commit] = {}
        self._pinned: set[tuple] = set()  # (table, version, snapshot, its commit) found to be the run's write

    def replayed(self, path: "Path | Location", version: int) -> dict[int, Commit]:
        """Version -> commit, for each commit a read of `path` at `version` replays (after the newest checkpoint at
        or below it); raises `LogDamage`."""
        listing = _listing(path)
        wanted = {v: (name, (str(path), name, listing[name])) for v, name in _replayed_names(listing, version).items()}
        unread = [name for name, key in wanted.values() if key not in self._sound]
        if isinstance(path, Location) and path.remote and len(unread) > 1:
            # up to a checkpoint interval (100) of commits: on an object store each is a GET's round trip
            with ThreadPoolExecutor(_READERS, thread_name_prefix="offsetlake-delta-log") as pool:
                texts = dict(zip(unread, pool.map(lambda n: _read(path, n), unread)))
        else:
            texts = {name: _read(path, name) for name in unread}
        out = {}
        for v, (name, key) in wanted.items():
            commit = self._sound.get(key)
            if commit is None:
                commit = self._sound[key] = Commit(name, texts[name])
            out[v] = commit
        return out

    def check(self, path: "Path | Location", version: int, *, snapshot_id: str | None = None,
              partition_files=None) -> None:
        """The commits a read of `path` at `version` replays are sound, and, when `version` is the one snapshot
        `snapshot_id` pinned, its commit is that run's: `partition_files()` (the snapshot's files at `version`,
        relative paths) are its adds. Raises `LogDamage`."""
        commits = self.replayed(path, version)
        pinned = commits.get(version)
        if snapshot_id is None or pinned is None:  # a checkpoint holds the pinned version: its commit is not read
            return
        key = (str(path), version, snapshot_id, id(pinned))
        if key in self._pinned:
            return
        info = pinned.info
        operation = info.get("offsetlake.operation")
        if operation == _REPAIR:
            return
        if operation != _WRITE or info.get("offsetlake.snapshot_id") != snapshot_id:
            raise LogDamage(f"{pinned.name}, the commit snapshot {snapshot_id!r} pinned, is not its run's write")
        part = {"snapshot_id": snapshot_id}
        if partition_files is not None and {unquote(p) for p in partition_files()} != pinned.paths("add", part):
            raise LogDamage(f"{pinned.name}, the write of snapshot {snapshot_id!r}, does not hold the files its "
                            "partition has there (actions lost?)")
        self._pinned.add(key)
