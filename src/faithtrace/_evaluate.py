"""``evaluate()`` / ``aevaluate()`` (interface; implementation in progress)."""

from __future__ import annotations

from collections.abc import Sequence

from faithtrace.judge.settings import JudgeSettings
from faithtrace.scoring.models import FaithfulnessResult
from faithtrace.scoring.options import ScoringOptions


async def aevaluate(
    query: str | None,
    contexts: str | Sequence[str],
    answer: str,
    *,
    judge: str | JudgeSettings | None = None,
    options: ScoringOptions | None = None,
) -> FaithfulnessResult:
    raise NotImplementedError


def evaluate(
    query: str | None,
    contexts: str | Sequence[str],
    answer: str,
    *,
    judge: str | JudgeSettings | None = None,
    options: ScoringOptions | None = None,
) -> FaithfulnessResult:
    raise NotImplementedError
