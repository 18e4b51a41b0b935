"""A rebuild's log: everything the process and its children write to stderr, kept in a file, while the terminal gets
offsetlake's own lines only.

A run's dependencies write to file descriptor 2 themselves, below Python: the JVM (its start-up warnings, Spark's
log), Arrow's C++ (`s3fs.cc: … got error embedded in a 200 OK response`, its retry chatter), Rust (a panic's
message, `stack backtrace:` and its note, printed by the panic hook before Python sees a `PanicException`), and
Spark's Python workers, forked by the JVM. So the log takes fd 2 itself: it is pointed at the log file before the
JVM starts (the JVM and the workers inherit it), Python's `sys.stderr` writes there too (a library's warnings),
and `say` writes offsetlake's lines (progress, the summary's warnings, the one `error:` line) to the terminal and
the log. With `verbose`, fd 2 goes through a pipe whose reader copies it to both.

The file is `<dir>/<UTC start>-<pid>.log`, renamed `<UTC start>-<snapshot id>[-<pid>].log` once the id is known;
`<dir>` is `log.run_dir`, by default `$XDG_STATE_HOME/offsetlake/runs` (`~/.local/state/offsetlake/runs`); the newest
`KEEP` logs are kept. A directory that cannot be written falls back to the system's temp directory, then to no
file (the chatter is dropped, the terminal stays clean).
"""
from __future__ import annotations

import datetime as _dt
import fcntl
import os
import struct
import sys
import tempfile
import termios
import threading
import time
import traceback
from pathlib import Path
from typing import TextIO

KEEP = 100


def default_dir() -> Path:
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(state) / "offsetlake" / "runs"


class _Lines:
    """A text stream writing to several others (the terminal and the log)."""

    def __init__(self, *streams: TextIO):
        self.streams = [s for s in streams if s is not None]

    def write(self, text: str) -> int:
        for s in self.streams:
            try:
                s.write(text)
                s.flush()
            except (OSError, ValueError):  # the log's disk is full, or a stream was closed: the others go on
                pass
        return len(text)

    def flush(self) -> None:
        for s in self.streams:
            try:
                s.flush()
            except (OSError, ValueError):
                pass

    def isatty(self) -> bool:
        return False


class RunLog:
    """See the module docstring. A context manager: fd 2 and `sys.stderr` are the log's inside it, as they were
    after it."""

    def __init__(self, directory: "str | os.PathLike | None" = None, *, verbose: bool = False):
        self.directory = Path(directory) if directory else default_dir()
        self.verbose = verbose
        self.path: Path | None = None
        self._file = None
        self._saved_fd: int | None = None
        self._saved_stderr = None
        self._terminal: TextIO | None = None
        self._log_text: TextIO | None = None
        self._pipe: int | None = None
        self._copier: threading.Thread | None = None

    # ------------------------------------------------------------------ the file
    def _open(self) -> None:
        stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        for directory in (self.directory, Path(tempfile.gettempdir()) / "offsetlake-runs"):
            try:
                directory.mkdir(parents=True, exist_ok=True)
                path = directory / f"{stamp}-{os.getpid()}.log"
                self._file = open(path, "ab", buffering=0)
            except OSError:
                continue
            self.path = path
            _prune(directory)
            return
        self._file = open(os.devnull, "ab", buffering=0)

    def name_after(self, snapshot_id: str) -> None:
        """Rename the log after the run's snapshot id (the open file keeps being written). Two runs of one id that
        start within a second (two warehouses, one log dir) are two logs: the second gets its pid too; a rename over
        the first's replaced it, and that run's log was gone."""
        if self.path is None:
            return
        stamp = self.path.name.split("-", 1)[0]
        for name in (f"{stamp}-{snapshot_id}.log", f"{stamp}-{snapshot_id}-{os.getpid()}.log"):
            target = self.path.with_name(name)
            try:
                os.link(self.path, target)  # refused where the name is taken, as a rename is not
            except FileExistsError:
                continue
            except OSError:  # a file system without hard links: a rename, where the name is free
                if target.exists():
                    continue
                try:
                    os.replace(self.path, target)
                except OSError:
                    return
            else:
                try:
                    os.unlink(self.path)
                except OSError:
                    pass
            self.path = target
            return

    # ------------------------------------------------------------------ in and out
    def __enter__(self) -> "RunLog":
        self._open()
        sys.stderr.flush()
        self._saved_stderr = sys.stderr
        self._saved_fd = os.dup(2)
        self._log_text = open(self._file.fileno(), "w", encoding="utf-8", errors="backslashreplace",
                              buffering=1, closefd=False)
        # Our lines go where stderr went: a stream of its own on the terminal's fd when `sys.stderr` is fd 2 (fd 2
        # is about to be the log's), else `sys.stderr` as it is (a caller that captures it, such as click's runner).
        try:
            on_fd2 = self._saved_stderr.fileno() == 2
        except (AttributeError, OSError, ValueError):
            on_fd2 = False
        if on_fd2:
            self._terminal = open(os.dup(self._saved_fd), "w", encoding=getattr(self._saved_stderr, "encoding", None)
                                  or "utf-8", errors="backslashreplace", buffering=1)
        else:
            self._terminal = self._saved_stderr
        self.log(f"# {' '.join(['offsetlake', *sys.argv[1:]])} (pid {os.getpid()}), started "
                 f"{_dt.datetime.now(_dt.timezone.utc).isoformat(timespec='seconds')}")
        if self.verbose:
            read, write = os.pipe()
            self._pipe = read
            self._copier = threading.Thread(target=_copy, args=(read, self._saved_fd, self._file.fileno()),
                                            name="offsetlake-run-log", daemon=True)
            self._copier.start()
            os.dup2(write, 2)
            os.close(write)
            sys.stderr = _Lines(self._terminal, self._log_text)
        else:
            os.dup2(self._file.fileno(), 2)
            sys.stderr = _Lines(self._log_text)
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc is not None and not isinstance(exc, (SystemExit, KeyboardInterrupt)):
            self.log("".join(traceback.format_exception(exc_type, exc, tb)))
        try:
            sys.stderr.flush()
        finally:
            sys.stderr = self._saved_stderr
            os.dup2(self._saved_fd, 2)
            if self.verbose:
                self._drain()
            if self._copier is None or not self._copier.is_alive():
                os.close(self._saved_fd)  # else the copier keeps writing there what the JVM still says
            if self._terminal is not self._saved_stderr:
                self._terminal.close()
            self._log_text.close()
            self._file.close()  # the JVM and the workers keep their own copy of the descriptor

    def _drain(self, seconds: float = 2.0) -> None:
        """`--verbose`: what is already in the pipe copied out before the terminal is ours again (a child that
        keeps the pipe open, the JVM, goes on being copied by the daemon thread)."""
        deadline = time.monotonic() + seconds
        while self._copier.is_alive() and time.monotonic() < deadline:
            try:
                pending = struct.unpack("i", fcntl.ioctl(self._pipe, termios.FIONREAD, b"\0\0\0\0"))[0]
            except OSError:
                return
            if not pending:
                self._copier.join(0.05)  # the last bytes read are being written out
                return
            time.sleep(0.01)

    def children_stdout(self):
        """A context in which the processes started get the log as their stdout too: the JVM prints there itself
        (`-XX:+ExitOnOutOfMemoryError`'s "Terminating due to …"), and the run's stdout is the summary's alone."""
        return _StdoutToStderr()

    # ------------------------------------------------------------------ writing
    def say(self, line: str) -> None:
        """One of offsetlake's lines: on the terminal and in the log."""
        _Lines(self._terminal, self._log_text).write(line + "\n")

    def log(self, text: str) -> None:
        """Into the log only."""
        _Lines(self._log_text).write(text if text.endswith("\n") else text + "\n")


class _StdoutToStderr:
    """fd 1 pointed where fd 2 points (the log, or `--verbose`'s pipe) meanwhile, then back."""

    def __enter__(self) -> None:
        sys.stdout.flush()
        self._saved = os.dup(1)
        os.dup2(2, 1)

    def __exit__(self, *exc) -> None:
        sys.stdout.flush()
        os.dup2(self._saved, 1)
        os.close(self._saved)


def _copy(read: int, *targets: int) -> None:
    """`--verbose`: fd 2's bytes to the terminal and the log, until every writer has closed the pipe."""
    while True:
        try:
            data = os.read(read, 65536)
        except OSError:
            return
        if not data:
            return
        for fd in targets:
            try:
                os.write(fd, data)
            except OSError:
                pass


def _prune(directory: Path) -> None:
    """Keep the newest `KEEP` logs of the directory."""
    try:
        logs = sorted((p for p in directory.iterdir() if p.suffix == ".log"), key=lambda p: p.name)
    except OSError:
        return
    for old in logs[:-KEEP]:
        try:
            old.unlink()
        except OSError:
            pass
