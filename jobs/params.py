"""The click parameter types the commands share, and the command class refusing a one-value option given twice."""
from __future__ import annotations

from collections import Counter

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


class OneValueEach(click.Command):
    """A command whose options that take one value (click's `store`, not `multiple`) refuse being given twice:
    click keeps the last, so `lookup --group A --group B` answered for B alone, without a word of A, and
    `rebuild --until-time A --until-time B` replayed up to B. A flag given twice says the same thing twice and stays
    allowed. Every command of `offsetlake`, and the spark-submit job's, is one (tests/test_cli_options.py)."""

    def parse_args(self, ctx, args):
        if not ctx.resilient_parsing:
            _, _, order = self.make_parser(ctx).parse_args(args=list(args))
            given = Counter(p for p in order
                            if isinstance(p, click.Option) and not (p.multiple or p.count or p.is_flag))
            for option, times in given.items():
                if times > 1:
                    raise click.UsageError(f"option {max(option.opts, key=len)} given {times} times: it takes one "
                                           "value (run the command once per value)", ctx)
        return super().parse_args(ctx, args)
