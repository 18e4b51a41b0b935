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


@pytest.fixture(scope="session")
def validate(spark, settings, gx_context):
    """validate(rows, suites=None, settings=None, with_markers=True) → ValidationResult on fresh frames."""
    from pipelines.validation.runner import run_validation

    def _run(rows, *, suites=None, settings_=None, with_markers=True, with_accounting=True):
        inputs = build_inputs(spark, rows)
        return run_validation(
            spark,
            inputs["tables"],
            as_of_ms=AS_OF_MS,
            num_partitions=N,
            settings=settings_ or settings,
            markers=inputs["markers"] if with_markers else None,
            accounting=inputs["accounting"] if with_accounting else None,
            suites=suites,
            context=gx_context,
            snapshot_id=SID,
        )

    return _run
