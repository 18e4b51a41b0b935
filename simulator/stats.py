"""What a sample holds, as `generate_sample` returns it: the counts tests and `offsetlake sample`'s summary check the
written log against, without decoding it."""
from __future__ import annotations

from dataclasses import dataclass, field

from pipelines.times import ms_to_iso


@dataclass
class SampleStats:
    """What `generate_sample` wrote. `records` counts every record (data and control) in every batch."""

    out_dir: str = ""
    seed: int = 0
    partitions: int = 0
    segment_bytes: int = 0
    records: int = 0
    batches: int = 0
    bytes: int = 0  # total size of the .log files
    files: int = 0  # .log files (empty partitions included)
    groups: int = 0
    groups_by_kind: dict[str, int] = field(default_factory=dict)
    group_partitions: dict[str, int] = field(default_factory=dict)  # group id -> __consumer_offsets partition
    deleted_groups: list[str] = field(default_factory=list)
    empty_classic_groups: int = 0  # classic groups whose last GroupMetadata has no members
    records_by_key_type: dict[int, int] = field(default_factory=dict)  # data records by key type
    tombstones_by_key_type: dict[int, int] = field(default_factory=dict)
    offset_commit_value_versions: dict[int, int] = field(default_factory=dict)
    control_records: dict[str, int] = field(default_factory=dict)  # COMMIT / ABORT
    batches_by_codec: dict[str, int] = field(default_factory=dict)
    multi_record_batches: int = 0
    transactional_batches: int = 0
    transactions_committed: int = 0
    transactions_aborted: int = 0
    transactions_open: int = 0
    producer_ids: int = 0
    records_per_partition: list[int] = field(default_factory=list)
    hot_partition: int | None = None  # the offsets partition `hot_share` of the records were steered to
    shape: str = "mixed"
    first_timestamp: int = 0
    last_timestamp: int = 0
    # the data topics' own partitions (`data_topics`): partitions, records and bytes written, oldest segments that
    # retention deleted; empty when none were written
    data_topics: dict[str, int] = field(default_factory=dict)
    duration_ms: int | None = None  # the timeline asked for (`--duration`); None: unpaced, seconds
    # the named incidents (`simulator.incidents`), in the order asked: kind, time_ms, group_id, partitions, …
    incidents: list[dict] = field(default_factory=list)

    def summary(self) -> str:
        return (f"records={self.records} groups={self.groups} partitions={self.partitions} bytes={self.bytes} "
                f"files={self.files} batches={self.batches} txns(commit/abort/open)={self.transactions_committed}/"
                f"{self.transactions_aborted}/{self.transactions_open}"
                + (f" hot_partition={self.hot_partition} ({self.records_per_partition[self.hot_partition]} records)"
                   if self.hot_partition is not None else "") + ("" if self.shape == "mixed" else f" shape={self.shape}")
                + (f" data_partitions={self.data_topics['partitions']} data_records={self.data_topics['records']}"
                   f" data_bytes={self.data_topics['bytes']}" if self.data_topics else "")
                + f" timeline={_iso(self.first_timestamp)}..{_iso(self.last_timestamp)}")

    def incident_lines(self) -> list[str]:
        """One line per incident: what, its exact time (ISO-8601 and epoch ms), the group (`simulator.incidents`)."""
        from simulator.incidents import summary_line

        return [summary_line(d) for d in self.incidents]


def _iso(ms: int) -> str:
    return ms_to_iso(ms).replace("+00:00", "Z")
