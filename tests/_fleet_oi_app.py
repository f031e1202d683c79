"""A RAG app traced by OpenInference only (no faithtrace in it), for the fleet tests and benchmarks: a real
LlamaIndex query engine or LangChain retrieval chain with a scripted LLM and fake embeddings, exporting OTLP
(the SDK's batch processor, OTEL_EXPORTER_OTLP_* from the environment) to the Collector.

    python tests/_fleet_oi_app.py llama|langchain COUNT INTERVAL_S

Each call's answer names its call number, so that an evaluation can be matched to the answer it judged. For
each root span that ends it prints {"trace_id", "span_id", "answer"}: the traces that must come back scored,
against that root and that answer text. "DONE" once every span was exported.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

sys.path.insert(0, str(Path(__file__).resolve().parent))

CONTEXT = "Paris is the capital of France. The Seine flows through Paris."
QUESTION = "What is the capital of France?"


def answer_text(i: int) -> str:
    # Reworded from the context, so its claims go to the judge; the call number makes it unique. Three
    # sentences, three claims: the stand-in judge answers three verdicts (its --items default).
    return f"The capital of France is Paris. Call {i} was answered from the text. The Seine runs through it."


class Roots(SpanProcessor):
    """Prints each root span as it ends, with the answer the current call gave."""

    answer = ""

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        return None

    def on_end(self, span: ReadableSpan) -> None:
        if span.parent is None and span.context is not None:
            ctx = span.context
            ids = {"trace_id": f"{ctx.trace_id:032x}", "span_id": f"{ctx.span_id:016x}"}
            print(json.dumps({**ids, "answer": self.answer}), flush=True)


def llama(count: int, interval: float, roots: Roots) -> None:
    from llama_index.core import Document, VectorStoreIndex
    from llama_index.core.embeddings import MockEmbedding
    from openinference.instrumentation.llama_index import LlamaIndexInstrumentor

    import _llama_llm

    LlamaIndexInstrumentor().instrument()
    index = VectorStoreIndex.from_documents([Document(text=CONTEXT)], embed_model=MockEmbedding(embed_dim=8))

    class LLM(_llama_llm.ScriptedLLM):
        pass

    engine = index.as_query_engine(llm=LLM())
    for i in range(count):
        LLM.answer = roots.answer = answer_text(i)
        response = engine.query(QUESTION)
        assert response.response == roots.answer, response.response
        time.sleep(interval)


def langchain(count: int, interval: float, roots: Roots) -> None:
    from langchain_core.embeddings import DeterministicFakeEmbedding
    from langchain_core.language_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage
    from langchain_core.output_parsers import StrOutputParser
    from langchain_core.prompts import ChatPromptTemplate
    from langchain_core.runnables import RunnableParallel, RunnablePassthrough
    from langchain_core.vectorstores import InMemoryVectorStore
    from openinference.instrumentation.langchain import LangChainInstrumentor

    LangChainInstrumentor().instrument()
    store = InMemoryVectorStore.from_texts([CONTEXT], DeterministicFakeEmbedding(size=8))
    retriever = store.as_retriever(search_kwargs={"k": 1})
    prompt = ChatPromptTemplate.from_messages([("system", "Answer from: {context}"), ("human", "{input}")])
    chat = GenericFakeChatModel(messages=iter([AIMessage(content=answer_text(i)) for i in range(count)]))
    # Shaped like create_retrieval_chain's output: {"input", "context", "answer"}.
    chain: Any = RunnableParallel(context=retriever, input=RunnablePassthrough()).assign(
        answer=prompt | chat | StrOutputParser()
    )
    for i in range(count):
        roots.answer = answer_text(i)
        assert chain.invoke(QUESTION)["answer"] == roots.answer
        time.sleep(interval)


def main() -> None:
    framework, count, interval = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    provider = TracerProvider(resource=Resource.create())  # service.name from OTEL_SERVICE_NAME
    roots = Roots()
    provider.add_span_processor(roots)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    {"llama": llama, "langchain": langchain}[framework](count, interval, roots)
    provider.force_flush(60_000)
    provider.shutdown()
    print("DONE", flush=True)


if __name__ == "__main__":
    main()
