"""Mutated real segments through the real `offsetlake rebuild`: whatever the damage, the run's accounting balances
(records in = used + skipped + quarantined, per offsets partition) and every unread byte is reported.

300 mutants (the mutations of `tests/decoding/test_fuzz_segments.py`, fixed seeds), each the only segment of its
own `__consumer_offsets-N` directory, rebuilt in one run; the decoding-level fuzz runs thousands more.
"""
from __future__ import annotations

import random
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests import badinputs as bi
from tests.decoding.test_fuzz_segments import KINDS, MAX_SEGMENT_BYTES, mutate

pytestmark = pytest.mark.spark

MUTANTS = 300


def test_mutated_segments_through_rebuild_balance_and_report_every_unread_byte(spark, realdata, tmp_path):
    from jobs.cli import main
    from pipelines.frames.decode import count_segment

    originals = [p.read_bytes() for p in sorted(Path(realdata).rglob("*.log"))
                 if 0 < p.stat().st_size <= MAX_SEGMENT_BYTES]
    if not originals:
        pytest.skip("no real segments")
    logdir = tmp_path / "logs"
    expected_unread = 0
    for case in range(MUTANTS):
        rng = random.Random(f"rebuild-{case}")
        buf = mutate(originals[rng.randrange(len(originals))], KINDS[case % len(KINDS)], rng)
        path = bi.write_segment(logdir / f"__consumer_offsets-{case}", 0, buf)
        if buf:
            expected_unread += count_segment(str(path), case).get(case, {}).get("bytes_unread", 0)
    assert expected_unread > 0  # the seeds damage framing in most mutants
    # placement checks have nothing to say about mutants moved between partitions: report them, do not fail
    r = CliRunner().invoke(main, ["rebuild", "--env", "ci", "--input", str(logdir), "--warehouse",
                                  str(tmp_path / "wh"), "--num-partitions", str(MUTANTS), "--json", "--quiet",
                                  "--conf", "validation.policy=warn"], catch_exceptions=False)
    assert r.exit_code == 0, r.output[-3000:]
    s = bi.parse_summary(r.stdout)
    assert "accounting.records_accounted" not in s["validation"].get("failed_ids", []), s["validation"]
    assert s["validation"]["suites"]["accounting"]["failed"] == 0
    assert s["bytes_unread"] == expected_unread
    assert sum(b - a for _src, a, b, kind in s["unread_ranges"] if kind != "zero_tail") == expected_unread
    from pipelines.io.warehouse import Warehouse
    from schemas.quarantine import QUARANTINE_KINDS

    kinds = {q["kind"] for q in Warehouse(str(tmp_path / "wh")).read_table("quarantine", s["snapshot_id"]).to_pylist()}
    assert kinds <= set(QUARANTINE_KINDS) and "crc_mismatch" in kinds, kinds
