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

The same thread registers the ``faithfulness`` annotation config once and assigns it to the project: Phoenix
colours an annotation's score (favourable or not) only by the config its project holds under that name. The
config is Phoenix's "freeform" kind with a threshold, because that is the only kind whose colour pivots on
a cutoff: scores in [0, 1], higher is better, the scoring threshold as the cutoff (a categorical pass/fail
config pivots on the midpoint of its values' scores, and would show a failing 0.6 as favourable). An existing
config of that name (the user's own, or an earlier run's) is left as it is. The project exists only once its
first span is stored, so a missing project is retried on a backoff, a bounded number of times; failures are
counted (``faithtrace.annotations{status=config_failed}``) and warned about like the annotations'.
"""

from __future__ import annotations

import collections
import json
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
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
# Seconds between tries to register the annotation config; one try more than delays, then it is given up.
CONFIG_RETRY_S: Final = (1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0)

# Read by an observable counter (see metrics.py): plain integers keep the failure path free of OTel calls.
counts: dict[str, int] = {"sent": 0, "failed": 0, "dropped": 0, "config_failed": 0}


class _Retryable(Exception):
    pass


class _NotYet(Exception):
    """The project is not in Phoenix yet (its first span is still on its way): try again later."""


def annotation_config(threshold: float) -> dict[str, Any]:
    """Phoenix's config for the ``faithfulness`` annotation (REST body of ``POST /v1/annotation_configs``)."""
    return {
        "name": n.ANNOTATION_NAME,
        "type": "FREEFORM",
        "description": (
            "faithtrace: the share of the answer's claims its retrieved context supports; label pass or fail "
            "at the threshold (by default a contradicted claim fails the answer whatever the share)"
        ),
        "optimization_direction": "MAXIMIZE",
        "threshold": threshold,
        "lower_bound": 0.0,
        "upper_bound": 1.0,
    }


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
    """A bounded queue of annotations and the thread that posts them to Phoenix (and registers their config
    in ``project()``'s project, the name Phoenix files the app's spans under)."""

    def __init__(
        self,
        endpoint: str,
        api_key: str | None = None,
        project: Callable[[], str] | None = None,
        threshold: float = 0.7,
    ) -> None:
        self.base_url = endpoint.rstrip("/")
        self._headers = {"Content-Type": "application/json"}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._project = project or (lambda: n.PHOENIX_DEFAULT_PROJECT)
        self._config = annotation_config(threshold)
        self._init_state()

    def _init_state(self) -> None:
        self._queue: collections.deque[tuple[str, dict[str, Any]]] = collections.deque()
        self._cond = threading.Condition()
        self._busy = 0  # annotations taken off the queue and not yet sent or failed
        self._closed = False
        self._thread: threading.Thread | None = None
        self._config_created = False
        self._config_tries = 0
        self._config_due: float | None = 0.0  # when to try registering the config next; None: done, given up

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
        """The next batch; an empty one when the config registration is due and nothing else is waiting."""
        with self._cond:
            while not self._queue and not self._closed:
                if self._config_due is None:
                    self._cond.wait()
                    continue
                left = self._config_due - time.monotonic()
                if left <= 0:
                    return []
                self._cond.wait(left)
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
            # After the batch: the annotations never wait for the config.
            if self._config_due is not None and time.monotonic() >= self._config_due:
                self._register_config()

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

    def _register_config(self) -> None:
        """One try at creating the config (once) and assigning it to the project; reschedules or gives up."""
        self._config_tries += 1
        try:
            if not self._config_created:
                body = json.dumps(self._config).encode()
                status, _ = self._request("POST", f"{self.base_url}/v1/annotation_configs", body)
                if status not in (200, 409):  # 409: the name is taken; whoever made it, it stays as it is
                    raise RuntimeError(f"creating the annotation config: HTTP {status}")
                self._config_created = True
            project = urllib.parse.quote(self._project(), safe="")
            path = f"/v1/projects/{project}/annotation_configs/{n.ANNOTATION_NAME}"
            status, _ = self._request("PUT", self.base_url + path)
            if status == 404:
                raise _NotYet(f"project {self._project()!r} not found")
            if status != 200:
                raise RuntimeError(f"assigning the annotation config to the project: HTTP {status}")
            self._config_due = None
        except (_NotYet, _Retryable) as exc:
            if self._closed:
                self._config_due = None  # shutting down: abandoned, not a failure of Phoenix's
            elif self._config_tries > len(CONFIG_RETRY_S):
                self._config_failed(exc)
            else:
                self._config_due = time.monotonic() + CONFIG_RETRY_S[self._config_tries - 1]
        except Exception as exc:  # a 4xx is final: this Phoenix does not take the config
            self._config_failed(exc)

    def _config_failed(self, exc: Exception) -> None:
        self._config_due = None
        counts["config_failed"] += 1
        safety.warn_rate_limited(
            "annotations:config",
            "faithtrace: could not register the %r annotation config in Phoenix at %s (%s: %s); scores are "
            "written without it (Phoenix does not colour them)",
            n.ANNOTATION_NAME,
            self.base_url,
            type(exc).__name__,
            exc,
        )

    def _request(self, method: str, url: str, data: bytes | None = None) -> tuple[int, str]:
        """One REST call: the status and (for a 4xx) the start of the answer. Like OTLP, throttling, server
        trouble and network trouble raise ``_Retryable``; a 4xx is our request's fault, for the caller."""
        request = urllib.request.Request(url, data=data, headers=self._headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_S) as response:
                response.read()
                return int(response.status), ""
        except urllib.error.HTTPError as exc:
            if exc.code in (408, 429) or exc.code >= 500:
                raise _Retryable(f"HTTP {exc.code}") from exc
            return int(exc.code), exc.read()[:300].decode(errors="replace")
        except (urllib.error.URLError, OSError) as exc:
            raise _Retryable(str(exc)) from exc

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
        status, detail = self._request("POST", url, data)
        if status >= 400:
            raise RuntimeError(f"HTTP {status}: {detail}")


def sink_for(
    kind: str | None,
    endpoint: str,
    api_key: str | None = None,
    project: Callable[[], str] | None = None,
    threshold: float = 0.7,
) -> PhoenixAnnotations | None:
    if kind != "phoenix":
        return None
    return PhoenixAnnotations(endpoint, api_key, project, threshold)


def phoenix_project(tracer_provider: Any) -> str:
    """The Phoenix project the provider's spans are filed under: its resource's project name, else Phoenix's
    default project."""
    resource = getattr(tracer_provider, "resource", None)
    attributes = getattr(resource, "attributes", None) or {}
    return str(attributes.get(n.OPENINFERENCE_PROJECT_NAME) or n.PHOENIX_DEFAULT_PROJECT)
