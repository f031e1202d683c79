"""A sampled-in call's span from the host's call to its end: the one owner that ends it.

The request path starts the span and wraps it in a ``PendingSpan``. From then on only this object ends it:

* ``fail(exc)``: the host's call raised. The exception is recorded (secrets scrubbed) and the span ends at
  once, on the host's thread; a failed call is not scored (outcome ``call_failed``).
* ``drop()``: nothing to finish (the app's sampler dropped the trace): the span ends at the call's end time.
* ``broken(where, exc)``: faithtrace's own bug while handling the call: recorded as such (outcome
  ``internal_error``), the span ends at the call's end time.
* ``finish(capture, offer)``: the call returned and its texts were captured. Normally on the worker's
  dispatcher thread (``Runtime.handoff``): exporting the texts (capping, secret scrubbing, the user's
  ``redact`` hook), the SDK's attribute validation, the queue-or-drop decision for the evaluation ``Job``, and
  ``span.end(end_time=...)`` with the exporters' work behind it. The span's timing is the call's own; only its
  export moves off the host's thread. When the worker cannot take the call (inbox full, shutting down) the
  host's thread runs ``finish`` itself, which is slower but bounded.
* With ``holds`` (placement ``rag_span``), a queued evaluation takes the span with it instead, as a
  ``HeldSpan`` in the job: ``end_held`` ends it at the call's end time, with its evaluation once that is done,
  or without it at the hold deadline or at shutdown (``held_spans`` keeps the deadlines). A dropped evaluation
  leaves the span to end here at once.

Every call into the span is a call into the app's tracing (its span processors run when the span ends), so
each goes through ``_telemetry.host_spans``: what the app's tracing raises is recorded as the host's error,
never raised into the host's call nor counted as faithtrace's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from opentelemetry.trace import Span, Tracer
from opentelemetry.util.types import AttributeValue

from faithtrace._common import safety
from faithtrace._common.secrets import scrub_secrets
from faithtrace._telemetry import host_spans, spans
from faithtrace._telemetry import names as n
from faithtrace._telemetry.metrics import count_outcome
from faithtrace._telemetry.records import Captured, FunctionStats, HeldSpan, Job

if TYPE_CHECKING:
    from faithtrace._config.scoring_options import ScoringOptions
    from faithtrace._config.settings import CaptureOptions


Attributes = dict[str, AttributeValue]
Offer = Callable[[Job], bool]  # queue an evaluation; False when it was dropped


class Holds(Protocol):
    """Where held spans wait for their evaluation (``held_spans.HeldSpans``)."""

    def hold(self, span: Span, end_ns: int, ended_at: float) -> HeldSpan: ...

    def cancel(self, held: HeldSpan) -> None: ...


class PendingSpan:
    """A started RAG span and what its end needs. Cheap to build: the request path makes one per call."""

    __slots__ = ("captured", "end_ns", "ended_at", "field", "outcome", "problem", "span", "stats")

    def __init__(self, span: Span, stats: FunctionStats) -> None:
        self.span = span
        self.stats = stats
        self.end_ns = 0  # wall clock when the call returned: the span's end time
        self.ended_at = 0.0  # the same moment, monotonic
        self.captured: Captured | None = None  # None when capture failed
        self.problem = ""  # why capture failed
        self.outcome = n.OUTCOME_CAPTURE_ERROR  # whose fault that was: capture_error or input_error
        self.field = ""  # the text that could not be captured: query, contexts or answer

    # --- request path ------------------------------------------------------------------------------------
    def fail(self, exc: BaseException) -> None:
        """The host's call raised: record it and end the span now (a failed call is not scored). Never raises:
        the host's caller is about to receive its own exception, and nothing may replace it."""
        span = self.span
        host_spans.record_failure(span, exc)
        attributes: Attributes = {
            n.EVAL_OUTCOME: n.OUTCOME_CALL_FAILED,
            n.SAMPLED: False,
            n.FUNCTION: self.stats.name,
        }
        host_spans.guarded(span).set_attributes(attributes)
        count_outcome(self.stats, n.OUTCOME_CALL_FAILED)
        host_spans.end_span(span)

    def drop(self) -> None:
        """End the span at the call's end without scoring it."""
        host_spans.end_span(self.span, self.end_ns or None)

    def broken(self, where: str, exc: Exception) -> None:
        """faithtrace failed while handling this call (its bug): the call is recorded as such, its span ended.
        Call from an ``except`` block; re-raises in strict mode, after the span has ended."""
        count_outcome(self.stats, n.OUTCOME_INTERNAL_ERROR)
        attributes: Attributes = {
            n.EVAL_OUTCOME: n.OUTCOME_INTERNAL_ERROR,
            n.SAMPLED: False,
            n.FUNCTION: self.stats.name,
        }
        host_spans.guarded(self.span).set_attributes(attributes)
        self.drop()
        safety.internal_error(where, exc)

    # --- worker (or host, when the worker cannot take it) --------------------------------------------------
    def finish(
        self,
        capture: CaptureOptions,
        offer: Offer,
        remote: ScoringOptions | None = None,
        tracer: Tracer | None = None,
        holds: Holds | None = None,
    ) -> None:
        """Attributes, job (queued by ``offer``, or dropped), end. Never raises, except for our bugs in
        strict mode. With ``remote`` (scoring="remote"), the span carries the texts for ``faithtrace serve``
        cut to those scoring limits, and nothing is queued. With ``tracer``, the documents also go on a
        RETRIEVER child span (where Phoenix shows documents). With ``holds``, a queued evaluation holds the
        span open until it is on it (the span is then not ended here)."""
        self.span = host_spans.guarded(self.span)  # the app's span processors may raise: see the docstring
        held = False
        try:
            with safety.handle_internal_errors("finishing a span"):
                held = self._attributes_and_job(capture, offer, remote, tracer, holds)
        finally:
            if not held:
                self.span.end(end_time=self.end_ns)

    def _attributes_and_job(
        self,
        capture: CaptureOptions,
        offer: Offer,
        remote: ScoringOptions | None,
        tracer: Tracer | None,
        holds: Holds | None,
    ) -> bool:
        """True when the queued job holds the span (it must not be ended here)."""
        span, stats, captured = self.span, self.stats, self.captured
        if captured is None:
            self._not_scored(self.problem)
            return False
        recording = span.is_recording()
        if remote is not None:
            if recording:
                span.set_attributes(spans.remote_attributes(captured, stats.name, capture, remote))
            return False
        attrs = spans.rag_attributes(captured, stats.name, capture) if recording else {}
        if captured.answer is None:
            problem = "no answer found in the return value: pass answer="
        elif captured.contexts is None:
            problem = "no retrieved contexts found: pass contexts="
        else:
            problem = ""
        if problem:
            if recording:
                span.set_attributes(attrs)
            self._not_scored(problem)
            return False
        assert captured.answer is not None
        assert captured.contexts is not None
        held = holds.hold(span, self.end_ns, self.ended_at) if holds is not None and recording else None
        job = Job(
            span_context=span.get_span_context(),
            stats=stats,
            query=captured.query,
            contexts=tuple(captured.contexts),
            answer=captured.answer,
            enqueued_ns=self.end_ns,
            enqueued_at=self.ended_at,
            held=held,
        )
        # Everything the span gets here is set before the job is offered: once queued, the evaluation may
        # end a held span at any moment (on the host's thread, the dispatcher can start the job at once).
        if recording:
            attrs[n.SAMPLED] = True
            span.set_attributes(attrs)
            if tracer is not None:
                spans.emit_retriever(tracer, span, attrs, stats.name, self.end_ns)
        if offer(job):
            return held is not None
        if held is not None and holds is not None:
            holds.cancel(held)  # nothing to wait for: the span ends here, now
        count_outcome(stats, n.OUTCOME_DROPPED)
        if recording:
            span.set_attributes({n.SAMPLED: False, n.SAMPLING_REASON: n.SAMPLING_REASON_QUEUE_FULL})
        return False

    def _not_scored(self, problem: str) -> None:
        stats, outcome = self.stats, self.outcome
        count_outcome(stats, outcome)
        attributes: Attributes = {
            n.CAPTURE_ERROR: scrub_secrets(problem[:300]),
            n.EVAL_OUTCOME: outcome,
            n.SAMPLED: False,
            n.FUNCTION: stats.name,
        }
        if self.field:
            attributes[n.CAPTURE_FIELD] = self.field
        self.span.set_attributes(attributes)
        if outcome == n.OUTCOME_INPUT_ERROR:
            # The host's value: say which one, once a minute per function and field.
            safety.warn_rate_limited(
                f"input:{stats.name}:{self.field}",
                "faithtrace: %s is not scored: its %s %s (your code is unaffected)",
                stats.name,
                self.field or "input",
                problem,
            )
            return
        safety.warn_rate_limited(
            "capture:" + stats.name,
            "faithtrace: %s is not scored: %s%s (your code is unaffected)",
            stats.name,
            f"{self.field}: " if self.field else "",
            problem,
        )


def end_held(held: HeldSpan, record: Callable[[Span], object] | None = None, reason: str = "") -> None:
    """End a span held for its evaluation, at its call's end time: with the evaluation, which ``record`` puts
    on it, or without (``reason``: the deadline, shutdown), saying why and that the evaluation goes to a
    trace of its own. The caller has claimed it (``HeldSpan.claim``), so this runs once per span. Guarded
    like ``finish``: the app's span processors run when it ends."""
    span = host_spans.guarded(held.span)
    try:
        with safety.handle_internal_errors("recording an evaluation on its span"):
            if record is not None:
                record(span)
            else:
                span.set_attributes({n.HOLD_REASON: reason, n.EVAL_PLACEMENT: n.PLACEMENT_LINKED})
    finally:
        span.end(end_time=held.end_ns)
