"""Real segments from brokers 1.0-3.8 (../shared/realdata): the final state of every dump (tests/coordinator/README.md),
and the Spark boundary gives what the engine gives in-process."""
from __future__ import annotations

from pathlib import Path

import pytest

from pipelines.decoding.reader import iter_decoded_rows
from pipelines.coordinator.options import ReplayOptions
from pipelines.coordinator.shard import replay_rows
from tests.coordinator.harness import assert_same, by_partition, spark_tables


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


# dump -> (groups loaded from a GroupMetadata record, removed groups, committed offsets served), legacy semantics
FINAL_STATE = {
    "seg_Bheem6005_kafka/kafka-logs": (4, 0, 0),
    "seg_DEVMasterBros_Mermes/kafka/logs": (1, 12, 2),
    "seg_DanielMorales9_kafkafun/data/kafka": (3, 8, 10),
    "seg_fuzibotond_Experts-in-team-innovation/kafka/data": (2, 3, 2),
    "seg_hafizhkusuma_BigData-Project1Kafka/kafka/kafka-logs": (1, 3, 0),
    "seg_marioBarbozaA_AIBulb/kafka-data": (2, 1, 1),
    "seg_mscaldas2012_kafka-connect-spooldir/kafka-data": (4, 0, 18),
    "seg_shiguang123418_spark_demo_1/kafka/kafka-logs": (0, 70, 0),
    "seg_taha-hachidi_LogFile/kafka-data/data": (1, 0, 1),
}


@pytest.mark.shared
def test_final_state_of_every_real_dump(realdata_rows):
    rows, names = realdata_rows
    tables = replay_rows(rows, ReplayOptions(semantics="legacy", snapshot_id="realdata",
                                             num_partitions=50 * (len(names) + 1)))
    got = {}
    for i, name in names.items():
        mine = lambda t: [r for r in tables[t] if r["offsets_partition"] // 50 == i]  # noqa: E731
        got[name] = (sum(1 for g in mine("loaded_groups") if not g["is_simple"]), len(mine("removed_groups")),
                     len(mine("loaded_offsets")) + len(mine("empty_group_offsets")))
    assert {n: got[n] for n in FINAL_STATE} == FINAL_STATE


@pytest.mark.spark
@pytest.mark.shared
@pytest.mark.parametrize("semantics", ["legacy", "modern"])
def test_spark_shards_equal_in_process_on_realdata(spark, realdata_rows, semantics):
    rows, names = realdata_rows
    assert len(rows) == 6330  # every record of every real segment (realdata/README.md)
    options = ReplayOptions(semantics=semantics, snapshot_id="realdata", num_partitions=50 * (len(names) + 1))
    spark_parts = by_partition(spark_tables(spark, rows, options))
    ref_parts = by_partition(replay_rows(rows, options))
    assert set(spark_parts) == set(ref_parts)
    assert sum(len(t["loaded_groups"]) for t in ref_parts.values()) > 0
    for p in ref_parts:
        assert_same(spark_parts[p], ref_parts[p], f"{names[p // 50]} partition {p % 50} ({semantics})")
