"""`offsetlake sample DIR`: write a realistic, deterministic `__consumer_offsets` log dir (no JVM)."""
from __future__ import annotations

import time

import click

from jobs.errors import fail
from jobs.params import GivenPath, OneValueEach
from pipelines.times import TimeFormatError, parse_duration_ms


@click.command("sample", cls=OneValueEach)
@click.argument("out_dir", metavar="DIR", type=GivenPath(file_okay=False, writable=True))
@click.option("--records", type=click.IntRange(min=1), default=100_000, show_default=True,
              help="Approximate total number of records (data and control).")
@click.option("--groups", type=click.IntRange(min=1), default=100, show_default=True, help="Number of group ids.")
@click.option("--partitions", type=click.IntRange(min=1, max=10_000), default=8, show_default=True,
              help="Partitions of __consumer_offsets (every one gets a directory).")
@click.option("--seed", type=int, default=0, show_default=True, help="Same seed and arguments, same bytes.")
@click.option("--segment-bytes", type=click.IntRange(min=1), default=8 * 1024 * 1024, show_default=True,
              help="Roll a segment when the next batch would make it larger than this.")
@click.option("--hot-share", type=click.FloatRange(min=0, max=1, min_open=True), default=None, metavar="F",
              help="About this fraction of the records in one offsets partition (its groups' ids hash there).")
@click.option("--shape", type=click.Choice(["mixed", "cleaner-died"]), default="mixed", show_default=True,
              help="cleaner-died: few keys committed again and again (pair with few --groups), an uncompacted log.")
@click.option("--data-segments", type=click.IntRange(min=0), default=2, show_default=True, metavar="S",
              help="Segments of each data-topic partition written beside the offsets topic, with real timestamps "
                   "and indexes (lag in time); 0: none, the high watermarks only.")
@click.option("--data-partitions", type=click.IntRange(min=0), default=None, metavar="N",
              help="Write the first N data-topic partitions only (default: every one).")
@click.option("--duration", metavar="D", default=None,
              help="The timeline spans about D of broker time (2h, 90m, 3600s, 1h30m; a number alone is seconds), "
                   "each group committing at its own pace; without it, a few seconds.")
@click.option("--incident", "incidents", metavar="KIND@TIME", multiple=True,
              help="A named incident at TIME (repeatable; needs --duration): reset (a Stable classic group's offsets "
                   "all reset to 0), rewind (a member commits 500 lower), delete (a group deleted). TIME: +D after "
                   "the timeline's start (+60m), or an ISO-8601 time. The summary names each one's group and time.")
@click.option("--force", is_flag=True, help="Remove the __consumer_offsets-* (and data-topic) directories already "
                                            "in DIR first.")
def sample(out_dir: str, records: int, groups: int, partitions: int, seed: int, segment_bytes: int,
           hot_share: float | None, shape: str, data_segments: int, data_partitions: int | None, duration: str | None,
           incidents: tuple[str, ...], force: bool) -> None:
    """Write DIR/__consumer_offsets-N/<base offset>.log for N in 0..P-1: classic, simple, Connect and KIP-848
    groups, transactions (committed, aborted, open), offset and group deletions, all five codecs; and the data
    topics' own partitions (DIR/<topic>-<N>/), their records timestamped as they were produced. With --duration and
    --incident, rehearsal data for the incident runbook: named incidents at their times, each one printed."""
    # imported here, not at module level: numpy ~0.1-0.3 s of import (python -X importtime)
    from simulator import generate_sample
    from simulator.incidents import parse_incident

    if "://" in out_dir:
        raise click.UsageError(f"sample writes a local directory, not {out_dir}: write it here, then copy it to the "
                               "bucket (aws s3 cp --recursive DIR s3://…)")
    started = time.perf_counter()
    try:
        duration_ms = None if duration is None else parse_duration_ms(duration, what="--duration")
        specs = tuple(parse_incident(text) for text in incidents)
        stats = generate_sample(out_dir, records=records, groups=groups, partitions=partitions, seed=seed,
                                segment_bytes=segment_bytes, force=force, hot_share=hot_share, shape=shape,
                                data_segments=data_segments, data_partitions=data_partitions,
                                duration_ms=duration_ms, incidents=specs)
    except (ValueError, TimeFormatError) as e:  # an IncidentError is one
        raise click.UsageError(str(e)) from None
    except FileExistsError as e:
        if e.errno is not None:  # the file system's: DIR (or a parent) is a file
            fail(f"cannot write {out_dir}: {e.strerror}: {e.filename}")
        raise click.UsageError(f"{e} (use --force to replace them)") from None
    except OSError as e:  # a parent that does not exist or cannot be written, a full disk
        fail(f"cannot write {out_dir}: {e.strerror or e}" + (f": {e.filename}" if e.filename else ""))
    elapsed = time.perf_counter() - started
    click.echo(f"sample: {stats.summary()} dir={out_dir} in {elapsed:.1f}s", err=True)
    for line in stats.incident_lines():
        click.echo(line, err=True)
