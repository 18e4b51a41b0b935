"""A shard's task that runs out of the memory its Python worker may use (`spark.executor.pyspark.memory`, an
address-space limit PySpark sets) fails the run with one line naming the offsets partition, not a worker killed
without a word or a traceback."""
from __future__ import annotations

import pickle
import resource

import pyarrow as pa
import pytest

from pipelines.frames import segment_shards
from pipelines.frames.envelope import ShardStates, encode
from pipelines.frames.segment_shards import ShardMemoryError, memory_of


def test_a_memory_error_names_the_partition_and_what_to_change():
    with pytest.raises(ShardMemoryError) as e:
        with memory_of(8, "range 3"):
            raise pa.ArrowMemoryError("malloc of size 1073741824 failed")
    text = str(e.value)
    assert text.startswith("offsets partition 8: range 3 needs more memory") and "\n" not in text
    assert "spark.executor.pyspark.memory" in text


def test_the_tabulation_task_reports_its_partition(monkeypatch):
    def exhausted(*args, **kwargs):
        raise MemoryError()

    monkeypatch.setattr(segment_shards, "tabulate_shards", exhausted)
    task = segment_shards.tabulate_task(None, None, {}, 50)
    batch = encode([ShardStates(shard=17, states=pickle.dumps([]))])
    with pytest.raises(ShardMemoryError, match="^offsets partition 17: tabulating its state"):
        list(task(iter([batch])))


def test_a_task_failure_from_spark_is_one_line_for_the_user():
    from pipelines.rebuild.failures import RunFailed, shard_errors

    spark_text = ("An exception was thrown from the Python worker.\nTraceback (most recent call last):\n  File x\n"
                  "pipelines.frames.segment_shards.ShardMemoryError: offsets partition 4: range 0 needs more memory "
                  "than its Python worker may use (1024 MiB): raise spark.executor.pyspark.memory\n\tat org.apache")
    with pytest.raises(RunFailed) as e:
        with shard_errors():
            raise RuntimeError(spark_text)
    assert str(e.value).startswith("offsets partition 4: range 0 needs more memory") and "\n" not in str(e.value)


def test_no_limit_is_named_as_such():
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY:
        pytest.skip("this process runs under an address-space limit")
    with pytest.raises(ShardMemoryError, match=r"\(no limit set\)"):
        with memory_of(0, "decoding and loading"):
            raise MemoryError()
