"""The group regex of `changes` and `restore-plan` (`--group-regex`, the API's `group_regex`): which group ids a
pattern selects, matched anywhere in the id (as `re.search` did).

The pattern is whatever a caller typed and a group id whatever a client sent, so the match runs on RE2 (Arrow's
regex kernels), whose time is linear in the id: Python's backtracking `re` did not finish `(.*.*)*X` against a
24-character id, and the HTTP server answers on one worker. RE2 refuses what only backtracking can match
(backreferences, lookarounds); `check` says so before any table is read.
"""
from __future__ import annotations

from collections.abc import Iterable

import pyarrow as pa
import pyarrow.compute as pc

#: Arrow compiles a pattern only when there is a value to match
_PROBE = pa.array([""], pa.string())
_ARROW_PREFIX = "Invalid regular expression: "


class BadGroupRegex(ValueError):
    """A pattern RE2 cannot compile: the reason, one line."""


def check(pattern: str) -> None:
    """Raise BadGroupRegex unless RE2 compiles `pattern`."""
    _matches(_PROBE, pattern)


def matching(ids: Iterable[str], pattern: str) -> list[str]:
    """The ids (in their order) that `pattern` matches somewhere in; None ids are never matched."""
    ids = pa.array(list(ids), pa.string())
    return ids.filter(pc.fill_null(_matches(ids, pattern), False)).to_pylist()


def _matches(ids: pa.Array, pattern: str) -> pa.Array:
    try:
        return pc.match_substring_regex(ids, pattern)
    except pa.ArrowInvalid as e:
        reason = str(e).removeprefix(_ARROW_PREFIX)
        raise BadGroupRegex(f"{reason} (RE2 syntax: no backreferences or lookarounds)") from None
    except UnicodeEncodeError:  # a lone surrogate: no group id can hold one
        raise BadGroupRegex("not UTF-8") from None
