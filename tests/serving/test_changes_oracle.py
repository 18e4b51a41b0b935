"""`changes`' regressions and the group status' REWIND against the engine as the oracle, on generated logs (plain and
transactional commits of several producers that overtake each other, aborts, open transactions, markers, tombstones,
deleted and re-created groups), both semantics, no Spark: the log replayed to every moment (`--until-offset`, the
engine's state there, which equals a rebuild cut at that moment) says which committed offsets went below the one
before, and when. Every one of them, and no other, is what `changes` reports over the whole log, at that moment; and
a partition's REWIND is what Burrow's rule says of the offsets those replays committed since the last deletion."""
from __future__ import annotations

import datetime as dt
import json

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobs.cli import main
from pipelines.coordinator.groups import ClassicGroup, is_live
from pipelines.coordinator.options import ReplayOptions
from pipelines.coordinator.shard import load_shards, replay_shards
from pipelines.coordinator.streamed import WHOLE_STATE
from pipelines.io.snapshots import DeltaWarehouseReader, resolve_snapshot
from pipelines.serving.group_status import evaluate_groups, partition_status, window
from pipelines.serving.index import load_index
from schemas.tables import GROUP_HISTORY_VERSION, SNAPSHOT_TABLES
from tests.coordinator.rowkit import BASE_TS, Log, member, to_table
from tests.coordinator.test_replay_differential import build_log, kafka_like_log, log_ops
from tests.depth import cases
from tests.serving.warehouse_kit import WarehouseKit

HYPO = settings(max_examples=cases(deep=100, quick=8), deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture])


def _timed(rows: list[dict]) -> list[dict]:
    """One record a second, in log order, so every position is its own moment."""
    out = []
    for r in rows:
        ts = BASE_TS + 1000 * r["offset"]
        out.append({**r, "timestamp": ts, **({"commit_timestamp": ts} if r.get("commit_timestamp") else {})})
    return out


def _warehouse(root, rows: list[dict], semantics: str):
    """The engine's snapshot of `rows`, written as a rebuild writes it (its tables and its history)."""
    res = replay_shards(to_table(rows), ReplayOptions(semantics=semantics, snapshot_id="s"))
    kit = WarehouseKit(root)
    as_of = dt.datetime.fromtimestamp((BASE_TS + 1000 * max(r["offset"] for r in rows)) / 1000, dt.timezone.utc)
    summary = {"semantics": semantics, "group_history_version": GROUP_HISTORY_VERSION}  # as this version's run's
    kit.snapshot("s", tables={t: res.tables[t] for t in SNAPSHOT_TABLES if t in res.tables}, as_of=as_of,
                 summary=json.dumps(summary))
    kit.append("offset_commits", res.tables["offset_commits"])
    return root


def _states(rows: list[dict], semantics: str) -> list[tuple[int, dict]]:
    """(offset, committed offsets after replaying the log up to it), for -1 and every offset of the log."""
    table = to_table(rows)
    out = []
    for cut in [-1, *sorted({r["offset"] for r in rows})]:
        loaded = load_shards(table, ReplayOptions(semantics=semantics, until_offset=cut), mode=WHOLE_STATE)
        out.append((cut, {(k.group, k.topic, k.partition): v.committed_offset
                          for s in loaded.states for k, v in s.offsets.items()}))
    return out


def _regressions(states) -> set:
    out = set()
    for (_, before), (at, after) in zip(states, states[1:]):
        for key, value in after.items():
            if key in before and value < before[key]:
                out.add((at, *key))
    return out


def _changes(root) -> list[dict]:
    r = CliRunner().invoke(main, ["changes", "--warehouse", str(root), "--from", str(BASE_TS - 1000),
                                  "--to", str(BASE_TS + 10**9), "--json"], catch_exceptions=False)
    assert r.exit_code == 0 and not r.stderr, r.output
    return json.loads(r.stdout)


def _rewinds(states, as_of_s: float) -> dict:
    """Per key, Burrow's REWIND over the offsets the replays committed since the key was last deleted."""
    seq: dict = {}
    for (_, before), (at, after) in zip(states, states[1:]):
        for key in before.keys() - after.keys():
            seq[key] = []  # deleted: a commit after it starts anew
        for key, value in after.items():
            if before.get(key) != value or key not in before:
                seq.setdefault(key, []).append((value, (BASE_TS + 1000 * at) / 1000))
    return {k: partition_status(window(v), None, as_of_s) for k, v in seq.items() if v}


@pytest.mark.parametrize("semantics", ["legacy", "modern"])
@pytest.mark.parametrize("ops", [log_ops, kafka_like_log], ids=["any_log", "kafka_like_log"])
@HYPO
@given(data=st.data())
def test_changes_reports_every_regression_the_replays_show_and_no_other(semantics, ops, data, tmp_path_factory):
    rows = _timed([r for r in build_log(data.draw(ops, label="ops"), partition=0).rows
                   if r["record_kind"] not in ("error", "unknown")])
    if not any(r["record_kind"] == "offset_commit" for r in rows):
        return
    root = _warehouse(tmp_path_factory.mktemp("oracle"), rows, semantics)
    states = _states(rows, semantics)
    got = {(c["applied_offset"], c["group_id"], c["topic"], c["partition"])
           for c in _changes(root) if c["kind"] == "offset_regressed"}
    assert got == _regressions(states)
    for c in _changes(root):
        if c["kind"] == "offset_regressed":  # at the moment it took effect
            at = dt.datetime.fromisoformat(c["time"].replace("Z", "+00:00"))
            assert at.timestamp() * 1000 == BASE_TS + 1000 * c["applied_offset"]
    reader = DeltaWarehouseReader(str(root))
    snap = resolve_snapshot(reader, None)
    statuses = evaluate_groups(reader, load_index(reader, snap), [snap])
    judged = {(g, p.topic, p.partition): p.status for g, s in statuses.items() for p in s.partitions}
    expected = _rewinds(states, snap.as_of.timestamp())
    assert {k: v for k, v in judged.items() if v == "REWIND"} == {k: v for k, v in expected.items()
                                                                    if v == "REWIND" and k in judged}


@pytest.mark.parametrize("semantics", ["legacy", "modern"])
def test_an_overtaken_transaction_is_no_regression_and_a_committed_one_regresses_at_its_marker(semantics, tmp_path):
    """The issue's log: 900 (transactional) is overtaken by the plain 160 before its COMMIT, so nothing went from
    900 to 160; a later transactional 100 committed over 500 regresses at its marker, not at its record."""
    log = Log()
    log.commit("g", "t", 0, 900, pid=5, epoch=0)  # 0
    log.commit("g", "t", 0, 160)  # 1
    log.marker(5, "COMMIT")  # 2: installs nothing
    log.commit("g", "t", 0, 500)  # 3
    log.commit("g", "t", 0, 100, pid=6, epoch=0)  # 4
    log.commit("g", "t", 1, 7)  # 5
    log.marker(6, "COMMIT")  # 6: 500 -> 100
    rows = _timed(log.rows)
    items = [c for c in _changes(_warehouse(tmp_path, rows, semantics)) if c["kind"] == "offset_regressed"]
    assert [(c["record_offset"], c["applied_offset"], c["previous_offset"], c["committed_offset"]) for c in items] \
        == [(4, 6, 500, 100)]
    assert _regressions(_states(rows, semantics)) == {(6, "g", "t", 0)}
    # a window holding the record but not the marker: nothing changed yet
    r = CliRunner().invoke(main, ["changes", "--warehouse", str(tmp_path), "--from", str(BASE_TS + 3500),
                                  "--to", str(BASE_TS + 5500), "--json"], catch_exceptions=False)
    assert [c for c in json.loads(r.output) if c["kind"].startswith("offset_")] == []


def test_a_history_written_before_it_recorded_what_took_effect_is_one_line(tmp_path):
    log = Log()
    log.commit("g", "t", 0, 5)
    root = _warehouse(tmp_path, _timed(log.rows), "legacy")
    old = tmp_path.parent / (tmp_path.name + "-old")
    kit = WarehouseKit(old)
    res = replay_shards(to_table(_timed(log.rows)), ReplayOptions(snapshot_id="s"))
    kit.snapshot("s", tables={t: res.tables[t] for t in SNAPSHOT_TABLES if t in res.tables})
    history = res.tables["offset_commits"]
    at = history.schema.get_field_index("applied_offset")
    kit.append("offset_commits", history.set_column(at, "applied_offset", _nulls(history, "applied_offset")))
    r = CliRunner().invoke(main, ["changes", "--warehouse", str(old), "--from", str(BASE_TS - 1000),
                                  "--to", str(BASE_TS * 2)])
    assert r.exit_code == 2
    assert r.output.count("\n") == 1 and "rebuild" in r.output, r.output
    assert CliRunner().invoke(main, ["changes", "--warehouse", str(root), "--from", str(BASE_TS - 1000),
                                     "--to", str(BASE_TS * 2)]).exit_code == 0



def test_a_legacy_history_written_before_its_version_was_recorded_says_a_deletion_may_be_missing(tmp_path):
    """A legacy group history written before the engine recorded a group tombstone after a simple group's
    re-creation by an offset commit as a deletion says `tombstone` there, so changes gave one group_deleted where
    there were two, and nothing said so. The history's version is in its run's summary (`group_history_version`):
    without it (an older run's), changes still answers from the history, and warns on stderr (the --json list keeps
    its shape) and in GET /changes' `warnings` that a deletion may be missing and a rebuild gives it; this
    version's history says `deleted` and no warning."""
    import pyarrow as pa
    from fastapi.testclient import TestClient

    from jobs.api import create_app

    log = Log()
    log.commit("s", "t", 0, 10)  # 0
    log.group_tombstone("s")  # 1: deletes the group the commit made
    log.commit("s", "t", 0, 20)  # 2: makes it again
    log.group_tombstone("s")  # 3: deletes it again: `tombstone` in a history before version 2
    res = replay_shards(to_table(_timed(log.rows)), ReplayOptions(semantics="legacy", snapshot_id="s"))
    history = res.tables["group_history"]
    assert history.column("event").to_pylist() == ["deleted", "deleted"]
    old = history.set_column(history.schema.get_field_index("event"), "event",
                             pa.array(["deleted", "tombstone"], history.schema.field("event").type))
    as_of = dt.datetime.fromtimestamp((BASE_TS + 3000) / 1000, dt.timezone.utc)
    args = ["--from", str(BASE_TS - 1000), "--to", str(BASE_TS + 10**9), "--json"]
    this_version = json.dumps({"semantics": "legacy", "group_history_version": GROUP_HISTORY_VERSION})
    for name, events, summary in (("old", old, "{}"), ("new", history, this_version)):
        root = tmp_path / name
        kit = WarehouseKit(root)
        tables = {t: res.tables[t] for t in SNAPSHOT_TABLES if t in res.tables}
        kit.snapshot("s", tables={**tables, "group_history": events}, as_of=as_of, summary=summary)
        kit.append("offset_commits", res.tables["offset_commits"])
        r = CliRunner().invoke(main, ["changes", "--warehouse", str(root), *args], catch_exceptions=False)
        assert r.exit_code == 0, r.output
        deleted = [c["record_offset"] for c in json.loads(r.stdout) if c["kind"] == "group_deleted"]
        with TestClient(create_app(DeltaWarehouseReader(root))) as client:
            body = client.get("/changes", params={"from": args[1], "to": args[3]}).json()
        if name == "new":
            assert deleted == [1, 3] and r.stderr == "" and "warnings" not in body, (r.stderr, body)
            continue
        assert deleted == [1], deleted
        (line,) = r.stderr.splitlines()
        assert line.startswith("warning: snapshot 's'") and "rebuild" in line and "group_deleted" in line, line
        assert body["warnings"] == [line.removeprefix("warning: ")], body

def _nulls(table, name):
    import pyarrow as pa

    return pa.nulls(table.num_rows, table.schema.field(name).type)


@pytest.mark.parametrize("semantics", ["legacy", "modern"])
def test_a_simple_group_deleted_again_after_new_commits_is_deleted_twice(semantics, tmp_path):
    """A simple consumer's commit re-creates the group the coordinator had removed (3.9 GroupCoordinator
    .handleCommitOffsets and handleTxnCommitOffsets add an Empty group, 4.0 OffsetMetadataManager.replay a simple
    classic group), so DeleteGroups' second tombstone removed a group again, as the first did: both are
    group_deleted, in either semantics, as the engine's group history records it (`deleted`: the old loader builds no
    group while it reads, but the coordinator that wrote the commit held one). A tombstone right after another,
    nothing committed between, removes nothing."""
    log = Log()
    log.commit("s", "t", 0, 10)  # 0
    log.offset_tombstone("s", "t", 0)  # 1
    log.group_tombstone("s")  # 2: deletes the group the commit made
    log.commit("s", "t", 0, 20, pid=7, epoch=0)  # 3: transactional: re-creates it whatever the outcome
    log.marker(7, "ABORT")  # 4
    log.group_tombstone("s")  # 5: deletes it again
    log.group_tombstone("s")  # 6: nothing left to delete
    rows = _timed(log.rows)
    items = _changes(_warehouse(tmp_path, rows, semantics))
    assert [c["record_offset"] for c in items if c["kind"] == "group_deleted"] == [2, 5]


TOPIC_ID = "7fVt0cQCQnW0Wg4lUw4rYQ"  # topic t's


def _conversions_log(group: str = "g") -> Log:
    """A classic group upgraded to a consumer group and downgraded back as a 4.0 coordinator writes it: each
    conversion one batch of one time (`GroupMetadataManager.convertToConsumerGroup`: the classic tombstone, then
    `ConsumerGroup.createConsumerGroupRecords`, then the joining member's records of the same heartbeat;
    `convertToClassicGroup`: `ConsumerGroup.createGroupTombstoneRecords`, the member's first, then
    `ClassicGroup.createClassicGroupRecords`), then the classic group emptied and deleted."""
    log = Log()
    log.group(group, [member("m1")], generation=1)
    with log.batch(one_time=True):  # upgrade: m2 joins with the consumer protocol
        log.group_tombstone(group)
        log.cg_member(group, "m1")
        log.cg_topics(group, [(TOPIC_ID, "t", 2)])
        log.cg_epoch(group, 1)
        log.cg_target(group, "m1", [(TOPIC_ID, (0, 1))])
        log.cg_assignment_epoch(group, 1)
        log.cg_current(group, "m1", 1, [(TOPIC_ID, (0, 1))])
        log.cg_member(group, "m2")
        log.cg_epoch(group, 2)
    with log.batch(one_time=True):  # m2 leaves again
        log.cg_current_tombstone(group, "m2")
        log.cg_target_tombstone(group, "m2")
        log.cg_member_tombstone(group, "m2")
        log.cg_epoch(group, 3)
    with log.batch(one_time=True):  # downgrade: the last consumer-protocol member has left
        log.cg_current_tombstone(group, "m1")
        log.cg_target_tombstone(group, "m1")
        log.cg_assignment_epoch_tombstone(group)
        log.cg_member_tombstone(group, "m1")
        log.cg_topics_tombstone(group)
        log.cg_tombstone(group)
        log.group(group, [member("m1")], generation=2)
    log.group(group, [], generation=3)
    log.group_tombstone(group)
    return log


def _observed_lifecycle(rows: list[dict]) -> set[tuple[str, int]]:
    """(kind, batch end) of every change of a group's type or state the engine shows between one batch end and the
    next: its state replayed to each batch end (`--until-offset`), the only moments a reader is answered at."""
    table = to_table(rows)
    seen: dict = {}
    out = set()
    for cut in sorted({r["batch_last_offset"] for r in rows}):
        loaded = load_shards(table, ReplayOptions(semantics="modern", until_offset=cut), mode=WHOLE_STATE)
        now = {gid: ("classic" if isinstance(g, ClassicGroup) else g.group_type, g.state)
               for s in loaded.states for gid, g in s.groups.groups.items() if is_live(g)}
        for gid in now.keys() | seen.keys():
            was, it = seen.get(gid), now.get(gid)
            if was is None and it is not None:
                out.add(("group_created", cut))
            elif was is not None and it is None:
                out.add(("group_deleted", cut))
            elif was is not None and was[0] != it[0]:
                out.add(("group_converted", cut))
            elif was is not None and was[1] != "Empty" and it[1] == "Empty":
                out.add(("group_emptied", cut))
        seen = now
    return out


def test_a_conversion_s_batch_is_one_group_converted_and_no_group_emptied(tmp_path):
    """The member tombstones that open a downgrade's batch leave the consumer group Empty, and its tombstone
    deletes it, before the classic value re-creates it; no reader ever saw either (the coordinator answers at a
    batch's end). `changes` reports what the engine's state shows from one batch end to the next: each conversion
    once, at the batch's last record of the group, and the group emptied only when the classic group went Empty."""
    rows = _conversions_log().rows
    ends = {r["offset"]: r["batch_last_offset"] for r in rows}
    res = replay_shards(to_table(rows), ReplayOptions(semantics="modern", snapshot_id="s"))
    kit = WarehouseKit(tmp_path)
    as_of = dt.datetime.fromtimestamp(max(r["timestamp"] for r in rows) / 1000 + 1, dt.timezone.utc)
    kit.snapshot("s", tables={t: res.tables[t] for t in SNAPSHOT_TABLES if t in res.tables}, as_of=as_of)
    kit.append("offset_commits", res.tables["offset_commits"])
    lifecycle = [c for c in _changes(tmp_path) if c["kind"].startswith("group_")]
    assert {(c["kind"], ends[c["record_offset"]]) for c in lifecycle} == _observed_lifecycle(rows)
    assert [(c["kind"], c.get("from_type"), c.get("to_type")) for c in lifecycle] == [
        ("group_created", None, None), ("group_converted", "classic", "consumer"),
        ("group_converted", "consumer", "classic"), ("group_emptied", None, None), ("group_deleted", None, None)]
    emptied = next(c for c in lifecycle if c["kind"] == "group_emptied")
    assert (emptied["group_type"], emptied["state_before"], emptied["members_left"]) == ("classic", "Stable", ["m1"])
