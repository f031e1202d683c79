"""``score_openinference()``: score a LlamaIndex / LangChain app from the OpenInference spans it emits.

A span processor on the app's tracer provider hands each ended span to the trace assembler (a dict lookup
for a span that is not OpenInference), and queues each assembled trace on faithtrace's worker like a
decorated call. The app's spans have been handed to its exporters by then, so none can carry its
evaluation: the evaluation span goes to a trace of its own, linked to the span that holds the question and
answer (or, with ``evaluation_placement="child"``, joins the app's trace as that span's child, stretching
the trace to the scoring's end). Phoenix annotations still put the score on the app's span.
"""

from __future__ import annotations

import collections
import threading
import time
import weakref
from typing import Any, Final

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.trace import SpanContext, TraceFlags

from faithtrace._common import safety
from faithtrace._common.errors import ConfigError
from faithtrace._runtime import lifecycle
from faithtrace._telemetry import names as n
from faithtrace._telemetry.metrics import register
from faithtrace._telemetry.records import FunctionStats, Job
from faithtrace.sources.assemble import Assembler, Resolved
from faithtrace.sources.conventions import SpanView, cut, role_of

_MAX_FUNCTIONS: Final = 256  # distinct root span names counted as functions (metrics cardinality)


class OpenInferenceProcessor(SpanProcessor):
    """Assembles the app's OpenInference traces and queues them for scoring. Never raises into the app."""

    def __init__(self, *, settle_s: float = 30.0, max_traces: int = 2000, max_bytes: int = 32 << 20) -> None:
        self._lock = threading.Lock()
        # No waiting after the root: in-process, spans end in order and the root last, so a trace whose root
        # ended is complete (a trace without a retriever is not RAG; open spans, a stream being read, are
        # followed as such).
        self._assembler = Assembler(
            settle_s=settle_s, max_traces=max_traces, max_bytes=max_bytes, grace_s=0.0, not_rag_after_s=0.0
        )
        self.incomplete: collections.Counter[str] = collections.Counter()  # RAG traces not scored, by reason
        self._stats: dict[str, FunctionStats] = {}
        self._wake = threading.Event()
        self._closed = False
        self._ticker: threading.Thread | None = None

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        # Only spans of a trace already followed (a retriever has ended in it) are noted: the trace then
        # waits for them to end, so a stream read after its root span ended is scored once it is finished.
        # Guarded whole: this runs inside the app's own start_span, which the SDK does not guard.
        with safety.handle_internal_errors("following an OpenInference trace"):
            ctx = span.context
            if ctx is None or not self._assembler.tracks(ctx.trace_id):
                return
            with self._lock:
                self._assembler.started(ctx.trace_id, ctx.span_id)

    def on_end(self, span: ReadableSpan) -> None:
        with safety.handle_internal_errors("assembling an OpenInference trace"):
            self._on_end(span)

    def _on_end(self, span: ReadableSpan) -> None:
        attrs = span.attributes or {}
        ctx = span.context
        if ctx is None or self._closed:
            return
        parent = span.parent.span_id if span.parent is not None else 0
        # A span whose parent is in another process is the root of this process's part of the trace.
        local_root = span.parent is not None and span.parent.is_remote
        role = None
        if n.OPENINFERENCE_SPAN_KIND in attrs or n.FUNCTION in attrs:
            role = role_of(attrs, 0 if local_root else parent, ())
        if role is None:
            # Nothing to keep: only a span of a trace we follow matters (its root ends the trace; another may
            # be what the trace waits for). Most spans end here after one dict lookup.
            if self._assembler.tracks(ctx.trace_id):
                with self._lock:
                    self._assembler.ended(ctx.trace_id, ctx.span_id, time.monotonic())
                    if not parent or local_root:
                        self._assembler.root_seen(ctx.trace_id, ctx.span_id)
                    resolved = self._assembler.due(time.monotonic())
                self._submit(resolved)
            return
        view = SpanView(
            ctx.trace_id,
            ctx.span_id,
            parent,
            span.name,
            role,
            attrs,
            span.start_time or 0,
            span.end_time or 0,
            local_root,
        )
        with self._lock:
            resolved = self._assembler.add(view, time.monotonic())
            resolved += self._assembler.due(time.monotonic())
            pending = self._assembler.pending()
        self._submit(resolved)
        if pending:
            self._start_ticker()

    def _submit(self, resolved: list[Resolved]) -> None:
        if not resolved:
            return
        rt = lifecycle.current()
        for _trace_id, item, why in resolved:
            if item is None:
                self.incomplete[why] += 1
                safety.warn_rate_limited(
                    "openinference:incomplete:" + why,
                    "faithtrace: an OpenInference RAG trace was not scored (%s); see "
                    "OpenInferenceProcessor.incomplete for the counts",
                    why,
                )
                continue
            if not rt.enabled:
                continue
            scoring = rt.settings.scoring
            item = cut(item, scoring.max_answer_chars, scoring.max_context_chars)
            stats = self._stats_for(item.function)
            reason = rt.sampler.decide()
            if reason > 0:
                stats.sampled_out[reason] += 1
                continue
            span_context = SpanContext(item.trace_id, item.span_id, True, TraceFlags(TraceFlags.SAMPLED))
            job = Job(
                span_context, stats, item.query, item.contexts, item.answer, time.time_ns(), time.monotonic()
            )
            rt.submit(job)

    def _stats_for(self, function: str) -> FunctionStats:
        stats = self._stats.get(function)
        if stats is None:
            if len(self._stats) >= _MAX_FUNCTIONS:
                function = "other"
                stats = self._stats.get(function)
            if stats is None:
                stats = self._stats[function] = register(FunctionStats(function))
        return stats

    # --- settling: RAG traces whose root never ends are reported after settle_s ---------------------------
    def _start_ticker(self) -> None:
        if self._ticker is None or not self._ticker.is_alive():
            with self._lock:
                if self._ticker is None or not self._ticker.is_alive():
                    self._ticker = threading.Thread(
                        target=self._tick, name="faithtrace-assemble", daemon=True
                    )
                    self._ticker.start()

    def _tick(self) -> None:
        interval = max(0.05, min(1.0, self._assembler.settle_s / 4))
        while not self._closed:
            self._wake.wait(interval)
            with self._lock:
                resolved = self._assembler.due(time.monotonic())
                idle = not self._assembler.pending()
            with safety.handle_internal_errors("scoring an OpenInference trace"):
                self._submit(resolved)
            if idle:
                return

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Resolve every trace held so far (the app is flushing: whatever came is all that comes), except
        those waiting for a span still open (a stream being read): they resolve when it ends."""
        # Guarded: this runs inside the app's own provider.force_flush(), which must not raise because of us.
        with safety.handle_internal_errors("flushing OpenInference traces") as guard:
            with self._lock:
                resolved = self._assembler.due(time.monotonic(), everything=True)
            self._submit(resolved)
        return not guard.failed

    def shutdown(self) -> None:
        try:
            # Guarded: this runs inside the app's own provider.shutdown(), which must not raise because of us.
            with safety.handle_internal_errors("closing OpenInference traces"):
                with self._lock:
                    resolved = self._assembler.due(time.monotonic(), closing=True)
                self._submit(resolved)
        finally:
            self._closed = True
            self._wake.set()


_installed: weakref.WeakKeyDictionary[Any, OpenInferenceProcessor] = weakref.WeakKeyDictionary()
_install_lock = threading.Lock()


def score_openinference(tracer_provider: Any = None, *, settle_s: float = 30.0) -> OpenInferenceProcessor:
    """Score the RAG traces an OpenInference-instrumented app (LlamaIndex, LangChain) already emits.

    One call after the app's instrumentation is set up: each trace's RETRIEVER documents and the question and
    answer of its root (or enclosing CHAIN) span are scored like a decorated call (same judge, sampling,
    worker and telemetry). The ``evaluate faithfulness`` span goes to a trace of its own linked to the app's
    span (``evaluation_placement="child"``: into the app's trace). Calling it again for the same provider
    returns the processor already installed.

    Args:
        tracer_provider: an SDK ``TracerProvider``; defaults to the global one.
        settle_s: a RAG trace whose root span has not ended this long after its last span is not scored
            (counted in the processor's ``incomplete``, by reason): it is never scored from a guess.

    Raises:
        ConfigError: the provider is not an OpenTelemetry SDK tracer provider.
    """
    provider = tracer_provider if tracer_provider is not None else trace.get_tracer_provider()
    if not hasattr(provider, "add_span_processor"):
        raise ConfigError(
            "score_openinference() needs an OpenTelemetry SDK TracerProvider (set one up, or pass it)"
        )
    with _install_lock:
        found = _installed.get(provider)
        if found is None:
            found = OpenInferenceProcessor(settle_s=settle_s)
            provider.add_span_processor(found)
            _installed[provider] = found
        return found
