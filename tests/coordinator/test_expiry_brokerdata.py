"""Broker ground truth for expiry: a Kafka 4.0 broker (new coordinator, offsets.retention.minutes=1, a cleanup pass
every second) wrote its cleanup tombstones into the log (`brokerdata/expiry`). For every cleanup batch found in the
decoded rows, replaying the log just before it and running one pass at the batch's time must remove exactly the
offsets and groups the broker tombstoned — and a pass one check interval earlier must remove nothing.
"""
from __future__ import annotations

from collections import defaultdict

import pytest

from pipelines.coordinator.expiry import ExpiryOptions, cleanup_group_metadata
from tests.coordinator.harness import as_rows

SCENARIO = "expiry"
RETENTION_MINUTES = 1  # broker.properties: offsets.retention.minutes=1
CHECK_INTERVAL_MS = 1000  # broker.properties: offsets.retention.check.interval.ms=1000
KAFKA_VERSION = "4.0"
# Group-level keys a cleanup pass tombstones when it deletes a group: GroupMetadata (classic), ConsumerGroupMetadata
# (KIP-848; the pass also tombstones its partition/target-assignment metadata, types 4 and 6, for the same group).
GROUP_KEY_TYPES = {2, 3}
OFFSET_KEY_TYPES = {0, 1}


@pytest.fixture(scope="module")
def rows(brokerdata):
    reader = pytest.importorskip("pipelines.decoding.reader")
    return list(reader.iter_decoded_rows([brokerdata / SCENARIO / "data"]))


def cleanup_batches(rows):
    """Batches the coordinator's cleanup wrote: data batches made only of tombstones, at least one of them for an
    offset or a group (a member leaving writes member tombstones next to new group records; those are not it)."""
    batches = defaultdict(list)
    for r in rows:
        if r["record_kind"] != "control":
            batches[(r["offsets_partition"], r["batch_base_offset"])].append(r)
    out = []
    for (partition, _), recs in sorted(batches.items()):
        if not all(r["is_tombstone"] for r in recs):
            continue
        offsets = {(r["group_id"], r["topic"], r["partition"]) for r in recs if r["key_type"] in OFFSET_KEY_TYPES}
        groups = {r["group_id"] for r in recs if r["key_type"] in GROUP_KEY_TYPES}
        if offsets or groups:
            out.append({
                "offsets_partition": partition,
                "first_offset": min(r["offset"] for r in recs),
                "time_ms": max(r["timestamp"] for r in recs),  # CreateTime: the pass's clock
                "offsets": offsets,
                "groups": groups,
            })
    return out


def state_before(rows, batch):
    """The coordinator's state of that partition just before the cleanup batch: the log prefix, replayed."""
    from pipelines.coordinator.options import ReplayOptions
    from pipelines.coordinator.shard import replay_rows

    options = ReplayOptions(semantics="modern", until_offset=batch["first_offset"] - 1, num_partitions=50,
                            snapshot_id="expiry")
    return replay_rows([r for r in rows if r["offsets_partition"] == batch["offsets_partition"]], options)


def options_at(as_of_ms):
    return ExpiryOptions(as_of_ms=as_of_ms, retention_minutes=RETENTION_MINUTES, semantics="modern",
                         kafka_version=KAFKA_VERSION)


def outcome(res):
    res = as_rows(res)
    return ({(r["group_id"], r["topic"], r["partition"]) for r in res["expired_offsets"]},
            {r["group_id"] for r in res["expired_groups"] if r["writes_tombstone"]})


def test_scenario_has_the_cleanups_the_broker_logged(rows):
    # SCENARIO.md's broker log: 8 "Generated N tombstone records while cleaning up group metadata" lines.
    batches = cleanup_batches(rows)
    assert len(batches) == 8
    assert {g for b in batches for g in b["groups"]} == {"ex-empty", "ex-simple", "ex-simple-late", "ex-k848-empty"}


def test_each_broker_cleanup_pass_is_reproduced_exactly(rows):
    for batch in cleanup_batches(rows):
        state = state_before(rows, batch)
        res = as_rows(cleanup_group_metadata(state, options_at(batch["time_ms"])))
        label = f"__consumer_offsets-{batch['offsets_partition']} @ {batch['time_ms']}"
        assert outcome(res) == (batch["offsets"], batch["groups"]), label
        # Every group this pass deletes is one the broker wrote a tombstone for (new coordinator: always).
        assert all(r["writes_tombstone"] for r in res["expired_groups"]), label
        remaining = {r["group_id"] for r in res["loaded_groups"]}
        assert not remaining & batch["groups"], label


def test_a_pass_one_interval_earlier_removes_nothing(rows):
    # The broker ran a pass on that partition about one check interval before and wrote nothing.
    for batch in cleanup_batches(rows):
        res = cleanup_group_metadata(state_before(rows, batch), options_at(batch["time_ms"] - CHECK_INTERVAL_MS))
        assert outcome(res) == (set(), set()), f"__consumer_offsets-{batch['offsets_partition']} @ {batch['time_ms']}"


def test_full_log_at_its_newest_record_expires_nothing_more(rows):
    # The copied log is the broker's state at stop: everything due had been tombstoned; ex-fresh (committed 5 s
    # before the stop) and the subscribed topics of the Stable groups remain.
    from pipelines.coordinator.options import ReplayOptions
    from pipelines.coordinator.shard import replay_rows

    state = replay_rows(rows, ReplayOptions(semantics="modern", num_partitions=50, snapshot_id="expiry"))
    newest = max(r["timestamp"] for r in rows if r["timestamp"] is not None)
    assert outcome(cleanup_group_metadata(state, options_at(newest))) == (set(), set())
    fresh = [r for r in state["empty_group_offsets"] if r["group_id"] == "ex-fresh"]
    due = max(r["commit_timestamp"] for r in fresh) + RETENTION_MINUTES * 60_000
    offsets, groups = outcome(cleanup_group_metadata(state, options_at(due)))
    assert offsets == {(r["group_id"], r["topic"], r["partition"]) for r in fresh} and groups == {"ex-fresh"}


# -- Spark: the same engine, one task per offsets partition ---------------------------------------------------------

@pytest.mark.spark
def test_spark_shards_replay_then_expire_reproduce_every_broker_pass(spark, rows):
    """End to end through the Spark boundary: the decoded log prefix of each pass's partition is loaded and expired
    in a Spark task at the broker's pass time, and removes exactly what the broker removed (one job per pass)."""
    from pipelines.coordinator.options import ReplayOptions
    from pipelines.frames.shards import replay_on_spark
    from tests.coordinator.rowkit import to_log

    for batch in cleanup_batches(rows):
        part = [r for r in rows if r["offsets_partition"] == batch["offsets_partition"]]
        options = ReplayOptions(semantics="modern", until_offset=batch["first_offset"] - 1, num_partitions=50,
                                snapshot_id="expiry")
        shards = replay_on_spark(spark, to_log(spark, part), options, options_at(batch["time_ms"]), {}, keep=False)
        res = {t: shards.tables[t].to_pylist() for t in ("expired_offsets", "expired_groups")}  # collected state
        shards.release()
        assert outcome(res) == (batch["offsets"], batch["groups"]), batch
