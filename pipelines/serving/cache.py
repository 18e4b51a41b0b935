"""Answers kept between requests: a bounded LRU of serialized answers (JSON bytes) for one snapshot index
(`ResponseCache`), and the newest few answers of one kind, each built once (`Kept`).

A point lookup (`GET /groups/{id}`, `GET /groups/{id}/offsets`) is answered once from the index, serialized,
and kept here; later requests for the same key get the same bytes without touching Arrow or the JSON encoder.
The cache lives on the SnapshotIndex, so a new snapshot (or a rerun under the same id, which is a new index)
starts empty and an answer can never outlive the snapshot it was built from.
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Callable, Generic, Hashable, TypeVar

T = TypeVar("T")

DEFAULT_MAX_BYTES = 64 * 1024 * 1024
DEFAULT_MAX_ENTRIES = 50_000
MAX_ENTRY_BYTES = 4 * 1024 * 1024  # bigger answers are served but not kept


class ResponseCache:
    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES, max_entries: int = DEFAULT_MAX_ENTRIES):
        self.max_bytes = max_bytes
        self.max_entries = max_entries
        self._data: OrderedDict[Hashable, bytes] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, key: Hashable) -> bytes | None:
        with self._lock:
            body = self._data.get(key)
            if body is None:
                self.misses += 1
                return None
            self._data.move_to_end(key)
            self.hits += 1
            return body

    def put(self, key: Hashable, body: bytes) -> None:
        if len(body) > MAX_ENTRY_BYTES:
            return
        with self._lock:
            old = self._data.pop(key, None)
            if old is not None:
                self._bytes -= len(old)
            self._data[key] = body
            self._bytes += len(body)
            while self._data and (self._bytes > self.max_bytes or len(self._data) > self.max_entries):
                _, dropped = self._data.popitem(last=False)
                self._bytes -= len(dropped)

    def __len__(self) -> int:
        return len(self._data)

    @property
    def nbytes(self) -> int:
        return self._bytes


class Kept(Generic[T]):
    """The newest `keep` answers of one kind by key, each built once: a caller asking for a key being built waits
    for it rather than building it again (one build at a time per kind)."""

    def __init__(self, keep: int):
        self.keep = keep
        self._data: OrderedDict[Hashable, T] = OrderedDict()
        self._lock = threading.Lock()

    def __contains__(self, key: Hashable) -> bool:
        return key in self._data

    def get(self, key: Hashable, build: Callable[[], T]) -> T:
        with self._lock:
            if key in self._data:
                self._data.move_to_end(key)
                return self._data[key]
            got = build()
            self._data[key] = got
            while len(self._data) > self.keep:
                self._data.popitem(last=False)
            return got
