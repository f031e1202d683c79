# ruff: noqa: F811  (fixtures are imported into this module by name)
"""Scored requests read back through a real Jaeger v2's query API: each trace lasts as long as its request,
and the RAG span holds its evaluation.

Jaeger v2 is built from its Go modules by collector/build-jaeger.sh (make test does) and runs all-in-one with
in-memory storage, every port on 127.0.0.1. The judge's replies come from the fake OpenAI-compatible server
(tests/_fake_judge.py), each a second late, so that a trace holding any of the scoring would last seconds
longer than its request; the decorator, worker, litellm, OTel SDK and OTLP/gRPC exporter are real. Three
shapes of app: the decorator on a plain function, inside the example's FastAPI service, and around a
LlamaIndex query engine traced by its OpenInference instrumentation. The search the dashboard's "failing
answers" panel and the alerts' links run (service, the function and the label as tags) must find the trace.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

import faithtrace
from _fake_judge import (
    FakeJudge,
    fake_judge,  # noqa: F401  (fixture, imported by name: see conftest)
)
from _fleet_fixtures import COLLECTOR, Proc, wait_until
from _ports import free_port
from _trace_fixtures import clean_env  # noqa: F401  (autouse fixture)
from faithtrace._telemetry import names as n

pytestmark = pytest.mark.backend

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

SERVICE = "faithtrace-jaeger-e2e"
QUESTION = "How long are batteries covered by the warranty?"
CONTEXTS = [
    "Every Voltaro frame has a 5-year warranty. "
    "Batteries are covered for 2 years or 500 charge cycles, whichever comes first.",
]
# The second sentence contradicts the context; the fake judge says "no" to it (and "yes" to the first).
CLAIMS = ["Every Voltaro frame has a 5-year warranty.", "Batteries are never covered by the warranty."]
WARRANTY = "How long are batteries covered by the warranty?"  # the example service's question
JUDGE_DELAY_S = 1.0


@dataclass
class Jaeger:
    query_url: str
    otlp_grpc: str
    proc: Proc


def jaeger_binary() -> str:
    path = (
        os.environ.get("FAITHTRACE_JAEGER_BIN")
        or subprocess.run(
            [str(COLLECTOR / "build-jaeger.sh"), "--print-path"], capture_output=True, text=True, check=True
        ).stdout.strip()
    )
    if not os.access(path, os.X_OK):
        message = f"no Jaeger binary at {path}: run collector/build-jaeger.sh (make test does)"
        if os.environ.get("FAITHTRACE_REQUIRE_BACKENDS") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return path


def jaeger_config(query: int, query_grpc: int, otlp_grpc: int, otlp_http: int, health: int) -> dict[str, Any]:
    """Jaeger v2 all-in-one with in-memory storage, on loopback only."""
    return {
        "service": {
            "extensions": ["jaeger_storage", "jaeger_query", "healthcheckv2"],
            "pipelines": {
                "traces": {
                    "receivers": ["otlp"],
                    "processors": ["batch"],
                    "exporters": ["jaeger_storage_exporter"],
                }
            },
            "telemetry": {"metrics": {"level": "none"}, "logs": {"level": "info"}},
        },
        "extensions": {
            "healthcheckv2": {"use_v2": True, "http": {"endpoint": f"127.0.0.1:{health}"}},
            "jaeger_query": {
                # Jaeger traces its own queries to localhost:4317 by default: nothing listens there, and its
                # stop then waits out a 10 s export timeout.
                "enable_tracing": False,
                "storage": {"traces": "memstore"},
                "http": {"endpoint": f"127.0.0.1:{query}"},
                "grpc": {"endpoint": f"127.0.0.1:{query_grpc}"},
            },
            "jaeger_storage": {"backends": {"memstore": {"memory": {"max_traces": 10000}}}},
        },
        "receivers": {
            "otlp": {
                "protocols": {
                    "grpc": {"endpoint": f"127.0.0.1:{otlp_grpc}"},
                    "http": {"endpoint": f"127.0.0.1:{otlp_http}"},
                }
            }
        },
        "processors": {"batch": {"timeout": "100ms"}},
        "exporters": {"jaeger_storage_exporter": {"trace_storage": "memstore"}},
    }


@pytest.fixture(scope="module")
def jaeger(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Jaeger]:
    binary = jaeger_binary()
    workdir = tmp_path_factory.mktemp("jaeger")
    query, otlp_grpc = free_port(), free_port()
    config = workdir / "jaeger.yaml"
    config.write_text(yaml.safe_dump(jaeger_config(query, free_port(), otlp_grpc, free_port(), free_port())))
    proc = Proc("jaeger", [binary, f"--config={config}"], workdir / "jaeger.log").start()
    try:
        url = f"http://127.0.0.1:{query}"

        def ready() -> bool:
            try:
                return httpx.get(f"{url}/api/services", timeout=1.0, trust_env=False).status_code == 200
            except httpx.HTTPError:
                return False

        wait_until("query API up", ready, proc, timeout=60.0)
        yield Jaeger(url, f"127.0.0.1:{otlp_grpc}", proc)
    finally:
        proc.stop()


def _tags(items: list[dict[str, Any]]) -> dict[str, Any]:
    return {t["key"]: t["value"] for t in items}


def _search(jaeger: Jaeger, **params: str) -> list[dict[str, Any]]:
    response = httpx.get(f"{jaeger.query_url}/api/traces", params=params, timeout=10.0, trust_env=False)
    response.raise_for_status()
    data: list[dict[str, Any]] = response.json()["data"] or []
    return data


def _trace(jaeger: Jaeger, trace_id: str) -> dict[str, Any]:
    response = httpx.get(f"{jaeger.query_url}/api/traces/{trace_id}", timeout=10.0, trust_env=False)
    response.raise_for_status()
    (found,) = response.json()["data"]
    return dict(found)


def _wait(jaeger: Jaeger, what: str, until: Any, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (found := until()):
        assert time.monotonic() < deadline, f"Jaeger never showed {what}:\n{jaeger.proc.tail()}"
        time.sleep(0.3)
    return found


def _duration_us(trace: dict[str, Any]) -> int:
    """The trace's duration as Jaeger's UI computes it: from its first span's start to its last span's end."""
    spans = trace["spans"]
    return max(s["startTime"] + s["duration"] for s in spans) - min(s["startTime"] for s in spans)


def _events(span: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Span events are Jaeger logs, the event's name in the "event" field."""
    out = []
    for log in span["logs"]:
        fields = _tags(log["fields"])
        out.append((fields.pop("event", ""), fields))
    return out


@pytest.fixture
def traced(jaeger: Jaeger, fake_judge: FakeJudge, request: pytest.FixtureRequest) -> Iterator[TracerProvider]:
    """An app's provider exporting to Jaeger under a service of its own, and faithtrace judged by a fake judge
    that takes a second per reply."""
    service = f"{SERVICE}-{request.node.name.removeprefix('test_')[:40]}"
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(
        BatchSpanProcessor(
            OTLPSpanExporter(endpoint=jaeger.otlp_grpc, insecure=True), schedule_delay_millis=200
        )
    )
    fake_judge.delay_s = JUDGE_DELAY_S
    faithtrace.configure(tracer_provider=provider, judge=fake_judge.settings())
    try:
        yield provider
    finally:
        faithtrace.shutdown(timeout=10)
        provider.shutdown()


def _service(provider: TracerProvider) -> str:
    return str(provider.resource.attributes["service.name"])


def _check_scored_trace(
    jaeger: Jaeger, provider: TracerProvider, function: str, took_us: int, root: str
) -> dict[str, Any]:
    """The one failing trace of ``provider``'s service, checked: it lasts its request's time (its root
    span's, ``took_us`` as the caller measured it at most), its RAG span holds the evaluation, and the
    judge's calls are in a trace of their own, under "<service>-faithtrace", linked to the RAG span."""
    assert faithtrace.flush(timeout=30)
    assert provider.force_flush(30_000)
    service = _service(provider)
    # The dashboard's / alerts' search: the service, the function and the failing label as tags.
    tags = json.dumps({n.GEN_AI_EVALUATION_SCORE_LABEL: n.LABEL_FAIL, n.FUNCTION: function})
    (found,) = _wait(
        jaeger, "the failing request", lambda: _search(jaeger, service=service, tags=tags, lookback="1h")
    )
    trace = _trace(jaeger, found["traceID"])
    spans = {s["operationName"]: s for s in trace["spans"]}
    assert trace["spans"][0]["traceID"] == found["traceID"]
    assert {trace["processes"][s["processID"]]["serviceName"] for s in trace["spans"]} == {service}

    # The trace lasts as long as its request: its root span's duration, within 5 ms, and never more than the
    # caller measured around the call.
    duration = _duration_us(trace)
    root_span = spans[root]
    assert abs(duration - root_span["duration"]) <= 5_000, (duration, root_span["duration"])
    assert duration <= took_us + 5_000, (duration, took_us)
    assert duration < JUDGE_DELAY_S * 1e6 / 2  # nothing of the second-long scoring in it

    # The RAG span holds the evaluation: the score and label as tags, the result and one event per claim,
    # each named with its number and verdict, the claim and its verdict in its fields.
    rag = spans[function]
    attrs = _tags(rag["tags"])
    assert attrs[n.GEN_AI_EVALUATION_SCORE_LABEL] == n.LABEL_FAIL
    assert attrs[n.GEN_AI_EVALUATION_SCORE_VALUE] == pytest.approx(0.5)
    assert attrs[n.EVAL_CLAIMS_TOTAL] == len(CLAIMS)
    assert attrs[n.EVAL_PLACEMENT] == "rag_span"
    events = _events(rag)
    names_seen = [name for name, _ in events]
    assert names_seen[:3] == [
        n.GEN_AI_EVALUATION_RESULT_EVENT,
        "faithtrace.claim 1: supported",
        "faithtrace.claim 2: contradicted",
    ]
    claims = sorted((f for name, f in events if n.is_claim_event(name)), key=lambda c: c[n.CLAIM_INDEX])
    assert [c[n.CLAIM_TEXT] for c in claims] == CLAIMS
    assert [c[n.CLAIM_VERDICT] for c in claims] == ["yes", "no"]
    ((_, result),) = [(name, f) for name, f in events if name == n.GEN_AI_EVALUATION_RESULT_EVENT]
    assert result[n.GEN_AI_EVALUATION_SCORE_LABEL] == n.LABEL_FAIL
    assert CLAIMS[1] in result[n.GEN_AI_EVALUATION_EXPLANATION]
    # The events carry when they happened: after the span's own end (the scoring came later).
    rag_end = rag["startTime"] + rag["duration"]
    assert all(log["timestamp"] >= rag_end for log in rag["logs"])

    # The judge's calls: a trace of their own under "<service>-faithtrace", linked to the RAG span.
    judge_search = json.dumps({n.EVAL_RAG_SPAN_ID: rag["spanID"]})
    (judge,) = _wait(
        jaeger,
        "the judge's trace",
        lambda: _search(jaeger, service=service + n.OWN_TRACES_SUFFIX, tags=judge_search, lookback="1h"),
    )
    evaluation = next(s for s in judge["spans"] if s["operationName"] == n.EVALUATION_SPAN)
    assert (rag["traceID"], rag["spanID"]) in {(r["traceID"], r["spanID"]) for r in evaluation["references"]}
    assert judge["traceID"] != found["traceID"]
    assert any(s["operationName"].startswith("chat ") for s in judge["spans"])
    assert _duration_us(judge) >= JUDGE_DELAY_S * 1e6  # the scoring's time is there, not in the request's

    # A passing search finds nothing for this service: the tag filter really filters.
    passing = json.dumps({n.GEN_AI_EVALUATION_SCORE_LABEL: n.LABEL_PASS})
    assert not _search(jaeger, service=service, tags=passing, lookback="1h")
    return trace


def test_a_decorated_function_s_trace_lasts_its_call_and_holds_the_evaluation(
    jaeger: Jaeger, traced: TracerProvider
) -> None:
    @faithtrace.trace_faithfulness(name="support-bot")
    def answer(question: str, contexts: list[str]) -> str:
        time.sleep(0.02)  # a request that takes a while, so a duration is more than rounding
        return " ".join(CLAIMS)

    started = time.time_ns()
    answer(QUESTION, CONTEXTS)
    took_us = (time.time_ns() - started) // 1000
    _check_scored_trace(jaeger, traced, "support-bot", took_us, root="support-bot")


def test_a_fastapi_request_s_trace_lasts_the_request_and_its_rag_span_holds_the_evaluation(
    jaeger: Jaeger, traced: TracerProvider
) -> None:
    from fastapi.testclient import TestClient

    sys.path.insert(0, str(EXAMPLES))
    from rag_service.app import create_app

    with TestClient(create_app(configure_faithtrace=False, tracer_provider=traced)) as client:
        started = time.time_ns()
        reply = client.post("/ask", json={"question": WARRANTY, "hallucinate": "contradict"})
        took_us = (time.time_ns() - started) // 1000
    assert reply.status_code == 200
    trace = _check_scored_trace_fastapi(jaeger, traced, took_us)
    assert reply.json()["trace_id"] == trace["traceID"]


def _check_scored_trace_fastapi(jaeger: Jaeger, provider: TracerProvider, took_us: int) -> dict[str, Any]:
    """The example service's failing answer (its claims are its own, not CLAIMS): the same checks."""
    assert faithtrace.flush(timeout=30)
    assert provider.force_flush(30_000)
    service = _service(provider)
    tags = json.dumps({n.GEN_AI_EVALUATION_SCORE_LABEL: n.LABEL_FAIL, n.FUNCTION: "support-bot"})
    (found,) = _wait(
        jaeger, "the failing request", lambda: _search(jaeger, service=service, tags=tags, lookback="1h")
    )
    trace = _trace(jaeger, found["traceID"])
    spans = {s["operationName"]: s for s in trace["spans"]}
    server = spans["POST /ask"]
    duration = _duration_us(trace)
    assert abs(duration - server["duration"]) <= 5_000, (duration, server["duration"])
    assert duration <= took_us + 5_000, (duration, took_us)
    rag = spans["support-bot"]
    assert rag["references"][0]["spanID"] == server["spanID"]
    assert _tags(rag["tags"])[n.GEN_AI_EVALUATION_SCORE_LABEL] == n.LABEL_FAIL
    claims = [(name, f) for name, f in _events(rag) if n.is_claim_event(name)]
    assert [f[n.CLAIM_VERDICT] for _, f in claims] == ["yes", "idk"]
    assert "4 years" in claims[1][1][n.CLAIM_TEXT]
    assert claims[1][0] == "faithtrace.claim 2: not_in_documents"
    return trace


def test_a_llama_index_query_s_trace_lasts_the_query_and_its_rag_span_holds_the_evaluation(
    jaeger: Jaeger, traced: TracerProvider
) -> None:
    from llama_index.core import Document, VectorStoreIndex
    from llama_index.core.embeddings import MockEmbedding
    from openinference.instrumentation.llama_index import LlamaIndexInstrumentor

    import _llama_llm

    class LLM(_llama_llm.ScriptedLLM):
        answer = " ".join(CLAIMS)
        chunks = CLAIMS

    instrumentor = LlamaIndexInstrumentor()
    instrumentor.instrument(tracer_provider=traced)
    try:
        index = VectorStoreIndex.from_documents(
            [Document(text=CONTEXTS[0])], embed_model=MockEmbedding(embed_dim=8)
        )
        engine = index.as_query_engine(llm=LLM())

        @faithtrace.trace_faithfulness(name="llama-bot")
        def ask(query: str) -> Any:
            return engine.query(query)

        tracer = traced.get_tracer("web")
        started = time.time_ns()
        with tracer.start_as_current_span("POST /ask"):
            assert str(ask(QUESTION)) == " ".join(CLAIMS)
        took_us = (time.time_ns() - started) // 1000
        trace = _check_scored_trace(jaeger, traced, "llama-bot", took_us, root="POST /ask")
    finally:
        instrumentor.uninstrument()
    # LlamaIndex's own spans are in the request's trace, under the RAG span.
    rag = next(s for s in trace["spans"] if s["operationName"] == "llama-bot")
    framework = [
        s for s in trace["spans"] if s["references"] and s["references"][0]["spanID"] == rag["spanID"]
    ]
    assert any(s["operationName"] != n.RETRIEVER_SPAN for s in framework)


def test_jaeger_config_is_loopback_only() -> None:
    config = jaeger_config(1, 2, 3, 4, 5)
    endpoints = [
        config["extensions"]["healthcheckv2"]["http"]["endpoint"],
        config["extensions"]["jaeger_query"]["http"]["endpoint"],
        config["extensions"]["jaeger_query"]["grpc"]["endpoint"],
        *(p["endpoint"] for p in config["receivers"]["otlp"]["protocols"].values()),
    ]
    assert all(e.startswith("127.0.0.1:") for e in endpoints)
