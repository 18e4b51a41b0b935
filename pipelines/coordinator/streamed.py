"""One coordinator shard loaded window by window: memory is the shard's state plus one window, whatever the log's
length.

Kafka's loader reads a partition in `offsets.load.buffer.size` windows and keeps only the state; so does a
`StreamedShard`. Each window (decoded rows of the partition, in log order, the windows in log order) is cut to the
run's point in time, reduced to the rows its end state can depend on (`reduction`), loaded onto the state the
previous window left (`loader.load_shard(..., continued=True)`: the same objects, carried on), and turned into its
history (`offset_commits`) rows, which `load` hands back for the caller to write as it goes.

A transactional record's outcome is its marker's, which may come in a later window: its history row is held back
(`pending`, bounded by the records of transactions still open) and handed back by the window whose marker decides
it, as an incremental run decides the open rows of the shard it resumes (`shard.decided`). The rows still open
at the end are `finish`'s, with the state, the markers and the naming rows of every window. So the history comes
out in the order its rows were settled, not in record order.

A window holds whole log batches (`frames.segment_shards.decoded_windows` cuts at batch boundaries), but nothing
here depends on it: the loaders read a record's batch from its own columns.
"""
from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from pipelines.coordinator.loader import ShardState, load_shard
from pipelines.coordinator.options import ReplayOptions
from pipelines.coordinator.reduction import state_relevant_rows
from pipelines.coordinator.saved import SavedShard
from pipelines.heap import gc_paused


@dataclass
class FinishedShard:
    """What a streamed shard holds at the end: its state, its history rows still pending, and every marker and naming
    row it read (the resumed shard's first)."""

    state: ShardState | None  # None: nothing to load (no record within the run's cut, no resumed shard)
    pending: pa.Table
    markers: pa.Table
    naming: pa.Table


class StreamedShard:
    """One offsets partition, loaded one window at a time (`load`), from the start of its log or from the shard the
    previous run saved (`resume`, consumed). `history=False`: no history rows and no group events (a restore plan
    replaying a history it already has)."""

    def __init__(self, partition: int, options: ReplayOptions, resume: SavedShard | None = None,
                 history: bool = True) -> None:
        self.partition = partition
        self.options = options
        self.history = history
        self.state: ShardState | None = None if resume is None else resume.state
        self.pending = _no_history() if resume is None or not history else resume.open_history
        self._fresh_pending = resume is not None  # the saved rows carry the previous run's id until decided here
        self._loaded = resume is not None
        self._markers = [] if resume is None else [resume.markers]
        self._naming = [] if resume is None else [resume.naming]

    def load(self, window: pa.Table) -> pa.Table:
        """Loads `window` (decoded rows of this partition, error/unknown rows allowed) onto the state; the history
        rows settled by it: its own records' rows whose outcome is known, and the held-back rows its markers
        decided."""
        from pipelines.coordinator.shard import (conform_decoded, loadable, loader_rows, naming_rows, outcomes_table,
                                                 transaction_markers, until_cut)
        from pipelines.coordinator.tables import offset_commits_table

        options = self.options
        table = until_cut(loadable(conform_decoded(window)), options)
        self._loaded = self._loaded or table.num_rows > 0
        with gc_paused():
            self.state = load_shard(self.partition, loader_rows(state_relevant_rows(table, options.is_modern)),
                                    options, self.state, self.history, continued=True)
        self._markers.append(transaction_markers(table, options))
        self._naming.append(naming_rows(table))
        if not self.history:
            return self.pending
        outcomes = outcomes_table(self.partition, self.state.outcomes, self.state.decided_by)
        rows = offset_commits_table(table, outcomes, options.snapshot_id)
        if self.pending.num_rows and (outcomes.num_rows or self._fresh_pending):
            rows = pa.concat_tables([decided(self.pending, outcomes, options.snapshot_id), rows])
            self._fresh_pending = False
        elif self.pending.num_rows:  # nothing decided: the held-back rows stay as they are
            rows = pa.concat_tables([self.pending, rows])
        still = pc.fill_null(pc.equal(rows.column("txn_outcome"), "pending"), False)
        if not pc.any(still).as_py():
            self.pending = rows.slice(0, 0)
            return rows
        self.pending = rows.filter(still)
        return rows.filter(pc.invert(still))

    def finish(self) -> FinishedShard:
        """The shard after its last window (a partition with no window: the state it resumed, or an empty one)."""
        from pipelines.coordinator.shard import MARKER_COLUMNS, NAMING_COLUMNS

        if self.state is None or self._fresh_pending:
            self.load(_empty_decoded())  # stamps the resumed open rows with this run's id, as a load would
        markers = [m for m in self._markers if m.num_rows] or self._markers[:1]
        naming = [n for n in self._naming if n.num_rows] or self._naming[:1]
        markers = pa.concat_tables([m.cast(markers[0].schema) for m in markers]).select(list(MARKER_COLUMNS))
        naming = pa.concat_tables([n.cast(naming[0].schema) for n in naming]).select(list(NAMING_COLUMNS))
        return FinishedShard(self.state if self._loaded else None, self.pending, markers, naming)


def decided(rows: pa.Table, outcomes: pa.Table, snapshot_id: str) -> pa.Table:
    """History rows of open transactions with the outcome `outcomes` gives them (still pending where no marker
    came), stamped with this run's id."""
    from pipelines.coordinator.tables import DECIDED_COLUMNS, outcome_of

    got = outcome_of(rows.column("offsets_partition"), rows.column("record_offset"), outcomes, DECIDED_COLUMNS)
    for name, values in got.items():
        if name not in rows.column_names:
            continue
        at = rows.schema.get_field_index(name)
        target = rows.schema.field(name).type
        if pa.types.is_timestamp(target):  # the outcomes hold epoch ms
            values = values.cast(pa.timestamp("ms", tz="UTC"))
        values = values.cast(target)
        rows = rows.set_column(at, name, pc.coalesce(values, rows.column(name)))
    if "snapshot_id" in rows.column_names:
        rows = rows.set_column(rows.schema.get_field_index("snapshot_id"), "snapshot_id",
                               pa.array([snapshot_id] * rows.num_rows, rows.schema.field("snapshot_id").type))
    return rows


def _empty_decoded() -> pa.Table:
    from schemas.decoded import DECODED_RECORD_SCHEMA

    return DECODED_RECORD_SCHEMA.empty_table()


_NO_HISTORY: list[pa.Table] = []


def _no_history() -> pa.Table:
    """An empty history (`offset_commits` rows), built once: its schema takes milliseconds to derive."""
    if not _NO_HISTORY:
        from pipelines.coordinator.tables import offset_commits_table, outcomes_table

        _NO_HISTORY.append(offset_commits_table(_empty_decoded(), outcomes_table(-1, {}), ""))
    return _NO_HISTORY[0]
