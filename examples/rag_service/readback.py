"""Turn exported OpenTelemetry spans back into "what did faithtrace say about this answer".

This reads exactly what a trace backend receives (the RAG span with its ``gen_ai.evaluation.result``, claim
and step events, and the judge's ``chat`` spans in a trace of their own; or, with the other placements, an
``evaluate faithfulness`` span carrying those events), so whatever the demo prints is what a person would
find in Jaeger or Phoenix. It works on SDK ``ReadableSpan`` objects, e.g. from an ``InMemorySpanExporter``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode

# The telemetry names are spelled in one place in faithtrace; reuse them rather than repeat them.
from faithtrace._telemetry import names as n


@dataclass(frozen=True)
class ClaimView:
    index: int
    text: str
    verdict: str
    status: str  # supported | contradicted | not_in_documents | not_confirmed
    reason: str | None


@dataclass(frozen=True)
class StepView:
    name: str
    model: str | None
    llm_calls: int
    input_tokens: int
    output_tokens: int
    duration_s: float
    cost_usd: float | None
    cached: bool


@dataclass
class EvaluationView:
    trace_id: str
    rag_span_id: str | None
    function: str | None
    question: str | None
    answer: str | None
    contexts: list[str]
    outcome: str | None
    score: float | None
    label: str | None
    threshold: float | None
    explanation: str | None
    yes: int
    no: int
    idk: int
    claims: list[ClaimView] = field(default_factory=list)
    claims_not_shown: int = 0
    steps: list[StepView] = field(default_factory=list)
    judge_model: str | None = None
    judge_spans: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = None
    seconds: float = 0.0  # how long scoring this answer took (queue wait excluded)
    queue_wait_s: float | None = None
    error_type: str | None = None
    error_message: str | None = None

    def as_dict(self) -> dict[str, Any]:
        from dataclasses import asdict

        return asdict(self)


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _int(value: Any, default: int = 0) -> int:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else default


def _str(value: Any) -> str | None:
    return str(value) if value is not None else None


def _hex_span(span_id: int) -> str:
    return format(span_id, "016x")


def _contexts(attrs: Mapping[str, Any]) -> list[str]:
    out: list[str] = []
    while (text := attrs.get(n.RETRIEVAL_DOCUMENT_CONTENT.format(index=len(out)))) is not None:
        out.append(str(text))
    return out


def _step(attrs: Mapping[str, Any]) -> StepView:
    return StepView(
        name=str(attrs.get(n.STEP_NAME, "?")),
        model=_str(attrs.get(n.STEP_MODEL)),
        llm_calls=_int(attrs.get(n.STEP_LLM_CALLS)),
        input_tokens=_int(attrs.get(n.STEP_INPUT_TOKENS)),
        output_tokens=_int(attrs.get(n.STEP_OUTPUT_TOKENS)),
        duration_s=_num(attrs.get(n.STEP_DURATION)) or 0.0,
        cost_usd=_num(attrs.get(n.STEP_COST_USD)),
        cached=bool(attrs.get(n.STEP_CACHED, False)),
    )


def _rag_span_of(span: ReadableSpan, by_id: Mapping[int, ReadableSpan]) -> ReadableSpan | None:
    """The RAG span an evaluation belongs to: the span itself when the evaluation is on it, else the one the
    evaluation span links to (its parent, with placement child)."""
    if span.name != n.EVALUATION_SPAN:
        return span
    return next((by_id[link.context.span_id] for link in span.links if link.context.span_id in by_id), None)


def read_evaluation(span: ReadableSpan, by_id: Mapping[int, ReadableSpan], children: int) -> EvaluationView:
    attrs = dict(span.attributes or {})
    parent = _rag_span_of(span, by_id)
    rag = dict(parent.attributes or {}) if parent is not None else {}
    result: dict[str, Any] = {}
    claims: list[ClaimView] = []
    steps: list[StepView] = []
    for event in span.events:
        ev = dict(event.attributes or {})
        if event.name == n.GEN_AI_EVALUATION_RESULT_EVENT:
            result = ev
        elif n.is_claim_event(event.name):
            claims.append(
                ClaimView(
                    index=_int(ev.get(n.CLAIM_INDEX), len(claims)),
                    text=str(ev.get(n.CLAIM_TEXT, "")),
                    verdict=str(ev.get(n.CLAIM_VERDICT, "?")),
                    status=str(ev.get(n.CLAIM_STATUS, "?")),
                    reason=_str(ev.get(n.CLAIM_REASON)),
                )
            )
        elif n.is_step_event(event.name):
            steps.append(_step(ev))
    claims.sort(key=lambda c: c.index)
    score = _num(result.get(n.GEN_AI_EVALUATION_SCORE_VALUE, attrs.get(n.GEN_AI_EVALUATION_SCORE_VALUE)))
    label = _str(result.get(n.GEN_AI_EVALUATION_SCORE_LABEL, attrs.get(n.GEN_AI_EVALUATION_SCORE_LABEL)))
    yes, no, idk = (_int(attrs.get(k)) for k in (n.EVAL_CLAIMS_YES, n.EVAL_CLAIMS_NO, n.EVAL_CLAIMS_IDK))
    total = _int(attrs.get(n.EVAL_CLAIMS_TOTAL), yes + no + idk)
    # On an evaluation span: error.type and its status; on a RAG span, whose status is the app's call's:
    # faithtrace.evaluation.error.*.
    error_type = _str(attrs.get(n.ERROR_TYPE, attrs.get(n.EVAL_ERROR_TYPE)))
    status = span.status
    if n.EVAL_ERROR_MESSAGE in attrs:
        error_message = _str(attrs[n.EVAL_ERROR_MESSAGE])
    else:
        error_message = (status.description or None) if status.status_code is StatusCode.ERROR else None
    seconds = _num(attrs.get(n.EVAL_DURATION))
    if seconds is None:
        seconds = ((span.end_time or 0) - (span.start_time or 0)) / 1e9
    trace_span = parent if parent is not None else span  # the request's trace
    return EvaluationView(
        trace_id=format(trace_span.context.trace_id, "032x"),
        rag_span_id=_hex_span(parent.context.span_id) if parent is not None else None,
        function=_str(rag.get(n.FUNCTION, attrs.get(n.FUNCTION))),
        question=_str(rag.get(n.INPUT_VALUE)),
        answer=_str(rag.get(n.OUTPUT_VALUE)),
        contexts=_contexts(rag),
        outcome=_str(attrs.get(n.EVAL_OUTCOME)),
        score=score,
        label=label,
        threshold=_num(attrs.get(n.EVAL_THRESHOLD)),
        explanation=_str(result.get(n.GEN_AI_EVALUATION_EXPLANATION)),
        yes=yes,
        no=no,
        idk=idk,
        claims=claims,
        claims_not_shown=max(0, total - len(claims)),
        steps=steps,
        judge_model=_str(attrs.get(n.JUDGE_MODEL)),
        judge_spans=children,
        input_tokens=_int(attrs.get(n.EVAL_INPUT_TOKENS), sum(s.input_tokens for s in steps)),
        output_tokens=_int(attrs.get(n.EVAL_OUTPUT_TOKENS), sum(s.output_tokens for s in steps)),
        cost_usd=_num(attrs.get(n.EVAL_COST_USD)),
        seconds=max(0.0, seconds),
        queue_wait_s=_num(attrs.get(n.EVAL_QUEUE_WAIT)),
        error_type=error_type,
        error_message=error_message,
    )


def read_evaluations(spans: Iterable[ReadableSpan]) -> list[EvaluationView]:
    """One view per evaluation found (a span carrying a ``gen_ai.evaluation.result`` event), in the order
    the evaluations finished."""
    spans = list(spans)
    by_id = {s.context.span_id: s for s in spans}
    judge_children: dict[int, int] = {}
    for s in spans:
        if s.parent is not None and s.name.startswith(f"{n.JUDGE_OPERATION} "):
            judge_children[s.parent.span_id] = judge_children.get(s.parent.span_id, 0) + 1
    # The judge's calls of an evaluation recorded on its RAG span sit under an evaluation span of their own
    # trace, linked to the RAG span.
    judge_calls: dict[int, int] = {}
    for s in spans:
        if s.name == n.EVALUATION_SPAN:
            for link in s.links:
                judge_calls[link.context.span_id] = judge_children.get(s.context.span_id, 0)
    evaluations = [s for s in spans if any(e.name == n.GEN_AI_EVALUATION_RESULT_EVENT for e in s.events)]
    evaluations.sort(key=lambda s: max((e.timestamp for e in s.events), default=s.end_time or 0))
    return [
        read_evaluation(
            s, by_id, judge_children.get(s.context.span_id, judge_calls.get(s.context.span_id, 0))
        )
        for s in evaluations
    ]


def evaluation_for_trace(views: Sequence[EvaluationView], trace_id: str) -> EvaluationView | None:
    return next((v for v in views if v.trace_id == trace_id), None)
