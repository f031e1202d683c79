# ruff: noqa: F811  (fixtures are imported into this module by name)
"""In a real browser: Phoenix shows each request's own latency, tokens and cost, and its ``faithfulness``
score and pass/fail on the RAG span.

Everything is real but the judge's replies: the decorator, the worker, litellm, the OTel SDK and OTLP/HTTP
exporter, Phoenix (its ingestion, REST API and UI), and Debian's Chromium driven headless by playwright-core
(``make backends`` installs both). The screenshots are kept in ``test-artifacts/`` for a human to look at.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
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

import _fake_judge
import faithtrace
from _browser_fixtures import BrowserSession, browser, browser_tools  # noqa: F401  (fixtures)
from _fake_judge import FakeJudge, fake_judge  # noqa: F401  (fixture)
from _phoenix_fixtures import PhoenixServer
from faithtrace._telemetry import names as n

pytestmark = [pytest.mark.backend, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = Path(os.environ.get("FAITHTRACE_ARTIFACTS", ROOT / "test-artifacts"))
BROWSER_SCRIPT = "phoenix_list.cjs"  # what the `browser` fixture runs
PROJECT = "faithtrace-browser"
CONTEXTS, QUESTION = _fake_judge.WARRANTY_CONTEXTS, _fake_judge.WARRANTY_QUESTION
FAILING, PASSING = _fake_judge.FAILING_ANSWER, _fake_judge.PASSING_ANSWER


@pytest.fixture
def traced_to_phoenix(phoenix_server: PhoenixServer, fake_judge: FakeJudge) -> Iterator[TracerProvider]:
    with _traced(phoenix_server, "rag-support", PROJECT, fake_judge.settings()) as provider:
        yield provider


@contextlib.contextmanager
def _traced(phoenix: PhoenixServer, service: str, project: str, judge: Any) -> Iterator[TracerProvider]:
    """An app's provider exporting to Phoenix's ``project``, and faithtrace writing annotations there."""
    resource = Resource.create({"service.name": service, "openinference.project.name": project})
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=phoenix.otlp_http_traces_url)))
    faithtrace.configure(
        tracer_provider=provider, judge=judge, annotations="phoenix", phoenix_endpoint=phoenix.http_url
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


def _project_id(phoenix: PhoenixServer, name: str = PROJECT) -> str:
    with httpx.Client(base_url=phoenix.http_url, trust_env=False, timeout=10.0) as client:
        projects = client.get("/v1/projects").json()["data"]
    return next(p["id"] for p in projects if p["name"] == name)


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
    browser: BrowserSession,
    url: str,
    wait_for: str,
    screenshot: Path,
    filter_condition: str,
    anywhere: bool = False,
    stat: str = "",
) -> dict[str, Any]:
    page = browser.request(
        url=url,
        waitFor=wait_for,
        screenshot=str(screenshot),
        filter=filter_condition,
        anywhere=anywhere,
        stat=stat,
    )
    print(f"{screenshot.name}: {', '.join(page['steps'])}")  # where a slow page spends its time
    return page


def test_phoenix_traces_list_shows_the_faithfulness_annotation(
    traced_to_phoenix: TracerProvider,
    phoenix_server: PhoenixServer,
    browser: BrowserSession,
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
        PROJECT,
        lambda s: sum(n.EVAL_OUTCOME in x["attributes"] for x in s if x["name"] == "support-answer") == 2,
    )
    rag = {s["attributes"][n.OUTPUT_VALUE]: s for s in spans if s["name"] == "support-answer"}
    failing_id = rag[FAILING]["context"]["span_id"]
    passing_id = rag[PASSING]["context"]["span_id"]
    # The judge's trace, in a project of its own: the failing answer's (the passing one is proven in code).
    judge_project = PROJECT + n.OWN_TRACES_SUFFIX
    judge_spans = phoenix_server.wait_for_spans(
        judge_project, lambda s: any(x["name"].startswith("chat ") for x in s)
    )

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
    # The judge's evaluation span reads without clicks: the answer in, score, label and verdicts out.
    evaluation = next(s for s in judge_spans if s["name"] == n.EVALUATION_SPAN)
    assert evaluation["attributes"][n.INPUT_VALUE] == FAILING
    assert evaluation["attributes"][n.EVAL_RAG_SPAN_ID] == failing_id
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
    assert _filtered(phoenix_server, project_id, nested) == [("support-answer", failing_id)]
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
        browser, url, "faithfulness", screenshot, "trace_annotations['faithfulness'].label == 'fail'"
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
    page = _browse(browser, url, "faithfulness", colours_shot, "")
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

    # The Spans tab, filtered on the nested attribute: the RAG span itself, its question in and answer out.
    # The click opens the span (second screenshot).
    spans_shot = ARTIFACTS / "phoenix-evaluated-rag-span.png"
    spans_url = f"{phoenix_server.http_url}/projects/{project_id}/spans"
    page = _browse(browser, spans_url, "support-answer", spans_shot, nested)
    assert page["found"], f"{page['log']}\nno RAG span on {page['url']}: {page['text'][:2000]}"
    rows = [r for r in page["rows"] if "support-answer" in r]
    assert len(rows) == 1, page["rows"]
    assert QUESTION in rows[0]
    assert FAILING in rows[0]

    # The judge's chat spans, in the judge's project's Spans list: what it was asked (the last user message)
    # and what it replied, instead of "--" and the reply's id.
    evaluation_id = evaluation["context"]["span_id"]
    chat = next(s for s in judge_spans if s["name"].startswith("chat ") and s["parent_id"] == evaluation_id)
    asked, replied = chat["attributes"][n.INPUT_VALUE], chat["attributes"][n.OUTPUT_VALUE]
    assert "<claims>" in asked
    assert json.loads(replied)["verdicts"]
    chat_shot = ARTIFACTS / "phoenix-judge-spans.png"
    judge_spans_url = f"{phoenix_server.http_url}/projects/{_project_id(phoenix_server, judge_project)}/spans"
    page = _browse(browser, judge_spans_url, chat["name"], chat_shot, "span_kind == 'LLM'", anywhere=True)
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
    # Awaited: the document's own text (its panel's "Documents" heading shows before the documents do).
    document = CONTEXTS[0].split(". ")[1]
    page = _browse(browser, docs_url, document, docs_shot, "", anywhere=True)
    assert page["found"], f"{page['log']}\nno documents on {page['url']}: {page['text'][:2000]}"
    assert "Documents" in page["text"]
    assert document in page["text"], page["text"][:3000]
    assert QUESTION in page["text"]
    assert "support-answer" in page["text"]  # the RAG span, beside it in the trace's span tree


# --- each request's own latency, tokens and cost ------------------------------------------------------------
LATENCY_PROJECT = "faithtrace-latency"
# The judge is priced (litellm and Phoenix know gpt-4o's price) and reads a long context, so that its cost
# shows in Phoenix's cents; each reply takes a second, so that a trace holding any of the scoring would last
# seconds. The app's own LLM call is a cheap one of 100 tokens.
JUDGE_MODEL = "openai/gpt-4o"
JUDGE_DELAY_S = 1.0
LONG_CONTEXTS = [
    CONTEXTS[0] + " " + " ".join(f"Service note {i}: frames are inspected yearly." for i in range(400))
]
APP_TOKENS = 100


def _seconds(text: str) -> float:
    """A latency as Phoenix prints it ("42ms", "9.6s", "1m 5s") in seconds."""
    total = 0.0
    for value, unit in re.findall(r"([\d.]+)\s*(ms|s|m|h)\b", text):
        total += float(value) * {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}[unit]
    assert re.search(r"\d", text), text
    return total


def _stat(text: str, name: str) -> str:
    """The value after ``name`` in a page's text (the project page's stats: "Latency P50", ...)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[lines.index(name) + 1]


@pytest.fixture
def latency_app(phoenix_server: PhoenixServer, fake_judge: FakeJudge) -> Iterator[TracerProvider]:
    fake_judge.delay_s = JUDGE_DELAY_S
    with _traced(
        phoenix_server, "rag-latency", LATENCY_PROJECT, fake_judge.settings(model=JUDGE_MODEL)
    ) as tp:
        yield tp


def test_phoenix_shows_each_request_s_own_latency_tokens_and_cost_and_the_score_on_its_rag_span(
    latency_app: TracerProvider, phoenix_server: PhoenixServer, browser: BrowserSession
) -> None:
    @faithtrace.trace_faithfulness(name="support-answer")
    def answer(question: str, contexts: list[str], text: str) -> str:
        time.sleep(0.03)  # the app's own work, so that its latency is more than rounding
        return text

    # Two requests the way a web app serves them: a server span, the app's own LLM call (with its tokens),
    # and the decorated RAG function. The failing answer is judged (a second late); the passing one is proven.
    tracer = latency_app.get_tracer("web")
    took: list[float] = []
    for text in (FAILING, PASSING):
        started = time.monotonic()
        with tracer.start_as_current_span("POST /ask", kind=SpanKind.SERVER):
            app_llm = {
                n.OPENINFERENCE_SPAN_KIND: n.OPENINFERENCE_KIND_LLM,
                n.LLM_MODEL_NAME: "gpt-4o-mini",
                "llm.provider": "openai",
                "llm.token_count.prompt": APP_TOKENS - 20,
                "llm.token_count.completion": 20,
                "llm.token_count.total": APP_TOKENS,
            }
            with tracer.start_as_current_span("ChatCompletion", attributes=app_llm):
                time.sleep(0.01)
            assert answer(QUESTION, LONG_CONTEXTS, text) == text
        took.append(time.monotonic() - started)
    assert faithtrace.flush(timeout=60)
    latency_app.force_flush()
    spans = phoenix_server.wait_for_spans(
        LATENCY_PROJECT,
        lambda s: sum(n.EVAL_OUTCOME in x["attributes"] for x in s if x["name"] == "support-answer") == 2,
    )
    failing = next(
        s for s in spans if s["name"] == "support-answer" and s["attributes"][n.OUTPUT_VALUE] == FAILING
    )
    assert failing["attributes"][n.GEN_AI_EVALUATION_SCORE_LABEL] == n.LABEL_FAIL
    judge_project = LATENCY_PROJECT + n.OWN_TRACES_SUFFIX
    judge_spans = phoenix_server.wait_for_spans(
        judge_project, lambda s: any(x["name"].startswith("chat ") for x in s)
    )
    assert all(s["context"]["trace_id"] != failing["context"]["trace_id"] for s in judge_spans)
    _annotations_of(phoenix_server, LATENCY_PROJECT, [failing["context"]["span_id"]])
    project_id = _project_id(phoenix_server, LATENCY_PROJECT)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)

    # The project's latency, as its stats show it: the requests' own (tens of milliseconds), not the
    # scoring's. The judge's traces are filed under a project of their own, where the second-long scoring is.
    project_url = f"{phoenix_server.http_url}/projects/{project_id}"
    page = _browse_until_stats(browser, project_url, ARTIFACTS / "phoenix-project-latency.png")
    p50, p99 = (_seconds(_stat(page["text"], f"Latency {p}")) for p in ("P50", "P99"))
    assert 0 < p50 <= p99 <= max(took) + 0.005, (p50, p99, took)
    judge_page = _browse_until_stats(
        browser,
        f"{phoenix_server.http_url}/projects/{_project_id(phoenix_server, judge_project)}",
        ARTIFACTS / "phoenix-judge-project-latency.png",
    )
    assert _seconds(_stat(judge_page["text"], "Latency P50")) >= JUDGE_DELAY_S

    # The traces list: each request's latency, and the tokens and cost of the app's own LLM call only (the
    # judge's gpt-4o tokens over a long context would cost cents).
    page = _browse(
        browser,
        f"{project_url}/traces",
        "POST /ask",
        ARTIFACTS / "phoenix-request-traces.png",
        "",
        anywhere=True,
    )
    assert page["found"], f"{page['log']}\nno traces on {page['url']}: {page['text'][:2000]}"
    header = page["rows"][0]
    rows = [dict(zip(header, r, strict=True)) for r in page["rows"][1:] if "POST /ask" in r]
    assert len(rows) == 2, page["rows"]
    for cells in rows:
        assert _seconds(cells["latency"]) <= max(took) + 0.005, cells
        assert cells["total tokens"] == str(APP_TOKENS), cells
        assert cells["total cost"] == "<$0.01", cells
    page = _browse(
        browser,
        f"{phoenix_server.http_url}/projects/{_project_id(phoenix_server, judge_project)}/traces",
        n.EVALUATION_SPAN,
        ARTIFACTS / "phoenix-judge-traces.png",
        "",
        anywhere=True,
    )
    assert page["found"], f"{page['log']}\nno judge traces on {page['url']}: {page['text'][:2000]}"
    header = page["rows"][0]
    (judge_row,) = [dict(zip(header, r, strict=True)) for r in page["rows"][1:] if n.EVALUATION_SPAN in r]
    assert int(judge_row["total tokens"].replace(",", "")) > 1000, judge_row
    assert re.fullmatch(r"\$\d+\.\d\d", judge_row["total cost"]), judge_row  # cents, where the app's are not

    # The failing request's trace: its latency, its cost, and on its RAG span the faithfulness score.
    page = _browse(
        browser,
        f"{phoenix_server.http_url}/redirects/spans/{failing['context']['span_id']}",
        "Events",
        ARTIFACTS / "phoenix-request-trace.png",
        "",
        anywhere=True,
    )
    assert page["found"], f"{page['log']}\nno trace on {page['url']}: {page['text'][:2000]}"
    text = page["text"]
    trace_view = text[text.index("Trace\n") :]
    assert _seconds(_stat(trace_view, "Latency")) <= max(took) + 0.005, trace_view[:500]
    assert _stat(trace_view, "Total Cost") == "<$0.01", trace_view[:500]
    tree = [line.strip() for line in trace_view.splitlines() if line.strip()]
    rag_at = tree.index("support-answer")
    assert "faithfulness" in tree[rag_at : rag_at + 5], tree[rag_at : rag_at + 8]
    assert not [line for line in tree if line == n.EVALUATION_SPAN or line.startswith("chat ")]

    # The Spans tab, filtered on the label the RAG span carries as an attribute: the failing request's RAG
    # span, whose annotation, opened, shows the score and the pass/fail label.
    page = _browse(
        browser,
        f"{project_url}/spans",
        "faithfulness",
        ARTIFACTS / "phoenix-rag-span-score.png",
        "attributes['gen_ai']['evaluation']['score']['label'] == 'fail'",
    )
    assert page["found"], f"{page['log']}\nno annotation on {page['url']}: {page['text'][:2000]}"
    rows = [r for r in page["rows"][1:] if any(cell.strip() for cell in r)]
    assert len(rows) == 1, page["rows"]
    assert "support-answer" in rows[0]
    lines = {line.strip() for details in page["dialogs"] for line in details.splitlines()}
    assert {"faithfulness", "0.50", "fail"} <= lines, page["dialogs"]


def _annotations_of(phoenix: PhoenixServer, project: str, span_ids: list[str]) -> None:
    deadline = time.monotonic() + 30
    with httpx.Client(base_url=phoenix.http_url, trust_env=False, timeout=10.0) as client:
        while True:
            response = client.get(f"/v1/projects/{project}/span_annotations", params={"span_ids": span_ids})
            if response.status_code == 200 and len(response.json()["data"]) >= len(span_ids):
                return
            assert time.monotonic() < deadline, response.text[:500]
            time.sleep(0.25)


def _browse_until_stats(browser: BrowserSession, url: str, screenshot: Path) -> dict[str, Any]:
    """The project page once its stats have loaded (they come after the page, and read "--" until then; the
    page waits for them, and each try is a fresh page)."""
    for _ in range(5):
        page = _browse(browser, url, "Latency P99", screenshot, "", anywhere=True, stat="Latency P99")
        assert page["found"], f"{page['log']}\nno stats on {page['url']}: {page['text'][:2000]}"
        if re.search(r"\d", _stat(page["text"], "Latency P99")):
            return page
    raise AssertionError(f"the stats never loaded on {url}: {page['text'][:2000]}")
