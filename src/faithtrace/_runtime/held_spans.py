"""RAG spans held open until their evaluation is on them (placement ``rag_span``), and their deadline.

A span is held from the moment its evaluation is queued until one of three things ends it, at the call's own
end time whichever it is (``HeldSpan.claim`` makes sure only one does):

* the evaluation is done: the runtime records it on the span and ends it (``release``, reason ``evaluated``);
* the hold deadline (``hold_timeout_s`` after the call returned) passes first: the span is exported as it is,
  marked ``faithtrace.evaluation.placement=linked`` and ``faithtrace.hold.reason=deadline``, and its
  evaluation, when done, goes to a trace of its own linked to it (``expire``, run by the worker's
  dispatcher between its other work);
* shutdown: every span still held is exported as it is (``release_all``), inside ``shutdown()``'s deadline.

Only a span whose evaluation sits in the worker's bounded queue or runs in one of its slots is held, so the
number held is bounded by ``queue_size + concurrency``; a call whose evaluation is dropped ends its span at
once. The spans are kept in hold order, which is deadline order (one timeout for all, from each call's
end), so ``expire`` looks at the oldest only.
"""

from __future__ import annotations

import collections
import math
import threading
import time
from typing import Final

from opentelemetry.trace import Span

from faithtrace._runtime.pending_span import end_held
from faithtrace._telemetry import names as n
from faithtrace._telemetry.metrics import count_hold_release
from faithtrace._telemetry.records import HeldSpan

NEVER: Final = math.inf


class HeldSpans:
    """The spans held by one runtime."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        # By id(), in hold order: the oldest is looked at and removed in O(1) (a plain dict's first entry is
        # found by skipping the slots of those removed before it).
        self._held: collections.OrderedDict[int, HeldSpan] = collections.OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._held)

    def hold(self, span: Span, end_ns: int, ended_at: float) -> HeldSpan:
        """Hold ``span`` (ended at ``end_ns`` whenever it ends) until ``ended_at + timeout_s`` at most."""
        held = HeldSpan(span, end_ns, ended_at + self.timeout_s)
        with self._lock:
            self._held[id(held)] = held
        return held

    def cancel(self, held: HeldSpan) -> None:
        """Undo ``hold`` for a span whose evaluation was not queued after all (its caller ends it)."""
        held.claim()
        with self._lock:
            self._held.pop(id(held), None)

    def release(self, held: HeldSpan, reason: str) -> bool:
        """Take ``held`` out of the hold to end it; False when the deadline or shutdown already ended it."""
        if not held.claim():
            return False
        with self._lock:
            self._held.pop(id(held), None)
        count_hold_release(reason)
        return True

    def expire(self, now: float | None = None) -> float:
        """Export the spans whose deadline has passed; the seconds until the next deadline (``NEVER``: none).

        Holds are registered in call order within a few milliseconds (the dispatcher finishes calls in the
        order they returned), so looking only at the oldest can keep a due span at most that long.
        """
        now = time.monotonic() if now is None else now
        due: list[HeldSpan] = []
        wait = NEVER
        with self._lock:
            while self._held:
                oldest = next(iter(self._held.values()))
                if oldest.deadline > now:
                    wait = oldest.deadline - now
                    break
                self._held.popitem(last=False)
                due.append(oldest)
        for held in due:
            if held.claim():
                count_hold_release(n.HOLD_DEADLINE)
                end_held(held, reason=n.HOLD_DEADLINE)
        return wait

    def release_all(self, reason: str = n.HOLD_SHUTDOWN) -> int:
        """Export every span still held, without its evaluation; how many there were."""
        with self._lock:
            held = list(self._held.values())
            self._held.clear()
        ended = 0
        for item in held:
            if item.claim():
                count_hold_release(reason)
                end_held(item, reason=reason)
                ended += 1
        return ended

    def forget(self) -> None:
        """In a forked child: the spans are the parent's to end."""
        self._held = collections.OrderedDict()
        self._lock = threading.Lock()
