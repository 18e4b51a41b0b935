"""The rows the previous run kept, as an incremental run reads them: each shard's task reads its own offsets
partition's (`frames.segment_shards`), and every record below a partition's mark (where the previous run's reading
stopped) is already in the previous snapshot (`past_marks`)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa


def past_marks(partitions, offsets, marks: dict[int, int]) -> pa.Array:
    """Per row (offsets partition, record offset: Arrow columns), whether the record is at or past its partition's
    mark: a record the previous snapshot does not hold yet."""
    part = np.asarray(partitions.to_numpy(zero_copy_only=False))
    below = np.zeros(len(part), np.int64)
    for p, o in marks.items():
        below[part == int(p)] = int(o)
    return pa.array(np.asarray(offsets.to_numpy(zero_copy_only=False)) >= below)


@dataclass(frozen=True)
class SavedRows:
    """The rows the previous run kept (its checkpoint's state: `io.checkpoint`), which an incremental run's shards
    load before their new records; each task reads those of its own offsets partitions. Picklable."""

    path: str  # the state directory
    files: tuple[str, ...] | None  # the files the checkpoint names (None: every file of the directory)
    partitions: tuple[int, ...]  # every offsets partition the previous run read
    next_offsets: dict  # offsets partition -> where the previous run's reading stopped (its checkpoint)

    def of_partition(self, partition: int) -> pa.Table:
        """The partition's saved rows, as decoded rows without the columns no loader reads."""
        from pipelines.coordinator.shard import UNREAD_COLUMNS, conform_decoded
        from pipelines.io.checkpoint import read_state_rows

        rows = conform_decoded(read_state_rows(self.path, self.files, partition=partition))
        return rows.drop_columns([c for c in UNREAD_COLUMNS if c in rows.column_names])

    def drop_known_events(self, state) -> None:
        """The group events of `state` (`GroupStore.history`) of saved records dropped: a run resuming from these
        rows carries the previous snapshot's `group_history` forward and adds its new records' events."""
        if state.groups.history:
            mark = self.next_offsets.get(state.partition, 0)
            state.groups.history = [e for e in state.groups.history if e["record_offset"] >= mark]

    def changed_history(self, history: pa.Table) -> pa.Table:
        """The history rows a run resuming from these rows may add or change: its new records, and the
        transactional records among the saved ones (a marker since may have decided them). The history holds every
        other saved record as it is (`Warehouse._merge_in_hand` would leave it)."""
        import pyarrow.compute as pc

        new = past_marks(history.column("offsets_partition"), history.column("record_offset"), self.next_offsets)
        return history.filter(pc.or_(new, pc.is_valid(history.column("txn_outcome"))))
