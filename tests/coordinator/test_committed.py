"""A shard's committed offsets (`CommittedOffsets`) against a dict: what `lookup` finds and what `apply` leaves,
window after window, in stores of one chunk or of many (a chunk per window that put offsets)."""
from __future__ import annotations

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from pipelines.coordinator.committed import KEY, SCHEMA, CommittedOffsets
from tests.depth import cases

_KEYS = st.tuples(st.sampled_from(["g1", "g2", "g3"]), st.sampled_from(["t", "u"]), st.integers(0, 3))
_WINDOW = st.tuples(st.dictionaries(_KEYS, st.integers(0, 1000), max_size=8), st.sets(_KEYS, max_size=4),
                    st.sets(_KEYS, max_size=6))


def _rows(keys, offsets=None) -> pa.Table:
    keys = sorted(keys)
    columns = {"group_id": [k[0] for k in keys], "topic": [k[1] for k in keys], "partition": [k[2] for k in keys]}
    if offsets is None:
        return pa.table(columns).cast(pa.schema(SCHEMA.field(k) for k in KEY))
    return pa.table({**columns, "committed_offset": [offsets[k] for k in keys]}).cast(
        pa.schema([*(SCHEMA.field(k) for k in KEY), SCHEMA.field("committed_offset")]))


def _puts(offsets: dict) -> pa.Table:
    t = _rows(offsets, offsets)
    return pa.table({f.name: t.column(f.name) if f.name in t.column_names else pa.nulls(t.num_rows, f.type)
                     for f in SCHEMA}, schema=SCHEMA)


@given(windows=st.lists(_WINDOW, max_size=12), combine=st.booleans())
@settings(max_examples=cases(deep=500, quick=100), deadline=None, database=None)
def test_a_store_holds_what_its_windows_put_and_finds_what_it_holds(windows, combine):
    store, model = CommittedOffsets(), {}
    for puts, deletes, asked in windows:
        store.apply(_puts(puts), _rows(deletes - set(puts)))
        for k in deletes - set(puts):
            model.pop(k, None)
        model.update(puts)
        if combine:
            store = CommittedOffsets(store.table().combine_chunks())
        held = store.table()
        assert sorted(zip(*(held.column(c).to_pylist() for c in [*KEY, "committed_offset"]))) == \
            sorted((*k, v) for k, v in model.items())
        keys = sorted(asked)
        at, rows = store.lookup(_rows(keys))
        assert [keys[i] for i in at.tolist()] == [k for k in keys if k in model]
        assert list(zip(*(rows.column(c).to_pylist() for c in [*KEY, "committed_offset"]))) == \
            [(*keys[i], model[keys[i]]) for i in at.tolist()]
