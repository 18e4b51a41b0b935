"""`offsetlake rebuild`: the pipeline from the command line (starts a local Spark unless conf says otherwise)."""
from __future__ import annotations

import click

from jobs.params import OneValueEach
from jobs.rebuild_common import exit_with, rebuild_options, run_from_cli


@click.command(cls=OneValueEach)
@rebuild_options
def rebuild(**kw):
    """Rebuild the coordinator state from __consumer_offsets dumps into a Delta snapshot.

    Exit codes: 0 ok, 1 validation failed (or --strict hit a quarantined record), 2 bad usage or unreadable input.
    """
    exit_with(run_from_cli(**kw))
