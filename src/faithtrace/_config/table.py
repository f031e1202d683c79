"""Every faithtrace option: name, environment variable(s), type (through the parser), default, bounds, doc.

One entry per option; ``options`` turns the table into pydantic fields, environment reads, docstrings
and the docs' configuration table. Groups: the option model a field belongs to, ``configure`` for the
arguments of ``configure()`` itself, ``otel`` and ``local_judge`` for options read only from the environment,
``serve`` for ``faithtrace serve``'s flags (each also a ``FAITHTRACE_SERVE_*`` variable).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

from faithtrace._config.option import Option, parse_bool, parse_list, parse_lower


def _half_the_cores() -> int:
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    return max(1, cores // 2)


_LOCAL_ONE: Final = "always 1 with the embedded judge, which computes one request at a time"

# fmt: off
OPTIONS_LIST: Final[tuple[Option, ...]] = (
    # --- configure() ----------------------------------------------------------------------------------------
    Option("configure.enabled", "False makes @trace_faithfulness a pass-through.",
        True, ("FAITHTRACE_ENABLED",), parse_bool),
    Option("configure.service_name", "service.name of the providers faithtrace sets up itself.",
        env=("OTEL_SERVICE_NAME",)),
    Option("configure.otlp_endpoint", "When the app set up no providers: export spans and metrics over OTLP "
        "to this base URL (/v1/traces, /v1/metrics appended over HTTP).",
        env=("OTEL_EXPORTER_OTLP_ENDPOINT",)),
    Option("configure.prometheus_port", "Serve /metrics on this port (0: a free one); "
        "configure(prometheus=True) uses it or 9464. Needs faithtrace[prometheus].",
        env=("FAITHTRACE_PROMETHEUS_PORT",), parse=int, ge=0, le=65535, shown_default="off",
        shown_name="`configure(prometheus=True or a port)`"),
    Option("configure.scoring", "in_process scores in the app; remote records the texts on the RAG span "
        "for `faithtrace serve` and scores nothing in the app (configure(scoring=\"remote\")).",
        "in_process", ("FAITHTRACE_SCORING",), parse_lower, choices=("in_process", "remote"),
        shown_name="`configure(scoring=\"remote\")`"),
    Option("configure.prometheus_host", "Address the /metrics endpoint listens on.",
        "127.0.0.1", ("FAITHTRACE_PROMETHEUS_HOST",), shown_name="Prometheus host (environment only)"),
    Option("configure.evaluation_placement", "rag_span: the RAG span is held open until its evaluation is "
        "on it (score, label, claims and steps as its attributes and events; its own start and end times), "
        "then exported, and the judge's calls go to a trace of their own; child: an evaluation span, the RAG "
        "span's child in the request's trace (the trace then lasts until scoring ends); linked: an "
        "evaluation span in a trace of its own, linked to the RAG span. Spans scored where they cannot be "
        "held (score_openinference, faithtrace serve) use linked for rag_span.",
        "rag_span", ("FAITHTRACE_EVALUATION_PLACEMENT",), parse_lower,
        choices=("rag_span", "child", "linked")),
    Option("configure.annotations", "phoenix: write each score as a faithfulness annotation on the RAG span "
        "and its trace through Phoenix's REST API (its list columns, charts and annotation filters read "
        "only those); no OTLP metrics then go to the OTLP endpoint (Phoenix rejects them) unless "
        "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT names one.",
        "none", ("FAITHTRACE_ANNOTATIONS",), parse_lower, choices=("none", "phoenix"), shown_default="off"),
    Option("configure.phoenix_endpoint", "Phoenix's base URL for annotations; unset: an OTLP/HTTP "
        "otlp_endpoint (Phoenix serves OTLP and its REST API on one port), else http://127.0.0.1:6006. "
        "PHOENIX_API_KEY is sent as a bearer token.",
        env=("FAITHTRACE_PHOENIX_ENDPOINT", "PHOENIX_COLLECTOR_ENDPOINT"),
        shown_default="the OTLP endpoint or http://127.0.0.1:6006"),
    Option("configure.phoenix_api_key", "Sent to Phoenix as a bearer token with the annotations.",
        env=("PHOENIX_API_KEY",), shown_name="Phoenix API key (environment only)"),
    # --- OTel exporters faithtrace sets up when the app has none ------------------------------------------
    Option("otel.traces_endpoint", "Full URL for spans, used as it is (wins over the base endpoint).",
        env=("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",)),
    Option("otel.metrics_endpoint", "Full URL for metrics, used as it is (wins over the base endpoint).",
        env=("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",)),
    Option("otel.metrics_exporter", "none: faithtrace pushes no OTLP metrics.",
        "otlp", ("OTEL_METRICS_EXPORTER",), parse_lower),
    Option("otel.traces_protocol", "OTLP protocol for spans.",
        "http/protobuf", ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"), parse_lower,
        choices=("http/protobuf", "grpc")),
    Option("otel.metrics_protocol", "OTLP protocol for metrics.",
        "http/protobuf", ("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"), parse_lower,
        choices=("http/protobuf", "grpc")),
    # --- JudgeSettings --------------------------------------------------------------------------------------
    Option("judge.model", "A litellm model string (openai/gpt-4o-mini, anthropic/..., ollama/...); unset: "
        "the embedded local judge.",
        env=("FAITHTRACE_JUDGE_MODEL",), shown_default="embedded local judge"),
    Option("judge.api_base", "An OpenAI-compatible base URL.",
        env=("FAITHTRACE_JUDGE_API_BASE",)),
    Option("judge.api_key", "Wins over the provider's own variable (OPENAI_API_KEY, ...), which litellm "
        "reads.",
        env=("FAITHTRACE_JUDGE_API_KEY",)),
    Option("judge.timeout_s", "Seconds per LLM request (at least 300 with the embedded judge).",
        60.0, ("FAITHTRACE_JUDGE_TIMEOUT",), float, gt=0),
    Option("judge.max_retries", "Retries of a request on timeouts, 429 and 5xx (exponential backoff, "
        "jitter).",
        3, ("FAITHTRACE_JUDGE_MAX_RETRIES",), int, ge=0, le=10),
    Option("judge.max_repairs", "Times an invalid reply goes back with the validation error before the step "
        "fails.",
        2, ge=0, le=5),
    Option("judge.max_concurrency", f"Evaluations, and so LLM requests, in flight at once ({_LOCAL_ONE}). "
        "FAITHTRACE_CONCURRENCY is the former worker-side name.",
        4, ("FAITHTRACE_JUDGE_CONCURRENCY", "FAITHTRACE_CONCURRENCY"), int, ge=1, le=256),
    Option("judge.temperature", "Sampling temperature of the judge.",
        0.0, ge=0.0, le=2.0),
    Option("judge.max_tokens", "Reply token cap per request (a step may ask for less).",
        1024, ge=16, le=32768),
    Option("judge.structured_output", "auto: JSON schema where the provider supports it, else a forced tool "
        "call, else JSON mode.",
        "auto", choices=("auto", "json_schema", "json_object", "tool")),
    Option("judge.extra_params", "Passed to litellm.acompletion as they are.",
        default_factory=dict, shown_default="{}"),
    # --- ScoringOptions -------------------------------------------------------------------------------------
    Option("scoring.threshold", "score >= threshold passes.",
        0.7, ("FAITHTRACE_THRESHOLD",), float, ge=0.0, le=1.0),
    Option("scoring.fail_on_contradiction", "A contradicted claim fails the answer, whatever its score (the "
        "score stays the share of supported claims, and the reason names the claim).",
        True, ("FAITHTRACE_FAIL_ON_CONTRADICTION",), parse_bool),
    Option("scoring.idk_policy", "penalize counts claims the context does not support against the answer; "
        "deepeval (DeepEval's default) counts only contradicted claims.",
        "penalize", ("FAITHTRACE_IDK_POLICY",), parse_lower, choices=("penalize", "deepeval")),
    Option("scoring.use_truths", "Also extract each document's facts (cached per document and judge) for the "
        "verdict step (off: see the docs' dev-set evidence).",
        False, ("FAITHTRACE_USE_TRUTHS",), parse_bool),
    Option("scoring.claim_source", "sentences splits the answer in code (one judge call per evaluation); "
        "judge asks the judge for atomic claims (one more call).",
        "sentences", choices=("sentences", "judge")),
    Option("scoring.prove_support", "Skip the judge for a claim code proves supported: one document sentence "
        "contains it, with every number, name, negation and condition aligned (the rest are judged).",
        True),
    Option("scoring.verdict_policy", "When the checks disagree with the judge (both verdicts are recorded): "
        "judge (its verdict stands), numbers (a yes for a claim with a number absent from the documents "
        "becomes idk), checks (that; a yes for a claim that is a document sentence with a negation "
        "flipped, two parts exchanged or a detail from a parallel clause becomes no; a yes for added "
        "material, three or more content words, over a fifth of the claim's, that no document uses, "
        "becomes idk), strict (also a yes with over 30 % unknown content words), or auto (checks with the "
        "embedded judge, judge otherwise). "
        "A no or idk the judge wrote always stands.",
        "auto", choices=("auto", "judge", "numbers", "checks", "strict")),
    Option("scoring.verdict_logprobs", "Ask the judge for the verdict tokens' log-probabilities and record "
        "P(yes) per claim as p_supported: on, off, or auto (on with the embedded judge).",
        "auto", choices=("auto", "on", "off")),
    Option("scoring.min_p_supported", "With log-probabilities, a yes counts only when P(yes) is at least "
        "this; a less certain yes is idk, shown as not confirmed, never no (0: off; 0.7 chosen on the "
        "probes' tuning split).",
        0.7, ge=0.0, le=1.0),
    Option("scoring.verdict_context", "What a claim is judged against: documents, evidence (the two closest "
        "document sentences), or auto (evidence with the embedded judge).",
        "auto", choices=("auto", "documents", "evidence")),
    Option("scoring.include_reason", "Write a short explanation of the score (in code, from the verdicts).",
        True),
    Option("scoring.judge_reason", "Have the judge write that explanation (one more call when a claim "
        "fails).",
        False),
    Option("scoring.verdict_batch_size", "Claims judged per verdict call.",
        16, ge=1, le=64),
    Option("scoring.max_claims", "Claims beyond this are not judged (the result says how many were cut).",
        40, ge=1, le=500),
    Option("scoring.judge_token_budget", "Estimated judge tokens per evaluation for the verdicts: when "
        "the claims to judge need more, those the checks doubt are asked first and the rest are not judged "
        "or counted (listed in the result's unjudged claims); 0: no limit. Unset: 1,050 with the embedded "
        "judge (the judge's own count then stays within 1,100, about 15 s on 2 cores), no limit otherwise.",
        None, ("FAITHTRACE_JUDGE_TOKEN_BUDGET",), int, ge=0,
        shown_default="1,050 (embedded judge), else none"),
    Option("scoring.max_context_chars", "Retrieved text beyond this is cut before it reaches the judge.",
        24_000, ge=500),
    Option("scoring.max_answer_chars", "Answer text beyond this is cut before claims are taken from it.",
        8_000, ge=100),
    Option("scoring.verdict_source", "Who decides each claim's verdict: judge (the LLM judge and the "
        "checks), or detector (the trained detector of detector_model alone: no LLM call with sentence "
        "claims). No trained model ships yet (docs/judges.md).",
        "judge", ("FAITHTRACE_VERDICT_SOURCE",), parse_lower, choices=("judge", "detector")),
    Option("scoring.detector_model", "A detector model directory (model.onnx, tokenizer.json, detector.json; "
        "each file's sha256 checked at load; needs faithtrace[detector]). With verdict_source judge, its "
        "verdict is recorded next to the judge's on every claim and never applied.",
        None, ("FAITHTRACE_DETECTOR_MODEL",), shown_default="none"),
    Option("scoring.detector_threshold", "An answer token is flagged when the detector's P(not supported) "
        "reaches this.",
        0.5, ("FAITHTRACE_DETECTOR_THRESHOLD",), float, ge=0.0, le=1.0),
    Option("scoring.detector_min_confidence", "A flagged span counts only if its most confident token "
        "reaches this (low-confidence spans are mostly noise).",
        0.5, ("FAITHTRACE_DETECTOR_MIN_CONFIDENCE",), float, ge=0.0, le=1.0),
    Option("scoring.detector_min_tokens", "A flagged span counts only with at least this many tokens "
        "(short spans are mostly paraphrases, but a changed number is often one token).",
        1, ge=1, le=64),
    Option("scoring.detector_windows", "How a context longer than the model is read: in windows, each answer "
        "token scored in each; min keeps its lowest P(not supported) (supported if some window supports "
        "it), max its highest.",
        "min", choices=("min", "max")),
    Option("scoring.detector_threads", "onnxruntime threads for the detector.",
        env=("FAITHTRACE_DETECTOR_THREADS",), parse=int, ge=1, le=256, default_factory=_half_the_cores,
        shown_default="half the cores"),
    # --- SamplingOptions ------------------------------------------------------------------------------------
    Option("sampling.ratio", "Share of calls traced and scored, decided by trace id (a trace is scored "
        "everywhere or nowhere).",
        1.0, ("FAITHTRACE_SAMPLE_RATE",), float, ge=0.0, le=1.0),
    Option("sampling.max_per_second", "At most this many evaluations start per second (bursts up to one "
        "second's worth).",
        None, ("FAITHTRACE_RATE_LIMIT",), float, gt=0, shown_default="unlimited"),
    Option("sampling.max_tokens_per_hour", "Stop scoring for the rest of the hour once the judge used this "
        "many tokens.",
        None, ("FAITHTRACE_BUDGET_TOKENS_PER_HOUR",), int, gt=0, shown_default="unlimited"),
    Option("sampling.max_cost_usd_per_hour", "The same in US dollars (judges with a known price only).",
        None, ("FAITHTRACE_BUDGET_USD_PER_HOUR",), float, gt=0, shown_default="unlimited"),
    Option("sampling.respect_parent", "A call inside a trace the app did not sample is not scored.",
        True),
    # --- CaptureOptions -------------------------------------------------------------------------------------
    Option("capture.content", "Record query, contexts, answer, claim texts and the explanation; off keeps "
        "only sizes, counts, verdicts and scores.",
        True, ("FAITHTRACE_CAPTURE_CONTENT", "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"),
        parse_bool),
    Option("capture.redact", "A function applied to every exported text after secrets are scrubbed (the "
        "judge still sees the raw text).",
        shown_default="none"),
    Option("capture.max_attribute_chars", "Exported texts are cut to this many characters.",
        4096, ("FAITHTRACE_MAX_ATTRIBUTE_CHARS",), int, ge=16, le=1_000_000),
    Option("capture.max_documents", "Retrieved documents recorded on the RAG span one by one.",
        20, ge=0, le=1000),
    Option("capture.max_claim_events", "Per-claim events on the evaluation span (the SDK keeps 128 events "
        "per span; the total is noted).",
        32, ge=0, le=100),
    Option("capture.scrub_secrets", "Replace API keys, bearer tokens, passwords and private keys in "
        "exported text.",
        True),
    # --- WorkerOptions --------------------------------------------------------------------------------------
    Option("worker.queue_size", "Evaluations waiting at most; a call that finds the queue full is not "
        "scored (counted as dropped).",
        1000, ("FAITHTRACE_QUEUE_SIZE",), int, ge=1, le=1_000_000),
    Option("worker.evaluation_timeout_s", "One evaluation (all its judge calls) is abandoned after this "
        "long.",
        120.0, ("FAITHTRACE_EVALUATION_TIMEOUT",), float, gt=0, local_default=900.0),
    Option("worker.hold_timeout_s", "With evaluation_placement rag_span: seconds after the call returned "
        "that its RAG span waits for its evaluation; then it is exported without it and the evaluation "
        "goes to a linked trace when done. Keep it below a tail-sampling Collector's decision_wait.",
        30.0, ("FAITHTRACE_HOLD_TIMEOUT",), float, gt=0, le=3600, local_default=45.0),
    Option("worker.shutdown_timeout_s", "How long interpreter exit (and a reconfiguration) waits for queued "
        "evaluations and their export.",
        5.0, ("FAITHTRACE_SHUTDOWN_TIMEOUT",), float, ge=0),
    # --- the embedded judge (read where it starts) ----------------------------------------------------------
    Option("local_judge.cache_dir", "Where the model, the server's state file and its log live.",
        env=("FAITHTRACE_CACHE_DIR",), shown_default="$XDG_CACHE_HOME/faithtrace or ~/.cache/faithtrace"),
    Option("local_judge.model_path", "Serve your own GGUF file instead of the bundled model (its hash is "
        "not checked).",
        env=("FAITHTRACE_LOCAL_MODEL_PATH",), shown_default="the bundled model"),
    Option("local_judge.idle_timeout_s", "The shared server stops after this long without requests and "
        "without a live user (0: never).",
        900.0, ("FAITHTRACE_LOCAL_JUDGE_IDLE_TIMEOUT",), float, ge=0),
    Option("local_judge.start_timeout_s", "How long to wait for the server to come up.",
        120.0, ("FAITHTRACE_LOCAL_JUDGE_START_TIMEOUT",), float, gt=0),
    Option("local_judge.n_ctx", "The server's context window in tokens.",
        8192, ("FAITHTRACE_LOCAL_JUDGE_N_CTX",), int, ge=512, le=32768),
    Option("local_judge.logprobs", "The server returns log-probabilities (P(yes) per verdict; it keeps "
        "logits for every position it reaches). Off: sampled verdicts alone.",
        True, ("FAITHTRACE_LOCAL_JUDGE_LOGPROBS",), parse_bool),
    Option("local_judge.threads", "llama.cpp threads (they spin at every barrier: more than the free cores "
        "slow it down and take the host's CPU).",
        env=("FAITHTRACE_LOCAL_JUDGE_THREADS",), parse=int, ge=1, le=256, default_factory=_half_the_cores,
        shown_default="half the cores"),
    # --- faithtrace serve: each option is a flag (--settle for settle_s) and a FAITHTRACE_SERVE_* variable --
    Option("serve.host", "Address the OTLP receivers bind.", "127.0.0.1", ("FAITHTRACE_SERVE_HOST",)),
    Option("serve.grpc_port", "OTLP/gRPC port (0 picks a free one).", 4317, ("FAITHTRACE_SERVE_GRPC_PORT",),
        int, ge=0, le=65535),
    Option("serve.http_port", "OTLP/HTTP port (0 picks a free one).", 4318, ("FAITHTRACE_SERVE_HTTP_PORT",),
        int, ge=0, le=65535),
    Option("serve.concurrency", "Evaluations at once; sets the judge's max_concurrency.",
        env=("FAITHTRACE_SERVE_CONCURRENCY",), parse=int, ge=1,
        shown_default="JudgeSettings.max_concurrency"),
    Option("serve.max_pending", "Evaluations admitted and not finished before a request is refused (429).",
        env=("FAITHTRACE_SERVE_MAX_PENDING",), parse=int, ge=1, shown_default="8 x concurrency"),
    # 300: a backlogged or retrying load balancer can deliver a trace's parts far apart; held, ~3 KB each.
    Option("serve.settle_s", "Seconds a RAG trace waits for its root after its last span, then counted "
        "incomplete.", 300.0, ("FAITHTRACE_SERVE_SETTLE",), float, gt=0),
    Option("serve.hold_s", "Seconds a request with part of a trace waits for the rest.",
        0.5, ("FAITHTRACE_SERVE_HOLD",), float, ge=0),
    Option("serve.max_traces", "RAG traces held for their root at most.",
        10_000, ("FAITHTRACE_SERVE_MAX_TRACES",), int, ge=1),
    Option("serve.max_trace_bytes", "Bytes those RAG traces hold at most.",
        64 << 20, ("FAITHTRACE_SERVE_MAX_TRACE_BYTES",), int, ge=1),
    Option("serve.max_request_bytes", "Largest OTLP request accepted, in bytes.",
        16 << 20, ("FAITHTRACE_SERVE_MAX_REQUEST_BYTES",), int, ge=1),
    Option("serve.retry_after_s", "Seconds a refused client is told to wait.",
        2.0, ("FAITHTRACE_SERVE_RETRY_AFTER",), float, gt=0),
    Option("serve.shutdown_timeout_s", "Seconds to finish work on SIGTERM.",
        30.0, ("FAITHTRACE_SERVE_SHUTDOWN_TIMEOUT",), float, ge=0),
    Option("serve.spool", "Directory (one per replica) where parts of traces this replica acknowledged "
        "before scoring them are kept until scored, and sent on when it starts again (none: memory only).",
        env=("FAITHTRACE_SERVE_SPOOL",), parse=Path, metavar="DIR", shown_default="none"),
    Option("serve.max_spool_bytes", "Bytes the spool holds at most (past it, parts are not kept).",
        256 << 20, ("FAITHTRACE_SERVE_MAX_SPOOL_BYTES",), int, ge=1),
    Option("serve.replay_endpoint", "The Collector's replay receiver (http://host:port, OTLP/gRPC): spooled "
        "parts found at start go there, to be routed to their trace's replica (none: into this replica).",
        env=("FAITHTRACE_SERVE_REPLAY_ENDPOINT",), metavar="URL", shown_default="none"),
    # --- the fleet's shared store and judge budget (serve/fleet.py) ---
    Option("serve.redis", "Redis URL (redis://host:6379/0; rediss:// for TLS) of the store the replicas "
        "share: one judge budget for the fleet, and the record of traces scored, checked before judging "
        "(none: each replica keeps its budget and record alone). Needs faithtrace[redis].",
        env=("FAITHTRACE_SERVE_REDIS",), metavar="URL", shown_default="none"),
    Option("serve.redis_timeout_s", "How long a call to Redis may take: one slower, or failing, counts Redis "
        "down for a back-off (the record is neither read nor written, the budget is kept locally).",
        0.5, ("FAITHTRACE_SERVE_REDIS_TIMEOUT",), float, gt=0),
    Option("serve.fleet", "The fleet's name in the store: replicas with the same name share one budget and "
        "one record.",
        env=("FAITHTRACE_SERVE_FLEET",), metavar="NAME", shown_default="the Kafka group, else faithtrace"),
    Option("serve.max_tokens_per_hour", "Judge tokens the fleet (each replica, without --redis) spends per "
        "hour at most: every evaluation reserves its expected tokens before its first judge call and "
        "settles them with the real count after.",
        env=("FAITHTRACE_SERVE_MAX_TOKENS_PER_HOUR",), parse=int, gt=0,
        shown_default="sampling.max_tokens_per_hour, else unlimited"),
    Option("serve.max_cost_usd_per_hour", "The same in US dollars (judges with a known price only).",
        env=("FAITHTRACE_SERVE_MAX_COST_USD_PER_HOUR",), parse=float, gt=0,
        shown_default="sampling.max_cost_usd_per_hour, else unlimited"),
    Option("serve.max_judge_requests_per_minute", "Requests to the judge per minute at most, for the "
        "fleet (each replica, without --redis); evaluations wait their turn.",
        env=("FAITHTRACE_SERVE_MAX_JUDGE_REQUESTS_PER_MINUTE",), parse=float, gt=0,
        shown_default="unlimited"),
    Option("serve.budget_window_s", "The hourly budgets hold over every window this long, scaled to it: "
        "3600 lets an hour's budget go in one burst, 60 spreads it over the hour.",
        3600.0, ("FAITHTRACE_SERVE_BUDGET_WINDOW",), float, ge=10, le=86_400),
    Option("serve.budget_exhausted", "An evaluation that finds the budget spent is skipped (acknowledged "
        "unscored, counted as sampled_out with reason budget) or waits (refused as retryable until the "
        "window has room: the backlog stays in the Collector's queue or in Kafka).",
        "skip", ("FAITHTRACE_SERVE_BUDGET_EXHAUSTED",), parse_lower, choices=("skip", "wait")),
    Option("serve.budget_store_down", "While the store does not answer: share (each replica keeps to its "
        "share of the budget, as many replicas as the store last counted) or closed (nothing is judged; "
        "refused as retryable).",
        "share", ("FAITHTRACE_SERVE_BUDGET_STORE_DOWN",), parse_lower, choices=("share", "closed")),
    Option("serve.scored_ttl_s", "How long the store remembers a scored trace (a redelivery within it is "
        "not judged again).",
        3600.0, ("FAITHTRACE_SERVE_SCORED_TTL",), float, ge=60),
    Option("serve.mapping", "JSON file: a list of extra span conventions (see the fleet's page).",
        env=("FAITHTRACE_SERVE_MAPPING",), parse=Path),
    Option("serve.instance_id", "This replica's id on the metrics it exports.",
        env=("FAITHTRACE_SERVE_INSTANCE_ID",), shown_default="host-pid"),
    Option("serve.ready_file", "Write the bound ports here as JSON once serving.",
        env=("FAITHTRACE_SERVE_READY_FILE",), parse=Path),
    Option("serve.kafka", "Kafka bootstrap servers (host:port,...): read OTLP traces from a topic as one "
        "member of a consumer group.", env=("FAITHTRACE_SERVE_KAFKA",), metavar="BOOTSTRAP"),
    Option("serve.kafka_topic", "The topic the Collector writes.",
        "otlp_spans", ("FAITHTRACE_SERVE_KAFKA_TOPIC",)),
    Option("serve.kafka_group", "The consumer group of the replicas.",
        "faithtrace-serve", ("FAITHTRACE_SERVE_KAFKA_GROUP",)),
    Option("serve.kafka_max_buffered", "Kafka messages in flight before the consumer pauses.",
        1024, ("FAITHTRACE_SERVE_KAFKA_MAX_BUFFERED",), int, ge=1),
    Option("serve.kafka_max_buffered_bytes", "Bytes of Kafka messages in flight before the consumer pauses.",
        64 << 20, ("FAITHTRACE_SERVE_KAFKA_MAX_BUFFERED_BYTES",), int, ge=1),
    Option("serve.kafka_commit_interval_s", "How often the offsets of finished Kafka messages are committed. "
        "Longer sends fewer commits and leaves more finished messages to be read again when a replica dies "
        "(with --redis they are found in the record, not judged again).",
        0.5, ("FAITHTRACE_SERVE_KAFKA_COMMIT_INTERVAL",), float, gt=0),
    Option("serve.kafka_option", "A librdkafka consumer setting KEY=VALUE (security.protocol, sasl.*, "
        "session.timeout.ms); the flag repeats, the variable holds them separated by ';'.",
        (), ("FAITHTRACE_SERVE_KAFKA_OPTIONS",), parse_list, metavar="KEY=VALUE", shown_default="none"),
)
# fmt: on
