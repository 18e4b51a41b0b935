"""Files other programs pick up whole: written beside the target, then renamed over it (atomic on POSIX)."""
from __future__ import annotations

import errno
import os
import stat
import tempfile


def write_atomically(path: str | os.PathLike, body: bytes) -> None:
    """node_exporter's textfile collector (and any reader polling `path`) never sees a half-written file."""
    target = os.fspath(path)
    refuse_special(target)
    d = os.path.dirname(os.path.abspath(target)) or "."
    fd, tmp = tempfile.mkstemp(prefix=".offsetlake-", suffix=".tmp", dir=d)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(body)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def refuse_special(path: str | os.PathLike) -> None:
    """An OSError when `path` is there and no regular file (a device, a pipe, a socket): the rename put a file in its
    place (run as root, `--metrics-textfile /dev/full` replaced the device with the run's metrics)."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISREG(mode):
        raise OSError(errno.EINVAL, "not a regular file (a device, a pipe or a socket), which this write would "
                                    "replace", os.fspath(path))
