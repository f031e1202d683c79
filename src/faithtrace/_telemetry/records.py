"""The records that the request path and the runtime hand to telemetry: one call's captured texts, one
queued evaluation, a function's counters and why a call was not scored.

They live here, in the lowest layer that reads them, so that telemetry never imports the layers above it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import NamedTuple

from opentelemetry.trace import SpanContext


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


class Job(NamedTuple):
    """One evaluation to run: plain text and ids only, nothing mutable from the host."""

    span_context: SpanContext  # the RAG span the evaluation belongs to
    stats: FunctionStats  # the decorated function's counters
    query: str | None
    contexts: tuple[str, ...]
    answer: str
    enqueued_ns: int  # wall clock when the call returned, for the evaluation span
    enqueued_at: float  # monotonic, for durations
