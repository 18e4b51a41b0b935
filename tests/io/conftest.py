"""Fixtures of the warehouse tests: tiny contract-typed DataFrames and DuckDB with the delta extension."""
from __future__ import annotations

from pathlib import Path

import pytest

from .io_warehouse_data import contract_rows, offset_commit_rows
from pipelines.io.delta import spark_schema
from schemas.tables import SNAPSHOT_TABLES, TABLES


@pytest.fixture(scope="session")
def make_arrow_snapshot():
    """`make_snapshot`'s tables as the Arrow tables a run replayed in this process hands the warehouse (its
    history, when given, each record once: write it with `clustered=True`)."""
    from .stats_data import arrow_table

    def build(snapshot_id: str, salt: int = 0, commits=None, n: int = 3) -> dict:
        tables = {t: arrow_table(t, contract_rows(t, n, salt, snapshot_id)) for t in SNAPSHOT_TABLES}
        if commits is not None:
            tables["offset_commits"] = arrow_table("offset_commits", offset_commit_rows(commits, salt))
        return tables

    return build


@pytest.fixture(scope="session")
def make_snapshot(spark):
    """DataFrames for every snapshot table (+ offset_commits) of one run; `salt` varies the content."""

    def build(snapshot_id: str, salt: int = 0, commits=None, n: int = 3) -> dict:
        frames = {t: spark.createDataFrame(contract_rows(t, n, salt, snapshot_id), spark_schema(TABLES[t]))
                  for t in SNAPSHOT_TABLES}
        if commits is not None:
            frames["offset_commits"] = spark.createDataFrame(offset_commit_rows(commits, salt),
                                                             spark_schema(TABLES["offset_commits"]))
        return frames

    return build


@pytest.fixture(scope="session")
def duck():
    """DuckDB with the delta extension loaded from the duckdb-extension-delta wheel (offline)."""
    duckdb = pytest.importorskip("duckdb")
    import duckdb_extension_delta

    ext = Path(duckdb_extension_delta.__file__).parent / "extensions" / f"v{duckdb.__version__}" / "delta.duckdb_extension"
    assert ext.exists(), ext
    con = duckdb.connect()
    con.execute(f"LOAD '{ext}'")
    con.execute("SET TimeZone = 'UTC'")
    yield con
    con.close()
