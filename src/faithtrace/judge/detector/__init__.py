"""The trained detector: a token classifier that marks the answer's words no passage supports.

``inputs`` is the contract the training recipe (``training/``) and the runtime share; ``model`` loads and
verifies a model directory, ``windows`` scores every answer token through windows and parts, ``spans`` turns
token probabilities into flagged spans and finds the claims that hold them. The runtime modules import
onnxruntime, tokenizers and numpy (the ``detector`` extra), so this package imports only the contract:
``scoring.detection`` imports the rest where a detector is configured.
"""

from faithtrace.judge.detector.inputs import (
    HALLUCINATED_LABEL,
    INPUT_NAMES,
    OUTPUT_NAME,
    context_segment,
)

__all__ = ["HALLUCINATED_LABEL", "INPUT_NAMES", "OUTPUT_NAME", "context_segment"]
