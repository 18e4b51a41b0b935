"""Values of the log in a text view: a group, member or client id, a host, a topic is whatever a Kafka client sent.
A control character in it would act on the reader's terminal (an escape sequence clears the on-call's screen, a
carriage return writes over its line), and a newline or a tab inside a value would split the view's row or shift
its columns. Both are written as their escapes (`\\x1b`, `\\n`); JSON and CSV keep the value as their formats say.
So is a character that draws nothing or reorders the text after it (Unicode's format characters: zero-width, bidi
controls; the line and paragraph separators), as the page shows them: `pay\\u200bments` is not `payments`.
The error lines' ` (did you mean 'payments'?)`, naming the ids nearest a mistyped one, is written here once too."""
from __future__ import annotations

import re
import unicodedata

# every C0 control (newline and tab too: inside a value they are not the view's layout), DEL and the C1 controls,
# and any character beyond ASCII (its category decides, `_escape`)
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]|[^\x00-\x7f]")
# the same but newline and tab: a whole view's own layout
_CONTROL_BUT_LAYOUT = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]|[^\x00-\x7f]")
# format characters (U+200B, U+202E, U+2066, U+FEFF, ...), the line and paragraph separators (U+2028, U+2029)
_INVISIBLE = frozenset({"Cf", "Zl", "Zp"})


def _escape(match: re.Match) -> str:
    c = match.group()
    if c > "\x9f" and unicodedata.category(c) not in _INVISIBLE:
        return c  # CJK, emoji, accents: drawn as they are
    return repr(c)[1:-1]


def cell(value):
    """A string value with each control character written as its escape; anything else as it is."""
    if not isinstance(value, str):
        return value
    return _CONTROL.sub(_escape, value)


def did_you_mean(possibilities, quote: bool = False) -> str:
    """` (did you mean a or b?)`, or nothing when there is no close match; `quote` for names that may hold
    spaces (group ids)."""
    if not possibilities:
        return ""
    names = [repr(p) if quote else p for p in possibilities]
    return f" (did you mean {' or '.join(names)}?)"


def view(text: str) -> str:
    """A whole view's text with each control character but its own newlines and tabs written as its escape."""
    return _CONTROL_BUT_LAYOUT.sub(_escape, text)
