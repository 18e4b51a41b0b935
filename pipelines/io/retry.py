"""Retrying an object store's requests: which failures are transient, how long a run waits them out, and the one
error a run fails with when they outlast that (`StoreUnavailable`).

S3 answers a share of requests `503 SlowDown` when it throttles, and any store drops a connection or times out now
and then; AWS's guidance is to retry those with exponential backoff and jitter, within a bounded time. Every
client offsetlake uses retries its own requests with the policy here (`StoreRetry`, the `storage:` settings): the
AWS SDK under pyarrow, object_store under delta-rs and obstore, DuckDB's httpfs. What a client does not retry (a
GET whose body was cut mid-way, a listing's body, an answer a client took for final) is retried here, a whole
idempotent operation at a time (`attempts`, `call`): a read, a listing, a whole-object PUT, a delete. Delta commits
are retried by `io.delta.commit`, which first checks whether the failed attempt landed.

A refusal is never transient: access denied, bad credentials, no such bucket or key, a connection refused or a
host that does not resolve (an endpoint that is not there) are the user's to fix, and stay one line and exit 2.
"""
from __future__ import annotations

import datetime as _dt
import math
import random
import re
import time
from dataclasses import asdict, dataclass, fields
from typing import Callable, Iterator, TypeVar

T = TypeVar("T")


class StoreUnavailable(RuntimeError):
    """The object store kept failing transiently (throttling, 5xx, resets, timeouts) past the retry policy: the
    run fails as a run (exit 1, a `failed` runs row naming the stage and this cause), never as a user's mistake.
    Not an OSError nor a `storage.StorageError`: code that turns those into a quarantine row or a usage error
    lets it through."""


@dataclass(frozen=True)
class StoreRetry:
    """The `storage:` settings: how every store request is retried (see the README's settings table)."""

    attempts: int = 10  # tries of one request or operation, the first included
    first_backoff_seconds: float = 0.1  # the first wait; each next one up to twice as long, jittered
    max_backoff_seconds: float = 10.0
    total_seconds: float = 120.0  # no new try starts this long after the first
    request_timeout_seconds: float = 60.0  # a request with no answer for this long is a timeout (retried)
    connect_timeout_seconds: float = 10.0

    def __post_init__(self):
        if self.attempts < 1:
            raise ValueError("storage.retry_attempts must be at least 1")
        for f in fields(self):
            # not NaN (no comparison refuses it, and a sleep of it fails the retry it was for) nor infinite
            if f.name != "attempts" and not 0 < getattr(self, f.name) < math.inf:
                raise ValueError(f"storage.{_SETTING[f.name]} must be a finite number more than 0")
        if self.max_backoff_seconds < self.first_backoff_seconds:
            raise ValueError("storage.retry_max_backoff_seconds must be at least storage.retry_first_backoff_seconds")

    @classmethod
    def from_section(cls, section: dict | None) -> "StoreRetry":
        """From the `storage:` settings section (missing keys: the defaults); ValueError names a bad value."""
        values = {}
        for f in fields(cls):
            raw = (section or {}).get(_SETTING[f.name])
            if raw is None:
                continue
            try:
                values[f.name] = int(raw) if f.name == "attempts" else float(raw)
            except (TypeError, ValueError):
                raise ValueError(f"storage.{_SETTING[f.name]} must be a number, not {raw!r}") from None
        return cls(**values)

    def to_section(self) -> dict:
        return {_SETTING[k]: v for k, v in asdict(self).items()}

    def backoff(self, retry: int, rng=None) -> float:
        """The wait before retry number `retry` (1 = the second try): "full jitter", a uniform draw below the
        exponential bound, so many tasks throttled at once do not come back at once (`rng`: a `random.Random`)."""
        bound = min(self.max_backoff_seconds, self.first_backoff_seconds * 2 ** (retry - 1))
        return (rng or random).uniform(0, bound)

    # ------------------------------------------------------------------ each client's own retry settings
    def object_store_options(self) -> dict[str, str]:
        """delta-rs `storage_options` keys of object_store's retry and client settings."""
        return {"max_retries": str(self.attempts - 1), "retry_timeout": _duration(self.total_seconds),
                "backoff_config.init_backoff": _duration(self.first_backoff_seconds),
                "backoff_config.max_backoff": _duration(self.max_backoff_seconds),
                "backoff_config.base": "2",
                "timeout": _duration(self.request_timeout_seconds),
                "connect_timeout": _duration(self.connect_timeout_seconds)}

    def obstore_config(self) -> tuple[dict, dict]:
        """obstore's `retry_config` and the timeouts of its `client_options`."""
        def td(seconds: float) -> _dt.timedelta:
            return _dt.timedelta(seconds=seconds)

        retry = {"max_retries": self.attempts - 1, "retry_timeout": td(self.total_seconds),
                 "backoff": {"init_backoff": td(self.first_backoff_seconds),
                             "max_backoff": td(self.max_backoff_seconds), "base": 2}}
        return retry, {"timeout": td(self.request_timeout_seconds), "connect_timeout": td(self.connect_timeout_seconds)}

    def duckdb_settings(self) -> list[str]:
        """DuckDB httpfs' retry settings, as SET statements."""
        return [f"SET http_retries = {self.attempts - 1}",
                f"SET http_retry_wait_ms = {int(self.first_backoff_seconds * 1000)}",
                "SET http_retry_backoff = 2",
                f"SET http_timeout = {max(1, round(self.request_timeout_seconds))}"]  # seconds


_SETTING = {"attempts": "retry_attempts", "first_backoff_seconds": "retry_first_backoff_seconds",
            "max_backoff_seconds": "retry_max_backoff_seconds", "total_seconds": "retry_total_seconds",
            "request_timeout_seconds": "request_timeout_seconds",
            "connect_timeout_seconds": "connect_timeout_seconds"}


def _duration(seconds: float) -> str:
    """A duration as object_store parses it (humantime): whole milliseconds."""
    return f"{max(1, round(seconds * 1000))}ms"


# ---------------------------------------------------------------------------------------------------------------
# The policy of this process
# ---------------------------------------------------------------------------------------------------------------
_policy: StoreRetry | None = None


def configure(policy: StoreRetry) -> None:
    """Set the policy of this process (the edge does, from the settings; Spark's tasks from the `storage:` section
    the session hands them, `pipelines.session`)."""
    global _policy
    _policy = policy


def policy() -> StoreRetry:
    """The policy of this process: as configured, else the one the session handed a task, else the defaults."""
    global _policy
    if _policy is None:
        # imported here, not at module level: pipelines.config loads yaml, ~0.02 s of import (python -X importtime)
        from pipelines.config import storage_section_from_env

        try:
            _policy = StoreRetry.from_section(storage_section_from_env())
        except ValueError:
            _policy = StoreRetry()
    return _policy


# ---------------------------------------------------------------------------------------------------------------
# What is transient
# ---------------------------------------------------------------------------------------------------------------
# A refusal the user must fix: checked first, so a message naming both (a 403 after retries) is a refusal.
_REFUSED = re.compile(
    r"AccessDenied|ACCESS_DENIED|Access Denied|InvalidAccessKeyId|INVALID_ACCESS_KEY_ID|SignatureDoesNotMatch|"
    r"SIGNATURE_DOES_NOT_MATCH|ExpiredToken|InvalidToken|NoSuchBucket|NO_SUCH_BUCKET|NoSuchKey|NO_SUCH_KEY|"
    r"RESOURCE_NOT_FOUND|status 40[34]\b|HTTP status 40[34]|\b40[34] (Forbidden|Not Found)\b|"
    r"Connection refused|connection refused|os error 111|Could not resolve|could not resolve|"
    r"Could not connect to server|Couldn't connect|curlCode: [67]\b|"
    r"Name or service not known|dns error|No space left on device|os error 28")
# Throttling, a server error, a connection dropped or timed out: as the AWS SDKs and object_store retry them.
_TRANSIENT = re.compile(
    r"SlowDown|SLOW_DOWN|Throttl|THROTTL|TooManyRequests|RequestLimitExceeded|"
    r"ServiceUnavailable|SERVICE_UNAVAILABLE|Service Unavailable|InternalError|INTERNAL_FAILURE|"
    r"Internal Server Error|Bad Gateway|Gateway Timeout|RequestTimeout|REQUEST_TIMEOUT|"
    r"HTTP status 5\d\d|status(?: code)?:? 5\d\d\b|\b5\d\d (Service|Internal|Bad|Gateway|Slow)|"
    r"NETWORK_CONNECTION|[Cc]onnection reset|reset by peer|os error 104|[Bb]roken pipe|os error 32|"
    r"[Tt]imed? ?out|Timeout was reached|deadline has elapsed|error reading a body|error sending request|"
    r"body error|connection closed before message completed|Failed to flush response stream|"
    r"partial file|Empty reply from server|unexpected EOF|IncompleteRead|error decoding response body|"
    r"curlCode: (18|28|52|55|56)\b")


def transient(exc: BaseException) -> bool:
    """Whether `exc` (or an error it wraps) is a failure worth retrying: throttling, a 5xx, a reset or a timeout."""
    for e in causes(exc):
        if isinstance(e, StoreUnavailable):
            return True
        if isinstance(e, (ConnectionRefusedError, FileNotFoundError, PermissionError)):
            return False
        if isinstance(e, (ConnectionError, TimeoutError)):
            return True
        text = str(e)
        if _REFUSED.search(text):
            return False
        if _TRANSIENT.search(text):
            return True
    return False


def one_line(exc: BaseException) -> str:
    """The cause on one line, at most 300 characters (the SDKs' messages span several, delta-rs' nest)."""
    text = " ".join(plain(str(exc)).split())
    return text[:300] + ("…" if len(text) > 300 else "")


# delta-rs colours the parts of its messages (ANSI escapes) and marks each nested cause with a coloured arrow
_COLOUR = re.compile(r"\x1b\[[0-9;]*m")


def plain(text: str) -> str:
    """A dependency's message without its colours and its causes' arrows: words for a log line or a terminal. A
    message without colours (Python's own, a path that holds an arrow) is left as it is."""
    if "\x1b[" not in text:
        return text
    return _CAUSE.sub(": ", _COLOUR.sub("", text))


_CAUSE = re.compile(r"\s*↳\s*")


# ---------------------------------------------------------------------------------------------------------------
# Retrying
# ---------------------------------------------------------------------------------------------------------------
class Attempt:
    """One try of `attempts`: a context whose transient failure is kept for the next try instead of raised."""

    def __init__(self, state: dict):
        self._state = state

    def __enter__(self) -> "Attempt":
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc is None:
            self._state["done"] = True
            return False
        if isinstance(exc, Exception) and transient(exc):
            self._state["last"] = exc
            return True
        return False


def attempts(what: str, retry: StoreRetry | None = None, *, sleep: Callable[[float], None] = time.sleep
             ) -> Iterator[Attempt]:
    """Tries of one idempotent operation on the store, `what` naming it (a URI), until one succeeds:

        for attempt in retry.attempts(f"read {uri}"):
            with attempt:
                data = …

    A transient failure is retried after a jittered backoff while tries and time are left; anything else
    propagates at once. When they run out, StoreUnavailable names `what`, the last cause, the tries and the time."""
    retry = retry or policy()
    state: dict = {"done": False, "last": None}
    started = time.monotonic()
    tries = 0
    while True:
        tries += 1
        yield Attempt(state)
        if state["done"]:
            return
        if state["last"] is None:  # the body left the `with` without finishing or failing: a `break`
            return
        elapsed = time.monotonic() - started
        wait = retry.backoff(tries)
        if tries >= retry.attempts or elapsed + wait > retry.total_seconds:
            last = state["last"]
            cause = str(last) if isinstance(last, StoreUnavailable) else one_line(last)
            raise StoreUnavailable(f"{what}: {cause} (still failing after {tries} tries in {elapsed:.0f} s)") \
                from last
        state["last"] = None
        sleep(wait)


def call(fn: Callable[[], T], what: str, retry: StoreRetry | None = None) -> T:
    """`fn()`, retried as `attempts` retries (for an operation that can simply be run again)."""
    for attempt in attempts(what, retry):
        with attempt:
            return fn()
    raise AssertionError("unreachable")  # pragma: no cover


def unavailable_cause(exc: BaseException) -> str | None:
    """The store's fault behind a run's error, on one line, or None when it was not one: a StoreUnavailable (here
    or in a Spark task, whose error reaches the driver as text only) or a transient error no retry caught."""
    for e in causes(exc):
        if isinstance(e, StoreUnavailable):
            return str(e)
        found = re.search(r"StoreUnavailable: (.*)", str(e))
        if found is not None:
            return found.group(1).strip()
    return one_line(exc) if transient(exc) else None


def causes(exc: BaseException | None, depth: int = 10) -> Iterator[BaseException]:
    """`exc`, then what it was raised from or during, and so on: the first `depth` of them (a chain can loop)."""
    while exc is not None and depth > 0:
        yield exc
        exc, depth = exc.__cause__ or exc.__context__, depth - 1
