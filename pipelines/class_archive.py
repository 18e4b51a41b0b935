"""The driver JVM's class-data archive (HotSpot's dynamic AppCDS, Java 13+).

A session's JVM loads and verifies several thousand classes from Spark's jars before its first job, and again for
its first Python job. `make setup` runs a small rebuild in a JVM that writes the classes it loaded to the archive
at exit (`python -m jobs.class_archive`); every session this process starts afterwards maps them instead of
reading and verifying them again.

The archive belongs to the venv whose pyspark holds the jars it was made from (under `sys.prefix`). A JVM whose
build or classpath differs ignores it, quietly (`-Xlog:cds*=off`: HotSpot would print a warning). A truncated
archive would not be ignored: the JVM maps it and dies (SIGBUS). So it is written under another name and renamed
when its JVM has exited, its size is recorded beside it, and it is used only at that size.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

ARCHIVE = Path(sys.prefix) / "share" / "offsetlake" / "spark-classes.jsa"
STAMP = ARCHIVE.with_suffix(".json")
QUIET = "-Xlog:cds*=off"


def java_options() -> str:
    """The driver JVM options that map the archive; "" when there is none, or it is not whole."""
    try:
        recorded = json.loads(STAMP.read_text())["size"]
        if ARCHIVE.stat().st_size != recorded:
            return ""
    except (OSError, ValueError, KeyError, TypeError):
        return ""
    return f"{QUIET} -XX:SharedArchiveFile={ARCHIVE}"


def writing_options(partial: Path) -> str:
    """The driver JVM options that write the classes it loaded to `partial` when it exits."""
    return f"{QUIET} -XX:ArchiveClassesAtExit={partial}"


def partial_path() -> Path:
    return ARCHIVE.with_name(f".{ARCHIVE.name}.{os.getpid()}")


def publish(partial: Path) -> Path:
    """`partial`, written by a JVM that has exited, as the archive (its size recorded with it)."""
    size = partial.stat().st_size
    STAMP.unlink(missing_ok=True)  # no moment when a stamp names another archive's size
    os.replace(partial, ARCHIVE)
    tmp = STAMP.with_name(f".{STAMP.name}.{os.getpid()}")
    tmp.write_text(json.dumps({"size": size}))
    os.replace(tmp, STAMP)
    for other in ARCHIVE.parent.glob(f".{ARCHIVE.name}.*"):  # left by a writer killed before it could publish
        if not _running(other.suffix[1:]):
            other.unlink(missing_ok=True)
    return ARCHIVE


def _running(pid: str) -> bool:
    try:
        os.kill(int(pid), 0)
    except (ValueError, ProcessLookupError):
        return False
    except PermissionError:  # alive, someone else's
        return True
    return True
