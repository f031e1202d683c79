"""The background side: finishing the spans of sampled-in calls, and scoring them on faithtrace's own loop.

Two bounded stages, both fed without blocking and both drained by one dispatcher thread:

* the **inbox**: calls that returned, handed over by the request path as they are (a live span, its end
  time, the captured texts). Setting the span's attributes, scrubbing and capping the texts, ending the span
  (and with it the exporter's work) and deciding whether the call is scored all happen here, off the host's
  thread. A full inbox makes the host finish its own span (``PendingSpan.finish``), so memory stays bounded.
* the **jobs**: evaluations waiting for one of ``concurrency`` slots on the event loop. A job that finds them
  full is dropped and counted by the caller.

Between the two, each turn runs ``tick`` (the held RAG spans' deadlines: ``held_spans``), whose answer, the
seconds until the next deadline, bounds how long the dispatcher sleeps.

The host's threads only ever call ``handoff()``: a length check, a deque append and, only when the dispatcher
has been idle for a while, one event set. While calls keep coming the dispatcher looks at the inbox every few
milliseconds instead of being woken per call: on busy cores, waking another thread can cost the calling thread
a trip through the scheduler (it showed in the host's tail latency in
``benchmarks/request_path/throughput.py``), and the poll costs the host nothing. The worker knows nothing
about prompts or telemetry; it runs the two callables it is given.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Final

from faithtrace._runtime import loop
from faithtrace._runtime.pending_span import Offer, PendingSpan
from faithtrace._telemetry.records import Job

_MAX_KEPT_ERRORS: Final = 20
# Spans finished per turn before the dispatcher lets the host's threads have the GIL back: a backlog is
# worked off in slices of well under a millisecond instead of one long stall of the host.
_SLICE: Final = 256
_IDLE_WAIT_S: Final = 1.0  # a safety net only: every state change that matters sets the wake event
# While calls keep coming, the inbox is looked at this often (a span ends at its call's own end time whenever
# it is finished, so the delay is invisible in the trace) ...
_POLL_S: Final = 0.02
# ... until none has come for this long; then the dispatcher sleeps and the next handoff wakes it.
_LINGER_S: Final = 1.0


@dataclass
class Closed:
    """What ``Worker.close`` could not do before its deadline."""

    abandoned: list[Job] = field(default_factory=list)  # queued, never started
    cancelled: list[Job] = field(default_factory=list)  # running at the deadline, cancelled
    unfinished_spans: int = 0  # handed-over calls whose span could not be ended (a blocked span processor)


class Worker:
    """A dispatcher thread that finishes handed-over calls and starts jobs as slots free up."""

    def __init__(
        self,
        finish: Callable[[PendingSpan, Offer], None],
        handler: Callable[[Job], Awaitable[None]],
        *,
        queue_size: int,
        concurrency: int,
        inbox_size: int,
        tick: Callable[[], float] = lambda: _IDLE_WAIT_S,
    ) -> None:
        self._finish = finish
        self._tick = tick
        self._handler = handler
        self._inbox: collections.deque[PendingSpan] = collections.deque()
        self._inbox_size = inbox_size
        self._jobs: collections.deque[Job] = collections.deque()
        self._queue_size = queue_size
        self._concurrency = concurrency
        self._running = 0
        self._active: dict[int, Job] = {}  # running jobs by a serial number, under the _idle lock
        self._serial = itertools.count()
        self._busy = False  # the dispatcher holds items it took off the inbox
        self._sleeping = False
        self._wake = threading.Event()
        self._idle = threading.Condition()  # notified when the worker may have become idle (flush waits)
        self._closed = False  # no more handoffs or jobs
        self._stopping = False  # the dispatcher exits after its next turn
        self.errors: list[BaseException] = []  # faithtrace bugs in either stage, surfaced by flush()
        self._loop = loop.get()  # shared with evaluate(): see loop.py
        self._tasks: dict[asyncio.Task[None], Job] = {}  # running jobs (touched on the loop only)
        self._dispatcher = threading.Thread(target=self._dispatch, name="faithtrace-dispatch", daemon=True)
        self._dispatcher.start()

    # --- host side -----------------------------------------------------------------------------------------
    def handoff(self, item: PendingSpan) -> bool:
        """Pass a returned call on for finishing; False (at once) when the inbox is full or closed."""
        inbox = self._inbox
        if self._closed or len(inbox) >= self._inbox_size:
            return False
        inbox.append(item)
        if self._sleeping:
            self._wake.set()
        return True

    def offer(self, job: Job) -> bool:
        """Queue an evaluation; False when the queue is full or the worker is stopping (the job is dropped).

        Calls handed over before ``close()`` still queue theirs: shutdown scores what was already taken.
        """
        if self._stopping or len(self._jobs) >= self._queue_size:
            return False
        self._jobs.append(job)
        if self._sleeping:
            self._wake.set()
        return True

    def depth(self) -> int:
        """Calls and evaluations not finished yet: in the inbox, queued or running."""
        return len(self._inbox) + len(self._jobs) + self._running

    def _is_idle(self) -> bool:
        return not (self._inbox or self._jobs or self._running or self._busy)

    def flush(self, timeout: float, *, spans_only: bool = False) -> bool:
        """Wait until everything handed over so far is finished (with ``spans_only``, only until every span
        has ended, not for the scoring); False on timeout."""
        deadline = time.monotonic() + max(0.0, timeout)
        done = self._spans_done if spans_only else self._is_idle
        self._wake.set()
        with self._idle:
            while not done():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                # Short waits: the idle notification may race with this check, and a poll costs nothing here.
                self._idle.wait(min(remaining, 0.05))
        return True

    def _spans_done(self) -> bool:
        return not (self._inbox or self._busy)

    def close(self, deadline: float, *, grace_s: float = 0.25) -> Closed:
        """Stop taking work, finish what is queued until ``deadline`` (monotonic), cancel the rest.

        Every span handed over is ended, unless a host span processor blocks the dispatcher: ending them on
        this thread would block the caller too, so they are counted as unfinished instead. ``grace_s`` bounds
        each of the two waits past the deadline (the dispatcher's last turn, cancelling the running jobs).
        """
        self._closed = True
        self.flush(deadline - time.monotonic())
        self._stopping = True
        self._wake.set()
        self._dispatcher.join(timeout=max(0.0, deadline - time.monotonic()) + grace_s)
        closed = Closed()
        if self._dispatcher.is_alive():
            closed.unfinished_spans = len(self._inbox)
        closed.abandoned = list(self._jobs)
        self._jobs.clear()
        if self._running:
            future = asyncio.run_coroutine_threadsafe(self._cancel_running(grace_s), self._loop)
            try:
                closed.cancelled = future.result(timeout=grace_s * 2)
            except Exception:
                # The shared loop is starved (e.g. by litellm's import on another thread): the cancellation
                # is queued and will land; what is still running now is lost all the same.
                with self._idle:
                    closed.cancelled = list(self._active.values())
        return closed

    # --- worker side ---------------------------------------------------------------------------------------
    def _dispatch(self) -> None:
        active_until = 0.0
        while True:
            if self._drain_inbox():
                active_until = time.monotonic() + _LINGER_S
            if not self._stopping:
                self._start_jobs()
            with self._idle:
                self._idle.notify_all()
            if self._stopping:
                self._drain_inbox()
                return
            next_tick = self._run_tick()
            if time.monotonic() < active_until:
                # Polling: handoffs see ``_sleeping`` false and do not set the event. flush(), close() and
                # finished jobs still do, and cut the wait short.
                if not self._has_work():
                    self._wake.wait(min(_POLL_S, next_tick))
            else:
                # Announce sleep before the last look at the inbox: a handoff after that look sees the flag
                # and sets the event, one before it is seen here, so no wake-up is lost.
                self._sleeping = True
                if not self._has_work():
                    self._wake.wait(min(_IDLE_WAIT_S, next_tick))
                self._sleeping = False
            self._wake.clear()

    def _run_tick(self) -> float:
        try:
            return max(0.0, self._tick())
        except BaseException as exc:  # the tick swallows all but faithtrace bugs under pytest
            self._keep(exc)
            return _IDLE_WAIT_S

    def _has_work(self) -> bool:
        return bool(self._inbox) or bool(self._jobs and self._running < self._concurrency)

    def _drain_inbox(self) -> bool:
        """Finish every handed-over call; True when there was any."""
        inbox = self._inbox
        took = bool(inbox)
        while inbox:
            self._busy = True
            try:
                for _ in range(_SLICE):
                    try:
                        item = inbox.popleft()
                    except IndexError:
                        break
                    try:
                        self._finish(item, self.offer)
                    except BaseException as exc:  # the finisher swallows all but our bugs in strict mode
                        self._keep(exc)
            finally:
                self._busy = False
            time.sleep(0)  # let the host's threads run between slices
        return took

    def _start_jobs(self) -> None:
        while self._jobs and self._running < self._concurrency:
            # Counted as running before it leaves the queue, so flush() never sees it in neither place.
            job = self._jobs[0]
            key = next(self._serial)
            with self._idle:  # the loop thread decrements it
                self._running += 1
                self._active[key] = job
            self._jobs.popleft()
            try:
                asyncio.run_coroutine_threadsafe(self._run_job(key, job), self._loop)
            except RuntimeError:  # the loop is gone: the job cannot run
                self._job_done(key)
                return

    def _keep(self, exc: BaseException) -> None:
        if len(self.errors) < _MAX_KEPT_ERRORS:
            self.errors.append(exc)

    async def _run_job(self, key: int, job: Job) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks[task] = job
        try:
            await self._handler(job)
        except asyncio.CancelledError:
            pass  # by close(), which counts it
        except BaseException as exc:  # the handler swallows all but our bugs in strict mode
            self._keep(exc)
        finally:
            self._tasks.pop(task, None)
            self._job_done(key)

    def _job_done(self, key: int) -> None:
        with self._idle:
            self._running -= 1
            self._active.pop(key, None)
            self._idle.notify_all()
        if self._jobs:
            self._wake.set()

    async def _cancel_running(self, wait_s: float) -> list[Job]:
        """Cancel this worker's running jobs (the loop is shared with other workers and with evaluate());
        the jobs it cancelled."""
        running = dict(self._tasks)
        for task in running:
            task.cancel()
        if running:
            await asyncio.wait(running, timeout=wait_s)
        return list(running.values())
