"""The snapshot reader's pyarrow datasets read their files through pyarrow's own filesystem.

Through delta-rs' default (a Python filesystem), Arrow's reader threads dropped a Python file's last reference by
taking the GIL; one doing so while the interpreter finalized aborted the command after it had printed its answer
("terminate called without an active exception", exit 134 where the command said 2). 4 of 60 `restore-plan` runs
on a loaded machine ended so. Each read here must also give every row of a snapshot whose id its files' directory
names escape.
"""
from __future__ import annotations

import pyarrow.fs as pafs
import pytest

from pipelines.io.snapshots import DeltaWarehouseReader

from ..serving.warehouse_kit import WarehouseKit, commit, group, offset, ts

#: a partition directory name escapes each of these
ODD_ID = "s 1:a%b/é"


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory):
    root = tmp_path_factory.mktemp("datasets")
    kit = WarehouseKit(root)
    kit.snapshot("plain", groups=[group("g0", "Empty")], offsets=[offset("g0", "t", 0, 1, t=1.0)],
                 commits=[commit("g0", "t", 0, 1, t=1.0)], as_of=ts(5))
    kit.snapshot(ODD_ID, groups=[group("g1", "Empty"), group("g2", "Empty")],
                 offsets=[offset("g1", "t", 0, 7, t=2.0), offset("g2", "t", 1, 8, t=2.0)],
                 commits=[commit("g1", "t", 0, 7, t=2.0)], as_of=ts(10))
    return root


def _native(dataset) -> bool:
    return not isinstance(dataset.filesystem, pafs.PyFileSystem)


def _recorded(reader: DeltaWarehouseReader, monkeypatch) -> list:
    """The datasets `reader` makes from here on."""
    made, original = [], reader._dataset

    def record(*args, **kwargs):
        made.append(original(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(reader, "_dataset", record)
    return made


def test_a_snapshots_dataset_reads_natively_every_row_of_an_escaped_id(warehouse):
    ds = DeltaWarehouseReader(warehouse).snapshot_dataset("loaded_offsets", ODD_ID)
    assert _native(ds)
    t = ds.to_table(columns=["snapshot_id", "group_id", "committed_offset"])
    assert sorted(t.to_pylist(), key=lambda r: r["group_id"]) == [
        {"snapshot_id": ODD_ID, "group_id": "g1", "committed_offset": 7},
        {"snapshot_id": ODD_ID, "group_id": "g2", "committed_offset": 8}]


def test_a_history_dataset_reads_natively(warehouse):
    ds = DeltaWarehouseReader(warehouse).history_dataset("offset_commits")
    assert _native(ds) and ds.count_rows() == 2


@pytest.mark.parametrize("fast_path", [True, False])
def test_a_snapshot_table_reads_every_row_of_an_escaped_id(warehouse, fast_path, monkeypatch):
    reader = DeltaWarehouseReader(warehouse, fast_path=fast_path)
    made = _recorded(reader, monkeypatch)
    t = reader.snapshot_table("loaded_offsets", ODD_ID, columns=["group_id"])
    assert sorted(t.column("group_id").to_pylist()) == ["g1", "g2"]
    assert all(_native(d) for d in made) and (fast_path or made)


def test_a_dictionary_scan_reads_natively(warehouse, monkeypatch):
    reader = DeltaWarehouseReader(warehouse)
    made = _recorded(reader, monkeypatch)
    t = reader.history_table("offset_commits", columns=["group_id"], dictionary=("group_id",))
    assert sorted(t.column("group_id").to_pylist()) == ["g0", "g1"] and made and all(_native(d) for d in made)
