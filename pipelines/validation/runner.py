"""Runs the suites on a snapshot's tables before the commit and turns GX results into a `ValidationResult`.

One ephemeral GX context (analytics and progress bars off) serves a process. A table comes as Arrow (the state
tables the replay returns), as a Spark DataFrame (a log-sized table), or as `suspects.Suspects` (the history of a
Spark run: the rows its shards flagged, and the counts of all). GX validates it on one of two engines:
- pandas: every suite with a relational check (`SuiteSpec.derived`: its `chk_*` columns are computed over Arrow,
  and the tables it relates are the coordinator's state, collected when given as DataFrames), every Arrow table,
  suspects of at most `validation.pandas_max_rows` rows, and a DataFrame of at most that many rows (the columns the
  expectations read, collected once);
- Spark otherwise: a cached frame through a Spark data source.
Both engines give the same outcomes, failures, counts and examples included (tests/validation runs every breaker
on both, and over suspects). The result carries the run policy: `fail` makes a failed expectation fail the run,
`warn` only reports it.
"""
from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from datetime import date, datetime, timezone
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from pipelines.config import Settings
from pipelines.validation.accounting import Accounting
from pipelines.validation.settings import (  # noqa: F401
    PANDAS_MAX_ROWS, POLICIES, max_unread_bytes, pandas_max_rows, validation_settings)
from pipelines.validation.suites import SuiteSpec, build_suites
from pipelines.validation.suspects import SuspectFilter, Suspects, suspect_filter

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DATASOURCE = "offsetlake_validation"
PANDAS_DATASOURCE = "offsetlake_validation_pandas"
BATCH_DEFINITION = "whole_dataframe"
EXAMPLES = 5  # unexpected rows kept per expectation
RESULT_FORMAT_BASE = {"result_format": "SUMMARY", "partial_unexpected_count": EXAMPLES}

_CONTEXT = None
_CONTEXT_BUILT = threading.Lock()


def new_context():
    """An in-memory GX context: nothing on disk, no usage statistics sent, no progress bars on the console."""
    # imported here, not at module level: great_expectations ~15 s of import (python -X importtime)
    import great_expectations as gx
    from great_expectations.data_context.types.base import (
        DataContextConfig,
        InMemoryStoreBackendDefaults,
        ProgressBarsConfig,
    )
    from great_expectations.execution_engine import pandas_execution_engine

    # GX fingerprints every pandas frame it is handed (md5 over pandas' hash of every cell, a pickle of the frame
    # where a cell is a list) only to label the result's batch markers, which no report reads; on the driver, while
    # validation holds it. A frame is fingerprinted when its size is below this threshold.
    pandas_execution_engine.HASH_THRESHOLD = 0
    config = DataContextConfig(
        analytics_enabled=False,
        progress_bars=ProgressBarsConfig(globally=False, metric_calculations=False),
        store_backend_defaults=InMemoryStoreBackendDefaults(),
    )
    return gx.get_context(mode="ephemeral", project_config=config)


def default_context():
    """The process's GX context, built on first use (never at import). The CLI builds it in a thread once it waits on
    a JVM (`jobs.rebuild_common`): a validation that comes first waits for that one instead of building another."""
    global _CONTEXT
    with _CONTEXT_BUILT:
        if _CONTEXT is None:
            _CONTEXT = new_context()
        return _CONTEXT


# -- results -------------------------------------------------------------------------------------------------------


def _jsonable(v: Any) -> Any:
    if type(v).__module__ == "numpy" and hasattr(v, "item"):  # a pandas-engine scalar (numpy.int64, numpy.bool_)
        v = v.item()
    if isinstance(v, datetime):
        if v.tzinfo is None:
            v = v.replace(tzinfo=timezone.utc)
        return v.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")
    if isinstance(v, date):
        return v.isoformat()
    if isinstance(v, Decimal):
        return float(v)
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, Mapping):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple, set, frozenset)):
        return [_jsonable(x) for x in v]
    if isinstance(v, (str, int, float, bool)) or v is None:
        return v
    return str(v)


@dataclass(frozen=True)
class ExpectationOutcome:
    """One expectation's result, in the shape reports and `runs.validation` use."""

    id: str  # <suite>.<check>
    expectation_type: str
    description: str
    why: str
    column: str | None
    success: bool
    observed_value: Any = None
    element_count: int | None = None
    unexpected_count: int | None = None
    unexpected_percent: float | None = None
    examples: tuple[Any, ...] = ()
    exception: str | None = None

    def to_dict(self) -> dict:
        return {
            "id": self.id,
            "expectation_type": self.expectation_type,
            "description": self.description,
            "why": self.why,
            "column": self.column,
            "success": self.success,
            "observed_value": _jsonable(self.observed_value),
            "element_count": self.element_count,
            "unexpected_count": self.unexpected_count,
            "unexpected_percent": _jsonable(self.unexpected_percent),
            "examples": _jsonable(list(self.examples)),
            "exception": self.exception,
        }


@dataclass(frozen=True)
class SuiteOutcome:
    name: str
    rows: int
    seconds: float
    expectations: tuple[ExpectationOutcome, ...]
    engine: str = "spark"  # the GX execution engine that validated it: pandas | spark

    @property
    def success(self) -> bool:
        return all(e.success for e in self.expectations)

    @property
    def failed(self) -> list[ExpectationOutcome]:
        return [e for e in self.expectations if not e.success]

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "success": self.success,
            "rows": self.rows,
            "engine": self.engine,
            "seconds": round(self.seconds, 3),
            "expectations": [e.to_dict() for e in self.expectations],
        }


@dataclass(frozen=True)
class ValidationResult:
    """Every suite's outcome for one snapshot, with the policy that decides whether the run fails."""

    policy: str
    as_of_ms: int
    num_partitions: int
    suites: tuple[SuiteOutcome, ...]
    skipped: tuple[tuple[str, str], ...] = ()  # (suite or check id, reason)
    seconds: float = 0.0
    snapshot_id: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def success(self) -> bool:
        return all(s.success for s in self.suites)

    @property
    def should_fail_run(self) -> bool:
        """`fail` policy: any failed expectation fails the run (exit 1); `warn`: reported only."""
        return self.policy == "fail" and not self.success

    @property
    def expectations(self) -> list[ExpectationOutcome]:
        return [e for s in self.suites for e in s.expectations]

    @property
    def failed(self) -> list[ExpectationOutcome]:
        return [e for e in self.expectations if not e.success]

    def outcome(self, check_id: str) -> ExpectationOutcome:
        for e in self.expectations:
            if e.id == check_id:
                return e
        raise KeyError(check_id)

    def to_dict(self) -> dict:
        return {
            "snapshot_id": self.snapshot_id,
            "success": self.success,
            "policy": self.policy,
            "should_fail_run": self.should_fail_run,
            "as_of": _jsonable(datetime.fromtimestamp(self.as_of_ms / 1000, tz=timezone.utc)),
            "num_partitions": self.num_partitions,
            "seconds": round(self.seconds, 3),
            "suites": [s.to_dict() for s in self.suites],
            "skipped": [{"id": i, "reason": r} for i, r in self.skipped],
        }

    def to_json(self, indent: int | None = None) -> str:
        """Per suite, per expectation: success, observed value, unexpected count, a few unexpected examples."""
        return json.dumps(self.to_dict(), indent=indent, sort_keys=False)

    def summary(self) -> dict:
        """The short form stored in `runs.validation`."""
        return {
            "success": self.success,
            "policy": self.policy,
            "should_fail_run": self.should_fail_run,
            "evaluated": len(self.expectations),
            "failed": len(self.failed),
            "failed_ids": [e.id for e in self.failed][:50],
            # named for the people reading `runs` and the page, not only the report file: which table, which check
            "failed_expectations": [{"table": s.name, "expectation": e.id, "column": e.column,
                                     "description": e.description, "unexpected_count": e.unexpected_count}
                                    for s in self.suites for e in s.failed][:50],
            "unexpected_rows": sum(e.unexpected_count or 0 for e in self.failed),
            "skipped": len(self.skipped),
            "suites": {s.name: {"rows": s.rows, "evaluated": len(s.expectations), "failed": len(s.failed)}
                       for s in self.suites},
            "seconds": round(self.seconds, 3),
        }


def _outcome(spec: SuiteSpec, gx_result, suspects: Suspects | None = None) -> ExpectationOutcome:
    """GX's result as an outcome; over `suspects`, counted over the whole table they were picked from (every other
    row is present and expected)."""
    cfg = gx_result.expectation_config
    meta = cfg.meta or {}
    check_id = meta.get("check_id", cfg.type)
    check = next((c for c in spec.checks if spec.check_id(c) == check_id), None)
    r = dict(gx_result.result or {})
    if suspects is not None and r.get("element_count") is not None:
        kw = cfg.kwargs
        columns = tuple(kw.get("column_list") or (kw.get("column"),))
        r["element_count"] = suspects.total
        if r.get("unexpected_count") is not None:
            counted = suspects.total - suspects.missing(columns, r.get("missing_count"))
            r["unexpected_percent"] = r["unexpected_count"] / counted * 100 if counted else None
    examples = r.get("partial_unexpected_index_list") or r.get("partial_unexpected_list") or []
    exc = gx_result.exception_info or {}
    exc_message = None
    if exc.get("raised_exception"):
        exc_message = exc.get("exception_message") or "expectation raised"
    else:  # a suite-level dict of exceptions keyed by metric id
        for v in exc.values() if isinstance(exc, dict) else []:
            if isinstance(v, dict) and v.get("raised_exception"):
                exc_message = v.get("exception_message") or "expectation raised"
                break
    return ExpectationOutcome(
        id=check_id,
        expectation_type=cfg.type,
        description=cfg.description or "",
        why=meta.get("why", ""),
        column=check.column if check else None,
        success=bool(gx_result.success) and exc_message is None,
        observed_value=r.get("observed_value"),
        element_count=r.get("element_count"),
        unexpected_count=r.get("unexpected_count"),
        unexpected_percent=r.get("unexpected_percent"),
        examples=tuple(examples[:EXAMPLES]),
        exception=exc_message,
    )


def _batch_definition(context, name: str, *, pandas: bool = False):
    """Get or add the data source (Spark, or pandas), the suite's DataFrame asset and its whole-frame batch
    definition."""
    source = PANDAS_DATASOURCE if pandas else DATASOURCE
    try:
        ds = context.data_sources.get(source)
    except LookupError:  # GX raises KeyError / LookupError for an absent name
        # persist=False: the runner caches the prepared frame itself and unpersists it after the suite
        ds = (context.data_sources.add_pandas(source) if pandas
              else context.data_sources.add_spark(source, persist=False))
    try:
        asset = ds.get_asset(name)
    except LookupError:
        asset = ds.add_dataframe_asset(name)
    try:
        return asset.get_batch_definition(BATCH_DEFINITION)
    except LookupError:
        return asset.add_batch_definition_whole_dataframe(BATCH_DEFINITION)


def to_validation_pandas(table):
    """An Arrow table as the pandas frame GX validates: integers that hold nulls as Python ints (not floats, which
    would round ids above 2^53), timestamps at their Arrow resolution (microseconds: any year Spark holds fits,
    where nanoseconds end in 2262)."""
    return table.to_pandas(integer_object_nulls=True, date_as_object=True, coerce_temporal_nanoseconds=False)


def _arrow(table):
    return table if isinstance(table, pa.Table) else table.toArrow()


def _validate_suite(context, spec: SuiteSpec, inputs: Mapping[str, Any], pandas_max_rows: int = 0,
                    table_rows: int | None = None) -> SuiteOutcome:
    """Two passes over the prepared frame: every check as BOOLEAN_ONLY (on Spark GX bundles those aggregates into
    a few jobs), then only the failed checks again as SUMMARY for counts and offending rows. A clean table never
    pays for example collection, which is most of GX's per-expectation cost on Spark. An Arrow table, a suite
    with relational checks, and a DataFrame of up to `pandas_max_rows` rows are validated on pandas (only the
    columns the expectations read)."""
    started = time.perf_counter()
    source = inputs[spec.table]
    suspects = None
    if isinstance(source, Suspects):
        if source.frame is None or source.rows.num_rows <= pandas_max_rows:
            suspects, source = source, source.rows
        else:  # too many to collect: the whole table on Spark
            source, table_rows = source.frame, source.total
    if spec.derived:
        prepared = spec.prepare({name: _arrow(inputs[name]) for name in spec.inputs if name in inputs})
        pandas = True
    elif isinstance(source, pa.Table):
        prepared, pandas = source, True
    else:
        if pandas_max_rows > 0 and table_rows is None:
            table_rows = source.count()
        pandas = pandas_max_rows > 0 and table_rows <= pandas_max_rows
        prepared = source.select(*spec.columns_read).toArrow() if pandas else source
    if pandas:
        frame = to_validation_pandas(prepared.select(list(spec.columns_read)))
        rows = len(frame) if suspects is None else suspects.total
    else:
        from pyspark import StorageLevel  # a Spark frame: pyspark is loaded already

        # on local disk, not the heap: a table too large to collect may be the log-sized history
        frame = prepared = prepared.persist(StorageLevel.DISK_ONLY)
    try:
        if not pandas:
            rows = prepared.count()
        batch = _batch_definition(context, spec.name, pandas=pandas).get_batch(batch_parameters={"dataframe": frame})
        first = batch.validate(spec.expectation_suite(), result_format={"result_format": "BOOLEAN_ONLY"})
        failed_ids = {
            (r.expectation_config.meta or {}).get("check_id") for r in first.results
            if not (r.success and not (r.exception_info or {}).get("raised_exception"))
        }
        detailed: dict[str, ExpectationOutcome] = {}
        if failed_ids:
            again = SuiteSpec(
                name=spec.name, table=spec.table, index_columns=spec.index_columns,
                checks=tuple(c for c in spec.checks if spec.check_id(c) in failed_ids),
            )
            result_format = dict(RESULT_FORMAT_BASE)
            if spec.index_columns:
                result_format["unexpected_index_column_names"] = list(spec.index_columns)
            second = batch.validate(again.expectation_suite(), result_format=result_format)
            detailed = {o.id: o for o in (_outcome(spec, r, suspects) for r in second.results)}
        outcomes = []
        for r in first.results:
            o = _outcome(spec, r)
            if o.id in detailed:
                d = detailed[o.id]
                # the verdict is the first pass's; the second only adds counts and examples
                o = ExpectationOutcome(**{**d.__dict__, "success": o.success,
                                          "exception": o.exception or d.exception})
            elif o.success:
                # every check is a map expectation without `mostly`: success means no unexpected row
                o = ExpectationOutcome(**{**o.__dict__, "element_count": rows, "unexpected_count": 0,
                                          "unexpected_percent": 0.0})
            outcomes.append(o)
    finally:
        if not pandas:
            prepared.unpersist()
    order = {spec.check_id(c): i for i, c in enumerate(spec.checks)}
    outcomes.sort(key=lambda o: order.get(o.id, len(order)))
    return SuiteOutcome(name=spec.name, rows=rows, seconds=time.perf_counter() - started,
                        expectations=tuple(outcomes), engine="pandas" if pandas else "spark")


def _suites(settings: Settings, as_of_ms: int, num_partitions: int,
            available: frozenset[str] | None = None, semantics: str | None = None) -> list[SuiteSpec]:
    _policy, skew, configured = validation_settings(settings)
    semantics = semantics or configured
    return build_suites(as_of_ms=as_of_ms, num_partitions=num_partitions, timestamp_skew_minutes=skew,
                        semantics=semantics, available=available, max_unread_bytes=max_unread_bytes(settings))


#: A clock no run reaches (year 9000): the history's filter before a run's clock is known flags no row for being
#: late; `SuspectFilter.holds_for` then tells the shards whose suspects the run's own clock would change.
UNKNOWN_CLOCK_MS = 221_845_392_000_000


def history_check(settings: Settings, *, as_of_ms: int, num_partitions: int) -> SuspectFilter | None:
    """The `offset_commits` suite of a run as the filter its shards apply (None: the suite is not row-wise)."""
    spec = next(s for s in _suites(settings, as_of_ms, num_partitions) if s.name == "offset_commits")
    return suspect_filter(spec)


def run_validation(
    spark: SparkSession,
    tables: Mapping[str, Any],
    *,
    as_of_ms: int,
    num_partitions: int,
    settings: Settings,
    markers: Any = None,
    accounting: Accounting | None = None,
    suites: Collection[str] | None = None,
    context=None,
    snapshot_id: str | None = None,
    row_counts: Mapping[str, int] | None = None,
    semantics: str | None = None,
) -> ValidationResult:
    """Validate a snapshot's tables (before the commit) with one GX suite per table.

    `tables` maps contract table names to Arrow tables or DataFrames (`markers` too); a table not given is listed in `skipped`, as is a check
    whose other input is missing (`markers` for pending offsets, `accounting` for the record accounting).
    `suites` restricts the run to those suite names. `context` defaults to the process's ephemeral GX context.
    `row_counts`: the tables' row counts when already known (they pick the engine; counted otherwise).
    `semantics`: the replay's (`--semantics`), which picks the control records that end a transaction; default:
    the settings' `rebuild.semantics`.
    """
    policy = validation_settings(settings)[0]
    max_pandas = pandas_max_rows(settings)
    started = time.perf_counter()
    inputs: dict[str, Any] = dict(tables)
    if markers is not None:
        inputs["markers"] = markers
    if accounting is not None:
        inputs["accounting"] = accounting.to_arrow()
    specs = _suites(settings, as_of_ms, num_partitions, frozenset(inputs), semantics)
    # every input a relational check reads, as Arrow once (state-sized: the suites that read the log have none)
    for name in {n for spec in specs if spec.derived and (suites is None or spec.name in suites)
                 for n in spec.inputs if n in inputs}:
        inputs[name] = _arrow(inputs[name])
    context = context or default_context()
    outcomes: list[SuiteOutcome] = []
    skipped: list[tuple[str, str]] = []
    for spec in specs:
        if suites is not None and spec.name not in suites:
            continue
        if spec.table not in inputs:
            skipped.append((spec.name, "not given"))
            continue
        skipped.extend(spec.skipped)
        outcomes.append(_validate_suite(context, spec, inputs, max_pandas, (row_counts or {}).get(spec.table)))
    return ValidationResult(
        policy=policy,
        as_of_ms=as_of_ms,
        num_partitions=num_partitions,
        suites=tuple(outcomes),
        skipped=tuple(skipped),
        seconds=time.perf_counter() - started,
        snapshot_id=snapshot_id,
    )
