"""The RAG span's attributes: the captured texts (capped, scrubbed, redacted), the retrieved documents on a
RETRIEVER child, and the texts for ``faithtrace serve``. What an evaluation adds is ``evaluation``'s.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from opentelemetry import trace
from opentelemetry.trace import Tracer

from faithtrace._common.secrets import export_text
from faithtrace._telemetry import names as n
from faithtrace._telemetry.records import Captured

if TYPE_CHECKING:
    from faithtrace._config.scoring_options import ScoringOptions
    from faithtrace._config.settings import CaptureOptions

Attributes = dict[str, Any]


class Exporter:
    """Applies the capture options to every text that leaves the process."""

    def __init__(self, options: CaptureOptions) -> None:
        self.options = options
        self.truncated: list[str] = []

    def __call__(self, key: str, text: str, readable: bool = False) -> str:
        o = self.options
        out, cut = export_text(text, o.max_attribute_chars, o.scrub_secrets, o.redact, readable=readable)
        if cut:
            self.truncated.append(key)
        return out


def rag_attributes(captured: Captured, function: str, options: CaptureOptions) -> Attributes:
    """The RAG span's attributes (request path: only slicing and one regex pass per text)."""
    attrs: Attributes = {n.FUNCTION: function, n.OPENINFERENCE_SPAN_KIND: n.OPENINFERENCE_KIND_CHAIN}
    if captured.contexts is not None:
        attrs[n.CONTEXTS_COUNT] = len(captured.contexts)
    if not options.content:
        return attrs
    export = Exporter(options)
    if captured.query is not None:
        attrs[n.INPUT_VALUE] = export(n.INPUT_VALUE, captured.query)
    if captured.answer is not None:
        attrs[n.OUTPUT_VALUE] = export(n.OUTPUT_VALUE, captured.answer)
    for i, doc in enumerate((captured.contexts or [])[: options.max_documents]):
        key = n.RETRIEVAL_DOCUMENT_CONTENT.format(index=i)
        attrs[key] = export(key, doc)
    if export.truncated:
        attrs[n.TRUNCATED] = export.truncated
    return attrs


def emit_retriever(tracer: Tracer, rag: trace.Span, rag_attrs: Attributes, function: str, at_ns: int) -> None:
    """A RETRIEVER child of the RAG span with the question and the documents: Phoenix shows a span's documents
    only for that kind (a CHAIN span shows its input and output), so this is where the sources show, next to
    the RAG span with the answer. Made of the RAG span's exported texts (capped, scrubbed, redacted);
    nothing without content capture or documents. Zero-length at the call's end: it records what was
    retrieved, not how long retrieving took. ``faithtrace.function`` marks it as faithtrace's own
    (``faithtrace serve`` never reads it as the app's retriever)."""
    docs = {k: v for k, v in rag_attrs.items() if k.startswith(_DOCUMENTS_PREFIX)}
    if not docs:
        return
    attrs: Attributes = {n.OPENINFERENCE_SPAN_KIND: n.OPENINFERENCE_KIND_RETRIEVER, n.FUNCTION: function}
    attrs.update(docs)
    if n.INPUT_VALUE in rag_attrs:
        attrs[n.INPUT_VALUE] = rag_attrs[n.INPUT_VALUE]
    span = tracer.start_span(
        n.RETRIEVER_SPAN, context=trace.set_span_in_context(rag), attributes=attrs, start_time=at_ns
    )
    span.end(end_time=at_ns)


_DOCUMENTS_PREFIX = n.RETRIEVAL_DOCUMENT_CONTENT.split("{", 1)[0]


def remote_attributes(
    captured: Captured, function: str, options: CaptureOptions, scoring: ScoringOptions
) -> Attributes:
    """The RAG span's attributes for ``faithtrace serve``: the texts cut to what scoring reads (not to the
    display cap), marked for remote scoring. Secret scrubbing and ``redact`` still apply (the scorer sees
    what leaves the process); with ``content=False`` no text leaves, and the scorer counts the span as
    incomplete."""
    limit = min(1_000_000, max(scoring.max_answer_chars, scoring.max_context_chars) + 1)
    wide = options.model_copy(update={"max_attribute_chars": limit, "max_documents": _REMOTE_MAX_DOCUMENTS})
    attrs = rag_attributes(captured, function, wide)
    attrs[n.SCORING_REMOTE] = True
    attrs[n.SAMPLED] = True
    return attrs


# The SDK keeps 128 attributes per span by default; documents are bounded in characters by the scoring limits.
_REMOTE_MAX_DOCUMENTS = 100
