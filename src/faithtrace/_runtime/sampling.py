"""Whether a call is scored, decided on the request path in O(1) and before any other work is done.

Order: an unsampled parent trace, the ratio (by trace id), the hourly budget, then the rate limit (last, so a
call refused for another reason does not use up a token). The budget is charged by the worker once an
evaluation's spend is known, so evaluations already queued may overrun it slightly.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Callable
from typing import Final

from opentelemetry import trace
from opentelemetry.trace import SpanContext, TraceFlags

from faithtrace._config.settings import SamplingOptions
from faithtrace._telemetry.records import Reason

# Module constants: the request path returns these without an enum attribute lookup per call.
SCORED: Final = Reason.SCORED
PARENT: Final = Reason.PARENT
RATIO: Final = Reason.RATIO
BUDGET: Final = Reason.BUDGET
RATE_LIMIT: Final = Reason.RATE_LIMIT

_TRACE_ID_MASK: Final = (1 << 64) - 1
_HOUR_S: Final = 3600.0

# Our own generator, never the ``random`` module's: an app that seeds that one gets the same sequence with and
# without faithtrace. Reseeded in a forked child, as ``random`` does for its own, so that the workers of a
# pre-forking server do not all draw the same numbers.
_random = random.Random()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_random.seed)


def _current_span_context_api() -> SpanContext | None:
    try:
        return trace.get_current_span().get_span_context()
    except Exception:  # the app's current span raised: no parent to follow (starting ours will say why)
        return None


def _fast_current_span_context() -> Callable[[], SpanContext | None]:
    """The current span's context in one contextvar read, when OTel's default runtime context is in use.

    ``trace.get_current_span()`` costs several Python calls; on a sampled-out call that is most of our cost.
    Falls back to the public API for any other runtime context (``OTEL_PYTHON_CONTEXT``) or OTel version.
    """
    try:
        from opentelemetry.context import _RUNTIME_CONTEXT
        from opentelemetry.context.contextvars_context import ContextVarsRuntimeContext
        from opentelemetry.trace.propagation import _SPAN_KEY

        if type(_RUNTIME_CONTEXT) is not ContextVarsRuntimeContext:
            return _current_span_context_api
        var = _RUNTIME_CONTEXT._current_context
        get = var.get
    except (ImportError, AttributeError):  # pragma: no cover - other OTel versions
        return _current_span_context_api

    def current() -> SpanContext | None:
        span = get().get(_SPAN_KEY)
        if span is None:
            return None
        try:
            return span.get_span_context()  # type: ignore[attr-defined,no-any-return]
        except Exception:  # the app's current span raised: no parent to follow (starting ours will say why)
            return None

    return current


current_span_context = _fast_current_span_context()


class Sampler:
    """One per configuration. ``decide()`` is called concurrently from the host's threads."""

    def __init__(self, options: SamplingOptions) -> None:
        self.options = options
        # Same rule as OTel's TraceIdRatioBased: compare the low 64 bits of the trace id with a bound, so
        # every service using the same ratio agrees on a trace.
        self._bound = round(options.ratio * (1 << 64))
        self._all = options.ratio >= 1.0
        self._never = options.ratio <= 0.0  # nothing is scored: not even the context is worth reading
        self._respect_parent = options.respect_parent
        self._rate = options.max_per_second
        self._tokens = max(options.max_per_second or 0.0, 1.0)  # start with a full bucket
        self._refilled = time.monotonic()
        self._max_tokens = options.max_tokens_per_hour
        self._max_cost = options.max_cost_usd_per_hour
        self._budgeted = self._max_tokens is not None or self._max_cost is not None
        self._window_start = time.monotonic()
        self.tokens_spent = 0
        self.cost_spent = 0.0
        self._lock = threading.Lock()

    def decide(self) -> Reason:
        """``SCORED`` (0, false) or the reason the call is not scored."""
        if self._never:
            return RATIO
        ctx = current_span_context()
        # The plain int operations below are the cheap spellings of is_valid / trace_flags.sampled.
        trace_id = ctx.trace_id if ctx is not None else 0
        if trace_id:
            if self._respect_parent and not ctx.trace_flags & TraceFlags.SAMPLED:  # type: ignore[union-attr]
                return PARENT
            if not self._all and (trace_id & _TRACE_ID_MASK) >= self._bound:
                return RATIO
        elif not self._all and _random.getrandbits(64) >= self._bound:
            # A new trace: its id does not exist yet, and a uniform draw is what the id would give.
            return RATIO
        if self._budgeted and self._over_budget():
            return BUDGET
        if self._rate is not None and not self._take_token():
            return RATE_LIMIT
        return SCORED

    def _take_token(self) -> bool:
        rate = self._rate
        assert rate is not None
        with self._lock:
            now = time.monotonic()
            # Bursts up to one second's worth (at least one evaluation).
            self._tokens = min(max(rate, 1.0), self._tokens + (now - self._refilled) * rate)
            self._refilled = now
            if self._tokens >= 1.0:
                self._tokens -= 1.0
                return True
            return False

    def _roll_window(self, now: float) -> None:
        if now - self._window_start >= _HOUR_S:
            self._window_start = now
            self.tokens_spent = 0
            self.cost_spent = 0.0

    def _over_budget(self) -> bool:
        self._roll_window(time.monotonic())
        if self._max_tokens is not None and self.tokens_spent >= self._max_tokens:
            return True
        return self._max_cost is not None and self.cost_spent >= self._max_cost

    def record_spend(self, tokens: int, cost_usd: float | None) -> None:
        """Charge one finished evaluation to the current hour (called by the worker)."""
        if not self._budgeted:
            return
        with self._lock:
            self._roll_window(time.monotonic())
            self.tokens_spent += tokens
            if cost_usd:
                self.cost_spent += cost_usd

    def after_fork(self) -> None:
        # A lock held by another thread at fork time stays locked forever in the child.
        self._lock = threading.Lock()
