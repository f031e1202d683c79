"""The tracer for faithtrace's own traces: the judge's calls, and an evaluation in a trace of its own.

Those traces last as long as scoring does (seconds to minutes). Filed under the app's service, they would sit
above every truly slow request in Jaeger's "longest first", take over the percentiles of Phoenix's project
latency, and add the judge's tokens, cost and errors to the app's. So they go out through the app's own span
processors and exporters (same pipeline, same endpoint, same batching) but under a resource of their own: the
app's resource with ``service.name`` and Phoenix's ``openinference.project.name`` suffixed ``-faithtrace``.

That needs an OpenTelemetry SDK ``TracerProvider``: a second provider shares the app's span processor, which
the SDK's constructor takes (``active_span_processor``), read from the app's provider. Any other provider (a
vendor's, the no-op one) gets its own tracer back: the spans then carry the app's resource, as before. A trace
of faithtrace's own is always recorded (``ALWAYS_ON``): it exists only for a call that was sampled and scored,
and a ratio sampler deciding on its new trace id would drop the judge's spans of scored calls at random.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Tracer

from faithtrace._common import safety
from faithtrace._telemetry import names as n
from faithtrace._telemetry import setup
from faithtrace._version import __version__

_SERVICE_NAME = "service.name"
_tracers: weakref.WeakKeyDictionary[Any, Tracer] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def own_resource_attributes(resource: dict[str, Any]) -> dict[str, Any]:
    """The app's resource attributes, filed apart: ``service.name`` and the Phoenix project suffixed."""
    attrs = dict(resource)
    service = str(attrs.get(_SERVICE_NAME) or "unknown_service")
    project = str(attrs.get(n.OPENINFERENCE_PROJECT_NAME) or n.PHOENIX_DEFAULT_PROJECT)
    attrs[_SERVICE_NAME] = service + n.OWN_TRACES_SUFFIX
    attrs[n.OPENINFERENCE_PROJECT_NAME] = project + n.OWN_TRACES_SUFFIX
    return attrs


def own_tracer(tracer_provider: Any = None) -> Tracer:
    """The tracer of faithtrace's own traces on ``tracer_provider`` (None: the global one), made once per
    provider."""
    provider = tracer_provider if tracer_provider is not None else trace.get_tracer_provider()
    try:
        with _lock:
            found = _tracers.get(provider)
            if found is None:
                found = _tracers[provider] = _build(provider)
            return found
    except TypeError:  # a provider that cannot be weakly referenced: built each time (rare, and cheap)
        return _build(provider)


def _build(provider: Any) -> Tracer:
    processor = getattr(provider, "_active_span_processor", None)
    resource = getattr(provider, "resource", None)
    if processor is None or resource is None or not hasattr(resource, "attributes"):
        return provider.get_tracer(n.INSTRUMENTATION_SCOPE, __version__)  # type: ignore[no-any-return]
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
        from opentelemetry.sdk.trace.sampling import ALWAYS_ON

        # The app's id generator, unless it is the SDK's default, which draws from the random module: the
        # app's seeded sequence must not shift because faithtrace starts spans (setup.private_id_generator).
        ids = getattr(provider, "id_generator", None)
        if ids is None or type(ids) is RandomIdGenerator:
            ids = setup.private_id_generator()
        own = TracerProvider(
            sampler=ALWAYS_ON,
            resource=Resource(own_resource_attributes(dict(resource.attributes)), resource.schema_url),
            shutdown_on_exit=False,  # the processors are the app's: it shuts them down, never faithtrace
            active_span_processor=processor,
            id_generator=ids,
            span_limits=getattr(provider, "_span_limits", None),
        )
    except Exception as exc:  # an SDK whose provider takes other arguments: the app's resource, as before
        safety.internal_error("setting up faithtrace's own traces", exc)
        return provider.get_tracer(n.INSTRUMENTATION_SCOPE, __version__)  # type: ignore[no-any-return]
    return own.get_tracer(n.INSTRUMENTATION_SCOPE, __version__)
