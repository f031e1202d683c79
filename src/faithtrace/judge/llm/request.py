"""One request to the judge's model, as litellm takes it: where it goes (``Endpoint``), the parameters of a
structured-output mode, and the call made out of the host's telemetry (``isolated``). The client
(``client.py``) decides what to send and what to do with the reply.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

from opentelemetry import context as otel_context

# The OTel key instrumentations check before tracing a call: set while the judge runs so that a host app that
# instruments litellm/OpenAI does not trace our judge calls a second time.
from opentelemetry.context import _SUPPRESS_INSTRUMENTATION_KEY as _SUPPRESS_KEY

from faithtrace.judge.llm import _litellm as _litellm_module
from faithtrace.judge.llm import reply as _reply

T_co = TypeVar("T_co", covariant=True)
Message = dict[str, Any]


@dataclass(frozen=True)
class Endpoint:
    """Where requests go: what litellm needs, resolved once (the local judge starts lazily)."""

    model: str
    api_base: str | None = None
    api_key: str | None = None
    local: bool = False
    display_model: str | None = None


def output_mode(setting: str, ep: Endpoint) -> str:
    """The structured-output mode for ``ep``: ``setting`` unless it is ``auto``."""
    mode = setting
    if mode == "auto":
        if ep.local:
            # llama-cpp-python's server rejects json_schema but grammar-constrains json_object + schema.
            mode = "json_object"
        else:
            mode = "json_object"
            try:
                lm = _litellm_module.load()
                if lm.supports_response_schema(model=ep.model):
                    mode = "json_schema"
                elif lm.supports_function_calling(model=ep.model):
                    mode = "tool"
            except Exception:  # unknown model to litellm's map: JSON mode works almost everywhere
                mode = "json_object"
    return mode


def format_params(mode: str, name: str, schema: dict[str, Any], local: bool) -> dict[str, Any]:
    if mode == "json_schema":
        return {
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": name, "schema": schema, "strict": False},
            }
        }
    if mode == "tool":
        return {
            "tools": [{"type": "function", "function": {"name": name, "parameters": schema}}],
            "tool_choice": {"type": "function", "function": {"name": name}},
        }
    fmt: dict[str, Any] = {"type": "json_object"}
    if local:
        fmt["schema"] = schema  # passed through by litellm; llama.cpp turns it into a grammar
    return {"response_format": fmt, **(_reply.local_params() if local else {})}


class Degraded(Exception):
    """The judge refused a request feature (log-probabilities, a structured-output mode), now switched off
    for this judge: the same request goes again at once, without it."""


def pairs(messages: list[Message]) -> tuple[tuple[str, str], ...]:
    return tuple((str(m.get("role", "")), str(m.get("content") or "")) for m in messages)


def isolated(coro: Coroutine[Any, Any, T_co]) -> asyncio.Task[T_co]:
    """Run ``coro`` (a litellm call) as a task whose context keeps it out of the host's telemetry.

    * OTel's "suppress instrumentation" key: a host that instruments litellm/OpenAI does not trace the judge.
    * litellm's own internal-call flag (a ContextVar litellm sets for the calls it makes itself): litellm
      then schedules no async success/failure logging for the request. That keeps the judge's calls out of
      the host's ``litellm.callbacks`` and, above all, off litellm's process-wide logging worker, whose queue
      is bound to one event loop: fed from faithtrace's loop and the host's loop in turn, it re-binds on
      every switch and drops or double-awaits the host's own logging tasks ("event loop changed", "cannot
      reuse already awaited coroutine", "Task was destroyed but it is pending").

    Both are context values, not globals: the host's concurrent calls see nothing of them. The task gets its
    own copy of the context, so nothing has to be detached afterwards: an attach/detach pair around an
    ``await`` breaks when the task is cancelled at loop shutdown ("token created in a different Context").
    """
    ctx = contextvars.copy_context()
    ctx.run(otel_context.attach, otel_context.set_value(_SUPPRESS_KEY, True))
    internal_call = _litellm_internal_call_flag()
    if internal_call is not None:
        ctx.run(internal_call.set, True)
    return asyncio.get_running_loop().create_task(coro, context=ctx)


def _litellm_internal_call_flag() -> contextvars.ContextVar[bool] | None:
    try:
        from litellm._internal_context import is_internal_call
    except ImportError:  # an older litellm: "no-log" still keeps the host's callbacks out
        return None
    flag: contextvars.ContextVar[bool] = is_internal_call
    return flag
