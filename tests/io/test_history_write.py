"""The history written from rows in this process, as a run replayed in the driver writes it: a full run, an
incremental one and a what-if one, none of them through Spark."""
from __future__ import annotations

import pytest

from pipelines.io.table_rows import ArrowRows
from pipelines.io.warehouse import HistoryWrite, Warehouse, WarehouseError

from .io_warehouse_data import offset_commit_rows
from .stats_data import arrow_table


def in_hand(records: list[tuple[int, int, str | None]]) -> ArrowRows:
    """(offsets partition, record offset, txn_outcome) records as a replay in this process gives its history."""
    return ArrowRows(arrow_table("offset_commits", offset_commit_rows(records)), clustered=True)


def history(wh: Warehouse) -> dict[tuple[int, int], tuple[str | None, str]]:
    return {(r["offsets_partition"], r["record_offset"]): (r["txn_outcome"], r["snapshot_id"])
            for r in wh.read_table("offset_commits").to_pylist()}


@pytest.fixture()
def no_spark(monkeypatch):
    """Rows in this process never go to Spark on their way into a history of a few rows."""
    def refused(self, spark):
        raise AssertionError("rows in this process were sent to Spark")

    monkeypatch.setattr(ArrowRows, "to_frame", refused)


def test_full_incremental_and_what_if_runs_in_this_process(tmp_path, no_spark):
    wh = Warehouse(tmp_path / "wh")
    wh._merge_offset_commits("a", HistoryWrite(rows=in_hand([(0, 1, None), (0, 2, "pending"), (1, 1, "pending")])))
    # a full run over a longer log: record (0, 2) decided, (1, 1) seen again still open, (0, 3) new
    wh._merge_offset_commits("b", HistoryWrite(rows=in_hand([(0, 1, None), (0, 2, "committed"), (0, 3, None),
                                                             (1, 1, "pending")])))
    # an incremental run resumed past offset 4 of partition 0 and 2 of partition 1: its saved open transaction's
    # record is decided, its new records are added
    wh._merge_offset_commits("c", HistoryWrite(rows=in_hand([(1, 1, "aborted"), (0, 4, None), (1, 2, None)]),
                                               mode="incremental", known_below={0: 4, 1: 2}))
    # a what-if run: what the history holds stays as it is (a merge would make (1, 2) pending), what it lacks is
    # added
    wh._merge_offset_commits("d", HistoryWrite(rows=in_hand([(0, 2, "pending"), (1, 2, "pending"), (2, 9, None)]),
                                               mode="what-if"))
    assert history(wh) == {(0, 1): (None, "a"), (0, 2): ("committed", "a"), (0, 3): (None, "b"),
                           (0, 4): (None, "c"), (1, 1): ("aborted", "a"), (1, 2): (None, "c"), (2, 9): (None, "d")}


def test_a_decided_outcome_is_never_undone_and_nothing_new_commits_nothing(tmp_path, no_spark):
    wh = Warehouse(tmp_path / "wh")
    wh._merge_offset_commits("a", HistoryWrite(rows=in_hand([(0, 5, "committed"), (0, 6, None)])))
    version = wh.table_version("offset_commits")
    # a later, truncated view sees the record but not its marker
    assert wh._merge_offset_commits("b", HistoryWrite(rows=in_hand([(0, 5, "pending"), (0, 6, None)]))) is None
    assert wh.table_version("offset_commits") == version
    assert history(wh) == {(0, 5): ("committed", "a"), (0, 6): (None, "a")}


def test_only_an_incremental_run_has_marks():
    with pytest.raises(WarehouseError, match="marks"):
        HistoryWrite(rows=in_hand([(0, 1, None)]), known_below={0: 1})
