"""`stages.Staging`: the snapshot's tables staged in threads while the run validates (the tables in hand in one, the
log-sized ones on Spark from another), every piece's files handed to the write, and none left behind when a piece
fails or the run ends before its write."""
from __future__ import annotations

import contextlib
import threading
from types import SimpleNamespace

import pyarrow as pa
import pytest

from pipelines.rebuild.stages import Staging


class _Warehouse:
    """A warehouse that stages each table as a directory named after it, in the thread that asks, and fails a
    piece holding a table named `fails`."""

    def __init__(self) -> None:
        self.discarded: list[str] = []
        self.threads: dict[str, int] = {}
        self.release = threading.Event()

    def stage_tables(self, snapshot_id: str, tables: dict) -> dict:
        self.release.wait(5)
        for t in tables:
            self.threads[t] = threading.get_ident()
        if "fails" in tables:
            raise OSError("No space left on device")
        return {t: (f"snapshot_id={snapshot_id}/{t}", []) for t in tables}

    def discard_staged(self, staged: dict) -> None:
        self.discarded.extend(staged)


def _run(warehouse: _Warehouse) -> SimpleNamespace:
    return SimpleNamespace(warehouse=warehouse, snapshot_id="s1", held=contextlib.ExitStack())


_ROWS = pa.table({"a": [1]})


def test_each_piece_is_staged_in_a_thread_of_its_own_and_the_write_takes_them_all():
    wh = _Warehouse()
    run = _run(wh)
    staging = Staging(run, {"loaded_offsets": _ROWS, "consumer_lag": _ROWS}, {"group_history": _ROWS})
    wh.release.set()
    assert staging.take() == {t: (f"snapshot_id=s1/{t}", []) for t in ("loaded_offsets", "consumer_lag",
                                                                        "group_history")}
    assert wh.threads["loaded_offsets"] == wh.threads["consumer_lag"] != wh.threads["group_history"]
    run.held.close()
    assert wh.discarded == []  # the write's now: committed, or deleted by it


def test_a_piece_that_fails_fails_the_take_and_the_other_pieces_files_are_deleted_when_the_run_ends():
    wh = _Warehouse()
    run = _run(wh)
    staging = Staging(run, {"loaded_offsets": _ROWS}, {"fails": _ROWS})
    wh.release.set()
    with pytest.raises(OSError, match="No space left"):
        staging.take()
    assert wh.discarded == []
    run.held.close()
    assert wh.discarded == ["loaded_offsets"]


def test_a_run_that_ends_before_its_write_deletes_every_piece_staged():
    wh = _Warehouse()
    run = _run(wh)
    Staging(run, {"loaded_offsets": _ROWS}, {"group_history": _ROWS})
    wh.release.set()
    run.held.close()  # waits for the pieces still being staged
    assert sorted(wh.discarded) == ["group_history", "loaded_offsets"]


def test_nothing_on_spark_starts_no_second_thread():
    wh = _Warehouse()
    wh.release.set()
    staging = Staging(_run(wh), {"loaded_offsets": _ROWS}, {})
    assert list(staging.take()) == ["loaded_offsets"]
