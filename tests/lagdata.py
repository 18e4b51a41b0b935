"""A crafted broker log dir whose data topics' timestamps are known by construction, for the lag-in-time tests: the
answer (`expected_lag_seconds`) comes from the schedule the records were written on, never from a reader.

`events` has three partitions, one record a minute for two hours before T0 (partition p's record i at
`DATA_T0 + i minutes + p seconds`), in segments of 30 records with the indexes a broker writes:
- events-0 ends with a transaction: three transactional records, then its COMMIT marker (offset 120, end 121);
- events-1's oldest segment was deleted by retention (log start 30; the checkpoint, written before, still says 0);
- events-2's producer clock ran half an hour behind for records 100-104 (CreateTime going backwards).
`audit-0` is in the high watermarks only (no segments: its lag in time is unknown). The groups commit at T0 + a few
seconds; the snapshot is as of the newest commit (AS_OF).
"""
from __future__ import annotations

from pathlib import Path

from pipelines.decoding import batch_writer as bw
from pipelines.decoding.segment_writer import SegmentWriter
from tests.badinputs import NUM_PARTITIONS, T0, commit, group_in, group_record

MINUTE = 60_000
DATA_T0 = T0 - 120 * MINUTE
TOPIC = "events"
BACKWARDS = range(100, 105)  # events-2's records whose CreateTime is half an hour behind
RETENTION_START = 30  # events-1's log start

GROUPS = {
    # group stem -> [(topic, partition, committed offset)]
    "caught": [(TOPIC, 0, 120), (TOPIC, 1, 120), (TOPIC, 2, 121)],  # past events-0's data: only its marker left
    "behind": [(TOPIC, 0, 60), (TOPIC, 1, 90), (TOPIC, 2, 102)],
    "below": [(TOPIC, 1, 10)],  # below events-1's log start
    "audit": [("audit", 0, 400)],  # no segments: lag known, its time not
}


def schedule(partition: int, offset: int) -> int:
    """A record's CreateTime as it was written."""
    ts = DATA_T0 + offset * MINUTE + partition * 1000
    if partition == 2 and offset in BACKWARDS:
        ts -= 30 * MINUTE
    return ts


def ends() -> dict[tuple[str, int], int]:
    return {(TOPIC, 0): 121, (TOPIC, 1): 120, (TOPIC, 2): 120, ("audit", 0): 500}


def group_ids() -> dict[str, str]:
    """Stem -> the group id placed in offsets partition 3 + its index (Kafka's partitioner)."""
    return {stem: group_in(3 + i, f"lag-{stem}") for i, stem in enumerate(GROUPS)}


COMMIT_AT = {stem: T0 + 5_000 * (i + 1) for i, stem in enumerate(GROUPS)}
AS_OF = max(COMMIT_AT.values()) + 1_000  # the group records come a second after the last commit


def build(root: Path) -> Path:
    """The log dir under `root`; returns it."""
    log_dir = root / "logdir"
    for p in range(NUM_PARTITIONS):
        (log_dir / f"__consumer_offsets-{p}").mkdir(parents=True)
    ids = group_ids()
    for stem, gid in ids.items():
        p = 3 + list(GROUPS).index(stem)
        records = [commit(gid, part, off, COMMIT_AT[stem], topic=topic) for topic, part, off in GROUPS[stem]]
        records.append(group_record(gid, AS_OF))
        (log_dir / f"__consumer_offsets-{p}" / f"{0:020d}.log").write_bytes(bw.write_record_batch(records, 0))
    for p in range(3):
        d = log_dir / f"{TOPIC}-{p}"
        d.mkdir()
        for base in range(0, 120, 30):
            if p == 1 and base < RETENTION_START:
                continue  # deleted by retention
            w = SegmentWriter(d, base, index_interval_bytes=256)
            for off in range(base, base + 30, 3):
                recs = [(b"k", b"event-%d" % o, schedule(p, o)) for o in range(off, off + 3)]
                if p == 0 and off == 117:
                    w.append(bw.write_record_batch(recs, off, producer_id=42, producer_epoch=0, base_sequence=0,
                                                   is_transactional=True))
                    w.append(bw.write_control_batch(1, 0, 120, 42, 0, schedule(0, 119) + 500))
                else:
                    w.append(bw.write_record_batch(recs, off, codec=("none", "gzip", "zstd")[off % 3]))
            w.close(roll=base < 90)
    hw = ends()
    lines = [f"{t} {p} {o}" for (t, p), o in hw.items()]
    (log_dir / "replication-offset-checkpoint").write_text(f"0\n{len(lines)}\n" + "\n".join(lines) + "\n")
    (log_dir / "log-start-offset-checkpoint").write_text(f"0\n3\n{TOPIC} 0 0\n{TOPIC} 1 0\n{TOPIC} 2 0\n")
    return log_dir


def expected_lag_seconds(topic: str, partition: int, committed: int, as_of: int = AS_OF) -> float | None:
    """The lag in time by the schedule: as_of minus the largest timestamp written up to the first record the group
    has not consumed (at its commit, or at the log start below it); 0 when nothing is left but the marker; None
    without segments."""
    if topic != TOPIC:
        return None
    start = RETENTION_START if partition == 1 else 0
    first = max(committed, start)
    if first >= 120:  # events-0: only its COMMIT marker is left; events-1, events-2: at the end
        return 0.0
    largest = max(schedule(partition, o) for o in range(start, first + 1))
    return max(0.0, (as_of - largest) / 1000)


def expected_end(partition: int, as_of: int) -> int | None:
    """The log end of `events-<partition>` at as_of by the schedule: the offset of the first record (or marker)
    appended after it, a record appended after the newest stamped before it (CreateTime going backwards counts as
    that newest's); None when that is the oldest record held and retention took some before it."""
    start = RETENTION_START if partition == 1 else 0
    stamps = [schedule(partition, o) for o in range(start, 120)] + ([schedule(0, 119) + 500] if partition == 0 else [])
    newest = -1
    for i, ts in enumerate(stamps):
        newest = max(newest, ts)
        if newest > as_of:
            return None if i == 0 and start > 0 else start + i
    return start + len(stamps)
