"""The Spark jobs of a run that ran Python, as the session's status store recorded them: the first one's wall time.

A session's first Python job pays what no later one does (Spark forks its Python daemon, which imports what every
worker needs, and its JVM takes the Arrow path for the first time): a run's first is where that lands, so the
summary gives it on its own. A job runs Python when its query's physical plan holds a Python node (`MapInArrow`,
`FlatMapGroupsInArrow`, `ArrowEvalPython`, ...: every Python operator's name ends in `InArrow`, `InPandas` or
`EvalPython`); the library runs Python on Spark through DataFrames only, never through RDDs, whose jobs this would
not see. The status store keeps its records with the UI off too (the last `spark.sql.ui.retainedExecutions`
queries, 1000 by default).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_PYTHON_NODE = re.compile(r"\b\w+(?:InArrow|InPandas|EvalPython)\b")
_PAGE = 64  # queries read from the status store per call


@dataclass(frozen=True)
class PythonJob:
    """One Spark job that ran Python tasks: its id, when it was submitted (epoch ms) and its wall time."""

    job_id: int
    submitted_ms: int
    seconds: float


def first_python_job(spark: SparkSession, *, since_ms: int) -> PythonJob | None:
    """The first job submitted at or after `since_ms` (epoch ms) of a query that runs Python, once it has ended
    (None: no such job ended, or the status store cannot be read)."""
    try:
        return _first(spark, since_ms)
    except Exception:  # noqa: BLE001 - a figure of the summary is never worth failing a run
        return None


def _first(spark: SparkSession, since_ms: int) -> PythonJob | None:
    sql_store = spark._jsparkSession.sharedState().statusStore()
    app_store = spark.sparkContext._jsc.sc().statusStore()
    found: PythonJob | None = None
    # newest first: a long-lived session's store holds its earlier runs' queries too, and this run's are the last
    offset = int(sql_store.executionsCount())
    while offset > 0:
        offset, page = max(offset - _PAGE, 0), min(offset, _PAGE)
        executions = sql_store.executionsList(offset, page)
        older = False
        for i in range(executions.size() - 1, -1, -1):
            execution = executions.apply(i)
            if int(execution.submissionTime()) < since_ms:
                older = True
                continue
            if not _PYTHON_NODE.search(execution.physicalPlanDescription() or ""):
                continue
            job = _first_job(app_store, execution.jobs().keySet())
            if job is not None and job.submitted_ms >= since_ms and (found is None or job.job_id < found.job_id):
                found = job
        if older:
            break
    return found



def _first_job(app_store, job_ids) -> PythonJob | None:
    """The first of a query's jobs (they are submitted in id order), once it has ended."""
    ids = [int(j) for j in _scala_iter(job_ids)]
    if not ids:
        return None
    job_id = min(ids)
    data = app_store.job(job_id)
    submitted, completed = data.submissionTime(), data.completionTime()
    if submitted.isEmpty() or completed.isEmpty():
        return None
    start, end = submitted.get().getTime(), completed.get().getTime()
    return PythonJob(job_id, int(start), round((end - start) / 1000, 3))


def _scala_iter(collection):
    it = collection.iterator()
    while it.hasNext():
        yield it.next()
