"""The shards the previous run saved (`coordinator.saved`), as an incremental run reads them: each shard's task
reads its own offsets partition's (`frames.segment_shards`), a run resumed in this process all of them."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SavedShards:
    """The previous run's saved shards (its checkpoint's state: `io.checkpoint`), which an incremental run loads
    its new records onto. Picklable: a task reads its own partitions'."""

    path: str  # the state directory
    files: tuple[str, ...]  # the files the checkpoint names
    partitions: tuple[int, ...]  # every offsets partition the previous run read

    def of_partition(self, partition: int):
        """The partition's saved shard (`coordinator.saved.SavedShard`), None when the previous run saved none
        of it (it read only quarantined rows there)."""
        from pipelines.coordinator.saved import SavedShard
        from pipelines.io.checkpoint import read_state_file

        data = read_state_file(self.path, list(self.files), partition)
        return None if data is None else SavedShard.from_bytes(data, f"{self.path} partition {partition}")

    def all(self) -> dict:
        """Offsets partition -> saved shard, of every partition with one."""
        shards = {p: self.of_partition(p) for p in self.partitions}
        return {p: s for p, s in shards.items() if s is not None}
