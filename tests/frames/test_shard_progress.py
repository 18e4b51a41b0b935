"""The replay's progress lines: shards done of the shards the log holds, with their records and input bytes."""
from __future__ import annotations

import re

import pytest

from pipelines.coordinator.options import ReplayOptions
from tests.coordinator.rowkit import Log, to_log


@pytest.mark.spark
def test_replay_reports_every_shard_with_its_records_and_bytes(spark, monkeypatch):
    from pipelines.frames import progress
    from pipelines.frames.shards import replay_on_spark

    monkeypatch.setattr(progress, "INTERVAL_SECONDS", 0.05)
    rows = []
    for part, commits in ((0, 5), (3, 7), (9, 2)):
        log = Log(partition=part)
        for v in range(commits):
            log.commit(f"g{part}", "t", 0, v)
        rows += log.rows
    lines: list[str] = []
    options = ReplayOptions(semantics="modern", snapshot_id="p", num_partitions=50)
    replay_on_spark(spark, to_log(spark, rows), options, None, {}, False, lines.append,
                    input_bytes={0: 1_000_000, 3: 2_000_000, 9: 500_000}).release()
    assert lines, "no progress line"
    last = re.match(r"\s+replay: (\d+)/(\d+) shards done, ([\d,]+) records, ([\d.]+) MB at", lines[-1])
    assert last, lines[-1]
    assert (int(last[1]), int(last[2]), int(last[3].replace(",", "")), float(last[4])) == (3, 3, len(rows), 3.5)
