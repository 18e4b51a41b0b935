"""Which store failures are transient (the texts are the clients' own, as they reached offsetlake), how a retry
backs off and when it gives up: no test waits, the clock and the sleep are the test's."""
from __future__ import annotations

import random

import pytest

from pipelines.io import retry
from pipelines.io.retry import StoreRetry, StoreUnavailable

TRANSIENT = [
    # pyarrow (the AWS SDK)
    "When reading information for key 'dump/x.log' in bucket 'b': AWS Error SLOW_DOWN during HeadObject operation: "
    "Please reduce your request rate.",
    "AWS Error INTERNAL_FAILURE during GetObject operation: Failed to flush response stream (eof: 0, bad: 1)",
    "When listing objects under key 'wh/t/' in bucket 'b': AWS Error SERVICE_UNAVAILABLE during ListObjectsV2 "
    "operation: Service Unavailable",
    "AWS Error NETWORK_CONNECTION during GetObject operation: curlCode: 56, Failure when receiving data from the peer",
    "AWS Error NETWORK_CONNECTION during PutObject operation: curlCode: 28, Timeout was reached",
    # delta-rs / object_store
    "Kernel error -> Generic S3 error ↳ Error getting list response body ↳ HTTP error ↳ request or response body "
    "error ↳ error reading a body from connection ↳ Connection reset by peer (os error 104)",
    "Generic S3 error: Error after 9 retries in 2.1s, max_retries:9, retry_timeout:120s, source:HTTP status server "
    "error (503 Service Unavailable) for url (http://127.0.0.1:9000/b/wh/runs/_delta_log/)",
    "Generic S3 error: Error performing GET http://127.0.0.1/b?list-type=2 in 60s - HTTP error error sending request "
    "operation timed out",
    # obstore
    "Generic S3 error: Server returned non-2xx status code: 503 Service Unavailable: <Code>SlowDown</Code>",
]
REFUSED = [
    "When getting information for bucket 'nope': AWS Error NO_SUCH_BUCKET during HeadBucket operation",
    "AWS Error ACCESS_DENIED during GetObject operation: Access Denied",
    "When reading information for key 'x' in bucket 'b': AWS Error UNKNOWN (HTTP status 403) during HeadObject "
    "operation: No response body.",
    "AWS Error NETWORK_CONNECTION during HeadObject operation: curlCode: 7, Could not connect to server",
    "Generic S3 error: Error performing request: error sending request: client error (Connect): tcp connect error: "
    "Connection refused (os error 111)",
    "Generic S3 error: Received redirect without LOCATION, this normally indicates an incorrectly configured region "
    "(InvalidAccessKeyId)",
    "No space left on device (os error 28)",
]


@pytest.mark.parametrize("text", TRANSIENT, ids=lambda t: t[:48])
def test_throttling_5xx_resets_and_timeouts_are_transient(text):
    assert retry.transient(OSError(text))
    wrapped = RuntimeError("the run failed")
    wrapped.__cause__ = OSError(text)
    assert retry.transient(wrapped)


@pytest.mark.parametrize("text", REFUSED, ids=lambda t: t[:48])
def test_refusals_are_never_transient(text):
    assert not retry.transient(OSError(text))


def test_python_errors_by_type():
    assert retry.transient(ConnectionResetError()) and retry.transient(TimeoutError())
    assert not retry.transient(ConnectionRefusedError()) and not retry.transient(FileNotFoundError("x"))
    assert retry.transient(StoreUnavailable("s3://b/x: gave up"))


def test_full_jitter_stays_under_the_exponential_bound():
    policy = StoreRetry(first_backoff_seconds=0.1, max_backoff_seconds=1.0)
    rng = random.Random(3)
    for n, bound in ((1, 0.1), (2, 0.2), (3, 0.4), (4, 0.8), (5, 1.0), (12, 1.0)):
        waits = [policy.backoff(n, rng) for _ in range(200)]
        assert all(0 <= w <= bound for w in waits) and max(waits) > bound * 0.8, (n, max(waits))


class Clock:
    """time.monotonic and time.sleep of the retry loop: sleeping moves the clock."""

    def __init__(self, monkeypatch):
        self.now = 0.0
        self.slept = []
        monkeypatch.setattr(retry.time, "monotonic", lambda: self.now)

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def _failing(times: int, exc: BaseException):
    calls = []

    def fn():
        calls.append(1)
        if len(calls) <= times:
            raise exc
        return "done"

    return fn, calls


def test_a_transient_failure_is_retried_until_it_passes(monkeypatch):
    clock = Clock(monkeypatch)
    fn, calls = _failing(3, OSError("AWS Error SLOW_DOWN during GetObject operation"))
    out = None
    for attempt in retry.attempts("s3://b/x (read)", StoreRetry(attempts=5), sleep=clock.sleep):
        with attempt:
            out = fn()
    assert out == "done" and len(calls) == 4 and len(clock.slept) == 3


def test_it_gives_up_after_the_tries_naming_what_and_why(monkeypatch):
    clock = Clock(monkeypatch)
    fn, calls = _failing(100, OSError("AWS Error SLOW_DOWN during GetObject operation: Please reduce"))
    with pytest.raises(StoreUnavailable) as e:
        for attempt in retry.attempts("s3://b/x (read)", StoreRetry(attempts=4), sleep=clock.sleep):
            with attempt:
                fn()
    assert len(calls) == 4
    assert str(e.value).startswith("s3://b/x (read): AWS Error SLOW_DOWN during GetObject operation")
    assert "still failing after 4 tries" in str(e.value)


def test_no_try_starts_past_the_total_time(monkeypatch):
    clock = Clock(monkeypatch)
    policy = StoreRetry(attempts=1000, first_backoff_seconds=1, max_backoff_seconds=5, total_seconds=30)
    fn, calls = _failing(10_000, OSError("503 Service Unavailable"))
    with pytest.raises(StoreUnavailable):
        for attempt in retry.attempts("s3://b/x", policy, sleep=clock.sleep):
            with attempt:
                fn()
    assert clock.now <= 30 and len(calls) < 1000


def test_a_refusal_is_raised_at_once(monkeypatch):
    clock = Clock(monkeypatch)
    fn, calls = _failing(5, OSError("AWS Error ACCESS_DENIED during GetObject operation"))
    with pytest.raises(OSError, match="ACCESS_DENIED"):
        retry.call(fn, "s3://b/x", StoreRetry(attempts=5))
    assert len(calls) == 1 and clock.slept == []


def test_settings_are_checked():
    assert StoreRetry.from_section(None) == StoreRetry()
    assert StoreRetry.from_section({"retry_attempts": 3, "retry_total_seconds": 5}).attempts == 3
    assert StoreRetry().to_section() == StoreRetry.from_section(StoreRetry().to_section()).to_section()
    for bad, match in (({"retry_attempts": 0}, "at least 1"), ({"retry_total_seconds": -1}, "more than 0"),
                       ({"request_timeout_seconds": "soon"}, "must be a number"),
                       ({"retry_first_backoff_seconds": 5, "retry_max_backoff_seconds": 1}, "at least")):
        with pytest.raises(ValueError, match=match):
            StoreRetry.from_section(bad)


def test_the_defaults_are_the_base_settings():
    from pipelines.config import load_settings

    assert StoreRetry.from_section(load_settings(env="base").section("storage")) == StoreRetry()


def test_each_client_gets_the_policy():
    policy = StoreRetry(attempts=4, first_backoff_seconds=0.25, max_backoff_seconds=3, total_seconds=50,
                        request_timeout_seconds=20, connect_timeout_seconds=5)
    assert policy.object_store_options() == {
        "max_retries": "3", "retry_timeout": "50000ms", "backoff_config.init_backoff": "250ms",
        "backoff_config.max_backoff": "3000ms", "backoff_config.base": "2", "timeout": "20000ms",
        "connect_timeout": "5000ms"}
    retry_config, client = policy.obstore_config()
    assert retry_config["max_retries"] == 3 and retry_config["retry_timeout"].total_seconds() == 50
    assert client["timeout"].total_seconds() == 20
    assert "SET http_retries = 3" in policy.duckdb_settings()


def test_a_task_error_names_the_store_fault():
    """A Spark task's StoreUnavailable reaches the driver as the text of Spark's error."""
    text = ("An error occurred while calling o91.collectToPython.\n: org.apache.spark.SparkException: Job aborted\n"
            "Traceback (most recent call last):\n  File \"x\", line 1\npipelines.io.retry.StoreUnavailable: "
            "s3://b/d/0.log (read): AWS Error SLOW_DOWN (still failing after 10 tries in 97 s)\n\tat org.apache")
    assert retry.unavailable_cause(RuntimeError(text)) == (
        "s3://b/d/0.log (read): AWS Error SLOW_DOWN (still failing after 10 tries in 97 s)")
    assert retry.unavailable_cause(ValueError("a bug")) is None
