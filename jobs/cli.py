"""The `offsetlake` command: a click group whose subcommands live in their own modules, loaded lazily so that
commands needing no Spark (decode, sample, describe, lookup, serve, ...) never import pyspark or start a JVM."""
from __future__ import annotations

import importlib

import click

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
    "sql": "jobs.cmd_serving:sql",
}


class LazyGroup(click.Group):
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


@click.group(cls=LazyGroup)
@click.version_option(package_name="offsetlake")
def main():
    """Rebuild Kafka's consumer-group coordinator state from __consumer_offsets, offline."""


if __name__ == "__main__":
    main()
