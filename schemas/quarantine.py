"""The fixed list of quarantine kinds: why a piece of input is not state. One value per `quarantine.kind`.

Every reader (segments, tabular dumps, record decoding) names what it found with one of these; nothing else may
appear in the `kind` column (the fuzz and attack tests check every row they see against `QUARANTINE_KINDS`).
`records` in the docs below is what one row of that kind stands for in the accounting
(records_in = used + skipped + quarantined), and whether its bytes are reported unread.
"""
from __future__ import annotations

# -- a batch or entry of a segment file -----------------------------------------------------------------------------
CRC_MISMATCH = "crc_mismatch"
"""The batch's stored CRC (CRC-32C, legacy CRC-32) does not match its bytes. Not replayed by default
(`rebuild.replay_corrupt_batches`): one row per record whose bytes still parse (1 record each); when its records
cannot be parsed, one row for the batch, its bytes reported unread (0 records: an unverified header's count is
never taken). With the option on, the records are replayed and one row (0 records) is the evidence."""
TORN_TAIL = "torn_tail"
"""The file ends inside an entry (a crash mid-append): the rest of the file is an unread byte range."""
ZERO_TAIL = "zero_tail"
"""Zero bytes to the end of the file (a preallocated segment): an unread range that holds no data."""
UNFRAMEABLE = "unframeable"
"""An entry size that cannot frame an entry (below the 14-byte minimum, negative): reading of the file stops and
the rest of it, from the bad entry on, is an unread byte range (Kafka's recovery truncates the log there)."""
UNKNOWN_MAGIC = "unknown_magic"
"""An entry with a magic byte other than 0, 1, 2 and a verified size: its bytes are an unread range."""
CORRUPT_BATCH = "corrupt_batch"
"""A batch whose CRC verifies but whose records cannot be parsed (a writer bug), or whose record count is
negative: one row for the batch; its verified header count is quarantined (negative count: bytes unread)."""
BAD_CODEC = "bad_codec"
"""A compression codec id Kafka does not define (or zstd in a magic 0/1 entry): one row, the batch's records."""
DECOMPRESS_FAILED = "decompress_failed"
"""The record section does not decompress with its codec: one row, the batch's records."""
DECOMPRESSION_TOO_LARGE = "decompression_too_large"
"""The record section decompresses to more than `decode.max_batch_bytes`: one row, the batch's records; never
decompressed past the cap."""
OFFSETS_OUT_OF_ORDER = "offsets_out_of_order"
"""A segment's batch that does not start above every offset of the batches before it in its file, or whose records'
offsets are not within its own [baseOffset, lastOffset] (Kafka never writes one; `decoding.offset_order`): one row
at the batch's byte position, standing for its records, none replayed."""

# -- a record of a readable batch -----------------------------------------------------------------------------------
UNKNOWN_VERSION = "unknown_version"
"""A value version no Kafka release defines for its key type (Kafka fails the load): one record."""
UNDECODABLE_KEY = "undecodable_key"
"""A record key that cannot be parsed (truncated, bad lengths, bad UTF-8): one record."""
UNDECODABLE_VALUE = "undecodable_value"
"""A record value that cannot be parsed for its key type: one record."""

# -- files and directories ----------------------------------------------------------------------------------------
UNREADABLE = "unreadable"
"""A segment that cannot be opened or read (permissions, a dangling link, a directory or pipe named like a
segment)."""
NOT_OFFSETS_DATA = "not_offsets_data"
"""Another topic's partition directory or rows, a directory without segments, or a name past Kafka's numbers (a
`__consumer_offsets-N` past 2^31 - 1, a segment's base offset past 2^63 - 1): not read."""
SWAP_FILE = "swap_file"
"""A segment Kafka's recovery of an interrupted swap deletes (`LogLoader.load`): a `.log` a `.log.swap` (a cleaned or
split segment awaiting rename) replaces, read in its place, or a swap at or above the lowest `.cleaned` file's
offset (an incomplete split's) or not named by Kafka's 20 digits (`0.log.swap`, renamed to a `.log` no broker
reads): not read."""
OVERLAPPING_SEGMENT = "overlapping_segment"
"""Entries of a segment file Kafka's loader passes over as it reads its partition by offset (a file overlapping
another: a copy, a restored or renamed file, or entries below the log start; `decoding.overlaps`): one row per run of
them, at its byte position, standing for their records."""
DUPLICATE_SEGMENT = "duplicate_segment"
"""Two files claiming the same (partition, base offset), a partition's copies from two log dirs (a broker refuses to
load both): the one whose entries reach less far is not read, one row per run of its entries standing for their
records (`decoding.overlaps`)."""

# -- rows of a tabular dump (position: the row number in the dump, 0-based) ---------------------------------------
MALFORMED_ROW = "malformed_row"
"""A JSON line that does not parse, a CSV row with the wrong number of fields, a partition or offset that is not a
whole number or past Kafka's (2^31 - 1, 2^63 - 1): one record."""
INVALID_ROW = "invalid_row"
"""A row without a partition or an offset, a Parquet row whose partition or offset is past Kafka's (2^31 - 1,
2^63 - 1), or a key/value that is not valid base64/hex: one record."""
NEGATIVE_OFFSET = "negative_offset"
"""A row whose offset or partition is below 0, or a segment's batch holding a negative offset (no log position is
negative): one record for a row; for a batch, one row standing for its records (`decoding.offset_order`)."""
DUPLICATE_CONFLICT = "duplicate_conflict"
"""The same (partition, offset) twice with different content: the first row is kept, this one is one record (in one
dump, or a tabular input's row at an offset a segment or an earlier tabular input holds). In overlapping segment
files, a record left out as a copy that differs from the one loaded: evidence, no record."""
DUPLICATE_ROW = "duplicate_row"
"""Rows of a tabular input repeating records the segments, an earlier tabular input or rows before them in its own
dump hold at their (partition, offset) (a dump given twice, exports that overlap, a part file written twice, a dump
beside the log it was exported from; `decoding.dump_copies`, `decoding.tabular`): those are loaded; one row per run
of them, at its first row number, standing for their records."""

QUARANTINE_KINDS: tuple[str, ...] = (
    CRC_MISMATCH, TORN_TAIL, ZERO_TAIL, UNFRAMEABLE, UNKNOWN_MAGIC, CORRUPT_BATCH, BAD_CODEC, DECOMPRESS_FAILED,
    DECOMPRESSION_TOO_LARGE, UNKNOWN_VERSION, UNDECODABLE_KEY, UNDECODABLE_VALUE, UNREADABLE, NOT_OFFSETS_DATA,
    SWAP_FILE, DUPLICATE_SEGMENT, OVERLAPPING_SEGMENT, MALFORMED_ROW, INVALID_ROW, NEGATIVE_OFFSET, DUPLICATE_CONFLICT,
    OFFSETS_OUT_OF_ORDER, DUPLICATE_ROW,
)

#: kinds whose unread range holds data that was lost (a zero tail holds none): these fail a run under `fail`
DATA_LOSS_KINDS = frozenset({CRC_MISMATCH, TORN_TAIL, UNFRAMEABLE, UNKNOWN_MAGIC, CORRUPT_BATCH})
