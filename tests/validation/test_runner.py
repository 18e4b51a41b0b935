"""The runner's edges: the Spark partition expression vs the partitioner, accounting, policy, JSON and the report."""
from __future__ import annotations

import dataclasses
import json

import pytest

from pipelines.config import ConfigError, load_settings
from pipelines.coordinator.partitioner import java_string_hash
import pyarrow as pa

from pipelines.frames.tally import Tally, tally_rows
from pipelines.validation.accounting import SKIP_UNKNOWN_KEY, Accounting, PartitionCounts
from pipelines.validation.runner import pandas_max_rows, validation_settings
from .validation_rows import AS_OF_MS, N, p

# ids whose hash hits every branch: "" (0), Integer.MIN_VALUE (Utils.abs → 0), negative hashes, BMP non-ASCII,
# supplementary characters (a surrogate pair each), long ids (many wrap-arounds), the classic "Aa"/"BB" collision
TRICKY_IDS = ["", "a", "Aa", "BB", "polygenelubricants", "consumer-group-1", "日本語グループ", "😀", "g😀x€",
              "x" * 300, "connect-cluster", "_confluent-ksql-default_query_CSAS_1"]


def test_tricky_ids_cover_the_edge_cases():
    hashes = {g: java_string_hash(g) for g in TRICKY_IDS}
    assert hashes["polygenelubricants"] == -(2 ** 31)
    assert hashes[""] == 0 and hashes["Aa"] == hashes["BB"]
    assert any(h < 0 and h != -(2 ** 31) for h in hashes.values())


# -- settings ---------------------------------------------------------------------------------------------------


def test_validation_settings_per_environment():
    assert validation_settings(load_settings(env="ci"))[:2] == ("fail", 60.0)
    assert validation_settings(load_settings(env="local"))[0] == "warn"
    assert validation_settings(load_settings(env="ci", overrides={"rebuild": {"semantics": "modern"}}))[2] == "modern"


@pytest.mark.parametrize("bad", [{"policy": "ignore"}, {"timestamp_skew_minutes": "soon"},
                                 {"timestamp_skew_minutes": -5}, {"pandas_max_rows": -1},
                                 {"pandas_max_rows": "many"}])
def test_bad_validation_settings_are_usage_errors(bad):
    settings = load_settings(env="ci", overrides={"validation": bad})
    with pytest.raises(ConfigError):
        validation_settings(settings)
        pandas_max_rows(settings)


# -- accounting -------------------------------------------------------------------------------------------------


def _tally(kinds_by_partition, **cut):
    rows = [dict(offsets_partition=part, offset=i, record_kind=kind, control_type=None, key_type=None, timestamp=-1)
            for part, kinds in kinds_by_partition.items() for i, kind in enumerate(kinds)]
    return Tally(tally_rows(pa.Table.from_pylist(rows), **cut), **cut)


def test_accounting_from_the_tally_classifies_every_record():
    tally = _tally({
        0: ["offset_commit", "group_metadata", "control", "error", "unknown", "unknown"],
        3: ["offset_commit", "consumer_group"],
    })
    acc = Accounting.from_tally(tally)
    assert acc.partitions[0] == PartitionCounts(records_in=6, records_used=3, records_quarantined=1,
                                                records_skipped={SKIP_UNKNOWN_KEY: 2})
    assert acc.partitions[3] == PartitionCounts(records_in=2, records_used=2)
    assert acc.unbalanced() == []
    assert acc.totals.records_in == 8 and acc.totals.skipped_total == 2

    # the reader read one record more in partition 3 than decoding produced, and saw partition 5 decode to nothing
    off = Accounting.from_tally(tally, records_in={0: 6, 3: 3, 5: 4})
    assert off.unbalanced() == [3, 5]
    assert Accounting.from_dict(json.loads(json.dumps(off.to_dict()))) == off

    # past --until-offset 2: usable records are skipped with the reason, error and unknown rows keep theirs
    cut = Accounting.from_tally(_tally({0: ["offset_commit", "error", "unknown", "control", "error", "unknown"]},
                                       until_offset=2))
    assert cut.partitions[0] == PartitionCounts(records_in=6, records_used=1, records_quarantined=2,
                                                records_skipped={SKIP_UNKNOWN_KEY: 2, "after --until-offset 2": 1})


def _share_and_streams_log(tmp_path, more=()):
    """The decoded rows of a segment holding an offset commit, a share group's metadata (type 11, 4.0's layout), a
    streams group's (type 17) and a share group member's (type 10), written as a broker writes them, then `more`."""
    from pipelines.decoding import columnar
    from pipelines.decoding.batch_writer import write_record_batch
    from pipelines.decoding.message_writer import (write_group_record_key, write_group_record_value,
                                                   write_offset_commit_key, write_offset_commit_value)

    ts = 1_700_000_000_000
    member = dict(rackId=None, clientId="c", clientHost="h", subscribedTopicNames=["t"])
    records = [(write_offset_commit_key("sg", "t", 0), write_offset_commit_value(3, offset=5, commit_timestamp=ts), ts),
               (write_group_record_key(11, "sg"), write_group_record_value(11, {"epoch": 3}, "4.0"), ts),
               (write_group_record_key(17, "st"), write_group_record_value(17, {"epoch": 1, "metadataHash": 2}), ts),
               (write_group_record_key(10, "sg", "m"), write_group_record_value(10, member), ts), *more]
    log = tmp_path / "__consumer_offsets-0" / "00000000000000000000.log"
    log.parent.mkdir()
    log.write_bytes(write_record_batch(records, 0))
    return pa.concat_tables([pa.Table.from_batches([b]) for b in columnar.decode_segment_to_arrow(
        log, offsets_partition=0)])


@pytest.mark.parametrize("semantics,version,skipped", [
    ("legacy", "4.1", 3),  # the old coordinator knows types 0-2: `UnknownKey`, warn and skip
    ("modern", "3.9", 3),  # the new coordinator's serde maps 0-8 before 4.0
    ("modern", "4.0", 1),  # 4.0 knows share groups (9-15), not streams groups
    ("modern", "4.1", 0)])
def test_share_and_streams_records_a_coordinator_does_not_know_are_skipped_as_unknown_key_types(
        tmp_path, semantics, version, skipped):
    """Share / streams group records decode to their own record kinds; the coordinator a run emulates skips those
    of key types it does not know with a warning (spec §5.4), so they are skipped with that reason, not used, and
    a cut-off does not count them twice."""
    from pipelines.coordinator.options import unknown_group_key_types

    _check_skipped(_share_and_streams_log(tmp_path), SKIP_UNKNOWN_KEY, skipped,
                   unknown_key_types=unknown_group_key_types(semantics, version))


def _check_skipped(table: pa.Table, reason: str, skipped: int, **rules) -> None:
    """The accounting of `table` (one offsets partition, its first record at offset 0) with `rules`: `skipped`
    records skipped for `reason`, the rest used; cut after offset 0, each skipped record counted once."""
    n = table.num_rows
    acc = Accounting.from_tally(Tally(tally_rows(table)), **rules)
    assert acc.partitions[0] == PartitionCounts(records_in=n, records_used=n - skipped,
                                                records_skipped={reason: skipped} if skipped else {})
    cut = Accounting.from_tally(Tally(tally_rows(table, until_offset=0), until_offset=0), **rules)
    reasons = {reason: skipped, "after --until-offset 0": n - 1 - skipped}
    assert cut.partitions[0].records_skipped == {k: v for k, v in reasons.items() if v}
    assert cut.unbalanced() == []


@pytest.mark.parametrize("semantics,version,skipped", [
    ("legacy", "3.4.0", 2),  # v4 of both came with 3.4.1 (KIP-915)
    ("legacy", "2.2", 3),  # and GroupMetadata v3 with 2.3
    ("legacy", "3.4.1", 0), ("modern", "4.0", 0), ("modern", "4.1", 0)])
def test_values_of_a_version_a_coordinator_does_not_read_are_skipped_as_unknown_value_versions(
        tmp_path, semantics, version, skipped):
    """The load of a partition fails at a value version the emulated coordinator does not read (spec §5.4): such a
    record is skipped with that reason, not used, and a cut-off does not count it twice."""
    from pipelines.coordinator.options import limited_value_versions
    from pipelines.decoding import columnar
    from pipelines.decoding.batch_writer import write_record_batch
    from pipelines.decoding.message_writer import (write_group_metadata_key, write_group_metadata_value,
                                                   write_offset_commit_key, write_offset_commit_value)
    from pipelines.validation.accounting import SKIP_UNKNOWN_VERSION

    def group(g, v):
        return write_group_metadata_key(g), write_group_metadata_value(
            v, protocol_type="", generation=1, protocol=None, leader=None, members=[]), 1

    records = [(write_offset_commit_key("g", "t", 0), write_offset_commit_value(v, offset=5, commit_timestamp=1), 1)
               for v in (3, 4)] + [group("g", 3), group("h", 4), (write_offset_commit_key("g", "t", 1), None, 1)]
    log = tmp_path / "__consumer_offsets-0" / "00000000000000000000.log"
    log.parent.mkdir()
    log.write_bytes(write_record_batch(records, 0))
    table = pa.concat_tables([pa.Table.from_batches([b]) for b in columnar.decode_segment_to_arrow(
        log, offsets_partition=0)])
    _check_skipped(table, SKIP_UNKNOWN_VERSION, skipped,
                   known_value_versions=limited_value_versions(semantics, version))


@pytest.mark.parametrize("version", ["4.1", "4.0"])
def test_group_records_the_coordinators_load_fails_on_are_skipped_not_used(tmp_path, version):
    """The replay skips the group records the new coordinator's load fails on: the share group's two for the id of
    the simple group its offset commit made (no share group replaces one), then 4.0's share member tombstone of no
    group (4.1 ignores it) or 4.1's streams group record for that simple group's id (4.0 does not know streams
    groups). The accounting counts each as skipped with that reason, from the run's own `group_history`, not as
    used, beside 4.0's two streams records of an unknown key type."""
    from collections import Counter

    from pipelines.coordinator.options import ReplayOptions, unknown_group_key_types
    from pipelines.coordinator.shard import replay_shards
    from pipelines.decoding.message_writer import write_group_record_key, write_group_record_value
    from pipelines.rebuild.coordinator_warnings import skipped_group_records
    from pipelines.validation.accounting import SKIP_LOAD_FAILS

    table = _share_and_streams_log(tmp_path, [
        (write_group_record_key(10, "x", "m"), None, 1),  # a share member's tombstone of no share group
        (write_group_record_key(17, "sg"), write_group_record_value(17, {"epoch": 1, "metadataHash": 2}), 1)])
    options = ReplayOptions(semantics="modern", kafka_version=version, snapshot_id="t", num_partitions=50)
    events = replay_shards(table, options).tables["group_history"]
    failures = Counter(p for p, _ in skipped_group_records(events))
    acc = Accounting.from_tally(Tally(tally_rows(table)), unknown_key_types=unknown_group_key_types("modern", version),
                                load_failures=failures)
    unknown = {SKIP_UNKNOWN_KEY: 2} if version == "4.0" else {}
    assert acc.partitions[0] == PartitionCounts(records_in=6, records_used=3 - sum(unknown.values()),
                                                records_skipped={SKIP_LOAD_FAILS: 3, **unknown})


# (offsets_partition, offset, timestamp, producer_id, record_kind, control_type): markers of a log that a point-in-time
# run cuts at offset 10 (per partition) or at time 1000
CUT_ROWS = [(1, 9, 900, 7, "offset_commit", None), (1, 10, 950, 7, "control", "COMMIT"),
            (1, 12, 1200, 7, "control", "ABORT"), (2, 4, 1001, 9, "control", "COMMIT"),
            (2, 5, None, 9, "control", "ABORT")]
CUT_COLUMNS = ("offsets_partition", "offset", "timestamp", "producer_id", "record_kind", "control_type")


def test_markers_up_to_the_cut():
    """A point-in-time run judges pending offsets against the markers the replay read: at or before the cut (null
    timestamps kept, as the shards keep them)."""
    import pyarrow as pa

    from pipelines.coordinator.options import ReplayOptions
    from pipelines.coordinator.decoded import transaction_markers
    from schemas.decoded import DECODED_RECORD_SCHEMA

    schema = pa.schema([DECODED_RECORD_SCHEMA.field(c) for c in CUT_COLUMNS])
    decoded = pa.Table.from_pylist([dict(zip(CUT_COLUMNS, r)) for r in CUT_ROWS], schema=schema)
    cases = {
        (): [(1, 7, 10, "COMMIT"), (1, 7, 12, "ABORT"), (2, 9, 4, "COMMIT"), (2, 9, 5, "ABORT")],
        (("until_offset", 10),): [(1, 7, 10, "COMMIT"), (2, 9, 4, "COMMIT"), (2, 9, 5, "ABORT")],
        (("until_time_ms", 1000),): [(1, 7, 10, "COMMIT"), (2, 9, 5, "ABORT")],
        (("until_offset", 4), ("until_time_ms", 2000)): [(2, 9, 4, "COMMIT")],
    }
    for kw, want in cases.items():
        got = transaction_markers(decoded, ReplayOptions(semantics="legacy", **dict(kw)))
        assert sorted(tuple(r.values()) for r in got.to_pylist()) == want, kw


# -- result, policy, report -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def broken_result(spark, settings, gx_context):
    """loaded_groups with a duplicate and a misplaced group whose id needs HTML escaping; a clean quarantine."""
    from pipelines.validation.runner import run_validation
    from .validation_rows import build_inputs, clean_rows

    rows = clean_rows()
    evil = "<script>alert(1)</script>"
    g = dict(rows["loaded_groups"][0], group_id=evil, offsets_partition=(p(evil) + 1) % N)
    rows["loaded_groups"] += [g, dict(rows["loaded_groups"][1])]
    inputs = build_inputs(spark, rows)
    return run_validation(spark, {t: inputs["tables"][t] for t in ("loaded_groups", "quarantine")},
                          as_of_ms=AS_OF_MS, num_partitions=N, settings=settings, context=gx_context,
                          snapshot_id="snap-broken")


@pytest.mark.spark
def test_policy_decides_whether_the_run_fails(broken_result):
    assert not broken_result.success
    assert broken_result.policy == "fail" and broken_result.should_fail_run
    warned = dataclasses.replace(broken_result, policy="warn")
    assert not warned.success and not warned.should_fail_run
    assert warned.summary()["failed"] == 2


@pytest.mark.spark
def test_json_and_summary(broken_result):
    doc = json.loads(broken_result.to_json())
    suites = {s["name"]: s for s in doc["suites"]}
    assert set(suites) == {"loaded_groups", "quarantine"}
    exps = {e["id"]: e for e in suites["loaded_groups"]["expectations"]}
    misplaced = exps["loaded_groups.offsets_partition_matches_group"]
    assert misplaced["success"] is False and misplaced["unexpected_count"] == 1
    assert misplaced["examples"][0]["group_id"] == "<script>alert(1)</script>"
    dup = exps["loaded_groups.key_unique"]
    assert dup["unexpected_count"] == 2 and {x["group_id"] for x in dup["examples"]} == {"g-classic"}
    assert exps["loaded_groups.group_id_not_null"] == {**exps["loaded_groups.group_id_not_null"], "success": True,
                                                        "unexpected_count": 0}
    summary = broken_result.summary()
    assert summary["failed_ids"] == ["loaded_groups.key_unique", "loaded_groups.offsets_partition_matches_group"]
    assert summary["suites"]["quarantine"] == {"rows": 1, "evaluated": 1, "failed": 0}
    assert {s["id"] for s in doc["skipped"]} >= {"loaded_offsets", "accounting"}
    json.dumps(summary)  # the runs.validation column


@pytest.mark.spark
def test_report_is_a_self_contained_page(broken_result, tmp_path):
    from pipelines.validation.report import write_report

    path = write_report(broken_result, tmp_path / "reports" / "snap-broken.html")
    html = path.read_text(encoding="utf-8")
    assert html.startswith("<!DOCTYPE html>") and html.rstrip().endswith("</html>")
    assert "<script" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html  # escaped, never executed
    assert "http://" not in html and "https://" not in html and "<link" not in html  # no external assets
    assert html.count('<tr class="fail">') == 2
    assert html.count('<tr class="pass">') == len(broken_result.expectations) - 2
    assert "loaded_groups.key_unique" in html and "g-classic" in html
    assert 'policy "fail"' in html and "snap-broken" in html
    assert "Not evaluated" in html


# -- the GX context ------------------------------------------------------------------------------------------------


def test_the_cli_builds_the_gx_context_as_its_jvm_starts_and_a_validation_waits_for_it(monkeypatch):
    """The rebuild command builds the process's GX context in a thread of its own once it starts a JVM
    (great-expectations imports for seconds inside it); a validation that asks for it meanwhile gets that same
    context, not a second one."""
    import contextlib
    import threading
    import time

    from jobs import rebuild_common
    from pipelines.validation import runner

    built, started = [], threading.Event()

    def slow_context():
        started.set()
        time.sleep(0.3)
        built.append(object())
        return built[-1]

    class Log:
        def children_stdout(self):
            return contextlib.nullcontext()

    monkeypatch.setattr(runner, "_CONTEXT", None)
    monkeypatch.setattr(runner, "new_context", slow_context)
    with rebuild_common._starting_spark(Log()):  # the session starts in it
        assert started.wait(10)
    assert runner.default_context() is built[0]  # asked while the thread builds it
    assert len(built) == 1


def test_gx_never_fingerprints_the_frames_it_validates(validator, rows, monkeypatch):
    """GX hashes every cell of a pandas frame under its size threshold only to label the batch markers, which no
    report reads; the context turns that off, so a table's checks cost only the checks."""
    from great_expectations.execution_engine import pandas_execution_engine

    def fingerprinted(df):
        raise AssertionError("GX hashed a validated frame")

    monkeypatch.setattr(pandas_execution_engine, "hash_pandas_dataframe", fingerprinted)
    result = validator(rows, "pandas", suites={"loaded_offsets", "loaded_groups"})
    assert [s.name for s in result.suites] == ["loaded_offsets", "loaded_groups"]
    assert all(e.success and e.exception is None for s in result.suites for e in s.expectations)
