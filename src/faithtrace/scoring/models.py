"""The data that crosses boundaries: what the pipeline returns, what the CLI writes, what telemetry reads.

One model serves three consumers (``evaluate()``, the CLI's JSONL output and the worker's telemetry), so it is
deliberately plain: no OTel types, no judge client objects, only JSON-serialisable values.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, computed_field

from faithtrace._config.scoring_options import IdkPolicy
from faithtrace.judge import LLMCall

__all__ = [
    "ClaimStatus",
    "ClaimVerdict",
    "DetectorReport",
    "DetectorSpan",
    "ErrorInfo",
    "FaithfulnessResult",
    "IdkPolicy",  # an option (ScoringOptions.idk_policy); re-exported because results carry it
    "LLMCall",  # owned by the judge layer; re-exported because results carry it
    "Outcome",
    "StepUsage",
    "Verdict",
    "VerdictCounts",
]

Verdict = Literal["yes", "no", "idk"]
# What a claim's verdict means to a reader, in words (``ClaimVerdict.status``; ``STATUS_TEXT`` shows them).
ClaimStatus = Literal["supported", "contradicted", "not_in_documents", "not_confirmed"]
STATUS_TEXT: dict[ClaimStatus, str] = {
    "supported": "supported",
    "contradicted": "contradicted",
    "not_in_documents": "not in the documents",
    "not_confirmed": "not confirmed",
}


class Outcome(StrEnum):
    """Why a result has (or has no) score. Low cardinality: also a metric attribute."""

    SCORED = "scored"
    NO_CLAIMS = "no_claims"  # the answer states nothing checkable: no score, never 1.0
    NO_CONTEXT = "no_context"  # nothing was retrieved: every claim is unsupported, score 0
    INPUT_ERROR = "input_error"  # the texts could not be scored as given (a wrong type, unsendable text)
    ERROR = "error"


DecidedBy = Literal["judge", "proof", "check", "detector"]


class DetectorSpan(BaseModel):
    """Characters ``start:end`` of the (stripped) answer that the trained detector flagged as not supported by
    the context, with ``p``, the highest P(not supported) of its tokens."""

    model_config = ConfigDict(frozen=True)

    start: int = Field(ge=0)
    end: int = Field(ge=0)
    text: str
    p: float = Field(ge=0.0, le=1.0)


class ClaimVerdict(BaseModel):
    """One claim's verdict, and who decided it.

    ``verdict`` is what the score counts. ``decided_by`` says where it came from: ``judge`` (the judge's
    verdict stands), ``proof`` (code proved the claim supported and the judge was not asked) or ``check``
    (``verdict_policy`` let the lexical check's verdict replace the judge's; ``judge_verdict`` keeps what
    the judge said). ``check_verdict`` is the lexical check's own view of a judged claim; when it differs
    from ``judge_verdict`` the two disagree (``disagreement``), whatever the policy made of it.
    ``p_supported`` is the judge's probability that the claim is supported, read from the verdict token's
    log-probabilities where the judge returns them (the embedded judge does), or, for a claim the detector
    decided, one minus the highest P(not supported) of its tokens. A "yes" the judge wrote with less than
    ``ScoringOptions.min_p_supported`` counts as "idk" (``judge_verdict`` stays "yes"): the judge was unsure,
    which is not a contradiction. ``status`` says which of these a reader is looking at.

    ``detector_verdict`` is the trained detector's view, wherever a detector ran: ``idk`` (not supported)
    for a claim holding a flagged span (``detector_spans``), else ``yes``. Next to a judge it is recorded,
    never applied; ``detector_disagreement`` says when one of the two calls the claim supported and the other
    does not.
    """

    model_config = ConfigDict(frozen=True)

    text: str
    verdict: Verdict
    reason: str | None = None
    decided_by: DecidedBy = "judge"
    judge_verdict: Verdict | None = None
    check_verdict: Verdict | None = None
    p_supported: float | None = Field(default=None, ge=0.0, le=1.0)
    detector_verdict: Verdict | None = None
    detector_spans: list[DetectorSpan] = Field(default_factory=list)

    @property
    def detector_disagreement(self) -> bool:
        """The detector and the verdict that counts differ on whether the claim is supported."""
        if self.detector_verdict is None:
            return False
        return (self.detector_verdict == "yes") != (self.verdict == "yes")

    @computed_field  # type: ignore[prop-decorator]
    @property
    def status(self) -> ClaimStatus:
        """``supported`` (yes), ``contradicted`` (no: the judge's "no" or a mechanical contradiction),
        ``not_confirmed`` (idk because the judge wrote "yes" without enough confidence) or
        ``not_in_documents`` (any other idk: the judge's own, or the checks found words no document uses)."""
        if self.verdict == "yes":
            return "supported"
        if self.verdict == "no":
            return "contradicted"
        if self.decided_by == "judge" and self.judge_verdict == "yes":
            return "not_confirmed"
        return "not_in_documents"

    @property
    def disagreement(self) -> bool:
        """The judge and the lexical check gave different verdicts for this claim."""
        return (
            self.judge_verdict is not None
            and self.check_verdict is not None
            and self.judge_verdict != self.check_verdict
        )


class VerdictCounts(BaseModel):
    model_config = ConfigDict(frozen=True)

    yes: int = 0
    no: int = 0
    idk: int = 0

    @property
    def total(self) -> int:
        return self.yes + self.no + self.idk


class StepUsage(BaseModel):
    """Totals for one pipeline step: what users see per step in the trace and in metrics."""

    model_config = ConfigDict(frozen=True)

    step: Literal["truths", "claims", "verdicts", "reason"]
    model: str | None  # None when the step made no LLM call (cache hit, template)
    llm_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = None  # None when the model's price is unknown (e.g. a local model)
    duration_s: float = 0.0
    cached: bool = False
    ended_ns: int | None = None  # wall clock when the step finished (where its event is placed in a trace)


class ErrorInfo(BaseModel):
    model_config = ConfigDict(frozen=True)

    type: str  # low-cardinality class, e.g. "timeout", "judge_output_invalid", "verdict_count_mismatch"
    message: str
    step: str | None = None


class DetectorReport(BaseModel):
    """What the trained detector read for one evaluation: every span it flagged (in claims or not), how many
    model inputs the answer took (``windows``, over all ``parts`` of a long answer), and how long it ran."""

    model_config = ConfigDict(frozen=True)

    model: str
    spans: list[DetectorSpan] = Field(default_factory=list)
    windows: int = 0
    parts: int = 0
    combine: Literal["min", "max"] = "min"
    duration_s: float = 0.0
    error: str | None = None  # next to a judge, a detector that failed leaves the judge's result as it is


class FaithfulnessResult(BaseModel):
    """The outcome of scoring one answer against its retrieved context.

    ``score`` is the share of claims the context supports (``idk`` counts against, unless ``idk_policy`` says
    otherwise); ``faithfulness`` is one minus the share of claims the context contradicts (DeepEval's default
    meaning). Both are ``None`` unless ``outcome`` is ``scored`` or ``no_context``.
    """

    model_config = ConfigDict(frozen=True)

    score: float | None = None
    faithfulness: float | None = None
    outcome: Outcome
    passed: bool | None = None  # score >= threshold; None when there is no score
    threshold: float
    idk_policy: IdkPolicy = IdkPolicy.PENALIZE
    counts: VerdictCounts = Field(default_factory=VerdictCounts)
    claims: list[ClaimVerdict] = Field(default_factory=list)
    # Claims not judged and not counted in the score: beyond max_claims, or beyond the judge token budget.
    unjudged: list[str] = Field(default_factory=list)
    truths: list[str] = Field(default_factory=list)
    reason: str | None = None
    judge_model: str | None = None
    steps: list[StepUsage] = Field(default_factory=list)
    calls: list[LLMCall] = Field(default_factory=list)
    duration_s: float = 0.0
    error: ErrorInfo | None = None
    detector: DetectorReport | None = None

    @property
    def label(self) -> Literal["pass", "fail"] | None:
        if self.passed is None:
            return None
        return "pass" if self.passed else "fail"

    @property
    def input_tokens(self) -> int:
        return sum(s.input_tokens for s in self.steps)

    @property
    def output_tokens(self) -> int:
        return sum(s.output_tokens for s in self.steps)

    @property
    def llm_calls(self) -> int:
        return sum(s.llm_calls for s in self.steps)

    @property
    def cost_usd(self) -> float | None:
        costs = [s.cost_usd for s in self.steps if s.llm_calls]
        if not costs or any(c is None for c in costs):
            return None
        return sum(c for c in costs if c is not None)
