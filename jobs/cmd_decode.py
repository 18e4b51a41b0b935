"""`offsetlake decode PATH... [--json]`: print segment records like `kafka-dump-log --offsets-decoder` (no JVM)."""
from __future__ import annotations

import json

import click


@click.command("decode")
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option("--json", "as_json", is_flag=True, help="One JSON object per record (CONTRACT.md shape).")
def decode(paths: tuple[str, ...], as_json: bool) -> None:
    """Print every batch and record of __consumer_offsets segment files (files, partition dirs or log dirs)."""
    from pipelines.decoding.dumplog import dump_lines, to_json_record
    from pipelines.decoding.segments import discover_segments, read_segment_batches
    from schemas.records import ReadProblem

    try:
        segments, problems = discover_segments(list(paths))
    except FileNotFoundError as e:  # segments.InputError
        raise click.UsageError(str(e)) from None
    except OSError as e:
        raise click.UsageError(f"cannot read input: {e}") from None
    if not segments and not problems:
        raise click.UsageError(f"no __consumer_offsets segment files under: {', '.join(paths)}")
    for p in problems:
        click.echo(f"{p.kind}: {p.source}: {p.reason}", err=True)
    for seg in segments:
        if as_json:
            for item in read_segment_batches(seg):
                if isinstance(item, ReadProblem):
                    click.echo(f"{item.kind}: {item.source} at {item.position}: {item.reason}", err=True)
                    continue
                header, records = item
                for rec in records:
                    click.echo(json.dumps(to_json_record(header, rec), ensure_ascii=False))
            continue
        click.echo(f"Dumping {seg.path}")
        click.echo(f"Log starting offset: {seg.base_offset}")
        for item in read_segment_batches(seg):
            if isinstance(item, ReadProblem):
                click.echo(f"{item.kind}: {item.source} at {item.position}: {item.reason}", err=True)
                continue
            for line in dump_lines([item]):
                click.echo(line)
