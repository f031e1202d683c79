"""@trace_faithfulness on every kind of callable, with the real pipeline and a fake judge behind litellm."""

# ruff: noqa: F811  (the fixtures are imported into this module by name, see tests/_trace_fixtures.py)

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
from opentelemetry.trace import SpanKind, StatusCode

from _fake_judge import fake_judge  # noqa: F401  (fixture)
from _trace_fixtures import CONTEXT, FAITHFUL, QUESTION, clean_env, evaluation_of, ft  # noqa: F401
from faithtrace import trace_faithfulness
from faithtrace._telemetry import names as n
from faithtrace.testing import FaithtraceCapture


@trace_faithfulness
def sync_fn(question: str, contexts: list[str]) -> str:
    return FAITHFUL


@trace_faithfulness
async def async_fn(question: str, contexts: list[str]) -> str:
    return FAITHFUL


@trace_faithfulness
def sync_gen(question: str, contexts: list[str]) -> Iterator[str]:
    yield "The capital of France "
    yield "is Paris."


@trace_faithfulness
async def async_gen(question: str, contexts: list[str]) -> AsyncIterator[str]:
    yield "The capital of France "
    yield "is Paris."


class Bot:
    @trace_faithfulness
    def method(self, question: str, contexts: list[str]) -> str:
        return FAITHFUL

    @trace_faithfulness
    async def amethod(self, question: str, contexts: list[str]) -> str:
        return FAITHFUL

    @trace_faithfulness
    @classmethod
    def cmethod(cls, question: str, contexts: list[str]) -> str:
        return FAITHFUL

    @trace_faithfulness
    @classmethod
    async def acmethod(cls, question: str, contexts: list[str]) -> str:
        return FAITHFUL

    @classmethod
    @trace_faithfulness  # inside: it wraps the plain function, and cls arrives as the first argument
    def inner_cmethod(cls, question: str, contexts: list[str]) -> str:
        return FAITHFUL

    @staticmethod
    @trace_faithfulness
    async def inner_asmethod(question: str, contexts: list[str]) -> str:
        return FAITHFUL

    @trace_faithfulness
    @staticmethod
    def smethod(question: str, contexts: list[str]) -> str:
        return FAITHFUL

    @trace_faithfulness
    @staticmethod
    async def asmethod(question: str, contexts: list[str]) -> str:
        return FAITHFUL

    @trace_faithfulness
    def gen_method(self, question: str, contexts: list[str]) -> Iterator[str]:
        yield FAITHFUL


async def _drain(value: Any) -> Any:
    if inspect.isawaitable(value):
        return await value
    if inspect.isasyncgen(value):
        return "".join([chunk async for chunk in value])
    if inspect.isgenerator(value):
        return "".join(value)
    return value


CASES: dict[str, tuple[Callable[[], Any], str]] = {
    "function": (lambda: sync_fn(QUESTION, [CONTEXT]), "sync_fn"),
    "async function": (lambda: async_fn(QUESTION, contexts=[CONTEXT]), "async_fn"),
    "generator": (lambda: sync_gen(QUESTION, [CONTEXT]), "sync_gen"),
    "async generator": (lambda: async_gen(question=QUESTION, contexts=[CONTEXT]), "async_gen"),
    "method": (lambda: Bot().method(QUESTION, [CONTEXT]), "Bot.method"),
    "method via class": (lambda: Bot.method(Bot(), QUESTION, contexts=[CONTEXT]), "Bot.method"),
    "async method": (lambda: Bot().amethod(QUESTION, [CONTEXT]), "Bot.amethod"),
    "classmethod": (lambda: Bot.cmethod(QUESTION, [CONTEXT]), "Bot.cmethod"),
    "async classmethod": (lambda: Bot().acmethod(QUESTION, [CONTEXT]), "Bot.acmethod"),
    "staticmethod": (lambda: Bot.smethod(QUESTION, [CONTEXT]), "Bot.smethod"),
    "decorator inside classmethod": (lambda: Bot().inner_cmethod(QUESTION, [CONTEXT]), "Bot.inner_cmethod"),
    "decorator inside staticmethod": (lambda: Bot.inner_asmethod(QUESTION, [CONTEXT]), "Bot.inner_asmethod"),
    "async staticmethod": (lambda: Bot().asmethod(QUESTION, [CONTEXT]), "Bot.asmethod"),
    "generator method": (lambda: Bot().gen_method(QUESTION, [CONTEXT]), "Bot.gen_method"),
}


@pytest.mark.parametrize("case", list(CASES))
async def test_every_kind_of_callable_is_traced_and_scored(ft: FaithtraceCapture, case: str) -> None:
    call, span_name = CASES[case]
    assert await _drain(call()) == FAITHFUL
    assert ft.flush()

    (rag,) = ft.spans(span_name)
    attrs = dict(rag.attributes or {})
    assert attrs[n.INPUT_VALUE] == QUESTION
    assert attrs[n.OUTPUT_VALUE] == FAITHFUL
    assert attrs[n.RETRIEVAL_DOCUMENT_CONTENT.format(index=0)] == CONTEXT
    assert attrs[n.CONTEXTS_COUNT] == 1
    assert attrs[n.SAMPLED] is True
    # The evaluation is on the RAG span itself, which ended at the call's own end.
    assert evaluation_of(ft, rag) is rag
    assert attrs[n.GEN_AI_EVALUATION_SCORE_VALUE] == 1.0
    assert attrs[n.GEN_AI_EVALUATION_SCORE_LABEL] == "pass"
    assert attrs[n.EVAL_PLACEMENT] == "rag_span"


def test_signature_and_async_nature_are_preserved() -> None:
    assert inspect.iscoroutinefunction(async_fn)
    assert not inspect.iscoroutinefunction(sync_fn)
    assert inspect.iscoroutinefunction(Bot.amethod)
    assert inspect.iscoroutinefunction(Bot().amethod)
    assert inspect.iscoroutinefunction(Bot.acmethod)
    assert inspect.iscoroutinefunction(Bot.asmethod)
    assert inspect.isgeneratorfunction(sync_gen)
    assert inspect.isasyncgenfunction(async_gen)
    assert str(inspect.signature(sync_fn)) == "(question: 'str', contexts: 'list[str]') -> 'str'"
    assert str(inspect.signature(Bot().method)) == "(question: 'str', contexts: 'list[str]') -> 'str'"
    assert sync_fn.__name__ == "sync_fn"
    assert Bot.cmethod.__qualname__ == "Bot.cmethod"


class Boom(Exception):
    pass


async def test_exceptions_pass_through_untouched_and_are_not_scored(
    ft: FaithtraceCapture, fake_judge: Any
) -> None:
    error = Boom("retrieval failed: password=hunter2")

    @trace_faithfulness
    def failing(question: str, contexts: list[str]) -> str:
        raise error

    @trace_faithfulness
    async def afailing(question: str, contexts: list[str]) -> str:
        raise error

    @trace_faithfulness
    def failing_stream(question: str, contexts: list[str]) -> Iterator[str]:
        yield "Paris"
        raise error

    with pytest.raises(Boom) as info:
        failing(QUESTION, [CONTEXT])
    assert info.value is error
    with pytest.raises(Boom) as ainfo:
        await afailing(QUESTION, [CONTEXT])
    assert ainfo.value is error
    with pytest.raises(Boom) as ginfo:
        list(failing_stream(QUESTION, [CONTEXT]))
    assert ginfo.value is error
    assert ft.flush()

    spans = ft.spans()
    assert sorted(s.name for s in spans) == [
        "test_exceptions_pass_through_untouched_and_are_not_scored.<locals>.afailing",
        "test_exceptions_pass_through_untouched_and_are_not_scored.<locals>.failing",
        "test_exceptions_pass_through_untouched_and_are_not_scored.<locals>.failing_stream",
    ]
    for span in spans:
        assert span.status.status_code is StatusCode.ERROR
        assert [e.name for e in span.events] == ["exception"]
        assert span.events[0].attributes["exception.type"].endswith("Boom")
        assert span.events[0].attributes["exception.message"] == "retrieval failed: password=[REDACTED]"
        assert span.status.description == "Boom: retrieval failed: password=[REDACTED]"
    assert fake_judge.requests == []


async def test_capture_specs_paths_callables_and_name(ft: FaithtraceCapture) -> None:
    class Doc:
        def __init__(self, text: str) -> None:
            self.text = text

    class Response:
        def __init__(self) -> None:
            self.text = FAITHFUL
            self.docs = [Doc(CONTEXT), Doc("Lyon is in France.")]

    @trace_faithfulness(
        query="q", contexts=lambda r: [d.text for d in r.docs], answer="text", name="support-bot"
    )
    async def handle(q: str) -> Response:
        return Response()

    result = await handle(QUESTION)
    assert isinstance(result, Response)
    assert ft.flush()
    (rag,) = ft.spans("support-bot")
    assert rag.attributes[n.FUNCTION] == "support-bot"
    assert rag.attributes[n.INPUT_VALUE] == QUESTION
    assert rag.attributes[n.CONTEXTS_COUNT] == 2
    assert rag.attributes[n.RETRIEVAL_DOCUMENT_CONTENT.format(index=1)] == "Lyon is in France."
    assert evaluation_of(ft, rag).attributes[n.FUNCTION] == "support-bot"


def test_defaults_by_name_keyword_positional_and_result_fields(ft: FaithtraceCapture) -> None:
    @trace_faithfulness
    def answer(q: str, k: int = 3, *, docs: tuple[str, ...] = (CONTEXT,)) -> dict[str, Any]:
        return {"answer": FAITHFUL, "sources": ["ignored: docs argument wins"]}

    @trace_faithfulness(contexts=lambda args, result: args["extra"] + [args["q"]])
    def two_args(q: str, extra: list[str]) -> str:
        return FAITHFUL

    @trace_faithfulness(answer="data.0.reply")
    def nested(question: str) -> dict[str, Any]:
        return {"data": [{"reply": FAITHFUL}], "contexts": [{"content": CONTEXT, "id": 7}]}

    answer(k=1, q=QUESTION)
    two_args(QUESTION, [CONTEXT])
    nested(question=QUESTION)
    assert ft.flush()
    by_name = {
        s.name.rsplit(".", 1)[-1]: dict(s.attributes or {}) for s in ft.spans() if s.kind is SpanKind.INTERNAL
    }
    assert by_name["answer"][n.INPUT_VALUE] == QUESTION
    assert by_name["answer"][n.OUTPUT_VALUE] == FAITHFUL
    assert by_name["answer"][n.RETRIEVAL_DOCUMENT_CONTENT.format(index=0)] == CONTEXT
    assert by_name["two_args"][n.CONTEXTS_COUNT] == 2
    assert by_name["two_args"][n.RETRIEVAL_DOCUMENT_CONTENT.format(index=1)] == QUESTION
    assert by_name["nested"][n.OUTPUT_VALUE] == FAITHFUL
    assert by_name["nested"][n.RETRIEVAL_DOCUMENT_CONTENT.format(index=0)] == CONTEXT
    assert len(ft.evaluation_spans()) == 3


def test_capture_failure_leaves_the_call_alone(ft: FaithtraceCapture, fake_judge: Any) -> None:
    @trace_faithfulness(answer="missing.path")
    def answer(question: str, contexts: list[str]) -> dict[str, str]:
        return {"text": FAITHFUL}

    @trace_faithfulness(contexts=lambda result: 1 / 0)
    def broken_callable(question: str) -> str:
        return FAITHFUL

    @trace_faithfulness
    def no_contexts(question: str) -> str:
        return FAITHFUL

    assert answer(QUESTION, [CONTEXT]) == {"text": FAITHFUL}
    assert broken_callable(QUESTION) == FAITHFUL
    assert no_contexts(QUESTION) == FAITHFUL
    assert ft.flush()
    spans = ft.spans()
    assert len(spans) == 3
    errors = {s.name.rsplit(".", 1)[-1]: s.attributes[n.CAPTURE_ERROR] for s in spans}
    assert "missing" in errors["answer"]
    assert "ZeroDivisionError" in errors["broken_callable"]
    assert "contexts" in errors["no_contexts"]
    assert all(s.attributes[n.SAMPLED] is False for s in spans)
    assert fake_judge.requests == []
    points = [
        p
        for p in ft.points(n.METRIC_EVALUATIONS)
        if p.attributes[n.OUTCOME] == n.OUTCOME_CAPTURE_ERROR
        and "test_capture_failure" in p.attributes[n.FUNCTION]
    ]
    assert sum(p.value for p in points) == 3


def test_rag_span_is_a_child_of_the_current_span(ft: FaithtraceCapture) -> None:
    tracer = ft.tracer_provider.get_tracer("app")
    with tracer.start_as_current_span("http request") as parent:
        sync_fn(QUESTION, [CONTEXT])
    assert ft.flush()
    (rag,) = ft.spans("sync_fn")
    assert rag.parent is not None
    assert rag.parent.span_id == parent.get_span_context().span_id
    assert evaluation_of(ft, rag).context.trace_id == parent.get_span_context().trace_id


def test_generator_closed_early_is_scored_on_what_it_streamed(ft: FaithtraceCapture) -> None:
    @trace_faithfulness
    def stream(question: str, contexts: list[str]) -> Iterator[str]:
        yield "Paris is the capital of France. "
        yield "It never rains in Paris."

    gen = stream(QUESTION, [CONTEXT])
    assert next(gen) == "Paris is the capital of France. "
    gen.close()
    assert ft.flush()
    (rag,) = [s for s in ft.spans() if s.name.endswith("stream")]
    assert rag.attributes[n.OUTPUT_VALUE] == "Paris is the capital of France. "
    assert evaluation_of(ft, rag).attributes[n.GEN_AI_EVALUATION_SCORE_VALUE] == 1.0


async def test_async_generator_closed_early_and_send(ft: FaithtraceCapture) -> None:
    @trace_faithfulness
    async def stream(question: str, contexts: list[str]) -> AsyncIterator[str]:
        yield "Paris is the capital of France. "
        yield "It never rains in Paris."

    @trace_faithfulness
    def echo(question: str, contexts: list[str]) -> Any:
        received = yield "Paris is "
        yield str(received)

    agen = stream(QUESTION, [CONTEXT])
    assert await agen.__anext__() == "Paris is the capital of France. "
    await agen.aclose()
    gen = echo(QUESTION, [CONTEXT])
    assert next(gen) == "Paris is "
    assert gen.send("the capital of France.") == "the capital of France."
    with pytest.raises(StopIteration):
        next(gen)
    assert ft.flush()
    outputs = sorted(s.attributes[n.OUTPUT_VALUE] for s in ft.spans() if s.name.endswith(("stream", "echo")))
    assert outputs == ["Paris is the capital of France.", "Paris is the capital of France. "]
    assert len(ft.evaluation_spans()) == 2


def test_disabled_is_a_pass_through(
    ft: FaithtraceCapture, fake_judge: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    ft.configure(judge=fake_judge.settings(), enabled=False)
    assert sync_fn(QUESTION, [CONTEXT]) == FAITHFUL
    monkeypatch.setenv("FAITHTRACE_ENABLED", "false")
    ft.configure(judge=fake_judge.settings())
    assert "".join(sync_gen(QUESTION, [CONTEXT])) == FAITHFUL
    assert ft.flush()
    assert ft.spans() == []
    assert fake_judge.requests == []


def test_content_switch_redaction_secrets_and_caps(ft: FaithtraceCapture, fake_judge: Any) -> None:
    from faithtrace import CaptureOptions

    secret_answer = (
        FAITHFUL + " Use api_key=sk-abcdefghijklmnopqrstuvwxyz0123 and Bearer abcdefghijklmnop.qrs"
    )
    long_context = CONTEXT + " " + "x" * 500

    @trace_faithfulness
    def leaky(question: str, contexts: list[str]) -> str:
        return secret_answer

    ft.configure(
        judge=fake_judge.settings(), capture=CaptureOptions(max_attribute_chars=120, redact=str.upper)
    )
    leaky(QUESTION, [long_context])
    assert ft.flush()
    (rag,) = ft.spans(leaky.__qualname__)
    output = rag.attributes[n.OUTPUT_VALUE]
    assert "SK-ABC" not in output
    assert "[REDACTED]" in output
    assert output.startswith(FAITHFUL.upper())
    assert len(rag.attributes[n.RETRIEVAL_DOCUMENT_CONTENT.format(index=0)]) == 120
    assert n.RETRIEVAL_DOCUMENT_CONTENT.format(index=0) in rag.attributes[n.TRUNCATED]

    ft.clear()
    ft.configure(judge=fake_judge.settings(), capture=CaptureOptions(content=False))
    leaky(QUESTION, [CONTEXT])
    assert ft.flush()
    (rag,) = ft.spans(leaky.__qualname__)
    assert not any(k in rag.attributes for k in (n.INPUT_VALUE, n.OUTPUT_VALUE))
    (evaluation,) = ft.evaluation_spans()
    claim_events = [e for e in evaluation.events if n.is_claim_event(e.name)]
    assert claim_events
    assert all(n.CLAIM_TEXT not in e.attributes for e in claim_events)
    (result_event,) = [e for e in evaluation.events if e.name == n.GEN_AI_EVALUATION_RESULT_EVENT]
    assert n.GEN_AI_EVALUATION_EXPLANATION not in result_event.attributes


def test_invalid_decorator_arguments_raise() -> None:
    from faithtrace import ConfigError

    with pytest.raises(ConfigError):
        trace_faithfulness(query=42)(lambda question: question)  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        trace_faithfulness(name="")(lambda question: question)
    with pytest.raises(ConfigError):
        trace_faithfulness(answer="question")(lambda question: question)
