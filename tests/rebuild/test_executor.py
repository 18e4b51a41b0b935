"""The executor's choice, as the settings table in the README promises it: where a run decodes and where its
shards execute, for each kind of input and each threshold."""
from __future__ import annotations

from dataclasses import replace

import pytest

from pipelines.frames.decode import DecodePlan
from pipelines.incremental.plan import IncrementalStart
from pipelines.rebuild.executor import Route, choose, loads_shards

MB = 1 << 20


def _segment(partition: int | None, size: int = MB) -> dict:
    return {"kind": "segment", "path": f"/d/__consumer_offsets-{partition}/0.log", "offsets_partition": partition,
            "size": size}


def _plan(*items: dict) -> DecodePlan:
    return DecodePlan(items=list(items), total_bytes=sum(i.get("size") or 0 for i in items),
                      num_segments=sum(i["kind"] == "segment" for i in items),
                      num_tabular=sum(i["kind"] == "tabular" for i in items), tabular_without_batch_facts=[],
                      max_partition=max([i.get("offsets_partition") or 0 for i in items] or [-1]))


def _full(plan: DecodePlan) -> IncrementalStart:
    return IncrementalStart(mode="full", reason="--incremental not given", decode_plan=plan)


def _incremental(plan: DecodePlan, state_entries: int) -> IncrementalStart:
    return IncrementalStart(mode="incremental", reason="extends", decode_plan=plan, previous_snapshot="s1",
                            previous={"partitions": {"0": {}, "3": {}, "7": {}}}, previous_state="/w/_state/s1",
                            previous_files=[], state_entries=state_entries)


@pytest.fixture
def conf(settings):
    from pipelines.rebuild.request import RebuildRequest, resolve_settings

    return replace(resolve_settings(settings, RebuildRequest(inputs=("/d",), warehouse="/w")),
                   in_process_max_bytes=4 * MB, local_replay_max_rows=1000, resume_tasks_min_rows=0,
                   split_bytes=64 * MB, load_buffer_bytes=5 * MB)


def test_segment_input_above_the_in_process_size_is_decoded_and_loaded_by_the_shards_tasks(conf):
    ex = choose(conf, _full(_plan(_segment(0, 3 * MB), _segment(5, 3 * MB))), cores=lambda: 2)
    assert ex.loads_shards and not ex.decode_plan.in_process and ex.previous is None
    assert (ex.split_bytes, ex.window_bytes) == (64 * MB, 5 * MB)
    assert ex.replay_route(10**9) == (Route.SHARDS, None)
    assert ex.split_buckets == 2  # a split partition's groups load on every core


def _no_cores() -> int:
    raise AssertionError("asked Spark's cores: a session would start")


def test_a_small_input_is_decoded_here_and_replayed_here_unless_its_records_are_many(conf):
    ex = choose(conf, _full(_plan(_segment(0, MB))), cores=_no_cores)  # the route is chosen without a session
    assert ex.decode_plan.in_process and not ex.loads_shards
    assert ex.replay_route(1000) == (Route.IN_PROCESS, 1000)
    assert ex.replay_route(1001) == (Route.SPARK, None)
    assert choose(replace(conf, local_replay_max_rows=0), _full(_plan(_segment(0, MB))), _no_cores).replay_route(1) == (
        Route.SPARK, None)


def test_tabular_input_and_segments_of_no_partition_are_never_loaded_by_the_shards_tasks(conf):
    tabular = {"kind": "tabular", "path": "/d/dump.parquet", "offsets_partition": None, "size": 10 * MB}
    for plan in (_plan(tabular), _plan(_segment(None, 10 * MB)), _plan(_segment(0, 10 * MB), tabular)):
        ex = choose(conf, _full(plan), cores=lambda: 2)
        assert not ex.loads_shards and not ex.decode_plan.in_process
        assert ex.replay_route(10**6) == (Route.SPARK, None)
    assert not loads_shards(_plan())  # nothing to load


def test_an_incremental_run_loads_onto_its_saved_shards_in_the_tasks_or_here(conf):
    big = _incremental(_plan(_segment(0, 8 * MB)), state_entries=10)
    ex = choose(conf, big, cores=lambda: 2)
    assert ex.loads_shards and ex.previous.partitions == (0, 3, 7)
    assert ex.replay_route(5) == (Route.SHARDS, None)
    assert ex.split_buckets == 1  # a split partition resumes its one saved shard
    # decoded here, saved shards of at most local_replay_max_rows entries: resumed in this process
    small = _incremental(_plan(_segment(0, MB)), state_entries=1000)
    ex = choose(conf, small, cores=lambda: 2)
    assert not ex.loads_shards and ex.decode_plan.in_process
    assert ex.replay_route(7) == (Route.IN_PROCESS, 1007)
    # saved shards larger than that: the shards' tasks, however few the new bytes
    assert choose(conf, _incremental(_plan(_segment(0, MB)), state_entries=1001), lambda: 2).loads_shards
    # discovery problems travel with the shards
    problem = {"kind": "problem", "path": "/d/__consumer_offsets-3/x.log", "offsets_partition": 3, "size": 0}
    assert choose(conf, _incremental(_plan(_segment(0, 8 * MB), problem), 10), lambda: 2).loads_shards


def test_resume_tasks_min_rows_resumes_a_large_in_process_replay_on_one_task_per_core(conf):
    inc = _incremental(_plan(_segment(0, MB)), state_entries=900)
    on = replace(conf, resume_tasks_min_rows=950)
    ex = choose(on, inc, cores=lambda: 2)
    assert ex.replay_route(49) == (Route.IN_PROCESS, 949)
    assert ex.replay_route(50) == (Route.TASKS, 950) and ex.tasks == 2
    assert choose(on, inc, cores=lambda: 1).replay_route(50) == (Route.IN_PROCESS, 950)  # one core: no gain
    assert choose(on, inc, cores=lambda: 8).tasks == 3  # no more tasks than saved partitions
    # off by default, and then no session is asked for its cores
    assert choose(conf, inc, cores=_no_cores).replay_route(10**6) == (Route.IN_PROCESS, 10**6 + 900)
