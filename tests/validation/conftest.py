"""Fixtures of the validation tests: one GX context per session, fresh rows per test, a `validate` helper."""
from __future__ import annotations

import copy

import pytest

from .validation_rows import AS_OF_MS, N, SID, build_inputs, clean_rows


@pytest.fixture(scope="session")
def gx_context():
    """One GX context for the whole test session (the runner would otherwise build its own once)."""
    from pipelines.validation.runner import new_context

    return new_context()


@pytest.fixture()
def rows():
    return copy.deepcopy(clean_rows())


def on_engine(settings, engine: str):
    """`settings` with validation on `engine`: "pandas" (every table collected) or "spark" (never)."""
    import dataclasses

    from pipelines.config import _merge

    limit = 0 if engine == "spark" else 10**9  # "suspects": the suspects are validated on pandas
    return dataclasses.replace(settings, raw=_merge(settings.raw, {"validation": {"pandas_max_rows": limit}}))


@pytest.fixture(scope="session", params=["pandas", pytest.param("spark", marks=pytest.mark.spark), "suspects"])
def engine(request):
    """Every validation test runs on both GX engines, and with the row-wise suites' tables given as the shards give
    the history (`validation.suspects`): they must give the same outcomes. Only the Spark engine's runs start a
    JVM (`spark`-marked)."""
    return request.param


def as_suspects(tables: dict, as_of_ms: int, num_partitions: int, settings) -> dict:
    """Every table whose suite has a filter, as the shards would give it: each offsets partition split on its own
    (a shard's rows), the suspects gathered with the counts."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from pipelines.validation.runner import _suites
    from pipelines.validation.suspects import Suspects, suspect_filter
    from schemas.tables import TABLES

    out = dict(tables)
    for spec in _suites(settings, as_of_ms, num_partitions):
        filt = suspect_filter(spec)
        if filt is None or spec.table not in tables:
            continue
        frame = tables[spec.table]
        whole = frame if isinstance(frame, pa.Table) else frame.toArrow()
        schema = pa.schema([f.with_nullable(True) for f in TABLES[spec.table]])
        whole = pa.table([whole.column(f.name).cast(f.type) for f in schema], schema=schema)
        parts = whole.column("offsets_partition")
        shards = [whole.filter(pc.is_null(parts) if p is None else pc.fill_null(pc.equal(parts, p), False))
                  for p in pc.unique(parts).to_pylist()]
        out[spec.table] = Suspects.gather(spec.table, [filt.split(t) for t in shards],
                                          pa.schema([schema.field(c) for c in filt.columns]),
                                          frame=None if isinstance(frame, pa.Table) else frame)
    return out


@pytest.fixture(scope="session")
def validator(settings, gx_context, no_spark):
    """validator(rows, engine, suites=None, settings_=None, with_markers=True, with_accounting=True)
    → ValidationResult on fresh frames, validated on `engine`. The Spark engine's session is the run's one, started
    by the first test that validates on it (a `spark`-marked one); the other engines are given none to use."""
    from pipelines.session import SessionOnDemand
    from pipelines.validation.runner import run_validation

    session = SessionOnDemand(settings, app_name="offsetlake-tests")  # getOrCreate: the `spark` fixture's session

    def _run(rows, engine, *, suites=None, settings_=None, with_markers=True, with_accounting=True):
        # the pandas engine and the suspects take Arrow, as the routes give the state tables: no Spark job
        spark = session if engine == "spark" else no_spark
        inputs = build_inputs(spark, rows, arrow=engine != "spark")
        tables = inputs["tables"]
        if engine == "suspects":
            tables = as_suspects(tables, AS_OF_MS, N, settings_ or settings)
        return run_validation(
            spark,
            tables,
            as_of_ms=AS_OF_MS,
            num_partitions=N,
            settings=on_engine(settings_ or settings, engine),
            markers=inputs["markers"] if with_markers else None,
            accounting=inputs["accounting"] if with_accounting else None,
            suites=suites,
            context=gx_context,
            snapshot_id=SID,
        )

    return _run


@pytest.fixture(scope="session")
def validate(validator, engine):
    """`validator` on the test's engine: validate(rows, suites=None, settings_=None, with_markers=True, …)."""
    return lambda rows, **kw: validator(rows, engine, **kw)
