"""The judge client: any litellm model (or the embedded judge through its endpoint), the records of its calls
and the reading of its replies."""

from faithtrace.judge.llm._litellm import load as load_litellm
from faithtrace.judge.llm._litellm import own_process as litellm_is_ours

__all__ = ["litellm_is_ours", "load_litellm"]
