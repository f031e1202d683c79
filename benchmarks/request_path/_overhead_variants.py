"""The decorated functions overhead.py times: bare, OTel floor, faithtrace in three modes, and the peers."""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
from typing import Any

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from benchmarks.request_path import _overhead_faithtrace
from benchmarks.request_path._overhead_bench import ANSWER, FLUSHERS, Bench, Variant

PEER_MODULES = {
    "openinference @tracer.chain": "openinference",
    "logfire @instrument": "logfire",
    "langfuse @observe": "langfuse",
}


def peers_importable() -> bool:
    return all(importlib.util.find_spec(m) is not None for m in PEER_MODULES.values())


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _rag(question: str, contexts: list[str]) -> str:
    return ANSWER


def build(include_peers: bool) -> Bench:
    from opentelemetry import trace

    bench = Bench()
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    bench.exporters.append(exporter)
    bench.closers.append(provider.shutdown)
    tracer = provider.get_tracer("bench")
    for dist in ("opentelemetry-sdk", "faithtrace"):
        bench.versions[dist] = _version(dist)

    bench.variants.append(Variant("bare function", _rag))

    def otel_floor(question: str, contexts: list[str]) -> str:
        with tracer.start_as_current_span("rag"):
            return _rag(question, contexts)

    bench.variants.append(Variant("otel span (floor)", otel_floor, exporter=exporter))

    def otel_attrs(question: str, contexts: list[str]) -> str:
        with tracer.start_as_current_span("rag") as span:
            result = _rag(question, contexts)
            span.set_attribute("input.value", question)
            span.set_attribute("retrieval.documents", contexts)
            span.set_attribute("output.value", result)
            return result

    bench.variants.append(
        Variant(
            "otel span + 3 attrs",
            otel_attrs,
            note="what a hand-written span with the data costs",
            exporter=exporter,
        )
    )

    def otel_nine_attrs(question: str, contexts: list[str]) -> str:
        # The nine attributes faithtrace's sampled-in span carries, set by hand: what the SDK alone charges
        # for the data, so the rest of faithtrace's cost (capture, scrubbing, sampling, enqueue) stands out.
        with tracer.start_as_current_span("rag") as span:
            result = _rag(question, contexts)
            attrs: dict[str, Any] = {
                "faithtrace.function": "rag",
                "openinference.span.kind": "CHAIN",
                "faithtrace.contexts.count": len(contexts),
                "input.value": question,
                "gen_ai.retrieval.query.text": question,
                "output.value": result,
                "faithtrace.sampled": True,
            }
            for i, doc in enumerate(contexts):
                attrs[f"retrieval.documents.{i}.document.content"] = doc
            span.set_attributes(attrs)
            return result

    bench.variants.append(
        Variant(
            "otel span + faithtrace's 9 attrs",
            otel_nine_attrs,
            note="the same data set by hand",
            exporter=exporter,
        )
    )

    _overhead_faithtrace.add(bench, _rag, exporter, provider)

    if include_peers:
        _add_openinference(bench, provider, exporter)
        _add_logfire(bench)
        _add_langfuse(bench)
    else:
        for name in PEER_MODULES:
            bench.missing[name] = "skipped (--no-peers)"
    return bench


def _add_openinference(bench: Bench, provider: TracerProvider, exporter: InMemorySpanExporter) -> None:
    name = "openinference @tracer.chain"
    try:
        from openinference.instrumentation import OITracer, TraceConfig
    except ImportError:
        bench.missing[name] = "not installed"
        return
    bench.versions["openinference-instrumentation"] = _version("openinference-instrumentation")
    oi = OITracer(provider.get_tracer("bench-oi"), config=TraceConfig())
    fn = oi.chain(_rag)
    bench.variants.append(
        Variant(name, fn, note="same provider and exporter as the floor", exporter=exporter)
    )


def _add_logfire(bench: Bench) -> None:
    name = "logfire @instrument"
    try:
        import logfire
    except ImportError:
        bench.missing[name] = "not installed"
        return
    bench.versions["logfire"] = _version("logfire")
    exporter = InMemorySpanExporter()
    # local=True: its own providers, the global OTel provider (ours) untouched; nothing leaves the process.
    lf = logfire.configure(
        local=True,
        send_to_logfire=False,
        console=False,
        metrics=False,
        inspect_arguments=False,
        additional_span_processors=[SimpleSpanProcessor(exporter)],
    )
    fn = lf.instrument("rag {question}")(_rag)
    bench.exporters.append(exporter)
    bench.closers.append(lambda: lf.shutdown(timeout_millis=2000))
    FLUSHERS.append(lambda: lf.force_flush(timeout_millis=2000))
    bench.variants.append(
        Variant(name, fn, note="send_to_logfire=False, in-memory exporter", exporter=exporter)
    )


def _add_langfuse(bench: Bench) -> None:
    name = "langfuse @observe"
    try:
        from langfuse import Langfuse, observe
    except ImportError:
        bench.missing[name] = "not installed"
        return
    bench.versions["langfuse"] = _version("langfuse")
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    # Its own provider and an in-memory exporter instead of OTLP to a Langfuse server: nothing leaves.
    client = Langfuse(
        public_key="pk-lf-bench",
        secret_key="sk-lf-bench",
        base_url="http://127.0.0.1:9",
        tracer_provider=provider,
        span_exporter=exporter,
        flush_interval=0.5,
    )
    fn = observe(name="rag")(_rag)
    bench.exporters.append(exporter)
    bench.closers.append(client.shutdown)
    bench.closers.append(provider.shutdown)
    FLUSHERS.append(client.flush)
    bench.variants.append(
        Variant(
            name, fn, note="its batch processor, in-memory exporter", exporter=exporter, drain=client.flush
        )
    )
