"""The Spark jobs that ran Python (`frames.python_jobs`): the first one since a moment is the first job of the first
query with a Python node, timed as Spark's status store recorded it; a JVM-only job before it is not it."""
from __future__ import annotations

import time

import pytest

pytestmark = pytest.mark.spark


def _slept(seconds: float):
    def task(batches):
        import time as t

        t.sleep(seconds)
        yield from batches

    return task


def test_the_first_python_job_since_a_moment(spark):
    from pipelines.frames.python_jobs import first_python_job

    sc = spark.sparkContext
    since_ms = int(time.time() * 1000)
    try:
        sc.setJobGroup("jvm-only", "no Python")
        spark.range(0, 1000, 1, numPartitions=2).selectExpr("sum(id)").collect()
        sc.setJobGroup("python-first", "the first Python job")
        started = time.monotonic()
        spark.range(0, 4, 1, numPartitions=2).mapInArrow(_slept(0.4), "id long").toArrow()
        wall = time.monotonic() - started
        sc.setJobGroup("python-second", "a later Python job")
        spark.range(0, 4, 1, numPartitions=2).mapInArrow(_slept(0.0), "id long").toArrow()
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
        sc.setLocalProperty("spark.job.description", None)

    job = first_python_job(spark, since_ms=since_ms)
    assert job is not None
    assert job.job_id == min(sc.statusTracker().getJobIdsForGroup("python-first"))
    assert 0.4 <= job.seconds <= wall + 0.05  # the store's milliseconds, inside the driver's own measure
    assert job.submitted_ms >= since_ms
    assert first_python_job(spark, since_ms=int(time.time() * 1000) + 1000) is None  # none submitted since
