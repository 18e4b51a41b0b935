"""Files other programs pick up whole: written beside the target, then renamed over it (atomic on POSIX)."""
from __future__ import annotations

import os
import tempfile


def write_atomically(path: str | os.PathLike, body: bytes) -> None:
    """node_exporter's textfile collector (and any reader polling `path`) never sees a half-written file."""
    target = os.fspath(path)
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
