"""Host values as text: documents, chunks and answers, without reading anything the host still needs."""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from typing import Any, Final

# Fields that hold a document's or a chunk's text, in the order they are tried.
_TEXT_FIELDS: Final = ("text", "content", "page_content", "answer", "delta", "document", "chunk", "body")
_MAX_CONTEXTS: Final = 1000  # documents kept per call, whatever the app retrieved


class CaptureError(Exception):
    """A capture spec did not match this call (a user-side mismatch, not a faithtrace bug)."""


def is_stream(value: Any) -> bool:
    """A generator or async generator: its text exists only once the host has read it."""
    return inspect.isgenerator(value) or inspect.isasyncgen(value)


def field_of(value: Any, name: str) -> Any:
    # Properties may raise on objects they do not apply to (LlamaIndex's NodeWithScore.text on an image node).
    try:
        return getattr(value, name, None)
    except Exception:
        return None


def _node_content(value: Any) -> str | None:
    """A LlamaIndex node's text (``NodeWithScore``, ``TextNode``, ``Document``): ``get_content()`` is their
    documented, read-only accessor, and the only one that works for every node type."""
    if not type(value).__module__.startswith("llama_index."):
        return None
    get_content = field_of(value, "get_content")
    if not callable(get_content):
        return None
    content = get_content()
    return content if isinstance(content, str) else None


def to_text(value: Any) -> str | None:
    """A document, a chunk or an answer as text: strings, bytes, numbers, dicts and objects with a text field.

    Never a repr: an object with no text field raises ``CaptureError`` (``str()`` of a host object may consume
    it, as LlamaIndex's StreamingResponse does, and its repr is not an answer).
    """
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", errors="replace")
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    if is_stream(value):
        raise CaptureError(f"the value is a stream ({type(value).__name__}) that faithtrace cannot read")
    if isinstance(value, Mapping):
        for name in _TEXT_FIELDS:
            field = value.get(name)
            if isinstance(field, str):
                return field
        raise CaptureError(f"a dict with none of the text keys {', '.join(_TEXT_FIELDS)}")
    content = _node_content(value)
    if content is not None:
        return content
    for name in _TEXT_FIELDS:
        field = field_of(value, name)
        if isinstance(field, str):
            return field
    raise CaptureError(f"a {type(value).__name__} has no text field ({', '.join(_TEXT_FIELDS)})")


def chunk_text(chunk: Any) -> str | None:
    """A streamed chunk's text, or None for a chunk that carries none (LangChain's ``{"context": …}``)."""
    if isinstance(chunk, str):
        return chunk
    try:
        return to_text(chunk)
    except CaptureError:
        return None


def to_texts(value: Any) -> list[str]:
    """Retrieved contexts as a list of texts. Never consumes an iterator the app may still need."""
    if value is None:
        return []
    if isinstance(value, str | bytes | bytearray):
        text = to_text(value)
        return [text] if text else []
    if isinstance(value, Mapping):
        if any(isinstance(value.get(name), str) for name in _TEXT_FIELDS):
            text = to_text(value)
            return [text] if text else []
        value = list(value.values())  # {id: document}
    if isinstance(value, Sequence | set | frozenset):
        texts = []
        for item in list(value)[:_MAX_CONTEXTS]:
            text = to_text(item)
            if text:
                texts.append(text)
        return texts
    text = to_text(value)
    return [text] if text else []
