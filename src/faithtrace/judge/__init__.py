"""The judge: the only code that calls an LLM. ``llm`` is the client; ``local`` is the embedded judge.

What scoring and the fleet use is exported here; the folders are the judges' own business.
"""

from faithtrace._config.judge_settings import JudgeSettings, StructuredOutput
from faithtrace.judge.llm import litellm_is_ours, load_litellm
from faithtrace.judge.llm.calls import LLMCall
from faithtrace.judge.llm.client import Judge, JudgeReply, OutputRejected
from faithtrace.judge.llm.reply import RETRYABLE, TokenLogprobs, price_per_token
from faithtrace.judge.llm.request import Endpoint

__all__ = [
    "RETRYABLE",
    "Endpoint",
    "Judge",
    "JudgeReply",
    "JudgeSettings",
    "LLMCall",
    "OutputRejected",
    "StructuredOutput",
    "TokenLogprobs",
    "litellm_is_ours",
    "load_litellm",
    "price_per_token",
]
