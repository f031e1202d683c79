"""What one decorated function needs per call, and the hand-over of a returned call to the worker.

Shared by the plain wrappers (``decorator``) and the generator wrappers (``streams``). A call that returns
a stream is handed to ``streams.watch``; ``streams`` refers back to this module for types only.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, Generator
from functools import partial
from typing import TYPE_CHECKING, Any

from faithtrace._common import safety
from faithtrace._request import chat_streams, streams
from faithtrace._request.capture import Call, CaptureError, CaptureSpec
from faithtrace._runtime.pending_span import PendingSpan
from faithtrace._runtime.sampling import PARENT
from faithtrace._telemetry import host_spans
from faithtrace._telemetry.metrics import register
from faithtrace._telemetry.records import Captured, FunctionStats

if TYPE_CHECKING:
    from faithtrace._runtime.runtime import Runtime


class Traced:
    """Computed once at decoration time: the span name, the capture spec and the function's counters."""

    __slots__ = ("is_static", "name", "spec", "stats")

    def __init__(self, name: str, spec: CaptureSpec, is_static: bool) -> None:
        self.name = name
        self.spec = spec
        self.stats = register(FunctionStats(name))
        self.is_static = is_static

    def call(self, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any], result: Any) -> Call:
        offset = 1 if instance is not None and not self.is_static else 0
        return Call(instance, args, kwargs, offset, result)

    def returned(self, rt: Runtime, pending: PendingSpan, call: Call) -> Any:
        """After a successful call: capture its texts and hand the span over to be finished and scored.

        Returns what the caller gets: the call's own result, unless its answer is a stream (a generator, or
        LlamaIndex's ``StreamingResponse.response_gen``), which is replaced by a wrapper yielding the same
        chunks and scoring them when the stream ends. A LlamaIndex chat engine's streaming response is
        returned untouched and scored when its own writer has finished (``chat_streams``). Nothing here
        reads a stream or calls ``str()`` on a host object. Only what must read the host's objects happens
        here (capture yields plain strings); attributes, scrubbing, the span's end and its export run on the
        worker (``PendingSpan.finish``). What the host's objects raise while read is the call's
        ``input_error``, named by field.
        Never raises into the host, except for faithtrace bugs in strict mode.
        """
        pending.end_ns = time.time_ns()
        result = call.result
        try:
            ctx = host_spans.span_context(pending.span)
            if ctx.is_valid and not ctx.trace_flags.sampled:
                # The app's own sampler dropped our span: the trace will not exist, so neither will its score.
                # (An invalid context means no SDK at all: metrics still count, so scoring goes ahead.)
                self.stats.sampled_out[PARENT] += 1
                pending.drop()
                return result
            try:
                writer = chat_streams.writer_of(result) if self.spec.default_answer else None
                if writer is not None:
                    query, contexts = self.spec.capture_inputs(call)  # the source nodes are there already
                    chat_streams.watch(partial(self.handoff, rt), pending, query, contexts, result, writer)
                    return result
                slot = self.spec.stream_slot(result)
                if slot is not None:
                    return self._watch(rt, pending, call, *slot)
                captured: Captured | None = self.spec.capture(call)
                problem: CaptureError | None = None
            except CaptureError as exc:
                captured, problem = None, exc
        except Exception as exc:
            pending.broken("capture", exc)  # raises in strict mode
            return result
        self.handoff(rt, pending, captured, problem)
        return result

    def _watch(self, rt: Runtime, pending: PendingSpan, call: Call, stream: Any, put: Any) -> Any:
        """Put a watching wrapper in place of the answer's stream; the span ends when the stream does."""
        query, contexts = self.spec.capture_inputs(call)
        limit = rt.settings.scoring.max_answer_chars
        wrapper, watched = streams.watch(partial(self.handoff, rt), pending, query, contexts, limit, stream)
        try:
            return put(wrapper)
        except CaptureError as exc:  # the stream cannot be replaced: leave it alone, unread
            watched.finished = True
            self.handoff(rt, pending, None, exc)
            return call.result

    def generator(
        self, rt: Runtime, inner: Generator[Any, Any, Any], instance: Any, args: Any, kwargs: Any
    ) -> Generator[Any, Any, Any]:
        """A decorated generator function's stream: traced from its first chunk to its end."""
        return streams.relay(lambda: self._generator_stream(rt, instance, args, kwargs), inner)

    def async_generator(
        self, rt: Runtime, inner: AsyncGenerator[Any, Any], instance: Any, args: Any, kwargs: Any
    ) -> AsyncGenerator[Any, Any]:
        """A decorated async generator function's stream: traced from its first chunk to its end."""
        return streams.async_relay(lambda: self._generator_stream(rt, instance, args, kwargs), inner)

    def _generator_stream(self, rt: Runtime, instance: Any, args: Any, kwargs: Any) -> streams.Relayed:
        span = host_spans.start_span(rt.tracer, self.name, self.stats)
        if span is None:  # the app's tracing raised (recorded, counted): the stream passes through untraced
            return streams.Untraced(self.stats)
        call = self.call(instance, args, kwargs, None)
        limit = rt.settings.scoring.max_answer_chars
        return streams.generator_stream(
            partial(self.handoff, rt), span, self.stats, limit, lambda: self.spec.capture_inputs(call)
        )

    def handoff(
        self, rt: Runtime, pending: PendingSpan, captured: Captured | None, problem: CaptureError | None
    ) -> None:
        """Hand a finished call (``pending.end_ns`` set) and its texts (or why it has none) to the worker,
        or end its span here when that fails."""
        try:
            pending.captured = None if captured is None else self._bounded(rt, captured)
            if problem is not None:
                pending.problem, pending.field = problem.message, problem.field
                pending.outcome = problem.outcome
            pending.ended_at = time.monotonic()
        except Exception as exc:
            pending.broken("handing over a call", exc)  # raises in strict mode
            return
        with safety.handle_internal_errors("handing over a call"):
            # Once handed over the span is the worker's (or finish()'s, which ends it whatever happens).
            rt.handoff(pending)

    @staticmethod
    def _bounded(rt: Runtime, captured: Captured) -> Captured:
        """The texts cut to what scoring reads: what waits for the worker must hold bounded memory, whatever
        was retrieved. (Slicing a string that fits returns the same object: no copy in the common case.)"""
        scoring = rt.settings.scoring
        if captured.query is not None:
            captured.query = captured.query[: scoring.max_answer_chars]
        if captured.answer is not None:
            captured.answer = captured.answer[: scoring.max_answer_chars + 1]
        if captured.contexts is not None:
            captured.contexts = _bounded_contexts(captured.contexts, scoring.max_context_chars + 1)
        return captured


def _bounded_contexts(contexts: list[str], max_chars: int) -> list[str]:
    """Contexts cut to ``max_chars`` in total: the queue must hold bounded memory, whatever was retrieved."""
    out: list[str] = []
    budget = max_chars
    for text in contexts:
        if budget <= 0:
            break
        out.append(text[:budget])
        budget -= len(text)
    return out
