"""`rebuild --incremental` gives exactly the snapshot a full rebuild of the same input gives (pipelines/incremental.py).

Each case: a full rebuild of the whole input in one warehouse; in another, a base run on a prefix of the log (what
yesterday's dump looked like, `logtools.cut_log_dir`) and an incremental run on the whole input. Every snapshot
table is read back and compared (snapshot_id ignored); the quarantine and the record counts of an incremental run
cover the new bytes only, so base + incremental == full for those. Rebuilds are slow here: inputs are small and
each rebuild is shared through module fixtures.
"""
from __future__ import annotations

import json
import re
import shutil
import tempfile
import time
from pathlib import Path

import pytest

from tests import logtools


COMPARED = ("loaded_offsets", "empty_group_offsets", "loaded_groups", "group_members", "removed_groups",
            "pending_offsets", "expired_offsets", "expired_groups", "group_history")


# ---------------------------------------------------------------------------------------------------- helpers
def cut_log_dir(src: Path, dst: Path, **kw) -> dict[int, int]:
    return logtools.cut_log_dir(Path(src), Path(dst), **kw)


@pytest.fixture(scope="module")
def warn_settings():
    """Validation warns instead of failing: these tests compare incremental with full, whatever the suites say
    (other engineers are changing replay/validation concurrently; the suites have their own tests)."""
    from pipelines.config import load_settings

    return load_settings(env="ci", overrides={"validation": {"policy": "warn"}})


def rebuild(spark, warn_settings, inputs, warehouse, snapshot_id, **kw):
    from pipelines.rebuild import RebuildRequest, run_rebuild

    lines: list[str] = []
    t0 = time.monotonic()
    summary = run_rebuild(spark, warn_settings, RebuildRequest(inputs=tuple(map(str, inputs)), warehouse=str(warehouse),
                                                          snapshot_id=snapshot_id, **kw), emit=lines.append)
    summary.elapsed = time.monotonic() - t0  # type: ignore[attr-defined]
    summary.lines = lines  # type: ignore[attr-defined]
    if summary.status != "succeeded":
        report = json.loads((Path(warehouse) / "_reports" / f"{snapshot_id}.json").read_text())
        failed = [(e["id"], e.get("unexpected_count"), json.dumps(e.get("examples"), default=str)[:300])
                  for s in report.get("suites", []) for e in s.get("expectations", []) if e.get("success") is False]
        pytest.fail(f"{snapshot_id}: {summary.status}: {failed}")
    return summary


def _canon(table, drop=("snapshot_id",)) -> list[str]:
    cols = [c for c in table.column_names if c not in drop]
    return sorted(json.dumps(r, sort_keys=True, default=str) for r in table.select(cols).to_pylist())


def snapshot_rows(warehouse, snapshot_id) -> dict[str, list[str]]:
    from pipelines.io.warehouse import Warehouse

    wh = Warehouse(warehouse)
    out = {t: _canon(wh.read_table(t, snapshot_id)) for t in COMPARED}
    out["offset_commits"] = _canon(wh.read_table("offset_commits"))  # history: every record once
    return out


def quarantine_keys(warehouse, snapshot_id) -> list[tuple]:
    from pipelines.io.warehouse import Warehouse

    q = Warehouse(warehouse).read_table("quarantine", snapshot_id).to_pylist()
    # the same file lives in another directory in each case: compare by partition dir / file name
    return sorted((Path(r["source"]).parent.name + "/" + Path(r["source"]).name, r["offsets_partition"],
                   r["position"], r["reason"]) for r in q)


def assert_same_snapshot(full_wh, full_id, inc_wh, inc_id):
    full, inc = snapshot_rows(full_wh, full_id), snapshot_rows(inc_wh, inc_id)
    for t in full:
        assert inc[t] == full[t], f"{t}: incremental differs from full ({len(inc[t])} vs {len(full[t])} rows)"
    assert any(full[t] for t in ("loaded_offsets", "loaded_groups")), "a trivial comparison"


def spark_replay_settings(settings):
    """`settings` with the in-process decode and replay of small runs turned off: every run decodes and replays on
    Spark."""
    from dataclasses import replace

    return replace(settings, raw={**settings.raw,
                                  "rebuild": {**settings.section("rebuild"), "local_replay_max_rows": 0},
                                  "decode": {**settings.section("decode"), "in_process_max_bytes": 0}})


def tasks_replay_settings(settings):
    """`settings` with an incremental run decoded in the driver resuming its shards on Spark tasks (one per core)
    whatever its size (`frames.resumed`; the default keeps a small one in the driver)."""
    from dataclasses import replace

    return replace(settings, raw={**settings.raw, "rebuild": {**settings.section("rebuild"),
                                                              "resume_tasks_min_rows": 1}})


def engine_settings(settings, engine: str):
    """How an incremental run replays: `local` (in the driver: the default for small runs), `tasks` (decoded in the
    driver, resumed on one task per core) or `spark` (one task per offsets partition decodes and resumes)."""
    return {"local": settings, "tasks": tasks_replay_settings(settings),
            "spark": spark_replay_settings(settings)}[engine]


def assert_incremental_exact(spark, warn_settings, tmp: Path, full_input: Path, cut_input: Path, full_wh, full_id,
                             full_summary, engine: str = "local", **kw):
    """base run on `cut_input` + incremental run on `full_input` == the full run (always on Spark); returns the
    base and incremental summaries. `engine`: how the incremental run replays (`engine_settings`)."""
    wh = tmp / "wh"
    inc_settings = engine_settings(warn_settings, engine)
    # on Spark, the base run's shards are decoded and loaded by their tasks, which write the rows it keeps
    base = rebuild(spark, inc_settings, [cut_input], wh, "base", **kw)
    assert base.incremental["mode"] == "full"
    inc = rebuild(spark, inc_settings, [full_input], wh, "inc", incremental=True, **kw)
    assert inc.incremental["mode"] == "incremental", inc.incremental
    assert any("rows in this process" in line for line in inc.lines) == (engine == "local"), inc.lines
    assert any(re.search(r"rows in \d+ tasks", line) for line in inc.lines) == (engine == "tasks"), inc.lines
    assert any("new records onto" in line and "saved state entries" in line for line in inc.lines) == \
        (engine != "spark"), inc.lines
    # on Spark, the shards' tasks decode the new records and load them onto the shards the base run saved
    assert any("onto the shard the previous run saved" in line for line in inc.lines) == (engine == "spark")
    assert inc.incremental["replay"] == {"local": "in-process", "tasks": "tasks", "spark": "spark"}[engine]
    assert inc.incremental["previous_snapshot"] == "base"
    assert 0 < inc.incremental["new_bytes"] < full_summary.bytes_in
    assert any("incremental from snapshot base" in line for line in inc.lines)
    assert_same_snapshot(full_wh, full_id, wh, "inc")
    assert inc.as_of == full_summary.as_of
    # accounting and quarantine of an incremental run: the new records only, nothing lost, nothing twice
    assert inc.incremental["new_records"] == inc.records_in
    assert base.records_in + inc.records_in == full_summary.records_in
    assert base.records_quarantined + inc.records_quarantined == full_summary.records_quarantined
    assert sorted(quarantine_keys(wh, "base") + quarantine_keys(wh, "inc")) == quarantine_keys(full_wh, full_id)
    return base, inc


# ---------------------------------------------------------------------------------------------------- the sample
SAMPLE_KW = dict(num_partitions=3)  # the sample places groups over its 3 partitions
@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    from simulator import generate_sample

    d = tmp_path_factory.mktemp("sample") / "dump"
    generate_sample(d, records=2000, groups=30, partitions=3, seed=5, segment_bytes=16 * 1024)
    return d


@pytest.fixture(scope="module")
def sample_full(spark_on_demand, warn_settings, sample, tmp_path_factory):
    wh = tmp_path_factory.mktemp("sample_full") / "wh"
    return wh, rebuild(spark_on_demand, warn_settings, [sample], wh, "full", **SAMPLE_KW)


# this process's replay and the shards' tasks, end to end (the routes themselves are held to the whole log's load
# at the executor seam: test_every_route_loads_the_new_records_onto_the_saved_shards_as_the_whole_log_loads)
@pytest.mark.parametrize("fraction,engine", [(0.35, "local"), (0.8, "local"),
                                             pytest.param(0.35, "spark", marks=pytest.mark.spark)])
def test_sample_incremental_equals_full(spark_on_demand, warn_settings, sample, sample_full, tmp_path, fraction,
                                        engine):
    full_wh, full = sample_full
    cut = tmp_path / "cut"
    cut_log_dir(sample, cut, fraction=fraction)
    base, inc = assert_incremental_exact(spark_on_demand, warn_settings, tmp_path, sample, cut, full_wh, "full", full,
                                         engine=engine, **SAMPLE_KW)
    print(f"\nsample cut at {fraction}: full {full.elapsed:.1f}s, base {base.elapsed:.1f}s, "
          f"incremental {inc.elapsed:.1f}s ({inc.incremental['new_bytes']:,} of {full.bytes_in:,} bytes); "
          f"stages full {full.stage_seconds} incremental {inc.stage_seconds}")
    from pipelines.io.checkpoint import read_checkpoint

    cp = read_checkpoint(wh := tmp_path / "wh", "inc")
    assert cp["mode"] == "incremental" and cp["previous_snapshot"] == "base"
    # the state the checkpoint names, and nothing else of the id (a task's file per offsets partition on Spark)
    state = wh / cp["decoded_state"]
    assert [p.name for p in (wh / "_state" / "inc").iterdir()] == [state.name]
    assert sorted(p.name for p in state.iterdir()) == cp["decoded_files"]
    from pipelines.io.checkpoint import state_file_partitions

    # a file per offsets partition, whoever wrote it (the driver or the shards' tasks)
    base_files = read_checkpoint(wh, "base")["decoded_files"]
    assert len(base_files) == 3 and state_file_partitions(base_files) == {0, 1, 2}, base_files
    # and names each file's sha256, whoever wrote it (an incremental run refuses another file's bytes)
    assert sorted(read_checkpoint(wh, "base")["decoded_sha256"]) == base_files
    assert sorted(cp["decoded_sha256"]) == cp["decoded_files"]
    # the checkpoint of an incremental run covers the whole input, as a full run's would
    full_cp = read_checkpoint(full_wh, "full")
    assert {p: v["segments"] for p, v in cp["partitions"].items()} == \
        {p: v["segments"] for p, v in full_cp["partitions"].items()}
    assert {p: v["next_offset"] for p, v in cp["partitions"].items()} == \
        {p: v["next_offset"] for p, v in full_cp["partitions"].items()}
    assert cp["max_timestamp"] == full_cp["max_timestamp"]


@pytest.mark.spark
def test_an_incremental_run_on_the_shards_reports_a_discovery_problem(spark_on_demand, warn_settings, sample,
                                                                     sample_full, tmp_path):
    """A `.swap` file beside the segments (an incomplete split's leftover, reported, not read) in an incremental run
    too big for the driver: the shards' tasks take the run, the problem is a quarantined row of its partition, and the
    state is the full run's."""
    full_wh, full = sample_full
    conf = spark_replay_settings(warn_settings)
    cut = tmp_path / "cut"
    cut_log_dir(sample, cut, fraction=0.5)
    wh = tmp_path / "wh"
    rebuild(spark_on_demand, conf, [cut], wh, "base", **SAMPLE_KW)
    grown = tmp_path / "grown"
    shutil.copytree(sample, grown)
    part = sorted(p for p in grown.iterdir() if p.is_dir())[0]
    (part / "00000000000000000000.log.swap").write_bytes(b"\0" * 64)
    (part / "00000000000000000000.log.cleaned").write_bytes(b"")  # so the swap is an incomplete split's: not read
    inc = rebuild(spark_on_demand, conf, [grown], wh, "inc", incremental=True, **SAMPLE_KW)
    assert inc.incremental["mode"] == "incremental" and inc.incremental["replay"] == "spark", inc.incremental
    assert any(".swap" in k[0] for k in quarantine_keys(wh, "inc"))
    full_rows, inc_rows = snapshot_rows(full_wh, "full"), snapshot_rows(wh, "inc")
    for t in ("loaded_offsets", "loaded_groups", "pending_offsets", "offset_commits"):
        assert inc_rows[t] == full_rows[t], t


@pytest.mark.parametrize("engine", ["local", pytest.param("spark", marks=pytest.mark.spark)])
def test_an_altered_saved_shard_fails_the_run_in_one_line(spark_on_demand, warn_settings, sample, tmp_path, engine):
    """A saved shard altered in place (same size: not caught before the run) fails to load where it is read, in
    this process or in a shard's task: the run fails with one line naming the file, and runs again in full without
    --incremental."""
    from pipelines.io.checkpoint import read_checkpoint
    from pipelines.rebuild import RunFailed

    conf = engine_settings(warn_settings, engine)
    cut = tmp_path / "cut"
    cut_log_dir(sample, cut, fraction=0.5)
    wh = tmp_path / "wh"
    rebuild(spark_on_demand, conf, [cut], wh, "base", **SAMPLE_KW)
    cp = read_checkpoint(wh, "base")
    victim = wh / cp["decoded_state"] / cp["decoded_files"][0]
    data = bytearray(victim.read_bytes())
    at = data.index(b"\n") + 9 + 2  # inside the pickled state
    data[at:at + 8] = b"\xff" * 8
    victim.write_bytes(bytes(data))
    with pytest.raises(RunFailed) as failed:
        rebuild(spark_on_demand, conf, [sample], wh, "inc", incremental=True, **SAMPLE_KW)
    assert "unreadable saved shard" in str(failed.value) and "\n" not in str(failed.value)
    assert "without --incremental" in str(failed.value)
    again = rebuild(spark_on_demand, conf, [sample], wh, "full", **SAMPLE_KW)
    assert again.incremental["mode"] == "full"



def test_a_saved_shard_of_another_partition_fails_the_run_in_one_line(spark_on_demand, warn_settings, sample,
                                                                      tmp_path):
    """A saved shard holding another offsets partition's state (a file copied over another, its size in the
    checkpoint edited to match) would resume that state under this partition; the run fails with one line saying
    so instead."""
    import hashlib

    from pipelines.io.checkpoint import read_checkpoint, write_checkpoint
    from pipelines.rebuild import RunFailed

    conf = engine_settings(warn_settings, "local")
    cut = tmp_path / "cut"
    cut_log_dir(sample, cut, fraction=0.5)
    wh = tmp_path / "wh"
    rebuild(spark_on_demand, conf, [cut], wh, "base", **SAMPLE_KW)
    cp = read_checkpoint(wh, "base")
    source, victim = (wh / cp["decoded_state"] / f for f in cp["decoded_files"][:2])
    victim.write_bytes(source.read_bytes())
    # the checkpoint rewritten as its writer would (sealed) to name the copy's size and sha256: the shard's own
    # check refuses it
    write_checkpoint(wh, "base", {**cp, "decoded_sizes": {**cp["decoded_sizes"], victim.name: victim.stat().st_size},
                                  "decoded_sha256": {**cp["decoded_sha256"],
                                                     victim.name: hashlib.sha256(victim.read_bytes()).hexdigest()}})
    with pytest.raises(RunFailed) as failed:
        rebuild(spark_on_demand, conf, [sample], wh, "inc", incremental=True, **SAMPLE_KW)
    assert "unreadable saved shard: the state of offsets partition" in str(failed.value)
    assert "\n" not in str(failed.value)

def test_the_history_is_appended_past_each_partition_not_rescanned(spark_on_demand, warn_settings, sample,
                                                                    sample_full, tmp_path, monkeypatch):
    """The history's files hold one offsets partition each; an incremental run reads back only the files that may
    hold a pending row (its markers may have come) and rewrites only those, and the history still equals the
    full run's (`assert_incremental_exact`)."""
    import pyarrow as pa
    from deltalake import DeltaTable

    from pipelines.io import delta

    full_wh, full = sample_full
    cut = tmp_path / "cut"
    cut_log_dir(sample, cut, fraction=0.5)
    read: list[str] = []
    on_spark, in_hand = delta.read_frame_files, delta.read_table_files

    def spy(spark, table_path, rel_paths, *a, **kw):
        if str(table_path).endswith("offset_commits"):
            read.extend(rel_paths)
        return on_spark(spark, table_path, rel_paths, *a, **kw)

    def spy_in_hand(table_path, rel_paths, *a, **kw):
        if str(table_path).endswith("offset_commits"):
            read.extend(rel_paths)
        return in_hand(table_path, rel_paths, *a, **kw)

    monkeypatch.setattr(delta, "read_frame_files", spy)
    monkeypatch.setattr(delta, "read_table_files", spy_in_hand)
    assert_incremental_exact(spark_on_demand, warn_settings, tmp_path, sample, cut, full_wh, "full", full, **SAMPLE_KW)
    history = DeltaTable(str(tmp_path / "wh" / "offset_commits"))
    files = pa.table(history.get_add_actions(flatten=True)).to_pylist()
    data = [f for f in files if not f["path"].startswith("pending-")]
    assert data and all(f["min.offsets_partition"] == f["max.offsets_partition"] for f in data)
    assert {f["min.offsets_partition"] for f in data} == set(range(3))
    # what the base run wrote: its data files were never read back, its pending file was, and was replaced
    version = next(h["version"] for h in history.history() if h.get("offsetlake.snapshot_id") == "base")
    base_files = pa.table(DeltaTable(str(tmp_path / "wh" / "offset_commits"), version=version).get_add_actions(
        flatten=True)).to_pylist()
    pending = {f["path"] for f in base_files if f["path"].startswith("pending-")}
    assert pending, "the cut leaves a transaction open"
    assert set(read) == pending, read
    assert not pending & {f["path"] for f in files}
    assert {f["path"] for f in base_files} - pending <= {f["path"] for f in files}


@pytest.mark.parametrize("engines", [("local", "local", "local"),
                                     pytest.param(("spark", "local", "spark"), marks=pytest.mark.spark),
                                     pytest.param(("local", "tasks", "tasks"), marks=pytest.mark.spark)])
def test_chain_of_incremental_runs_equals_full(spark_on_demand, warn_settings, sample, sample_full, tmp_path,
                                               engines):
    """Nightly: full, then two incremental runs, each resuming from the state the previous one kept (the second
    from the state the in-process replay computed). Mixed: the state the shards' tasks wrote (a file per offsets
    partition) resumed in this process, and the state this process wrote (one file) resumed by the tasks."""
    full_wh, full = sample_full
    wh = tmp_path / "wh"
    for i, fraction in enumerate((0.3, 0.7)):
        cut_log_dir(sample, tmp_path / f"cut{i}", fraction=fraction)
    conf = [engine_settings(warn_settings, e) for e in engines]
    first = rebuild(spark_on_demand, conf[0], [tmp_path / "cut0"], wh, "d0", **SAMPLE_KW)
    second = rebuild(spark_on_demand, conf[1], [tmp_path / "cut1"], wh, "d1", incremental=True, **SAMPLE_KW)
    third = rebuild(spark_on_demand, conf[2], [sample], wh, "d2", incremental=True, **SAMPLE_KW)
    assert [s.incremental.get("replay", "in-process") for s in (second, third)] == [
        {"local": "in-process", "tasks": "tasks", "spark": "spark"}[e] for e in engines[1:]]
    assert [s.incremental["mode"] for s in (first, second, third)] == ["full", "incremental", "incremental"]
    assert third.incremental["previous_snapshot"] == "d1"
    assert first.records_in + second.records_in + third.records_in == full.records_in
    assert second.records_in and third.records_in
    assert_same_snapshot(full_wh, "full", wh, "d2")
    # the state a run saves follows the coordinator's state, not the log
    from pipelines.io.checkpoint import read_checkpoint

    entries = read_checkpoint(wh, "d2")["state_entries"]
    assert 0 < entries < (full.records_in - full.records_quarantined) / 2


def test_a_rerun_that_failed_after_its_checkpoint_keeps_the_served_runs(spark_on_demand, warn_settings, sample,
                                                                         sample_full, tmp_path, monkeypatch):
    """A rerun of the served snapshot saves its state, then fails committing its tables: the old snapshot stays
    served, and so do its checkpoint and state, so the next run resumes them (it was a full rebuild: the rerun's
    checkpoint had replaced the served run's and its state deleted the served run's)."""
    from pipelines.io.checkpoint import read_checkpoint
    from pipelines.io.warehouse import Warehouse

    full_wh, _ = sample_full
    wh = tmp_path / "wh"
    cut_log_dir(sample, tmp_path / "cut0", fraction=0.3)
    cut_log_dir(sample, tmp_path / "cut1", fraction=0.7)
    rebuild(spark_on_demand, warn_settings, [tmp_path / "cut0"], wh, "d0", **SAMPLE_KW)
    served = read_checkpoint(wh, "d0")

    def dies(*args, **kwargs):
        raise RuntimeError("killed while committing")

    with monkeypatch.context() as m:
        m.setattr(Warehouse, "_commit_tables", dies)
        with pytest.raises(RuntimeError, match="killed while committing"):
            rebuild(spark_on_demand, warn_settings, [tmp_path / "cut1"], wh, "d0", **SAMPLE_KW)
    assert list((wh / "_attempts").iterdir())  # the rerun did get past its checkpoint stage
    assert read_checkpoint(wh, "d0") == served
    assert [d.name for d in (wh / "_state" / "d0").iterdir()] == [served["decoded_state"].rsplit("/", 1)[1]]
    s = rebuild(spark_on_demand, warn_settings, [sample], wh, "d1", incremental=True, **SAMPLE_KW)
    assert s.incremental["mode"] == "incremental" and s.incremental["previous_snapshot"] == "d0"
    assert_same_snapshot(full_wh, "full", wh, "d1")


def test_a_rerun_that_succeeds_is_the_base_of_the_next_run(spark_on_demand, warn_settings, sample, sample_full,
                                                           tmp_path):
    """A rerun of the served snapshot that succeeds publishes its checkpoint once its `runs` row is committed: the
    next run resumes the rerun's shards, and the served run's state is gone."""
    from pipelines.io.checkpoint import read_checkpoint
    from pipelines.io.warehouse import Warehouse

    full_wh, _ = sample_full
    wh = tmp_path / "wh"
    cut_log_dir(sample, tmp_path / "cut0", fraction=0.3)
    cut_log_dir(sample, tmp_path / "cut1", fraction=0.7)
    rebuild(spark_on_demand, warn_settings, [tmp_path / "cut0"], wh, "d0", **SAMPLE_KW)
    rerun = rebuild(spark_on_demand, warn_settings, [tmp_path / "cut1"], wh, "d0", **SAMPLE_KW)
    cp = read_checkpoint(wh, "d0")
    assert cp["started_ms"] == round(Warehouse(wh).served_row("d0", partial=False)["started_at"].timestamp() * 1000)
    assert [d.name for d in (wh / "_state" / "d0").iterdir()] == [cp["decoded_state"].rsplit("/", 1)[1]]
    s = rebuild(spark_on_demand, warn_settings, [sample], wh, "d1", incremental=True, **SAMPLE_KW)
    assert s.incremental["mode"] == "incremental" and s.incremental["previous_snapshot"] == "d0"
    assert rerun.records_in + s.records_in == sample_full[1].records_in
    assert_same_snapshot(full_wh, "full", wh, "d1")


def test_a_rerun_killed_between_its_runs_row_and_its_checkpoint_is_resumed(spark_on_demand, warn_settings, sample,
                                                                            sample_full, tmp_path, monkeypatch):
    """A rerun of the served snapshot killed after committing its `runs` row, before publishing its checkpoint: the
    next --incremental run was a full rebuild (the checkpoint left was the replaced run's), and the rerun's state
    stayed in `_state/<id>/` until that id's next successful rerun. The next run now publishes the checkpoint the
    rerun kept beside its state, resumes from it, and the replaced run's state goes."""
    from pipelines import incremental
    from pipelines.io.checkpoint import read_checkpoint
    from pipelines.io.warehouse import Warehouse

    full_wh, _ = sample_full
    wh = tmp_path / "wh"
    cut_log_dir(sample, tmp_path / "cut0", fraction=0.3)
    cut_log_dir(sample, tmp_path / "cut1", fraction=0.7)
    rebuild(spark_on_demand, warn_settings, [tmp_path / "cut0"], wh, "d0", **SAMPLE_KW)

    def killed(self):
        raise SystemExit("killed before publishing")

    with monkeypatch.context() as m:
        m.setattr(incremental.PendingCheckpoint, "publish", killed)
        with pytest.raises(SystemExit):
            rebuild(spark_on_demand, warn_settings, [tmp_path / "cut1"], wh, "d0", **SAMPLE_KW)
    started = Warehouse(wh).served_row("d0", partial=False)["started_at"]
    assert read_checkpoint(wh, "d0")["started_ms"] != round(started.timestamp() * 1000)  # the replaced run's
    assert len(list((wh / "_state" / "d0").iterdir())) == 2
    s = rebuild(spark_on_demand, warn_settings, [sample], wh, "d1", incremental=True, **SAMPLE_KW)
    assert s.incremental["mode"] == "incremental" and s.incremental["previous_snapshot"] == "d0"
    cp = read_checkpoint(wh, "d0")
    assert cp["started_ms"] == round(started.timestamp() * 1000)
    assert [d.name for d in (wh / "_state" / "d0").iterdir()] == [cp["decoded_state"].rsplit("/", 1)[1]]
    assert_same_snapshot(full_wh, "full", wh, "d1")
    # a rerun of d1 killed before its `runs` row (no clean-up ran: the state it saved stays) is cleaned by the next
    stray = wh / "_state" / "d1" / "decoded-killed0000"
    stray.mkdir()
    (stray / "checkpoint.json").write_text(json.dumps({**read_checkpoint(wh, "d1"), "started_ms": 1}))
    s = rebuild(spark_on_demand, warn_settings, [sample], wh, "d2", incremental=True, **SAMPLE_KW)
    assert s.incremental["mode"] == "incremental" and s.incremental["previous_snapshot"] == "d1"
    assert not stray.exists()


def test_a_torn_entry_read_again_is_no_gap_in_the_log(spark_on_demand, warn_settings, sample, tmp_path):
    """A size field running past the end of a segment that is not the last (a torn entry) left the incremental run's
    `log_gaps` saying the log was whole only from its first new offset on, as if the offsets the previous run read
    after that segment were missing; now they are the full run's. Each run also read the entry again and
    quarantined it again, so the chain's quarantine counts added up to more than the full run's."""
    torn = tmp_path / "torn"
    shutil.copytree(sample, torn)
    part = sorted(p for p in torn.iterdir() if p.is_dir() and len(list(p.glob("*.log"))) > 2)[0]
    victim = sorted(part.glob("*.log"))[0]
    data = bytearray(victim.read_bytes())
    pos = 0
    for _ in range(3):  # the fourth entry's size field claims more than the file holds
        pos += 12 + int.from_bytes(data[pos + 8:pos + 12], "big")
    data[pos + 8:pos + 12] = (2 ** 31 - 256).to_bytes(4, "big")
    victim.write_bytes(bytes(data))
    cut = tmp_path / "cut"
    shutil.copytree(torn, cut)
    for d in cut.iterdir():
        if d.is_dir() and len(list(d.glob("*.log"))) > 1:
            sorted(d.glob("*.log"))[-1].unlink()
    full = rebuild(spark_on_demand, warn_settings, [torn], tmp_path / "full", "full", **SAMPLE_KW)
    assert {int(p): g for p, g in full.log_gaps.items()}[int(part.name.rsplit("-", 1)[1])]["compacted_below"]
    base = rebuild(spark_on_demand, warn_settings, [cut], tmp_path / "wh", "base", **SAMPLE_KW)
    inc = rebuild(spark_on_demand, warn_settings, [torn], tmp_path / "wh", "inc", incremental=True, **SAMPLE_KW)
    assert inc.incremental["mode"] == "incremental"
    assert inc.log_gaps == full.log_gaps
    # the torn entry is quarantined once in the chain (each run reported it again, and its unread bytes)
    # (its row counts no record: `quarantine_rows` counts the rows, `records_quarantined` the records they stand for)
    assert base.quarantine_rows + inc.quarantine_rows == full.quarantine_rows > 0
    assert base.records_quarantined + inc.records_quarantined == full.records_quarantined
    assert base.bytes_unread + inc.bytes_unread == full.bytes_unread > 0
    assert sorted(quarantine_keys(tmp_path / "wh", "base") + quarantine_keys(tmp_path / "wh", "inc")) == \
        quarantine_keys(tmp_path / "full", "full")
    assert_same_snapshot(tmp_path / "full", "full", tmp_path / "wh", "inc")


def test_a_changed_read_policy_is_a_full_rebuild(spark_on_demand, warn_settings, sample, tmp_path):
    """Yesterday's run replayed a batch whose CRC fails (`--replay-corrupt-batches`), today's does not: resuming
    yesterday's shards kept that batch's commits, a snapshot no full rebuild of today's settings gives; now the
    run rebuilds in full and says why."""
    bad = tmp_path / "bad"
    shutil.copytree(sample, bad)
    part = sorted(p for p in bad.iterdir() if p.is_dir() and len(list(p.glob("*.log"))) > 1)[0]
    victim = sorted(part.glob("*.log"))[0]
    data = bytearray(victim.read_bytes())
    data[12 + 5] ^= 0x01  # the first batch's stored CRC: its records still parse
    victim.write_bytes(bytes(data))
    cut = tmp_path / "cut"
    cut_log_dir(bad, cut, fraction=0.5)
    full = rebuild(spark_on_demand, warn_settings, [bad], tmp_path / "full", "full", **SAMPLE_KW)
    assert full.records_quarantined
    rebuild(spark_on_demand, warn_settings, [cut], tmp_path / "wh", "base", replay_corrupt_batches=True, **SAMPLE_KW)
    inc = rebuild(spark_on_demand, warn_settings, [bad], tmp_path / "wh", "inc", incremental=True, **SAMPLE_KW)
    assert inc.incremental["mode"] == "full", inc.incremental
    assert inc.incremental["reason"].startswith("the read policy changed (rebuild.replay_corrupt_batches true")
    assert_same_snapshot(tmp_path / "full", "full", tmp_path / "wh", "inc")


def test_another_kafka_version_whose_coordinator_knows_other_key_types_is_a_full_rebuild(spark_on_demand,
                                                                                         warn_settings, tmp_path):
    """Yesterday's run emulated Kafka 3.9's new coordinator, which skips share group records; today's emulates
    4.0's, which replays them: resuming yesterday's shards would keep the share group's id a simple group's (its
    offsets in empty_group_offsets), a snapshot no full rebuild of today's settings gives; now the run rebuilds in
    full and says why."""
    from pipelines.decoding.batch_writer import write_record_batch
    from pipelines.decoding.message_writer import (write_group_record_key, write_group_record_value,
                                                   write_offset_commit_key, write_offset_commit_value)

    ts = 1_700_000_000_000
    part = tmp_path / "in" / "__consumer_offsets-0"
    part.mkdir(parents=True)
    first = [(write_group_record_key(11, "sg"), write_group_record_value(11, {"epoch": 2}, "4.0"), ts),
             (write_offset_commit_key("sg", "t", 0), write_offset_commit_value(3, offset=5, commit_timestamp=ts), ts)]
    (part / "00000000000000000000.log").write_bytes(write_record_batch(first, 0))
    kw = dict(semantics="modern", num_partitions=1)
    rebuild(spark_on_demand, warn_settings, [tmp_path / "in"], tmp_path / "wh", "base", kafka_version="3.9", **kw)
    more = [(write_offset_commit_key("sg", "t", 0), write_offset_commit_value(3, offset=6, commit_timestamp=ts), ts)]
    with open(part / "00000000000000000000.log", "ab") as f:
        f.write(write_record_batch(more, 2))
    inc = rebuild(spark_on_demand, warn_settings, [tmp_path / "in"], tmp_path / "wh", "inc", incremental=True,
                  kafka_version="4.0", **kw)
    assert inc.incremental["mode"] == "full", inc.incremental
    assert inc.incremental["reason"].startswith("the read policy changed"), inc.incremental
    rebuild(spark_on_demand, warn_settings, [tmp_path / "in"], tmp_path / "full", "full", kafka_version="4.0", **kw)
    assert_same_snapshot(tmp_path / "full", "full", tmp_path / "wh", "inc")
    assert (inc.offsets, inc.empty_group_offsets) == (1, 0)


def test_a_kafka_version_whose_streams_records_lack_a_field_is_another_read_policy():
    """4.1's StreamsGroupMetadataValue has no ValidatedTopologyEpoch, so a 4.1 replay leaves it out where a 4.2 one
    reads it (a streams group's NotReady state): a checkpoint of either is no resume point of the other. The other
    versions' policies name no fields, as before there were any."""
    from types import SimpleNamespace

    from pipelines.incremental.checkpoint import read_policy_of

    def policy(semantics, version):
        read = SimpleNamespace(replay_corrupt_batches=False, max_batch_bytes=1 << 20)
        return read_policy_of(SimpleNamespace(read_policy=read, semantics=semantics, kafka_version=version))

    assert policy("modern", "4.1")["unknown_fields"] == ["validated_topology_epoch"]
    assert policy("modern", "4.1") != policy("modern", "4.2")
    assert all("unknown_fields" not in policy(*c) for c in [("modern", "4.0"), ("modern", "4.2"), ("legacy", "4.1")])


def test_a_kafka_version_that_reads_fewer_value_versions_is_another_read_policy():
    """The old coordinator before 3.4.1 reads no v4 value (nor before 2.3 a GroupMetadata v3) and 4.1's reads only
    v0 of a type-0 key: the replay skips the others, so a checkpoint of such a version is no resume point of a
    version that reads them (the key types the legacy ones skip are the same). The versions that read every value
    the decoder reads name none, as before there were any."""
    from types import SimpleNamespace

    from pipelines.incremental.checkpoint import read_policy_of

    def policy(semantics, version):
        read = SimpleNamespace(replay_corrupt_batches=False, max_batch_bytes=1 << 20)
        return read_policy_of(SimpleNamespace(read_policy=read, semantics=semantics, kafka_version=version))

    assert policy("legacy", "3.3")["value_versions"] == {"0": 3, "1": 3, "2": 3}
    assert policy("legacy", "2.2")["value_versions"] == {"0": 3, "1": 3, "2": 2}
    assert policy("modern", "4.1")["value_versions"] == {"0": 0, "1": 4, "2": 4}
    assert policy("legacy", "0.9")["value_versions"] == {"0": 1, "1": 1, "2": 0}
    assert policy("legacy", "0.8.2")["value_versions"] == {"0": 0, "1": 1, "2": 0}
    assert policy("legacy", "3.3") != policy("legacy", "3.9") != policy("legacy", "2.2")
    assert policy("modern", "4.1") != policy("modern", "4.0")
    assert all("value_versions" not in policy(*c) for c in [("legacy", "3.4.1"), ("legacy", "3.9"),
                                                            ("modern", "3.9"), ("modern", "4.0")])


KAFKA_VERSIONS = ("0.8.0", "0.8.2", "0.9", "0.10.0", "0.10.1", "0.11", "1.0", "1.1", "2.0", "2.1", "2.2", "2.3", "2.4",
                  "2.8", "3.0", "3.3", "3.4", "3.4.1", "3.5", "3.6", "3.8", "3.9", "4.0", "4.1", "4.2")


def test_versions_of_one_read_policy_load_alike():
    """A resumed shard holds what its runs loaded: two Kafka versions whose coordinators load a record differently
    must be two read policies (a checkpoint of one no resume point of the other). Every rule the loader takes from
    the version (`ReplayOptions`) is compared over the versions of each policy. Before, legacy 2.3-2.8 and 3.0-3.4
    were one policy though 3.0's load fails at a GroupMetadata value listing a static instance id twice."""
    from types import SimpleNamespace

    from pipelines.coordinator.options import ReplayOptions
    from pipelines.incremental.checkpoint import read_policy_of

    rules = ("unknown_key_types", "limited_value_versions", "unknown_fields", "early_replays",
             "unique_static_members", "simple_group_replaced_by")
    loads: dict[str, set] = {}
    for semantics in ("legacy", "modern"):
        for version in KAFKA_VERSIONS:
            read = SimpleNamespace(replay_corrupt_batches=False, max_batch_bytes=1 << 20)
            policy = read_policy_of(SimpleNamespace(read_policy=read, semantics=semantics, kafka_version=version))
            options = ReplayOptions(semantics=semantics, kafka_version=version)
            loads.setdefault(json.dumps([semantics, policy], sort_keys=True), set()).add(
                tuple(getattr(options, r) for r in rules))
    assert all(len(v) == 1 for v in loads.values()), [v for v in loads.values() if len(v) > 1]
    # the versions whose loads are those of the versions before the rule was recorded name nothing new
    read = SimpleNamespace(replay_corrupt_batches=False, max_batch_bytes=1 << 20)
    assert all("repeated_instance_ids" not in read_policy_of(SimpleNamespace(read_policy=read, semantics=s,
                                                                            kafka_version=v))
               for s, v in [("legacy", "3.0"), ("legacy", "3.9"), ("modern", "3.9"), ("modern", "4.0")])


def _static_instance_listed_twice(root: Path) -> tuple[str, str, Path]:
    """A log dir whose partition 4 holds a group's GroupMetadata value listing one static instance id twice (loaded
    before Kafka 3.0, a load failure from 3.0), after a plain one; partition 0 a fine group's. (the group, the fine
    group, partition 0's segment)"""
    from pipelines.decoding import message_writer as mw
    from tests import badinputs as bi

    g, fine = bi.group_in(4, "static"), bi.group_in(0, "fine")
    members = [{"member_id": m, "group_instance_id": "instance-1"} for m in ("m1", "m2")]
    twice = (mw.write_group_metadata_key(g), mw.write_group_metadata_value(
        3, protocol_type="consumer", generation=2, protocol="range", leader="m1", members=members), bi.T0 + 1)
    bi.write_segment(root / "__consumer_offsets-4", 0, bi.batch([bi.group_record(g, bi.T0), twice], 0))
    zero = bi.write_segment(root / "__consumer_offsets-0", 0, bi.batch([bi.group_record(fine, bi.T0)], 0))
    return g, fine, zero


def test_a_kafka_version_whose_load_takes_a_repeated_static_member_is_a_full_rebuild(no_spark, settings, tmp_path):
    """A GroupMetadata value listing one static instance id twice, loaded by a base run emulating 2.8 (its
    `GroupMetadata.add` takes it), then an --incremental run emulating 3.0 (whose `add` throws: the load skips the
    record). Before, the run resumed the 2.8 shard: its snapshot served the group Stable with two members where a
    full 3.0 rebuild has it Empty and expired; now it is a full rebuild saying the read policy changed."""
    from pipelines.rebuild import RebuildRequest, run_rebuild

    from tests import badinputs as bi

    g, fine, zero = _static_instance_listed_twice(tmp_path / "in")

    def run(warehouse: Path, snapshot_id: str, version: str, **kw):
        summary = run_rebuild(no_spark, settings, RebuildRequest(
            inputs=(str(tmp_path / "in"),), warehouse=str(warehouse), snapshot_id=snapshot_id, semantics="legacy",
            kafka_version=version, **kw))
        assert summary.status == "succeeded", summary.validation
        return summary

    run(tmp_path / "wh", "base", "2.8")
    with zero.open("ab") as f:
        f.write(bi.batch([bi.commit(fine, 0, 7, bi.T0 + 2)], 1))
    after = run(tmp_path / "wh", "after", "3.0", incremental=True)
    assert after.incremental["mode"] == "full", after.incremental
    assert after.incremental["reason"].startswith("the read policy changed (") and \
        "repeated static instance ids loaded -> " in after.incremental["reason"], after.incremental["reason"]
    run(tmp_path / "full", "full", "3.0")
    assert snapshot_rows(tmp_path / "wh", "after") == snapshot_rows(tmp_path / "full", "full")
    from pipelines.io.warehouse import Warehouse

    groups = Warehouse(tmp_path / "wh").read_table("loaded_groups", "after").to_pylist()
    assert [(r["group_id"], r["state"]) for r in groups] == [(fine, "Empty")]


def test_fallback_log_start_moved(spark_on_demand, warn_settings, sample, tmp_path):
    """The first segment of a partition is gone (retention / compaction): full rebuild, with the reason."""
    wh = tmp_path / "wh"
    cut = tmp_path / "cut"
    cut_log_dir(sample, cut, fraction=0.5)
    rebuild(spark_on_demand, warn_settings, [cut], wh, "base", **SAMPLE_KW)
    moved = tmp_path / "moved"
    shutil.copytree(sample, moved)
    part = sorted(p for p in moved.iterdir() if p.is_dir() and len(list(p.glob("*.log"))) > 1)[0]
    sorted(part.glob("*.log"))[0].unlink()
    s = rebuild(spark_on_demand, warn_settings, [moved], wh, "after", incremental=True, **SAMPLE_KW)
    assert s.incremental["mode"] == "full"
    assert "log start moved / segments deleted or compacted" in s.incremental["reason"]
    assert s.incremental["previous_snapshot"] == "base"
    assert any("full rebuild: log start moved" in line for line in s.lines)

    # changed semantics: full (decided before any decoding; checked without another rebuild)
    from pipelines import incremental
    from pipelines.frames.decode import plan_inputs
    from pipelines.io.warehouse import Warehouse
    from pipelines.rebuild import RebuildRequest, resolve_settings

    def start(inputs, **kw):
        req = RebuildRequest(inputs=tuple(map(str, inputs)), warehouse=str(wh), incremental=True, **{**SAMPLE_KW, **kw})
        return incremental.start(Warehouse(wh), req, resolve_settings(warn_settings, req), plan_inputs(inputs), "x")

    assert start([moved]).mode == "incremental"  # "after" (a full run on `moved`) is the previous snapshot now
    assert "starts before the checkpoint's log start" in start([sample]).reason
    modern = start([moved], semantics="modern")
    assert modern.mode == "full" and modern.reason.startswith("semantics changed")
    until = start([moved], until_offset=10)
    assert until.mode == "full" and "--until" in until.reason
    tampered = tmp_path / "tampered"
    shutil.copytree(moved, tampered)
    victim = sorted((tampered / part.name).glob("*.log"))[0]
    data = bytearray(victim.read_bytes())
    data[100] ^= 0xFF
    victim.write_bytes(bytes(data))
    changed = start([tampered])
    assert changed.mode == "full" and "first bytes differ" in changed.reason
    # a file of the saved state gone: full, not a failed task
    from pipelines.io.checkpoint import read_checkpoint, write_checkpoint

    cp = read_checkpoint(wh, "after")
    (wh / cp["decoded_state"] / cp["decoded_files"][0]).unlink()
    lost = start([moved])
    assert lost.mode == "full" and "saved state is missing 1 file(s)" in lost.reason
    # a file of the saved state of another size than written (truncated, replaced): full, with the reason
    cp = read_checkpoint(wh, "after")
    write_checkpoint(wh, "after", {**cp, "decoded_files": cp["decoded_files"][1:]})  # the lost file not named
    victim = wh / cp["decoded_state"] / cp["decoded_files"][1]
    victim.write_bytes(victim.read_bytes()[:-10])
    truncated = start([moved])
    assert truncated.mode == "full" and "1 file(s) of another size" in truncated.reason, truncated.reason
    # a state saved by an older version (decoded rows to replay): full, with the reason
    write_checkpoint(wh, "after", {**cp, "format": 1})
    older = start([moved])
    assert older.mode == "full" and "saved by an older version" in older.reason
    # a shard layout this version does not read (its state types changed since): full, with the reason
    write_checkpoint(wh, "after", {**cp, "state_format": "0.x"})
    other = start([moved])
    assert other.mode == "full" and "saved in another format (0.x" in other.reason


def test_a_damaged_checkpoint_is_a_full_rebuild_with_the_reason(spark_on_demand, warn_settings, sample, tmp_path):
    """The previous snapshot's checkpoint edited or damaged (not JSON, not an object, a field gone or of another
    type): before, a traceback (JSONDecodeError, KeyError, TypeError) and a failed run; now a full rebuild."""
    from pipelines import incremental
    from pipelines.frames.decode import plan_inputs
    from pipelines.io.checkpoint import checkpoint_path, read_checkpoint, write_checkpoint
    from pipelines.io.warehouse import Warehouse
    from pipelines.rebuild import RebuildRequest, resolve_settings

    wh = tmp_path / "wh"
    rebuild(spark_on_demand, warn_settings, [sample], wh, "base", **SAMPLE_KW)
    good = read_checkpoint(wh, "base")
    segment = next(iter(good["partitions"]))
    req = RebuildRequest(inputs=(str(sample),), warehouse=str(wh), incremental=True, **SAMPLE_KW)

    def start(checkpoint: str | dict):
        """An incremental start over `checkpoint`: text as it is, or fields sealed as a run seals them (edited with
        the seal made again: what the fields' own checks are for)."""
        if isinstance(checkpoint, dict):
            write_checkpoint(wh, "base", checkpoint)
        else:
            checkpoint_path(wh, "base").write_text(checkpoint)
        return incremental.start(Warehouse(wh), req, resolve_settings(warn_settings, req), plan_inputs([sample]), "x")

    def edited(**kw):
        return {**good, **kw}

    bad_segment = {**good["partitions"][segment], "segments": [{**good["partitions"][segment]["segments"][0],
                                                                 "consumed": "12"}]}
    for text, said in [('{"format": 2, "partitions": {', "Expecting"), ("[2]", "not a JSON object"),
                       ({k: v for k, v in good.items() if k != "partitions"}, "partitions: null"),
                       (edited(partitions={**good["partitions"], segment: bad_segment}), "consumed: \"12\""),
                       (edited(max_timestamp="x"), "max_timestamp"), (edited(decoded_files=[1]), "decoded_files"),
                       (edited(load_failures="1"), "load_failures"),
                       # numbers past what they become (a long, a time, a partition): an OverflowError traceback
                       (edited(partitions={**good["partitions"], segment: {**good["partitions"][segment],
                                                                           "next_offset": 10 ** 30}}), "next_offset"),
                       (edited(max_timestamp=10 ** 30), "max_timestamp: 1000"),
                       (edited(max_partition=1 << 40), "max_partition"),
                       # a partition count no row of the input's directories gives (every group then fails its
                       # `abs(hashCode) % count` check), or one below the partitions the checkpoint names
                       (edited(max_partition=(1 << 31) - 1), "max_partition: 2147483647, where its partitions"),
                       (edited(max_partition=good["max_partition"] + 1), "max_partition"),
                       (edited(max_partition=-1), "max_partition: -1"),
                       (edited(log_gaps={"0": {"first_offset": 0, "compacted_below": "x"}}), "log_gaps")]:
        s = start(text)
        assert s.mode == "full" and s.reason.startswith("the previous snapshot's checkpoint is damaged"), s.reason
        assert said in s.reason, s.reason
    assert start(good).mode == "incremental"
    checkpoint_path(wh, "base").unlink()
    checkpoint_path(wh, "base").mkdir()  # a directory in its place
    s = incremental.start(Warehouse(wh), req, resolve_settings(warn_settings, req), plan_inputs([sample]), "x")
    assert s.mode == "full" and s.reason.startswith("the previous snapshot's checkpoint cannot be read"), s.reason


def test_a_saved_shard_replaced_by_an_older_one_of_its_size_fails_the_run_in_one_line(no_spark, settings, tmp_path):
    """Partition 0's saved shard replaced by the one an earlier run saved of it: the same size (a committed offset
    5 where it is 7 now: Arrow's int64 either way) and a whole shard of the right partition, so neither the
    checkpoint's sizes nor the shard's own checks tell. Before, the next --incremental run resumed it and served
    offset 5 where a full rebuild serves 7; the checkpoint now names each file's sha256, and the run fails in one
    line naming the file."""
    from pipelines.io.checkpoint import read_checkpoint
    from pipelines.rebuild import RebuildRequest, RunFailed, run_rebuild
    from tests import badinputs as bi

    g, h = bi.group_in(0, "replaced"), bi.group_in(1, "kept")
    zero = bi.write_segment(tmp_path / "in" / "__consumer_offsets-0", 0, bi.batch([bi.commit(g, 0, 5, bi.T0)], 0))
    one = bi.write_segment(tmp_path / "in" / "__consumer_offsets-1", 0, bi.batch([bi.commit(h, 0, 5, bi.T0)], 0))

    def run(snapshot_id: str):
        return run_rebuild(no_spark, settings, RebuildRequest(inputs=(str(tmp_path / "in"),),
                                                           warehouse=str(tmp_path / "wh"), snapshot_id=snapshot_id,
                                                           incremental=True))

    run("base")
    with zero.open("ab") as f:
        f.write(bi.batch([bi.commit(g, 0, 7, bi.T0 + 1)], 1))
    run("next")
    older, newer = (read_checkpoint(tmp_path / "wh", s) for s in ("base", "next"))
    older, newer = (tmp_path / "wh" / cp["decoded_state"] / cp["decoded_files"][0] for cp in (older, newer))
    assert older.name.startswith("part-00000-") and older.stat().st_size == newer.stat().st_size
    newer.write_bytes(older.read_bytes())
    with one.open("ab") as f:
        f.write(bi.batch([bi.commit(h, 0, 9, bi.T0 + 2)], 1))
    with pytest.raises(RunFailed) as failed:
        run("after")
    assert f"partition 0: unreadable saved shard: {newer.name} is not the file its run wrote" in str(failed.value)
    assert "\n" not in str(failed.value)


@pytest.mark.parametrize("edit", ["consumed", "max_timestamp"])
def test_a_checkpoint_edited_into_other_valid_values_is_a_full_rebuild(no_spark, settings, tmp_path, edit):
    """The previous snapshot's checkpoint edited by hand (or damaged) into values of the right types: a segment's
    `consumed` moved back into its last batch, the newest record time moved 30 days on. Before, the run trusted
    them: it resumed inside a batch and lost the new commit, or expired every offset by the moved clock, where a
    full rebuild of the same input keeps them; the checkpoint's seal no longer matches, so it is a full rebuild
    saying the checkpoint is damaged, and the snapshot is the full rebuild's."""
    def moved(cp: dict) -> None:
        if edit == "consumed":
            cp["partitions"]["0"]["segments"][0]["consumed"] -= 20
        else:
            cp["max_timestamp"] += 30 * 86_400_000

    reason = _resumed_over_an_edited_checkpoint(no_spark, settings, tmp_path, moved)
    assert reason == "the previous snapshot's checkpoint is damaged (its content does not match its sha256: edited or " \
                     "damaged)"


@pytest.mark.parametrize("edit", [None, "consumed"])
def test_a_checkpoint_without_its_seal_is_a_full_rebuild(no_spark, settings, tmp_path, edit):
    """A checkpoint without the sha256 of its fields (written before checkpoints were sealed, or stripped of it) was
    read as it is: one edited too (a segment's `consumed` moved back into its last batch) resumed inside the batch
    and lost the new commit, where a full rebuild keeps it. Nothing tells such a checkpoint's fields from edited ones,
    so it is a full rebuild saying so, and the snapshot is the full rebuild's."""
    def unsealed(cp: dict) -> None:
        del cp["sha256"]
        if edit == "consumed":
            cp["partitions"]["0"]["segments"][0]["consumed"] -= 20

    reason = _resumed_over_an_edited_checkpoint(no_spark, settings, tmp_path, unsealed)
    assert reason == "the previous snapshot's checkpoint is not sealed (no sha256 of its fields: written before " \
                     "checkpoints were sealed)"


def _resumed_over_an_edited_checkpoint(no_spark, settings, tmp_path, edit) -> str:
    """A base run of two commits, its checkpoint's JSON changed by `edit`, a third commit appended, then an
    `--incremental` run: asserts it is the full rebuild of the same input, and returns the reason it gives."""
    from pipelines.io.checkpoint import checkpoint_path
    from pipelines.rebuild import RebuildRequest, run_rebuild
    from tests import badinputs as bi

    g = bi.group_in(0, "edited")
    seg = bi.write_segment(tmp_path / "in" / "__consumer_offsets-0", 0, bi.batch([bi.commit(g, 0, 5, bi.T0)], 0)
                           + bi.batch([bi.commit(g, 1, 6, bi.T0 + 1)], 1))

    def run(warehouse: Path, snapshot_id: str, **kw):
        summary = run_rebuild(no_spark, settings, RebuildRequest(inputs=(str(tmp_path / "in"),),
                                                              warehouse=str(warehouse), snapshot_id=snapshot_id, **kw))
        assert summary.status == "succeeded", summary.validation
        return summary

    run(tmp_path / "wh", "base")
    path = checkpoint_path(tmp_path / "wh", "base")
    cp = json.loads(path.read_text())
    edit(cp)
    path.write_text(json.dumps(cp))
    with seg.open("ab") as f:
        f.write(bi.batch([bi.commit(g, 2, 7, bi.T0 + 10)], 2))
    after = run(tmp_path / "wh", "after", incremental=True)
    run(tmp_path / "full", "full")
    assert snapshot_rows(tmp_path / "wh", "after") == snapshot_rows(tmp_path / "full", "full")
    assert after.incremental["mode"] == "full", after.incremental
    return after.incremental["reason"]


@pytest.mark.spark
@pytest.mark.parametrize("counted", [True, False])
def test_an_incremental_run_names_the_load_failures_the_earlier_runs_read(spark, warn_settings, tmp_path, counted,
                                                                          monkeypatch):
    """A GroupMetadata value the coordinator's load fails on (one static member listed twice), read by the base run:
    its partition still fails to load after an incremental run that read nothing of it, so that run names it too,
    with its group history on Spark. The base run's checkpoint counts the records (its tasks named them), so the
    next run knows to read the history it carries forward for them, as it does after a checkpoint written before
    the count (`counted` False). Before, an incremental run of no KIP-848 records said nothing of them."""
    from pipelines.io.checkpoint import read_checkpoint, write_checkpoint
    from pipelines.rebuild import stages
    from tests import badinputs as bi

    monkeypatch.setattr(stages, "GROUP_EVENTS_IN_HAND", -1)  # the shards' group history left on Spark
    settings = spark_replay_settings(warn_settings)
    g, fine, zero = _static_instance_listed_twice(tmp_path / "in")
    kw = dict(semantics="legacy", kafka_version="3.9", num_partitions=50)
    base = rebuild(spark, settings, [tmp_path / "in"], tmp_path / "wh", "base", **kw)
    said = [w for w in base.warnings if "load fails on" in w]
    assert len(said) == 1 and "offsets partition(s) 4 " in said[0] and repr(g) in said[0]
    assert read_checkpoint(tmp_path / "wh", "base")["load_failures"] == 1
    if not counted:
        cp = read_checkpoint(tmp_path / "wh", "base")
        del cp["load_failures"]
        write_checkpoint(tmp_path / "wh", "base", cp)  # as a run before the field was written sealed it
    with zero.open("ab") as f:
        f.write(bi.batch([bi.commit(fine, 0, 7, bi.T0 + 2)], 1))
    inc = rebuild(spark, settings, [tmp_path / "in"], tmp_path / "wh", "inc", incremental=True, **kw)
    assert inc.incremental["mode"] == "incremental"
    assert [w for w in inc.warnings if "load fails on" in w] == said
    assert (inc.records_in, inc.records_skipped) == (1, 0)  # this run's records: none of them skipped
    assert read_checkpoint(tmp_path / "wh", "inc")["load_failures"] == 1


def test_no_previous_checkpoint(warn_settings, sample, tmp_path):
    from pipelines import incremental
    from pipelines.frames.decode import plan_inputs
    from pipelines.io.warehouse import Warehouse
    from pipelines.rebuild import RebuildRequest, resolve_settings

    req = RebuildRequest(inputs=(str(sample),), warehouse=str(tmp_path / "wh"), incremental=True)
    s = incremental.start(Warehouse(tmp_path / "wh"), req, resolve_settings(warn_settings, req), plan_inputs([sample]),
                          "x")
    assert s.mode == "full" and s.reason == "no previous snapshot with a checkpoint"


# ---------------------------------------------------------------------------------------------------- brokerdata
def _batches(data: Path):
    """(partition, header) of every batch of a broker log dir, in log order."""
    from pipelines.decoding.batches import read_batches_from_file
    from pipelines.decoding.segments import discover_segments
    from schemas.records import ReadProblem

    segs, _ = discover_segments([data])
    for s in segs:
        for item in read_batches_from_file(s.path, offsets_partition=s.offsets_partition):
            if not isinstance(item, ReadProblem):
                yield s, item[0]


@pytest.fixture(scope="module")
def broker_full(spark_on_demand, warn_settings, brokerdata, tmp_path_factory):
    """scenario -> (its data dir, the warehouse of its full rebuild, the summary), rebuilt once per module (`**kw`:
    the semantics)."""
    made = {}

    def full(scenario: str, **kw):
        if scenario not in made:
            data = brokerdata / scenario / "data"
            if not data.is_dir():
                pytest.skip(f"brokerdata/{scenario} not present")
            wh = tmp_path_factory.mktemp(f"full-{scenario}") / "full"
            made[scenario] = data, wh, rebuild(spark_on_demand, warn_settings, [data], wh, "full", **kw)
        return made[scenario]
    return full


def test_compacted_cut_between_segments(spark_on_demand, warn_settings, broker_full, tmp_path):
    """Yesterday's dump ends at the start of each multi-segment partition's last segment; today's run loads it onto
    the saved shards in this process (the other routes: `test_every_route_loads_the_new_records_…`)."""
    data, full_wh, full = broker_full("compacted", semantics="modern")
    until = _yesterday("compacted", data)
    assert until, "compacted has several segments per partition"
    cut = tmp_path / "cut"
    cut_log_dir(data, cut, until_offset=until)
    _, inc = assert_incremental_exact(spark_on_demand, warn_settings, tmp_path, data, cut, full_wh, "full", full,
                                      engine="local", semantics="modern")
    # where the log lacks offsets (the cleaner compacted it) is the full run's, the earlier run's part carried on
    assert full.log_gaps and inc.log_gaps == full.log_gaps


@pytest.mark.spark
def test_transactions_cut_inside_open_transaction(spark_on_demand, warn_settings, broker_full, tmp_path):
    """Yesterday's dump ends right after a TxnOffsetCommit batch, before its COMMIT/ABORT marker; today's run is
    loaded by the shards' tasks onto the shards yesterday's tasks saved (the other routes: `test_every_route_…`)."""
    data, full_wh, full = broker_full("transactions")
    until = _yesterday("transactions", data)
    (partition, end), = until.items()
    producer, first = next((h.producer_id, h.base_offset) for s, h in _batches(data)
                           if s.offsets_partition == partition and h.last_offset + 1 == end and h.is_transactional)
    cut = tmp_path / "cut"
    cut_log_dir(data, cut, until_offset=until)
    assert_incremental_exact(spark_on_demand, warn_settings, tmp_path, data, cut, full_wh, "full", full, engine="spark")
    from pipelines.io.warehouse import Warehouse

    pending = Warehouse(tmp_path / "wh").read_table("pending_offsets", "base").to_pylist()
    mine = lambda r: r["producer_id"] == producer and first <= r["record_offset"] < end  # noqa: E731
    assert any(mine(r) for r in pending), "the base snapshot holds the open transaction's offsets"
    assert not any(mine(r) for r in Warehouse(tmp_path / "wh").read_table("pending_offsets", "inc").to_pylist())


# ---------------------------------------------------------------------------------------------------- the routes
def _route_tables(spark, route: str, plan, previous, options) -> dict:
    """The state tables of the new records of `plan` loaded onto `previous` (the saved shards) along `route`, with
    the route's own functions (`rebuild.executor.Route`): `in-process` and `tasks` replay the rows decoded here,
    `shards` has one task per offsets partition decode its new segments' bytes and load them."""
    from dataclasses import replace

    from pipelines.coordinator.decoded import REPLAY_COLUMNS, conform_loaded
    from pipelines.coordinator.shard import replay_shards
    from pipelines.frames.decode import decoded_log

    if route == "shards":
        from pipelines.frames import segment_shards
        from pipelines.frames.shards import topic_names_of
        from pipelines.io.scratch import Scratch

        scratch = Scratch(tempfile.mkdtemp(prefix="scratch-"))
        loaded = segment_shards.load_on_spark(spark, replace(plan, in_process=False),
                                              segment_shards.ShardLoad(options=options, scratch=scratch,
                                                                       previous=previous))
        try:
            shards = segment_shards.tabulate_on_spark(spark, loaded, options, None, topic_names_of(loaded.log))
            return dict(shards.tables)
        finally:
            loaded.release()
            scratch.discard()
    table = conform_loaded(decoded_log(spark, replace(plan, in_process=True), cut=(None, None)).to_arrow(
        REPLAY_COLUMNS))
    if route == "tasks":
        from pipelines.frames.resumed import resume_on_spark

        shards = resume_on_spark(spark, table, previous, options, None, tasks=2)
        try:
            return dict(shards.tables)
        finally:
            shards.release()
    return dict(replay_shards(table, options, resume=previous.all()).tables)


@pytest.mark.parametrize("scenario", ["transactions", "compacted"])
def test_every_route_loads_the_new_records_onto_the_saved_shards_as_the_whole_log_loads(
        spark, warn_settings, brokerdata, tmp_path, scenario):
    """The executor's three routes of an incremental run (`rebuild.executor.Route`: in this process, resumed on one
    task per core, loaded by the shards' tasks), each given yesterday's saved shards and today's new segment bytes,
    give the state the engine gives the whole log. Yesterday's dump is cut inside an open transaction
    (transactions) or at each partition's last segment (compacted); the whole-rebuild tests above run each route
    end to end on the sample."""
    import pyarrow as pa

    from pipelines import incremental
    from pipelines.coordinator.options import ReplayOptions
    from pipelines.coordinator.decoded import conform_decoded
    from pipelines.coordinator.shard import replay_shards
    from pipelines.decoding.reader import iter_decoded_rows
    from pipelines.frames.decode import plan_inputs
    from pipelines.io.warehouse import Warehouse
    from pipelines.rebuild import RebuildRequest, resolve_settings
    from schemas.decoded import DECODED_RECORD_SCHEMA
    from tests.coordinator.harness import as_rows, assert_same

    data = brokerdata / scenario / "data"
    cut = tmp_path / "cut"
    cut_log_dir(data, cut, until_offset=_yesterday(scenario, data))
    wh = tmp_path / "wh"
    rebuild(spark, warn_settings, [cut], wh, "base", semantics="modern")
    req = RebuildRequest(inputs=(str(data),), warehouse=str(wh), incremental=True, semantics="modern")
    start = incremental.start(Warehouse(wh), req, resolve_settings(warn_settings, req), plan_inputs([data]), "x")
    assert start.mode == "incremental", start.reason
    previous = start.saved_shards()
    rows = list(iter_decoded_rows([data]))
    newest = max(r["timestamp"] for r in rows if r["timestamp"] is not None)
    options = ReplayOptions(semantics="modern", snapshot_id="r", num_partitions=50, load_time_ms=newest)
    whole = replay_shards(conform_decoded(pa.Table.from_pylist(rows, schema=DECODED_RECORD_SCHEMA)), options).tables
    compared = ("loaded_offsets", "empty_group_offsets", "loaded_groups", "group_members", "removed_groups",
                "pending_offsets")
    want = as_rows({t: whole[t] for t in compared})
    for route in ("in-process", "tasks", "shards"):
        got = _route_tables(spark, route, start.decode_plan, previous, options)
        assert_same(as_rows({t: got[t] for t in compared}), want, f"{scenario} {route}")
    assert any(want[t] for t in ("loaded_offsets", "loaded_groups"))


def _yesterday(scenario: str, data: Path) -> dict[int, int]:
    """Where yesterday's dump of `scenario` ends, per offsets partition: inside a transaction a later marker decides
    (transactions), at the start of each multi-segment partition's last segment (compacted)."""
    batches = list(_batches(data))
    if scenario == "transactions":
        for i, (s, h) in enumerate(batches):
            if h.is_transactional and not h.is_control and any(
                    s2.offsets_partition == s.offsets_partition and h2.is_control and h2.producer_id == h.producer_id
                    for s2, h2 in batches[i + 1:]):
                return {s.offsets_partition: h.last_offset + 1}
        raise AssertionError("transactions has a decided transactional offset commit")
    bases: dict[int, list[int]] = {}
    for s, _h in batches:
        if s.base_offset not in bases.setdefault(s.offsets_partition, []):
            bases[s.offsets_partition].append(s.base_offset)
    return {p: b[-1] for p, b in bases.items() if len(b) > 1}


def test_clean_state_removes_state_of_deleted_snapshots(tmp_path):
    """After `Warehouse.retain`, `_state/<id>` and `_checkpoints/<id>.json` of snapshots that are gone go too."""
    from pipelines import incremental
    from pipelines.io.checkpoint import checkpoint_path, write_checkpoint
    from pipelines.io.warehouse import Warehouse

    wh = Warehouse(tmp_path / "wh")
    wh.mark_run("kept", {"status": "succeeded"})
    wh.mark_run("stopped", {"status": "failed"})  # killed after its tasks wrote a state, before its checkpoint
    # killed while committing, after its checkpoint (recorded failed by the next run), or failed validation: the
    # chain never resumes them, and their states stayed as long as their rows
    wh.mark_run("killed", {"status": "failed"})
    wh.mark_run("invalid", {"status": "validation_failed"})
    for sid in ("kept", "gone", "stopped", "killed", "invalid"):
        (incremental.state_dir(wh, sid) / "decoded").mkdir(parents=True)
        if sid != "stopped":
            write_checkpoint(wh, sid, {"format": incremental.CHECKPOINT_FORMAT})
    assert incremental.clean_state(wh) == ["gone", "invalid", "killed", "stopped"]
    assert incremental.state_dir(wh, "kept").is_dir() and checkpoint_path(wh, "kept").is_file()
    for sid in ("gone", "invalid", "killed"):
        assert not incremental.state_dir(wh, sid).exists() and not checkpoint_path(wh, sid).exists()
    assert not incremental.state_dir(wh, "stopped").exists()


def test_readers_resume_at_a_batch_boundary(tmp_path):
    """`start_position`: the rows of the whole file from that entry on, positions absolute (both readers, and the
    reader count); the count's `segments` say how far a file was read and what its last entry is."""
    from pipelines.decoding.batches import read_batches_from_file
    from pipelines.decoding.columnar import decode_segment_to_arrow
    from pipelines.decoding.segments import discover_segments
    from pipelines.frames.decode import SEGMENTS, count_segment
    from simulator import generate_sample
    from schemas.records import ReadProblem

    generate_sample(tmp_path / "d", records=600, groups=8, partitions=1, seed=3, segment_bytes=1 << 20)
    seg = discover_segments([tmp_path / "d"])[0][0]
    headers = [h for h, _ in (i for i in read_batches_from_file(seg.path, offsets_partition=0)
                              if not isinstance(i, ReadProblem))]
    mid = headers[len(headers) // 2]
    whole = [r for b in decode_segment_to_arrow(seg.path, offsets_partition=0) for r in b.to_pylist()]
    for use_c in (None, False):
        tail = [r for b in decode_segment_to_arrow(seg.path, offsets_partition=0, start_position=mid.position,
                                                   use_c=use_c) for r in b.to_pylist()]
        assert tail == [r for r in whole if r["batch_position"] >= mid.position] and tail
    resumed = [h for h, _ in (i for i in read_batches_from_file(seg.path, offsets_partition=0,
                                                                start_position=mid.position)
                              if not isinstance(i, ReadProblem))]
    assert resumed == [h for h in headers if h.position >= mid.position]
    n_tail = count_segment(str(seg.path), 0, start_position=mid.position)[0]["records_in"]
    assert n_tail == len([r for r in whole if r["batch_position"] >= mid.position])
    def scan_segment(path: str, start_position: int = 0) -> dict:
        return count_segment(path, 0, start_position=start_position)[0][SEGMENTS][0]

    scan = scan_segment(str(seg.path))
    assert scan["consumed"] == seg.size and scan["last_offset"] == headers[-1].last_offset
    assert scan["last_batch_position"] == headers[-1].position
    assert scan_segment(str(seg.path), mid.position)["consumed"] == seg.size
    # a torn tail (yesterday's dump caught mid-write) is not consumed: it is read again next time
    torn = tmp_path / "torn.log"
    torn.write_bytes(Path(seg.path).read_bytes()[: headers[-1].position + 30])
    assert scan_segment(str(torn))["consumed"] == headers[-1].position


def test_a_log_start_moved_into_bytes_read_before_is_a_full_rebuild(no_spark, settings, tmp_path):
    """The log dir's `log-start-offset-checkpoint` now puts partition 0's log start inside its segment, past records
    the previous run loaded: Kafka's loader passes over them, so resuming the saved shards kept a commit below the log
    start as state (a different answer than a full rebuild); the run is a full one, saying why."""
    from pipelines.io.warehouse import Warehouse
    from pipelines.rebuild import RebuildRequest, run_rebuild
    from tests import badinputs as bi

    data, seg = bi.log_start_inside_first_segment(tmp_path / "data")
    checkpoint = data / "log-start-offset-checkpoint"
    named = checkpoint.read_text()
    checkpoint.unlink()

    def run(warehouse: Path, snapshot_id: str, **kw):
        summary = run_rebuild(no_spark, settings, RebuildRequest(inputs=(str(data),), warehouse=str(warehouse),
                                                              snapshot_id=snapshot_id, **kw))
        assert summary.status == "succeeded", summary.validation
        rows = Warehouse(warehouse).read_table("loaded_offsets", snapshot_id).to_pylist()
        return summary, sorted((r["partition"], r["committed_offset"]) for r in rows)

    run(tmp_path / "wh", "base", incremental=True)
    checkpoint.write_text(named)
    with open(seg, "ab") as f:
        f.write(bi.batch([bi.commit(bi.group_in(0, "log-start"), 3, 50, bi.T0 + 9)], 4))
    after, offsets = run(tmp_path / "wh", "after", incremental=True)
    assert after.incremental["mode"] == "full"
    assert after.incremental["reason"].startswith("log start moved / segments deleted or compacted (partition 0: "
                                                  "the log start Kafka's loader reads from is 2, the previous run's "
                                                  "was 0)")
    assert offsets == run(tmp_path / "full", "full")[1] == [(1, 30), (2, 40), (3, 50)]
