"""How to reach the judge model: one immutable settings object, from arguments or ``FAITHTRACE_JUDGE_*``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from faithtrace import _env

StructuredOutput = Literal["auto", "json_schema", "json_object", "tool"]


class JudgeSettings(BaseModel):
    """The judge: any litellm model, or (``model=None``) the embedded local judge.

    Args:
        model: a litellm model string (``openai/gpt-4o-mini``, ``anthropic/claude-…``, ``ollama/qwen2.5``…).
            Defaults to ``FAITHTRACE_JUDGE_MODEL``; when neither is set, the embedded local judge is used.
        api_base: an OpenAI-compatible base URL. Defaults to ``FAITHTRACE_JUDGE_API_BASE``.
        api_key: defaults to ``FAITHTRACE_JUDGE_API_KEY``; provider variables such as ``OPENAI_API_KEY`` keep
            working because litellm reads them itself.
        timeout_s: per LLM request. Defaults to ``FAITHTRACE_JUDGE_TIMEOUT`` or 60.
        max_retries: retries of one request on timeouts, 429 and 5xx, with exponential backoff and jitter.
            Defaults to ``FAITHTRACE_JUDGE_MAX_RETRIES`` or 3.
        max_repairs: how often an invalid (unparseable or schema-violating) reply is sent back to the judge
            with the validation error before the step fails. Defaults to 2.
        max_concurrency: LLM requests in flight at once, per event loop. Defaults to
            ``FAITHTRACE_JUDGE_CONCURRENCY`` or 4.
        structured_output: ``auto`` picks JSON schema where the provider supports it, else a forced tool call,
            else JSON mode.
    """

    model_config = ConfigDict(frozen=True)

    model: str | None = None
    api_base: str | None = None
    api_key: SecretStr | None = None
    timeout_s: float = Field(default=60.0, gt=0)
    max_retries: int = Field(default=3, ge=0, le=10)
    max_repairs: int = Field(default=2, ge=0, le=5)
    max_concurrency: int = Field(default=4, ge=1, le=256)
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    max_tokens: int = Field(default=1024, ge=16, le=32768)
    structured_output: StructuredOutput = "auto"
    extra_params: dict[str, Any] = Field(default_factory=dict)

    @property
    def is_local(self) -> bool:
        return self.model is None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> JudgeSettings:
        """Settings from ``FAITHTRACE_JUDGE_*``; explicit ``overrides`` win over the environment."""
        values: dict[str, Any] = {
            "model": _env.read_str("FAITHTRACE_JUDGE_MODEL", environ),
            "api_base": _env.read_str("FAITHTRACE_JUDGE_API_BASE", environ),
            "api_key": _env.read_str("FAITHTRACE_JUDGE_API_KEY", environ),
            "timeout_s": _env.read("FAITHTRACE_JUDGE_TIMEOUT", float, 60.0, environ, lambda v: v > 0),
            "max_retries": _env.read("FAITHTRACE_JUDGE_MAX_RETRIES", int, 3, environ, lambda v: 0 <= v <= 10),
            "max_concurrency": _env.read(
                "FAITHTRACE_JUDGE_CONCURRENCY", int, 4, environ, lambda v: 1 <= v <= 256
            ),
        }
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls.model_validate(values)
