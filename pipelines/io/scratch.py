"""A run's scratch directory, `<warehouse>/_scratch/<snapshot_id>-<random>`: files its tasks write for a later
stage of the same run to read (the shards' group events, which the write names and writes as `group_history`; the
rows a split partition's ranges hand on to its loads), on
the store every executor reaches, so Spark never carries their bytes. Nothing outside the run reads it; the run
deletes it as it ends, and the next run (under the same writer lock) deletes what a run that was killed left. The
`_` prefix keeps it out of every Delta table and out of vacuum's reach."""
from __future__ import annotations

import contextlib
import uuid
from pathlib import Path
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.fs as pafs

from pipelines.io import storage
from pipelines.io.blobs import from_blob, to_blob
from pipelines.io.delta import check_partition_value

SCRATCH_DIR = "_scratch"
_READERS = 8  # threads of `Scratch.read_all`


@dataclass(frozen=True)
class Scratch:
    """One run's scratch directory. Picklable: a task writes with it, another reads with it."""

    uri: str

    def write_rows(self, rows: pa.Table, partition: int) -> str:
        """`rows` as a new file of the directory (`partition`: the offsets partition they are of); its name. On an
        object store the file is an lz4 blob (`io.blobs`: a third of the bytes to move); on a local disk a plain
        Arrow IPC stream, written straight into the file and read back mapped (`read_rows`): compressing a range's
        kept rows and opening them again cost five times writing them (0.10-0.15 against 0.025 CPU-s for a hot
        3 M range's 2 buckets, warm), and a blob is one more copy of them in memory."""
        name = f"part-{partition:05d}-{uuid.uuid4().hex[:12]}.arrow"
        loc = storage.location(self.uri).join(name)
        if loc.remote:
            loc.write_new(to_blob(rows))
            return name
        with storage.errors(loc):
            Path(loc.uri).parent.mkdir(parents=True, exist_ok=True)
            with pa.OSFile(loc.path, "wb") as out, pa.ipc.new_stream(out, rows.schema) as w:
                w.write(rows)
        return name

    def read_rows(self, name: str) -> pa.Table:
        """The rows of a file `write_rows` wrote."""
        loc = storage.location(self.uri).join(name)
        if loc.remote:
            return from_blob(loc.read_bytes())
        with storage.errors(loc), pa.memory_map(loc.path) as source:
            return pa.ipc.open_stream(source).read_all()

    def read_all_rows(self, names: list[str]) -> list[pa.Table]:
        """The rows of the files `names`, in that order, read side by side: on an object store each is a GET's
        round trip."""
        with ThreadPoolExecutor(_READERS, thread_name_prefix="offsetlake-scratch") as pool:
            return list(pool.map(self.read_rows, names))

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
