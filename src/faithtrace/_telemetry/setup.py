"""OTel providers faithtrace sets up itself, only when the app has none: OTLP export, Prometheus ``/metrics``.

An app that configured OpenTelemetry keeps full control: its providers are used as they are. Providers created
here are made global (so the app's own spans join the same pipeline), created at most once per process and
shut down by ``faithtrace.shutdown()``.
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from opentelemetry import metrics, trace

from faithtrace._errors import ConfigError

if TYPE_CHECKING:
    from faithtrace._config import Settings

logger = logging.getLogger("faithtrace")


@dataclass
class _Owned:
    tracer_provider: Any = None
    meter_provider: Any = None
    prometheus_server: Any = None
    prometheus_address: tuple[str, int] | None = None
    push_readers: list[Any] = field(default_factory=list)


_owned = _Owned()
_lock = threading.Lock()


def app_has_tracer_provider() -> bool:
    return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider | trace.NoOpTracerProvider)


def app_has_meter_provider() -> bool:
    from opentelemetry.metrics._internal import _ProxyMeterProvider

    return not isinstance(metrics.get_meter_provider(), _ProxyMeterProvider | metrics.NoOpMeterProvider)


def _resource(settings: Settings) -> Any:
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource

    # Resource.create() reads OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES itself.
    return Resource.create({SERVICE_NAME: settings.service_name} if settings.service_name else {})


def _http(signal: str) -> bool:
    protocol = os.environ.get(f"OTEL_EXPORTER_OTLP_{signal}_PROTOCOL") or os.environ.get(
        "OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"
    )
    return protocol.strip().lower() != "grpc"


def _endpoint(base: str, path: str) -> str:
    # The exporters append /v1/<signal> only to the endpoint they read from env, not to one passed in.
    return base.rstrip("/") + path


def span_exporter(settings: Settings) -> Any:
    endpoint = settings.otlp_endpoint
    assert endpoint is not None
    if _http("TRACES"):
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter(endpoint=_endpoint(endpoint, "/v1/traces"))
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpanExporter

    return GrpcSpanExporter(endpoint=endpoint)


def metric_exporter(settings: Settings) -> Any:
    endpoint = settings.otlp_endpoint
    assert endpoint is not None
    if _http("METRICS"):
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

        return OTLPMetricExporter(endpoint=_endpoint(endpoint, "/v1/metrics"))
    from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import (
        OTLPMetricExporter as GrpcMetricExporter,
    )

    return GrpcMetricExporter(endpoint=endpoint)


def _prometheus_reader(settings: Settings) -> Any:
    port = settings.prometheus_port
    assert port is not None
    try:
        from opentelemetry.exporter.prometheus import PrometheusMetricReader
        from prometheus_client import CollectorRegistry, start_http_server
    except ImportError as exc:
        raise ConfigError(
            "prometheus=... needs the Prometheus exporter: pip install 'faithtrace[prometheus]'"
        ) from exc
    # A private registry: no clash with the app's own prometheus_client metrics, nor on reconfiguration.
    # (auto_describe would collect once at registration and leave that batch queued: duplicate series.)
    registry = CollectorRegistry()
    reader = PrometheusMetricReader(registry=registry)
    server, _thread = start_http_server(port, addr=settings.prometheus_host, registry=registry)
    _owned.prometheus_server = server
    _owned.prometheus_address = (settings.prometheus_host, int(server.server_port))
    logger.info("faithtrace: Prometheus metrics on http://%s:%d/metrics", *_owned.prometheus_address)
    return reader


def tracer_provider_for(settings: Settings, explicit: Any, *, make_global: bool = True) -> Any:
    """The tracer provider to use: the explicit one, the app's global one, or one we set up (or None)."""
    if explicit is not None:
        return explicit
    with _lock:
        if _owned.tracer_provider is not None:
            return _owned.tracer_provider
        if app_has_tracer_provider() or not settings.otlp_endpoint:
            return None  # the global provider (or the proxy, which follows the app's later set-up)
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        provider = TracerProvider(resource=_resource(settings), shutdown_on_exit=False)  # ours: see shutdown
        provider.add_span_processor(BatchSpanProcessor(span_exporter(settings)))
        _owned.tracer_provider = provider
        if make_global:
            trace.set_tracer_provider(provider)
        return provider


def meter_provider_for(settings: Settings, explicit: Any, *, make_global: bool = True) -> Any:
    """The meter provider to use. Prometheus needs a reader at provider creation, hence a provider of ours."""
    wants_prometheus = settings.prometheus_port is not None
    if explicit is not None:
        if wants_prometheus:
            raise ConfigError(
                "prometheus=... cannot be combined with meter_provider=...: give that provider a "
                "PrometheusMetricReader instead"
            )
        return explicit
    with _lock:
        if _owned.meter_provider is not None:
            return _owned.meter_provider
        app_owned = app_has_meter_provider()
        if not wants_prometheus and (app_owned or not settings.otlp_endpoint):
            return None
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

        readers: list[Any] = []
        if wants_prometheus:
            readers.append(_prometheus_reader(settings))
        if settings.otlp_endpoint and not app_owned:
            push = PeriodicExportingMetricReader(metric_exporter(settings))
            _owned.push_readers.append(push)
            readers.append(push)
        provider = MeterProvider(metric_readers=readers, resource=_resource(settings), shutdown_on_exit=False)
        _owned.meter_provider = provider
        if make_global and not app_owned:
            metrics.set_meter_provider(provider)
        elif app_owned:
            logger.info("faithtrace: the app has its own meter provider; faithtrace's metrics go to /metrics")
        return provider


def owns_providers() -> bool:
    return _owned.tracer_provider is not None or _owned.meter_provider is not None


def prometheus_address() -> tuple[str, int] | None:
    """Where faithtrace serves ``/metrics`` (host, port), if it does."""
    return _owned.prometheus_address


def force_flush(provider: Any, timeout_s: float) -> None:
    """Flush a provider's exporters; never raises (an exporter problem is not the caller's problem)."""
    # Even when the caller's deadline has passed, give exporters a moment: finished spans are worth it.
    millis = int(max(0.5, timeout_s) * 1000)
    try:
        if provider is not None and provider is _owned.meter_provider:
            # Not the provider: a collect on the Prometheus reader queues a batch that the next scrape would
            # expose next to its own, as duplicate series. Only push readers need flushing.
            for reader in list(_owned.push_readers):
                reader.force_flush(millis)
            return
        flush = getattr(provider, "force_flush", None)
        if flush is not None:
            flush(millis)
    except Exception as exc:
        logger.debug("faithtrace: flushing %s failed: %s", type(provider).__name__, exc)


def shutdown_owned() -> None:
    """Shut down what faithtrace set up itself (the global providers stay registered, now inert)."""
    with _lock:
        owned = _Owned(**vars(_owned))
        _owned.__init__()  # type: ignore[misc]
    for provider in (owned.tracer_provider, owned.meter_provider):
        if provider is not None:
            provider.shutdown()
    if owned.prometheus_server is not None:
        owned.prometheus_server.shutdown()
        owned.prometheus_server.server_close()
