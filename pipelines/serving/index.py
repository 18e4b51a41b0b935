"""One snapshot held in memory for O(1) point lookups: Arrow tables sorted by group id plus a
group id -> row range map, and the group metadata as small dicts.

An index is immutable once built, so one request answered from one index never mixes two snapshots.
"""
from __future__ import annotations

import bisect
import difflib
import functools
from dataclasses import dataclass
from typing import Callable, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from pipelines.io.snapshots import (GroupNotFound, Snapshot, SnapshotReader, column_values, iso, jsonable,
                                    table_rows)
from pipelines.serving.cache import Kept, ResponseCache
from pipelines.serving.cells import did_you_mean
from pipelines.serving.history import batch_time, held_at, snapshot_commits
from pipelines.state.lag import consumer_lag  # noqa: F401 - LAG's one rule, which the serving modules import here

# The contract's shape of one committed offset (`GET /groups/{id}/offsets`).
OFFSET_FIELDS = ["topic", "partition", "committed_offset", "leader_epoch", "metadata", "commit_timestamp"]
# What each committed offset carries of its partition's bounds and its lag (`consumer_lag`, CONTRACT.md 2026-12-01).
LAG_FIELDS = ["log_start_offset", "log_end_offset", "lag", "lag_seconds", "commit_age_seconds"]
# The group's own figures of lag in time, on every row of `consumer_lag`.
GROUP_LAG_FIELDS = ["group_max_lag_seconds", "is_group_max"]

# Group states as Kafka names them (GroupState): classic, consumer, streams, share groups.
GROUP_STATES = (
    "Empty",
    "PreparingRebalance",
    "CompletingRebalance",
    "Stable",
    "Dead",
    "Assigning",
    "Reconciling",
    "NotReady",
)
GROUP_TYPES = ("classic", "consumer", "share", "streams")
REBALANCING_STATES = frozenset({"PreparingRebalance", "CompletingRebalance", "Assigning", "Reconciling"})
# The new coordinator's default server assignor: the first of `group.consumer.assignors` (default `uniform,range`).
DEFAULT_CONSUMER_ASSIGNOR = "uniform"
#: `ShareGroup.asDescribedGroup`'s AssignorName (4.0+): `group.share.assignors`' only one, `SimpleAssignor`
DEFAULT_SHARE_ASSIGNOR = "simple"


def assignment_strategy(group: dict) -> str | None:
    """ASSIGNMENT-STRATEGY as the broker describes the group.

    Classic groups: the protocol the generation chose. Consumer (KIP-848) groups: the server assignor most of
    the members name (`loaded_groups.protocol`), else the coordinator's default, as
    `ConsumerGroup.asDescribedGroup` does with `preferredServerAssignor().orElse(defaultAssignor)` (Kafka 3.7+).
    Share groups: the coordinator's share assignor, which `ShareGroupDescribe` names whatever the members do.
    """
    if group.get("group_type") == "consumer":
        return group.get("protocol") or DEFAULT_CONSUMER_ASSIGNOR
    if group.get("group_type") == "share":
        return DEFAULT_SHARE_ASSIGNOR
    return group.get("protocol") or None


class Grouped:
    """An Arrow table sorted by `key` (then `order`), with key -> (start, stop) row ranges."""

    def __init__(self, table: pa.Table | None, key: str, order: list[str]):
        self.ranges: dict = {}
        self.table = None
        self.iso: dict = {}
        self.plain = True
        self.columns_without_key: list[str] = []
        if table is None or table.num_rows == 0:
            return
        drop = [c for c in ("snapshot_id",) if c in table.column_names and c != key]
        table = table.drop_columns(drop)
        sort_keys = [(c, "ascending") for c in [key, *order] if c in table.column_names]
        table = table.sort_by(sort_keys)
        values, starts, ends = _runs(table, [key])
        self.ranges = dict(zip(values.column(0).to_pylist(), zip(starts, ends)))
        self.table = table
        # timestamps as ISO strings, computed once for the whole table (vectorized) instead of per answer
        self.iso = {
            f.name: iso_strings(table.column(f.name)) for f in table.schema if pa.types.is_timestamp(f.type)
        }
        # every column a JSON scalar once timestamps are ISO strings: rows(iso_time=True) need no further mapping
        self.plain = _plain(table.schema)
        self.columns_without_key = [c for c in table.column_names if c != key]

    def __contains__(self, k) -> bool:
        return k in self.ranges

    def count(self, k) -> int:
        r = self.ranges.get(k)
        return 0 if r is None else r[1] - r[0]

    def slice(self, k) -> pa.Table | None:
        r = self.ranges.get(k)
        if r is None:
            return None
        return self.table.slice(r[0], r[1] - r[0])

    def json_rows(self, k) -> list[dict]:
        """The rows of key k without the key column, as JSON values (what the API and `lookup` print)."""
        rows = self.rows(k, self.columns_without_key, iso_time=True)
        return rows if self.plain else [{c: jsonable(v) for c, v in r.items()} for r in rows]

    def rows(self, k, columns: list[str] | None = None, iso_time: bool = False) -> list[dict]:
        """The rows of key k (columns in table order); iso_time: timestamps as ISO strings, not datetimes."""
        r = self.ranges.get(k)
        if r is None:
            return []
        start, n = r[0], r[1] - r[0]
        t = self.table.slice(start, n)
        if columns is not None:
            t = t.select([c for c in columns if c in t.column_names])
        if not iso_time:
            return table_rows(t)
        names = tuple(t.column_names)
        if not names:
            return [{} for _ in range(n)]
        cols = [(self.iso[c].slice(start, n) if c in self.iso else t.column(c)).to_pylist() for c in names]
        return _row_builder(names)(cols)


def json_rows(t: pa.Table) -> list[dict]:
    """The rows of t as JSON values: timestamps as ISO strings (vectorized), other values as pyarrow gives them
    (mapped through `jsonable` only when a column is not a plain scalar)."""
    names = tuple(t.column_names)
    if not names:
        return [{} for _ in range(t.num_rows)]
    cols = [
        (iso_strings(t.column(c)) if pa.types.is_timestamp(t.schema.field(c).type) else t.column(c)).to_pylist()
        for c in names
    ]
    rows = _row_builder(names)(cols)
    return rows if _plain(t.schema) else [{k: jsonable(v) for k, v in r.items()} for r in rows]


def _plain(schema: pa.Schema) -> bool:
    """Every column a JSON scalar once timestamps are ISO strings."""
    return all(
        pa.types.is_timestamp(f.type) or pa.types.is_string(f.type) or pa.types.is_large_string(f.type)
        or pa.types.is_integer(f.type) or pa.types.is_boolean(f.type) or pa.types.is_null(f.type)
        or pa.types.is_floating(f.type)
        for f in schema
    )


_ROW_BUILDERS: dict[tuple[str, ...], Callable[[Sequence], list[dict]]] = {}


def _row_builder(names: tuple[str, ...]):
    """A function columns -> list of row dicts for these column names, written as a dict display
    (`{k0: v0, k1: v1, ...}` per row), which CPython builds ~4x faster than dict(zip(names, values)). The names
    are bound as arguments, never pasted into the source. One per distinct column list, kept."""
    fn = _ROW_BUILDERS.get(names)
    if fn is None:
        n = len(names)
        keys = ", ".join(f"k{i}" for i in range(n))
        values = ", ".join(f"v{i}" for i in range(n)) + ("," if n == 1 else "")
        items = ", ".join(f"k{i}: v{i}" for i in range(n))
        fn = eval(f"lambda {keys}: lambda cols: [{{{items}}} for {values} in zip(*cols)]")(*names)  # noqa: S307
        _ROW_BUILDERS[names] = fn
    return fn


def iso_strings(col) -> pa.ChunkedArray:
    """Timestamps -> `pipelines.io.snapshots.iso` strings (UTC, `Z`, `.ffffff` only when the microseconds are not zero),
    vectorized from the epoch values with integer arithmetic (Arrow's strftime is ~100x slower)."""
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    t = col.type
    if not pa.types.is_timestamp(t):
        raise TypeError(f"not a timestamp column: {t}")
    # the epoch value is UTC whatever the zone; drop the zone (a relabel) and normalize the unit to us
    col = col.cast(pa.timestamp(t.unit)).cast(pa.timestamp("us"), safe=False)
    epoch = col.cast(pa.int64())
    if pc.any(pc.less(epoch, 0)).as_py():  # before 1970: not worth vectorizing, keep it exact
        return pa.chunked_array([pa.array([None if v is None else iso(v) for v in column_values(col.cast(pa.timestamp("us", tz="UTC")))], pa.string())])

    def pad(a, width):
        return pc.utf8_lpad(a.cast(pa.string()), width=width, padding="0")

    micros = pc.subtract(epoch, pc.multiply(pc.divide(epoch, 1_000_000), 1_000_000))
    frac = pc.if_else(pc.equal(micros, 0), pa.scalar(""),
                      pc.binary_join_element_wise(pa.scalar("."), pad(micros, 6), ""))
    text = pc.binary_join_element_wise(
        pad(pc.year(col), 4), "-", pad(pc.month(col), 2), "-", pad(pc.day(col), 2), "T",
        pad(pc.hour(col), 2), ":", pad(pc.minute(col), 2), ":", pad(pc.second(col), 2), frac, "Z", "",
    )
    return pa.chunked_array([text])


def _runs(table: pa.Table, keys: list[str]) -> tuple[pa.Table, list[int], list[int]]:
    """Run boundaries of a table sorted by `keys`: the first row of each run (key columns only), and each run's
    [start, end) row range. Arrow compute only; no Python loop over rows."""
    n = table.num_rows
    cols = [table.column(k).combine_chunks() for k in keys]
    if n == 0:
        return table.select(keys).slice(0, 0), [], []
    differs = None
    for c in cols:
        d = pc.fill_null(pc.not_equal(c.slice(1), c.slice(0, n - 1)), True)
        # a null next to a non-null (or two nulls) counts as a boundary unless both are null
        both_null = pc.and_(pc.is_null(c.slice(1)), pc.is_null(c.slice(0, n - 1)))
        d = pc.and_(d, pc.invert(both_null))
        differs = d if differs is None else pc.or_(differs, d)
    starts_mask = pa.concat_arrays([pa.array([True]), differs])
    starts = pc.indices_nonzero(starts_mask)
    start_list = starts.to_pylist()
    end_list = start_list[1:] + [n]
    firsts = table.select(keys).take(starts)
    return firsts, start_list, end_list


def _topic_entries(offsets: pa.Table | None) -> dict[str, "TopicEntry"]:
    """topic -> groups with committed offsets on it (sorted) and their partition counts, from the offsets sorted
    by (group, topic, partition): (group, topic) runs, re-sorted by (topic, group), then topic runs."""
    if offsets is None or offsets.num_rows == 0:
        return {}
    pairs, starts, ends = _runs(offsets, ["group_id", "topic"])
    counts = pc.subtract(pa.array(ends, pa.int64()), pa.array(starts, pa.int64()))
    pairs = pairs.append_column("n", counts).sort_by([("topic", "ascending"), ("group_id", "ascending")])
    topics, t_starts, t_ends = _runs(pairs, ["topic"])
    gids, ns = pairs.column("group_id").to_pylist(), pairs.column("n").to_pylist()
    out = {}
    for topic, a, b in zip(topics.column(0).to_pylist(), t_starts, t_ends):
        g = gids[a:b]
        out[topic] = TopicEntry(g, dict(zip(g, ns[a:b])))
    return out


def _dedupe_offsets(loaded: pa.Table | None, empty: pa.Table | None) -> pa.Table | None:
    """loaded_offsets ∪ empty_group_offsets, one row per (group, topic, partition), loaded_offsets winning.

    Kafka serves both maps (`GroupMetadataManager.loadGroupsAndOffsets` splits the loaded offsets into those of
    groups with a group record and `emptyGroupOffsets`); whether the pipeline repeats the latter in
    loaded_offsets or not, the union answers the same."""
    parts = [t for t in (loaded, empty) if t is not None and t.num_rows]
    if not parts:
        return loaded if loaded is not None else empty
    if len(parts) == 1:
        return parts[0]
    a, b = parts
    b = b.select([c for c in a.column_names if c in b.column_names])
    both = pa.concat_tables(
        [
            a.append_column("_src", pa.repeat(pa.scalar(0, pa.int8()), a.num_rows)),
            b.append_column("_src", pa.repeat(pa.scalar(1, pa.int8()), b.num_rows)),
        ],
        promote_options="default",
    )
    both = both.sort_by([("group_id", "ascending"), ("topic", "ascending"), ("partition", "ascending"), ("_src", "ascending")])
    g, t, p = (both.column(c).combine_chunks() for c in ("group_id", "topic", "partition"))
    n = both.num_rows
    differs = pc.or_(
        pc.or_(pc.not_equal(g.slice(1), g.slice(0, n - 1)), pc.not_equal(t.slice(1), t.slice(0, n - 1))),
        pc.not_equal(p.slice(1), p.slice(0, n - 1)),
    )
    keep = pa.concat_arrays([pa.array([True]), pc.fill_null(differs, True)])
    return both.filter(keep).drop_columns(["_src"])


def _simple_group(group_id: str, offsets_partition) -> dict:
    """The Empty group Kafka creates for offsets without a group record (simple consumers), generation 0."""
    return {
        "group_id": group_id,
        "offsets_partition": offsets_partition,
        "group_type": "classic",
        "protocol_type": None,
        "generation": 0,
        "protocol": None,
        "leader": None,
        "state": "Empty",
        "current_state_timestamp": None,
        "member_count": 0,
        "record_offset": None,
        "assignment_epoch": None,
        "subscribed_topics": None,
        "is_simple": True,
        "expected_offsets_partition": None,
        "unresolved_topic_ids": None,
    }


@dataclass
class TopicEntry:
    group_ids: list  # sorted
    partitions: dict  # group_id -> number of committed partitions on the topic


class SnapshotIndex:
    """Everything the serving side answers about one snapshot."""

    def __init__(self, snapshot: Snapshot, tables: dict[str, pa.Table | None]):
        self.snapshot = snapshot
        self.offsets = Grouped(
            _dedupe_offsets(tables.get("loaded_offsets"), tables.get("empty_group_offsets")),
            "group_id",
            ["topic", "partition"],
        )
        self.members = Grouped(tables.get("group_members"), "group_id", ["member_id"])
        self.pending = Grouped(tables.get("pending_offsets"), "group_id", ["topic", "partition", "producer_id"])
        self.expired = Grouped(tables.get("expired_offsets"), "group_id", ["topic", "partition"])
        self.expired_groups = _by_group(tables.get("expired_groups"))
        self.removed_groups = _by_group(tables.get("removed_groups"))

        groups = {}
        lg = tables.get("loaded_groups")
        if lg is not None:
            for row in table_rows(lg.drop_columns([c for c in ("snapshot_id",) if c in lg.column_names])):
                groups[row["group_id"]] = row
        for source in (self.offsets, self.pending):  # offsets (or open transactions) without a group record
            if source.table is None:
                continue
            op = source.table.column("offsets_partition") if "offsets_partition" in source.table.column_names else None
            for gid, (start, _) in source.ranges.items():
                if gid not in groups:
                    groups[gid] = _simple_group(gid, op[start].as_py() if op is not None else None)
        self.groups: dict[str, dict] = groups
        # Live groups only: a Dead group (if the pipeline keeps one) is not listed, as ListGroups would not.
        self.group_ids: list[str] = sorted(g for g, row in groups.items() if row.get("state") != "Dead")

        self.topics: dict[str, TopicEntry] = _topic_entries(self.offsets.table)
        self._log_end_offsets = tables.get("log_end_offsets")
        # each committed offset's lag at the snapshot's as_of, in offsets and in time, as the rebuild computed it
        # (`consumer_lag`; a snapshot written before it has none: its answers carry the offset lag alone)
        self.lag = Grouped(tables.get("consumer_lag"), "group_id", ["topic", "partition"])
        # Serialized answers of the HTTP API, filled lazily (see pipelines/serving/cache.py).
        self.responses = ResponseCache()

    @functools.cached_property
    def end_offsets(self) -> dict[tuple[str, int], int]:
        """(topic, partition) -> log end offset, from the snapshot's `log_end_offsets` table (empty if none)."""
        t = self._log_end_offsets
        if t is None or t.num_rows == 0:
            return {}
        return dict(zip(zip(t.column("topic").to_pylist(), t.column("partition").to_pylist()),
                        t.column("log_end_offset").to_pylist()))

    @functools.cached_property
    def start_offsets(self) -> dict[tuple[str, int], int]:
        """(topic, partition) -> log start offset, from the snapshot's `log_end_offsets` (where the log dirs told)."""
        t = self._log_end_offsets
        if t is None or t.num_rows == 0 or "log_start_offset" not in t.column_names:
            return {}
        return {tp: s for tp, s in zip(zip(t.column("topic").to_pylist(), t.column("partition").to_pylist()),
                                       t.column("log_start_offset").to_pylist()) if s is not None}

    @functools.cached_property
    def lag_seconds(self) -> dict[tuple[str, str, int], float]:
        """(group, topic, partition) -> lag_seconds, where the snapshot knows it (`consumer_lag`)."""
        t = self.lag.table
        if t is None or "lag_seconds" not in t.column_names:
            return {}
        t = t.filter(pc.is_valid(t.column("lag_seconds")))
        return dict(zip(zip(t.column("group_id").to_pylist(), t.column("topic").to_pylist(),
                            t.column("partition").to_pylist()), t.column("lag_seconds").to_pylist()))

    @functools.cached_property
    def group_max_lag(self) -> dict[str, tuple[float, str, int]]:
        """group -> (its largest lag_seconds, the topic and partition holding it), as `consumer_lag` marks them."""
        t = self.lag.table
        if t is None or "is_group_max" not in t.column_names:
            return {}
        t = t.filter(pc.fill_null(t.column("is_group_max"), False))
        return {g: (s, tp, p) for g, s, tp, p in zip(*(t.column(c).to_pylist() for c in (
            "group_id", "group_max_lag_seconds", "topic", "partition")))}

    def group_lag(self, group_id: str) -> dict[tuple[str, int], dict]:
        """(topic, partition) -> the group's `consumer_lag` row there (empty for a snapshot without the table)."""
        return {(r["topic"], r["partition"]): r
                for r in self.lag.rows(group_id, ["topic", "partition", *LAG_FIELDS, *GROUP_LAG_FIELDS])}

    def end_offset_sources(self, tps) -> list[dict]:
        """Where the end offsets of partitions `tps` ((topic, partition) pairs) come from: one entry per `source`
        and `observed_at` of the snapshot's `log_end_offsets` rows for them, `{source, observed_at, partitions}`,
        most partitions first. LAG is the end offset then minus the committed offset as of the snapshot: a
        snapshot as of the past (a what-if one) measures it against the ends at its as_of (`ends_at`; one written
        before that, against end offsets observed later)."""
        t = self._log_end_offsets
        if t is None or t.num_rows == 0 or "source" not in t.column_names:
            return []
        wanted = set(tps)
        observed = t.column("observed_at").to_pylist() if "observed_at" in t.column_names else [None] * t.num_rows
        counts: dict[tuple, int] = {}
        for tp, p, source, at in zip(t.column("topic").to_pylist(), t.column("partition").to_pylist(),
                                     t.column("source").to_pylist(), observed):
            if (tp, p) in wanted:
                counts[(source, at)] = counts.get((source, at), 0) + 1

        return [{"source": source, "observed_at": jsonable(at), "partitions": n}
                for (source, at), n in sorted(counts.items(), key=lambda kv: (-kv[1], str(kv[0])))]

    # --- point lookups -------------------------------------------------------------------------------------
    def exists(self, group_id: str) -> bool:
        row = self.groups.get(group_id)
        return row is not None and row.get("state") != "Dead"

    def group(self, group_id: str) -> dict | None:
        return self.groups.get(group_id)

    def group_members(self, group_id: str) -> list[dict]:
        return self.members.rows(group_id)

    def group_offsets(self, group_id: str, columns: list[str] | None = None, iso_time: bool = False) -> list[dict]:
        return self.offsets.rows(group_id, columns, iso_time)

    def absent_reason(self, group_id: str) -> str:
        """Why a group is not live, in words (for 404 messages and `describe`)."""
        sid = self.snapshot.snapshot_id
        if group_id in self.groups:  # kept as Dead
            return f"group {group_id!r} is Dead in snapshot {sid!r}"
        if group_id in self.expired_groups:
            return f"{_absent(group_id, sid)} (expired: {self.expired_groups[group_id].get('reason')})"
        if group_id in self.removed_groups:
            return f"{_absent(group_id, sid)} (deleted by a group tombstone)"
        return _absent(group_id, sid)

    def not_found(self, group_id: str) -> GroupNotFound:
        """The error for a group that is not live: its reason, for the reporter to add the nearest ids to."""
        return GroupNotFound(self.absent_reason(group_id), group_id, self.snapshot)

    def groups_after(self, candidates: list[str], after: str | None, prefix: str | None):
        """Iterate candidate group ids (sorted) strictly after `after`, restricted to `prefix`."""
        lo = 0
        if after is not None:
            lo = bisect.bisect_right(candidates, after)
        if prefix:
            lo = max(lo, bisect.bisect_left(candidates, prefix))
        for i in range(lo, len(candidates)):
            gid = candidates[i]
            if prefix and not gid.startswith(prefix):
                return
            yield gid


def _by_group(t: pa.Table | None) -> dict[str, dict]:
    if t is None:
        return {}
    return {r["group_id"]: r for r in table_rows(t.drop_columns([c for c in ("snapshot_id",) if c in t.column_names]))}


SNAPSHOT_INDEX_TABLES = (
    "consumer_lag",
    "loaded_offsets",
    "empty_group_offsets",
    "loaded_groups",
    "group_members",
    "pending_offsets",
    "expired_offsets",
    "expired_groups",
    "removed_groups",
)


def load_index(
    reader: SnapshotReader,
    snapshot: Snapshot,
    *,
    group_ids: list[str] | None = None,
    topic: str | None = None,
    partition: int | None = None,
) -> SnapshotIndex:
    """Read the snapshot tables of `snapshot` and index them: only the given groups if asked, or with `topic`
    (and `partition`) only the committed offsets there. The filters are pushed down to the Parquet files,
    which keeps `describe` and `lookup` fast on a big snapshot."""
    tables: dict[str, pa.Table | None] = {}
    if group_ids is None and topic is not None:
        flt = [("topic", "=", topic)] + ([("partition", "=", partition)] if partition is not None else [])
        # The committed offsets on the topic (or partition) and nothing else: what `lookup --topic` answers.
        for t in ("loaded_offsets", "empty_group_offsets", "log_end_offsets", "consumer_lag"):
            tables[t] = reader.snapshot_table(t, snapshot, filters=flt)
        return SnapshotIndex(snapshot, tables)
    flt = [("group_id", "in", list(group_ids))] if group_ids is not None else None
    for t in SNAPSHOT_INDEX_TABLES:
        tables[t] = reader.snapshot_table(t, snapshot, filters=flt)
    # one row per data partition of the dump's log dirs: small, read whole (older snapshots have none)
    tables["log_end_offsets"] = reader.snapshot_table("log_end_offsets", snapshot)
    return SnapshotIndex(snapshot, tables)


def close_group_ids(reader: SnapshotReader, snapshot: Snapshot, group_id: str, n: int = 3) -> list[str]:
    """The snapshot's group ids nearest to `group_id` (difflib's ratio, best first), for a "did you mean" when it
    names no group there. Reads only the group id column of the tables that name groups, on this error path alone
    (a `describe` or `lookup` index holds just the group asked for)."""
    return _closest(reader, snapshot, ("loaded_groups", "loaded_offsets", "empty_group_offsets", "pending_offsets",
                                       "removed_groups"), "group_id", group_id, n)


#: The lines of the unknown group ids asked for lately (`unknown_group_message`), and the names of the snapshots
#: they were sought in: an API client polling a deleted or mistyped group (a dashboard tile, a retry loop) gets its
#: 404 without the tables read and difflib's pass over every id again (seconds of a core for 100 k near-alike ids).
#: A `Kept` builds one answer at a time, so a flood of distinct typos holds one core, not every thread of the server.
_UNKNOWN: Kept[str] = Kept(1024)
_NAMES: Kept[frozenset[str]] = Kept(2)


def _closest(reader: SnapshotReader, snapshot: Snapshot, tables: tuple[str, ...], column: str, name: str,
             n: int) -> list[str]:
    """The values of `column` in the snapshot's `tables` nearest to `name`, best first, `name` itself left out."""
    def names() -> frozenset[str]:
        known: set[str] = set()
        for t in tables:
            table = reader.snapshot_table(t, snapshot, columns=[column])
            if table is not None and table.num_rows:
                known.update(pc.unique(table.column(column)).to_pylist())
        known.discard(None)
        return frozenset(known)

    known = _NAMES.get((snapshot.cache_key, tables, column), names)
    return difflib.get_close_matches(name, known - {name}, n=n)


#: the snapshot tables that name the data topics a snapshot knows of: offsets committed, expired or pending on them,
#: and the partitions of the dump's log dirs
_TOPIC_TABLES = ("loaded_offsets", "empty_group_offsets", "expired_offsets", "pending_offsets", "log_end_offsets")


def topic_known(reader: SnapshotReader, snapshot: Snapshot, topic: str) -> bool:
    """Whether the snapshot knows anything of `topic`: an offset on it in its tables or a commit in the history, or
    a partition of it in the dump's log dirs. One it does not is a typo or the wrong snapshot, not a topic no group
    reads. Reads the topic column of each table, pushed down to the files."""
    flt = [("topic", "=", topic)]
    for t in _TOPIC_TABLES:
        table = reader.snapshot_table(t, snapshot, filters=flt, columns=["topic"])
        if table is not None and table.num_rows:
            return True
    history = snapshot_commits(reader, snapshot, filters=flt, columns=["topic"])
    return history is not None and history.num_rows > 0


def close_topics(reader: SnapshotReader, snapshot: Snapshot, topic: str, n: int = 3) -> list[str]:
    """The snapshot's topics nearest to `topic` (difflib's ratio, best first), for a "did you mean", on the error
    path alone."""
    return _closest(reader, snapshot, _TOPIC_TABLES, "topic", topic, n)


def committed_partitions(reader: SnapshotReader, snapshot: Snapshot, topic: str) -> list[int]:
    """The partitions of `topic` some group holds a committed offset on, sorted."""
    out: set[int] = set()
    for t in ("loaded_offsets", "empty_group_offsets"):
        table = reader.snapshot_table(t, snapshot, filters=[("topic", "=", topic)], columns=["partition"])
        if table is not None and table.num_rows:
            out.update(pc.unique(table.column("partition")).to_pylist())
    out.discard(None)
    return sorted(out)


#: the snapshot tables that name the groups a snapshot knows of, whatever became of them
_NAMING_TABLES = ("loaded_groups", "loaded_offsets", "empty_group_offsets", "pending_offsets", "removed_groups",
                  "expired_groups", "group_history")


def check_groups_known(reader: SnapshotReader, snapshot: Snapshot, group_ids) -> None:
    """Refuses the first of `group_ids` the snapshot knows nothing of (`unknown_groups`), as every command and
    route refuses a group id the snapshot does not hold: GroupNotFound, `unknown_group_message`'s line."""
    for g, why in unknown_groups(reader, snapshot, group_ids).items():
        raise GroupNotFound(unknown_group_message(reader, snapshot, g, why))


def unknown_groups(reader: SnapshotReader, snapshot: Snapshot, group_ids) -> dict[str, str]:
    """Of `group_ids`, those the snapshot knows nothing of, each with why: no group, offset, removal, expiry or group
    record in its tables and no commit in the history it read (a typo, or the wrong snapshot). A deleted group is
    known: its deletion is what an incident asks about. The history's version a what-if snapshot pinned also holds
    the records past its cut, which it never read: a group whose records all come after the cut did not exist at
    the snapshot's end, and its reason says when its first offset commit came (when a reader first saw it,
    `history.batch_time`). Reads the group id column of each table, pushed down to the files."""
    wanted = sorted(set(group_ids))
    if not wanted:
        return {}
    flt = [("group_id", "in", wanted)]
    found: set[str] = set()
    for t in _NAMING_TABLES:
        # None for a snapshot written before the table existed; a damaged one is a DamagedTable, not "unknown"
        table = reader.snapshot_table(t, snapshot, filters=flt, columns=["group_id"])
        if table is not None and table.num_rows:
            found.update(pc.unique(table.column("group_id")).to_pylist())
        if found.issuperset(wanted):
            return {}
    read, later = _history_read(reader, snapshot, flt)
    found.update(read)
    sid, end = snapshot.snapshot_id, snapshot.log_until
    return {g: _absent(g, sid) + (f": its first offset commit came at {iso(later[g])}, after the snapshot's log "
                                  f"ends at {iso(end)}" if g in later else "")
            for g in wanted if g not in found}


def _history_read(reader: SnapshotReader, snapshot: Snapshot, filters=None) -> tuple[set[str], dict[str, object]]:
    """The group ids of the history records the snapshot read (up to its log's end, `Snapshot.log_until`, cut as
    `rebuild --until-time` cuts and as `/groups/{id}/commits` lists them), and of those it did not read, each with
    the time a reader first saw its first one."""
    history = snapshot_commits(reader, snapshot, filters=filters,
                               columns=["group_id", "record_timestamp", "batch_timestamp"])
    if history is None or not history.num_rows:
        return set(), {}
    end = snapshot.log_until
    held = held_at(history, end) if end is not None else None
    read = history if held is None else history.filter(held)
    ids = set(pc.unique(read.column("group_id")).to_pylist())
    ids.discard(None)
    if held is None or read.num_rows == history.num_rows:
        return ids, {}
    after = history.filter(pc.invert(held))
    firsts = pa.table({"group_id": after.column("group_id"), "t": batch_time(after)}).group_by("group_id").aggregate(
        [("t", "min")])
    return ids, {g: t for g, t in zip(firsts.column("group_id").to_pylist(), column_values(firsts.column("t_min")))
                 if g not in ids}


def no_group_matches(reader: SnapshotReader, snapshot: Snapshot, pattern: str) -> str | None:
    """Why a group regex selects nothing, as a mistyped id is refused: no group id the snapshot knows (the tables
    `unknown_groups` reads, the history) matches it anywhere; None when one does. Read only for a selection that came
    out empty; each table's ids until one matches."""
    # imported here, not at module level: a regex is rare beside the point lookups this module serves
    from pipelines.serving.group_regex import matching

    for t in _NAMING_TABLES:
        table = reader.snapshot_table(t, snapshot, columns=["group_id"])
        if table is not None and table.num_rows and matching(pc.unique(table.column("group_id")).to_pylist(), pattern):
            return None
    if matching(sorted(_history_read(reader, snapshot)[0]), pattern):
        return None
    return f"no group id in snapshot {snapshot.snapshot_id!r} matches the group regex {pattern!r}"


def _absent(group_id: str, snapshot_id: str) -> str:
    return f"group {group_id!r} does not exist in snapshot {snapshot_id!r}"


def unknown_group_message(reader: SnapshotReader, snapshot: Snapshot, group_id: str, reason: str | None = None) -> str:
    """`group 'x' does not exist in snapshot 's' (did you mean 'y'?)`: the one line every command and API route
    gives for a group id the snapshot does not hold: `reason` (`SnapshotIndex.absent_reason`: Dead, expired,
    deleted) or that it does not exist, then the snapshot's nearest group ids."""
    def line() -> str:
        absent = _absent(group_id, snapshot.snapshot_id)
        why = reason or absent
        if why == absent:  # and when it came, for a group only past a what-if snapshot's end (`unknown_groups`)
            why = unknown_groups(reader, snapshot, [group_id]).get(group_id, why)
        return why + did_you_mean(close_group_ids(reader, snapshot, group_id), quote=True)

    return _UNKNOWN.get((snapshot.cache_key, group_id, reason), line)
