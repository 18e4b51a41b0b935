"""What a shard's task hands back crosses the Spark boundary as typed payloads (`frames.envelope`): every kind comes
back from the envelope's rows as it went in, the rows match the frame's DDL, and the driver's collected view of the
decoded log (its rows' sides only) gives the tallies and nothing else. The envelope of real logs is checked against
the brokers' ground truth by test_streamed_shards and test_split_partitions, which read it through `decode`."""
from __future__ import annotations

import pyarrow as pa
import pytest

from pipelines.frames.decoded_log import from_blobs
from pipelines.frames.envelope import (FUSED_DDL, DecodedTally, GroupEventsFile, HistoryRows, HistorySuspects,
                                       KeptRowsFile, Markers, QuarantinedRows, ReaderCounts, SavedFile, SavedShardBytes,
                                       ShardProgress, ShardStates, StateTable, WrittenHistory, decode, encode, taken)
from pipelines.io.delta import WrittenFile
from schemas.decoded import DECODED_RECORD_SCHEMA

EVERY_KIND = [
    QuarantinedRows(shard=3, rows=b"q"),
    DecodedTally(shard=3, tally=b"t", named=None),
    DecodedTally(shard=4, tally=b"t2", named=b"n"),
    Markers(shard=3, rows=b"m"),
    ShardStates(shard=3, states=b"s"),
    HistoryRows(shard=3, rows=b"h"),
    HistorySuspects(shard=3, rows=b"x"),
    WrittenHistory(shard=3, file=WrittenFile(name="part-3.parquet", size=10, rows=2, stats="{}"), aside=True),
    SavedFile(shard=3, file="state-3", entries=7, size=3_000_000_000),
    SavedShardBytes(shard=-1, data=b"saved"),
    GroupEventsFile(shard=3, file="part-00003-0a1b.arrow", count=2_000),
    GroupEventsFile(shard=4, file="part-00004-0a1c.arrow", count=3, skipped=("g", "g", "h\u00e9")),
    KeptRowsFile(shard=3, file="part-00003-9f.arrow", range_index=5, bucket=1),
    ShardProgress(shard=3, records=12, input_bytes=5_000_000_000),
    ReaderCounts(shard=-1, rows=b"c"),
    StateTable(shard=3, table="group_members", rows=b"gm"),
]

_DDL_TYPES = {"string": pa.string(), "int": pa.int32(), "binary": pa.binary()}


def test_every_kind_comes_back_as_it_went_in_and_in_order():
    batch = encode(EVERY_KIND)
    assert batch.num_rows == len(EVERY_KIND)
    assert list(decode(batch)) == EVERY_KIND
    assert list(decode(pa.Table.from_batches([batch]))) == EVERY_KIND


def test_the_rows_are_the_frame_ddl_spark_is_given():
    declared = [field.strip().split(" ") for field in FUSED_DDL.split(",")]
    got = encode(EVERY_KIND).schema
    assert [(f.name, f.type) for f in got] == [(name, _DDL_TYPES[t]) for name, t in declared]


def test_a_decoded_logs_row_of_no_rows_is_an_empty_quarantine_the_log_opens():
    """The decoded log reads its rows' `payload` as quarantined rows: a tally's row must hold an empty table."""
    batch = encode([DecodedTally(shard=0, tally=b"t")])
    rows = from_blobs(batch.column("payload").to_pylist())
    assert rows.num_rows == 0 and rows.schema.names == DECODED_RECORD_SCHEMA.names


def test_the_collected_sides_of_the_decoded_log_give_its_tallies_alone():
    """`segment_shards._collected` keeps a quarantine row's sides, not its rows: only the tallies come back."""
    batch = encode([QuarantinedRows(shard=1, rows=b"q"), DecodedTally(shard=1, tally=b"t", named=b"n"),
                    Markers(shard=1, rows=b"m")])
    sides = batch.set_column(2, "payload", pa.array([None, None, b"m"], pa.binary()))
    assert list(decode(sides)) == [DecodedTally(shard=1, tally=b"t", named=b"n"), Markers(shard=1, rows=b"m")]


def test_progress_is_taken_out_and_the_other_rows_pass_as_they_are():
    batch = encode(EVERY_KIND)
    progress, rest = taken(batch, ShardProgress)
    assert progress == [p for p in EVERY_KIND if isinstance(p, ShardProgress)]
    assert list(decode(rest)) == [p for p in EVERY_KIND if not isinstance(p, ShardProgress)]


@pytest.mark.parametrize("name", ["_markers", "offset_commits"])
def test_a_state_table_cannot_take_another_kinds_name(name):
    with pytest.raises(ValueError, match="not a state table"):
        encode([StateTable(shard=0, table=name, rows=b"")])
