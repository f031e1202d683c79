"""The faithfulness pipeline (interface; implementation in progress)."""

from __future__ import annotations

from collections.abc import Sequence

from faithtrace.judge.client import Judge
from faithtrace.scoring.models import FaithfulnessResult
from faithtrace.scoring.options import ScoringOptions


async def run_pipeline(
    query: str | None,
    contexts: Sequence[str],
    answer: str,
    *,
    judge: Judge,
    options: ScoringOptions,
) -> FaithfulnessResult:
    """Score ``answer`` against ``contexts``. Never raises for judge failures: returns ``outcome=error``."""
    raise NotImplementedError
