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

    limit = 0 if engine == "spark" else 10**9
    return dataclasses.replace(settings, raw=_merge(settings.raw, {"validation": {"pandas_max_rows": limit}}))


@pytest.fixture(scope="session", params=["pandas", "spark"])
def engine(request):
    """Every validation test runs on both GX engines: they must give the same outcomes."""
    return request.param


@pytest.fixture(scope="session")
def validator(spark, settings, gx_context):
    """validator(rows, engine, suites=None, settings_=None, with_markers=True, with_accounting=True)
    → ValidationResult on fresh frames, validated on `engine`."""
    from pipelines.validation.runner import run_validation

    def _run(rows, engine, *, suites=None, settings_=None, with_markers=True, with_accounting=True):
        inputs = build_inputs(spark, rows)
        return run_validation(
            spark,
            inputs["tables"],
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
