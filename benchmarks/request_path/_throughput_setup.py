"""faithtrace wired for throughput.py: real OTel SDK providers, a counting span exporter, a metric reader."""

from __future__ import annotations

import ctypes
import gc
import importlib.metadata
import threading
import time
from array import array
from collections.abc import Callable, Sequence
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

import faithtrace
from benchmarks._shared import common as _common
from faithtrace._telemetry import names

CONTEXTS = [
    "Refunds are accepted within 30 days of purchase with a receipt.",
    "Store credit is offered after 30 days.",
]


class CountingExporter(SpanExporter):
    """Counts what would be exported and keeps nothing, so memory over time measures faithtrace alone."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counts = {
            "evaluations": 0,
            "scored": 0,
            "errors": 0,
            "dropped": 0,
            "rag_spans": 0,
            "judge_calls": 0,
            "remote_rag_spans": 0,
        }

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with self._lock:
            for span in spans:
                attrs = span.attributes or {}
                # An evaluation: on its RAG span (the default) or on an evaluation span of its own.
                if any(e.name == names.GEN_AI_EVALUATION_RESULT_EVENT for e in span.events):
                    self.counts["evaluations"] += 1
                    outcome = attrs.get(names.EVAL_OUTCOME)
                    if outcome == "scored":
                        self.counts["scored"] += 1
                    elif outcome == "error":
                        self.counts["errors"] += 1
                if span.name == names.EVALUATION_SPAN:
                    continue
                if attrs.get(names.GEN_AI_OPERATION_NAME) == names.JUDGE_OPERATION:
                    self.counts["judge_calls"] += 1
                elif names.SAMPLED in attrs:
                    self.counts["rag_spans"] += 1
                    if attrs.get(names.SCORING_REMOTE):
                        self.counts["remote_rag_spans"] += 1
                    if attrs.get(names.SAMPLING_REASON) == "queue_full":
                        self.counts["dropped"] += 1
        return SpanExportResult.SUCCESS

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self.counts)

    def shutdown(self) -> None:
        return None


class Faithtrace:
    """Owns the providers and faithtrace's configuration for one benchmark run; shuts all down on exit."""

    def __init__(self, judge_base: str, latency_s: float) -> None:
        self.exporter = CountingExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(
            BatchSpanProcessor(self.exporter, max_queue_size=65536, schedule_delay_millis=200)
        )
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])
        self.judge_base = judge_base
        self.latency_s = latency_s
        self._concurrency = 1
        # A detector model directory: the trained detector decides every verdict (no judge call).
        self.detector: str | None = None
        self.errors: list[str] = []  # faithtrace API calls that raised (they should not)

    def __enter__(self) -> Faithtrace:
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            faithtrace.shutdown(timeout=5.0)
        except Exception as e:  # recorded in the results: flush/shutdown must never raise into the host
            self.errors.append(f"shutdown raised {type(e).__name__}: {e}")
        self.tracer_provider.shutdown()
        self.meter_provider.shutdown()

    def configure(
        self, *, concurrency: int, queue_size: int, rate: float, scoring: str | None = None
    ) -> None:
        self._concurrency = concurrency
        options: faithtrace.ScoringOptions | str | None = scoring
        if self.detector and scoring is None:
            options = faithtrace.ScoringOptions(verdict_source="detector", detector_model=self.detector)
        faithtrace.configure(
            scoring=options,
            judge=faithtrace.JudgeSettings(
                model="openai/bench-fake",
                api_base=self.judge_base,
                api_key="sk-bench",
                structured_output="json_schema",
                max_concurrency=concurrency,  # evaluations at once, and LLM requests in flight
                timeout_s=max(30.0, self.latency_s * 10),
            ),
            sampling=faithtrace.SamplingOptions(ratio=rate),
            worker=faithtrace.WorkerOptions(queue_size=queue_size),
            tracer_provider=self.tracer_provider,
            meter_provider=self.meter_provider,
        )

    def decorated(self, fn: Callable[[str, list[str]], str]) -> Callable[[str, list[str]], str]:
        wrapped: Callable[[str, list[str]], str] = faithtrace.trace_faithfulness(
            query="question", contexts="contexts"
        )(fn)
        return wrapped

    def flush(self, timeout: float) -> bool:
        try:
            ok = faithtrace.flush(timeout=timeout)
        except Exception as e:
            self.errors.append(f"flush raised {type(e).__name__}: {e}")
            ok = False
        self.tracer_provider.force_flush()
        return ok

    def refill(self, fn: Callable[[str, list[str]], str], n: int) -> None:
        for _ in range(n):
            fn("What is the refund window?", CONTEXTS)

    def queue_depth(self) -> float | None:
        data = self.reader.get_metrics_data()
        if data is None:
            return None
        for rm in data.resource_metrics:
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    if m.name == names.METRIC_QUEUE_DEPTH:
                        points = list(m.data.data_points)
                        if points:
                            return float(sum(p.value for p in points))
        return None

    def versions(self) -> dict[str, str]:
        out = {}
        for dist in ("faithtrace", "litellm", "opentelemetry-sdk"):
            try:
                out[dist] = importlib.metadata.version(dist)
            except importlib.metadata.PackageNotFoundError:
                out[dist] = "not installed"
        return out


class GcPauses:
    """The cyclic collector's pauses while installed, per generation.

    A collection holds the GIL from start to end, so every thread of the process, the host's included, waits
    for it; a full (generation 2) collection walks every tracked object, and importing litellm adds a few
    hundred thousand of them.
    """

    def __init__(self) -> None:
        self._started = 0.0
        self._ms: dict[int, array[float]] = {0: array("d"), 1: array("d"), 2: array("d")}

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        # Collections never overlap (the GIL is held throughout), so one start time is enough.
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self._ms[info["generation"]].append((time.perf_counter() - self._started) * 1000)

    def __enter__(self) -> GcPauses:
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._callback)

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            f"gen{g}": {"collections": len(ms), "max_ms": max(ms, default=0.0), "total_ms": sum(ms)}
            for g, ms in self._ms.items()
        }
        out["tracked_objects"] = len(gc.get_objects())
        out["frozen_objects"] = gc.get_freeze_count()
        return out


def trimmed_rss() -> tuple[float, float | None]:
    """RSS before and after asking glibc to hand free heap pages back (None after: not glibc)."""
    before = _common.rss_mb()
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: nothing to ask
        return before, None
    return before, _common.rss_mb()


def slope_per_min(points: list[dict[str, float]], key: str) -> float | None:
    """Least-squares slope of ``key`` against ``t_s``, per minute."""
    if len(points) < 3:
        return None
    xs = [p["t_s"] for p in points]
    ys = [p[key] for p in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    var = sum((x - mx) ** 2 for x in xs)
    if not var:
        return None
    return 60.0 * sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var
