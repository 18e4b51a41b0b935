"""Coordinator shards loaded window by window: memory is the shards' state plus one window, whatever the log's
length.

Kafka's loader reads a partition in `offsets.load.buffer.size` windows and keeps only the state; so do
`StreamedShards`. Each window (decoded rows of one or more offsets partitions, each in log order, the windows in log
order) is cut to the run's point in time and replayed onto the state the previous window left: its offset commits and
markers column by column (`offset_metadata`, which decides what each record did), its group records through the
Python loaders (`loader`, the few rows `reduction.loader_mask` selects). Its offset commits become history
(`offset_commits`) rows with those decisions, which `load` hands back for the caller to write as it goes. A whole
table loaded as one window (`load(..., last=True)`) is one pass of each step over all its partitions.

A transactional record's outcome is its marker's, which may come in a later window: its history row is held back
(`pending`, bounded by the records of transactions still open) and handed back by the window whose marker decides
it, as an incremental run decides the open rows of the shard it resumes (`decided`). The rows still open at the
end are `finish`'s, with the states, the markers and the naming rows of every window. So the history comes out in
the order its rows were settled, not in record order.

What a load reads and gives is its `LoadMode`: a partition's load from its log (`WHOLE`; `WHOLE_STATE`: its state
only, no history nor group events, the state at a cut), a range of a split
partition (`RANGE`: no state; its plain values' history, the rest handed on), a split partition's load of what its
ranges handed on (`SPLIT`), a replay of rows cut and reduced already that keeps no history (`STATE_ONLY`).

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

import zlib
from dataclasses import dataclass
from typing import Iterable, Iterator, Literal, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipelines.coordinator.decoded import (MARKER_COLUMNS, NAMING_COLUMNS, PART, conform_loaded, group_rows, loadable,
                                           looped_batch_times, naming_rows, transaction_markers, until_cut,
                                           with_batch_times)
from pipelines.coordinator.loader import ShardState, replay_group_records
from pipelines.coordinator.offset_metadata import (DECIDED_COLUMNS, DECIDED_TYPES, READ_COLUMNS, Decisions,
                                                   is_offset_commit, no_carried, plain_value_decisions, plain_values,
                                                   replay_offsets)
from pipelines.coordinator.options import ReplayOptions
from pipelines.coordinator.reduction import loader_mask, split_mask
from pipelines.coordinator.saved import SavedShard
from pipelines.coordinator.tables import HISTORY_READS, decided_of, offset_commits_table
from pipelines.heap import gc_paused, thawed
from schemas.decoded import DECODED_RECORD_SCHEMA
_NO_OFFSET = np.iinfo(np.int64).min
#: How many of a split partition's kept rows its load holds back to reduce across ranges (`across_ranges`), about
#: 100 MB of decoded rows, and how many it loads at a time.
ACROSS_RANGES_ROWS = 200_000
WINDOW_ROWS = 50_000
#: The share of its rows a reduction across ranges may keep for the next to be worth it (`across_ranges`).
ACROSS_RANGES_KEEP = 0.75
#: A range reduces the rows it hands on (`_pass_on`), its windows whole and what its last reduction kept, once they
#: are this many more than twice what that reduction left: what it holds rolls with its state, not its log. A window
#: is not cut on its own: asking codes every row's key and a cut copies every column, more than the rows it drops
#: cost the range's next reduction, and a range of `decode.split_bytes` holds at most its rows either way.
PASS_ON_SLACK_ROWS = 1_000_000
#: A table loses up to this many rows by slicing around them (`_without`): each slice is a chunk of every column.
WITHOUT_SLICES_MAX = 16


@dataclass(frozen=True)
class LoadMode:
    """What a load reads and gives back.

    * `cut`: the windows are decoded rows, cut here at the run's point in time (else they were cut and reduced);
    * `state`: the windows are replayed onto the shards' state (else: a range of a split partition, which loads none
      and hands on the rows its partition's load reads, `reduction.split_mask`);
    * `history`: the offset commits a load gives history rows of: every one, none, the plain values (a range), or
      the others (a split partition's load: its ranges wrote their plain values);
    * `group_events`: the group records' history events are kept (`take_group_events`).
    """

    cut: bool
    state: bool
    history: Literal["every", "plain", "unplain", "none"]
    group_events: bool


WHOLE = LoadMode(cut=True, state=True, history="every", group_events=True)
WHOLE_STATE = LoadMode(cut=True, state=True, history="none", group_events=False)
RANGE = LoadMode(cut=True, state=False, history="plain", group_events=False)
SPLIT = LoadMode(cut=False, state=True, history="unplain", group_events=True)
STATE_ONLY = LoadMode(cut=False, state=True, history="none", group_events=False)


@dataclass
class FinishedShards:
    """What streamed shards hold at the end: their states (by offsets partition, in partition order), their
    history rows still pending, and every marker and naming row they read (the resumed shards' first); how many
    records the Python loaders read (`StreamedShards.looped`)."""

    states: list[ShardState]  # the partitions that loaded a record within the run's cut, and the resumed ones
    pending: pa.Table
    markers: pa.Table
    naming: pa.Table
    looped: int = 0

    @property
    def state(self) -> ShardState | None:
        """The one shard's state (a task loads one offsets partition); None: nothing was loaded."""
        return self.states[0] if self.states else None


class StreamedShards:
    """Offsets partitions, loaded one window at a time (`load`) as `mode` says, each from the start of its log or
    from the shard the previous run saved (`resume`, consumed). `floor`: offsets partition -> the highest offset the
    ranges before this one read (a range of a split partition)."""

    def __init__(self, options: ReplayOptions, resume: Mapping[int, SavedShard] | None = None,
                 mode: LoadMode = WHOLE, floor: Mapping[int, int] | None = None) -> None:
        resume = dict(resume or {})
        self.options = options
        self.mode = mode
        self._passed: list[pa.Table] = []
        self._passed_rows, self._reduced_rows = 0, 0
        #: the records the Python loaders read one at a time (the rest are replayed column by column)
        self.looped = 0
        self.states: dict[int, ShardState] = {p: s.state for p, s in resume.items()}
        for state in self.states.values():  # a resumed shard's group events are those of what it loads now
            state.groups.history = [] if mode.group_events else None
        self._unstamped = bool(resume)  # resumed open rows carry the previous run's id until a load decides them
        opened = [s.open_history for s in resume.values() if s.open_history.num_rows] \
            if mode.history != "none" else []
        self.pending = pa.concat_tables(opened) if opened else None
        self._markers = [s.markers for s in resume.values()]
        self._naming = [s.naming for s in resume.values()]
        # offsets partition -> the highest offset a window loaded; `floor`: of the ranges before this one
        self.high_water: dict[int, int] = dict(floor or {})

    def load(self, window: pa.Table, last: bool = False) -> pa.Table | None:
        """Loads `window` (decoded rows, error/unknown rows allowed); the history rows settled by it (None: no
        history is kept): its own records' rows whose outcome is known, and the held-back rows its markers decided.
        `last`: no window follows, so nothing is held back (the rows still pending are returned with the others,
        as the whole log's load gives them)."""
        options, mode = self.options, self.mode
        table = with_batch_times(loadable(conform_loaded(window), options.unknown_key_types, options.unknown_fields,
                                          options.limited_value_versions))
        table = self._once(until_cut(table, options) if mode.cut else table, last)
        self._markers.append(transaction_markers(table, options))
        self._naming.append(naming_rows(table))
        if not mode.state:
            if table.num_rows:
                self._pass_on(table)
            # the history's columns alone: a filter copies every column it is given
            plain = table.select(list(HISTORY_READS)).filter(plain_values(table, options.is_modern))
            return offset_commits_table(plain, plain_value_decisions(plain), options.snapshot_id)
        decisions = self._replay(table)
        if mode.history == "none":
            return None
        return self._settled(table, decisions, last)

    def _replay(self, table: pa.Table) -> Decisions:
        """`table`'s offsets (`offset_metadata.replay_offsets`) and group records (`loader.replay_group_records`)
        replayed onto the states, partition by partition (each partition's rows are a run: `loadable`); what its
        offset commits did, in its order, and the records of open transactions its markers ended."""
        parts = table.column(PART).to_numpy(zero_copy_only=False)
        starts = np.flatnonzero(np.r_[True, parts[1:] != parts[:-1]]) if len(parts) else np.empty(0, np.int64)
        ends = [*starts[1:].tolist(), len(parts)]
        decisions = []
        with gc_paused(keep=True):
            for part, a, b in zip(parts[starts].tolist(), starts.tolist(), ends):
                rows = table.slice(a, b - a)
                state = self.states.get(part)
                if state is None:
                    state = self.states[part] = ShardState.empty(part, self.options, self.mode.group_events)
                decisions.append(replay_offsets(part, rows, state, self.options))
                keep = loader_mask(rows)
                looped = group_rows(rows, keep)
                replay_group_records(state.groups, looped, looped_batch_times(rows, keep))
                self.looped += len(looped)
        if not decisions:
            return Decisions({c: pa.array([], DECIDED_TYPES[c]) for c in DECIDED_COLUMNS}, no_carried(),
                             table.select(list(READ_COLUMNS)))
        return Decisions.concat(decisions)

    def _settled(self, table: pa.Table, decisions: Decisions, last: bool) -> pa.Table:
        """The history rows a load settles: its own offset commits' (all, or those its mode gives) with the
        decisions, and the held-back rows the decisions settled; the rows still pending are held back unless
        `last`."""
        own, decided_own = decisions.commits, decisions.own
        if self.mode.history == "unplain":
            unplain = pc.invert(plain_values(table, self.options.is_modern))
            own = table.select(list(HISTORY_READS)).filter(unplain)
            picked = pa.array(unplain.filter(is_offset_commit(table)).to_numpy(zero_copy_only=False))
            decided_own = {c: a.filter(picked) for c, a in decided_own.items()}
        rows = offset_commits_table(own, decided_own, self.options.snapshot_id)
        if self.pending is not None and self.pending.num_rows:
            held = self.pending
            if decisions.carried.num_rows or self._unstamped:
                held = decided(held, decisions.carried, self.options.snapshot_id)
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
        return _without(rows, np.flatnonzero(still.to_numpy(zero_copy_only=False)))

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

    def _pass_on(self, loaded: pa.Table) -> None:
        """`loaded` (a window's rows, whole: `PASS_ON_SLACK_ROWS`) kept for `passed_on`, reduced with the rows kept
        before it once they have doubled: the rows a range hands on stay about the size of its state, not
        of its log."""
        self._passed.append(loaded)
        self._passed_rows += loaded.num_rows
        if self._passed_rows > 2 * self._reduced_rows + PASS_ON_SLACK_ROWS:
            self._passed = [_split_rows(pa.concat_tables(self._passed), self.options.is_modern)]
            self._passed_rows = self._reduced_rows = self._passed[0].num_rows

    def passed_on(self, buckets: int = 1) -> list[pa.Table] | None:
        """What a range hands on (`reduction.split_mask`) in `buckets` tables of its partition's groups
        (`by_group`), each in log order and in one chunk (None: nothing): cut from its windows, it holds a chunk per
        window, and each chunk would be a batch of the blob it goes in (`io.blobs`), every column of which is packed
        and opened on its own, and a table of many chunks for every step of the split load. The reduction's rows
        are picked bucket by bucket: the kept rows are copied into their buckets once, not first into one table."""
        if not self._passed:
            return None
        rows = pa.concat_tables(self._passed)
        keep = split_mask(rows, self.options.is_modern)
        self._passed, self._passed_rows, self._reduced_rows = [], 0, 0
        return [b.combine_chunks() for b in by_group(rows, buckets, keep)]

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
        if self._unstamped or not self._markers:
            self.load(_empty_decoded())  # stamps the resumed shards' open rows, as a load would
        markers = [m for m in self._markers if m.num_rows] or self._markers[-1:]
        naming = [n for n in self._naming if n.num_rows] or self._naming[-1:]
        markers = pa.concat_tables([m.cast(markers[0].schema) for m in markers]).select(list(MARKER_COLUMNS))
        naming = pa.concat_tables([n.cast(naming[0].schema) for n in naming]).select(list(NAMING_COLUMNS))
        pending = self.pending if self.pending is not None else _no_history()
        thawed()  # the states frozen as they grew are handed on
        return FinishedShards([self.states[p] for p in sorted(self.states)], pending, markers, naming, self.looped)


def _without(table: pa.Table, rows: np.ndarray) -> pa.Table:
    """`table` without its rows numbered `rows` (ascending): the slices between them while they are few (a window
    holds back the few records of the transactions still open at its end, among tens of thousands it settles),
    else filtered (which copies every column)."""
    if len(rows) > WITHOUT_SLICES_MAX:
        keep = np.ones(table.num_rows, dtype=bool)
        keep[rows] = False
        return table.filter(pa.array(keep))
    bounds = [-1, *rows.tolist(), table.num_rows]
    pieces = [table.slice(a + 1, b - a - 1) for a, b in zip(bounds, bounds[1:]) if b - a > 1]
    return pa.concat_tables(pieces) if pieces else table.slice(0, 0)


def _split_rows(table: pa.Table, modern: bool) -> pa.Table:
    keep = split_mask(table, modern)
    return table if keep is None else _rows_at(table, keep)


def load_split(options: ReplayOptions, kept: Iterable[pa.Table], resume: Mapping[int, SavedShard] | None = None
               ) -> Iterator[tuple[pa.Table, list[tuple[int, list]]] | FinishedShards]:
    """A split partition loaded from its ranges (`frames.ranges`; each a `StreamedShards` in `RANGE` mode): `kept`,
    each range's `passed_on` rows in log order (read one at a time), loaded as the windows of one streamed shard onto
    `resume`. For each window, the history rows it settles (every offset commit but the plain values, which the
    ranges wrote) and its group events (`StreamedShards.take_group_events`); then the shard."""
    loader = StreamedShards(options, resume, mode=SPLIT)
    for rows in across_ranges(kept, options.is_modern):
        settled = loader.load(rows)
        yield settled, loader.take_group_events()
    yield loader.finish()


def across_ranges(kept: Iterable[pa.Table], modern: bool) -> Iterator[pa.Table]:
    """A split partition's ranges' kept rows (`kept`, in log order) reduced again across the ranges
    (`reduction.split_mask`):
    each range keeps its own last commit of a key, and most keys are committed in every range. The rows are held
    back while there are at most `ACROSS_RANGES_ROWS` of them, and reduced together once there are more; what is
    still more after that is loaded as it stands (less reduced, which gives the same state), so a load holds about
    twice that many besides its state. A reduction that keeps more than `ACROSS_RANGES_KEEP` of its rows is the
    last: the rest is loaded as it comes (a log whose keys' values mostly follow their transactional commits keeps
    most of them, and a row reduced costs about a quarter of one loaded). The rows are handed on in windows of at
    most `WINDOW_ROWS`."""
    rows = ACROSS_RANGES_ROWS

    def windows(tables: list[pa.Table]) -> Iterator[pa.Table]:
        for t in tables:
            for start in range(0, max(t.num_rows, 1), WINDOW_ROWS):
                yield t.slice(start, WINDOW_ROWS)

    held: list[pa.Table] = []
    count = 0
    reducing = True
    for table in kept:
        if not reducing:
            yield from windows([table])
            continue
        held.append(table)
        count += table.num_rows
        if count <= rows:
            continue
        if len(held) > 1:
            before = count
            held = [_split_rows(pa.concat_tables(held), modern)]
            count = held[0].num_rows
            reducing = count <= ACROSS_RANGES_KEEP * before
        if count > rows or not reducing:
            yield from windows(held)
            held, count = [], 0
    if len(held) > 1:
        held = [_split_rows(pa.concat_tables(held), modern)]
    yield from windows(held)


def by_group(table: pa.Table, buckets: int, keep: np.ndarray | None = None) -> list[pa.Table]:
    """`table`'s rows (a split partition's kept rows, or its held history rows; `keep`: a mask of those to take,
    None: all) in `buckets` tables by a hash of their group id that every process computes alike (CRC-32), each
    with every row of no group (the control records: every bucket's transactions read them), in `table`'s order.
    The buckets load side by side, each as the one load of a split partition does (`load_split`): their shards
    share no key (`ShardState.union`)."""
    if buckets <= 1 or not table.num_rows:
        one = table if keep is None else _rows_at(table, keep)
        return [one] * max(1, buckets)
    ids = pc.dictionary_encode(table.column("group_id").combine_chunks())
    of_id = pa.array([zlib.crc32(g.encode()) % buckets for g in ids.dictionary.to_pylist()], pa.int32())
    bucket = pc.fill_null(pc.take(of_id, ids.indices), -1).to_numpy(zero_copy_only=False)
    no_group = bucket < 0
    return [_rows_at(table, ((bucket == b) | no_group) if keep is None else ((bucket == b) | no_group) & keep)
            for b in range(buckets)]


def _rows_at(table: pa.Table, mask: np.ndarray) -> pa.Table:
    """`table`'s rows `mask` selects, in one chunk: taken by their row numbers, where a filter of a table of many
    chunks (a range's windows) gives as many, and its nested columns cost a quarter more."""
    return table.take(pa.array(np.flatnonzero(mask)))


def decided(rows: pa.Table, carried: pa.Table, snapshot_id: str) -> pa.Table:
    """History rows of open transactions with what `carried` (`Decisions.carried`) decided of them (still pending
    where no marker came), stamped with this run's id."""
    got = decided_of(rows.column(PART), rows.column("record_offset"), carried, DECIDED_COLUMNS)
    for name, values in got.items():
        if name not in rows.column_names:
            continue
        at = rows.schema.get_field_index(name)
        target = rows.schema.field(name).type
        if pa.types.is_timestamp(target):  # the decisions hold epoch ms
            values = values.cast(pa.timestamp("ms", tz="UTC"))
        values = values.cast(target)
        rows = rows.set_column(at, name, pc.coalesce(values, rows.column(name)))
    if "snapshot_id" in rows.column_names:
        rows = rows.set_column(rows.schema.get_field_index("snapshot_id"), "snapshot_id",
                               pa.repeat(pa.scalar(snapshot_id, rows.schema.field("snapshot_id").type), rows.num_rows))
    return rows


def _empty_decoded() -> pa.Table:
    return DECODED_RECORD_SCHEMA.empty_table()


_NO_HISTORY: list[pa.Table] = []


def _no_history() -> pa.Table:
    """An empty history (`offset_commits` rows), built once: its schema takes milliseconds to derive."""
    if not _NO_HISTORY:
        empty = with_batch_times(_empty_decoded())
        _NO_HISTORY.append(offset_commits_table(empty, plain_value_decisions(empty), ""))
    return _NO_HISTORY[0]
