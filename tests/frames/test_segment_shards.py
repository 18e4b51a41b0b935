"""Segment input decoded and loaded in one task per offsets partition (`frames.segment_shards`): the broker's state,
every record accounted for, the quarantine of damaged logs, and the history's suspects under the run's own clock."""
from __future__ import annotations

import json
import tempfile
from dataclasses import replace

import pyarrow as pa
import pytest

from pipelines.coordinator.committed import CommittedOffsets
from pipelines.coordinator.options import REPLAY_TABLES, ReplayOptions
from pipelines.frames import segment_shards
from pipelines.io.checkpoint import StateStage, read_state_files, state_file_partitions
from pipelines.io.scratch import Scratch
from pipelines.rebuild.executor import loads_shards
from tests import badinputs as bi
from tests.coordinator.harness import assert_same, by_partition, canon, plain


SCENARIOS = ("classic-basic", "compacted", "compression-zstd", "deletes", "expiry", "kip848", "many-groups",
             "simple-consumers", "transactions")


def _shifted_plan(dirs):
    """One plan over several data dirs, dir i's partition p read as partition 50 * i + p (one job for all)."""
    from pipelines.frames.decode import plan_inputs

    items, total = [], 0
    for i, d in enumerate(dirs):
        plan = plan_inputs([d])
        items += [{**item, "offsets_partition": item["offsets_partition"] + 50 * i} for item in plan.items]
        total += plan.total_bytes
    return replace(plan, items=items, total_bytes=total, num_segments=len(items), in_process=False,
                   max_partition=max(i["offsets_partition"] for i in items))


def _shifted_rows(dirs):
    from pipelines.decoding.reader import iter_decoded_rows

    return [{**r, "offsets_partition": r["offsets_partition"] + 50 * i} if r.get("offsets_partition") is not None
            else r for i, d in enumerate(dirs) for r in iter_decoded_rows([d])]


def _on_spark(spark, plan, options, expiry=None, split_by=None, history_check=None, retain=True, split_bytes=0,
              buckets=1, events_in_hand=False):
    from pipelines.frames import segment_shards
    from pipelines.frames.shards import topic_names_of

    assert loads_shards(plan)
    load_options = ReplayOptions(semantics=options.semantics, until_offset=options.until_offset,
                                 until_time_ms=options.until_time_ms, snapshot_id=options.snapshot_id)
    # the shards saved for --incremental, written by the tasks into a state directory of their own
    state_stage = StateStage(tempfile.mkdtemp(prefix="state-")) if retain else None
    load = segment_shards.ShardLoad(options=load_options, scratch=Scratch(tempfile.mkdtemp(prefix="scratch-")),
                                    cut=(options.until_offset, options.until_time_ms), split_by=split_by,
                                    state_stage=state_stage, split_bytes=split_bytes, buckets=buckets)
    loaded = segment_shards.load_on_spark(spark, plan, load)
    shards = segment_shards.tabulate_on_spark(spark, loaded, options, expiry, topic_names_of(loaded.log),
                                              history_check=history_check, events_in_hand=events_in_hand)
    return loaded, shards


def _saved(saved, modern: bool) -> dict:
    """The shards the tasks saved (`io.checkpoint.SavedState`), as the next run reads them."""
    from pipelines.coordinator.saved import SavedShard

    return {p: SavedShard.union([SavedShard.from_bytes(b, f"partition {p}", p, modern)
                                 for b in read_state_files(saved.stage.uri, saved.files, p)])
            for p in state_file_partitions(saved.files)}


def _filled(v):
    """A loaded record's value without the columns it leaves null (a record holds those its kind fills in the rows
    it was loaded with: a null column may be absent)."""
    import dataclasses

    if isinstance(v, dict):
        return tuple(sorted((k, _filled(x)) for k, x in v.items() if x is not None))
    if isinstance(v, (list, tuple)):
        return tuple(_filled(x) for x in v)
    if dataclasses.is_dataclass(v):
        return (type(v).__name__, *(_filled(getattr(v, f.name)) for f in dataclasses.fields(v)))
    return v


def _shard_view(shard) -> tuple:
    """What a saved shard holds, comparable: its offsets, pending offsets, groups, open history, names, markers."""
    s = shard.state
    groups = sorted((g, repr(_filled(v)), repr(_filled(s.groups.last_group_record.get(g))))
                    for g, v in s.groups.groups.items())
    return (sorted(s.offsets.items()), sorted(CommittedOffsets(s.pending).items()), groups,
            sorted(map(repr, s.open_records.items())),
            *(sorted(map(repr, t.drop_columns([c for c in ("snapshot_id",) if c in t.column_names]).to_pylist()))
              for t in (shard.open_history, shard.naming, shard.markers)))


def _tables(shards) -> dict[str, list[dict]]:
    out = {}
    for t, table in shards.tables.items():
        if not isinstance(table, pa.Table):  # the history and the group history: blobs, on Spark
            frame = table.frame()
            table = pa.Table.from_pylist([r.asDict(recursive=True) for r in frame.collect()])
        out[t] = [{k: plain(v) for k, v in r.items()} for r in table.to_pylist()]
    return out


@pytest.mark.parametrize("cut,split_bytes", [(None, 0), ("mid-transaction", 0), ("mid-transaction", 700)],
                         ids=["whole", "cut", "cut-split"])
def test_segment_shards_give_what_the_engine_gives_on_broker_logs(spark, brokerdata, cut, split_bytes):
    """Nine broker scenarios in one job: every table (history included), the saved shards, the markers and the
    tally equal the engine's over the reference reader's rows (which `test_replay_brokerdata` holds to the broker's
    own state), with and without a cut inside an open transaction, and with every partition of more than
    `split_bytes` decoded in ranges and loaded by the second job (`frames.ranges`) in buckets of its groups, each
    bucket's shard tabulated and saved on its own."""
    import pyarrow.compute as pc

    from pipelines.coordinator.expiry import ExpiryOptions
    from pipelines.coordinator.decoded import transaction_markers
    from pipelines.coordinator.shard import replay_shards
    from pipelines.frames.tally import tally
    from pipelines.frames.tally import tally_rows
    from schemas.decoded import DECODED_RECORD_SCHEMA

    dirs = [brokerdata / s / "data" for s in SCENARIOS]
    rows = _shifted_rows(dirs)
    until = None
    if cut:  # the offset of the first transactional commit of the transactions scenario
        i = SCENARIOS.index("transactions")
        until = min(r["offset"] for r in rows if r["offsets_partition"] is not None
                    and r["offsets_partition"] // 50 == i and r["record_kind"] == "offset_commit"
                    and (r.get("producer_id") or -1) != -1)
    options = ReplayOptions(semantics="modern", until_offset=until, num_partitions=50 * len(dirs),
                            snapshot_id="fused", load_time_ms=1)
    expiry = ExpiryOptions(as_of_ms=max(r["timestamp"] or 0 for r in rows), semantics="modern", kafka_version="4.0")
    # the group history made in this process once (a run of few group records), by Spark's tasks otherwise
    loaded, shards = _on_spark(spark, _shifted_plan(dirs), options, expiry, split_bytes=split_bytes,
                               buckets=3 if split_bytes else 1, events_in_hand=not cut)
    try:
        if split_bytes:
            assert len(loaded.persisted) == 2  # some partition was split: its groups loaded in buckets
        table = pa.Table.from_pylist(rows, schema=DECODED_RECORD_SCHEMA)
        want = replay_shards(table, options, expiry, keep=True)
        got = _tables(shards)
        ref = {t: [{k: plain(v) for k, v in r.items()} for r in a.to_pylist()] for t, a in want.tables.items()}
        state = tuple(REPLAY_TABLES)
        parts = by_partition({t: got[t] for t in state})
        ref_parts = by_partition({t: ref[t] for t in state})
        assert set(parts) == set(ref_parts) and len(parts) > 9
        for p in ref_parts:
            assert_same(parts[p], ref_parts[p], f"{SCENARIOS[p // 50]} partition {p % 50}")
        assert isinstance(shards.tables["group_history"], pa.Table) == (not cut)
        if cut:  # counted off the kept envelope, not by a pass over the rows: the write holds its files to it
            assert shards.counted == {"group_history": len(got["group_history"])}
        for t in ("offset_commits", "expired_offsets", "expired_groups", "group_history"):
            assert canon(got[t]) == canon(ref[t]), t
        assert len(got["offset_commits"]) > 100
        got_saved = _saved(shards.saved, options.is_modern)
        assert {p: _shard_view(s) for p, s in got_saved.items()} == \
            {p: _shard_view(s) for p, s in want.saved.items()}
        files = shards.saved.files  # a file per offsets partition, or per bucket of a split one's groups
        assert len(got_saved) > 0 and set(parts) <= state_file_partitions(files)
        assert (len(files) > len(state_file_partitions(files))) == bool(split_bytes)
        assert shards.saved.entries == sum(s.entries for s in want.saved.values())
        if cut:  # the open transaction's records are saved with their history rows
            assert sum(s.open_history.num_rows for s in got_saved.values())
        markers = transaction_markers(table, options)
        assert shards.markers.sort_by([("offsets_partition", "ascending"), ("offset", "ascending")]).to_pylist() == \
            markers.sort_by([("offsets_partition", "ascending"), ("offset", "ascending")]).to_pylist()
        order = [("offsets_partition", "ascending"), ("label", "ascending"), ("value_version", "ascending")]
        counted = tally(loaded.log).table.sort_by(order)
        expected = tally_rows(table, until, None, after=_shifted_plan(dirs).read_before()).sort_by(order)
        assert counted.to_pylist() == expected.to_pylist()
        if cut:
            assert pc.sum(pc.equal(pa.array([r["txn_outcome"] for r in got["offset_commits"]]), "pending")).as_py()
    finally:
        shards.release()


def test_damaged_and_real_logs_are_all_accounted_for(spark, shared_dir, tmp_path):
    """Real segments and a log with a torn tail and garbage: the records each task decoded balance the reader's own
    count from the batch headers, and the quarantine holds what the decoded log's does, row for row."""
    from pipelines.frames import segment_shards
    from pipelines.frames.decode import decoded_log, plan_inputs, reader_counts
    from pipelines.frames.tally import tally
    from pipelines.state.quarantine import quarantine_table
    from pipelines.validation.accounting import Accounting

    inputs = bi.real_and_damaged_inputs(shared_dir, tmp_path, brokers=2)
    if not inputs:
        pytest.skip("no real segments")
    quarantined = 0
    for n, path in enumerate(inputs):
        plan = plan_inputs([path])
        if not loads_shards(plan):
            continue
        loaded = segment_shards.load_on_spark(spark, plan, segment_shards.ShardLoad(
            options=ReplayOptions(snapshot_id="q"), scratch=Scratch(str(tmp_path / f"scratch-{n}")),
            state_stage=StateStage(str(tmp_path / f"state-{n}"))))
        try:
            # the tasks' own count is the reader's, and balances what they decoded
            assert loaded.read_counts == reader_counts(spark, plan), path
            acc = Accounting.from_tally(tally(loaded.log), loaded.read_counts)
            assert acc.unbalanced() == [], path
            got = sorted(map(repr, quarantine_table(loaded.log, "q").collect()))
            log = decoded_log(spark, plan, cut=(None, None)).persist()
            want = sorted(map(repr, quarantine_table(log, "q").collect()))
            log.unpersist()
            assert got == want, path
            quarantined += len(got)
        finally:
            loaded.release()
    assert quarantined > 0  # the damaged log's tail is there


def test_suspects_split_before_the_clock_hold_or_are_picked_again(settings):
    """A shard's suspects split with a clock no run reaches are the run's own where its values stay inside the
    run's bounds; a commit timestamp past as_of + skew makes them not hold (the shard is picked again)."""
    import datetime as dt

    from pipelines.validation.runner import UNKNOWN_CLOCK_MS, history_check
    from schemas.tables import TABLES

    as_of = 1_700_000_000_000
    early = history_check(settings, as_of_ms=UNKNOWN_CLOCK_MS, num_partitions=50)
    real = history_check(settings, as_of_ms=as_of, num_partitions=50)
    schema = pa.schema([f.with_nullable(True) for f in TABLES["offset_commits"]])

    def history(commit_ms: list[int]) -> pa.Table:
        n = len(commit_ms)
        data = {f.name: [None] * n for f in schema}
        data.update(offsets_partition=[3] * n, record_offset=list(range(n)), committed_offset=[5] * n,
                    commit_timestamp=[dt.datetime.fromtimestamp(t / 1000, dt.timezone.utc) for t in commit_ms])
        return pa.table(data, schema=schema)

    inside = history([as_of - 1000 * i for i in range(5)])
    part = early.split(inside)
    assert real.holds_for(part, early)
    assert set(real.split(inside).column("record_offset").to_pylist()) <= set(part.column("record_offset").to_pylist())
    late = history([as_of, as_of + 10 * 86_400_000])
    assert early.split(late).num_rows == 0 and real.split(late).num_rows == 1
    assert not real.holds_for(early.split(late), early)
    assert real.holds_for(real.split(late), real)
    assert json.loads(part.schema.metadata[b"offsetlake.suspects"])["rows"] == 5


def test_a_rebuild_on_spark_validates_a_late_commit_picked_again(spark, settings, tmp_path):
    """A full rebuild of segments on Spark whose clock is the newest record (the default): the shards split their
    suspects before it is known, a commit timestamped ten days later than any record makes its shard's suspects be
    picked again, and GX reports exactly that row, over the whole history."""
    from pipelines.rebuild import RebuildRequest, run_rebuild
    from tests.test_incremental import spark_replay_settings

    g = bi.group_in(0, "late")
    key, value, _ = bi.commit(g, 1, 200, bi.T0 + 10 * 86_400_000)
    bi.write_segment(tmp_path / "in" / "__consumer_offsets-0", 0,
                     bi.batch([bi.group_record(g, bi.T0)], 0)
                     + b"".join(bi.batch([bi.commit(g, 0, 100 + i, bi.T0 + i + 1)], i + 1) for i in range(3))
                     + bi.batch([(key, value, bi.T0 + 9)], 4))
    summary = run_rebuild(spark, spark_replay_settings(settings), RebuildRequest(
        inputs=(str(tmp_path / "in"),), warehouse=str(tmp_path / "wh"), snapshot_id="late"))
    assert summary.task_cpu_seconds.get("decode") is not None  # decoded and loaded in the shards' tasks
    report = json.loads((tmp_path / "wh" / "_reports" / "late.json").read_text())
    suite = next(s for s in report["suites"] if s["name"] == "offset_commits")
    outcomes = {e["id"].split(".")[-1]: e for e in suite["expectations"]}
    late = outcomes["commit_timestamp_plausible"]
    assert not late["success"] and late["unexpected_count"] == 1 and late["element_count"] == 4, late
    assert all(e["success"] for k, e in outcomes.items() if k != "commit_timestamp_plausible")


def test_the_shards_write_the_history_a_run_in_the_driver_writes(spark, settings, brokerdata, tmp_path, monkeypatch):
    """A full rebuild on Spark into a fresh warehouse: the shards' tasks write the history's files and the run
    commits them; the table is the one a rebuild in the driver writes, one offsets partition per file, the rows
    of open transactions in `pending-*` files (a cut inside a transaction leaves one open). The group history too,
    from the files of group events the shards' tasks wrote: read in the driver, or (the split run) named and
    written by Spark's tasks."""
    from dataclasses import replace

    import pyarrow.parquet as pq
    from deltalake import DeltaTable

    from pipelines.io import delta
    from pipelines.io.warehouse import Warehouse
    from pipelines.rebuild import RebuildRequest, run_rebuild, stages
    from tests.test_incremental import spark_replay_settings

    data = brokerdata / "transactions" / "data"
    rows = _shifted_rows([data])
    until = min(r["offset"] for r in rows if r["record_kind"] == "offset_commit" and (r.get("producer_id") or -1) != -1)
    tables, events = {}, {}
    split = spark_replay_settings(settings)
    split = replace(split, raw={**split.raw, "decode": {**split.section("decode"), "split_bytes": 300}})
    for name, conf in (("spark", spark_replay_settings(settings)), ("split", split), ("driver", settings)):
        wh = tmp_path / name
        # read from the tasks' files in the driver, or by the write's tasks
        monkeypatch.setattr(stages, "GROUP_EVENTS_IN_HAND", -1 if name == "split" else 100_000)
        summary = run_rebuild(spark, conf, RebuildRequest(inputs=(str(data),), warehouse=str(wh), snapshot_id="h",
                                                          semantics="modern", until_offset=until + 1))
        assert (summary.task_cpu_seconds.get("load") is not None) == (name != "driver")
        table = Warehouse(str(wh)).read_table("offset_commits")
        tables[name] = sorted(map(repr, table.sort_by([("offsets_partition", "ascending"),
                                                        ("record_offset", "ascending")]).to_pylist()))
        events[name] = sorted(map(repr, Warehouse(str(wh)).read_table("group_history", snapshot_id="h").to_pylist()))
        if name != "driver":
            root = wh / "offset_commits"
            files = delta.active_files(DeltaTable(str(root)))
            assert any(f["path"].startswith("pending-") for f in files)
            for f in files:
                got = pq.read_table(root / f["path"]).to_pylist()
                assert len({r["offsets_partition"] for r in got}) == 1
                assert ("pending" in {r["txn_outcome"] for r in got}) == f["path"].startswith("pending-")
            written = {str(p.relative_to(root)) for p in root.rglob("*.parquet")}
            assert written == {f["path"] for f in files}  # nothing staged beside what was committed
            # the group history too, staged by Spark's tasks while the run validated
            root = wh / "group_history"
            written = {str(p.relative_to(root)) for p in root.rglob("*.parquet")}
            assert written == {f["path"] for f in delta.active_files(DeltaTable(str(root)))} and written
            # the files of group events the tasks wrote for it gone with the run
            assert not [p for p in (wh / "_scratch").rglob("*") if p.is_file()]
    assert tables["spark"] == tables["driver"] and tables["spark"]
    assert tables["split"] == tables["driver"]
    assert events["spark"] == events["split"] == events["driver"] and events["driver"]


def test_a_run_that_fails_after_the_shards_leaves_no_history_file(spark, settings, tmp_path):
    """--strict meets a quarantined record once the shards have written the history's files and the shards the
    next run resumes: the run stops and the files it staged are gone (the table holds nothing, no state is left)."""
    from pipelines.rebuild import RebuildRequest, StrictModeError, run_rebuild
    from tests.test_incremental import spark_replay_settings

    src, _g = bi.clean_small(tmp_path / "in")
    seg = next(src.rglob("*.log"))
    seg.write_bytes(seg.read_bytes()[:-7] + b"\xff" * 40)
    with pytest.raises(StrictModeError):
        run_rebuild(spark, spark_replay_settings(settings), RebuildRequest(
            inputs=(str(src),), warehouse=str(tmp_path / "wh"), snapshot_id="strict", strict=True))
    assert not list((tmp_path / "wh" / "offset_commits").rglob("*.parquet"))
    assert not [p for p in (tmp_path / "wh" / "_state").rglob("*") if p.is_file()]
    assert not [p for p in (tmp_path / "wh" / "_scratch").rglob("*") if p.is_file()]


def test_each_bucket_of_a_split_partition_is_loaded_by_a_task_of_its_own():
    """The split loads' tasks: every bucket of a partition in a task of its own, every (partition, bucket) in its own
    while there are no more than the tasks, each pair's files whole and in the ranges' log order."""
    from pipelines.frames.envelope import KeptRowsFile

    for split, buckets in [([2], 2), ([2, 4, 11, 12], 2), ([2, 4, 11, 12, 16], 2), (list(range(50)), 1), ([7], 8),
                           ([0, 49], 3), ([3, 5, 8], 4)]:
        kept = [KeptRowsFile(shard=shard, file=f"{shard}-{b}-{r}", range_index=r, bucket=b)
                for r in (2, 0, 1) for shard in split for b in range(buckets)]
        tasks = segment_shards.split_loads(kept, buckets, 8)
        pairs = len(split) * buckets
        assert len(tasks) == max(buckets, min(pairs, 8)) and all(tasks), (split, buckets, tasks)
        loads = [load for task in tasks for load in task]
        assert sorted((load[0].shard, load[0].bucket) for load in loads) == sorted(
            (shard, b) for shard in split for b in range(buckets))
        for load in loads:
            assert [k.file for k in load] == [f"{load[0].shard}-{load[0].bucket}-{r}" for r in range(3)]
        for task in tasks:
            assert len({load[0].shard for load in task}) == len(task), (split, buckets, tasks)  # no partition twice
