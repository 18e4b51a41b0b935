"""Run the engine through its Spark boundary (one task per offsets partition) and in-process on the same decoded rows,
and compare them table by table: what the boundary must not change (grouping, order, Arrow round trips, topic names)."""
from __future__ import annotations

import calendar
import datetime as dt
from collections import defaultdict

import pyarrow as pa

from pipelines.coordinator.options import REPLAY_TABLES, ReplayOptions
from tests.coordinator.rowkit import to_log


def plain(v):
    """A Spark or Arrow value in the engine's representation: datetimes as epoch ms, structs as tuples."""
    if isinstance(v, dt.datetime):
        return calendar.timegm(v.timetuple()) * 1000 + v.microsecond // 1000
    if hasattr(v, "asDict"):
        return tuple(plain(x) for x in v)
    if isinstance(v, dict):  # an Arrow struct
        return tuple(plain(x) for x in v.values())
    if isinstance(v, list):
        return [plain(x) for x in v]
    return v


def as_rows(tables: dict) -> dict[str, list[dict]]:
    """A shard's or a cleanup pass's tables as rows in the engine's representation (the offsets come as Arrow)."""
    return {t: [{k: plain(v) for k, v in r.items()} for r in x.to_pylist()] if isinstance(x, pa.Table) else x
            for t, x in tables.items()}


def collect_tables(res: dict) -> dict[str, list[dict]]:
    """Collect all tables in ONE Spark job: a union of one struct column per table, so shared upstream steps
    (shuffles) are computed once (exchange reuse) instead of once per table."""
    from functools import reduce

    from pyspark.sql import functions as F

    types = {t: df.select(F.struct(*df.columns).alias("x")).schema["x"].dataType for t, df in res.items()}
    parts = []
    for t, df in res.items():
        cols = [F.lit(t).alias("_t")] + [
            (F.struct(*df.columns) if u == t else F.lit(None).cast(types[u])).alias(f"c_{u}") for u in res]
        parts.append(df.select(*cols))
    out: dict[str, list[dict]] = {t: [] for t in res}
    for r in reduce(lambda a, b: a.unionByName(b), parts).collect():
        rec = r[f"c_{r['_t']}"]
        out[r["_t"]].append({k: plain(v) for k, v in rec.asDict().items()})
    return out


def spark_tables(spark, rows, options: ReplayOptions, expiry=None) -> dict[str, list[dict]]:
    """The tables the Spark boundary (`frames.shards.replay_on_spark`) gives for `rows`, collected in one job."""
    from pipelines.coordinator.tables import topic_names
    from pipelines.frames.shards import replay_on_spark

    shards = replay_on_spark(spark, to_log(spark, rows), options, expiry, topic_names(rows), keep=False)
    tables, release = shards.tables, shards.release
    try:
        frames = {t: rows.frame() for t, rows in tables.items() if not isinstance(rows, pa.Table)}  # the history
        out = collect_tables(frames)
        for t, table in tables.items():
            if isinstance(table, pa.Table):  # the state tables come back collected, as Arrow
                out[t] = [{k: plain(v) for k, v in r.items()} for r in table.to_pylist()]
        return out
    finally:
        release()


def by_partition(tables: dict[str, list[dict]]) -> dict[int, dict[str, list[dict]]]:
    out: dict[int, dict[str, list[dict]]] = defaultdict(lambda: {t: [] for t in REPLAY_TABLES})
    for t, rows in tables.items():
        for r in rows:
            out[r["offsets_partition"]][t].append(r)
    return out


def canon(rows: list[dict]) -> list[tuple]:
    def norm(v):
        if isinstance(v, dict):  # a struct in hand (its fields in schema order) is a Row collected from Spark
            return tuple(norm(x) for x in v.values())
        if isinstance(v, (list, tuple)):
            return tuple(norm(x) for x in v)
        return v
    return sorted((tuple(sorted((k, norm(v)) for k, v in r.items())) for r in rows), key=repr)


def assert_same(spark_side: dict[str, list[dict]], ref_side: dict[str, list[dict]], label: str = "") -> None:
    for t in REPLAY_TABLES:
        got, want = canon(spark_side.get(t, [])), canon(ref_side.get(t, []))
        assert got == want, f"{label} {t}: spark != in-process\nspark: {got}\nin-process: {want}"
