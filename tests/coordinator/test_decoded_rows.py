"""The decoded rows as the loaders read them (`coordinator.decoded`): a nested column made into Python values."""
from __future__ import annotations

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from pipelines.coordinator.decoded import pylist
from schemas.decoded import DECODED_RECORD_SCHEMA
from tests.depth import cases

# every nested column the decoder fills: a classic group's members, KIP-848 assignments, topic metadata, ...
NESTED = [f for f in DECODED_RECORD_SCHEMA if pa.types.is_nested(f.type)]


def _value(kind: pa.DataType) -> st.SearchStrategy:
    """A value of `kind` (nullable at every level) as Python values, small enough to repeat."""
    if pa.types.is_struct(kind):
        return st.one_of(st.none(), st.fixed_dictionaries({f.name: _value(f.type) for f in kind}))
    if pa.types.is_list(kind):
        return st.one_of(st.none(), st.lists(_value(kind.value_type), max_size=3))
    if pa.types.is_string(kind):
        return st.one_of(st.none(), st.sampled_from(["", "t", "topic-ü"]))
    if pa.types.is_binary(kind):
        return st.one_of(st.none(), st.binary(max_size=3))
    if pa.types.is_boolean(kind):
        return st.one_of(st.none(), st.booleans())
    if pa.types.is_integer(kind):
        bits = kind.bit_width
        return st.one_of(st.none(), st.integers(-(1 << (bits - 1)), (1 << (bits - 1)) - 1))
    raise AssertionError(f"no values drawn of {kind}")


@settings(max_examples=cases(deep=400, quick=80), deadline=None)
@given(data=st.data())
def test_a_nested_columns_python_values_are_arrows_own(data):
    """Any nested column of the decoded schema, sliced anywhere and in chunks, gives what `to_pylist` gives."""
    field = data.draw(st.sampled_from(NESTED))
    values = data.draw(st.lists(_value(field.type), max_size=12))
    column = pa.array(values, field.type)
    start = data.draw(st.integers(0, len(values)))
    cut = column.slice(start, data.draw(st.integers(0, len(values) - start)))
    assert pylist(cut) == cut.to_pylist()
    chunked = pa.chunked_array([column.slice(0, start), column.slice(start)], field.type)
    assert pylist(chunked) == chunked.to_pylist() == values
