"""Scoring options shared by ``evaluate()``, the CLI and the decorator's worker."""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from faithtrace._config import options as _options
from faithtrace._config.options import field


class IdkPolicy(StrEnum):
    """How a claim the context neither supports nor contradicts counts in ``score``."""

    PENALIZE = "penalize"  # default: only supported claims count for the answer
    DEEPEVAL = "deepeval"  # parity with DeepEval's default: only contradictions count against


class ScoringOptions(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    threshold: float = field("scoring.threshold")
    fail_on_contradiction: bool = field("scoring.fail_on_contradiction")
    idk_policy: IdkPolicy = field("scoring.idk_policy")
    use_truths: bool = field("scoring.use_truths")
    claim_source: Literal["sentences", "judge"] = field("scoring.claim_source")
    prove_support: bool = field("scoring.prove_support")
    verdict_policy: Literal["auto", "judge", "numbers", "checks", "strict"] = field("scoring.verdict_policy")
    verdict_logprobs: Literal["auto", "on", "off"] = field("scoring.verdict_logprobs")
    min_p_supported: float = field("scoring.min_p_supported")
    verdict_context: Literal["auto", "documents", "evidence"] = field("scoring.verdict_context")
    include_reason: bool = field("scoring.include_reason")
    judge_reason: bool = field("scoring.judge_reason")
    verdict_batch_size: int = field("scoring.verdict_batch_size")
    max_claims: int = field("scoring.max_claims")
    judge_token_budget: int | None = field("scoring.judge_token_budget")
    max_context_chars: int = field("scoring.max_context_chars")
    max_answer_chars: int = field("scoring.max_answer_chars")
    verdict_source: Literal["judge", "detector"] = field("scoring.verdict_source")
    detector_model: str | None = field("scoring.detector_model")
    detector_threshold: float = field("scoring.detector_threshold")
    detector_min_confidence: float = field("scoring.detector_min_confidence")
    detector_min_tokens: int = field("scoring.detector_min_tokens")
    detector_windows: Literal["min", "max"] = field("scoring.detector_windows")
    detector_threads: int = field("scoring.detector_threads")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> ScoringOptions:
        """Options from ``FAITHTRACE_*``; explicit ``overrides`` (not None) win over the environment."""
        values = _options.env_values("scoring", environ)
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls.model_validate(values)


ScoringOptions.__doc__ = _options.docstring(
    "How answers are scored (docs/concepts.md explains the checks and the evidence behind the defaults).",
    "scoring",
)
