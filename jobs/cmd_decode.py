"""`offsetlake decode PATH... [--json]`: print segment records like `kafka-dump-log --offsets-decoder` (no JVM)."""
from __future__ import annotations

import json

import click

from jobs.errors import fail
from jobs.params import GivenPath, OneValueEach
from pipelines.decoding.dumplog import dump_lines, to_json_record
from pipelines.decoding.policy import ReadPolicy
from pipelines.decoding.segments import discover_segments, read_segment_batches
from schemas.records import ReadProblem


@click.command("decode", cls=OneValueEach)
@click.argument("paths", nargs=-1, required=True, type=GivenPath())
@click.option("--json", "as_json", is_flag=True, help="One JSON object per record, with kafka-dump-log --offsets-decoder's field names.")
@click.option("--replay-corrupt-batches", is_flag=True, help="Print the records of batches whose CRC fails too.")
def decode(paths: tuple[str, ...], as_json: bool, replay_corrupt_batches: bool) -> None:
    """Print every batch and record of __consumer_offsets segment files (files, partition dirs or log dirs).

    Exit codes: 0 when records were read (what could not be read is listed on stderr), 2 when the input holds no
    segment or no readable record (a garbage file, an empty directory): one `error:` line saying so, with the
    first problem found and the count of the others.
    """
    # imported here, not at module level: pyarrow ~0.45 s, pyarrow.fs ~0.05 s of import (python -X importtime)
    from pipelines.io.storage import StorageError

    policy = ReadPolicy(replay_corrupt_batches=replay_corrupt_batches)
    try:
        segments, problems = discover_segments(list(paths))
    except FileNotFoundError as e:  # segments.InputError
        fail(str(e))
    except (OSError, StorageError) as e:
        fail(f"cannot read input: {e}")
    where = ", ".join(paths)
    if not segments:
        fail(f"no __consumer_offsets segment files under {where}{_reasons(problems)}")
    # Problems are listed as they come once a record shows the input is a log; until then they are held, so an
    # input without one readable record is a single line.
    held = [f"{p.kind}: {p.source}: {p.reason}" for p in problems]
    records = unread = 0
    first_problem = None
    for seg in segments:
        if not as_json:
            click.echo(f"Dumping {seg.path}")
            click.echo(f"Log starting offset: {seg.base_offset}")
        for item in read_segment_batches(seg, policy=policy):
            if isinstance(item, ReadProblem):
                if item.unread_to is not None and item.kind != "zero_tail":
                    unread += item.unread_to - item.position
                line = f"{item.kind}: {item.source} at {item.position}: {item.reason}"
                first_problem = first_problem or item
                if held is None:
                    click.echo(line, err=True)
                else:
                    held.append(line)
                continue
            if held is not None:
                for line in held:
                    click.echo(line, err=True)
                held = None
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
        first = (f": {first_problem.kind} in {first_problem.source} at {first_problem.position} "
                 f"({first_problem.reason})") if first_problem is not None else ""
        others = len(held) - 1 if first_problem is not None else len(held)
        fail(f"no readable record in {where}{first}; {unread} byte(s) not read"
             + (f", {others} more problem(s)" if others > 0 else ""))


def _reasons(problems) -> str:
    """`: why the first inputs were left out` (three at most, then how many more)."""
    if not problems:
        return ""
    more = f"; and {len(problems) - 3} more" if len(problems) > 3 else ""
    return ": " + "; ".join(p.reason for p in problems[:3]) + more
