"""Scoring options shared by ``evaluate()``, the CLI and the decorator's worker."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

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
        claim_source: ``sentences`` (default) splits the answer into its sentences and list items in code, so
            an evaluation costs one judge call; ``judge`` asks the judge to extract atomic claims first (one
            more call, and the 1.5B local judge drops details such as an invented tool while rewording).
        prove_support: skip the judge for a claim code can *prove* supported: one document sentence contains
            it, up to inflection and number format, with every number, name, negation and condition aligned
            (``proof``). Every other claim is judged. On by default.
        verdict_policy: what happens when the lexical check (the claim's numbers and content words looked up
            in the documents) disagrees with the judge. Both verdicts are always recorded on the claim
            (``judge_verdict``, ``check_verdict``) and on its ``faithtrace.claim`` event. ``judge``: the
            judge's verdict stands. ``numbers``: a judge's "yes" for a claim with a number (compared by
            value: "10,000" = "10 000") that occurs nowhere in the documents or question becomes "idk".
            ``strict``:
            also a "yes" for a claim more than 30 % of whose content words occur nowhere in the documents (it
            trades faithful synonyms for added material). The check never raises a verdict: a "no" or "idk"
            always stands. ``auto`` (default): ``judge`` with any configured model, ``numbers`` with the
            embedded 1.5B judge, which says "yes" to a swapped year.
        verdict_logprobs: ask the judge for the verdict tokens' log-probabilities and record P(yes) per claim
            as ``p_supported``. ``auto`` (default): ``on`` with the embedded judge (llama.cpp returns them),
            ``off`` with other models (not every provider supports ``logprobs``).
        min_p_supported: with a judge that returns log-probabilities (the embedded one), a "yes" counts only
            when the judge's probability of "yes" among yes/no/idk, ``p_supported``, is at least this; below
            it the verdict is the judge's next most likely answer. 0 turns it off. Default 0.8, chosen on the
            tuning two thirds of the probe set (benchmarks/README.md): the embedded judge writes "yes" for
            many contradictions, but with P(yes) below 0.8 for most of them, above it for most paraphrases.
        verdict_context: what each claim is judged against. ``documents``: all retrieved documents, once per
            call. ``evidence``: only the two document sentences that share the most words with the claim,
            picked in code. ``auto`` (default): ``evidence`` with the embedded local judge (a 1.5B model reads
            a short claim/evidence pair well and a long document poorly), ``documents`` otherwise.
        include_reason: write a short explanation of the score (in code, from the verdicts).
        judge_reason: have the judge write that explanation instead (one more call when a claim fails).
        verdict_batch_size: claims judged per verdict call; more claims make more calls.
        max_claims: claims beyond this are not judged (and the result says how many were cut).
        max_context_chars: retrieved text beyond this is cut before it reaches the judge, to bound tokens.
        max_answer_chars: answer text beyond this is cut before claim extraction.
    """

    model_config = ConfigDict(frozen=True)

    threshold: float = Field(default=0.7, ge=0.0, le=1.0)
    idk_policy: IdkPolicy = IdkPolicy.PENALIZE
    use_truths: bool = False
    claim_source: Literal["sentences", "judge"] = "sentences"
    prove_support: bool = True
    verdict_policy: Literal["auto", "judge", "numbers", "strict"] = "auto"
    verdict_logprobs: Literal["auto", "on", "off"] = "auto"
    min_p_supported: float = Field(default=0.8, ge=0.0, le=1.0)
    verdict_context: Literal["auto", "documents", "evidence"] = "auto"
    include_reason: bool = True
    judge_reason: bool = False
    verdict_batch_size: int = Field(default=16, ge=1, le=64)
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
