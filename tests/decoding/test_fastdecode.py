"""The C extension's building blocks against independent implementations: `Columns` against `pyarrow.array`
over the same Python values, `crc32c` (both the SSE4.2 and the table code) against the `crc32c` package.
The decoding itself is differential-tested row for row in test_columnar.py."""
from __future__ import annotations

import crc32c as crc32c_package
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipelines.decoding import columnar

_c = pytest.importorskip("pipelines.decoding._fastdecode") if columnar.HAVE_C_EXTENSION else None
pytestmark = pytest.mark.skipif(_c is None, reason="_fastdecode not built")

TYPES = {"q": pa.int64(), "i": pa.int32(), "h": pa.int16(), "b": pa.int8(), "?": pa.bool_(), "s": pa.string()}
VALUES = {
    "q": st.integers(-(1 << 63), (1 << 63) - 1),
    "i": st.integers(-(1 << 31), (1 << 31) - 1),
    "h": st.integers(-(1 << 15), (1 << 15) - 1),
    "b": st.integers(-128, 127),
    "?": st.booleans(),
    "s": st.text(),  # any code points, multi-byte utf-8 included
}


@st.composite
def tables(draw):
    codes = draw(st.text(alphabet="qih b?s".replace(" ", ""), min_size=1, max_size=8))
    rows = draw(st.lists(st.tuples(*(st.none() | VALUES[c] for c in codes)), max_size=3000))
    return codes, rows


def arrays(cols: columnar._CColumns) -> list[list]:
    return [a.to_pylist() for a in cols.arrays()]


@settings(max_examples=60, deadline=None)
@given(tables(), st.integers(0, 3000))
def test_columns_hold_what_pyarrow_holds(table, cut):
    codes, rows = table
    types = [TYPES[c] for c in codes]
    cols = columnar._CColumns(types)
    expected = [pa.array([r[j] for r in rows], t) for j, t in enumerate(types)]
    cols.extend(rows)
    assert len(cols) == len(rows)
    got = cols.arrays()
    for g, e in zip(got, expected):
        g.validate(full=True)
        assert g.equals(e)
        assert g.null_count == e.null_count
    # emptied by arrays(); then reused, and cut back with truncate
    assert len(cols) == 0
    cols.extend(rows)
    cols.c.truncate(min(cut, len(rows)))
    kept = rows[:cut]
    for g, t, j in zip(cols.arrays(), types, range(len(types))):
        g.validate(full=True)
        assert g.equals(pa.array([r[j] for r in kept], t))
    # the arrays a take handed over are theirs: the columns written since left them as they were
    for g, e in zip(got, expected):
        assert g.equals(e)


def test_columns_refuse_values_that_do_not_fit_and_keep_what_they_had():
    cols = columnar._CColumns([pa.int16(), pa.string()])
    cols.append((1, "a"))
    for bad in [(1 << 15, "x"), ("1", "x"), (1, b"x"), (1, "x", 3), (True, 1)]:
        with pytest.raises((OverflowError, TypeError)):
            cols.append(bad)
    with pytest.raises(TypeError):
        cols.extend([(2, "b"), (3, 4)])  # the whole call is undone
    assert [a.to_pylist() for a in cols.arrays()] == [[1], ["a"]]


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=5000))
def test_crc32c_matches_the_crc32c_package(data):
    assert _c.crc32c(data) == crc32c_package.crc32c(data)
    assert _c.crc32c(data, True) == crc32c_package.crc32c(data)
