"""A run's scratch directory, `<warehouse>/_scratch/<snapshot_id>-<random>`: files its tasks write for a later
stage of the same run to read (the shards' group events, which the write names and writes as `group_history`), on
the store every executor reaches, so Spark never carries their bytes. Nothing outside the run reads it; the run
deletes it as it ends, and the next run (under the same writer lock) deletes what a run that was killed left. The
`_` prefix keeps it out of every Delta table and out of vacuum's reach."""
from __future__ import annotations

import contextlib
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pyarrow.fs as pafs

from pipelines.io import storage
from pipelines.io.delta import check_partition_value

SCRATCH_DIR = "_scratch"
_READERS = 8  # threads of `Scratch.read_all`


@dataclass(frozen=True)
class Scratch:
    """One run's scratch directory. Picklable: a task writes with it, another reads with it."""

    uri: str

    def write(self, data: bytes, partition: int) -> str:
        """`data` as a new file of the directory (`partition`: the offsets partition it is of); its name."""
        name = f"part-{partition:05d}-{uuid.uuid4().hex[:12]}.arrow"
        storage.location(self.uri).join(name).write_new(data)
        return name

    def read(self, name: str) -> bytes:
        return storage.location(self.uri).join(name).read_bytes()

    def read_all(self, names: list[str]) -> list[bytes]:
        """The files `names`, in that order, read side by side: on an object store each is a GET's round trip."""
        with ThreadPoolExecutor(_READERS, thread_name_prefix="offsetlake-scratch") as pool:
            return list(pool.map(self.read, names))

    def discard(self) -> None:
        """The directory deleted with everything in it (files of failed task attempts too)."""
        with contextlib.suppress(OSError, storage.StorageError):
            storage.location(self.uri).delete_dir()


def new_scratch(warehouse: storage.Location, snapshot_id: str) -> Scratch:
    """A new scratch directory for the run of `snapshot_id`, every other one deleted: the caller holds the
    warehouse's writer lock, so they are what runs that stopped left."""
    root = warehouse.join(SCRATCH_DIR)
    for info in root.listdir():
        with contextlib.suppress(OSError, storage.StorageError):
            d = root.child_of(info)
            d.delete_dir() if info.type == pafs.FileType.Directory else d.delete_file()
    return Scratch(root.join(f"{check_partition_value(snapshot_id)}-{uuid.uuid4().hex[:12]}").uri)
