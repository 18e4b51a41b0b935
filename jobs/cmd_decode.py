"""`offsetlake decode PATH... [--json]`: print segment records like `kafka-dump-log --offsets-decoder` (no JVM)."""
from __future__ import annotations

import json

import click


@click.command("decode")
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option("--json", "as_json", is_flag=True, help="One JSON object per record (CONTRACT.md shape).")
@click.option("--replay-corrupt-batches", is_flag=True, help="Print the records of batches whose CRC fails too.")
def decode(paths: tuple[str, ...], as_json: bool, replay_corrupt_batches: bool) -> None:
    """Print every batch and record of __consumer_offsets segment files (files, partition dirs or log dirs).

    Exit codes: 0 when records were read, 2 when the input holds no segment or no readable record (a garbage
    file, an empty directory): what could not be read is listed on stderr, with a one-line summary.
    """
    from pipelines.decoding.dumplog import dump_lines, to_json_record
    from pipelines.decoding.policy import ReadPolicy
    from pipelines.decoding.segments import discover_segments, read_segment_batches
    from pipelines.io.storage import StorageError
    from schemas.records import ReadProblem

    policy = ReadPolicy(replay_corrupt_batches=replay_corrupt_batches)
    try:
        segments, problems = discover_segments(list(paths))
    except FileNotFoundError as e:  # segments.InputError
        raise click.UsageError(str(e)) from None
    except (OSError, StorageError) as e:
        raise click.UsageError(f"cannot read input: {e}") from None
    if not segments:
        for p in problems:
            click.echo(f"{p.kind}: {p.source}: {p.reason}", err=True)
        raise click.UsageError(f"no __consumer_offsets segment files under: {', '.join(paths)}")
    for p in problems:
        click.echo(f"{p.kind}: {p.source}: {p.reason}", err=True)
    records = quarantined = unread = 0
    for seg in segments:
        if not as_json:
            click.echo(f"Dumping {seg.path}")
            click.echo(f"Log starting offset: {seg.base_offset}")
        for item in read_segment_batches(seg, policy=policy):
            if isinstance(item, ReadProblem):
                quarantined += 1
                if item.unread_to is not None and item.kind != "zero_tail":
                    unread += item.unread_to - item.position
                click.echo(f"{item.kind}: {item.source} at {item.position}: {item.reason}", err=True)
                continue
            header, recs = item
            records += len(recs)
            if as_json:
                for rec in recs:
                    click.echo(json.dumps(to_json_record(header, rec), ensure_ascii=False))
            else:
                for line in dump_lines([item]):
                    click.echo(line)
    if records == 0:
        # a usage-level outcome (exit 2): the input is not a readable log; never a silent success
        click.echo(f"error: no readable record in {', '.join(paths)} ({quarantined} problem(s), {unread} byte(s) "
                   f"not read; see above)", err=True)
        raise click.exceptions.Exit(2)
