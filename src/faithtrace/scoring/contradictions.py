"""Contradictions code can see: a claim that *is* one evidence sentence, changed in one mechanical way.

The small embedded judge reads word overlap as agreement: it says "yes" to "the landlord pays the tenant"
against "the tenant pays the landlord" (P(yes) 0.99 on our probes). These checks catch the three edits that
fool it and that code can recognise without understanding the text:

* **negation flip**: the claim, read without its negations and modal verbs, is in the sentence, and the two
  differ in how many negations they carry ("sale items can be returned" / "sale items cannot be returned").
* **role swap**: exchanging two of the claim's phrases gives a claim the sentence contains, and the claim
  itself is not contained ("Lyon beat Porto" / "Porto beat Lyon"). Phrases joined by a symmetric word
  ("and", "with", "married", "same as") are never exchanged: "salt and pepper" is "pepper and salt".
* **attribute swap**: putting one word of the sentence into the claim gives a claim the sentence contains,
  while the claim's own word stands elsewhere in the sentence after the same word, in a parallel clause
  ("Ms Berg teaches chemistry" / "Mr Olsen teaches chemistry and Ms Berg teaches history").

Each needs one sentence holding the claim's words almost exactly, so a paraphrase never matches (none of
our 32 faithful probes nor any of the 662 judged claims of the RAGTruth dev rows did). What a match means
is ``verdict_checks``' business: the finding is the check's verdict, recorded next to the judge's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from faithtrace.scoring import proof
from faithtrace.scoring.grounding import STOPWORDS

_MODAL_TEXT = "can could may might must should shall will would do does did be"
_MODALS = frozenset(_MODAL_TEXT.split())
# Words that make a relation symmetric or a list unordered: exchanging what they join changes nothing.
_SYMMETRIC_TEXT = (
    "and or nor with as same similar equal equals like versus vs between met meet meets married marry "
    "resembles resemble near next beside alongside together both neither either"
)
_SYMMETRIC = frozenset(_SYMMETRIC_TEXT.split())
_MAX_PHRASE = 3  # words in an exchanged phrase
_LEAD = 2  # a negation this many words before the matched words still governs them ("does not work")


@dataclass(frozen=True)
class Contradiction:
    kind: str  # negation_flip | role_swap | attribute_swap
    sentence: str

    def describe(self) -> str:
        what = {
            "negation_flip": "says the opposite (a negation added or dropped)",
            "role_swap": "has two of its parts exchanged",
            "attribute_swap": "takes a detail from a parallel clause",
        }[self.kind]
        return f'compared with the document sentence "{self.sentence[:160]}", the claim {what}'


def _content(tok: str) -> bool:
    return tok[0].isdigit() or tok.isupper() or (len(tok) >= 3 and tok.lower() not in STOPWORDS)


def _is_negation(tok: str) -> bool:
    return tok.lower() in proof.NEGATIONS


class _Pair:
    """A claim and one sentence, as canonical words and inflection keys (``proof``'s)."""

    def __init__(self, claim: str, sentence: str) -> None:
        self.cw = proof.words(claim)
        self.sw = proof.words(sentence)
        self.ck = [proof.key(t) for t in self.cw]
        self.sk = [proof.key(t) for t in self.sw]
        self.sentence_keys = set(self.sk)

    def contains(self, words: Sequence[str]) -> bool:
        return proof.contained_words(list(words), self.sw)


def _negation_flip(p: _Pair) -> bool:
    plain = [
        (w, k) for w, k in zip(p.cw, p.ck, strict=True) if not _is_negation(w) and w.lower() not in _MODALS
    ]
    if sum(_content(w) for w, _ in plain) < proof.MIN_CLAIM_WORDS:
        return False
    if not {k for _, k in plain} <= p.sentence_keys:
        return False
    span = _span([k for _, k in plain], p)
    if span is None:
        return False
    lo, hi = span
    region = p.sw[max(0, lo - _LEAD) : hi + 1]
    return sum(map(_is_negation, p.cw)) % 2 != sum(map(_is_negation, region)) % 2


def _span(want: Sequence[str], p: _Pair) -> tuple[int, int] | None:
    """First and last sentence index of ``want`` (keys) found in order, gaps of negations/modals free and
    at most ``proof.MAX_GAP`` other words."""

    def extend(ci: int, si: int) -> int | None:
        if ci == len(want):
            return si - 1
        gap = 0
        for j in range(si, len(p.sk)):
            if p.sk[j] == want[ci]:
                end = extend(ci + 1, j + 1)
                if end is not None:
                    return end
            word = p.sw[j]
            if not (_is_negation(word) or word.lower() in _MODALS):
                gap += 1
                if gap > proof.MAX_GAP:
                    return None
        return None

    for start, k in enumerate(p.sk):
        if k == want[0]:
            end = extend(1, start + 1)
            if end is not None:
                return start, end
    return None


def _phrases(p: _Pair) -> list[tuple[int, int]]:
    """(start, length) of the claim's phrases that may be exchanged: some content, no symmetric word."""
    out = []
    for n in range(1, _MAX_PHRASE + 1):
        for i in range(len(p.cw) - n + 1):
            words = p.cw[i : i + n]
            if any(map(_content, words)) and not any(
                w.lower() in _SYMMETRIC or _is_negation(w) for w in words
            ):
                out.append((i, n))
    return out


def _exchange(words: Sequence[str], keys: Sequence[str], a: tuple[int, int], b: tuple[int, int]) -> list[str]:
    """``words`` with every occurrence of phrase ``a`` and of phrase ``b`` exchanged (by key)."""
    ka, kb = list(keys[a[0] : a[0] + a[1]]), list(keys[b[0] : b[0] + b[1]])
    wa, wb = list(words[a[0] : a[0] + a[1]]), list(words[b[0] : b[0] + b[1]])
    out: list[str] = []
    i = 0
    while i < len(words):
        if list(keys[i : i + len(ka)]) == ka:
            out += wb
            i += len(ka)
        elif list(keys[i : i + len(kb)]) == kb:
            out += wa
            i += len(kb)
        else:
            out.append(words[i])
            i += 1
    return out


def _role_swap(p: _Pair) -> bool:
    if not {k for w, k in zip(p.cw, p.ck, strict=True) if _content(w)} <= p.sentence_keys:
        return False
    phrases = [ph for ph in _phrases(p) if set(p.ck[ph[0] : ph[0] + ph[1]]) <= p.sentence_keys]
    for a in phrases:
        for b in phrases:
            if b[0] < a[0] + a[1]:
                continue
            between = p.cw[a[0] + a[1] : b[0]]
            if not between or any(w.lower() in _SYMMETRIC for w in between):
                continue
            if p.ck[a[0] : a[0] + a[1]] == p.ck[b[0] : b[0] + b[1]]:
                continue
            if p.contains(_exchange(p.cw, p.ck, a, b)):
                return True
    return False


def _attribute_swap(p: _Pair) -> bool:
    if not set(p.ck) <= p.sentence_keys:
        return False
    for i, (word, k) in enumerate(zip(p.cw, p.ck, strict=True)):
        if not _content(word):
            continue
        # The claim's word in the sentence, after some word (the pivot: "teaches", "in", "costs").
        pivots = {p.sk[r - 1] for r in range(1, len(p.sk)) if p.sk[r] == k}
        for q in range(1, len(p.sw)):
            if p.sk[q - 1] not in pivots or p.sk[q] == k or not _content(p.sw[q]):
                continue
            if p.contains([*p.cw[:i], p.sw[q], *p.cw[i + 1 :]]):
                return True
    return False


_CHECKS = (("negation_flip", _negation_flip), ("role_swap", _role_swap), ("attribute_swap", _attribute_swap))


def find(claim: str, sentences: Sequence[str]) -> Contradiction | None:
    """The first mechanical contradiction of ``claim`` by one of ``sentences``, or None.

    ``sentences``: the few evidence sentences that share the most words with the claim. A sentence that
    contains the claim outright proves it instead (``proof``) and is skipped here.
    """
    for sentence in sentences:
        if proof.contained(claim, sentence):
            continue
        pair = _Pair(claim, sentence)
        if not pair.cw or not pair.sw:
            continue
        for kind, check in _CHECKS:
            if check(pair):
                return Contradiction(kind, sentence)
    return None
