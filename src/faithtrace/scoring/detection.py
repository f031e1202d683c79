"""The trained detector as a pipeline step: flagged spans of the answer → each claim's verdict.

A claim holding a flagged span is not supported: its verdict is ``idk`` (the detector says "not supported by
the context"; it cannot tell a contradiction from an addition, so it never reports ``no``), and its reason
quotes the span and its probability. Every other claim the detector read is supported (``yes``). The score
is then counted in code from these verdicts, as with any judge.

With ``verdict_source="detector"`` these are the verdicts. Next to an LLM judge they are recorded on each
claim (``detector_verdict``, ``detector_spans``) and never change the judge's verdict.

The model is loaded once per process and run on a worker thread: onnxruntime releases the GIL while it
computes, so neither the host's threads nor faithtrace's event loop wait for it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

from faithtrace._common.errors import DetectorError
from faithtrace._config.scoring_options import ScoringOptions
from faithtrace.scoring.models import ClaimVerdict, DetectorReport, DetectorSpan, Verdict

__all__ = ["DetectorRun", "beside_judge", "decide", "needs_judge", "run_detector"]

logger = logging.getLogger("faithtrace")

_QUOTED_SPANS = 3


@dataclass(frozen=True)
class DetectorRun:
    """One evaluation's detection: the report for the result, and per claim its spans and highest P."""

    report: DetectorReport
    claim_spans: list[list[DetectorSpan]]
    claim_p: list[float | None]


def needs_judge(options: ScoringOptions) -> bool:
    """Whether any step asks the LLM judge: never with the detector deciding on sentence claims, so that the
    embedded judge is not started (or built, or downloaded) for nothing."""
    o = options
    return o.verdict_source == "judge" or o.claim_source == "judge" or o.use_truths or o.judge_reason


def _detect_sync(
    options: ScoringOptions, question: str, documents: Sequence[str], answer: str, claims: Sequence[str]
) -> DetectorRun:
    from faithtrace.judge.detector import model, spans, windows

    if not options.detector_model:
        raise DetectorError("no detector model is configured (FAITHTRACE_DETECTOR_MODEL)")
    started = time.perf_counter()
    loaded = model.shared(options.detector_model, threads=options.detector_threads)
    detection = windows.detect(loaded, question, documents, answer, options.detector_windows)
    flagged = spans.flag_spans(
        answer,
        detection.tokens,
        threshold=options.detector_threshold,
        min_confidence=options.detector_min_confidence,
        min_tokens=options.detector_min_tokens,
    )
    as_model = {s: DetectorSpan(start=s.start, end=s.end, text=s.text, p=s.p) for s in flagged}
    ranges = spans.claim_ranges(answer, claims)
    report = DetectorReport(
        model=loaded.name,
        spans=list(as_model.values()),
        windows=detection.windows,
        parts=detection.parts,
        combine=detection.combine,
        duration_s=time.perf_counter() - started,
    )
    return DetectorRun(
        report=report,
        claim_spans=[
            [as_model[s] for s in spans.spans_in(flagged, where, claim)]
            for claim, where in zip(claims, ranges, strict=True)
        ],
        claim_p=[spans.strongest(detection.tokens, where) for where in ranges],
    )


async def run_detector(
    options: ScoringOptions,
    question: str | None,
    documents: Sequence[str],
    answer: str,
    claims: Sequence[str],
) -> DetectorRun:
    """Score the answer's tokens off the event loop; raises ``DetectorError`` when the model cannot load."""
    args = (options, question or "", list(documents), answer, list(claims))
    return await asyncio.to_thread(_detect_sync, *args)


def _reason(found: Sequence[DetectorSpan]) -> str:
    quoted = ", ".join(f"'{s.text}' (p = {s.p:.2f})" for s in found[:_QUOTED_SPANS])
    more = f" and {len(found) - _QUOTED_SPANS} more" if len(found) > _QUOTED_SPANS else ""
    return f"The detector found no support in the context for {quoted}{more}."


async def decide(
    options: ScoringOptions, question: str | None, documents: Sequence[str], answer: str, claims: list[str]
) -> tuple[DetectorReport, list[ClaimVerdict]]:
    """The detector's verdicts, as the verdicts that count; raises ``DetectorError`` when it cannot run."""
    run = await run_detector(options, question, documents, answer, claims)
    out = []
    for claim, found, p in zip(claims, run.claim_spans, run.claim_p, strict=True):
        verdict = _verdict(found)
        out.append(
            ClaimVerdict(
                text=claim,
                verdict=verdict,
                reason=_reason(found) if found else None,
                decided_by="detector",
                p_supported=None if p is None else round(1.0 - p, 4),
                detector_verdict=verdict,
                detector_spans=list(found),
            )
        )
    return run.report, out


def _verdict(found: Sequence[DetectorSpan]) -> Verdict:
    return "idk" if found else "yes"


async def beside_judge(
    options: ScoringOptions,
    question: str | None,
    documents: Sequence[str],
    answer: str,
    verdicts: list[ClaimVerdict],
) -> tuple[DetectorReport, list[ClaimVerdict]]:
    """The judge's verdicts with the detector's recorded next to each, never applied. A detector that cannot
    run leaves the judge's verdicts as they are, and the report says why."""
    t0 = time.perf_counter()
    claims = [v.text for v in verdicts]
    try:
        run = await run_detector(options, question, documents, answer, claims)
    except DetectorError as exc:
        logger.debug("faithtrace: the detector could not run: %s", exc)
        failed = DetectorReport(
            model=options.detector_model or "", error=str(exc)[:1000], duration_s=time.perf_counter() - t0
        )
        return failed, verdicts
    out = [
        v.model_copy(update={"detector_verdict": _verdict(found), "detector_spans": list(found)})
        for v, found in zip(verdicts, run.claim_spans, strict=True)
    ]
    return run.report, out
