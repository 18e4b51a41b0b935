r"""The group regex of `changes` and `restore-plan` (`--group-regex`, the API's `group_regex`): which group ids a
pattern selects, matched anywhere in the id, as Python's `re.search` matches it.

The pattern is whatever a caller typed and a group id whatever a client sent, so the match runs on RE2 (Arrow's
regex kernels), whose time is linear in the id: Python's backtracking `re` did not finish `(.*.*)*X` against a
24-character id, and the HTTP server answers on one worker. RE2 reads some of Python's syntax otherwise, without a
word: its `\w \d \s` (and `\W \D \S`, POSIX classes) are ASCII while a group id is Unicode, `{,n}` is text to it,
and its `$` never matches before an id's final newline. `re2_pattern` writes those as Python means them (`\w` as
`[\p{L}\p{N}_]`, exactly Python's set; `\Z` as `\z`; `\uXXXX`, `\N{…}` as `\x{…}`; comments dropped) and
refuses what RE2 cannot mean as Python does: `\b`, `\B` (an ASCII word boundary), `\W`/`\S` inside `[…]`, `\C`.
RE2 itself refuses what only backtracking can match (backreferences, lookarounds, possessive repeats, `(?x)`);
`check` says so before any table is read.
"""
from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

#: Arrow compiles a pattern only when there is a value to match
_PROBE = pa.array([""], pa.string())
_ARROW_PREFIX = "Invalid regular expression: "


class BadGroupRegex(ValueError):
    """A pattern RE2 cannot compile: the reason, one line."""


# Python's classes for a str pattern, as RE2 writes them (measured over every code point with Python's re): \w is
# the letters, the numbers and '_', \d the decimal digits (Nd), \s str.isspace's characters
_WORD, _DIGIT = r"\p{L}\p{N}_", r"\p{Nd}"
_SPACE = r"\t-\r\x{1c}-\x{20}\x{85}\p{Z}"
_OUTSIDE = {"w": f"[{_WORD}]", "W": f"[^{_WORD}]", "d": _DIGIT, "D": r"\P{Nd}", "s": f"[{_SPACE}]",
            "S": f"[^{_SPACE}]", "Z": r"\z"}
_INSIDE = {"w": _WORD, "d": _DIGIT, "D": r"\P{Nd}", "s": _SPACE, "b": r"\x08"}
_REFUSED = {"b": "\\b is a word boundary RE2 reads in ASCII only (a group id is Unicode)",
            "B": "\\B is a word boundary RE2 reads in ASCII only (a group id is Unicode)",
            "C": "\\C matches a byte, not a character"}
_HEX = {"u": 4, "U": 8}
# Python's repeat: {m}, {m,}, {,n}, {m,n}, {,}; RE2 reads a missing lower bound as text
_REPEAT = re.compile(r"\{(\d*),(\d*)\}")
_FLAGS = re.compile(r"\(\?([a-zA-Z]*)(?:-([a-zA-Z]*))?([:)])")


@dataclass
class _Group:
    """An open group of the pattern as `re2_pattern` reads it: whether `$` is an end of line in it ((?m)), and
    whether what comes next follows a Python `$` (`after_end`: in this branch; `before`: from before the group;
    `ended`: in a branch already over, which what follows the group follows)."""

    multiline: bool
    before: bool = False
    after_end: bool = False
    ended: bool = False


def re2_pattern(pattern: str) -> str:
    """`pattern` (Python's `re` syntax) as RE2 reads it to match what `re.search` matches; BadGroupRegex for what
    it cannot."""
    out: list[str] = []
    groups = [_Group(False)]
    i, n = 0, len(pattern)

    def consumes() -> None:
        # Python's $ is zero-width, also before a final newline: what follows it may match that newline, which
        # RE2's end of text cannot leave to it
        if groups[-1].after_end:
            raise BadGroupRegex("$ followed by more pattern (RE2 cannot match it before a final newline as Python "
                                "does): end the pattern or the branch at $, or use (?m)")

    while i < n:
        c, g = pattern[i], groups[-1]
        if c == "\\":
            consumes()  # \Z, \A too: what they assert is where the text ends, which RE2's $ moved past the newline
            piece, i = _escape(pattern, i, False)
            out.append(piece)
        elif c == "[":
            consumes()
            piece, i = _set(pattern, i)
            out.append(piece)
        elif c == "{" and (m := _REPEAT.match(pattern, i)) is not None:
            consumes()
            out.append(f"{{{m.group(1) or 0},{m.group(2)}}}")
            i = m.end()
        elif c == "$":
            if not g.multiline:  # a (?m) $ is an end of line in both
                g.after_end = True
            out.append("$" if g.multiline else r"(?:\n?\z)")  # Python's $ also matches before a final newline
            i += 1
        elif pattern.startswith("(?#", i):  # a comment, to its first )
            end = pattern.find(")", i)
            if end < 0:
                raise BadGroupRegex("missing ), unterminated comment")
            i = end + 1
        elif c == "(" and (m := _FLAGS.match(pattern, i)) is not None:
            on, off = m.group(1).replace("u", ""), (m.group(2) or "").replace("u", "")  # Python's u: the default
            multiline = "m" in on or (g.multiline and "m" not in off)
            flags = on + ("-" + off if off else "")
            if m.group(3) == ")":  # flags for the rest of the enclosing group
                g.multiline = multiline
                out.append(f"(?{flags})" if flags else "")
            else:
                groups.append(_Group(multiline, g.after_end, g.after_end))
                out.append(f"(?{flags}:")
            i = m.end()
        else:
            if c == "(":
                groups.append(_Group(g.multiline, g.after_end, g.after_end))
            elif c == "|":
                g.ended, g.after_end = g.ended or g.after_end, g.before
            elif c == ")" and len(groups) > 1:
                groups.pop()
                groups[-1].after_end = groups[-1].after_end or g.after_end or g.ended
            elif c != "?":  # a repeat may match its group again, after the $; ^ would assert where $ moved
                consumes()
            out.append(c)
            i += 1
    return "".join(out)


def _set(pattern: str, i: int) -> tuple[str, int]:
    """The [...] at `i` as RE2 writes it, and where the pattern goes on."""
    i += 1
    negated = pattern.startswith("^", i)
    i += negated
    first = pattern.startswith("]", i)  # a ] first in a set is itself
    i += first
    out = ["[" + "^" * negated + "\\]" * first]
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            piece, i = _escape(pattern, i, True)
            out.append(piece)
            continue
        out.append("\\[" if c == "[" else c)  # Python reads a [ in a set as itself, RE2 as a POSIX class
        i += 1
        if c == "]":
            break
    return "".join(out), i


def _escape(pattern: str, i: int, in_set: bool) -> tuple[str, int]:
    """The escape at `i` as RE2 writes it, and where the pattern goes on."""
    if i + 1 == len(pattern):
        raise BadGroupRegex("the pattern ends with a lone backslash")
    e, i = pattern[i + 1], i + 2
    if e in "uU":
        digits = pattern[i:i + _HEX[e]]
        if len(digits) != _HEX[e] or any(d not in "0123456789abcdefABCDEF" for d in digits):
            raise BadGroupRegex(f"bad escape \\{e}{digits}")
        return f"\\x{{{digits}}}", i + _HEX[e]
    if e == "N" and pattern.startswith("{", i) and "}" in pattern[i:]:
        name = pattern[i + 1:pattern.index("}", i)]
        try:
            return f"\\x{{{ord(unicodedata.lookup(name)):x}}}", i + len(name) + 2
        except KeyError:
            raise BadGroupRegex(f"undefined character name {name!r}") from None
    if in_set and e in "WS":
        raise BadGroupRegex(f"\\{e} inside [...] has no RE2 form (write [^\\{e.lower()}...] or (?:[...]|\\{e}))")
    table = _INSIDE if in_set else _OUTSIDE
    if e in table:
        return table[e], i
    if e in _REFUSED and (not in_set or e == "C"):
        raise BadGroupRegex(_REFUSED[e])
    return "\\" + e, i


def check(pattern: str) -> None:
    """Raise BadGroupRegex unless RE2 compiles `pattern`, and for an empty one: it matches every id, so
    `--group-regex "$UNSET"` would select every group (a restore plan of the whole cluster) as if the option were
    left out, which the commands refuse for every empty value."""
    if pattern == "":
        raise BadGroupRegex("an empty regex matches every group id (leave the option out to select every group)")
    _matches(_PROBE, pattern)


def matching(ids: Iterable[str], pattern: str) -> list[str]:
    """The ids (in their order) that `pattern` matches somewhere in; None ids are never matched."""
    ids = pa.array(list(ids), pa.string())
    return ids.filter(pc.fill_null(_matches(ids, pattern), False)).to_pylist()


def _matches(ids: pa.Array, pattern: str) -> pa.Array:
    try:
        return pc.match_substring_regex(ids, re2_pattern(pattern))
    except pa.ArrowInvalid as e:
        reason = str(e).removeprefix(_ARROW_PREFIX)
        raise BadGroupRegex(f"{reason} (RE2 takes no backreferences, lookarounds or possessive repeats)") from None
    except UnicodeEncodeError:  # a lone surrogate: no group id can hold one
        raise BadGroupRegex("not UTF-8") from None
