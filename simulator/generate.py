"""`generate_sample`: a sample log dir from its arguments (what `offsetlake sample` runs), after checking them and
clearing what an earlier sample left in the folder."""
from __future__ import annotations

import re
import shutil
from pathlib import Path

from simulator.cluster import Cluster
from simulator.incidents import IncidentError, IncidentSpec
from simulator.log import DEFAULT_SEGMENT_BYTES
from simulator.stats import SampleStats

MIN_DURATION_MS = 60_000  # a paced timeline of less is as dense as an unpaced one
# the groups' paces run a timeline about a third past its duration: a millennium keeps its end in the years a
# timestamp prints in (to 9999), where a longer one failed in a stack trace after writing the whole sample
MAX_DURATION_MS = 365_000 * 86_400_000
MIN_RECORDS_PER_GROUP = 8  # creating a group alone takes 2-7 records; the record budget must leave room for life
SHAPES = ("mixed", "cleaner-died")
_DATA_PARTITION = re.compile(r"^[^_].*-\d+$")  # a data topic's partition dir an earlier sample wrote


def generate_sample(out_dir: str | Path, *, records: int = 100_000, groups: int = 100, partitions: int = 8,
                    seed: int = 0, segment_bytes: int = DEFAULT_SEGMENT_BYTES, force: bool = False,
                    hot_share: float | None = None, shape: str = "mixed", data_segments: int = 0,
                    data_batches: int = 16, data_partitions: int | None = None, duration_ms: int | None = None,
                    incidents: tuple[IncidentSpec, ...] = ()) -> SampleStats:
    """Write `out_dir/__consumer_offsets-{0..partitions-1}/` and return what was written.

    `records` is the approximate total (data + control records), `groups` the number of group ids. `hot_share`:
    about that fraction of the records in one offsets partition (`SampleStats.hot_partition`), its groups' ids
    chosen to hash there and their activity scaled (None: groups wherever their ids hash). `shape`: `mixed` (a
    busy cluster), or `cleaner-died` (topics of 1-4 partitions, groups that rarely rebalance: few keys committed
    again and again, the uncompacted log a dead log cleaner leaves; pair it with few `groups`). `data_segments`:
    the data topics' own partitions written too, this many segments of `data_batches` batches each, for the first
    `data_partitions` of them (None: all; `simulator.data_topics`), 0: none (the high watermarks only).
    `duration_ms`: the timeline spans about that much broker time (None: the clock moves a millisecond or two a
    step, the bytes samples always had). `incidents`: named incidents at their times (`simulator.incidents`; they
    need a duration). Raises ValueError on bad arguments (IncidentError: an incident that cannot be placed; nothing
    is left written then), FileExistsError if `out_dir` already holds `__consumer_offsets-*` (unless `force`, which
    removes those directories first).
    """
    if records < 1 or groups < 1 or partitions < 1 or segment_bytes < 1:
        raise ValueError("records, groups, partitions and segment_bytes must all be >= 1")
    if hot_share is not None and not 0 < hot_share <= 1:
        raise ValueError(f"hot share must be in (0, 1], not {hot_share}")
    if shape not in SHAPES:
        raise ValueError(f"shape must be one of {', '.join(SHAPES)}, not {shape}")
    if data_segments < 0 or data_batches < 1 or (data_partitions is not None and data_partitions < 0):
        raise ValueError("data segments and partitions must be >= 0, data batches >= 1")
    if groups * MIN_RECORDS_PER_GROUP > records:
        raise ValueError(f"{groups} groups need at least {groups * MIN_RECORDS_PER_GROUP} records (got {records})")
    if duration_ms is not None and duration_ms < MIN_DURATION_MS:
        raise ValueError(f"the duration must be at least {MIN_DURATION_MS // 1000} s")
    if duration_ms is not None and duration_ms > MAX_DURATION_MS:
        raise ValueError(f"the duration must be at most {MAX_DURATION_MS // 86_400_000} days (a millennium)")
    if incidents and duration_ms is None:
        raise IncidentError("--incident needs --duration: without it the whole timeline spans a few seconds")
    out = Path(out_dir)
    cluster = Cluster(out, records=records, groups=groups, partitions=partitions, seed=seed,
                      segment_bytes=segment_bytes, hot_share=hot_share, shape=shape, data_segments=data_segments,
                      data_batches=data_batches, data_partitions=data_partitions, duration_ms=duration_ms,
                      incidents=incidents)  # checks the incidents' times before anything is removed or written
    existing = sorted(out.glob("__consumer_offsets-*")) if out.is_dir() else []
    if existing:
        if not force:
            raise FileExistsError(f"{out} already holds {len(existing)} __consumer_offsets-* entries")
        _clear(out)
    try:
        return cluster.run()
    except IncidentError:  # no victim when an incident fell due: no half-written sample
        _clear(out)
        raise


def _clear(out: Path) -> None:
    """Remove a sample from `out`: its offsets partitions, data topics and checkpoints (nothing else there)."""
    for p in out.iterdir():
        if p.name.startswith("__consumer_offsets-"):
            shutil.rmtree(p) if p.is_dir() else p.unlink()
        elif p.is_dir() and _DATA_PARTITION.match(p.name):  # an earlier sample's data topics
            shutil.rmtree(p)
        elif p.name in ("log-start-offset-checkpoint", "replication-offset-checkpoint"):
            p.unlink()

