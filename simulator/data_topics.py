"""The data topics' own partitions as the brokers' log dir holds them beside `__consumer_offsets`: `<topic>-<N>/`
segments from offset 0 to the partition's high watermark, with the producers' timestamps and the indexes a broker
writes (`pipelines.decoding.segment_writer`), and `log-start-offset-checkpoint`. So a rebuild of the sample reads
LOG-END-OFFSET, the log start and the lag in time from the log dir, as it would from a real one.

Cheap by design: the topics are `cleanup.policy=compact,delete` as a cleaner leaves them, each batch holding a few
records spread over its offsets (the rest compacted away), so millions of offsets cost a few bytes each, and the
batches cover every offset from the log start to the high watermark. Each partition's records are written over a
span of one to six hours ending at the dump's time; a record is never younger than a commit past it (`Frontier`:
a consumer commits what it consumed). Some producers' clocks run behind now and then (CreateTime going backwards),
some topics are LogAppendTime, codecs vary, and in some partitions retention deleted the oldest segment.
"""
from __future__ import annotations

import bisect
from pathlib import Path
from random import Random
from typing import TYPE_CHECKING

from pipelines.decoding.batch_writer import write_record_batch
from pipelines.decoding.segment_writer import SegmentWriter

if TYPE_CHECKING:
    from simulator.cluster import Cluster

HOUR_MS = 3_600_000
_FRONTIER_POINTS = 128  # per partition: past it, every other point is dropped (any subset still bounds)


class Frontier:
    """When each data partition's highest committed offset first passed an offset, as a few (offset, time) points:
    at the time of a point, no commit was past its offset, so a record at or above it may be written up to then."""

    def __init__(self):
        self.points: dict[tuple[int, int], tuple[list[int], list[int]]] = {}

    def note(self, tp: tuple[int, int], offset: int, ts: int) -> None:
        """A commit raised the partition's highest committed offset to `offset` at `ts`: before it, the highest was
        below `offset`."""
        offsets, times = self.points.setdefault(tp, ([], []))
        if times and ts == times[-1]:
            return
        offsets.append(offset)
        times.append(ts)
        if len(offsets) > _FRONTIER_POINTS:
            del offsets[1::2], times[1::2]

    def latest_for(self, tp: tuple[int, int], offset: int, default: int) -> int:
        """The latest time a record at `offset` may have been written, before the first commit past it: the time of
        the last point at or below `offset` (the highest committed was no higher then, and passed it later), just
        before the first commit when it passed `offset` already; `default` when nothing was committed there."""
        got = self.points.get(tp)
        if not got:
            return default
        offsets, times = got
        k = bisect.bisect_right(offsets, offset)
        return times[k - 1] if k else times[0] - 1


class DataTopics:
    """Writes `<topic>-<N>/` for `partitions` data partitions (None: all), `segments` segments each of
    `batches_per_segment` batches."""

    def __init__(self, cluster: Cluster, high_watermarks: dict[tuple[int, int], int], *, segments: int,
                 batches_per_segment: int, partitions: int | None):
        self.cluster = cluster
        self.hw = high_watermarks
        self.segments = max(1, segments)
        self.batches = max(1, batches_per_segment)
        self.limit = partitions
        self.rng = Random(cluster.stats.seed * 7919 + 17)  # its own: the offsets topic's bytes stay as they were

    def write(self) -> dict[str, int]:
        cluster, rng = self.cluster, self.rng
        end_ms = cluster.stats.last_timestamp or max(log.last_ts for log in cluster.logs)
        out = cluster.out
        starts: list[str] = []
        written = {"partitions": 0, "records": 0, "bytes": 0, "deleted_segments": 0}
        tps = sorted(self.hw)
        if self.limit is not None:
            tps = tps[:self.limit]
        kinds = {t.idx: (rng.random() < 0.15, rng.random() < 0.3, rng.uniform(1, 6) * HOUR_MS)
                 for t in cluster.topics}  # LogAppendTime, a producer clock that slips, the span written over
        for tp in tps:
            topic = cluster.topics[tp[0]]
            log_append, slips, span = kinds[tp[0]]
            d = out / f"{topic.name}-{tp[1]}"
            d.mkdir(exist_ok=True)
            start, deleted = self._partition(d, tp, log_append, slips, span, end_ms, written)
            written["partitions"] += 1
            written["deleted_segments"] += deleted
            if deleted:  # the checkpoint the broker wrote before retention ran, or after: either can be found
                starts.append(f"{topic.name} {tp[1]} {start if rng.random() < 0.5 else 0}")
        lines = "".join(f"{s}\n" for s in starts)
        (out / "log-start-offset-checkpoint").write_text(f"0\n{len(starts)}\n{lines}")
        return written

    def _partition(self, d: Path, tp, log_append: bool, slips: bool, span: float, end_ms: int,
                   written: dict) -> tuple[int, bool]:
        """One partition's segments; returns its log start and whether retention deleted its oldest segment."""
        rng, hw, frontier = self.rng, self.hw[tp], self.cluster.frontier
        if hw <= 0:
            SegmentWriter(d, 0).close(roll=False)  # an empty partition's active segment
            return 0, False
        n_batches = min(hw, self.segments * self.batches)
        edges = [0, *sorted(rng.sample(range(1, hw), n_batches - 1)), hw]
        per_segment = -(-n_batches // self.segments)
        retention = n_batches > per_segment and rng.random() < 0.1  # deletes the oldest segment once written
        start_time = end_ms - span
        codec = rng.choice(("none", "none", "lz4", "zstd", "gzip", "snappy"))
        writer, log_start, held = None, 0, 0  # held: records of the segment being written
        for k in range(n_batches):
            lo, hi = edges[k], edges[k + 1]
            if k % per_segment == 0:
                if writer is not None:
                    writer.close(roll=True)
                    if retention and k == per_segment:
                        for p in (writer.log_path, writer.index_path, writer.time_index_path):
                            p.unlink()
                        log_start = lo
                    else:
                        written["bytes"] += writer.size
                        written["records"] += held
                writer, held = SegmentWriter(d, lo), 0
            deltas = sorted({0, hi - lo - 1, *rng.sample(range(hi - lo), min(hi - lo, rng.randint(1, 4)))})
            records = []
            for delta in deltas:
                o = lo + delta
                ts = min(int(start_time + span * o / hw), frontier.latest_for(tp, o, end_ms))  # consumed once written
                if slips and rng.random() < 0.02:
                    ts -= rng.randint(1, 600) * 1000  # the producer's clock ran behind
                records.append((None, b"v%d" % o, ts))
            kw = {"timestamp_type": "LogAppendTime", "log_append_time": max(r[2] for r in records)} if log_append \
                else {}
            writer.append(write_record_batch(records, lo, codec=codec, offset_deltas=deltas, **kw))
            held += len(records)
        writer.close(roll=False)
        written["bytes"] += writer.size
        written["records"] += held
        return log_start, retention
