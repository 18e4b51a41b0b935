"""The history validated from the rows its shards flag: GX's outcome over the suspects and the shards' counts is the
outcome GX gives over the whole table, and a full rebuild on Spark validates its history that way."""
from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from tests import badinputs as bi
from .validation_rows import AS_OF_MS, N, UTC


COLUMNS = ("offsets_partition", "record_offset", "committed_offset", "commit_timestamp")


def _history(rows: list[tuple]) -> pa.Table:
    from schemas.tables import TABLES

    schema = TABLES["offset_commits"]
    schema = pa.schema([f.with_nullable(True) for f in schema])
    data = {f.name: [None] * len(rows) for f in schema}
    for i, r in enumerate(rows):
        for c, v in zip(COLUMNS, r):
            data[c][i] = v
    return pa.table(data, schema=schema)


def test_the_history_suite_is_filtered_in_the_shards(settings):
    """A run's history suite is row-wise: the shards can filter it (else it would go back to Spark unnoticed)."""
    from pipelines.validation.runner import history_check

    check = history_check(settings, as_of_ms=AS_OF_MS, num_partitions=N)
    assert check is not None
    assert {(b.kind, b.columns) for b in check.bounds} == {
        ("not_null", ("offsets_partition",)), ("not_null", ("record_offset",)),
        ("unique", ("offsets_partition", "record_offset")), ("between", ("committed_offset",)),
        ("between", ("commit_timestamp",))}


def test_a_suite_that_is_not_row_wise_gets_no_filter(settings):
    from pipelines.validation.runner import _suites
    from pipelines.validation.suites import Check, SuiteSpec, _expect
    from pipelines.validation.suspects import suspect_filter

    specs = {s.name: s for s in _suites(settings, AS_OF_MS, N)}
    assert suspect_filter(specs["loaded_offsets"]) is None  # relates each row to its group's partition
    assert suspect_filter(specs["offset_commits"]) is not None
    mostly = Check("x", "at_least", _expect("ExpectColumnValuesToBeBetween", column="record_offset", min_value=0,
                                            mostly=0.5), "why", "record_offset")
    assert suspect_filter(SuiteSpec("h", "offset_commits", ("record_offset",), (mostly,))) is None
    unlocal = Check("k", "unique", _expect("ExpectColumnValuesToBeUnique", column="record_offset"), "why",
                    "record_offset")
    assert suspect_filter(SuiteSpec("h", "offset_commits", ("record_offset",), (unlocal,))) is None


def test_the_filter_is_built_without_great_expectations():
    """The shards' filter is read off the suite's declarations before decoding starts: building it must not wait on
    GX's import (seconds of a core, run in the background meanwhile). A process of its own, so no other test's
    import counts."""
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent(f"""
        import sys
        from pipelines.config import load_settings
        from pipelines.validation.runner import history_check
        check = history_check(load_settings(env="ci"), as_of_ms={AS_OF_MS}, num_partitions={N})
        print(check is not None, any(m == "great_expectations" or m.startswith("great_expectations.")
                                     for m in sys.modules))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["True", "False"]


UPPER_MS = AS_OF_MS + 2 * 3600_000
_ts = st.one_of(st.none(), st.sampled_from([
    dt.datetime(2009, 1, 1, tzinfo=UTC), dt.datetime(2011, 1, 1, tzinfo=UTC),
    dt.datetime.fromtimestamp(AS_OF_MS / 1000, tz=UTC), dt.datetime.fromtimestamp(UPPER_MS / 1000, tz=UTC)]))
_row = st.tuples(st.one_of(st.none(), st.integers(0, 3)), st.one_of(st.none(), st.integers(0, 6)),
                 st.one_of(st.none(), st.integers(-3, 2)), _ts)


@hsettings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.lists(_row, max_size=14))
def test_the_suspects_give_the_outcome_of_the_whole_table(settings, gx_context, rows):
    """Nulls, repeated keys, values on and past every bound, in any mix: validating the suspects of each offsets
    partition with the counts of all rows gives GX's outcome over the whole table, counts, percentages and
    examples included."""
    import pyarrow.compute as pc

    from pipelines.validation.runner import EXAMPLES, history_check, run_validation
    from pipelines.validation.suspects import Suspects

    table = _history(rows)
    check = history_check(settings, as_of_ms=AS_OF_MS, num_partitions=N)
    parts = table.column("offsets_partition")
    shards = [table.filter(pc.is_null(parts) if p is None else pc.fill_null(pc.equal(parts, p), False))
              for p in pc.unique(parts).to_pylist()]
    split = [check.split(s) for s in shards]
    suspects = Suspects.gather("offset_commits", split, table.select(list(check.columns)).schema)
    assert suspects.total == table.num_rows and suspects.rows.num_rows <= table.num_rows

    def outcome(given):
        result = run_validation(None, {"offset_commits": given}, as_of_ms=AS_OF_MS, num_partitions=N,
                                settings=settings, suites=["offset_commits"], context=gx_context)
        doc = result.to_dict()["suites"][0]
        for e in doc["expectations"]:
            # past EXAMPLES offending rows, which ones are shown depends on the row order (on Spark too)
            many = (e["unexpected_count"] or 0) > EXAMPLES
            e["examples"] = len(e["examples"]) if many else sorted(map(str, e["examples"]))
        return doc["rows"], doc["expectations"]

    assert outcome(suspects) == outcome(table)


def test_a_full_rebuild_validates_its_history_from_the_shards(spark, settings, tmp_path):
    """On Spark, one task per offsets partition: a commit of offset -5 fails the history's bound, counted over the
    whole history, and the history is never validated on Spark."""
    import dataclasses
    import json

    from pipelines.config import _merge
    from pipelines.rebuild import RebuildRequest, run_rebuild

    g = bi.group_in(0, "bounds")
    h = bi.group_in(1, "bounds")
    root = tmp_path / "in"
    bi.write_segment(root / "__consumer_offsets-0", 0, bi.batch([bi.group_record(g, bi.T0)], 0) + b"".join(
        bi.batch([bi.commit(g, i, -5 if i == 2 else 100 + i, bi.T0 + i + 1)], i + 1) for i in range(4)))
    bi.write_segment(root / "__consumer_offsets-1", 0, b"".join(
        bi.batch([bi.commit(h, i, 7, bi.T0 + i)], i) for i in range(3)))
    on_spark = dataclasses.replace(settings, raw=_merge(settings.raw, {
        "rebuild": {"local_replay_max_rows": 0}, "decode": {"in_process_max_bytes": 0},
        "validation": {"policy": "warn"}}))
    summary = run_rebuild(spark, on_spark, RebuildRequest(inputs=(str(root),), warehouse=str(tmp_path / "wh"),
                                                          snapshot_id="bounds"))
    report = json.loads((tmp_path / "wh" / "_reports" / "bounds.json").read_text())
    suite = next(s for s in report["suites"] if s["name"] == "offset_commits")
    assert (suite["rows"], suite["engine"]) == (7, "pandas")
    failed = [e for e in suite["expectations"] if not e["success"]]
    assert [e["id"] for e in failed] == ["offset_commits.committed_offset_at_least_minus_1"]
    assert (failed[0]["element_count"], failed[0]["unexpected_count"]) == (7, 1)
    assert failed[0]["unexpected_percent"] == pytest.approx(100 / 7)
    assert [x["record_offset"] for x in failed[0]["examples"]] == [3]
    assert summary.validation["suites"]["offset_commits"]["rows"] == 7


@hsettings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.lists(_row, max_size=12))
def test_each_bound_keeps_every_row_its_expectation_rejects(settings, gx_context, rows):
    """GX is the oracle: each of the history's expectations, built as GX objects and run over the whole table, flags
    only rows its bound keeps, and the bound keeps no other row but one on the bound itself (bounds are inclusive)
    or one whose key is all null (kept for GX's missing count)."""
    import pyarrow.compute as pc

    from pipelines.validation.runner import _batch_definition, _suites, to_validation_pandas
    from pipelines.validation.suspects import suspect_filter

    spec = next(s for s in _suites(settings, AS_OF_MS, N) if s.name == "offset_commits")
    bounds = suspect_filter(spec).bounds
    table = _history(rows)
    table = table.append_column("row", pa.array(range(table.num_rows), pa.int64()))
    frame = to_validation_pandas(table.select([*COLUMNS, "row"]))
    batch = _batch_definition(gx_context, "bound_oracle", pandas=True).get_batch(batch_parameters={"dataframe": frame})
    assert len(bounds) == len(spec.checks)
    for check, bound in zip(spec.checks, bounds):
        result = batch.validate(check.expectation.gx(), result_format={
            "result_format": "COMPLETE", "unexpected_index_column_names": ["row"]})
        rejected = {r["row"] for r in result.result.get("unexpected_index_list") or []}
        assert result.success == (not rejected)
        kept = {i for i, k in enumerate(pc.fill_null(bound.mask(table), False).to_pylist()) if k}
        assert rejected <= kept, check.name
        for i in kept - rejected:
            values = [table.column(c)[i].as_py() for c in bound.columns]
            assert (bound.kind == "between" and values[0] in (bound.low, bound.high)) or (
                bound.kind == "unique" and all(v is None for v in values)), (check.name, values)
