"""What the scorer counts (``/stats``, ``/metrics``), its bounds, and its two kinds of refusal."""

from __future__ import annotations

from dataclasses import dataclass


class Saturated(Exception):
    """Too much work admitted: retry after ``retry_after_s`` (429 / RESOURCE_EXHAUSTED with RetryInfo)."""

    def __init__(self, message: str, retry_after_s: float) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class Unavailable(Exception):
    """Shutting down, or results could not be exported: retryable (503 / UNAVAILABLE), never for load."""


@dataclass
class Counters:
    requests: int = 0
    requests_skipped: int = 0  # no watched key anywhere in the body, no trace waiting: spans not scanned
    spans: int = 0  # spans in decoded requests
    rag_items: int = 0
    scored: int = 0
    duplicates: int = 0
    incomplete: int = 0  # RAG spans or traces without the needed attributes: skipped (by reason below)
    incomplete_span: int = 0  # a self-contained span without its answer or documents
    incomplete_no_root: int = 0  # an OpenInference trace's root never came (--settle after its last span)
    incomplete_no_answer: int = 0  # ... its root and the retrievers' enclosing spans hold no answer
    incomplete_no_documents: int = 0  # ... its retrievers returned no text
    incomplete_evicted: int = 0  # ... held-trace memory was full
    incomplete_late_retriever: int = 0  # ... its other spans were dropped as not RAG before it came
    invalid_ids: int = 0
    rejected_saturated: int = 0  # refused: evaluations pending at --max-pending
    rejected_held: int = 0  # refused: RAG traces held for assembly at --max-traces / --max-trace-bytes
    bad_requests: int = 0
    judge_retry: int = 0  # transient judge failures answered "retry later"
    export_failures: int = 0
    evicted_traces: int = 0
    dropped_not_rag: int = 0  # traces without a retriever let go (their root came alone, or they settled)


@dataclass(frozen=True)
class Limits:
    concurrency: int = 4
    max_pending: int = 32  # evaluations admitted and not finished (held traces have their own bound)
    settle_s: float = 30.0  # a RAG trace waits this long after its last span for its root
    grace_s: float = 2.0  # a rooted RAG trace that looks incomplete waits this long for more spans
    hold_s: float = 0.5  # a request with part of a trace waits this long for the rest (see docs/fleet.md)
    max_traces: int = 10_000
    max_bytes: int = 64 << 20
    retry_after_s: float = 2.0
    dedupe_window: int = 100_000
