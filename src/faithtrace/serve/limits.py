"""What the scorer counts (``/stats``, ``/metrics``), its bounds, and its two kinds of refusal."""

from __future__ import annotations

from dataclasses import dataclass

from faithtrace._config import options


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
    rejected_export_down: int = 0  # refused unjudged: an export failed slowly just now (apps.ExportHealth)
    evicted_traces: int = 0
    dropped_not_rag: int = 0  # traces without a retriever let go (their root came alone, or they settled)
    spool_kept: int = 0  # parts of traces not scored yet written to the spool before their answer
    spool_full: int = 0  # ... not written: the spool was full (--max-spool-bytes) or the disk failed
    spool_left: int = 0  # held traces left in the spool at a stop, for the next start
    spool_replayed: int = 0  # spooled traces the Collector took back at start (or stop)
    spool_replay_failed: int = 0  # ... that it did not take: left on disk for the next start
    spool_refed: int = 0  # spooled traces put back into this replica's assembler


@dataclass(frozen=True)
class Limits:
    """The scorer's bounds; the ones ``faithtrace serve`` has flags for default to the option table's."""

    concurrency: int = 4
    max_pending: int = 32  # evaluations admitted and not finished (held traces have their own bound)
    settle_s: float = options.default("serve.settle_s")  # a RAG trace waits this long after its last span
    grace_s: float = 2.0  # a rooted RAG trace that looks incomplete waits this long for more spans
    hold_s: float = options.default("serve.hold_s")  # a request with part of a trace waits for the rest
    max_traces: int = options.default("serve.max_traces")
    max_bytes: int = options.default("serve.max_trace_bytes")
    retry_after_s: float = options.default("serve.retry_after_s")
    dedupe_window: int = 100_000
