"""The judge's own confidence in each verdict, read from the verdict token's log-probabilities.

A sampled "yes" hides how close the judge was to "no". With ``logprobs`` the reply says, at the position
where each verdict is written, how likely the model found each candidate token; normalised over the three
verdicts this is P(yes), P(no), P(idk) per claim. ``p_supported`` = P(yes) gives a continuous score (a real
ROC curve rather than one point) and a confidence threshold (``ScoringOptions.min_p_supported``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from faithtrace.judge import TokenLogprobs
from faithtrace.scoring.models import Verdict

VERDICTS: tuple[Verdict, ...] = ("yes", "no", "idk")
_KEY = re.compile(r'"verdict"\s*:\s*"?$')


def _verdict_of(token: str) -> Verdict | None:
    t = token.strip().strip("\"'").strip().lower()
    if not t:
        return None
    for v in VERDICTS:
        if v.startswith(t) or t.startswith(v):
            # "i" or "id" can only begin "idk"; "n" only "no"; "y"/"ye" only "yes".
            return v
    return None


def distribution(top: dict[str, float]) -> dict[Verdict, float] | None:
    """P(yes), P(no), P(idk) from one position's top tokens, renormalised; None if none is a verdict."""
    mass: dict[Verdict, float] = dict.fromkeys(VERDICTS, 0.0)
    for token, logprob in top.items():
        v = _verdict_of(token)
        if v is not None:
            mass[v] += math.exp(logprob)
    total = sum(mass.values())
    if total <= 0.0:
        return None
    return {v: m / total for v, m in mass.items()}


def verdict_distributions(tokens: Sequence[TokenLogprobs], n: int) -> list[dict[Verdict, float] | None]:
    """Per verdict written in the reply, in order (up to ``n``), its distribution over yes/no/idk.

    The verdict's position is the first token with a letter after the text ``"verdict": "``; JSON keys
    and the claim number are skipped however the tokenizer splits them.
    """
    out: list[dict[Verdict, float] | None] = []
    text = ""
    waiting = False
    for token, top in tokens:
        if waiting and re.search(r"[A-Za-z]", token):
            out.append(distribution(top))
            waiting = False
            if len(out) == n:
                break
        text = (text + token)[-40:]
        if not waiting and _KEY.search(text):
            waiting = True
            text = ""
    return out + [None] * (n - len(out))


def decide(judged: Verdict, dist: dict[Verdict, float] | None, min_p_supported: float) -> Verdict:
    """The verdict with the judge's confidence applied: "yes" iff P(yes) >= ``min_p_supported``.

    A "yes" the judge was not that sure of is "idk" (not confirmed), never "no": a hesitant "yes" says the
    judge leans towards support, and reporting it as a contradiction would tell users the documents say
    otherwise. A "no" or "idk" stands unless the judge's own P(yes) clears the bar. Without a distribution
    (or with the threshold at 0), the sampled verdict stands.
    """
    if dist is None or min_p_supported <= 0.0:
        return judged
    if dist["yes"] >= min_p_supported:
        return "yes"
    return "idk" if judged == "yes" else judged


def note(judged: Verdict, decided: Verdict, dist: dict[Verdict, float] | None) -> str | None:
    """Why ``decided`` differs from what the judge wrote, in a reader's words; None when it does not."""
    if decided == judged or dist is None:
        return None
    if judged == "yes":
        return f"the judge was unsure (P(yes) {dist['yes']:.2f})"
    return f"the judge wrote {judged} but put P(yes) {dist['yes']:.2f} on yes"
