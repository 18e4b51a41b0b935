"""The snapshot's log-sized DataFrames computed once, with their row counts."""
from __future__ import annotations

from pyspark.sql import DataFrame


def materialize(tables: dict[str, DataFrame]) -> dict[str, int]:
    """Compute every table once and cut its lineage (an eager local checkpoint), in place; returns row counts.
    Validation, counts and the write then read materialized rows instead of re-running the replay's task."""
    counts = {}
    for name in list(tables):
        tables[name] = tables[name].localCheckpoint(eager=True)
        counts[name] = tables[name].count()
    return counts
