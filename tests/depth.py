"""How many generated cases the slowest property and fuzz tests run: the quick count by default (`make test`), the
deep count (the search they were written with) under `OFFSETLAKE_TEST_DEPTH=deep` (`make test-deep`). Both run
the same assertions; the quick count keeps `make test` inside its time budget, the deep run searches further."""
from __future__ import annotations

import os

DEEP = os.environ.get("OFFSETLAKE_TEST_DEPTH", "quick") == "deep"


def cases(deep: int, quick: int) -> int:
    return deep if DEEP else quick
