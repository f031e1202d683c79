"""An app traced by OpenInference and nothing else (no faithtrace in it), sending OTLP/gRPC to a Collector:
a real LlamaIndex query engine or a real LangChain retrieval chain over the same two documents, with scripted
LLMs and mock embeddings. Run as a script by tests/_oi_fleet.py (the fleet tests and
benchmarks/fleet/fleet.py).

Each RAG query gets its own answer (it names its number), so an evaluation judged against the wrong span or
the wrong trace's text is told apart from a right one. For each RAG trace it prints one JSON line with the
trace ID, its root span ID and the answer; non-RAG traces (a chat call without retrieval) are not printed.

    python _oi_fleet_app.py llama|langchain COUNT [--non-rag N] [--late-root S] [--interval S]

``--late-root S`` exports each trace's root span S seconds after it ended, through its own exporter: the part
of the trace carrying the root then reaches the Collector (and the scorer) long after the rest.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import threading
import time
from typing import Any

from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter

CONTEXTS = [
    "The Eiffel Tower is 330 metres tall.",
    "It was completed in 1889 for the World's Fair in Paris.",
]
QUESTION = "How tall is the Eiffel Tower, and when was it finished?"


def answer_for(i: int) -> str:
    # Three sentences (three claims for the stand-in judge), none a document sentence word for word.
    return f"The tower rises 330 metres. Builders finished it in 1889. Answer {i} puts it in Paris."


class Roots(SpanProcessor):
    """Notes each trace's root span ID; with ``delay_s``, holds root spans back and exports them late."""

    def __init__(self, delay_s: float, exporter: SpanExporter | None) -> None:
        self.root_of: dict[int, int] = {}
        self.delay_s = delay_s
        self.exporter = exporter
        self._late: queue.Queue[tuple[float, ReadableSpan] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._send_late, daemon=True)
        if exporter is not None:
            self._thread.start()

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        pass

    def on_end(self, span: ReadableSpan) -> None:
        if span.parent is None and span.context is not None:
            self.root_of[span.context.trace_id] = span.context.span_id
            if self.exporter is not None:
                self._late.put((time.monotonic() + self.delay_s, span))

    def _send_late(self) -> None:
        assert self.exporter is not None
        while (entry := self._late.get()) is not None:
            due, span = entry
            time.sleep(max(0.0, due - time.monotonic()))
            self.exporter.export([span])

    def shutdown(self) -> None:
        if self.exporter is not None:
            self._late.put(None)
            self._thread.join(timeout=self.delay_s + 60)
            self.exporter.shutdown()


class NotRoots(SpanProcessor):
    """Everything but root spans, to ``inner`` (used with --late-root)."""

    def __init__(self, inner: SpanProcessor) -> None:
        self.inner = inner

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        self.inner.on_start(span, parent_context)

    def on_end(self, span: ReadableSpan) -> None:
        if span.parent is not None:
            self.inner.on_end(span)

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)


def llama_app(tp: TracerProvider) -> tuple[Any, Any]:
    from llama_index.core import Document, VectorStoreIndex
    from llama_index.core.embeddings import MockEmbedding
    from openinference.instrumentation.llama_index import LlamaIndexInstrumentor

    from _llama_llm import ScriptedLLM

    class AppLLM(ScriptedLLM):
        pass

    LlamaIndexInstrumentor().instrument(tracer_provider=tp)
    index = VectorStoreIndex.from_documents(
        [Document(text=c) for c in CONTEXTS], embed_model=MockEmbedding(embed_dim=8)
    )
    engine = index.as_query_engine(llm=AppLLM(), similarity_top_k=2)
    llm = AppLLM()

    def rag(i: int) -> str:
        AppLLM.answer = answer_for(i)
        return str(engine.query(QUESTION).response)

    def chat(i: int) -> None:
        AppLLM.answer = f"Hello {i}."
        llm.complete(f"Say hello to visitor {i}.")

    return rag, chat


def langchain_app(tp: TracerProvider) -> tuple[Any, Any]:
    from langchain_core.embeddings import DeterministicFakeEmbedding
    from langchain_core.language_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage
    from langchain_core.output_parsers import StrOutputParser
    from langchain_core.prompts import ChatPromptTemplate
    from langchain_core.runnables import RunnableParallel, RunnablePassthrough
    from langchain_core.vectorstores import InMemoryVectorStore
    from openinference.instrumentation.langchain import LangChainInstrumentor

    LangChainInstrumentor().instrument(tracer_provider=tp)
    store = InMemoryVectorStore.from_texts(CONTEXTS, DeterministicFakeEmbedding(size=8))
    retriever = store.as_retriever(search_kwargs={"k": 2})
    prompt = ChatPromptTemplate.from_messages([("system", "Answer from: {context}"), ("human", "{input}")])

    def rag(i: int) -> str:
        chat_model = GenericFakeChatModel(messages=iter([AIMessage(content=answer_for(i))]))
        chain = RunnableParallel(context=retriever, input=RunnablePassthrough()).assign(
            answer=prompt | chat_model | StrOutputParser()
        )
        return str(chain.invoke(QUESTION)["answer"])

    def chat(i: int) -> None:
        chat_model = GenericFakeChatModel(messages=iter([AIMessage(content=f"Hello {i}.")]))
        (ChatPromptTemplate.from_messages([("human", "{input}")]) | chat_model | StrOutputParser()).invoke(
            {"input": f"Say hello to visitor {i}."}
        )

    return rag, chat


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("framework", choices=["llama", "langchain"])
    parser.add_argument("count", type=int)
    parser.add_argument("--non-rag", type=int, default=0, help="non-RAG traces after each RAG one")
    parser.add_argument("--late-root", type=float, default=0.0, help="seconds root spans are held back")
    parser.add_argument("--interval", type=float, default=0.0)
    parser.add_argument("--protocol", choices=["grpc", "http"], default="grpc", help="OTLP/gRPC or OTLP/HTTP")
    args = parser.parse_args()

    tp = TracerProvider(resource=Resource.create({"service.name": f"oi-{args.framework}-app"}))
    endpoint = os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"]

    def exporter() -> SpanExporter:
        if args.protocol == "http":
            return HttpExporter(endpoint=f"{endpoint}/v1/traces")
        return OTLPSpanExporter(endpoint=endpoint, insecure=True)

    batches = BatchSpanProcessor(exporter(), max_queue_size=100_000, schedule_delay_millis=200)
    late = exporter() if args.late_root > 0 else None
    roots = Roots(args.late_root, late)
    tp.add_span_processor(roots)
    tp.add_span_processor(NotRoots(batches) if late is not None else batches)
    rag, chat = (llama_app if args.framework == "llama" else langchain_app)(tp)
    for i in range(args.count):
        text = rag(i)
        trace_id = next(reversed(roots.root_of))  # the latest root noted: this query's
        print(
            json.dumps(
                {"trace_id": f"{trace_id:032x}", "root": f"{roots.root_of[trace_id]:016x}", "answer": text}
            ),
            flush=True,
        )
        for j in range(args.non_rag):
            chat(i * 1000 + j)
        if args.interval:
            time.sleep(args.interval)
    tp.shutdown()
    print("DONE", flush=True)


if __name__ == "__main__":
    main()
