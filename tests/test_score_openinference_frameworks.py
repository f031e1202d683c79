# ruff: noqa: F811 - pytest fixtures imported from the fixture modules are parameters here
"""``score_openinference()`` with no decorator on real LlamaIndex engines and LangChain retrieval chains (mock
LLMs and embeddings), traced by their real OpenInference instrumentations: sync, async and streaming.

The scripted LLMs answer ``ANSWER`` in ``CHUNKS``. It rewords the document, so its claims go to the judge (a
claim a document contains word for word would be proven in code and never asked): what the judge was asked
is then exactly what the trace assembly found. One claim is supported and one is not, so the score (0.5)
shows the whole answer was judged against the retrieved document.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import faithtrace
from _fake_judge import FakeJudge, fake_judge  # noqa: F401
from faithtrace._telemetry import names as n

llama_core = pytest.importorskip("llama_index.core")
oi_llama = pytest.importorskip("openinference.instrumentation.llama_index")
oi_langchain = pytest.importorskip("openinference.instrumentation.langchain")

from langchain_core.embeddings import DeterministicFakeEmbedding  # noqa: E402
from langchain_core.language_models import GenericFakeChatModel  # noqa: E402
from langchain_core.messages import AIMessage  # noqa: E402
from langchain_core.output_parsers import StrOutputParser  # noqa: E402
from langchain_core.prompts import ChatPromptTemplate  # noqa: E402
from langchain_core.runnables import Runnable, RunnableParallel, RunnablePassthrough  # noqa: E402
from langchain_core.vectorstores import InMemoryVectorStore  # noqa: E402
from llama_index.core import Document, VectorStoreIndex  # noqa: E402
from llama_index.core.chat_engine.types import StreamingAgentChatResponse  # noqa: E402
from llama_index.core.embeddings import MockEmbedding  # noqa: E402

import _llama_llm  # noqa: E402

pytestmark = pytest.mark.timeout(120)

CONTEXT = "Paris is the capital of France. The Seine flows through Paris."
QUESTION = "What is the capital of France?"
# Claim 1 rewords the document (judged, supported); claim 2 is not in it (judged, idk).
ANSWER = "The capital of France is Paris. Paris has about two million inhabitants."
CHUNKS = ["The capital ", "of France ", "is Paris. ", "Paris has ", "about two million ", "inhabitants."]


class ScriptedLLM(_llama_llm.ScriptedLLM):
    answer = ANSWER
    chunks = CHUNKS


def _app(fake_judge: FakeJudge, instrumentor: Any) -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    tp = TracerProvider(resource=Resource.create({"service.name": "rag-app"}))
    tp.add_span_processor(SimpleSpanProcessor(exporter))
    instrumentor.instrument(tracer_provider=tp)
    faithtrace.configure(tracer_provider=tp, judge=fake_judge.settings())
    try:
        faithtrace.score_openinference(tp)
        yield tp, exporter
    finally:
        instrumentor.uninstrument()
        faithtrace.shutdown(5)


@pytest.fixture
def llama_app(fake_judge: FakeJudge) -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    yield from _app(fake_judge, oi_llama.LlamaIndexInstrumentor())


@pytest.fixture
def langchain_app(fake_judge: FakeJudge) -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    yield from _app(fake_judge, oi_langchain.LangChainInstrumentor())


def _tagged(text: str, tag: str) -> str | None:
    m = re.search(rf"<{tag}(?:\s[^>]*)?>\n?(.*?)\n?</{tag}>", text, re.DOTALL)
    return m.group(1).strip() if m else None


def _asked(fake_judge: FakeJudge, step: str) -> list[str]:
    """The user prompts the judge received for ``step``."""
    from _fake_judge import step_of

    with fake_judge.lock:
        bodies = list(fake_judge.requests)
    return [
        next(m for m in body["messages"] if m["role"] == "user")["content"]
        for body in bodies
        if step_of(body) == step
    ]


def _evaluated(exporter: InMemorySpanExporter, fake_judge: FakeJudge) -> tuple[ReadableSpan, ReadableSpan]:
    """The one evaluation span and the app's root span it belongs to, after checking what was judged."""
    assert faithtrace.flush(30)
    spans = exporter.get_finished_spans()
    retrievers = [s for s in spans if (s.attributes or {}).get(n.OPENINFERENCE_SPAN_KIND) == "RETRIEVER"]
    assert retrievers, "the instrumentation recorded the retrieval"
    trace_id = retrievers[0].context.trace_id
    (root,) = [s for s in spans if s.parent is None and s.context.trace_id == trace_id]
    (evaluation,) = [s for s in spans if s.name == n.EVALUATION_SPAN]
    attrs = dict(evaluation.attributes or {})
    # A trace of its own (the app's spans were exported before scoring), linked to the app's root RAG span
    # (not to an LLM or stream span).
    assert evaluation.context.trace_id != trace_id
    assert evaluation.parent is None
    assert [link.context.span_id for link in evaluation.links] == [root.context.span_id]
    assert attrs[n.FUNCTION] == root.name
    assert attrs[n.EVAL_OUTCOME] == "scored"
    assert attrs[n.GEN_AI_EVALUATION_SCORE_VALUE] == 0.5
    # What the judge was asked: the whole answer (every chunk; its claims are split in code) against the
    # retrieved document.
    (verdicts_prompt,) = _asked(fake_judge, "verdicts")
    claims = re.findall(r"^\d+\. (.*)$", _tagged(verdicts_prompt, "claims") or "", re.MULTILINE)
    assert " ".join(claims) == ANSWER
    assert _tagged(verdicts_prompt, "document") == CONTEXT
    # No second copy of the app's RAG content: faithtrace adds nothing to the app's trace, only the evaluation
    # span and its judge call in their own (the judge's prompt is on the call's span only when content capture
    # is on), and the evaluation span carries neither the question nor the documents: its input is the answer
    # it judged, as every evaluation span's is.
    assert not [s for s in spans if s.context.trace_id == trace_id and _scope(s) == "faithtrace"]
    ours = [s for s in spans if s.context.trace_id == evaluation.context.trace_id]
    assert sorted(s.name for s in ours) == ["chat openai/fake-judge", n.EVALUATION_SPAN]
    text = json.dumps(attrs)
    assert "retrieval.documents." not in text
    assert QUESTION not in text
    assert CONTEXT not in text
    assert attrs[n.INPUT_VALUE] == ANSWER
    return evaluation, root


def _scope(span: ReadableSpan) -> str | None:
    return span.instrumentation_scope.name if span.instrumentation_scope else None


def _no_evaluation_yet(exporter: InMemorySpanExporter) -> None:
    """Flushing while the caller still reads the stream must not score a partial (or empty) answer."""
    assert faithtrace.flush(10)
    assert not [s for s in exporter.get_finished_spans() if s.name == n.EVALUATION_SPAN]


# --- LlamaIndex ---------------------------------------------------------------------------------------------
def _index() -> VectorStoreIndex:
    return VectorStoreIndex.from_documents([Document(text=CONTEXT)], embed_model=MockEmbedding(embed_dim=8))


def test_llamaindex_query(llama_app: Any, fake_judge: FakeJudge) -> None:
    _tp, exporter = llama_app
    response = _index().as_query_engine(llm=ScriptedLLM()).query(QUESTION)
    assert response.response == ANSWER
    _evaluation, root = _evaluated(exporter, fake_judge)
    assert root.name == "RetrieverQueryEngine.query"


async def test_llamaindex_async_query(llama_app: Any, fake_judge: FakeJudge) -> None:
    _tp, exporter = llama_app
    response = await _index().as_query_engine(llm=ScriptedLLM()).aquery(QUESTION)
    assert response.response == ANSWER
    _evaluated(exporter, fake_judge)


def test_llamaindex_streaming_query(llama_app: Any, fake_judge: FakeJudge) -> None:
    _tp, exporter = llama_app
    response = _index().as_query_engine(llm=ScriptedLLM(), streaming=True).query(QUESTION)
    _no_evaluation_yet(exporter)
    assert list(response.response_gen) == CHUNKS
    _evaluation, root = _evaluated(exporter, fake_judge)
    # The root query span records the generator, not the answer; the answer came from the LLM span.
    assert "<generator object>" in (root.attributes or {})[n.OUTPUT_VALUE]


async def test_llamaindex_async_streaming_query(llama_app: Any, fake_judge: FakeJudge) -> None:
    _tp, exporter = llama_app
    response = await _index().as_query_engine(llm=ScriptedLLM(), streaming=True).aquery(QUESTION)
    _no_evaluation_yet(exporter)
    assert [chunk async for chunk in response.async_response_gen()] == CHUNKS
    _evaluated(exporter, fake_judge)


def test_llamaindex_streaming_chat_engine(llama_app: Any, fake_judge: FakeJudge) -> None:
    _tp, exporter = llama_app
    engine = _index().as_chat_engine(llm=ScriptedLLM(), chat_mode="context")
    response = engine.stream_chat(QUESTION)
    assert isinstance(response, StreamingAgentChatResponse)
    # This engine's root span has already ended, with an empty response: the trace waits for the stream.
    assert [s for s in exporter.get_finished_spans() if s.name == "ContextChatEngine.stream_chat"]
    _no_evaluation_yet(exporter)
    assert list(response.response_gen) == CHUNKS
    _evaluated(exporter, fake_judge)


# --- LangChain ----------------------------------------------------------------------------------------------
def _chain() -> Runnable[Any, Any]:
    """A retrieval chain shaped like ``create_retrieval_chain``'s: ``{"input", "context", "answer"}``."""
    store = InMemoryVectorStore.from_texts([CONTEXT], DeterministicFakeEmbedding(size=8))
    retriever = store.as_retriever(search_kwargs={"k": 1})
    prompt = ChatPromptTemplate.from_messages([("system", "Answer from: {context}"), ("human", "{input}")])
    chat = GenericFakeChatModel(messages=iter([AIMessage(content=ANSWER)] * 2))
    return RunnableParallel(context=retriever, input=RunnablePassthrough()).assign(
        answer=prompt | chat | StrOutputParser()
    )


def _lc_root(root: ReadableSpan) -> None:
    # The root's output repeats the question under "input": the answer is read from its "answer" field.
    output = json.loads((root.attributes or {})[n.OUTPUT_VALUE])
    assert (output["input"], output["answer"]) == (QUESTION, ANSWER)


def test_langchain_retrieval_chain(langchain_app: Any, fake_judge: FakeJudge) -> None:
    _tp, exporter = langchain_app
    assert _chain().invoke(QUESTION)["answer"] == ANSWER
    _evaluation, root = _evaluated(exporter, fake_judge)
    _lc_root(root)


async def test_langchain_async_retrieval_chain(langchain_app: Any, fake_judge: FakeJudge) -> None:
    _tp, exporter = langchain_app
    assert (await _chain().ainvoke(QUESTION))["answer"] == ANSWER
    _evaluation, root = _evaluated(exporter, fake_judge)
    _lc_root(root)


def test_langchain_streamed_retrieval_chain(langchain_app: Any, fake_judge: FakeJudge) -> None:
    _tp, exporter = langchain_app
    stream = _chain().stream(QUESTION)
    first = next(stream)
    _no_evaluation_yet(exporter)
    received = [first, *stream]
    answer_chunks = [c["answer"] for c in received if "answer" in c]
    assert "".join(answer_chunks) == ANSWER
    assert len(answer_chunks) > 1  # really streamed
    _evaluated(exporter, fake_judge)


async def test_langchain_async_streamed_retrieval_chain(langchain_app: Any, fake_judge: FakeJudge) -> None:
    _tp, exporter = langchain_app
    received = [chunk async for chunk in _chain().astream(QUESTION)]
    assert "".join(c.get("answer", "") for c in received) == ANSWER
    _evaluated(exporter, fake_judge)


def test_a_retrieval_without_an_answer_is_counted_not_scored(llama_app: Any, fake_judge: FakeJudge) -> None:
    """A bare retriever call is a RAG trace with nothing that answers: it is reported by reason, and no
    other span (nor the documents) is scored as its answer."""
    tp, exporter = llama_app
    nodes = _index().as_retriever().retrieve(QUESTION)
    assert nodes
    assert faithtrace.flush(10)
    assert not [s for s in exporter.get_finished_spans() if s.name == n.EVALUATION_SPAN]
    assert faithtrace.score_openinference(tp).incomplete == {"no_answer": 1}
    assert fake_judge.requests == []
