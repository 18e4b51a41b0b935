"""A shard task streams its partition window by window (`frames.segment_shards`, `coordinator.streamed`): with the
tiniest window (one log batch) it gives the broker scenarios' and the real segments' state and history exactly as
the engine loading each partition whole (`replay_rows`, which test_replay_brokerdata / test_replay_realdata hold
to the brokers' ground truth). The task function runs here in this process, as a Spark task would run it."""
from __future__ import annotations

import pickle
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipelines.coordinator.options import ReplayOptions
from pipelines.coordinator.shard import engine_rows, load_shards, replay_rows, tabulate_shards
from pipelines.coordinator.streamed import WHOLE_STATE, _without
from pipelines.coordinator.tables import named_group_history, topic_names
from pipelines.decoding.reader import iter_decoded_rows
from pipelines.frames.decode import decode_items, work_batches, plan_inputs
from pipelines.frames.envelope import DecodedTally, GroupEventsFile, HistoryRows, Markers, ShardStates, decode
from pipelines.frames.segment_shards import ShardLoad, WorkUnit, decode_and_load_task, decoded_windows
from pipelines.frames.tally import tally_rows
from pipelines.io.blobs import from_blob
from pipelines.io.scratch import Scratch
from schemas.decoded import DECODED_RECORD_SCHEMA
from tests.coordinator.harness import as_rows, assert_same
from tests.coordinator.test_replay_brokerdata import SCENARIOS
from tests.coordinator.test_replay_realdata import data_dirs
from tests.depth import cases
from tests.test_incremental import warn_settings  # noqa: F401 (a fixture)

HUGE = 1 << 40


def _task_tables(data_dir, options: ReplayOptions, window_bytes: int) -> tuple[dict, pa.Table, pa.Table]:
    """The snapshot's tables (the history with them), the tally and the markers the shard tasks give for a
    broker data dir, each offsets partition streamed in windows of `window_bytes`, every shard in one slice."""
    plan = plan_inputs([data_dir])
    items = pa.Table.from_batches(work_batches(plan))
    parts = sorted(set(items.column("offsets_partition").to_pylist()))
    shards = [WorkUnit(p, items.filter(pc.equal(items.column("offsets_partition"), p))) for p in parts]
    scratch = Scratch(tempfile.mkdtemp(prefix="scratch-"))
    task = decode_and_load_task([shards], policy=plan.policy, load=ShardLoad(
        options=options, scratch=scratch, cut=(options.until_offset, options.until_time_ms), window_bytes=window_bytes))
    return envelope_tables(pa.Table.from_batches(list(task(iter([pa.record_batch([pa.array([0])], names=["id"])])))),
                           options, scratch)


def envelope_tables(out: pa.Table, options: ReplayOptions, scratch: Scratch) -> tuple[dict, pa.Table, pa.Table]:
    """The snapshot's tables (the history with them), the tally and the markers of shard tasks' envelope rows (their
    group events in the files they wrote to `scratch`, which are then deleted)."""
    payloads = list(decode(out))
    states = [s for p in payloads if isinstance(p, ShardStates) for s in pickle.loads(p.states)]
    ends = [p for p in payloads if isinstance(p, DecodedTally)]
    names = [from_blob(p.named) for p in ends if p.named is not None]
    names = topic_names(pa.concat_tables(names).to_pylist()) if names else {}
    tally = [from_blob(p.tally) for p in ends]
    tabulated = tabulate_shards(states, options, None, names)
    # the tasks took their group events as they loaded them, window by window
    assert not tabulated["group_history"].num_rows
    files = [p for p in payloads if isinstance(p, GroupEventsFile)]
    events = [scratch.read_rows(p.file) for p in files]
    assert [p.count for p in files] == [e.num_rows for e in events]
    written = Path(scratch.uri)  # beside the files a split partition's ranges handed on
    assert not files or {p.file for p in files} <= {p.name for p in written.iterdir()}
    scratch.discard()
    if events:
        tabulated["group_history"] = named_group_history(pa.concat_tables(events), names)
    tables = as_rows(tabulated)
    history = [from_blob(p.rows) for p in payloads if isinstance(p, HistoryRows)]
    tables["offset_commits"] = engine_rows(pa.concat_tables(history)) if history else []
    return tables, pa.concat_tables(tally), pa.concat_tables([from_blob(p.rows) for p in payloads
                                                              if isinstance(p, Markers)])


def _reference(data_dir, options: ReplayOptions) -> dict:
    return replay_rows(list(iter_decoded_rows([data_dir])), options)


# many-groups (the most windows: 7.1 of this test's 15.6 s) loads under the modern semantics only; every other
# scenario under both, as test_split_partitions cuts them.
@pytest.mark.parametrize("scenario,semantics", [(s, m) for s in SCENARIOS for m in ("modern", "legacy")
                                                if (s, m) != ("many-groups", "legacy")])
@pytest.mark.slow  # every broker scenario / every real log, a window per batch
def test_one_batch_windows_give_the_broker_scenarios_state_and_history(brokerdata, scenario, semantics):
    options = ReplayOptions(semantics=semantics, snapshot_id="w", num_partitions=50)
    data = brokerdata / scenario / "data"
    want = _reference(data, options)
    tiny, tally, _ = _task_tables(data, options, 1)
    assert_same(tiny, want, f"{scenario} one batch per window")
    whole, whole_tally, _ = _task_tables(data, options, HUGE)
    assert_same(whole, want, f"{scenario} one window")
    # every record is tallied once, whatever the windows
    assert tally.group_by(["offsets_partition", "label"]).aggregate([("n", "sum")]).sort_by(
        [("offsets_partition", "ascending"), ("label", "ascending")]).equals(
        whole_tally.group_by(["offsets_partition", "label"]).aggregate([("n", "sum")]).sort_by(
            [("offsets_partition", "ascending"), ("label", "ascending")]))
    assert pc.sum(tally.column("n")).as_py() == len(list(iter_decoded_rows([data])))


def test_transactions_decided_in_a_later_window_get_their_outcome(brokerdata):
    """The transactions scenario has markers after their records: with one batch per window every record's
    outcome comes from a later window, and none is left pending that the whole log decides."""
    options = ReplayOptions(semantics="modern", snapshot_id="w", num_partitions=50)
    tiny, _, markers = _task_tables(brokerdata / "transactions" / "data", options, 1)
    outcomes = [r["txn_outcome"] for r in tiny["offset_commits"] if r["txn_outcome"] is not None]
    assert markers.num_rows and {"committed", "aborted"} & set(outcomes)
    want = _reference(brokerdata / "transactions" / "data", options)
    assert sorted(map(str, outcomes)) == sorted(str(r["txn_outcome"]) for r in want["offset_commits"]
                                                if r["txn_outcome"] is not None)


@pytest.mark.slow  # every broker scenario / every real log, a window per batch
@pytest.mark.parametrize("semantics,window", [("legacy", 1), ("modern", 512)])
def test_one_batch_windows_give_the_real_segments_state_and_history(realdata, semantics, window):
    """Windows of `window` bytes (1: one batch each), or of 1/300 of a real log's largest partition when that is
    more. That matters for the three largest logs (850 to 3,050 batches): each is loaded in 280 to 390 windows,
    window ends still falling between its batches throughout. The other real logs are loaded one batch per window
    (one of them in 206 windows for its 208 batches), and so are the broker scenarios above."""
    options = ReplayOptions(semantics=semantics, snapshot_id="w")
    for d in data_dirs(realdata):
        largest = max(sum(f.stat().st_size for f in p.glob("*.log")) for p in d.glob("__consumer_offsets-*"))
        want = _reference(d, options)
        got, _, _ = _task_tables(d, options, max(window, largest // 300))
        assert_same(got, want, str(d))


def cut_in_half(brokerdata, cut: str):
    """(data dir, its decoded rows, options) of three broker scenarios, each cut halfway by offset or by time."""
    for scenario in ("transactions", "kip848", "deletes"):
        data = brokerdata / scenario / "data"
        rows = list(iter_decoded_rows([data]))
        if cut == "offset":
            bound = dict(until_offset=sorted(r["offset"] for r in rows)[len(rows) // 2])
        else:
            bound = dict(until_time_ms=sorted(r["timestamp"] for r in rows if r["timestamp"])[len(rows) // 2])
        yield data, rows, ReplayOptions(semantics="modern", snapshot_id="w", num_partitions=50, **bound)


@pytest.mark.parametrize("cut", ["offset", "time"])
def test_a_cut_streams_like_the_whole_log(brokerdata, cut):
    for data, rows, options in cut_in_half(brokerdata, cut):
        bound = (options.until_offset, options.until_time_ms)
        scenario = data.parent.name
        got, tally, _ = _task_tables(data, options, 1)
        assert_same(got, _reference(data, options), f"{scenario} {bound}")
        whole = tally_rows(pa.Table.from_pylist(rows, schema=DECODED_RECORD_SCHEMA), options.until_offset,
                           options.until_time_ms)
        for column in ("n", "late_offset", "late_time"):
            assert pc.sum(tally.column(column)).as_py() == pc.sum(whole.column(column)).as_py(), column
        assert pc.sum(tally.column("late_offset" if cut == "offset" else "late_time")).as_py() > 0


def _decoded(data_dir):
    plan = plan_inputs([data_dir])
    return [b for b in decode_items(iter(work_batches(plan)), plan.policy) if b.num_rows]


@pytest.mark.parametrize("window", [1, 200, 4096, HUGE])
def test_windows_are_whole_log_batches_in_order_and_at_least_their_size(realdata, window):
    for d in data_dirs(realdata)[:4]:
        batches = _decoded(d)
        by_part = {}
        for b in batches:
            by_part.setdefault(b.column("offsets_partition")[0].as_py(), []).append(b)
        for part, bs in by_part.items():
            windows = list(decoded_windows(iter(bs), window))
            whole = pa.Table.from_batches(bs)
            assert pa.concat_tables(windows).equals(whole)  # every row once, in order
            keys = [list(zip(w.column("source").to_pylist(), w.column("batch_position").to_pylist()))
                    for w in windows]
            for a, b in zip(keys, keys[1:]):
                assert a[-1] != b[0]  # no log batch straddles two windows
                if len({s for s, _ in a}) == 1 and a[0][0] == b[0][0]:  # both in one file
                    assert a[-1][1] - a[0][1] < window <= b[0][1] - a[0][1]  # closed at the first batch past it
            if window == HUGE:
                assert len(windows) == 1


def test_load_shards_in_windows_of_rows_gives_the_whole_load(brokerdata):
    """The in-process path is the same streamed shard: windows of one row give the whole load."""
    options = ReplayOptions(semantics="modern", snapshot_id="w", num_partitions=50)
    for scenario in ("transactions", "kip848", "classic-basic"):
        table = pa.Table.from_pylist(list(iter_decoded_rows([brokerdata / scenario / "data"])),
                                     schema=DECODED_RECORD_SCHEMA)
        one, whole = load_shards(table, options, window_rows=1), load_shards(table, options)
        assert one.history.equals(whole.history), scenario
        a = as_rows(tabulate_shards(one.states, options, None, topic_names(one.naming.to_pylist())))
        b = as_rows(tabulate_shards(whole.states, options, None, topic_names(whole.naming.to_pylist())))
        assert_same(a, b, scenario)


@pytest.mark.parametrize("semantics", ["modern", "legacy"])
def test_a_state_only_load_in_windows_of_rows_gives_the_whole_state(brokerdata, semantics):
    """history=False (a restore plan's replay) reads no outcomes, so the loaders are not given the transactional
    records a later plain commit overwrites nor the markers that end nothing they were given; a marker that ends a
    transaction an earlier window left open is still loaded: windows of a few rows give the whole log's state."""
    options = ReplayOptions(semantics=semantics, snapshot_id="w", num_partitions=50)
    for scenario in ("transactions", "kip848", "deletes"):
        table = pa.Table.from_pylist(list(iter_decoded_rows([brokerdata / scenario / "data"])),
                                     schema=DECODED_RECORD_SCHEMA)
        whole = load_shards(table, options)
        b = as_rows(tabulate_shards(whole.states, options, None, topic_names(whole.naming.to_pylist())))
        b.pop("group_history")
        assert b["loaded_offsets"], scenario
        for rows in (1, 2, 3, 5, 8):
            one = load_shards(table, options, mode=WHOLE_STATE, window_rows=rows)
            assert one.history.num_rows == 0
            a = as_rows(tabulate_shards(one.states, options, None, topic_names(one.naming.to_pylist())))
            a.pop("group_history")
            assert_same(a, b, f"{scenario} state only, {rows} rows per window")


@pytest.mark.spark
def test_a_rebuild_on_spark_in_one_batch_windows_is_the_in_process_rebuild(spark, warn_settings, brokerdata,
                                                                             tmp_path):
    """The setting reaches the tasks: a rebuild whose shard tasks read one log batch at a time writes the snapshot
    (state tables, history, quarantine) the in-process rebuild of the same log writes. The windows themselves are
    held to the engine under both semantics above (`test_one_batch_windows_give_the_broker_scenarios_…`)."""
    from dataclasses import replace

    from tests.test_incremental import rebuild, snapshot_rows, spark_replay_settings

    tiny = spark_replay_settings(warn_settings)
    tiny = replace(tiny, raw={**tiny.raw, "decode": {**tiny.section("decode"), "load_buffer_bytes": 1}})
    inputs = [brokerdata / "transactions" / "data"]
    rebuild(spark, warn_settings, inputs, tmp_path / "local", "s", semantics="modern")
    tiny_run = rebuild(spark, tiny, inputs, tmp_path / "tiny", "s", semantics="modern")
    assert any("decoded and loaded by one task" in ln for ln in tiny_run.lines), tiny_run.lines  # the shards' tasks
    want, got = snapshot_rows(tmp_path / "local", "s"), snapshot_rows(tmp_path / "tiny", "s")
    assert got == want
    assert want["offset_commits"] and want["loaded_offsets"]


def _overlapping_copy(data_dir, into):
    """`data_dir` with each offsets partition's log cut in two overlapping segment files, as a log directory
    copied over an older copy leaves it: the first file holds the log up to a batch past its middle, the second
    (named by its base offset) from a batch before its middle to the end, so the batches in between are read
    twice, from both files. The partitions of fewer than three log batches are copied as they are."""
    import shutil

    rows = [r for r in iter_decoded_rows([data_dir]) if r["batch_position"] is not None and r["offset"] is not None]
    overlapped = 0
    for part_dir in sorted(p for p in data_dir.iterdir() if p.name.startswith("__consumer_offsets-")):
        out = into / part_dir.name
        out.mkdir(parents=True)
        for log in part_dir.glob("*.log"):
            source = str(log)
            batches = sorted({(r["batch_position"], r["batch_first_offset"] if r["batch_first_offset"] is not None
                               else r["offset"]) for r in rows if r["source"] == source})
            data = log.read_bytes()
            if len(batches) < 3 or log.name != "00000000000000000000.log":
                shutil.copyfile(log, out / log.name)
                continue
            (second_at, second_base), (first_end, _) = batches[len(batches) // 3], batches[2 * len(batches) // 3]
            (out / log.name).write_bytes(data[:first_end])
            (out / f"{second_base:020d}.log").write_bytes(data[second_at:])
            overlapped += 1
    return overlapped


@pytest.mark.parametrize("semantics", ["modern", "legacy"])
def test_overlapping_segments_split_over_windows_give_the_whole_load(brokerdata, tmp_path, semantics):
    """A record read twice (two overlapping segment files) in two windows is loaded, written and tallied as the
    whole partition in one window takes it: one history row per record, the state of the log without the copy,
    every record read accounted for (the entries Kafka's loader passes over: rows standing for their records)."""
    options = ReplayOptions(semantics=semantics, snapshot_id="w", num_partitions=50)
    for scenario in ("transactions", "kip848", "deletes", "classic-basic"):
        original = brokerdata / scenario / "data"
        data = tmp_path / scenario
        assert _overlapping_copy(original, data), scenario
        want = _reference(original, options)
        assert_same(_reference(data, options), want, f"{scenario} overlapping, in-process")
        whole, whole_tally, _ = _task_tables(data, options, HUGE)
        assert_same(whole, want, f"{scenario} overlapping, one window")
        tiny, tally, _ = _task_tables(data, options, 1)
        assert_same(tiny, want, f"{scenario} overlapping, one batch per window")
        assert len(tiny["offset_commits"]) == len({(r["offsets_partition"], r["record_offset"])
                                                   for r in tiny["offset_commits"]})
        by_label = [t.group_by(["offsets_partition", "label"]).aggregate([("n", "sum")]).sort_by(
            [("offsets_partition", "ascending"), ("label", "ascending")]) for t in (tally, whole_tally)]
        assert by_label[0].equals(by_label[1]), scenario
        read = len(list(iter_decoded_rows([data])))
        errors = pc.equal(tally.column("label"), "error")
        assert pc.sum(tally.filter(pc.invert(errors)).column("n")).as_py() \
            + (pc.sum(tally.filter(errors).column("quarantined")).as_py() or 0) \
            == read > len(list(iter_decoded_rows([original])))


@given(n=st.integers(0, 60), data=st.data())
@settings(max_examples=cases(deep=300, quick=60), deadline=None, database=None)
def test_a_table_without_some_rows_is_the_filtered_table(n, data):
    """`streamed._without` (the rows a window settles, without those it holds back): sliced around a few rows,
    filtered past `WITHOUT_SLICES_MAX`, the rows Arrow's filter keeps, whatever the table's chunks."""
    table = pa.table({"offset": pa.array(range(n), pa.int64()), "group_id": pa.array([f"g{i % 7}" for i in range(n)])})
    cuts = sorted(set(data.draw(st.lists(st.integers(0, n), max_size=3))))
    table = pa.concat_tables([table.slice(a, b - a) for a, b in zip([0, *cuts], [*cuts, n])]) if n else table
    dropped = np.array(sorted(set(data.draw(st.lists(st.integers(0, max(n - 1, 0)), max_size=40)))) if n else [],
                       np.int64)
    keep = np.ones(n, bool)
    keep[dropped] = False
    assert _without(table, dropped).equals(table.filter(pa.array(keep)))
