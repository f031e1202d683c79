"""faithtrace's own traces (the judge's calls, evaluations in a trace of their own) go through the app's span
processors under a resource of their own: the app's, with the service and the Phoenix project suffixed."""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator

from faithtrace._telemetry import names as n
from faithtrace._telemetry import setup
from faithtrace._telemetry.own_traces import own_tracer


class _Sequential(IdGenerator):
    def __init__(self) -> None:
        self.n = 0

    def generate_span_id(self) -> int:
        self.n += 1
        return self.n

    def generate_trace_id(self) -> int:
        self.n += 1
        return self.n


def test_own_spans_reach_the_app_s_exporter_under_the_suffixed_service_and_project() -> None:
    exporter = InMemorySpanExporter()
    resource = Resource.create({"service.name": "shop", "openinference.project.name": "prod", "team": "rag"})
    app = TracerProvider(resource=resource)
    app.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = own_tracer(app)
    assert own_tracer(app) is tracer  # one per provider
    tracer.start_span("evaluate faithfulness").end()
    app.get_tracer("web").start_span("GET /").end()
    ours, theirs = exporter.get_finished_spans()
    assert ours.resource.attributes["service.name"] == "shop" + n.OWN_TRACES_SUFFIX
    assert ours.resource.attributes[n.OPENINFERENCE_PROJECT_NAME] == "prod" + n.OWN_TRACES_SUFFIX
    assert ours.resource.attributes["team"] == "rag"  # the rest of the app's resource, as it is
    assert theirs.resource is app.resource  # the app's own spans are untouched
    assert ours.instrumentation_scope is not None
    assert ours.instrumentation_scope.name == n.INSTRUMENTATION_SCOPE


def test_the_default_phoenix_project_is_suffixed_too() -> None:
    exporter = InMemorySpanExporter()
    app = TracerProvider(resource=Resource.create({"service.name": "shop"}))
    app.add_span_processor(SimpleSpanProcessor(exporter))
    own_tracer(app).start_span("x").end()
    (span,) = exporter.get_finished_spans()
    assert span.resource.attributes[n.OPENINFERENCE_PROJECT_NAME] == "default" + n.OWN_TRACES_SUFFIX


def test_ids_come_from_the_app_s_generator_or_faithtrace_s_own_never_the_random_module() -> None:
    exporter = InMemorySpanExporter()
    app = TracerProvider(id_generator=_Sequential())
    app.add_span_processor(SimpleSpanProcessor(exporter))
    own_tracer(app).start_span("x").end()
    (span,) = exporter.get_finished_spans()
    assert (span.context.trace_id, span.context.span_id) == (1, 2)  # the app's choice (X-Ray's ids, say)

    default = TracerProvider()
    assert type(default.id_generator) is RandomIdGenerator
    tracer = own_tracer(default)
    assert tracer.id_generator is setup.private_id_generator()  # type: ignore[attr-defined]


def test_any_other_provider_gets_its_own_tracer() -> None:
    tracer = own_tracer(trace.NoOpTracerProvider())
    assert not tracer.start_span("x").is_recording()
