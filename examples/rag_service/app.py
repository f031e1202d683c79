"""A small RAG web service whose answers faithtrace scores for faithfulness, live.

Run it (from the repository root):

    uvicorn --app-dir examples rag_service.app:app --host 127.0.0.1 --port 8000

then ``curl -s localhost:8000/ask -H 'content-type: application/json' -d '{"question": "How long is the
battery warranty?", "hallucinate": "contradict"}'``. See README.md next to this file.
"""

from __future__ import annotations

import asyncio
import inspect
import os
from collections.abc import AsyncIterator
from contextlib import AbstractContextManager, asynccontextmanager, nullcontext
from typing import Any

from fastapi import FastAPI
from opentelemetry import trace
from pydantic import BaseModel, Field

import faithtrace
from faithtrace import trace_faithfulness

from . import knowledge
from .knowledge import Hallucination, RagAnswer

# Recent FastAPI releases trace requests themselves (FastAPI(telemetry=...)): a server span per request, which
# faithtrace's span becomes a child of. With older ones we open that span ourselves.
_FASTAPI_TRACES_REQUESTS = "telemetry" in inspect.signature(FastAPI).parameters


# The decorated function is the heart of the example. faithtrace takes the query from the `question`
# argument, the retrieved passages and the answer from the returned object, records them on a span, and scores
# the answer in a background worker after the request has been answered.
@trace_faithfulness(
    query="question",
    contexts=lambda bound, result: [doc.text for doc in result.documents],
    answer="text",
    name="support-bot",
)
async def answer_question(question: str, hallucinate: Hallucination = "none") -> RagAnswer:
    # A real service would await its retriever and its LLM here.
    await asyncio.sleep(0)
    return knowledge.answer(question, hallucinate)


class AskRequest(BaseModel):
    question: str = Field(min_length=1, max_length=2000)
    # Makes the scripted model invent something, so that there is a hallucination for faithtrace to catch:
    # "contradict" changes a fact of the passage, "embellish" adds one the passage does not state.
    hallucinate: Hallucination = "none"


class Source(BaseModel):
    id: str
    title: str


class AskResponse(BaseModel):
    answer: str
    sources: list[Source]
    # Where to look in Jaeger/Phoenix for this request's trace and its faithfulness evaluation.
    trace_id: str | None = None


def create_app(
    *, configure_faithtrace: bool = True, tracer_provider: trace.TracerProvider | None = None
) -> FastAPI:
    """The service.

    Args:
        configure_faithtrace: False when the caller (a test, the demo) has already called
            ``faithtrace.configure()`` and owns shutdown.
        tracer_provider: for the service's own request span; the global provider when None.
    """
    tracer = trace.get_tracer("rag_service", tracer_provider=tracer_provider)

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        if configure_faithtrace:
            # Everything comes from the environment: FAITHTRACE_JUDGE_MODEL (unset: the embedded local judge),
            # OTEL_EXPORTER_OTLP_ENDPOINT and OTEL_SERVICE_NAME for where the traces go.
            faithtrace.configure()
        yield
        if configure_faithtrace:
            # Answers already served but not yet scored get a bounded chance to finish.
            await asyncio.to_thread(faithtrace.shutdown, float(os.environ.get("RAG_SHUTDOWN_TIMEOUT", "20")))

    extra: dict[str, Any] = {}
    if _FASTAPI_TRACES_REQUESTS:
        # Only the request span: FastAPI's dependency/serialization spans would crowd the example's traces.
        extra["telemetry"] = {"tracer_provider": tracer_provider, "operation_spans": False}
    app = FastAPI(title="Voltaro help centre (faithtrace example)", lifespan=lifespan, **extra)

    @app.post("/ask")
    async def ask(request: AskRequest) -> AskResponse:
        # faithtrace's span is a child of the request's span, so the request, the answer and its evaluation
        # are one trace.
        request_span: AbstractContextManager[Any] = (
            nullcontext()
            if _FASTAPI_TRACES_REQUESTS
            else tracer.start_as_current_span("POST /ask", kind=trace.SpanKind.SERVER)
        )
        with request_span:
            result = await answer_question(request.question, hallucinate=request.hallucinate)
            ctx = trace.get_current_span().get_span_context()
        return AskResponse(
            answer=result.text,
            sources=[Source(id=d.id, title=d.title) for d in result.documents],
            trace_id=format(ctx.trace_id, "032x") if ctx.is_valid else None,
        )

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    return app


app = create_app(configure_faithtrace=os.environ.get("RAG_CONFIGURE_FAITHTRACE", "true").lower() != "false")
