"""Span attributes and events: the RAG span's captured texts, and the evaluation span built from a result.

The evaluation span is created when scoring finishes, with a link to the RAG span (the RAG span has ended by
then, and the SDK drops events added to an ended span). By default it is the RAG span's child, in the
request's trace, so tail sampling can keep a trace for its score; ``placement="linked"`` starts a trace of its
own instead, so the request trace's duration stays the request's. It carries OpenInference ``input.value``
(the answer) and ``output.value`` (JSON: score, label, claims with verdicts) for UIs that show those, the
``gen_ai.evaluation.result`` event, one event per claim (capped) and per pipeline step, and one ``chat
{model}`` CLIENT child span per judge request, placed at the request's real start time and duration.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, NonRecordingSpan, SpanKind, Status, StatusCode, Tracer

from faithtrace._common.secrets import export_text
from faithtrace._telemetry import names as n
from faithtrace._telemetry.messages import message_attributes
from faithtrace._telemetry.records import Captured
from faithtrace.judge import LLMCall
from faithtrace.scoring.models import ClaimVerdict, FaithfulnessResult

if TYPE_CHECKING:
    from faithtrace._config.scoring_options import ScoringOptions
    from faithtrace._config.settings import CaptureOptions
    from faithtrace._telemetry.records import Job

Attributes = dict[str, Any]

# Flagged spans recorded per claim: a claim holding more is rare, and its first spans already say why.
_SPANS_PER_CLAIM = 8


class _Exporter:
    """Applies the capture options to every text that leaves the process."""

    def __init__(self, options: CaptureOptions) -> None:
        self.options = options
        self.truncated: list[str] = []

    def __call__(self, key: str, text: str, readable: bool = False) -> str:
        o = self.options
        out, cut = export_text(text, o.max_attribute_chars, o.scrub_secrets, o.redact, readable=readable)
        if cut:
            self.truncated.append(key)
        return out


def rag_attributes(captured: Captured, function: str, options: CaptureOptions) -> Attributes:
    """The RAG span's attributes (request path: only slicing and one regex pass per text)."""
    attrs: Attributes = {n.FUNCTION: function, n.OPENINFERENCE_SPAN_KIND: n.OPENINFERENCE_KIND_CHAIN}
    if captured.contexts is not None:
        attrs[n.CONTEXTS_COUNT] = len(captured.contexts)
    if not options.content:
        return attrs
    export = _Exporter(options)
    if captured.query is not None:
        attrs[n.INPUT_VALUE] = export(n.INPUT_VALUE, captured.query)
    if captured.answer is not None:
        attrs[n.OUTPUT_VALUE] = export(n.OUTPUT_VALUE, captured.answer)
    for i, doc in enumerate((captured.contexts or [])[: options.max_documents]):
        key = n.RETRIEVAL_DOCUMENT_CONTENT.format(index=i)
        attrs[key] = export(key, doc)
    if export.truncated:
        attrs[n.TRUNCATED] = export.truncated
    return attrs


def emit_retriever(tracer: Tracer, rag: trace.Span, rag_attrs: Attributes, function: str, at_ns: int) -> None:
    """A RETRIEVER child of the RAG span with the question and the documents: Phoenix shows a span's documents
    only for that kind (a CHAIN span shows its input and output), so this is where the sources show, next to
    the RAG span with the answer. Made of the RAG span's exported texts (capped, scrubbed, redacted);
    nothing without content capture or documents. Zero-length at the call's end: it records what was
    retrieved, not how long retrieving took. ``faithtrace.function`` marks it as faithtrace's own
    (``faithtrace serve`` never reads it as the app's retriever)."""
    docs = {k: v for k, v in rag_attrs.items() if k.startswith(_DOCUMENTS_PREFIX)}
    if not docs:
        return
    attrs: Attributes = {n.OPENINFERENCE_SPAN_KIND: n.OPENINFERENCE_KIND_RETRIEVER, n.FUNCTION: function}
    attrs.update(docs)
    if n.INPUT_VALUE in rag_attrs:
        attrs[n.INPUT_VALUE] = rag_attrs[n.INPUT_VALUE]
    span = tracer.start_span(
        n.RETRIEVER_SPAN, context=trace.set_span_in_context(rag), attributes=attrs, start_time=at_ns
    )
    span.end(end_time=at_ns)


_DOCUMENTS_PREFIX = n.RETRIEVAL_DOCUMENT_CONTENT.split("{", 1)[0]


def remote_attributes(
    captured: Captured, function: str, options: CaptureOptions, scoring: ScoringOptions
) -> Attributes:
    """The RAG span's attributes for ``faithtrace serve``: the texts cut to what scoring reads (not to the
    display cap), marked for remote scoring. Secret scrubbing and ``redact`` still apply (the scorer sees
    what leaves the process); with ``content=False`` no text leaves, and the scorer counts the span as
    incomplete."""
    limit = min(1_000_000, max(scoring.max_answer_chars, scoring.max_context_chars) + 1)
    wide = options.model_copy(update={"max_attribute_chars": limit, "max_documents": _REMOTE_MAX_DOCUMENTS})
    attrs = rag_attributes(captured, function, wide)
    attrs[n.SCORING_REMOTE] = True
    attrs[n.SAMPLED] = True
    return attrs


# The SDK keeps 128 attributes per span by default; documents are bounded in characters by the scoring limits.
_REMOTE_MAX_DOCUMENTS = 100


def _provider(model: str) -> str | None:
    return model.split("/", 1)[0] if "/" in model else None


def _call_span(tracer: Tracer, parent: trace.Span, call: LLMCall, options: CaptureOptions) -> None:
    attrs: Attributes = {
        n.GEN_AI_OPERATION_NAME: n.JUDGE_OPERATION,
        n.GEN_AI_REQUEST_MODEL: call.model,
        n.STEP_NAME: call.step,
        n.JUDGE_ATTEMPT: call.attempt,
    }
    provider = _provider(call.model)
    if provider:
        attrs[n.GEN_AI_PROVIDER_NAME] = provider
    if call.input_tokens is not None:
        attrs[n.GEN_AI_USAGE_INPUT_TOKENS] = call.input_tokens
    if call.output_tokens is not None:
        attrs[n.GEN_AI_USAGE_OUTPUT_TOKENS] = call.output_tokens
    if call.response_id:
        attrs[n.GEN_AI_RESPONSE_ID] = call.response_id
    if call.finish_reason:
        attrs[n.GEN_AI_RESPONSE_FINISH_REASONS] = [call.finish_reason]
    if call.cost_usd is not None:
        attrs[n.STEP_COST_USD] = call.cost_usd
    if call.error_type:
        attrs[n.ERROR_TYPE] = call.error_type
    if options.content:
        export = _Exporter(options)
        attrs.update(message_attributes(call, export))
        if export.truncated:
            attrs[n.TRUNCATED] = sorted(set(export.truncated))
    span = tracer.start_span(
        f"{n.JUDGE_OPERATION} {call.model}",
        context=trace.set_span_in_context(parent),
        kind=SpanKind.CLIENT,
        attributes=attrs,
        start_time=call.start_time_ns,
    )
    if call.error_type:
        span.set_status(Status(StatusCode.ERROR, call.error_type))
    span.end(end_time=call.start_time_ns + int(call.duration_s * 1e9))


def evaluation_attributes(job: Job, result: FaithfulnessResult, started_ns: int) -> Attributes:
    attrs: Attributes = {
        n.GEN_AI_OPERATION_NAME: n.EVALUATION_OPERATION,
        n.GEN_AI_EVALUATION_NAME: n.EVALUATION_NAME_FAITHFULNESS,
        n.OPENINFERENCE_SPAN_KIND: n.OPENINFERENCE_KIND_EVALUATOR,
        n.FUNCTION: job.stats.name,
        n.EVAL_OUTCOME: result.outcome.value,
        n.EVAL_THRESHOLD: result.threshold,
        n.EVAL_IDK_POLICY: result.idk_policy.value,
        n.EVAL_CLAIMS_TOTAL: result.counts.total,
        n.EVAL_CLAIMS_YES: result.counts.yes,
        n.EVAL_CLAIMS_NO: result.counts.no,
        n.EVAL_CLAIMS_IDK: result.counts.idk,
        n.EVAL_CLAIMS_UNJUDGED: len(result.unjudged),
        n.EVAL_QUEUE_WAIT: max(0.0, (started_ns - job.enqueued_ns) / 1e9),
        n.EVAL_INPUT_TOKENS: result.input_tokens,
        n.EVAL_OUTPUT_TOKENS: result.output_tokens,
        n.EVAL_LLM_CALLS: result.llm_calls,
    }
    if result.score is not None:
        attrs[n.GEN_AI_EVALUATION_SCORE_VALUE] = float(result.score)
    if result.faithfulness is not None:
        attrs[n.EVAL_FAITHFULNESS] = float(result.faithfulness)
    if result.label is not None:
        attrs[n.GEN_AI_EVALUATION_SCORE_LABEL] = result.label
    cost = result.cost_usd
    if cost is not None:
        attrs[n.EVAL_COST_USD] = cost
    if result.judge_model:
        attrs[n.JUDGE_MODEL] = result.judge_model
        attrs[n.GEN_AI_REQUEST_MODEL] = result.judge_model
    if result.error is not None:
        attrs[n.ERROR_TYPE] = result.error.type
    detector = result.detector
    if detector is not None:
        attrs[n.EVAL_DETECTOR_MODEL] = detector.model
        attrs[n.EVAL_DETECTOR_WINDOWS] = detector.windows
        attrs[n.EVAL_DETECTOR_SPANS] = len(detector.spans)
        if detector.spans:
            attrs[n.EVAL_DETECTOR_MAX_P] = max(s.p for s in detector.spans)
        if detector.error:
            attrs[n.EVAL_DETECTOR_ERROR] = detector.error
    return attrs


def _detector_attributes(claim: ClaimVerdict, options: CaptureOptions, export: _Exporter) -> Attributes:
    """A claim event's detector attributes: its verdict and its flagged spans as parallel arrays."""
    if claim.detector_verdict is None:
        return {}
    attrs: Attributes = {
        n.CLAIM_DETECTOR_VERDICT: claim.detector_verdict,
        n.CLAIM_DETECTOR_DISAGREEMENT: claim.detector_disagreement,
    }
    found = claim.detector_spans[:_SPANS_PER_CLAIM]
    if found:
        attrs[n.CLAIM_DETECTOR_SPAN_P] = [s.p for s in found]
        attrs[n.CLAIM_DETECTOR_SPAN_START] = [s.start for s in found]
        attrs[n.CLAIM_DETECTOR_SPAN_END] = [s.end for s in found]
        if options.content:
            attrs[n.CLAIM_DETECTOR_SPANS] = [export(n.CLAIM_DETECTOR_SPANS, s.text) for s in found]
    return attrs


def evaluation_output(result: FaithfulnessResult, options: CaptureOptions, export: _Exporter) -> str:
    """``output.value``: score, label and claims with verdicts as JSON, kept valid under the size cap."""
    doc: dict[str, Any] = {
        "score": result.score,
        "label": result.label,
        "outcome": result.outcome.value,
        "threshold": result.threshold,
    }
    if result.reason and options.content:
        doc["reason"] = export(n.OUTPUT_VALUE, result.reason, readable=True)
    if result.error is not None:
        doc["error"] = result.error.type
    if result.unjudged:
        doc["claims_unjudged"] = len(result.unjudged)  # not in the score: judge token budget or max_claims
    claims: list[dict[str, Any]] = []
    for claim in result.claims[: options.max_claim_events]:
        # Who decided, and any judge/check disagreement, readable in UIs that show only output.value.
        item: dict[str, Any] = {
            "verdict": claim.verdict,
            "status": claim.status,
            "decided_by": claim.decided_by,
        }
        if claim.disagreement:
            item.update(judge_verdict=claim.judge_verdict, check_verdict=claim.check_verdict)
        if claim.p_supported is not None:
            item["p_supported"] = claim.p_supported
        if claim.detector_verdict is not None:
            item["detector_verdict"] = claim.detector_verdict
            item["detector_disagreement"] = claim.detector_disagreement
            found = claim.detector_spans[:_SPANS_PER_CLAIM]
            item["detector_spans"] = [
                {"p": s.p, "start": s.start, "end": s.end}
                | ({"text": export(n.OUTPUT_VALUE, s.text)} if options.content else {})
                for s in found
            ]
        if options.content:
            item["claim"] = export(n.OUTPUT_VALUE, claim.text)
            if claim.reason:
                item["reason"] = export(n.OUTPUT_VALUE, claim.reason, readable=True)
        claims.append(item)
    doc["claims"] = claims

    def dump() -> str:
        if len(result.claims) > len(claims):
            doc["claims_omitted"] = len(result.claims) - len(claims)
        return json.dumps(doc, ensure_ascii=False)

    text = dump()
    # Cutting the JSON would make it unreadable: drop whole claims from the end instead, and say how many.
    while len(text) > options.max_attribute_chars and claims:
        claims.pop()
        text = dump()
    return text


def _placement(job: Job, placement: str) -> tuple[otel_context.Context, Attributes]:
    if placement == "linked":
        # A trace of its own (an empty context: no ambient parent), found from the RAG span through the link
        # and through these ids, which Jaeger's tag search can match.
        rag = job.span_context
        ids = {n.EVAL_RAG_TRACE_ID: f"{rag.trace_id:032x}", n.EVAL_RAG_SPAN_ID: f"{rag.span_id:016x}"}
        return otel_context.Context(), ids
    return trace.set_span_in_context(NonRecordingSpan(job.span_context)), {}


def emit_evaluation(
    tracer: Tracer,
    job: Job,
    result: FaithfulnessResult,
    started_ns: int,
    options: CaptureOptions,
    placement: str = "child",
) -> trace.SpanContext:
    """The evaluation span of ``result``, with its events and judge-call child spans (worker thread).

    Returns the evaluation span's context (for the annotation that points back to it).
    """
    export = _Exporter(options)
    first_call = min((c.start_time_ns for c in result.calls), default=started_ns)
    attributes = evaluation_attributes(job, result, started_ns)
    parent, extra = _placement(job, placement)
    attributes.update(extra)
    if options.content:
        attributes[n.INPUT_VALUE] = export(n.INPUT_VALUE, job.answer)
    attributes[n.OUTPUT_VALUE] = evaluation_output(result, options, export)
    attributes[n.OUTPUT_MIME_TYPE] = n.MIME_JSON
    span = tracer.start_span(
        n.EVALUATION_SPAN,
        context=parent,
        kind=SpanKind.INTERNAL,
        links=[Link(job.span_context)],
        attributes=attributes,
        start_time=min(started_ns, first_call),
    )
    for call in result.calls:
        _call_span(tracer, span, call, options)

    event: Attributes = {n.GEN_AI_EVALUATION_NAME: n.EVALUATION_NAME_FAITHFULNESS}
    if result.score is not None:
        event[n.GEN_AI_EVALUATION_SCORE_VALUE] = float(result.score)
    if result.label is not None:
        event[n.GEN_AI_EVALUATION_SCORE_LABEL] = result.label
    if result.reason and options.content:
        event[n.GEN_AI_EVALUATION_EXPLANATION] = export(
            n.GEN_AI_EVALUATION_EXPLANATION, result.reason, readable=True
        )
    if result.error is not None:
        event[n.ERROR_TYPE] = result.error.type
    span.add_event(n.GEN_AI_EVALUATION_RESULT_EVENT, event)

    shown = result.claims[: options.max_claim_events]
    for index, claim in enumerate(shown):
        attrs: Attributes = {
            n.CLAIM_INDEX: index,
            n.CLAIM_VERDICT: claim.verdict,
            n.CLAIM_STATUS: claim.status,
            n.CLAIM_DECIDED_BY: claim.decided_by,
            n.CLAIM_DISAGREEMENT: claim.disagreement,
        }
        if claim.judge_verdict is not None:
            attrs[n.CLAIM_JUDGE_VERDICT] = claim.judge_verdict
        if claim.check_verdict is not None:
            attrs[n.CLAIM_CHECK_VERDICT] = claim.check_verdict
        if claim.p_supported is not None:
            attrs[n.CLAIM_P_SUPPORTED] = claim.p_supported
        if options.content:
            attrs[n.CLAIM_TEXT] = export(n.CLAIM_TEXT, claim.text)
            if claim.reason:
                attrs[n.CLAIM_REASON] = export(n.CLAIM_REASON, claim.reason, readable=True)
        attrs.update(_detector_attributes(claim, options, export))
        span.add_event(n.CLAIM_EVENT, attrs)
    if len(result.claims) > len(shown):
        span.set_attribute(n.EVAL_CLAIM_EVENTS_DROPPED, len(result.claims) - len(shown))

    for step in result.steps:
        attrs = {
            n.STEP_NAME: step.step,
            n.STEP_LLM_CALLS: step.llm_calls,
            n.GEN_AI_USAGE_INPUT_TOKENS: step.input_tokens,
            n.GEN_AI_USAGE_OUTPUT_TOKENS: step.output_tokens,
            n.STEP_DURATION: step.duration_s,
            n.STEP_CACHED: step.cached,
        }
        if step.model:
            attrs[n.GEN_AI_REQUEST_MODEL] = step.model
        if step.cost_usd is not None:
            attrs[n.STEP_COST_USD] = step.cost_usd
        span.add_event(n.STEP_EVENT, attrs)

    if export.truncated:
        span.set_attribute(n.TRUNCATED, sorted(set(export.truncated)))
    if result.error is not None:
        message, _ = export_text(result.error.message, 500, options.scrub_secrets, None)
        span.set_status(Status(StatusCode.ERROR, f"{result.error.type}: {message}"))
    span.end()
    return span.get_span_context()
