"""The bare decorator on real LlamaIndex query engines and LangChain chains (mock LLMs and embeddings, no
network): sync, async and streaming; the caller gets every chunk, and the answer is scored once it has.

The mock LLMs answer a fixed text in several chunks, so that what the caller received can be compared with
what the judge was asked about, chunk for chunk.
"""

# ruff: noqa: F811  (the fixtures are imported into this module by name, see tests/_trace_fixtures.py)

from __future__ import annotations

import asyncio
import gc
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from langchain_core.documents import Document as LCDocument
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_core.language_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import Runnable, RunnableParallel, RunnablePassthrough
from langchain_core.vectorstores import InMemoryVectorStore
from llama_index.core import Document, VectorStoreIndex
from llama_index.core.base.llms.types import CompletionResponse, CompletionResponseGen
from llama_index.core.base.response.schema import AsyncStreamingResponse, Response, StreamingResponse
from llama_index.core.chat_engine.types import StreamingAgentChatResponse
from llama_index.core.embeddings import MockEmbedding
from llama_index.core.llms.callbacks import llm_completion_callback

import _llama_llm
from _fake_judge import fake_judge  # noqa: F401  (fixture)
from _trace_fixtures import CONTEXT, QUESTION, clean_env, evaluation_of, ft, point  # noqa: F401
from faithtrace import trace_faithfulness
from faithtrace._telemetry import names as n
from faithtrace.testing import FaithtraceCapture

ANSWER = "Paris is the capital of France. The Seine flows through Paris."
CHUNKS = ["Paris is ", "the capital ", "of France. ", "The Seine ", "flows through ", "Paris."]


class ScriptedLLM(_llama_llm.ScriptedLLM):
    answer = ANSWER
    chunks = CHUNKS


def _index() -> VectorStoreIndex:
    return VectorStoreIndex.from_documents([Document(text=CONTEXT)], embed_model=MockEmbedding(embed_dim=8))


def _scored(ft: FaithtraceCapture, span_name: str) -> Any:
    assert ft.flush()
    (rag,) = ft.spans(span_name)
    attrs = dict(rag.attributes or {})
    assert n.CAPTURE_ERROR not in attrs, attrs[n.CAPTURE_ERROR]
    assert attrs[n.INPUT_VALUE] == QUESTION
    assert attrs[n.OUTPUT_VALUE] == ANSWER
    assert attrs[n.RETRIEVAL_DOCUMENT_CONTENT.format(index=0)] == CONTEXT
    evaluation = evaluation_of(ft, rag)
    assert evaluation.attributes[n.GEN_AI_EVALUATION_SCORE_VALUE] == 1.0
    return rag


# --- LlamaIndex ---------------------------------------------------------------------------------------------
def test_llamaindex_query_engine(ft: FaithtraceCapture) -> None:
    engine = _index().as_query_engine(llm=ScriptedLLM())

    @trace_faithfulness
    def ask(query: str) -> Any:
        return engine.query(query)

    response = ask(QUESTION)
    assert isinstance(response, Response)
    assert response.response == ANSWER
    _scored(ft, "test_llamaindex_query_engine.<locals>.ask")


async def test_llamaindex_async_query_engine(ft: FaithtraceCapture) -> None:
    engine = _index().as_query_engine(llm=ScriptedLLM())

    @trace_faithfulness
    async def ask(query: str) -> Any:
        return await engine.aquery(query)

    response = await ask(QUESTION)
    assert response.response == ANSWER
    _scored(ft, "test_llamaindex_async_query_engine.<locals>.ask")


def test_llamaindex_streaming_query_engine_gives_the_caller_every_chunk(ft: FaithtraceCapture) -> None:
    engine = _index().as_query_engine(llm=ScriptedLLM(), streaming=True)

    @trace_faithfulness
    def ask(query: str) -> Any:
        return engine.query(query)

    response = ask(QUESTION)
    assert isinstance(response, StreamingResponse)
    # Returned at once, unread: nothing consumed the stream on the request path, and its span is still open.
    assert response.response_txt is None
    assert ft.spans("test_llamaindex_streaming_query_engine_gives_the_caller_every_chunk.<locals>.ask") == []
    assert list(response.response_gen) == CHUNKS
    _scored(ft, "test_llamaindex_streaming_query_engine_gives_the_caller_every_chunk.<locals>.ask")


async def test_llamaindex_async_streaming_query_engine(ft: FaithtraceCapture) -> None:
    engine = _index().as_query_engine(llm=ScriptedLLM(), streaming=True)

    @trace_faithfulness
    async def ask(query: str) -> Any:
        return await engine.aquery(query)

    response = await ask(QUESTION)
    assert isinstance(response, AsyncStreamingResponse)
    assert [chunk async for chunk in response.async_response_gen()] == CHUNKS
    assert response.response_txt == ANSWER
    _scored(ft, "test_llamaindex_async_streaming_query_engine.<locals>.ask")


def test_llamaindex_stream_read_through_its_own_helpers(ft: FaithtraceCapture) -> None:
    engine = _index().as_query_engine(llm=ScriptedLLM(), streaming=True)

    @trace_faithfulness(answer="response_gen")
    def ask(query: str) -> Any:
        return engine.query(query)

    assert str(ask(QUESTION)) == ANSWER  # StreamingResponse.__str__ drains the (watched) generator
    _scored(ft, "test_llamaindex_stream_read_through_its_own_helpers.<locals>.ask")


def test_llamaindex_with_its_openinference_instrumentation(ft: FaithtraceCapture) -> None:
    from openinference.instrumentation.llama_index import LlamaIndexInstrumentor

    instrumentor = LlamaIndexInstrumentor()
    instrumentor.instrument(tracer_provider=ft.tracer_provider)
    try:
        engine = _index().as_query_engine(llm=ScriptedLLM(), streaming=True)

        @trace_faithfulness
        def ask(query: str) -> Any:
            return engine.query(query)

        assert list(ask(QUESTION).response_gen) == CHUNKS
        rag = _scored(ft, "test_llamaindex_with_its_openinference_instrumentation.<locals>.ask")
        # The framework's own spans join the decorated call's trace.
        framework = [s for s in ft.spans() if s.context.trace_id == rag.context.trace_id and s is not rag]
        assert any(s.parent and s.parent.span_id == rag.context.span_id for s in framework)
    finally:
        instrumentor.uninstrument()


def test_a_stream_dropped_unread_ends_its_span_as_a_capture_error(ft: FaithtraceCapture) -> None:
    engine = _index().as_query_engine(llm=ScriptedLLM(), streaming=True)

    @trace_faithfulness(name="dropped")
    def ask(query: str) -> Any:
        return engine.query(query)

    response = ask(QUESTION)
    del response
    gc.collect()
    assert ft.flush()
    (rag,) = ft.spans("dropped")
    assert rag.attributes[n.CAPTURE_ERROR] == "the returned stream was never read"
    assert point(ft, n.METRIC_EVALUATIONS, **{n.OUTCOME: n.OUTCOME_CAPTURE_ERROR}).value == 1


class GatedLLM(ScriptedLLM):
    """``ScriptedLLM`` whose stream holds its last chunk until ``gate`` is set (a slow LLM)."""

    gate: Any = None

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponseGen:
        text = ""
        for i, chunk in enumerate(CHUNKS):
            if i == len(CHUNKS) - 1:
                assert self.gate.wait(30)
            text += chunk
            yield CompletionResponse(text=text, delta=chunk)


def test_llamaindex_streaming_chat_engine_is_returned_untouched_and_scored_when_it_ends(
    ft: FaithtraceCapture,
) -> None:
    gate = threading.Event()
    engine = _index().as_chat_engine(llm=GatedLLM(gate=gate), chat_mode="context")

    @trace_faithfulness
    def ask(query: str) -> Any:
        return engine.stream_chat(query)

    response = ask(QUESTION)  # returns while the LLM is still streaming: nothing waited for it
    assert isinstance(response, StreamingAgentChatResponse)
    assert not response.is_done
    assert (
        ft.spans(
            "test_llamaindex_streaming_chat_engine_is_returned_untouched_and_scored_when_it_ends.<locals>.ask"
        )
        == []
    )  # the span stays open until the stream ends
    chunks = response.response_gen
    assert next(chunks) == CHUNKS[0]
    gate.set()
    assert [CHUNKS[0], *chunks] == CHUNKS
    assert str(response) == ANSWER
    _scored(
        ft, "test_llamaindex_streaming_chat_engine_is_returned_untouched_and_scored_when_it_ends.<locals>.ask"
    )


async def test_llamaindex_async_streaming_chat_engine(ft: FaithtraceCapture) -> None:
    engine = _index().as_chat_engine(llm=ScriptedLLM(), chat_mode="context")

    @trace_faithfulness
    async def ask(query: str) -> Any:
        return await engine.astream_chat(query)

    response = await ask(QUESTION)
    assert isinstance(response, StreamingAgentChatResponse)
    assert [chunk async for chunk in response.async_response_gen()] == CHUNKS
    await asyncio.sleep(0)  # the writer task's done callbacks run on the loop (flush() below blocks it)
    _scored(ft, "test_llamaindex_async_streaming_chat_engine.<locals>.ask")


def test_a_chat_response_with_no_writer_is_a_capture_error_and_left_unread(ft: FaithtraceCapture) -> None:
    read: list[str] = []

    def chat_stream() -> Iterator[Any]:
        read.append("started")
        yield from ()

    @trace_faithfulness(name="writerless")
    def ask(query: str) -> Any:
        return StreamingAgentChatResponse(chat_stream=chat_stream())  # type: ignore[arg-type]

    response = ask(QUESTION)
    assert isinstance(response, StreamingAgentChatResponse)
    assert read == []  # nothing touched the stream
    assert ft.flush()
    (rag,) = ft.spans("writerless")
    assert "no writer thread or task" in rag.attributes[n.CAPTURE_ERROR]
    assert ft.evaluation_spans() == []


# --- LangChain ----------------------------------------------------------------------------------------------
def _chain(model: Any = None) -> Runnable[Any, Any]:
    """A retrieval chain shaped like ``create_retrieval_chain``'s: ``{"input", "context", "answer"}``."""
    store = InMemoryVectorStore.from_texts([CONTEXT], DeterministicFakeEmbedding(size=8))
    retriever = store.as_retriever(search_kwargs={"k": 1})
    prompt = ChatPromptTemplate.from_messages([("system", "Answer from: {context}"), ("human", "{input}")])
    chat = model or GenericFakeChatModel(messages=iter([AIMessage(content=ANSWER)] * 4))
    return RunnableParallel(context=retriever, input=RunnablePassthrough()).assign(
        answer=prompt | chat | StrOutputParser()
    )


def test_langchain_retrieval_chain(ft: FaithtraceCapture) -> None:
    chain = _chain()

    @trace_faithfulness
    def ask(question: str) -> Any:
        return chain.invoke(question)

    out = ask(QUESTION)
    assert out["answer"] == ANSWER
    assert isinstance(out["context"][0], LCDocument)
    _scored(ft, "test_langchain_retrieval_chain.<locals>.ask")


async def test_langchain_async_retrieval_chain(ft: FaithtraceCapture) -> None:
    chain = _chain()

    @trace_faithfulness
    async def ask(question: str) -> Any:
        return await chain.ainvoke(question)

    assert (await ask(QUESTION))["answer"] == ANSWER
    _scored(ft, "test_langchain_async_retrieval_chain.<locals>.ask")


def test_langchain_stream_returned_by_the_decorated_function(ft: FaithtraceCapture) -> None:
    chain = _chain()
    expected = list(chain.stream(QUESTION))  # the same chain, read without faithtrace

    @trace_faithfulness
    def ask(question: str) -> Iterator[dict[str, Any]]:
        return chain.stream(question)

    received = list(ask(QUESTION))
    # The same chunks (the parallel branches' order varies from run to run).
    assert sorted(map(repr, received)) == sorted(map(repr, expected))
    assert "".join(c.get("answer", "") for c in received) == ANSWER
    assert len([c for c in received if "answer" in c]) > 1  # really streamed
    # Contexts come from the chain's own {"context": [...]} chunk: the function has no contexts argument.
    _scored(ft, "test_langchain_stream_returned_by_the_decorated_function.<locals>.ask")


async def test_langchain_async_stream_from_a_generator_function(ft: FaithtraceCapture) -> None:
    chain = _chain()

    @trace_faithfulness
    async def ask(question: str) -> AsyncIterator[dict[str, Any]]:
        async for chunk in chain.astream(question):
            yield chunk

    received = [chunk async for chunk in ask(QUESTION)]
    assert "".join(c.get("answer", "") for c in received) == ANSWER
    _scored(ft, "test_langchain_async_stream_from_a_generator_function.<locals>.ask")


async def test_langchain_async_stream_returned(ft: FaithtraceCapture) -> None:
    chain = _chain()

    @trace_faithfulness
    def ask(question: str) -> Any:
        return chain.astream(question)

    received = [chunk async for chunk in ask(QUESTION)]
    assert "".join(c.get("answer", "") for c in received) == ANSWER
    _scored(ft, "test_langchain_async_stream_returned.<locals>.ask")


def test_langchain_chat_model_message(ft: FaithtraceCapture) -> None:
    chat = GenericFakeChatModel(messages=iter([AIMessage(content=ANSWER)]))

    @trace_faithfulness
    def ask(question: str, docs: list[LCDocument]) -> Any:
        return chat.invoke(question)

    assert ask(QUESTION, [LCDocument(page_content=CONTEXT)]).content == ANSWER
    _scored(ft, "test_langchain_chat_model_message.<locals>.ask")


# --- what is not text ---------------------------------------------------------------------------------------
class Opaque:
    def __repr__(self) -> str:
        return "Paris is the capital of France."  # a repr that would score well, were it ever read


@pytest.mark.parametrize(
    ("result", "problem"),
    [
        (Opaque(), "Opaque has no text field"),
        ({"score": 3}, "a dict with none of the text keys"),
    ],
    ids=["object", "dict"],
)
def test_a_result_with_no_text_is_a_capture_error_never_its_repr(
    ft: FaithtraceCapture, result: Any, problem: str
) -> None:
    @trace_faithfulness(name="opaque")
    def ask(question: str, contexts: list[str]) -> Any:
        return result

    assert ask(QUESTION, [CONTEXT]) is result
    assert ft.flush()
    (rag,) = ft.spans("opaque")
    assert problem in rag.attributes[n.CAPTURE_ERROR]
    assert rag.attributes[n.EVAL_OUTCOME] == n.OUTCOME_CAPTURE_ERROR
    assert n.OUTPUT_VALUE not in rag.attributes
    assert ft.evaluation_spans() == []
    assert point(ft, n.METRIC_EVALUATIONS, **{n.OUTCOME: n.OUTCOME_CAPTURE_ERROR}).value == 1


def test_langchain_with_its_openinference_instrumentation(ft: FaithtraceCapture) -> None:
    from openinference.instrumentation.langchain import LangChainInstrumentor

    instrumentor = LangChainInstrumentor()
    instrumentor.instrument(tracer_provider=ft.tracer_provider)
    try:
        chain = _chain()

        @trace_faithfulness
        def ask(question: str) -> Iterator[dict[str, Any]]:
            return chain.stream(question)

        received = list(ask(QUESTION))
        assert "".join(c.get("answer", "") for c in received) == ANSWER
        rag = _scored(ft, "test_langchain_with_its_openinference_instrumentation.<locals>.ask")
        framework = [s for s in ft.spans() if s.context.trace_id == rag.context.trace_id and s is not rag]
        assert any(s.parent and s.parent.span_id == rag.context.span_id for s in framework)
    finally:
        instrumentor.uninstrument()
