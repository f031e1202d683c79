"""The judge: the only code that calls an LLM. ``local`` provides the embedded judge as an endpoint."""

from faithtrace._config.judge_settings import JudgeSettings, StructuredOutput
from faithtrace.judge.calls import LLMCall
from faithtrace.judge.client import Endpoint, Judge, JudgeReply, OutputRejected

__all__ = [
    "Endpoint",
    "Judge",
    "JudgeReply",
    "JudgeSettings",
    "LLMCall",
    "OutputRejected",
    "StructuredOutput",
]
