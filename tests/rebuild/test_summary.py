"""What a rebuild's summary says of its time: the run's first Python job, as Spark timed it, printed beside the
stages' times and among the progress lines; a run that starts no Python job says none."""
from __future__ import annotations

import pytest

from tests import badinputs as bi


def _segment(root):
    g = bi.group_in(0, "timed")
    bi.write_segment(root / "__consumer_offsets-0", 0, bi.batch([bi.group_record(g, bi.T0)], 0) + b"".join(
        bi.batch([bi.commit(g, i, 100 + i, bi.T0 + i + 1)], i + 1) for i in range(3)))
    return root


@pytest.mark.spark
def test_a_run_on_spark_reports_its_first_python_job(spark, settings, tmp_path):
    import time

    from jobs.summary_text import format_summary
    from pipelines.rebuild import RebuildRequest, run_rebuild
    from tests.test_incremental import spark_replay_settings

    lines: list[str] = []
    started = time.monotonic()
    summary = run_rebuild(spark, spark_replay_settings(settings), RebuildRequest(
        inputs=(str(_segment(tmp_path / "in")),), warehouse=str(tmp_path / "wh"), snapshot_id="timed"),
        emit=lines.append)
    wall = time.monotonic() - started
    assert summary.task_cpu_seconds.get("decode") is not None  # decoded in Spark's Python tasks
    # the loaders read the group record and, of the commits after it, the first and the last (an offset value makes
    # a simple group of an id that holds none): the one between is replayed column by column
    assert (summary.records_in, summary.records_looped) == (4, 3)
    assert 0 < summary.first_python_job_seconds < wall
    assert f"  first Python job  {summary.first_python_job_seconds:.1f}s" in format_summary(summary).splitlines()
    assert f"          first Python job {summary.first_python_job_seconds:.1f}s" in lines  # the progress line


@pytest.mark.spark
def test_a_run_in_the_driver_starts_no_python_job(spark, settings, tmp_path):
    from jobs.summary_text import format_summary
    from pipelines.rebuild import RebuildRequest, run_rebuild

    summary = run_rebuild(spark, settings, RebuildRequest(
        inputs=(str(_segment(tmp_path / "in")),), warehouse=str(tmp_path / "wh"), snapshot_id="here"))
    assert summary.first_python_job_seconds is None and summary.records_looped is None
    assert "first Python job" not in format_summary(summary)


@pytest.mark.spark
@pytest.mark.parametrize("semantics,version,kinds,failing", [
    ("legacy", "3.9", "consumer_group 1, share_group 1, streams_group 1", 0),  # `readMessageKey` knows 0-2
    ("modern", "3.9", "share_group 1, streams_group 1", 1),  # 3.x's consumer group replaces no simple group
    ("modern", "4.0", "streams_group 1", 1),
    ("modern", "4.1", "", 2)])
def test_a_run_says_how_many_records_of_unknown_key_types_it_skipped(spark, settings, tmp_path, semantics, version,
                                                                     kinds, failing):
    """A consumer group's record (type 3), a share group's (type 11) and a streams group's (type 17): the
    coordinator the run emulates skips those of key types it does not know, with a warning (spec §5.4); the run
    skips them with that reason and says how many of each kind. Those it knows for the consumer group's id
    (`failing`: its load fails there) are skipped too, not used."""
    from pipelines.decoding.batch_writer import write_record_batch
    from pipelines.decoding.message_writer import write_group_record_key, write_group_record_value
    from pipelines.rebuild import RebuildRequest, run_rebuild

    g = bi.group_in(0, "sg")
    records = [(write_group_record_key(3, g), write_group_record_value(3, {"epoch": 2}), bi.T0),
               (write_group_record_key(11, g), write_group_record_value(11, {"epoch": 3}, "4.0"), bi.T0),
               (write_group_record_key(17, g), write_group_record_value(17, {"epoch": 1, "metadataHash": 2}), bi.T0)]
    bi.write_segment(tmp_path / "in" / "__consumer_offsets-0", 0, bi.batch([bi.commit(g, 0, 100, bi.T0)], 0)
                     + write_record_batch(records, 1))
    summary = run_rebuild(spark, settings, RebuildRequest(
        inputs=(str(tmp_path / "in"),), warehouse=str(tmp_path / "wh"), snapshot_id="kinds", semantics=semantics,
        kafka_version=version))
    skipped = kinds.count(" 1")
    assert (summary.records_in, summary.records_skipped, summary.records_out) == (4, skipped + failing,
                                                                                  4 - skipped - failing)
    said = [w for w in summary.warnings if "does not know" in w]
    assert len(said) == bool(skipped)
    assert not said or said[0].startswith(f"{skipped} record(s) of key types the {semantics} coordinator of Kafka "
                                          f"{version} does not know skipped ({kinds})")
    # a modern run's default version (4.0) knows no streams group: the run says which broker would replay it, and how
    hint = ("; 4.0 is the default --kafka-version (rebuild.kafka_version): Kafka 4.1's coordinator would replay 1 of "
            "them; give --kafka-version 4.1 to emulate that broker")
    assert [w.endswith(hint) for w in said] == [(semantics, version) == ("modern", "4.0")] * len(said)


@pytest.mark.spark
@pytest.mark.parametrize("version,aborts", [("3.3", True), ("3.4.0", True), ("3.4.1", False)])
def test_a_run_says_which_partitions_an_old_coordinator_before_3_4_1_would_not_load(spark, settings, tmp_path,
                                                                                    version, aborts):
    """The old coordinator before 3.4.1 (KAFKA-14869) aborts a partition's load at a record of a key type it does
    not know (spec §5.4), and its broker serves the partition with no groups: a run emulating one says which
    partitions that is."""
    from pipelines.decoding.batch_writer import write_record_batch
    from pipelines.decoding.message_writer import write_group_record_key, write_group_record_value
    from pipelines.rebuild import RebuildRequest, run_rebuild

    g, plain, odd = bi.group_in(3, "sg"), bi.group_in(0, "plain"), bi.group_in(7, "odd")
    record = (write_group_record_key(11, g), write_group_record_value(11, {"epoch": 3}, "4.0"), bi.T0)
    bi.write_segment(tmp_path / "in" / "__consumer_offsets-3", 0, write_record_batch([record], 0))
    negative = ((-3).to_bytes(2, "big", signed=True) + odd.encode(), b"\x00\x00", bi.T0)  # no key type Kafka knows
    bi.write_segment(tmp_path / "in" / "__consumer_offsets-7", 0, write_record_batch([negative], 0))
    bi.write_segment(tmp_path / "in" / "__consumer_offsets-0", 0, bi.batch([bi.commit(plain, 0, 100, bi.T0)], 0))
    summary = run_rebuild(spark, settings, RebuildRequest(
        inputs=(str(tmp_path / "in"),), warehouse=str(tmp_path / "wh"), snapshot_id="old", kafka_version=version))
    said = [w for w in summary.warnings if "aborts the load" in w]
    assert said == ([f"Kafka {version}'s loader aborts the load of an offsets partition at a record of a key type but "
                     "0-2 (it knows those only; 3.4.1+ skips the others): its broker would serve partition(s) 3, 7 "
                     "with no groups; this snapshot holds what their records give"] if aborts else [])


def test_a_run_emulating_0_8_skips_the_key_types_0_9_added_and_says_its_load_aborts(no_spark, settings, tmp_path):
    """0.8's `OffsetManager.readMessageKey` knows key type 0 alone (`schemaFor` throws KafkaException "Unknown offset
    schema version" at 1 or 2: the group coordinator and its keys came with 0.9), and its load of the partition stops
    there, the offsets read before it kept (it put each in its cache as it read it). A run emulating 0.8.2 replayed a
    type-1 commit and a GroupMetadata record as 0.9+ does; they are skipped as of an unknown key type now, and the
    run names the partitions."""
    from pipelines.decoding import message_writer as mw
    from pipelines.rebuild import RebuildRequest, run_rebuild

    g0, g5, g6 = bi.group_in(0, "new"), bi.group_in(5, "group"), bi.group_in(6, "old")
    v0 = mw.write_offset_commit_value(0, offset=60, metadata="", commit_timestamp=bi.T0)
    group = (mw.write_group_metadata_key(g5), mw.write_group_metadata_value(
        0, protocol_type="consumer", generation=1, protocol=None, leader=None, members=[]), bi.T0)
    # values of versions 0.8's reader reads (a type-1 key's v1 is its own value's): only their keys are unknown to it
    bi.write_segment(tmp_path / "in" / "__consumer_offsets-0", 0, bi.batch([bi.commit(g0, 0, 10, bi.T0, version=1)],
                                                                          0))
    bi.write_segment(tmp_path / "in" / "__consumer_offsets-5", 0, bi.batch([group], 0))
    bi.write_segment(tmp_path / "in" / "__consumer_offsets-6", 0, bi.batch(
        [(mw.write_offset_commit_key(g6, bi.TOPIC, 0, key_type=0), v0, bi.T0)], 0))
    summary = run_rebuild(no_spark, settings, RebuildRequest(
        inputs=(str(tmp_path / "in"),), warehouse=str(tmp_path / "wh"), snapshot_id="old", kafka_version="0.8.2",
        num_partitions=50))
    assert (summary.records_in, summary.records_skipped, summary.records_out, summary.offsets) == (3, 2, 1, 1)
    assert not [w for w in summary.warnings if "value versions" in w]
    assert [w for w in summary.warnings if "aborts the load" in w] == [
        "Kafka 0.8.2's loader aborts the load of an offsets partition at a record of a key type but 0 (it knows that "
        "only; 3.4.1+ skips the others): its broker would serve partition(s) 0, 5 with only the offsets read before "
        "that record; this snapshot holds what their records give"]


@pytest.mark.spark
@pytest.mark.parametrize("on_spark", [False, True])
@pytest.mark.parametrize("semantics,failing", [("modern", "consumer group record"),
                                               ("legacy", "static member listed twice")])
def test_a_run_says_which_partitions_the_coordinator_would_fail_to_load(spark, settings, tmp_path, on_spark,
                                                                        semantics, failing, monkeypatch):
    """A consumer group record for an id holding a classic group with members (the new coordinator's replay throws
    IllegalStateException), or a GroupMetadata value listing one static member's instance id twice (3.0+'s
    `GroupMetadata.add` throws): the partition's load fails and its broker serves none of its groups (spec §8 item
    15). The replay skips the record; the run says so, naming the partition and the group, not only in group_history,
    and counts it skipped, with the group history on Spark too (its tasks name what they skipped)."""
    from pipelines.decoding import message_writer as mw
    from pipelines.decoding.batch_writer import write_record_batch
    from pipelines.rebuild import RebuildRequest, run_rebuild
    from pipelines.rebuild import stages
    from tests.test_incremental import spark_replay_settings

    if on_spark:  # the shards' group history left on Spark, as a long one is
        monkeypatch.setattr(stages, "GROUP_EVENTS_IN_HAND", -1)
    g, fine = bi.group_in(4, "classic"), bi.group_in(0, "fine")
    if failing == "consumer group record":
        second = (mw.write_group_record_key(3, g), mw.write_group_record_value(3, {"epoch": 2}), bi.T0 + 1)
    else:
        members = [{"member_id": m, "group_instance_id": "instance-1"} for m in ("m1", "m2")]
        second = (mw.write_group_metadata_key(g), mw.write_group_metadata_value(
            3, protocol_type="consumer", generation=2, protocol="range", leader="m1", members=members), bi.T0 + 1)
    bi.write_segment(tmp_path / "in" / "__consumer_offsets-4", 0, bi.batch([bi.group_record(g, bi.T0)], 0)
                     + write_record_batch([second], 1))
    bi.write_segment(tmp_path / "in" / "__consumer_offsets-0", 0, bi.batch([bi.group_record(fine, bi.T0)], 0))
    summary = run_rebuild(spark, spark_replay_settings(settings) if on_spark else settings, RebuildRequest(
        inputs=(str(tmp_path / "in"),), warehouse=str(tmp_path / "wh"), snapshot_id="conflict", semantics=semantics,
        kafka_version="4.0" if semantics == "modern" else "3.9"))
    said = [w for w in summary.warnings if "load fails on" in w]
    assert said == [f"1 group record(s) the coordinator's load fails on (a GroupMetadata value repeating a member id "
                    f"before another member or a static member's instance id, a record of a group type other than "
                    f"its id's group, a value no layout reads, a 4.0 share or 3.x consumer group record of no group or "
                    f"member, or a tombstone out of the coordinator's deletion order: group(s) {g!r}) were skipped; "
                    "its broker would not load offsets partition(s) 4 and serve no group of them; this snapshot holds "
                    "what their other records give (group_history event 'skipped')"]
    # the skipped record is counted as skipped, not as used, and the counts still add up to every record read
    assert (summary.records_in, summary.records_out, summary.records_skipped) == (3, 2, 1)
    assert summary.status == "succeeded"


@pytest.mark.spark
@pytest.mark.parametrize("version", ["4.0", "4.1"])
def test_a_run_says_which_partitions_a_share_group_with_offsets_keeps_from_expiry(spark, settings, tmp_path, version):
    """Offsets committed for a 4.0 share group's id: 4.0's cleanup throws on that group (its
    `offsetExpirationCondition`), so nothing of its partition expires, an old simple group's offsets neither;
    partition 4's pass goes on. The run says which partition and group; 4.1 skips the share group and says nothing."""
    from pipelines.decoding.batch_writer import write_record_batch
    from pipelines.decoding.message_writer import write_group_record_key, write_group_record_value
    from pipelines.rebuild import RebuildRequest, run_rebuild

    sg, old, other = bi.group_in(0, "sg"), bi.group_in(0, "old"), bi.group_in(4, "other")
    share = [(write_group_record_key(11, sg), write_group_record_value(11, {"epoch": 2}, "4.0"), bi.T0),
             (write_group_record_key(12, sg), write_group_record_value(12, {"assignmentEpoch": 2}), bi.T0)]
    bi.write_segment(tmp_path / "in" / "__consumer_offsets-0", 0, bi.batch([bi.commit(old, 0, 100, bi.T0)], 0)
                     + write_record_batch(share, 1) + bi.batch([bi.commit(sg, 0, 5, bi.T0)], 3))
    bi.write_segment(tmp_path / "in" / "__consumer_offsets-4", 0, bi.batch([bi.commit(other, 0, 100, bi.T0)], 0))
    summary = run_rebuild(spark, settings, RebuildRequest(
        inputs=(str(tmp_path / "in"),), warehouse=str(tmp_path / "wh"), snapshot_id="share", semantics="modern",
        kafka_version=version, as_of=str(bi.T0 + 365 * 86_400_000)))
    assert (summary.expired_offsets, summary.expired_groups) == ((1, 1) if version == "4.0" else (2, 2))
    said = [w for w in summary.warnings if "ShareGroup.offsetExpirationCondition" in w]
    assert said == ([f"share group(s) {sg!r} hold committed offsets, on which Kafka 4.0's cleanup throws "
                     "(ShareGroup.offsetExpirationCondition): its broker expires no offset and deletes no group in "
                     "offsets partition(s) 0, nor does this snapshot"] if version == "4.0" else [])


@pytest.mark.spark
@pytest.mark.parametrize("semantics,version,said", [
    ("modern", "3.5", "Kafka 3.5 has no new group coordinator (it came with 3.6)"), ("modern", "3.6", None),
    ("legacy", "4.1", "Kafka 4.1 has no old group coordinator (the new one is its only one from 4.1)"),
    ("legacy", "4.0", None)])
def test_a_run_says_when_its_kafka_version_has_no_coordinator_of_its_semantics(spark, settings, tmp_path, semantics,
                                                                               version, said):
    """The new coordinator came with 3.6 and the old one is gone from 4.1 (spec §5.3): a run emulating a broker
    that has no coordinator of its semantics loads the log as another version would, and says so."""
    from pipelines.rebuild import RebuildRequest, run_rebuild

    from pipelines.decoding.batch_writer import write_control_batch, write_record_batch

    root = _segment(tmp_path / "in")
    g = bi.group_in(0, "timed")
    with (root / "__consumer_offsets-0" / "00000000000000000000.log").open("ab") as f:  # a transaction, committed
        f.write(write_record_batch([bi.commit(g, 0, 200, bi.T0 + 10)], 4, producer_id=7, producer_epoch=0,
                                   base_sequence=0, is_transactional=True)
                + write_control_batch(1, 0, 5, 7, 0, bi.T0 + 11))
    summary = run_rebuild(spark, settings, RebuildRequest(
        inputs=(str(root),), warehouse=str(tmp_path / "wh"), snapshot_id="v",
        semantics=semantics, kafka_version=version))
    got = [w for w in summary.warnings if "group coordinator (" in w]
    assert [w.split(":")[0] for w in got] == ([said] if said else [])
    # 3.6's new coordinator has no transactions (`coordinator_warnings.transaction_warnings`)
    assert [w.split(":")[0] for w in summary.warnings if "has no transactions" in w] == (
        ["1 transaction marker(s) in offsets partition(s) 0"] if (semantics, version) == ("modern", "3.6") else [])


def test_a_what_if_run_says_how_many_partitions_end_unknown_at_its_as_of():
    """A what-if run's end offsets are the ends at its as_of: partitions the log dirs hold whose end then is not
    known are counted, not said to be absent."""
    from jobs.summary_text import format_summary
    from pipelines.rebuild.summary import RunSummary

    line = next(ln for ln in format_summary(RunSummary(snapshot_id="then", kind="what-if", log_end_offsets=2,
                                                       log_end_offsets_unknown_at_as_of=7)).splitlines()
                if "end offsets" in ln)
    assert line.split(None, 2)[2] == ("2 data-topic partition(s) known at the as-of, 7 more in the log dirs whose end "
                                      "then is not (LAG unknown there)")
    line = next(ln for ln in format_summary(RunSummary(snapshot_id="now")).splitlines() if "end offsets" in ln)
    assert line.endswith("0 data-topic partition(s) in the log dirs (LAG unknown: give describe --end-offsets)")


@pytest.mark.spark
@pytest.mark.parametrize("semantics,version,skipped,on_spark", [
    ("legacy", "3.3", {"offset_commit:1 v4": 2, "group_metadata:2 v4": 5}, False),
    ("legacy", "3.3", {"offset_commit:1 v4": 2, "group_metadata:2 v4": 5}, True),
    ("legacy", "2.2", {"offset_commit:1 v4": 2, "group_metadata:2 v3": 0, "group_metadata:2 v4": 5}, False),
    ("legacy", "3.4.1", {}, False), ("modern", "4.0", {}, False),
    ("modern", "4.1", {"offset_commit:0 v3": 6}, False), ("modern", "4.1", {"offset_commit:0 v3": 6}, True)])
def test_a_run_skips_and_names_the_value_versions_its_coordinator_does_not_read(spark, settings, tmp_path, semantics,
                                                                                 version, skipped, on_spark):
    """Kafka fails a partition's load at a value version its coordinator does not read (spec §5.4, §8 item 7): v4
    of OffsetCommit and GroupMetadata before 3.4.1 (KIP-915), GroupMetadata v3 before 2.3, any but v0 of a type-0
    key from 4.1 (LegacyOffsetCommitValue). The run replays none of them, counts them skipped with that reason and
    names the partitions such a broker would not load."""
    from pipelines.decoding import message_writer as mw
    from pipelines.rebuild import RebuildRequest, run_rebuild
    from tests.test_incremental import spark_replay_settings

    def group(g, v):
        return mw.write_group_metadata_key(g), mw.write_group_metadata_value(
            v, protocol_type="consumer", generation=1, protocol=None, leader=None, current_state_timestamp=bi.T0,
            members=[]), bi.T0

    g0, g2, g5, g6 = (bi.group_in(p, "v") for p in (0, 2, 5, 6))
    legacy_key = mw.write_offset_commit_key(g6, bi.TOPIC, 0, key_type=0)
    parts = {0: [group(g0, 3), bi.commit(g0, 0, 10, bi.T0)],
             2: [bi.commit(g2, 0, 20, bi.T0), bi.commit(g2, 1, 21, bi.T0, version=4)],
             5: [group(g5, 4), bi.commit(g5, 0, 50, bi.T0)],
             6: [(legacy_key, bi.commit(g6, 0, 60, bi.T0)[1], bi.T0), bi.commit(g6, 1, 61, bi.T0, version=1)]}
    for p, records in parts.items():
        bi.write_segment(tmp_path / "in" / f"__consumer_offsets-{p}", 0, bi.batch(records, 0))
    summary = run_rebuild(spark, spark_replay_settings(settings) if on_spark else settings, RebuildRequest(
        inputs=(str(tmp_path / "in"),), warehouse=str(tmp_path / "wh"), snapshot_id="versions", semantics=semantics,
        kafka_version=version, num_partitions=50))
    n = len(skipped)
    assert (summary.records_in, summary.records_skipped, summary.records_out) == (8, n, 8 - n)
    assert summary.status == "succeeded", summary.validation["failed_expectations"]
    assert summary.offsets == 6 - sum(label.startswith("offset_commit") for label in skipped)
    # a group whose group record is skipped is the simple group of its offsets
    assert summary.empty_group_offsets == 4 + sum(label.startswith("group_metadata") for label in skipped) - (
        "offset_commit:1 v4" in skipped) - ("offset_commit:0 v3" in skipped)
    said = [w for w in summary.warnings if "value versions" in w]
    if not skipped:
        assert said == []
        return
    found = ", ".join(f"{label} 1" for label in sorted(skipped))
    partitions = ", ".join(map(str, sorted(set(skipped.values()))))
    fate = (f"its broker would serve offsets partition(s) {partitions} with no groups" if semantics == "legacy" else
            f"its broker would not load offsets partition(s) {partitions} and serve no group of them")
    assert len(said) == 1 and said[0].startswith(
        f"{n} record(s) of value versions the {semantics} coordinator of Kafka {version} does not read ({found}; ")
    assert f"skipped: its load of a partition fails at such a record, so {fate}; " in said[0]


def test_a_run_records_its_group_history_version_and_changes_then_warns_of_nothing(no_spark, settings, tmp_path):
    """`changes` tells a legacy group history written before a tombstone after a simple group's re-creation by an
    offset commit was a deletion only from its run's summary: a run records `group_history_version`, and over its
    own history changes gives both deletions of DeleteGroups run twice around a commit, with no warning."""
    import json

    from click.testing import CliRunner

    from jobs.cli import main
    from pipelines.decoding import message_writer as mw
    from pipelines.io.snapshots import DeltaWarehouseReader
    from pipelines.rebuild import RebuildRequest, run_rebuild
    from schemas.tables import GROUP_HISTORY_VERSION

    g = bi.group_in(0, "simple")
    offset_gone, group_gone = mw.write_offset_commit_key(g, bi.TOPIC, 0), mw.write_group_metadata_key(g)
    records = [bi.commit(g, 0, 10, bi.T0 + 1), (offset_gone, None, bi.T0 + 2), (group_gone, None, bi.T0 + 2),
               bi.commit(g, 0, 20, bi.T0 + 3), (offset_gone, None, bi.T0 + 4), (group_gone, None, bi.T0 + 4)]
    bi.write_segment(tmp_path / "in" / "__consumer_offsets-0", 0,
                     b"".join(bi.batch([r], i) for i, r in enumerate(records)))
    wh = tmp_path / "wh"
    run_rebuild(no_spark, settings, RebuildRequest(inputs=(str(tmp_path / "in"),), warehouse=str(wh),
                                                   snapshot_id="s", semantics="legacy", num_partitions=50))
    (row,) = [r for r in DeltaWarehouseReader(wh).runs().to_pylist() if r["snapshot_id"] == "s"]
    assert json.loads(row["summary"])["group_history_version"] == GROUP_HISTORY_VERSION
    r = CliRunner().invoke(main, ["changes", "--warehouse", str(wh), "--from", str(bi.T0), "--to",
                                  str(bi.T0 + 10_000), "--json"], catch_exceptions=False)
    assert r.exit_code == 0 and r.stderr == "", r.output
    assert [c["record_offset"] for c in json.loads(r.stdout) if c["kind"] == "group_deleted"] == [2, 5]


@pytest.mark.parametrize("semantics", ["legacy", "modern"])
def test_a_group_removed_then_used_for_offsets_alone_is_removed_loaded_and_valid(no_spark, settings, tmp_path,
                                                                                 semantics):
    """A group's tombstone with its offsets left (no offset tombstones before it), then a commit: Kafka's old loader
    has the id in removedGroups and loads an Empty group for its offsets (emptyGroupOffsets), and says so is no
    error ("possible (however unlikely) for a consumer group to be removed, and then to be used only for offset
    storage", GroupMetadataManager.doLoadGroupsAndOffsets, 3.9); the new coordinator's replay makes the simple
    group again (OffsetMetadataManager.replay, 4.0). The run is valid, the group in both tables."""
    from pipelines.decoding import message_writer as mw
    from pipelines.io.warehouse import Warehouse
    from pipelines.rebuild import RebuildRequest, run_rebuild

    g = bi.group_in(0, "reused")
    records = [bi.group_record(g, bi.T0), bi.commit(g, 0, 10, bi.T0 + 1),
               (mw.write_group_metadata_key(g), None, bi.T0 + 2), bi.commit(g, 1, 20, bi.T0 + 3)]
    bi.write_segment(tmp_path / "in" / "__consumer_offsets-0", 0,
                     b"".join(bi.batch([r], i) for i, r in enumerate(records)))
    summary = run_rebuild(no_spark, settings, RebuildRequest(
        inputs=(str(tmp_path / "in"),), warehouse=str(tmp_path / "wh"), snapshot_id="s", semantics=semantics,
        num_partitions=50))
    assert summary.status == "succeeded", summary.validation["failed_ids"]
    wh = Warehouse(tmp_path / "wh")
    (loaded,) = wh.read_table("loaded_groups", "s").to_pylist()
    assert (loaded["group_id"], loaded["state"], loaded["is_simple"]) == (g, "Empty", True)
    assert [r["group_id"] for r in wh.read_table("removed_groups", "s").to_pylist()] == [g]
    assert sorted(r["partition"] for r in wh.read_table("loaded_offsets", "s").to_pylist()) == [0, 1]
