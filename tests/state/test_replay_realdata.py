"""Real segments from brokers 1.0-3.8 (../shared/realdata): the Spark replay equals the sequential reference."""
from __future__ import annotations

from pathlib import Path

import pytest

from pipelines.decoding.reader import iter_decoded_rows
from pipelines.state.options import ReplayOptions
from pipelines.state.reference import replay_reference
from tests.state.harness import assert_same, by_partition, spark_tables


def data_dirs(realdata: Path) -> list[Path]:
    """Every broker data directory (the folder holding meta.properties or __consumer_offsets-N dirs)."""
    found = set()
    for d in sorted(realdata.glob("seg_*")):
        for p in d.rglob("__consumer_offsets-*"):
            if p.is_dir():
                found.add(p.parent)
    return sorted(found)


@pytest.fixture(scope="module")
def realdata_rows(realdata):
    """All dumps in one list: dump i's partition p becomes partition 50*i + p, so they replay independently."""
    rows, names = [], {}
    for i, d in enumerate(data_dirs(realdata)):
        names[i] = str(d.relative_to(realdata))
        for r in iter_decoded_rows([d]):
            assert r["record_kind"] != "error", (d, r["error"])
            rows.append({**r, "offsets_partition": r["offsets_partition"] + 50 * i})
    return rows, names


@pytest.mark.spark
@pytest.mark.shared
@pytest.mark.parametrize("semantics", ["legacy", "modern"])
def test_spark_equals_reference_on_realdata(spark, realdata_rows, semantics):
    rows, names = realdata_rows
    assert len(rows) == 6330  # every record of every real segment (realdata/README.md)
    options = ReplayOptions(semantics=semantics, snapshot_id="realdata", num_partitions=50 * (len(names) + 1))
    spark_parts = by_partition(spark_tables(spark, rows, options))
    ref_parts = by_partition(replay_reference(rows, options))
    assert set(spark_parts) == set(ref_parts)
    assert sum(len(t["loaded_groups"]) for t in ref_parts.values()) > 0
    for p in ref_parts:
        assert_same(spark_parts[p], ref_parts[p], f"{names[p // 50]} partition {p % 50} ({semantics})")
