"""Scores are computed here, in code, from the verdicts: never by the LLM."""

from __future__ import annotations

from collections.abc import Sequence

from faithtrace.scoring.models import ClaimVerdict, IdkPolicy, VerdictCounts


def count(verdicts: Sequence[ClaimVerdict]) -> VerdictCounts:
    return VerdictCounts(
        yes=sum(v.verdict == "yes" for v in verdicts),
        no=sum(v.verdict == "no" for v in verdicts),
        idk=sum(v.verdict == "idk" for v in verdicts),
    )


def score(counts: VerdictCounts, policy: IdkPolicy) -> float | None:
    """Share of claims that count for the answer; ``None`` without claims (no claims is not "all good")."""
    if counts.total == 0:
        return None
    good = counts.yes + (counts.idk if policy is IdkPolicy.DEEPEVAL else 0)
    return good / counts.total


def faithfulness(counts: VerdictCounts) -> float | None:
    """One minus the share of contradicted claims (DeepEval's default meaning of faithfulness)."""
    if counts.total == 0:
        return None
    return 1.0 - counts.no / counts.total


def passed(value: float | None, threshold: float) -> bool | None:
    return None if value is None else value >= threshold
