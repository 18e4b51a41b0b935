"""`changes` and `restore-plan` read a history whose rows come as its files hold them: each file one offsets
partition's records in log order, the files in any order, and some files holding records that fall inside another's
range (transactional rows settled later, an incremental run's appends). Whatever the arrangement, the orders they
move runs by equal a plain sort: by (key, offsets partition, record offset) for `changes`, by log position (ties in
row order) for `restore-plan`."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from pipelines.serving.changes import _key_then_log_order
from pipelines.serving.restore_plan import _log_order
from tests.depth import cases


@st.composite
def histories(draw):
    """Rows of a few groups, each group in one offsets partition (or, sometimes, spread over two: data not from one
    cluster), cut into runs that are each in log order, the runs shuffled."""
    n_groups = draw(st.integers(1, 6))
    spread = draw(st.booleans())
    rows = []
    for g in range(n_groups):
        op = draw(st.integers(0, 3))
        for ro in draw(st.lists(st.integers(0, 60), min_size=1, max_size=25, unique=True)):
            p = draw(st.integers(0, 3)) if spread else op
            rows.append((g, g * 4 + draw(st.integers(0, 3)), p, ro))
    rows.sort(key=lambda r: (r[2], r[3]))
    cuts = sorted(set(draw(st.lists(st.integers(1, max(1, len(rows) - 1)), max_size=6))))
    runs = [rows[a:b] for a, b in zip([0, *cuts], [*cuts, len(rows)])]
    order = draw(st.permutations(range(len(runs))))
    arranged = [r for i in order for r in runs[i]]
    group, key, op, ro = (np.array(c, dtype=np.int64) for c in zip(*arranged))
    return key, group, op.astype(np.int32), ro


@settings(max_examples=cases(2000, 300), deadline=None)
@given(histories())
def test_each_key_in_log_order(history):
    key, group, op, ro = history
    got = _key_then_log_order(key, group, op, ro)
    assert np.array_equal(got, np.lexsort((ro, op, key)))


def test_uncounted_rows_keyed_minus_one_come_first():
    key = np.array([5, -1, 5, -1, 3], dtype=np.int64)
    group = np.array([1, 1, 1, 1, 0], dtype=np.int64)
    op = np.array([0, 0, 0, 0, 1], dtype=np.int32)
    ro = np.array([4, 1, 2, 3, 0], dtype=np.int64)  # key 5's rows arrive out of log order
    assert _key_then_log_order(key, group, op, ro).tolist() == [1, 3, 4, 2, 0]


@settings(max_examples=cases(2000, 300), deadline=None)
@given(histories(), st.booleans())
def test_log_order_is_a_stable_sort_by_position(history, duplicated):
    _, _, op, ro = history
    if duplicated:  # the same positions twice: ties keep row order
        op, ro = np.concatenate((op, op[::-1])), np.concatenate((ro, ro[::-1]))
    expected = np.lexsort((ro, op))
    assert np.array_equal(_log_order(op, ro), expected)
