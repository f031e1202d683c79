"""One span as the sources see it, the conventions that make a span self-contained RAG work, and the
OpenInference text decoding (``input.value`` may be a JSON document).

Every source starts from an attribute-key check that costs a set lookup per key: most spans are not RAG, and
nothing is decoded for them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, Final, NamedTuple

from pydantic import BaseModel, ConfigDict, Field

from faithtrace._telemetry import names as n

# Span roles in a trace.
OWN: Final = "own"  # a self-contained span (faithtrace's remote span or a configured convention)
RETRIEVER: Final = "retriever"  # an OpenInference RETRIEVER span: documents
CHAIN: Final = "chain"  # an OpenInference span that may hold the question and answer
OWNED: Final = "owned"  # a span faithtrace's decorator scored in-process: its trace is not ours to score

_OI_TEXT_KINDS: Final = frozenset({"CHAIN", "AGENT", "LLM", "TOOL", "UNKNOWN", ""})
_LLM_FIRST_OUTPUT: Final = n.LLM_OUTPUT_MESSAGE_CONTENT.format(index=0)


class Convention(BaseModel):
    """Where one span keeps the question, the documents and the answer (a documented, configurable mapping).

    Args:
        name: shown in logs and counts.
        marker: the attribute whose presence selects a span (the cheap check).
        query: attributes tried in order for the question.
        answer: attributes tried in order for the answer.
        documents: an attribute holding a list of strings (or one string), or a key template with
            ``{index}`` (0, 1, ...) as in OpenInference's ``retrieval.documents.{index}.document.content``.
        function: the attribute naming the function (metrics label); the span's name when absent.
    """

    model_config = ConfigDict(frozen=True)

    name: str
    marker: str
    query: tuple[str, ...] = ()
    answer: tuple[str, ...] = Field(min_length=1)
    documents: str
    function: str | None = None


FAITHTRACE_REMOTE: Final = Convention(
    name="faithtrace",
    marker=n.SCORING_REMOTE,
    query=(n.INPUT_VALUE,),
    answer=(n.OUTPUT_VALUE,),
    documents=n.RETRIEVAL_DOCUMENT_CONTENT,
    function=n.FUNCTION,
)


class SpanView(NamedTuple):
    """The little the sources keep of a span (decoded only for spans that passed the key check)."""

    trace_id: int
    span_id: int
    parent_id: int  # 0: a root span
    name: str
    role: str
    attrs: Mapping[str, Any]
    start_ns: int
    end_ns: int = 0  # 0: not known
    local_root: bool = False  # its parent is in another process (remote): the root of this service's part


class RagItem(NamedTuple):
    """One answer to score, and the span its evaluation belongs to."""

    trace_id: int
    span_id: int
    function: str
    query: str | None
    contexts: tuple[str, ...]
    answer: str
    source: str


def cut(item: RagItem, max_answer_chars: int, max_context_chars: int) -> RagItem:
    """``item`` cut to what scoring reads (the scoring limits), so queued work holds bounded memory."""
    contexts: list[str] = []
    budget = max_context_chars + 1
    for text in item.contexts:
        if budget <= 0:
            break
        contexts.append(text[:budget])
        budget -= len(text)
    query = item.query[:max_answer_chars] if item.query else item.query
    return item._replace(query=query, answer=item.answer[: max_answer_chars + 1], contexts=tuple(contexts))


def watched_keys(conventions: tuple[Convention, ...]) -> frozenset[str]:
    """Attribute keys that make a span worth decoding."""
    return frozenset({n.OPENINFERENCE_SPAN_KIND, n.FUNCTION, *(c.marker for c in conventions)})


def role_of(attrs: Mapping[str, Any], parent_id: int, conventions: tuple[Convention, ...]) -> str | None:
    """The span's role, or None when it is nothing to the sources."""
    for convention in conventions:
        if convention.marker in attrs:
            return OWN
    if n.FUNCTION in attrs:
        return OWNED
    kind = attrs.get(n.OPENINFERENCE_SPAN_KIND)
    if kind is None:
        return None
    if kind == n.OPENINFERENCE_KIND_RETRIEVER:
        return RETRIEVER
    # A span with either text is kept: a streaming engine's query span has the question but no answer text
    # (the answer is on the LLM span beneath it), and its parent links lead from that LLM span up to it.
    if (kind in _OI_TEXT_KINDS or not parent_id) and (
        n.INPUT_VALUE in attrs or n.OUTPUT_VALUE in attrs or _LLM_FIRST_OUTPUT in attrs
    ):
        return CHAIN
    return None


def is_llm(attrs: Mapping[str, Any]) -> bool:
    return attrs.get(n.OPENINFERENCE_SPAN_KIND) == n.OPENINFERENCE_KIND_LLM


def convention_of(attrs: Mapping[str, Any], conventions: tuple[Convention, ...]) -> Convention | None:
    return next((c for c in conventions if c.marker in attrs), None)


def _text(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, list | tuple) and value and all(isinstance(v, str) for v in value):
        return "\n".join(value)
    return None


def documents(attrs: Mapping[str, Any], key: str, max_documents: int) -> list[str]:
    """The documents under ``key``: a template with ``{index}``, or one attribute (a list or a string)."""
    if "{index}" not in key:
        value = attrs.get(key)
        if isinstance(value, str):
            return [value] if value else []
        if isinstance(value, list | tuple):
            return [v for v in value[:max_documents] if isinstance(v, str) and v]
        return []
    out: list[str] = []
    for index in range(max_documents):
        value = attrs.get(key.format(index=index))
        if value is None:
            break
        if isinstance(value, str) and value:
            out.append(value)
    return out


def self_contained(view: SpanView, convention: Convention, max_documents: int) -> RagItem | None:
    """The RAG item of a span that carries everything (None when it lacks the answer or the documents)."""
    attrs = view.attrs
    answer = next((t for t in (_text(attrs.get(k)) for k in convention.answer) if t), None)
    docs = documents(attrs, convention.documents, max_documents)
    if answer is None or not docs:
        return None
    query = next((t for t in (_text(attrs.get(k)) for k in convention.query) if t), None)
    function = attrs.get(convention.function) if convention.function else None
    return RagItem(
        view.trace_id,
        view.span_id,
        function if isinstance(function, str) and function else view.name,
        query,
        tuple(docs),
        answer,
        convention.name,
    )


# Fields that hold the text in the JSON OpenInference instrumentations write into input.value/output.value
# (LangChain: {"query": ...}/{"result": ...}, {"input": ...}/{"output": ...}, {"question": ...}; LlamaIndex
# chat engines: {"message": ...}/{"response": ...}). An output is read answer-first and never falls back to a
# question field: a retrieval chain's output {"input", "context", "answer"} repeats the question.
_INPUT_FIELDS: Final = ("query", "question", "input", "query_str", "message", "text", "content")
_OUTPUT_FIELDS: Final = ("answer", "output", "result", "response", "text", "content")

# What an instrumentation writes for an object it cannot serialise ("<generator object>", "<Foo object at
# 0x7f...>", "<NodeWithScore(...)>"): never text to score (a stream's answer is on its LLM span).
_PLACEHOLDER: Final = re.compile(r"<[A-Za-z_][\w.]*(?: object(?: at 0x[0-9a-fA-F]+)?|\(.*\))>", re.DOTALL)

_MAX_MESSAGES: Final = 64


def _pick(value: Any, fields: tuple[str, ...], depth: int = 0) -> str | None:
    if isinstance(value, str):
        return value
    if depth > 3:
        return None
    if isinstance(value, Mapping):
        for name in fields:
            if name in value:
                found = _pick(value[name], fields, depth + 1)
                if found:
                    return found
        return None
    if isinstance(value, list) and value:
        # A list of chat messages: the last one is the question (input) or the reply (output).
        return _pick(value[-1], fields, depth + 1)
    return None


def oi_text(attrs: Mapping[str, Any], key: str, mime_key: str) -> str | None:
    """``input.value`` / ``output.value`` as text, unwrapping the JSON some instrumentations record (an
    output's answer field first), or None when it holds no text (an unserialisable object's placeholder)."""
    value = attrs.get(key)
    if not isinstance(value, str) or not value:
        return None
    output = key == n.OUTPUT_VALUE
    if attrs.get(mime_key) == n.MIME_JSON or value[:1] in "{[":
        try:
            parsed = json.loads(value)
        except ValueError:
            parsed = value
        value = _pick(parsed, _OUTPUT_FIELDS if output else _INPUT_FIELDS) or ""
    if output and _PLACEHOLDER.fullmatch(value.strip()):
        return None
    return value or None


def llm_reply(attrs: Mapping[str, Any]) -> str | None:
    """An LLM span's reply: its last ``llm.output_messages`` content, else its ``output.value`` text."""
    if _LLM_FIRST_OUTPUT in attrs:
        reply: str | None = None
        for index in range(_MAX_MESSAGES):
            content = attrs.get(n.LLM_OUTPUT_MESSAGE_CONTENT.format(index=index))
            if content is None:
                break
            if isinstance(content, str) and content:
                reply = content
        if reply:
            return reply
    return oi_text(attrs, n.OUTPUT_VALUE, n.OUTPUT_MIME_TYPE)
