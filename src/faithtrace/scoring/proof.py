"""A proof in code that a claim is supported, strict enough to skip the judge.

A claim is *proven* when one document sentence contains it: the claim's words appear in that sentence in the
same order (up to inflection, articles and number format), with at most a couple of the sentence's own words
between them (a modifier such as "quarterly"), and nothing in the sentence changes what the matched words say:
no negation, condition or hedge the claim lacks, no number, negation or comparison skipped over. Anything
less ("three of its four words occur somewhere in the documents") is not a proof: those claims go to the
judge. A swapped day, number or name leaves a claim word unmatched; a role swap ("the tenant pays the
landlord" against "the landlord pays the tenant") breaks the order; a negation changes the polarity.

The check is deliberately conservative: a faithful paraphrase that fails it is not marked wrong, it is
only sent to the judge.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from faithtrace.scoring import grounding, quantities

_WORD = re.compile(r"[A-Za-z]+(?:'[A-Za-z]+)?|\d+(?:[.,]\d+)*")
_SKIPPED = frozenset({"a", "an", "the"})
_NEGATION_TEXT = (
    "not no never none nothing nobody neither nor cannot without n't isn't aren't wasn't weren't don't "
    "doesn't didn't won't can't couldn't shouldn't wouldn't hasn't haven't hadn't lacks lack fails"
)
NEGATIONS = frozenset(_NEGATION_TEXT.split())
# Words that change what the rest of a sentence asserts: "if it rains, the match is cancelled" does not
# state that the match is cancelled. When the sentence has one the claim lacks, there is no proof.
_QUALIFIER_TEXT = (
    "if unless may might could would should whether possibly perhaps reportedly allegedly rumoured "
    "rumored claimed claims false myth untrue except until before after instead rather than only"
)
_QUALIFIERS = frozenset(_QUALIFIER_TEXT.split())
# Words a gap in the match must not hide: "costs 5 to 10 dollars" does not prove "costs 10 dollars", nor
# "older than Bob, who is younger than Carol" "Alice is younger than Carol".
_GAP_TEXT = (
    "more less fewer greater smaller larger higher lower older younger before after and or but to "
    "from who which that whose by"
)
_GAP_FORBIDDEN = NEGATIONS | _QUALIFIERS | frozenset(_GAP_TEXT.split())
MAX_GAP = 2
MIN_CLAIM_WORDS = 2
PROVEN_NOTE = (
    "contained in a document sentence, with the same numbers, names and negations; not sent to the judge"
)


def words(text: str) -> list[str]:
    """``text``'s words and numbers, canonical (numbers by value, units folded), articles dropped.

    Acronyms keep their case ("HTTP" is not "HTTPS" minus a plural s): they are compared exactly.
    """
    out = []
    for raw in _WORD.findall(quantities.normalise(text)):
        if len(raw) > 1 and raw.isupper():
            out.append(raw)
            continue
        tok = quantities.word(raw.lower())
        if tok in _SKIPPED:
            continue
        out.append(quantities.canonical_number(tok) if tok[0].isdigit() else tok)
    return out


# Agreement, not meaning: "meetings are" says what "meeting is" says. Tense is kept ("was" is not "is").
_AGREEMENT = {"are": "is", "were": "was", "have": "has", "do": "does"}


_SUFFIXES = ("ing", "ies", "ed", "es", "s", "e")


def key(tok: str) -> str:
    """Inflection only: "reduces" / "reduced" / "reduce" / "reducing" share a key; "Anderson" and
    "Andersen" do not (no prefix stemming here: a name swap must not look proven). Numbers, negations and
    acronyms stay exact."""
    if tok[0].isdigit() or tok in NEGATIONS or "'" in tok or tok.isupper():
        return tok
    tok = _AGREEMENT.get(tok, tok)
    for _ in range(2):
        for suffix in _SUFFIXES:
            if tok.endswith(suffix) and len(tok) - len(suffix) >= 3:
                tok = tok[: -len(suffix)] + ("y" if suffix == "ies" else "")
                break
        else:
            break
    return tok


def _match(claim: Sequence[str], sentence: Sequence[str]) -> bool:
    """Whether ``claim`` occurs in ``sentence`` in order, each gap short and free of forbidden words."""
    keys = [key(t) for t in sentence]
    want = [key(t) for t in claim]

    def extend(ci: int, si: int) -> bool:
        if ci == len(want):
            return True
        for j in range(si, min(len(keys), si + MAX_GAP + 1)):
            if any(sentence[g] in _GAP_FORBIDDEN or sentence[g][0].isdigit() for g in range(si, j)):
                return False
            if keys[j] == want[ci] and extend(ci + 1, j + 1):
                return True
        return False

    return any(keys[s] == want[0] and extend(1, s + 1) for s in range(len(keys)))


def contained(claim: str, sentence: str) -> bool:
    """Whether ``sentence`` proves ``claim`` (see the module docstring)."""
    return contained_words(words(claim), words(sentence))


def contained_words(cw: Sequence[str], sw: Sequence[str]) -> bool:
    """``contained`` on texts already split by ``words``."""
    if len([t for t in cw if t.lower() not in grounding.STOPWORDS]) < MIN_CLAIM_WORDS:
        return False
    if sum(t.lower() in NEGATIONS for t in cw) != sum(t.lower() in NEGATIONS for t in sw):
        return False
    if any(t.lower() in _QUALIFIERS for t in set(sw) - set(cw)):
        return False
    return _match(cw, sw)


def proven(claims: Sequence[str], sentences: Sequence[str]) -> list[int | None]:
    """Per claim, the index of a document sentence that proves it, or None: ask the judge."""
    split = [(s, set(map(key, words(s)))) for s in sentences]
    out: list[int | None] = []
    for claim in claims:
        # Claims the judge extracted may still open with "Alternatively," (``grounding.split_statements``).
        claim = grounding.LEAD.sub("", claim)
        need = {key(t) for t in words(claim)}
        found = None
        for i, (sentence, keys) in enumerate(split):
            if need <= keys and contained(claim, sentence):
                found = i
                break
        out.append(found)
    return out
