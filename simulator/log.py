"""One offsets partition's log as the broker writes it: `__consumer_offsets-N/<base offset>.log` segments of magic 2
batches at contiguous offsets, coordinator writes lingering into one batch, the codec of the current era, markers.

The bytes come from `pipelines.decoding.batch_writer`; this module decides only what goes into which batch and
which segment."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from pipelines.decoding.batch_writer import write_control_batch, write_record_batch
from pipelines.decoding.codecs import CODEC_IDS

if TYPE_CHECKING:
    from simulator.cluster import Cluster

DEFAULT_SEGMENT_BYTES = 8 * 1024 * 1024
CODECS = tuple(CODEC_IDS)  # none, gzip, snappy, lz4, zstd


class PartitionLog:
    """One `__consumer_offsets-N` directory being written: contiguous offsets, segments rolled at `segment_bytes`
    (Kafka rolls when the next batch would not fit; the file is named after that batch's base offset)."""

    FLUSH_BYTES = 1 << 20

    def __init__(self, cluster: Cluster, index: int):
        self.cluster = cluster
        self.clock = cluster.clock
        self.stats = cluster.stats
        self.index = index
        self.dir = cluster.out / f"__consumer_offsets-{index}"
        self.next_offset = 0
        self.last_ts = 0
        self.seg_base = -1
        self.seg_size = 0
        self.seg_path: Path | None = None
        self.buf: list[bytes] = []
        self.buf_size = 0
        self.linger: list[tuple] = []  # records of an open non-transactional coordinator batch
        self.records = 0
        self.codec_plan: list[str] = []

    # -- time ----------------------------------------------------------------------------------------------------
    def tick(self) -> int:
        """Broker time for the next write on this partition: the global clock, strictly increasing here."""
        ts = self.clock.now
        if ts <= self.last_ts:
            ts = self.last_ts + 1
        self.last_ts = ts
        return ts

    # -- writes --------------------------------------------------------------------------------------------------
    def write(self, records: list[tuple], *, new_batch: bool = False) -> None:
        """A coordinator write (producerId -1): may join the open batch (linger) or start a new one."""
        linger = self.linger
        if linger:
            cluster = self.cluster
            if not new_batch and len(linger) + len(records) <= 64 and cluster.rng.random() < cluster.linger_p \
                    and (cluster.linger_ms is None or records[0][2] - linger[0][2] <= cluster.linger_ms):
                linger.extend(records)
                return
            self._emit_linger()
        self.linger = list(records)

    def write_txn(self, records: list[tuple], producer_id: int, producer_epoch: int) -> None:
        self._emit_linger()
        codec = self.codec()
        self._append(write_record_batch(records, self.next_offset, codec=codec, producer_id=producer_id,
                                        producer_epoch=producer_epoch, base_sequence=0, is_transactional=True,
                                        partition_leader_epoch=self.cluster.leader_epoch), records, codec)
        self.stats.transactional_batches += 1

    def write_marker(self, control_type: int, coordinator_epoch: int, producer_id: int, producer_epoch: int,
                     ts: int) -> None:
        self._emit_linger()
        batch = write_control_batch(control_type, coordinator_epoch, self.next_offset, producer_id, producer_epoch, ts,
                                    partition_leader_epoch=self.cluster.leader_epoch)
        self._append(batch, None, "none")
        self.stats.control_records["COMMIT" if control_type == 1 else "ABORT"] += 1

    def _emit_linger(self) -> None:
        if self.linger:
            records, self.linger = self.linger, []
            codec = self.codec()
            self._append(write_record_batch(records, self.next_offset, codec=codec, base_sequence=0,
                                            partition_leader_epoch=self.cluster.leader_epoch), records, codec)

    def codec(self) -> str:
        """This partition's codec in the current era: each tenth of the record budget may have another."""
        n_eras = self.cluster.n_eras
        era = self.stats.records * n_eras // self.cluster.target
        return self.codec_plan[era if era < n_eras else n_eras - 1]

    def _append(self, batch: bytes, records, codec: str) -> None:
        n = 1 if records is None else len(records)
        stats = self.stats
        stats.batches += 1
        stats.records += n
        stats.batches_by_codec[codec] += 1
        if n > 1:
            stats.multi_record_batches += 1
        size = len(batch)
        if self.seg_base < 0 or (self.seg_size > 0 and self.seg_size + size > self.cluster.segment_bytes):
            self._roll()
        self.buf.append(batch)
        self.buf_size += size
        self.seg_size += size
        self.next_offset += n
        self.records += n
        if self.buf_size >= self.FLUSH_BYTES:
            self._flush()

    def _roll(self) -> None:
        self._flush()
        self.seg_base = self.next_offset
        self.seg_size = 0
        self.seg_path = self.dir / f"{self.seg_base:020d}.log"
        self.seg_path.write_bytes(b"")
        self.stats.files += 1

    def _flush(self) -> None:
        if self.buf:
            with open(self.seg_path, "ab") as f:
                f.write(b"".join(self.buf))
            self.stats.bytes += self.buf_size
            self.buf = []
            self.buf_size = 0

    def close(self) -> None:
        self._emit_linger()
        if self.seg_base < 0:  # an empty partition still has its (empty) first segment, as Kafka leaves it
            self._roll()
        self._flush()
