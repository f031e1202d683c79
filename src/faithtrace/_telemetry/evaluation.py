"""What an evaluation adds to a trace, and where it goes (``placement``).

* ``rag_span`` (the default for in-process scoring): on the RAG span itself, which the runtime held open for
  it and then ends at the call's own end time (``record_on_rag_span``). The span keeps what is the app's: its
  ``input.value`` / ``output.value`` (query and answer), OpenInference kind and status. The evaluation adds
  attributes (score, label, outcome, claim counts, tokens, cost, the judge's model under
  ``faithtrace.judge.model``) and events; never ``error.type``, an error status or ``gen_ai.request.model``,
  which backends would read as the app's call failing or as an LLM call of the app's. The judge's request
  spans go to a trace of their own, linked to the RAG span (``emit_judge_trace``).
* ``child``: an ``evaluate faithfulness`` span, the RAG span's child in the request's trace, with a ``chat
  {model}`` CLIENT child per judge request. The request's trace then lasts until scoring ends.
* ``linked``: the same span in a trace of its own, linked to the RAG span. It is also where an evaluation
  goes when its RAG span could not be held (scored from OpenInference spans, or by ``faithtrace serve``) or
  was exported at its hold deadline.

The evaluation span carries OpenInference ``input.value`` (the answer) and ``output.value`` (JSON: score,
label, claims with verdicts) for UIs that show those. Events carry the time each thing happened: the
``gen_ai.evaluation.result`` event when the result was known, each step's event when that step finished, the
claims' events when the verdicts step finished. On a held RAG span those times lie after the span's recorded
end (its timing is the call's; trace durations are computed from span times, never event times). Durations
are seconds rounded to the millisecond.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, NonRecordingSpan, SpanKind, Status, StatusCode, Tracer

from faithtrace._common.secrets import export_text
from faithtrace._telemetry import host_spans
from faithtrace._telemetry import names as n
from faithtrace._telemetry.messages import message_attributes
from faithtrace._telemetry.spans import Attributes, Exporter
from faithtrace.judge import LLMCall
from faithtrace.scoring.models import ClaimVerdict, FaithfulnessResult

if TYPE_CHECKING:
    from faithtrace._config.settings import CaptureOptions
    from faithtrace._telemetry.records import Job

# Flagged spans recorded per claim: a claim holding more is rare, and its first spans already say why.
_SPANS_PER_CLAIM = 8
_ERROR_MESSAGE_CHARS = 500


def seconds(value: float) -> float:
    """A duration as trace attributes show it: seconds, to the millisecond."""
    return round(max(0.0, value), 3)


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
        export = Exporter(options)
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


def _result_attributes(job: Job, result: FaithfulnessResult, started_ns: int, placement: str) -> Attributes:
    """What the result says, for the RAG span and the evaluation span alike."""
    attrs: Attributes = {
        n.GEN_AI_EVALUATION_NAME: n.EVALUATION_NAME_FAITHFULNESS,
        n.EVAL_PLACEMENT: placement,
        n.EVAL_OUTCOME: result.outcome.value,
        n.EVAL_THRESHOLD: result.threshold,
        n.EVAL_IDK_POLICY: result.idk_policy.value,
        n.EVAL_CLAIMS_TOTAL: result.counts.total,
        n.EVAL_CLAIMS_YES: result.counts.yes,
        n.EVAL_CLAIMS_NO: result.counts.no,
        n.EVAL_CLAIMS_IDK: result.counts.idk,
        n.EVAL_CLAIMS_UNJUDGED: len(result.unjudged),
        n.EVAL_QUEUE_WAIT: seconds((started_ns - job.enqueued_ns) / 1e9),
        n.EVAL_DURATION: seconds(result.duration_s),
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


def evaluation_attributes(
    job: Job, result: FaithfulnessResult, started_ns: int, placement: str = n.PLACEMENT_CHILD
) -> Attributes:
    """The ``evaluate faithfulness`` span's attributes: the result's, plus what makes it an evaluator span."""
    attrs: Attributes = {
        n.GEN_AI_OPERATION_NAME: n.EVALUATION_OPERATION,
        n.OPENINFERENCE_SPAN_KIND: n.OPENINFERENCE_KIND_EVALUATOR,
        n.FUNCTION: job.stats.name,
    }
    attrs.update(_result_attributes(job, result, started_ns, placement))
    if result.judge_model:
        attrs[n.GEN_AI_REQUEST_MODEL] = result.judge_model
    if result.error is not None:
        attrs[n.ERROR_TYPE] = result.error.type
    return attrs


def _detector_attributes(claim: ClaimVerdict, options: CaptureOptions, export: Exporter) -> Attributes:
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


def evaluation_output(result: FaithfulnessResult, options: CaptureOptions, export: Exporter) -> str:
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


def _add_events(
    span: trace.Span, result: FaithfulnessResult, options: CaptureOptions, export: Exporter, finished_ns: int
) -> None:
    """The result event, one event per claim (capped, the rest counted) and one per pipeline step."""
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
    span.add_event(n.GEN_AI_EVALUATION_RESULT_EVENT, event, timestamp=finished_ns)

    decided_ns = _step_end(result, "verdicts") or finished_ns
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
        span.add_event(n.claim_event(index, claim.status), attrs, timestamp=decided_ns)
    if len(result.claims) > len(shown):
        span.set_attribute(n.EVAL_CLAIM_EVENTS_DROPPED, len(result.claims) - len(shown))

    for step in result.steps:
        attrs = {
            n.STEP_NAME: step.step,
            n.STEP_LLM_CALLS: step.llm_calls,
            n.STEP_INPUT_TOKENS: step.input_tokens,
            n.STEP_OUTPUT_TOKENS: step.output_tokens,
            n.STEP_DURATION: seconds(step.duration_s),
            n.STEP_CACHED: step.cached,
        }
        if step.model:
            attrs[n.STEP_MODEL] = step.model
        if step.cost_usd is not None:
            attrs[n.STEP_COST_USD] = step.cost_usd
        span.add_event(n.step_event(step.step), attrs, timestamp=step.ended_ns or finished_ns)


def _step_end(result: FaithfulnessResult, name: str) -> int | None:
    return next((s.ended_ns for s in result.steps if s.step == name and s.ended_ns), None)


def _truncated(span: trace.Span, keys: Sequence[str]) -> None:
    """Add ``keys`` to the span's list of attributes cut to the size cap (the RAG span may have one)."""
    if not keys:
        return
    readable = span.wrapped if isinstance(span, host_spans.GuardedSpan) else span
    try:
        before = (getattr(readable, "attributes", None) or {}).get(n.TRUNCATED) or ()
    except Exception:  # a span of the app's provider that cannot be read: its own list is left to it
        before = ()
    span.set_attribute(n.TRUNCATED, sorted(set(before) | set(keys)))


def record_on_rag_span(
    span: trace.Span,
    job: Job,
    result: FaithfulnessResult,
    started_ns: int,
    options: CaptureOptions,
    finished_ns: int | None = None,
) -> None:
    """Put the evaluation on the RAG span held open for it (placement ``rag_span``); the caller ends it.

    A failed evaluation says so in ``faithtrace.evaluation.outcome`` and ``faithtrace.evaluation.error.*``:
    the span's status and ``error.type`` stay the app's call's.
    """
    export = Exporter(options)
    attrs = _result_attributes(job, result, started_ns, n.PLACEMENT_RAG_SPAN)
    if result.error is not None:
        attrs[n.EVAL_ERROR_TYPE] = result.error.type
        attrs[n.EVAL_ERROR_MESSAGE], _ = export_text(
            result.error.message, _ERROR_MESSAGE_CHARS, options.scrub_secrets, options.redact
        )
    span.set_attributes(attrs)
    _add_events(span, result, options, export, finished_ns or time.time_ns())
    _truncated(span, export.truncated)


def emit_judge_trace(
    tracer: Tracer,
    job: Job,
    result: FaithfulnessResult,
    started_ns: int,
    options: CaptureOptions,
) -> trace.SpanContext | None:
    """The judge's request spans of an evaluation recorded on its RAG span, in a trace of their own: under
    one ``evaluate faithfulness`` span (the result's attributes, the answer in and the verdicts out; the
    events are on the RAG span) linked to the RAG span. None when the evaluation made no judge request."""
    if not result.calls:
        return None
    return _evaluation_span(tracer, job, result, started_ns, options, n.PLACEMENT_RAG_SPAN, None)


def emit_evaluation(
    tracer: Tracer,
    job: Job,
    result: FaithfulnessResult,
    started_ns: int,
    options: CaptureOptions,
    placement: str = n.PLACEMENT_CHILD,
    finished_ns: int | None = None,
) -> trace.SpanContext:
    """The evaluation span of ``result`` (placement ``child`` or ``linked``), with its events and one judge
    call span per request. Returns its context (the annotation points back to it)."""
    events_at = finished_ns or time.time_ns()
    return _evaluation_span(tracer, job, result, started_ns, options, placement, events_at)


def _evaluation_span(
    tracer: Tracer,
    job: Job,
    result: FaithfulnessResult,
    started_ns: int,
    options: CaptureOptions,
    placement: str,
    events_at: int | None,
) -> trace.SpanContext:
    export = Exporter(options)
    first_call = min((c.start_time_ns for c in result.calls), default=started_ns)
    attributes = evaluation_attributes(job, result, started_ns, placement)
    if placement == n.PLACEMENT_CHILD:
        parent = trace.set_span_in_context(NonRecordingSpan(job.span_context))
    else:
        # A trace of its own (an empty context: no ambient parent), found from the RAG span through the link
        # and through these ids, which Jaeger's tag search can match.
        parent = otel_context.Context()
        rag = job.span_context
        attributes[n.EVAL_RAG_TRACE_ID] = f"{rag.trace_id:032x}"
        attributes[n.EVAL_RAG_SPAN_ID] = f"{rag.span_id:016x}"
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
    if events_at is not None:
        _add_events(span, result, options, export, events_at)
    _truncated(span, export.truncated)
    if result.error is not None:
        message, _ = export_text(result.error.message, _ERROR_MESSAGE_CHARS, options.scrub_secrets, None)
        span.set_status(Status(StatusCode.ERROR, f"{result.error.type}: {message}"))
    span.end()
    return span.get_span_context()
