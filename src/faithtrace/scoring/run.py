"""One evaluation's record while the pipeline runs: what each step spent, the truths and notes gathered, and
the steps' one failure type, which becomes an error result that keeps every call made so far."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from faithtrace._common.errors import DetectorError, JudgeError, LocalJudgeError
from faithtrace._config.scoring_options import ScoringOptions
from faithtrace.judge import Judge
from faithtrace.scoring import inputs
from faithtrace.scoring.models import ErrorInfo, FaithfulnessResult, LLMCall, Outcome, StepUsage

logger = logging.getLogger("faithtrace")

StepName = Literal["truths", "claims", "verdicts", "reason"]

# What a step turns into ``StepFailed``: the judge, or the embedded judge, could not do it.
JUDGE_FAILURES = (JudgeError, LocalJudgeError)


def step_usage(
    step: StepName, calls: Sequence[LLMCall], duration_s: float, *, cached: bool = False
) -> StepUsage:
    ok = [c for c in calls if c.error_type is None]
    costs = [c.cost_usd for c in ok]
    cost = None if not ok or any(c is None for c in costs) else sum(c for c in costs if c is not None)
    return StepUsage(
        step=step,
        model=calls[0].model if calls else None,
        llm_calls=len(calls),
        input_tokens=sum(c.input_tokens or 0 for c in calls),
        output_tokens=sum(c.output_tokens or 0 for c in calls),
        cost_usd=cost,
        duration_s=duration_s,
        cached=cached,
        ended_ns=time.time_ns(),
    )


@dataclass
class Run:
    """What one evaluation has spent so far, step by step."""

    judge: Judge
    options: ScoringOptions
    started: float = field(default_factory=time.perf_counter)
    steps: list[StepUsage] = field(default_factory=list)
    calls: list[LLMCall] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    truths: list[str] = field(default_factory=list)

    def record(self, step: StepName, calls: Sequence[LLMCall], t0: float, *, cached: bool = False) -> None:
        self.steps.append(step_usage(step, calls, time.perf_counter() - t0, cached=cached))
        self.calls.extend(calls)

    def result(self, outcome: Outcome, **fields: object) -> FaithfulnessResult:
        return FaithfulnessResult.model_validate(
            {
                "outcome": outcome,
                "threshold": self.options.threshold,
                "idk_policy": self.options.idk_policy,
                "truths": self.truths,
                "judge_model": self.judge.model_name,
                "steps": self.steps,
                "calls": self.calls,
                "duration_s": time.perf_counter() - self.started,
                **fields,
            }
        )

    def failed(self, step: StepName, exc: BaseException, t0: float) -> FaithfulnessResult:
        self.record(step, calls_of(exc), t0)
        logger.debug("faithtrace: %s step failed: %s", step, exc)
        error = error_info(step, exc)
        # A request the texts themselves broke is the input's fault, not the judge's.
        outcome = Outcome.INPUT_ERROR if error.type == inputs.INPUT_ERROR else Outcome.ERROR
        return self.result(outcome, error=error)


class StepFailed(Exception):
    """The steps' one failure type: the judge, the embedded judge or the detector could not do its step.
    ``run_pipeline`` turns it into an error result that keeps every call made so far. ``t0`` is when the
    step began, for recording its calls; None when they are recorded already."""

    def __init__(self, step: StepName, cause: BaseException, t0: float | None) -> None:
        super().__init__(f"{step}: {cause}")
        self.step = step
        self.cause = cause
        self.t0 = t0

    def result(self, run: Run) -> FaithfulnessResult:
        if self.t0 is None:
            return run.result(Outcome.ERROR, error=error_info(self.step, self.cause))
        return run.failed(self.step, self.cause, self.t0)


def calls_of(exc: BaseException) -> list[LLMCall]:
    return [c for c in getattr(exc, "calls", []) if isinstance(c, LLMCall)]


def error_info(step: StepName, exc: BaseException) -> ErrorInfo:
    if isinstance(exc, JudgeError):
        etype = exc.type
    else:
        etype = "detector_unavailable" if isinstance(exc, DetectorError) else "local_judge_unavailable"
    return ErrorInfo(type=etype, message=(str(exc) or etype)[:1000], step=step)
