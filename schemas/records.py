"""Small frozen records of what a `__consumer_offsets` segment holds, named as Kafka names them.

Byte layouts live next to their readers in `pipelines/decoding`; these dataclasses are what those readers
return. Upstream: `clients/.../common/record/{DefaultRecordBatch,DefaultRecord,LegacyRecord}.java`.
"""
from __future__ import annotations

from dataclasses import dataclass

# Compression codec ids (attributes bits 0-2), as `CompressionType.java` names them.
CODEC_NAMES = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}

# Timestamp types as kafka-dump-log prints them.
NO_TIMESTAMP_TYPE = "NoTimestampType"
CREATE_TIME = "CreateTime"
LOG_APPEND_TIME = "LogAppendTime"

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
#: Kafka's partition ids are Java ints and its offsets Java longs: a directory, file or checkpoint line naming one past
#: them is none of a log's (Kafka refuses it as it parses the number)
PARTITION_MAX = (1 << 31) - 1
OFFSET_MAX = (1 << 63) - 1


@dataclass(frozen=True, slots=True, kw_only=True)
class RecordBatchHeader:
    """One batch (magic 2) or one legacy log entry / compressed wrapper (magic 0/1), as found in a file.

    For legacy entries `base_offset` is the first inner offset and `last_offset` the entry's own offset
    (Kafka's `AbstractLegacyRecordBatch.baseOffset/lastOffset`); producer fields are -1.
    """

    source: str  # file path or table name the batch came from
    offsets_partition: int  # N of `__consumer_offsets-N`; -1 if unknown
    position: int  # byte position of the batch in its file
    base_offset: int
    last_offset: int
    size: int  # total bytes of the batch / entry (12 + length)
    magic: int
    crc: int
    crc_valid: bool
    attributes: int
    codec: str
    timestamp_type: str
    is_transactional: bool
    is_control: bool
    delete_horizon_ms: int | None  # v2 attribute bit 6 (KIP-534): baseTimestamp is the delete horizon
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    partition_leader_epoch: int
    records_count: int  # as declared in the header (v2) or iterated (legacy)


@dataclass(frozen=True, slots=True, kw_only=True)
class LogRecord:
    """One record of a batch: position in the log plus raw key and value bytes (None = null)."""

    batch: RecordBatchHeader
    offset: int
    timestamp: int
    first_offset_in_batch: int  # offset of the first record iterated in this batch (old loader's appendedBatchOffset)
    sequence: int
    key: bytes | None
    value: bytes | None  # None = tombstone
    header_keys: tuple[str, ...] = ()

    @property
    def offsets_partition(self) -> int:
        return self.batch.offsets_partition


@dataclass(frozen=True, slots=True, kw_only=True)
class ReadProblem:
    """Something a reader could not use: a torn tail, a bad CRC, an undecodable entry. Never fatal.

    `kind` is one of `schemas.quarantine.QUARANTINE_KINDS`; `position` is a byte position in `source` (segment
    files) or a row number (tables); `offset` the log offset when known. `records`: how many records this row
    stands for in the accounting (0: evidence, or bytes whose records cannot be counted); `unread_to`: when set,
    the bytes [position, unread_to) of `source` were not read into records.
    """

    source: str
    offsets_partition: int
    position: int
    kind: str
    reason: str
    offset: int | None = None
    key: bytes | None = None
    value: bytes | None = None
    records: int = 0
    unread_to: int | None = None
