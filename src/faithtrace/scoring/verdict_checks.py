"""Where the lexical check (``grounding``) has a say over the judge's verdicts, and where the last word.

Which check decides what is an option (``absence_check``, ``contradiction_check``): the judge for real models,
the lexical check for the embedded 1.5B judge, whose "idk" carried no signal on RAGTruth and whose "no" fell
on grounded claims of faithful answers more often than of hallucinated ones. A "yes" for a claim the check
cannot ground is never let through, whoever decides the rest.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from faithtrace.scoring import grounding
from faithtrace.scoring.models import ClaimVerdict

# The reason on a claim the lexical check settled without asking the judge (both checks lexical).
SETTLED_NOTE = "the documents contain the claim's words, and its evidence its numbers; not sent to the judge"


@dataclass(frozen=True)
class Checks:
    """The lexical check's powers for one evaluation."""

    demote_yes: bool  # ``lexical_check``: an ungrounded "yes" becomes "idk" (so do the other two powers)
    decide_absence: bool  # an "idk" for a grounded claim becomes "yes"
    decide_contradiction: bool  # a "no" for a grounded claim, of the same polarity as its evidence, is "yes"

    @property
    def active(self) -> bool:
        return self.demote_yes or self.decide_absence or self.decide_contradiction

    @property
    def settles_grounded(self) -> bool:
        # When no verdict of the judge could change a grounded claim's outcome, asking about it is waste.
        return self.decide_absence and self.decide_contradiction


def overrulable(g: grounding.Grounding) -> bool:
    """Grounded, and saying what its evidence says rather than its opposite ("does not" against "does")."""
    return not g.unsupported(grounding.MAX_MISSING_SHARE) and not g.polarity_differs


def settle(claims: Sequence[str], found: Sequence[grounding.Grounding]) -> list[ClaimVerdict | None]:
    """Per claim, the verdict the lexical check settles without the judge, or None: ask the judge.

    ``found``: ``grounding.check_claims`` of the same claims, in the same order.
    """
    return [
        ClaimVerdict(text=c, verdict="yes", reason=SETTLED_NOTE) if overrulable(g) else None
        for c, g in zip(claims, found, strict=True)
    ]


def apply(
    verdicts: Sequence[ClaimVerdict], found: Sequence[grounding.Grounding], checks: Checks
) -> list[ClaimVerdict]:
    """The verdicts after the lexical check, in the same order (``found``: their claims' groundings)."""
    if not checks.active:
        return list(verdicts)
    out = []
    for v, g in zip(verdicts, found, strict=True):
        unsupported = g.unsupported(grounding.MAX_MISSING_SHARE)
        if v.verdict == "yes" and unsupported:
            v = ClaimVerdict(text=v.text, verdict="idk", reason="the judge said yes, but " + g.describe())
        elif v.verdict == "idk" and checks.decide_absence and not unsupported:
            v = ClaimVerdict(text=v.text, verdict="yes", reason=grounding.FOUND_NOTE)
        elif v.verdict == "idk" and checks.decide_absence and not v.reason:
            v = ClaimVerdict(text=v.text, verdict="idk", reason=g.describe())
        elif v.verdict == "no" and checks.decide_contradiction and overrulable(g):
            v = ClaimVerdict(text=v.text, verdict="yes", reason=grounding.OVERRULED_NOTE)
        out.append(v)
    return out
