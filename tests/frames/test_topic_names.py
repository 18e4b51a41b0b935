"""The run's topic names come from the rows the decode tasks keep beside their blobs: on broker data dirs with
KIP-848 records, at cuts through them, the names equal those of the reference reader's rows at the cut, on Spark and
in the driver alike."""
from __future__ import annotations

from dataclasses import replace

import pytest

from pipelines.coordinator.tables import topic_names
from pipelines.frames.decode import decoded_log, plan_inputs
from pipelines.frames.shards import topic_names_of
from tests.frames.test_tally import reference_rows


def _at_cut(rows, until_offset, until_time):
    return [r for r in rows if (until_offset is None or r["offset"] <= until_offset)
            and (until_time is None or r["timestamp"] is None or r["timestamp"] <= until_time)]


@pytest.mark.spark
def test_topic_names_at_the_cut(spark, shared_dir):
    inputs = sorted(shared_dir.glob("brokerdata/*/data"))
    checked = 0
    for path in inputs:
        rows = [r for r in reference_rows(path) if r["record_kind"] != "error"]
        naming = sorted((r["offset"], r["timestamp"]) for r in rows
                        if r["record_kind"] == "consumer_group" and r["key_type"] == 4 and not r["is_tombstone"])
        if not naming:
            continue
        checked += 1
        first_offset, first_time = naming[0]
        cuts = [(None, None), (first_offset - 1, None), (first_offset, None), (None, first_time - 1),
                (naming[-1][0], naming[-1][1])]
        plan = plan_inputs([path])
        for cut in cuts:
            want = topic_names(_at_cut(rows, *cut))
            # in this process at every cut; on Spark (the same task functions, a job each) at the one with both,
            # as test_tally does (test_small_inputs_decode_in_the_driver_as_the_tasks_do holds the two equal)
            for p in (plan, replace(plan, in_process=True)) if None not in cut else (replace(plan, in_process=True),):
                log = decoded_log(spark, p, cut=cut)
                assert topic_names_of(log) == want, (path, cut, p.in_process)
        assert topic_names(rows), path
    if not checked:
        pytest.skip("no broker data with KIP-848 topic metadata")
