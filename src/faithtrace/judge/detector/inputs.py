"""What the detector reads, fixed once for training and inference alike.

The model sees a tokenizer *pair*: the first segment is the question and the retrieved passages
(:func:`context_segment`), the second is the answer. Only the first segment may ever be cut to fit the model;
the answer never is, because a cut answer would be scored as if its missing part were faithful.

The exported ONNX graph takes ``input_ids`` and ``attention_mask`` (int64, ``[batch, tokens]``) and returns
``logits`` (float32, ``[batch, tokens, 2]``); class 1 means "this answer token is not supported".
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["HALLUCINATED_LABEL", "INPUT_NAMES", "OUTPUT_NAME", "context_segment"]

INPUT_NAMES: tuple[str, str] = ("input_ids", "attention_mask")
OUTPUT_NAME = "logits"
HALLUCINATED_LABEL = 1

# A blank line separates the question from the passages and the passages from each other: the same layout the
# answers were written against, and one the tokenizer keeps as plain whitespace.
_SEPARATOR = "\n\n"


def context_segment(question: str, passages: Sequence[str]) -> str:
    """The first segment of the model's input: the question, then each passage, blank-line separated.

    Empty passages are dropped so that a retriever's padding does not change the input.
    """
    parts = [question.strip(), *(p.strip() for p in passages)]
    return _SEPARATOR.join(p for p in parts if p)
