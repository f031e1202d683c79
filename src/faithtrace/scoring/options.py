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
        lexical_check: a "yes" for a claim whose numbers, or more than 30 % of whose content words, occur
            nowhere in the documents or the question becomes "idk" (see ``grounding``).
        absence_check: who decides that a claim is *not in* the documents. ``judge``: the judge's "idk"
            stands. ``lexical``: the lexical check alone (the judge still decides "no"), so a judge's "idk"
            for a claim whose numbers and words the documents do contain becomes "yes". ``auto`` (default):
            ``lexical`` with the embedded local judge, whose "idk" agreed with human labels no better than
            chance on RAGTruth dev rows, ``judge`` with any other model.
        contradiction_check: who decides that a claim *contradicts* the documents. ``judge``: the judge's
            "no" stands. ``lexical``: a "no" stands only for a claim the lexical check cannot ground; a claim
            whose content words occur in the documents and whose numbers occur in its own evidence sentences
            counts as supported. ``auto`` (default): ``lexical`` with the embedded local judge, whose "no"
            fell on grounded claims in faithful answers more often than in hallucinated ones (README),
            ``judge`` with any other model. With ``lexical`` for both checks the score is the share of
            grounded claims and the embedded judge only labels the ungrounded ones as contradicted or absent.
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
    lexical_check: bool = True
    absence_check: Literal["auto", "judge", "lexical"] = "auto"
    contradiction_check: Literal["auto", "judge", "lexical"] = "auto"
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
