"""Telemetry on each app's behalf: one tracer and meter provider per incoming resource, kept in a bounded LRU.

Evaluation spans in the app's trace (placement ``child``) carry the app's resource exactly as it arrived, so
a trace store files them with the app's own spans; those in a trace of their own (``linked``, the default
here) carry it with ``service.name`` and the Phoenix project suffixed ``-faithtrace`` (``own_traces``), so
that they never count in the app's latency, cost or errors. Metrics carry the app's resource too, with
``service.instance.id`` set to this scorer replica: N replicas each export cumulative counters for the same
app, and without a distinct instance they would overwrite each other's series (sum over instances for the
app's total).

Spans are exported synchronously per evaluation by ``export()``, and its result decides the OTLP answer:
a request is acknowledged only once its results were accepted downstream. Exports queue behind one another,
so while nothing takes the results (the one Collector is stopping) each used to wait out the SDK's timeout
in turn, and the requests in flight were answered only after a timeout per evaluation: the stopping
Collector waited on them for its own 110 s send timeout. ``ExportHealth`` fails the queued ones at once.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from faithtrace._config import options
from faithtrace._telemetry import metrics as ft_metrics
from faithtrace._telemetry import names as n
from faithtrace._telemetry.own_traces import own_resource_attributes
from faithtrace._telemetry.records import FunctionStats
from faithtrace._version import __version__

SpanExporterFactory = Callable[[], SpanExporter]
MetricReaderFactory = Callable[[], MetricReader]
_MAX_FUNCTIONS = 256
_SLOW_FAILURE_S = 1.0  # the OTLP SDK exporters' first back-off: a failure this slow was retried
_FLUSH_EVERY_S = 0.1


def otlp_span_exporter() -> SpanExporter:
    """An OTLP span exporter configured by the standard ``OTEL_EXPORTER_OTLP_*`` variables alone."""
    if options.read("otel.traces_protocol") != "grpc":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter()
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpanExporter

    return GrpcSpanExporter()


def otlp_metric_reader() -> MetricReader:
    if options.read("otel.metrics_protocol") != "grpc":
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

        return PeriodicExportingMetricReader(OTLPMetricExporter())
    from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import (
        OTLPMetricExporter as GrpcMetricExporter,
    )

    return PeriodicExportingMetricReader(GrpcMetricExporter())


class ExportHealth:
    """Whether the replica's results can be exported now, shared by its apps (one OTLP endpoint for all).

    After an export that failed slowly (a second or more: the SDK retried, nothing answered), exports fail
    at once, without trying, for as long as that failure took; one that failed fast (the endpoint refused
    the batch) lets the next try at once, since such failures do not pile up. The requests they belong to
    are answered UNAVAILABLE and the Collector re-sends them (its persistent queue keeps them)."""

    def __init__(self) -> None:
        self._down_until = 0.0

    def down(self) -> bool:
        return time.monotonic() < self._down_until

    def failed(self, took_s: float) -> None:
        if took_s >= _SLOW_FAILURE_S:
            self._down_until = max(self._down_until, time.monotonic() + took_s)


class _Collect(SpanProcessor):
    """Gathers the spans ended while one evaluation is emitted (emission is synchronous on one thread)."""

    def __init__(self) -> None:
        self.spans: list[ReadableSpan] = []

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        return None

    def on_end(self, span: ReadableSpan) -> None:
        self.spans.append(span)


class App:
    """One app's tracer, instruments and per-function stats."""

    def __init__(
        self,
        resource: dict[str, Any],
        instance_id: str,
        exporter: SpanExporter,
        reader: MetricReader,
        health: ExportHealth,
    ) -> None:
        self.service = str(resource.get("service.name", "unknown_service"))
        self._collect = _Collect()
        self._exporter = exporter
        self._export_lock = threading.Lock()
        self._health = health  # the replica's, shared by its apps
        self.tracer_provider = TracerProvider(resource=Resource(resource), shutdown_on_exit=False)
        self.tracer_provider.add_span_processor(self._collect)
        self.tracer = self.tracer_provider.get_tracer(n.INSTRUMENTATION_SCOPE, __version__)
        self._own_provider = TracerProvider(
            resource=Resource(own_resource_attributes(resource)), shutdown_on_exit=False
        )
        self._own_provider.add_span_processor(self._collect)
        self.own_tracer = self._own_provider.get_tracer(n.INSTRUMENTATION_SCOPE, __version__)
        metric_resource = Resource({**resource, "service.instance.id": instance_id})
        self.meter_provider = MeterProvider(
            metric_readers=[reader], resource=metric_resource, shutdown_on_exit=False
        )
        self.stats: dict[str, FunctionStats] = {}
        self._flush_lock = threading.Lock()
        self._flushing = self._flush_again = False
        meter = self.meter_provider.get_meter(n.INSTRUMENTATION_SCOPE, __version__)
        self.instruments = ft_metrics.Instruments(meter, lambda: list(self.stats.values()), process=False)

    def stats_for(self, function: str) -> FunctionStats:
        stats = self.stats.get(function)
        if stats is None:
            if len(self.stats) >= _MAX_FUNCTIONS:
                function = "other"
            stats = self.stats.setdefault(function, FunctionStats(function))
        return stats

    def flush_metrics(self) -> None:
        """Export this app's metrics now, off the event loop; calls while one export runs make one more.
        With the fleet's record of scored traces, an evaluation this replica counted is judged nowhere else
        again: its counts must not wait for the periodic export, which a replica killed meanwhile never
        makes (it lost up to OTEL_METRIC_EXPORT_INTERVAL of them)."""
        with self._flush_lock:
            if self._flushing:
                self._flush_again = True
                return
            self._flushing = True
        threading.Thread(target=self._flush, name="faithtrace-metrics-flush", daemon=True).start()

    def _flush(self) -> None:
        while True:
            self.meter_provider.force_flush(timeout_millis=10_000)
            # Under load, one export per _FLUSH_EVERY_S at most: what a kill can take stays that short, and
            # exporting back to back would cost a core.
            time.sleep(_FLUSH_EVERY_S)
            with self._flush_lock:
                if not self._flush_again:
                    self._flushing = False
                    return
                self._flush_again = False

    def collect(self, emit: Callable[[trace.Tracer], object], *, own: bool = False) -> list[ReadableSpan]:
        """The spans ``emit`` ends, made with the app's tracer or (``own``) that of faithtrace's own traces
        (call on one thread at a time: the event loop's)."""
        self._collect.spans = []
        emit(self.own_tracer if own else self.tracer)
        spans, self._collect.spans = self._collect.spans, []
        return spans

    def export(self, spans: Sequence[ReadableSpan]) -> bool:
        """Hand ``spans`` to the exporter and wait for its verdict (runs in a worker thread)."""
        if not spans:
            return True
        with self._export_lock:
            if self._health.down():  # checked once the exports queued before this one are done
                return False
            started = time.monotonic()
            if self._exporter.export(spans) is SpanExportResult.SUCCESS:
                return True
            self._health.failed(time.monotonic() - started)
            return False

    def close(self) -> None:
        self.meter_provider.shutdown()
        self.tracer_provider.shutdown()
        self._own_provider.shutdown()
        self._exporter.shutdown()


class Apps:
    """Apps by resource, least recently used first out (its metrics are flushed on the way out)."""

    def __init__(
        self,
        *,
        instance_id: str,
        max_apps: int = 64,
        span_exporter: SpanExporterFactory = otlp_span_exporter,
        metric_reader: MetricReaderFactory = otlp_metric_reader,
    ) -> None:
        self.instance_id = instance_id
        self.max_apps = max_apps
        self._span_exporter = span_exporter
        self._metric_reader = metric_reader
        self._apps: collections.OrderedDict[Any, App] = collections.OrderedDict()
        self.health = ExportHealth()

    def get(self, key: Any, resource: dict[str, Any]) -> App:
        app = self._apps.get(key)
        if app is not None:
            self._apps.move_to_end(key)
            return app
        app = self._apps[key] = App(
            resource, self.instance_id, self._span_exporter(), self._metric_reader(), self.health
        )
        while len(self._apps) > self.max_apps:
            _, old = self._apps.popitem(last=False)
            threading.Thread(target=old.close, name="faithtrace-app-close", daemon=True).start()
        return app

    def close(self) -> None:
        apps, self._apps = list(self._apps.values()), collections.OrderedDict()
        for app in apps:
            app.close()
