"""What a rebuild's summary says of its time: the run's first Python job, as Spark timed it, printed beside the
stages' times and among the progress lines; a run that starts no Python job says none."""
from __future__ import annotations

import pytest

from tests import badinputs as bi


def _segment(root):
    g = bi.group_in(0, "timed")
    bi.write_segment(root / "__consumer_offsets-0", 0, bi.batch([bi.group_record(g, bi.T0)], 0) + b"".join(
        bi.batch([bi.commit(g, i, 100 + i, bi.T0 + i + 1)], i + 1) for i in range(3)))
    return root


@pytest.mark.spark
def test_a_run_on_spark_reports_its_first_python_job(spark, settings, tmp_path):
    import time

    from jobs.summary_text import format_summary
    from pipelines.rebuild import RebuildRequest, run_rebuild
    from tests.test_incremental import spark_replay_settings

    lines: list[str] = []
    started = time.monotonic()
    summary = run_rebuild(spark, spark_replay_settings(settings), RebuildRequest(
        inputs=(str(_segment(tmp_path / "in")),), warehouse=str(tmp_path / "wh"), snapshot_id="timed"),
        emit=lines.append)
    wall = time.monotonic() - started
    assert summary.task_cpu_seconds.get("decode") is not None  # decoded in Spark's Python tasks
    # the old coordinator's loaders read the group record alone: the offset commits are replayed column by column
    assert (summary.records_in, summary.records_looped) == (4, 1)
    assert 0 < summary.first_python_job_seconds < wall
    assert f"  first Python job  {summary.first_python_job_seconds:.1f}s" in format_summary(summary).splitlines()
    assert f"          first Python job {summary.first_python_job_seconds:.1f}s" in lines  # the progress line


@pytest.mark.spark
def test_a_run_in_the_driver_starts_no_python_job(spark, settings, tmp_path):
    from jobs.summary_text import format_summary
    from pipelines.rebuild import RebuildRequest, run_rebuild

    summary = run_rebuild(spark, settings, RebuildRequest(
        inputs=(str(_segment(tmp_path / "in")),), warehouse=str(tmp_path / "wh"), snapshot_id="here"))
    assert summary.first_python_job_seconds is None and summary.records_looped is None
    assert "first Python job" not in format_summary(summary)
