"""A sampled-in call after it returned: its span's attributes, its evaluation job, and the span's end.

The request path captures the call's texts (plain strings, nothing mutable from the host) and hands them
over with the live span and the moment the call returned. Everything else happens here, on the worker's
dispatcher thread: exporting the texts (capping, secret scrubbing, the user's ``redact`` hook), the SDK's
attribute validation, the queue-or-drop decision, and ``span.end(end_time=...)`` with the exporters' work
behind it. The span's timing is the call's own; only its export moves off the host's thread. When the worker
cannot take the call (its inbox is full, or it is shutting down) the host's thread runs ``finish`` itself,
which is slower but bounded.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

from opentelemetry.trace import Span

from faithtrace import _internal
from faithtrace._capture import Captured
from faithtrace._telemetry import names as n
from faithtrace._telemetry import spans
from faithtrace._telemetry.metrics import FunctionStats, count_outcome
from faithtrace._worker import Job

if TYPE_CHECKING:
    from faithtrace._runtime import Runtime


class Returned(NamedTuple):
    """A sampled-in call that returned, as the request path hands it over (a tuple: cheap to build)."""

    span: Span  # started, not ended
    end_ns: int  # wall clock when the call returned: the span's end time
    ended_at: float  # the same moment, monotonic
    stats: FunctionStats
    captured: Captured | None  # None when capture failed
    problem: str  # why capture failed ("" when it did not)


def finish(rt: Runtime, item: Returned, offer: Callable[[Job], bool]) -> None:
    """Attributes, job (queued by ``offer``, or dropped), end. Never raises, except for faithtrace bugs under
    pytest."""
    try:
        _finish(rt, item, offer)
    except Exception as exc:
        _internal.internal_error("finishing a span", exc)
    finally:
        item.span.end(end_time=item.end_ns)


def _finish(rt: Runtime, item: Returned, offer: Callable[[Job], bool]) -> None:
    span, stats, captured = item.span, item.stats, item.captured
    if captured is None:
        _not_scored(span, stats, item.problem)
        return
    recording = span.is_recording()
    attrs = spans.rag_attributes(captured, stats.name, rt.capture) if recording else {}
    if captured.answer is None:
        problem = "no answer found in the return value: pass answer="
    elif captured.contexts is None:
        problem = "no retrieved contexts found: pass contexts="
    else:
        problem = ""
    if problem:
        if recording:
            span.set_attributes(attrs)
        _not_scored(span, stats, problem)
        return
    assert captured.answer is not None
    assert captured.contexts is not None
    job = Job(
        span_context=span.get_span_context(),
        stats=stats,
        query=captured.query,
        contexts=tuple(captured.contexts),
        answer=captured.answer,
        enqueued_ns=item.end_ns,
        enqueued_at=item.ended_at,
    )
    if offer(job):
        attrs[n.SAMPLED] = True
    else:
        count_outcome(stats, n.OUTCOME_DROPPED)
        attrs[n.SAMPLED] = False
        attrs[n.SAMPLING_REASON] = "queue_full"
    if recording:
        span.set_attributes(attrs)


def _not_scored(span: Span, stats: FunctionStats, problem: str) -> None:
    count_outcome(stats, n.OUTCOME_CAPTURE_ERROR)
    span.set_attributes({n.CAPTURE_ERROR: problem[:300], n.SAMPLED: False, n.FUNCTION: stats.name})
    _internal.warn_rate_limited(
        "capture:" + stats.name,
        "faithtrace: %s is not scored: %s (your code is unaffected)",
        stats.name,
        problem,
    )
