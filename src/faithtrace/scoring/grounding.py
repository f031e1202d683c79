"""Checks done in code, without the judge: splitting an answer into statements, and lexical grounding.

Why lexical grounding: the embedded 1.5B judge says "yes" to almost any claim that is on the documents'
topic, including claims that add a tool, a number or a step the documents never mention (RAGTruth's
"baseless information", its most common kind of hallucination). A statement whose numbers or most of whose
content words occur nowhere in the documents (or the question it answers) is probably not "supported".
The check's verdict is recorded next to the judge's; whether it may lower a judge's "yes" is
``ScoringOptions.verdict_policy`` (``verdict_checks``). It never raises a verdict: words in common do not
make a claim true (a swapped role, a negation, a date from another sentence).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from faithtrace.scoring import quantities

# --- splitting an answer into statements -------------------------------------------------------------------
_BULLET = re.compile(r"^\s*(?:[-*•#]+|\d{1,2}[.)]|\(?[a-z][.)])\s+")
# "Step 3:" numbers the answer's own list; it is not a number the documents need to contain.
_STEP = re.compile(r"^(?:step|tip|option|method|stage|phase)\s+\d{1,2}\s*[:.)-]\s*", re.IGNORECASE)
_SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]]*\s+(?=[\"'(\[]?[A-Z0-9])")
# Citations of the sources ("(Passage 2)", "[1]") say where, not what: dropped before checking.
_CITATION = re.compile(r"\s*[(\[](?:(?:passages?|documents?|sources?)\s*)?[\d,\s&and]+[)\]]", re.IGNORECASE)
_CITATION_WORDED = re.compile(
    r"\s*\((?:see\s+)?(?:passages?|documents?|sources?)\s[^()]{0,30}\)", re.IGNORECASE
)
# Phrases that only say where the answer comes from ("based on the provided passages", "according to passage
# 2"), with a connective before them ("Therefore, based on ..."): removed wherever they are.
_SOURCE_PHRASE = re.compile(
    r"(?:^(?:therefore|thus|so|overall|in summary|in conclusion|in short|to summarize|additionally|also)\s*,?"
    r"\s*)?\b(?:based on|according to|as (?:stated|mentioned|described) in|from|per|in)\s+(?:the\s+)?"
    r"(?:given\s+|provided\s+|above\s+|retrieved\s+)?(?:passages?|documents?|context|information|sources?|"
    r"texts?)(?:\s+\d+(?:\s*(?:and|,|&)\s*\d+)*)?(?:\s+provided|\s+given|\s+above)?\s*,?\s*",
    re.IGNORECASE,
)
# Once those phrases are gone, a statement that still talks about the sources, or about what the answer
# cannot say, is a remark, not a claim about the world ("The passages do not mention X", "I am unable to
# provide further information"): nothing to check.
_ABOUT_SOURCES = re.compile(
    r"\b(?:passages?|documents?|the context|provided information|given information|the sources?|"
    r"unable to (?:answer|provide|determine)|(?:cannot|can't|can not) (?:answer|provide|determine)|"
    r"not able to (?:answer|provide|determine)|(?:are|is) not (?:provided|mentioned|specified|given))\b",
    re.IGNORECASE,
)
# Courtesies addressed to the reader say nothing about the world ("I hope this helps!", "Let me know if you
# have any further questions."): a judge asked about them answers at random. "Good luck" and "Happy ...ing"
# only as a whole sentence (at most ", everyone" or "with ..." after them): "Good luck charms date from ..."
# is a claim.
_COURTESY = re.compile(
    r"^(?:i\s+)?hope (?:this|that|it) helps\b|^(?:please\s+)?let me know\b|"
    r"^(?:please\s+)?feel free to (?:ask|contact|reach out)\b|"
    r"^(?:good luck|happy \w+ing)(?:(?:,| with) [^.!?]{1,40})?[.!]*$|"
    # A letter's salutation and its thanks ("Dear [Name],", "Thank you for your understanding."): "Thanks to
    # its price, it sells well" is a claim, so only "thank you" / "thanks for" as a whole sentence.
    r"^dear\b[^.!?]{0,60},?$|^(?:thank you|thanks for)\b[^.!?]{0,80}[.!]*$",
    re.IGNORECASE,
)
# A statement's opening connective or answer particle ties it to the rest of the answer or to the question;
# it asserts nothing: "Alternatively, apply a stain remover." claims what "Apply a stain remover." claims, and
# "No, X is not Y." what "X is not Y." does (the "no" answers the question; the claim keeps its own
# negation). Only before a comma: "Then click Save" and "No one ..." stay whole.
LEAD = re.compile(
    r"^(?:yes|no|also|then|next|however|finally|lastly|first(?:ly)?|second(?:ly)?|third(?:ly)?|"
    r"additionally|alternatively|alternately|furthermore|moreover|in addition|similarly|likewise)\s*,\s*",
    re.IGNORECASE,
)
_MIN_WORDS = 3


def split_statements(answer: str) -> list[str]:
    """The answer's checkable statements: one per sentence or list item, without citations or lead-ins.

    Dropped: headings and intros (ending with ':'), questions, remarks about the sources, courtesies to the
    reader, and fragments of fewer than three words. No judge call: this replaces LLM claim extraction by
    default (see options).
    """
    out: list[str] = []
    seen: set[str] = set()
    for line in answer.splitlines():
        line = _BULLET.sub("", line).strip()
        if not line:
            continue
        for piece in _SENTENCE_END.split(line):
            text = _CITATION_WORDED.sub("", _CITATION.sub("", piece)).strip()
            text = _STEP.sub("", _SOURCE_PHRASE.sub(" ", text).strip()).strip()
            text = LEAD.sub("", text)
            text = " ".join(text.split())
            if not text or text.endswith((":", "?")) or _ABOUT_SOURCES.search(text) or _COURTESY.match(text):
                continue
            # Counted without a template's placeholders: "From [date] to [date]" asserts nothing.
            if len(_PLACEHOLDER.sub(" ", text).split()) < _MIN_WORDS:
                continue
            text = text[0].upper() + text[1:]
            if text.lower() not in seen:
                seen.add(text.lower())
                out.append(text)
    return out


# --- lexical grounding -------------------------------------------------------------------------------------
# Function words, and the discourse words answers wrap facts in ("make sure", "alternatively"), carry no fact.
_STOPWORD_TEXT = (
    "a about above after again against all also am an and any are as at be because been before being "
    "below between both but by can could did do does doing down during each either even ever every "
    "few for from further had has have having he her here hers him his how however i if in into is it "
    "its itself just least less let like likely made make makes many may me might more most much must "
    "my neither no nor not now of off often on once one only or other others otherwise our out over "
    "own per perhaps please quite rather really same several she should since so some still such than "
    "that the their theirs them then there these they this those though through thus to too under "
    "until up upon us usually very via was way we well were what when where whether which while who "
    "whom whose why will with within without would yet you your yours generally typically usually "
    "important note notes overall additionally also however therefore answer question based provided "
    "given various certain specific include includes including different example examples etc able "
    "need needs help helps get gets got use used uses using want wants sure keep alternatively step "
    "steps hope mention mentioned mentions consider following follow additional ensure know try take "
    "takes check making process user look choose desired time times number main cannot someone thing "
    "things something way ways lot lots good best better simply easily ready done start started begin "
    "firstly secondly thirdly finally lastly "
)
STOPWORDS = frozenset(_STOPWORD_TEXT.split())
_TOKEN = re.compile(r"[a-z]+|\d+(?:[.,]\d+)*")
# More than this share of a claim's content words absent from the documents: not supported. Chosen on the
# RAGTruth QA dev rows outside the benchmark's quick subset (0.25-0.3 was a plateau); paraphrase of supported
# text rarely replaces a third of its content words.
MAX_MISSING_SHARE = 0.3
# Added material: a synonym or two is a paraphrase ("lowers" for "reduces", "weekdays" for "Monday to
# Friday": every paraphrase probe has at most two such words per claim); three or more words no document uses
# are, in RAGTruth's labelled answers, mostly a detail the documents do not give.
ADDED_MIN_WORDS = 3
ADDED_MIN_SHARE = 0.2
# "[date]", "[Your Name]": a template's placeholders assert nothing.
_PLACEHOLDER = re.compile(r"\[[^\[\]\n]{1,60}\]")
_PREFIX = 5  # a crude stem: "seasoned" and "seasoning" share "seaso"


def _tokens(text: str) -> list[str]:
    """Lower-case words and numbers; numbers by value ("10,000" = "10 000"), number words as digits."""
    out = []
    for tok in _TOKEN.findall(quantities.normalise(text).lower()):
        tok = quantities.word(tok)
        out.append(quantities.canonical_number(tok) if tok[0].isdigit() else tok)
    return out


def _stem(word: str) -> str:
    if word[0].isdigit():
        return word
    for suffix in ("ies", "es", "s"):  # plurals first, so that short words still match ("pipes"/"pipe")
        if len(word) > len(suffix) + 3 and word.endswith(suffix):
            word = word[: -len(suffix)] + ("y" if suffix == "ies" else "")
            break
    return word[:_PREFIX]


@dataclass(frozen=True)
class Vocabulary:
    """The stems and numbers that occur in the reference text (the documents plus the question)."""

    stems: frozenset[str]

    @classmethod
    def of(cls, texts: Iterable[str]) -> Vocabulary:
        return cls(frozenset(_stem(t) for text in texts for t in _tokens(text)))


@dataclass(frozen=True)
class Grounding:
    numbers_missing: tuple[str, ...]
    words_missing: tuple[str, ...]
    content_words: int
    # The claim is negated and its evidence is not, or the other way round ("does not accept returns" against
    # "accepts returns"): every word can be in the documents while the claim says the opposite.
    polarity_differs: bool = False
    # The claim's numbers that occur nowhere in the documents or the question (not just not in its evidence).
    numbers_absent: tuple[str, ...] = ()
    # The document sentences sharing the most of the claim's words (where ``contradictions`` looks).
    near: tuple[str, ...] = ()

    @property
    def unmatched(self) -> list[str]:
        """The claim's numbers its evidence lacks and its words no document uses (for the judge to find)."""
        return [*self.numbers_missing, *self.words_missing]

    @property
    def missing_share(self) -> float:
        return len(self.words_missing) / self.content_words if self.content_words else 0.0

    def unsupported(self, max_missing_share: float) -> bool:
        return bool(self.numbers_missing) or self.missing_share > max_missing_share

    @property
    def adds_material(self) -> bool:
        """Whether the claim says something the documents never mention: at least ``ADDED_MIN_WORDS`` of its
        content words, and over ``ADDED_MIN_SHARE`` of them, occur in no document (not even inflected)."""
        return len(self.words_missing) >= ADDED_MIN_WORDS and self.missing_share > ADDED_MIN_SHARE

    def describe(self) -> str:
        shown = ", ".join(f"'{w}'" for w in [*self.numbers_missing, *self.words_missing][:6])
        return f"not in the documents: {shown}"


def check(statement: str, vocabulary: Vocabulary, numbers: frozenset[str] | None = None) -> Grounding:
    """Which of ``statement``'s numbers and content words the reference text never uses.

    ``numbers``: where the statement's numbers must occur (its evidence sentences and the question) instead
    of anywhere in the reference text.
    """
    found_numbers = vocabulary.stems if numbers is None else numbers
    missing_numbers: list[str] = []
    words: list[str] = []
    content = 0
    seen: set[str] = set()
    for tok in _tokens(_PLACEHOLDER.sub(" ", statement)):
        if tok in seen or tok in STOPWORDS or (len(tok) < 3 and not tok[0].isdigit()):
            continue
        seen.add(tok)
        if tok[0].isdigit():
            if tok not in found_numbers:
                missing_numbers.append(tok)
            continue
        content += 1
        if _stem(tok) not in vocabulary.stems:
            words.append(tok)
    return Grounding(tuple(missing_numbers), tuple(words), content)


def check_claims(claims: Sequence[str], documents: Sequence[str], question: str | None) -> list[Grounding]:
    """``check`` per claim, with each claim's numbers looked up where the claim's words are.

    A number the documents use for something else does not ground a claim: "batteries are covered for 4
    years" is not supported by "covered for 2 years" because "a charge takes 4 hours" is in another sentence.
    So numbers must occur in the document sentences that share the most of the claim's words (as many as the
    local judge is shown as evidence) or in the question.
    """
    vocabulary = Vocabulary.of([*documents, question or ""])
    sentences = document_sentences(documents)
    keyed = [_keys(s) for s in sentences]
    asked = {t for t in _tokens(question or "") if t[0].isdigit()}
    out = []
    for claim in claims:
        # Picked by words alone: a sentence sharing only the number must not vouch for it.
        near = _best(_keys(claim), keyed, EVIDENCE_SENTENCES, number_weight=0)
        numbers = {t for i in near for t in _tokens(sentences[i]) if t[0].isdigit()}
        got = check(claim, vocabulary, frozenset(numbers | asked))
        differs = bool(near) and _negated(claim) != any(_negated(sentences[i]) for i in near)
        absent = tuple(n for n in got.numbers_missing if n not in vocabulary.stems)
        out.append(
            dataclasses.replace(
                got,
                polarity_differs=differs,
                numbers_absent=absent,
                near=tuple(sentences[i] for i in near),
            )
        )
    return out


_NEGATION = re.compile(r"\b(?:not|no|never|none|nothing|neither|nor|cannot|without)\b|n't\b", re.IGNORECASE)


def _negated(text: str) -> bool:
    return _NEGATION.search(text) is not None


# --- evidence for the local judge --------------------------------------------------------------------------
# The 1.5B judge is accurate on short premise/claim pairs and close to chance on a claim list against whole
# documents (RAGTruth dev rows). So with the local judge each claim is shown only with the few document
# sentences that share the most of its words, picked here; the judge then reads ~100 tokens per claim.
EVIDENCE_SENTENCES = 2
_EVIDENCE_CHARS = 320
_WINDOW = 320  # documents without punctuation are cut into windows of this many characters
NO_EVIDENCE = "(nothing related in the documents)"


# Scraped pages often glue sentences together ("the File tab.Click Options"): split there too.
_GLUED = re.compile(r"(?<=[a-z]{2}[.!?])(?=[A-Z][a-z])")


def document_sentences(documents: Sequence[str]) -> list[str]:
    """The documents' sentences, each once, in order."""
    out: list[str] = []
    seen: set[str] = set()
    for doc in documents:
        for line in doc.splitlines():
            for piece in (p for part in _SENTENCE_END.split(line.strip()) for p in _GLUED.split(part)):
                piece = piece.strip()
                chunks = []
                while len(piece) > _WINDOW + 80:  # a run-on page: windows, cut at a space
                    cut = piece.rfind(" ", _WINDOW // 2, _WINDOW)
                    cut = cut if cut > 0 else _WINDOW
                    chunks.append(piece[:cut].strip())
                    piece = piece[cut:].strip()
                chunks.append(piece)
                for chunk in chunks:
                    if chunk and chunk.lower() not in seen:
                        seen.add(chunk.lower())
                        out.append(chunk)
    return out


def _keys(text: str) -> set[str]:
    return {
        _stem(t)
        for t in _tokens(_PLACEHOLDER.sub(" ", text))
        if t not in STOPWORDS and (len(t) >= 3 or t[0].isdigit())
    }


def _best(want: set[str], keyed: Sequence[set[str]], k: int, number_weight: int = 2) -> list[int]:
    """The indexes of the ``k`` sentences sharing the most of ``want``, in order."""
    scored = []
    for i, have in enumerate(keyed):
        score = sum(number_weight if key[0].isdigit() else 1 for key in want & have)
        if score:
            scored.append((-score, i))
    return sorted(i for _, i in sorted(scored)[:k])


def evidence(claims: Sequence[str], documents: Sequence[str]) -> list[str]:
    """Per claim, the document sentences sharing the most of its words (numbers count double), in order."""
    sentences = document_sentences(documents)
    keyed = [_keys(s) for s in sentences]
    out: list[str] = []
    for claim in claims:
        text = " ... ".join(sentences[i] for i in _best(_keys(claim), keyed, EVIDENCE_SENTENCES))
        if len(text) > _EVIDENCE_CHARS:
            text = text[: _EVIDENCE_CHARS - 1].rstrip() + "…"
        out.append(text or NO_EVIDENCE)
    return out
