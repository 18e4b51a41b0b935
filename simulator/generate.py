"""`generate_sample`: a sample log dir from its arguments (what `offsetlake sample` runs), after checking them and
clearing what an earlier sample left in the folder."""
from __future__ import annotations

import re
import shutil
from pathlib import Path

from simulator.cluster import Cluster
from simulator.log import DEFAULT_SEGMENT_BYTES
from simulator.stats import SampleStats

MIN_RECORDS_PER_GROUP = 8  # creating a group alone takes 2-7 records; the record budget must leave room for life
SHAPES = ("mixed", "cleaner-died")
_DATA_PARTITION = re.compile(r"^[^_].*-\d+$")  # a data topic's partition dir an earlier sample wrote


def generate_sample(out_dir: str | Path, *, records: int = 100_000, groups: int = 100, partitions: int = 8,
                    seed: int = 0, segment_bytes: int = DEFAULT_SEGMENT_BYTES, force: bool = False,
                    hot_share: float | None = None, shape: str = "mixed", data_segments: int = 0,
                    data_batches: int = 16, data_partitions: int | None = None) -> SampleStats:
    """Write `out_dir/__consumer_offsets-{0..partitions-1}/` and return what was written.

    `records` is the approximate total (data + control records), `groups` the number of group ids. `hot_share`:
    about that fraction of the records in one offsets partition (`SampleStats.hot_partition`), its groups' ids
    chosen to hash there and their activity scaled (None: groups wherever their ids hash). `shape`: `mixed` (a
    busy cluster), or `cleaner-died` (topics of 1-4 partitions, groups that rarely rebalance: few keys committed
    again and again, the uncompacted log a dead log cleaner leaves; pair it with few `groups`). `data_segments`:
    the data topics' own partitions written too, this many segments of `data_batches` batches each, for the first
    `data_partitions` of them (None: all; `simulator.data_topics`), 0: none (the high watermarks only). Raises
    ValueError on bad arguments, FileExistsError if `out_dir` already holds `__consumer_offsets-*` (unless
    `force`, which removes those directories first).
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
    out = Path(out_dir)
    existing = sorted(out.glob("__consumer_offsets-*")) if out.is_dir() else []
    if existing:
        if not force:
            raise FileExistsError(f"{out} already holds {len(existing)} __consumer_offsets-* entries")
        for p in existing:
            shutil.rmtree(p) if p.is_dir() else p.unlink()
        for p in out.iterdir():  # an earlier sample's data topics and checkpoints
            if p.is_dir() and _DATA_PARTITION.match(p.name):
                shutil.rmtree(p)
            elif p.name == "log-start-offset-checkpoint":
                p.unlink()
    return Cluster(out, records=records, groups=groups, partitions=partitions, seed=seed,
                   segment_bytes=segment_bytes, hot_share=hot_share, shape=shape, data_segments=data_segments,
                   data_batches=data_batches, data_partitions=data_partitions).run()

