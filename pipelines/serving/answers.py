"""The HTTP server's one cache. Point answers are kept serialized in the index they were read from, so they die
with it; answers derived from a whole snapshot (its groups judged, its diff against the previous scheduled one,
the metrics' state families) are kept here, the newest few of each, each built once.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Hashable

from prometheus_client.core import GaugeMetricFamily

from pipelines.serving.cache import Kept
from pipelines.serving.group_status import GroupStatuses
from pipelines.serving.index import SnapshotIndex


@dataclass(frozen=True)
class ServingCache:
    # by snapshot: the served one's and one pinned by a page or `?snapshot=`. Reading a large warehouse's commit
    # history takes seconds: the page and a scrape arriving together wait for one evaluation.
    group_statuses: Kept[GroupStatuses] = field(default_factory=lambda: Kept(2))
    # by (served, previous scheduled) pair: one, since the served snapshot only moves forward. Metric families are
    # built from group statuses: the only nesting of builds is that one, in that order.
    snapshot_diffs: Kept[dict | None] = field(default_factory=lambda: Kept(1))
    metric_families: Kept[list[GaugeMetricFamily]] = field(default_factory=lambda: Kept(1))

    @staticmethod
    def answer(idx: SnapshotIndex, key: Hashable, build: Callable[[SnapshotIndex], bytes]) -> bytes:
        """The serialized answer of `key` from `idx` (`GET /groups/{id}`, `.../offsets`), built and kept on a miss
        in the index's own LRU (`cache.ResponseCache`)."""
        body = idx.responses.get(key)
        if body is None:
            body = build(idx)
            idx.responses.put(key, body)
        return body
