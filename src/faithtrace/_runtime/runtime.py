"""The live state behind the decorator, and its lifecycle: ``configure()``, ``flush()``, ``shutdown()``.

One ``Runtime`` per configuration (settings, tracer, instruments, sampler, scorer, worker), swapped atomically
by ``configure()``; the decorator reads the module-level ``RUNTIME`` once per call. Without ``configure()`` a
runtime is built lazily from the environment and the global providers. The worker thread starts on the first
sampled call, and again lazily in a forked child. Scoring itself lives in ``scoring.scorer``.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import threading
import time
from dataclasses import dataclass
from typing import Any, Final

from opentelemetry import trace

from faithtrace._common import host_state, safety
from faithtrace._config.settings import Settings, build_settings
from faithtrace._runtime import thread_watch
from faithtrace._runtime.pending_span import Offer, PendingSpan
from faithtrace._runtime.sampling import Sampler
from faithtrace._runtime.worker import Closed, Worker
from faithtrace._telemetry import annotations as ft_annotations
from faithtrace._telemetry import metrics as ft_metrics
from faithtrace._telemetry import names as n
from faithtrace._telemetry import setup, spans
from faithtrace._telemetry.records import Job
from faithtrace._version import __version__
from faithtrace.scoring.models import ErrorInfo
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
    """

    abandoned: int = 0
    cancelled: int = 0
    unfinished_spans: int = 0
    telemetry_flushed: bool = True
    elapsed_s: float = 0.0

    @property
    def dropped(self) -> int:
        """Evaluations lost: abandoned plus cancelled."""
        return self.abandoned + self.cancelled

    @property
    def complete(self) -> bool:
        """Nothing was lost."""
        return not (self.dropped or self.unfinished_spans) and self.telemetry_flushed


class Runtime:
    def __init__(self, settings: Settings, tracer_provider: Any = None, meter_provider: Any = None) -> None:
        self.settings = settings
        self.enabled = settings.enabled
        self.capture = settings.capture
        self.tracer_provider = tracer_provider
        self.meter_provider = meter_provider
        self.tracer = trace.get_tracer(n.INSTRUMENTATION_SCOPE, __version__, tracer_provider)
        self.instruments = ft_metrics.instruments_for(meter_provider, _queue_depth)
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
        self._worker: Worker | None = None
        self._closed = False
        self._lock = threading.Lock()

    # --- request path --------------------------------------------------------------------------------------
    def handoff(self, pending: PendingSpan) -> None:
        """Pass a returned call to the worker to finish; finish it here when the worker cannot take it."""
        worker = self._worker or self._start_worker()
        if worker is None:
            pending.finish(self.capture, _refuse, self._remote, self.tracer)
        elif not worker.handoff(pending):
            pending.finish(self.capture, worker.offer, self._remote, self.tracer)

    def _start_worker(self) -> Worker | None:
        with self._lock:
            if self._worker is None and not self._closed:
                _register_at_exit()
                capture, remote, tracer = self.capture, self._remote, self.tracer

                def finish(pending: PendingSpan, offer: Offer) -> None:
                    pending.finish(capture, offer, remote, tracer)

                self._worker = Worker(
                    finish,
                    self.score_job,
                    queue_size=self.settings.worker.queue_size,
                    concurrency=self.settings.concurrency,
                    inbox_size=_INBOX_SIZE,
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

    def depth(self) -> int:
        worker = self._worker
        return worker.depth() if worker is not None else 0

    # --- worker side ---------------------------------------------------------------------------------------
    async def score_job(self, job: Job) -> None:
        """Score one queued job and turn the result into telemetry. Never raises (but under pytest)."""
        started_ns = time.time_ns()
        result = await self.scorer.score(job.query, job.contexts, job.answer)
        if result.error is not None and result.error.type in _JUDGE_SETUP_ERRORS:
            self._warn_judge_failure(result.error)
        with safety.handle_internal_errors("evaluation telemetry"):
            placement = self.settings.evaluation_placement
            evaluation = spans.emit_evaluation(self.tracer, job, result, started_ns, self.capture, placement)
            if self.annotations is not None:
                item = ft_annotations.annotation(job.span_context, result, evaluation, self.capture)
                self.annotations.add(item)
                self.annotations.add(ft_annotations.trace_annotation(item, job.span_context), "trace")
            self.instruments.record_evaluation(job.stats, result, time.monotonic() - job.enqueued_at)
            self.sampler.record_spend(result.input_tokens + result.output_tokens, result.cost_usd)

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
        """Under pytest, a faithtrace bug caught on the worker's threads fails the test that flushes."""
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
        self.scorer.after_fork()
        self.sampler.after_fork()
        if self.annotations is not None:
            self.annotations.after_fork()


RUNTIME: Runtime | None = None
_swap_lock = threading.Lock()


_first_use_lock = threading.Lock()


def current() -> Runtime:
    """The runtime. When ``configure()`` was never called, the first use configures faithtrace from the
    environment exactly as a bare ``configure()`` would, once: the ``OTEL_*`` and ``FAITHTRACE_*`` variables
    alone set up the exporters (OTLP, Prometheus) as OpenTelemetry users expect."""
    rt = RUNTIME
    if rt is None:
        with _first_use_lock:
            if RUNTIME is None:
                _configure_from_environment()
        rt = RUNTIME
        assert rt is not None
    return rt


def _configure_from_environment() -> None:
    global RUNTIME
    try:
        install(build_settings())
    except Exception as exc:
        # An exporter that cannot start (a port in use, a missing extra) must not break the host's call: score
        # into the global providers instead, as before this first use configured anything.
        safety.internal_error("configuring from the environment", exc)
        with _swap_lock:
            if RUNTIME is None:
                RUNTIME = Runtime(build_settings())


def install(settings: Settings, *, tracer_provider: Any = None, meter_provider: Any = None) -> None:
    """Make ``settings`` the live configuration; the previous runtime finishes its queue within this call
    (up to its ``shutdown_timeout_s``)."""
    global RUNTIME
    tp = setup.tracer_provider_for(settings, tracer_provider)
    mp = setup.meter_provider_for(settings, meter_provider)
    _register_at_exit()
    new = Runtime(settings, tp, mp)
    with _swap_lock:
        old, RUNTIME = RUNTIME, new
    if old is not None:
        _report(old.close(time.monotonic() + old.settings.worker.shutdown_timeout_s), "reconfiguration")


def flush(timeout: float = 30.0, *, evaluations: bool = True) -> bool:
    """Wait until every queued evaluation has finished and its telemetry is exported.

    A decorated call's own span is ended and exported by faithtrace's worker a moment after the call
    returns. With ``evaluations=False`` this waits only for those spans, not for any scoring.
    Returns False when ``timeout`` seconds passed first.
    """
    rt = RUNTIME
    if rt is None:
        return True
    return rt.flush(timeout, evaluations=evaluations)


def shutdown(timeout: float = 30.0) -> ShutdownReport:
    """Finish queued evaluations, stop the worker and flush telemetry, returning within ``timeout`` seconds
    (plus a fraction of a second).

    What could not be done in time is given up and reported: the returned ``ShutdownReport`` counts the
    evaluations abandoned and cancelled (also counted as ``dropped`` in the evaluations metric) and says
    whether the exporters confirmed; a warning is logged when anything was lost. Only the providers faithtrace
    set up itself are shut down, never the app's. The decorator is a pass-through afterwards, until the next
    ``configure()``. Runs at interpreter exit with the worker's ``shutdown_timeout_s``.
    """
    global RUNTIME
    started = time.monotonic()
    deadline = started + max(0.0, timeout)
    with _swap_lock:
        old = RUNTIME
        # Closed, not None: a call after shutdown must not lazily start a new worker (e.g. during exit).
        RUNTIME = Runtime(build_settings(enabled=False, environ={}))
        RUNTIME._closed = True
    report = old.close(deadline) if old is not None else ShutdownReport()
    owned_down = setup.shutdown_owned(deadline)
    report = ShutdownReport(
        abandoned=report.abandoned,
        cancelled=report.cancelled,
        unfinished_spans=report.unfinished_spans,
        telemetry_flushed=report.telemetry_flushed and owned_down,
        elapsed_s=time.monotonic() - started,
    )
    _report(report, "shutdown")
    return report


def _report(report: ShutdownReport, during: str) -> None:
    if report.complete:
        return
    safety.logger.warning(
        "faithtrace: %s after %.1f s lost %d queued and %d running evaluation(s), %d unfinished span(s)%s",
        during,
        report.elapsed_s,
        report.abandoned,
        report.cancelled,
        report.unfinished_spans,
        "" if report.telemetry_flushed else "; telemetry export did not finish in time",
    )


def _queue_depth() -> int:
    rt = RUNTIME
    return rt.depth() if rt is not None else 0


def _at_exit() -> None:
    rt = RUNTIME
    if rt is None or (rt._worker is None and not setup.owns_providers()):
        return
    try:
        shutdown(rt.settings.worker.shutdown_timeout_s)
    except Exception as exc:  # never turn a clean exit into a traceback
        safety.logger.debug("faithtrace: shutdown at exit failed: %s", exc)


def _after_fork_in_child() -> None:
    global _swap_lock
    _swap_lock = threading.Lock()
    rt = RUNTIME
    if rt is not None:
        rt.after_fork()


_at_exit_lock = threading.Lock()
_at_exit_registered = False


def _register_at_exit() -> None:
    """Register the exit flush once, on the threading shutdown hooks (as ``concurrent.futures`` does), not
    the host's ``atexit`` list: they run before every ``atexit`` handler, so our last evaluations are exported
    before the SDK's exit hooks shut the app's providers down. ``atexit`` where the hook is missing."""
    global _at_exit_registered
    with _at_exit_lock:
        if _at_exit_registered:
            return
        _at_exit_registered = True
    host_state.register_exit_runner()  # first: the hooks run last-registered first
    register = getattr(threading, "_register_atexit", None)
    if register is None:
        atexit.register(_at_exit)
        return
    # RuntimeError: the interpreter is already shutting down, with nothing left to flush into.
    with contextlib.suppress(RuntimeError):
        register(_at_exit)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
