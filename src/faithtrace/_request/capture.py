"""Finding the query, the contexts and the answer of a call, and turning them into bounded, scrubbed text.

Where each value comes from is resolved once, at decoration time, against the function's signature: an
argument is then read by position or keyword without binding the signature on every call.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from faithtrace._common.errors import ConfigError
from faithtrace._common.safety import describe
from faithtrace._request.text import (
    CaptureError,
    InputError,
    chunk_text,
    field_of,
    is_stream,
    to_text,
    to_texts,
)
from faithtrace._telemetry.records import Captured

__all__ = ["CaptureError", "InputError", "chunk_text", "read", "to_text", "to_texts"]

Spec = str | Callable[..., Any] | None

QUERY_NAMES: Final = ("query", "question", "q")
CONTEXT_NAMES: Final = ("contexts", "context", "documents", "docs")
# On the return value: our own names first, then LlamaIndex's ``Response.response``/``source_nodes`` and
# LangChain's chains (``{"input", "context", "answer"}`` from create_retrieval_chain, ``{"query", "result",
# "source_documents"}`` from RetrievalQA, ``{"input", "output"}`` from agents).
ANSWER_NAMES: Final = ("answer", "text", "content", "response", "result", "output")
_RESULT_QUERY_NAMES: Final = ("query", "question", "input")
# ``source_nodes`` before ``sources``: a LlamaIndex chat response has both, and its ``sources`` are tool
# outputs whose content is the repr of the node list.
_RESULT_CONTEXT_NAMES: Final = (*CONTEXT_NAMES, "source_nodes", "source_documents", "sources", "chunks")
# An attribute holding the answer's stream on a result object (LlamaIndex's StreamingResponse).
STREAM_FIELD: Final = "response_gen"


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Final = _Missing()


@dataclass(slots=True)
class Call:
    """One call's raw material, as the wrapper got it."""

    instance: Any
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    offset: int  # 1 when args lack the bound self/cls that the signature lists first
    result: Any


Getter = Callable[[Call], Any]


# --- resolving specs ---------------------------------------------------------------------------------------
def _arity(func: Callable[..., Any]) -> int:
    try:
        params = inspect.signature(func).parameters.values()
    except (TypeError, ValueError):
        return 2
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if any(p.kind is p.VAR_POSITIONAL for p in params) or len(positional) >= 2:
        return 2
    return 1


def _path_getter(path: str) -> Callable[[Any], Any]:
    parts = [p for p in path.split(".") if p]
    if not parts:
        raise ConfigError(f"empty capture path {path!r}")

    def get(value: Any) -> Any:
        for part in parts:
            if isinstance(value, Mapping):
                if part not in value:
                    raise CaptureError(f"the return value has no key {part!r} (path {path!r})")
                value = value[part]
            elif part.isdigit() and isinstance(value, Sequence) and not isinstance(value, str):
                index = int(part)
                if index >= len(value):
                    raise CaptureError(f"the return value has no item {index} (path {path!r})")
                value = value[index]
            elif hasattr(value, part):
                value = getattr(value, part)
            else:
                raise CaptureError(f"the return value has no attribute {part!r} (path {path!r})")
        return value

    return get


def _lookup_default(value: Any, names: Sequence[str]) -> Any:
    if isinstance(value, Mapping):
        for name in names:
            if name in value:
                return value[name]
        return MISSING
    if value is None or isinstance(value, str | bytes | int | float | list | tuple):
        return MISSING
    for name in names:
        try:
            found = getattr(value, name, MISSING)
        except Exception:  # a property that does not apply to this object
            continue
        if found is not MISSING and not callable(found):
            return found
    return MISSING


Slot = tuple[Any, Callable[[Any], Any]]  # a stream, and how to put its wrapper in its place


def _stream_slot(result: Any, parts: Sequence[str]) -> Slot | None:
    """Where the answer's stream sits in ``result``: the result itself, or its ``path`` (by default
    ``response_gen``, as on LlamaIndex's StreamingResponse) on the object that holds it."""
    if is_stream(result):
        return result, lambda wrapper: wrapper
    if isinstance(result, str | bytes | int | float | list | tuple) or result is None:
        return None  # the common answers: nothing to look into
    holder = result
    if len(parts) > 1:
        try:
            holder = _path_getter(".".join(parts[:-1]))(result)
        except (CaptureError, ConfigError):
            return None
    name = parts[-1]
    if isinstance(holder, Mapping):
        value = holder.get(name)
        if not is_stream(value):
            return None
        if not isinstance(holder, MutableMapping):
            raise CaptureError(f"the answer's stream at {name!r} is in a read-only mapping")

        def put_item(wrapper: Any) -> Any:
            try:
                holder[name] = wrapper
            except Exception as exc:  # the host's mapping refused it: leave the stream alone, unread
                raise InputError(f"cannot watch its stream at {name!r}: {describe(exc)}", "answer") from None
            return result

        return value, put_item
    value = field_of(holder, name)
    if not is_stream(value):
        return None

    def put_attribute(wrapper: Any) -> Any:
        try:
            setattr(holder, name, wrapper)
        except Exception as exc:  # frozen objects: leave the stream alone rather than read it
            raise CaptureError(f"cannot watch its stream at {name!r}: {describe(exc)}", "answer") from None
        return result

    return value, put_attribute


class CaptureSpec:
    """How to find query, contexts and answer for one decorated function."""

    def __init__(
        self, func: Callable[..., Any], *, query: Spec, contexts: Spec, answer: Spec, streaming: bool
    ) -> None:
        try:
            self._params = list(inspect.signature(func).parameters.values())
        except (TypeError, ValueError):  # builtins without a signature: captures come from specs only
            self._params = []
        self._by_name = {p.name: (i, p) for i, p in enumerate(self._params)}
        # Only the default answer and a path can name a stream we know how to watch (not a callable's value).
        path = answer if isinstance(answer, str) else STREAM_FIELD
        self._stream_parts = tuple(p for p in path.split(".") if p)
        self._watch_streams = answer is None or isinstance(answer, str)
        self.default_answer = answer is None
        self.query = self._resolve("query", query, QUERY_NAMES, _RESULT_QUERY_NAMES)
        self.contexts = self._resolve("contexts", contexts, CONTEXT_NAMES, _RESULT_CONTEXT_NAMES)
        self.answer = self._resolve_answer(answer, streaming)

    # --- decoration time -----------------------------------------------------------------------------------
    def _arg_getter(self, name: str) -> Getter:
        index, param = self._by_name[name]
        keyword = param.kind is not param.POSITIONAL_ONLY
        positional = param.kind in (param.POSITIONAL_ONLY, param.POSITIONAL_OR_KEYWORD)
        default = MISSING if param.default is param.empty else param.default
        if param.kind is param.VAR_KEYWORD:
            return lambda call: call.kwargs or MISSING
        if param.kind is param.VAR_POSITIONAL:
            return lambda call: call.args[index - call.offset :] or MISSING

        def get(call: Call) -> Any:
            if keyword and name in call.kwargs:
                return call.kwargs[name]
            if positional:
                i = index - call.offset
                if 0 <= i < len(call.args):
                    return call.args[i]
            return default

        return get

    def _callable_getter(self, what: str, func: Callable[..., Any]) -> Getter:
        """The user's own ``query=``/``contexts=``/``answer=`` callable: what it raises is a capture spec
        that does not fit this call (``capture_error``), not a value that cannot be read."""
        one = _arity(func) == 1

        def get(call: Call) -> Any:
            try:
                return func(call.result) if one else func(self.bound_arguments(call), call.result)
            except Exception as exc:
                raise CaptureError(f"the {what}= callable raised {describe(exc)[:300]}") from None

        return get

    def _resolve(
        self, what: str, spec: Spec, arg_names: Sequence[str], result_names: Sequence[str]
    ) -> Getter:
        if callable(spec):
            return self._callable_getter(what, spec)
        if isinstance(spec, str):
            if spec in self._by_name:
                return self._arg_getter(spec)
            path = _path_getter(spec)
            return lambda call: path(call.result)
        if spec is not None:
            raise ConfigError(f"{what}= must be an argument name, a path or a callable, got {spec!r}")
        for name in arg_names:
            if name in self._by_name:
                return self._arg_getter(name)
        return lambda call: _lookup_default(call.result, result_names)

    def _resolve_answer(self, spec: Spec, streaming: bool) -> Getter:
        if spec is None:

            def default(call: Call) -> Any:
                result = call.result
                if streaming or isinstance(result, str | bytes):
                    return result
                found = _lookup_default(result, ANSWER_NAMES)
                return result if found is MISSING else found

            return default
        if isinstance(spec, str) and spec in self._by_name:
            raise ConfigError(f"answer={spec!r} names an argument; the answer comes from the return value")
        return self._resolve("answer", spec, (), ())

    # --- call time -----------------------------------------------------------------------------------------
    def bound_arguments(self, call: Call) -> dict[str, Any]:
        """The call's arguments by parameter name (defaults applied), for callable specs only."""
        bound: dict[str, Any] = {}
        values = ((call.instance,) if call.offset else ()) + call.args
        pos = 0
        for param in self._params:
            if param.kind in (param.POSITIONAL_ONLY, param.POSITIONAL_OR_KEYWORD):
                if pos < len(values):
                    bound[param.name] = values[pos]
                    pos += 1
                    continue
                if param.name in call.kwargs:
                    bound[param.name] = call.kwargs[param.name]
                elif param.default is not param.empty:
                    bound[param.name] = param.default
            elif param.kind is param.VAR_POSITIONAL:
                bound[param.name] = values[pos:]
                pos = len(values)
            elif param.kind is param.KEYWORD_ONLY:
                if param.name in call.kwargs:
                    bound[param.name] = call.kwargs[param.name]
                elif param.default is not param.empty:
                    bound[param.name] = param.default
            else:
                bound[param.name] = {k: v for k, v in call.kwargs.items() if k not in bound}
        return bound

    def stream_slot(self, result: Any) -> Slot | None:
        """The answer's stream when the call returned one (to be watched, not read), else None."""
        if not self._watch_streams:
            return None
        try:
            return _stream_slot(result, self._stream_parts)
        except CaptureError as exc:
            exc.field = exc.field or "answer"
            raise
        except Exception as exc:  # the host's result misbehaved while we looked for a stream in it
            raise InputError.reading("answer", exc) from None

    def capture_inputs(self, call: Call) -> tuple[str | None, list[str] | None]:
        """Query and contexts alone, for a call whose answer is still streaming (None: not found). Raises
        ``CaptureError`` (``InputError`` for a value that raised when read), naming the field."""
        return read("query", self.query, call, to_text), read("contexts", self.contexts, call, to_texts)

    def capture(self, call: Call) -> Captured:
        """The call's texts. Raises ``CaptureError`` when a spec does not fit the call, ``InputError`` when
        a value it found raised when read, each naming the field."""
        query, contexts = self.capture_inputs(call)
        return Captured(query=query, contexts=contexts, answer=read("answer", self.answer, call, to_text))


T = TypeVar("T")


def read(field: str, getter: Callable[[Call], Any], call: Call, convert: Callable[[Any], T]) -> T | None:
    """One of the call's texts, found by ``getter`` and made text by ``convert`` (None when not found).

    The boundary with the host's objects: whatever they raise while being found or read (a property, a
    mapping's ``get`` or ``__contains__``, a node's ``get_content()``, an int too large to print, an object
    whose ``__class__`` raises) is this field's ``InputError``, never faithtrace's error."""
    try:
        value = getter(call)
        return None if value is MISSING else convert(value)
    except CaptureError as exc:
        exc.field = exc.field or field
        raise
    except Exception as exc:
        raise InputError.reading(field, exc) from None
