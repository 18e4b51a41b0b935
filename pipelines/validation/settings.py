"""The validation settings, read apart from the runner: a rebuild checks them before Spark starts, without the
seconds great-expectations takes to import."""
from __future__ import annotations

from pipelines.config import ConfigError, Settings, not_whole
from pipelines.coordinator.options import DEFAULT_SEMANTICS

POLICIES = ("fail", "warn")
PANDAS_MAX_ROWS = 2_000_000  # validation.pandas_max_rows when unset


#: A broker clock ahead by more than this is no skew; past it the checks' bound would leave the years a time holds
_SKEW_MAX_MINUTES = 10 * 525_600


def validation_settings(settings: Settings) -> tuple[str, float, str]:
    """(policy, timestamp_skew_minutes, semantics) from `validation:` and `rebuild:`; a bad value is a usage error."""
    v = settings.section("validation")
    policy = str(v.get("policy", "fail")).lower()
    if policy not in POLICIES:
        raise ConfigError(f"validation.policy must be one of {', '.join(POLICIES)}, got {policy!r}")
    try:
        skew = float(v.get("timestamp_skew_minutes", 60))
    except (TypeError, ValueError):
        raise ConfigError(f"validation.timestamp_skew_minutes must be a number, got {v.get('timestamp_skew_minutes')!r}") from None
    if not 0 <= skew <= _SKEW_MAX_MINUTES:  # NaN fails the comparison too
        raise ConfigError(f"validation.timestamp_skew_minutes must be 0 to {_SKEW_MAX_MINUTES} (ten years), "
                          f"not {skew}")
    semantics = str(settings.section("rebuild").get("semantics", DEFAULT_SEMANTICS))
    return policy, skew, semantics


def pandas_max_rows(settings: Settings) -> int:
    """`validation.pandas_max_rows`: tables up to this many rows validate on pandas (0: always Spark)."""
    value = settings.section("validation").get("pandas_max_rows", PANDAS_MAX_ROWS)
    try:
        if not_whole(value):
            raise ValueError
        n = int(PANDAS_MAX_ROWS if value is None else value)
    except (TypeError, ValueError):
        raise ConfigError(f"validation.pandas_max_rows must be a whole number, got {value!r}") from None
    if n < 0:
        raise ConfigError("validation.pandas_max_rows must be >= 0")
    return n


def max_unread_bytes(settings: Settings) -> int | None:
    """`validation.max_unread_bytes`: the unread bytes per offsets partition a run tolerates (null: not checked)."""
    value = settings.section("validation").get("max_unread_bytes")
    if value is None:
        return None
    try:
        if not_whole(value):
            raise ValueError
        n = int(value)
    except (TypeError, ValueError):
        raise ConfigError(f"validation.max_unread_bytes must be a whole number or null, got {value!r}") from None
    if n < 0:
        raise ConfigError("validation.max_unread_bytes must be >= 0")
    return n
