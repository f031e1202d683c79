"""Shared set-up for the decorator/worker/telemetry tests: a clean environment and faithtrace wired to the
fake judge and in-memory exporters (through the public ``faithtrace_exporter`` fixture).

Test modules import these fixtures by name rather than through ``pytest_plugins``: a plugin's fixtures are
global, and ``clean_env`` (autouse) must not strip the environment of other modules' tests.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from _fake_judge import FakeJudge
from faithtrace.testing import FaithtraceCapture

CONTEXT = "Paris is the capital of France. The Seine flows through Paris."
# Reworded from CONTEXT, so that it is judged rather than proven in code (the tests watch the judge call).
FAITHFUL = "The capital of France is Paris."
QUESTION = "What is the capital of France?"


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in list(os.environ):
        if var.startswith("FAITHTRACE_") or var.startswith("OTEL_"):
            monkeypatch.delenv(var)


@pytest.fixture
def ft(faithtrace_exporter: FaithtraceCapture, fake_judge: FakeJudge) -> FaithtraceCapture:
    faithtrace_exporter.configure(judge=fake_judge.settings())
    return faithtrace_exporter


def evaluation_of(ft: FaithtraceCapture, rag_span: Any) -> Any:
    """The span carrying ``rag_span``'s evaluation: the RAG span itself (placement ``rag_span``, the default),
    or the evaluation span linked to it (``child``, ``linked``)."""
    rag_id = rag_span.context.span_id
    found = [
        s
        for s in ft.evaluation_spans()
        if s.context.span_id == rag_id or any(link.context.span_id == rag_id for link in s.links)
    ]
    assert len(found) == 1, found
    return found[0]


def judge_root_of(ft: FaithtraceCapture, rag_span: Any) -> Any:
    """The ``evaluate faithfulness`` span heading the trace of the judge's calls for ``rag_span`` (placement
    ``rag_span``): a root of its own, linked to the RAG span."""
    rag_id = rag_span.context.span_id
    found = [
        s
        for s in ft.spans("evaluate faithfulness")
        if s.parent is None and any(link.context.span_id == rag_id for link in s.links)
    ]
    assert len(found) == 1, found
    return found[0]


def point(ft: FaithtraceCapture, metric: str, **attrs: Any) -> Any:
    """The one data point of ``metric`` whose attributes include ``attrs``; None when there is none."""
    found = [p for p in ft.points(metric) if all(p.attributes.get(k) == v for k, v in attrs.items())]
    assert len(found) <= 1, found
    return found[0] if found else None
