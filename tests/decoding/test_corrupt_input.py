"""Attacks on the decoding layer (issue #14): a decompression bomb, garbage and empty input to `offsetlake
decode`, malformed tabular lines, negative offsets; and the fixed list of quarantine kinds."""
from __future__ import annotations

import ast
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from pipelines.decoding import codecs
from pipelines.decoding.batches import read_batches
from pipelines.decoding.columnar import decode_segment_to_arrow
from pipelines.decoding.errors import DecompressionTooLargeError
from pipelines.decoding.policy import ReadPolicy
from pipelines.decoding.tabular import read_tabular_dump
from pipelines.frames.decode import count_segment, count_tabular
from schemas.quarantine import QUARANTINE_KINDS
from schemas.records import LogRecord, ReadProblem
from tests import badinputs as bi

ROOT = Path(__file__).resolve().parents[2]


# ---------------------------------------------------------------------------------------------- decompression bomb
@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_every_codec_stops_at_the_cap(codec):
    cid = codecs.CODEC_IDS[codec]
    data = codecs.compress(cid, bytes(3 << 20), magic=2)
    assert len(codecs.decompress(cid, data, magic=2, max_bytes=3 << 20)) == 3 << 20
    with pytest.raises(DecompressionTooLargeError):
        codecs.decompress(cid, data, magic=2, max_bytes=(3 << 20) - 1)


def test_a_bomb_batch_is_quarantined_with_its_verified_record_count(tmp_path):
    bomb = bi.zstd_bomb_segment()
    (p,) = read_batches(bomb, source="b", offsets_partition=0)
    assert (p.kind, p.position, p.records, p.unread_to) == ("decompression_too_large", 0, 1, None)
    path = bi.write_segment(tmp_path / "__consumer_offsets-0", 0, bomb)
    for use_c in (False, None):
        (batch,) = decode_segment_to_arrow(path, offsets_partition=0, use_c=use_c)
        assert batch.column("error_kind").to_pylist() == ["decompression_too_large"]
        assert batch.column("error_records").to_pylist() == [1]
    assert count_segment(str(path), 0)[0]["records_in"] == 1
    # a cap above the bomb's size decodes it (the cap is a setting, not a hard limit)
    (item,) = read_batches(bomb, source="b", offsets_partition=0, policy=ReadPolicy(max_batch_bytes=300 << 20))
    assert len(item[1][0].value) == (256 << 20) - 16


_PEAK = """
import re, sys
from jobs.cli import main
try:
    main(sys.argv[1:])
except SystemExit as e:
    code = e.code
hwm = re.search(r"VmHWM:\\s+(\\d+) kB", open("/proc/self/status").read()).group(1)
print("VmHWM", hwm, file=sys.stderr)
sys.exit(code)
"""


def _peak_rss_kb(args: list[str]) -> tuple[int, int, str]:
    """The CLI's peak resident memory (VmHWM of its own address space: not the forked parent's pages)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-c", _PEAK, *args], env=env, cwd=ROOT, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True, timeout=300)
    hwm = int(proc.stderr.rsplit("VmHWM ", 1)[1].split()[0])
    return hwm, proc.returncode, proc.stderr


def test_decoding_a_256_mib_bomb_keeps_memory_bounded(tmp_path):
    """An 8 KB segment holding one zstd batch of 256 MiB of zeros: `offsetlake decode` stays far below the
    bomb's size (the 64 MiB cap plus the interpreter), quarantines it and says so."""
    path = bi.write_segment(tmp_path / "__consumer_offsets-0", 0, bi.zstd_bomb_segment())
    rss_kb, code, stderr = _peak_rss_kb(["decode", str(path)])
    assert "decompression_too_large" in stderr, stderr[-2000:]
    assert code == 2  # nothing readable in it
    assert rss_kb < 200 * 1024, f"max RSS {rss_kb / 1024:.0f} MB"


# ---------------------------------------------------------------------------------------------- offsetlake decode
def _decode(args):
    from jobs.cli import main

    return CliRunner().invoke(main, ["decode", *args], catch_exceptions=False)


def test_decode_of_an_empty_dir_exits_2_with_one_line(tmp_path):
    r = _decode([str(tmp_path)])
    assert r.exit_code == 2 and "no __consumer_offsets segment files" in r.output


def test_decode_of_a_garbage_file_exits_2_naming_the_unread_bytes(tmp_path):
    path = bi.write_segment(tmp_path / "__consumer_offsets-0", 0, random.Random(14).randbytes(2048))
    r = _decode([str(path)])
    assert r.exit_code == 2
    assert "no readable record" in r.stderr and "2048 byte(s) not read" in r.stderr


def test_decode_of_a_good_file_exits_0(tmp_path):
    root, _g = bi.clean_small(tmp_path)
    r = _decode([str(root / "__consumer_offsets-0"), "--json"])
    assert r.exit_code == 0 and len(r.stdout.splitlines()) == 6


# ---------------------------------------------------------------------------------------------- tabular dumps
def _rows(partition, records):
    return [{"key": k.hex(), "value": v.hex(), "topic": "__consumer_offsets", "partition": partition, "offset": o,
             "timestamp": ts, "timestampType": 0} for o, (k, v, ts) in records]


def _split(items):
    recs = [i for i in items if isinstance(i, LogRecord)]
    probs = [(p.kind, p.position, p.offset, p.records) for p in items if isinstance(p, ReadProblem)]
    return recs, probs


def test_a_malformed_json_line_is_one_quarantine_row_and_the_rest_is_read(tmp_path):
    g = bi.group_in(3, "j")
    good = _rows(3, [(0, bi.commit(g, 0, 10, bi.T0)), (1, bi.commit(g, 1, 11, bi.T0 + 1))])
    p = tmp_path / "d.jsonl"
    p.write_text(json.dumps(good[0]) + "\n{\"key\": \"00\", \"val\n" + json.dumps(good[1]) + "\n")
    recs, probs = _split(list(read_tabular_dump(p)))
    assert [r.offset for r in recs] == [0, 1]
    assert probs == [("malformed_row", 1, None, 1)]
    c = count_tabular(str(p))
    assert c[3]["records_in"] + c[-1]["records_in"] == 3  # every line is a record in


def test_a_short_csv_row_and_a_non_numeric_offset_are_quarantined(tmp_path):
    g = bi.group_in(3, "c")
    good = _rows(3, [(0, bi.commit(g, 0, 10, bi.T0)), (1, bi.commit(g, 1, 11, bi.T0 + 1))])
    cols = list(good[0])
    lines = [",".join(cols), ",".join(str(good[0][c]) for c in cols), "00ff,ab",
             ",".join("x" if c == "offset" else str(good[1][c]) for c in cols),
             ",".join(str(good[1][c]) for c in cols)]
    p = tmp_path / "d.csv"
    p.write_text("\n".join(lines) + "\n")
    recs, probs = _split(list(read_tabular_dump(p)))
    assert [r.offset for r in recs] == [0, 1]
    assert sorted(probs) == [("malformed_row", 1, None, 1), ("malformed_row", 2, None, 1)]


def test_an_offset_of_minus_5_is_quarantined_never_replayed(tmp_path):
    g = bi.group_in(3, "n")
    rows = _rows(3, [(0, bi.commit(g, 0, 10, bi.T0)), (-5, bi.commit(g, 1, 99, bi.T0 + 1))])
    p = tmp_path / "d.jsonl"
    p.write_text("\n".join(json.dumps(r) for r in rows))
    recs, probs = _split(list(read_tabular_dump(p)))
    assert [r.offset for r in recs] == [0]
    assert probs == [("negative_offset", 1, -5, 1)]
    assert count_tabular(str(p))[3]["records_in"] == 2


# ---------------------------------------------------------------------------------------------- the kinds list
def test_every_quarantine_kind_is_documented_once():
    tree = ast.parse((ROOT / "schemas" / "quarantine.py").read_text())
    documented = {}
    body = tree.body
    for stmt, nxt in zip(body, body[1:]):
        if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str):
            if isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant):
                documented[stmt.value.value] = nxt.value.value
    assert set(QUARANTINE_KINDS) == set(documented) and len(QUARANTINE_KINDS) == len(set(QUARANTINE_KINDS))
    assert all(len(doc) > 20 for doc in documented.values())
