"""faithtrace: live faithfulness scoring for RAG applications, as OpenTelemetry spans, events and metrics.

    from faithtrace import trace_faithfulness

    @trace_faithfulness
    def answer(question: str) -> RagResult: ...

Or score one answer directly: ``faithtrace.evaluate(query, contexts, answer)``.
"""

from typing import TYPE_CHECKING, Any

from faithtrace._common.errors import (
    ConfigError,
    DetectorError,
    FaithtraceError,
    JudgeError,
    LocalJudgeError,
)
from faithtrace._config.judge_settings import JudgeSettings
from faithtrace._config.scoring_options import ScoringOptions
from faithtrace._config.settings import CaptureOptions, SamplingOptions, WorkerOptions
from faithtrace._evaluate import aevaluate, evaluate
from faithtrace._request.decorator import trace_faithfulness
from faithtrace._runtime.configure import configure
from faithtrace._runtime.lifecycle import flush, shutdown
from faithtrace._runtime.runtime import ShutdownReport
from faithtrace._version import __version__
from faithtrace.judge import LLMCall
from faithtrace.scoring.models import (
    ClaimVerdict,
    ErrorInfo,
    FaithfulnessResult,
    IdkPolicy,
    Outcome,
    StepUsage,
    VerdictCounts,
)

if TYPE_CHECKING:
    from faithtrace.sources.processor import score_openinference


def __getattr__(name: str) -> Any:
    # score_openinference brings the OTel SDK's span processor classes: imported on first use, not with us.
    if name == "score_openinference":
        from faithtrace.sources.processor import score_openinference

        return score_openinference
    raise AttributeError(f"module 'faithtrace' has no attribute {name!r}")


__all__ = [
    "CaptureOptions",
    "ClaimVerdict",
    "ConfigError",
    "DetectorError",
    "ErrorInfo",
    "FaithfulnessResult",
    "FaithtraceError",
    "IdkPolicy",
    "JudgeError",
    "JudgeSettings",
    "LLMCall",
    "LocalJudgeError",
    "Outcome",
    "SamplingOptions",
    "ScoringOptions",
    "ShutdownReport",
    "StepUsage",
    "VerdictCounts",
    "WorkerOptions",
    "__version__",
    "aevaluate",
    "configure",
    "evaluate",
    "flush",
    "score_openinference",
    "shutdown",
    "trace_faithfulness",
]
