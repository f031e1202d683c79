"""The records that the request path and the runtime hand to telemetry: one call's captured texts, one
queued evaluation, a function's counters and why a call was not scored.

They live here, in the lowest layer that reads them, so that telemetry never imports the layers above it.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from enum import IntEnum
from typing import NamedTuple

from opentelemetry.trace import Span, SpanContext


class Reason(IntEnum):
    """Why a call is (not) scored. The values index ``FunctionStats.sampled_out``, so counting a refusal on
    the request path is one list increment; ``label`` is the ``faithtrace.sampling.reason`` metric value."""

    SCORED = 0
    PARENT = 1
    RATIO = 2
    BUDGET = 3
    RATE_LIMIT = 4

    @property
    def label(self) -> str:
        return self.name.lower()


# Evaluation outcomes, with the pass/fail label where there is one (an alert on the share of failing answers
# needs it on the counter, not only on the score histogram).
OutcomeKey = tuple[str, str | None]


class FunctionStats:
    """Counters of one decorated function. Written without locks: a rare lost increment under thread
    contention is an acceptable price for keeping the request path free of synchronisation."""

    __slots__ = ("__weakref__", "calls", "name", "outcomes", "sampled_out")

    def __init__(self, name: str) -> None:
        self.name = name
        self.calls = 0
        self.sampled_out = [0] * len(Reason)  # indexed by Reason
        self.outcomes: dict[OutcomeKey, int] = {}


@dataclass(slots=True)
class Captured:
    """The texts of one call, as plain strings: nothing of the host's objects is kept."""

    query: str | None
    contexts: list[str] | None  # None: the function has no contexts we could find
    answer: str | None


class HeldSpan:
    """A RAG span left open until its evaluation is on it (placement ``rag_span``), and what ending it needs.

    Exactly one party ends it: the evaluation when it is done, the hold's deadline, or shutdown. Each calls
    ``claim()`` first and only the first one gets True; the span is faithtrace's own (never the host's), and
    it ends at ``end_ns``, the call's own end, whoever ends it and whenever.
    """

    __slots__ = ("_claimed", "_lock", "deadline", "end_ns", "span")

    def __init__(self, span: Span, end_ns: int, deadline: float) -> None:
        self.span = span
        self.end_ns = end_ns  # wall clock when the call returned: the span's end time
        self.deadline = deadline  # monotonic: exported without its evaluation from then on
        self._lock = threading.Lock()
        self._claimed = False

    def claim(self) -> bool:
        """True for the first caller only: that caller ends the span."""
        with self._lock:
            if self._claimed:
                return False
            self._claimed = True
            return True

    @property
    def claimed(self) -> bool:
        return self._claimed


class Job(NamedTuple):
    """One evaluation to run: plain text and ids only, nothing mutable from the host (``held`` is
    faithtrace's own span, when the evaluation is to go on it)."""

    span_context: SpanContext  # the RAG span the evaluation belongs to
    stats: FunctionStats  # the decorated function's counters
    query: str | None
    contexts: tuple[str, ...]
    answer: str
    enqueued_ns: int  # wall clock when the call returned, for the evaluation span
    enqueued_at: float  # monotonic, for durations
    held: HeldSpan | None = None  # the RAG span itself, held open for this evaluation (placement rag_span)
