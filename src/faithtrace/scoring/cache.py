"""A bounded, thread-safe LRU of extracted truths, so a document retrieved again costs no tokens."""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict


class TruthCache:
    """Maps (judge model, sha256 of the document text) to the truths the judge extracted from it."""

    def __init__(self, max_entries: int = 2048) -> None:
        self._max = max_entries
        self._data: OrderedDict[tuple[str, str], tuple[str, ...]] = OrderedDict()
        self._lock = threading.Lock()  # the decorator's worker and evaluate() callers may share one cache
        self.hits = 0
        self.misses = 0

    @staticmethod
    def key(model: str, document: str) -> tuple[str, str]:
        return model, hashlib.sha256(document.encode("utf-8", "surrogatepass")).hexdigest()

    def get(self, model: str, document: str) -> list[str] | None:
        k = self.key(model, document)
        with self._lock:
            found = self._data.get(k)
            if found is None:
                self.misses += 1
                return None
            self._data.move_to_end(k)
            self.hits += 1
            return list(found)

    def put(self, model: str, document: str, truths: list[str]) -> None:
        k = self.key(model, document)
        with self._lock:
            self._data[k] = tuple(truths)
            self._data.move_to_end(k)
            while len(self._data) > self._max:
                self._data.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()
            self.hits = self.misses = 0

    def __len__(self) -> int:
        with self._lock:
            return len(self._data)


# One per process: keyed by judge model, so different judges never share entries.
truth_cache = TruthCache()
