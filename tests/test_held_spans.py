# ruff: noqa: F811  (the fixtures are imported into this module by name, see tests/_trace_fixtures.py)
"""A RAG span held for its evaluation is held within bounds: its deadline, the worker's queue, shutdown.

The judge's replies come from the fake judge, slowed down or hung; the decorator, the worker, the OTel SDK and
its in-memory exporter are real.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

import faithtrace
from _fake_judge import fake_judge  # noqa: F401  (fixture)
from _trace_fixtures import CONTEXT, FAITHFUL, QUESTION, clean_env, ft, judge_root_of, point  # noqa: F401
from faithtrace import WorkerOptions, trace_faithfulness
from faithtrace._telemetry import names as n
from faithtrace.testing import FaithtraceCapture


def _released(ft: FaithtraceCapture, reason: str) -> int:
    found = point(ft, n.METRIC_HOLD_RELEASES, **{n.HOLD_REASON: reason})
    return int(found.value) if found is not None else 0


def _rag_spans(ft: FaithtraceCapture, name: str) -> list[Any]:
    # Read the exporter directly: the fixture's helpers would wait for the worker first.
    return [s for s in ft.span_exporter.get_finished_spans() if s.name == name]


def _wait_for(what: str, check: Any, timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (found := check()):
        assert time.monotonic() < deadline, f"{what} did not happen within {timeout} s"
        time.sleep(0.02)
    return found


def test_a_span_past_its_hold_deadline_is_exported_and_its_evaluation_follows_in_a_linked_trace(
    ft: FaithtraceCapture, fake_judge: Any
) -> None:
    fake_judge.delay_s = 1.5  # the judge takes longer than the hold
    ft.configure(judge=fake_judge.settings(), worker=WorkerOptions(hold_timeout_s=0.3))
    deadline_before = _released(ft, n.HOLD_DEADLINE)

    @trace_faithfulness(name="slow-judge")
    def answer(question: str, contexts: list[str]) -> str:
        return FAITHFUL

    started = time.time_ns()
    answer(QUESTION, [CONTEXT])
    returned = time.time_ns()
    returned_at = time.monotonic()
    (rag,) = _wait_for("the deadline export", lambda: _rag_spans(ft, "slow-judge"))
    exported_after = time.monotonic() - returned_at
    # Exported at its deadline (give or take the dispatcher's turn), long before the judge answered, with
    # the call's own timing and without an evaluation: it says where that goes instead.
    assert 0.25 <= exported_after < 1.2, exported_after
    assert started <= rag.start_time <= rag.end_time <= returned
    assert rag.attributes[n.HOLD_REASON] == n.HOLD_DEADLINE
    assert rag.attributes[n.EVAL_PLACEMENT] == n.PLACEMENT_LINKED
    assert n.GEN_AI_EVALUATION_SCORE_VALUE not in rag.attributes
    assert rag.events == ()
    assert point(ft, n.METRIC_HELD_SPANS).value == 0
    assert _released(ft, n.HOLD_DEADLINE) == deadline_before + 1

    # The evaluation, once done, goes where placement "linked" puts it: a trace of its own, linked to the
    # RAG span, with every event, under "<service>-faithtrace"; the RAG span is not touched again.
    assert faithtrace.flush(30)
    (evaluation,) = ft.evaluation_spans()
    assert evaluation.name == n.EVALUATION_SPAN
    assert evaluation.parent is None
    assert [link.context.span_id for link in evaluation.links] == [rag.context.span_id]
    assert evaluation.attributes[n.EVAL_PLACEMENT] == n.PLACEMENT_LINKED
    assert evaluation.attributes[n.EVAL_RAG_SPAN_ID] == f"{rag.context.span_id:016x}"
    assert evaluation.attributes[n.GEN_AI_EVALUATION_SCORE_VALUE] == 1.0
    assert evaluation.resource.attributes["service.name"].endswith(n.OWN_TRACES_SUFFIX)
    assert any(n.is_claim_event(e.name) for e in evaluation.events)
    assert _rag_spans(ft, "slow-judge") == [rag]


def test_shutdown_exports_every_held_span_within_its_deadline(ft: FaithtraceCapture, fake_judge: Any) -> None:
    fake_judge.hang()
    shutdown_before = _released(ft, n.HOLD_SHUTDOWN)

    @trace_faithfulness(name="hung-judge")
    def answer(question: str, contexts: list[str]) -> str:
        return FAITHFUL

    ends = []
    for _ in range(3):
        answer(QUESTION, [CONTEXT])
        ends.append(time.time_ns())
    assert faithtrace.flush(10, evaluations=False)
    assert _rag_spans(ft, "hung-judge") == []  # held: their evaluations hang on the judge
    assert point(ft, n.METRIC_HELD_SPANS).value == 3

    started = time.monotonic()
    report = faithtrace.shutdown(timeout=1.0)
    took = time.monotonic() - started
    assert took < 1.0 + 0.6, took  # its deadline, plus the fraction of a second it may overrun
    assert report.released_spans == 3
    assert report.dropped == 3  # the evaluations themselves are lost, and counted
    spans = _rag_spans(ft, "hung-judge")
    assert len(spans) == 3
    for span, end in zip(sorted(spans, key=lambda s: s.end_time), ends, strict=True):
        assert span.end_time <= end  # each at its own call's end
        assert span.attributes[n.HOLD_REASON] == n.HOLD_SHUTDOWN
        assert span.attributes[n.SAMPLED] is True
    assert _released(ft, n.HOLD_SHUTDOWN) == shutdown_before + 3


def test_held_spans_count_toward_the_queue_bound(ft: FaithtraceCapture, fake_judge: Any) -> None:
    fake_judge.hang()
    ft.configure(judge=fake_judge.settings(max_concurrency=1), worker=WorkerOptions(queue_size=2))

    @trace_faithfulness(name="busy")
    def answer(question: str, contexts: list[str]) -> str:
        return FAITHFUL

    for _ in range(6):
        answer(QUESTION, [CONTEXT])
        time.sleep(0.05)  # each handed over before the next, so the one running is out of the queue
    assert faithtrace.flush(10, evaluations=False)
    # One evaluation runs and two wait: their spans are held. The other three found the queue full: their
    # spans are exported at once, marked, and their evaluations counted as dropped.
    assert point(ft, n.METRIC_HELD_SPANS).value == 3
    dropped = _rag_spans(ft, "busy")
    assert len(dropped) == 3
    assert all(s.attributes[n.SAMPLING_REASON] == n.SAMPLING_REASON_QUEUE_FULL for s in dropped)
    assert all(n.HOLD_REASON not in s.attributes for s in dropped)
    assert point(ft, n.METRIC_EVALUATIONS, **{n.FUNCTION: "busy", n.OUTCOME: "dropped"}).value == 3


@pytest.mark.parametrize("placement", ["child", "linked"])
def test_other_placements_hold_nothing(ft: FaithtraceCapture, fake_judge: Any, placement: str) -> None:
    fake_judge.hang()
    ft.configure(judge=fake_judge.settings(), evaluation_placement=placement)

    @trace_faithfulness(name="not-held")
    def answer(question: str, contexts: list[str]) -> str:
        return FAITHFUL

    answer(QUESTION, [CONTEXT])
    assert faithtrace.flush(10, evaluations=False)
    (rag,) = _rag_spans(ft, "not-held")
    assert rag.attributes[n.SAMPLED] is True
    assert point(ft, n.METRIC_HELD_SPANS).value == 0


def test_a_span_evaluated_in_time_is_released_once_with_its_evaluation(
    ft: FaithtraceCapture, fake_judge: Any
) -> None:
    fake_judge.delay_s = 0.2
    ft.configure(judge=fake_judge.settings(), worker=WorkerOptions(hold_timeout_s=5.0))
    before = {r: _released(ft, r) for r in n.HOLD_REASONS}

    @trace_faithfulness(name="in-time")
    def answer(question: str, contexts: list[str]) -> str:
        return FAITHFUL

    answer(QUESTION, [CONTEXT])
    assert faithtrace.flush(30)
    (rag,) = ft.spans("in-time")
    assert rag.attributes[n.EVAL_PLACEMENT] == n.PLACEMENT_RAG_SPAN
    assert n.HOLD_REASON not in rag.attributes
    assert judge_root_of(ft, rag).attributes[n.EVAL_RAG_SPAN_ID] == f"{rag.context.span_id:016x}"
    after = {r: _released(ft, r) for r in n.HOLD_REASONS}
    assert {r: after[r] - before[r] for r in n.HOLD_REASONS} == {"evaluated": 1, "deadline": 0, "shutdown": 0}
