"""The RAG parts of the example: a tiny corpus, a keyword retriever and a scripted "model".

No LLM writes the service's answers: the generator copies the retrieved passage, and can be told to make
something up the way real models do (change a fact, or add one the passage never states). That keeps the
example runnable anywhere and makes it obvious which answers faithtrace should flag.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

Hallucination = Literal["none", "contradict", "embellish"]


@dataclass(frozen=True)
class Document:
    id: str
    title: str
    text: str
    # How the scripted model gets this document wrong when asked to: (true fragment, false fragment) and a
    # sentence the document does not support.
    wrong_fact: tuple[str, str]
    made_up: str


@dataclass(frozen=True)
class RagAnswer:
    """What the service's answer function returns; the decorator reads ``text`` and the documents from it."""

    question: str
    text: str
    documents: list[Document] = field(default_factory=list)
    hallucination: Hallucination = "none"


CORPUS: tuple[Document, ...] = (
    Document(
        id="returns",
        title="Returns and refunds",
        text=(
            "Voltaro accepts returns of unused e-bikes within 30 days of delivery. "
            "Refunds go back to the original payment method within 5 business days."
        ),
        wrong_fact=("30 days", "60 days"),
        made_up="Return shipping is always free of charge.",
    ),
    Document(
        id="warranty",
        title="Warranty",
        text=(
            "Every Voltaro frame has a 5-year warranty. "
            "Batteries are covered for 2 years or 500 charge cycles, whichever comes first."
        ),
        wrong_fact=("2 years", "4 years"),
        made_up="The warranty also covers damage from accidents.",
    ),
    Document(
        id="range",
        title="Voltaro City: battery and range",
        text=(
            "The Voltaro City has a 504 Wh battery and a range of up to 80 km. "
            "A full charge takes about 4 hours."
        ),
        wrong_fact=("80 km", "150 km"),
        made_up="The battery can be fully charged in 30 minutes with the fast charger.",
    ),
    Document(
        id="shipping",
        title="Shipping",
        text=(
            "Orders ship from the Rotterdam warehouse within 2 business days. "
            "Delivery inside the EU is free for orders over 500 euros."
        ),
        wrong_fact=("Rotterdam", "Hamburg"),
        made_up="Express next-day delivery is available everywhere in the EU for 15 euros.",
    ),
    Document(
        id="service",
        title="Servicing",
        text=(
            "Voltaro recommends a service every 2,000 km. "
            "Partner workshops are listed on the Voltaro website."
        ),
        wrong_fact=("2,000 km", "10,000 km"),
        made_up="The first service is free for every customer.",
    ),
)

_WORD = re.compile(r"[a-z0-9]+")
# Words that say nothing about which document a question is about.
# A string is easier to read than a one-word-per-line set literal.
_STOPWORDS = frozenset(
    "a an and are as at be by can do does for from go how i in is it "  # noqa: SIM905
    "long my of on or the to what when where which who why with you your".split()
)


def _terms(text: str) -> set[str]:
    words = {w for w in _WORD.findall(text.lower()) if w not in _STOPWORDS}
    # A crude stemmer, enough for "returns"/"return" and "batteries"/"battery" to meet.
    singular = {w[:-3] + "y" for w in words if w.endswith("ies")} | {w[:-1] for w in words if w[-1] == "s"}
    return words | singular


def retrieve(question: str, k: int = 1) -> list[Document]:
    """Keyword overlap between the question and each document's title and text; best ``k`` first."""
    wanted = _terms(question)
    scored = [(len(wanted & _terms(f"{d.title} {d.text}")), i, d) for i, d in enumerate(CORPUS)]
    scored.sort(key=lambda t: (-t[0], t[1]))
    return [d for score, _, d in scored[:k] if score > 0]


def generate(question: str, documents: list[Document], hallucination: Hallucination = "none") -> str:
    """The scripted model: repeat the top passage, optionally with one made-up fact."""
    if not documents:
        return "I could not find anything about that in the Voltaro help centre."
    top = documents[0]
    text = top.text
    if hallucination == "contradict":
        true, false = top.wrong_fact
        text = text.replace(true, false)
    elif hallucination == "embellish":
        text = f"{text} {top.made_up}"
    return text


def answer(question: str, hallucination: Hallucination = "none", k: int = 1) -> RagAnswer:
    documents = retrieve(question, k=k)
    return RagAnswer(
        question=question,
        text=generate(question, documents, hallucination),
        documents=documents,
        hallucination=hallucination,
    )
