"""Streaming answers: sync and async generators wrapped so that the answer is the joined chunks.

The span covers the stream from its first chunk to its end. It is current only while the app's generator runs
(never across a ``yield``, where the consumer's code runs), so context never leaks. A stream that ends or is
closed early is scored on what it produced; one that raised is not.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Generator
from typing import TYPE_CHECKING, Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span

from faithtrace._capture import to_text
from faithtrace._pending import PendingSpan

if TYPE_CHECKING:
    from faithtrace._runtime import Runtime
    from faithtrace._traced import Traced


class _Stream:
    __slots__ = ("args", "ctx", "instance", "kwargs", "limit", "parts", "pending", "rt", "size", "traced")

    def __init__(self, rt: Runtime, traced: Traced, instance: Any, args: Any, kwargs: Any) -> None:
        self.rt = rt
        self.traced = traced
        self.instance, self.args, self.kwargs = instance, args, kwargs
        span: Span = rt.tracer.start_span(traced.name)
        self.pending = PendingSpan(span, traced.stats)
        self.ctx = trace.set_span_in_context(span)
        self.parts: list[str] = []
        self.size = 0
        # Keep only what scoring can use: a long stream must not grow memory without bound.
        self.limit = rt.settings.scoring.max_answer_chars + 1

    def add(self, chunk: Any) -> None:
        if self.size >= self.limit:
            return
        text = to_text(chunk)
        if text:
            self.parts.append(text)
            self.size += len(text)

    def done(self) -> None:
        traced = self.traced
        call = traced.call(self.instance, self.args, self.kwargs, "".join(self.parts))
        traced.returned(self.rt, self.pending, call)  # the span ends now or on the worker
        traced.stats.calls += 1

    def failed(self, exc: BaseException) -> None:
        self.pending.fail(exc)


def traced_gen(
    rt: Runtime, traced: Traced, inner: Generator[Any, Any, Any], instance: Any, args: Any, kwargs: Any
) -> Generator[Any, Any, Any]:
    stream: _Stream | None = None
    to_send: Any = None
    to_throw: BaseException | None = None
    while True:
        if stream is None:
            stream = _Stream(rt, traced, instance, args, kwargs)
        token = otel_context.attach(stream.ctx)
        try:
            if to_throw is not None:
                exc, to_throw = to_throw, None
                chunk = inner.throw(exc)
            else:
                chunk = inner.send(to_send)
        except StopIteration as stop:
            stream.done()
            return stop.value
        except BaseException as exc:
            stream.failed(exc)
            raise
        finally:
            otel_context.detach(token)
        stream.add(chunk)
        try:
            to_send = yield chunk
        except GeneratorExit:
            # Closed early (break, close(), garbage collection): score what was streamed so far.
            token = otel_context.attach(stream.ctx)
            try:
                inner.close()
            finally:
                otel_context.detach(token)
            stream.done()
            raise
        except BaseException as exc:
            to_throw = exc


async def traced_async_gen(
    rt: Runtime, traced: Traced, inner: AsyncGenerator[Any, Any], instance: Any, args: Any, kwargs: Any
) -> AsyncGenerator[Any, Any]:
    stream: _Stream | None = None
    to_send: Any = None
    to_throw: BaseException | None = None
    while True:
        if stream is None:
            stream = _Stream(rt, traced, instance, args, kwargs)
        token = otel_context.attach(stream.ctx)
        try:
            if to_throw is not None:
                exc, to_throw = to_throw, None
                chunk = await inner.athrow(exc)
            else:
                chunk = await inner.asend(to_send)
        except StopAsyncIteration:
            stream.done()
            return
        except BaseException as exc:
            stream.failed(exc)
            raise
        finally:
            otel_context.detach(token)
        stream.add(chunk)
        try:
            to_send = yield chunk
        except GeneratorExit:
            token = otel_context.attach(stream.ctx)
            try:
                await inner.aclose()
            finally:
                otel_context.detach(token)
            stream.done()
            raise
        except BaseException as exc:
            to_throw = exc
