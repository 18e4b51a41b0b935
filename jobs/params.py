"""The click parameter types the commands share."""
from __future__ import annotations

import click


class GivenPath(click.Path):
    """A path option or argument that refuses an empty one: `--warehouse "$WH"` with WH unset is `''`, which the
    OS reads as the current directory (a rebuild wrote its tables there, `sample` its log dir, a rebuild read the
    current directory as its input); `.` still names it."""

    def convert(self, value, param, ctx):
        if isinstance(value, str) and value == "":
            here = " ('.' for the current directory)" if self.dir_okay else ""
            self.fail(f"the path is empty (an unset variable?): name it{here}", param, ctx)
        return super().convert(value, param, ctx)
