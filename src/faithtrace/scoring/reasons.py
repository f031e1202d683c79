"""The explanation of a score, written in code from the verdicts: no judge call, nothing invented.

A judge-written paragraph cost a third call and ~400 tokens per failing evaluation on the local judge, and a
1.5B model adds nothing the verdicts do not already say; ``ScoringOptions.judge_reason`` still asks for one.

Each unsupported claim is named for what it is (``ClaimVerdict.status``): "contradicted" only when the judge
said so or a mechanical check found the contradiction; a claim the judge was unsure of is "not confirmed".
"""

from __future__ import annotations

from collections.abc import Sequence

from faithtrace._common.shorten import shorten
from faithtrace.scoring.models import STATUS_TEXT, ClaimVerdict, Outcome, VerdictCounts

_LISTED = 3  # unsupported claims quoted in the reason; the full list is in ``claims``
_QUOTE_CHARS = 120


def _quote(text: str) -> str:
    return shorten(" ".join(text.split()), _QUOTE_CHARS)  # between words, never "in th…"


def _claims(n: int) -> str:
    return f"{n} claim" if n == 1 else f"{n} claims"


def _are(n: int) -> str:
    return "is" if n == 1 else "are"


def outcome_reason(counts: VerdictCounts, outcome: Outcome) -> str:
    """For results without unsupported claims to name."""
    n = counts.total
    if outcome is Outcome.NO_CLAIMS:
        return "The answer makes no checkable factual claims, so it has no faithfulness score."
    if outcome is Outcome.NO_CONTEXT:
        which = "the answer's claim" if n == 1 else f"none of the answer's {n} claims"
        can = "cannot" if n == 1 else "can"
        return f"No context was retrieved (or it was empty), so {which} {can} be supported; the score is 0."
    if n == 1:
        return "The answer's claim is supported by the retrieved context."
    return f"All {n} claims in the answer are supported by the retrieved context."


def summary(verdicts: Sequence[ClaimVerdict]) -> str:
    """How many claims are supported, and how many are contradicted, not in the documents or not confirmed."""
    n = len(verdicts)
    by_status = {s: sum(v.status == s for v in verdicts) for s in STATUS_TEXT}
    yes = by_status["supported"]
    text = f"{yes} of {_claims(n)} {_are(yes) if n > 1 else 'is'} supported by the retrieved context"
    rest = [
        f"{k} {_are(k)} {what}"
        for k, what in (
            (by_status["contradicted"], "contradicted by it"),
            (by_status["not_in_documents"], "not in it"),
            (by_status["not_confirmed"], "not confirmed (the judge was unsure)"),
        )
        if k
    ]
    if rest:
        text += ", " + ", ".join(rest[:-1]) + (" and " if len(rest) > 1 else "") + rest[-1]
    return text + "."


def _item(v: ClaimVerdict) -> str:
    why = STATUS_TEXT[v.status]
    if v.reason:
        why += f"; {_quote(v.reason)}"
    return f'"{_quote(v.text)}" ({why})'


def scored_reason(counts: VerdictCounts, verdicts: Sequence[ClaimVerdict]) -> str:
    """The counts, then the first few unsupported claims with why (contradicted / not in the documents /
    not confirmed), contradictions first: they are what fails an answer."""
    unsupported = sorted((v for v in verdicts if v.verdict != "yes"), key=lambda v: v.verdict != "no")
    if not unsupported:
        return outcome_reason(counts, Outcome.SCORED)
    items = [_item(v) for v in unsupported[:_LISTED]]
    more = len(unsupported) - _LISTED
    tail = f"; and {more} more" if more > 0 else ""
    return summary(verdicts) + " Unsupported: " + "; ".join(items) + tail + "."


def contradiction_failure(verdicts: Sequence[ClaimVerdict]) -> str | None:
    """Why an answer fails for its contradictions alone (``fail_on_contradiction``); None without any."""
    contradicted = [v for v in verdicts if v.verdict == "no"]
    if not contradicted:
        return None
    named = "; ".join(f'"{_quote(v.text)}"' for v in contradicted[:_LISTED])
    more = len(contradicted) - _LISTED
    tail = f" and {more} more" if more > 0 else ""
    it = "this claim" if len(contradicted) == 1 else "these claims"
    return f"The answer fails because the retrieved context contradicts {it}: {named}{tail}."
