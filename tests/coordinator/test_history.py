"""The history (`offset_commits`) a shard builds holds each record once, whatever the input held twice."""
from __future__ import annotations

import pyarrow as pa
import pytest

from pipelines.coordinator.options import ReplayOptions
from pipelines.coordinator.shard import replay_rows
from pipelines.coordinator.tables import once_per_record
from schemas.tables import TABLES
from tests.coordinator.test_replay_scenarios import SCENARIOS, _build


def history_row(part, offset, outcome, metadata="m"):
    return dict(offsets_partition=part, record_offset=offset, group_id="g", topic="t", partition=0,
                committed_offset=1, commit_timestamp=None, is_tombstone=False, producer_id=-1, txn_outcome=outcome,
                leader_epoch=None, metadata=metadata, record_timestamp=None, snapshot_id="s")


def test_the_most_decided_copy_is_kept_then_the_smallest():
    rows = [history_row(0, 1, None), history_row(0, 2, None, "b"), history_row(0, 2, "pending", "z"),
            history_row(0, 2, None, "a"), history_row(0, 3, None, None), history_row(0, 3, None, "x"),
            history_row(1, 3, "committed"), history_row(1, 3, "aborted"), history_row(1, 4, None)]
    got = once_per_record(pa.Table.from_pylist(rows, schema=TABLES["offset_commits"])).to_pylist()
    assert [(r["offsets_partition"], r["record_offset"], r["txn_outcome"], r["metadata"]) for r in got] == [
        (0, 1, None, "m"), (0, 2, "pending", "z"), (0, 3, None, "x"), (1, 3, "aborted", "m"), (1, 4, None, "m")]


@pytest.mark.parametrize("semantics", ["legacy", "modern"])
@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_a_log_read_twice_has_the_history_of_the_log_read_once(name, semantics):
    log = _build(name)
    opts = ReplayOptions(semantics=semantics, snapshot_id="s1", load_time_ms=1_800_000_000_000)
    once = replay_rows(log.rows, opts)["offset_commits"]
    twice = replay_rows(log.rows + log.rows, opts)["offset_commits"]
    assert len({(r["offsets_partition"], r["record_offset"]) for r in twice}) == len(twice)
    assert twice == once
