"""The cluster's clock: broker time in epoch milliseconds, one `now` for every broker, from a fixed start so the same
arguments give the same timestamps. The timeline moves it on; each offsets partition keeps its own writes strictly
later than the last (`PartitionLog.tick`)."""
from __future__ import annotations

BASE_TIME_MS = 1_793_491_200_000  # 2026-11-01T00:00:00Z


class Clock:
    __slots__ = ("now",)

    def __init__(self, now: int = BASE_TIME_MS):
        self.now = now
