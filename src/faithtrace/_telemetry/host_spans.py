"""Calls into the app's tracing, guarded: the spans faithtrace starts belong to the app's tracer provider.

Starting and ending a span runs the app's span processors (``on_start``, ``_on_ending``, ``on_end``), and the
OpenTelemetry SDK calls them unguarded: one that raises makes ``start_span`` or ``end`` raise. A provider that
is not the SDK's may raise from any span method. What they raise is the host's error, not the host's call's
and not faithtrace's bug: it is recorded by ``safety.host_error`` (counted by where it raised, one
rate-limited warning naming the processor) and faithtrace goes on without that span, or with what it took.

* ``start_span`` / ``end_span``: the request path's two calls, plain functions (no object per call).
* ``GuardedTracer`` / ``GuardedSpan``: the worker's side (the RAG span's attributes and end, the evaluation
  span, the judge call spans, the retriever span), every method guarded.
* ``record_failure``: the host's exception on its failed call's span, rendered without trusting it (its
  ``__str__`` may raise, and the SDK's ``record_exception`` would then raise too).
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, TypeVar

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import (
    INVALID_SPAN_CONTEXT,
    Link,
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
)
from opentelemetry.util import types

from faithtrace._common import safety
from faithtrace._common.secrets import scrub_secrets
from faithtrace._telemetry import names as n
from faithtrace._telemetry.metrics import count_outcome
from faithtrace._telemetry.records import FunctionStats

T = TypeVar("T")

_MAX_MESSAGE: Final = 2000
_MAX_STACKTRACE: Final = 8000
_MAX_FRAMES: Final = 64
# The SDK's processors that only fan a call out to the app's processors: never the culprit themselves.
_FAN_OUT: Final = ("SynchronousMultiSpanProcessor", "ConcurrentMultiSpanProcessor")
_HOOKS: Final = ("on_start", "_on_ending", "on_end")


def _culprit(exc: BaseException, operation: str, owner: object) -> tuple[str, str]:
    """Where the app's tracing raised (``span_processor.on_end``, ``span.set_attributes``) and who raised it
    (the span processor's class when the traceback passes through one, else the provider's object)."""
    from opentelemetry.sdk.trace import SpanProcessor

    hook, processor = "", ""
    tb = exc.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        try:
            self_ = tb.tb_frame.f_locals.get("self")
            if isinstance(self_, SpanProcessor):
                kind = type(self_).__qualname__
                if kind in _FAN_OUT:
                    hook = code.co_name if code.co_name in _HOOKS else hook
                elif not processor:  # the outermost of the app's: a processor may wrap another
                    processor = kind
                    hook = hook or code.co_name
        except Exception:  # a hostile object in a frame: the traceback still names the rest
            pass
        tb = tb.tb_next
    if processor:
        return f"span_processor.{hook.lstrip('_') if hook in _HOOKS else hook}", f"span processor {processor}"
    prefix = "tracer" if operation == "start_span" else "span"
    return f"{prefix}.{operation}", f"the app's tracing ({_type_name(owner)}.{operation})"


def _type_name(value: object) -> str:
    try:
        name = type(value).__qualname__
        return name if isinstance(name, str) else "object"
    except Exception:
        return "object"


def _raised_by_us(exc: BaseException) -> bool:
    """The exception was raised in faithtrace's code or in the OpenTelemetry SDK's own (not in a processor's,
    nor in a provider or span of the app's making): the likeliest cause is faithtrace's use of the SDK."""
    tb = exc.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    module = tb.tb_frame.f_globals.get("__name__")
    return isinstance(module, str) and module.startswith(("faithtrace.", "opentelemetry."))


def _failed(operation: str, owner: object, exc: Exception, consequence: str) -> str:
    """Record what the tracing raised; the outcome of the call it was for: ``processor_error`` when it was
    the app's, ``internal_error`` when it was faithtrace's (strict mode: raises)."""
    where, culprit = _culprit(exc, operation, owner)
    if not where.startswith("span_processor.") and _raised_by_us(exc):
        safety.internal_error(f"calling the tracer ({operation})", exc)
        return n.OUTCOME_INTERNAL_ERROR
    safety.host_error(where, culprit, exc, consequence)
    return n.OUTCOME_PROCESSOR_ERROR


# --- the request path ---------------------------------------------------------------------------------------
def start_span(tracer: trace.Tracer, name: str, stats: FunctionStats) -> trace.Span | None:
    """``tracer.start_span(name)``, or None when starting it raised: the call then runs untraced, and is
    counted with the outcome that says whose fault that was (``processor_error``: the app's tracing)."""
    try:
        return tracer.start_span(name)
    except Exception as exc:
        return start_failed(tracer, name, stats, exc)


def start_failed(tracer: trace.Tracer, name: str, stats: FunctionStats, exc: Exception) -> trace.Span | None:
    """Starting the call's span raised ``exc``: recorded, and the call counted with its outcome. No span
    (None): the call runs untraced."""
    outcome = _failed("start_span", tracer, exc, f"the call of {name} runs untraced and is not scored")
    count_outcome(stats, outcome)
    return None


def end_span(span: trace.Span, end_time: int | None = None) -> None:
    """``span.end(end_time)``; what the app's span processors raise is recorded, never passed on."""
    try:
        span.end(end_time=end_time)
    except Exception as exc:
        _failed("end", span, exc, "the span may not reach the app's other processors and exporters")


def span_context(span: trace.Span) -> SpanContext:
    """``span.get_span_context()``; the invalid context when the app's span raised (recorded)."""
    try:
        return span.get_span_context()
    except Exception as exc:
        _failed("get_span_context", span, exc, "the call is scored without its trace's sampling decision")
        return INVALID_SPAN_CONTEXT


def _call(operation: str, owner: object, func: Callable[[], T], fallback: T) -> T:
    try:
        return func()
    except Exception as exc:
        _failed(operation, owner, exc, "faithtrace's telemetry on that span may be incomplete")
        return fallback


def record_failure(span: trace.Span, exc: BaseException) -> None:
    """The host's exception as OpenTelemetry records one (an ``exception`` event, status ERROR), with secrets
    scrubbed from its message and stack trace (exception messages often quote connection strings and keys).
    Never raises: an exception whose ``__str__`` raises is recorded all the same."""
    message = scrub_secrets(safety.describe(exc).partition(": ")[2])[:_MAX_MESSAGE]
    kind = _type_name(exc)
    try:
        module = type(exc).__module__
        if isinstance(module, str) and module != "builtins":
            kind = f"{module}.{kind}"
    except Exception:
        pass
    try:
        # The innermost frames only: an exception instance re-raised again and again keeps every traceback
        # it went through, and formatting a frame costs tens of microseconds.
        stacktrace = "".join(traceback.format_exception(exc, limit=-_MAX_FRAMES))
    except Exception:  # a hostile __notes__ or __cause__ chain: the type and message still go
        stacktrace = f"{kind}: {message}\n"
    attributes: dict[str, types.AttributeValue] = {
        n.EXCEPTION_TYPE: kind,
        n.EXCEPTION_MESSAGE: message,
        n.EXCEPTION_STACKTRACE: scrub_secrets(stacktrace)[-_MAX_STACKTRACE:],
        n.EXCEPTION_ESCAPED: "True",  # it leaves the span: the host's caller receives it
    }
    short = _type_name(exc)
    _call("add_event", span, lambda: span.add_event(n.EXCEPTION_EVENT, attributes), None)
    status = Status(StatusCode.ERROR, f"{short}: {message}" if message else short)
    _call("set_status", span, lambda: span.set_status(status), None)


# --- the worker's side --------------------------------------------------------------------------------------
class GuardedSpan(trace.Span):
    """A span of the app's provider with every method guarded (one small object per span, off the request
    path). An ended span is not ended again: the SDK would log a warning on the app's logger."""

    def __init__(self, span: trace.Span) -> None:
        self._span = span
        self._ended = False

    @property
    def wrapped(self) -> trace.Span:
        return self._span

    def end(self, end_time: int | None = None) -> None:
        if not self._ended:
            self._ended = True
            end_span(self._span, end_time)

    def get_span_context(self) -> SpanContext:
        return _call("get_span_context", self._span, self._span.get_span_context, INVALID_SPAN_CONTEXT)

    def set_attributes(self, attributes: Mapping[str, types.AnyValue]) -> None:
        _call("set_attributes", self._span, lambda: self._span.set_attributes(attributes), None)

    def set_attribute(self, key: str, value: types.AnyValue) -> None:
        _call("set_attribute", self._span, lambda: self._span.set_attribute(key, value), None)

    def add_event(self, name: str, attributes: types.Attributes = None, timestamp: int | None = None) -> None:
        _call("add_event", self._span, lambda: self._span.add_event(name, attributes, timestamp), None)

    def add_link(self, context: SpanContext, attributes: types.Attributes = None) -> None:
        _call("add_link", self._span, lambda: self._span.add_link(context, attributes), None)

    def update_name(self, name: str) -> None:
        _call("update_name", self._span, lambda: self._span.update_name(name), None)

    def is_recording(self) -> bool:
        return not self._ended and _call("is_recording", self._span, self._span.is_recording, False)

    def set_status(self, status: Status | StatusCode, description: str | None = None) -> None:
        _call("set_status", self._span, lambda: self._span.set_status(status, description), None)

    def record_exception(
        self,
        exception: BaseException,
        attributes: types.Attributes = None,
        timestamp: int | None = None,
        escaped: bool = False,
    ) -> None:
        record_failure(self._span, exception)


class GuardedTracer(trace.Tracer):
    """The app's tracer for the worker's spans: starting one never raises (when the app's tracing does, the
    span's children attach to its parent instead), and the span it gives is a ``GuardedSpan``."""

    def __init__(self, tracer: trace.Tracer) -> None:
        self._tracer = tracer

    def start_span(
        self,
        name: str,
        context: otel_context.Context | None = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: types.Attributes = None,
        links: Sequence[Link] | None = None,
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
    ) -> trace.Span:
        try:
            span = self._tracer.start_span(
                name, context, kind, attributes, links, start_time, record_exception, set_status_on_exception
            )
        except Exception as exc:
            _failed("start_span", self._tracer, exc, f"faithtrace's span {name!r} is not recorded")
            parent = trace.get_current_span(context)
            return NonRecordingSpan(
                _call("get_span_context", parent, parent.get_span_context, INVALID_SPAN_CONTEXT)
            )
        return GuardedSpan(span)

    def start_as_current_span(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """The app's tracer's own, unguarded: the worker never makes a span current (the ABC requires it)."""
        return self._tracer.start_as_current_span(name, *args, **kwargs)


def guarded(span: trace.Span) -> GuardedSpan:
    return span if isinstance(span, GuardedSpan) else GuardedSpan(span)
