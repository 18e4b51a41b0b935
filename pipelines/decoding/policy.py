"""The read policy: what the readers do with input that fails a check (a bad CRC, a decompression bomb).

Kafka's log recovery (`LogSegment.recover`, spec §"log recovery") truncates a partition at its first batch whose
CRC does not verify, so a broker never serves a corrupt batch; the coordinator's loader itself reads without CRC
checks. By default a batch whose CRC fails is quarantined, not replayed (corrupt input is never state);
``replay_corrupt_batches`` replays its records anyway, as a loader that skipped verification would.
"""
from __future__ import annotations

from dataclasses import dataclass

from pipelines.decoding.codecs import DEFAULT_MAX_BATCH_BYTES


@dataclass(frozen=True, slots=True)
class ReadPolicy:
    replay_corrupt_batches: bool = False  # rebuild.replay_corrupt_batches / --replay-corrupt-batches
    max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES  # decode.max_batch_bytes: decompressed bytes per batch

    def __post_init__(self):
        if not isinstance(self.max_batch_bytes, int) or isinstance(self.max_batch_bytes, bool) \
                or self.max_batch_bytes < 1:
            raise ValueError(f"decode.max_batch_bytes must be a whole number >= 1, not {self.max_batch_bytes!r}")


DEFAULT_POLICY = ReadPolicy()
