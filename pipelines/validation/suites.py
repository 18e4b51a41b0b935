"""The data-quality suites: one great-expectations suite per output table, built in code for one run.

Each `SuiteSpec` names the table it validates, the inputs it reads, how to prepare the frame (relational invariants
GX cannot express are computed into a per-row `chk_*` column first, over Arrow tables with pyarrow and DuckDB: the
tables they relate are the coordinator's state, never the log; a violation still shows up as an ordinary GX result
with the offending rows), and its `Check`s. A check id (`<suite>.<name>`) is stable: reports,
`runs.validation` and the tests refer to it. Invariants come from spec/offsets-topic.md §4 (group → partition) and
§5 (replay); the `Check.why` of each says which rule it guards.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipelines.coordinator.offset_metadata import END_MARKER_TYPES
from pipelines.coordinator.options import DEFAULT_SEMANTICS, SEMANTICS
from pipelines.coordinator.partitioner import partition_for
from pipelines.times import EPOCH

UTC = timezone.utc

# Kafka was open-sourced in 2011 and `__consumer_offsets` appeared in 0.8.2 (2015): an earlier timestamp is a
# decoding or unit bug (seconds for ms, a sentinel leaking through), never a real commit.
EARLIEST_PLAUSIBLE = datetime(2011, 1, 1, tzinfo=UTC)

# A committed offset of -1 is legitimate: it is Kafka's INVALID_OFFSET sentinel, and the broker stores whatever
# offset the client sends (OffsetCommit only validates metadata size), so clients that "reset" a position commit -1.
# Anything below -1 has no meaning in any Kafka version and is treated as corrupt.
MIN_COMMITTED_OFFSET = -1

# Control types that end a transaction under the new coordinator (`offset_metadata.END_MARKER_TYPES`, spec §5.3); the
# old loader drops a producer's pending offsets on *any* control batch (spec §5.1 step 1, §5.5 #5).
ENDING_CONTROL_TYPES = END_MARKER_TYPES

# Row keys, CONTRACT.md order, without snapshot_id: the writer stamps that partition column with one literal after
# validation, so it is neither null nor a distinguishing part of the key in the frames validated here.
KEYS: dict[str, tuple[str, ...]] = {
    "loaded_offsets": ("group_id", "topic", "partition"),
    "empty_group_offsets": ("group_id", "topic", "partition"),
    "expired_offsets": ("group_id", "topic", "partition"),
    "pending_offsets": ("producer_id", "group_id", "topic", "partition"),
    "loaded_groups": ("group_id",),
    "group_members": ("group_id", "member_id"),
    "removed_groups": ("group_id",),
    "expired_groups": ("group_id",),
    "offset_commits": ("offsets_partition", "record_offset"),
    "quarantine": (),
    "accounting": ("offsets_partition",),
}


@dataclass(frozen=True)
class Expectation:
    """An expectation as a suite declares it: its GX class (`ExpectColumnValuesToNotBeNull`, …), kwargs,
    description and meta. It becomes a GX object only to validate (`gx`): importing great_expectations takes seconds
    of a core, and the shards' suspect filter (`suspects.suspect_filter`) reads the declaration before any
    validation, while the run's first job is starting."""

    cls: str
    kwargs: dict
    description: str | None = None
    meta: dict | None = None

    @property
    def type(self) -> str:
        """GX's name of the expectation type: `expect_column_values_to_not_be_null`."""
        return re.sub(r"(?<!^)(?=[A-Z])", "_", self.cls).lower()

    def gx(self):
        # imported here, not at module level: great_expectations ~15 s of import (python -X importtime)
        import great_expectations.expectations as gxe

        return getattr(gxe, self.cls)(**self.kwargs, description=self.description, meta=self.meta)


def _expect(cls: str, *, description: str | None = None, meta: dict | None = None, **kwargs) -> Expectation:
    return Expectation(cls, kwargs, description, meta)


@dataclass(frozen=True)
class Check:
    """One expectation and why it holds. `kind` and `column` say what breaks it (used by tests and the report)."""

    name: str
    kind: str  # not_null | unique | at_least | at_most | ts_range | ts_min | partition | relation
    expectation: Expectation
    why: str
    column: str | None = None
    needs: tuple[str, ...] = ()  # inputs besides the suite's own table
    # (the suite's table, every input) -> the table with this check's `chk_*` column added; Arrow tables
    derive: Callable[[pa.Table, Mapping[str, pa.Table]], pa.Table] | None = None
    # at_least / ts_*: the lower bound (at_most: the upper); ts_range: (lower, upper)
    minimum: int | datetime | tuple[datetime, datetime] | None = None


@dataclass(frozen=True)
class SuiteSpec:
    """A table's suite for one run: `prepare` the frame, then validate every check on it."""

    name: str
    table: str  # the input it validates (a table, or "accounting")
    index_columns: tuple[str, ...]  # identify an offending row in unexpected examples
    checks: tuple[Check, ...]
    skipped: tuple[tuple[str, str], ...] = field(default=())  # (check id, reason) of checks whose inputs are absent

    def check_id(self, check: Check) -> str:
        return f"{self.name}.{check.name}"

    @property
    def inputs(self) -> frozenset[str]:
        """Every input this suite's prepared frame reads."""
        return frozenset((self.table, *(n for c in self.checks for n in c.needs)))

    @property
    def columns_read(self) -> tuple[str, ...]:
        """The prepared frame's columns the expectations and their examples read: index columns first."""
        cols = list(self.index_columns)
        for check in self.checks:
            kw = check.expectation.kwargs
            for c in (kw.get("column"), kw.get("column_A"), kw.get("column_B"), *(kw.get("column_list") or ())):
                if c and c not in cols:
                    cols.append(c)
        return tuple(cols)

    @property
    def derived(self) -> bool:
        """Whether a check adds a relational column first (the suite is then prepared over Arrow inputs)."""
        return any(c.derive is not None for c in self.checks)

    def prepare(self, inputs: Mapping[str, pa.Table]) -> pa.Table:
        table = inputs[self.table]
        for check in self.checks:
            if check.derive is not None:
                table = check.derive(table, inputs)
        return table

    def expectation_suite(self):
        """The suite as a `great_expectations.ExpectationSuite`."""
        # imported here, not at module level: great_expectations ~15 s of import (python -X importtime)
        import great_expectations as gx

        suite = gx.ExpectationSuite(name=self.name)
        for check in self.checks:
            suite.add_expectation(check.expectation.gx())
        return suite


# -- expectation builders ------------------------------------------------------------------------------------------


def _meta(check_id: str, why: str) -> dict:
    return {"check_id": check_id, "why": why}


def _not_null(suite: str, column: str, why: str) -> Check:
    name = f"{column}_not_null"
    return Check(
        name=name,
        kind="not_null",
        column=column,
        why=why,
        expectation=_expect("ExpectColumnValuesToNotBeNull", 
            column=column, description=f"`{column}` is never null", meta=_meta(f"{suite}.{name}", why)
        ),
    )


def _unique(suite: str, columns: tuple[str, ...], why: str) -> Check:
    name = "key_unique"
    desc = f"({', '.join(columns)}) is unique"
    if len(columns) == 1:
        exp = _expect("ExpectColumnValuesToBeUnique", column=columns[0], description=desc, meta=_meta(f"{suite}.{name}", why))
    else:
        exp = _expect("ExpectCompoundColumnsToBeUnique", 
            column_list=list(columns), description=desc, meta=_meta(f"{suite}.{name}", why)
        )
    return Check(name=name, kind="unique", column=",".join(columns), why=why, expectation=exp)


def _at_least(suite: str, column: str, minimum: int, why: str) -> Check:
    name = f"{column}_at_least_{minimum}".replace("-", "minus_")
    return Check(
        name=name,
        kind="at_least",
        column=column,
        minimum=minimum,
        why=why,
        expectation=_expect("ExpectColumnValuesToBeBetween", 
            column=column, min_value=minimum, description=f"`{column}` >= {minimum}",
            meta=_meta(f"{suite}.{name}", why),
        ),
    )


def _timestamp(suite: str, column: str, upper: datetime | None, why: str) -> Check:
    name = f"{column}_plausible"
    if upper is None:
        desc = f"`{column}` is after {EARLIEST_PLAUSIBLE:%Y-%m-%d}"
        exp = _expect("ExpectColumnValuesToBeBetween", 
            column=column, min_value=EARLIEST_PLAUSIBLE, description=desc, meta=_meta(f"{suite}.{name}", why)
        )
        return Check(name=name, kind="ts_min", column=column, minimum=EARLIEST_PLAUSIBLE, why=why, expectation=exp)
    desc = f"`{column}` is between {EARLIEST_PLAUSIBLE:%Y-%m-%d} and {upper:%Y-%m-%dT%H:%M:%SZ} (as_of + skew)" \
        if upper >= EARLIEST_PLAUSIBLE else \
        f"`{column}` holds no time: as_of + skew ({upper:%Y-%m-%dT%H:%M:%SZ}) is before {EARLIEST_PLAUSIBLE:%Y-%m-%d}"
    # a run as of before 2011 (`--until-time 2010-12-31`, which cuts every record): no time is in both bounds, and a
    # range whose min is past its max is no expectation GX evaluates: each such check failed, on empty tables too,
    # and the run with them. (upper, upper] holds no time: every row is unexpected, an empty table is not.
    bounds = dict(min_value=EARLIEST_PLAUSIBLE, max_value=upper) if upper >= EARLIEST_PLAUSIBLE else \
        dict(min_value=upper, max_value=upper, strict_min=True)
    exp = _expect("ExpectColumnValuesToBeBetween", 
        column=column, **bounds, description=desc,
        meta=_meta(f"{suite}.{name}", why),
    )
    return Check(
        name=name, kind="ts_range", column=column, minimum=(EARLIEST_PLAUSIBLE, upper), why=why, expectation=exp
    )


def _partition(suite: str, num_partitions: int) -> Check:
    name = "offsets_partition_matches_group"
    why = (
        "spec §4: every record of a group is written to partition Utils.abs(javaHashCode(group_id)) % n; "
        "a mismatch means a wrong partition count or a misread partition directory"
    )
    out = "chk_expected_offsets_partition"
    return Check(
        name=name,
        kind="partition",
        column="offsets_partition",
        why=why,
        # a null group id is the key check's business: nothing to compare, so the row compares with itself;
        # a null offsets_partition next to a real group id is a mismatch like any other
        derive=lambda df, _inputs: _with_expected_partition(df, out, num_partitions),
        expectation=_expect("ExpectColumnPairValuesToBeEqual", 
            column_A="offsets_partition",
            column_B=out,
            ignore_row_if="both_values_are_missing",
            description=f"`offsets_partition` is set and = abs(javaHashCode(group_id)) % {num_partitions}",
            meta=_meta(f"{suite}.{name}", why),
        ),
    )


def _with_expected_partition(table: pa.Table, out: str, num_partitions: int) -> pa.Table:
    """`out` = the partition of the row's group id (its offsets_partition when the id is null), by the engine's one
    `partition_for`, computed once per distinct id (a group has many offsets; ids are state-sized)."""
    if num_partitions <= 0:
        raise ValueError(f"num_partitions must be positive, got {num_partitions}")
    group_id = table.column("group_id")
    ids = pc.unique(group_id).drop_null()
    expected = pc.take(pa.array([partition_for(g, num_partitions) for g in ids.to_pylist()], pa.int32()),
                       pc.index_in(group_id, value_set=ids))
    partition = table.column("offsets_partition").cast(pa.int32())
    return table.append_column(out, pc.if_else(pc.is_null(group_id), partition, expected))


def _flag(suite: str, name: str, out: str, description: str, why: str, needs: tuple[str, ...],
          derive: Callable[[pa.Table, Mapping[str, pa.Table]], pa.Table]) -> Check:
    """A relational invariant: `derive` adds boolean column `out` (null = not applicable); it must be true."""
    return Check(
        name=name,
        kind="relation",
        column=out,
        needs=needs,
        why=why,
        derive=derive,
        expectation=_expect("ExpectColumnValuesToBeInSet", 
            column=out, value_set=[True], description=description, meta=_meta(f"{suite}.{name}", why)
        ),
    )


def _sql_column(query: str, **tables: pa.Table) -> pa.ChunkedArray:
    """The one column `query` (DuckDB SQL over `tables`, each with a `__row` index added) gives per row of the
    first table, in that table's row order."""
    # imported here, not at module level: duckdb ~0.3 s of import (python -X importtime)
    import duckdb

    con = duckdb.connect()
    try:
        for name, t in tables.items():
            con.register(name, t.append_column("__row", pa.array(np.arange(t.num_rows, dtype=np.int64))))
        return con.execute(query).fetch_arrow_table().column(0)
    finally:
        con.close()


def _quoted(column: str) -> str:
    return '"' + column.replace('"', '""') + '"'


def _keys_flag(table: pa.Table, keys: tuple[str, ...], other: pa.Table, out: str, *, present: bool) -> pa.Table:
    """`out` = whether the row's key is (present=True) / is not (present=False) in `other`; null if a key is null.
    An Arrow hash semi-join of the keys only (each of the table's rows out once however often `other` holds its
    key; the hash built on the table's rows), placed back by row number (a join does not keep row order)."""
    n = table.num_rows
    rows = table.select(list(keys)).append_column("__row", pa.array(np.arange(n, dtype=np.int64)))
    found = other.select(list(keys)).join(rows, keys=list(keys), join_type="right semi",
                                          use_threads=False).column("__row")
    hit = np.zeros(n, dtype=bool)
    hit[found.to_numpy()] = True
    null_key = np.zeros(n, dtype=bool)
    for k in keys:
        null_key |= pc.is_null(table.column(k)).to_numpy(zero_copy_only=False)
    return table.append_column(out, pa.array(hit if present else ~hit, mask=null_key))


# -- relational checks ---------------------------------------------------------------------------------------------


def _assigned_within_subscription(suite: str) -> Check:
    out = "chk_assigned_within_subscription"

    def derive(table: pa.Table, inputs: Mapping[str, pa.Table]) -> pa.Table:
        return table.append_column(out, _within_subscription(table, inputs["loaded_groups"]))

    return _flag(
        suite,
        "assigned_within_subscription",
        out,
        "consumer-protocol members are assigned only partitions of topics they subscribe to",
        "classic consumer groups store subscription and assignment of the same generation (spec §3, §5.2), and "
        "the standard assignors only hand out subscribed topics; for KIP-848 groups checked when the group is "
        "Stable and the member subscribes by name (target assignment = current subscription)",
        ("loaded_groups",),
        derive,
    )


def _within_subscription(members: pa.Table, groups: pa.Table) -> pa.Array:
    """Per member, whether every assigned partition's topic is subscribed; null where the check does not apply
    (each member's group: the first `groups` row of its id). Three-valued like SQL: a null topic (or a
    subscription holding a null) that matches nothing gives null, not false. Column by column: the members and
    their assignments are state-sized."""
    n = members.num_rows
    at = pc.index_in(members.column("group_id"), value_set=groups.column("group_id"))
    group = groups.select(["protocol_type", "group_type", "state"]).take(at)
    member_type = pc.coalesce(members.column("group_type"), group.column("group_type"))
    classic_consumer = pc.and_(pc.equal(member_type, "classic"), pc.equal(group.column("protocol_type"), "consumer"))
    # KIP-848: only a Stable group has every member's assignment reconciled to the target computed from the
    # current subscriptions (spec §5.3); a regex subscriber's topics are not in its name list.
    stable_consumer = pc.and_(pc.and_(pc.equal(member_type, "consumer"),
                                      pc.equal(pc.utf8_lower(pc.fill_null(group.column("state"), "")), "stable")),
                              pc.is_null(members.column("subscribed_topic_regex")))
    applies = pc.and_(pc.fill_null(pc.or_(pc.fill_null(classic_consumer, False), pc.fill_null(stable_consumer, False)),
                                   False), pc.is_valid(members.column("subscribed_topics")))
    applies = applies.to_numpy(zero_copy_only=False)

    def exploded(column: str):
        lists = members.column(column).combine_chunks()
        return (pc.list_parent_indices(lists).to_numpy(zero_copy_only=False).astype(np.int64),
                pc.list_flatten(lists))

    sub_member, sub_topic = exploded("subscribed_topics")
    held_null = np.bincount(sub_member[pc.is_null(sub_topic).to_numpy(zero_copy_only=False)], minlength=n) > 0
    assigned_member, assigned = exploded("assigned_partitions")
    topic = pc.struct_field(assigned, "topic")
    subscribed = pa.table({"m": sub_member, "t": sub_topic}).group_by(["m", "t"], use_threads=False).aggregate([])
    found = pa.table({"m": assigned_member, "t": topic, "i": np.arange(len(topic), dtype=np.int64)}).join(
        subscribed, keys=["m", "t"], join_type="inner", use_threads=False).column("i")
    hit = np.zeros(len(topic), dtype=bool)
    hit[found.to_numpy()] = True
    unknown = ~hit & (pc.is_null(topic).to_numpy(zero_copy_only=False) | held_null[assigned_member])
    outside = ~hit & ~unknown
    any_outside = np.bincount(assigned_member[outside], minlength=n) > 0
    any_unknown = np.bincount(assigned_member[unknown], minlength=n) > 0
    return pa.array(~any_outside, mask=~applies | (~any_outside & any_unknown))


def _member_of_loaded_group(suite: str) -> Check:
    out = "chk_group_is_loaded"
    return _flag(
        suite,
        "member_of_loaded_group",
        out,
        "every member belongs to a group in `loaded_groups`",
        "group_members holds the members of live groups only (CONTRACT.md)",
        ("loaded_groups",),
        lambda df, inputs: _keys_flag(df, ("group_id",), inputs["loaded_groups"], out, present=True),
    )


def _removed_not_loaded(suite: str) -> Check:
    out = "chk_not_in_loaded_groups"
    return _flag(
        suite,
        "disjoint_from_loaded_groups",
        out,
        "no group is both removed and loaded, but as a simple group of the offsets it kept",
        "a GroupMetadata value after a tombstone takes the group out of removedGroups, a tombstone takes it out "
        "of loadedGroups (spec §5.1 step 2, §5.3); a group removed and then used only for offset storage is both, "
        "loaded Empty for its offsets (3.9 GroupMetadataManager.doLoadGroupsAndOffsets: no error for an id of "
        "emptyGroupOffsets; 4.0 OffsetMetadataManager.replay makes its simple group)",
        ("loaded_groups",),
        lambda df, inputs: _keys_flag(df, ("group_id",), _not_simple(inputs["loaded_groups"]), out, present=False),
    )


def _not_simple(groups: pa.Table) -> pa.Table:
    """The groups of `loaded_groups` that a group record holds (not a simple group its offsets make)."""
    return groups.filter(pc.invert(pc.fill_null(groups.column("is_simple"), False)))


def _empty_group_offset_served(suite: str) -> Check:
    out = "chk_in_loaded_offsets"
    keys = KEYS["loaded_offsets"]
    return _flag(
        suite,
        "subset_of_loaded_offsets",
        out,
        "every (group_id, topic, partition) of `empty_group_offsets` is in `loaded_offsets`",
        "emptyGroupOffsets is a split of loadedOffsets (spec §5.1 'After the scan'); in this project "
        "loaded_offsets holds every served offset, with or without a group record",
        ("loaded_offsets",),
        lambda df, inputs: _keys_flag(df, keys, inputs["loaded_offsets"], out, present=True),
    )


def _pending_after_last_marker(suite: str, semantics: str) -> Check:
    out = "chk_after_last_marker"

    def derive(table: pa.Table, inputs: Mapping[str, pa.Table]) -> pa.Table:
        ending = ("AND upper(control_type) IN (" + ", ".join(f"'{t}'" for t in ENDING_CONTROL_TYPES) + ")"
                  if semantics == "modern" else "")
        flag = _sql_column(
            # an impossible position is record_offset_at_least_0's finding, not an ordering one
            "SELECT CASE WHEN t.record_offset IS NULL OR t.record_offset < 0 THEN NULL "
            "WHEN m.last_marker IS NULL THEN TRUE ELSE t.record_offset > m.last_marker END FROM t "
            "LEFT JOIN (SELECT offsets_partition, producer_id, max(\"offset\") AS last_marker FROM m "
            f"WHERE TRUE {ending} GROUP BY ALL) m USING (offsets_partition, producer_id) ORDER BY t.__row",
            t=table.select(["offsets_partition", "producer_id", "record_offset"]),
            m=inputs["markers"].select(["offsets_partition", "producer_id", "offset", "control_type"]))
        return table.append_column(out, flag)

    control = "COMMIT/ABORT marker" if semantics == "modern" else "control record"
    return _flag(
        suite,
        "after_last_marker",
        out,
        f"a pending offset comes after its producer's last {control} in its offsets partition",
        "a marker ends the producer's transaction: everything it wrote before is committed or aborted, so only "
        "records after its last marker can still be pending (spec §5.1 step 1; modern: COMMIT/ABORT only, §5.5 #5)",
        ("markers",),
        derive,
    )


def _accounting_balanced(suite: str) -> Check:
    name = "records_accounted"
    why = "every record read is used, skipped with a reason (unknown key type, spec §5.4) or quarantined"
    out = "chk_records_accounted"
    return Check(
        name=name,
        kind="relation",
        column="records_in",
        why=why,
        derive=lambda table, _inputs: table.append_column(out, pc.add(pc.add(
            table.column("records_used"), table.column("records_skipped")), table.column("records_quarantined"))),
        expectation=_expect("ExpectColumnPairValuesToBeEqual", 
            column_A="records_in",
            column_B=out,
            description="records_in = used + skipped + quarantined, per offsets partition",
            meta=_meta(f"{suite}.{name}", why),
        ),
    )


def _bytes_all_read(suite: str, max_unread: int) -> Check:
    name = "bytes_all_read"
    why = ("every byte of every segment is read into records, or the run says which bytes were not (unframeable "
           "sizes, torn tails, batches failing their CRC); a policy that tolerates no loss fails such a run")
    return Check(
        name=name,
        kind="at_most",
        column="bytes_unread",
        minimum=max_unread,
        why=why,
        expectation=_expect("ExpectColumnValuesToBeBetween", 
            column="bytes_unread", max_value=max_unread,
            description=f"`bytes_unread` <= {max_unread} per offsets partition (validation.max_unread_bytes)",
            meta=_meta(f"{suite}.{name}", why),
        ),
    )


# -- the suites ----------------------------------------------------------------------------------------------------

_KEY_WHY = "a row key of the contract (CONTRACT.md): null means a decoding or join bug"
_UNIQUE_WHY = "one row per key (CONTRACT.md); the replay keeps the latest record per key (spec §5.1)"
_OFFSET_WHY = "committed offsets are >= 0, or -1 (Kafka's INVALID_OFFSET, stored as sent); below -1 is corrupt"
_POSITION_WHY = "a position in __consumer_offsets is a log offset, never negative"
_TS_WHY = "after 2011-01-01 (before Kafka) and not after as_of plus the allowed clock skew"


def _keyed(suite: str, table: str) -> list[Check]:
    keys = KEYS[table]
    checks = [_not_null(suite, k, _KEY_WHY) for k in keys]
    if keys:
        checks.append(_unique(suite, keys, _UNIQUE_WHY))
    return checks


_Spec = tuple[str, tuple[str, ...], list[Check]]  # a suite's name (its table), index columns, every check


def build_suites(*, as_of_ms: int, num_partitions: int, timestamp_skew_minutes: float = 60,
                 semantics: str = DEFAULT_SEMANTICS, available: frozenset[str] | set[str] | None = None,
                 max_unread_bytes: int | None = None) -> list[SuiteSpec]:
    """Every suite for a run `as_of_ms` over an offsets topic of `num_partitions` partitions.

    `available` names the inputs present (tables, "markers", "accounting"); a check needing an absent input is
    left out and listed in `SuiteSpec.skipped`. `semantics` (legacy | modern) picks which control records end a
    transaction (spec §5.5 #5).
    """
    if semantics not in SEMANTICS:
        raise ValueError(f"semantics must be one of {', '.join(SEMANTICS)}, got {semantics!r}")
    # integer arithmetic (a float of seconds is microseconds off this far out: 9999-12-31T23:59:59.999 reads as
    # .998993), and a run as of late in year 9999 (the last a time can be) checks against that end, not past it
    as_of = EPOCH + timedelta(milliseconds=as_of_ms)
    skew, last = timedelta(minutes=timestamp_skew_minutes), datetime.max.replace(tzinfo=UTC)
    upper = as_of + skew if as_of <= last - skew else last
    specs = (_offset_suites(num_partitions, upper, semantics) + _group_suites(num_partitions, upper)
             + _log_suites(upper, max_unread_bytes))
    return [_with_inputs(name, index, checks, available) for name, index, checks in specs]


def _offset_checks(suite: str, n: int, upper: datetime, *, expire: bool = True) -> list[Check]:
    """What every table of committed offsets holds: its keys, its partition, its offsets and timestamps."""
    checks = _keyed(suite, suite) + [
        _partition(suite, n),
        _at_least(suite, "committed_offset", MIN_COMMITTED_OFFSET, _OFFSET_WHY),
        _at_least(suite, "record_offset", 0, _POSITION_WHY),
        _timestamp(suite, "commit_timestamp", upper, _TS_WHY),
    ]
    if expire:
        # expireTimestamp is commit time plus a client-requested retention: the future is legitimate
        checks.append(_timestamp(suite, "expire_timestamp", None, "an explicit expiry is after 2011"))
    return checks


def _offset_suites(n: int, upper: datetime, semantics: str) -> list[_Spec]:
    return [
        ("loaded_offsets", KEYS["loaded_offsets"], _offset_checks("loaded_offsets", n, upper)),
        (
            "empty_group_offsets",
            KEYS["empty_group_offsets"],
            _offset_checks("empty_group_offsets", n, upper) + [_empty_group_offset_served("empty_group_offsets")],
        ),
        (
            "expired_offsets",
            KEYS["expired_offsets"],
            _offset_checks("expired_offsets", n, upper)
            + [_timestamp("expired_offsets", "expiry_base_timestamp", upper, _TS_WHY)],
        ),
        (
            "pending_offsets",
            KEYS["pending_offsets"],
            _offset_checks("pending_offsets", n, upper, expire=False)
            + [_pending_after_last_marker("pending_offsets", semantics)],
        ),
    ]


def _group_suites(n: int, upper: datetime) -> list[_Spec]:
    return [
        (
            "loaded_groups",
            KEYS["loaded_groups"],
            _keyed("loaded_groups", "loaded_groups")
            + [
                _partition("loaded_groups", n),
                _timestamp("loaded_groups", "current_state_timestamp", upper, _TS_WHY),
                _at_least("loaded_groups", "record_offset", 0, _POSITION_WHY),
            ],
        ),
        (
            "group_members",
            KEYS["group_members"],
            _keyed("group_members", "group_members")
            + [_member_of_loaded_group("group_members"), _assigned_within_subscription("group_members")],
        ),
        (
            "removed_groups",
            KEYS["removed_groups"],
            _keyed("removed_groups", "removed_groups")
            + [
                _partition("removed_groups", n),
                _at_least("removed_groups", "tombstone_record_offset", 0, _POSITION_WHY),
                _timestamp("removed_groups", "tombstone_timestamp", upper, _TS_WHY),
                _removed_not_loaded("removed_groups"),
            ],
        ),
        (
            "expired_groups",
            KEYS["expired_groups"],
            _keyed("expired_groups", "expired_groups") + [_partition("expired_groups", n)],
        ),
    ]


def _log_suites(upper: datetime, max_unread_bytes: int | None) -> list[_Spec]:
    """The history, the quarantine and the record accounting: what the run read, not the state it built."""
    return [
        (
            "offset_commits",
            KEYS["offset_commits"],
            _keyed("offset_commits", "offset_commits")
            + [
                _at_least("offset_commits", "committed_offset", MIN_COMMITTED_OFFSET, _OFFSET_WHY),
                _timestamp("offset_commits", "commit_timestamp", upper, _TS_WHY),
            ],
        ),
        (
            "quarantine",
            ("source", "offsets_partition", "position"),
            [
                _not_null("quarantine", "reason", "a quarantined input always says why"),
            ],
        ),
        ("accounting", KEYS["accounting"], [_accounting_balanced("accounting")]
         + ([_bytes_all_read("accounting", max_unread_bytes)] if max_unread_bytes is not None else [])),
    ]


def _with_inputs(name: str, index: tuple[str, ...], checks: list[Check],
                 available: frozenset[str] | set[str] | None) -> SuiteSpec:
    """The suite of `checks` whose inputs are `available` (None: all are); the others listed as skipped."""
    kept, skipped = [], []
    for c in checks:
        missing = [x for x in c.needs if available is not None and x not in available]
        if missing:
            skipped.append((f"{name}.{c.name}", f"input not given: {', '.join(missing)}"))
        else:
            kept.append(c)
    return SuiteSpec(name=name, table=name, index_columns=index, checks=tuple(kept), skipped=tuple(skipped))
