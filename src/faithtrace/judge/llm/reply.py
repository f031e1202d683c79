"""Reading a judge reply: the text, usage and cost out of a litellm response, JSON repair, error classes; and
the parameters every request to the embedded judge carries."""

from __future__ import annotations

import json
import os
import random
from typing import Any

from pydantic import ValidationError


def _caused_by_text(exc: BaseException) -> bool:
    """The request could not be built from the texts (a character UTF-8 cannot encode): the input's fault,
    however litellm wraps it (it reports an encoding failure as an ``APIConnectionError``)."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, UnicodeError):
            return True
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    message = str(exc)
    return "codec can't encode" in message or "surrogates not allowed" in message


def error_type(exc: BaseException) -> str:
    if _caused_by_text(exc):
        return "input_error"  # never retried, and never blamed on the judge's setup
    name = type(exc).__name__
    mapping = {
        "Timeout": "timeout",
        "TimeoutError": "timeout",
        "APITimeoutError": "timeout",
        "RateLimitError": "rate_limited",
        "APIConnectionError": "judge_unavailable",
        "ServiceUnavailableError": "judge_unavailable",
        "InternalServerError": "judge_server_error",
        "AuthenticationError": "judge_auth",
        "BadRequestError": "judge_bad_request",
        "NotFoundError": "judge_bad_request",
        "ContextWindowExceededError": "context_window_exceeded",
    }
    etype = mapping.get(name, name)
    if etype == "judge_server_error" and "connection error" in str(exc).lower():
        # litellm reports a refused/reset connection to an OpenAI-compatible server as a 500.
        etype = "judge_unavailable"
    return etype


RETRYABLE = {"timeout", "rate_limited", "judge_unavailable", "judge_server_error"}


def content(response: Any, mode: str) -> tuple[str, str | None]:
    choice = response.choices[0]
    message = choice.message
    finish = getattr(choice, "finish_reason", None)
    if mode == "tool":
        tool_calls = getattr(message, "tool_calls", None) or []
        if tool_calls:
            return str(tool_calls[0].function.arguments or ""), finish
    return str(message.content or ""), finish


# Sent to the embedded judge: llama-cpp-python's server penalises every token the reply already holds (1.1 by
# default), so in a verdict list each "yes" would be less likely the more claims before it were supported.
# RAGTruth, 120 rows: balanced accuracy 0.683 -> 0.692, AUROC 0.811 -> 0.822; the probes unchanged.
def local_params() -> dict[str, Any]:
    return {"extra_body": {"repeat_penalty": 1.0}}  # a fresh dict per request: litellm may change it


TOP_LOGPROBS = 5
# One output token: its text and its most likely alternatives at that position, text -> log-probability.
TokenLogprobs = tuple[str, dict[str, float]]


def token_logprobs(response: Any) -> list[TokenLogprobs] | None:
    """The reply's tokens with their top alternatives (OpenAI ``logprobs.content``), or None if absent."""
    try:
        content = response.choices[0].logprobs.content
    except (AttributeError, IndexError, TypeError):
        return None
    if not content:
        return None
    out: list[TokenLogprobs] = []
    for item in content:
        token = _field(item, "token")
        if not isinstance(token, str):
            return None
        top = {
            str(_field(alt, "token")): float(_field(alt, "logprob"))
            for alt in (_field(item, "top_logprobs") or [])
            if _field(alt, "token") is not None and _field(alt, "logprob") is not None
        }
        top.setdefault(token, float(_field(item, "logprob") or 0.0))
        out.append((token, top))
    return out


def _field(obj: Any, name: str) -> Any:
    return obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)


def cost(lm: Any, response: Any) -> float | None:
    try:
        cost = lm.completion_cost(completion_response=response)
    except Exception:  # unknown price: say so rather than report 0
        return None
    return float(cost) if cost is not None else None


def price_per_token(lm: Any, model: str) -> float | None:
    """The model's dearer per-token price (input or output) in litellm's price map, or None if unknown: what
    a budget reserves per expected token before the first reply says what an evaluation really costs."""
    try:
        info = lm.get_model_info(model)
    except Exception:  # a model litellm has no price for
        return None
    prices = [info.get(k) for k in ("input_cost_per_token", "output_cost_per_token")]
    known = [float(p) for p in prices if isinstance(p, int | float)]
    return max(known) if known else None


def parse_json(raw: str) -> Any:
    """Parse a reply, repairing what small models and truncation break (fences, trailing commas, cut-offs)."""
    text = raw.strip()
    if not text:
        raise ValueError("the reply was empty")
    try:
        return json.loads(text)
    except ValueError:
        pass
    import json_repair

    repaired = json_repair.loads(text)
    if repaired in ("", None, [], {}) and text not in ("[]", "{}"):
        raise ValueError("the reply was not JSON")
    return repaired


def describe(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        parts = [f"{'.'.join(str(p) for p in e['loc']) or 'reply'}: {e['msg']}" for e in exc.errors()[:5]]
        return "; ".join(parts)
    return str(exc)


def rejects_format(exc: BaseException) -> bool:
    if isinstance(exc, ModuleNotFoundError):  # litellm builds with tools= import an optional package (mcp)
        return True
    text = str(exc).lower()
    if "no module named" in text:  # ... which litellm usually wraps in an APIConnectionError
        return True
    return error_type(exc) == "judge_bad_request" and any(
        k in text for k in ("response_format", "json_schema", "tool_choice", "tools")
    )


def rejects_logprobs(exc: BaseException) -> bool:
    text = str(exc).lower()
    return "logprobs" in text and any(k in text for k in ("not supported", "unsupported", "logits_all"))


def short(exc: BaseException, limit: int = 300) -> str:
    text = str(exc).replace("\n", " ")
    return text if len(text) <= limit else text[:limit] + "…"


# Our own generator, never the ``random`` module's (an app's seeded sequence must not shift when a judge call
# is retried); reseeded in a forked child so that workers do not back off in lockstep.
_random = random.Random()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_random.seed)


def jitter() -> float:
    return _random.random()
