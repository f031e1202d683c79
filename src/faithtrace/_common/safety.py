"""Our own failures: recorded, warned about (rate-limited) and swallowed, so the host app never notices.

Under pytest they raise instead, so that a bug in faithtrace fails a test rather than hiding behind a warning.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from typing import Final

logger = logging.getLogger("faithtrace")

# True/False forces the behaviour (the testing fixtures set it); None means "raise when pytest is running".
raise_internal_errors: bool | None = None

_WARN_INTERVAL_S: Final = 60.0
_last_warned: dict[str, float] = {}
_warn_lock = threading.Lock()

# Read by an observable counter: a plain integer keeps the failure path free of OTel calls that may fail too.
internal_error_count = 0


def should_raise() -> bool:
    if raise_internal_errors is not None:
        return raise_internal_errors
    return "PYTEST_CURRENT_TEST" in os.environ


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
    """Record a faithtrace bug caught at ``where``. Call from an ``except`` block; re-raises under pytest."""
    global internal_error_count
    internal_error_count += 1
    if should_raise():
        raise exc
    warn_rate_limited(
        "internal:" + where,
        "faithtrace: internal error in %s (%s: %s); your code is unaffected, only this telemetry is lost",
        where,
        type(exc).__name__,
        exc,
    )
    logger.debug("faithtrace: internal error details", exc_info=exc)


class handle_internal_errors(contextlib.ContextDecorator):
    """Our code under ``with handle_internal_errors(where):``, or decorated with it: an ``Exception`` it
    raises is recorded by ``internal_error`` (counted, one rate-limited warning) and swallowed, except under
    the test suite, where it propagates. ``failed`` says whether one was swallowed, for a fallback after the
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
        internal_error(self.where, exc)  # raises under the test suite
        self.failed = True
        return True
