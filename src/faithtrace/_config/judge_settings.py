"""How to reach the judge model: one immutable settings object, from arguments or ``FAITHTRACE_JUDGE_*``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, SecretStr

from faithtrace._config import options
from faithtrace._config.options import field

StructuredOutput = Literal["auto", "json_schema", "json_object", "tool"]


class JudgeSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str | None = field("judge.model")
    api_base: str | None = field("judge.api_base")
    api_key: SecretStr | None = field("judge.api_key")
    timeout_s: float = field("judge.timeout_s")
    max_retries: int = field("judge.max_retries")
    max_repairs: int = field("judge.max_repairs")
    max_concurrency: int = field("judge.max_concurrency")
    temperature: float = field("judge.temperature")
    max_tokens: int = field("judge.max_tokens")
    structured_output: StructuredOutput = field("judge.structured_output")
    extra_params: dict[str, Any] = field("judge.extra_params")

    @property
    def is_local(self) -> bool:
        return self.model is None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> JudgeSettings:
        """Settings from ``FAITHTRACE_JUDGE_*``; explicit ``overrides`` (not None) win over the env."""
        values = options.env_values("judge", environ)
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls.model_validate(values)


JudgeSettings.__doc__ = options.docstring(
    "The judge: any litellm model, or (``model=None``) the embedded local judge.", "judge"
)
