# ruff: noqa: F811 - pytest fixtures imported from the fixture modules are parameters here
"""``score_openinference()`` on a real LlamaIndex app (MockLLM, MockEmbedding) traced by the real
OpenInference instrumentation: no decorator, the evaluation in a trace linked to the app's (or, asked for,
in the app's own trace)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import faithtrace
from _fake_judge import FakeJudge, fake_judge  # noqa: F401

llama_core = pytest.importorskip("llama_index.core")
oi_llama = pytest.importorskip("openinference.instrumentation.llama_index")

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def traced_app(fake_judge: FakeJudge) -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    tp = TracerProvider(resource=Resource.create({"service.name": "llama-app"}))
    tp.add_span_processor(SimpleSpanProcessor(exporter))
    instrumentor = oi_llama.LlamaIndexInstrumentor()
    instrumentor.instrument(tracer_provider=tp)
    # MockLLM echoes its prompt, so the answer repeats the document and would be proven supported in code;
    # these tests watch the judge score it.
    scoring = faithtrace.ScoringOptions(prove_support=False)
    faithtrace.configure(tracer_provider=tp, judge=fake_judge.settings(), scoring=scoring)
    try:
        yield tp, exporter
    finally:
        instrumentor.uninstrument()
        faithtrace.shutdown(5)


def _engine() -> object:
    from llama_index.core import Document, VectorStoreIndex
    from llama_index.core.embeddings import MockEmbedding
    from llama_index.core.llms import MockLLM

    docs = [Document(text="The Eiffel Tower is in Paris. It opened in 1889.")]
    index = VectorStoreIndex.from_documents(docs, embed_model=MockEmbedding(embed_dim=8))
    return index.as_query_engine(llm=MockLLM(max_tokens=16), similarity_top_k=1)


def test_a_llama_index_query_is_scored_in_a_trace_linked_to_its_own(
    traced_app: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    tp, exporter = traced_app
    processor = faithtrace.score_openinference(tp)
    assert faithtrace.score_openinference(tp) is processor  # one call, idempotent
    engine = _engine()
    response = engine.query("Where is the Eiffel Tower?")  # type: ignore[attr-defined]
    assert str(response)
    assert faithtrace.flush(30)
    spans = exporter.get_finished_spans()
    retrievers = [s for s in spans if (s.attributes or {}).get("openinference.span.kind") == "RETRIEVER"]
    assert retrievers, "the instrumentation recorded the retrieval"
    evaluations = [s for s in spans if s.name == "evaluate faithfulness"]
    assert len(evaluations) == 1
    evaluation = evaluations[0]
    trace_id = retrievers[0].context.trace_id
    root = next(s for s in spans if s.parent is None and s.context.trace_id == trace_id)
    # The app's spans were exported before scoring: the evaluation goes to a trace of its own, linked to the
    # span that holds the question and answer, and the app's trace keeps its own duration.
    assert evaluation.parent is None
    assert evaluation.context.trace_id != trace_id
    assert [link.context.span_id for link in evaluation.links] == [root.context.span_id]
    assert (evaluation.attributes or {})["faithtrace.evaluation.placement"] == "linked"
    assert not [
        s for s in spans if s.context.trace_id == trace_id and s.instrumentation_scope.name == "faithtrace"
    ]
    assert (evaluation.attributes or {})["faithtrace.function"] == root.name
    # No second copy of the app's RAG content: no extra RAG span, and the evaluation span carries neither the
    # question nor the documents (its input is the answer it judged, as every evaluation span's is).
    attrs = evaluation.attributes or {}
    assert not any(k.startswith("retrieval.documents.") for k in attrs)
    assert "Where is the Eiffel Tower?" not in json.dumps(dict(attrs))
    assert len([s for s in spans if s.context.trace_id == trace_id and s.name == root.name]) == 1
    assert (evaluation.attributes or {})["faithtrace.evaluation.outcome"] in {"scored", "no_claims"}


def test_with_child_placement_the_evaluation_joins_the_app_trace(
    traced_app: tuple[TracerProvider, InMemorySpanExporter], fake_judge: FakeJudge
) -> None:
    tp, exporter = traced_app
    scoring = faithtrace.ScoringOptions(prove_support=False)
    faithtrace.configure(
        tracer_provider=tp, judge=fake_judge.settings(), scoring=scoring, evaluation_placement="child"
    )
    faithtrace.score_openinference(tp)
    assert str(_engine().query("Where is the Eiffel Tower?"))  # type: ignore[attr-defined]
    assert faithtrace.flush(30)
    spans = exporter.get_finished_spans()
    (evaluation,) = [s for s in spans if s.name == "evaluate faithfulness"]
    retriever = next(s for s in spans if (s.attributes or {}).get("openinference.span.kind") == "RETRIEVER")
    trace_id = retriever.context.trace_id
    root = next(s for s in spans if s.parent is None and s.context.trace_id == trace_id)
    assert evaluation.context.trace_id == trace_id  # the app's own trace
    assert evaluation.parent is not None
    assert evaluation.parent.span_id == root.context.span_id
    assert (evaluation.attributes or {})["faithtrace.evaluation.placement"] == "child"


def test_non_rag_spans_are_not_assembled(traced_app: tuple[TracerProvider, InMemorySpanExporter]) -> None:
    tp, exporter = traced_app
    faithtrace.score_openinference(tp)
    tracer = tp.get_tracer("app")
    for i in range(50):
        with tracer.start_as_current_span(f"GET /{i}"):
            pass
    from llama_index.core.llms import MockLLM

    MockLLM(max_tokens=4).complete("hello")  # an LLM span, no retriever: not RAG
    assert faithtrace.flush(10)
    assert not [s for s in exporter.get_finished_spans() if s.name == "evaluate faithfulness"]


async def test_an_async_query_is_scored_too(traced_app: tuple[TracerProvider, InMemorySpanExporter]) -> None:
    tp, exporter = traced_app
    faithtrace.score_openinference(tp)
    engine = _engine()
    response = await engine.aquery("When did it open?")  # type: ignore[attr-defined]
    assert str(response)
    assert faithtrace.flush(30)
    evaluations = [s for s in exporter.get_finished_spans() if s.name == "evaluate faithfulness"]
    assert len(evaluations) == 1
