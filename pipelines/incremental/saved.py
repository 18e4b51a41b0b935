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
    sizes: tuple[tuple[str, int], ...] = ()  # (file, its bytes) as the checkpoint recorded them
    modern: bool | None = None  # the semantics the shards were loaded under (None: not known)
    digests: tuple[tuple[str, str], ...] = ()  # (file, the sha256 of its bytes) as the checkpoint recorded them

    def of_partition(self, partition: int):
        """The partition's saved shard (`coordinator.saved.SavedShard`; the buckets' of a split partition as one),
        None when the previous run saved none of it (it read only quarantined rows there)."""
        # imported here, not at module level: numpy ~0.1-0.3 s, pyarrow ~0.45 s of import (python -X importtime)
        from pipelines.coordinator.saved import SavedShard

        parts = [SavedShard.from_bytes(data, f"{self.path} partition {partition}", partition, self.modern)
                 for data in self._bytes(partition)]
        return SavedShard.union(parts) if parts else None

    def naming(self) -> list:
        """Every saved shard's `naming` rows (Arrow tables), read without loading the shards' state."""
        # imported here, not at module level: numpy ~0.1-0.3 s, pyarrow ~0.45 s of import (python -X importtime)
        from pipelines.coordinator.saved import naming_of

        return [naming_of(data, f"{self.path} partition {p}") for p in self.partitions for data in self._bytes(p)]

    def size_of(self, partition: int) -> int:
        """The bytes of the partition's saved shard (0: none, or not recorded)."""
        # imported here, not at module level: deltalake ~0.2 s, pyarrow ~0.45 s, pyarrow.fs ~0.05 s, pyarrow.parquet
        # ~0.05 s of import (python -X importtime)
        from pipelines.io.checkpoint import state_file_partitions

        return sum(n for f, n in self.sizes if state_file_partitions([f]) == {partition})

    def _bytes(self, partition: int) -> list[bytes]:
        # imported here, not at module level: deltalake ~0.2 s, pyarrow ~0.45 s, pyarrow.fs ~0.05 s, pyarrow.parquet
        # ~0.05 s of import (python -X importtime)
        from pipelines.coordinator.saved import SavedShardError
        from pipelines.io.checkpoint import read_state_files

        try:
            return read_state_files(self.path, list(self.files), partition, dict(self.digests))
        except ValueError as e:  # bytes of another file (an older state's of the same size, damaged in place)
            raise SavedShardError(f"{self.path} partition {partition}: unreadable saved shard: {e}") from None

    def all(self) -> dict:
        """Offsets partition -> saved shard, of every partition with one."""
        shards = {p: self.of_partition(p) for p in self.partitions}
        return {p: s for p, s in shards.items() if s is not None}
