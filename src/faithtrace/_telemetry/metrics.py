"""Metrics: instruments per meter provider, and per-function counters the request path bumps for free.

Counting on the request path (calls, sampled-out calls, drops) is a plain integer increment on the decorated
function's ``FunctionStats``; observable instruments read those integers at collection time. That keeps a
sampled-out call at a few hundred nanoseconds instead of an OTel counter ``add`` per call. Attributes are
low-cardinality only: the function's name, the judge model, outcome, verdict, step, token type.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterable
from typing import Any

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Meter, Observation

from faithtrace._common import safety
from faithtrace._telemetry import names as n
from faithtrace._telemetry import setup
from faithtrace._telemetry.records import FunctionStats, Reason
from faithtrace._version import __version__
from faithtrace.scoring.models import FaithfulnessResult, Outcome

_registry: weakref.WeakSet[FunctionStats] = weakref.WeakSet()
_registry_lock = threading.Lock()


def register(stats: FunctionStats) -> FunctionStats:
    with _registry_lock:
        _registry.add(stats)
    return stats


def _all_stats() -> list[FunctionStats]:
    with _registry_lock:
        return list(_registry)


Key = tuple[tuple[str, str], ...]
_NOT_SCORED = tuple(r for r in Reason if r is not Reason.SCORED)


def _sum(observations: dict[Key, int | float]) -> list[Observation]:
    return [Observation(value, dict(key)) for key, value in observations.items()]


StatsSource = Callable[[], list[FunctionStats]]


def _observe_calls(_options: CallbackOptions, source: StatsSource = _all_stats) -> Iterable[Observation]:
    totals: dict[Key, int | float] = {}
    for stats in source():
        key: Key = ((n.FUNCTION, stats.name),)
        totals[key] = totals.get(key, 0) + stats.calls
    return _sum(totals)


def _observe_evaluations(
    _options: CallbackOptions, source: StatsSource = _all_stats
) -> Iterable[Observation]:
    totals: dict[Key, int | float] = {}
    for stats in source():
        for (outcome, label), count in list(stats.outcomes.items()):
            key: Key = ((n.FUNCTION, stats.name), (n.OUTCOME, outcome))
            if label is not None:
                key = (*key, (n.GEN_AI_EVALUATION_SCORE_LABEL, label))
            totals[key] = totals.get(key, 0) + count
        for reason in _NOT_SCORED:
            count = stats.sampled_out[reason]
            if count:
                key = (
                    (n.FUNCTION, stats.name),
                    (n.OUTCOME, n.OUTCOME_SAMPLED_OUT),
                    (n.SAMPLING_REASON, reason.label),
                )
                totals[key] = totals.get(key, 0) + count
    return _sum(totals)


def _observe_internal_errors(_options: CallbackOptions) -> Iterable[Observation]:
    return [Observation(safety.internal_error_count)]


def _observe_host_errors(_options: CallbackOptions) -> Iterable[Observation]:
    counts = dict(safety.host_error_counts)
    return [Observation(count, {n.HOST_ERROR_WHERE: where}) for where, count in counts.items()]


def _observe_exporter_errors(_options: CallbackOptions) -> Iterable[Observation]:
    return [Observation(setup.prometheus_bind_failures, {n.EXPORTER: "prometheus"})]


# RAG spans released from their hold, by reason (see names.HOLD_REASONS): plain integers, as for the calls.
hold_releases: dict[str, int] = dict.fromkeys(n.HOLD_REASONS, 0)


def count_hold_release(reason: str) -> None:
    hold_releases[reason] = hold_releases.get(reason, 0) + 1


def _observe_hold_releases(_options: CallbackOptions) -> Iterable[Observation]:
    return [Observation(v, {n.HOLD_REASON: k}) for k, v in list(hold_releases.items())]


def _observe_annotations(_options: CallbackOptions) -> Iterable[Observation]:
    from faithtrace._telemetry.annotations import counts

    return [Observation(v, {n.ANNOTATION_STATUS: k}) for k, v in counts.items()]


class Instruments:
    """The instruments of one meter provider (created once per provider, however often configure() runs).

    ``stats`` limits the observed counters to some functions' stats (``faithtrace serve`` keeps one set per
    app); ``process`` adds the instruments that describe this process (calls, internal errors, queue depth),
    which a scorer exporting on an app's behalf must not report as the app's."""

    def __init__(
        self,
        meter: Meter,
        stats: StatsSource | None = None,
        *,
        process: bool = True,
        queue_depth: Callable[[], int] = lambda: 0,
        held_spans: Callable[[], int] = lambda: 0,
    ) -> None:
        self.score = meter.create_histogram(
            n.METRIC_SCORE,
            unit="1",
            description="Faithfulness score of scored answers",
            explicit_bucket_boundaries_advisory=n.SCORE_BUCKETS,
        )
        self.claims = meter.create_histogram(
            n.METRIC_CLAIMS,
            unit="{claim}",
            description="Claims found per evaluated answer",
            explicit_bucket_boundaries_advisory=n.CLAIM_BUCKETS,
        )
        self.verdicts = meter.create_counter(
            n.METRIC_VERDICTS, unit="{claim}", description="Claim verdicts by verdict"
        )
        self.duration = meter.create_histogram(
            n.METRIC_EVAL_DURATION,
            unit="s",
            description="Time from a call's end to its evaluation's result",
            explicit_bucket_boundaries_advisory=n.DURATION_BUCKETS,
        )
        self.cost = meter.create_counter(n.METRIC_JUDGE_COST, unit="USD", description="Judge spend")
        self.tokens = meter.create_histogram(
            n.METRIC_TOKEN_USAGE,
            unit="{token}",
            description="Tokens per judge request (faithtrace's own, never the app's LLM calls)",
            explicit_bucket_boundaries_advisory=n.TOKEN_BUCKETS,
        )
        self.operation = meter.create_histogram(
            n.METRIC_OPERATION_DURATION,
            unit="s",
            description="Duration of judge requests",
            explicit_bucket_boundaries_advisory=n.DURATION_BUCKETS,
        )
        source = stats or _all_stats
        meter.create_observable_counter(
            n.METRIC_EVALUATIONS,
            [lambda options: _observe_evaluations(options, source)],
            unit="{evaluation}",
            description="Decorated calls by evaluation outcome (incl. dropped and sampled_out)",
        )
        if not process:
            return
        meter.create_observable_counter(
            n.METRIC_CALLS, [_observe_calls], unit="{call}", description="Decorated calls that returned"
        )
        meter.create_observable_counter(
            n.METRIC_INTERNAL_ERRORS,
            [_observe_internal_errors],
            unit="{error}",
            description="faithtrace errors caught and swallowed (the host app was unaffected)",
        )
        meter.create_observable_counter(
            n.METRIC_HOST_ERRORS,
            [_observe_host_errors],
            unit="{error}",
            description="Errors raised by the app's own code that faithtrace called (span processors, the "
            "redact hook), contained: the app's call was unaffected",
        )
        meter.create_observable_counter(
            n.METRIC_EXPORTER_ERRORS,
            [_observe_exporter_errors],
            unit="{error}",
            description="Exporters faithtrace could not set up, e.g. a Prometheus port already taken",
        )
        meter.create_observable_counter(
            n.METRIC_ANNOTATIONS,
            [_observe_annotations],
            unit="{annotation}",
            description="Phoenix annotations by status: sent, failed (after retries), dropped (queue full)",
        )
        meter.create_observable_gauge(
            n.METRIC_QUEUE_DEPTH,
            [lambda _options: [Observation(queue_depth())]],
            unit="{evaluation}",
            description="Evaluations queued or running",
        )
        meter.create_observable_gauge(
            n.METRIC_HELD_SPANS,
            [lambda _options: [Observation(held_spans())]],
            unit="{span}",
            description="RAG spans held open until their evaluation is on them",
        )
        meter.create_observable_counter(
            n.METRIC_HOLD_RELEASES,
            [_observe_hold_releases],
            unit="{span}",
            description="Held RAG spans exported, by reason: evaluated (with their evaluation), deadline "
            "(without it, at the hold deadline), shutdown (without it, by shutdown())",
        )

    def record_evaluation(self, stats: FunctionStats, result: FaithfulnessResult, duration_s: float) -> None:
        """Metrics of one finished evaluation (called on the worker's thread)."""
        function = stats.name
        outcome = result.outcome.value
        count_outcome(stats, outcome, result.label)
        fattrs = {n.FUNCTION: function}
        if result.score is not None:
            self.score.record(result.score, fattrs)
        if result.outcome not in (Outcome.ERROR, Outcome.INPUT_ERROR):
            self.claims.record(result.counts.total, fattrs)
        for verdict, count in (
            ("yes", result.counts.yes),
            ("no", result.counts.no),
            ("idk", result.counts.idk),
        ):
            if count:
                self.verdicts.add(count, {n.FUNCTION: function, n.VERDICT: verdict})
        self.duration.record(duration_s, {n.FUNCTION: function, n.OUTCOME: outcome})
        cost = result.cost_usd
        if cost:
            self.cost.add(
                cost, {n.FUNCTION: function, n.GEN_AI_REQUEST_MODEL: result.judge_model or "unknown"}
            )
        for call in result.calls:
            attrs: dict[str, Any] = {
                n.GEN_AI_OPERATION_NAME: n.JUDGE_OPERATION,
                n.GEN_AI_REQUEST_MODEL: call.model,
                n.STEP_NAME: call.step,
            }
            if call.error_type:
                self.operation.record(call.duration_s, {**attrs, n.ERROR_TYPE: call.error_type})
                continue
            self.operation.record(call.duration_s, attrs)
            if call.input_tokens is not None:
                self.tokens.record(call.input_tokens, {**attrs, n.GEN_AI_TOKEN_TYPE: "input"})
            if call.output_tokens is not None:
                self.tokens.record(call.output_tokens, {**attrs, n.GEN_AI_TOKEN_TYPE: "output"})


_instruments: weakref.WeakKeyDictionary[Any, Instruments] = weakref.WeakKeyDictionary()
_instruments_lock = threading.Lock()


def instruments_for(
    meter_provider: Any, queue_depth: Callable[[], int], held_spans: Callable[[], int] = lambda: 0
) -> Instruments:
    """The instruments on ``meter_provider`` (None: the global one), created on first use; ``queue_depth``
    reads the evaluations queued or running in this process, ``held_spans`` the RAG spans held for theirs."""
    provider = meter_provider if meter_provider is not None else metrics.get_meter_provider()
    with _instruments_lock:
        found = _instruments.get(provider)
        if found is None:
            meter = provider.get_meter(n.INSTRUMENTATION_SCOPE, __version__)
            found = Instruments(meter, queue_depth=queue_depth, held_spans=held_spans)
            _instruments[provider] = found
        return found


def count_outcome(stats: FunctionStats, outcome: str, label: str | None = None) -> None:
    key = (outcome, label)
    stats.outcomes[key] = stats.outcomes.get(key, 0) + 1
