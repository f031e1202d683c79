# ruff: noqa: F811  (fixtures are imported into this module by name)
"""End to end: faithtrace's spans and events over real OTLP into a real trace backend (Arize Phoenix).

The judge's replies come from a fake OpenAI-compatible server on 127.0.0.1 (tests/_fake_judge.py); everything
else is real: the decorator, the background worker, litellm, the OTel SDK, the OTLP exporters (HTTP and gRPC),
Phoenix's ingestion and its REST API.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter

import faithtrace

# The fixtures (fake_judge, phoenix_server) come from these modules.
from _fake_judge import (
    MODEL,
    FakeJudge,
    fake_judge,  # noqa: F401  (fixture, imported by name: see conftest)
)
from _phoenix_fixtures import PhoenixServer
from _ports import free_port
from faithtrace._telemetry import names as n

pytestmark = pytest.mark.backend

ROOT = Path(__file__).resolve().parents[1]
QUESTION = "How long are batteries covered by the warranty?"
CONTEXTS = [
    "Every Voltaro frame has a 5-year warranty. "
    "Batteries are covered for 2 years or 500 charge cycles, whichever comes first.",
]
# The second sentence contradicts the context; the fake judge says "no" to it (and "yes" to the first).
CLAIMS = ["Every Voltaro frame has a 5-year warranty.", "Batteries are never covered by the warranty."]
ANSWER = " ".join(CLAIMS)


def _exporter(transport: str, phoenix: PhoenixServer) -> SpanExporter:
    if transport == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter

        return GrpcExporter(endpoint=phoenix.grpc_endpoint, insecure=True)
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter

    return HttpExporter(endpoint=phoenix.otlp_http_traces_url)


@pytest.fixture
def phoenix_provider(
    request: pytest.FixtureRequest, phoenix_server: PhoenixServer, fake_judge: FakeJudge
) -> Iterator[tuple[str, TracerProvider]]:
    transport: str = request.param
    project = f"faithtrace-e2e-{transport}"
    resource = Resource.create({"service.name": "faithtrace-e2e", "openinference.project.name": project})
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(_exporter(transport, phoenix_server)))
    faithtrace.configure(tracer_provider=provider, judge=fake_judge.settings())
    try:
        yield project, provider
    finally:
        faithtrace.shutdown(timeout=10)
        provider.shutdown()


def _one(spans: list[dict[str, Any]], name: str) -> dict[str, Any]:
    found = [s for s in spans if s["name"] == name]
    assert len(found) == 1, f"expected one {name!r} span, got {[s['name'] for s in spans]}"
    return found[0]


def _events(span: dict[str, Any], name: str) -> list[dict[str, Any]]:
    return [e["attributes"] for e in span["events"] if e["name"] == name]


def _complete(spans: list[dict[str, Any]]) -> bool:
    """The RAG span is in, with its evaluation (it is exported once scored)."""
    return any(s["name"] == "support-bot" and _events(s, n.GEN_AI_EVALUATION_RESULT_EVENT) for s in spans)


def _judge_spans(phoenix: PhoenixServer, project: str) -> list[dict[str, Any]]:
    """The judge's trace: its own project, "<project>-faithtrace", apart from the app's spans."""

    def complete(spans: list[dict[str, Any]]) -> bool:
        names = [s["name"] for s in spans]
        return n.EVALUATION_SPAN in names and any(x.startswith("chat ") for x in names)

    return phoenix.wait_for_spans(project + n.OWN_TRACES_SUFFIX, complete)


def _check_trace(
    spans: list[dict[str, Any]],
    judge_spans: list[dict[str, Any]],
    *,
    question: str,
    contexts: list[str],
    claims: list[str],
    verdicts: list[str],
) -> None:
    rag = _one(spans, "support-bot")
    yes, no, idk = (verdicts.count(v) for v in ("yes", "no", "idk"))
    score = yes / len(verdicts)
    label = n.LABEL_PASS if score >= 0.7 else n.LABEL_FAIL

    # The RAG span: what was asked, retrieved and answered, under OpenInference names Phoenix renders.
    assert rag["attributes"][n.INPUT_VALUE] == question
    assert rag["attributes"][n.OUTPUT_VALUE] == " ".join(claims)
    for i, context in enumerate(contexts):
        assert rag["attributes"][n.RETRIEVAL_DOCUMENT_CONTENT.format(index=i)] == context

    # ... and its evaluation, as searchable attributes. Nothing of the evaluation is in the request's trace
    # but this span (and its documents' record).
    assert not [s for s in spans if s["name"] == n.EVALUATION_SPAN or s["name"].startswith("chat ")]
    attrs = rag["attributes"]
    assert attrs[n.EVAL_OUTCOME] == "scored"
    assert attrs[n.GEN_AI_EVALUATION_SCORE_VALUE] == pytest.approx(score)
    assert attrs[n.GEN_AI_EVALUATION_SCORE_LABEL] == label
    assert attrs[n.EVAL_CLAIMS_TOTAL] == len(claims)
    assert (attrs[n.EVAL_CLAIMS_YES], attrs[n.EVAL_CLAIMS_NO], attrs[n.EVAL_CLAIMS_IDK]) == (yes, no, idk)
    assert attrs[n.JUDGE_MODEL] == MODEL
    assert rag["status_code"] != "ERROR"

    # The GenAI evaluation result event, exactly as the semantic conventions name it.
    (result,) = _events(rag, n.GEN_AI_EVALUATION_RESULT_EVENT)
    assert result[n.GEN_AI_EVALUATION_NAME] == n.EVALUATION_NAME_FAITHFULNESS
    assert result[n.GEN_AI_EVALUATION_SCORE_VALUE] == pytest.approx(score)
    assert result[n.GEN_AI_EVALUATION_SCORE_LABEL] == label
    # The reason is written from the verdicts: it names every claim that let the answer down.
    explanation = result[n.GEN_AI_EVALUATION_EXPLANATION]
    assert explanation
    for claim, verdict in zip(claims, verdicts, strict=True):
        assert (claim in explanation) is (verdict != "yes"), explanation

    # One event per claim, named with its number and what its verdict means, with the judge's verdict and
    # reason.
    claim_events = [(e["name"], e["attributes"]) for e in rag["events"] if n.is_claim_event(e["name"])]
    claim_events.sort(key=lambda c: c[1][n.CLAIM_INDEX])
    assert [c[n.CLAIM_TEXT] for _, c in claim_events] == claims
    assert [c[n.CLAIM_VERDICT] for _, c in claim_events] == verdicts
    assert [name for name, _ in claim_events] == [
        n.claim_event(i, c[n.CLAIM_STATUS]) for i, (_, c) in enumerate(claim_events)
    ]
    # A claim one passage sentence contains word for word is proven in code and never reaches the judge; the
    # others are judged, and the stand-in numbers its reasons by the claims it was asked about.
    proven = [c for _, c in claim_events if c[n.CLAIM_DECIDED_BY] == "proof"]
    judged = [c for _, c in claim_events if c[n.CLAIM_DECIDED_BY] == "judge"]
    assert len(proven) + len(judged) == len(claims)
    assert all(c[n.CLAIM_TEXT] in " ".join(contexts) and c[n.CLAIM_VERDICT] == "yes" for c in proven)
    assert [c[n.CLAIM_REASON] for c in judged] == [f"checked claim {i + 1}" for i in range(len(judged))]

    # One event per pipeline step, with its model, tokens and time, under faithtrace's names.
    steps = {
        e["attributes"][n.STEP_NAME]: e["attributes"] for e in rag["events"] if n.is_step_event(e["name"])
    }
    assert {"claims", "verdicts", "reason"} <= set(steps)
    # By default only the verdicts ask the judge: the claims are the answer's sentences and the reason is a
    # template, and those steps say so (no calls, no tokens, no model).
    verdict_step = steps["verdicts"]
    assert verdict_step[n.STEP_MODEL] == MODEL
    assert verdict_step[n.STEP_INPUT_TOKENS] > 0
    assert verdict_step[n.STEP_OUTPUT_TOKENS] > 0
    assert verdict_step[n.STEP_LLM_CALLS] == 1
    for name in ("claims", "reason"):
        assert steps[name][n.STEP_LLM_CALLS] == 0
        assert steps[name][n.STEP_INPUT_TOKENS] == 0
    for step in steps.values():
        assert step[n.STEP_DURATION] >= 0

    # A GenAI client span per judge call, in the judge's own trace (its project apart) under an evaluation
    # span linked to the RAG span; their tokens add up to the steps'.
    evaluation = _one(judge_spans, n.EVALUATION_SPAN)
    assert evaluation["parent_id"] is None
    assert evaluation["context"]["trace_id"] != rag["context"]["trace_id"]
    assert evaluation["attributes"][n.EVAL_RAG_SPAN_ID] == rag["context"]["span_id"].removeprefix("0x")
    chats = [s for s in judge_spans if s["name"].startswith(f"{n.JUDGE_OPERATION} ")]
    assert len(chats) == sum(s[n.STEP_LLM_CALLS] for s in steps.values())
    for chat in chats:
        assert chat["name"] == f"{n.JUDGE_OPERATION} {MODEL}"
        assert chat["parent_id"] == evaluation["context"]["span_id"]
        assert chat["attributes"][n.GEN_AI_OPERATION_NAME] == n.JUDGE_OPERATION
        assert chat["attributes"][n.GEN_AI_REQUEST_MODEL] == MODEL
    for key, step_key in (
        (n.GEN_AI_USAGE_INPUT_TOKENS, n.STEP_INPUT_TOKENS),
        (n.GEN_AI_USAGE_OUTPUT_TOKENS, n.STEP_OUTPUT_TOKENS),
    ):
        assert sum(c["attributes"][key] for c in chats) == sum(s[step_key] for s in steps.values())


@pytest.mark.parametrize("phoenix_provider", ["http", "grpc"], indirect=True)
def test_evaluation_reaches_phoenix_with_its_events(
    phoenix_server: PhoenixServer, phoenix_provider: tuple[str, TracerProvider]
) -> None:
    project, provider = phoenix_provider

    @faithtrace.trace_faithfulness(name="support-bot")
    def answer(question: str, contexts: list[str]) -> str:
        return ANSWER

    assert answer(QUESTION, CONTEXTS) == ANSWER
    assert faithtrace.flush(timeout=30)
    assert provider.force_flush(30_000)
    spans = phoenix_server.wait_for_spans(project, _complete)
    judge_spans = _judge_spans(phoenix_server, project)
    _check_trace(
        spans, judge_spans, question=QUESTION, contexts=CONTEXTS, claims=CLAIMS, verdicts=["yes", "no"]
    )


def test_example_service_configured_from_env_exports_to_phoenix(
    phoenix_server: PhoenixServer, fake_judge: FakeJudge, tmp_path: Path
) -> None:
    """The example app as its README runs it: uvicorn, settings only from OTEL_* and FAITHTRACE_* env."""
    project = "faithtrace-example-env"
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "FAITHTRACE_"))}
    env.update(
        OTEL_EXPORTER_OTLP_ENDPOINT=phoenix_server.http_url,
        OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf",
        OTEL_SERVICE_NAME="voltaro-help-centre",
        OTEL_RESOURCE_ATTRIBUTES=f"openinference.project.name={project}",
        FAITHTRACE_JUDGE_MODEL=MODEL,
        FAITHTRACE_JUDGE_API_BASE=f"{fake_judge.base_url}/v1",
        FAITHTRACE_JUDGE_API_KEY="sk-test",
        NO_PROXY="127.0.0.1,localhost",
    )
    log = tmp_path / "uvicorn.log"
    with log.open("wb") as out:
        server = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "uvicorn",
                "--app-dir",
                "examples",
                "rag_service.app:app",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
            ],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", trust_env=False, timeout=10) as client:
            deadline = time.monotonic() + 60
            while True:
                try:
                    if client.get("/healthz").status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                assert server.poll() is None, log.read_text()
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(0.2)
            reply = client.post("/ask", json={"question": QUESTION, "hallucinate": "contradict"})
        assert reply.status_code == 200
        body = reply.json()
    finally:
        # SIGINT is uvicorn's graceful stop: the app's lifespan shuts faithtrace down, which finishes the
        # queued evaluation and exports its spans before the process exits.
        server.send_signal(signal.SIGINT)
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    assert server.returncode == 0, log.read_text()

    spans = phoenix_server.wait_for_spans(project, _complete)
    rag = _one(spans, "support-bot")
    assert rag["context"]["trace_id"] == body["trace_id"]
    assert _one(spans, "POST /ask")["context"]["span_id"] == rag["parent_id"]
    # The scripted model changed "2 years" into "4 years"; this fake judge cannot find "4" in the passage.
    claims = [
        "Every Voltaro frame has a 5-year warranty.",
        "Batteries are covered for 4 years or 500 charge cycles, whichever comes first.",
    ]
    assert body["answer"] == " ".join(claims)
    judge_spans = _judge_spans(phoenix_server, project)
    _check_trace(
        spans, judge_spans, question=QUESTION, contexts=CONTEXTS, claims=claims, verdicts=["yes", "idk"]
    )
