"""The rows and columns a loader's table holds (`coordinator.decoded`): every value a loadable record sets, and the
markers whose values are damaged."""
from __future__ import annotations

import glob
import os
import struct

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from pipelines.coordinator.decoded import ERROR_COLUMNS, LOADED_SCHEMA, conform_loaded, damaged_markers, loadable
from pipelines.coordinator.loader import SKIPPED_KINDS
from pipelines.coordinator.options import ReplayOptions
from pipelines.coordinator.shard import replay_shards
from pipelines.decoding import batch_writer as bw
from pipelines.decoding import message_writer as mw
from pipelines.decoding.columnar import decode_segment_to_arrow
from tests.badinputs import build_combined
from tests.conftest import SHARED
from tests.decoding.test_columnar import WALKERS, partition_of


def _decoded(paths: list[str], use_c: bool | None = None) -> pa.Table:
    batches = [b for p in paths for b in decode_segment_to_arrow(p, offsets_partition=partition_of(p), use_c=use_c)]
    return pa.Table.from_batches(batches)


def test_a_loader_drops_only_columns_no_loadable_record_sets(tmp_path):
    build_combined(tmp_path)
    logs = sorted(glob.glob(str(tmp_path / "**" / "*.log"), recursive=True))
    # and every real segment there is (none without ../shared)
    logs += sorted(glob.glob(str(SHARED / "realdata" / "seg_*" / "**" / "*.log"), recursive=True))
    logs += sorted(glob.glob(str(SHARED / "brokerdata" / "*" / "data" / "**" / "*.log"), recursive=True))
    table = _decoded([p for p in logs if os.path.isfile(p)])  # the damaged inputs hold a directory named like one
    skipped = pc.fill_null(pc.is_in(table.column("record_kind"), pa.array(SKIPPED_KINDS)), False)
    # the damaged inputs' error rows set every one of them: the columns are the decoder's, not dead ones
    for name in ERROR_COLUMNS:
        assert table.filter(skipped).column(name).null_count < pc.sum(skipped).as_py(), name
    kept = table.filter(pc.invert(skipped))
    assert kept.num_rows
    for name in ERROR_COLUMNS:
        assert kept.column(name).null_count == kept.num_rows, name
    loaded = loadable(conform_loaded(table))
    assert loaded.schema.equals(LOADED_SCHEMA)
    assert loaded.num_rows == kept.num_rows + pc.sum(damaged_markers(table)).as_py()


STATE = ("loaded_offsets", "empty_group_offsets", "pending_offsets", "loaded_groups")


def _replayed(tmp_path, name: str, marker_value: bytes | None | bool, semantics: str, walker: str):
    """A transactional commit of offset 42, then its COMMIT marker with `marker_value` (False: no marker), decoded
    and replayed: (the decoded rows, the state tables)."""
    pid, ts = 77, 1_700_000_000_000
    commit = (mw.write_offset_commit_key("g", "t", 0),
              mw.write_offset_commit_value(3, offset=42, commit_timestamp=ts, leader_epoch=0), ts)
    log = bw.write_record_batch([commit], 0, producer_id=pid, producer_epoch=0, is_transactional=True)
    if marker_value is not False:
        log += bw.write_record_batch([(struct.pack(">hh", 0, 1), marker_value, ts)], 1, producer_id=pid,
                                     producer_epoch=0, base_sequence=-1, is_transactional=True, is_control=True)
    part = tmp_path / name / "__consumer_offsets-0"
    part.mkdir(parents=True)
    (part / "00000000000000000000.log").write_bytes(log)
    table = _decoded([str(part / "00000000000000000000.log")], use_c=walker == "c")
    tables = replay_shards(table, ReplayOptions(semantics=semantics)).tables
    return table, {t: tables[t].drop_columns(["snapshot_id"]).to_pylist() for t in STATE}


@pytest.mark.parametrize("semantics", ["legacy", "modern"])
@pytest.mark.parametrize("walker", WALKERS)
@pytest.mark.parametrize("value", [b"\x00\x00", None], ids=["short", "null"])
def test_a_marker_whose_value_does_not_decode_ends_its_transaction_as_its_key_says(tmp_path, semantics, walker,
                                                                                   value):
    """Kafka's loaders read a marker's key alone: a COMMIT whose value is damaged installs the transaction's
    offsets as a whole one does, and the value is quarantined all the same."""
    table, damaged = _replayed(tmp_path, "damaged", value, semantics, walker)
    errors = table.filter(pc.equal(table.column("record_kind"), "error")).to_pylist()
    assert [(r["offset"], r["error_kind"]) for r in errors] == [(1, "undecodable_value")]
    _, whole = _replayed(tmp_path, "whole", struct.pack(">hi", 0, 5), semantics, walker)
    _, open_ = _replayed(tmp_path, "open", False, semantics, walker)
    assert damaged == whole
    assert not whole["pending_offsets"] and [r["committed_offset"] for r in open_["pending_offsets"]] == [42]


@pytest.mark.parametrize("semantics,kafka_version,skipped", [
    ("legacy", "3.9", {1, 2}), ("legacy", "3.3", {1, 2, 3}), ("modern", "4.0", {2})])
def test_records_the_coordinator_skips_stay_rows_no_loader_reads(semantics, kafka_version, skipped):
    """A record of a key type the run's coordinator does not know, or a value of a version it does not read, is
    left in the loader's table as a `KIND_NOT_LOADED` row (dropping it copied every column of every window), which
    no reduction keeps: every table the replay gives is the one the log without those records gives, as Kafka's
    loader skips them (a KIP-848 or streams group record under 3.9's old coordinator, and a v4 OffsetCommit under
    3.3's; a streams group record under 4.0's new one)."""
    from pipelines.coordinator.loader import KIND_NOT_LOADED
    from pipelines.coordinator.reduction import split_mask, state_only_mask
    from pipelines.coordinator.shard import replay_rows
    from schemas.decoded import DECODED_RECORD_SCHEMA
    from tests.coordinator.rowkit import Log

    log = Log()
    log.commit("g", "t", 0, 5)
    log.cg_epoch("c", 3)  # offset 1, type 3
    log._append("streams_group", key_type=17, value_version=0, group_id="s", group_epoch=2)  # offset 2
    log.commit("g", "t", 1, 6)["value_version"] = 4  # offset 3
    log.commit("g", "t", 0, 7)
    options = ReplayOptions(semantics=semantics, kafka_version=kafka_version, snapshot_id="t", num_partitions=50)
    full = replay_rows(log.rows, options)
    without = replay_rows([r for r in log.rows if r["offset"] not in skipped], options)
    for name in ("loaded_offsets", "empty_group_offsets", "loaded_groups", "group_members", "removed_groups",
                 "group_history", "offset_commits"):
        assert full[name] == without[name], name
    table = loadable(conform_loaded(pa.Table.from_pylist(log.rows, schema=DECODED_RECORD_SCHEMA)),
                     options.unknown_key_types, options.unknown_fields, options.limited_value_versions)
    offsets, kinds = table.column("offset").to_pylist(), table.column("record_kind").to_pylist()
    assert {o for o, k in zip(offsets, kinds) if k == KIND_NOT_LOADED} == skipped
    # nor does a reduction keep them: what a split partition's range hands on stays the size of its state
    for mask in (split_mask(table, options.is_modern), state_only_mask(table, options.is_modern)):
        assert mask is not None and not any(mask[offsets.index(o)] for o in skipped)
