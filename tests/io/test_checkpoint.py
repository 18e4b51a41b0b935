"""Incremental-run checkpoints: stored atomically as JSON beside the warehouse tables."""
from __future__ import annotations

import datetime as dt
import json
import os

import pytest

from pipelines.io import checkpoint as cp
from pipelines.io.warehouse import Warehouse


def test_round_trip_through_the_warehouse_directory(tmp_path):
    wh = Warehouse(tmp_path / "wh")
    data = {"last_offsets": {"0": 41, "7": 1000000000000}, "fingerprint": "sha256:ab",
            "semantics": "legacy", "as_of": dt.datetime(2024, 5, 17, 8, 30, tzinfo=dt.timezone.utc)}
    path = cp.write_checkpoint(wh, "s1", data)
    assert path == tmp_path / "wh" / "_checkpoints" / "s1.json"
    assert cp.read_checkpoint(wh, "s1") == {**data, "as_of": "2024-05-17T08:30:00+00:00"}
    assert cp.read_checkpoint(tmp_path / "wh", "s1") == cp.read_checkpoint(wh, "s1")  # a path works too
    assert cp.read_checkpoint(wh, "s2") is None


def test_overwrite_is_atomic_and_leaves_no_temporary_files(tmp_path, monkeypatch):
    wh = Warehouse(tmp_path)
    cp.write_checkpoint(wh, "s1", {"v": 1})
    cp.write_checkpoint(wh, "s1", {"v": 2})
    assert cp.read_checkpoint(wh, "s1") == {"v": 2}

    def crash(src, dst):
        raise OSError("crash before rename (injected)")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="injected"):
        cp.write_checkpoint(wh, "s1", {"v": 3})
    monkeypatch.undo()
    assert cp.read_checkpoint(wh, "s1") == {"v": 2}  # the old checkpoint is intact
    assert sorted(p.name for p in (tmp_path / "_checkpoints").iterdir()) == ["s1.json"]
    json.loads((tmp_path / "_checkpoints" / "s1.json").read_text())


def test_rejects_unsafe_ids_and_unserialisable_content(tmp_path):
    with pytest.raises(ValueError, match="invalid snapshot id"):
        cp.write_checkpoint(tmp_path, "../../etc/passwd", {})
    with pytest.raises(TypeError):
        cp.write_checkpoint(tmp_path, "s1", {"x": object()})
    with pytest.raises(TypeError):
        cp.write_checkpoint(tmp_path, "s1", ["not", "a", "dict"])
    assert cp.read_checkpoint(tmp_path, "s1") is None
    assert not any((tmp_path / "_checkpoints").glob("*.tmp")) if (tmp_path / "_checkpoints").exists() else True
