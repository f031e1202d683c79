"""The fleet's evaluations: each RAG item scored once, at most ``concurrency`` at a time, and its results
exported through the app that sent it.

A finished item is remembered by (trace id, span id) in a bounded window (``dedupe_window``), and a re-sent
item still running joins the running evaluation: the load balancer re-sends whole batches. Across replicas
the fleet's store does the same (fleet.py): checked before the judge, written once exported. An evaluation
ends "ok", "retry" (a transient judge failure: rate limit, timeout, judge down; the Collector keeps the batch
and sends it again), "budget" (no room in the judge budget yet: sent again after ``retry_after_s``), "failed"
(its results could not be exported) or "stopped" (still running at shutdown's deadline: cancelled, and the
sender is told to send it again).

Metrics are recorded only once the evaluation's spans were exported and, with a store, only by the replica
that recorded it first: an evaluation whose export failed (and is scored again on the re-sent request) or
that another replica had exported already is not counted twice.
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Callable
from typing import Any

from opentelemetry.trace import SpanContext, TraceFlags

from faithtrace._common import safety
from faithtrace._config.settings import Settings
from faithtrace._telemetry import evaluation
from faithtrace._telemetry import names as n
from faithtrace._telemetry.records import FunctionStats, Job, Reason
from faithtrace.judge import RETRYABLE
from faithtrace.scoring.models import FaithfulnessResult
from faithtrace.scoring.scorer import Scorer
from faithtrace.serve.apps import Apps
from faithtrace.serve.fleet import Fleet, Ticket
from faithtrace.serve.limits import Counters, Limits, Saturated, Unavailable
from faithtrace.sources.conventions import RagItem, cut

_TRANSIENT = RETRYABLE | {"local_judge_unavailable"}
ResourceKey = tuple[tuple[str, Any], ...]


class Evaluations:
    """The evaluations running and the window of those done. ``settled(item, outcome)`` is called once per
    evaluation started, after its future has its outcome."""

    def __init__(
        self,
        settings: Settings,
        apps: Apps,
        limits: Limits,
        counters: Counters,
        settled: Callable[[RagItem, str], None],
        fleet: Fleet | None = None,
    ) -> None:
        self.settings = settings
        self.apps = apps
        self.limits = limits
        self.counters = counters
        self.scoring = Scorer(settings.judge, settings.scoring, settings.worker.evaluation_timeout_s)
        self._settled = settled
        self.fleet = fleet or Fleet()
        self.retry_after_s = 0.0  # the last "budget" outcome's wait
        self._sem: asyncio.Semaphore | None = None
        self._inflight: dict[tuple[int, int], asyncio.Future[str]] = {}
        self._done: collections.OrderedDict[tuple[int, int], None] = collections.OrderedDict()
        self._tasks: set[asyncio.Task[str]] = set()

    def load(self) -> int:
        """Evaluations started and not finished."""
        return len(self._inflight)

    def known(self, ident: tuple[int, int]) -> bool:
        return ident in self._done or ident in self._inflight

    def start(self, key: ResourceKey, resource: dict[str, Any], item: RagItem) -> asyncio.Future[str]:
        """Score ``item`` (a duplicate joins the running evaluation, or is done at once); the future gets
        the outcome."""
        loop = asyncio.get_running_loop()
        ident = (item.trace_id, item.span_id)
        if ident in self._done:
            self.counters.duplicates += 1
            done: asyncio.Future[str] = loop.create_future()
            done.set_result("ok")
            return done
        running = self._inflight.get(ident)
        if running is not None:
            self.counters.duplicates += 1
            return running
        self.counters.rag_items += 1
        future: asyncio.Future[str] = loop.create_future()
        self._inflight[ident] = future
        task = loop.create_task(self._score(key, resource, item))
        self._tasks.add(task)

        def finished(t: asyncio.Task[str]) -> None:
            self._tasks.discard(t)
            self._inflight.pop(ident, None)
            if t.cancelled():  # drain()'s deadline passed: the sender must send it again
                outcome = "stopped"
            elif (error := t.exception()) is not None:
                safety.internal_error("serve scoring", error)
                outcome = "failed"
            else:
                outcome = t.result()
            if outcome == "ok":
                self._remember(ident)
            if not future.done():
                future.set_result(outcome)
            self._settled(item, outcome)

        task.add_done_callback(finished)
        return future

    def answer(self, outcomes: list[str]) -> None:
        """Raise what a request whose evaluations ended so must be answered (nothing: acknowledge it)."""
        if "stopped" in outcomes:
            raise Unavailable("shutting down: the evaluation was stopped at the drain deadline")
        if "retry" in outcomes:
            raise Saturated("the judge is unavailable or rate-limited", self.limits.retry_after_s)
        if "budget" in outcomes:
            raise Saturated(
                "no room in the judge budget yet", max(self.limits.retry_after_s, self.retry_after_s)
            )
        if "failed" in outcomes:
            raise Unavailable("the results could not be exported")

    def _remember(self, ident: tuple[int, int]) -> None:
        self._done[ident] = None
        while len(self._done) > self.limits.dedupe_window:
            self._done.popitem(last=False)

    async def _score(self, key: ResourceKey, resource: dict[str, Any], item: RagItem) -> str:
        if self._sem is None:
            self._sem = asyncio.Semaphore(self.limits.concurrency)
        scoring = self.settings.scoring
        item = cut(item, scoring.max_answer_chars, scoring.max_context_chars)
        app = self.apps.get(key, resource)
        stats = app.stats_for(item.function)
        job = Job(
            SpanContext(item.trace_id, item.span_id, True, TraceFlags(TraceFlags.SAMPLED)),
            stats,
            item.query,
            item.contexts,
            item.answer,
            time.time_ns(),
            time.monotonic(),
        )
        ident = (item.trace_id, item.span_id)
        async with self._sem:
            ticket = await self.fleet.begin(
                ident, len(item.query or "") + len(item.answer) + _chars(item.contexts)
            )
            if ticket.kind != "go":
                return self._not_judged(ticket, stats)
            started_ns = time.time_ns()
            # Cancelled (the drain's deadline) or failed here, the reservation stands: its calls are unknown.
            result = await self.scoring.score(job.query, job.contexts, job.answer)
            finished_ns = time.time_ns()
        if _transient(result):
            self.counters.judge_retry += 1
            await self.fleet.finish(ticket, ident, result, exported=False)
            return "retry"
        capture = self.settings.capture
        # The app's RAG span was exported before it got here: it cannot carry its evaluation. A child span
        # would stretch the request's trace to the scoring's end, so, unless asked for, the evaluation goes to
        # a trace of its own (docs/fleet.md, "Where the evaluation goes").
        placement = (
            n.PLACEMENT_CHILD
            if self.settings.evaluation_placement == n.PLACEMENT_CHILD
            else n.PLACEMENT_LINKED
        )
        emitted = app.collect(
            lambda tracer: evaluation.emit_evaluation(
                tracer, job, result, started_ns, capture, placement, finished_ns
            ),
            own=placement == n.PLACEMENT_LINKED,
        )
        exported = await asyncio.to_thread(app.export, emitted)
        first = await self.fleet.finish(ticket, ident, result, exported)
        if not exported:
            self.counters.export_failures += 1
            return "failed"
        if first is not False:  # a duplicate another replica exported first is not counted twice
            app.instruments.record_evaluation(stats, result, time.monotonic() - job.enqueued_at)
            if first:  # recorded: nobody judges it again, so its counts are exported at once (apps.py)
                app.flush_metrics()
        self.counters.scored += 1
        return "ok"

    def _not_judged(self, ticket: Ticket, stats: FunctionStats) -> str:
        if ticket.kind == "wait":
            self.retry_after_s = ticket.retry_after_s
            return "budget"
        if ticket.kind == "skip":  # the app's own budget counts a call it does not score so
            stats.sampled_out[Reason.BUDGET] += 1
        return "ok"

    async def drain(self, timeout_s: float) -> None:
        """Let the running evaluations finish within ``timeout_s``; cancel the rest."""
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=timeout_s)
        for task in list(self._tasks):
            task.cancel()


def _chars(contexts: tuple[str, ...] | list[str]) -> int:
    return sum(len(c) for c in contexts)


def _transient(result: FaithfulnessResult) -> bool:
    return result.error is not None and result.error.type in _TRANSIENT
