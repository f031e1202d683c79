"""The judge decides; code proves, flags and records (``ScoringOptions.prove_support``, ``verdict_policy``).

Three rules, in this order of power:

* A claim ``proof`` proves supported (contained in one document sentence, everything that matters aligned) is
  "yes" without asking the judge (``decided_by="proof"``).
* Every other claim gets the judge's verdict. The checks' own view of it (``check_verdict``: "no" when the
  claim is an evidence sentence with a negation flipped, two parts exchanged or a detail taken from a
  parallel clause (``contradictions``); "idk" when its numbers, most of its words or three of them are
  nowhere in the documents; "yes" otherwise) is recorded next to it, so a disagreement is visible on the
  claim and its event, whoever wins.
* ``verdict_policy`` decides whether the checks may lower a judge's "yes" (also one the judge was unsure
  of, already "idk") to their own verdict, recorded as ``decided_by="check"``: never (``judge``, the default
  with any configured model); when a number of the claim (compared by value) is nowhere in the documents
  (``numbers``); that, a mechanical contradiction, or
  added material, three or more words no document uses (``checks``, the default with the embedded judge,
  which says "yes" to a swapped year, to "the landlord pays the tenant" against "the tenant pays the
  landlord", and to plausible details the documents never give); or whenever the checks disagree
  (``strict``).
  The checks never raise a verdict: word overlap cannot tell a paraphrase from a contradiction, so they
  must never turn a judge's "no" into "yes".
"""

from __future__ import annotations

from collections.abc import Sequence

from faithtrace.scoring import contradictions, grounding
from faithtrace.scoring.models import ClaimVerdict, Verdict

DISAGREEMENT_NOTE = "the judge said {judge}; the checks say {check}: {why}"


def check_verdict(g: grounding.Grounding, found: contradictions.Contradiction | None = None) -> Verdict:
    """What the checks alone would say about a claim: "no" for a mechanical contradiction ``found``
    (precise), "idk" when the lexical check cannot ground it (a weak signal), else "yes"."""
    if found is not None:
        return "no"
    if g.unsupported(grounding.MAX_MISSING_SHARE) or g.adds_material:
        return "idk"
    return "yes"


def _why(g: grounding.Grounding, found: contradictions.Contradiction | None, verdict: Verdict) -> str:
    if found is not None:
        return found.describe()
    if verdict == "idk":
        return g.describe()
    return "the documents contain its numbers and words"


def lowers(policy: str, g: grounding.Grounding, found: contradictions.Contradiction | None = None) -> bool:
    """Whether ``policy`` lowers a judge's "yes" for a claim with grounding ``g`` and contradiction
    ``found``."""
    if policy == "strict":
        return check_verdict(g, found) != "yes"
    # Anywhere in the documents, not just in the claim's evidence: evidence is picked by shared words, and a
    # faithful claim that merges two sentences often shares none with the one holding its number.
    if policy == "numbers":
        return bool(g.numbers_absent)
    if policy == "checks":
        return found is not None or bool(g.numbers_absent) or g.adds_material
    return False


def apply(
    verdicts: Sequence[ClaimVerdict], found: Sequence[grounding.Grounding], policy: str
) -> list[ClaimVerdict]:
    """The judge's ``verdicts`` with the checks' view recorded, lowered where ``policy`` says so.

    ``found``: the claims' groundings, in the same order. Verdicts already decided by proof pass unchanged.
    """
    out = []
    for v, g in zip(verdicts, found, strict=True):
        if v.decided_by != "judge":
            out.append(v)
            continue
        contra = contradictions.find(v.text, g.near)
        check = check_verdict(g, contra)
        # What the judge wrote: a "yes" it was unsure of is already "idk" here (``confidence``), and is
        # still a "yes" the checks may lower, to "no" for a mechanical contradiction.
        said = v.judge_verdict or v.verdict
        update: dict[str, object] = {"judge_verdict": said, "check_verdict": check}
        if said == "yes" and check != "yes" and lowers(policy, g, contra):
            # The judge's own reason stays readable next to why its verdict was lowered.
            note = DISAGREEMENT_NOTE.format(judge=said, check=check, why=_why(g, contra, check))
            update.update(
                verdict=check if _RANK[check] < _RANK[v.verdict] else v.verdict,
                decided_by="check",
                reason=f"{v.reason} ({note})" if v.reason else note,
            )
        out.append(v.model_copy(update=update))
    return out


# How far a verdict is from supporting the claim: a lowered verdict never ends up higher than it was.
_RANK: dict[Verdict, int] = {"no": 0, "idk": 1, "yes": 2}
