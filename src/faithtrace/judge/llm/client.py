"""The only code that talks to an LLM: litellm, structured output, repair, retries, usage and cost.

A step hands over messages and a pydantic schema; it gets back a validated object plus a record of every
request made (tokens, cost, timing), or a ``JudgeError`` that carries the same records. Nothing here knows
about prompts, scores or OTel spans.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ValidationError

from faithtrace._common.errors import JudgeError
from faithtrace._common.threads import in_daemon_thread
from faithtrace._config.judge_settings import JudgeSettings
from faithtrace.judge.llm import _litellm as _litellm_module
from faithtrace.judge.llm import reply as _reply
from faithtrace.judge.llm.calls import LLMCall
from faithtrace.judge.llm.request import (
    Degraded,
    Endpoint,
    Message,
    format_params,
    isolated,
    output_mode,
    pairs,
)

logger = logging.getLogger("faithtrace")

T = TypeVar("T", bound=BaseModel)


class OutputRejected(Exception):
    """Raised by a step's ``check`` when a well-formed reply is still unusable (e.g. wrong verdict count)."""

    def __init__(self, type: str, message: str) -> None:
        super().__init__(message)
        self.type = type


@dataclass
class JudgeReply(Generic[T]):
    value: T
    calls: list[LLMCall] = field(default_factory=list)
    # The accepted reply's tokens with their most likely alternatives, when asked for and returned.
    logprobs: list[_reply.TokenLogprobs] | None = None


def _litellm() -> Any:
    return _litellm_module.load()


class Judge:
    """A litellm-backed judge. One instance may serve many event loops and threads."""

    def __init__(self, settings: JudgeSettings | None = None) -> None:
        self.settings = settings or JudgeSettings.from_env()
        self._endpoint: Endpoint | None = None
        self._mode: str | None = None
        self._logprobs_refused = False
        self._semaphores: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
            weakref.WeakKeyDictionary()
        )

    @property
    def model_name(self) -> str:
        """The model as users should see it in results and telemetry."""
        if self._endpoint is not None:
            return self._endpoint.display_model or self._endpoint.model
        return self.settings.model or "faithtrace-local"

    def unavailable_hint(self) -> str:
        """What to do when the judge cannot be reached, for the one warning the user sees."""
        s = self.settings
        if s.model is None:
            return (
                "the embedded judge did not answer: see `faithtrace judge status` and its log under "
                "~/.cache/faithtrace/judge/, or set FAITHTRACE_JUDGE_MODEL to another litellm model"
            )
        where = s.api_base or f"{s.model}'s provider"
        return (
            f"check that {where} is reachable (FAITHTRACE_JUDGE_API_BASE), the model name "
            "(FAITHTRACE_JUDGE_MODEL) and its API key"
        )

    # --- endpoint ----------------------------------------------------------------------------------------
    def endpoint(self) -> Endpoint:
        """Resolve (and for the local judge, start) the endpoint. Blocking; call off the event loop."""
        if self._endpoint is None:
            s = self.settings
            if s.model is None:
                from faithtrace.judge.local.endpoint import ensure_local_judge

                ep = ensure_local_judge()
                self._endpoint = Endpoint(
                    model=ep.model,
                    api_base=ep.api_base,
                    api_key=ep.api_key,
                    local=True,
                    display_model=ep.display_model,
                )
            else:
                key = s.api_key.get_secret_value() if s.api_key is not None else None
                self._endpoint = Endpoint(model=s.model, api_base=s.api_base, api_key=key)
        return self._endpoint

    def _timeout(self, ep: Endpoint) -> float:
        # A 1.5B model on a laptop CPU needs far longer per request than a hosted API (a long context takes
        # ~20 s of prefill at 2 cores), so the local judge gets a floor of 300 s.
        return max(self.settings.timeout_s, 300.0) if ep.local else self.settings.timeout_s

    async def _aendpoint(self) -> Endpoint:
        if self._endpoint is not None:
            return self._endpoint
        return await in_daemon_thread(self.endpoint, "faithtrace-judge-endpoint")

    def _semaphore(self) -> asyncio.Semaphore:
        loop = asyncio.get_running_loop()
        sem = self._semaphores.get(loop)
        if sem is None:
            # The embedded llama.cpp server computes one request at a time; queueing here rather than in its
            # HTTP backlog keeps our per-request timeout about the request itself, not the queue before it.
            local = self._endpoint is not None and self._endpoint.local
            sem = asyncio.Semaphore(1 if local else self.settings.max_concurrency)
            self._semaphores[loop] = sem
        return sem

    # --- structured output -------------------------------------------------------------------------------
    def _output_mode(self, ep: Endpoint) -> str:
        if self._mode is not None:
            return self._mode
        self._mode = output_mode(self.settings.structured_output, ep)
        return self._mode

    # --- the call ----------------------------------------------------------------------------------------
    async def generate(
        self,
        *,
        step: str,
        messages: Sequence[Message],
        schema: type[T],
        check: Callable[[T], None] | None = None,
        max_tokens: int | None = None,
        logprobs: bool = False,
    ) -> JudgeReply[T]:
        """Ask the judge for an object of ``schema``; retry transport errors, re-ask on invalid output.

        ``logprobs``: also ask for each output token's log-probability and top alternatives (OpenAI's
        ``logprobs``/``top_logprobs``, which llama.cpp's server implements); ``JudgeReply.logprobs`` is None
        when the provider returns none.

        Raises:
            JudgeError: with ``calls`` set to every request made, when no valid reply could be had.
        """
        ep = await self._aendpoint()
        calls: list[LLMCall] = []
        convo: list[Message] = list(messages)
        json_schema = schema.model_json_schema()
        last_error: tuple[str, str] = ("judge_output_invalid", "no reply")
        for _repair in range(self.settings.max_repairs + 1):
            try:
                raw, finish_reason, tokens = await self._complete_with_retries(
                    ep, step, convo, json_schema, calls, max_tokens, logprobs
                )
            except JudgeError as exc:
                exc.calls = list(calls)
                raise
            try:
                if finish_reason == "length":
                    # JSON repair would happily close a cut-off list and drop its tail (claims, verdicts)
                    # without anyone noticing: a truncated reply is never accepted.
                    raise ValueError("the reply was incomplete")
                value = schema.model_validate(_reply.parse_json(raw))
                if check is not None:
                    check(value)
                return JudgeReply(value=value, calls=calls, logprobs=tokens)
            except (ValueError, ValidationError) as exc:
                problem = _reply.describe(exc)
                if finish_reason == "length":
                    problem = f"the reply was cut off at the token limit ({problem}); answer more briefly"
                last_error = ("judge_output_invalid", problem)
            except OutputRejected as exc:
                last_error = (exc.type, str(exc))
            logger.debug("faithtrace: invalid %s reply (%s); asking again", step, last_error[1])
            convo = [
                *messages,
                {"role": "assistant", "content": raw[:4000]},
                {
                    "role": "user",
                    "content": f"That reply was not valid: {last_error[1]}. Reply again with only the JSON "
                    "object, following the required format exactly.",
                },
            ]
        err = JudgeError(last_error[0], f"{step}: {last_error[1]}", step=step)
        err.calls = list(calls)
        raise err

    async def _complete_with_retries(
        self,
        ep: Endpoint,
        step: str,
        messages: list[Message],
        json_schema: dict[str, Any],
        calls: list[LLMCall],
        max_tokens: int | None,
        logprobs: bool = False,
    ) -> tuple[str, str | None, list[_reply.TokenLogprobs] | None]:
        """The one retry loop: a request the judge refused for a feature it lacks is sent again at once
        without it (``Degraded``: at most twice, the feature stays off); a transient failure is sent again
        after a backoff, ``max_retries`` times."""
        s = self.settings
        delay = 1.0
        attempt = 1
        while True:
            try:
                return await self._complete_once(
                    ep, step, messages, json_schema, calls, attempt, max_tokens, logprobs
                )
            except Degraded:
                continue
            except JudgeError as exc:
                if exc.type not in _reply.RETRYABLE or attempt > s.max_retries:
                    raise
                # Exponential backoff with full jitter, capped: many workers must not retry in lockstep.
                await asyncio.sleep(min(20.0, delay) * (0.5 + _reply.jitter() / 2))
                delay *= 2
                attempt += 1
                ep = await self._aendpoint()  # a local server that went away is restarted here

    async def _complete_once(
        self,
        ep: Endpoint,
        step: str,
        messages: list[Message],
        json_schema: dict[str, Any],
        calls: list[LLMCall],
        attempt: int,
        max_tokens: int | None,
        logprobs: bool = False,
    ) -> tuple[str, str | None, list[_reply.TokenLogprobs] | None]:
        lm = _litellm()
        s = self.settings
        mode = self._output_mode(ep)
        params: dict[str, Any] = {
            "model": ep.model,
            "messages": messages,
            "temperature": s.temperature,
            "max_tokens": max_tokens or s.max_tokens,
            "timeout": self._timeout(ep),
            "num_retries": 0,  # retries are ours: counted, backed off and recorded per attempt
            # The host's litellm callbacks must not see the judge (see ``isolated``): litellm skips success
            # and failure callbacks for a "no-log" request (unless the host set global_disable_no_log_param).
            "no-log": True,
            **format_params(mode, step, json_schema, ep.local),
            **s.extra_params,
        }
        logprobs = logprobs and not self._logprobs_refused
        if logprobs:
            params.update(logprobs=True, top_logprobs=_reply.TOP_LOGPROBS)
        if ep.api_base:
            params["api_base"] = ep.api_base
        if ep.api_key:
            params["api_key"] = ep.api_key
        start_ns = time.time_ns()
        t0 = time.perf_counter()
        try:
            async with self._semaphore():
                response = await asyncio.wait_for(isolated(lm.acompletion(**params)), self._timeout(ep) + 5)
        except Exception as exc:
            etype = "timeout" if isinstance(exc, asyncio.TimeoutError) else _reply.error_type(exc)
            calls.append(
                LLMCall(
                    step=step,
                    model=self.model_name,
                    attempt=attempt,
                    start_time_ns=start_ns,
                    duration_s=time.perf_counter() - t0,
                    error_type=etype,
                    input_messages=pairs(messages),
                )
            )
            if logprobs and _reply.rejects_logprobs(exc):
                # No log-probabilities (an older local judge, some providers): sampled verdicts from now on.
                logger.info("faithtrace: judge %s gives no log-probabilities; judging without", ep.model)
                self._logprobs_refused = True
                raise Degraded from exc
            if mode != "json_object" and _reply.rejects_format(exc):
                # Gateways that reject json_schema / tools (a common RAGAS/DeepEval failure): fall back to
                # JSON mode for the rest of this judge's life and try again at once.
                logger.warning("faithtrace: judge %s rejected %s output; using JSON mode", ep.model, mode)
                self._mode = "json_object"
                raise Degraded from exc
            if ep.local and etype == "judge_unavailable":
                # The shared local server was stopped or crashed: resolve (and restart) it on the next try.
                self._endpoint = None
            raise JudgeError(etype, f"{step}: {type(exc).__name__}: {_reply.short(exc)}", step=step) from exc
        duration = time.perf_counter() - t0
        raw, finish_reason = _reply.content(response, mode)
        usage = getattr(response, "usage", None)
        calls.append(
            LLMCall(
                step=step,
                model=self.model_name,
                attempt=attempt,
                start_time_ns=start_ns,
                duration_s=duration,
                input_tokens=getattr(usage, "prompt_tokens", None),
                output_tokens=getattr(usage, "completion_tokens", None),
                cost_usd=None if ep.local else _reply.cost(lm, response),
                response_id=getattr(response, "id", None),
                finish_reason=finish_reason,
                input_messages=pairs(messages),
                output_text=raw,
            )
        )
        return raw, finish_reason, _reply.token_logprobs(response) if logprobs else None
