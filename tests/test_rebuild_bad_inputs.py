"""Bad inputs through `offsetlake rebuild`: the exit code, the quarantine rows (reason, source, position), and the
good records around each defect in the snapshot. Never a traceback.

One combined input (every kind of defect beside good data, `tests/badinputs.py`) is rebuilt once for the module;
each kind has its own test over that run. Usage errors (exit 2) fail before any Spark work and run on their own. Every run is the CLI in a process of its own.
The rebuilds' route is in-process: no test here starts a JVM but those that compare the driver's decode with Spark's.
"""
from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests import badinputs as bi


SNAPSHOT = "bad-inputs"


ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Ran:
    exit_code: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


def invoke(args: list[str]) -> Ran:
    """`offsetlake rebuild …` as a user runs it: its own process, its exit status, its two streams."""
    r = subprocess.run([sys.executable, "-m", "jobs.cli", "rebuild", "--env", "ci", *args], cwd=ROOT,
                       env={**os.environ, "PYTHONWARNINGS": "ignore"}, capture_output=True, text=True, timeout=600)
    assert "Traceback" not in r.stdout + r.stderr, (r.stdout + r.stderr)[-3000:]
    return Ran(r.returncode, r.stdout, r.stderr)


@pytest.fixture(scope="module")
def combined(tmp_path_factory):
    """The combined bad input, rebuilt once (legacy semantics, the default)."""
    from pipelines.io.warehouse import Warehouse

    root = tmp_path_factory.mktemp("bad-inputs")
    inputs, expect = bi.build_combined(root)
    warehouse = root / "warehouse"
    args = [a for p in inputs for a in ("--input", p)]
    textfile = root / "offsetlake.prom"
    result = invoke([*args, "--warehouse", str(warehouse), "--snapshot-id", SNAPSHOT, "--json", "--quiet",
                     "--metrics-textfile", str(textfile)])
    wh = Warehouse(str(warehouse))
    quarantine = wh.read_table("quarantine", SNAPSHOT).to_pylist()
    offsets = wh.read_table("loaded_offsets", SNAPSHOT).to_pylist()
    ends = wh.read_table("log_end_offsets", SNAPSHOT).to_pylist()
    return dict(result=result, summary=bi.parse_summary(result.stdout), expect=expect, quarantine=quarantine,
                offsets=offsets, textfile=textfile, log_end_offsets=ends)


@pytest.mark.slow
def test_combined_bad_input_exits_zero_with_balanced_accounting(combined):
    """Every defect is quarantined or skipped with a reason: the run succeeds and the accounting balances."""
    s = combined["summary"]
    assert combined["result"].exit_code == 0, combined["result"].output[-3000:]
    assert s["status"] == "succeeded"
    assert s["validation"]["failed"] == 0, s["validation"]
    assert s["quarantine_rows"] == len(combined["quarantine"])
    assert s["records_in"] == s["records_out"] + s["records_skipped"] + s["records_quarantined"]


@pytest.mark.slow
def test_metrics_textfile_tells_what_the_summary_says(combined):
    """`--metrics-textfile`: the run's metrics for node_exporter, parsed by Prometheus' own parser."""
    from prometheus_client.parser import text_string_to_metric_families

    s = combined["summary"]
    samples = {(m.name, tuple(sorted(m.labels.items()))): m.value
               for f in text_string_to_metric_families(combined["textfile"].read_text()) for m in f.samples}
    assert samples[("offsetlake_last_run_status", (("status", "succeeded"),))] == 1
    assert samples[("offsetlake_last_run_status", (("status", "failed"),))] == 0
    assert samples[("offsetlake_last_run_records_in", ())] == s["records_in"]
    assert samples[("offsetlake_last_run_records_quarantined", ())] == s["records_quarantined"] > 0
    assert samples[("offsetlake_last_run_offsets", ())] == s["offsets"]
    assert samples[("offsetlake_last_run_snapshot", (("snapshot_id", SNAPSHOT),))] == 1
    assert samples[("offsetlake_last_run_duration_seconds", ())] > 0
    assert not list(combined["textfile"].parent.glob(".offsetlake-*"))  # written through a renamed temp file


def _rows_for(combined, e: bi.Expect):
    return [q for q in combined["quarantine"] if e.source is not None and q["source"] == e.source]


def _check_kind(combined, kind: str):
    e = combined["expect"][kind]
    assert combined["result"].exit_code == 0
    rows = _rows_for(combined, e)
    assert len(rows) == len(e.reasons), rows
    unmatched = list(rows)
    for i, (reason, position) in enumerate(zip(e.reasons, e.positions)):
        row = next((r for r in unmatched if reason in r["reason"]), None)
        assert row is not None, (reason, unmatched)
        unmatched.remove(row)
        assert row["position"] == position, row
        if e.kinds:
            assert row["kind"] == e.kinds[i], row
        assert row["offsets_partition"] == e.offsets_partition, row
    if e.group is not None:
        got = {o["partition"]: o["committed_offset"] for o in combined["offsets"] if o["group_id"] == e.group}
        for tp, committed in e.committed.items():
            assert got.get(tp) == committed, (e.group, got)
        for tp in e.absent:
            assert tp not in got, (e.group, got)
    return rows


@pytest.mark.slow
def test_flipped_byte_is_a_crc_mismatch_and_its_record_is_not_state(combined):
    (row,) = _check_kind(combined, "crc_mismatch")
    assert row["offset"] == 2 and "not replayed" in row["reason"] and row["value_hex"]


@pytest.mark.slow
def test_garbled_entry_size_is_unframeable_and_the_next_segment_is_read(combined):
    _check_kind(combined, "corrupt_size")


@pytest.mark.slow
def test_garbled_record_count_quarantines_only_that_batch(combined):
    _check_kind(combined, "corrupt_count")


@pytest.mark.slow
def test_torn_tail_is_quarantined_with_its_offset(combined):
    _check_kind(combined, "torn_tail")


@pytest.mark.slow
def test_unknown_value_version_is_quarantined_with_the_reason(combined):
    (row,) = _check_kind(combined, "unknown_version")
    assert row["reason"].startswith("UnknownVersionError")
    assert row["value_hex"].startswith("0009")


@pytest.mark.slow
def test_unknown_key_type_is_skipped_with_a_reason_not_quarantined(combined):
    e = combined["expect"]["unknown_key_type"]
    _check_kind(combined, "unknown_key_type")
    assert not [q for q in combined["quarantine"] if q["offsets_partition"] == e.offsets_partition]
    s = combined["summary"]
    assert s["record_type_counts"].get("unknown:42") == 1
    # skipped: the unknown key, nothing else (the tabular dump's identical duplicate row is a duplicate_row)
    assert s["records_skipped"] == 1
    assert "accounting.records_accounted" not in " ".join(s["validation"].get("failed_ids", []))


@pytest.mark.slow
def test_empty_segment_file_is_not_quarantined(combined):
    e = combined["expect"]["empty_segment"]
    assert not [q for q in combined["quarantine"] if q["offsets_partition"] == e.offsets_partition]
    _check_kind(combined, "empty_segment")


@pytest.mark.slow
def test_directory_named_like_a_segment_is_quarantined_as_unreadable(combined):
    _check_kind(combined, "unreadable_dir")


@pytest.mark.slow
def test_dangling_symlink_segment_is_quarantined_as_unreadable(combined):
    _check_kind(combined, "unreadable_symlink")


@pytest.mark.slow
def test_a_pipe_named_like_a_segment_is_quarantined_as_unreadable(combined):
    _check_kind(combined, "unreadable_pipe")


@pytest.mark.slow
def test_other_internal_topics_partition_dirs_are_reported_not_read(combined):
    _check_kind(combined, "not_offsets_txn")


@pytest.mark.slow
def test_a_data_topics_partition_dir_is_read_for_its_bounds_not_quarantined(combined):
    e = combined["expect"]["data_topic_orders"]
    assert not _rows_for(combined, e)
    (row,) = [r for r in combined["log_end_offsets"] if r["topic"] == "orders"]
    assert (row["partition"], row["log_start_offset"], row["log_end_offset"], row["source"]) == (0, 0, 1, "segment")


@pytest.mark.slow
def test_a_batch_at_a_negative_offset_is_quarantined_not_state(combined):
    (row,) = _check_kind(combined, "negative_offset")
    assert row["offset"] == -3 and "its 1 record(s) are not replayed" in row["reason"]


@pytest.mark.slow
def test_a_batch_whose_offsets_go_back_is_quarantined_not_replayed_out_of_order(combined):
    (row,) = _check_kind(combined, "offsets_out_of_order")
    assert row["offset"] == 13 and "its 2 record(s) are not replayed" in row["reason"]


@pytest.mark.slow
def test_tabular_dumps_that_disagree_give_a_duplicate_conflict(combined):
    """Two part files of one dump: a row with other content at an offset is a `duplicate_conflict`, one repeating
    the record loaded a `duplicate_row` with its dump and row, standing for its record (it was skipped with a reason,
    but no file or row to look at)."""
    rows = _check_kind(combined, "duplicate_conflict")
    (conflict,) = [r for r in rows if r["kind"] == "duplicate_conflict"]
    assert conflict["value_hex"]  # the conflicting row's bytes are kept for inspection


# ---------------------------------------------------------------------------------------------- exit codes
def test_nonexistent_input_exits_2_naming_it(tmp_path):
    missing = tmp_path / "no-such-dir"
    r = invoke(["--input", str(missing), "--warehouse", str(tmp_path / "wh")])
    assert r.exit_code == 2
    assert str(missing) in r.output + r.stderr


@pytest.mark.parametrize("setting, message", [
    ("validation.policy=ignore", "validation.policy must be one of fail, warn"),
    ("validation.pandas_max_rows=-1", "validation.pandas_max_rows must be >= 0"),
    ("rebuild.local_replay_max_rows=lots", "rebuild.local_replay_max_rows must be a whole number"),
    ("rebuild.resume_tasks_min_rows=-5", "rebuild.resume_tasks_min_rows must be 0 or more"),
])
def test_bad_setting_exits_2_before_any_work(tmp_path, setting, message):
    src = bi.torn_only(tmp_path / "in")
    r = invoke(["--input", str(src), "--warehouse", str(tmp_path / "wh"), "--conf", setting])
    assert r.exit_code == 2
    assert message in r.stderr
    assert not (tmp_path / "wh").exists()  # refused before the run was recorded


def test_directory_without_data_exits_2_with_a_message(tmp_path):
    (tmp_path / "in").mkdir()
    r = invoke(["--input", str(tmp_path / "in"), "--warehouse", str(tmp_path / "wh")])
    assert r.exit_code == 2
    assert "no __consumer_offsets data found" in r.stderr


def test_only_empty_segments_exits_2(tmp_path):
    bi.write_segment(tmp_path / "in" / "__consumer_offsets-0", 0, b"")
    r = invoke(["--input", str(tmp_path / "in"), "--warehouse", str(tmp_path / "wh")])
    assert r.exit_code == 2
    assert "no __consumer_offsets data found" in r.stderr


def test_strict_exits_1_on_the_first_quarantined_record(tmp_path):
    src = bi.torn_only(tmp_path / "in")
    r = invoke(["--input", str(src), "--warehouse", str(tmp_path / "wh"), "--strict", "--semantics", "modern"])
    assert r.exit_code == 1
    assert "--strict: quarantined record at" in r.stderr
    g = bi.group_in(2, "strict")
    torn_at = len(bi.batch([bi.commit(g, 0, 0, bi.T0)], 0) + bi.batch([bi.commit(g, 1, 1, bi.T0 + 1)], 1))
    assert f"position {torn_at}:" in r.stderr and "runs past the end" in r.stderr


@pytest.mark.parametrize("semantics,pending", [("legacy", 0), ("modern", 1)])
def test_a_control_record_that_ends_no_transaction_is_validated_by_the_runs_own_semantics(tmp_path, semantics,
                                                                                          pending):
    """A control record of another type than COMMIT/ABORT after an open transaction ends it for the old loader and
    not for the new coordinator (spec §5.5 #5): `--semantics modern` leaves its offset pending, and the pending
    offsets' check judges it by the run's semantics, not by the settings' default."""
    import json
    import struct

    from pipelines.decoding import batch_writer as bw

    g = bi.group_in(0, "kraft")
    log = (bi.batch([bi.group_record(g, bi.T0)], 0)
           + bw.write_record_batch([bi.commit(g, 0, 5, bi.T0 + 1)], 1, producer_id=77, producer_epoch=0,
                                   is_transactional=True)
           + bw.write_record_batch([(struct.pack(">hh", 0, 5), b"", bi.T0 + 2)], 2, producer_id=77,
                                   producer_epoch=0, base_sequence=-1, is_transactional=True, is_control=True))
    bi.write_segment(tmp_path / "in" / "__consumer_offsets-0", 0, log)
    r = invoke(["--input", str(tmp_path / "in"), "--warehouse", str(tmp_path / "wh"), "--semantics", semantics,
                "--json", "--quiet"])
    summary = json.loads(r.stdout)
    assert r.exit_code == 0, r.stderr
    assert summary["pending_offsets"] == pending
    assert summary["validation"]["failed_ids"] == []


# ---------------------------------------------------------------------------------------------- accounting
def test_reader_counts_predict_the_decoded_rows_of_every_real_segment(shared_dir):
    """The header walk (no record decoding) and the decoder agree on every real and broker segment: records in =
    records decoded + records the quarantine rows stand for; the same bytes unread. The walk in C counts what its
    Python reference counts."""
    import pyarrow.compute as pc

    from pipelines.decoding.columnar import decode_segment_to_arrow
    from pipelines.frames.decode import count_segment

    paths = sorted(shared_dir.glob("realdata/**/*.log")) + sorted(shared_dir.glob("brokerdata/*/data/**/*.log"))
    if not paths:
        pytest.skip("no real segments")
    for p in paths:
        c = count_segment(str(p), 0).get(0, {})
        assert count_segment(str(p), 0, use_c=False).get(0, {}) == c, p
        used = quarantined = unread = 0
        for b in decode_segment_to_arrow(p, offsets_partition=0):
            err = pc.fill_null(pc.equal(b.column("record_kind"), "error"), False)
            used += b.num_rows - pc.sum(err.cast("int64")).as_py()
            quarantined += pc.sum(b.filter(err).column("error_records")).as_py() or 0
            nonzero = b.filter(pc.and_(err, pc.not_equal(b.column("error_kind"), "zero_tail")))
            unread += pc.sum(nonzero.column("unread_bytes")).as_py() or 0
        assert c.get("records_in", 0) == used + quarantined, (p, c, used, quarantined)
        assert c.get("bytes_unread", 0) == unread, (p, c, unread)


def test_small_inputs_decode_in_the_driver_as_the_tasks_do(spark, shared_dir, tmp_path):
    """`decode.in_process_max_bytes`: the driver runs the tasks' own functions, so the decoded rows and the
    reader's counts are those of the Spark jobs, on real segments, broker data dirs and damaged ones; the
    quarantine made in the driver (no session) is the one Spark makes."""
    from dataclasses import replace

    from pipelines.frames.decode import decoded_log, plan_inputs, reader_counts
    from pipelines.state.quarantine import quarantine_table

    inputs = bi.real_and_damaged_inputs(shared_dir, tmp_path, brokers=4)
    if not inputs:
        pytest.skip("no real segments")
    for path in inputs:
        on_spark = plan_inputs([path])
        in_driver = replace(on_spark, in_process=True)
        assert in_driver.in_process and not on_spark.in_process
        logs = [decoded_log(spark, plan) for plan in (on_spark, in_driver)]
        assert not logs[0].in_hand and logs[1].in_hand
        rows = [sorted(map(repr, log.frame().drop("value", "key").collect())) for log in logs]
        assert rows[0] == rows[1] and rows[0], path
        assert reader_counts(spark, on_spark) == reader_counts(spark, in_driver), path
        spark_made, in_hand = quarantine_table(logs[0], "q").toArrow(), quarantine_table(logs[1], "q")
        key = [("source", "ascending"), ("position", "ascending"), ("offset", "ascending"), ("reason", "ascending")]
        assert in_hand.sort_by(key).to_pylist() == spark_made.sort_by(key).to_pylist(), path


def test_records_after_until_offset_are_skipped_with_a_reason(spark, tmp_path):
    from pipelines.frames.decode import decoded_log, plan_inputs, reader_counts
    from pipelines.frames.tally import tally
    from pipelines.validation.accounting import Accounting

    src, _g = bi.clean_small(tmp_path / "in")
    plan = plan_inputs([src])
    acc = Accounting.from_tally(tally(decoded_log(spark, plan, cut=(3, None))), reader_counts(spark, plan))
    c = acc.partitions[0]
    assert c.records_in == 6 and c.records_used == 4
    assert c.records_skipped == {"after --until-offset 3": 2}
    assert acc.unbalanced() == []


@pytest.mark.slow
def test_a_record_lost_in_decoding_fails_the_accounting(no_spark, settings, tmp_path, monkeypatch):
    """The decoder drops one offset commit: records_in (from batch headers) no longer balances -> exit 1."""
    import pyarrow.compute as pc

    from pipelines.frames import decode
    from pipelines.rebuild import RebuildRequest, run_rebuild

    original = decode.decode_items

    def dropping(batches, *args):
        for b in original(batches, *args):
            hit = pc.and_(pc.equal(b.column("offset"), 3), pc.equal(b.column("record_kind"), "offset_commit"))
            yield b.filter(pc.invert(pc.fill_null(hit, False)))

    monkeypatch.setattr(decode, "decode_items", dropping)
    src, _g = bi.clean_small(tmp_path / "in")
    summary = run_rebuild(no_spark, settings, RebuildRequest(inputs=(str(src),), warehouse=str(tmp_path / "wh"),
                                                          snapshot_id="lossy"))
    assert summary.status == "validation_failed"
    assert "accounting.records_accounted" in summary.validation["failed_ids"], summary.validation


@pytest.mark.slow
def test_a_clean_log_is_not_read_again_for_its_empty_quarantine(no_spark, settings, tmp_path, monkeypatch):
    """The tally says there is no error row: the quarantine is empty without a pass over the log; a damaged log's
    quarantine is still read from it."""
    from pipelines.frames.decoded_log import DecodedLog
    from pipelines.io.warehouse import Warehouse
    from pipelines.rebuild import RebuildRequest, run_rebuild

    original = DecodedLog.to_arrow
    views = []

    def to_arrow(self, columns=None, kinds=None, exclude=None):  # a log in hand is read through it
        views.append(tuple(kinds or ()))
        return original(self, columns, kinds, exclude)

    monkeypatch.setattr(DecodedLog, "to_arrow", to_arrow)
    src, _g = bi.clean_small(tmp_path / "clean")
    summary = run_rebuild(no_spark, settings, RebuildRequest(inputs=(str(src),), warehouse=str(tmp_path / "wh"),
                                                          snapshot_id="clean"))
    assert summary.status == "succeeded" and ("error",) not in views
    assert Warehouse(tmp_path / "wh").read_table("quarantine", "clean").num_rows == 0

    seg = next(src.rglob("*.log"))
    seg.write_bytes(seg.read_bytes()[:-7] + b"\xff" * 40)
    summary = run_rebuild(no_spark, settings, RebuildRequest(inputs=(str(src),), warehouse=str(tmp_path / "wh"),
                                                          snapshot_id="torn"))
    assert ("error",) in views
    assert Warehouse(tmp_path / "wh").read_table("quarantine", "torn").num_rows == summary.quarantine_rows > 0


def test_the_summary_and_runs_count_records_not_quarantine_rows(no_spark, settings, tmp_path):
    """A gzip batch of 3 records whose payload is garbage is one quarantine row standing for 3 records: the summary
    and the `runs` row say 3 quarantined of the 5 records in (1 row), as `records_out` counts records too."""
    import struct

    import crc32c

    from jobs.summary_text import format_summary
    from pipelines.decoding import batch_writer as bw
    from pipelines.io.warehouse import Warehouse
    from pipelines.rebuild import RebuildRequest, run_rebuild

    g = bi.group_in(0, "garbled")
    gz = bytearray(bw.write_record_batch([bi.commit(g, p, 10, bi.T0) for p in (1, 2, 3)], 1, codec="gzip"))
    gz[61:] = b"\x5a" * (len(gz) - 61)  # past the batch head: the compressed records
    struct.pack_into(">I", gz, 17, crc32c.crc32c(bytes(gz[21:])))  # a CRC that holds: the head's count is verified
    bi.write_segment(tmp_path / "in" / "__consumer_offsets-0", 0, bi.batch([bi.commit(g, 0, 10, bi.T0)], 0)
                     + bytes(gz) + bi.batch([bi.commit(g, 0, 20, bi.T0 + 1)], 4))
    summary = run_rebuild(no_spark, settings, RebuildRequest(inputs=(str(tmp_path / "in"),),
                                                          warehouse=str(tmp_path / "wh"), snapshot_id="gz"))
    assert summary.status == "succeeded"
    assert (summary.records_in, summary.records_out, summary.records_quarantined, summary.quarantine_rows) == \
        (5, 2, 3, 1)
    (run,) = Warehouse(tmp_path / "wh").read_table("runs", "gz").to_pylist()
    assert (run["records_in"], run["records_out"], run["records_quarantined"]) == (5, 2, 3)
    assert "records in        5  (used 2, skipped 0, quarantined 3 in 1 quarantine row(s))" in format_summary(summary)


def _rebuilt(no_spark, settings, tmp_path, snapshot_id: str, *inputs):
    """A rebuild of `inputs` (default `tmp_path / "in"`) in this process: its summary, which must have succeeded,
    its quarantine rows by kind, and its `empty_group_offsets` by partition."""
    from pipelines.io.warehouse import Warehouse
    from pipelines.rebuild import RebuildRequest, run_rebuild

    summary = run_rebuild(no_spark, settings, RebuildRequest(inputs=tuple(map(str, inputs or (tmp_path / "in",))),
                                                          warehouse=str(tmp_path / "wh"), snapshot_id=snapshot_id))
    assert summary.status == "succeeded", summary.validation
    wh = Warehouse(tmp_path / "wh")
    rows = sorted(wh.read_table("quarantine", snapshot_id).to_pylist(), key=lambda r: r["kind"])
    offsets = {r["partition"]: r["committed_offset"]
               for r in wh.read_table("empty_group_offsets", snapshot_id).to_pylist()}
    return summary, rows, offsets


def test_an_overlapping_file_that_differs_from_the_loaded_records_is_quarantined_not_lost(no_spark, settings,
                                                                                           tmp_path):
    """Two files of one partition holding offset 1 with different commits: the first file's is loaded, as Kafka's
    loader reads it (on from offset 2, in the second file), and the other is a `duplicate_conflict` row with its file,
    batch position and offset, beside the `overlapping_segment` row standing for the record passed over."""
    _, copy = bi.overlapping_files(tmp_path / "in")
    summary, rows, offsets = _rebuilt(no_spark, settings, tmp_path, "ovl")
    assert [(r["kind"], r["source"], r["position"], r["offset"]) for r in rows] == [
        ("duplicate_conflict", str(copy), 0, 1), ("overlapping_segment", str(copy), 0, None)]
    assert offsets == {0: 20, 1: 30}
    assert (summary.records_in, summary.records_out, summary.records_quarantined) == (4, 3, 1)


def test_a_record_from_a_clock_ahead_is_said_not_silently_the_as_of(tmp_path):
    """One record three years ahead (a broker's clock, or a time its writer set) made the run as of it, and the
    expiry judged there removed the other groups' offsets without a word; the summary now says so, naming the
    as_of, and `--as-of` judges at the time given."""
    import json

    year = 365 * 86_400_000
    early, late = bi.group_in(3, "early"), bi.group_in(4, "late")
    bi.write_segment(tmp_path / "in" / "__consumer_offsets-3", 0,
                     bi.batch([bi.commit(early, 0, 5, bi.T0), bi.commit(early, 1, 7, bi.T0 + 1000)], 0))
    bi.write_segment(tmp_path / "in" / "__consumer_offsets-4", 0,
                     bi.batch([bi.commit(late, 0, 9, bi.T0 + 3 * year)], 0))
    args = ["--input", str(tmp_path / "in"), "--warehouse", str(tmp_path / "wh"), "--json", "--quiet"]
    r = invoke([*args, "--snapshot-id", "ahead"])
    assert r.exit_code == 0, r.output[-2000:]
    summary = json.loads(r.stdout.strip().splitlines()[-1])
    assert summary["expired_offsets"] == 2
    said = [w for w in summary["warnings"] if "is the log's newest record" in w]
    assert len(said) == 1 and said[0].startswith(f"as_of {summary['as_of']} is the log's newest record, ")
    assert "removed 2 offset(s); give --as-of" in said[0]
    given = json.loads(invoke([*args, "--snapshot-id", "given", "--as-of", "now"]).stdout.strip().splitlines()[-1])
    assert not [w for w in given["warnings"] if "is the log's newest record" in w]


def test_an_interleaved_file_is_read_as_kafka_reads_by_offset(no_spark, settings, tmp_path):
    """A holds offsets 0 and 2, B (base 1) 1 and 3: Kafka's loader reads A, then asks for offset 3, whose floor
    segment is B, and never reads B's 1. Its commit is not state: an `overlapping_segment` row at B's position 0
    stands for it."""
    _, b = bi.interleaved_files(tmp_path / "in")
    summary, (row,), offsets = _rebuilt(no_spark, settings, tmp_path, "il")
    assert (row["kind"], row["source"], row["position"]) == ("overlapping_segment", str(b), 0)
    assert offsets == {0: 10, 2: 20, 3: 33}
    assert (summary.records_in, summary.records_out, summary.records_quarantined) == (4, 3, 1)


def test_a_partition_copied_from_two_log_dirs_is_read_from_the_copy_that_reaches_further(no_spark, settings,
                                                                                           tmp_path):
    """Two log dirs holding partition 0's segment of base offset 0, the second a newer, longer copy: a log holds one
    file per base offset, so one copy is the log read, the one reaching the higher offset; the other's records are a
    `duplicate_segment` row standing for them."""
    dirs, short = bi.copies_in_two_log_dirs(tmp_path)
    summary, (row,), offsets = _rebuilt(no_spark, settings, tmp_path, "dup", *dirs)
    assert (row["kind"], row["source"], row["position"]) == ("duplicate_segment", str(short), 0)
    assert offsets == {0: 20}
    assert (summary.records_in, summary.records_out, summary.records_quarantined) == (3, 2, 1)


def test_records_below_the_log_start_offset_checkpoint_are_not_state(no_spark, settings, tmp_path):
    """The log dir's `log-start-offset-checkpoint` puts partition 0's log start at 2, inside its first segment
    (LogLoader starts the log at the larger of it and the first base offset): the loader reads from offset 2, so the
    commits at 0 and 1 are an `overlapping_segment` row standing for them, not state."""
    data, seg = bi.log_start_inside_first_segment(tmp_path / "data")
    summary, (row,), offsets = _rebuilt(no_spark, settings, tmp_path, "ls", data)
    assert (row["kind"], row["source"], row["position"]) == ("overlapping_segment", str(seg), 0)
    assert "log start offset 2" in row["reason"]
    assert offsets == {1: 30, 2: 40}
    assert (summary.records_in, summary.records_out, summary.records_quarantined) == (4, 2, 2)


def test_a_dump_given_twice_counts_its_copies_as_duplicate_rows_not_as_used(no_spark, settings, tmp_path):
    """The same records in two tabular inputs (one dump given twice, a second export that overlaps the first): the
    replay loads each record once, but both copies were counted used, so the summary said 8 records used of the 4
    the snapshot holds. The first input's records are loaded, a later input's copies are `duplicate_row` rows (its
    dump, its first row) standing for them, and a copy with other content a `duplicate_conflict` row, as within one
    dump."""
    g = bi.group_in(9, "twice")
    rows = [bi.group_record(g, bi.T0), bi.commit(g, 0, 901, bi.T0 + 1), bi.commit(g, 1, 902, bi.T0 + 2),
            bi.commit(g, 2, 903, bi.T0 + 3)]
    first, again = tmp_path / "a" / "dump.parquet", tmp_path / "b" / "dump.parquet"
    for p in (first, again):
        p.parent.mkdir()
    bi.write_kafka_source_parquet(first, 9, [0, 1, 2, 3], rows)
    bi.write_kafka_source_parquet(again, 9, [1, 2, 3, 4], [rows[1], bi.commit(g, 1, 9999, bi.T0 + 2), rows[3],
                                                           bi.commit(g, 0, 904, bi.T0 + 4)])
    summary, quarantined, _ = _rebuilt(no_spark, settings, tmp_path, "twice", first, again, first)
    assert (summary.records_in, summary.records_out, summary.records_skipped, summary.records_quarantined) == \
        (12, 5, 0, 7)
    quarantined.sort(key=lambda r: (r["kind"], r["source"] != str(again), r["position"]))
    assert [(r["kind"], r["source"], r["offsets_partition"], r["position"], r["offset"]) for r in quarantined] == [
        ("duplicate_conflict", str(again), 9, 1, 2),
        ("duplicate_row", str(again), 9, 0, None), ("duplicate_row", str(again), 9, 2, None),
        ("duplicate_row", str(first), 9, 0, None)]
    assert all(r["reason"].endswith(n) for r, n in zip(quarantined[1:], ("(1 record(s))", "(1 record(s))",
                                                                         "(4 record(s))")))
    assert "given before as an input too" in quarantined[3]["reason"]
    from pipelines.io.warehouse import Warehouse

    offsets = Warehouse(tmp_path / "wh").read_table("loaded_offsets", "twice").to_pylist()
    # the first input's commits, and the later input's own record (log offset 4)
    assert {r["partition"]: r["committed_offset"] for r in offsets} == {0: 904, 1: 902, 2: 903}


def test_a_dump_beside_the_log_it_was_exported_from_counts_its_copies_as_duplicate_rows(no_spark, settings,
                                                                                        tmp_path):
    """A log dir and a tabular dump of the same records (an export of that log): the replay loaded each record once,
    but both copies were counted used (8 used of the 4 the snapshot holds). The segments' records are loaded, the
    broker's own bytes, whatever the order the inputs are given in; the dump's copies are `duplicate_row` rows (its
    dump, its first row) standing for them, a copy with other content a `duplicate_conflict` row, and the dump's own
    record (offset 4) is loaded."""
    g = bi.group_in(9, "beside")
    rows = [bi.group_record(g, bi.T0), bi.commit(g, 0, 901, bi.T0 + 1), bi.commit(g, 1, 902, bi.T0 + 2),
            bi.commit(g, 2, 903, bi.T0 + 3)]
    seg = bi.write_segment(tmp_path / "logs" / "__consumer_offsets-9", 0, bi.batch(rows, 0))
    dump = tmp_path / "dump" / "dump.parquet"
    dump.parent.mkdir()
    bi.write_kafka_source_parquet(dump, 9, [0, 1, 2, 3, 4], [*rows[:2], bi.commit(g, 1, 9999, bi.T0 + 2), rows[3],
                                                             bi.commit(g, 0, 904, bi.T0 + 4)])
    summary, quarantined, _ = _rebuilt(no_spark, settings, tmp_path, "beside", dump, tmp_path / "logs")
    assert (summary.records_in, summary.records_out, summary.records_skipped, summary.records_quarantined) == \
        (9, 5, 0, 4)
    quarantined.sort(key=lambda r: (r["kind"], r["position"]))
    assert [(r["kind"], r["source"], r["offsets_partition"], r["position"], r["offset"]) for r in quarantined] == [
        ("duplicate_conflict", str(dump), 9, 2, 2),
        ("duplicate_row", str(dump), 9, 0, None), ("duplicate_row", str(dump), 9, 3, None)]
    assert [r["reason"].rsplit(" (", 1)[1] for r in quarantined[1:]] == ["2 record(s))", "1 record(s))"]
    assert all(f"the segment file {seg}" in r["reason"] for r in quarantined)
    from pipelines.io.warehouse import Warehouse

    offsets = Warehouse(tmp_path / "wh").read_table("loaded_offsets", "beside").to_pylist()
    # the segment's commits (902 at offset 2, not the dump's 9999), and the dump's own record (log offset 4)
    assert {r["partition"]: r["committed_offset"] for r in offsets} == {0: 904, 1: 902, 2: 903}


@pytest.mark.parametrize("cut", [{"until_time": "2010-12-31"}, {"until_time": "0001-01-01"},
                                 {"until_time": "2010-12-31T23:30:00Z", "as_of": "2010-12-31T23:30:00Z"}])
def test_a_run_as_of_before_2011_that_cuts_every_record_succeeds_saying_so(no_spark, settings, tmp_path, cut):
    """`--until-time 2010-12-31` (a mistyped year): the run cut every record and said so, but failed its validation,
    exit 1: each timestamp check's range (2011-01-01 to as_of + skew) had its min past its max, which the check
    engine refuses, on empty tables too. It succeeds with its warning, as a cut in 2011 or later does; a record in
    such a run is still past its plausible times (`test_a_run_as_of_before_2011_still_finds_the_records_past_it`)."""
    from pipelines.rebuild import RebuildRequest, run_rebuild

    src, _g = bi.clean_small(tmp_path / "in")
    summary = run_rebuild(no_spark, settings, RebuildRequest(inputs=(str(src),), warehouse=str(tmp_path / "wh"),
                                                          snapshot_id="early", **cut))
    assert summary.status == "succeeded", summary.validation["failed_ids"]
    assert (summary.records_in, summary.records_out) == (6, 0)
    assert [w for w in summary.warnings if "cut every record of the input (6 past it" in w]


def test_a_run_as_of_before_2011_still_finds_the_records_past_it(no_spark, settings, tmp_path):
    """`--as-of 2005-01-01` over records of 2026: each of them is past as_of + skew, one unexpected row each in the
    three checks of the tables they made, as for any as-of before the log (the empty ones pass)."""
    from pipelines.rebuild import RebuildRequest, run_rebuild

    src, _g = bi.clean_small(tmp_path / "in")
    summary = run_rebuild(no_spark, settings, RebuildRequest(inputs=(str(src),), warehouse=str(tmp_path / "wh"),
                                                          snapshot_id="early", as_of="2005-01-01"))
    assert summary.status == "validation_failed"
    assert {e["expectation"]: e["unexpected_count"] for e in summary.validation["failed_expectations"]} == {
        "loaded_offsets.commit_timestamp_plausible": 5, "loaded_groups.current_state_timestamp_plausible": 1,
        "offset_commits.commit_timestamp_plausible": 5}
