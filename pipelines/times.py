"""Times as users give them and as the project prints them: the one parser of a TIME (every option or parameter
taking a time goes through `parse_time_ms`), the one parser of a duration (`parse_duration_ms`), and the ISO-8601
forms printed for instants and durations."""
from __future__ import annotations

import datetime as dt
import re
import time

EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)

# Epoch milliseconds as Kafka's tools print and take them (kafka-dump-log's CreateTime, kafka-get-offsets --time,
# timeline.tsv): a run of digits. 11 to 15 digits spans 1973-03 to year 9999; fewer is most likely epoch seconds,
# more micro- or nanoseconds, both refused rather than read as a wrong instant. Eight digits are ISO-8601's basic
# date (YYYYMMDD), never a plausible epoch-ms value.
_EPOCH_MS = re.compile(r"\d+")
_MIN_MS_DIGITS, _MAX_MS_DIGITS = 11, 15
_MAX_MS = 253402300799999  # 9999-12-31T23:59:59.999Z, the last instant datetime can hold
#: The instants a table, a run record and ISO-8601 text hold: years 1 to 9999 (Python's datetime and Spark's
#: timestamps; Arrow's microseconds end in year 294247). A log's epoch milliseconds past them are read as these ends.
MIN_TIME_MS, MAX_TIME_MS = -62135596800000, _MAX_MS


def within_time_ms(ms: int | None) -> int | None:
    """Epoch ms as the nearest instant years 1 to 9999 hold (None stays None)."""
    return None if ms is None else min(max(ms, MIN_TIME_MS), MAX_TIME_MS)

TIME_FORMS = "an ISO-8601 time (2026-11-21T20:52:00Z; UTC when no zone), epoch milliseconds (1795294320000) or 'now'"


class TimeFormatError(ValueError):
    """A TIME that is none of the accepted forms; the message names the option and the forms."""


def parse_time_ms(text: str, *, what: str) -> int:
    """A TIME -> epoch milliseconds: ISO-8601 with or without a zone (UTC when none), a date alone (its
    midnight UTC), epoch milliseconds (a run of 11-15 digits), or `now`. Raises TimeFormatError naming `what`."""
    s = str(text).strip()
    if s == "now":
        return int(time.time() * 1000)
    if _EPOCH_MS.fullmatch(s) and len(s) != 8:  # eight digits: an ISO-8601 basic date (20261121)
        if len(s) < _MIN_MS_DIGITS:
            raise TimeFormatError(f"{what}: {text!r} has too few digits for epoch milliseconds (epoch seconds? "
                                  f"append 000); give {TIME_FORMS}")
        if len(s) > _MAX_MS_DIGITS or int(s) > _MAX_MS:
            raise TimeFormatError(f"{what}: {text!r} is past year 9999 as epoch milliseconds (micro- or "
                                  f"nanoseconds?); give {TIME_FORMS}")
        return int(s)
    try:
        t = dt.datetime.fromisoformat(s.upper())  # RFC 3339's lower-case `t` and `z` too
    except ValueError:
        raise TimeFormatError(f"{what}: {text!r} is not {TIME_FORMS}") from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.timezone.utc)
    # integer arithmetic: a float of seconds loses the last millisecond of far dates (year 6326: .166 -> 165)
    ms = (t - EPOCH) // dt.timedelta(milliseconds=1)
    # a zone can carry a date past years 1 to 9999 (0001-01-01T00:00+01:00 is in year 0 in UTC): no datetime,
    # table or ISO-8601 text of ours holds that instant, and each reader of it failed on its own
    if not MIN_TIME_MS <= ms <= MAX_TIME_MS:
        raise TimeFormatError(f"{what}: {text!r} is outside years 1 to 9999 in UTC; give {TIME_FORMS}")
    return ms


# A duration as people write one (`2h`, `90m`, `1h30m`, `3600s`, `250ms`; a number alone is seconds) or as this
# project prints one (ISO-8601, `PT1H30M`, `PT0.5S`, what `iso_duration` writes); days are 24 h, no calendar.
_DURATION_UNITS_MS = {"d": 86_400_000, "h": 3_600_000, "m": 60_000, "s": 1000, "ms": 1}
_DURATION_SHORT = re.compile(r"(?:\d+(?:ms|[dhms]))+")
_DURATION_PART = re.compile(r"(\d+)(ms|[dhms])")
_DURATION_ISO = re.compile(r"P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d{1,3})?)S)?)?")
DURATION_FORMS = "a duration (2h, 90m, 1h30m, 3600s, 250ms; a number alone is seconds; or ISO-8601, PT1H30M)"


def parse_duration_ms(text: str, *, what: str) -> int:
    """A duration -> milliseconds (>= 0): `2h`, `90m`, `1h30m`, `3600s`, `250ms`, `1d`, a number of seconds
    (`3600`), or ISO-8601 (`PT2H`, `P1DT2H`, `PT0.5S`). Raises TimeFormatError naming `what`."""
    s = str(text).strip()
    if s.isdigit():
        return int(s) * 1000
    low = s.lower()
    if _DURATION_SHORT.fullmatch(low):
        return sum(int(n) * _DURATION_UNITS_MS[u] for n, u in _DURATION_PART.findall(low))
    m = _DURATION_ISO.fullmatch(s.upper())
    if m and s.upper() not in ("P", "PT") and not s.upper().endswith("T"):
        days, hours, minutes, seconds = m.groups()
        whole, _, frac = (seconds or "0").partition(".")
        return (int(days or 0) * 86_400_000 + int(hours or 0) * 3_600_000 + int(minutes or 0) * 60_000
                + int(whole) * 1000 + int(frac.ljust(3, "0")))
    raise TimeFormatError(f"{what}: {text!r} is not {DURATION_FORMS}")


def datetime_to_ms(t: dt.datetime) -> int:
    """Epoch milliseconds of `t` (naive: UTC, as the tables' timestamps are), in integers: past year 2106 a float of
    seconds loses the millisecond (.999 read as .998)."""
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.timezone.utc)
    return (t - EPOCH) // dt.timedelta(milliseconds=1)


def ms_to_iso(ms: int | None) -> str | None:
    if ms is None:
        return None
    return (EPOCH + dt.timedelta(milliseconds=ms)).isoformat(timespec="milliseconds")


def iso_duration(months: int = 0, days: int = 0, nanoseconds: int = 0) -> str:
    """An interval as ISO-8601 (`PT2H15M55S`, `P1Y2M3DT4H`, `PT0.5S`, `PT0S`), the form java.time and most
    languages parse. A negative interval is `-` before it; a part whose sign differs from the others carries
    its own sign (DuckDB intervals keep months, days and time apart, each with its sign, as java.time's do)."""
    if (months <= 0 and days <= 0 and nanoseconds <= 0) and (months or days or nanoseconds):
        return "-" + iso_duration(-months, -days, -nanoseconds)
    date = ""
    years, rest = divmod(abs(months), 12)
    sign = "-" if months < 0 else ""
    if years:
        date += f"{sign}{years}Y"
    if rest:
        date += f"{sign}{rest}M"
    if days:
        date += f"{days}D"
    clock = ""
    if nanoseconds:
        sign = "-" if nanoseconds < 0 else ""
        hours, rem = divmod(abs(nanoseconds), 3_600_000_000_000)
        minutes, rem = divmod(rem, 60_000_000_000)
        seconds, frac = divmod(rem, 1_000_000_000)
        if hours:
            clock += f"{sign}{hours}H"
        if minutes:
            clock += f"{sign}{minutes}M"
        if seconds or frac:
            clock += f"{sign}{seconds}" + (f".{frac:09d}".rstrip("0") if frac else "") + "S"
    if not date and not clock:
        return "PT0S"
    return "P" + date + ("T" + clock if clock else "")
