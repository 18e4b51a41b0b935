"""Test tiers: the fast tier needs no JVM; `spark` tests share one small local session per run."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("OFFSETLAKE_SHARED", ROOT.parent / "shared"))


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects
def pytest_collection_modifyitems(config, items):
    """A test that takes the `spark` fixture (itself or through another fixture) is a `spark` test, marked or not;
    a test that does not take it is one only if it says so (it starts Spark some other way, e.g. a rebuild). A test
    that takes `spark_on_demand` rebuilds end to end, in process unless its route needs Spark: `slow`."""
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        if "spark" in fixtures and item.get_closest_marker("spark") is None:
            item.add_marker(pytest.mark.spark)
        if "spark_on_demand" in fixtures and item.get_closest_marker("slow") is None:
            item.add_marker(pytest.mark.slow)
    _in_start_order(items)


#: The order modules start in under `make test`'s workers (`--dist loadfile` hands each worker the next module as
#: it frees): those that start processes of their own (clusters, CLI runs, servers) first, then those that take a
#: Spark session, then the rest. The longest modules start at once and the short ones fill the workers in at the
#: end, instead of one long module running alone after every other has finished.
_START_ORDER = ("integration", "spark", "slow", "readers")


def _in_start_order(items) -> None:
    """`items` with their modules in `_START_ORDER` (a module by its most demanding test), each module's tests in
    their order; every worker collects and sorts alike."""
    rank: dict[str, int] = {}
    for item in items:
        marks = {m.name for m in item.iter_markers()}
        got = next((i for i, m in enumerate(_START_ORDER) if m in marks), len(_START_ORDER))
        rank[item.module.__name__] = min(got, rank.get(item.module.__name__, got))
    items.sort(key=lambda item: rank[item.module.__name__])


def _jvm_started() -> bool:
    ctx = sys.modules.get("pyspark") and sys.modules["pyspark"].SparkContext
    return bool(ctx and ctx._gateway is not None)


@pytest.fixture(autouse=True)
def _no_jvm_unless_marked(request):
    """The fast tier must never start a JVM: a test not marked `spark` or `integration` that starts one fails."""
    marked = any(request.node.get_closest_marker(m) for m in ("spark", "integration"))
    before = marked or _jvm_started()
    yield
    if not before and _jvm_started():
        pytest.fail("started a JVM without the `spark` mark (take the `spark` fixture or mark the test)")


@pytest.fixture(scope="session")
def make_dist_lock():
    """A context manager to hold around a `make dist` / `make pack` (and the copy out of dist/ that follows): under
    `make test`'s workers (pytest-xdist, one module per worker) two such modules would rebuild dist/ at the same
    time. Held only while dist/ is written, not for the whole module: a module that waited on the other's whole
    run (a standalone cluster's) left its worker idle for minutes."""
    import contextlib
    import fcntl

    lock = ROOT / "build" / ".make-dist.lock"

    @contextlib.contextmanager
    def held():
        lock.parent.mkdir(exist_ok=True)
        with open(lock, "w") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    return held


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


def _refuse_spark():
    pytest.fail("asked for Spark on a route that needs none (a rebuild whose shards execute in this process)")


@pytest.fixture(scope="session")
def no_spark(settings):
    """The session of a rebuild (or validation) that must need none: starting it fails the test, naming why."""
    from pipelines.session import SessionOnDemand

    return SessionOnDemand(settings, app_name="offsetlake-tests", starting=_refuse_spark)


@pytest.fixture(scope="session")
def spark_on_demand(settings):
    """The run's one local Spark (the `spark` fixture's, by getOrCreate), started only when a rebuild's route needs
    it: a test given this fixture is a `spark` test only if it says so (one that does not and starts it fails), and
    a `slow` one."""
    from pipelines.session import SessionOnDemand

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    return SessionOnDemand(settings, app_name="offsetlake-tests")


@pytest.fixture(scope="session")
def s3_server():
    """A local S3-compatible server (moto's server mode) on 127.0.0.1: its endpoint URL."""
    import socket
    import subprocess
    import time

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError("moto server did not start")
            time.sleep(0.1)
    yield f"http://127.0.0.1:{port}"
    proc.terminate()
    proc.wait(timeout=10)


S3_ENV_KEYS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_REGION", "AWS_DEFAULT_REGION",
               "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_PROFILE")


@pytest.fixture
def s3_bucket(s3_server, monkeypatch, request):
    """A fresh bucket on the local S3 server, with the AWS environment variables pointing at it: `s3://<name>`.
    Subprocesses started by the test inherit the variables."""
    import re
    import uuid

    import pyarrow.fs as pafs

    for k in S3_ENV_KEYS:
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "offsetlake-test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "offsetlake-test-secret")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_server)
    name = (re.sub(r"[^a-z0-9-]", "-", request.node.name.lower())[:40].strip("-") + "-" + uuid.uuid4().hex[:8])
    fs = pafs.S3FileSystem(access_key="offsetlake-test", secret_key="offsetlake-test-secret", region="us-east-1",
                           endpoint_override=s3_server.split("://", 1)[1], scheme="http",
                           allow_bucket_creation=True)
    fs.create_dir(name)
    return f"s3://{name}"
