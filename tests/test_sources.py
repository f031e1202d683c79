# ruff: noqa: F811 - pytest fixtures imported from the fixture modules are parameters here
"""Trace assembly (shared by `faithtrace serve` and `score_openinference`) and the decorator's remote mode."""

from __future__ import annotations

import json

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import faithtrace
from _fake_judge import FakeJudge, fake_judge  # noqa: F401
from faithtrace import ConfigError
from faithtrace._config.settings import build_settings
from faithtrace.sources.assemble import (
    INCOMPLETE_EVICTED,
    INCOMPLETE_LATE_RETRIEVER,
    INCOMPLETE_NO_ANSWER,
    INCOMPLETE_NO_ROOT,
    Assembler,
)
from faithtrace.sources.conventions import (
    CHAIN,
    OWNED,
    RETRIEVER,
    Convention,
    SpanView,
    oi_text,
    role_of,
    self_contained,
)


def _retriever(trace: int, span: int, parent: int, *docs: str) -> SpanView:
    attrs = {f"retrieval.documents.{i}.document.content": d for i, d in enumerate(docs)}
    return SpanView(trace, span, parent, "retrieve", RETRIEVER, attrs, span)


def _chain(trace: int, span: int, parent: int, q: str, a: str, name: str = "query") -> SpanView:
    return SpanView(trace, span, parent, name, CHAIN, {"input.value": q, "output.value": a}, span)


def _asm(**kw: float) -> Assembler:
    return Assembler(
        settle_s=kw.get("settle_s", 2.0), max_traces=int(kw.get("max_traces", 100)), max_bytes=1 << 20
    )


def test_a_trace_resolves_when_its_root_arrives_in_any_order() -> None:
    asm = _asm()
    asm.add(_chain(1, 10, 0, "Q?", "A."), 0.0)  # root first (unusual, but possible across batches)
    assert asm.due(0.1) == []  # no retriever yet: not RAG so far
    asm.add(_retriever(1, 11, 10, "doc one", "doc two"), 0.2)
    asm.root_seen(1, 10)
    [(trace_id, item, _)] = asm.due(0.3)
    assert trace_id == 1
    assert item is not None
    assert (item.span_id, item.query, item.answer, item.contexts) == (10, "Q?", "A.", ("doc one", "doc two"))
    # Late or re-sent spans of a resolved trace are ignored.
    asm.add(_retriever(1, 11, 10, "doc one"), 0.4)
    assert asm.due(10.0) == []


def test_root_outside_the_instrumentation_uses_the_enclosing_chain_once_the_root_ends() -> None:
    asm = _asm(settle_s=1.0)
    asm.add(_retriever(2, 21, 20, "d"), 0.0)
    asm.add(_chain(2, 22, 20, "inner q", "inner a", "synthesize"), 0.0)  # a sibling: not an ancestor
    asm.add(_chain(2, 20, 5, "outer q", "outer a", "RetrievalQA"), 0.1)  # parent 5 = an HTTP span
    assert asm.due(0.9) == []  # the root has not ended: the trace waits, whatever is there
    asm.root_seen(2, 5)  # the HTTP span (no OpenInference attributes) ends
    [(_, item, _)] = asm.due(1.0)
    assert item is not None
    assert (item.span_id, item.function, item.query) == (20, "RetrievalQA", "outer q")


def test_a_rag_trace_whose_root_never_comes_is_reported_incomplete_never_guessed() -> None:
    asm = _asm(settle_s=1.0)
    asm.add(_retriever(2, 21, 20, "d"), 0.0)
    asm.add(_chain(2, 20, 5, "outer q", "outer a", "RetrievalQA"), 0.1)
    assert asm.due(1.0) == []
    assert asm.due(1.2) == [(2, None, INCOMPLETE_NO_ROOT)]
    asm.root_seen(2, 5)  # too late: reported once, never scored afterwards
    assert asm.due(5.0) == []


def test_a_local_root_ends_its_services_part_of_the_trace() -> None:
    asm = _asm()
    asm.add(_retriever(3, 31, 30, "d"), 0.0)
    # Its parent (9) is a span of the calling service: the span processor and OTLP's flags say so.
    asm.add(_chain(3, 30, 9, "Q?", "A.")._replace(local_root=True), 0.0)
    [(_, item, _)] = asm.due(0.0)
    assert item is not None
    assert (item.span_id, item.answer) == (30, "A.")


def test_a_rag_trace_without_question_or_answer_is_reported_incomplete() -> None:
    asm = _asm(settle_s=0.5)
    asm.add(_retriever(3, 31, 30, "d"), 0.0)
    asm.add(_span(3, 30, 0, "query", input_value="Q?"), 0.0)  # the root has no answer and nothing under it
    assert asm.due(0.0) == []  # an answer may still be on its way (an LLM span in another request)
    assert asm.due(2.0) == [(3, None, INCOMPLETE_NO_ANSWER)]


def test_traces_scored_by_the_decorator_are_left_alone() -> None:
    asm = _asm()
    asm.add(_retriever(4, 41, 40, "d"), 0.0)
    asm.add(SpanView(4, 40, 0, "answer", OWNED, {"faithtrace.function": "answer"}, 0), 0.0)
    assert asm.due(0.0) == []


def test_memory_is_bounded_in_traces_and_the_oldest_is_reported_not_guessed() -> None:
    asm = _asm(max_traces=3)
    evicted = []
    for t in range(1, 6):
        asm.add(_chain(t, t * 10 + 2, t * 10, "q", "inner answer", "synthesize"), float(t))
        evicted += asm.add(_retriever(t, t * 10 + 1, t * 10, "x" * 100), float(t))
    assert evicted == [(1, None, INCOMPLETE_EVICTED), (2, None, INCOMPLETE_EVICTED)]
    assert asm.held() == 3
    assert asm.evicted == 2
    assert asm.is_full(1)


def test_re_sent_spans_do_not_duplicate_documents() -> None:
    asm = _asm()
    for _ in range(3):
        asm.add(_retriever(5, 51, 50, "only once"), 0.0)
    asm.add(_chain(5, 50, 0, "q", "a"), 0.0)
    [(_, item, _)] = asm.due(0.0)
    assert item is not None
    assert item.contexts == ("only once",)


def test_json_values_are_unwrapped() -> None:
    attrs = {
        "input.value": json.dumps({"question": "Where?", "chat_history": []}),
        "input.mime_type": "application/json",
        "output.value": json.dumps({"output": {"answer": "There."}}),
        "output.mime_type": "application/json",
    }
    assert oi_text(attrs, "input.value", "input.mime_type") == "Where?"
    assert oi_text(attrs, "output.value", "output.mime_type") == "There."
    assert oi_text({"input.value": "{not json"}, "input.value", "input.mime_type") == "{not json"


def test_roles_and_a_custom_convention() -> None:
    mine = Convention(
        name="mine", marker="rag.answer", query=("rag.q",), answer=("rag.answer",), documents="rag.docs"
    )
    attrs = {"rag.answer": "A.", "rag.q": "Q?", "rag.docs": ["d1", "d2"]}
    assert role_of(attrs, 0, (mine,)) == "own"
    item = self_contained(SpanView(1, 2, 0, "handler", "own", attrs, 0), mine, 10)
    assert item is not None
    assert (item.function, item.query, item.contexts, item.source) == ("handler", "Q?", ("d1", "d2"), "mine")
    assert role_of({"http.route": "/"}, 0, (mine,)) is None
    assert role_of({"openinference.span.kind": "LLM"}, 5, ()) is None  # no input/output: nothing to keep
    assert (
        role_of({"openinference.span.kind": "EMBEDDING", "input.value": "x", "output.value": "y"}, 5, ())
        is None
    )


def test_scoring_mode_from_argument_and_env() -> None:
    assert build_settings(scoring="remote", environ={}).remote
    assert not build_settings(environ={}).remote
    assert build_settings(environ={"FAITHTRACE_SCORING": "remote"}).remote
    assert not build_settings(scoring="in_process", environ={"FAITHTRACE_SCORING": "remote"}).remote
    assert not build_settings(environ={"FAITHTRACE_SCORING": "bogus"}).remote  # warns, keeps the default
    with pytest.raises(ConfigError):
        build_settings(scoring="elsewhere", environ={})


def test_remote_mode_records_the_texts_and_scores_nothing_in_process(fake_judge: FakeJudge) -> None:
    exporter = InMemorySpanExporter()
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(exporter))
    long_doc = "The Eiffel Tower is in Paris. " * 300  # beyond the 4096-character display cap
    faithtrace.configure(
        scoring="remote", tracer_provider=tp, judge=fake_judge.settings(), capture=faithtrace.CaptureOptions()
    )
    try:

        @faithtrace.trace_faithfulness(contexts="docs")
        def answer(question: str, docs: list[str]) -> str:
            return "It is in Paris."

        assert answer("Where?", [long_doc, "second"]) == "It is in Paris."
        assert faithtrace.flush(10)
    finally:
        faithtrace.shutdown(5)
    [span] = exporter.get_finished_spans()
    attrs = dict(span.attributes or {})
    assert attrs["faithtrace.scoring.remote"] is True
    assert attrs["input.value"] == "Where?"
    assert attrs["output.value"] == "It is in Paris."
    assert attrs["retrieval.documents.0.document.content"] == long_doc  # cut to the scoring limit, not 4096
    assert attrs["retrieval.documents.1.document.content"] == "second"
    assert fake_judge.requests == []


def test_an_output_is_read_answer_first_never_as_the_question() -> None:
    # A LangChain retrieval chain's output repeats the question under "input".
    out = {"input": "What is it?", "context": [{"page_content": "doc"}], "answer": "It is this."}
    attrs = {"output.value": json.dumps(out), "output.mime_type": "application/json"}
    assert oi_text(attrs, "output.value", "output.mime_type") == "It is this."
    no_answer = {"output.value": json.dumps({"input": "What is it?", "context": []})}
    assert oi_text(no_answer, "output.value", "output.mime_type") is None
    chat_input = {"input.value": json.dumps({"message": "Hi?"}), "input.mime_type": "application/json"}
    assert oi_text(chat_input, "input.value", "input.mime_type") == "Hi?"


@pytest.mark.parametrize(
    "value",
    [
        "<generator object>",
        "<async_generator object at 0x7f00aa>",
        json.dumps({"response_gen": "<generator object>", "source_nodes": []}),
        json.dumps({"response": "<generator object>"}),
        json.dumps({"response": ""}),
    ],
)
def test_an_unserialised_object_is_not_an_answer(value: str) -> None:
    assert oi_text({"output.value": value}, "output.value", "output.mime_type") is None


def _span(trace: int, span: int, parent: int, name: str, end: int = 0, **attrs: str) -> SpanView:
    return SpanView(
        trace, span, parent, name, CHAIN, {k.replace("_", "."): v for k, v in attrs.items()}, 0, end
    )


def test_a_streamed_answer_comes_from_the_last_llm_reply_and_the_root_holds_it() -> None:
    asm = _asm()
    asm.add(_retriever(6, 62, 61, "doc"), 0.0)
    llm = {"openinference_span_kind": "LLM"}
    asm.add(_span(6, 64, 63, "llm.stream", 10, input_value="prompt", output_value="Draft.", **llm), 0.0)
    asm.add(
        _span(6, 65, 63, "llm.stream", 20, input_value="prompt", output_value="Final answer.", **llm), 0.0
    )
    asm.add(_span(6, 63, 61, "synthesize", 30, input_value="Q?", output_value="<generator object>"), 0.0)
    asm.add(_span(6, 61, 60, "_query", 40, input_value="Q?", output_value='{"response_gen": "<gen>"}'), 0.0)
    asm.add(_span(6, 60, 0, "query", 50, input_value="Q?", output_value='{"response_gen": "<gen>"}'), 0.0)
    [(_, item, _)] = asm.due(0.0)
    assert item is not None
    assert (item.span_id, item.function, item.query, item.answer) == (60, "query", "Q?", "Final answer.")


def test_an_llm_reply_is_read_from_its_output_messages() -> None:
    asm = _asm()
    asm.add(_retriever(7, 72, 70, "doc"), 0.0)
    attrs = {
        "openinference.span.kind": "LLM",
        "output.value": json.dumps({"generations": [[{"text": "ignored"}]]}),
        "llm.output_messages.0.message.role": "assistant",
        "llm.output_messages.0.message.content": "From the message.",
    }
    asm.add(SpanView(7, 71, 70, "ChatModel", CHAIN, attrs, 0, 5), 0.0)
    asm.add(_span(7, 70, 0, "agent", 9, input_value="Q?"), 0.0)
    [(_, item, _)] = asm.due(0.0)
    assert item is not None
    assert (item.span_id, item.answer) == (70, "From the message.")


def test_a_root_that_ends_before_its_stream_waits_for_the_open_spans() -> None:
    asm = _asm(settle_s=1.0)
    asm.add(_retriever(8, 81, 80, "doc"), 0.0)
    asm.started(8, 82)  # the stream's LLM span starts after the retrieval ...
    asm.add(_span(8, 80, 0, "stream_chat", 5, input_value="Q?", output_value='{"response": ""}'), 0.1)
    assert asm.due(0.2) == []  # ... and the root ends before it: the trace waits
    assert asm.due(5.0) == []  # past the settle window too, while the span is open
    assert asm.due(0.3, everything=True) == []  # a flush does not cut the stream short
    llm = {"openinference_span_kind": "LLM"}
    asm.add(_span(8, 82, 80, "llm.stream", 9, input_value="prompt", output_value="Streamed.", **llm), 6.0)
    [(_, item, _)] = asm.due(6.0)
    assert item is not None
    assert (item.span_id, item.answer) == (80, "Streamed.")


def test_an_open_span_that_never_ends_is_waited_for_at_most_max_open_s() -> None:
    asm = Assembler(settle_s=1.0, max_traces=10, max_bytes=1 << 20, max_open_s=10.0)
    asm.add(_retriever(9, 91, 90, "doc"), 0.0)
    asm.started(9, 92)
    asm.add(_chain(9, 90, 0, "Q?", "A."), 0.0)
    assert asm.due(5.0) == []
    [(_, item, _)] = asm.due(10.0)
    assert item is not None
    asm.add(_retriever(10, 101, 100, "doc"), 0.0)
    asm.started(10, 102)
    assert len(asm.due(0.0, closing=True)) == 1  # shutdown resolves everything


# --- arrival order ------------------------------------------------------------------------------------------
_LLM = {"openinference_span_kind": "LLM"}


def _llama_trace(trace: int, streamed: bool) -> list[SpanView]:
    """A LlamaIndex query's spans: the synthesizer re-splits the documents with a text splitter (a CHAIN span
    whose output IS the documents), and the answer is on the root, or only on the LLM span when streamed."""
    root_out = '{"response_gen": "<generator object>"}' if streamed else "Paris."
    return [
        _retriever(trace, 2, 1, "Paris is the capital of France."),
        _span(
            trace,
            4,
            3,
            "TokenTextSplitter.split_text",
            5,
            input_value="Paris is the capital of France.",
            output_value="Paris is the capital of France.",
        ),
        _span(trace, 5, 3, "llm.chat", 6, input_value="prompt", output_value="Paris.", **_LLM),
        _span(trace, 3, 1, "synthesize", 7, input_value="Capital?", output_value="<generator object>"),
        _span(trace, 1, 0, "query", 8, input_value="Capital?", output_value=root_out),
    ]


@pytest.mark.parametrize("streamed", [False, True])
def test_every_arrival_order_scores_the_root_or_waits(streamed: bool) -> None:
    """All 120 orders of the five spans, each span its own request (the receiver resolves after each):
    always the root's question with the answer, never the splitter's documents, never before the root."""
    import itertools

    for order in itertools.permutations(_llama_trace(7, streamed)):
        asm = _asm(settle_s=1.0)
        out = []
        for i, view in enumerate(order):
            out += asm.add(view, i * 0.1)
            out += asm.due(i * 0.1)
        out += asm.due(10.0)
        [(_, item, reason)] = out
        assert item is not None, (order, reason)
        assert (item.span_id, item.query, item.answer) == (1, "Capital?", "Paris."), order


def test_parts_that_come_after_the_old_settle_window_still_assemble() -> None:
    """The root's request comes 5 s after the retriever's (a Collector retrying a refused part): held."""
    asm = _asm(settle_s=30.0)
    spans = _llama_trace(8, streamed=True)
    for view in spans[:4]:
        asm.add(view, 0.0)
    assert asm.due(5.0) == []
    asm.add(spans[4], 5.0)
    [(_, item, _)] = asm.due(5.0)
    assert item is not None
    assert (item.span_id, item.answer) == (1, "Paris.")


def test_non_rag_traces_cost_little_and_never_take_a_rag_traces_room() -> None:
    asm = Assembler(
        settle_s=30.0, max_traces=100, max_bytes=1 << 20, not_rag_after_s=2.0, max_other_traces=50
    )
    for t in range(1, 10_001):  # a flood of CHAIN roots without a retriever, in one burst
        asm.add(_chain(t, 1, 0, "hello " * 20, "hi " * 20), 0.0)
        asm.due(0.0)
    assert asm.pending() == 50  # its own bound: the oldest were dropped, nothing refused
    assert not asm.is_full(1)
    assert asm.held() == 0
    assert asm.dropped == asm.dropped_full == 9_950
    asm.add(_retriever(20_000, 2, 1, "doc"), 0.0)
    asm.add(_chain(20_000, 1, 0, "Q?", "A."), 0.0)
    [(_, item, _)] = asm.due(0.0)
    assert item is not None
    assert item.answer == "A."
    assert asm.due(2.0) == []
    assert asm.pending() == 0


def test_a_retriever_after_its_trace_was_dropped_is_reported() -> None:
    asm = Assembler(settle_s=30.0, max_traces=100, max_bytes=1 << 20, not_rag_after_s=2.0)
    asm.add(_chain(9, 1, 0, "Q?", "A."), 0.0)
    assert asm.due(1.5) == []  # root without a retriever: a retriever may still come ...
    asm.add(_retriever(9, 2, 1, "doc"), 1.0)  # ... and does: scored
    [(_, item, _)] = asm.due(1.0)
    assert item is not None
    asm.add(_chain(10, 1, 0, "Q?", "A."), 0.0)
    assert asm.due(2.5) == []  # past the grace: dropped as not RAG
    assert asm.add(_retriever(10, 2, 1, "doc"), 3.0) == [(10, None, INCOMPLETE_LATE_RETRIEVER)]
    assert asm.add(_retriever(10, 2, 1, "doc"), 3.1) == []  # reported once


def test_otlp_span_flags_mark_a_services_local_root() -> None:
    """OTLP carries whether a span's parent is remote (span flags 0x100 | 0x200, set by the SDK's exporter):
    such a span is its service's root, whether it is an OpenInference span or an HTTP handler's."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    from faithtrace.serve.otlp import scan
    from faithtrace.sources.conventions import FAITHTRACE_REMOTE, watched_keys

    req = ExportTraceServiceRequest()
    spans = req.resource_spans.add().scope_spans.add().spans
    for span_id, flags, attrs in [
        (1, 0x300, {"openinference.span.kind": "CHAIN", "input.value": "Q?", "output.value": "A."}),
        (2, 0x300, {"http.route": "/ask"}),
        (3, 0x100, {"http.route": "/ask"}),  # the parent is known to be local: not a root
    ]:
        span = spans.add()
        span.trace_id, span.span_id = (7).to_bytes(16, "big"), span_id.to_bytes(8, "big")
        span.parent_span_id, span.flags = (9).to_bytes(8, "big"), flags
        for key, value in attrs.items():
            kv = span.attributes.add()
            kv.key, kv.value.string_value = key, value
    conventions = (FAITHTRACE_REMOTE,)
    found = scan(req, watched_keys(conventions), conventions)
    [(_, view)] = found.views
    assert (view.span_id, view.role, view.local_root, view.parent_id) == (1, CHAIN, True, 9)
    assert found.roots == [(7, 2)]
