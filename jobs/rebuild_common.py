"""What `offsetlake rebuild` and `spark-submit jobs/rebuild_job.py` share: options, settings, exit codes."""
from __future__ import annotations

import contextlib
import functools
import importlib
import sys
import threading

import click

from jobs.errors import PREFIX, one_line
from jobs.params import GivenPath
from jobs.run_log import RunLog
from jobs.summary_text import format_summary
from pipelines.coordinator.options import (DEFAULT_KAFKA_VERSIONS, DEFAULT_RETENTION_MINUTES, DEFAULT_SEMANTICS,
                                          LEGACY, MODERN, PRE_KIP_186_RETENTION_MINUTES, SEMANTICS)
from pipelines.io.textfile import refuse_special, write_atomically

# 1: the snapshot is not served (validation failed, --strict, or the run failed and was recorded as failed)
EXIT_OK, EXIT_VALIDATION, EXIT_USAGE = 0, 1, 2


def rebuild_options(f):
    """The rebuild flags (CONTRACT.md), shared by the CLI and the spark-submit job."""
    opts = [
        click.option("--input", "inputs", multiple=True, required=True, type=GivenPath(),
                     help="Broker log dir, __consumer_offsets-N dir, .log file, or a Parquet/JSON/CSV dump (JSON and CSV "
                          "also .gz, .bz2, .zst, .lz4). Repeatable."),
        click.option("--warehouse", required=True, type=GivenPath(file_okay=False), help="Warehouse directory."),
        click.option("--snapshot-id", default=None, help="Snapshot id (default: a new time-based id)."),
        click.option("--as-of", default=None, help="TIME: ISO-8601 (UTC if no zone), epoch milliseconds or 'now'; default: newest record."),
        click.option("--retention-minutes", type=int, default=None,
                     help=f"offsets.retention.minutes (default {DEFAULT_RETENTION_MINUTES}; "
                          f"{PRE_KIP_186_RETENTION_MINUTES} with --kafka-version below 2.0)."),
        click.option("--no-expiry", is_flag=True, help="Skip retention expiry."),
        click.option("--semantics", type=click.Choice(list(SEMANTICS)), default=None,
                     help=f"legacy: GroupMetadataManager (<=3.9); modern: the new coordinator (3.8+/4.x); default "
                          f"{DEFAULT_SEMANTICS}."),
        click.option("--until-time", default=None, help="Replay only records with timestamp <= TIME (ISO-8601 or epoch milliseconds)."),
        click.option("--until-offset", type=int, default=None, help="Replay only records with offset <= N."),
        click.option("--incremental", is_flag=True, help="Start from the previous snapshot's checkpoint."),
        click.option("--strict", is_flag=True, help="Fail on the first quarantined record."),
        click.option("--replay-corrupt-batches", is_flag=True, default=False,
                     help="Replay batches whose CRC fails (quarantined by default; rebuild.replay_corrupt_batches)."),
        click.option("--num-partitions", type=int, default=None,
                     help="Partitions of __consumer_offsets (default: from the input, at least 50)."),
        click.option("--kafka-version", default=None, help="Emulated broker version for expiry rules and the record "
                     f"types its coordinator knows (default {DEFAULT_KAFKA_VERSIONS[LEGACY]} for legacy, "
                     f"{DEFAULT_KAFKA_VERSIONS[MODERN]} for modern)."),
        click.option("--other-cluster", is_flag=True, default=False,
                     help="Write the snapshot of a dump whose cluster is not the one of the warehouse's history "
                          "(refused otherwise), without adding its records to that history."),
        click.option("--env", default=None, help="Settings overlay conf/<env>/ (default OFFSETLAKE_ENV or local)."),
        click.option("--conf", "conf_overrides", multiple=True, help="Override a setting: section.key=value."),
        click.option("--json", "as_json", is_flag=True, help="Print the machine-readable summary."),
        click.option("--quiet", is_flag=True, help="No progress lines (the run's log still has them)."),
        click.option("--verbose", is_flag=True,
                     help="Also show what Spark, Arrow and delta-rs write to stderr (always in the run's log)."),
        click.option("--metrics-textfile", default=None, type=GivenPath(dir_okay=False),
                     help="Also write the run's metrics here (Prometheus text, for node_exporter's textfile "
                          "collector; written atomically)."),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


def parse_overrides(items) -> dict:
    # imported here, not at module level: yaml ~0.04 s of import (python -X importtime)
    import yaml

    out: dict = {}
    for item in items:
        if "=" not in item or "." not in item.split("=", 1)[0]:
            raise click.UsageError(f"--conf {item!r}: expected section.key=value")
        path, value = item.split("=", 1)
        section, key = path.split(".", 1)
        if section == "spark" and not key.startswith("spark."):
            key = path  # `--conf spark.sql.shuffle.partitions=4`: Spark's own key, under `spark:`
        out.setdefault(section, {})[key] = yaml.safe_load(value)
    return out


def run_from_cli(**kw) -> int:
    """Parse, load settings, check the request (before Spark starts), call the pipeline, print, map errors to exit
    codes (no stack trace for users). Once the settings are read, the process' stderr is the run's log
    (`jobs.run_log`): the terminal gets offsetlake's own lines, the log everything (`--verbose`: the terminal too)."""
    # imported here, not at module level: yaml ~0.04 s of import (python -X importtime)
    from pipelines.config import ConfigError, load_settings

    as_json, quiet, verbose = kw.pop("as_json"), kw.pop("quiet"), kw.pop("verbose")
    textfile = kw.pop("metrics_textfile")
    try:
        refuse_special(textfile or "")
    except OSError as e:  # refused before any work, not a warning once the snapshot is written
        click.echo(PREFIX + one_line(f"--metrics-textfile {textfile}: {e.strerror}"), err=True)
        return EXIT_USAGE
    try:
        settings = load_settings(env=kw.pop("env"), overrides=parse_overrides(kw.pop("conf_overrides")))
        # imported here, not at module level: pyarrow ~0.18 s of import (python -X importtime)
        from pipelines.io.storage import configure

        configure(settings)  # how this process retries the object store (the tasks get it from the session)
    except (ConfigError, click.UsageError) as e:
        click.echo(PREFIX + one_line(str(e)), err=True)
        return EXIT_USAGE

    with RunLog(settings.section("log").get("run_dir"), verbose=verbose) as log:
        code = _run(settings, kw, log, quiet=quiet, as_json=as_json, textfile=textfile)
        log.log(f"# exit {code}")
        return code


def _run(settings, kw: dict, log, *, quiet: bool, as_json: bool, textfile: str | None) -> int:
    # imported here, not at module level: deltalake ~0.2 s, numpy ~0.1-0.3 s, pyarrow ~0.45 s, pyarrow.fs ~0.05 s,
    # pyarrow.parquet ~0.05 s, yaml ~0.04 s of import (python -X importtime)
    from pipelines.rebuild import RebuildRequest, RunFailed, StrictModeError, UsageError, run_rebuild

    def failed(e: Exception) -> int:  # the run failed (recorded where it could be): one line, naming the log
        where = f" (log: {log.path})" if log.path is not None else ""
        log.say(PREFIX + one_line(str(e)) + where)
        if textfile:
            _write_metrics(textfile, None, log)
        return EXIT_VALIDATION

    req = RebuildRequest(inputs=tuple(kw.pop("inputs")), **kw)
    emit = log.log if quiet else log.say  # progress lines: always in the log
    from pipelines.rebuild.preflight import prepare_run

    try:
        prepared = prepare_run(settings, req)  # every usage error is found here, before a JVM starts
    except UsageError as e:
        log.say(PREFIX + one_line(str(e)))
        return EXIT_USAGE
    except RunFailed as e:  # the object store kept failing through the checks: recorded as a failed run
        return failed(e)
    log.name_after(prepared.snapshot_id)
    from pipelines.session import SessionOnDemand

    # duckdb: the validation's relational checks (`validation.suites._sql_column`) run on it
    _import_in_background("pipelines.validation.runner", "pipelines.validation.report", "pipelines.coordinator.shard",
                          "pipelines.io.warehouse", "duckdb")
    # started by the first stage that needs it: a run whose shards execute in this process starts no JVM
    spark = SessionOnDemand(settings, app_name="offsetlake-rebuild", starting=functools.partial(_starting_spark, log))
    try:
        summary = run_rebuild(spark, settings, req, emit=emit, prepared=prepared)
    except UsageError as e:
        log.say(PREFIX + one_line(str(e)))
        return EXIT_USAGE
    except (StrictModeError, RunFailed) as e:
        return failed(e)
    for late in summary.after_commit:  # the run's outcome stands as recorded; what failed after it is said
        log.say("warning: " + one_line(late))
    if textfile:
        _write_metrics(textfile, summary, log)
    if as_json:
        click.echo(summary.to_json())
    else:
        click.echo(format_summary(summary))
    return EXIT_OK if summary.status == "succeeded" else EXIT_VALIDATION


def _write_metrics(path: str, summary, log) -> None:
    """The run's metrics for node_exporter; a run that stopped with an error (no summary) says `failed`."""
    # imported here, not at module level: pyarrow ~0.45 s, pyarrow.fs ~0.05 s of import (python -X importtime)
    from pipelines.serving.metrics import rebuild_families, render, run_families

    families = rebuild_families(summary) if summary is not None else run_families({"status": "failed"})
    try:
        write_atomically(path, render(families))
    except OSError as e:  # the snapshot is written: say so, and that the textfile is not
        log.say("warning: " + one_line(f"--metrics-textfile {path}: {e.strerror or e}"))


def exit_with(code: int):
    sys.stdout.flush()
    sys.exit(code)


def _import_in_background(*modules: str) -> None:
    """Import the run's heavy modules while the driver JVM starts, which leaves this process waiting; a module that
    fails to import fails again, with its error, where it is used."""
    def load():
        for name in modules:
            try:
                importlib.import_module(name)
            except Exception:
                return

    threading.Thread(target=load, name="offsetlake-imports", daemon=True).start()


@contextlib.contextmanager
def _starting_spark(log: RunLog):
    """The context the run's session starts in: the JVM's output into the run's log, and the validation's GX context
    built in a thread of its own (great-expectations imports in it, for seconds) while this process waits on the
    JVM and then on its tasks. A run that starts no JVM keeps this process busy instead: it builds the context when
    it validates, as a thread would only take turns with it."""
    threading.Thread(target=_gx_context, name="offsetlake-gx", daemon=True).start()
    with log.children_stdout():
        yield


def _gx_context() -> None:
    """The process's GX context built (`default_context`); what fails here fails again, with its error, where it is
    used."""
    try:
        from pipelines.validation.runner import default_context

        default_context()
    except Exception:
        return
