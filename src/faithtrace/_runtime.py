"""The live state behind the decorator: settings, tracer, instruments, sampler, worker and judge.

One ``Runtime`` per configuration, swapped atomically by ``configure()``; the decorator reads the module-level
``RUNTIME`` once per call. Without ``configure()`` a runtime is built lazily from the environment and the
global providers. The worker thread starts on the first sampled call, and again lazily in a forked child.
"""

from __future__ import annotations

import asyncio
import atexit
import importlib
import os
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from opentelemetry import trace

from faithtrace import _finish, _internal
from faithtrace._config import Settings, build_settings
from faithtrace._errors import FaithtraceError
from faithtrace._finish import Returned
from faithtrace._sampling import Sampler
from faithtrace._telemetry import metrics as ft_metrics
from faithtrace._telemetry import names as n
from faithtrace._telemetry import setup, spans
from faithtrace._version import __version__
from faithtrace._worker import Job, Worker
from faithtrace.scoring.models import ErrorInfo, FaithfulnessResult, Outcome

if TYPE_CHECKING:
    from faithtrace.judge.client import Judge

_ENDPOINT_RETRY_S = 60.0
# Returned calls waiting for the worker to finish their spans. Each holds at most the capped texts of one
# call (contexts and answer are cut to the scoring limits on the request path), so this bounds the memory.
_INBOX_SIZE = 1024  # after the judge endpoint failed to come up, fail evaluations fast for this long


async def _off_loop(func: Callable[[], object]) -> None:
    try:
        await asyncio.to_thread(func)
    except RuntimeError:
        # At interpreter exit the default executor refuses new work; the flush at exit must still score
        # what is queued, so block this (faithtrace's own) loop instead.
        func()


def _refuse(job: Job) -> bool:
    return False


class Runtime:
    def __init__(self, settings: Settings, tracer_provider: Any = None, meter_provider: Any = None) -> None:
        self.settings = settings
        self.enabled = settings.enabled
        self.capture = settings.capture
        self.tracer_provider = tracer_provider
        self.meter_provider = meter_provider
        self.tracer = trace.get_tracer(n.INSTRUMENTATION_SCOPE, __version__, tracer_provider)
        self.instruments = ft_metrics.instruments_for(meter_provider)
        self.sampler = Sampler(settings.sampling)
        self._worker: Worker | None = None
        self._closed = False
        self._lock = threading.Lock()
        self._judge: Judge | None = None
        self._endpoint_lock: asyncio.Lock | None = None
        self._endpoint_failed: tuple[float, ErrorInfo] | None = None
        self._judge_ready = False

    # --- request path --------------------------------------------------------------------------------------
    def handoff(self, item: Returned) -> None:
        """Pass a returned call to the worker to finish; finish it here when the worker cannot take it."""
        worker = self._worker or self._start_worker()
        if worker is None:
            _finish.finish(self, item, _refuse)
        elif not worker.handoff(item):
            _finish.finish(self, item, worker.offer)

    def _start_worker(self) -> Worker | None:
        with self._lock:
            if self._worker is None and not self._closed:
                _register_at_exit()
                w = self.settings.worker
                self._worker = Worker(
                    lambda item, offer: _finish.finish(self, item, offer),
                    self.evaluate,
                    queue_size=w.queue_size,
                    concurrency=w.concurrency,
                    inbox_size=_INBOX_SIZE,
                )
            return self._worker

    def flush_spans(self, timeout: float) -> bool:
        """Wait until every returned call's span has ended (not for scoring)."""
        worker = self._worker
        if worker is None:
            return True
        done = worker.flush(timeout, spans_only=True)
        self._raise_kept(worker)
        return done

    @staticmethod
    def _raise_kept(worker: Worker) -> None:
        """Under pytest, a faithtrace bug caught on the worker's threads fails the test that flushes."""
        if worker.errors and _internal.should_raise():
            errors, worker.errors = worker.errors, []
            raise errors[0]

    def depth(self) -> int:
        worker = self._worker
        return worker.depth() if worker is not None else 0

    # --- worker side ---------------------------------------------------------------------------------------
    def judge(self) -> Judge:
        if self._judge is None:
            from faithtrace.judge.client import Judge

            self._judge = Judge(self.settings.judge)
        return self._judge

    def _error_result(self, etype: str, message: str, started: float) -> FaithfulnessResult:
        scoring = self.settings.scoring
        return FaithfulnessResult(
            outcome=Outcome.ERROR,
            threshold=scoring.threshold,
            idk_policy=scoring.idk_policy,
            judge_model=self.judge().model_name,
            duration_s=time.monotonic() - started,
            error=ErrorInfo(type=etype, message=message[:1000]),
        )

    async def _ensure_endpoint(self, judge: Judge) -> ErrorInfo | None:
        """Resolve the judge endpoint once, outside the evaluation timeout (the local judge starts slowly)."""
        if self._judge_ready:
            return None
        if self._endpoint_lock is None:
            self._endpoint_lock = asyncio.Lock()
        async with self._endpoint_lock:
            if self._judge_ready:
                return None
            failed = self._endpoint_failed
            if failed is not None and time.monotonic() - failed[0] < _ENDPOINT_RETRY_S:
                return failed[1]
            try:
                await _off_loop(judge.endpoint)
                # litellm takes seconds to import; done here, it does not freeze the loop (and with it the
                # timeouts and cancellation of every evaluation in flight).
                await _off_loop(lambda: importlib.import_module("litellm"))
            except FaithtraceError as exc:
                info = ErrorInfo(type="judge_unavailable", message=f"{type(exc).__name__}: {exc}")
                self._endpoint_failed = (time.monotonic(), info)
                return info
            self._endpoint_failed = None
            self._judge_ready = True
            return None

    async def _score(self, job: Job) -> FaithfulnessResult:
        from faithtrace.scoring.pipeline import run_pipeline

        started = time.monotonic()
        judge = self.judge()
        timeout = self.settings.worker.evaluation_timeout_s
        try:
            failed = await self._ensure_endpoint(judge)
            if failed is not None:
                return self._error_result(failed.type, failed.message, started)
            return await asyncio.wait_for(
                run_pipeline(job.query, job.contexts, job.answer, judge=judge, options=self.settings.scoring),
                timeout=timeout,
            )
        except TimeoutError:
            return self._error_result("timeout", f"the evaluation took longer than {timeout:g} s", started)
        except FaithtraceError as exc:
            return self._error_result(getattr(exc, "type", type(exc).__name__), str(exc), started)
        except Exception as exc:
            _internal.internal_error("scoring", exc)
            return self._error_result(type(exc).__name__, str(exc), started)

    async def evaluate(self, job: Job) -> None:
        """Score one job and turn the result into telemetry. Never raises (but under pytest)."""
        started_ns = time.time_ns()
        result = await self._score(job)
        try:
            spans.emit_evaluation(self.tracer, job, result, started_ns, self.capture)
            self.instruments.record_evaluation(job.stats, result, time.monotonic() - job.enqueued_at)
            self.sampler.record_spend(result.input_tokens + result.output_tokens, result.cost_usd)
        except Exception as exc:
            _internal.internal_error("evaluation telemetry", exc)

    # --- lifecycle -----------------------------------------------------------------------------------------
    def flush(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        worker = self._worker
        done = worker.flush(timeout) if worker is not None else True
        if worker is not None:
            self._raise_kept(worker)
        for provider in self._providers():
            setup.force_flush(provider, deadline - time.monotonic())
        return done

    def close(self, timeout: float) -> None:
        with self._lock:
            self._closed = True
            worker, self._worker = self._worker, None
        deadline = time.monotonic() + timeout
        if worker is not None:
            abandoned = worker.close(timeout)
            if abandoned:
                _internal.logger.warning(
                    "faithtrace: %d queued evaluation(s) abandoned at shutdown (timeout %.1f s)",
                    abandoned,
                    timeout,
                )
        for provider in self._providers():
            setup.force_flush(provider, deadline - time.monotonic())

    def _providers(self) -> list[Any]:
        from opentelemetry import metrics

        tp = self.tracer_provider if self.tracer_provider is not None else trace.get_tracer_provider()
        mp = self.meter_provider if self.meter_provider is not None else metrics.get_meter_provider()
        return [tp, mp]

    def after_fork(self) -> None:
        # The worker's threads do not exist in the child; its queue and locks may be in any state.
        self._worker = None
        self._lock = threading.Lock()
        self._endpoint_lock = None
        self.sampler.after_fork()


RUNTIME: Runtime | None = None
_swap_lock = threading.Lock()


def current() -> Runtime:
    """The runtime; built from the environment on first use when ``configure()`` was never called."""
    global RUNTIME
    rt = RUNTIME
    if rt is None:
        with _swap_lock:
            if RUNTIME is None:
                RUNTIME = Runtime(build_settings())
            rt = RUNTIME
    return rt


def install(settings: Settings, *, tracer_provider: Any = None, meter_provider: Any = None) -> None:
    global RUNTIME
    tp = setup.tracer_provider_for(settings, tracer_provider)
    mp = setup.meter_provider_for(settings, meter_provider)
    if setup.owns_providers():
        _register_at_exit()
    new = Runtime(settings, tp, mp)
    with _swap_lock:
        old, RUNTIME = RUNTIME, new
    if old is not None:
        old.close(old.settings.worker.shutdown_timeout_s)


def flush(timeout: float, *, evaluations: bool = True) -> bool:
    rt = RUNTIME
    if rt is None:
        return True
    if not evaluations:
        deadline = time.monotonic() + timeout
        done = rt.flush_spans(timeout)
        setup.force_flush(rt._providers()[0], deadline - time.monotonic())
        return done
    return rt.flush(timeout)


def shutdown(timeout: float) -> None:
    global RUNTIME
    with _swap_lock:
        old = RUNTIME
        # Closed, not None: a call after shutdown must not lazily start a new worker (e.g. during exit).
        RUNTIME = Runtime(build_settings(enabled=False, environ={}))
        RUNTIME._closed = True
    if old is not None:
        old.close(timeout)
    setup.shutdown_owned()


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
        _internal.logger.debug("faithtrace: shutdown at exit failed: %s", exc)


def _after_fork_in_child() -> None:
    global _swap_lock
    _swap_lock = threading.Lock()
    rt = RUNTIME
    if rt is not None:
        rt.after_fork()


_at_exit_registered = False


def _register_at_exit() -> None:
    """Register the exit flush late, when the first worker starts: atexit runs handlers last-in first-out, and
    ours must run before the SDK's own exit hooks shut the app's providers down (they register when the app
    creates them, usually after ``import faithtrace``)."""
    global _at_exit_registered
    if not _at_exit_registered:
        _at_exit_registered = True
        atexit.register(_at_exit)


ft_metrics.queue_depth = _queue_depth
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
