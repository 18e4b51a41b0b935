"""A value of the log inside a text view's line: a group, member or client id, a host, a topic is whatever a Kafka
client sent, and a newline or a tab in it would split the view's row or shift its columns."""
from __future__ import annotations

import re

# every C0 control (newline and tab too: inside a value they are not the view's layout), DEL and the C1 controls
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def cell(value):
    """A string with each control character written as its escape (`\\n`, `\\t`, `\\x1b`), as `jobs/terminal.py`'s
    `shown` writes the ones it escapes in a whole view; anything else as it is. For the text views only: JSON and
    CSV keep the value as their formats say."""
    if not isinstance(value, str):
        return value
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], value)
