"""Streamed answers: the host's generators wrapped so that every chunk passes through untouched and the answer
is scored, as the joined chunks, when the stream ends.

Two shapes:

* a decorated generator function (``generator_stream``, through ``relay``/``async_relay``): the span covers
  the stream from its first chunk to its end, and is current only while the app's generator runs (never
  across a ``yield``, where the consumer's code runs), so context never leaks;
* a call that *returns* a stream (a generator, or LlamaIndex's ``StreamingResponse.response_gen``;
  ``watch``): the call's span stays open until the stream ends, and the stream is
  replaced by a wrapper that yields the same chunks. Nothing reads the stream but its consumer.

A stream that ends or is closed early is scored on what it produced; one that raised is not; one dropped
unread is a capture error; one with a chunk that raised when read as text is the answer's input error (a
part of the answer is missing: what is left is not scored). Either way its span goes to the ``Handoff`` it
was given (the traced function's, with its runtime bound): this module knows nothing of the traced function
or the runtime.

The relays run inside the host's iteration: nothing of faithtrace's may raise there. Reading a chunk, ending
the stream and handing it over are guarded, and what the host's own objects raise is recorded as theirs.
"""

from __future__ import annotations

import inspect
import time
import weakref
from collections.abc import AsyncGenerator, Callable, Generator, Mapping
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span

from faithtrace._common import safety
from faithtrace._request.capture import CaptureError, InputError, chunk_text, to_texts
from faithtrace._runtime.pending_span import PendingSpan
from faithtrace._telemetry.records import Captured, FunctionStats

Handoff = Callable[[PendingSpan, Captured | None, CaptureError | None], None]
"""Hands a finished call (``pending.end_ns`` set) and its texts, or why it has none, over to be scored."""
Inputs = Callable[[], tuple[str | None, list[str] | None]]
"""Reads a call's query and contexts (raises ``CaptureError``)."""

# Keys under which LangChain's retrieval chains stream their retrieved documents.
_CHUNK_CONTEXT_KEYS = ("context", "source_documents")


class Stream:
    """One stream's state: the text seen so far (bounded) and how to finish the span when it ends."""

    __slots__ = (
        "chunk_contexts", "contexts", "counted", "ctx", "finished", "handoff", "inputs", "limit", "parts",
        "pending", "query", "size", "unreadable", "untexted",
    )  # fmt: skip

    def __init__(
        self, handoff: Handoff, pending: PendingSpan, max_answer_chars: int, inputs: Inputs | None
    ) -> None:
        self.handoff = handoff
        self.pending = pending
        # A generator function's call: its query and contexts are read from its arguments when it ends.
        self.inputs = inputs
        # A returned stream's query and contexts, read when the call returned: holding the call's result
        # instead would keep the wrapper alive from its own finalizer (the result holds the wrapper).
        self.query: str | None = None
        self.contexts: list[str] | None = None
        self.chunk_contexts: list[str] | None = None
        self.ctx: Any = None  # the context current while the host's generator runs (None: leave it alone)
        self.counted: FunctionStats | None = None  # a decorated generator's call is counted when it ends
        self.parts: list[str] = []
        self.size = 0
        self.untexted = 0
        self.unreadable: CaptureError | None = None  # the first chunk that raised when read
        self.finished = False
        # Keep only what scoring can use: a long stream must not grow memory without bound.
        self.limit = max_answer_chars + 1

    def add(self, chunk: Any) -> None:
        """Note a chunk's text. Never raises: what the chunk raises when read is the answer's input error."""
        if self.unreadable is not None:
            return
        try:
            if isinstance(chunk, Mapping) and self.chunk_contexts is None:
                for key in _CHUNK_CONTEXT_KEYS:
                    if key in chunk:
                        self.chunk_contexts = to_texts(chunk[key])
                        break
            if self.size >= self.limit:
                return
            text = chunk_text(chunk)
            if text is None:
                self.untexted += 1
            elif text:
                self.parts.append(text)
                self.size += len(text)
        except CaptureError:
            self.untexted += 1
        except Exception as exc:
            self.unreadable = InputError.reading("answer", exc)

    def done(self) -> None:
        """The stream ended (or was closed): capture and hand the span over, once. Never raises (but for
        faithtrace's own bugs in strict mode)."""
        if self.finished:
            return
        self.finished = True
        pending = self.pending
        pending.end_ns = time.time_ns()
        try:
            try:
                if self.unreadable is not None:
                    raise self.unreadable
                if not self.parts and self.untexted:
                    raise CaptureError(
                        f"none of the stream's {self.untexted} chunk(s) had a text field", "answer"
                    )
                query, contexts = self.query, self.contexts
                if self.inputs is not None:
                    query, contexts = self.inputs()
                if contexts is None:
                    contexts = self.chunk_contexts
                captured: Captured | None = Captured(
                    query=query, contexts=contexts, answer="".join(self.parts)
                )
                problem: CaptureError | None = None
            except CaptureError as exc:
                captured, problem = None, exc
        except Exception as exc:
            pending.broken("capturing a stream", exc)  # raises in strict mode
            return
        self.handoff(pending, captured, problem)

    def ended(self) -> None:
        self.done()
        if self.counted is not None:
            self.counted.calls += 1

    def failed(self, exc: BaseException) -> None:
        self.finished = True
        self.pending.fail(exc)

    def abandoned(self) -> None:
        """The wrapper was garbage-collected before anyone read it: nothing to score, but the span ends. Runs
        in a finalizer, where what it raised would be printed on the host's stderr: never raises."""
        if not self.finished:
            self.finished = True
            self.pending.end_ns = time.time_ns()
            with safety.handle_internal_errors("ending an unread stream's span"):
                self.handoff(self.pending, None, CaptureError("the returned stream was never read", "answer"))


class Untraced:
    """A decorated generator's stream whose span could not start (the app's tracing raised, recorded):
    passed through untouched, and its call counted when it ends."""

    __slots__ = ("counted",)
    ctx: Any = None

    def __init__(self, counted: FunctionStats) -> None:
        self.counted = counted

    def add(self, chunk: Any) -> None:
        pass

    def ended(self) -> None:
        self.counted.calls += 1

    def failed(self, exc: BaseException) -> None:
        pass


Relayed = Stream | Untraced


# --- the relays ------------------------------------------------------------------------------------------
def _attach(stream: Relayed) -> Any:
    return otel_context.attach(stream.ctx) if stream.ctx is not None else None


def _detach(token: Any) -> None:
    if token is not None:
        otel_context.detach(token)


def relay(start: Callable[[], Relayed], inner: Generator[Any, Any, Any]) -> Generator[Any, Any, Any]:
    """Yield what ``inner`` yields (send, throw and close pass through), reporting each chunk to the stream
    ``start()`` gives on the first one."""
    stream: Relayed | None = None
    to_send: Any = None
    to_throw: BaseException | None = None
    while True:
        if stream is None:
            stream = start()
        token = _attach(stream)
        try:
            if to_throw is not None:
                exc, to_throw = to_throw, None
                chunk = inner.throw(exc)
            else:
                chunk = inner.send(to_send)
        except StopIteration as stop:
            stream.ended()
            return stop.value
        except BaseException as exc:
            stream.failed(exc)
            raise
        finally:
            _detach(token)
        stream.add(chunk)
        try:
            to_send = yield chunk
        except GeneratorExit:
            # Closed early (break, close(), garbage collection): score what was streamed so far.
            token = _attach(stream)
            try:
                inner.close()
            except BaseException as exc:  # the host's generator refused to close: its error, as unwrapped
                stream.failed(exc)
                raise
            finally:
                _detach(token)
            stream.ended()
            raise
        except BaseException as exc:
            to_throw = exc


async def async_relay(
    start: Callable[[], Relayed], inner: AsyncGenerator[Any, Any]
) -> AsyncGenerator[Any, Any]:
    stream: Relayed | None = None
    to_send: Any = None
    to_throw: BaseException | None = None
    while True:
        if stream is None:
            stream = start()
        token = _attach(stream)
        try:
            if to_throw is not None:
                exc, to_throw = to_throw, None
                chunk = await inner.athrow(exc)
            else:
                chunk = await inner.asend(to_send)
        except StopAsyncIteration:
            stream.ended()
            return
        except BaseException as exc:
            stream.failed(exc)
            raise
        finally:
            _detach(token)
        stream.add(chunk)
        try:
            to_send = yield chunk
        except GeneratorExit:
            token = _attach(stream)
            try:
                await inner.aclose()
            except BaseException as exc:
                stream.failed(exc)
                raise
            finally:
                _detach(token)
            stream.ended()
            raise
        except BaseException as exc:
            to_throw = exc


# --- decorated generator functions --------------------------------------------------------------------------
def generator_stream(
    handoff: Handoff, span: Span, stats: FunctionStats, max_answer_chars: int, inputs: Inputs
) -> Stream:
    """The stream of a decorated generator function: its span starts with the first chunk, is current while
    the app's generator runs, and ending it counts the call."""
    stream = Stream(handoff, PendingSpan(span, stats), max_answer_chars, inputs)
    stream.ctx = trace.set_span_in_context(span)
    stream.counted = stats
    return stream


# --- calls that return a stream ----------------------------------------------------------------------------
def watch(
    handoff: Handoff,
    pending: PendingSpan,
    query: str | None,
    contexts: list[str] | None,
    max_answer_chars: int,
    inner: Any,
) -> tuple[Any, Stream]:
    """A generator yielding exactly what ``inner`` yields, that scores the joined chunks with the call's
    ``query`` and ``contexts`` when it ends (and the state it reports to)."""
    stream = Stream(handoff, pending, max_answer_chars, None)
    stream.query, stream.contexts = query, contexts
    wrapper = (async_relay if inspect.isasyncgen(inner) else relay)(lambda: stream, inner)
    # A stream nobody reads never runs a line of its wrapper: end its span when the wrapper is collected.
    # (Not at interpreter exit: the providers may be shut down by then, and nothing would export it.)
    weakref.finalize(wrapper, stream.abandoned).atexit = False
    return wrapper, stream
