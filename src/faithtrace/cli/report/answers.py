"""The report's answers: worst first, each with its claims, the unsupported text marked, and the passage a
claim was matched to.

The marks come from the result, nothing is judged again: a claim the verdict did not support is marked where
its words stand in the answer (claims split from the answer's sentences always are; a claim the judge
reworded may not be, and is then marked in the claims list only), and so is every span the trained detector
flagged, at the characters it gave. The passage is the document sentences sharing the most of a claim's
words (numbers count double): what the judge reads as a claim's evidence with ``verdict_context`` set to
``evidence``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from faithtrace.cli.metrics import FAITHFUL, HALLUCINATED
from faithtrace.scoring import grounding
from faithtrace.scoring.models import STATUS_TEXT

_STATUS_TEXT: dict[str, str] = {str(k): v for k, v in STATUS_TEXT.items()}
# Bounds per answer, so that one huge row cannot blow up the page.
MAX_ANSWER_CHARS = 20_000
MAX_CLAIMS = 100


@dataclass(frozen=True)
class Segment:
    """A run of the answer's text, and how it is marked: claim kinds and/or ``detector``."""

    text: str
    marks: tuple[str, ...] = ()
    claim: int | None = None  # the claim (1-based) the run belongs to, where one does
    note: str | None = None


@dataclass(frozen=True)
class ClaimItem:
    number: int
    text: str
    verdict: str
    status: str
    status_text: str
    reason: str | None
    decided_by: str | None
    p_supported: float | None
    located: bool  # found in the answer's text (and marked there)
    passage: str | None
    detector: str | None


@dataclass(frozen=True)
class AnswerItem:
    id: str
    line: int | None
    label: str | None
    score: float | None
    passed: bool | None
    outcome: str
    kind: str  # "false-alarm" (labelled faithful, failed), "miss" (labelled hallucinated, passed) or ""
    question: str | None
    segments: list[Segment]
    claims: list[ClaimItem]
    unjudged: list[str] = field(default_factory=list)
    reason: str | None = None
    error: str | None = None
    seconds: float | None = None


def _words_pattern(claim: str) -> re.Pattern[str] | None:
    # A sentence claim may have lost a list marker, a citation or a lead-in, and its whitespace: its words,
    # in order, with anything but letters and digits between them.
    words = re.findall(r"\w+", claim)
    return re.compile(r"\W+".join(map(re.escape, words)), re.IGNORECASE) if words else None


def _claim_ranges(answer: str, claims: Sequence[str]) -> list[tuple[int, int] | None]:
    out: list[tuple[int, int] | None] = []
    cursor = 0
    for claim in claims:
        pattern = _words_pattern(claim)
        found = None if pattern is None else pattern.search(answer, cursor) or pattern.search(answer)
        if found is None:
            out.append(None)
            continue
        end = found.end()
        while end < len(answer) and answer[end] in ".!?":  # the sentence's own full stop
            end += 1
        out.append((found.start(), end))
        cursor = end
    return out


def _detector_ranges(answer: str, record: Mapping[str, Any]) -> list[tuple[int, int, str]]:
    """The detector's spans: characters of the stripped answer, which the scored text was."""
    detector = record.get("detector")
    if not isinstance(detector, Mapping):
        return []
    shift = len(answer) - len(answer.lstrip())
    out = []
    for span in _spans(detector.get("spans")):
        text, start = str(span.get("text", "")), int(_number(span.get("start"))) + shift
        if answer[start : start + len(text)] != text:  # not where it says: find its text instead
            start = answer.find(text)
        if text and start >= 0:
            note = f"detector: P(not supported) {_number(span.get('p')):.2f}"
            out.append((start, start + len(text), note))
    return out


def _spans(value: Any) -> list[Mapping[str, Any]]:
    return [s for s in value if isinstance(s, Mapping)] if isinstance(value, list) else []


def _number(value: Any) -> float:
    """A number from the results file, 0 where it holds something else (the page shows what it can)."""
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


def _segments(
    answer: str, claims: Sequence[Mapping[str, Any]], ranges: Sequence[tuple[int, int] | None], record: Any
) -> list[Segment]:
    """The answer cut into runs of equal marking (a claim's kind and the detector can overlap)."""
    n = len(answer)
    kinds: list[tuple[str, ...]] = [()] * n
    owner: list[int | None] = [None] * n
    notes: list[str | None] = [None] * n
    # Claims not judged (beyond max_claims or the token budget) are not counted: marked apart, never as
    # unsupported.
    unjudged = [str(u) for u in record.get("unjudged") or []][:MAX_CLAIMS]
    for where in _claim_ranges(answer, unjudged):
        for i in range(*(where or (0, 0))):
            kinds[i], notes[i] = ("unjudged",), "not judged, not counted in the score"
    for number, (claim, where) in enumerate(zip(claims, ranges, strict=True), start=1):
        if where is None or claim.get("verdict") == "yes":
            continue
        kind = ("unsupported", str(claim.get("status", "not_in_documents")).replace("_", "-"))
        for i in range(*where):
            kinds[i], owner[i] = kind, number
    for start, end, note in _detector_ranges(answer, record):
        for i in range(max(0, start), min(n, end)):
            kinds[i] = (*kinds[i], "detector")
            notes[i] = note
    segments: list[Segment] = []
    start = 0
    for i in range(1, n + 1):
        if i == n or (kinds[i], owner[i], notes[i]) != (kinds[start], owner[start], notes[start]):
            segments.append(Segment(answer[start:i], kinds[start], owner[start], notes[start]))
            start = i
    return segments


def _detector_note(claim: Mapping[str, Any]) -> str | None:
    verdict = claim.get("detector_verdict")
    if verdict is None:
        return None
    spans = "; ".join(
        f"'{s.get('text')}' {_number(s.get('p')):.2f}" for s in _spans(claim.get("detector_spans"))
    )
    return f"{verdict}" + (f": {spans}" if spans else "")


def answer_item(record: Mapping[str, Any]) -> AnswerItem:
    answer = record.get("answer")
    answer = answer[:MAX_ANSWER_CHARS] if isinstance(answer, str) else ""
    claims: list[Mapping[str, Any]] = [c for c in record.get("claims") or [] if isinstance(c, Mapping)]
    claims = claims[:MAX_CLAIMS]
    texts = [str(c.get("text", "")) for c in claims]
    ranges = _claim_ranges(answer, texts) if answer else [None] * len(claims)
    contexts = record.get("contexts")
    passages: list[str | None] = [None] * len(claims)
    if isinstance(contexts, list) and contexts and claims:
        passages = list(grounding.evidence(texts, [str(c) for c in contexts]))
    items = [
        ClaimItem(
            number=i,
            text=texts[i - 1],
            verdict=str(c.get("verdict", "?")),
            status=str(c.get("status", "")),
            status_text=_STATUS_TEXT.get(str(c.get("status")), str(c.get("status", ""))),
            reason=c.get("reason"),
            decided_by=c.get("decided_by"),
            p_supported=c.get("p_supported"),
            located=ranges[i - 1] is not None,
            passage=passages[i - 1],
            detector=_detector_note(c),
        )
        for i, c in enumerate(claims, start=1)
    ]
    label, passed = record.get("label"), record.get("passed")
    kind = (
        "false-alarm"
        if label == FAITHFUL and passed is False
        else "miss"
        if label == HALLUCINATED and passed is True
        else ""
    )
    error = record.get("error")
    score = record.get("score")
    return AnswerItem(
        id=str(record.get("id")),
        line=record.get("line") if isinstance(record.get("line"), int) else None,
        label=label,
        score=float(score) if isinstance(score, int | float) else None,
        passed=passed if isinstance(passed, bool) else None,
        outcome=str(record.get("outcome")),
        kind=kind,
        question=record.get("question") if isinstance(record.get("question"), str) else None,
        segments=_segments(answer, claims, ranges, record) if answer else [],
        claims=items,
        unjudged=[str(u) for u in record.get("unjudged") or []],
        reason=record.get("reason") if isinstance(record.get("reason"), str) else None,
        error=f"{error.get('type')}: {error.get('message')}" if isinstance(error, Mapping) else None,
        seconds=record.get("duration_s") if isinstance(record.get("duration_s"), int | float) else None,
    )


def worst_first(records: Sequence[Mapping[str, Any]], limit: int) -> list[AnswerItem]:
    """The ``limit`` worst answers: lowest score first (failed before passed at equal scores), then those
    without a score; the input's order otherwise."""

    def key(item: tuple[int, Mapping[str, Any]]) -> tuple[bool, float, bool, int]:
        i, r = item
        score = r.get("score")
        return (score is None, float(score or 0.0), r.get("passed") is not False, i)

    ranked = sorted(enumerate(records), key=key)[:limit]
    return [answer_item(r) for _, r in ranked]
