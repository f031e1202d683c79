# ruff: noqa: F811  (fixtures are imported into this module by name)
"""faithtrace's evaluation span and its events, read back through a real Jaeger v2's query API.

Jaeger v2 is built from its Go modules by collector/build-jaeger.sh (make test does) and runs all-in-one with
in-memory storage, every port on 127.0.0.1. The judge's replies come from the fake OpenAI-compatible server
(tests/_fake_judge.py); the decorator, worker, litellm, OTel SDK and OTLP/gRPC exporter are real. The search
the dashboard's "failing answers" panel and the alerts' links run (service, operation, the label tag) must
find the trace.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
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
from faithtrace._telemetry import names as n

pytestmark = pytest.mark.backend

SERVICE = "faithtrace-jaeger-e2e"
QUESTION = "How long are batteries covered by the warranty?"
CONTEXTS = [
    "Every Voltaro frame has a 5-year warranty. "
    "Batteries are covered for 2 years or 500 charge cycles, whichever comes first.",
]
# The second sentence contradicts the context; the fake judge says "no" to it (and "yes" to the first).
CLAIMS = ["Every Voltaro frame has a 5-year warranty.", "Batteries are never covered by the warranty."]


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


def test_evaluation_span_and_events_read_back_from_jaeger(jaeger: Jaeger, fake_judge: FakeJudge) -> None:
    provider = TracerProvider(resource=Resource.create({"service.name": SERVICE}))
    provider.add_span_processor(
        BatchSpanProcessor(OTLPSpanExporter(endpoint=jaeger.otlp_grpc, insecure=True))
    )
    faithtrace.configure(tracer_provider=provider, judge=fake_judge.settings())
    try:

        @faithtrace.trace_faithfulness(name="support-bot")
        def answer(question: str, contexts: list[str]) -> str:
            return " ".join(CLAIMS)

        answer(QUESTION, CONTEXTS)
        assert faithtrace.flush(timeout=30)
        assert provider.force_flush(30_000)
    finally:
        faithtrace.shutdown(timeout=10)
        provider.shutdown()

    # The dashboard's / alerts' search: service, the evaluation operation, the failing label as a tag.
    tags = json.dumps({n.GEN_AI_EVALUATION_SCORE_LABEL: n.LABEL_FAIL, n.FUNCTION: "support-bot"})
    deadline = time.monotonic() + 30
    while not (
        found := _search(jaeger, service=SERVICE, operation=n.EVALUATION_SPAN, tags=tags, lookback="1h")
    ):
        assert time.monotonic() < deadline, (
            f"Jaeger never found the failing evaluation:\n{jaeger.proc.tail()}"
        )
        time.sleep(0.3)
    (trace,) = found
    spans = {s["operationName"]: s for s in trace["spans"]}
    rag, evaluation = spans["support-bot"], spans[n.EVALUATION_SPAN]
    assert trace["processes"][evaluation["processID"]]["serviceName"] == SERVICE

    # Refers to the RAG span, in its trace (Jaeger shows a parent as CHILD_OF, a span link as FOLLOWS_FROM).
    refs = {(r["traceID"], r["spanID"]) for r in evaluation["references"]}
    assert (rag["traceID"], rag["spanID"]) in refs
    assert evaluation["traceID"] == rag["traceID"]
    attrs = _tags(evaluation["tags"])
    assert attrs[n.GEN_AI_EVALUATION_SCORE_LABEL] == n.LABEL_FAIL
    assert attrs[n.GEN_AI_EVALUATION_SCORE_VALUE] == pytest.approx(0.5)
    assert attrs[n.EVAL_CLAIMS_TOTAL] == len(CLAIMS)

    # Span events are Jaeger logs, the event's name in the "event" field.
    events: dict[str, list[dict[str, Any]]] = {}
    for log in evaluation["logs"]:
        fields = _tags(log["fields"])
        events.setdefault(fields.pop("event", ""), []).append(fields)
    claims = sorted(events[n.CLAIM_EVENT], key=lambda c: c[n.CLAIM_INDEX])
    assert [c[n.CLAIM_TEXT] for c in claims] == CLAIMS
    assert [c[n.CLAIM_VERDICT] for c in claims] == ["yes", "no"]
    (result,) = events[n.GEN_AI_EVALUATION_RESULT_EVENT]
    assert result[n.GEN_AI_EVALUATION_NAME] == n.EVALUATION_NAME_FAITHFULNESS
    assert result[n.GEN_AI_EVALUATION_SCORE_LABEL] == n.LABEL_FAIL
    assert CLAIMS[1] in result[n.GEN_AI_EVALUATION_EXPLANATION]

    # A passing search finds nothing for this trace: the tag filter really filters.
    passing = json.dumps({n.GEN_AI_EVALUATION_SCORE_LABEL: n.LABEL_PASS})
    assert not _search(jaeger, service=SERVICE, operation=n.EVALUATION_SPAN, tags=passing, lookback="1h")


def test_jaeger_config_is_loopback_only() -> None:
    config = jaeger_config(1, 2, 3, 4, 5)
    endpoints = [
        config["extensions"]["healthcheckv2"]["http"]["endpoint"],
        config["extensions"]["jaeger_query"]["http"]["endpoint"],
        config["extensions"]["jaeger_query"]["grpc"]["endpoint"],
        *(p["endpoint"] for p in config["receivers"]["otlp"]["protocols"].values()),
    ]
    assert all(e.startswith("127.0.0.1:") for e in endpoints)
