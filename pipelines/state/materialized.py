"""The snapshot's log-sized DataFrames computed once, with their row counts."""
from __future__ import annotations

from collections.abc import Mapping

import pyarrow as pa
from pyspark.sql import DataFrame

from pipelines.io.blobs import BlobRows


def materialize(tables: dict[str, DataFrame], known: Mapping[str, int] | None = None) -> dict[str, int]:
    """Compute every table once and cut its lineage (an eager local checkpoint), in place; returns row counts.
    Validation, counts and the write then read materialized rows instead of re-running the replay's task. A table
    in `known` (its row count, counted where its rows were made) or held as Arrow is left as it is; rows still in
    blobs (`io.blobs.BlobRows`) are opened once, unless known."""
    counts = dict(known or {})
    for name in list(tables):
        if isinstance(tables[name], pa.Table):  # in hand already
            counts[name] = tables[name].num_rows
        if name in counts:
            continue
        if isinstance(tables[name], BlobRows):
            tables[name] = tables[name].frame()
        tables[name] = tables[name].localCheckpoint(eager=True)
        counts[name] = tables[name].count()
    return counts
