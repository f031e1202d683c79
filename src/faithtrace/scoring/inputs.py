"""The texts an evaluation scores, checked before any judge call: text or nothing.

Every way in (``evaluate()``, the decorator's worker, ``faithtrace serve``, the CLI) ends in
``run_pipeline``, so this is the one place that decides what is an input error. A lone surrogate is
replaced (``_common.unicode``) and the answer still scored; bytes are decoded as UTF-8 with bad sequences
replaced; anything else that is not text is an ``input_error`` outcome, counted as such and never blamed on
the judge.
"""

from __future__ import annotations

from collections.abc import Sequence

from faithtrace._common.unicode import valid_text

INPUT_ERROR = "input_error"  # ErrorInfo.type of an input error, and of a judge request its text broke


class BadInput(ValueError):
    """A text of the evaluation has a type that cannot be scored."""


def _text(value: object, what: str) -> tuple[str, int]:
    if isinstance(value, str):
        return valid_text(value)
    if isinstance(value, bytes | bytearray):
        decoded = bytes(value).decode("utf-8", errors="replace")
        return decoded, decoded.count("\ufffd")
    raise BadInput(f"{what}: expected text, got {type(value).__name__}")


def checked(query: object, contexts: object, answer: object) -> tuple[str | None, list[str], str, int]:
    """The query, documents and answer as valid text, and how many characters had to be replaced.

    Raises ``BadInput`` for a value that is not text (a str, or bytes) or, for ``contexts``, not a sequence
    of them.
    """
    replaced = 0
    q: str | None = None
    if query is not None:
        q, k = _text(query, "query")
        replaced += k
    if isinstance(contexts, str | bytes | bytearray):
        contexts = [contexts]  # one document, not a sequence of characters
    if not isinstance(contexts, Sequence):
        raise BadInput(f"contexts: expected a list of texts, got {type(contexts).__name__}")
    documents = []
    for i, doc in enumerate(contexts):
        text, k = _text(doc, f"contexts[{i}]")
        documents.append(text)
        replaced += k
    text, k = _text(answer, "answer")
    return q, documents, text, replaced + k


def replaced_note(replaced: int) -> str:
    """What the reason says about ``replaced`` characters ``checked`` had to replace."""
    s = "" if replaced == 1 else "s"
    return f"({replaced} invalid character{s} in the texts replaced by U+FFFD before judging.)"


def prepare_contexts(contexts: Sequence[str], max_chars: int) -> tuple[list[str], bool]:
    """Non-blank documents, in order, cut to ``max_chars`` in total; and whether anything was cut."""
    documents: list[str] = []
    budget = max_chars
    cut = False
    for text in contexts:
        doc = text.strip()
        if not doc:
            continue
        if budget <= 0:
            cut = True
            break
        if len(doc) > budget:
            doc, cut = doc[:budget], True
        documents.append(doc)
        budget -= len(doc)
    return documents, cut
