"""Which runtime is live, and its lifecycle: ``configure()`` installs one, ``flush()`` and ``shutdown()``,
the flush at interpreter exit and the reset in a forked child.

One ``Runtime`` per configuration, swapped atomically by ``configure()``; the decorator reads the
module-level ``RUNTIME`` once per call. Without ``configure()`` a runtime is built lazily from the environment
and the global providers.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import threading
import time
from typing import Any

from faithtrace._common import host_state, safety
from faithtrace._config.settings import Settings, build_settings
from faithtrace._runtime.runtime import Runtime, ShutdownReport
from faithtrace._telemetry import setup

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
                RUNTIME = _new(build_settings())


def install(settings: Settings, *, tracer_provider: Any = None, meter_provider: Any = None) -> None:
    """Make ``settings`` the live configuration; the previous runtime finishes its queue within this call
    (up to its ``shutdown_timeout_s``)."""
    global RUNTIME
    tp = setup.tracer_provider_for(settings, tracer_provider)
    mp = setup.meter_provider_for(settings, meter_provider)
    _register_at_exit()
    new = _new(settings, tp, mp)
    with _swap_lock:
        old, RUNTIME = RUNTIME, new
    if old is not None:
        _report(old.close(time.monotonic() + old.settings.worker.shutdown_timeout_s), "reconfiguration")


def flush(timeout: float = 30.0, *, evaluations: bool = True) -> bool:
    """Wait until every queued evaluation has finished and its telemetry is exported.

    A decorated call's own span is ended and exported by faithtrace's worker a moment after the call
    returns, or, with ``evaluation_placement="rag_span"`` (the default), once its evaluation is on it. With
    ``evaluations=False`` this waits only until every such span is ended or held for its evaluation, not for
    any scoring.
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
    evaluations abandoned and cancelled (also counted as ``dropped`` in the evaluations metric) and the RAG
    spans that were held for them and are exported without them, and says whether the exporters confirmed;
    a warning is logged when anything was lost. Only the providers faithtrace
    set up itself are shut down, never the app's. The decorator is a pass-through afterwards, until the next
    ``configure()``. Runs at interpreter exit with the worker's ``shutdown_timeout_s``.
    """
    global RUNTIME
    started = time.monotonic()
    deadline = started + max(0.0, timeout)
    with _swap_lock:
        old = RUNTIME
        # Closed, not None: a call after shutdown must not lazily start a new worker (e.g. during exit).
        RUNTIME = _new(build_settings(enabled=False, environ={}), closed=True)
    report = old.close(deadline) if old is not None else ShutdownReport()
    owned_down = setup.shutdown_owned(deadline)
    report = ShutdownReport(
        abandoned=report.abandoned,
        cancelled=report.cancelled,
        unfinished_spans=report.unfinished_spans,
        telemetry_flushed=report.telemetry_flushed and owned_down,
        elapsed_s=time.monotonic() - started,
        released_spans=report.released_spans,
    )
    _report(report, "shutdown")
    return report


def _report(report: ShutdownReport, during: str) -> None:
    if report.complete:
        return
    safety.logger.warning(
        "faithtrace: %s after %.1f s lost %d queued and %d running evaluation(s) (%d RAG span(s) exported "
        "without theirs), %d unfinished span(s)%s",
        during,
        report.elapsed_s,
        report.abandoned,
        report.cancelled,
        report.released_spans,
        report.unfinished_spans,
        "" if report.telemetry_flushed else "; telemetry export did not finish in time",
    )


def _new(
    settings: Settings, tracer_provider: Any = None, meter_provider: Any = None, *, closed: bool = False
) -> Runtime:
    return Runtime(
        settings,
        tracer_provider,
        meter_provider,
        queue_depth=_queue_depth,
        first_worker=_register_at_exit,
        held_spans=_held_spans,
        closed=closed,
    )


def _queue_depth() -> int:
    rt = RUNTIME
    return rt.depth() if rt is not None else 0


def _held_spans() -> int:
    rt = RUNTIME
    return rt.held_count() if rt is not None else 0


def _at_exit() -> None:
    rt = RUNTIME
    if rt is None or (not rt.worker_started and not setup.owns_providers()):
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
