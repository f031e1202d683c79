"""The trained detector: a token classifier that marks the answer's words no passage supports.

Only the input contract lives here so far; the training recipe (``training/``) and the runtime share it.
"""

from faithtrace.judge.detector.inputs import (
    HALLUCINATED_LABEL,
    INPUT_NAMES,
    OUTPUT_NAME,
    context_segment,
)

__all__ = ["HALLUCINATED_LABEL", "INPUT_NAMES", "OUTPUT_NAME", "context_segment"]
