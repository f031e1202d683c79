"""Text cut for reading: at a sentence end or between words, with an ellipsis, never inside a word.

Explanations and quoted claims are read by people in trace UIs; a hard cut at the character cap leaves
half-words ("in th…") that read like a bug. A cut backs up to the last sentence end when that keeps most of
the room, else to the last break between words; only a text with no break in the room at all (one very long
token, such as a URL or a hash) is cut where the cap puts it.
"""

from __future__ import annotations

import re
from typing import Final

ELLIPSIS: Final = "…"
# A sentence end: terminal punctuation (optionally closed by a quote or bracket) followed by white space.
_SENTENCE_END: Final = re.compile(r"[.!?][\"')\]]?(?=\s)")
_SPACE: Final = re.compile(r"\s")
# Back up to a sentence end only when that keeps this share of the room (else the last word break).
_SENTENCE_KEEP: Final = 0.6
_TRAILING: Final = " \t\r\n,;:-–—("  # what a cut leaves dangling before the ellipsis


def shorten(text: str, limit: int) -> str:
    """``text`` when it fits in ``limit`` characters, else its longest readable start plus an ellipsis.

    The result is at most ``limit`` characters long and ends at a sentence end (then `` …``) or at the end of
    a word (then ``…``).
    """
    if len(text) <= limit:
        return text
    if limit <= 1:
        return ELLIPSIS[:limit]
    room = limit - 2  # the ellipsis, and the space a sentence end gets before it
    window = text[: room + 1]  # one character past the room says whether the cut falls between words
    sentence = max((m.end() for m in _SENTENCE_END.finditer(window) if m.end() <= room), default=0)
    if sentence >= room * _SENTENCE_KEEP:
        return text[:sentence] + " " + ELLIPSIS
    if _SPACE.match(window[room:]):  # the room ends exactly at a word's end
        word = room
    else:
        word = max((m.start() for m in _SPACE.finditer(window, 0, room)), default=0)
    if word == 0:
        word = room + 1  # no break at all: the cap decides (the room plus the unused space)
    head = text[:word].rstrip(_TRAILING) or text[:word]
    return head + ELLIPSIS
