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
# A custom gen_ai.operation.name value: the registry has none for evaluations.
EVALUATION_OPERATION: Final = "evaluate"
JUDGE_OPERATION: Final = "chat"  # judge call spans are named "chat {model}", kind CLIENT

# --- GenAI semantic-convention attributes -
GEN_AI_OPERATION_NAME: Final = "gen_ai.operation.name"
GEN_AI_PROVIDER_NAME: Final = "gen_ai.provider.name"
GEN_AI_REQUEST_MODEL: Final = "gen_ai.request.model"
GEN_AI_RESPONSE_MODEL: Final = "gen_ai.response.model"
GEN_AI_RESPONSE_ID: Final = "gen_ai.response.id"
GEN_AI_RESPONSE_FINISH_REASONS: Final = "gen_ai.response.finish_reasons"
GEN_AI_USAGE_INPUT_TOKENS: Final = "gen_ai.usage.input_tokens"
GEN_AI_USAGE_OUTPUT_TOKENS: Final = "gen_ai.usage.output_tokens"
GEN_AI_TOKEN_TYPE: Final = "gen_ai.token.type"  # "input" | "output" on gen_ai.client.token.usage
GEN_AI_RETRIEVAL_QUERY_TEXT: Final = "gen_ai.retrieval.query.text"
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
RETRIEVAL_DOCUMENT_CONTENT: Final = "retrieval.documents.{index}.document.content"

# --- faithtrace's own attributes ----------------------------------------------------------------------------
FUNCTION: Final = "faithtrace.function"  # the decorated function's name, or name=
CAPTURE_ERROR: Final = "faithtrace.capture.error"  # capture failed; the host call still succeeded
CONTEXTS_COUNT: Final = "faithtrace.contexts.count"
TRUNCATED: Final = "faithtrace.truncated"  # names of attributes cut to the size cap
SAMPLED: Final = "faithtrace.sampled"  # whether this call was queued for scoring
# Why a call was not scored: ratio, parent, rate_limit, budget, queue_full.
SAMPLING_REASON: Final = "faithtrace.sampling.reason"

EVAL_OUTCOME: Final = "faithtrace.evaluation.outcome"
EVAL_FAITHFULNESS: Final = "faithtrace.evaluation.faithfulness"
EVAL_THRESHOLD: Final = "faithtrace.evaluation.threshold"
EVAL_IDK_POLICY: Final = "faithtrace.evaluation.idk_policy"
EVAL_CLAIMS_TOTAL: Final = "faithtrace.evaluation.claims.total"
EVAL_CLAIMS_YES: Final = "faithtrace.evaluation.claims.yes"
EVAL_CLAIMS_NO: Final = "faithtrace.evaluation.claims.no"
EVAL_CLAIMS_IDK: Final = "faithtrace.evaluation.claims.idk"
EVAL_CLAIM_EVENTS_DROPPED: Final = "faithtrace.evaluation.claim_events.dropped"
EVAL_QUEUE_WAIT: Final = "faithtrace.evaluation.queue_wait_s"
EVAL_INPUT_TOKENS: Final = "faithtrace.evaluation.input_tokens"
EVAL_OUTPUT_TOKENS: Final = "faithtrace.evaluation.output_tokens"
EVAL_COST_USD: Final = "faithtrace.evaluation.cost_usd"
EVAL_LLM_CALLS: Final = "faithtrace.evaluation.llm_calls"
JUDGE_MODEL: Final = "faithtrace.judge.model"

CLAIM_EVENT: Final = "faithtrace.claim"
CLAIM_INDEX: Final = "faithtrace.claim.index"
CLAIM_TEXT: Final = "faithtrace.claim.text"
CLAIM_VERDICT: Final = "faithtrace.claim.verdict"
CLAIM_REASON: Final = "faithtrace.claim.reason"
# Who decided the verdict (judge | proof | check), what the judge and the lexical check each said, whether
# they disagree, and the judge's P(supported) where it returns log-probabilities.
CLAIM_DECIDED_BY: Final = "faithtrace.claim.decided_by"
CLAIM_JUDGE_VERDICT: Final = "faithtrace.claim.judge_verdict"
CLAIM_CHECK_VERDICT: Final = "faithtrace.claim.check_verdict"
CLAIM_DISAGREEMENT: Final = "faithtrace.claim.disagreement"
CLAIM_P_SUPPORTED: Final = "faithtrace.claim.p_supported"

STEP_EVENT: Final = "faithtrace.step"
STEP_NAME: Final = "faithtrace.step.name"
STEP_LLM_CALLS: Final = "faithtrace.step.llm_calls"
STEP_COST_USD: Final = "faithtrace.step.cost_usd"
STEP_DURATION: Final = "faithtrace.step.duration_s"
STEP_CACHED: Final = "faithtrace.step.cached"
JUDGE_ATTEMPT: Final = "faithtrace.judge.attempt"  # on a judge call span: 1, then retries

OPENINFERENCE_KIND_CHAIN: Final = "CHAIN"
OPENINFERENCE_KIND_EVALUATOR: Final = "EVALUATOR"

# --- metrics (OTel names; Prometheus replaces dots with underscores and adds unit/type suffixes) -
METRIC_SCORE: Final = "faithtrace.evaluation.score"  # histogram, unit 1
METRIC_EVALUATIONS: Final = "faithtrace.evaluations"  # counter by outcome (incl. dropped, sampled_out)
METRIC_CALLS: Final = "faithtrace.calls"  # decorated calls that completed, scored or not
METRIC_CLAIMS: Final = "faithtrace.evaluation.claims"  # histogram: claims per answer
METRIC_VERDICTS: Final = "faithtrace.evaluation.verdicts"  # counter by verdict
METRIC_EVAL_DURATION: Final = "faithtrace.evaluation.duration"  # histogram, s, enqueue to result
METRIC_JUDGE_COST: Final = "faithtrace.judge.cost"  # counter, USD
METRIC_QUEUE_DEPTH: Final = "faithtrace.queue.depth"  # gauge
METRIC_TOKEN_USAGE: Final = "gen_ai.client.token.usage"  # histogram, {token}
METRIC_OPERATION_DURATION: Final = "gen_ai.client.operation.duration"  # histogram, s
METRIC_INTERNAL_ERRORS: Final = "faithtrace.internal_errors"  # counter: faithtrace bugs caught and swallowed

# Metric attributes: low-cardinality only, never text.
OUTCOME: Final = "faithtrace.outcome"  # scored | no_claims | no_context | error | dropped | sampled_out
VERDICT: Final = "faithtrace.verdict"  # yes | no | idk
OUTCOME_DROPPED: Final = "dropped"
OUTCOME_SAMPLED_OUT: Final = "sampled_out"
OUTCOME_CAPTURE_ERROR: Final = "capture_error"  # a capture spec did not fit the call: nothing to score

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
