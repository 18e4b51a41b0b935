"""How every command reports a user's mistake: one line on stderr, `error: ` first, exit 2 (EXIT_USAGE).

click's own reporting of a usage error is a usage block, a hint and the message (four lines), and each command used
to print its own prefix. `OneLineErrors` takes click's reporting over once, at the top command (the `offsetlake`
group, and the spark-submit job's command), so every option, argument and choice error of every command comes out
the same way; the commands report their own errors through `fail`.
"""
from __future__ import annotations

import difflib
import errno
import os
import sys
from typing import NoReturn

import click

from pipelines.serving.cells import did_you_mean, view

PREFIX = "error: "
EXIT_USAGE = 2


def one_line(message: str) -> str:
    """The message on one line (a multi-line cause, such as an OS or DuckDB error, joined with spaces)."""
    return " ".join(str(message).split())


def fail(message: str, code: int = EXIT_USAGE) -> NoReturn:
    """Print `error: MESSAGE` as one line on stderr and exit with `code`: 2 for a user's mistake, 1 where a
    command's exit codes say so (an empty answer, a run that failed after it started)."""
    click.echo(PREFIX + view(one_line(message)), err=True)
    sys.exit(code)


def not_utf8(args) -> str | None:
    """The first argument holding bytes that are not UTF-8 (Python gives them as lone surrogates), if any: no path,
    group id or topic of offsetlake's can hold one (Arrow, Delta and DuckDB take UTF-8 only), and deep in a run it
    would fail as a stack trace."""
    for arg in args:
        if isinstance(arg, str):
            try:
                arg.encode("utf-8")
            except UnicodeEncodeError:
                return arg
    return None


def delta_error(e: BaseException) -> str | None:
    """The first line of a delta-rs error (a damaged table; the rest is a Rust backtrace when RUST_BACKTRACE is
    set), None for any other exception. Its classes live in deltalake's `_internal` module, so the name of their
    type's module does not say deltalake."""
    exceptions = sys.modules.get("deltalake.exceptions")
    if exceptions is None or not isinstance(e, exceptions.DeltaError):
        return None
    from pipelines.io.retry import plain

    return plain(str(e)).strip().split("\n", 1)[0].strip()


def warn(message: str) -> None:
    click.echo("warning: " + one_line(message), err=True)


def _lower_first(text: str) -> str:
    """click's sentences start upper-case ("Missing option"); ours are lower-case phrases. An acronym or an
    option name (`SQL`, `--x`) is left as it is."""
    if len(text) > 1 and text[0].isupper() and text[1].islower():
        return text[0].lower() + text[1:]
    return text


def _closest(name: str, possibilities) -> list[str]:
    """click's suggestions that come about as close to `name` as the closest one (`--warehose`: `--warehouse`,
    not `--verbose` too), sorted."""
    score = {p: difflib.SequenceMatcher(None, name, p).ratio() for p in possibilities}
    best = max(score.values(), default=0)
    return sorted(p for p, r in score.items() if r >= best - 0.1)


def usage_message(e: click.UsageError) -> str:
    """`no such option: --warehose (did you mean --warehouse?) — see 'offsetlake rebuild --help'`."""
    if isinstance(e, click.NoSuchOption):
        text = f"no such option: {e.option_name}{did_you_mean(_closest(e.option_name, e.possibilities or ()))}"
    elif isinstance(e, click.exceptions.NoSuchCommand):
        text = f"no such command: {e.command_name}{did_you_mean(sorted(e.possibilities or ()))}"
    else:
        text = _lower_first(one_line(e.format_message())).rstrip(".")
    if e.ctx is not None:
        text += f" — see '{e.ctx.command_path} --help'"
    return text


#: The errors of writing that no command reports itself: the reader of stdout left, the disk under the output is full
WRITE_ERRNOS = frozenset({errno.EPIPE, errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


def _store_unavailable(e: BaseException) -> None:
    """One line, exit 1, for the object store failing past its retries (`pipelines.io.retry`, loaded by whatever
    talked to it): no mistake of the user's."""
    retry = sys.modules.get("pipelines.io.retry")
    if retry is not None and isinstance(e, retry.StoreUnavailable):
        fail(str(e), 1)


class OneLineErrors:
    """A click.Command mixin: `main` runs the command with click's standalone handling off and reports what click
    would have shown as a usage block as one `error: ` line (exit 2); --help and --version still exit 0."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        if not standalone_mode:  # a caller that handles click's exceptions itself
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        undecodable = not_utf8(sys.argv[1:] if args is None else args)
        if undecodable is not None:
            fail(f"argument {os.fsencode(undecodable)!r} is not valid UTF-8: offsetlake reads paths, ids and names "
                 "as UTF-8 (rename the path, or give the name as it is spelled in UTF-8)")
        try:
            rv = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.exceptions.NoArgsIsHelpError as e:  # `offsetlake` alone asks for the help: click shows it
            e.show()
            sys.exit(e.exit_code)
        except click.UsageError as e:
            fail(usage_message(e), EXIT_USAGE)
        except click.ClickException as e:  # click.FileError and the like: exit code as click gives it
            fail(_lower_first(one_line(e.format_message())), e.exit_code)
        except click.Abort:  # Ctrl-C or end of input at a prompt
            fail("aborted", 1)
        except OSError as e:
            # a full disk under the output (`offsetlake decode … > file`): no mistake of the user's, and no stack
            # trace either; the reader left (`… | head`): nothing to report
            if e.errno not in WRITE_ERRNOS:
                _store_unavailable(e)
                raise
            # the interpreter's final flush of stdout would fail again: point it at devnull (the Python docs' recipe
            # for SIGPIPE)
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            if e.errno != errno.EPIPE:
                fail(f"cannot write: {one_line(os.strerror(e.errno))}" + (f" ({e.filename})" if e.filename else ""), 1)
            sys.exit(1)
        except Exception as e:
            _store_unavailable(e)
            raise
        # without standalone mode click returns the exit code of a ctx.exit (e.g. --help: 0) or the callback's
        # value, which is None for every command here
        sys.exit(rv if isinstance(rv, int) and not isinstance(rv, bool) else 0)
