# ruff: noqa: F811  (fixtures are imported into this module by name)
"""The example RAG service (examples/rag_service) and `make demo` (examples/demo.py).

The service runs for real (FastAPI TestClient, real OTel SDK, real background scoring through litellm); only
the judge's replies come from a fake OpenAI-compatible server on 127.0.0.1 (tests/_fake_judge.py: supported
when every word of a claim is in the documents, else "idk"; "no" for claims saying "never"). The `judge` test
runs the demo script itself against the real embedded local judge.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import faithtrace
from _fake_judge import MODEL, FakeJudge
from faithtrace._telemetry import names as n
from faithtrace.judge.local.endpoint import LocalEndpoint
from faithtrace.testing import FaithtraceCapture

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
sys.path.insert(0, str(EXAMPLES))

from rag_service import knowledge  # noqa: E402
from rag_service.app import create_app  # noqa: E402
from rag_service.readback import EvaluationView, read_evaluations  # noqa: E402

# The fixtures fake_judge and local_judge come from these modules.
from _fake_judge import fake_judge  # noqa: E402, F401  (fixture, imported by name: see conftest)

RETURNS = "How long do I have to return an e-bike?"
WARRANTY = "How long are batteries covered by the warranty?"
SHIPPING = "Where do orders ship from?"


@pytest.fixture
def traced(faithtrace_exporter: FaithtraceCapture, fake_judge: FakeJudge) -> FaithtraceCapture:
    """faithtrace's own test fixture (in-memory exporters, internal errors raise), judged by the fake."""
    faithtrace_exporter.configure(judge=fake_judge.settings())
    return faithtrace_exporter


def _spans(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name == name]


def _by_trace(views: list[EvaluationView], trace_id: str) -> EvaluationView:
    matches = [v for v in views if v.trace_id == trace_id]
    assert len(matches) == 1, f"expected one evaluation in trace {trace_id}, got {len(matches)}"
    return matches[0]


def test_service_answers_and_each_answer_is_scored_in_its_own_trace(
    traced: FaithtraceCapture, fake_judge: FakeJudge
) -> None:
    exporter, provider = traced.span_exporter, traced.tracer_provider
    asks = [(RETURNS, "none"), (WARRANTY, "contradict"), (SHIPPING, "embellish")]
    with TestClient(create_app(configure_faithtrace=False, tracer_provider=provider)) as client:
        replies = [client.post("/ask", json={"question": q, "hallucinate": h}) for q, h in asks]
    assert [r.status_code for r in replies] == [200, 200, 200]
    bodies: list[dict[str, Any]] = [r.json() for r in replies]
    for (question, hallucinate), body in zip(asks, bodies, strict=True):
        expected = knowledge.answer(question, hallucinate)
        assert body["answer"] == expected.text
        assert [s["id"] for s in body["sources"]] == [d.id for d in expected.documents]
    assert "4 years" in bodies[1]["answer"]
    assert "Express" in bodies[2]["answer"]

    assert faithtrace.flush(timeout=30)
    views = read_evaluations(exporter.get_finished_spans())
    assert len(views) == 3

    # The decorated function's span is a child of the request span: one trace per request.
    servers = {s.context.span_id: s for s in _spans(exporter, "POST /ask")}
    rag_spans = _spans(exporter, "support-bot")
    assert len(rag_spans) == 3
    for rag in rag_spans:
        assert rag.parent is not None
        assert rag.parent.span_id in servers

    faithful, contradicted, embellished = (_by_trace(views, b["trace_id"]) for b in bodies)
    for view, (question, made_up), body in zip(
        (faithful, contradicted, embellished), asks, bodies, strict=True
    ):
        assert view.question == question
        assert view.answer == body["answer"]
        assert view.function == "support-bot"
        assert view.contexts == [d.text for d in knowledge.retrieve(question)]
        assert view.outcome == "scored"
        # One "chat ..." span per judge request (claims are split in code by default). A made-up claim is
        # never proven in code, so those answers reach the judge; the faithful one's may all be proven.
        assert view.judge_spans == sum(s.llm_calls for s in view.steps) >= (made_up != "none")

    assert (faithful.score, faithful.label) == (1.0, "pass")
    assert [c.verdict for c in faithful.claims] == ["yes", "yes"]

    assert (contradicted.score, contradicted.label) == (0.5, "fail")
    assert [c.verdict for c in contradicted.claims] == ["yes", "idk"]
    assert "4 years" in contradicted.claims[1].text
    # The reason is written from the verdicts and names the claim that let the answer down.
    assert "4 years" in contradicted.explanation
    assert (contradicted.yes, contradicted.no, contradicted.idk) == (1, 0, 1)

    assert embellished.label == "fail"
    assert embellished.score == pytest.approx(2 / 3)
    assert [c.verdict for c in embellished.claims] == ["yes", "yes", "idk"]
    assert embellished.claims[2].text.startswith("Express next-day delivery")

    # What the demo prints per answer: tokens and time per step come back from the step events.
    for view in (contradicted, embellished):  # the faithful answer's claims may all be proven in code
        assert {s.name for s in view.steps} >= {"claims", "verdicts"}
        assert view.input_tokens > 0
        assert view.output_tokens > 0
        assert view.input_tokens == sum(s.input_tokens for s in view.steps)
    # Every judge request the worker made is on a span: nothing is scored off the record.
    assert len(fake_judge.requests) == sum(v.judge_spans for v in views)


def test_service_rejects_bad_requests_without_scoring(
    traced: FaithtraceCapture, fake_judge: FakeJudge
) -> None:
    exporter, provider = traced.span_exporter, traced.tracer_provider
    with TestClient(create_app(configure_faithtrace=False, tracer_provider=provider)) as client:
        assert client.post("/ask", json={"question": ""}).status_code == 422
        assert client.post("/ask", json={"question": RETURNS, "hallucinate": "lie"}).status_code == 422
        assert client.get("/healthz").json() == {"status": "ok"}
    assert faithtrace.flush(timeout=10)
    assert _spans(exporter, "support-bot") == []
    assert _spans(exporter, n.EVALUATION_SPAN) == []
    assert traced.evaluation_spans() == []
    assert fake_judge.requests == []


def test_decorated_function_keeps_its_nature_and_result(traced: FaithtraceCapture) -> None:
    import asyncio
    import inspect

    from rag_service.app import answer_question

    assert inspect.iscoroutinefunction(answer_question)
    assert list(inspect.signature(answer_question).parameters) == ["question", "hallucinate"]
    result = asyncio.run(answer_question(WARRANTY, hallucinate="contradict"))
    assert result == knowledge.answer(WARRANTY, "contradict")
    assert faithtrace.flush(timeout=30)
    (evaluation,) = traced.evaluation_spans()  # called outside any request: its own trace, still scored
    assert evaluation.attributes is not None
    assert evaluation.attributes[n.GEN_AI_EVALUATION_SCORE_LABEL] == n.LABEL_FAIL


# --- make demo ----------------------------------------------------------------------------------------------
def _demo_env(**extra: str) -> dict[str, str]:
    # The local judge's own settings (cache dir, threads) pass through; judge choice and export do not.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "FAITHTRACE_JUDGE_"))}
    env.update(extra)
    env["COLUMNS"] = "160"  # rich wraps at the terminal width; a pipe has none
    return env


def _die_with_parent() -> None:
    # If pytest itself is killed (not just timed out), the demo must not live on, holding the judge.
    if sys.platform.startswith("linux"):
        import ctypes
        import signal

        ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _run_demo(
    tmp_path: Path, env: dict[str, str], questions: int, timeout: float = 120
) -> tuple[str, list[dict[str, Any]]]:
    """Run examples/demo.py. ``timeout`` is its --timeout (the longest wait for one score); the run as a
    whole gets one such wait per question, plus one."""
    out = tmp_path / "demo.json"
    report = tmp_path / "demo-report.html"
    args = [
        "--questions",
        str(questions),
        "--json",
        str(out),
        "--timeout",
        str(timeout),
        "--report",
        str(report),
    ]
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / "demo.py"), *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout * (questions + 1),
        check=False,
        preexec_fn=_die_with_parent,
    )
    assert proc.returncode == 0, f"demo failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    # It says where its report is, and the report lists every answer it scored.
    assert f"Report: {report.resolve()}" in proc.stdout
    html = report.read_text(encoding="utf-8")
    assert html.count('<article class="answer"') == questions
    assert 'data-plot="roc"' in html  # the demo knows which answers were made up: labelled results
    return proc.stdout, json.loads(out.read_text())


@pytest.mark.slow
def test_demo_with_a_litellm_judge_from_env(tmp_path: Path, fake_judge: FakeJudge) -> None:
    env = _demo_env(
        FAITHTRACE_JUDGE_MODEL=MODEL,
        FAITHTRACE_JUDGE_API_BASE=f"{fake_judge.base_url}/v1",
        FAITHTRACE_JUDGE_API_KEY="sk-test",
    )
    stdout, rows = _run_demo(tmp_path, env, questions=3)
    assert [r["hallucinate"] for r in rows] == ["none", "contradict", "embellish"]
    labels = [r["evaluation"]["label"] for r in rows]
    assert labels == ["pass", "fail", "fail"]
    contradicted = rows[1]["evaluation"]
    assert [c["verdict"] for c in contradicted["claims"]] == ["yes", "idk"]
    assert contradicted["judge_model"] == MODEL
    for row in rows:
        assert row["evaluation"]["answer"] == row["http_answer"]
        assert row["question"] in stdout
    assert "✓ supported" in stdout
    assert "? not in the documents" in stdout
    embellished = rows[2]["evaluation"]["claims"][-1]
    assert embellished["text"].startswith("Express next-day delivery")
    assert (embellished["verdict"], embellished["status"]) == ("idk", "not_in_documents")
    assert "flagged 2/2 made-up answers and 0/1 faithful ones" in stdout


@pytest.mark.judge
@pytest.mark.timeout(1600)
def test_make_demo_scores_answers_with_the_local_judge(local_judge: LocalEndpoint, tmp_path: Path) -> None:
    """`make demo` on two questions, with no judge configured: the embedded local judge does the scoring."""
    stdout, rows = _run_demo(tmp_path, _demo_env(), questions=3, timeout=500)
    assert [r["hallucinate"] for r in rows] == ["none", "contradict", "embellish"]
    for row in rows:
        evaluation = row["evaluation"]
        assert evaluation is not None, f"not scored: {row['question']}\n{stdout}"
        assert evaluation["outcome"] == "scored", stdout
        assert evaluation["judge_model"].startswith("faithtrace-local/")
        assert 0.0 <= evaluation["score"] <= 1.0
        assert evaluation["claims"]
        assert {c["verdict"] for c in evaluation["claims"]} <= {"yes", "no", "idk"}
        assert row["question"] in stdout
    # The faithful answer's claims are all grounded and settled without the judge; the changed one is not.
    assert rows[0]["evaluation"]["input_tokens"] == 0
    assert rows[1]["evaluation"]["input_tokens"] > 0
    assert rows[1]["evaluation"]["output_tokens"] > 0
    # "Batteries are covered for 4 years" against "2 years" in the passage: the judge must not pass it.
    assert rows[1]["evaluation"]["label"] == "fail", stdout
    # An added fact the documents say nothing about is not in them, never "contradicted".
    added = rows[2]["evaluation"]["claims"][-1]
    assert added["text"].startswith("Express next-day delivery"), stdout
    assert added["status"] == "not_in_documents", stdout
    assert "? not in the documents" in stdout
