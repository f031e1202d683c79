"""Admission: a replica that is full lets a request wait a little for room before refusing it.

Refusing at once (429 / RESOURCE_EXHAUSTED with RetryInfo) leaves the work with the sender's back-off: the
Collector retries after max(its exponential back-off, the delay asked for), so under a burst the replica ran
dry between waves of retries (benchmarks/fleet/fleet.py: one replica at 8.3 of the 13.3 evaluations/s its
--concurrency allows). A request that fits in the line instead waits, for at most ``wait_s``, and goes in
as soon as evaluations finish. The line is bounded: at most ``max_items`` RAG items wait, the rest are refused
at once, so memory stays bounded by the admitted items plus the line.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable


class Admission:
    def __init__(self, max_items: int, wait_s: float) -> None:
        self.max_items = max_items
        self.wait_s = wait_s
        self.waiting = 0  # RAG items in requests waiting for room
        self._freed: asyncio.Future[None] | None = None

    def freed(self) -> None:
        """Work finished: wake the waiting requests to check for room again."""
        if self._freed is not None and not self._freed.done():
            self._freed.set_result(None)
        self._freed = None

    async def wait(self, fits: Callable[[], bool], need: int) -> bool:
        """True once ``fits()`` (checked at once, then after each finished evaluation); False, to refuse,
        when the line has no room for ``need`` more items or ``wait_s`` passed first."""
        if fits():
            return True
        if self.waiting + need > self.max_items or self.wait_s <= 0:
            return False
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.wait_s
        self.waiting += need
        try:
            while not fits():
                remaining = deadline - loop.time()
                if remaining <= 0:
                    return False
                if self._freed is None:
                    self._freed = loop.create_future()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(self._freed), remaining)
            return True
        finally:
            self.waiting -= need
