"""`offsetlake repair-stats`: rewrite the Delta statistics of a warehouse written by an older version (no Spark).

Exit codes: 0 ok (whether or not anything needed fixing); 2 unreadable warehouse or a table that could not be
repaired.
"""
from __future__ import annotations

import click

from jobs.errors import delta_error, fail
from jobs.params import GivenPath, OneValueEach


@click.command("repair-stats", cls=OneValueEach)
@click.option("--warehouse", "warehouse", required=True, type=GivenPath(file_okay=False), help="warehouse directory")
def repair_stats(warehouse):
    """Recompute every active file's Delta statistics from its Parquet footer and commit, per table whose
    statistics were wrong, one transaction that re-adds those files with the right ones. Rows are unchanged;
    running it again changes nothing. Run it while no rebuild writes to the warehouse."""
    # imported here, not at module level: deltalake ~0.2 s, pyarrow ~0.45 s, pyarrow.fs ~0.05 s, pyarrow.parquet ~0.05 s
    # of import (python -X importtime)
    from pipelines.io.retry import plain
    from pipelines.io.stats_repair import StatsRepairError, repair_warehouse
    from pipelines.io.storage import StorageError

    try:
        reports = repair_warehouse(warehouse)
    except (StatsRepairError, OSError, StorageError) as e:
        fail(plain(str(e)))  # delta-rs raises some of its errors as OSErrors, coloured
    except Exception as e:  # delta-rs errors on a damaged table
        reason = delta_error(e)
        if reason is not None:
            fail(f"cannot repair the warehouse: {reason}")
        raise
    if not reports:
        click.echo(f"{warehouse}: no Delta tables found")
    for r in reports:
        if r.version is None:
            click.echo(f"{r.table}: statistics of {r.files} file(s) correct, nothing to fix")
        else:
            click.echo(f"{r.table}: fixed the statistics of {len(r.fixed)} of {r.files} file(s) (version {r.version})")
