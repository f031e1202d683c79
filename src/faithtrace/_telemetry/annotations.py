"""Phoenix annotations: each score written onto its RAG span (and trace), where Phoenix's lists read it.

Phoenix fills its annotation columns, charts and ``annotations['faithfulness']`` filters only from annotations
(``POST /v1/span_annotations`` on its REST API), never from span attributes or events. This sink turns a
finished evaluation into a ``faithfulness`` annotation (annotator kind ``LLM``) on the RAG span and the same
on its trace (Phoenix charts trace annotations on the project page), and posts them in batches
from a thread of its own: the queue is bounded (a full queue drops and counts), each batch is retried a few
times with backoff, failures are counted (``faithtrace.annotations{status=failed}``) and warned about at most
once a minute, and ``flush``/``close`` wait only as long as the caller's deadline. Plain ``urllib`` keeps it
free of a client dependency (Phoenix's own client pulls in far more than one POST needs).

Phoenix stores annotations asynchronously (no ``sync=true``), which also covers an annotation that arrives
before its span: Phoenix keeps it until the span is ingested.
"""

from __future__ import annotations

import collections
import json
import threading
import time
import urllib.error
import urllib.request
from typing import TYPE_CHECKING, Any, Final

from faithtrace._common import safety
from faithtrace._common.secrets import export_text
from faithtrace._telemetry import names as n

if TYPE_CHECKING:
    from opentelemetry.trace import SpanContext

    from faithtrace._config.settings import CaptureOptions
    from faithtrace.scoring.models import FaithfulnessResult

QUEUE_SIZE: Final = 10_000  # annotations waiting at most (about 1 KB each)
BATCH_SIZE: Final = 100  # annotations per request
BATCH_WAIT_S: Final = 0.5  # how long the first annotation waits for company
ATTEMPTS: Final = 3  # per batch; then the batch is counted as failed
REQUEST_TIMEOUT_S: Final = 10.0
IDENTIFIER: Final = "faithtrace"  # Phoenix upserts on (name, span, identifier): a re-score replaces

# Read by an observable counter (see metrics.py): plain integers keep the failure path free of OTel calls.
counts: dict[str, int] = {"sent": 0, "failed": 0, "dropped": 0}


class _Retryable(Exception):
    pass


def annotation(
    rag: SpanContext, result: FaithfulnessResult, evaluation: SpanContext | None, options: CaptureOptions
) -> dict[str, Any]:
    """The ``faithfulness`` annotation of ``result`` on the RAG span (Phoenix's REST body for one item).

    ``trace_annotation`` turns it into the same annotation on the RAG span's trace.
    """
    outcome = result.outcome.value
    body: dict[str, Any] = {"label": result.label or outcome}
    if result.score is not None:
        body["score"] = float(result.score)
    explanation = result.reason if result.error is None else f"{result.error.type}: {result.error.message}"
    if explanation and options.content:
        body["explanation"], _ = export_text(
            explanation, options.max_attribute_chars, options.scrub_secrets, options.redact, readable=True
        )
    metadata: dict[str, Any] = {
        "outcome": outcome,
        "threshold": result.threshold,
        "claims": result.counts.total,
        "supported": result.counts.yes,
        "contradicted": result.counts.no,
        "unverifiable": result.counts.idk,
        "unjudged": len(result.unjudged),  # left out of the score: judge token budget or max_claims
        "judge_model": result.judge_model,
    }
    if evaluation is not None:
        metadata["evaluation_span_id"] = f"{evaluation.span_id:016x}"
        metadata["evaluation_trace_id"] = f"{evaluation.trace_id:032x}"
    return {
        "span_id": f"{rag.span_id:016x}",
        "name": n.ANNOTATION_NAME,
        "annotator_kind": n.ANNOTATOR_KIND,
        "result": body,
        "metadata": metadata,
        "identifier": IDENTIFIER,
    }


def trace_annotation(span_annotation: dict[str, Any], rag: SpanContext) -> dict[str, Any]:
    """The span annotation, on the RAG span's trace: Phoenix charts trace annotations on the project page
    ("Trace annotation scores") and shows them in the traces list even when the RAG span is not the root.
    Keyed by the RAG span, so a trace with several decorated calls keeps one annotation per call."""
    item = {k: v for k, v in span_annotation.items() if k != "span_id"}
    item["trace_id"] = f"{rag.trace_id:032x}"
    item["identifier"] = f"{IDENTIFIER}:{span_annotation['span_id']}"
    item["metadata"] = {**span_annotation["metadata"], "span_id": span_annotation["span_id"]}
    return item


class PhoenixAnnotations:
    """A bounded queue of annotations and the thread that posts them to Phoenix."""

    def __init__(self, endpoint: str, api_key: str | None = None) -> None:
        self.base_url = endpoint.rstrip("/")
        self._headers = {"Content-Type": "application/json"}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._init_state()

    def _init_state(self) -> None:
        self._queue: collections.deque[tuple[str, dict[str, Any]]] = collections.deque()
        self._cond = threading.Condition()
        self._busy = 0  # annotations taken off the queue and not yet sent or failed
        self._closed = False
        self._thread: threading.Thread | None = None

    # --- producer side (the scoring worker) ----------------------------------------------------------------
    def add(self, item: dict[str, Any], kind: str = "span") -> None:
        """Queue one annotation; ``kind`` is ``span`` or ``trace`` (Phoenix's two REST routes)."""
        with self._cond:
            if self._closed or len(self._queue) >= QUEUE_SIZE:
                counts["dropped"] += 1
                safety.warn_rate_limited(
                    "annotations:dropped", "faithtrace: Phoenix annotation queue full or closed; dropping"
                )
                return
            self._queue.append((kind, item))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="faithtrace-annotations", daemon=True)
                self._thread.start()
            if len(self._queue) == 1 or len(self._queue) >= BATCH_SIZE:
                # Wake the sender when it idles or a batch is full, not per item: it waits for company.
                self._cond.notify_all()

    def flush(self, timeout: float) -> bool:
        """Wait until every queued annotation was sent or given up on; False when ``timeout`` passed first."""
        deadline = time.monotonic() + timeout
        with self._cond:
            self._cond.notify_all()  # a batch waiting for company goes now
            while self._queue or self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 0.05))
        return True

    def close(self, timeout: float) -> None:
        done = self.flush(timeout)
        with self._cond:
            self._closed = True
            left = len(self._queue)  # a batch in flight is still counted by the sender, sent or failed
            self._queue.clear()
            self._cond.notify_all()
        if not done and left:
            counts["dropped"] += left
            safety.warn_rate_limited(
                "annotations:close", "faithtrace: %d Phoenix annotation(s) not sent before the deadline", left
            )

    def after_fork(self) -> None:
        self._init_state()  # the thread does not exist in the child; the lock may be held

    # --- the posting thread ---------------------------------------------------------------------------------
    def _take(self) -> list[tuple[str, dict[str, Any]]] | None:
        with self._cond:
            while not self._queue and not self._closed:
                self._cond.wait()
            if self._closed:
                return None
            if len(self._queue) < BATCH_SIZE:
                self._cond.wait(BATCH_WAIT_S)  # notified early by flush()
            batch = [self._queue.popleft() for _ in range(min(BATCH_SIZE, len(self._queue)))]
            self._busy += len(batch)
            return batch

    def _run(self) -> None:
        while (batch := self._take()) is not None:
            try:
                for kind in ("span", "trace"):
                    items = [item for k, item in batch if k == kind]
                    if items:
                        self._send(f"{self.base_url}/v1/{kind}_annotations", items)
            finally:
                with self._cond:
                    self._busy -= len(batch)
                    self._cond.notify_all()

    def _send(self, url: str, items: list[dict[str, Any]]) -> None:
        try:
            self._send_with_retries(url, json.dumps({"data": items}).encode())
            counts["sent"] += len(items)
        except Exception as exc:
            counts["failed"] += len(items)
            safety.warn_rate_limited(
                "annotations:failed",
                "faithtrace: could not write %d annotation(s) to Phoenix at %s (%s: %s)",
                len(items),
                url,
                type(exc).__name__,
                exc,
            )

    def _send_with_retries(self, url: str, data: bytes) -> None:
        delay = 0.5
        for attempt in range(1, ATTEMPTS + 1):
            try:
                return self._post(url, data)
            except _Retryable:
                if attempt == ATTEMPTS or self._closed:
                    raise
                time.sleep(delay)
                delay *= 2

    def _post(self, url: str, data: bytes) -> None:
        request = urllib.request.Request(url, data=data, headers=self._headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_S) as response:
                response.read()
        except urllib.error.HTTPError as exc:
            # Like OTLP: retry throttling and server trouble; a 4xx is our request's fault and final.
            if exc.code in (408, 429) or exc.code >= 500:
                raise _Retryable(f"HTTP {exc.code}") from exc
            detail = exc.read()[:300].decode(errors="replace")
            raise RuntimeError(f"HTTP {exc.code}: {detail}") from exc
        except (urllib.error.URLError, OSError) as exc:
            raise _Retryable(str(exc)) from exc


def sink_for(kind: str | None, endpoint: str, api_key: str | None = None) -> PhoenixAnnotations | None:
    if kind != "phoenix":
        return None
    return PhoenixAnnotations(endpoint, api_key)
