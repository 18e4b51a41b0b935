"""The C extension (`_fastdecode.c` and the sources beside it, built by setup.py), chosen once, here: `fastdecode`
is the module, or None when it is not built or `OFFSETLAKE_PURE_PYTHON=1` asks for the Python references (the tests
run both; a machine without a compiler has only the references). Each C walker has its Python reference beside its
caller (`columnar`'s decoder, `segments.entry_heads`, `coordinator.decoded.group_rows`), and the same surface."""
from __future__ import annotations

import os

from schemas.decoded import DECODED_RECORD_SCHEMA

PURE_PYTHON_ENV = "OFFSETLAKE_PURE_PYTHON"


def _load():
    if os.environ.get(PURE_PYTHON_ENV) == "1":
        return None
    try:  # imported here, not at module level: an optional C extension, absent where setup.py built none
        from pipelines.decoding import _fastdecode
    except ImportError:  # pragma: no cover - depends on the build
        return None
    if getattr(_fastdecode, "ROW_KEYS", 0) != 2:  # pragma: no cover - built from an older source: `make setup` again
        return None
    # a classic member as a tuple of the `members` column's struct fields, in their order (`MEMBER_FIELDS`)
    if getattr(_fastdecode, "MEMBER_FIELDS", None) != MEMBER_FIELDS:  # pragma: no cover - an older source, as above
        return None
    if not hasattr(_fastdecode, "python_rows"):  # pragma: no cover - an older source, as above
        return None
    return _fastdecode


#: A classic member's fields, in the order of the decoded `members` column's struct (`schemas.decoded`)
MEMBER_FIELDS = tuple(f.name for f in DECODED_RECORD_SCHEMA.field("members").type.value_type)


fastdecode = _load()
