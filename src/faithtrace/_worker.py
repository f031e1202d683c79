"""The background scorer: a bounded queue feeding coroutines on faithtrace's own thread and event loop.

The host's threads only ever call ``submit()``, which never blocks: a full queue refuses the job. The worker
never touches the host's event loop. It knows nothing about prompts or telemetry: it runs a handler per job.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final, NamedTuple

from opentelemetry.trace import SpanContext

if TYPE_CHECKING:
    from faithtrace._telemetry.metrics import FunctionStats

_STOP: Final = object()
_MAX_KEPT_ERRORS: Final = 20


class Job(NamedTuple):
    """One evaluation to run: plain text and ids only, nothing mutable from the host.

    A named tuple rather than a frozen dataclass: it is built on the request path, where that is cheaper.
    """

    span_context: SpanContext  # the RAG span the evaluation belongs to
    stats: FunctionStats  # the decorated function's counters
    query: str | None
    contexts: tuple[str, ...]
    answer: str
    enqueued_ns: int  # wall clock, for the evaluation span
    enqueued_at: float  # monotonic, for durations


class Worker:
    """A dispatcher thread takes jobs off the queue as concurrency slots free up and runs them on the loop."""

    def __init__(
        self, handler: Callable[[Job], Awaitable[None]], *, queue_size: int, concurrency: int
    ) -> None:
        self._handler = handler
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=queue_size)
        self._slots = threading.BoundedSemaphore(concurrency)
        self._closed = False
        self._loop_stopping = False
        self.errors: list[BaseException] = []  # handler failures (faithtrace bugs), surfaced by flush()
        self._loop = asyncio.new_event_loop()
        self._loop_thread = threading.Thread(target=self._run_loop, name="faithtrace-loop", daemon=True)
        self._dispatcher = threading.Thread(target=self._dispatch, name="faithtrace-dispatch", daemon=True)
        self._loop_thread.start()
        self._dispatcher.start()

    # --- host side -----------------------------------------------------------------------------------------
    def submit(self, job: Job) -> bool:
        """Queue ``job``; False (at once, never blocking) when the queue is full or the worker is closed."""
        if self._closed:
            return False
        try:
            self._queue.put_nowait(job)
        except queue.Full:
            return False
        return True

    def depth(self) -> int:
        """Jobs queued or running."""
        return self._queue.unfinished_tasks

    def flush(self, timeout: float) -> bool:
        """Wait until every job submitted so far has finished; False on timeout."""
        deadline = time.monotonic() + max(0.0, timeout)
        cond = self._queue.all_tasks_done
        with cond:
            while self._queue.unfinished_tasks:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                cond.wait(remaining)
        return True

    def close(self, timeout: float) -> int:
        """Stop taking jobs, finish what is queued within ``timeout``, cancel the rest.

        Returns how many queued jobs were abandoned (never started).
        """
        self._closed = True
        deadline = time.monotonic() + max(0.0, timeout)
        self.flush(timeout)
        abandoned = 0
        while True:  # what is still waiting will not run now
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is not _STOP:
                abandoned += 1
            self._queue.task_done()
        with contextlib.suppress(queue.Full):
            self._queue.put_nowait(_STOP)
        self._loop_stopping = True
        if self._loop.is_running():
            future = asyncio.run_coroutine_threadsafe(self._cancel_running(), self._loop)
            with contextlib.suppress(Exception):
                future.result(timeout=max(0.1, deadline - time.monotonic()) + 1.0)
        with contextlib.suppress(RuntimeError):  # also stops a loop that has not started running yet
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._dispatcher.join(timeout=1.0)
        self._loop_thread.join(timeout=1.0)
        return abandoned

    # --- worker side ---------------------------------------------------------------------------------------
    def _run_loop(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_forever()
        finally:
            with contextlib.suppress(Exception):
                self._loop.run_until_complete(self._loop.shutdown_asyncgens())
            self._loop.close()

    def _dispatch(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                self._queue.task_done()
                return
            self._slots.acquire()
            if self._closed and self._loop_stopping:  # shutdown gave up on what was still waiting
                self._slots.release()
                self._queue.task_done()
                continue
            try:
                asyncio.run_coroutine_threadsafe(self._run_job(item), self._loop)
            except RuntimeError:  # the loop is gone (closing): the job cannot run
                self._slots.release()
                self._queue.task_done()
                return

    async def _run_job(self, job: Job) -> None:
        try:
            await self._handler(job)
        except asyncio.CancelledError:
            pass
        except BaseException as exc:  # the handler swallows everything but faithtrace bugs under pytest
            if len(self.errors) < _MAX_KEPT_ERRORS:
                self.errors.append(exc)
        finally:
            self._slots.release()
            self._queue.task_done()

    async def _cancel_running(self) -> None:
        current = asyncio.current_task()
        tasks = [t for t in asyncio.all_tasks() if t is not current]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=1.0)
