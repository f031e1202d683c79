"""``@trace_faithfulness``: the request path. Everything here runs inside the host's call, so it stays small.

Per call: read the runtime, ask the sampler (O(1)); a sampled-out call then runs bare apart from one integer
increment. A sampled-in call runs inside a span; on return, its texts are captured and handed to the worker
with the still-open span, without blocking: the worker sets the attributes, ends the span at the call's own
end time and queues the evaluation. The span's one owner is its ``PendingSpan`` (``_runtime.pending_span``).
The host's result and exceptions pass through untouched, and a call that raised is not scored
(``PendingSpan.fail``). Starting the span runs the app's span processors: when one raises, the call runs
untraced (``host_spans.start_failed`` records it). No host code runs inside one of our ``except`` blocks: the
host's own exceptions must not come out chained to one of ours.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar, cast, overload

import wrapt
from opentelemetry.context import attach, detach
from opentelemetry.trace import set_span_in_context

from faithtrace._common import safety
from faithtrace._common.errors import ConfigError
from faithtrace._request.capture import CaptureSpec, Spec
from faithtrace._request.traced_function import Traced
from faithtrace._runtime import lifecycle
from faithtrace._runtime.pending_span import PendingSpan
from faithtrace._runtime.runtime import Runtime
from faithtrace._telemetry import host_spans
from faithtrace._telemetry.records import FunctionStats

F = TypeVar("F", bound=Callable[..., Any])


def _is_async(fn: Any) -> bool:
    if isinstance(fn, classmethod | staticmethod):
        fn = fn.__func__
    return inspect.iscoroutinefunction(fn)


def _sampling_failed(exc: Exception) -> int:
    safety.internal_error("sampling", exc)
    return -1


def _decide() -> tuple[Runtime, int]:
    """The sampling decision: 0 to trace and score, a ``Reason`` > 0 to skip, -1 when disabled."""
    try:
        rt = lifecycle.RUNTIME or lifecycle.current()
        return rt, (rt.sampler.decide() if rt.enabled else -1)
    except Exception as exc:
        return cast(Runtime, None), _sampling_failed(exc)  # -1: the call runs bare, the runtime unread


def _count_skipped(stats: FunctionStats, reason: int) -> None:
    # Plain integers read later by an observable counter: an OTel counter add would cost more than the call.
    if reason > 0:
        stats.sampled_out[reason] += 1
        stats.calls += 1


def _make_wrapper(func: Any, traced: Traced) -> Any:
    raw = func.__func__ if isinstance(func, classmethod | staticmethod) else func
    stats = traced.stats
    name = traced.name

    if inspect.isasyncgenfunction(raw) or inspect.isgeneratorfunction(raw):
        # Streams are traced by a wrapping generator that scores the joined chunks when the stream ends.
        trace_stream: Callable[..., Any] = (
            traced.async_generator if inspect.isasyncgenfunction(raw) else traced.generator
        )

        def stream_wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
            rt, reason = _decide()
            if reason:
                _count_skipped(stats, reason)
                return wrapped(*args, **kwargs)
            return trace_stream(rt, wrapped(*args, **kwargs), instance, args, kwargs)

        # wrapt's proxy, not a closure: it still reads as a (async) generator function to inspect.
        return wrapt.FunctionWrapper(func, stream_wrapper)

    if _is_async(func):

        async def async_wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
            rt, reason = _decide()
            if reason:
                result = await wrapped(*args, **kwargs)
                _count_skipped(stats, reason)
                return result
            try:  # inline, not host_spans.start_span(): one call less on every sampled-in call
                span = rt.tracer.start_span(name)
            except Exception as exc:
                span = host_spans.start_failed(rt.tracer, name, stats, exc)
            if span is None:  # the app's tracing raised (recorded, counted): the call runs untraced
                result = await wrapped(*args, **kwargs)
                stats.calls += 1
                return result
            pending = PendingSpan(span, stats)
            token = attach(set_span_in_context(span))
            try:
                result = await wrapped(*args, **kwargs)
            except BaseException as exc:
                pending.fail(exc)
                raise
            finally:
                detach(token)
            stats.calls += 1
            return traced.returned(rt, pending, traced.call(instance, args, kwargs, result))

        return _wrap(func, async_wrapper, is_async=True)

    def sync_wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        rt, reason = _decide()
        if reason:  # not scored: the bare call, plus two integer increments (-1: disabled, not even those)
            result = wrapped(*args, **kwargs)
            _count_skipped(stats, reason)
            return result
        # start_span + attach rather than start_as_current_span: the same span and context, without the
        # context manager's generator machinery, and the span stays open for the worker to end.
        try:  # inline, not host_spans.start_span(): one call less on every sampled-in call
            span = rt.tracer.start_span(name)
        except Exception as exc:
            span = host_spans.start_failed(rt.tracer, name, stats, exc)
        if span is None:  # the app's tracing raised (recorded, counted): the call runs untraced
            result = wrapped(*args, **kwargs)
            stats.calls += 1
            return result
        pending = PendingSpan(span, stats)
        token = attach(set_span_in_context(span))
        try:
            result = wrapped(*args, **kwargs)
        except BaseException as exc:
            pending.fail(exc)
            raise
        finally:
            detach(token)
        stats.calls += 1
        return traced.returned(rt, pending, traced.call(instance, args, kwargs, result))

    return _wrap(func, sync_wrapper, is_async=False)


def _wrap(func: Any, wrapper: Callable[[Any, Any, Any, Any], Any], *, is_async: bool) -> Any:
    """``wrapper(wrapped, instance, args, kwargs)`` around ``func``, in the cheapest form that binds right.

    A ``classmethod``/``staticmethod`` object (the decorator outside it) needs wrapt's descriptor binding. A
    plain function, methods included, gets a closure: defined in a class body it is bound like any function,
    and self arrives in ``args``, where the signature the capture reads lists it. wrapt's FunctionWrapper
    costs about 0.5 µs a call more than a closure, most of what the sampled-out path would cost in all.
    """
    if isinstance(func, classmethod | staticmethod):
        return wrapt.FunctionWrapper(cast(Any, func), wrapper)
    if is_async:

        @functools.wraps(func)
        async def async_function(*args: Any, **kwargs: Any) -> Any:
            return await wrapper(func, None, args, kwargs)

        return async_function

    @functools.wraps(func)
    def function(*args: Any, **kwargs: Any) -> Any:
        return wrapper(func, None, args, kwargs)

    return function


@overload
def trace_faithfulness(wrapped: F, /) -> F: ...
@overload
def trace_faithfulness(
    wrapped: None = None,
    /,
    *,
    query: Spec = None,
    contexts: Spec = None,
    answer: Spec = None,
    name: str | None = None,
) -> Callable[[F], F]: ...
def trace_faithfulness(
    wrapped: Any = None,
    /,
    *,
    query: Spec = None,
    contexts: Spec = None,
    answer: Spec = None,
    name: str | None = None,
) -> Any:
    """Trace a RAG answer function and score the faithfulness of its answers in the background.

    Works on sync and async functions, methods, classmethods and staticmethods (put it *outside*
    ``@classmethod``/``@staticmethod``), and on sync and async generators that stream the answer (the answer
    is the joined chunks, scored when the stream ends or is closed). A call that *returns* a stream (a
    generator, or LlamaIndex's ``StreamingResponse``) gives the caller a wrapper yielding the same chunks, and
    is scored when that stream ends; faithtrace never reads a stream or ``str()``s a host object itself.

    Args:
        query: where the user's question is: an argument name, an attribute/key path on the return value
            (``"request.text"``), or a callable ``(result)`` / ``(arguments, result)``. By default an argument
            named ``query``, ``question`` or ``q``, else the return value's ``query``/``question``.
        contexts: the retrieved documents, found the same way. By default an argument named ``contexts``,
            ``context``, ``documents`` or ``docs``, else the same attribute/key on the return value, or its
            ``source_nodes`` (LlamaIndex) / ``source_documents`` (LangChain). Strings, lists of strings,
            dicts, LlamaIndex nodes and objects with a text field (``text``, ``content``, ``page_content``)
            are understood; anything else is a capture error, never its repr.
        answer: a path on the return value or a callable; by default the return value itself when it is a
            string, else its ``answer``/``text``/``content``/``response``/``result``/``output``.
        name: the span name and the ``faithtrace.function`` metric attribute; defaults to the qualified name.
    """
    if wrapped is None:

        def decorate(func: F) -> F:
            decorated: F = _decorate(func, query=query, contexts=contexts, answer=answer, name=name)
            return decorated

        return decorate
    return _decorate(wrapped, query=query, contexts=contexts, answer=answer, name=name)


def _decorate(wrapped: Any, *, query: Spec, contexts: Spec, answer: Spec, name: str | None) -> Any:
    if name is not None and (not isinstance(name, str) or not name.strip()):
        raise ConfigError(f"name= must be a non-empty string, got {name!r}")
    raw = wrapped.__func__ if isinstance(wrapped, classmethod | staticmethod) else wrapped
    if not callable(raw):
        raise ConfigError(f"@trace_faithfulness needs a function, got {type(wrapped).__name__}")
    streaming = inspect.isgeneratorfunction(raw) or inspect.isasyncgenfunction(raw)
    spec = CaptureSpec(raw, query=query, contexts=contexts, answer=answer, streaming=streaming)
    qualname = str(name or getattr(raw, "__qualname__", None) or getattr(raw, "__name__", "function"))
    traced = Traced(qualname, spec, isinstance(wrapped, staticmethod))
    return _make_wrapper(wrapped, traced)
