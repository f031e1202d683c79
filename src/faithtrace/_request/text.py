"""Host values as text: documents, chunks and answers, without reading anything the host still needs.

Everything read here is the host's, and may misbehave: a property, a dict's ``get`` or a node's
``get_content()`` may raise, an ``int`` may be too large to print. The callers (``CaptureSpec``, the stream
wrappers) read one field at a time and turn what it raises into that field's ``InputError``. The texts kept
are plain ``str`` copies: a ``str`` subclass's own methods are the host's code too, and the texts are sliced,
scrubbed and joined later, on other threads.
"""

from __future__ import annotations

import inspect
import itertools
from collections.abc import Mapping, Sequence
from typing import Any, Final

from faithtrace._common.safety import describe
from faithtrace._telemetry import names as n

# Fields that hold a document's or a chunk's text, in the order they are tried.
_TEXT_FIELDS: Final = ("text", "content", "page_content", "answer", "delta", "document", "chunk", "body")
_MAX_CONTEXTS: Final = 1000  # documents kept per call, whatever the app retrieved


class CaptureError(Exception):
    """A capture spec did not match this call, or what it found is not text (a user-side mismatch, not a
    faithtrace bug). ``field`` names the text it was after (query, contexts, answer) when known."""

    outcome: str = n.OUTCOME_CAPTURE_ERROR

    def __init__(self, message: str, field: str = "") -> None:
        super().__init__(message)
        self.field = field

    @property
    def message(self) -> str:
        """What went wrong, without the field (which the span carries in an attribute of its own)."""
        return super().__str__()

    def __str__(self) -> str:
        return f"{self.field}: {self.message}" if self.field else self.message


class InputError(CaptureError):
    """A host value raised while being read as text (its ``__str__``, a property, a dict's ``get``, a node's
    ``get_content()``, an ``int`` too large to print): the host's input, not faithtrace's bug."""

    outcome = n.OUTCOME_INPUT_ERROR

    @classmethod
    def reading(cls, field: str, exc: BaseException) -> InputError:
        return cls(f"could not be read as text ({describe(exc)[:300]})", field)


def plain(text: str) -> str:
    """``text`` as a plain ``str``: a subclass's slicing, ``len`` or ``__str__`` may be anything."""
    return text if type(text) is str else str.__getitem__(text, slice(None))


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
    return plain(content) if isinstance(content, str) else None


def to_text(value: Any) -> str | None:
    """A document, a chunk or an answer as text: strings, bytes, numbers, dicts and objects with a text field.

    Never a repr: an object with no text field raises ``CaptureError`` (``str()`` of a host object may consume
    it, as LlamaIndex's StreamingResponse does, and its repr is not an answer).
    """
    if value is None:
        return None
    if isinstance(value, str):
        return plain(value)
    # The base types' own methods, never a subclass's: bytes(value) would call the host's __bytes__.
    if isinstance(value, bytes):
        return bytes.decode(value, "utf-8", errors="replace")
    if isinstance(value, bytearray):
        return bytearray.decode(value, "utf-8", errors="replace")
    if isinstance(value, int) and not isinstance(value, bool):
        return int.__repr__(value)  # raises ValueError past 4300 digits: the caller's InputError
    if isinstance(value, float):
        return float.__repr__(value)
    if is_stream(value):
        raise CaptureError(f"the value is a stream ({type(value).__name__}) that faithtrace cannot read")
    if isinstance(value, Mapping):
        for name in _TEXT_FIELDS:
            field = value.get(name)
            if isinstance(field, str):
                return plain(field)
        raise CaptureError(f"a dict with none of the text keys {', '.join(_TEXT_FIELDS)}")
    content = _node_content(value)
    if content is not None:
        return content
    for name in _TEXT_FIELDS:
        field = field_of(value, name)
        if isinstance(field, str):
            return plain(field)
    raise CaptureError(f"a {type(value).__name__} has no text field ({', '.join(_TEXT_FIELDS)})")


def chunk_text(chunk: Any) -> str | None:
    """A streamed chunk's text, or None for a chunk that carries none (LangChain's ``{"context": …}``)."""
    if type(chunk) is str:
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
        value = list(itertools.islice(value.values(), _MAX_CONTEXTS))  # {id: document}
    if isinstance(value, Sequence | set | frozenset):
        texts = []
        # islice, not list(): a sequence may claim any length (a lazy view over a store).
        for item in itertools.islice(value, _MAX_CONTEXTS):
            text = to_text(item)
            if text:
                texts.append(text)
        return texts
    text = to_text(value)
    return [text] if text else []
