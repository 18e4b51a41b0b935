"""pipelines/times.py: every form a TIME takes gives the instant an independent clock (calendar.timegm) gives, and
anything else is refused with the forms named; intervals print as ISO-8601 durations java.time reads back, and a
duration given in either form (`1h30m`, `PT1H30M`) is read back to the millisecond."""
from __future__ import annotations

import calendar
import datetime as dt
import time

import pytest
from hypothesis import example, given, strategies as st

from pipelines.times import TimeFormatError, iso_duration, parse_duration_ms, parse_time_ms

INSTANTS = st.datetimes(min_value=dt.datetime(1974, 1, 1), max_value=dt.datetime(9999, 12, 30),
                        timezones=st.just(dt.timezone.utc)).map(lambda d: d.replace(microsecond=d.microsecond // 1000 * 1000))
OFFSETS = st.integers(min_value=-14 * 60, max_value=14 * 60).map(lambda m: dt.timezone(dt.timedelta(minutes=m)))


def epoch_ms(d: dt.datetime) -> int:
    return calendar.timegm(d.utctimetuple()) * 1000 + d.microsecond // 1000


@given(INSTANTS, OFFSETS)
@example(dt.datetime(6326, 1, 1, 0, 0, 0, 166000, tzinfo=dt.timezone.utc), dt.timezone.utc)  # a float lost its ms
def test_every_form_of_an_instant_is_the_same_epoch_ms(instant, zone):
    want = epoch_ms(instant)
    local = instant.astimezone(zone)
    assert parse_time_ms(str(want), what="--as-of") == want  # epoch milliseconds
    assert parse_time_ms(instant.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z", what="--as-of") == want
    assert parse_time_ms(local.isoformat(), what="--as-of") == want  # any zone offset
    assert parse_time_ms(instant.replace(tzinfo=None).isoformat(), what="--as-of") == want  # no zone: UTC
    assert parse_time_ms(f"  {want}\n", what="--as-of") == want


def test_the_forms_kafka_and_the_broker_scenarios_use():
    # timeline.tsv of brokerdata/transactions: `1795294219087	2026-11-21T20:50:19.087Z`
    assert parse_time_ms("1795294219087", what="t") == parse_time_ms("2026-11-21T20:50:19.087Z", what="t")
    assert parse_time_ms("2026-11-21T21:50:19.087+01:00", what="t") == 1795294219087
    assert parse_time_ms("2026-11-21 20:50:19.087", what="t") == 1795294219087
    assert parse_time_ms("2026-11-21t20:50:19.087z", what="t") == 1795294219087  # RFC 3339 allows lower case
    assert parse_time_ms("2026-11-21", what="t") == parse_time_ms("20261121", what="t") == 1795219200000
    before = time.time() * 1000
    assert before - 1 <= parse_time_ms("now", what="t") <= time.time() * 1000 + 1


@pytest.mark.parametrize("text, needle", [
    ("yesterday", "'yesterday' is not an ISO-8601 time"),
    ("", "'' is not an ISO-8601 time"),
    ("-1795294219087", "is not an ISO-8601 time"),
    ("1795294219", "has too few digits for epoch milliseconds (epoch seconds? append 000)"),
    ("1795294219087000", "past year 9999 as epoch milliseconds (micro- or nanoseconds?)"),
    ("2026-13-01T00:00:00Z", "is not an ISO-8601 time"),
    ("2026-11-21T20:50:19Z garbage", "is not an ISO-8601 time"),
    ("0001-01-01T00:00:00+01:00", "is outside years 1 to 9999 in UTC"),  # year 0 in UTC
    ("9999-12-31T23:59:59-01:00", "is outside years 1 to 9999 in UTC"),  # year 10000 in UTC
])
def test_anything_else_is_refused_naming_the_option_and_the_forms(text, needle):
    with pytest.raises(TimeFormatError) as e:
        parse_time_ms(text, what="--until-time")
    msg = str(e.value)
    assert msg.startswith("--until-time: ") and needle in msg and "epoch milliseconds (1795294320000)" in msg
    assert "\n" not in msg


@given(st.integers(-400, 400), st.integers(-400, 400), st.integers(-(10 ** 15), 10 ** 15))
def test_an_interval_prints_as_the_iso_duration_java_time_reads(months, days, nanos):
    """Read back by the ISO-8601 grammar (PnYnMnDTnHnMnS, each part optionally signed, a leading sign for the
    whole): the parts it gives are the interval's."""
    import re

    text = iso_duration(months, days, nanos)
    m = re.fullmatch(r"(-)?P(?:(-?\d+)Y)?(?:(-?\d+)M)?(?:(-?\d+)D)?(?:T(?:(-?\d+)H)?(?:(-?\d+)M)?(?:(-?\d+(?:\.\d+)?)S)?)?",
                     text)
    assert m and text not in ("P", "PT") and not text.endswith("T"), text
    sign = -1 if m[1] else 1
    y, mo, d, h, mi = (int(m[i] or 0) for i in range(2, 7))
    s = m[7] or "0"
    whole, _, frac = s.partition(".")
    secs_ns = int(whole) * 10 ** 9 + (-1 if whole.startswith("-") else 1) * int((frac + "0" * 9)[:9])
    assert sign * (y * 12 + mo) == months and sign * d == days
    assert sign * ((h * 3600 + mi * 60) * 10 ** 9 + secs_ns) == nanos


def test_interval_examples():
    assert iso_duration(0, 0, 8_155 * 10 ** 9) == "PT2H15M55S"  # the `sql` output once printed [0, 0, 8155000000000]
    assert iso_duration(0, 0, 0) == "PT0S"
    assert iso_duration(0, 0, 5_000_000) == "PT0.005S"
    assert iso_duration(14, 3, 0) == "P1Y2M3D"
    assert iso_duration(0, 0, -90 * 10 ** 9) == "-PT1M30S"


@pytest.mark.parametrize("text,ms", [
    ("2h", 7_200_000), ("90m", 5_400_000), ("3600s", 3_600_000), ("3600", 3_600_000), ("1h30m", 5_400_000),
    ("250ms", 250), ("1d", 86_400_000), ("2H", 7_200_000), ("PT2H", 7_200_000), ("P1DT2H", 93_600_000),
    ("PT0.5S", 500), ("pt1h30m", 5_400_000), ("0", 0),
])
def test_a_duration_as_people_write_it_or_as_iso_8601(text, ms):
    assert parse_duration_ms(text, what="--duration") == ms


@given(st.integers(0, 10 ** 12))
def test_a_printed_duration_reads_back(ms):
    assert parse_duration_ms(iso_duration(nanoseconds=ms * 1_000_000), what="--duration") == ms


@pytest.mark.parametrize("text", ["", "h", "2x", "1.5h", "2 h", "-5", "P", "PT", "P2M", "PT1.2345S", "+45m"])
def test_anything_else_is_not_a_duration(text):
    with pytest.raises(TimeFormatError) as e:
        parse_duration_ms(text, what="--duration")
    assert str(e.value).startswith("--duration: ") and "2h, 90m" in str(e.value) and "\n" not in str(e.value)
