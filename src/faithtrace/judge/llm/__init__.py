"""The judge client: any litellm model (or the embedded judge through its endpoint), the records of its calls
and the reading of its replies."""

from faithtrace.judge.llm._litellm import load as load_litellm

__all__ = ["load_litellm"]
