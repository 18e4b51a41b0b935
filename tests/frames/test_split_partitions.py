"""A split offsets partition (`frames.ranges`) gives the state and history of the whole log. Cut at every entry
(`split_bytes=1`: each log batch a range of its own, so every transaction, group deletion and re-creation spans a
cut), the broker scenarios and the real segments give, through the task functions a Spark run runs, what the engine
loading each partition whole gives (`replay_rows`, which test_replay_brokerdata / test_replay_realdata hold to the
brokers' ground truth). On generated logs, both semantics, cut anywhere, the ranges' loads and the split load give
the streamed whole log's state, history, pending rows and markers."""
from __future__ import annotations

import tempfile
from unittest import mock

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipelines.coordinator.decoded import batch_starts, batch_windows
from pipelines.coordinator.options import ReplayOptions
from pipelines.coordinator import streamed
from pipelines.coordinator.shard import replay_rows, tabulate_shards
from pipelines.coordinator.saved import SavedShard, saved_shards
from pipelines.coordinator.streamed import RANGE, StreamedShards, load_split
from pipelines.coordinator.tables import group_history_table, named_group_history, topic_names
from pipelines.decoding.reader import iter_decoded_rows
from pipelines.decoding.segments import entry_heads
from pipelines.frames.decode import count_items, plan_inputs, summed_counts, work_batches, work_table
from pipelines.frames.ranges import NO_FLOOR, log_ranges
from pipelines.frames.envelope import KeptRowsFile, decode, encode
from pipelines.frames.segment_shards import (ShardLoad, balanced, counted_items, decode_and_load_task,
                                             split_load_task, split_loads, work_units)
from pipelines.frames.tally import Tally, tally_rows
from pipelines.io.scratch import Scratch
from schemas.decoded import DECODED_RECORD_SCHEMA
from tests.coordinator.harness import as_rows, assert_same, canon
from tests.coordinator.rowkit import to_table
from tests.coordinator.test_replay_brokerdata import SCENARIOS
from tests.coordinator.test_replay_differential import build_log, kafka_like_log, log_ops
from tests.coordinator.test_replay_realdata import data_dirs
from tests.frames.test_segment_shards import _shard_view
from tests.frames.test_streamed_shards import cut_in_half, envelope_tables
from tests.depth import cases

HYPO = settings(max_examples=cases(deep=200, quick=35), deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _split_tables(data_dir, options: ReplayOptions, split_bytes: int, window_bytes: int = 1 << 40,
                  buckets: int = 1):
    """The snapshot's tables, the tally and the markers the task functions give for a broker data dir with every
    offsets partition over `split_bytes` cut into ranges: the ranges' tasks, then each split partition's load (in
    `buckets` of its groups, a shard each)."""
    plan = plan_inputs([data_dir])
    work = pa.Table.from_batches(work_batches(plan))
    by_shard: dict[int, list[int]] = {}
    for i, p in enumerate(work.column("offsets_partition").to_pylist()):
        by_shard.setdefault(p, []).append(i)
    units = work_units(work, by_shard, split_bytes)
    load = ShardLoad(options=options, scratch=Scratch(tempfile.mkdtemp(prefix="scratch-")),
                     cut=(options.until_offset, options.until_time_ms), window_bytes=window_bytes, buckets=buckets)
    task = decode_and_load_task([list(units.values())], policy=plan.policy, load=load)
    payloads = list(decode(pa.Table.from_batches(list(task(iter([_ids(0)]))))))
    passed = [p for p in payloads if isinstance(p, KeptRowsFile)]
    for shard in sorted({p.shard for p in passed}):
        assert sorted({p.bucket for p in passed if p.shard == shard}) == list(range(buckets))
    tasks = split_loads(passed, buckets, tasks=4)
    loads = [batch for i in range(len(tasks)) for batch in split_load_task(load, tasks)(iter([_ids(i)]))]
    out = pa.Table.from_batches([encode(p for p in payloads if not isinstance(p, KeptRowsFile)), *loads])
    tables, tally, markers = envelope_tables(out, options, load.scratch)
    return tables, tally, markers, units


def _ids(*ids: int) -> pa.RecordBatch:
    """A `spark.range` batch: the ids of the tasks a task function runs as."""
    return pa.record_batch([pa.array(ids, pa.int64())], names=["id"])


def _ranges(units) -> int:
    return sum(1 for unit in units.values() if unit.piece is not None)


# Each semantics with its groups in several buckets; one bucket (an incremental run's split load) is
# test_a_cut_splits_like_the_whole_log's, and the property test below draws 1-4 buckets under both semantics.
# many-groups, the scenario of most ranges (764, over 50 partitions; half this test's time), is split
# under the modern semantics only; every other scenario under both.
EVERY_ENTRY = [pytest.param(scenario, semantics, buckets, id=f"{scenario}-{semantics}-{buckets}")
               for scenario in SCENARIOS for semantics, buckets in (("modern", 3), ("legacy", 2))
               if (scenario, semantics) != ("many-groups", "legacy")]


@pytest.mark.slow  # every broker scenario / every real log, in ranges
@pytest.mark.parametrize("scenario,semantics,buckets", EVERY_ENTRY)
def test_every_entry_a_range_gives_the_broker_scenarios_state_and_history(brokerdata, scenario, semantics, buckets):
    options = ReplayOptions(semantics=semantics, snapshot_id="w", num_partitions=50)
    data = brokerdata / scenario / "data"
    want = replay_rows(list(iter_decoded_rows([data])), options)
    got, tally, markers, units = _split_tables(data, options, split_bytes=1, window_bytes=1, buckets=buckets)
    assert _ranges(units) > 1
    assert_same(got, want, f"{scenario} split at every entry")
    # the tally too, where the log lacks offsets included (compacted: a batch the cleaner thinned ends past its
    # last record, so a range's reading starts from the last record before it, not the batch's last offset)
    rows = pa.Table.from_pylist(list(iter_decoded_rows([data])), schema=DECODED_RECORD_SCHEMA)
    whole = tally_rows(rows, after=plan_inputs([data]).read_before())
    assert pc.sum(tally.column("n")).as_py() == rows.num_rows
    assert Tally(tally).log_gaps() == Tally(whole).log_gaps()


@pytest.mark.slow  # every broker scenario / every real log, in ranges
@pytest.mark.parametrize("semantics", ["legacy", "modern"])
def test_ranges_give_the_real_segments_state_and_history(realdata, semantics):
    options = ReplayOptions(semantics=semantics, snapshot_id="w")
    for d in data_dirs(realdata):
        largest = max(sum(f.stat().st_size for f in p.glob("*.log")) for p in d.glob("__consumer_offsets-*"))
        # about 8 ranges, their groups in 3 buckets
        got, _, _, units = _split_tables(d, options, split_bytes=max(1, largest // 8), buckets=3)
        assert_same(got, replay_rows(list(iter_decoded_rows([d])), options), str(d))


@pytest.mark.parametrize("cut", ["offset", "time"])
def test_a_cut_splits_like_the_whole_log(brokerdata, cut):
    for data, rows, options in cut_in_half(brokerdata, cut):
        got, tally, _, _ = _split_tables(data, options, split_bytes=1)
        assert_same(got, replay_rows(rows, options), f"{data.parent.name} cut by {cut}")
        whole = tally_rows(pa.Table.from_pylist(rows, schema=DECODED_RECORD_SCHEMA),
                           options.until_offset, options.until_time_ms)
        assert pc.sum(tally.column("n")).as_py() == pc.sum(whole.column("n")).as_py()


def test_ranges_cut_at_entries_and_cover_every_byte(brokerdata):
    plan = plan_inputs([brokerdata / "transactions" / "data"])
    work = pa.Table.from_batches(work_batches(plan))
    for part in sorted(set(work.column("offsets_partition").to_pylist())):
        items = work.filter(pc.equal(work.column("offsets_partition"), part)).to_pylist()
        total = sum(i["size"] for i in items)
        ranges = log_ranges(part, items, total // 3 + 1)
        if ranges is None:
            continue
        assert len(ranges) >= 2 and ranges[0].floor == NO_FLOOR
        assert sum(r.bytes for r in ranges) == total
        floors = [r.floor for r in ranges]
        assert floors == sorted(floors) and floors[-1] > NO_FLOOR
        assert log_ranges(part, items, total) is None  # no larger than the setting: whole
        # three ranges' worth on two cores: cut for four (as fine as its entries allow), every byte still once
        even = log_ranges(part, items, total // 3 + 1, cores=2)
        assert len(even) >= len(ranges) and max(map(_records, even)) <= max(map(_records, ranges))
        assert sum(r.bytes for r in even) == total
        # the ranges hold about as many records each: none more than its share and one entry's
        held = sum(map(_records, even))
        assert held == sum(map(_records, ranges))
        largest = max(int(entry_heads(i["path"]).records.max()) for i in items if i["size"])
        assert max(map(_records, even)) <= -(-held // 4) + largest


def test_the_accounting_counts_each_file_once_whole_in_the_task_that_decodes_its_first_bytes(brokerdata):
    """A split partition's tasks decode ranges of its files; the reader's own count (`ReaderCounts`) walks each file
    whole, once, in the task that decodes its first bytes: over every task, the records of the log."""
    data = brokerdata / "many-groups" / "data"
    plan = plan_inputs([data])
    work = work_table(plan)
    by_shard: dict[int, list[int]] = {}
    for i, p in enumerate(work.column("offsets_partition").to_pylist()):
        by_shard.setdefault(p, []).append(i)
    units = work_units(work, by_shard, split_bytes=1)
    assert _ranges(units) > 1
    slices = [[units[u] for u in us] for us in balanced({u: units[u].size for u in units}, 4)]
    counted = counted_items(work, slices)
    assert sorted(work.column("path").to_pylist()) == sorted(p for t in counted for p in t.column("path").to_pylist())
    for items, units_of_task in zip(counted, slices):
        firsts = {(i["path"], i["start_position"]) for u in units_of_task for i in u.items.to_pylist()}
        assert all((i["path"], i["start_position"]) in firsts for i in items.to_pylist())
    counts = summed_counts(r for items in counted for b in count_items(iter(items.to_batches()), plan.policy)
                           for r in b.to_pylist())
    assert sum(c["records_in"] for c in counts.values()) == sum(1 for _ in iter_decoded_rows([data]))
    assert all(c["bytes_unread"] == 0 for c in counts.values())


def _records(piece) -> int:
    """The records a range's entries hold, as their heads tell (`segments.entry_heads`)."""
    from pipelines.frames.decode import end_position

    n = 0
    for item in piece.items:
        heads = entry_heads(item["path"], item.get("start_position") or 0)
        end = end_position(item)
        n += int(heads.records[heads.positions < end].sum() if end is not None else heads.records.sum())
    return n


def test_a_copied_segment_across_ranges_is_loaded_once(brokerdata, tmp_path):
    """A partition dir holding its segment twice (a copy named after a later base offset): Kafka's loader reads the
    first to its end and asks the copy for nothing past it, so the copy's records are quarantined rows standing for
    them (`overlapping_segment`), never loaded or written again."""
    import shutil

    src = brokerdata / "transactions" / "data"
    options = ReplayOptions(semantics="modern", snapshot_id="w", num_partitions=50)
    want = replay_rows(list(iter_decoded_rows([src])), options)
    copy = tmp_path / "data"
    shutil.copytree(src, copy)
    copied = 0
    for seg in copy.glob("__consumer_offsets-*/*.log"):
        if seg.stat().st_size:
            shutil.copy(seg, seg.with_name(f"{int(seg.stem) + 1:020d}.log"))
            copied += 1
    assert copied
    got, tally, _, units = _split_tables(copy, options, split_bytes=1)
    assert _ranges(units) > 1
    assert_same(got, want, "copied segments")
    records = pc.equal(tally.column("label"), "error")
    read = len(list(iter_decoded_rows([src])))
    assert pc.sum(tally.filter(pc.invert(records)).column("n")).as_py() == read
    assert pc.sum(tally.filter(records).column("quarantined")).as_py() == read


# ------------------------------------------------------------------------------------------ generated logs, any cut
def _streamed(table: pa.Table, options: ReplayOptions, cuts: list[int], buckets: int = 1, range_window: int = 0):
    """The states, history rows (as settled, then pending), markers, group events taken as they were loaded
    (None: left in the states) and saved shard of `table` (one partition) loaded whole, or cut at `cuts` (each moved
    on to the end of its log batch: a range holds whole entries, `frames.ranges`) into ranges loaded as the split
    tasks load them (each in windows of `range_window` rows, to the end of a batch; 0: one): the ranges' kept rows in
    `buckets` by group, each loaded on its own into a shard of its groups, bucket 0's alone with the markers; their
    saved shards resumed as one."""
    if not cuts:
        whole = StreamedShards(options)
        history = whole.load(table, last=False)
        done = whole.finish()
        return done.states, [history], done.pending, done.markers, None, _saved(done)
    starts = batch_starts(table)
    bounds = sorted({0, *(int(starts[np.searchsorted(starts, c)]) for c in cuts), table.num_rows})
    passed, history = [], []
    top = NO_FLOOR
    for a, b in zip(bounds, bounds[1:]):
        piece = table.slice(a, b - a)
        loader = StreamedShards(options, floor={} if top == NO_FLOOR else {0: top}, mode=RANGE)
        for at, end in batch_windows(piece, range_window or max(piece.num_rows, 1)):
            history.append(loader.load(piece.slice(at, end - at)))
        done = loader.finish()
        assert not done.pending.num_rows  # a range writes its plain values only
        passed.append(loader.passed_on(buckets))
        offsets = [o for o in piece.column("offset").to_pylist() if o is not None]
        top = max([top, *offsets])
    settled, parts = [], []
    for b in range(buckets):
        kept = [k[b] for k in passed if k is not None]
        *got, done = load_split(options, kept)
        if b:
            done.markers = done.markers.slice(0, 0)
        settled.extend(got)
        parts.append(done)
    history.extend(rows for rows, _ in settled)
    pending = pa.concat_tables([p.pending.cast(parts[0].pending.schema) for p in parts])
    return ([s for p in parts for s in p.states], history, pending, parts[0].markers,
            [e for _, events in settled for e in events],
            SavedShard.union([s for p in parts if (s := _saved(p)) is not None]))


def _saved(done) -> SavedShard | None:
    """The shard a load saves for the next `--incremental` run (of partition 0; None: it loaded nothing there)."""
    return saved_shards(done.states, done.pending, done.naming, done.markers).get(0)


def _compared(table: pa.Table, semantics: str, cuts: list[int], buckets: int = 1, range_window: int = 0) -> dict:
    options = ReplayOptions(semantics=semantics, snapshot_id="s", load_time_ms=5, num_partitions=50)
    states, history, pending, markers, events, saved = _streamed(table, options, cuts, buckets, range_window)
    names = topic_names(table.to_pylist())
    tabulated = tabulate_shards(states, options, None, names)
    if events is not None:  # taken window by window, as the split load's task takes them
        assert not tabulated["group_history"].num_rows
        tabulated["group_history"] = named_group_history(
            pa.concat_tables([group_history_table(got, "s", part) for part, got in events]
                             or [group_history_table((), "s", 0)]), names)
    tables = {t: canon(r) for t, r in as_rows(tabulated).items()}
    rows = pa.concat_tables([h for h in history if h is not None and h.num_rows] or [pending.slice(0, 0)])
    key = lambda r: (r["record_offset"], sorted((k, str(v)) for k, v in r.items()))  # noqa: E731
    return {**tables, "history": sorted(rows.to_pylist(), key=key), "pending": sorted(pending.to_pylist(), key=key),
            "markers": sorted(markers.to_pylist(), key=lambda r: r["offset"]), "saved": _shard_view(saved)}


@pytest.mark.parametrize("semantics", ["legacy", "modern"])
@pytest.mark.parametrize("ops", [log_ops, kafka_like_log], ids=["any_log", "kafka_like_log"])
@HYPO
@given(data=st.data())
def test_ranges_load_like_the_whole_log(semantics, ops, data):
    unknown = ReplayOptions(semantics=semantics).unknown_key_types  # skipped before a load, as errors are
    rows = [r for r in build_log(data.draw(ops, label="ops"), partition=0).rows
            if r["record_kind"] not in ("error", "unknown") and r.get("key_type") not in unknown]
    if not rows:
        return
    table = to_table(rows)
    cuts = sorted(set(data.draw(st.lists(st.integers(1, max(1, table.num_rows - 1)), max_size=6), label="cuts")))
    cuts = [c for c in cuts if 0 < c < table.num_rows]
    buckets = data.draw(st.integers(1, 4), label="buckets")
    # how many kept rows a load holds back to reduce across ranges, and loads at a time (`streamed.across_ranges`)
    held = data.draw(st.sampled_from([0, 1, 3, streamed.ACROSS_RANGES_ROWS]), label="across_ranges_rows")
    window = data.draw(st.sampled_from([1, 2, streamed.WINDOW_ROWS]), label="window_rows")
    # the share a reduction across ranges may keep for the next to follow (0: the first is the last)
    keep = data.draw(st.sampled_from([0.0, 0.75, 1.0]), label="across_ranges_keep")
    # a range's own windows, and how many rows it hands on past twice what its last reduction left before it reduces
    # them again (`StreamedShards._pass_on`: 0, at every window)
    range_window = data.draw(st.sampled_from([0, 1, 3]), label="range_window")
    slack = data.draw(st.sampled_from([0, 2, streamed.PASS_ON_SLACK_ROWS]), label="pass_on_slack_rows")
    whole = _compared(table, semantics, [])
    with mock.patch.object(streamed, "ACROSS_RANGES_ROWS", held), mock.patch.object(streamed, "WINDOW_ROWS", window), \
            mock.patch.object(streamed, "PASS_ON_SLACK_ROWS", slack), \
            mock.patch.object(streamed, "ACROSS_RANGES_KEEP", keep):
        split = _compared(table, semantics, cuts, buckets, range_window)
    for t in whole:
        assert split[t] == whole[t], (f"{semantics} {t} cut at {cuts}, groups in {buckets} buckets, held {held}, "
                                      f"keep {keep}, ranges in windows of {range_window}, slack {slack}")


def test_a_bucket_whose_only_naming_record_is_a_tombstone_saves_no_namer():
    """Found by the property above: a bucket whose groups' only type-4 record is a tombstone saved that tombstone as
    a topic's namer, where the whole partition's load (the same tombstone among others) saved none."""
    ops = [("cg_delete", "g0"), ("commit", "g0", ("a", 0), 0, -1), ("commit", "g0", ("a", 0), 0, -1),
           ("commit", "g0", ("a", 0), 0, -1), ("cg_delete", "g0"), ("cg_delete", "g1")]
    table = to_table([r for r in build_log(ops, partition=0).rows if r["record_kind"] not in ("error", "unknown")])
    whole = _compared(table, "modern", [])
    assert _compared(table, "modern", [1], buckets=3) == whole


def test_entries_the_loader_passes_over_are_no_floor_of_the_ranges_after_them(tmp_path):
    """A (base 0) holds 0..5, B (base 2) holds 2..7, and the loader reads A's 0 and 1 before B becomes the floor
    segment of the offset it asks for: A's 2..5 are passed over, so the range holding B reads on above offset 1 (not
    above A's 5, which would leave B's 2..5 out as copies)."""
    import json

    from pipelines.decoding.batch_writer import write_record_batch
    from pipelines.decoding.overlaps import kafka_reading
    from pipelines.decoding.segments import discover_segments

    d = tmp_path / "__consumer_offsets-0"
    d.mkdir(parents=True)
    size = len(write_record_batch([(b"k", b"v", 1000)], 0))
    for base, offsets in ((0, range(6)), (2, range(2, 8))):
        (d / f"{base:020d}.log").write_bytes(b"".join(write_record_batch([(b"k", b"v", 1000 + o)], o)
                                                      for o in offsets))
    segs, _ = discover_segments(d)
    reading = kafka_reading(segs, load_buffer_size=2 * size)
    items = [dict(kind="segment", path=s.path, offsets_partition=0, base_offset=s.base_offset, size=s.size,
                  unread=json.dumps(reading.unread.get(s.path)) if s.path in reading.unread else None) for s in segs]
    ranges = log_ranges(0, items, size)
    b_first = next(r for r in ranges if r.items[0]["base_offset"] == 2)
    assert b_first.floor == 1
