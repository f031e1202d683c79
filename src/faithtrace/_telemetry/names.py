"""Every span, event, attribute and metric name faithtrace emits: the one place they are spelled.

GenAI names follow the OpenTelemetry GenAI semantic conventions (the ``gen_ai.evaluation.result`` event
and the client span/metric attributes as released in semantic-conventions v1.38-v1.41 and carried on in
semantic-conventions-genai). They are owned here rather than imported from
``opentelemetry.semconv._incubating`` because those constants are deprecated in place. Names the
conventions do not cover are prefixed ``faithtrace.``. Retrieval inputs also use OpenInference names so
that Phoenix shows them.
"""

from __future__ import annotations

from typing import Final

SEMCONV_VERSION: Final = "1.38.0"
INSTRUMENTATION_SCOPE: Final = "faithtrace"

# --- spans -------------------------------------------------------------------------------------------------
EVALUATION_SPAN: Final = "evaluate faithfulness"  # "{gen_ai.operation.name} {gen_ai.evaluation.name}"
# Where an evaluation goes: on the RAG span itself (held until scored), a child span, or a trace of its own.
PLACEMENT_RAG_SPAN: Final = "rag_span"
PLACEMENT_CHILD: Final = "child"
PLACEMENT_LINKED: Final = "linked"
PLACEMENTS: Final = (PLACEMENT_RAG_SPAN, PLACEMENT_CHILD, PLACEMENT_LINKED)
# faithtrace's own traces (the judge's calls, an evaluation in a trace of its own) are filed under the app's
# service.name (and Phoenix project) with this suffix: the app's latency, cost and error views hold only the
# app's spans.
OWN_TRACES_SUFFIX: Final = "-faithtrace"
# A custom gen_ai.operation.name value: the registry has none for evaluations.
EVALUATION_OPERATION: Final = "evaluate"
JUDGE_OPERATION: Final = "chat"  # judge call spans are named "chat {model}", kind CLIENT
# The RAG span's documents again, on an OpenInference RETRIEVER child: where Phoenix shows documents.
RETRIEVER_SPAN: Final = "retrieved documents"

# --- GenAI semantic-convention attributes -
GEN_AI_OPERATION_NAME: Final = "gen_ai.operation.name"
GEN_AI_PROVIDER_NAME: Final = "gen_ai.provider.name"
GEN_AI_REQUEST_MODEL: Final = "gen_ai.request.model"
GEN_AI_RESPONSE_MODEL: Final = "gen_ai.response.model"
GEN_AI_RESPONSE_ID: Final = "gen_ai.response.id"
GEN_AI_RESPONSE_FINISH_REASONS: Final = "gen_ai.response.finish_reasons"
GEN_AI_USAGE_INPUT_TOKENS: Final = "gen_ai.usage.input_tokens"
GEN_AI_USAGE_OUTPUT_TOKENS: Final = "gen_ai.usage.output_tokens"
GEN_AI_TOKEN_TYPE: Final = "gen_ai.token.type"  # "input" | "output" on the token usage histogram
ERROR_TYPE: Final = "error.type"

GEN_AI_EVALUATION_RESULT_EVENT: Final = "gen_ai.evaluation.result"
GEN_AI_EVALUATION_NAME: Final = "gen_ai.evaluation.name"
GEN_AI_EVALUATION_SCORE_VALUE: Final = "gen_ai.evaluation.score.value"
GEN_AI_EVALUATION_SCORE_LABEL: Final = "gen_ai.evaluation.score.label"
GEN_AI_EVALUATION_EXPLANATION: Final = "gen_ai.evaluation.explanation"
EVALUATION_NAME_FAITHFULNESS: Final = "faithfulness"
LABEL_PASS: Final = "pass"
LABEL_FAIL: Final = "fail"

# --- OpenInference attributes on the RAG span (Phoenix renders these) -
OPENINFERENCE_SPAN_KIND: Final = "openinference.span.kind"
INPUT_VALUE: Final = "input.value"
OUTPUT_VALUE: Final = "output.value"
OUTPUT_MIME_TYPE: Final = "output.mime_type"
MIME_JSON: Final = "application/json"
RETRIEVAL_DOCUMENT_CONTENT: Final = "retrieval.documents.{index}.document.content"
# Judge messages on the "chat {model}" spans: OpenInference's flattened form (Phoenix's LLM view) ...
OPENINFERENCE_KIND_LLM: Final = "LLM"
LLM_MODEL_NAME: Final = "llm.model_name"
LLM_INPUT_MESSAGE_ROLE: Final = "llm.input_messages.{index}.message.role"
LLM_INPUT_MESSAGE_CONTENT: Final = "llm.input_messages.{index}.message.content"
LLM_OUTPUT_MESSAGE_ROLE: Final = "llm.output_messages.{index}.message.role"
LLM_OUTPUT_MESSAGE_CONTENT: Final = "llm.output_messages.{index}.message.content"
# ... and the GenAI semantic conventions' JSON form (semconv >= 1.37: role + parts, finish_reason on output).
GEN_AI_INPUT_MESSAGES: Final = "gen_ai.input.messages"
GEN_AI_OUTPUT_MESSAGES: Final = "gen_ai.output.messages"

# --- faithtrace's own attributes ----------------------------------------------------------------------------
FUNCTION: Final = "faithtrace.function"  # the decorated function's name, or name=
CAPTURE_ERROR: Final = "faithtrace.capture.error"  # capture failed; the host call still succeeded
# Which of the call's texts could not be captured or read: query | contexts | answer.
CAPTURE_FIELD: Final = "faithtrace.capture.field"
CONTEXTS_COUNT: Final = "faithtrace.contexts.count"
TRUNCATED: Final = "faithtrace.truncated"  # names of attributes cut to the size cap
SAMPLED: Final = "faithtrace.sampled"
# On a RAG span recorded with scoring="remote": its texts are for `faithtrace serve` to score.
SCORING_REMOTE: Final = "faithtrace.scoring.remote"
# Why a call was not scored: ratio, parent, rate_limit, budget, queue_full.
SAMPLING_REASON: Final = "faithtrace.sampling.reason"
# The sampler's reasons are faithtrace._runtime.sampling.Reason labels; this one is the worker's.
SAMPLING_REASON_QUEUE_FULL: Final = "queue_full"

EVAL_OUTCOME: Final = "faithtrace.evaluation.outcome"
EVAL_FAITHFULNESS: Final = "faithtrace.evaluation.faithfulness"
EVAL_THRESHOLD: Final = "faithtrace.evaluation.threshold"
EVAL_IDK_POLICY: Final = "faithtrace.evaluation.idk_policy"
EVAL_CLAIMS_TOTAL: Final = "faithtrace.evaluation.claims.total"
EVAL_CLAIMS_YES: Final = "faithtrace.evaluation.claims.yes"
EVAL_CLAIMS_NO: Final = "faithtrace.evaluation.claims.no"
EVAL_CLAIMS_IDK: Final = "faithtrace.evaluation.claims.idk"
EVAL_CLAIMS_UNJUDGED: Final = "faithtrace.evaluation.claims.unjudged"  # not judged, not in the score
EVAL_CLAIM_EVENTS_DROPPED: Final = "faithtrace.evaluation.claim_events.dropped"
EVAL_QUEUE_WAIT: Final = "faithtrace.evaluation.queue_wait_s"
EVAL_DURATION: Final = "faithtrace.evaluation.duration_s"  # the pipeline's own time, queue wait excluded
# Where the evaluation went (rag_span, child, linked), on the RAG span and on an evaluation span.
EVAL_PLACEMENT: Final = "faithtrace.evaluation.placement"
# On a RAG span carrying its evaluation: why the evaluation failed (the span's status and error.type stay
# the app's call's).
EVAL_ERROR_TYPE: Final = "faithtrace.evaluation.error.type"
EVAL_ERROR_MESSAGE: Final = "faithtrace.evaluation.error.message"
EVAL_INPUT_TOKENS: Final = "faithtrace.evaluation.input_tokens"
EVAL_OUTPUT_TOKENS: Final = "faithtrace.evaluation.output_tokens"
EVAL_COST_USD: Final = "faithtrace.evaluation.cost_usd"
EVAL_LLM_CALLS: Final = "faithtrace.evaluation.llm_calls"
JUDGE_MODEL: Final = "faithtrace.judge.model"

# Claim and step events are named per claim and per step ("faithtrace.claim 2: contradicted",
# "faithtrace.step verdicts"): trace UIs show an event's name in its collapsed header, and one name for all
# would read "faithtrace.claim" n times. Match them by these prefixes.
CLAIM_EVENT: Final = "faithtrace.claim"
CLAIM_INDEX: Final = "faithtrace.claim.index"
CLAIM_TEXT: Final = "faithtrace.claim.text"
CLAIM_VERDICT: Final = "faithtrace.claim.verdict"
# What the verdict means: supported | contradicted | not_in_documents | not_confirmed (an unsure "yes").
CLAIM_STATUS: Final = "faithtrace.claim.status"
CLAIM_REASON: Final = "faithtrace.claim.reason"
# Who decided the verdict (judge | proof | check), what the judge and the lexical check each said, whether
# they disagree, and the judge's P(supported) where it returns log-probabilities.
CLAIM_DECIDED_BY: Final = "faithtrace.claim.decided_by"
CLAIM_JUDGE_VERDICT: Final = "faithtrace.claim.judge_verdict"
CLAIM_CHECK_VERDICT: Final = "faithtrace.claim.check_verdict"
CLAIM_DISAGREEMENT: Final = "faithtrace.claim.disagreement"
CLAIM_P_SUPPORTED: Final = "faithtrace.claim.p_supported"
# The trained detector's view of a claim (wherever a detector ran): its verdict, whether it differs from the
# verdict that counts on "supported or not", and the answer spans it flagged inside the claim: their texts
# (with content capture), their highest token probabilities and their character offsets in the answer.
CLAIM_DETECTOR_VERDICT: Final = "faithtrace.claim.detector.verdict"
CLAIM_DETECTOR_DISAGREEMENT: Final = "faithtrace.claim.detector.disagreement"
CLAIM_DETECTOR_SPANS: Final = "faithtrace.claim.detector.spans"
CLAIM_DETECTOR_SPAN_P: Final = "faithtrace.claim.detector.span_p"
CLAIM_DETECTOR_SPAN_START: Final = "faithtrace.claim.detector.span_start"
CLAIM_DETECTOR_SPAN_END: Final = "faithtrace.claim.detector.span_end"
# On the evaluation span: the detector model, how many windows it read, the spans it flagged (claims or
# not) and the highest probability among them; its error when it could not run next to a judge.
EVAL_DETECTOR_MODEL: Final = "faithtrace.evaluation.detector.model"
EVAL_DETECTOR_WINDOWS: Final = "faithtrace.evaluation.detector.windows"
EVAL_DETECTOR_SPANS: Final = "faithtrace.evaluation.detector.spans"
EVAL_DETECTOR_MAX_P: Final = "faithtrace.evaluation.detector.max_p"
EVAL_DETECTOR_ERROR: Final = "faithtrace.evaluation.detector.error"

STEP_EVENT: Final = "faithtrace.step"
STEP_NAME: Final = "faithtrace.step.name"
STEP_LLM_CALLS: Final = "faithtrace.step.llm_calls"
# The judge's usage per step under faithtrace's names, never gen_ai.usage.* / gen_ai.request.model: on the
# RAG span those would read as the app's own LLM usage to any backend that sums them.
STEP_MODEL: Final = "faithtrace.step.model"
STEP_INPUT_TOKENS: Final = "faithtrace.step.input_tokens"
STEP_OUTPUT_TOKENS: Final = "faithtrace.step.output_tokens"
STEP_COST_USD: Final = "faithtrace.step.cost_usd"
STEP_DURATION: Final = "faithtrace.step.duration_s"
STEP_CACHED: Final = "faithtrace.step.cached"
JUDGE_ATTEMPT: Final = "faithtrace.judge.attempt"  # on a judge call span: 1, then retries
# On an evaluation span in its own trace (placement="linked", the judge's trace, an evaluation after the hold
# deadline): the RAG span it scores, as hex ids.
EVAL_RAG_TRACE_ID: Final = "faithtrace.evaluation.rag.trace_id"
EVAL_RAG_SPAN_ID: Final = "faithtrace.evaluation.rag.span_id"

# --- Phoenix annotations (REST, not OTel): one per scored RAG span, shown in Phoenix's list columns -
ANNOTATION_NAME: Final = "faithfulness"
ANNOTATOR_KIND: Final = "LLM"
# The resource attribute Phoenix files spans by, and its project for spans without one.
OPENINFERENCE_PROJECT_NAME: Final = "openinference.project.name"
PHOENIX_DEFAULT_PROJECT: Final = "default"

OPENINFERENCE_KIND_CHAIN: Final = "CHAIN"
OPENINFERENCE_KIND_EVALUATOR: Final = "EVALUATOR"
OPENINFERENCE_KIND_RETRIEVER: Final = "RETRIEVER"
INPUT_MIME_TYPE: Final = "input.mime_type"

# --- metrics (OTel names; Prometheus replaces dots with underscores and adds unit/type suffixes) -
METRIC_SCORE: Final = "faithtrace.evaluation.score"  # histogram, unit 1
METRIC_EVALUATIONS: Final = "faithtrace.evaluations"  # counter by outcome (incl. dropped, sampled_out)
METRIC_CALLS: Final = "faithtrace.calls"  # decorated calls that completed, scored or not
METRIC_CLAIMS: Final = "faithtrace.evaluation.claims"  # histogram: claims per answer
METRIC_VERDICTS: Final = "faithtrace.evaluation.verdicts"  # counter by verdict
METRIC_EVAL_DURATION: Final = "faithtrace.evaluation.duration"  # histogram, s, enqueue to result
METRIC_JUDGE_COST: Final = "faithtrace.judge.cost"  # counter, USD
METRIC_QUEUE_DEPTH: Final = "faithtrace.queue.depth"  # gauge
# RAG spans held for their evaluation (placement rag_span): a gauge of those held now, and a counter of their
# releases by faithtrace.hold.reason: evaluated (exported with it), deadline (exported without it at the hold
# deadline; the evaluation follows in a linked trace), shutdown (exported without it by shutdown()).
METRIC_HELD_SPANS: Final = "faithtrace.hold.spans"
METRIC_HOLD_RELEASES: Final = "faithtrace.hold.releases"
HOLD_REASON: Final = "faithtrace.hold.reason"
HOLD_EVALUATED: Final = "evaluated"
HOLD_DEADLINE: Final = "deadline"
HOLD_SHUTDOWN: Final = "shutdown"
HOLD_REASONS: Final = (HOLD_EVALUATED, HOLD_DEADLINE, HOLD_SHUTDOWN)
# The judge's own usage: the shape of the GenAI client metrics (gen_ai.client.token.usage and
# gen_ai.client.operation.duration, same attributes and units) under our own names, so that a host's GenAI
# instrumentation never mixes the judge's requests into the app's LLM usage.
METRIC_TOKEN_USAGE: Final = "faithtrace.judge.token.usage"  # histogram, {token}
METRIC_OPERATION_DURATION: Final = "faithtrace.judge.operation.duration"  # histogram, s
METRIC_INTERNAL_ERRORS: Final = "faithtrace.internal_errors"  # counter: faithtrace bugs caught and swallowed
# Counter: errors raised by the app's own code that faithtrace called (its span processors, its redact hook),
# contained, by faithtrace.host_error.where.
METRIC_HOST_ERRORS: Final = "faithtrace.host_errors"
# span_processor.on_start | span_processor.on_ending | span_processor.on_end | span.<method> | redact
HOST_ERROR_WHERE: Final = "faithtrace.host_error.where"
# Counter: exporters faithtrace could not set up (a taken Prometheus port), by faithtrace.exporter.
METRIC_EXPORTER_ERRORS: Final = "faithtrace.exporter.setup_errors"
EXPORTER: Final = "faithtrace.exporter"  # prometheus
METRIC_ANNOTATIONS: Final = "faithtrace.annotations"  # counter by status: sent | failed | dropped

# Metric attributes: low-cardinality only, never text.
# scored | no_claims | no_context | input_error | error | dropped | sampled_out | capture_error |
# processor_error | call_failed | internal_error
OUTCOME: Final = "faithtrace.outcome"
VERDICT: Final = "faithtrace.verdict"  # yes | no | idk
# sent | failed | dropped (annotations); config_failed (the annotation config could not be registered)
ANNOTATION_STATUS: Final = "faithtrace.annotation.status"
OUTCOME_DROPPED: Final = "dropped"
OUTCOME_SAMPLED_OUT: Final = "sampled_out"
OUTCOME_CAPTURE_ERROR: Final = "capture_error"  # a capture spec did not fit the call: nothing to score
# Whose fault a call that was not scored is, for the outcomes below: the host's value (a query, a context or
# an answer) raised when read as text; the app's tracing (a span processor raised when the call's span
# started); the host's function raised (its exception is on the span); faithtrace's own bug.
OUTCOME_INPUT_ERROR: Final = "input_error"
OUTCOME_PROCESSOR_ERROR: Final = "processor_error"
OUTCOME_CALL_FAILED: Final = "call_failed"
OUTCOME_INTERNAL_ERROR: Final = "internal_error"

# The host's exception on its failed call's span: OpenTelemetry's exception event and its attributes.
EXCEPTION_EVENT: Final = "exception"
EXCEPTION_TYPE: Final = "exception.type"
EXCEPTION_MESSAGE: Final = "exception.message"
EXCEPTION_STACKTRACE: Final = "exception.stacktrace"
EXCEPTION_ESCAPED: Final = "exception.escaped"

SCORE_BUCKETS: Final = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1.0)
CLAIM_BUCKETS: Final = (0, 1, 2, 3, 4, 5, 6, 8, 10, 15, 20, 30, 50)
DURATION_BUCKETS: Final = (
    0.01,
    0.02,
    0.04,
    0.08,
    0.16,
    0.32,
    0.64,
    1.28,
    2.56,
    5.12,
    10.24,
    20.48,
    40.96,
    81.92,
)
TOKEN_BUCKETS: Final = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216)


def claim_event(index: int, status: str) -> str:
    """The event name of claim ``index`` (from 0): its number from 1 and what its verdict means."""
    return f"{CLAIM_EVENT} {index + 1}: {status}"


def step_event(step: str) -> str:
    return f"{STEP_EVENT} {step}"


def is_claim_event(name: str) -> bool:
    return name.startswith(CLAIM_EVENT + " ")


def is_step_event(name: str) -> bool:
    return name.startswith(STEP_EVENT + " ")
