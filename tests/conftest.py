"""Test tiers: the fast tier needs no JVM; `spark` tests share one small local session per run."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("OFFSETLAKE_SHARED", ROOT.parent / "shared"))


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    """../shared beside the checkout (CI has it); tests that need it skip cleanly when it is absent."""
    if not SHARED.is_dir():
        pytest.skip(f"{SHARED} not present")
    return SHARED


@pytest.fixture(scope="session")
def brokerdata(shared_dir) -> Path:
    p = shared_dir / "brokerdata"
    if not p.is_dir():
        pytest.skip("brokerdata not present")
    return p


@pytest.fixture(scope="session")
def realdata(shared_dir) -> Path:
    p = shared_dir / "realdata"
    if not p.is_dir():
        pytest.skip("realdata not present")
    return p


@pytest.fixture(scope="session")
def settings():
    from pipelines.config import load_settings

    return load_settings(env="ci")


@pytest.fixture(scope="session")
def spark(settings):
    """One small local Spark per test run."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pipelines.session import get_spark

    session = get_spark(settings, app_name="offsetlake-tests")
    yield session
    session.stop()
