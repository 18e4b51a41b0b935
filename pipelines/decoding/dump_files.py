"""The names of tabular dump files: the formats a dump's file holds, and the suffixes of a file compressed whole.
Read by the reader that tells a dump from a log dir, the log dir's walk that reports a dump among segments, and the
dump reader."""
from __future__ import annotations

import os

TABULAR_SUFFIXES = (".parquet", ".json", ".jsonl", ".ndjson", ".csv")
# a dump file compressed whole, as Spark's `compression` option names it (`part-0000.json.gz`); which of these the
# dump reader reads is its business (`tabular.READ_COMPRESSIONS`): any other is refused by name, not taken for a segment
COMPRESSION_SUFFIXES = (".gz", ".bz2", ".zst", ".lz4", ".snappy", ".deflate", ".xz", ".zip", ".br")


def dump_suffix(name: str) -> str:
    """A file name's format suffix, lowercased, past a compression suffix: `.json` for `part-0.json.gz`."""
    stem, ext = os.path.splitext(name.lower())
    return os.path.splitext(stem)[1] if ext in COMPRESSION_SUFFIXES else ext


def is_dump_name(name: str) -> bool:
    """A file name a tabular dump's part file carries (`part-0.json.gz`, `dump.parquet`)."""
    return dump_suffix(name) in TABULAR_SUFFIXES
