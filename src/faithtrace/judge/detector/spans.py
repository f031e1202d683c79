"""From token probabilities to flagged spans of the answer, and from spans to the claims that hold them.

A span is a run of consecutive answer tokens whose P(not supported) reaches ``threshold``. Spans that are
not confident enough (their highest token under ``min_confidence``) or too short (fewer than ``min_tokens``
tokens) are dropped: users of such detectors found low-confidence spans (0.50-0.65) to be mostly noise, and
one- or two-token spans to be mostly paraphrases (a flagged "the" or a reworded verb). Both filters are off
by default (0.5 and 1 token): a changed number is often a single token, and missing it is worse.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from faithtrace.judge.detector.windows import TokenScore

__all__ = ["FlaggedSpan", "claim_ranges", "flag_spans", "spans_in", "strongest"]


@dataclass(frozen=True)
class FlaggedSpan:
    """Characters ``start:end`` of the answer (``text``), flagged; ``p``: its highest token probability."""

    start: int
    end: int
    text: str
    p: float
    tokens: int


def flag_spans(
    answer: str,
    tokens: Sequence[TokenScore],
    *,
    threshold: float = 0.5,
    min_confidence: float = 0.5,
    min_tokens: int = 1,
) -> list[FlaggedSpan]:
    """The answer's flagged spans, in order."""
    runs: list[list[TokenScore]] = []
    previous_flagged = False
    for token in tokens:
        flagged = token.p >= threshold
        if flagged and previous_flagged:
            runs[-1].append(token)
        elif flagged:
            runs.append([token])
        previous_flagged = flagged
    spans = []
    for run in runs:
        p = max(t.p for t in run)
        if p < min_confidence or len(run) < min_tokens:
            continue
        start, end = run[0].start, run[-1].end
        spans.append(FlaggedSpan(start, end, answer[start:end], round(p, 4), len(run)))
    return spans


def _pattern(claim: str) -> re.Pattern[str]:
    # A claim is the answer's sentence, possibly without a list marker, a citation or a lead-in, and with
    # its whitespace collapsed: find its words in order, anything but letters and digits in between.
    words = re.findall(r"\w+", claim)
    return re.compile(r"\W+".join(re.escape(w) for w in words), re.IGNORECASE)


def claim_ranges(answer: str, claims: Sequence[str]) -> list[tuple[int, int] | None]:
    """Where each claim lies in the answer (searched in order), or None where its words cannot be found."""
    ranges: list[tuple[int, int] | None] = []
    cursor = 0
    for claim in claims:
        if not re.search(r"\w", claim):
            ranges.append(None)
            continue
        pattern = _pattern(claim)
        found = pattern.search(answer, cursor) or pattern.search(answer)
        if found is None:
            ranges.append(None)
            continue
        ranges.append((found.start(), found.end()))
        cursor = found.end()
    return ranges


def spans_in(spans: Sequence[FlaggedSpan], where: tuple[int, int] | None, claim: str) -> list[FlaggedSpan]:
    """The spans that overlap a claim's characters; for a claim not found in the answer, those whose text the
    claim contains."""
    if where is None:
        lowered = claim.lower()
        return [s for s in spans if s.text.strip().lower() in lowered]
    start, end = where
    return [s for s in spans if s.start < end and s.end > start]


def strongest(tokens: Sequence[TokenScore], where: tuple[int, int] | None) -> float | None:
    """The highest P(not supported) among the tokens inside ``where``; None without a location or tokens."""
    if where is None:
        return None
    inside = [t.p for t in tokens if t.start < where[1] and t.end > where[0]]
    return max(inside) if inside else None
