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
    replay_on_spark(spark, to_log(spark, rows), options, None, {}, keep=False, emit=lines.append,
                    input_bytes={0: 1_000_000, 3: 2_000_000, 9: 500_000}).release()
    assert lines, "no progress line"
    last = re.match(r"\s+replay: (\d+)/(\d+) shards done, ([\d,]+) records, ([\d.]+) MB at", lines[-1])
    assert last, lines[-1]
    assert (int(last[1]), int(last[2]), int(last[3].replace(",", "")), float(last[4])) == (3, 3, len(rows), 3.5)


@pytest.mark.spark
def test_running_tasks_counts_reach_the_driver_before_they_end(spark):
    """Spark hands accumulators over as tasks end: the counts a running task sends reach the lines before that."""
    import threading
    import time

    from pipelines.frames.progress import TaskCounters

    counters = TaskCounters(spark)

    def task(batches):
        for batch in batches:
            counters.add(1000, 2_000_000, shards=1)
            time.sleep(4)  # still running while the driver looks
            yield batch

    job = threading.Thread(target=lambda: spark.range(0, 2, 1, numPartitions=2).mapInArrow(task, "id long").collect())
    seen = []
    job.start()
    try:
        while job.is_alive():
            seen.append((counters.totals(), counters.shards.value))
            time.sleep(0.1)
    finally:
        job.join()
        final = counters.totals()
        counters.close()
    assert any(live[2] > 0 and done == 0 for live, done in seen), seen[-5:]
    assert final == (2000, 4_000_000, 2)
