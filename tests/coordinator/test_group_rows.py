"""`decoded.group_rows` on a real broker's logs and on any Arrow layout: each row the loaders read is the decoded row as
Arrow gives it, with the columns its record sets (an offset commit's: its kind and group id), and a classic member's
raw consumer-protocol bytes left out, read by the C reader (`decoding/_python_rows.c`) and by the Python reference
alike; and `groups.record_json` of such rows, or of a decoded table's."""
from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipelines.coordinator.decoded import UNREAD_COLUMNS, group_rows
from pipelines.coordinator.groups import MEMBER_BYTES, record_json
from pipelines.coordinator.loader import SparseRow
from pipelines.decoding.columnar import decode_segment_to_arrow
from pipelines.decoding.native import fastdecode
from schemas.decoded import DECODED_RECORD_SCHEMA, KIND_OFFSET_COMMIT
from tests.depth import cases

READERS = [False] + ([True] if fastdecode is not None else [])


def _decoded(data) -> pa.Table:
    batches = [b for d in sorted(data.glob("__consumer_offsets-*"))
               for f in sorted(d.glob("*.log"))
               for b in decode_segment_to_arrow(f, offsets_partition=int(d.name.rsplit("-", 1)[1]))]
    return pa.Table.from_batches(batches)


def _as_loaders_read(row: dict) -> dict:
    """A decoded row (pyarrow's) as the loaders read it: its set columns, but where it sits and its raw bytes; an
    offset commit's kind and group id alone."""
    if row["record_kind"] == KIND_OFFSET_COMMIT:
        return {c: row[c] for c in ("record_kind", "group_id") if row[c] is not None}
    out = {c: v for c, v in row.items() if v is not None and c not in UNREAD_COLUMNS}
    if out.get("members"):
        out["members"] = [m and {k: x for k, x in m.items() if k not in MEMBER_BYTES} for m in out["members"]]
    return out


@pytest.mark.shared
@pytest.mark.parametrize("use_c", READERS)
@pytest.mark.parametrize("scenario", ["classic-basic", "kip848", "deletes"])
def test_group_rows_are_the_decoded_rows_the_loaders_read(brokerdata, scenario, use_c):
    table = _decoded(brokerdata / scenario / "data")
    rng = np.random.default_rng(7)
    keep = rng.random(table.num_rows) < 0.7  # any rows, in log order: offset commits among them too
    got = group_rows(table, keep, use_c=use_c)
    want = [_as_loaders_read(r) for r, k in zip(table.to_pylist(), keep) if k]
    assert any(r.get("members") or r.get("assigned_partitions") for r in got)  # a group's nested values
    assert all(type(r) is SparseRow for r in got)
    assert got == want
    assert [list(r) for r in got] == [list(r) for r in want]  # in the table's column order: `record_json` keeps it


def test_group_rows_of_no_rows_and_of_rows_without_members():
    table = pa.table({"record_kind": pa.array(["offset_commit"]), "key_type": pa.array([1], pa.int16()),
                      "is_tombstone": pa.array([False]), "group_id": pa.array(["g"]), "offset": pa.array([3])})
    for use_c in READERS:
        assert group_rows(table, np.zeros(1, bool), use_c=use_c) == []
        assert group_rows(table, np.ones(1, bool), use_c=use_c) == [{"record_kind": "offset_commit", "group_id": "g"}]


def _values(t: pa.DataType) -> st.SearchStrategy:
    """Any value of Arrow type `t` (None too), as pyarrow takes it from Python."""
    if pa.types.is_struct(t):
        value = st.fixed_dictionaries({f.name: _values(f.type) for f in t})
    elif pa.types.is_list(t):
        value = st.lists(_values(t.value_type), max_size=3)
    elif pa.types.is_string(t):
        # and a string of control characters, quotes, a backslash and a character outside the BMP
        value = st.text(max_size=4) | st.sampled_from(
            ["consumer", "range", "g\u00e9", "", "q\"\\\n\t\b\f\r\x00\x1f\x7f\U0001f600"])
    elif pa.types.is_binary(t):
        value = st.binary(max_size=4)
    elif pa.types.is_boolean(t):
        value = st.booleans()
    else:
        bits = t.bit_width
        value = st.integers(-(1 << (bits - 1)), (1 << (bits - 1)) - 1) | st.sampled_from([0, -1, 1])
    return st.none() | value


_ROW = st.fixed_dictionaries({f.name: _values(f.type) for f in DECODED_RECORD_SCHEMA
                              if f.name not in ("record_kind", "group_id")}).flatmap(
    lambda r: st.fixed_dictionaries({"record_kind": st.sampled_from([KIND_OFFSET_COMMIT, "group_metadata",
                                                                     "consumer_group", None]),
                                     "group_id": st.none() | st.sampled_from(["g", "h", ""])}).map(
        lambda k: {**r, **k}))


@pytest.mark.skipif(fastdecode is None, reason="_fastdecode not built")
@given(rows=st.lists(_ROW, min_size=1, max_size=12), data=st.data())
@settings(max_examples=cases(deep=400, quick=60), deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
def test_the_c_reader_gives_the_references_rows_of_any_layout(rows, data):
    """The C reader walks Arrow's buffers itself: over any values of the decoded schema (nulls at every level,
    empty and non-ASCII strings, every integer width's extremes), a table sliced and cut into chunks (each array
    with an offset of its own), it gives the reference's rows."""
    table = pa.Table.from_pylist(rows, schema=DECODED_RECORD_SCHEMA)
    start = data.draw(st.integers(0, len(rows) - 1))
    cuts = sorted(data.draw(st.lists(st.integers(start, len(rows)), max_size=3)))
    pieces = [table.slice(a, b - a) for a, b in zip([start, *cuts], [*cuts, len(rows)])]
    table = pa.concat_tables(pieces)
    keep = np.array(data.draw(st.lists(st.booleans(), min_size=table.num_rows, max_size=table.num_rows)), bool)
    got = group_rows(table, keep, use_c=True)
    want = group_rows(table, keep, use_c=False)
    assert got == want
    assert [list(r) for r in got] == [list(r) for r in want]
    assert want == [_as_loaders_read(r) for r, k in zip(table.to_pylist(), keep) if k]


@pytest.mark.skipif(fastdecode is None, reason="_fastdecode not built")
def test_the_c_reader_applies_every_arrays_own_offset():
    """A struct sliced (its children read at its offset and their own), and a list whose values are a slice of
    theirs: layouts the decoded schema's tables may not hold, read as Arrow reads them."""
    point = pa.struct([("a", pa.int32()), ("b", pa.string())])
    s = pa.array([{"a": 0, "b": "-"}, {"a": 1, "b": "x"}, {"a": 2, "b": None}, None, {"a": 4, "b": "yy"}], point)
    values = pa.StructArray.from_arrays([pa.array([9, 1, 2, 3], pa.int32()).slice(1),
                                         pa.array(["z", "p", None, "q"]).slice(1)], fields=list(point))
    lists = pa.ListArray.from_arrays(pa.array([0, 1, 1, 3, 3], pa.int32()), values, mask=pa.array(
        [False, False, False, True]))
    table = pa.table({"record_kind": pa.array(["group_metadata"] * 4), "s": s.slice(1), "l": lists})
    table = pa.concat_tables([table.slice(0, 1), table.slice(1)])
    keep = np.array([True, False, True, True])
    want = [{"record_kind": "group_metadata", "s": {"a": 1, "b": "x"}, "l": [{"a": 1, "b": "p"}]},
            {"record_kind": "group_metadata", "l": [{"a": 2, "b": None}, {"a": 3, "b": "q"}]},
            {"record_kind": "group_metadata", "s": {"a": 4, "b": "yy"}}]
    assert group_rows(table, keep, use_c=False) == want
    assert group_rows(table, keep, use_c=True) == want


@pytest.mark.skipif(fastdecode is None, reason="_fastdecode not built")
def test_the_c_reader_refuses_a_type_it_does_not_read():
    """A dictionary-encoded column's format is its indices' (`i`): read as such it would give numbers for names.
    The decoded schema holds none, and the C reader refuses one rather than guess."""
    table = pa.table({"record_kind": pa.array(["group_metadata"]).dictionary_encode()})
    with pytest.raises(TypeError, match="dictionary-encoded"):
        group_rows(table, np.ones(1, bool), use_c=True)
    assert group_rows(table, np.ones(1, bool), use_c=False) == [{"record_kind": "group_metadata"}]


_VALUES = st.none() | st.integers(-3, 3) | st.text(max_size=3) | st.lists(st.text(max_size=2), max_size=2)
_MEMBER = st.fixed_dictionaries({"member_id": st.text(max_size=3), "client_id": st.none() | st.text(max_size=2)},
                                 optional={"subscription": st.binary(max_size=2), "assignment": st.binary(max_size=2)})
_MEMBERS = st.lists(_MEMBER, max_size=2)


@given(row=st.dictionaries(st.sampled_from(["group_id", "offset", "leader", "protocol", "source", "codec", "magic"]),
                           _VALUES) | st.builds(lambda r, m: {**r, "members": m},
                                                st.dictionaries(st.sampled_from(["group_id", "offset"]), _VALUES),
                                                st.none() | _MEMBERS))
@settings(max_examples=cases(deep=500, quick=100), deadline=None, database=None)
def test_record_json_is_the_records_set_columns(row):
    """`record_json` of any row, the loaders' or a decoded table's: the columns that are set, in the row's order,
    but where the record sits and its raw bytes; a classic member's raw subscription and assignment bytes left out,
    its other fields (set or not) kept."""
    got = json.loads(record_json(SparseRow(row)))
    want = {k: v for k, v in row.items() if v is not None and k not in ("source", "codec", "magic")}
    if want.get("members"):
        want["members"] = [{k: v for k, v in m.items() if k not in MEMBER_BYTES} for m in want["members"]]
    assert got == want and list(got) == list(want)
