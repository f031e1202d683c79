# ruff: noqa: F811  (fixtures are imported into this module by name)
"""In a real browser: Phoenix's traces list shows each answer's ``faithfulness`` annotation.

Everything is real but the judge's replies: the decorator, the worker, litellm, the OTel SDK and OTLP/HTTP
exporter, Phoenix (its ingestion, REST API and UI), and Debian's Chromium driven headless by playwright-core
(``make backends`` installs both). The screenshot is kept in ``test-artifacts/`` for a human to look at.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import SpanKind

import faithtrace
from _browser_fixtures import browser_tools, run_script  # noqa: F401  (fixture)
from _fake_judge import FakeJudge, fake_judge  # noqa: F401  (fixture)
from _phoenix_fixtures import PhoenixServer
from faithtrace._telemetry import names as n

pytestmark = [pytest.mark.backend, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = Path(os.environ.get("FAITHTRACE_ARTIFACTS", ROOT / "test-artifacts"))
SCRIPT = "phoenix_list.cjs"
PROJECT = "faithtrace-browser"
CONTEXTS = [
    "Every Voltaro frame has a 5-year warranty. "
    "Batteries are covered for 2 years or 500 charge cycles, whichever comes first.",
]
QUESTION = "How long is the warranty?"
# The fake judge says "yes" to a claim whose words are all in the context and "no" to one saying "never".
FAILING = "Every Voltaro frame has a 5-year warranty. Batteries are never covered by the warranty."
PASSING = "Every Voltaro frame has a 5-year warranty."


@pytest.fixture
def traced_to_phoenix(phoenix_server: PhoenixServer, fake_judge: FakeJudge) -> Iterator[TracerProvider]:
    resource = Resource.create({"service.name": "rag-support", "openinference.project.name": PROJECT})
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(
        BatchSpanProcessor(OTLPSpanExporter(endpoint=phoenix_server.otlp_http_traces_url))
    )
    faithtrace.configure(
        tracer_provider=provider,
        judge=fake_judge.settings(),
        annotations="phoenix",
        phoenix_endpoint=phoenix_server.http_url,
    )
    try:
        yield provider
    finally:
        faithtrace.shutdown(timeout=10)
        provider.shutdown()


def _annotations(phoenix: PhoenixServer, span_ids: list[str], timeout: float = 30.0) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    with httpx.Client(base_url=phoenix.http_url, trust_env=False, timeout=10.0) as client:
        while True:
            response = client.get(f"/v1/projects/{PROJECT}/span_annotations", params={"span_ids": span_ids})
            if response.status_code == 200:
                data: list[dict[str, Any]] = response.json()["data"]
                if len(data) >= len(span_ids):
                    return data
            if time.monotonic() > deadline:
                pytest.fail(f"Phoenix has no annotations for {span_ids}: {response.text[:500]}")
            time.sleep(0.25)


def _project_id(phoenix: PhoenixServer) -> str:
    with httpx.Client(base_url=phoenix.http_url, trust_env=False, timeout=10.0) as client:
        projects = client.get("/v1/projects").json()["data"]
    return next(p["id"] for p in projects if p["name"] == PROJECT)


def _project_configs(phoenix: PhoenixServer, timeout: float = 60.0) -> list[dict[str, Any]]:
    """The project's annotation configs, once there are any (faithtrace registers them off the request path,
    once the project exists)."""
    deadline = time.monotonic() + timeout
    with httpx.Client(base_url=phoenix.http_url, trust_env=False, timeout=10.0) as client:
        while True:
            response = client.get(f"/v1/projects/{PROJECT}/annotation_configs")
            response.raise_for_status()
            data: list[dict[str, Any]] = response.json()["data"]
            if data:
                return data
            if time.monotonic() > deadline:
                pytest.fail(f"project {PROJECT} has no annotation config: {response.text[:500]}")
            time.sleep(0.25)


_SPANS_QUERY = """
query ($id: ID!, $filter: String!) {
  node(id: $id) {
    ... on Project { spans(first: 50, filterCondition: $filter) { edges { node { spanId name } } } }
  }
}"""


def _filtered(phoenix: PhoenixServer, project_id: str, condition: str) -> list[tuple[str, str]]:
    """The spans Phoenix's span filter (the Spans tab's filter bar) keeps: (name, span id)."""
    with httpx.Client(base_url=phoenix.http_url, trust_env=False, timeout=10.0) as client:
        response = client.post(
            "/graphql", json={"query": _SPANS_QUERY, "variables": {"id": project_id, "filter": condition}}
        )
    body = response.json()
    assert "errors" not in body, body
    return [(e["node"]["name"], e["node"]["spanId"]) for e in body["data"]["node"]["spans"]["edges"]]


def _browse(
    tools: tuple[str, str, Path],
    url: str,
    wait_for: str,
    screenshot: Path,
    filter_condition: str,
    anywhere: bool = False,
) -> dict[str, Any]:
    return run_script(
        tools, SCRIPT, [url, wait_for, str(screenshot), filter_condition], ANYWHERE=str(int(anywhere))
    )


def test_phoenix_traces_list_shows_the_faithfulness_annotation(
    traced_to_phoenix: TracerProvider,
    phoenix_server: PhoenixServer,
    browser_tools: tuple[str, str, Path],
) -> None:
    @faithtrace.trace_faithfulness(name="support-answer")
    def answer(question: str, contexts: list[str], text: str) -> str:
        return text

    # The failing answer is served the way a web app serves it: under a server span, so the RAG span is not
    # the trace's root (the row the traces list shows); the passing one is a root span of its own.
    tracer = traced_to_phoenix.get_tracer("web")
    with tracer.start_as_current_span("POST /ask", kind=SpanKind.SERVER):
        assert answer(QUESTION, CONTEXTS, FAILING) == FAILING
    assert answer(QUESTION, CONTEXTS, PASSING) == PASSING
    assert faithtrace.flush(timeout=60)
    traced_to_phoenix.force_flush()

    spans = phoenix_server.wait_for_spans(
        PROJECT, lambda s: sum(x["name"] == n.EVALUATION_SPAN for x in s) == 2
    )
    rag = {s["attributes"][n.OUTPUT_VALUE]: s for s in spans if s["name"] == "support-answer"}
    failing_id = rag[FAILING]["context"]["span_id"]
    passing_id = rag[PASSING]["context"]["span_id"]

    # The REST API first: what Phoenix stored.
    stored = {a["span_id"]: a for a in _annotations(phoenix_server, [failing_id, passing_id])}
    failing = stored[failing_id]
    assert (failing["name"], failing["annotator_kind"]) == ("faithfulness", "LLM")
    assert failing["result"]["label"] == "fail"
    assert failing["result"]["score"] == pytest.approx(0.5)
    assert "contradicted" in failing["result"]["explanation"]
    assert failing["metadata"]["contradicted"] == 1
    assert stored[passing_id]["result"]["label"] == "pass"
    assert stored[passing_id]["result"]["score"] == pytest.approx(1.0)
    # The evaluation span reads without clicks: the answer in, score, label and verdicts out.
    evaluation = next(s for s in spans if s["name"] == n.EVALUATION_SPAN and s["parent_id"] == failing_id)
    assert evaluation["attributes"][n.INPUT_VALUE] == FAILING
    output = json.loads(evaluation["attributes"][n.OUTPUT_VALUE])
    assert [c["verdict"] for c in output["claims"]] == ["yes", "no"]
    assert failing["metadata"]["evaluation_span_id"] == evaluation["context"]["span_id"]

    # The span filters docs/backends.md gives: the annotation, the nested attribute form, and the dotted form
    # that silently matches nothing (Phoenix nests dotted attribute names).
    project_id = _project_id(phoenix_server)
    on_label = _filtered(phoenix_server, project_id, "annotations['faithfulness'].label == 'fail'")
    assert on_label == [("support-answer", failing_id)]
    on_score = _filtered(phoenix_server, project_id, "annotations['faithfulness'].score < 0.7")
    assert on_score == [("support-answer", failing_id)]
    nested = "attributes['gen_ai']['evaluation']['score']['label'] == 'fail'"
    assert _filtered(phoenix_server, project_id, nested) == [
        (n.EVALUATION_SPAN, evaluation["context"]["span_id"])
    ]
    assert (
        _filtered(phoenix_server, project_id, "attributes['gen_ai.evaluation.score.label'] == 'fail'") == []
    )

    # Then what an on-call engineer sees: the project's traces list, in Chromium.
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    screenshot = ARTIFACTS / "phoenix-traces-faithfulness.png"
    url = f"{phoenix_server.http_url}/projects/{project_id}/traces"
    # The filter an on-call engineer types (docs/backends.md, "Phoenix"): failing answers only. The traces
    # list filters on trace annotations (which is why faithtrace writes one per RAG span next to the span
    # annotation).
    page = _browse(
        browser_tools, url, "faithfulness", screenshot, "trace_annotations['faithfulness'].label == 'fail'"
    )
    assert screenshot.stat().st_size > 10_000
    assert page["found"], f"{page['log']}\nno 'faithfulness' on {page['url']}: {page['text'][:2000]}"
    # Only the failing answer's trace is left, its annotation columns show the score ...
    rows = [r for r in page["rows"] if any(cell in ("POST /ask", "support-answer") for cell in r)]
    assert len(rows) == 1, page["rows"]
    (row,) = rows
    assert "POST /ask" in row
    cells = dict(zip(page["rows"][0], row, strict=True))  # header -> cell
    # The row stands for the root span, which carries no annotation: the trace annotation is what shows.
    assert cells["span annotations"] == "--", cells
    assert cells["trace annotations"].startswith("faithfulness"), cells
    assert "0.50" in cells["trace annotations"], cells
    # ... and a click shows the label and the judge's explanation.
    (details,) = page["dialogs"]
    lines = [line.strip() for line in details.splitlines()]
    assert lines[0] == "faithfulness", lines
    assert {"0.50", "fail", "LLM"} <= set(lines), lines
    assert any("contradicted" in line and FAILING.split(". ")[1] in line for line in lines), lines

    # faithtrace registered the annotation config in the project: Phoenix colours a score by it.
    configs = _project_configs(phoenix_server)
    assert [(c["name"], c["type"]) for c in configs] == [("faithfulness", "FREEFORM")], configs
    (config,) = configs
    assert (config["optimization_direction"], config["threshold"]) == ("MAXIMIZE", 0.7)
    assert (config["lower_bound"], config["upper_bound"]) == (0.0, 1.0)
    # The unfiltered list: the failing answer's score reads unfavourable, the passing one's favourable, in
    # different colours (the third screenshot).
    colours_shot = ARTIFACTS / "phoenix-traces-pass-and-fail.png"
    page = _browse(browser_tools, url, "faithfulness", colours_shot, "")
    assert page["found"], f"{page['log']}\nno 'faithfulness' on {page['url']}: {page['text'][:2000]}"
    header = page["rows"][0]
    shown = {}
    for row, marks in zip(page["rows"], page["directions"], strict=True):
        name = "fail" if "POST /ask" in row else "pass" if "support-answer" in row else None
        if name is not None:
            cells = dict(zip(header, row, strict=True))
            # The score in the trace annotations column (and the span annotations one, on a root RAG span).
            scores = [m for m in marks if m["text"].endswith(("0.50", "1.00"))]
            assert scores, (row, marks)
            shown[name] = (
                cells["trace annotations"],
                {m["direction"] for m in scores},
                {m["color"] for m in scores},
            )
    assert set(shown) == {"pass", "fail"}, page["rows"]
    assert "0.50" in shown["fail"][0], shown
    assert shown["fail"][1] == {"negative"}, shown
    assert "1.00" in shown["pass"][0], shown
    assert shown["pass"][1] == {"positive"}, shown
    assert not shown["fail"][2] & shown["pass"][2], shown  # in different colours

    # The Spans tab, filtered on the evaluation span's nested attribute: its row reads without clicks, the
    # answer as input and the verdicts as output. The click opens the span (second screenshot).
    spans_shot = ARTIFACTS / "phoenix-evaluation-span.png"
    spans_url = f"{phoenix_server.http_url}/projects/{project_id}/spans"
    page = _browse(browser_tools, spans_url, n.EVALUATION_SPAN, spans_shot, nested)
    assert page["found"], f"{page['log']}\nno evaluation span on {page['url']}: {page['text'][:2000]}"
    rows = [r for r in page["rows"] if n.EVALUATION_SPAN in r]
    assert len(rows) == 1, page["rows"]
    assert FAILING in rows[0]
    assert any(cell.startswith("{") and '"label": "fail"' in cell for cell in rows[0]), rows[0]

    # The judge's chat spans in the Spans list: what it was asked (the last user message) and what it replied,
    # instead of "--" and the reply's id.
    evaluation_id = evaluation["context"]["span_id"]
    chat = next(s for s in spans if s["name"].startswith("chat ") and s["parent_id"] == evaluation_id)
    asked, replied = chat["attributes"][n.INPUT_VALUE], chat["attributes"][n.OUTPUT_VALUE]
    assert "<claims>" in asked
    assert json.loads(replied)["verdicts"]
    chat_shot = ARTIFACTS / "phoenix-judge-spans.png"
    page = _browse(browser_tools, spans_url, chat["name"], chat_shot, "span_kind == 'LLM'", anywhere=True)
    assert page["found"], f"{page['log']}\nno judge span on {page['url']}: {page['text'][:2000]}"
    header = page["rows"][0]
    rows = [dict(zip(header, r, strict=True)) for r in page["rows"][1:] if chat["name"] in r]
    assert rows, page["rows"]
    for cells in rows:
        assert cells["input"] not in ("", "--"), cells
        assert cells["output"] not in ("", "--"), cells
    flat = [(" ".join(c["input"].split()), " ".join(c["output"].split())) for c in rows]
    assert any(" ".join(asked.split()).startswith(i[:40]) for i, _ in flat), (flat, asked[:200])
    assert any(" ".join(replied.split()).startswith(o[:20]) for _, o in flat), (flat, replied[:200])

    # The retrieved documents, where Phoenix shows documents: on the RAG span's retriever child, in the
    # trace's page next to the RAG span (the span tree on the left, the documents on the right).
    retriever = next(s for s in spans if s["name"] == n.RETRIEVER_SPAN and s["parent_id"] == failing_id)
    docs_shot = ARTIFACTS / "phoenix-rag-documents.png"
    docs_url = f"{phoenix_server.http_url}/redirects/spans/{retriever['context']['span_id']}"
    page = _browse(browser_tools, docs_url, "Documents", docs_shot, "", anywhere=True)
    assert page["found"], f"{page['log']}\nno documents on {page['url']}: {page['text'][:2000]}"
    assert CONTEXTS[0].split(". ")[1] in page["text"], page["text"][:3000]
    assert QUESTION in page["text"]
    assert "support-answer" in page["text"]  # the RAG span, beside it in the trace's span tree
