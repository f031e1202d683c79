"""The live state behind the decorator: one ``Runtime`` per configuration (settings, tracer, instruments,
sampler, scorer, worker), and what its ``close`` reports (``ShutdownReport``).

Which runtime is live, and its lifecycle (``configure()``, ``flush()``, ``shutdown()``, exit and fork), is
``lifecycle``'s. The worker thread starts on the first sampled call, and again lazily in a forked child.
Scoring itself lives in ``scoring.scorer``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from opentelemetry import trace
from opentelemetry.trace import SpanContext

from faithtrace._common import safety
from faithtrace._config.settings import Settings
from faithtrace._runtime import thread_watch
from faithtrace._runtime.held_spans import HeldSpans
from faithtrace._runtime.pending_span import Offer, PendingSpan, end_held
from faithtrace._runtime.sampling import Sampler
from faithtrace._runtime.worker import Closed, Worker
from faithtrace._telemetry import annotations as ft_annotations
from faithtrace._telemetry import evaluation, host_spans, setup
from faithtrace._telemetry import metrics as ft_metrics
from faithtrace._telemetry import names as n
from faithtrace._telemetry.own_traces import own_tracer
from faithtrace._telemetry.records import Job
from faithtrace._version import __version__
from faithtrace.scoring.models import ErrorInfo, FaithfulnessResult
from faithtrace.scoring.scorer import Scorer

# Returned calls waiting for the worker to finish their spans. Each holds at most the capped texts of one
# call (contexts and answer are cut to the scoring limits on the request path), so this bounds the memory.
_INBOX_SIZE = 1024
# Of a shutdown's time, what is kept back from the evaluations for exporting the telemetry they produced.
_EXPORT_SHARE: Final = 0.2
_MAX_EXPORT_RESERVE_S: Final = 1.0


# Evaluation errors that say the judge is missing or misconfigured rather than that one answer was hard: the
# user needs to hear about these (rate-limited), not only see them on the spans.
_JUDGE_SETUP_ERRORS = frozenset(
    {"judge_unavailable", "judge_auth", "judge_bad_request", "judge_server_error"}
)


def _refuse(job: Job) -> bool:
    return False


@dataclass(frozen=True)
class ShutdownReport:
    """What ``faithtrace.shutdown()`` got done before its deadline, and what it lost.

    Attributes:
        abandoned: evaluations still queued at the deadline, never started (counted as ``dropped``).
        cancelled: evaluations running at the deadline, cancelled (counted as ``dropped``).
        unfinished_spans: decorated calls whose span could not be ended (a span processor of the app blocked).
        telemetry_flushed: the exporters confirmed everything within the deadline.
        elapsed_s: how long the shutdown took.
        released_spans: RAG spans held for an evaluation that could not finish, exported without it.
    """

    abandoned: int = 0
    cancelled: int = 0
    unfinished_spans: int = 0
    telemetry_flushed: bool = True
    elapsed_s: float = 0.0
    released_spans: int = 0

    @property
    def dropped(self) -> int:
        """Evaluations lost: abandoned plus cancelled."""
        return self.abandoned + self.cancelled

    @property
    def complete(self) -> bool:
        """Nothing was lost."""
        return not (self.dropped or self.unfinished_spans) and self.telemetry_flushed


class Runtime:
    """One configuration's live state. ``queue_depth`` reads the live runtime's queue (the instruments are
    shared by the runtimes on one meter provider); ``first_worker`` is called before a worker starts (the
    exit hook's registration). A runtime made ``closed`` never starts one."""

    def __init__(
        self,
        settings: Settings,
        tracer_provider: Any = None,
        meter_provider: Any = None,
        *,
        queue_depth: Callable[[], int],
        first_worker: Callable[[], None],
        held_spans: Callable[[], int] = lambda: 0,
        closed: bool = False,
    ) -> None:
        self.settings = settings
        self.enabled = settings.enabled
        self.capture = settings.capture
        self.tracer_provider = tracer_provider
        self.meter_provider = meter_provider
        self.tracer = setup.with_private_ids(
            trace.get_tracer(n.INSTRUMENTATION_SCOPE, __version__, tracer_provider)
        )
        # The worker's spans (evaluation, judge calls, retriever) through a tracer whose spans never raise:
        # the app's span processors run when they start and end (see ``host_spans``).
        self.worker_tracer = host_spans.GuardedTracer(self.tracer)
        # faithtrace's own traces (the judge's calls, evaluations in a trace of their own): made on first use,
        # from the provider as it is then (a global provider may be set after configure()).
        self._own_tracer: trace.Tracer | None = None
        self.instruments = ft_metrics.instruments_for(meter_provider, queue_depth, held_spans)
        self.sampler = Sampler(settings.sampling)
        self.annotations = ft_annotations.sink_for(
            settings.annotations,
            settings.phoenix_endpoint,
            settings.phoenix_api_key,
            # Read when the config is registered: a global provider may be set after configure().
            lambda: ft_annotations.phoenix_project(tracer_provider or trace.get_tracer_provider()),
            settings.scoring.threshold,
        )
        self.scorer = Scorer(settings.judge, settings.scoring, settings.worker.evaluation_timeout_s)
        # scoring="remote": spans carry the texts for `faithtrace serve`, nothing is scored here.
        self._remote = settings.scoring if settings.remote else None
        # placement rag_span: a RAG span stays open until its evaluation is on it (bounded: held_spans).
        holding = settings.evaluation_placement == n.PLACEMENT_RAG_SPAN and not settings.remote
        self.held = HeldSpans(settings.worker.hold_timeout_s) if holding else None
        self._first_worker = first_worker
        self._worker: Worker | None = None
        self._closed = closed
        self._lock = threading.Lock()

    # --- request path --------------------------------------------------------------------------------------
    def handoff(self, pending: PendingSpan) -> None:
        """Pass a returned call to the worker to finish; finish it here when the worker cannot take it."""
        worker = self._worker or self._start_worker()
        if worker is None:
            pending.finish(self.capture, _refuse, self._remote, self.worker_tracer)
        elif not worker.handoff(pending):
            pending.finish(self.capture, worker.offer, self._remote, self.worker_tracer, self.held)

    def _start_worker(self) -> Worker | None:
        with self._lock:
            if self._worker is None and not self._closed:
                self._first_worker()
                capture, remote, tracer, held = self.capture, self._remote, self.worker_tracer, self.held

                def finish(pending: PendingSpan, offer: Offer) -> None:
                    pending.finish(capture, offer, remote, tracer, held)

                self._worker = Worker(
                    finish,
                    self.score_job,
                    queue_size=self.settings.worker.queue_size,
                    concurrency=self.settings.concurrency,
                    inbox_size=_INBOX_SIZE,
                    **({"tick": held.expire} if held is not None else {}),
                )
            return self._worker

    def submit(self, job: Job) -> bool:
        """Queue an evaluation that did not come from the decorator (``score_openinference``); False (and
        counted as dropped) when the queue is full or the runtime is closed."""
        worker = self._worker or self._start_worker()
        if worker is not None and worker.offer(job):
            return True
        ft_metrics.count_outcome(job.stats, n.OUTCOME_DROPPED)
        return False

    @property
    def worker_started(self) -> bool:
        return self._worker is not None

    def depth(self) -> int:
        worker = self._worker
        return worker.depth() if worker is not None else 0

    def held_count(self) -> int:
        return len(self.held) if self.held is not None else 0

    @property
    def own_tracer(self) -> trace.Tracer:
        """The tracer of faithtrace's own traces (``own_traces``), guarded like the worker's."""
        if self._own_tracer is None:
            self._own_tracer = host_spans.GuardedTracer(own_tracer(self.tracer_provider))
        return self._own_tracer

    # --- worker side ---------------------------------------------------------------------------------------
    async def score_job(self, job: Job) -> None:
        """Score one queued job and turn the result into telemetry. Never raises (but in strict mode)."""
        started_ns = time.time_ns()
        result = await self.scorer.score(job.query, job.contexts, job.answer)
        finished_ns = time.time_ns()
        if result.error is not None and result.error.type in _JUDGE_SETUP_ERRORS:
            self._warn_judge_failure(result.error)
        with safety.handle_internal_errors("evaluation telemetry"):
            emitted = self._emit(job, result, started_ns, finished_ns)
            if self.annotations is not None:
                item = ft_annotations.annotation(job.span_context, result, emitted, self.capture)
                self.annotations.add(item)
                self.annotations.add(ft_annotations.trace_annotation(item, job.span_context), "trace")
            self.instruments.record_evaluation(job.stats, result, time.monotonic() - job.enqueued_at)
            self.sampler.record_spend(result.input_tokens + result.output_tokens, result.cost_usd)

    def _emit(
        self, job: Job, result: FaithfulnessResult, started_ns: int, finished_ns: int
    ) -> SpanContext | None:
        """Put the evaluation where its placement says; the context of the evaluation span made, if any.

        A held RAG span gets it (and is ended at its call's end time), the judge's calls a trace of their own.
        With ``child`` it goes on a child span in the request's trace. Otherwise (``linked``; a held span the
        deadline or shutdown already exported; a RAG span that was never ours to hold) to a trace of its own.
        """
        capture, held = self.capture, job.held
        if held is not None and self.held is not None and self.held.release(held, n.HOLD_EVALUATED):
            end_held(
                held,
                lambda span: evaluation.record_on_rag_span(
                    span, job, result, started_ns, capture, finished_ns
                ),
            )
            return evaluation.emit_judge_trace(self.own_tracer, job, result, started_ns, capture)
        if self.settings.evaluation_placement == n.PLACEMENT_CHILD:
            return evaluation.emit_evaluation(
                self.worker_tracer, job, result, started_ns, capture, n.PLACEMENT_CHILD, finished_ns
            )
        return evaluation.emit_evaluation(
            self.own_tracer, job, result, started_ns, capture, n.PLACEMENT_LINKED, finished_ns
        )

    def _warn_judge_failure(self, error: ErrorInfo) -> None:
        """Say once a minute per kind that evaluations fail for want of a working judge, and how to fix it:
        otherwise the only trace of it is an error outcome on every evaluation span."""
        judge = self.scorer.judge
        if error.message.startswith("LocalJudgeError"):
            hint = ""  # a local judge that could not start explains the fix itself (install the extra...)
        elif error.type == "judge_unavailable":
            hint = "; " + judge.unavailable_hint()
        else:
            hint = "; check FAITHTRACE_JUDGE_MODEL and the provider's API key (or FAITHTRACE_JUDGE_API_KEY)"
        safety.warn_rate_limited(
            "judge:" + error.type,
            "faithtrace: judge %s failed (%s: %s), answers are not scored%s. Your app is unaffected.",
            judge.model_name,
            error.type,
            error.message[:500],
            hint,
        )

    # --- lifecycle -----------------------------------------------------------------------------------------
    @staticmethod
    def _raise_kept(worker: Worker) -> None:
        """In strict mode (faithtrace's own tests), a faithtrace bug caught on the worker's threads fails the
        test that flushes."""
        if worker.errors and safety.should_raise():
            errors, worker.errors = worker.errors, []
            raise errors[0]

    def flush(self, timeout: float, *, evaluations: bool = True) -> bool:
        """Wait for the worker (with ``evaluations=False`` only until every span has ended), then export."""
        deadline = time.monotonic() + timeout
        thread_watch.sweep()  # chat streams that have just ended are handed over before the worker flushes
        worker = self._worker
        done = True
        if worker is not None:
            done = worker.flush(timeout, spans_only=not evaluations)
            self._raise_kept(worker)
        if evaluations and self.annotations is not None:
            done = self.annotations.flush(max(0.0, deadline - time.monotonic())) and done
        providers = self.providers() if evaluations else self.providers()[:1]
        exported = setup.flush_providers(providers, deadline)
        return done and exported

    def close(self, deadline: float) -> ShutdownReport:
        """Stop the worker by ``deadline`` (monotonic) and flush the telemetry; report what was lost."""
        started = time.monotonic()
        with self._lock:
            self._closed = True
            worker, self._worker = self._worker, None
        closed = Closed()
        if worker is not None:
            reserve = min(_MAX_EXPORT_RESERVE_S, _EXPORT_SHARE * max(0.0, deadline - started))
            closed = worker.close(deadline - reserve)
            for job in (*closed.abandoned, *closed.cancelled):
                ft_metrics.count_outcome(job.stats, n.OUTCOME_DROPPED)
        # Whatever is still held has no evaluation coming in time: exported as it is, before the flush below.
        released = self.held.release_all(n.HOLD_SHUTDOWN) if self.held is not None else 0
        if self.annotations is not None:
            reserve = min(_MAX_EXPORT_RESERVE_S, _EXPORT_SHARE * max(0.0, deadline - time.monotonic()))
            self.annotations.close(max(0.0, deadline - reserve - time.monotonic()))
        flushed = setup.flush_providers(self.providers(), deadline)
        return ShutdownReport(
            abandoned=len(closed.abandoned),
            cancelled=len(closed.cancelled),
            unfinished_spans=closed.unfinished_spans,
            telemetry_flushed=flushed,
            elapsed_s=time.monotonic() - started,
            released_spans=released,
        )

    def providers(self) -> list[Any]:
        """The tracer and meter providers in use (the global ones unless given)."""
        from opentelemetry import metrics

        tp = self.tracer_provider if self.tracer_provider is not None else trace.get_tracer_provider()
        mp = self.meter_provider if self.meter_provider is not None else metrics.get_meter_provider()
        return [tp, mp]

    def after_fork(self) -> None:
        # The worker's threads do not exist in the child; its queue and locks may be in any state.
        self._worker = None
        self._lock = threading.Lock()
        if self.held is not None:
            self.held.forget()
        self.scorer.after_fork()
        self.sampler.after_fork()
        if self.annotations is not None:
            self.annotations.after_fork()
