"""Run a callback when a thread ends: one daemon thread, alive only while threads are watched, checks them
every ``_POLL_S``. Bounded: at most ``_MAX_WATCHED`` threads at once.

Used for LlamaIndex chat engines' writer threads (``_request.chat_streams``); ``flush()`` sweeps first, so
that a stream that has just ended is not missed by a poll.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Final

from faithtrace._common import safety

_POLL_S: Final = 0.05
_MAX_WATCHED: Final = 10_000


class _ThreadWatch:
    """The watched threads and the daemon thread that checks them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._watched: list[tuple[threading.Thread, Callable[[], None]]] = []
        self._thread: threading.Thread | None = None

    def add(self, thread: threading.Thread, done: Callable[[], None]) -> bool:
        with self._lock:
            if len(self._watched) >= _MAX_WATCHED:
                return False
            self._watched.append((thread, done))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="faithtrace-thread-watch", daemon=True)
                self._thread.start()
        return True

    def sweep(self) -> bool:
        """Run the callbacks of the threads that have ended; False when none is left to watch."""
        with self._lock:
            ended = [w for w in self._watched if not w[0].is_alive()]
            if ended:
                self._watched = [w for w in self._watched if w[0].is_alive()]
            left = bool(self._watched)
        for _thread, done in ended:
            # The watcher outlives one bad callback.
            with safety.handle_internal_errors("a thread-end callback"):
                done()
        return left

    def _run(self) -> None:
        while True:
            time.sleep(_POLL_S)
            if not self.sweep():
                with self._lock:
                    if not self._watched:
                        self._thread = None
                        return


_threads: Final = _ThreadWatch()


def add(thread: threading.Thread, done: Callable[[], None]) -> bool:
    """Call ``done()`` (on the watcher's thread, or in ``sweep()``) once ``thread`` has ended; False when
    too many threads are watched already."""
    return _threads.add(thread, done)


def sweep() -> None:
    """Run now the callbacks of the threads that have ended."""
    _threads.sweep()
