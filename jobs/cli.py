"""The `offsetlake` command: a click group whose subcommands live in their own modules, loaded lazily so that
commands needing no Spark (decode, sample, describe, lookup, serve, ...) never import pyspark or start a JVM."""
from __future__ import annotations

import ctypes
import importlib
import os
import sys

import click

from jobs.errors import OneLineErrors

# command name -> "module:attribute" of a click.Command
COMMANDS = {
    "decode": "jobs.cmd_decode:decode",
    "sample": "jobs.cmd_sample:sample",
    "rebuild": "jobs.cmd_rebuild:rebuild",
    "describe": "jobs.cmd_serving:describe",
    "lookup": "jobs.cmd_serving:lookup",
    "serve": "jobs.cmd_serving:serve",
    "diff": "jobs.cmd_serving:diff",
    "reset-plan": "jobs.cmd_serving:reset_plan",
    "restore-plan": "jobs.cmd_serving:restore_plan",
    "sql": "jobs.cmd_serving:sql",
    "changes": "jobs.cmd_serving:changes",
    "repair-stats": "jobs.cmd_repair:repair_stats",
}


class LazyGroup(OneLineErrors, click.Group):
    def list_commands(self, ctx):
        return sorted(COMMANDS)

    def get_command(self, ctx, name):
        target = COMMANDS.get(name)
        if target is None:
            return None
        module, attr = target.split(":")
        try:
            return getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as e:  # a command whose module is not there yet
            raise click.ClickException(f"command {name!r} is not available: {e}") from None

    def resolve_command(self, ctx, args):
        try:
            return super().resolve_command(ctx, args)
        except click.exceptions.NoSuchCommand as e:  # click suggests from the loaded commands: none, here
            raise click.exceptions.NoSuchCommand(e.command_name, possibilities=COMMANDS, ctx=ctx) from None


@click.group(cls=LazyGroup, name="offsetlake")
@click.version_option(package_name="offsetlake")
def main():
    """Rebuild Kafka's consumer-group coordinator state from __consumer_offsets, offline."""


# Commands that answer in a fraction of a second and never hand pandas or numpy objects to pyarrow.
QUICK_COMMANDS = frozenset({"describe", "lookup", "diff", "reset-plan"})
HISTORY_COMMANDS = frozenset({"changes", "restore-plan", "serve"})


def run() -> None:
    """The `offsetlake` program (console script and `python -m jobs.cli`).

    pyarrow imports pandas the first time it converts Python values (only to recognise pandas objects) and
    numpy on import when it can: ~0.3 s together, most of a `describe`. For the quick commands the program
    reports both as not installed before anything imports them, and pyarrow (which needs neither) carries on
    without them. Done here, at program start, rather than in the commands: a process that goes on to use them
    (a test calling `main`, the rebuild) is never affected. tests/serving/test_cli.py checks that the program
    prints what the command prints in a process that has them.

    The commands that scan a whole history (`HISTORY_COMMANDS`) have Arrow allocate through jemalloc (Linux
    wheels carry it; set before pyarrow loads, as Arrow reads it once): its default, mimalloc, hands back fresh
    pages for each log-sized temporary, and the kernel's zeroing of them was a third of `changes` and
    `restore-plan` on a large history. A value the user set stands.

    `sample` has glibc keep freed heap (`_keep_freed_heap`): each gzip batch takes and frees a 256 KiB deflate
    state, and when that lay at the top of the heap glibc handed it back to the kernel and faulted it in again for
    the next batch, most of a mixed sample's system time."""
    command = sys.argv[1] if len(sys.argv) > 1 else None
    if command in QUICK_COMMANDS and "pandas" not in sys.modules:
        sys.meta_path.insert(0, _NotLoaded())
    if command in HISTORY_COMMANDS and sys.platform.startswith("linux") and "pyarrow" not in sys.modules:
        os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "jemalloc")
    if command == "sample" and sys.platform.startswith("linux"):
        _keep_freed_heap()
    main(prog_name="offsetlake")


def _keep_freed_heap() -> None:
    """glibc keeps up to 64 MiB of freed heap (M_TRIM_THRESHOLD) and takes blocks up to 4 MiB from it
    (M_MMAP_THRESHOLD: setting the one stops glibc raising the other, and each 1 MiB segment flush would be mapped
    and unmapped). musl ignores both."""
    try:
        libc = ctypes.CDLL(None)
        libc.mallopt(-3, 4 << 20)  # M_MMAP_THRESHOLD
        libc.mallopt(-1, 64 << 20)  # M_TRIM_THRESHOLD
    except (OSError, AttributeError):
        pass


class _NotLoaded:
    """A meta-path finder that reports pandas and numpy as not installed."""

    def find_spec(self, name, path=None, target=None):
        if name in ("pandas", "numpy") or name.startswith(("pandas.", "numpy.")):
            raise ModuleNotFoundError(f"No module named {name!r} (not loaded by this command)", name=name)
        return None


if __name__ == "__main__":
    run()
