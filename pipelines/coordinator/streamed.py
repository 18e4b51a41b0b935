"""Coordinator shards loaded window by window: memory is the shards' state plus one window, whatever the log's
length.

Kafka's loader reads a partition in `offsets.load.buffer.size` windows and keeps only the state; so do
`StreamedShards`. Each window (decoded rows of one or more offsets partitions, each in log order, the windows in log
order) is cut to the run's point in time, reduced to the rows its end state can depend on (`reduction`), loaded onto
the state the previous window left (`loader.load_shard(..., continued=True)`: the same objects, carried on), and
turned into its history (`offset_commits`) rows, which `load` hands back for the caller to write as it goes. A
whole table loaded as one window (`load(..., last=True)`) is one pass of each step over all its partitions: the
in-process path pays no cost per window or per partition beyond the loaders'.

A transactional record's outcome is its marker's, which may come in a later window: its history row is held back
(`pending`, bounded by the records of transactions still open) and handed back by the window whose marker decides
it, as an incremental run decides the open rows of the shard it resumes (`decided`). The rows still open at the
end are `finish`'s, with the states, the markers and the naming rows of every window. So the history comes out in
the order its rows were settled, not in record order.

Kafka's log never holds an offset twice, but an input can: overlapping segment files (a copied or restored log
directory) hold the same records. Each record is loaded once, whatever the windows (`_once`): within a window its
copies sit side by side in log order and the first is kept; a record at or below the highest offset an earlier
window loaded of its partition (`high_water`) is a copy and is not loaded or written again. So a second copy adds
no history row, no group event, no marker and no naming row; the tally and the quarantine count every row read,
copies included (`frames.tally`).

A window holds whole log batches (`frames.segment_shards.decoded_windows` cuts at batch boundaries), but nothing
here depends on it: the loaders read a record's batch from its own columns.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Iterator, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipelines.coordinator.loader import ShardState, load_shard
from pipelines.coordinator.options import ReplayOptions
from pipelines.coordinator.reduction import is_control, state_relevant_mask, state_relevant_rows
from pipelines.coordinator.saved import SavedShard
from pipelines.heap import gc_paused, thawed

PART = "offsets_partition"
_NO_OFFSET = np.iinfo(np.int64).min
#: How many of a split partition's kept rows its load holds back to reduce across ranges (`across_ranges`), about
#: 100 MB of decoded rows, and how many it loads at a time (a window's rows are Python objects while it loads).
ACROSS_RANGES_ROWS = 200_000
WINDOW_ROWS = 50_000


@dataclass
class FinishedShards:
    """What streamed shards hold at the end: their states (by offsets partition, in partition order), their
    history rows still pending, and every marker and naming row they read (the resumed shards' first)."""

    states: list[ShardState]  # the partitions that loaded a record within the run's cut, and the resumed ones
    pending: pa.Table
    markers: pa.Table
    naming: pa.Table

    @property
    def state(self) -> ShardState | None:
        """The one shard's state (a task loads one offsets partition); None: nothing was loaded."""
        return self.states[0] if self.states else None


class StreamedShards:
    """Offsets partitions, loaded one window at a time (`load`), each from the start of its log or from the shard
    the previous run saved (`resume`, consumed). `history=False`: no history rows and no group events (a restore
    plan replaying a history it already has); without `keep_outcomes` (a load that neither writes a history nor
    saves its shards) the loaders are not given the transactional records whose outcome no state depends on
    (`reduction`), and no history is built."""

    def __init__(self, options: ReplayOptions, resume: Mapping[int, SavedShard] | None = None,
                 history: bool = True, keep_outcomes: bool = True, relevant: bool = False,
                 commits: bool = True, floor: Mapping[int, int] | None = None, ranged: bool = False,
                 own_markers: bool = False) -> None:
        resume = dict(resume or {})
        self.options = options
        # a bucket of a split partition's groups: the loaders read only the end markers of the producers with a
        # record among the rows held or loaded so far. Any other's marker is a no-op there: it ends no transaction
        # the bucket holds (a producer first seen later has none open yet)
        self.own_markers = own_markers
        self._producers: set[int] = set()
        self._producer_ids = pa.array([], pa.int64())
        self.relevant = relevant  # the windows hold only the rows the loaders read, cut and reduced (state only)
        self.history = history
        # False: the windows' own history rows were made where they were decoded (a split partition's ranges,
        # `frames.ranges`); a load only decides the rows held back (`hold`)
        self.commits = commits
        # True: a range of a split partition (`frames.ranges`). No state is loaded: the loads build the range's
        # history (its transactional records' outcomes from its own markers, `_range_outcomes`) and keep the rows
        # the loaders would read for `passed_on`, which its partition's load reads
        self.ranged = ranged
        self._open: dict[tuple[int, int], list[int]] = {}  # (partition, producer) -> its open records' offsets
        self._passed: list[pa.Table] = []
        self._passed_rows, self._reduced_rows = 0, 0
        self.keep_outcomes = keep_outcomes or history
        self.states: dict[int, ShardState] = {p: s.state for p, s in resume.items()}
        self._carried: set[int] = set()  # partitions whose state a window of this load made: carried on in place
        self._unstamped = bool(resume)  # resumed open rows carry the previous run's id until a load decides them
        opened = [s.open_history for s in resume.values() if s.open_history.num_rows] if self.keep_outcomes else []
        self.pending = pa.concat_tables(opened) if opened else None
        self._markers = [s.markers for s in resume.values()]
        self._naming = [s.naming for s in resume.values()]
        # offsets partition -> the highest offset a window loaded; `floor`: of the ranges before this one
        self.high_water: dict[int, int] = dict(floor or {})

    def load(self, window: pa.Table, last: bool = False) -> pa.Table | None:
        """Loads `window` (decoded rows, error/unknown rows allowed) onto the states; the history rows settled by it
        (None: no history is kept): its own records' rows whose outcome is known, and the held-back rows its
        markers decided. `last`: no window follows, so nothing is held back (the rows still pending are returned
        with the others, as the whole log's load gives them)."""
        from pipelines.coordinator.shard import conform_decoded, loadable, naming_rows, transaction_markers, until_cut
        from pipelines.coordinator.tables import outcomes_table

        options = self.options
        table = loadable(conform_decoded(window))
        table = self._once(table if self.relevant else until_cut(table, options), last)
        self._markers.append(transaction_markers(table, options))
        self._naming.append(naming_rows(table))
        open_producers = None
        if not self.keep_outcomes:
            open_producers = {p: list(s.pending) for p, s in self.states.items() if s.pending}
        # the rows loaded, as a mask over `table` (None: all): the loaders read a few columns of them
        keep = None if self.relevant else state_relevant_mask(
            table, options.is_modern, keep_outcomes=self.keep_outcomes, open_producers=open_producers)
        touched: list[int] = []
        if self.own_markers:  # a partition whose rows were all markers of others is loaded all the same
            touched = pc.unique(table.column(PART)).to_pylist()
            self._met(table)
            own = pc.or_(pc.invert(is_control(table)), pc.fill_null(
                pc.is_in(table.column("producer_id"), self._producer_ids), False)).to_numpy(zero_copy_only=False)
            keep = own if keep is None else keep & own
        outcomes = [outcomes_table(-1, {})]
        if self.ranged:
            loaded = table if keep is None else table.filter(pa.array(keep))
            if loaded.num_rows:
                self._pass_on(loaded)
            outcomes.extend(self._range_outcomes(table))
        else:
            self._load_states(table, keep, outcomes, touched)
        if not self.keep_outcomes:
            return None
        return self._settled(table, pa.concat_tables(outcomes), last)

    def _load_states(self, table: pa.Table, keep: np.ndarray | None, outcomes: list[pa.Table], touched=()) -> None:
        """The rows of `table` that `keep` selects (None: all) through the loaders onto the states, and onto those
        of the partitions `touched` (whose rows `keep` may have left out); each state's outcomes appended to
        `outcomes`."""
        from pipelines.coordinator.shard import loader_rows
        from pipelines.coordinator.tables import outcomes_table

        with gc_paused(keep=True):
            parts = table.column(PART).to_numpy(zero_copy_only=False)
            parts = parts if keep is None else parts[keep]
            rows = loader_rows(table, keep)
            # each partition's rows are a run (`loadable`): sliced off at the runs' starts, not grouped row by row
            starts = np.flatnonzero(np.r_[True, parts[1:] != parts[:-1]]) if len(parts) else np.empty(0, np.int64)
            ends = [*starts[1:].tolist(), len(rows)]
            by_part = {p: rows[a:b] for p, a, b in zip(parts[starts].tolist(), starts.tolist(), ends)}
            fresh = [p for p in self.states if p not in self._carried] if self._unstamped else []
            for part in sorted(set(by_part) | set(fresh) | set(touched)):
                state = load_shard(part, by_part.pop(part, ()), self.options, self.states.get(part), self.history,
                                   continued=part in self._carried)
                self.states[part] = state
                self._carried.add(part)
                if self.keep_outcomes:
                    outcomes.append(outcomes_table(part, state.outcomes, state.decided_by))

    def _range_outcomes(self, table: pa.Table) -> list[pa.Table]:
        """The outcomes of a range's transactional records (`ranged`), as the loaders give them: each record's is
        its producer's next end marker in the log (`loader.is_end_marker`: the loaders' `_decide`), from this
        window or a later one of the range (open until then: `pending`). A walk over the transactional records
        and the end markers only, in log order."""
        from pipelines.coordinator.reduction import end_markers, transactional_commits
        from pipelines.coordinator.tables import outcomes_table

        _, ends = end_markers(table, self.options.is_modern)
        picked = pc.or_(ends, transactional_commits(table, self.options.is_modern))
        decided: dict[int, dict[int, tuple]] = {}
        if pc.any(picked).as_py():
            rows = table.filter(picked)
            for part, pid, offset, end, ctype, ts in zip(
                    rows.column(PART).to_pylist(), pc.fill_null(rows.column("producer_id"), -1).to_pylist(),
                    rows.column("offset").to_pylist(), ends.filter(picked).to_pylist(),
                    rows.column("control_type").to_pylist(), rows.column("timestamp").to_pylist()):
                if not end:
                    self._open.setdefault((part, pid), []).append(offset)
                    continue
                outcome = "committed" if ctype == "COMMIT" else "aborted"
                got = decided.setdefault(part, {})
                for off in self._open.pop((part, pid), ()):
                    got[off] = (outcome, offset, ts)
        out = []
        for part in sorted(set(decided) | {p for p, _ in self._open}):
            got = decided.get(part, {})
            outcomes = {off: o for off, (o, _, _) in got.items()}
            for (p, _), offs in self._open.items():
                if p == part:
                    outcomes.update(dict.fromkeys(offs, "pending"))
            out.append(outcomes_table(part, outcomes, {off: (m, ts) for off, (_, m, ts) in got.items()}))
        return out

    def _settled(self, table: pa.Table, outcomes: pa.Table, last: bool) -> pa.Table:
        """The history rows a load settles: `table`'s own (unless `commits` is off) with `outcomes`, and the held-back
        rows `outcomes` decided; the rows still pending are held back unless `last`."""
        from pipelines.coordinator.tables import offset_commits_table

        own = table if self.history and self.commits else table.slice(0, 0)
        rows = offset_commits_table(own, outcomes, self.options.snapshot_id)
        if self.pending is not None and self.pending.num_rows:
            held = self.pending
            if outcomes.num_rows or self._unstamped:
                held = decided(held, outcomes, self.options.snapshot_id)
            rows = pa.concat_tables([held, rows])
        self._unstamped = False
        if last:
            self.pending = rows.slice(0, 0)
            return rows
        still = pc.fill_null(pc.equal(rows.column("txn_outcome"), "pending"), False)
        if not pc.any(still).as_py():
            self.pending = rows.slice(0, 0)
            return rows
        self.pending = rows.filter(still)
        return rows.filter(pc.invert(still))

    def take_group_events(self) -> list[tuple[int, list]]:
        """(offsets partition, its group events since the last take: `groups.GroupStore.history`) of every shard
        that has some, handed over and dropped here: a task that writes its group history as it loads holds one
        window's events, not its log's."""
        out = []
        for part, state in sorted(self.states.items()):
            events = state.groups.history
            if events:
                out.append((part, events))
                state.groups.history = []
        return out

    def hold(self, rows: pa.Table) -> None:
        """History rows of open transactions settled elsewhere (the range before the next window's, of a split
        partition), held back until a load's markers decide them."""
        if self.own_markers:
            self._met(rows)
        if rows.num_rows:
            self.pending = rows if self.pending is None or not self.pending.num_rows else pa.concat_tables(
                [self.pending, rows.cast(self.pending.schema)])

    def _met(self, rows: pa.Table) -> None:
        """The producers of `rows` (`own_markers`) among those whose end markers the loaders read."""
        new = producers_of([rows]) - self._producers
        if new:
            self._producers |= new
            self._producer_ids = pa.array(sorted(self._producers), pa.int64())

    def _pass_on(self, loaded: pa.Table) -> None:
        """`loaded` kept for `passed_on`, reduced again with the rows kept before it once they have doubled: the
        rows a range hands on stay about the size of its state, not of its log."""
        self._passed.append(loaded)
        self._passed_rows += loaded.num_rows
        if self._passed_rows > 2 * self._reduced_rows + 1_000_000:
            self._passed = [state_relevant_rows(pa.concat_tables(self._passed), self.options.is_modern)]
            self._passed_rows = self._reduced_rows = self._passed[0].num_rows

    def passed_on(self) -> pa.Table | None:
        """What the loads handed the loaders, in log order, reduced (`reduction`): what a split partition's load
        reads of this range (None: nothing)."""
        if not self._passed:
            return None
        rows = state_relevant_rows(pa.concat_tables(self._passed), self.options.is_modern)
        self._passed, self._passed_rows, self._reduced_rows = [], 0, 0
        return rows

    def _once(self, table: pa.Table, last: bool) -> pa.Table:
        """`table` (`loadable`: each partition's rows in log order) with each record once: without the copies of
        records an earlier window loaded (at or below its partition's high water) nor a second copy of a record in
        `table`; the high water moved past `table` unless no window follows."""
        if not table.num_rows:
            return table
        p = table.column(PART).to_numpy(zero_copy_only=False)
        o = pc.fill_null(table.column("offset"), _NO_OFFSET).to_numpy(zero_copy_only=False)
        placed = o != _NO_OFFSET  # a row without an offset is no copy of anything
        copy = np.zeros(len(p), dtype=bool)
        copy[1:] = (p[1:] == p[:-1]) & (o[1:] == o[:-1]) & placed[1:]
        if self.high_water:
            known = np.fromiter(self.high_water, dtype=np.int64, count=len(self.high_water))
            marks = np.fromiter(self.high_water.values(), dtype=np.int64, count=len(self.high_water))
            order = np.argsort(known)
            known, marks = known[order], marks[order]
            at = np.clip(np.searchsorted(known, p), 0, len(known) - 1)
            copy |= (known[at] == p) & (o <= marks[at]) & placed
        if not last:
            starts = np.flatnonzero(np.r_[True, p[1:] != p[:-1]])
            for part, top in zip(p[starts].tolist(), np.maximum.reduceat(o, starts).tolist()):
                if top != _NO_OFFSET:
                    self.high_water[part] = max(top, self.high_water.get(part, top))
        return table.filter(pa.array(~copy)) if copy.any() else table

    def finish(self) -> FinishedShards:
        """The shards after their last window (a resumed partition no window held: the state it resumed)."""
        from pipelines.coordinator.shard import MARKER_COLUMNS, NAMING_COLUMNS

        if self._unstamped or not self._markers:
            self.load(_empty_decoded())  # loads the resumed shards and stamps their open rows, as a load would
        markers = [m for m in self._markers if m.num_rows] or self._markers[-1:]
        naming = [n for n in self._naming if n.num_rows] or self._naming[-1:]
        markers = pa.concat_tables([m.cast(markers[0].schema) for m in markers]).select(list(MARKER_COLUMNS))
        naming = pa.concat_tables([n.cast(naming[0].schema) for n in naming]).select(list(NAMING_COLUMNS))
        pending = self.pending if self.pending is not None else _no_history()
        thawed()  # the states frozen as they grew (`_load_states`) are handed on
        return FinishedShards([self.states[p] for p in sorted(self.states)], pending, markers, naming)


def load_split(options: ReplayOptions, kept: Iterable[pa.Table], held: list[pa.Table],
               resume: Mapping[int, SavedShard] | None = None, own_markers: bool = False
               ) -> Iterator[tuple[pa.Table, list[tuple[int, list]]] | FinishedShards]:
    """A split partition loaded from its ranges (`frames.ranges`; each a `StreamedShards(ranged=True)`): `kept`,
    each range's `passed_on` rows in log order (read one at a time), loaded as the windows of one streamed shard onto
    `resume`; `held`, each range's pending history rows, decided by the markers of the ranges after it (a record's
    outcome is its producer's next end marker's, so they may be held before any window). For each window, the
    history rows it settles and its group events (`StreamedShards.take_group_events`); then the shard.
    `own_markers` (a bucket of the partition's groups, `by_group`): the loaders read only the end markers of its
    own rows' producers (`StreamedShards`); the shard's markers are every one all the same."""
    loader = StreamedShards(options, resume, relevant=True, commits=False, own_markers=own_markers)
    for rows in held:
        loader.hold(rows)
    for rows in across_ranges(kept, options.is_modern):
        settled = loader.load(rows)
        yield settled, loader.take_group_events()
    yield loader.finish()


def across_ranges(kept: Iterable[pa.Table], modern: bool) -> Iterator[pa.Table]:
    """A split partition's ranges' kept rows (`kept`, in log order) reduced again across the ranges (`reduction`):
    each range keeps its own last commit of a key, and most keys are committed in every range. The rows are held
    back while there are at most `ACROSS_RANGES_ROWS` of them, and reduced together once there are more; what is
    still more after that is loaded as it stands (less reduced, which gives the same state), so a load holds about
    twice that many besides its state. The rows are handed on in windows of at most `WINDOW_ROWS`."""
    rows = ACROSS_RANGES_ROWS

    def windows(tables: list[pa.Table]) -> Iterator[pa.Table]:
        for t in tables:
            for start in range(0, max(t.num_rows, 1), WINDOW_ROWS):
                yield t.slice(start, WINDOW_ROWS)

    held: list[pa.Table] = []
    count = 0
    for table in kept:
        held.append(table)
        count += table.num_rows
        if count <= rows:
            continue
        if len(held) > 1:
            held = [state_relevant_rows(pa.concat_tables(held), modern)]
            count = held[0].num_rows
        if count > rows:
            yield from windows(held)
            held, count = [], 0
    if len(held) > 1:
        held = [state_relevant_rows(pa.concat_tables(held), modern)]
    yield from windows(held)


def producers_of(tables: Iterable[pa.Table]) -> set[int]:
    """The producers of the records of `tables` (decoded rows, or history rows) but their control records: a
    superset of those whose transactions the records are of, so the only ones whose end markers change what
    loading them gives."""
    out: set[int] = set()
    for t in tables:
        if t.num_rows:
            mine = t if "record_kind" not in t.column_names else t.filter(pc.invert(is_control(t)))
            out.update(p for p in pc.unique(mine.column("producer_id")).to_pylist() if p is not None and p >= 0)
    return out


def by_group(table: pa.Table, buckets: int) -> list[pa.Table]:
    """`table`'s rows (a split partition's kept rows, or its held history rows) in `buckets` tables by a hash of
    their group id that every process computes alike (CRC-32), each with every row of no group (the control
    records: every bucket's transactions read them), in `table`'s order. The buckets load side by side, each as
    the one load of a split partition does (`load_split`): their shards share no key (`ShardState.union`)."""
    import zlib

    if buckets <= 1:
        return [table]
    if not table.num_rows:
        return [table] * buckets
    ids = pc.dictionary_encode(table.column("group_id").combine_chunks())
    of_id = pa.array([zlib.crc32(g.encode()) % buckets for g in ids.dictionary.to_pylist()], pa.int32())
    bucket = pc.take(of_id, ids.indices)
    return [table.filter(pc.fill_null(pc.equal(bucket, b), True)) for b in range(buckets)]


def decided(rows: pa.Table, outcomes: pa.Table, snapshot_id: str) -> pa.Table:
    """History rows of open transactions with the outcome `outcomes` gives them (still pending where no marker
    came), stamped with this run's id."""
    from pipelines.coordinator.tables import DECIDED_COLUMNS, outcome_of

    got = outcome_of(rows.column(PART), rows.column("record_offset"), outcomes, DECIDED_COLUMNS)
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
