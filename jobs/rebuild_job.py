"""spark-submit entry point: `spark-submit jobs/rebuild_job.py --input ... --warehouse ...` runs the same code as
`offsetlake rebuild` (the master and resources come from spark-submit; conf/ supplies the rest)."""
from __future__ import annotations

import os
import sys

# When submitted as a plain file, make the checkout importable for the driver (executors import the package
# from what spark-submit ships them: the packed venv of `make pack`, see the README).
_here = os.path.dirname(os.path.abspath(__file__))
if os.path.dirname(_here) not in sys.path:
    sys.path.insert(0, os.path.dirname(_here))

import click  # noqa: E402

from jobs.errors import OneLineErrors  # noqa: E402
from jobs.params import OneValueEach  # noqa: E402
from jobs.rebuild_common import exit_with, rebuild_options, run_from_cli  # noqa: E402


class RebuildJob(OneLineErrors, OneValueEach):
    """The job's command: usage errors as one line, as `offsetlake rebuild` gives them."""


@click.command(cls=RebuildJob)
@rebuild_options
def main(**kw):
    exit_with(run_from_cli(**kw))


if __name__ == "__main__":
    main()
