"""Incremental-run checkpoints: one JSON file per snapshot at `<warehouse>/_checkpoints/<snapshot_id>.json`.

The content (last offset per offsets partition, input fingerprint, semantics, …) belongs to the incremental
logic; this module only stores it atomically: on disk, write a temporary file in the same directory, fsync, then
`os.replace` it over the target; on object storage, one PUT of the whole object. Either way a reader sees the old
checkpoint or the new one, never a torn file. The `_` prefix keeps the directory out of every Delta table and out
of vacuum's reach. Paths come back as `Path`s for a local warehouse, `storage.Location`s for one on S3.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path

import pyarrow.fs as pafs

from pipelines.io import storage
from pipelines.io.delta import check_partition_value

CHECKPOINT_DIR = "_checkpoints"
#: the field a checkpoint's own digest is kept in: a checkpoint edited by hand or damaged into other valid JSON of
#: the right types (a `consumed` moved into a batch, a `max_timestamp` moved on) no longer matches it
SEAL = "sha256"


def _root(warehouse) -> storage.Location:
    """The warehouse's Location (`warehouse`: a Warehouse, a path or a URI)."""
    root = getattr(warehouse, "root", None)
    if isinstance(root, storage.Location):
        return root
    return storage.location(getattr(warehouse, "path", warehouse))


def _native(loc: storage.Location) -> "Path | storage.Location":
    return loc.local or loc


def checkpoint_path(warehouse, snapshot_id: str) -> "Path | storage.Location":
    """Where the checkpoint of `snapshot_id` lives (`warehouse`: a Warehouse or its directory)."""
    return _native(_root(warehouse).join(CHECKPOINT_DIR, f"{check_partition_value(snapshot_id)}.json"))


def write_checkpoint(warehouse, snapshot_id: str, checkpoint: dict) -> "Path | storage.Location":
    """Store `checkpoint` (JSON-serialisable; datetimes are written as ISO strings) atomically."""
    if not isinstance(checkpoint, dict):
        raise TypeError(f"checkpoint must be a dict, got {type(checkpoint).__name__}")
    target = checkpoint_path(warehouse, snapshot_id)
    text = _checkpoint_text(checkpoint)
    if isinstance(target, storage.Location):
        target.write_text(text)
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    _fsync_dir(target.parent)
    return target


def _checkpoint_text(checkpoint: dict) -> str:
    """The checkpoint's JSON with its seal (`SEAL`): the digest of its fields as they read back."""
    body = json.loads(json.dumps({k: v for k, v in checkpoint.items() if k != SEAL}, default=_default))
    return json.dumps({**body, SEAL: _digest(body)}, sort_keys=True, indent=2)


def _digest(body: dict) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


class UnsealedCheckpoint(ValueError):
    """A checkpoint without its seal: written before checkpoints had one, or stripped of it. Nothing tells its
    fields from ones edited or damaged into other valid values, so nothing resumes from it."""


def _unsealed(text: str) -> dict:
    """A checkpoint's JSON as its writer gave it, without its seal. ValueError when it is not a JSON object or its
    seal does not match (edited or damaged); `UnsealedCheckpoint` when it has none."""
    checkpoint = json.loads(text)
    if not isinstance(checkpoint, dict):
        raise ValueError("not a JSON object")
    if SEAL not in checkpoint:
        raise UnsealedCheckpoint(f"no {SEAL} of its fields: written before checkpoints were sealed")
    body = {k: v for k, v in checkpoint.items() if k != SEAL}
    if checkpoint[SEAL] != _digest(body):
        raise ValueError(f"its content does not match its {SEAL}: edited or damaged")
    return body


def read_checkpoint(warehouse, snapshot_id: str) -> dict | None:
    """The checkpoint stored for `snapshot_id`, or None if there is none. ValueError when it is not JSON or not as
    its writer sealed it (`UnsealedCheckpoint`: not sealed at all)."""
    target = storage.location(checkpoint_path(warehouse, snapshot_id))
    try:
        return _unsealed(target.read_text())
    except FileNotFoundError:
        return None


def _default(value):
    iso = getattr(value, "isoformat", None)
    if iso is not None:
        return iso()
    if isinstance(value, (set, frozenset, tuple)):
        return sorted(value) if isinstance(value, (set, frozenset)) else list(value)
    raise TypeError(f"checkpoint value of type {type(value).__name__} is not JSON-serialisable")


def _fsync_dir(path: Path) -> None:
    """Make the rename durable (POSIX); a no-op where directories cannot be opened."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


# ---------------------------------------------------------------------------------------------------------------
# The saved state of a run (the rows it replayed), read back by `--incremental` runs.
# ---------------------------------------------------------------------------------------------------------------
STATE_DIR = "_state"


def state_dir(warehouse, snapshot_id: str) -> "Path | storage.Location":
    """`<warehouse>/_state/<snapshot_id>`."""
    return _native(_root(warehouse).join(STATE_DIR, check_partition_value(snapshot_id)))


@dataclass(frozen=True)
class StateStage:
    """A new directory `_state/<id>/decoded-<random>` the shards the next `--incremental` run resumes are written
    into (`coordinator.saved`: a file per offsets partition), by the driver or by the tasks that load the shards
    (picklable: a task writes with it). Nothing reads it until the run's checkpoint, written last, names the
    directory and its files: a file of a failed task attempt or of a run that stopped is never read."""

    uri: str

    @property
    def name(self) -> str:
        return storage.location(self.uri).name

    def write(self, data: bytes, partition: int) -> str:
        """`data` (one offsets partition's saved shard) as one file of the directory; its name."""
        name = f"part-{partition:05d}-{uuid.uuid4().hex[:8]}.shard"
        storage.location(self.uri).join(name).write_new(data)
        return name


@dataclass
class SavedState:
    """The shards a run keeps for the next `--incremental` run, written (`StateStage`), named by `files`, of
    `entries` state entries in all (`coordinator.saved.SavedShard.entries`). `discard` deletes them unless a
    checkpoint names them (`kept`)."""

    stage: StateStage
    files: list[str]
    entries: int = 0
    sizes: dict[str, int] | None = None  # file -> its bytes
    kept: bool = False
    digests: dict[str, str] | None = None  # file -> the sha256 of its bytes

    def discard(self) -> None:
        if not self.kept:
            with contextlib.suppress(OSError, storage.StorageError):
                storage.location(self.stage.uri).delete_dir()


def stage_state(warehouse, snapshot_id: str) -> StateStage:
    """A new, empty state directory of `snapshot_id` (see `StateStage`)."""
    return StateStage(_root(warehouse).join(STATE_DIR, check_partition_value(snapshot_id),
                                            f"decoded-{uuid.uuid4().hex[:12]}").uri)


def write_state(warehouse, snapshot_id: str, shards: dict[int, bytes], entries: int) -> SavedState:
    """`shards` (offsets partition -> its saved shard) written as the state of `snapshot_id`, a file per offsets
    partition as the shards' tasks write them."""
    stage = stage_state(warehouse, snapshot_id)
    names = [stage.write(data, p) for p, data in sorted(shards.items())]
    return SavedState(stage, names, entries, {n: len(shards[p]) for n, p in zip(names, sorted(shards))},
                      digests={n: hashlib.sha256(shards[p]).hexdigest() for n, p in zip(names, sorted(shards))})


STASHED_NAME = "checkpoint.json"  # never a shard's name (`StateStage.write`)


def stash_checkpoint(stage: StateStage, checkpoint: dict) -> None:
    """`checkpoint` kept in its state's directory until its run publishes it: a rerun of a served id publishes
    after its `runs` row commits, and one killed between the two leaves it there for the next run to publish
    (`stashed_checkpoints`)."""
    storage.location(stage.uri).join(STASHED_NAME).write_text(_checkpoint_text(checkpoint))


def stashed_checkpoints(warehouse, snapshot_id: str) -> list[tuple[str, object]]:
    """(state directory name, its stashed checkpoint as read) of each state directory of `snapshot_id` holding one;
    an unreadable one is passed over (nothing resumes from it)."""
    root = _root(warehouse).join(STATE_DIR, check_partition_value(snapshot_id))
    out = []
    for info in root.listdir():
        if info.type != pafs.FileType.Directory:
            continue
        d = root.child_of(info)
        try:
            out.append((d.name, _unsealed(d.join(STASHED_NAME).read_text())))
        except (OSError, storage.StorageError, ValueError):
            continue
    return out


def remove_other_states(warehouse, snapshot_id: str, keep: str) -> None:
    """Every state directory of `snapshot_id` but `keep` deleted (an earlier run of the same id, a stopped one)."""
    root = _root(warehouse).join(STATE_DIR, check_partition_value(snapshot_id))
    for info in root.listdir():
        d = root.child_of(info)
        if d.name != keep:
            with contextlib.suppress(OSError, storage.StorageError):
                d.delete_dir() if info.type == pafs.FileType.Directory else d.delete_file()


_PARTITION_FILE = re.compile(r"part-(\d{5})-")  # a file a shard's task wrote: that offsets partition's shard


def state_file_partitions(files) -> set[int]:
    """The offsets partitions of the files a shard's task wrote, by their names."""
    return {int(m.group(1)) for f in files if (m := _PARTITION_FILE.match(f))}


def read_state_files(path, files: list[str], partition: int, digests: dict[str, str] | None = None) -> list[bytes]:
    """The saved shards of `partition` among `files` (those the checkpoint names) of the state directory `path`:
    one, or one per bucket of a split partition's groups; none when the run saved none of it. ValueError when a
    file's bytes are not those its run wrote (`digests`, the checkpoint's: file -> sha256; a file it names none of,
    written before checkpoints named them, is not checked)."""
    out = []
    for name in sorted(f for f in files if (m := _PARTITION_FILE.match(f)) and int(m.group(1)) == partition):
        data = storage.location(path).join(name).read_bytes()
        if (digests or {}).get(name) not in (None, hashlib.sha256(data).hexdigest()):
            raise ValueError(f"{name} is not the file its run wrote (its sha256 is not the checkpoint's)")
        out.append(data)
    return out


def remove_orphaned_state(warehouse, existing_snapshot_ids) -> list[str]:
    """Delete `_checkpoints/<id>.json` of snapshots not in `existing_snapshot_ids`, and `_state/<id>` of those and
    of ids with no checkpoint (a run that stopped after its tasks wrote its state: nothing will read it; the
    caller holds the writer lock, so no run is writing one); returns the ids whose state was removed, sorted."""
    root = _root(warehouse)
    existing = set(existing_snapshot_ids)
    removed = []
    cp_root = root / CHECKPOINT_DIR
    checkpointed = set()
    for info in cp_root.listdir():
        f = cp_root.child_of(info)
        if not f.name.endswith(".json"):
            continue
        if f.name[:-len(".json")] in existing:
            checkpointed.add(f.name[:-len(".json")])
            continue
        with contextlib.suppress(OSError, storage.StorageError):
            f.delete_file()
    state_root = root / STATE_DIR
    for info in state_root.listdir():
        d = state_root.child_of(info)
        if info.type == pafs.FileType.Directory and d.name not in checkpointed:
            with contextlib.suppress(OSError, storage.StorageError):  # what is left goes with the next run
                d.delete_dir()
            removed.append(d.name)
    return sorted(removed)
