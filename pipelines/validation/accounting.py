"""Record accounting per offsets partition: every record read is used, skipped with a reason, or quarantined.

Built from the decoded rows (`schemas.decoded`): record_kind `error` → quarantined, `unknown` → skipped with reason
"unknown key type" (Kafka 3.4.1+/3.6+ skip those with a warning, spec §5.4), everything else (control records
included) → used. `records_in` should come from the reader's own count where there is one (records iterated in the
segment files), so the `accounting.records_accounted` check compares two independent numbers.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

SKIP_UNKNOWN_KEY = "unknown key type"

ACCOUNTING_SCHEMA = StructType(
    [
        StructField("offsets_partition", IntegerType()),
        StructField("records_in", LongType()),
        StructField("records_used", LongType()),
        StructField("records_skipped", LongType()),
        StructField("records_quarantined", LongType()),
        StructField("skipped_by_reason", StringType()),  # "reason=count; …", readable in reports
    ]
)


@dataclass(frozen=True)
class PartitionCounts:
    records_in: int = 0
    records_used: int = 0
    records_quarantined: int = 0
    records_skipped: Mapping[str, int] = field(default_factory=dict)  # reason → count

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
        }

    @classmethod
    def from_dict(cls, d: Mapping) -> PartitionCounts:
        return cls(
            records_in=int(d.get("records_in", 0)),
            records_used=int(d.get("records_used", 0)),
            records_quarantined=int(d.get("records_quarantined", 0)),
            records_skipped={str(k): int(v) for k, v in (d.get("records_skipped") or {}).items()},
        )


@dataclass(frozen=True)
class Accounting:
    """Counts per offsets partition (None: records whose partition is unknown, e.g. an unreadable file)."""

    partitions: Mapping[int | None, PartitionCounts]

    @classmethod
    def from_decoded(cls, decoded: DataFrame, records_in: Mapping[int | None, int] | None = None) -> Accounting:
        """Classify decoded rows (one small aggregation, collected to the driver).

        `records_in` (partition → records read, from the reader) replaces the decoded row count per partition;
        a partition the reader saw but that decoded to nothing shows up with zero used records.
        """
        kind = F.col("record_kind")
        rows = (
            decoded.groupBy("offsets_partition")
            .agg(
                F.count(F.lit(1)).alias("n"),
                F.sum(F.when(kind == "error", 1).otherwise(0)).alias("quarantined"),
                F.sum(F.when(kind == "unknown", 1).otherwise(0)).alias("unknown"),
            )
            .collect()
        )
        parts: dict[int | None, PartitionCounts] = {}
        for r in rows:
            used = r["n"] - r["quarantined"] - r["unknown"]
            skipped = {SKIP_UNKNOWN_KEY: int(r["unknown"])} if r["unknown"] else {}
            parts[r["offsets_partition"]] = PartitionCounts(
                records_in=int(r["n"]), records_used=int(used), records_quarantined=int(r["quarantined"]),
                records_skipped=skipped,
            )
        if records_in is not None:
            for p, n in records_in.items():
                base = parts.get(p, PartitionCounts())
                parts[p] = PartitionCounts(
                    records_in=int(n), records_used=base.records_used,
                    records_quarantined=base.records_quarantined, records_skipped=base.records_skipped,
                )
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

    def to_dataframe(self, spark: SparkSession) -> DataFrame:
        """One row per partition, the frame the `accounting` suite validates."""
        rows = [
            (
                p,
                c.records_in,
                c.records_used,
                c.skipped_total,
                c.records_quarantined,
                "; ".join(f"{k}={v}" for k, v in sorted(c.records_skipped.items())),
            )
            for p, c in self._sorted()
        ]
        return spark.createDataFrame(rows, ACCOUNTING_SCHEMA)

    def _sorted(self):
        return sorted(self.partitions.items(), key=lambda kv: (kv[0] is None, kv[0] if kv[0] is not None else 0))
