"""Pytest fixtures users can import too (registered as the ``faithtrace`` pytest plugin).

``faithtrace_exporter`` wires faithtrace to in-memory span and metric readers through ``configure()``, so
a test can call the decorated app, ``flush()``, and assert on the spans that carry the evaluations and on
metrics::

    def test_answer_is_scored(faithtrace_exporter):
        faithtrace_exporter.configure(judge="openai/gpt-4o-mini")
        answer("What is the refund window?")
        assert faithtrace_exporter.flush()
        (evaluated,) = faithtrace_exporter.evaluation_spans()  # the RAG span itself, by default
        assert evaluated.attributes["gen_ai.evaluation.score.label"] == "pass"

Imports stay inside the fixtures: this module is loaded by every pytest run that has faithtrace installed, so
it must never slow down or break test collection, nor change how faithtrace behaves in the app's tests.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader, NumberDataPoint
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter


class FaithtraceCapture:
    """In-memory telemetry of faithtrace, and ``configure()`` bound to it."""

    def __init__(self) -> None:
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        self.span_exporter: InMemorySpanExporter = InMemorySpanExporter()
        self.metric_reader: InMemoryMetricReader = InMemoryMetricReader()
        self.tracer_provider: TracerProvider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.span_exporter))
        self.meter_provider: MeterProvider = MeterProvider(metric_readers=[self.metric_reader])

    def configure(self, **kwargs: Any) -> None:
        """``faithtrace.configure(**kwargs)`` with this capture's providers."""
        import faithtrace

        kwargs.setdefault("tracer_provider", self.tracer_provider)
        kwargs.setdefault("meter_provider", self.meter_provider)
        faithtrace.configure(**kwargs)

    def flush(self, timeout: float = 30.0) -> bool:
        import faithtrace

        return faithtrace.flush(timeout)

    def spans(self, name: str | None = None) -> list[ReadableSpan]:
        """The finished spans (named ``name``). A decorated call's span is ended by faithtrace's worker a
        moment after the call returns; this waits for those first, so a test need not ``flush()`` to see it.
        A span held for its evaluation (``evaluation_placement="rag_span"``, the default) ends with it: after
        ``flush()``."""
        self._settle()
        spans = list(self.span_exporter.get_finished_spans())
        return [s for s in spans if name is None or s.name == name]

    @staticmethod
    def _settle() -> None:
        """Wait for the worker to finish the calls handed to it (their spans, and the queue-or-drop
        decision behind the ``dropped`` count), without waiting for any scoring."""
        import faithtrace

        faithtrace.flush(10.0, evaluations=False)

    def evaluation_spans(self) -> list[ReadableSpan]:
        """The spans carrying an evaluation (its ``gen_ai.evaluation.result`` event): the RAG spans with
        ``evaluation_placement="rag_span"`` (the default), the ``evaluate faithfulness`` spans otherwise."""
        from faithtrace._telemetry.names import GEN_AI_EVALUATION_RESULT_EVENT

        return [s for s in self.spans() if any(e.name == GEN_AI_EVALUATION_RESULT_EVENT for e in s.events)]

    def metrics(self) -> dict[str, Any]:
        """Metric name → metric data (the SDK's ``Sum``/``Histogram``/``Gauge``), collected now."""
        self._settle()
        found: dict[str, Any] = {}
        data = self.metric_reader.get_metrics_data()
        for resource in data.resource_metrics if data is not None else []:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    found[metric.name] = metric.data
        return found

    def points(self, name: str) -> list[NumberDataPoint]:
        """The data points of metric ``name`` (empty when it has none)."""
        metric = self.metrics().get(name)
        return list(metric.data_points) if metric is not None else []

    def clear(self) -> None:
        self.span_exporter.clear()


@contextlib.contextmanager
def capturing() -> Iterator[FaithtraceCapture]:
    """The ``faithtrace_exporter`` fixture as a context manager, for fixtures of other scopes."""
    from faithtrace import shutdown

    capture = FaithtraceCapture()
    capture.configure()
    try:
        yield capture
    finally:
        shutdown(timeout=10.0)
        capture.tracer_provider.shutdown()
        capture.meter_provider.shutdown()


@pytest.fixture
def faithtrace_exporter() -> Iterator[FaithtraceCapture]:
    """faithtrace configured with in-memory exporters, shut down afterwards.

    faithtrace behaves here exactly as in production: its own errors are recorded (the
    ``faithtrace.internal_errors`` metric) and never raised into the app's code under test."""
    with capturing() as capture:
        yield capture
