"""One evaluation as the worker runs it: the judge warmed up once, the pipeline under a timeout, and every
failure turned into an ``outcome="error"`` result (never an exception).

The runtime owns one ``Scorer`` per configuration and knows nothing about scoring beyond ``score()``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import Final

from faithtrace._common import safety
from faithtrace._common.errors import DetectorError, FaithtraceError
from faithtrace._common.threads import in_daemon_thread
from faithtrace._config.judge_settings import JudgeSettings
from faithtrace._config.scoring_options import ScoringOptions
from faithtrace.judge import Judge, load_litellm
from faithtrace.scoring.detection import needs_judge
from faithtrace.scoring.models import ErrorInfo, FaithfulnessResult, Outcome
from faithtrace.scoring.pipeline import run_pipeline

# After the judge's endpoint failed to come up (e.g. the local judge could not start), evaluations fail fast
# with the same error for this long instead of each trying again.
_ENDPOINT_RETRY_S: Final = 60.0


async def _off_loop(func: Callable[[], object]) -> None:
    try:
        await in_daemon_thread(func, "faithtrace-warm-up")
    except RuntimeError:
        # At interpreter shutdown no new thread can be started; the flush at exit must still score what is
        # queued, so block this (faithtrace's own) loop instead.
        func()


class Scorer:
    """Scores answers with one judge and one set of scoring options. Used from one event loop at a time."""

    def __init__(self, judge: JudgeSettings, options: ScoringOptions, timeout_s: float) -> None:
        self.options = options
        self.timeout_s = timeout_s
        self._judge_settings = judge
        self._judge: Judge | None = None
        self._endpoint_lock: asyncio.Lock | None = None
        self._endpoint_failed: tuple[float, ErrorInfo] | None = None
        self._judge_ready = False

    @property
    def judge(self) -> Judge:
        if self._judge is None:
            self._judge = Judge(self._judge_settings)
        return self._judge

    def error_result(self, etype: str, message: str, started: float) -> FaithfulnessResult:
        return FaithfulnessResult(
            outcome=Outcome.ERROR,
            threshold=self.options.threshold,
            idk_policy=self.options.idk_policy,
            judge_model=self.judge.model_name,
            duration_s=time.monotonic() - started,
            error=ErrorInfo(type=etype, message=message[:1000]),
        )

    async def warm_up(self) -> ErrorInfo | None:
        """Resolve the judge endpoint once, outside the evaluation timeout (the local judge starts slowly)."""
        if self._judge_ready:
            return None
        if self._endpoint_lock is None:
            self._endpoint_lock = asyncio.Lock()
        async with self._endpoint_lock:
            if self._judge_ready:
                return None
            failed = self._endpoint_failed
            if failed is not None and time.monotonic() - failed[0] < _ENDPOINT_RETRY_S:
                return failed[1]
            try:
                if needs_judge(self.options):
                    await _off_loop(self.judge.endpoint)
                    # litellm takes seconds to import; done here, it does not freeze the loop (and with it
                    # the timeouts and cancellation of every evaluation in flight).
                    await _off_loop(load_litellm)
                if self.options.verdict_source == "detector":
                    await _off_loop(self._load_detector)
            except FaithtraceError as exc:
                etype = "detector_unavailable" if isinstance(exc, DetectorError) else "judge_unavailable"
                info = ErrorInfo(type=etype, message=f"{type(exc).__name__}: {exc}")
                self._endpoint_failed = (time.monotonic(), info)
                return info
            self._endpoint_failed = None
            self._judge_ready = True
            return None

    def _load_detector(self) -> None:
        from faithtrace.judge.detector import model

        assert self.options.detector_model is not None
        model.shared(self.options.detector_model, threads=self.options.detector_threads)

    async def score(self, query: str | None, contexts: Sequence[str], answer: str) -> FaithfulnessResult:
        """The result of one evaluation; judge failures, timeouts and faithtrace bugs become error results
        (the last also counted and, in strict mode, raised)."""
        started = time.monotonic()
        try:
            failed = await self.warm_up()
            if failed is not None:
                return self.error_result(failed.type, failed.message, started)
            return await asyncio.wait_for(
                run_pipeline(query, contexts, answer, judge=self.judge, options=self.options),
                timeout=self.timeout_s,
            )
        except TimeoutError:
            return self.error_result(
                "timeout", f"the evaluation took longer than {self.timeout_s:g} s", started
            )
        except FaithtraceError as exc:
            return self.error_result(getattr(exc, "type", type(exc).__name__), str(exc), started)
        except Exception as exc:
            safety.internal_error("scoring", exc)
            return self.error_result(type(exc).__name__, str(exc), started)

    def after_fork(self) -> None:
        self._endpoint_lock = None
