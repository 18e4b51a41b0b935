"""The columns a loader's table holds (`coordinator.decoded.LOADED_SCHEMA`): every value a loadable record sets."""
from __future__ import annotations

import glob
import os

import pyarrow as pa
import pyarrow.compute as pc

from pipelines.coordinator.decoded import ERROR_COLUMNS, LOADED_SCHEMA, conform_loaded, loadable
from pipelines.coordinator.loader import SKIPPED_KINDS
from pipelines.decoding.columnar import decode_segment_to_arrow
from tests.badinputs import build_combined
from tests.conftest import SHARED
from tests.decoding.test_columnar import partition_of


def _decoded(paths: list[str]) -> pa.Table:
    batches = [b for p in paths for b in decode_segment_to_arrow(p, offsets_partition=partition_of(p))]
    return pa.Table.from_batches(batches)


def test_a_loader_drops_only_columns_no_loadable_record_sets(tmp_path):
    build_combined(tmp_path)
    logs = sorted(glob.glob(str(tmp_path / "**" / "*.log"), recursive=True))
    # and every real segment there is (none without ../shared)
    logs += sorted(glob.glob(str(SHARED / "realdata" / "seg_*" / "**" / "*.log"), recursive=True))
    logs += sorted(glob.glob(str(SHARED / "brokerdata" / "*" / "data" / "**" / "*.log"), recursive=True))
    table = _decoded([p for p in logs if os.path.isfile(p)])  # the damaged inputs hold a directory named like one
    skipped = pc.fill_null(pc.is_in(table.column("record_kind"), pa.array(SKIPPED_KINDS)), False)
    # the damaged inputs' error rows set every one of them: the columns are the decoder's, not dead ones
    for name in ERROR_COLUMNS:
        assert table.filter(skipped).column(name).null_count < pc.sum(skipped).as_py(), name
    kept = table.filter(pc.invert(skipped))
    assert kept.num_rows
    for name in ERROR_COLUMNS:
        assert kept.column(name).null_count == kept.num_rows, name
    loaded = loadable(conform_loaded(table))
    assert loaded.schema.equals(LOADED_SCHEMA)
    assert loaded.num_rows == kept.num_rows
