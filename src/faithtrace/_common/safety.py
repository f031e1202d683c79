"""Failures around the host's call: recorded, warned about (rate-limited) and swallowed, so the app never
notices. Two kinds, kept apart because they are different people's to fix:

* **ours** (``internal_error``): a faithtrace bug. Counted in ``faithtrace.internal_errors``.
* **the host's** (``host_error``): code of the app's that faithtrace called and that raised: one of its span
  processors, its ``redact`` hook. Counted in ``faithtrace.host_errors`` by where it raised, with a warning
  that names the culprit. (A host value that cannot be read as text is the call's ``input_error`` outcome,
  recorded on the call's span by the request path.)

Strict mode (``raise_internal_errors``) makes our own bugs raise instead, so that faithtrace's own test suite
fails on them rather than hiding them behind a warning. It is an explicit switch that only that suite turns
on (``tests/conftest.py``): it is never inferred from the environment, because faithtrace runs inside the
host's own test runs too, where it must behave exactly as in production. The host's errors never raise.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from typing import Final

logger = logging.getLogger("faithtrace")

# faithtrace's own test suite sets this (and only it): our bugs then raise where they happen.
raise_internal_errors: bool = False

_WARN_INTERVAL_S: Final = 60.0
_last_warned: dict[str, float] = {}
_warn_lock = threading.Lock()

# Read by observable counters: plain integers keep the failure path free of OTel calls that may fail too.
internal_error_count = 0
# By where the host's code raised. The usual places start at zero: their series exist before the first error,
# so that a rate over them is defined, and a dashboard shows a flat zero rather than no data.
host_error_counts: dict[str, int] = dict.fromkeys(
    ("span_processor.on_start", "span_processor.on_ending", "span_processor.on_end", "redact"), 0
)
_MAX_HOST_ERROR_KEYS: Final = 64


def should_raise() -> bool:
    return raise_internal_errors


def describe(exc: BaseException) -> str:
    """``"Type: message"`` for any exception, the host's included: its ``__str__`` may raise too."""
    try:
        name = type(exc).__qualname__
        if not isinstance(name, str):
            name = "exception"
    except Exception:
        name = "exception"
    try:
        message = str(exc)
    except Exception:
        message = "<str() of the exception raised>"
    return f"{name}: {message}" if message else name


def warn_rate_limited(key: str, message: str, *args: object) -> None:
    """Log ``message`` at most once a minute per ``key``: a broken capture spec must not flood the logs."""
    now = time.monotonic()
    with _warn_lock:
        last = _last_warned.get(key)
        if last is not None and now - last < _WARN_INTERVAL_S:
            return
        if len(_last_warned) > 1000:  # keys are code locations and function names, but stay bounded anyway
            _last_warned.clear()
        _last_warned[key] = now
    logger.warning(message, *args)


def internal_error(where: str, exc: BaseException) -> None:
    """Record a faithtrace bug caught at ``where``. Call from an ``except`` block (strict mode: re-raises)."""
    global internal_error_count
    internal_error_count += 1
    if raise_internal_errors:
        raise exc
    warn_rate_limited(
        "internal:" + where,
        "faithtrace: internal error in %s (%s); your code is unaffected, only this telemetry is lost",
        where,
        describe(exc),
    )
    logger.debug("faithtrace: internal error details", exc_info=exc)


def host_error(where: str, culprit: str, exc: BaseException, consequence: str) -> None:
    """Record an error raised by the host's own code that faithtrace called: counted by ``where`` (a low-
    cardinality name such as ``span_processor.on_end``), warned about once a minute per culprit. Never raises,
    strict mode included: it is not faithtrace's bug, and the host's call goes on as if nothing happened."""
    with _warn_lock:
        if where in host_error_counts or len(host_error_counts) < _MAX_HOST_ERROR_KEYS:
            host_error_counts[where] = host_error_counts.get(where, 0) + 1
    warn_rate_limited(
        f"host:{where}:{culprit}",
        "faithtrace: %s raised in %s (%s); %s. Your code is unaffected.",
        culprit,
        where,
        describe(exc),
        consequence,
    )


class handle_internal_errors(contextlib.ContextDecorator):
    """Our code under ``with handle_internal_errors(where):``, or decorated with it: an ``Exception`` it
    raises is recorded by ``internal_error`` (counted, one rate-limited warning) and swallowed, except in
    strict mode, where it propagates. ``failed`` says whether one was swallowed, for a fallback after the
    block.

    ``BaseException`` (``KeyboardInterrupt``, ``SystemExit``, cancellation) is never ours to swallow. A
    decorated function that fails returns ``None``.
    """

    def __init__(self, where: str) -> None:
        self.where = where
        self.failed = False

    def __enter__(self) -> handle_internal_errors:
        return self

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> bool:
        if not isinstance(exc, Exception):
            return False
        internal_error(self.where, exc)  # raises in strict mode
        self.failed = True
        return True
