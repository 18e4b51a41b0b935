"""The rows of a log-sized table that could fail its suite: found where the rows are made, judged by GX.

A full run's history has a row per offset commit (millions); its suite holds row-wise expectations only (a column
not null, a value between bounds, a key unique within an offsets partition). A row that breaks none of those
bounds cannot fail them, so each shard task keeps just the rows that might (`SuspectFilter.split`): nulls where
a column must be set, values at or past a bound, keys seen twice. GX then validates those few rows on pandas in the
driver, and the outcome is completed with what the shards counted of the rest (`Suspects`: rows, nulls per
column): every other row counts as present and expected, as GX would have counted it.

The filter is read off the suite's own expectation configurations, never restated: a bound is flagged inclusively
(a superset of what the expectation rejects), and a suite with any other kind of expectation, or a key that is
not local to an offsets partition, gets no filter (the table is then validated whole).
"""
from __future__ import annotations

import json
from datetime import datetime
from dataclasses import dataclass, field
from typing import Any, Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

SHARD_COLUMN = "offsets_partition"  # a shard holds every row of its offsets partitions
_META = b"offsetlake.suspects"  # the counts of a shard's rows, carried on its suspects' schema

_NOT_NULL = "expect_column_values_to_not_be_null"
_BETWEEN = "expect_column_values_to_be_between"
_UNIQUE = ("expect_column_values_to_be_unique", "expect_compound_columns_to_be_unique")
# kwargs that change which rows an expectation rejects (or how many may be): the filter would not know them
_UNSUPPORTED_KWARGS = ("mostly", "row_condition", "condition_parser", "parse_strings_as_datetimes",
                       "allow_cross_type_comparisons")


@dataclass(frozen=True)
class RowBound:
    """One expectation as the rows that might break it: `kind` not_null | between | unique."""

    kind: str
    columns: tuple[str, ...]
    low: Any = None
    high: Any = None

    def mask(self, table: pa.Table) -> pa.ChunkedArray | pa.Array:
        if self.kind == "not_null":
            return pc.is_null(table.column(self.columns[0]))
        if self.kind == "between":
            col = table.column(self.columns[0])
            out = None
            for bound, cmp in ((self.low, pc.less_equal), (self.high, pc.greater_equal)):
                if bound is not None:
                    hit = pc.fill_null(cmp(col, pa.scalar(bound, type=col.type)), False)
                    out = hit if out is None else pc.or_(out, hit)
            return out if out is not None else pa.array([False] * table.num_rows, pa.bool_())
        # unique: every row of a key seen twice, and rows whose key columns are all null (GX's missing rows)
        keys = table.select(list(self.columns))
        all_null = None
        for c in self.columns:
            n = pc.is_null(table.column(c))
            all_null = n if all_null is None else pc.and_(all_null, n)
        if _ascending(keys):  # the usual case, a shard's history in record order: nothing repeats
            return all_null
        distinct = keys.group_by(list(self.columns), use_threads=False).aggregate([]).num_rows
        if distinct == table.num_rows:
            return all_null
        seen: dict[tuple, int] = {}
        rows = list(zip(*(keys.column(c).to_pylist() for c in self.columns)))
        for r in rows:
            seen[r] = seen.get(r, 0) + 1
        return pc.or_(all_null, pa.array([seen[r] > 1 for r in rows], pa.bool_()))


def _ascending(keys: pa.Table) -> bool:
    """Whether `keys` (integer columns without nulls) are in strictly ascending order, which no repeated key is;
    False where that cannot be told column by column."""
    if keys.num_rows < 2:
        return True
    columns = []
    for c in keys.columns:
        if not pa.types.is_integer(c.type) or c.null_count:
            return False
        columns.append(c.to_numpy())
    later = np.zeros(keys.num_rows - 1, bool)  # a row past the one before it in the columns compared so far
    tied = np.ones(keys.num_rows - 1, bool)
    for v in columns:
        later |= tied & (v[1:] > v[:-1])
        tied &= v[1:] == v[:-1]
    return bool(later.all())


@dataclass(frozen=True)
class SuspectFilter:
    """A suite's row-wise expectations as bounds; `columns` are the ones its validation reads."""

    bounds: tuple[RowBound, ...]
    columns: tuple[str, ...]

    @property
    def counted_columns(self) -> tuple[str, ...]:
        """Columns whose nulls GX leaves out of a between check's rows: the shards count them."""
        return tuple(dict.fromkeys(c for b in self.bounds if b.kind in ("between", "unique") and len(b.columns) == 1
                                   for c in b.columns))

    def split(self, table: pa.Table) -> pa.Table:
        """The rows of `table` (one or more whole offsets partitions) that might break a bound, in `columns`, with
        the counts of all of `table` on the schema (`Suspects.gather` adds them up)."""
        mask = None
        for b in self.bounds:
            m = b.mask(table)
            mask = m if mask is None else pc.or_(mask, m)
        out = table.select(list(self.columns))
        out = out.filter(mask) if mask is not None else out.slice(0, 0)
        counts = {"rows": table.num_rows, "nulls": {c: table.column(c).null_count for c in self.counted_columns},
                  "ranges": {c: _range(table.column(c)) for c in self._between_columns}}
        return out.replace_schema_metadata({_META: json.dumps(counts).encode()})

    @property
    def _between_columns(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(b.columns[0] for b in self.bounds if b.kind == "between"))

    def holds_for(self, part: pa.Table, split_by: "SuspectFilter") -> bool:
        """Whether `part` (the suspects `split_by` split off whole offsets partitions) holds every row of those
        partitions this filter would keep: each bound of this filter is one of `split_by`'s, or is a between bound
        the partitions' values (their range, recorded by the split) stay strictly inside. Then `part` is a
        superset of this filter's suspects there, which is all validation needs."""
        if len(self.bounds) != len(split_by.bounds) or self.columns != split_by.columns:
            return False
        ranges = _counts(part).get("ranges", {})
        for mine, theirs in zip(self.bounds, split_by.bounds):
            if mine == theirs:
                continue
            if mine.kind != "between" or theirs.kind != "between" or mine.columns != theirs.columns:
                return False
            column = mine.columns[0]
            if column not in ranges:
                return False
            if ranges[column] is None:  # every value null: no between bound flags a null
                continue
            low, high = (_from_json(v) for v in ranges[column])
            if (mine.low is not None and not low > mine.low) or (mine.high is not None and not high < mine.high):
                return False
        return True


def _range(column) -> list | None:
    """[min, max] of a column, JSON-able (None: no value)."""
    if column.null_count == len(column):
        return None
    mm = pc.min_max(column)
    return [_to_json(mm["min"].as_py()), _to_json(mm["max"].as_py())]


def _to_json(v):
    return {"datetime": v.isoformat()} if isinstance(v, datetime) else v


def _from_json(v):
    return datetime.fromisoformat(v["datetime"]) if isinstance(v, dict) else v


def _counts(part: pa.Table) -> dict:
    return json.loads((part.schema.metadata or {}).get(_META, b"{}") or b"{}")


def suspect_filter(spec) -> SuspectFilter | None:
    """The filter of a `suites.SuiteSpec`, or None when one of its expectations is not row-wise (or its key is not
    local to an offsets partition)."""
    if spec.derived:
        return None
    bounds = []
    for check in spec.checks:
        cfg = check.expectation
        kw = cfg.kwargs
        if any(kw.get(k) not in (None, False, 1, 1.0) for k in _UNSUPPORTED_KWARGS):
            return None
        if cfg.type == _NOT_NULL:
            bounds.append(RowBound("not_null", (kw["column"],)))
        elif cfg.type == _BETWEEN:
            if not all(isinstance(kw.get(k), (int, float, datetime, type(None))) for k in ("min_value", "max_value")):
                return None
            bounds.append(RowBound("between", (kw["column"],), kw.get("min_value"), kw.get("max_value")))
        elif cfg.type in _UNIQUE:
            columns = tuple(kw.get("column_list") or (kw["column"],))
            if SHARD_COLUMN not in columns or kw.get("ignore_row_if") not in (None, "all_values_are_missing"):
                return None
            bounds.append(RowBound("unique", columns))
        else:
            return None
    return SuspectFilter(tuple(bounds), tuple(spec.columns_read))


@dataclass(frozen=True)
class Suspects:
    """A log-sized table as its suite sees it: the suspect rows of every shard, and the counts of all rows."""

    table: str
    rows: pa.Table  # the suspects, in the filter's columns
    total: int  # rows of the whole table
    nulls: dict[str, int] = field(default_factory=dict)  # nulls of the whole table, per counted column
    frame: Any = None  # the whole table (a DataFrame), validated instead when the suspects are too many

    @classmethod
    def gather(cls, table: str, parts: Iterable[pa.Table], schema: pa.Schema, frame: Any = None) -> "Suspects":
        schema = pa.schema([f.with_nullable(True) for f in schema])  # what a check flags may be a null key
        total, nulls, kept = 0, {}, []
        for part in parts:
            counts = _counts(part)
            total += int(counts.get("rows", 0))
            for c, n in counts.get("nulls", {}).items():
                nulls[c] = nulls.get(c, 0) + int(n)
            kept.append(part.replace_schema_metadata(None).cast(schema))
        rows = pa.concat_tables(kept) if kept else schema.empty_table()
        return cls(table, rows, total, nulls, frame)

    def missing(self, columns: tuple[str, ...], suspects_missing: int | None) -> int:
        """Rows GX leaves out of an expectation over `columns` (its `missing_count`) in the whole table: a
        column's nulls, counted by the shards; for a compound key, the all-null rows (every one is a suspect)."""
        if suspects_missing is None:
            return 0
        if len(columns) == 1 and columns[0] in self.nulls:
            return self.nulls[columns[0]]
        return suspects_missing
