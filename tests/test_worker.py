"""The background worker: judge failures, timeouts, a full queue, flush/shutdown and fork safety."""

# ruff: noqa: F811  (the fixtures are imported into this module by name, see tests/_trace_fixtures.py)

from __future__ import annotations

import os
import time
from typing import Any

import pytest
from opentelemetry.sdk.trace import SpanProcessor
from opentelemetry.trace import StatusCode

import faithtrace
from _fake_judge import fake_judge  # noqa: F401  (fixture)
from _trace_fixtures import CONTEXT, FAITHFUL, QUESTION, clean_env, evaluation_of, ft, judge_root_of, point  # noqa: F401
from faithtrace import WorkerOptions, trace_faithfulness
from faithtrace._telemetry import names as n
from faithtrace.testing import FaithtraceCapture


def _wait_until(predicate: Any, timeout: float = 30.0) -> None:
    """Poll for a state change in another thread (a bound on waiting, never an assertion on time)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached")
        time.sleep(0.01)


@pytest.mark.parametrize(
    ("script", "error_type", "call_failed"),
    [
        (lambda fake: fake.fail(500), "judge_server_error", True),
        (lambda fake: fake.fail(429), "rate_limited", True),
        (lambda fake: fake.garbage(), "judge_output_invalid", False),
    ],
    ids=["500", "429", "garbage"],
)
def test_judge_failure_gives_an_error_span_and_the_app_is_unaffected(
    ft: FaithtraceCapture, fake_judge: Any, script: Any, error_type: str, call_failed: bool
) -> None:
    @trace_faithfulness
    def answer(question: str, contexts: list[str]) -> str:
        return FAITHFUL

    script(fake_judge)
    assert answer(QUESTION, [CONTEXT]) == FAITHFUL
    assert ft.flush()
    (rag,) = ft.spans(answer.__qualname__)
    # The evaluation is on the RAG span, and its failure is the evaluation's, never the app's call's.
    assert evaluation_of(ft, rag) is rag
    assert rag.status.status_code is StatusCode.UNSET
    assert n.ERROR_TYPE not in rag.attributes
    assert rag.attributes[n.EVAL_ERROR_TYPE] == error_type
    assert rag.attributes[n.EVAL_ERROR_MESSAGE]
    assert rag.attributes[n.EVAL_OUTCOME] == "error"
    assert n.GEN_AI_EVALUATION_SCORE_VALUE not in rag.attributes
    (event,) = [e for e in rag.events if e.name == n.GEN_AI_EVALUATION_RESULT_EVENT]
    assert event.attributes[n.ERROR_TYPE] == error_type
    # The judge's trace says it failed.
    judge = judge_root_of(ft, rag)
    assert judge.status.status_code is StatusCode.ERROR
    assert judge.attributes[n.ERROR_TYPE] == error_type
    # The request still has its client span; an HTTP failure is marked on it.
    (call,) = [s for s in ft.spans() if s.parent and s.parent.span_id == judge.context.span_id]
    assert (n.ERROR_TYPE in call.attributes) is call_failed
    assert (call.status.status_code is StatusCode.ERROR) is call_failed
    assert point(ft, n.METRIC_EVALUATIONS, **{n.FUNCTION: answer.__qualname__, n.OUTCOME: "error"}).value == 1
    assert point(ft, n.METRIC_SCORE) is None


def test_evaluation_timeout(ft: FaithtraceCapture, fake_judge: Any) -> None:
    ft.configure(judge=fake_judge.settings(), worker=WorkerOptions(evaluation_timeout_s=0.3))

    @trace_faithfulness
    def answer(question: str, contexts: list[str]) -> str:
        return FAITHFUL

    fake_judge.hang()
    assert answer(QUESTION, [CONTEXT]) == FAITHFUL
    assert ft.flush()
    (evaluation,) = ft.evaluation_spans()
    assert evaluation.attributes[n.EVAL_ERROR_TYPE] == "timeout"
    assert evaluation.status.status_code is StatusCode.UNSET  # the RAG span: the app's call succeeded


def test_judge_request_timeout(ft: FaithtraceCapture, fake_judge: Any) -> None:
    ft.configure(judge=fake_judge.settings(timeout_s=0.3))

    @trace_faithfulness
    def answer(question: str, contexts: list[str]) -> str:
        return FAITHFUL

    fake_judge.hang()
    answer(QUESTION, [CONTEXT])
    assert ft.flush()
    (evaluation,) = ft.evaluation_spans()
    assert evaluation.attributes[n.EVAL_ERROR_TYPE] == "timeout"
    assert evaluation.attributes[n.EVAL_LLM_CALLS] == 1


def test_full_queue_drops_and_counts_without_blocking(ft: FaithtraceCapture, fake_judge: Any) -> None:
    ft.configure(judge=fake_judge.settings(max_concurrency=1), worker=WorkerOptions(queue_size=1))

    @trace_faithfulness
    def answer(question: str, contexts: list[str]) -> str:
        return FAITHFUL

    fake_judge.hang()
    answer(QUESTION, [CONTEXT])  # taken by the worker: its first judge request hangs
    _wait_until(lambda: len(fake_judge.requests) == 1)
    results = [answer(QUESTION, [CONTEXT]) for _ in range(4)]  # one waits in the queue, three are dropped
    assert results == [FAITHFUL] * 4
    assert (
        point(
            ft, n.METRIC_EVALUATIONS, **{n.FUNCTION: answer.__qualname__, n.OUTCOME: n.OUTCOME_DROPPED}
        ).value
        == 3
    )
    dropped = [s for s in ft.spans(answer.__qualname__) if s.attributes[n.SAMPLED] is False]
    assert len(dropped) == 3
    assert all(s.attributes[n.SAMPLING_REASON] == "queue_full" for s in dropped)
    assert point(ft, n.METRIC_QUEUE_DEPTH).value == 2  # one running, one waiting
    fake_judge.release.set()
    assert ft.flush()
    assert len(ft.evaluation_spans()) == 2


def test_flush_times_out_while_the_judge_hangs(ft: FaithtraceCapture, fake_judge: Any) -> None:
    @trace_faithfulness
    def answer(question: str, contexts: list[str]) -> str:
        return FAITHFUL

    fake_judge.hang()
    answer(QUESTION, [CONTEXT])
    assert faithtrace.flush(timeout=0.2) is False
    fake_judge.release.set()
    assert faithtrace.flush() is True
    (evaluation,) = ft.evaluation_spans()
    assert evaluation.attributes[n.EVAL_OUTCOME] == "error"


def test_shutdown_finishes_queued_work_then_passes_through(ft: FaithtraceCapture, fake_judge: Any) -> None:
    @trace_faithfulness
    def answer(question: str, contexts: list[str]) -> str:
        return FAITHFUL

    answer(QUESTION, [CONTEXT])
    faithtrace.shutdown(timeout=30)
    assert len(ft.evaluation_spans()) == 1
    assert answer(QUESTION, [CONTEXT]) == FAITHFUL  # after shutdown: no span, no evaluation
    assert len(ft.spans(answer.__qualname__)) == 1
    assert faithtrace.flush() is True


def test_scores_in_a_forked_child(ft: FaithtraceCapture, fake_judge: Any) -> None:
    @trace_faithfulness
    def answer(question: str, contexts: list[str]) -> str:
        return FAITHFUL

    answer(QUESTION, [CONTEXT])  # the parent's worker thread is running when we fork
    assert ft.flush()
    parent_requests = len(fake_judge.requests)
    pid = os.fork()
    if pid == 0:  # child: only this thread survived the fork; the worker must come back by itself
        code = 1
        try:
            ft.clear()
            answer(QUESTION, [CONTEXT])
            if faithtrace.flush(timeout=60) and len(ft.evaluation_spans()) == 1:
                code = 0
        finally:
            os._exit(code)
    deadline = time.monotonic() + 120
    status = None
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.05)
    else:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        raise AssertionError("the forked child did not finish")
    assert os.waitstatus_to_exitcode(status) == 0
    assert len(fake_judge.requests) > parent_requests  # the child's evaluation reached the judge
    # The parent still works after its child forked.
    answer(QUESTION, [CONTEXT])
    assert ft.flush()
    assert len(ft.evaluation_spans()) == 2


async def test_runs_off_the_host_event_loop(ft: FaithtraceCapture, fake_judge: Any) -> None:
    import asyncio
    import threading

    @trace_faithfulness
    async def answer(question: str, contexts: list[str]) -> str:
        return FAITHFUL

    await answer(QUESTION, [CONTEXT])
    host_loop = asyncio.get_running_loop()
    workers = [t for t in threading.enumerate() if t.name == "faithtrace-loop"]
    assert len(workers) == 1
    assert workers[0] is not threading.current_thread()
    assert ft.flush()
    assert not host_loop.is_closed()
    assert len(ft.evaluation_spans()) == 1


@pytest.mark.slow
def test_interpreter_exit_finishes_queued_evaluations(fake_judge: Any) -> None:
    import subprocess
    import sys
    import textwrap

    s = fake_judge.settings()
    script = f"""
        import atexit
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
        exporter = InMemorySpanExporter()
        # Registered before faithtrace is imported, so it runs after faithtrace's own exit handler.
        scored = lambda span: any(e.name == "gen_ai.evaluation.result" for e in span.events)
        atexit.register(lambda: print("evaluations:", sum(map(scored, exporter.get_finished_spans()))))
        import faithtrace
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        faithtrace.configure(tracer_provider=provider, judge=faithtrace.JudgeSettings(
            model={s.model!r}, api_base={s.api_base!r}, api_key="x", max_retries=0))
        @faithtrace.trace_faithfulness
        def answer(question, contexts):
            return "Paris is the capital of France."
        answer("q", ["Paris is the capital of France."])
        answer("q", ["Paris is the capital of France."])
        """  # no flush(): exiting must finish the queued work (FAITHTRACE_SHUTDOWN_TIMEOUT bounds the wait)
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAITHTRACE_")}
    env["FAITHTRACE_SHUTDOWN_TIMEOUT"] = "60"
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "evaluations: 2", proc.stderr[-3000:]


def test_internal_errors_are_swallowed_counted_and_warned_outside_tests(
    ft: FaithtraceCapture, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from faithtrace._common import safety as _internal
    from faithtrace._telemetry import spans

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("a faithtrace bug")

    @trace_faithfulness
    def answer(question: str, contexts: list[str]) -> str:
        return FAITHFUL

    monkeypatch.setattr(spans, "rag_attributes", broken)
    # The span is finished on the worker, so even in strict mode the call itself is untouched; the bug
    # surfaces at the next flush, as scoring bugs do.
    assert answer(QUESTION, [CONTEXT]) == FAITHFUL
    with pytest.raises(RuntimeError, match="a faithtrace bug"):
        ft.flush()
    monkeypatch.setattr(_internal, "raise_internal_errors", False)  # as in production
    monkeypatch.setattr(_internal, "_last_warned", {})  # the warning is once a minute, process-wide
    before = point(ft, n.METRIC_INTERNAL_ERRORS).value
    assert [answer(QUESTION, [CONTEXT]) for _ in range(3)] == [FAITHFUL] * 3
    assert point(ft, n.METRIC_INTERNAL_ERRORS).value == before + 3
    warnings = [r.getMessage() for r in caplog.records if "internal error" in r.getMessage()]
    assert len(warnings) == 1  # rate-limited
    assert "your code is unaffected" in warnings[0]


# --- the hand-off: spans are finished on the worker ---------------------------------------------------------
class _BlockingProcessor(SpanProcessor):
    """A host span processor whose ``on_end`` blocks on faithtrace's dispatcher thread until released: a slow
    exporter, as far as faithtrace can tell."""

    def __init__(self) -> None:
        import threading

        self.release = threading.Event()
        self.blocked = threading.Event()

    def on_end(self, span: Any) -> None:
        import threading

        if threading.current_thread().name == "faithtrace-dispatch" and not self.release.is_set():
            self.blocked.set()
            self.release.wait(30)


def test_the_span_ends_when_the_call_returned_not_when_the_worker_got_to_it(ft: FaithtraceCapture) -> None:
    blocking = _BlockingProcessor()
    ft.tracer_provider.add_span_processor(blocking)

    @trace_faithfulness
    def answer(question: str, contexts: list[str]) -> str:
        return FAITHFUL

    answer(QUESTION, [CONTEXT])  # its end blocks the dispatcher
    _wait_until(blocking.blocked.is_set)
    before = time.time_ns()
    answer(QUESTION, [CONTEXT])  # waits in the inbox while the dispatcher is stuck
    after = time.time_ns()
    time.sleep(0.3)
    blocking.release.set()
    assert ft.flush()
    second = max(ft.spans(answer.__qualname__), key=lambda s: s.start_time)
    assert before <= second.start_time <= second.end_time <= after
    assert second.attributes[n.SAMPLED] is True


def test_a_full_inbox_is_finished_on_the_host_thread(
    ft: FaithtraceCapture, fake_judge: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from faithtrace._runtime import runtime as _runtime

    monkeypatch.setattr(_runtime, "_INBOX_SIZE", 2)
    # A new worker, with the small inbox; the RAG spans are not held for their evaluations, so the test sees
    # each end when it is finished.
    ft.configure(judge=fake_judge.settings(), evaluation_placement="child")
    blocking = _BlockingProcessor()
    ft.tracer_provider.add_span_processor(blocking)

    @trace_faithfulness
    def answer(question: str, contexts: list[str]) -> str:
        return FAITHFUL

    answer(QUESTION, [CONTEXT])
    _wait_until(blocking.blocked.is_set)  # the dispatcher holds the first call
    assert [answer(QUESTION, [CONTEXT]) for _ in range(5)] == [FAITHFUL] * 5
    # Two calls wait in the inbox; the other three found it full and were finished by the caller, at once,
    # each RAG span with its zero-length "retrieved documents" child. The dispatcher is held ending the first
    # call's child (ended just before its RAG span; the in-memory exporter's processor runs before ours).
    finished = ft.span_exporter.get_finished_spans()
    exported = [s for s in finished if s.name == answer.__qualname__]
    assert len(exported) == 3
    assert len(finished) == 1 + 3 * 2
    assert all(s.attributes[n.SAMPLED] is True for s in exported)
    blocking.release.set()
    assert ft.flush()
    assert len(ft.spans(answer.__qualname__)) == 6
    assert len(ft.evaluation_spans()) == 6


@pytest.mark.parametrize("placement", ["child", "rag_span"])
def test_flush_without_evaluations_waits_for_the_spans_only(
    ft: FaithtraceCapture, fake_judge: Any, placement: str
) -> None:
    ft.configure(judge=fake_judge.settings(), evaluation_placement=placement)

    @trace_faithfulness
    def answer(question: str, contexts: list[str]) -> str:
        return FAITHFUL

    fake_judge.hang()
    answer(QUESTION, [CONTEXT])
    assert faithtrace.flush(10, evaluations=False)
    # Read the exporter directly: the fixture's own helpers would wait for the spans themselves.
    finished = ft.span_exporter.get_finished_spans()
    if placement == "child":
        (rag,) = [s for s in finished if s.name == answer.__qualname__]
        assert {s.name for s in finished} == {answer.__qualname__, n.RETRIEVER_SPAN}
        assert rag.attributes[n.SAMPLED] is True
    else:  # the RAG span waits for its evaluation, its documents' child is out
        assert {s.name for s in finished} == {n.RETRIEVER_SPAN}
        assert point(ft, n.METRIC_HELD_SPANS).value == 1
    assert not faithtrace.flush(0.3)  # the evaluation still hangs on the judge


def test_shutdown_ends_every_span_even_when_scoring_cannot_finish(
    ft: FaithtraceCapture, fake_judge: Any
) -> None:
    @trace_faithfulness
    def answer(question: str, contexts: list[str]) -> str:
        return FAITHFUL

    fake_judge.hang()
    for _ in range(3):
        answer(QUESTION, [CONTEXT])
    faithtrace.shutdown(timeout=0.5)
    assert len([s for s in ft.span_exporter.get_finished_spans() if s.name == answer.__qualname__]) == 3


def test_calls_are_finished_without_a_flush_after_an_idle_spell_and_while_calls_keep_coming(
    ft: FaithtraceCapture, fake_judge: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from faithtrace._runtime import worker as _worker

    # Without the one-second safety net, only the handoff's wake-up (dispatcher asleep) or the dispatcher's
    # own polling (calls keep coming) can finish a call: a lost wake-up hangs here instead of hiding for 1 s.
    monkeypatch.setattr(_worker, "_IDLE_WAIT_S", 3600.0)
    monkeypatch.setattr(_worker, "_LINGER_S", 0.2)
    ft.configure(judge=fake_judge.settings())  # a new worker, reading the patched timings

    @trace_faithfulness
    def answer(question: str, contexts: list[str]) -> str:
        return FAITHFUL

    def ended(k: int) -> bool:
        return len([s for s in ft.span_exporter.get_finished_spans() if s.name == answer.__qualname__]) >= k

    for k in range(1, 4):  # the first wakes the sleeping dispatcher, the next ones find it polling
        answer(QUESTION, [CONTEXT])
        _wait_until(lambda k=k: ended(k))
    time.sleep(0.5)  # past the linger: the dispatcher is asleep again
    answer(QUESTION, [CONTEXT])
    _wait_until(lambda: ended(4))
    assert ft.flush()
    assert len(ft.evaluation_spans()) == 4
