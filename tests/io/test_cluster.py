"""A warehouse keeps one cluster's history: a dump of another cluster is refused before Spark starts (exit 2, one
line), or, with `--other-cluster`, written as a snapshot without adding its records to the history.

The history keys a record by its log position, which another cluster's log reuses: two generated dumps (different
seeds, so different `__consumer_offsets` topic ids in their `partition.metadata`) rebuilt into one warehouse used
to leave the history disagreeing with the served state for the second one, with no warning."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.serving.warehouse_kit import WarehouseKit, commit


def _plan(*paths: Path):
    from pipelines.rebuild.preflight import plan_and_check

    return plan_and_check([str(p) for p in paths])


def test_real_broker_dirs_name_their_cluster(brokerdata, tmp_path):
    """brokerdata's log dirs are two real Kafka 4.0 clusters' (their meta.properties): one is refused against a
    warehouse whose history is the other's, and both at once are refused as mixed."""
    from pipelines.io import cluster as clusters
    from pipelines.rebuild.preflight import check_cluster
    from pipelines.rebuild import UsageError

    tx, deletes = brokerdata / "transactions" / "data", brokerdata / "deletes" / "data"
    ident = clusters.of_inputs(_plan(tx))
    assert list(ident.cluster_ids) == ["7WtOTXkSSwyHv7weL_KELg"]  # transactions/data/meta.properties
    assert set(ident.topic_ids.values()) == {"jGxhuB3FQUWVdY1V5Sl7jg"}  # every __consumer_offsets-N/partition.metadata

    with pytest.raises(UsageError, match="different clusters: cluster.id 7WtOTXkSSwyHv7weL_KELg .*, cluster.id "
                                         "LmT16m13QTuOfV70PdvoNw"):
        check_cluster(_plan(tx, deletes), clusters.storage.location(tmp_path / "wh"), False)

    kit = WarehouseKit(tmp_path / "wh")
    kit.snapshot("s", commits=[commit("g", "t", 0, 5)])
    wh = clusters.storage.location(kit.root)
    clusters.record(wh, ident)
    assert check_cluster(_plan(tx), wh, False)[1] is None
    with pytest.raises(UsageError) as e:
        check_cluster(_plan(deletes), wh, False)
    assert str(e.value).startswith("the input is cluster.id LmT16m13QTuOfV70PdvoNw, the warehouse's history is "
                                   "cluster.id 7WtOTXkSSwyHv7weL_KELg's: a warehouse keeps one cluster's history")
    assert check_cluster(_plan(deletes), wh, True)[1].startswith("the input is cluster.id LmT16m13QTuOfV70PdvoNw")


def test_a_damaged_cluster_record_is_refused_not_taken_for_none(brokerdata, tmp_path):
    """A `_cluster.json` that is no cluster record (not JSON, another shape, a directory) read as none: the check of
    the input's cluster was switched off, and the run then wrote the input's cluster over it. Now one line naming the
    file (exit 2); `--other-cluster` writes the snapshot with the history left alone, as for another cluster."""
    from pipelines.io import cluster as clusters
    from pipelines.rebuild import UsageError
    from pipelines.rebuild.preflight import check_cluster

    deletes = brokerdata / "deletes" / "data"
    kit = WarehouseKit(tmp_path / "wh")
    kit.snapshot("s", commits=[commit("g", "t", 0, 5)])
    wh = clusters.storage.location(kit.root)
    record = kit.root / "_cluster.json"
    for damage, said in [('{"cluster_id": "7WtOTXkSSwyHv7weL_KELg"', "is not JSON"),
                         ("[1]", "is not a cluster record"), ('{"cluster_id": 5}', "is not a cluster record"),
                         ('{"offsets_topic_ids": {"x": "a"}}', "is not a cluster record"), ("", "is not JSON")]:
        record.write_text(damage)
        with pytest.raises(UsageError, match=f"_cluster.json {said}.*cannot be checked"):
            check_cluster(_plan(deletes), wh, False)
        assert check_cluster(_plan(deletes), wh, True)[1].endswith("the warehouse's history cluster is unknown")
        assert record.read_text() == damage
    record.unlink()
    record.mkdir()
    with pytest.raises(UsageError, match="_cluster.json cannot be read as a file"):
        check_cluster(_plan(deletes), wh, False)
    record.rmdir()
    assert check_cluster(_plan(deletes), wh, False)[1] is None  # none recorded: this run records its own


def rebuild(wh: Path, dump: Path, snapshot_id: str, *args: str):
    from jobs.cli import main

    r = CliRunner().invoke(main, ["rebuild", "--input", str(dump), "--warehouse", str(wh), "--snapshot-id",
                                  snapshot_id, "--env", "ci", "--json", "--quiet", *args], catch_exceptions=False)
    return r


def _latest(history, snapshot_state):
    """Per (group, topic, partition): the committed offset of the history's last applicable commit (non-tombstone,
    not aborted or pending, by log position), for the keys the snapshot holds."""
    out = {}
    for r in sorted(history.to_pylist(), key=lambda r: (r["offsets_partition"], r["record_offset"])):
        if r["txn_outcome"] in ("aborted", "pending"):
            continue
        key = (r["group_id"], r["topic"], r["partition"])
        out[key] = None if r["is_tombstone"] else r["committed_offset"]
    return {k: out.get(k) for k in snapshot_state}


@pytest.mark.spark
def test_a_dump_of_another_cluster_is_refused_or_kept_out_of_the_history(spark, tmp_path):
    from pipelines.io.warehouse import Warehouse
    from simulator import generate_sample

    a, b = tmp_path / "a", tmp_path / "b"
    generate_sample(a, records=3000, groups=20, partitions=4, seed=1)
    generate_sample(b, records=3000, groups=20, partitions=4, seed=2)
    wh, alone = tmp_path / "wh", tmp_path / "alone"
    assert rebuild(wh, a, "a").exit_code == 0
    w = Warehouse(wh)
    history = w.read_table("offset_commits")
    state_a = {(r["group_id"], r["topic"], r["partition"]): r["committed_offset"]
               for r in w.read_table("loaded_offsets", "a").to_pylist()}
    assert _latest(history, state_a) == state_a  # the history agrees with what is served

    refused = rebuild(wh, b, "b")
    assert refused.exit_code == 2
    assert len(refused.stderr.strip().splitlines()) == 1 and "Traceback" not in refused.stderr
    assert "__consumer_offsets-0 is topic id" in refused.stderr and "--other-cluster" in refused.stderr
    assert [r["snapshot_id"] for r in w.snapshots()] == ["a"]
    # a what-if run of it too: its records would go into the same history
    assert rebuild(wh, b, "b-then", "--until-offset", "100").exit_code == 2

    taken = rebuild(wh, b, "b", "--other-cluster")
    assert taken.exit_code == 0, taken.output
    summary = json.loads(taken.stdout.strip().splitlines()[-1])
    assert any(x.startswith("--other-cluster: the input's __consumer_offsets-0") for x in summary["warnings"])
    # served as usual, the same state as b rebuilt alone
    assert rebuild(alone, b, "b").exit_code == 0
    def state(where):
        return sorted(tuple(r.values()) for r in Warehouse(where).read_table(
            "loaded_offsets", "b", columns=["group_id", "topic", "partition", "committed_offset"]).to_pylist())
    assert w.latest_snapshot_id() == "b" and state(wh) == state(alone)
    # and the history is still a's alone, row for row
    after = w.read_table("offset_commits")
    assert sorted(map(str, after.to_pylist())) == sorted(map(str, history.to_pylist()))
    assert _latest(after, state_a) == state_a


def test_partition_dirs_of_two_offsets_topics_are_refused_not_merged(tmp_path):
    """A log dir whose `__consumer_offsets-N` dirs name two topic ids in their `partition.metadata` (a cluster whose
    offsets topic was recreated, or a partition dir of another cluster copied in) holds two coordinators' logs: one
    line, exit 2, naming both ids, before anything is read."""
    from tests import badinputs as bi

    data = bi.offsets_topics_of_two_ids(tmp_path / "data")
    r = rebuild(tmp_path / "wh", data, "s")
    assert r.exit_code == 2, r.output
    (line,) = r.output.strip().splitlines()
    assert "different __consumer_offsets topics" in line and "lEtGfS1_Si-I8Vl7ExUY6g" in line \
        and "jGxhuB3FQUWVdY1V5Sl7jg" in line
    assert not (tmp_path / "wh" / "offset_commits").exists()
