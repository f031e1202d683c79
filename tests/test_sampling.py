"""Sampling on the request path: ratio by trace id, unsampled parents, rate limit and hourly budgets."""

# ruff: noqa: F811  (the fixtures are imported into this module by name, see tests/_trace_fixtures.py)

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from _fake_judge import fake_judge  # noqa: F401  (fixture)
from _trace_fixtures import CONTEXT, FAITHFUL, QUESTION, clean_env, ft, point  # noqa: F401
from faithtrace import SamplingOptions, trace_faithfulness
from faithtrace._runtime.sampling import BUDGET, PARENT, RATE_LIMIT, RATIO, SCORED, Sampler
from faithtrace._telemetry import names as n
from faithtrace.testing import FaithtraceCapture


def _decide_in_trace(sampler: Sampler, trace_id: int, sampled: bool = True) -> int:
    flags = TraceFlags(TraceFlags.SAMPLED if sampled else TraceFlags.DEFAULT)
    span = NonRecordingSpan(SpanContext(trace_id=trace_id, span_id=1, is_remote=True, trace_flags=flags))
    token = otel_context.attach(trace.set_span_in_context(span))
    try:
        return sampler.decide()
    finally:
        otel_context.detach(token)


def test_ratio_is_decided_by_trace_id() -> None:
    half = Sampler(SamplingOptions(ratio=0.5))
    low = (7 << 64) | 1  # the low 64 bits decide, as with OTel's TraceIdRatioBased
    high = (7 << 64) | ((1 << 64) - 2)
    assert {_decide_in_trace(half, low) for _ in range(50)} == {SCORED}
    assert {_decide_in_trace(half, high) for _ in range(50)} == {RATIO}
    # Two samplers (two processes, two services) agree on every trace.
    other = Sampler(SamplingOptions(ratio=0.5))
    ids = [(i * 0x9E3779B97F4A7C15) % (1 << 128) or 1 for i in range(1, 200)]
    decisions = [_decide_in_trace(half, t) for t in ids]
    assert decisions == [_decide_in_trace(other, t) for t in ids]
    assert 0 < decisions.count(SCORED) < len(ids)
    assert {_decide_in_trace(Sampler(SamplingOptions(ratio=0.0)), t) for t in ids} == {RATIO}
    assert {_decide_in_trace(Sampler(SamplingOptions(ratio=1.0)), t) for t in ids} == {SCORED}


def test_unsampled_parent_is_respected() -> None:
    sampler = Sampler(SamplingOptions())
    assert _decide_in_trace(sampler, 12345, sampled=False) == PARENT
    assert _decide_in_trace(Sampler(SamplingOptions(respect_parent=False)), 12345, sampled=False) == SCORED


def test_rate_limit_token_bucket() -> None:
    sampler = Sampler(SamplingOptions(max_per_second=0.001))  # one now, the next in ~17 minutes
    assert sampler.decide() == SCORED
    assert [sampler.decide() for _ in range(20)] == [RATE_LIMIT] * 20


def test_budget_is_charged_after_scoring() -> None:
    tokens = Sampler(SamplingOptions(max_tokens_per_hour=1000))
    assert tokens.decide() == SCORED
    tokens.record_spend(999, None)
    assert tokens.decide() == SCORED
    tokens.record_spend(1, None)
    assert tokens.decide() == BUDGET
    usd = Sampler(SamplingOptions(max_cost_usd_per_hour=0.01))
    usd.record_spend(10_000, None)  # an unknown price does not count against a USD budget
    assert usd.decide() == SCORED
    usd.record_spend(10, 0.02)
    assert usd.decide() == BUDGET


def test_sampled_out_calls_make_no_span_and_are_counted(ft: FaithtraceCapture, fake_judge: Any) -> None:
    ft.configure(judge=fake_judge.settings(), sampling=SamplingOptions(ratio=0.0))

    @trace_faithfulness
    def answer(question: str, contexts: list[str]) -> str:
        return FAITHFUL

    assert [answer(QUESTION, [CONTEXT]) for _ in range(5)] == [FAITHFUL] * 5
    assert ft.flush()
    assert ft.spans() == []
    assert fake_judge.requests == []
    sampled_out = point(
        ft, n.METRIC_EVALUATIONS, **{n.FUNCTION: answer.__qualname__, n.SAMPLING_REASON: "ratio"}
    )
    assert sampled_out.attributes[n.OUTCOME] == n.OUTCOME_SAMPLED_OUT
    assert sampled_out.value == 5
    assert point(ft, n.METRIC_CALLS, **{n.FUNCTION: answer.__qualname__}).value == 5


def test_unsampled_app_trace_is_not_scored(ft: FaithtraceCapture, fake_judge: Any) -> None:
    @trace_faithfulness
    def answer(question: str, contexts: list[str]) -> str:
        return FAITHFUL

    app_tracer = TracerProvider(sampler=ALWAYS_OFF).get_tracer("app")
    with app_tracer.start_as_current_span("request"):
        assert answer(QUESTION, [CONTEXT]) == FAITHFUL
    assert ft.flush()
    assert ft.spans() == []
    assert fake_judge.requests == []
    assert (
        point(
            ft, n.METRIC_EVALUATIONS, **{n.FUNCTION: answer.__qualname__, n.SAMPLING_REASON: "parent"}
        ).value
        == 1
    )


def test_budget_through_the_decorator(ft: FaithtraceCapture, fake_judge: Any) -> None:
    ft.configure(judge=fake_judge.settings(), sampling=SamplingOptions(max_tokens_per_hour=10))

    @trace_faithfulness
    def answer(question: str, contexts: list[str]) -> str:
        return FAITHFUL

    answer(QUESTION, [CONTEXT])
    assert ft.flush()  # the first evaluation spends far more than 10 tokens
    answer(QUESTION, [CONTEXT])
    answer(QUESTION, [CONTEXT])
    assert ft.flush()
    assert len(ft.evaluation_spans()) == 1
    assert (
        point(
            ft, n.METRIC_EVALUATIONS, **{n.FUNCTION: answer.__qualname__, n.SAMPLING_REASON: "budget"}
        ).value
        == 2
    )


@pytest.mark.parametrize("ratio", [-0.1, 1.5])
def test_invalid_ratio_is_rejected(ratio: float) -> None:
    with pytest.raises(ValueError, match="ratio"):
        SamplingOptions(ratio=ratio)
