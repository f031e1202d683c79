"""LlamaIndex chat engines' streaming responses (``StreamingAgentChatResponse``): watched, never read.

A chat engine's ``stream_chat`` / ``astream_chat`` starts a writer (a thread, or an asyncio task) that reads
the LLM stream into a queue, from which the caller reads ``response_gen`` / ``async_response_gen``; when the
LLM stream ends the writer sets ``response`` to the whole text. The stream has one reader already, so
faithtrace adds none and replaces nothing: it waits for the writer to finish, then reads ``response`` (a
string) and scores it. The call's span stays open until then.

A task reports through ``add_done_callback``. A thread cannot: ``thread_watch`` checks the writer threads in
flight (bounded; past that, a call is a capture error), so the span may end up to one poll late.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from faithtrace._request.capture import CaptureError, InputError
from faithtrace._request.streams import Handoff
from faithtrace._request.text import field_of, plain
from faithtrace._runtime import thread_watch
from faithtrace._runtime.pending_span import PendingSpan
from faithtrace._telemetry.records import Captured


def writer_of(result: Any) -> Any:
    """The writer (thread or task) of a LlamaIndex streaming chat response; None for anything else.

    Raises ``CaptureError`` for a streaming chat response without one: its stream could only be read by
    consuming it; ``InputError`` when the result raised while looked at (a metaclass, a property)."""
    try:
        return _writer_of(result)
    except CaptureError:
        raise
    except Exception as exc:
        raise InputError.reading("answer", exc) from None


def _writer_of(result: Any) -> Any:
    kind = type(result)
    if kind.__name__ != "StreamingAgentChatResponse" or not str(kind.__module__).startswith("llama_index."):
        return None
    task = field_of(result, "awrite_response_to_history_task")
    if isinstance(task, asyncio.Future):
        return task
    thread = field_of(result, "write_response_to_history_thread")
    if isinstance(thread, threading.Thread):
        return thread
    raise CaptureError(
        "a StreamingAgentChatResponse with no writer thread or task cannot be watched", "answer"
    )


class _ChatStream:
    __slots__ = ("contexts", "finished", "handoff", "pending", "query", "result")

    def __init__(
        self,
        handoff: Handoff,
        pending: PendingSpan,
        query: str | None,
        contexts: list[str] | None,
        result: Any,
    ) -> None:
        self.handoff = handoff
        self.pending = pending
        self.query, self.contexts = query, contexts
        self.result = result
        self.finished = False

    def done(self, cancelled: bool = False) -> None:
        """The writer finished: score ``response``, or record the stream's failure (not scored). Runs on the
        writer's thread, in its task's done-callback or on the thread watcher: never raises (but for
        faithtrace's own bugs in strict mode)."""
        if self.finished:
            return
        self.finished = True
        result, self.result = self.result, None
        pending = self.pending
        try:
            try:
                exc = field_of(result, "exception")
                if isinstance(exc, BaseException):
                    pending.fail(exc)
                    return
                pending.end_ns = time.time_ns()
                answer = field_of(result, "response")
                if cancelled or not isinstance(answer, str):
                    why = "the chat stream was cancelled" if cancelled else "the chat response has no text"
                    raise CaptureError(why, "answer")
                captured = Captured(query=self.query, contexts=self.contexts, answer=plain(answer))
                problem: CaptureError | None = None
            except CaptureError as error:
                captured, problem = None, error
            except Exception as error:  # the framework's response object misbehaved: the host's input
                captured, problem = None, InputError.reading("answer", error)
        except Exception as error:
            pending.broken("capturing a chat stream", error)  # raises in strict mode
            return
        self.handoff(pending, captured, problem)


def watch(
    handoff: Handoff,
    pending: PendingSpan,
    query: str | None,
    contexts: list[str] | None,
    result: Any,
    writer: Any,
) -> None:
    """Score ``result``'s chat response, with the call's ``query`` and ``contexts``, once ``writer`` has
    finished. Raises ``CaptureError`` when too many chat streams are in flight."""
    stream = _ChatStream(handoff, pending, query, contexts, result)
    if isinstance(writer, asyncio.Future):
        writer.add_done_callback(lambda task: stream.done(task.cancelled()))
    elif not thread_watch.add(writer, stream.done):
        raise CaptureError("too many chat streams in flight")
