"""The judge decides; code proves, flags and records (``ScoringOptions.prove_support``, ``verdict_policy``).

Three rules, in this order of power:

* A claim ``proof`` proves supported (contained in one document sentence, everything that matters aligned) is
  "yes" without asking the judge (``decided_by="proof"``).
* Every other claim gets the judge's verdict. The lexical check's own view of it (``check_verdict``: "idk"
  when its numbers or most of its words are nowhere in the documents, "no" when it is negated where its
  evidence is not, "yes" otherwise) is recorded next to it, so a disagreement is visible on the claim and its
  event, whoever wins.
* ``verdict_policy`` decides whether the check may lower a judge's "yes" to its own verdict, recorded as
  ``decided_by="check"``: never (``judge``, the default with any configured model); when a number of the
  claim (compared by value) is nowhere in the documents (``numbers``, the default with the
  embedded judge, which says "yes" to a swapped year); or when it cannot ground the claim at all
  (``strict``). The check never raises a verdict: word overlap cannot tell a paraphrase from a
  contradiction, so it must never turn a judge's "no" into "yes".
"""

from __future__ import annotations

from collections.abc import Sequence

from faithtrace.scoring import grounding
from faithtrace.scoring.models import ClaimVerdict, Verdict

DISAGREEMENT_NOTE = "the judge said {judge}; the lexical check says {check}: {why}"


def check_verdict(g: grounding.Grounding) -> Verdict:
    """What the lexical check alone would say about a claim (a weak signal: recorded, rarely decisive)."""
    if g.unsupported(grounding.MAX_MISSING_SHARE):
        return "idk"
    if g.polarity_differs:
        return "no"
    return "yes"


def _why(g: grounding.Grounding, verdict: Verdict) -> str:
    if verdict == "idk":
        return g.describe()
    if verdict == "no":
        return "the claim is negated where its evidence is not, or the other way round"
    return "the documents contain its numbers and words"


def lowers(policy: str, g: grounding.Grounding) -> bool:
    """Whether ``policy`` lowers a judge's "yes" for a claim with grounding ``g``."""
    if policy == "strict":
        return check_verdict(g) != "yes"
    if policy == "numbers":
        # Anywhere in the documents, not just in the claim's evidence: evidence is picked by shared words,
        # and a faithful claim that merges two sentences often shares none with the one holding its number.
        return bool(g.numbers_absent)
    return False


def apply(
    verdicts: Sequence[ClaimVerdict], found: Sequence[grounding.Grounding], policy: str
) -> list[ClaimVerdict]:
    """The judge's ``verdicts`` with the check's view recorded, lowered where ``policy`` says so.

    ``found``: the claims' groundings, in the same order. Verdicts already decided by proof pass unchanged.
    """
    out = []
    for v, g in zip(verdicts, found, strict=True):
        if v.decided_by != "judge":
            out.append(v)
            continue
        check = check_verdict(g)
        update: dict[str, object] = {"judge_verdict": v.verdict, "check_verdict": check}
        if v.verdict == "yes" and lowers(policy, g):
            # The judge's own reason stays readable next to why its verdict was lowered.
            note = DISAGREEMENT_NOTE.format(judge=v.verdict, check=check, why=_why(g, check))
            update.update(
                verdict=check, decided_by="check", reason=f"{v.reason} ({note})" if v.reason else note
            )
        out.append(v.model_copy(update=update))
    return out
