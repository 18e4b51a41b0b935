"""`partitionFor` (spec §4): the reference's pure function, the decoding layer's, and the Spark expression agree."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipelines.state.reference import java_hash_code, partition_for

TRICKY = ["", "null", " ", "polygenelubricants", "Ωmega", "グループ", "그룹", "emoji-😀-group", "e\u0301", "x" * 1000,
          "tx-g1", "many-groups-ünïcødé"]


def test_java_hash_code_known_values():
    assert java_hash_code("") == 0
    assert java_hash_code("a") == 97
    assert java_hash_code("polygenelubricants") == -(2 ** 31)  # Integer.MIN_VALUE: Utils.abs gives 0
    assert partition_for("polygenelubricants", 50) == 0
    assert java_hash_code("😀") == 0xD83D * 31 + 0xDE00  # two UTF-16 code units


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_matches_decoding_partitioner(group_id):
    partitioner = pytest.importorskip("pipelines.decoding.partitioner")
    for n in (1, 50, 7):
        assert partition_for(group_id, n) == partitioner.partition_for(group_id, n)


@pytest.mark.spark
def test_spark_expression_matches(spark):
    from pyspark.sql import functions as F

    from pipelines.state.replay import partition_for as spark_partition_for

    ids = TRICKY + [f"group-{i}" for i in range(200)]
    df = spark.createDataFrame([(i,) for i in ids], "g string")
    got = {r.g: r.p for r in df.select("g", spark_partition_for(F.col("g"), F.lit(50)).alias("p")).collect()}
    assert got == {g: partition_for(g, 50) for g in ids}
