"""OTel providers faithtrace sets up itself, only when the app has none: OTLP export, Prometheus ``/metrics``.

An app that configured OpenTelemetry keeps full control: its providers are used as they are. Providers created
here are made global (so the app's own spans join the same pipeline), created at most once per process and
shut down by ``faithtrace.shutdown()``.
"""

from __future__ import annotations

import functools
import logging
import os
import random
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from opentelemetry import metrics, trace
from opentelemetry.trace import INVALID_SPAN_ID, INVALID_TRACE_ID

from faithtrace._common import safety
from faithtrace._common.errors import ConfigError

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.id_generator import IdGenerator

    from faithtrace._config.settings import Settings

logger = logging.getLogger("faithtrace")


@dataclass
class _Owned:
    tracer_provider: Any = None
    meter_provider: Any = None
    prometheus_server: Any = None
    prometheus_address: tuple[str, int] | None = None
    push_readers: list[Any] = field(default_factory=list)


_owned = _Owned()

# The ids of the provider faithtrace sets up come from a generator of its own: the SDK's default draws from
# the ``random`` module, whose sequence is the app's (an app that seeds it expects the same numbers with and
# without faithtrace), and that provider becomes the global one the app's own spans use too. Reseeded in a
# forked child, as ``random`` does for its own, so that a pre-forking server's workers make distinct ids.
_ids = random.Random()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_ids.seed)


@functools.cache
def private_id_generator() -> IdGenerator:
    """The SDK's random ids (``RandomIdGenerator``: trace ids flagged random), drawn from our own generator.
    Built on first use: importing faithtrace must not import the SDK."""
    from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

    class PrivateIdGenerator(RandomIdGenerator):
        def generate_span_id(self) -> int:
            span_id = _ids.getrandbits(64)
            while span_id == INVALID_SPAN_ID:
                span_id = _ids.getrandbits(64)
            return span_id

        def generate_trace_id(self) -> int:
            trace_id = _ids.getrandbits(128)
            while trace_id == INVALID_TRACE_ID:
                trace_id = _ids.getrandbits(128)
            return trace_id

    return PrivateIdGenerator()


def with_private_ids(tracer: Any) -> Any:
    """``tracer`` (faithtrace's own ``Tracer`` object, from the app's provider) making its span and trace ids
    with ``private_id_generator()`` where it would draw them from the ``random`` module (the SDK's default
    generator): the spans faithtrace starts must not shift the app's seeded sequence. An id generator the app
    chose (X-Ray's time-based trace ids, say) is left alone, and so are the app's own tracers."""
    sdk = sys.modules.get("opentelemetry.sdk.trace")
    if sdk is None:  # no SDK imported: the tracer is not the SDK's
        return tracer
    from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

    if isinstance(tracer, sdk.Tracer) and type(getattr(tracer, "id_generator", None)) is RandomIdGenerator:
        tracer.id_generator = private_id_generator()
    return tracer


_lock = threading.Lock()
# Read by an observable counter: how often a /metrics endpoint could not be served (its port was taken).
prometheus_bind_failures = 0


def app_has_tracer_provider() -> bool:
    return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider | trace.NoOpTracerProvider)


def app_has_meter_provider() -> bool:
    from opentelemetry.metrics._internal import _ProxyMeterProvider

    return not isinstance(metrics.get_meter_provider(), _ProxyMeterProvider | metrics.NoOpMeterProvider)


def _resource(settings: Settings) -> Any:
    """The resource of providers we install: ``service.name`` from ``service_name=``, ``OTEL_SERVICE_NAME`` or
    ``OTEL_RESOURCE_ATTRIBUTES`` (plus any ``OTEL_EXPERIMENTAL_RESOURCE_DETECTORS``), else the spec's
    ``unknown_service:<executable>``; and a ``service.instance.id`` per process, so that the workers of one
    service (``uvicorn --workers 4``) stay separate series instead of overwriting each other's counters."""
    from opentelemetry.sdk.resources import SERVICE_INSTANCE_ID, SERVICE_NAME, Resource

    detected = Resource.create({SERVICE_NAME: settings.service_name} if settings.service_name else {})
    attributes = dict(detected.attributes)
    if str(attributes.get(SERVICE_NAME, "unknown_service")) == "unknown_service":
        attributes[SERVICE_NAME] = "unknown_service:" + (os.path.basename(sys.executable) or "python")
    attributes.setdefault(SERVICE_INSTANCE_ID, str(uuid.uuid4()))
    return Resource(attributes, detected.schema_url)


def _url(settings: Settings, signal: str) -> str:
    """The exporter's URL for ``signal`` ("traces", "metrics"): the signal's own endpoint as it is, else the
    base endpoint plus ``/v1/<signal>`` over HTTP (the exporters append that only to the endpoint they read
    from the environment themselves, not to one passed in)."""
    own = settings.otlp_traces_endpoint if signal == "traces" else settings.otlp_metrics_endpoint
    if own:
        return own
    base = settings.otlp_endpoint
    assert base is not None
    protocol = settings.otlp_traces_protocol if signal == "traces" else settings.otlp_metrics_protocol
    return base if protocol == "grpc" else base.rstrip("/") + f"/v1/{signal}"


def span_exporter(settings: Settings) -> Any:
    url = _url(settings, "traces")
    if settings.otlp_traces_protocol != "grpc":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter(endpoint=url)
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpanExporter

    return GrpcSpanExporter(endpoint=url)


def metric_exporter(settings: Settings) -> Any:
    url = _url(settings, "metrics")
    if settings.otlp_metrics_protocol != "grpc":
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

        return OTLPMetricExporter(endpoint=url)
    from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import (
        OTLPMetricExporter as GrpcMetricExporter,
    )

    return GrpcMetricExporter(endpoint=url)


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
    try:
        server, _thread = start_http_server(port, addr=settings.prometheus_host, registry=registry)
    except OSError as exc:
        # Typically the port is taken by another worker of the same app (``uvicorn --workers 2``): metrics
        # must never stop the app from starting. Without a server nobody could scrape the reader, so there is
        # none; OTLP export, if configured, still carries every metric.
        global prometheus_bind_failures
        prometheus_bind_failures += 1
        safety.warn_rate_limited(
            "prometheus_bind",
            "faithtrace: cannot serve Prometheus metrics on %s:%s (%s); this process exports none there. "
            "With several workers, give each its own port (FAITHTRACE_PROMETHEUS_PORT) or send metrics "
            "over OTLP to a Collector (faithtrace's docs: Concepts, several workers). "
            "Your app is unaffected.",
            settings.prometheus_host,
            port,
            exc,
        )
        return None
    reader = PrometheusMetricReader(registry=registry)
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
        if app_has_tracer_provider() or not settings.exports_otlp:
            return None  # the global provider (or the proxy, which follows the app's later set-up)
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        provider = TracerProvider(  # ours: see shutdown
            resource=_resource(settings),
            shutdown_on_exit=False,
            id_generator=private_id_generator(),
        )
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
        if not wants_prometheus and (app_owned or not settings.pushes_metrics):
            return None
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

        readers: list[Any] = []
        prometheus = _prometheus_reader(settings) if wants_prometheus else None
        if prometheus is not None:
            readers.append(prometheus)
        if settings.pushes_metrics and not app_owned:
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


def bounded(func: Callable[[], object], deadline: float, what: str) -> bool:
    """Run ``func`` on a daemon thread and wait for it until ``deadline`` (monotonic); True if it finished.

    The SDK's exporters retry with backoff past any timeout they are given (a metrics export to a dead
    endpoint took 27 s), so a deadline the caller asked for can only be kept by not waiting for them: an
    abandoned export goes on in the background and dies with the process.
    """
    done = threading.Event()

    def run() -> None:
        try:
            func()
        except Exception as exc:
            logger.debug("faithtrace: %s failed: %s", what, exc)
        finally:
            done.set()

    threading.Thread(target=run, name=f"faithtrace-{what.replace(' ', '-')}", daemon=True).start()
    finished = done.wait(max(0.0, deadline - time.monotonic()))
    if not finished:
        logger.debug("faithtrace: %s did not finish by the deadline; left to finish in the background", what)
    return finished


def _flush_one(provider: Any, timeout_s: float) -> None:
    millis = int(max(0.05, timeout_s) * 1000)
    if provider is not None and provider is _owned.meter_provider:
        # Not the provider: a collect on the Prometheus reader queues a batch that the next scrape would
        # expose next to its own, as duplicate series. Only push readers need flushing.
        for reader in list(_owned.push_readers):
            reader.force_flush(millis)
        return
    flush = getattr(provider, "force_flush", None)
    if flush is not None:
        flush(millis)


def flush_providers(providers: Sequence[Any], deadline: float) -> bool:
    """Flush the providers' exporters until ``deadline`` at the latest; never raises. True if they all
    confirmed in time."""
    # Even when the deadline has passed, give exporters a moment: finished spans are worth it.
    deadline = max(deadline, time.monotonic() + 0.1)

    def flush_all() -> None:
        for provider in providers:
            _flush_one(provider, deadline - time.monotonic())

    return bounded(flush_all, deadline, "telemetry flush")


def shutdown_owned(deadline: float) -> bool:
    """Shut down what faithtrace set up itself, never the app's providers (the global providers stay
    registered, now inert). True if everything shut down before ``deadline``."""
    with _lock:
        owned = _Owned(**vars(_owned))
        _owned.__init__()  # type: ignore[misc]
    if owned.prometheus_server is not None:
        owned.prometheus_server.shutdown()
        owned.prometheus_server.server_close()
    providers = [p for p in (owned.tracer_provider, owned.meter_provider) if p is not None]
    if not providers:
        return True

    def shut_down() -> None:
        if owned.tracer_provider is not None:
            owned.tracer_provider.shutdown()
        if owned.meter_provider is not None:
            owned.meter_provider.shutdown(timeout_millis=max(50.0, (deadline - time.monotonic()) * 1000))

    return bounded(shut_down, max(deadline, time.monotonic() + 0.1), "telemetry shutdown")
