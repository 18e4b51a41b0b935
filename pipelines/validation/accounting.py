"""Record accounting per offsets partition: every record read is used, skipped with a reason, or quarantined.

Built from the decoded log's tally (`frames.tally`): record_kind `error` → quarantined, `unknown` (and the
consumer / share / streams group records of key types the run's coordinator does not know) → skipped with reason
"unknown key type" (Kafka 3.4.1+/3.6+ skip those with a warning, spec §5.4), offset commit and group metadata values
of a version the run's coordinator does not read → skipped with reason "unknown value version" (Kafka fails the
partition's load there: the run warns), group records the replay skipped as the new coordinator's load fails on them
(a record of another group type's id, a tombstone out of the deletion order, …) → skipped with that reason, records
past `--until-offset` / `--until-time` → skipped with that reason,
everything else (control records included) → used.

`records_in` comes from the reader's own count (`pipelines.frames.decode.reader_counts`: verified batch headers'
record counts, no record decoding), so the `accounting.records_accounted` check compares two independent numbers
and fails when records go missing between the segment bytes and the decoded rows. Quarantined counts *records*:
each quarantine row says how many it stands for (decoded column `error_records`: 1 for a record, a verified
batch's count for a batch that could not be decoded, 0 for evidence and for unread byte ranges).

Bytes no record was read from (unframeable sizes, torn tails, batches that fail their CRC and do not parse) are
`bytes_unread` per partition, with their ranges (`unread_ranges`: source, from, to, kind); zero tails apart.
The `accounting.bytes_all_read` check (`validation.max_unread_bytes`, 0 in conf/prod) fails a run that left
more unread.
"""
from __future__ import annotations

import dataclasses
import datetime as _dt
from collections.abc import Mapping
from dataclasses import dataclass, field

import pyarrow as pa

SKIP_UNKNOWN_KEY = "unknown key type"
SKIP_UNKNOWN_VERSION = "unknown value version"
#: a group record the new coordinator's replay throws on (its `group_history` event `skipped`): the load fails there
SKIP_LOAD_FAILS = "group record the coordinator's load fails on"


def skip_until_offset(n: int) -> str:
    return f"after --until-offset {n}"


def skip_until_time(ms: int) -> str:
    t = _dt.datetime.fromtimestamp(ms / 1000, tz=_dt.timezone.utc).isoformat(timespec="milliseconds")
    return f"after --until-time {t}"

ACCOUNTING_SCHEMA = pa.schema(
    [
        pa.field("offsets_partition", pa.int32()),
        pa.field("records_in", pa.int64()),
        pa.field("records_used", pa.int64()),
        pa.field("records_skipped", pa.int64()),
        pa.field("records_quarantined", pa.int64()),
        pa.field("skipped_by_reason", pa.string()),  # "reason=count; …", readable in reports
        pa.field("bytes_unread", pa.int64()),  # bytes no record was read from (zero tails apart)
    ]
)


@dataclass(frozen=True)
class PartitionCounts:
    records_in: int = 0
    records_used: int = 0
    records_quarantined: int = 0
    records_skipped: Mapping[str, int] = field(default_factory=dict)  # reason → count
    bytes_unread: int = 0
    unread_ranges: tuple[tuple[str, int, int, str], ...] = ()  # (source, from, to, kind), zero tails included

    @property
    def skipped_total(self) -> int:
        return sum(self.records_skipped.values())

    @property
    def balanced(self) -> bool:
        return self.records_in == self.records_used + self.skipped_total + self.records_quarantined

    def to_dict(self) -> dict:
        return {
            "records_in": self.records_in,
            "records_used": self.records_used,
            "records_skipped": dict(self.records_skipped),
            "records_quarantined": self.records_quarantined,
            "bytes_unread": self.bytes_unread,
        }

    @classmethod
    def from_dict(cls, d: Mapping) -> PartitionCounts:
        return cls(
            records_in=int(d.get("records_in", 0)),
            records_used=int(d.get("records_used", 0)),
            records_quarantined=int(d.get("records_quarantined", 0)),
            records_skipped={str(k): int(v) for k, v in (d.get("records_skipped") or {}).items()},
            bytes_unread=int(d.get("bytes_unread", 0)),
        )


@dataclass(frozen=True)
class Accounting:
    """Counts per offsets partition (None: records whose partition is unknown, e.g. an unreadable file)."""

    partitions: Mapping[int | None, PartitionCounts]

    @classmethod
    def from_tally(cls, tally, records_in: Mapping[int | None, int | Mapping[str, int]] | None = None,
                   unknown_key_types: frozenset[int] = frozenset(),
                   known_value_versions: tuple[tuple[int, int], ...] = (),
                   load_failures: Mapping[int | None, int] | None = None) -> Accounting:
        """Classify the decoded records from the log's tally (`frames.tally.Tally`).

        `records_in` (partition → records read, from the reader) replaces the decoded row count per partition;
        a partition the reader saw but that decoded to nothing shows up with zero used records. A value may be
        the reader's counters (`reader_counts`: records_in, bytes_unread, unread_ranges), which also add the bytes
        that were not read.
        Records past the tally's cut-offs (its `until_offset` / `until_time_ms`, the replay's:
        `coordinator.loader.replayable`) are skipped with that reason instead of used; the records of
        `unknown_key_types` (group records the run's coordinator does not know:
        `coordinator.options.unknown_group_key_types`) are skipped as of an unknown key type; the offset commit and
        group metadata values above `known_value_versions`' version of their key type (the run's coordinator fails
        the partition's load on them: `coordinator.options.limited_value_versions`) as of an unknown value version.
        `load_failures` (partition -> records): the group records the replay skipped because the coordinator's load
        fails on them (`rebuild.coordinator_warnings.skipped_group_records`), skipped with that reason rather than used.
        """
        parts: dict[int | None, PartitionCounts] = {}
        for p, r in tally.by_partition(unknown_key_types, known_value_versions).items():
            skipped = {}
            if r["unknown"]:
                skipped[SKIP_UNKNOWN_KEY] = int(r["unknown"])
            if r["unknown_version"]:
                skipped[SKIP_UNKNOWN_VERSION] = int(r["unknown_version"])
            if r["late_offset"]:
                skipped[skip_until_offset(tally.until_offset)] = int(r["late_offset"])
            if r["late_time"]:
                skipped[skip_until_time(tally.until_time_ms)] = int(r["late_time"])
            if (load_failures or {}).get(p):
                skipped[SKIP_LOAD_FAILS] = int(load_failures[p])
            used = r["n"] - r["error_rows"] - sum(skipped.values())
            parts[p] = PartitionCounts(
                records_in=int(r["n"]), records_used=int(used), records_quarantined=int(r["quarantined"]),
                records_skipped=skipped,
            )
        if records_in is not None:
            for p, n in records_in.items():
                base = parts.get(p, PartitionCounts())
                skipped = dict(base.records_skipped)
                unread, ranges = 0, ()
                if isinstance(n, Mapping):
                    unread = int(n.get("bytes_unread", 0))
                    ranges = tuple(tuple(r) for r in n.get("unread_ranges", ()))
                    n = n.get("records_in", 0)
                parts[p] = PartitionCounts(
                    records_in=int(n), records_used=base.records_used,
                    records_quarantined=base.records_quarantined, records_skipped=skipped,
                    bytes_unread=unread, unread_ranges=ranges,
                )
            for p in set(parts) - set(records_in):
                # decoded rows of a partition the reader never saw: nothing was read there
                parts[p] = dataclasses.replace(parts[p], records_in=0)
        return cls(partitions=parts)

    @property
    def totals(self) -> PartitionCounts:
        skipped: dict[str, int] = {}
        for c in self.partitions.values():
            for k, v in c.records_skipped.items():
                skipped[k] = skipped.get(k, 0) + v
        return PartitionCounts(
            records_in=sum(c.records_in for c in self.partitions.values()),
            records_used=sum(c.records_used for c in self.partitions.values()),
            records_quarantined=sum(c.records_quarantined for c in self.partitions.values()),
            records_skipped=skipped,
            bytes_unread=sum(c.bytes_unread for c in self.partitions.values()),
            unread_ranges=tuple(sorted(r for c in self.partitions.values() for r in c.unread_ranges)),
        )

    @property
    def total_in(self) -> int:
        return self.totals.records_in

    @property
    def total_used(self) -> int:
        return self.totals.records_used

    @property
    def total_skipped(self) -> int:
        return self.totals.skipped_total

    @property
    def total_quarantined(self) -> int:
        return self.totals.records_quarantined

    def unbalanced(self) -> list[int | None]:
        return [p for p, c in self.partitions.items() if not c.balanced]

    def to_dict(self) -> dict:
        """JSON-able: partition numbers as strings ("null" for unknown), plus totals."""
        return {
            "partitions": {("null" if p is None else str(p)): c.to_dict() for p, c in self._sorted()},
            "totals": self.totals.to_dict(),
        }

    @classmethod
    def from_dict(cls, d: Mapping) -> Accounting:
        parts = d.get("partitions", d)
        return cls(
            partitions={
                (None if k in ("null", None) else int(k)): PartitionCounts.from_dict(v) for k, v in parts.items()
            }
        )

    def to_arrow(self):
        """One row per partition, the table the `accounting` suite validates."""
        rows = [
            dict(offsets_partition=p, records_in=c.records_in, records_used=c.records_used,
                 records_skipped=c.skipped_total, records_quarantined=c.records_quarantined,
                 skipped_by_reason="; ".join(f"{k}={v}" for k, v in sorted(c.records_skipped.items())),
                 bytes_unread=c.bytes_unread)
            for p, c in self._sorted()
        ]
        return pa.Table.from_pylist(rows, schema=ACCOUNTING_SCHEMA)

    def _sorted(self):
        return sorted(self.partitions.items(), key=lambda kv: (kv[0] is None, kv[0] if kv[0] is not None else 0))
