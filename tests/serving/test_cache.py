"""The server's kept answers (`pipelines/serving/cache.py` `Kept`): the newest few of a kind, each built once even
when requests for it arrive together."""
from __future__ import annotations

import threading
import time

from pipelines.serving.cache import Kept


def test_keeps_the_newest_and_builds_each_key_once():
    built = []
    kept: Kept[str] = Kept(2)

    def build(key):
        built.append(key)
        return key.upper()

    assert [kept.get(k, lambda k=k: build(k)) for k in ("a", "b", "a", "c", "a", "b")] == list("ABACAB")
    # "a" was read again before "c" arrived, so "b" was the oldest and went; asking for it again rebuilds it,
    # and "c", read least recently, goes
    assert built == ["a", "b", "c", "b"]
    assert "a" in kept and "b" in kept and "c" not in kept


def test_callers_arriving_together_share_one_build():
    calls = []
    kept: Kept[int] = Kept(1)
    started = threading.Event()

    def slow():
        calls.append(1)
        started.set()
        time.sleep(0.2)
        return 42

    got = []
    threads = [threading.Thread(target=lambda: got.append(kept.get("k", slow))) for _ in range(4)]
    threads[0].start()
    started.wait(5)
    for t in threads[1:]:
        t.start()
    for t in threads:
        t.join(5)
    assert got == [42] * 4 and calls == [1]
