"""Values of the log in a text view: a group, member or client id, a host, a topic is whatever a Kafka client sent.
A control character in it would act on the reader's terminal (an escape sequence clears the on-call's screen, a
carriage return writes over its line), and a newline or a tab inside a value would split the view's row or shift
its columns. Both are written as their escapes (`\\x1b`, `\\n`); JSON and CSV keep the value as their formats say."""
from __future__ import annotations

import re

# every C0 control (newline and tab too: inside a value they are not the view's layout), DEL and the C1 controls
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
# the same but newline and tab: a whole view's own layout
_CONTROL_BUT_LAYOUT = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _escape(match: re.Match) -> str:
    return repr(match.group())[1:-1]


def cell(value):
    """A string value with each control character written as its escape; anything else as it is."""
    if not isinstance(value, str):
        return value
    return _CONTROL.sub(_escape, value)


def view(text: str) -> str:
    """A whole view's text with each control character but its own newlines and tabs written as its escape."""
    return _CONTROL_BUT_LAYOUT.sub(_escape, text)
