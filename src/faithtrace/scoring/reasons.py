"""The explanation of a score, written in code from the verdicts: no judge call, nothing invented.

A judge-written paragraph cost a third call and ~400 tokens per failing evaluation on the local judge, and a
1.5B model adds nothing the verdicts do not already say; ``ScoringOptions.judge_reason`` still asks for one.
"""

from __future__ import annotations

from collections.abc import Sequence

from faithtrace._common.shorten import shorten
from faithtrace.scoring.models import ClaimVerdict, Outcome, VerdictCounts

_LISTED = 3  # unsupported claims quoted in the reason; the full list is in ``claims``
_QUOTE_CHARS = 120


def _quote(text: str) -> str:
    return shorten(" ".join(text.split()), _QUOTE_CHARS)  # between words, never "in th…"


def outcome_reason(counts: VerdictCounts, outcome: Outcome) -> str:
    """For results without unsupported claims to name."""
    n = counts.total
    if outcome is Outcome.NO_CLAIMS:
        return "The answer makes no checkable factual claims, so it has no faithfulness score."
    if outcome is Outcome.NO_CONTEXT:
        return (
            f"No context was retrieved (or it was empty), so none of the answer's {n} claim(s) can be "
            "supported by it; the score is 0."
        )
    return f"All {n} claim(s) in the answer are supported by the retrieved context."


def summary(counts: VerdictCounts) -> str:
    return (
        f"{counts.yes} of {counts.total} claim(s) are supported by the retrieved context, {counts.no} are "
        f"contradicted by it and {counts.idk} are not found in it."
    )


def scored_reason(counts: VerdictCounts, verdicts: Sequence[ClaimVerdict]) -> str:
    """The counts, then the first few unsupported claims with why (contradicted / missing words)."""
    unsupported = [v for v in verdicts if v.verdict != "yes"]
    if not unsupported:
        return outcome_reason(counts, Outcome.SCORED)
    items = []
    for v in unsupported[:_LISTED]:
        why = "contradicted" if v.verdict == "no" else "not found"
        if v.reason:
            why += f"; {_quote(v.reason)}"
        items.append(f'"{_quote(v.text)}" ({why})')
    more = len(unsupported) - _LISTED
    tail = f"; and {more} more" if more > 0 else ""
    return summary(counts) + " Unsupported: " + "; ".join(items) + tail + "."
