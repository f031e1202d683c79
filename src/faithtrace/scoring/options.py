"""Scoring options shared by ``evaluate()``, the CLI and the decorator's worker."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from faithtrace import _env
from faithtrace.scoring.models import IdkPolicy


class ScoringOptions(BaseModel):
    """How answers are scored.

    Args:
        threshold: ``score >= threshold`` passes. Defaults to ``FAITHTRACE_THRESHOLD`` or 0.7.
        idk_policy: ``penalize`` (default) counts claims the context does not support against the answer;
            ``deepeval`` reproduces DeepEval's default, where only contradicted claims count against.
            Defaults to ``FAITHTRACE_IDK_POLICY``.
        use_truths: also extract the facts stated in each retrieved document (cached per document and judge
            model) and show them to the verdict step next to the raw context. Off by default: see the README
            for the dev-set evidence. Defaults to ``FAITHTRACE_USE_TRUTHS``.
        include_reason: write a one-paragraph explanation (no LLM call when every claim is supported).
        verdict_batch_size: claims judged per verdict call; more claims make more calls.
        max_claims: claims beyond this are not judged (and the result says how many were cut).
        max_context_chars: retrieved text beyond this is cut before it reaches the judge, to bound tokens.
        max_answer_chars: answer text beyond this is cut before claim extraction.
    """

    model_config = ConfigDict(frozen=True)

    threshold: float = Field(default=0.7, ge=0.0, le=1.0)
    idk_policy: IdkPolicy = IdkPolicy.PENALIZE
    use_truths: bool = False
    include_reason: bool = True
    verdict_batch_size: int = Field(default=8, ge=1, le=64)
    max_claims: int = Field(default=40, ge=1, le=500)
    max_context_chars: int = Field(default=24_000, ge=500)
    max_answer_chars: int = Field(default=8_000, ge=100)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> ScoringOptions:
        values: dict[str, Any] = {
            "threshold": _env.read("FAITHTRACE_THRESHOLD", float, 0.7, environ, lambda v: 0.0 <= v <= 1.0),
            "idk_policy": _env.read("FAITHTRACE_IDK_POLICY", IdkPolicy, IdkPolicy.PENALIZE, environ),
            "use_truths": _env.read("FAITHTRACE_USE_TRUTHS", _env.parse_bool, False, environ),
        }
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls.model_validate(values)
