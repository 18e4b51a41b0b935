"""Text for a terminal: what the commands print of the log (group ids, member and client ids, hosts) is whatever a
Kafka client sent, and a control character in it would act on the reader's terminal."""
from __future__ import annotations

import re

# C0 controls but newline and tab (the views' own layout), DEL, and the C1 controls (CSI and the other 8-bit escapes)
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def shown(text: str) -> str:
    """`text` with each control character but newline and tab written as its escape (`\\x1b`, `\\r`): an escape
    sequence in a group id would clear the on-call's screen or recolour a row, a carriage return write over the
    line it is on. JSON and CSV output escape or keep them as their formats say; this is for the text views. A
    newline or tab inside a value is escaped by the view that lays it out (`pipelines/serving/cells.py`)."""
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], text)
