"""Reading a long context and a long answer with a model of fixed length: windows and answer parts.

The model reads ``max_length`` tokens at once: the question and some passages, then the answer. When the
passages do not fit, they are packed into several *windows*, each with the question and the whole answer
part, and every answer token gets one probability per window. When the answer itself is too long for one
input (it may take at most three quarters of it, so that some context always fits), it is cut into *parts*
at token boundaries, preferably after a sentence, and each part is scored on its own: every answer token is
scored, none is dropped or passed unread.

How the windows' probabilities combine is a choice (``Combine``):

- ``min``: a token is as supported as the window that supports it best. A window without the passage that
  supports a token cannot know it is supported; the window with that passage can. MiniCheck combines its
  chunks this way (maximum support).
- ``max``: the highest hallucination probability over the windows (LettuceDetect's code). Measured here on
  RAGTruth-QA with 512-token windows it *lowered* AUROC from 0.78 (one truncated window) to 0.70.

``benchmarks/detector/detector_windows.py`` measures both on the dev rows.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from faithtrace.judge.detector.inputs import context_segment
from faithtrace.judge.detector.model import DetectorModel

__all__ = ["Combine", "Detection", "TokenScore", "detect", "plan"]

Combine = Literal["min", "max"]

# The answer part may fill at most this share of a model input; the rest is for the context.
_ANSWER_SHARE = 0.75
# A passage longer than a window is cut into chunks that overlap by this share of the room for context, so
# that a sentence cut at a chunk's end is whole in the next one.
_OVERLAP_SHARE = 0.125
_SENTENCE_END = (".", "!", "?", ";", ":", "\n")


@dataclass(frozen=True)
class TokenScore:
    """One answer token: its characters in the answer (``start``, ``end``) and P(not supported)."""

    start: int
    end: int
    p: float


@dataclass(frozen=True)
class Detection:
    """Every answer token scored, in order; how many model inputs it took (windows over all parts)."""

    tokens: tuple[TokenScore, ...]
    windows: int
    parts: int
    combine: Combine


@dataclass(frozen=True)
class _Input:
    part: int
    ids: list[int]
    answer_positions: list[int]  # positions of the answer part's tokens in ``ids``
    offsets: list[tuple[int, int]]  # their character offsets in the answer


def _encode(tokenizer: Any, text: str) -> Any:
    return tokenizer.encode(text, add_special_tokens=False)


def _special_tokens(tokenizer: Any) -> int:
    processor = tokenizer.post_processor
    return 0 if processor is None else int(processor.num_special_tokens_to_add(True))


def answer_parts(tokenizer: Any, answer: str, max_tokens: int) -> list[tuple[int, int]]:
    """Character ranges covering the whole answer, each of at most ``max_tokens`` tokens."""
    offsets = _encode(tokenizer, answer).offsets
    if len(offsets) <= max_tokens:
        return [(0, len(answer))]
    cuts: list[int] = []
    first = 0
    while len(offsets) - first > max_tokens:
        last = first + max_tokens - 1
        # Prefer to end a part after a sentence, if one ends in its second half.
        for i in range(last, first + max_tokens // 2, -1):
            if answer[offsets[i][0] : offsets[i][1]].endswith(_SENTENCE_END):
                last = i
                break
        first = last + 1
        cuts.append(offsets[first][0])
    bounds = [0, *cuts, len(answer)]
    return [(a, b) for a, b in itertools.pairwise(bounds) if answer[a:b].strip()]


def _chunks(tokenizer: Any, passage: str, room: int) -> list[str]:
    """The passage whole if it fits in ``room`` tokens, else overlapping chunks that each do."""
    offsets = _encode(tokenizer, passage).offsets
    if len(offsets) <= room:
        return [passage]
    step = max(1, room - int(room * _OVERLAP_SHARE))
    out = []
    for first in range(0, len(offsets), step):
        last = min(first + room, len(offsets)) - 1
        out.append(passage[offsets[first][0] : offsets[last][1]])
        if last == len(offsets) - 1:
            break
    return out


def context_windows(tokenizer: Any, question: str, passages: Sequence[str], room: int) -> list[str]:
    """First segments of at most ``room`` tokens: the question, then as many passages as fit, in order."""
    separator = len(_encode(tokenizer, "\n\n").ids)
    q_tokens = len(_encode(tokenizer, question).ids) if question else 0
    if q_tokens > room // 2:  # a question longer than the passages' room: cut, it is the first segment
        offsets = _encode(tokenizer, question).offsets
        question, q_tokens = question[: offsets[room // 2 - 1][1]], room // 2
    left = room - q_tokens - (separator if question else 0)
    pieces: list[tuple[str, int]] = []
    for passage in passages:
        if not passage.strip():
            continue
        for chunk in _chunks(tokenizer, passage.strip(), left):
            pieces.append((chunk, len(_encode(tokenizer, chunk).ids)))
    windows: list[list[str]] = []
    used = left + 1  # start a window at the first piece
    for text, size in pieces:
        if used + size > left:
            windows.append([])
            used = 0
        windows[-1].append(text)
        used += size + separator
    if not windows:
        return [context_segment(question, [])]
    return [context_segment(question, w) for w in windows]


def _fit(tokenizer: Any, window: str, part: str, max_length: int) -> Any:
    """The pair's encoding, the window cut at its end where a piece cut mid-word re-tokenized longer."""
    enc = tokenizer.encode(window, part)
    for _ in range(4):
        excess = len(enc.ids) - max_length
        if excess <= 0:
            break
        offsets = _encode(tokenizer, window).offsets
        keep = len(offsets) - excess
        window = window[: offsets[keep - 1][1]] if keep > 0 else ""
        enc = tokenizer.encode(window, part)
    return enc


def plan(model: DetectorModel, question: str, passages: Sequence[str], answer: str) -> list[_Input]:
    """Every model input needed to score the whole answer: each answer part against each window."""
    tokenizer = model.tokenizer
    room = model.max_length - _special_tokens(tokenizer)
    inputs: list[_Input] = []
    for index, (start, end) in enumerate(answer_parts(tokenizer, answer, int(room * _ANSWER_SHARE))):
        part = answer[start:end]
        part_tokens = len(_encode(tokenizer, part).ids)
        for window in context_windows(tokenizer, question, passages, room - part_tokens):
            enc = _fit(tokenizer, window, part, model.max_length)
            # Each read of an Encoding's attribute converts the whole list, holding the GIL: read once.
            offsets = enc.offsets
            positions = [i for i, s in enumerate(enc.sequence_ids) if s == 1]
            inputs.append(
                _Input(
                    part=index,
                    ids=list(enc.ids),
                    answer_positions=positions,
                    offsets=[(offsets[i][0] + start, offsets[i][1] + start) for i in positions],
                )
            )
    too_long = [len(i.ids) for i in inputs if len(i.ids) > model.max_length]
    if too_long:  # only a tokenizer whose pieces tokenize differently together could do this
        raise ValueError(f"a detector input has {max(too_long)} tokens; the model reads {model.max_length}")
    return inputs


def detect(
    model: DetectorModel, question: str, passages: Sequence[str], answer: str, combine: Combine = "min"
) -> Detection:
    """P(not supported) for every token of ``answer``, read against ``question`` and ``passages``.

    Blocking, CPU-bound: call it off the event loop. onnxruntime releases the GIL while it computes.
    """
    inputs = plan(model, question, passages, answer)
    per_part: dict[int, tuple[list[tuple[int, int]], list[np.ndarray]]] = {}
    for item in inputs:
        probs = model.hallucination_probabilities(item.ids)[item.answer_positions]
        offsets, seen = per_part.setdefault(item.part, (item.offsets, []))
        if item.offsets != offsets:  # the same answer part tokenizes the same beside any window
            raise ValueError("an answer part tokenized differently in two windows")
        seen.append(probs)
    tokens: list[TokenScore] = []
    for part in sorted(per_part):
        offsets, seen = per_part[part]
        stacked = np.vstack(seen)
        combined = stacked.min(axis=0) if combine == "min" else stacked.max(axis=0)
        tokens.extend(TokenScore(a, b, float(p)) for (a, b), p in zip(offsets, combined, strict=True))
    return Detection(tokens=tuple(tokens), windows=len(inputs), parts=len(per_part), combine=combine)
