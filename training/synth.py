"""Synthetic training answers for what RAGTruth-QA has few of: short contradictions and faithful rewordings.

Each synthetic answer is built from one row's own passages: a few of their sentences copied, and one sentence
changed. A contradiction changes a number, a date, a name, a negation, the order of two names (who did what to
whom) or a comparative, and labels exactly the changed words; a faithful rewording changes only the form (a
digit spelled out, a contraction, a synonym, a lead-in) and labels nothing. The question and passages stay the
row's, so the model must read the passage to tell the two apart.

Pure Python and deterministic: the same rows, ratio and seed give the same examples on any machine.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ._contract import inputs
from .prep import Example

context_segment = inputs.context_segment

__all__ = ["CONTRADICTIONS", "KINDS", "generate", "sentences"]

Span = tuple[int, int]
# A change to one sentence: the new sentence and its changed character ranges (empty for a rewording).
Change = tuple[str, list[Span]]

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(])")
_MIN_SENTENCE, _MAX_SENTENCE = 30, 300


def sentences(text: str) -> list[str]:
    """The sentences of a passage worth changing: not too short to carry a fact, not run-on lists."""
    out = []
    for piece in _SENTENCE_END.split(text):
        piece = piece.strip()
        if _MIN_SENTENCE <= len(piece) <= _MAX_SENTENCE and piece[-1] in ".!?":
            out.append(piece)
    return out


def _replace(text: str, start: int, end: int, new: str) -> Change:
    return text[:start] + new + text[end:], [(start, start + len(new))]


# --- contradictions ---------------------------------------------------------------------------------------

_NUMBER = re.compile(r"(?<![\w.,-])(\d{1,3}(?:,\d{3})+|\d+)(?:\.(\d+))?(?![\w-]|[.,]\d)")
_YEAR = re.compile(r"\b(1[6-9]\d\d|20\d\d)\b")
_MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)
_DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_MONTH_OR_DAY = re.compile(r"\b(" + "|".join(_MONTHS + _DAYS) + r")\b")


def _number(text: str, rng: random.Random) -> Change | None:
    matches = [m for m in _NUMBER.finditer(text) if not _YEAR.fullmatch(m.group(0))]
    if not matches:
        return None
    m = rng.choice(matches)
    whole = int(m.group(1).replace(",", ""))
    factor = rng.choice((2, 3, 10)) if whole > 10 else 1
    new_whole = whole * factor if rng.random() < 0.5 or whole < 2 else max(1, whole // factor)
    if new_whole == whole:
        new_whole = whole + rng.randint(1, 9)
    new = f"{new_whole:,}" if "," in m.group(1) else str(new_whole)
    if m.group(2) is not None:
        new += "." + m.group(2)
    return _replace(text, m.start(), m.end(), new)


def _date(text: str, rng: random.Random) -> Change | None:
    matches = list(_YEAR.finditer(text)) + list(_MONTH_OR_DAY.finditer(text))
    if not matches:
        return None
    m = rng.choice(matches)
    word = m.group(0)
    if word.isdigit():
        new = str(int(word) + rng.choice((-1, 1)) * rng.randint(1, 12))
    else:
        pool = _MONTHS if word in _MONTHS else _DAYS
        new = rng.choice([w for w in pool if w != word])
    return _replace(text, m.start(), m.end(), new)


# A run of capitalised words that does not start the sentence: most often a name of a person, place or thing.
_NAME = re.compile(r"(?<=[a-z,;:] )[A-Z][a-z]+(?: [A-Z][a-z]+)*")
_NOT_NAMES = frozenset(_MONTHS + _DAYS + ("I", "The", "This", "It", "In", "A", "An"))


def _names(text: str) -> list[re.Match[str]]:
    return [m for m in _NAME.finditer(text) if m.group(0) not in _NOT_NAMES]


def _name(text: str, rng: random.Random, others: Sequence[str]) -> Change | None:
    matches = _names(text)
    if not matches:
        return None
    m = rng.choice(matches)
    # Another name from the same passages: plausible in context, and wrong here.
    pool = sorted({n.group(0) for s in others for n in _names(s)} - {x.group(0) for x in matches})
    if not pool:
        return None
    return _replace(text, m.start(), m.end(), rng.choice(pool))


_AUX = r"is|are|was|were|can|will|does|do|did|has|have|had|should|could|would|must|may"
_NEGATED = re.compile(
    rf"\b({_AUX}) not\b|\b(can)not\b|\b(is|are|was|were|does|do|did|has|have|should|could|would)n't\b"
)
_AFFIRMED = re.compile(rf"\b({_AUX})\b(?! not)(?!n't)")


def _negation(text: str, rng: random.Random) -> Change | None:
    negated = list(_NEGATED.finditer(text))
    if negated and rng.random() < 0.5:
        m = rng.choice(negated)
        verb = next(g for g in m.groups() if g)
        return _replace(text, m.start(), m.end(), verb)
    affirmed = list(_AFFIRMED.finditer(text))
    if not affirmed:
        return None
    m = rng.choice(affirmed)
    return _replace(text, m.start(), m.end(), m.group(1) + " not")


# Words that join the items of a list: swapping two names across them ("Greece and Egypt") changes nothing.
_LIST_JOINERS = frozenset(("and", "or", "nor", "as", "well", "also"))


def _related(text: str, a: re.Match[str], b: re.Match[str]) -> bool:
    """Whether something other than list punctuation stands between two names (a verb, a preposition)."""
    words = re.findall(r"\b[a-z]+\b", text[a.end() : b.start()])
    return any(w not in _LIST_JOINERS for w in words)


def _role_swap(text: str, rng: random.Random) -> Change | None:
    found = _names(text)
    pairs = [
        (a, b)
        for i, a in enumerate(found)
        for b in found[i + 1 :]
        if a.group(0) != b.group(0) and _related(text, a, b)
    ]
    if not pairs:
        return None
    a, b = rng.choice(pairs)
    new = text[: a.start()] + b.group(0) + text[a.end() : b.start()] + a.group(0) + text[b.end() :]
    shift = len(b.group(0)) - len(a.group(0))
    return new, [(a.start(), a.start() + len(b.group(0))), (b.start() + shift, b.end())]


_OPPOSITES = {
    "more": "less",
    "higher": "lower",
    "larger": "smaller",
    "greater": "smaller",
    "increase": "decrease",
    "increases": "decreases",
    "increased": "decreased",
    "before": "after",
    "above": "below",
    "most": "least",
    "maximum": "minimum",
    "longer": "shorter",
    "older": "younger",
    "faster": "slower",
    "earlier": "later",
    "first": "last",
    "bigger": "smaller",
    "heavier": "lighter",
    "warmer": "colder",
    "cheaper": "costlier",
    "minimum": "maximum",
    "over": "under",
    "rise": "fall",
    "rises": "falls",
}
_OPPOSITES.update({v: k for k, v in list(_OPPOSITES.items()) if v not in _OPPOSITES})
_COMPARATIVE = re.compile(
    r"\b(" + "|".join(sorted(_OPPOSITES, key=len, reverse=True)) + r")\b", re.IGNORECASE
)


def _match_case(word: str, like: str) -> str:
    return word.capitalize() if like[:1].isupper() else word


def _comparative(text: str, rng: random.Random) -> Change | None:
    matches = list(_COMPARATIVE.finditer(text))
    if not matches:
        return None
    m = rng.choice(matches)
    return _replace(text, m.start(), m.end(), _match_case(_OPPOSITES[m.group(0).lower()], m.group(0)))


# --- faithful rewordings ------------------------------------------------------------------------------------

_SPELLED = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")
_SMALL_NUMBER = re.compile(r"(?<![\w.,$-])([0-9]|10)(?![\w.,%-]|\.\d)")
_SPELLED_NUMBER = re.compile(r"\b(" + "|".join(_SPELLED[2:]) + r")\b")
_CONTRACTIONS = {
    "is not": "isn't",
    "are not": "aren't",
    "was not": "wasn't",
    "were not": "weren't",
    "does not": "doesn't",
    "do not": "don't",
    "did not": "didn't",
    "cannot": "can't",
    "has not": "hasn't",
    "have not": "haven't",
    "will not": "won't",
    "should not": "shouldn't",
}
_CONTRACTIONS.update({v: k for k, v in list(_CONTRACTIONS.items())})
_SYNONYMS = {
    "approximately": "about",
    "roughly": "about",
    "purchase": "buy",
    "begin": "start",
    "assist": "help",
    "obtain": "get",
    "however": "but",
    "commonly": "often",
    "large": "big",
    "usually": "typically",
    "typically": "usually",
    "located": "situated",
    "require": "need",
    "requires": "needs",
    "entire": "whole",
    "quickly": "fast",
    "therefore": "so",
    "also": "as well",
}
_REWORD = re.compile(
    r"\b("
    + "|".join(re.escape(k) for k in sorted({**_CONTRACTIONS, **_SYNONYMS}, key=len, reverse=True))
    + r")\b",
    re.IGNORECASE,
)
_LEAD_INS = ("According to the passages, ", "Based on the context, ", "The passages say that ")
_LOWERABLE = frozenset(("The", "A", "An", "It", "This", "These", "There", "In", "If", "Most", "Some", "Many"))


def _faithful(text: str, rng: random.Random) -> Change | None:
    out = text
    edits = 0
    small = list(_SMALL_NUMBER.finditer(out))
    if small and rng.random() < 0.6:
        m = rng.choice(small)
        out = out[: m.start()] + _SPELLED[int(m.group(1))] + out[m.end() :]
        edits += 1
    else:
        spelled = list(_SPELLED_NUMBER.finditer(out))
        if spelled and rng.random() < 0.5:
            m = rng.choice(spelled)
            out = out[: m.start()] + str(_SPELLED.index(m.group(1))) + out[m.end() :]
            edits += 1
    words = list(_REWORD.finditer(out))
    if words:
        m = rng.choice(words)
        key = m.group(0).lower()
        new = _CONTRACTIONS.get(key) or _SYNONYMS[key]
        out = out[: m.start()] + _match_case(new, m.group(0)) + out[m.end() :]
        edits += 1
    first = out.split(" ", 1)[0]
    if first in _LOWERABLE and (rng.random() < 0.5 or not edits):
        out = rng.choice(_LEAD_INS) + out[0].lower() + out[1:]
        edits += 1
    return (out, []) if edits else None


# --- assembly -----------------------------------------------------------------------------------------------

Maker = Callable[[str, random.Random, Sequence[str]], "Change | None"]
_CONTRADICTION_MAKERS: dict[str, Maker] = {
    "number": lambda s, r, o: _number(s, r),
    "date": lambda s, r, o: _date(s, r),
    "name": _name,
    "negation": lambda s, r, o: _negation(s, r),
    "role_swap": lambda s, r, o: _role_swap(s, r),
    "comparative": lambda s, r, o: _comparative(s, r),
}
CONTRADICTIONS: tuple[str, ...] = tuple(_CONTRADICTION_MAKERS)
# Rewordings as often as two contradiction kinds together: enough that a changed form is not read as a change
# of fact, few enough that contradictions dominate what RAGTruth lacks.
KINDS: tuple[str, ...] = (*CONTRADICTIONS, "faithful", "faithful")
_MAKERS: dict[str, Maker] = {**_CONTRADICTION_MAKERS, "faithful": lambda s, r, o: _faithful(s, r)}


def _one(row: Mapping[str, Any], kind: str, rng: random.Random) -> Example | None:
    pool = [s for passage in row["contexts"] for s in sentences(passage)]
    if len(pool) < 2:
        return None
    candidates = list(range(len(pool)))
    rng.shuffle(candidates)
    for index in candidates[:8]:
        others = pool[:index] + pool[index + 1 :]
        change = _MAKERS[kind](pool[index], rng, others)
        if change is None or change[0] == pool[index]:
            continue
        changed, spans = change
        # The changed sentence among up to two copied ones, in passage order, as a model's answer would be.
        copies = sorted(rng.sample(range(len(others)), k=min(len(others), rng.randint(1, 2))))
        parts = [others[i] for i in copies]
        position = rng.randint(0, len(parts))
        parts.insert(position, changed)
        offset = sum(len(p) + 1 for p in parts[:position])
        answer = " ".join(parts)
        return Example(
            id=f"synthetic-{kind}-{row['id']}",
            source_id=str(row["source_id"]),
            context=context_segment(row["question"], row["contexts"]),
            answer=answer,
            spans=tuple((offset + s, offset + e) for s, e in spans),
            origin=f"synthetic:{kind}",
        )
    return None


def generate(rows: Sequence[Mapping[str, Any]], *, ratio: float, seed: int) -> list[Example]:
    """About ``ratio`` synthetic answers per row, kinds in turn, each from one row's passages.

    A row gives at most one example of each kind; rows whose passages allow no change of a kind are passed
    over, so fewer may come back than asked for.
    """
    target = round(len(rows) * ratio)
    order = list(range(len(rows)))
    random.Random(f"synthetic-order:{seed}").shuffle(order)
    out: list[Example] = []
    used: set[tuple[int, str]] = set()
    kind_index = 0
    idle = 0
    while len(out) < target and idle < len(KINDS):
        progressed = False
        for row_index in order:
            if len(out) >= target:
                break
            kind = KINDS[kind_index % len(KINDS)]
            if (row_index, kind) in used:
                continue
            used.add((row_index, kind))
            row = rows[row_index]
            example = _one(row, kind, random.Random(f"synthetic:{seed}:{row['id']}:{kind}"))
            if example is not None:
                out.append(example)
                kind_index += 1
                progressed = True
        idle = 0 if progressed else idle + 1
        kind_index += 1
    return out
