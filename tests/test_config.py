"""configure(): precedence (arguments > FAITHTRACE_* env > OTel env > defaults), validation, env warnings."""

from __future__ import annotations

import logging
from typing import Any

import pytest

import faithtrace
from _trace_fixtures import clean_env  # noqa: F401  (autouse)
from faithtrace import (
    CaptureOptions,
    ConfigError,
    IdkPolicy,
    JudgeSettings,
    SamplingOptions,
    ScoringOptions,
    WorkerOptions,
)
from faithtrace._config.settings import DEFAULT_PROMETHEUS_PORT, build_settings


def test_defaults() -> None:
    s = build_settings(environ={})
    assert s.enabled is True
    assert s.judge.model is None  # the embedded local judge
    assert s.scoring == ScoringOptions()
    assert s.sampling == SamplingOptions()
    assert s.capture.content is True
    # The embedded judge serves one request at a time on the CPU: one evaluation at a time, long timeouts.
    assert s.worker == WorkerOptions(evaluation_timeout_s=900.0, hold_timeout_s=45.0)
    assert s.concurrency == 1
    remote = build_settings(environ={"FAITHTRACE_JUDGE_MODEL": "openai/gpt-4o-mini"})
    assert remote.worker == WorkerOptions()
    assert remote.concurrency == remote.judge.max_concurrency == 4
    assert (s.service_name, s.otlp_endpoint, s.prometheus_port, s.prometheus_host) == (
        None,
        None,
        None,
        "127.0.0.1",
    )


def test_environment() -> None:
    env = {
        "FAITHTRACE_ENABLED": "no",
        "FAITHTRACE_JUDGE_MODEL": "openai/gpt-4o-mini",
        "FAITHTRACE_THRESHOLD": "0.8",
        "FAITHTRACE_IDK_POLICY": "deepeval",
        "FAITHTRACE_SAMPLE_RATE": "0.25",
        "FAITHTRACE_RATE_LIMIT": "2.5",
        "FAITHTRACE_BUDGET_TOKENS_PER_HOUR": "100000",
        "FAITHTRACE_BUDGET_USD_PER_HOUR": "1.5",
        "FAITHTRACE_CAPTURE_CONTENT": "false",
        "FAITHTRACE_QUEUE_SIZE": "10",
        "FAITHTRACE_CONCURRENCY": "2",
        "FAITHTRACE_EVALUATION_TIMEOUT": "30",
        "FAITHTRACE_PROMETHEUS_PORT": "9999",
        "OTEL_SERVICE_NAME": "rag-api",
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318",
    }
    s = build_settings(environ=env)
    assert s.enabled is False
    assert s.judge.model == "openai/gpt-4o-mini"
    assert (s.scoring.threshold, s.scoring.idk_policy) == (0.8, IdkPolicy.DEEPEVAL)
    assert s.sampling == SamplingOptions(
        ratio=0.25, max_per_second=2.5, max_tokens_per_hour=100000, max_cost_usd_per_hour=1.5
    )
    assert s.capture.content is False
    assert (s.worker.queue_size, s.concurrency, s.worker.evaluation_timeout_s) == (10, 2, 30.0)
    assert (s.service_name, s.otlp_endpoint, s.prometheus_port) == ("rag-api", "http://127.0.0.1:4318", 9999)


def test_arguments_win_over_env_field_by_field() -> None:
    env = {"FAITHTRACE_SAMPLE_RATE": "0.1", "FAITHTRACE_RATE_LIMIT": "3", "FAITHTRACE_JUDGE_TIMEOUT": "7"}
    s = build_settings(
        environ=env,
        sampling=SamplingOptions(ratio=0.5),
        judge="anthropic/claude-x",
        enabled=True,
        prometheus=True,
        service_name="svc",
    )
    assert (s.sampling.ratio, s.sampling.max_per_second) == (0.5, 3.0)  # the unset field still comes from env
    assert (s.judge.model, s.judge.timeout_s) == ("anthropic/claude-x", 7.0)
    assert s.prometheus_port == DEFAULT_PROMETHEUS_PORT
    assert s.service_name == "svc"
    settings = JudgeSettings(model="openai/x", max_retries=1)
    assert (
        build_settings(environ={"FAITHTRACE_JUDGE_MAX_RETRIES": "5"}, judge=settings).judge.max_retries == 1
    )


def test_otel_content_capture_variable_is_a_fallback() -> None:
    otel = {"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "false"}
    assert build_settings(environ=otel).capture.content is False
    assert build_settings(environ={**otel, "FAITHTRACE_CAPTURE_CONTENT": "true"}).capture.content is True


@pytest.mark.parametrize(
    ("var", "value"),
    [
        ("FAITHTRACE_SAMPLE_RATE", "2"),
        ("FAITHTRACE_SAMPLE_RATE", "half"),
        ("FAITHTRACE_RATE_LIMIT", "-1"),
        ("FAITHTRACE_QUEUE_SIZE", "0"),
        ("FAITHTRACE_ENABLED", "maybe"),
        ("FAITHTRACE_PROMETHEUS_PORT", "70000"),
    ],
)
def test_invalid_env_value_warns_and_uses_the_default(
    var: str, value: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="faithtrace"):
        s = build_settings(environ={var: value})
    assert s == build_settings(environ={})
    assert [r for r in caplog.records if var in r.getMessage()]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"enabled": "yes"},
        {"judge": 42},
        {"judge": "  "},
        {"sampling": {"ratio": 0.5}},
        {"capture": SamplingOptions()},
        {"worker": "fast"},
        {"scoring": 0.7},
        {"prometheus": 70000},
        {"prometheus": "9464"},
        {"service_name": ""},
    ],
)
def test_invalid_argument_raises_config_error(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        faithtrace.configure(**kwargs)


def test_prometheus_with_an_injected_meter_provider_is_rejected() -> None:
    from opentelemetry.sdk.metrics import MeterProvider

    provider = MeterProvider()
    try:
        with pytest.raises(ConfigError, match="PrometheusMetricReader"):
            faithtrace.configure(meter_provider=provider, prometheus=0)
    finally:
        provider.shutdown()


def test_option_objects_are_frozen_and_validated() -> None:
    options = CaptureOptions(redact=str.lower)
    with pytest.raises(ValueError, match="frozen"):
        options.content = False  # type: ignore[misc]
    with pytest.raises(ValueError, match="queue_size"):
        WorkerOptions(queue_size=0)
    with pytest.raises(ValueError, match="max_claim_events"):
        CaptureOptions(max_claim_events=1000)
