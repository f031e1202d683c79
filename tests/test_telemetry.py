"""What lands in the trace and the metrics, exactly: names, value types, parentage; and the exporters
faithtrace sets up itself (Prometheus /metrics, OTLP) when the app has none."""

# ruff: noqa: F811  (the fixtures are imported into this module by name, see tests/_trace_fixtures.py)

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.metrics.export import Gauge, Histogram, Sum
from opentelemetry.trace import SpanKind, StatusCode

from _fake_judge import MODEL, REASON_TEXT, fake_judge  # noqa: F401  (fixture)
from _loopback import serve_in_background
from _trace_fixtures import CONTEXT, QUESTION, clean_env, evaluation_of, ft, judge_root_of, point  # noqa: F401
from faithtrace import CaptureOptions, SamplingOptions, ScoringOptions, trace_faithfulness
from faithtrace._telemetry import names as n
from faithtrace.testing import FaithtraceCapture

ANSWER = "The capital of France is Paris. The Seine never flows through Paris. Paris has a famous museum."


_ALL_STEPS_ON_THE_JUDGE = ScoringOptions(claim_source="judge", judge_reason=True)
_COUNTS = (
    n.EVAL_CLAIMS_TOTAL,
    n.EVAL_CLAIMS_YES,
    n.EVAL_CLAIMS_NO,
    n.EVAL_CLAIMS_IDK,
    n.EVAL_CLAIMS_UNJUDGED,
)


def _pop_result(attrs: dict[str, Any]) -> None:
    """Take ANSWER's result out of ``attrs``, checking it: outcome, score, label, threshold, claim counts."""
    assert attrs.pop(n.EVAL_OUTCOME) == "scored"
    assert attrs.pop(n.GEN_AI_EVALUATION_SCORE_VALUE) == pytest.approx(1 / 3)
    assert attrs.pop(n.EVAL_FAITHFULNESS) == pytest.approx(2 / 3)
    assert attrs.pop(n.GEN_AI_EVALUATION_SCORE_LABEL) == "fail"
    assert attrs.pop(n.EVAL_THRESHOLD) == 0.7
    assert attrs.pop(n.EVAL_IDK_POLICY) == "penalize"
    assert [attrs.pop(k) for k in _COUNTS] == [3, 1, 1, 1, 0]  # total, yes, no, idk, unjudged


def test_the_evaluation_on_the_rag_span_and_the_judge_calls_in_a_trace_of_their_own(
    ft: FaithtraceCapture, fake_judge: Any
) -> None:
    # Every step on the judge (claims, verdicts, reason), so each kind of telemetry shows up.
    ft.configure(judge=fake_judge.settings(), scoring=_ALL_STEPS_ON_THE_JUDGE)

    @trace_faithfulness(name="support-bot")
    def answer(question: str, contexts: list[str]) -> str:
        return ANSWER

    before = time.time_ns()
    answer(QUESTION, [CONTEXT])
    returned = time.time_ns()
    assert ft.flush()
    (rag,) = ft.spans("support-bot")
    assert evaluation_of(ft, rag) is rag
    # The span's timing is the call's own, however long scoring took.
    assert before <= rag.start_time <= rag.end_time <= returned
    assert rag.kind is SpanKind.INTERNAL
    assert rag.status.status_code is StatusCode.UNSET

    attrs = dict(rag.attributes or {})
    # What the call put there stays the app's call's: its question and answer, its OpenInference kind.
    assert attrs.pop(n.INPUT_VALUE) == QUESTION
    assert attrs.pop(n.OUTPUT_VALUE) == ANSWER
    assert attrs.pop(n.OPENINFERENCE_SPAN_KIND) == "CHAIN"
    assert attrs.pop(n.FUNCTION) == "support-bot"
    assert attrs.pop(n.RETRIEVAL_DOCUMENT_CONTENT.format(index=0)) == CONTEXT
    assert (attrs.pop(n.CONTEXTS_COUNT), attrs.pop(n.SAMPLED)) == (1, True)
    # The evaluation's, none of them read as the app's own (no gen_ai.operation.name, gen_ai.request.model,
    # error.type): faithtrace's names, and the evaluation conventions' score and label for searches and tail
    # sampling.
    assert attrs.pop(n.GEN_AI_EVALUATION_NAME) == "faithfulness"
    assert attrs.pop(n.EVAL_PLACEMENT) == "rag_span"
    _pop_result(attrs)
    for key in (n.EVAL_QUEUE_WAIT, n.EVAL_DURATION):  # seconds, to the millisecond
        value = attrs.pop(key)
        assert isinstance(value, float)
        assert value == round(value, 3)
    input_tokens, output_tokens = attrs.pop(n.EVAL_INPUT_TOKENS), attrs.pop(n.EVAL_OUTPUT_TOKENS)
    assert isinstance(input_tokens, int)
    assert input_tokens > 0
    assert isinstance(output_tokens, int)
    assert output_tokens > 0
    assert attrs.pop(n.EVAL_LLM_CALLS) == 3
    assert attrs.pop(n.JUDGE_MODEL) == MODEL
    assert attrs == {}  # nothing else (no cost: the fake model has no price)

    # Events: the result, one per claim and one per step, each named so that a collapsed list tells them
    # apart, each at the time it happened: after the call, steps in order, the claims with their verdicts.
    events = [e.name for e in rag.events]
    assert events == [
        n.GEN_AI_EVALUATION_RESULT_EVENT,
        "faithtrace.claim 1: supported",
        "faithtrace.claim 2: contradicted",
        "faithtrace.claim 3: not_in_documents",
        "faithtrace.step claims",
        "faithtrace.step verdicts",
        "faithtrace.step reason",
    ]
    result = dict(rag.events[0].attributes or {})
    assert result == {
        n.GEN_AI_EVALUATION_NAME: "faithfulness",
        n.GEN_AI_EVALUATION_SCORE_VALUE: pytest.approx(1 / 3),
        n.GEN_AI_EVALUATION_SCORE_LABEL: "fail",
        n.GEN_AI_EVALUATION_EXPLANATION: REASON_TEXT,
    }
    claims = [dict(e.attributes or {}) for e in rag.events[1:4]]
    assert [(c[n.CLAIM_INDEX], c[n.CLAIM_VERDICT]) for c in claims] == [(0, "yes"), (1, "no"), (2, "idk")]
    assert claims[1][n.CLAIM_TEXT] == "The Seine never flows through Paris."
    assert claims[1][n.CLAIM_REASON] == "checked claim 2"
    steps = [dict(e.attributes or {}) for e in rag.events[4:]]
    assert [s[n.STEP_NAME] for s in steps] == ["claims", "verdicts", "reason"]
    for step in steps:
        assert set(step) == {
            n.STEP_NAME, n.STEP_LLM_CALLS, n.STEP_INPUT_TOKENS, n.STEP_OUTPUT_TOKENS, n.STEP_DURATION,
            n.STEP_CACHED, n.STEP_MODEL,
        }  # fmt: skip
        assert step[n.STEP_LLM_CALLS] == 1
        assert isinstance(step[n.STEP_INPUT_TOKENS], int)
        assert step[n.STEP_DURATION] == round(step[n.STEP_DURATION], 3)
        assert step[n.STEP_CACHED] is False
    assert sum(step[n.STEP_INPUT_TOKENS] for step in steps) == input_tokens
    times = {e.name: e.timestamp for e in rag.events}
    claims_at, verdicts_at, reason_at = (
        times[f"faithtrace.step {s}"] for s in ("claims", "verdicts", "reason")
    )
    assert rag.end_time < claims_at < verdicts_at < reason_at <= times[n.GEN_AI_EVALUATION_RESULT_EVENT]
    assert {times[name] for name in events[1:4]} == {verdicts_at}

    # The judge's calls: a trace of their own under an evaluation span linked to the RAG span, filed under
    # the service "<service>-faithtrace", so that no backend adds them to the request's latency or cost.
    judge = judge_root_of(ft, rag)
    assert judge.context.trace_id != rag.context.trace_id
    service = rag.resource.attributes["service.name"]  # the SDK's default: unknown_service:python
    assert judge.resource.attributes["service.name"] == f"{service}-faithtrace"
    assert judge.resource.attributes[n.OPENINFERENCE_PROJECT_NAME] == "default-faithtrace"
    assert judge.attributes[n.EVAL_RAG_SPAN_ID] == f"{rag.context.span_id:016x}"
    assert judge.attributes[n.EVAL_PLACEMENT] == "rag_span"
    assert judge.attributes[n.GEN_AI_EVALUATION_SCORE_LABEL] == "fail"
    assert judge.events == ()  # the events are on the RAG span
    calls = [s for s in ft.spans() if s.parent and s.parent.span_id == judge.context.span_id]
    assert [c.name for c in calls] == [f"chat {MODEL}"] * 3
    for call, step in zip(calls, ["claims", "verdicts", "reason"], strict=True):
        assert call.kind is SpanKind.CLIENT
        assert call.resource is judge.resource
        assert call.attributes[n.GEN_AI_OPERATION_NAME] == "chat"
        assert call.attributes[n.GEN_AI_REQUEST_MODEL] == MODEL
        assert call.attributes[n.GEN_AI_PROVIDER_NAME] == "openai"
        assert call.attributes[n.STEP_NAME] == step
        assert isinstance(call.attributes[n.GEN_AI_USAGE_INPUT_TOKENS], int)
        assert isinstance(call.attributes[n.GEN_AI_USAGE_OUTPUT_TOKENS], int)
        assert judge.start_time <= call.start_time < call.end_time <= judge.end_time
        _assert_judge_messages(call)
    # The request's trace is the request alone: the RAG span and its documents' zero-length record.
    request = [s for s in ft.spans() if s.context.trace_id == rag.context.trace_id]
    assert sorted(s.name for s in request) == [n.RETRIEVER_SPAN, "support-bot"]
    assert (
        max(s.end_time for s in request) - min(s.start_time for s in request) == rag.end_time - rag.start_time
    )
    # The RAG span, its documents, the judge's root and its 3 calls: the judge's HTTP calls are not traced.
    assert len(ft.spans()) == 1 + 1 + 1 + 3


def test_the_child_evaluation_span_its_events_and_judge_call_spans(
    ft: FaithtraceCapture, fake_judge: Any
) -> None:
    evaluation = _score_one(ft, fake_judge, scoring=_ALL_STEPS_ON_THE_JUDGE, evaluation_placement="child")
    (rag,) = ft.spans("support-bot")
    assert evaluation is evaluation_of(ft, rag)
    assert evaluation.parent.span_id == rag.context.span_id
    assert evaluation.resource is rag.resource  # in the request's trace, under the app's service
    assert evaluation.kind is SpanKind.INTERNAL
    assert evaluation.status.status_code is StatusCode.UNSET
    assert n.GEN_AI_EVALUATION_SCORE_LABEL not in rag.attributes

    attrs = dict(evaluation.attributes or {})
    assert attrs.pop(n.GEN_AI_OPERATION_NAME) == "evaluate"
    assert attrs.pop(n.GEN_AI_EVALUATION_NAME) == "faithfulness"
    assert attrs.pop(n.OPENINFERENCE_SPAN_KIND) == "EVALUATOR"
    assert attrs.pop(n.FUNCTION) == "support-bot"
    assert attrs.pop(n.EVAL_PLACEMENT) == "child"
    _pop_result(attrs)
    # Readable without clicks in UIs that show OpenInference input/output (Phoenix's list row and Info tab).
    assert attrs.pop(n.INPUT_VALUE) == ANSWER
    assert attrs.pop(n.OUTPUT_MIME_TYPE) == "application/json"
    output = json.loads(attrs.pop(n.OUTPUT_VALUE))
    assert output["score"] == pytest.approx(1 / 3)
    assert (output["label"], output["outcome"], output["threshold"]) == ("fail", "scored", 0.7)
    assert output["reason"] == REASON_TEXT
    assert [(c["claim"], c["verdict"]) for c in output["claims"]] == [
        ("The capital of France is Paris.", "yes"),
        ("The Seine never flows through Paris.", "no"),
        ("Paris has a famous museum.", "idk"),
    ]
    assert output["claims"][1]["reason"] == "checked claim 2"
    assert {c["decided_by"] for c in output["claims"]} == {"judge"}
    assert isinstance(attrs.pop(n.EVAL_QUEUE_WAIT), float)
    assert isinstance(attrs.pop(n.EVAL_DURATION), float)
    assert attrs.pop(n.EVAL_INPUT_TOKENS) > 0
    assert attrs.pop(n.EVAL_OUTPUT_TOKENS) > 0
    assert attrs.pop(n.EVAL_LLM_CALLS) == 3
    assert attrs.pop(n.JUDGE_MODEL) == MODEL
    assert attrs.pop(n.GEN_AI_REQUEST_MODEL) == MODEL
    assert attrs == {}  # nothing else (no cost: the fake model has no price)

    # The same events as on a RAG span.
    assert [e.name for e in evaluation.events][:2] == [
        n.GEN_AI_EVALUATION_RESULT_EVENT,
        "faithtrace.claim 1: supported",
    ]
    assert len(evaluation.events) == 1 + 3 + 3
    calls = [s for s in ft.spans() if s.parent and s.parent.span_id == evaluation.context.span_id]
    assert [c.name for c in calls] == [f"chat {MODEL}"] * 3
    assert all(evaluation.start_time <= c.start_time < c.end_time <= evaluation.end_time for c in calls)
    # Only our spans (the RAG span, its documents on a retriever child, the evaluation and its 3 judge
    # calls), all in the request's trace: the judge's HTTP calls are not traced a second time.
    assert len(ft.spans()) == 1 + 1 + 1 + 3
    assert {s.context.trace_id for s in ft.spans()} == {rag.context.trace_id}


def test_the_documents_also_go_on_a_retriever_child_where_phoenix_shows_them(
    ft: FaithtraceCapture, fake_judge: Any
) -> None:
    secret = "sk-" + "Q1w2E3r4" * 4
    other = f"The Louvre is in Paris. Its key is api_key={secret}."
    capture = CaptureOptions(redact=lambda t: t.replace("Louvre", "[museum]"))
    ft.configure(judge=fake_judge.settings(), capture=capture)

    @trace_faithfulness(name="support-bot")
    def answer(question: str, contexts: list[str]) -> str:
        return ANSWER

    answer(QUESTION, [CONTEXT, other])
    assert ft.flush()
    (rag,) = ft.spans("support-bot")
    (retriever,) = ft.spans(n.RETRIEVER_SPAN)
    assert retriever.parent is not None
    assert retriever.parent.span_id == rag.context.span_id
    assert retriever.start_time == retriever.end_time == rag.end_time  # a record, not a timed retrieval
    attrs = dict(retriever.attributes or {})
    assert attrs.pop(n.OPENINFERENCE_SPAN_KIND) == "RETRIEVER"
    assert attrs.pop(n.FUNCTION) == "support-bot"  # faithtrace's own: `faithtrace serve` never reads it
    assert attrs.pop(n.INPUT_VALUE) == QUESTION
    docs = [attrs.pop(n.RETRIEVAL_DOCUMENT_CONTENT.format(index=i)) for i in range(2)]
    assert not attrs
    assert docs == [rag.attributes[n.RETRIEVAL_DOCUMENT_CONTENT.format(index=i)] for i in range(2)]
    assert docs[0] == CONTEXT
    assert docs[1] == "The [museum] is in Paris. Its key is api_key=[REDACTED]"  # scrubbed and redacted

    # No content capture, no documents; remote scoring leaves the RAG span as `faithtrace serve` reads it.
    for config in ({"capture": CaptureOptions(content=False)}, {"scoring": "remote"}):
        ft.clear()
        ft.configure(judge=fake_judge.settings(), **config)
        answer(QUESTION, [CONTEXT])
        assert ft.flush()
        assert ft.spans(n.RETRIEVER_SPAN) == [], config


def _assert_judge_messages(call: Any) -> None:
    """The prompt and the reply, in the GenAI semconv JSON form and in OpenInference's flattened form."""
    attrs = call.attributes
    inputs = json.loads(attrs[n.GEN_AI_INPUT_MESSAGES])
    assert [m["role"] for m in inputs][-1] == "user"
    assert all(m["parts"][0]["type"] == "text" for m in inputs)
    assert all(m["parts"][0]["content"] for m in inputs)
    assert "strict fact-checker" in inputs[0]["parts"][0]["content"]  # faithtrace's own prompt, as sent
    (reply,) = json.loads(attrs[n.GEN_AI_OUTPUT_MESSAGES])
    assert reply["role"] == "assistant"
    assert reply["finish_reason"] == "stop"
    json.loads(reply["parts"][0]["content"])  # the judge's raw JSON reply, as received
    assert attrs[n.OPENINFERENCE_SPAN_KIND] == "LLM"
    for i, message in enumerate(inputs):
        assert attrs[n.LLM_INPUT_MESSAGE_ROLE.format(index=i)] == message["role"]
        assert attrs[n.LLM_INPUT_MESSAGE_CONTENT.format(index=i)] == message["parts"][0]["content"]
    assert attrs[n.LLM_OUTPUT_MESSAGE_CONTENT.format(index=0)] == reply["parts"][0]["content"]
    # What trace UIs' span lists show: the last user message (what is judged) and the reply text.
    assert attrs[n.INPUT_VALUE] == inputs[-1]["parts"][0]["content"]
    assert attrs[n.OUTPUT_VALUE] == reply["parts"][0]["content"]


def _score_one(ft: FaithtraceCapture, fake_judge: Any, question: str = QUESTION, **config: Any) -> Any:
    """Configure with ``config``, score ``ANSWER`` once as "support-bot", return its evaluation span."""
    ft.configure(judge=fake_judge.settings(), **config)

    @trace_faithfulness(name="support-bot")
    def answer(question: str, contexts: list[str]) -> str:
        return ANSWER

    answer(question, [CONTEXT])
    assert ft.flush()
    (evaluation,) = ft.evaluation_spans()
    return evaluation


def test_judge_messages_follow_the_capture_options(ft: FaithtraceCapture, fake_judge: Any) -> None:
    secret = "sk-" + "a1B2c3D4" * 4
    capture = CaptureOptions(max_attribute_chars=60, redact=lambda t: t.replace("Paris", "[city]"))
    rag = _score_one(ft, fake_judge, f"{QUESTION} key={secret}", capture=capture)
    evaluation = judge_root_of(ft, rag)
    (call,) = [s for s in ft.spans() if s.parent and s.parent.span_id == evaluation.context.span_id]
    texts = [v for k, v in call.attributes.items() if k.startswith("llm.") and k.endswith(".content")]
    texts += [call.attributes[n.INPUT_VALUE], call.attributes[n.OUTPUT_VALUE]]
    assert len(texts) > 2
    assert all(len(t) <= 62 for t in texts)
    assert not any("Paris" in t or secret in t for t in texts)
    for key in (n.GEN_AI_INPUT_MESSAGES, n.GEN_AI_OUTPUT_MESSAGES):  # valid JSON whatever the cap
        parts = [m["parts"][0]["content"] for m in json.loads(call.attributes[key])]
        assert all(len(p) <= 62 and "Paris" not in p for p in parts)
    assert n.LLM_INPUT_MESSAGE_CONTENT.format(index=0) in call.attributes[n.TRUNCATED]
    # The evaluation span's JSON output stays valid under the same cap: whole claims are dropped instead.
    output = json.loads(evaluation.attributes[n.OUTPUT_VALUE])
    assert len(evaluation.attributes[n.OUTPUT_VALUE]) <= 60 or output["claims"] == []
    assert output["claims_omitted"] == 3 - len(output["claims"]) > 0


def test_without_content_capture_no_messages_and_no_texts(ft: FaithtraceCapture, fake_judge: Any) -> None:
    rag = _score_one(ft, fake_judge, capture=CaptureOptions(content=False))
    assert not any(n.is_claim_event(e.name) and n.CLAIM_TEXT in e.attributes for e in rag.events)
    evaluation = judge_root_of(ft, rag)
    assert n.INPUT_VALUE not in evaluation.attributes
    output = json.loads(evaluation.attributes[n.OUTPUT_VALUE])
    assert [c["verdict"] for c in output["claims"]] == ["yes", "no", "idk"]
    assert not any("claim" in c or "reason" in c for c in output["claims"])
    assert "reason" not in output
    for span in ft.spans():
        assert not any(
            k.startswith(("llm.input", "llm.output", "gen_ai.input", "gen_ai.output"))
            for k in span.attributes
        )
        if span.name.startswith("chat "):
            assert n.INPUT_VALUE not in span.attributes
            assert n.OUTPUT_VALUE not in span.attributes


def test_linked_placement_puts_the_evaluation_in_a_trace_of_its_own(
    ft: FaithtraceCapture, fake_judge: Any
) -> None:
    evaluation = _score_one(ft, fake_judge, evaluation_placement="linked")
    (rag,) = ft.spans("support-bot")
    assert n.GEN_AI_EVALUATION_SCORE_LABEL not in rag.attributes
    assert evaluation.attributes[n.EVAL_PLACEMENT] == "linked"
    # Filed apart from the app's spans: the evaluation's duration is no request's.
    assert (
        evaluation.resource.attributes["service.name"]
        == rag.resource.attributes["service.name"] + "-faithtrace"
    )
    assert evaluation.parent is None
    assert evaluation.context.trace_id != rag.context.trace_id
    assert [link.context.span_id for link in evaluation.links] == [rag.context.span_id]
    assert evaluation.attributes[n.EVAL_RAG_TRACE_ID] == f"{rag.context.trace_id:032x}"
    assert evaluation.attributes[n.EVAL_RAG_SPAN_ID] == f"{rag.context.span_id:016x}"
    calls = [
        s for s in ft.spans() if s.context.trace_id == evaluation.context.trace_id and s is not evaluation
    ]
    assert calls
    assert all(c.parent.span_id == evaluation.context.span_id for c in calls)
    # The request's trace is the request alone: its duration is the call's, not the scoring's.
    request = sorted(s.name for s in ft.spans() if s.context.trace_id == rag.context.trace_id)
    assert request == [n.RETRIEVER_SPAN, "support-bot"]  # the documents' record is zero-length, at the end


def test_default_scoring_is_one_judge_call_and_says_so_per_step(ft: FaithtraceCapture) -> None:
    # Claims are the answer's sentences (split in code) and the reason is a template: the verdicts are the
    # only judge call, and the step events still account for all three steps.
    @trace_faithfulness(name="support-bot")
    def answer(question: str, contexts: list[str]) -> str:
        return ANSWER

    answer(QUESTION, [CONTEXT])
    assert ft.flush()
    evaluation = evaluation_of(ft, ft.spans("support-bot")[0])
    assert evaluation.attributes[n.EVAL_LLM_CALLS] == 1
    steps = {e.attributes[n.STEP_NAME]: e.attributes for e in evaluation.events if n.is_step_event(e.name)}
    calls_per_step = {name: s[n.STEP_LLM_CALLS] for name, s in steps.items()}
    assert calls_per_step == {"claims": 0, "verdicts": 1, "reason": 0}
    assert steps["claims"][n.STEP_INPUT_TOKENS] == 0
    assert steps["verdicts"][n.STEP_INPUT_TOKENS] == evaluation.attributes[n.EVAL_INPUT_TOKENS] > 0
    judge = judge_root_of(ft, evaluation)
    calls = [s for s in ft.spans() if s.parent and s.parent.span_id == judge.context.span_id]
    assert [c.attributes[n.STEP_NAME] for c in calls] == ["verdicts"]
    (result,) = [e for e in evaluation.events if e.name == n.GEN_AI_EVALUATION_RESULT_EVENT]
    assert result.attributes[n.GEN_AI_EVALUATION_EXPLANATION]  # written without a judge call


def test_claim_events_are_capped_with_the_total_noted(ft: FaithtraceCapture, fake_judge: Any) -> None:
    evaluation = _score_one(ft, fake_judge, capture=CaptureOptions(max_claim_events=1))
    assert [e.name for e in evaluation.events if n.is_claim_event(e.name)] == [
        "faithtrace.claim 1: supported"
    ]
    assert evaluation.attributes[n.EVAL_CLAIM_EVENTS_DROPPED] == 2
    output = json.loads(judge_root_of(ft, evaluation).attributes[n.OUTPUT_VALUE])
    assert (len(output["claims"]), output["claims_omitted"]) == (1, 2)  # the same cap, said the same way
    assert evaluation.attributes[n.EVAL_CLAIMS_TOTAL] == 3


def test_metrics(ft: FaithtraceCapture, fake_judge: Any) -> None:
    ft.configure(judge=fake_judge.settings(), scoring=_ALL_STEPS_ON_THE_JUDGE)

    @trace_faithfulness(name="bot")
    def answer(question: str, contexts: list[str]) -> str:
        return ANSWER

    answer(QUESTION, [CONTEXT])
    answer(QUESTION, [])  # nothing retrieved: no_context, score 0
    assert ft.flush()
    data = ft.metrics()
    kinds = {name: type(metric) for name, metric in data.items()}
    assert kinds == {
        n.METRIC_SCORE: Histogram,
        n.METRIC_CLAIMS: Histogram,
        n.METRIC_VERDICTS: Sum,
        n.METRIC_EVAL_DURATION: Histogram,
        n.METRIC_TOKEN_USAGE: Histogram,
        n.METRIC_OPERATION_DURATION: Histogram,
        n.METRIC_EVALUATIONS: Sum,
        n.METRIC_CALLS: Sum,
        n.METRIC_INTERNAL_ERRORS: Sum,
        n.METRIC_EXPORTER_ERRORS: Sum,
        n.METRIC_ANNOTATIONS: Sum,
        n.METRIC_HOST_ERRORS: Sum,
        n.METRIC_QUEUE_DEPTH: Gauge,
        n.METRIC_HELD_SPANS: Gauge,
        n.METRIC_HOLD_RELEASES: Sum,
    }
    assert all(data[k].is_monotonic for k in (n.METRIC_VERDICTS, n.METRIC_EVALUATIONS, n.METRIC_CALLS))

    score = point(ft, n.METRIC_SCORE, **{n.FUNCTION: "bot"})
    assert (score.count, score.sum) == (2, pytest.approx(1 / 3))
    assert list(score.explicit_bounds) == list(n.SCORE_BUCKETS)
    assert dict(score.attributes) == {n.FUNCTION: "bot"}
    scored = point(ft, n.METRIC_EVALUATIONS, **{n.FUNCTION: "bot", n.OUTCOME: "scored"})
    assert dict(scored.attributes) == {
        n.FUNCTION: "bot",
        n.OUTCOME: "scored",
        n.GEN_AI_EVALUATION_SCORE_LABEL: "fail",
    }
    assert scored.value == 1
    assert point(ft, n.METRIC_EVALUATIONS, **{n.FUNCTION: "bot", n.OUTCOME: "no_context"}).value == 1
    assert point(ft, n.METRIC_CALLS, **{n.FUNCTION: "bot"}).value == 2
    verdicts = {p.attributes[n.VERDICT]: p.value for p in ft.points(n.METRIC_VERDICTS)}
    assert verdicts == {"yes": 1, "no": 1, "idk": 4}
    claims = point(ft, n.METRIC_CLAIMS)
    assert (claims.count, claims.sum) == (2, 6)
    tokens = ft.points(n.METRIC_TOKEN_USAGE)
    assert {p.attributes[n.GEN_AI_TOKEN_TYPE] for p in tokens} == {"input", "output"}
    assert {p.attributes[n.STEP_NAME] for p in tokens} == {"claims", "verdicts", "reason"}
    for p in tokens:
        assert set(p.attributes) == {
            n.GEN_AI_OPERATION_NAME,
            n.GEN_AI_REQUEST_MODEL,
            n.STEP_NAME,
            n.GEN_AI_TOKEN_TYPE,
        }
    durations = ft.points(n.METRIC_OPERATION_DURATION)
    assert sum(p.count for p in durations) == 4  # claims ×2, verdicts, reason
    assert point(ft, n.METRIC_QUEUE_DEPTH).value == 0
    assert point(ft, n.METRIC_HELD_SPANS).value == 0
    assert {p.attributes[n.HOLD_REASON] for p in ft.points(n.METRIC_HOLD_RELEASES)} >= {"evaluated"}
    # Process-wide (other tests may have provoked some); exact counting is tested in test_worker.py.
    assert isinstance(point(ft, n.METRIC_INTERNAL_ERRORS).value, int)
    # Never text in metric attributes.
    for metric in data.values():
        for p in metric.data_points:
            assert all(QUESTION not in str(v) and "Paris" not in str(v) for v in p.attributes.values())


def test_priced_judge_reports_cost_and_respects_the_usd_budget(
    ft: FaithtraceCapture, fake_judge: Any
) -> None:
    # A model litellm knows the price of (and that supports JSON schema output), served by the fake judge.
    ft.configure(
        judge=fake_judge.settings(model="openai/gpt-4o-mini"),
        sampling=SamplingOptions(max_cost_usd_per_hour=1e-9),
    )

    @trace_faithfulness(name="priced")
    def answer(question: str, contexts: list[str]) -> str:
        return ANSWER

    answer(QUESTION, [CONTEXT])
    assert ft.flush()
    answer(QUESTION, [CONTEXT])  # the first evaluation spent the hour's budget
    assert ft.flush()
    (evaluation,) = ft.evaluation_spans()
    cost = evaluation.attributes[n.EVAL_COST_USD]
    assert isinstance(cost, float)
    assert cost > 0
    steps = [e.attributes for e in evaluation.events if n.is_step_event(e.name)]
    # Steps that made no judge call (claims split in code, the template reason) carry no cost.
    assert sum(s.get(n.STEP_COST_USD, 0.0) for s in steps) == pytest.approx(cost)
    (spent,) = ft.points(n.METRIC_JUDGE_COST)
    assert spent.value == pytest.approx(cost)
    assert dict(spent.attributes) == {n.FUNCTION: "priced", n.GEN_AI_REQUEST_MODEL: "openai/gpt-4o-mini"}
    assert {b["response_format"]["type"] for b in fake_judge.requests} == {"json_schema"}
    assert point(ft, n.METRIC_EVALUATIONS, **{n.FUNCTION: "priced", n.SAMPLING_REASON: "budget"}).value == 1


# --- exporters faithtrace sets up itself (in a child process: global providers are set only once) ---
def _run(script: str, env_extra: dict[str, str], timeout: float = 120) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FAITHTRACE_", "OTEL_"))}
    env.update(env_extra)
    env["PYTHONPATH"] = str(Path(__file__).parent) + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def _judge_code(fake_judge: Any) -> str:
    s = fake_judge.settings()
    return f"faithtrace.JudgeSettings(model={s.model!r}, api_base={s.api_base!r}, api_key='x', max_retries=0)"


@pytest.mark.slow
def test_prometheus_endpoint_serves_the_metrics(fake_judge: Any) -> None:
    out = _run(
        f"""
        import urllib.request, faithtrace
        from faithtrace._telemetry.setup import prometheus_address
        faithtrace.configure(prometheus=0, judge={_judge_code(fake_judge)})
        @faithtrace.trace_faithfulness(name="bot")
        def answer(question, contexts):
            return "The capital of France is Paris."
        answer("q", ["Paris is the capital of France."])
        assert faithtrace.flush(60)
        host, port = prometheus_address()
        assert host == "127.0.0.1"
        print(urllib.request.urlopen(f"http://{{host}}:{{port}}/metrics", timeout=10).read().decode())
        faithtrace.shutdown()
        """,
        {},
    )
    lines = out.splitlines()
    assert 'faithtrace_evaluations_total{faithtrace_function="bot",faithtrace_outcome="scored"' in out
    (le_one,) = [
        line for line in lines if line.startswith("faithtrace_evaluation_score_bucket") and 'le="1.0"' in line
    ]
    assert le_one.endswith(" 1.0")
    assert any(line.startswith("faithtrace_judge_token_usage_bucket") for line in lines)
    assert any(line.startswith("faithtrace_queue_depth") for line in lines)


class _Collector(BaseHTTPRequestHandler):
    received: list[tuple[str, int]]

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        self.received.append((self.path, len(body)))
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()


@pytest.fixture
def otlp_receiver() -> Iterator[tuple[str, list[tuple[str, int]]]]:
    received: list[tuple[str, int]] = []
    handler = type("Handler", (_Collector,), {"received": received})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    serve_in_background(server)
    try:
        yield f"http://127.0.0.1:{server.server_port}", received
    finally:
        server.shutdown()
        server.server_close()


# The annotation config is registered with the first annotations.
_PHOENIX_PATHS = {"/v1/traces", "/v1/span_annotations", "/v1/trace_annotations", "/v1/annotation_configs"}


@pytest.mark.parametrize(
    ("extra_env", "expected"),
    [
        ({}, {"/v1/traces", "/v1/metrics"}),
        # The receiver plays Phoenix: OTLP/HTTP traces and the REST API on one port (metrics would get a 405).
        ({"FAITHTRACE_ANNOTATIONS": "phoenix"}, _PHOENIX_PATHS),
        (
            {
                "FAITHTRACE_ANNOTATIONS": "phoenix",
                "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "{endpoint}/otelcol/v1/m",
            },
            _PHOENIX_PATHS | {"/otelcol/v1/m"},  # a Collector's, named: metrics go there
        ),
    ],
)
@pytest.mark.slow
def test_otlp_export_from_standard_env_vars(
    fake_judge: Any, otlp_receiver: Any, extra_env: dict[str, str], expected: set[str]
) -> None:
    endpoint, received = otlp_receiver
    script = f"""
        import faithtrace
        from opentelemetry import trace
        faithtrace.configure(judge={_judge_code(fake_judge)})
        assert type(trace.get_tracer_provider()).__name__ == "TracerProvider"
        @faithtrace.trace_faithfulness
        def answer(question, contexts):
            return "The capital of France is Paris."
        answer("q", ["Paris is the capital of France."])
        assert faithtrace.flush(60)
        faithtrace.shutdown()
        print("ok")
        """
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_SERVICE_NAME": "rag-test"}
    env.update({k: v.format(endpoint=endpoint) for k, v in extra_env.items()})
    out = _run(script, env)
    assert out.strip() == "ok"
    paths = {path for path, size in received if size > 0}
    assert paths == expected


@pytest.mark.slow
def test_without_configure_env_and_the_apps_global_provider_are_used(fake_judge: Any) -> None:
    s = fake_judge.settings()
    script = """
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
        import faithtrace
        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        trace.set_tracer_provider(provider)  # the app's own set-up; faithtrace.configure() is never called
        @faithtrace.trace_faithfulness
        def answer(question, contexts):
            return "The capital of France is Paris."
        answer("q", ["Paris is the capital of France."])
        assert faithtrace.flush(60)
        spans = {x.name: x for x in exporter.get_finished_spans()}
        print(sorted(spans), spans["evaluate faithfulness"].attributes["gen_ai.evaluation.score.value"])
        """
    env = {
        "FAITHTRACE_JUDGE_MODEL": str(s.model),
        "FAITHTRACE_JUDGE_API_BASE": str(s.api_base),
        "FAITHTRACE_JUDGE_API_KEY": "x",
        "FAITHTRACE_JUDGE_MAX_RETRIES": "0",
    }
    out = _run(script, env)
    assert out.strip() == (
        "['answer', 'chat openai/fake-judge', 'evaluate faithfulness', 'retrieved documents'] 1.0"
    )
