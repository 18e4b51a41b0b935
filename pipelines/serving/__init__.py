"""The serving side: answers over warehouse snapshots without Spark (delta-rs, pyarrow, DuckDB)."""
