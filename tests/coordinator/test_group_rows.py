"""`decoded.group_rows` on a real broker's logs: each row the loaders read is the decoded row as Arrow gives it, with
the columns its kind of record fills (an offset commit's: its kind and group id), and a classic member's raw
consumer-protocol bytes left out; and `groups.record_json` of such rows, or of a decoded table's."""
from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipelines.coordinator.decoded import UNREAD_COLUMNS, group_rows
from pipelines.coordinator.groups import MEMBER_BYTES, record_json
from pipelines.coordinator.loader import SparseRow
from pipelines.decoding.columnar import decode_segment_to_arrow
from schemas.decoded import KIND_OFFSET_COMMIT
from tests.depth import cases


def _decoded(data) -> pa.Table:
    batches = [b for d in sorted(data.glob("__consumer_offsets-*"))
               for f in sorted(d.glob("*.log"))
               for b in decode_segment_to_arrow(f, offsets_partition=int(d.name.rsplit("-", 1)[1]))]
    return pa.Table.from_batches(batches)


@pytest.mark.shared
@pytest.mark.parametrize("scenario", ["classic-basic", "kip848", "deletes"])
def test_group_rows_are_the_decoded_rows_the_loaders_read(brokerdata, scenario):
    table = _decoded(brokerdata / scenario / "data")
    rng = np.random.default_rng(7)
    keep = rng.random(table.num_rows) < 0.7  # any rows, in log order: offset commits among them too
    got = group_rows(table, keep)
    want = [r for r, k in zip(table.to_pylist(), keep) if k]
    assert len(got) == len(want) and any(r.get("members") for r in got)
    kind_of = lambda r: (r["record_kind"], r["key_type"], r["is_tombstone"])  # noqa: E731
    filled: dict[tuple, set[str]] = {}
    for r in want:
        filled.setdefault(kind_of(r), set()).update(c for c, v in r.items() if v is not None)
    for g, w in zip(got, want):
        if w["record_kind"] == KIND_OFFSET_COMMIT:
            assert dict(g) == {c: w[c] for c in ("record_kind", "group_id") if w[c] is not None}
            continue
        assert set(g) == filled[kind_of(w)] - set(UNREAD_COLUMNS)
        for c, v in g.items():
            if c == "members" and v is not None:
                assert v == [{k: x for k, x in m.items() if k not in MEMBER_BYTES} for m in w[c]]
            else:
                assert v == w[c], c


def test_group_rows_of_no_rows_and_of_rows_without_members():
    table = pa.table({"record_kind": pa.array(["offset_commit"]), "key_type": pa.array([1], pa.int16()),
                      "is_tombstone": pa.array([False]), "group_id": pa.array(["g"]), "offset": pa.array([3])})
    assert group_rows(table, np.zeros(1, bool)) == []
    assert group_rows(table, np.ones(1, bool)) == [{"record_kind": "offset_commit", "group_id": "g"}]


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
