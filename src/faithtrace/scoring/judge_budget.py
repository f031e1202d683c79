"""Which claims the judge is asked about when they do not all fit the judge token budget of an evaluation.

A long answer costs the embedded judge about 170 tokens per claim it is asked about (the claim, its evidence,
its share of the instructions and its verdict), so an answer with a dozen unproven sentences takes 2,000
tokens and 30 s on a 2-core CPU. With a budget, the claims most likely to be wrong are asked first: those the
checks doubt (a contradiction they found, a number or three added words no document has), then those with
words no document uses, then the rest, each tier in answer order. Claims that do not fit are not judged and
not counted in the score; the result lists them (``FaithfulnessResult.unjudged``) and its reason says so.
Code decides only which claims are asked, never a verdict.
"""

from __future__ import annotations

from collections.abc import Sequence

from faithtrace._config.judge_settings import JudgeSettings
from faithtrace.scoring import contradictions, grounding, steps, verdict_checks

# The budget the embedded judge gets when none is set: 1,100 judge tokens (about 15 s with two llama.cpp
# threads on a 2-core CPU) less the estimate's largest shortfall against the judge's own count on RAGTruth's
# dev rows (43 tokens), so that the count itself stays within 1,100. Hosted judges get no limit unless set.
LOCAL_JUDGE_TOKEN_BUDGET = 1_050


def resolve(budget: int | None, settings: JudgeSettings) -> int:
    """The budget in force: ``None`` means the embedded judge's default (hosted: none); 0 means none."""
    if budget is None:
        return LOCAL_JUDGE_TOKEN_BUDGET if settings.is_local else 0
    return budget


def doubt(claim: str, g: grounding.Grounding) -> int:
    """0: the checks doubt the claim; 1: it has words no document uses; 2: nothing seen against it."""
    if verdict_checks.lowers("checks", g, contradictions.find(claim, g.near)):
        return 0
    if verdict_checks.check_verdict(g) != "yes" or g.unmatched:
        return 1
    return 2


def select(
    data: steps.VerdictsInput, found: Sequence[grounding.Grounding], budget: int, batch_size: int
) -> list[int]:
    """The indexes of ``data.claims`` (groundings ``found``) to ask about, in claim order: taken most doubted
    first while the estimated tokens stay within ``budget`` (a claim that does not fit is passed over for a
    shorter one). The first is always taken, so an evaluation never asks about nothing."""
    if budget <= 0 or steps.estimated_tokens(data, batch_size) <= budget:
        return list(range(len(data.claims)))
    doubts = [doubt(c, g) for c, g in zip(data.claims, found, strict=True)]
    chosen: list[int] = []
    for i in sorted(range(len(data.claims)), key=lambda k: (doubts[k], k)):
        trial = sorted([*chosen, i])
        if chosen and steps.estimated_tokens(subset(data, trial), batch_size) > budget:
            continue
        chosen = trial
    return chosen


def subset(data: steps.VerdictsInput, keep: Sequence[int]) -> steps.VerdictsInput:
    """``data`` for the claims at ``keep`` only (their evidence and words to find with them)."""
    return data.model_copy(
        update={
            "claims": [data.claims[i] for i in keep],
            "evidence": None if data.evidence is None else [data.evidence[i] for i in keep],
            "focus": None if data.focus is None else [data.focus[i] for i in keep],
        }
    )


def note(left: int, clean: int, budget: int) -> str:
    """The reason's note on ``left`` claims not judged, ``clean`` of them with nothing the checks doubt."""
    one = left == 1
    checked = (
        ("found nothing against it" if clean else "doubt it")
        if one
        else f"found nothing against {clean} of them"
    )
    return (
        f"({left} claim{'' if one else 's'} {'was' if one else 'were'} not judged and "
        f"{'is' if one else 'are'} not counted in the score: {'it' if one else 'they'} did not fit the "
        f"judge token budget of {budget} tokens per evaluation (scoring.judge_token_budget); the checks "
        f"{checked}.)"
    )
