"""Broker ground truth: replaying each brokerdata scenario (Kafka 4.0 new coordinator ⇒ `modern`) gives the state the
restarted broker served (`expected_state.json` → `summary`): listed groups with type, protocol type and state,
committed offsets (offset, leader epoch, metadata), members and assignments, and UNSTABLE_OFFSET_COMMIT partitions
as pending offsets. Every scenario is also replayed through the Spark boundary (all in one job) and must give the
same tables as in-process.
"""
from __future__ import annotations

import json
import re
from collections import defaultdict
from pathlib import Path

import pytest

from pipelines.coordinator.options import ReplayOptions
from pipelines.coordinator.shard import replay_rows
from tests.coordinator.harness import assert_same, by_partition, spark_tables

SCENARIOS = [
    "classic-basic", "compacted", "compression-gzip", "compression-lz4", "compression-snappy", "compression-zstd",
    "deletes", "expiry", "kip848", "many-groups", "simple-consumers", "transactions",
]
OPTIONS = ReplayOptions(semantics="modern", snapshot_id="broker", num_partitions=50, kafka_version="4.0")  # its broker


@pytest.fixture(scope="session")
def broker_rows(brokerdata):
    reader = pytest.importorskip("pipelines.decoding.reader")
    return {s: list(reader.iter_decoded_rows([brokerdata / s / "data"])) for s in SCENARIOS}


@pytest.fixture(scope="session")
def broker_state(broker_rows):
    return {s: replay_rows(rows, OPTIONS) for s, rows in broker_rows.items()}


def _expected(brokerdata: Path, scenario: str) -> dict:
    return json.loads((brokerdata / scenario / "expected_state.json").read_text())["summary"]


def _visible_offsets(tables) -> dict:
    out: dict = defaultdict(dict)
    for t in ("loaded_offsets", "empty_group_offsets"):
        for r in tables[t]:
            out[r["group_id"]][(r["topic"], r["partition"])] = (
                r["committed_offset"], -1 if r["leader_epoch"] is None else r["leader_epoch"], r["metadata"])
    return out


def _broker_offsets(offsets: dict) -> dict:
    return {(t, int(p)): (v["offset"], v["leader_epoch"], v["metadata"])
            for t, parts in offsets.items() for p, v in parts.items() if not v.get("error")}


def _assignment(parts) -> dict:
    out: dict = defaultdict(list)
    for t, p in parts or []:
        out[t].append(p)
    return {t: sorted(ps) for t, ps in out.items()}


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_listed_groups_match_broker(brokerdata, broker_state, scenario):
    exp = _expected(brokerdata, scenario)
    groups = {g["group_id"]: g for g in broker_state[scenario]["loaded_groups"]}
    listed = {gid: (v["list_groups"]["group_type"], v["list_groups"]["protocol_type"], v["list_groups"]["state"])
              for gid, v in exp.items() if v["listed"]}
    ours = {gid: (g["group_type"], g["protocol_type"] or "", g["state"]) for gid, g in groups.items()}
    assert ours == listed
    assert all(g["expected_offsets_partition"] == g["offsets_partition"] for g in groups.values())


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_committed_offsets_match_broker(brokerdata, broker_state, scenario):
    exp = _expected(brokerdata, scenario)
    ours = _visible_offsets(broker_state[scenario])
    for gid, v in exp.items():
        assert ours.get(gid, {}) == _broker_offsets(v["committed_offsets"]), gid
    assert set(ours) <= set(exp), "offsets visible for a group the broker does not know"


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_unstable_offset_commits_are_pending(brokerdata, broker_state, scenario):
    exp = _expected(brokerdata, scenario)
    pending = {(r["group_id"], r["topic"], r["partition"]) for r in broker_state[scenario]["pending_offsets"]}
    unstable = {(gid, t, int(p)) for gid, v in exp.items()
                for key in ("committed_offsets_require_stable", "committed_offsets_require_stable_all")
                for t, parts in (v.get(key) or {}).items() for p, x in parts.items()
                if x.get("error") == "UNSTABLE_OFFSET_COMMIT"}
    assert pending == unstable
    if scenario == "transactions":
        assert {g for g, _, _ in pending} == {"tx-hang"} and len(pending) == 4


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_classic_members_match_broker(brokerdata, broker_state, scenario):
    exp = _expected(brokerdata, scenario)
    members = defaultdict(dict)
    for m in broker_state[scenario]["group_members"]:
        members[m["group_id"]][m["member_id"]] = m
    for gid, v in exp.items():
        dg = v.get("describe_groups") or {}
        if not v["listed"] or v["list_groups"]["group_type"] != "classic" or dg.get("error") != "NONE":
            continue
        want = {m["member_id"]: (m["client_id"], m["client_host"], m["group_instance_id"], m["assignment"],
                                 sorted((m.get("subscription") or {}).get("topics") or []))
                for m in dg["members"]}
        got = {mid: (m["client_id"], m["client_host"], m["group_instance_id"], _assignment(m["assigned_partitions"]),
                     sorted(m["subscribed_topics"] or []))
               for mid, m in members[gid].items()}
        assert got == want, gid


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_consumer_groups_match_broker(brokerdata, broker_state, scenario):
    exp = _expected(brokerdata, scenario)
    groups = {g["group_id"]: g for g in broker_state[scenario]["loaded_groups"]}
    members = defaultdict(dict)
    for m in broker_state[scenario]["group_members"]:
        members[m["group_id"]][m["member_id"]] = m
    for gid, v in exp.items():
        cgd = v.get("consumer_group_describe") or {}
        if cgd.get("error") != "NONE":
            continue
        g = groups[gid]
        assert (g["generation"], g["assignment_epoch"], g["state"]) == (
            cgd["group_epoch"], cgd["assignment_epoch"], cgd["state"]), gid
        named = [m["server_assignor"] for m in members[gid].values() if m["server_assignor"]]
        if named:
            assert g["protocol"] == cgd["assignor_name"], gid
        else:
            # No member names a server assignor: the broker reports the first of its `group.consumer.assignors`
            # (default: uniform, range). That is broker configuration, not in the log, so the rebuild says null.
            assert g["protocol"] is None and cgd["assignor_name"] in ("uniform", None), gid
        want = {m["member_id"]: (m["member_epoch"], m["client_id"], m["instance_id"], m["rack_id"],
                                 sorted(m["subscribed_topic_names"]), m["subscribed_topic_regex"] or None,
                                 m["assignment"], m["target_assignment"]) for m in cgd["members"]}
        got = {mid: (m["member_epoch"], m["client_id"], m["group_instance_id"], m["rack_id"],
                     sorted(m["subscribed_topics"] or []), m["subscribed_topic_regex"] or None,
                     _assignment(m["assigned_partitions"]), _assignment(m["target_partitions"]))
               for mid, m in members[gid].items()}
        assert got == want, gid


def test_removed_groups_are_not_listed(brokerdata, broker_state):
    for scenario in SCENARIOS:
        exp = _expected(brokerdata, scenario)
        for r in broker_state[scenario]["removed_groups"]:
            if r["group_id"] in exp:
                assert not exp[r["group_id"]]["listed"] or r["group_id"] in {
                    g["group_id"] for g in broker_state[scenario]["loaded_groups"]}


def _partition_state(tables, partition: int) -> dict:
    """A replay's groups (type, state, generation, members) and offsets of one offsets partition."""
    return {"groups": sorted((g["group_id"], g["group_type"], g["state"], g["generation"], g["member_count"])
                             for g in tables["loaded_groups"] if g["offsets_partition"] == partition),
            "offsets": sorted((o["group_id"], o["topic"], o["partition"], o["committed_offset"])
                              for t in ("loaded_offsets", "empty_group_offsets") for o in tables[t]
                              if o["offsets_partition"] == partition)}


def test_a_point_in_time_inside_a_batch_sees_none_of_it(broker_rows):
    """Kafka 4.0's coordinator gathers the records of the writes made within `group.coordinator.append.linger.ms`
    into one batch, each stamped at its write (CoordinatorRuntime.maybeFlushCurrentBatch), and answers reads at the
    last committed offset, a batch end (CoordinatorReadEvent.run): the brokers' classic groups' first batch holds
    the JoinGroup's generation 0 and, milliseconds later, the SyncGroup's generation 1. A --until-time between two of
    a batch's records sees its partition as the batch before left it, and at its newest record the whole batch."""
    checked = 0
    for scenario, rows in broker_rows.items():
        batches = defaultdict(list)
        for r in rows:
            if r.get("batch_first_offset") is not None and r.get("timestamp") is not None:
                batches[(r["offsets_partition"], r["batch_first_offset"])].append(r["timestamp"])
        for (partition, _), times in sorted(batches.items()):
            if min(times) == max(times):
                continue
            cut = lambda t: _partition_state(replay_rows(  # noqa: E731
                rows, ReplayOptions(semantics="modern", snapshot_id="cut", num_partitions=50, kafka_version="4.0",
                                    until_time_ms=t)), partition)
            before, inside, newest = cut(min(times) - 1), cut(max(times) - 1), cut(max(times))
            assert inside == before and newest != before, (scenario, partition, times)
            checked += 1
    assert checked >= 10


#: a batch's header as kafka-dump-log prints it: its offsets and its maxTimestamp (the batch's newest record time)
_BATCH_LINE = re.compile(r"^baseOffset: (\d+) lastOffset: (\d+) .* (?:CreateTime|LogAppendTime|NoTimestampType): (-?\d+)")


def _dump_log_batch_times(scenario_dir: Path) -> dict[tuple[int, int], int | None]:
    """(offsets partition, offset) -> its batch header's maxTimestamp, as the broker wrote it (None: -1)."""
    out = {}
    for f in sorted((scenario_dir / "dump_log").glob("__consumer_offsets-*.txt")):
        part = int(f.stem.rsplit("-", 1)[1])
        for line in f.read_text(encoding="utf-8").splitlines():
            if m := _BATCH_LINE.search(line):
                first, last, newest = (int(g) for g in m.groups())
                out.update({(part, o): None if newest < 0 else newest for o in range(first, last + 1)})
    return out


def test_every_history_row_is_stamped_with_its_batch_s_newest_time(brokerdata, broker_state):
    """The engine records when a reader of the coordinator first saw each record: its batch's newest record time,
    which Kafka's own batch header holds as its maxTimestamp (DefaultRecordBatch, MemoryRecordsBuilder). The
    views cut by it (`history.held_at`), so it is checked against the broker's bytes, for both histories."""
    checked = differ = 0
    for scenario, tables in broker_state.items():
        header = _dump_log_batch_times(brokerdata / scenario)
        rows = [*tables["offset_commits"], *tables["group_history"]]
        assert rows, scenario
        for r in rows:
            at = (r["offsets_partition"], r["record_offset"])
            assert r["batch_timestamp"] == header[at], (scenario, at)
            checked += 1
            differ += r["batch_timestamp"] != r["record_timestamp"]
    assert checked > 100 and differ >= 10  # the broker data holds batches of several times


@pytest.mark.spark
def test_spark_shards_equal_in_process_on_brokerdata(spark, broker_rows):
    """All twelve scenarios in one Spark job: scenario i's partition p becomes partition 50*i + p."""
    shifted = {s: [{**r, "offsets_partition": r["offsets_partition"] + 50 * i}
                   if r.get("offsets_partition") is not None else r for r in rows]
               for i, (s, rows) in enumerate(broker_rows.items())}
    everything = [r for rows in shifted.values() for r in rows]
    parts = by_partition(spark_tables(spark, everything, OPTIONS))
    ref = by_partition(replay_rows(everything, OPTIONS))
    assert set(parts) == set(ref)
    for p in ref:
        assert_same(parts[p], ref[p], f"{SCENARIOS[p // 50]} partition {p % 50}")
