"""The judge: the only code that calls an LLM. ``llm`` is the client; ``local`` is the embedded judge."""

from faithtrace._config.judge_settings import JudgeSettings, StructuredOutput
from faithtrace.judge.llm.calls import LLMCall
from faithtrace.judge.llm.client import Endpoint, Judge, JudgeReply, OutputRejected

__all__ = [
    "Endpoint",
    "Judge",
    "JudgeReply",
    "JudgeSettings",
    "LLMCall",
    "OutputRejected",
    "StructuredOutput",
]
