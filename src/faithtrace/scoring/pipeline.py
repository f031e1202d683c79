"""The faithfulness pipeline: truths (optional) → claims → proof → verdicts → checks → score → reason.

By default the claims are the answer's sentences (split in code), the score is code, and the reason is a
template: one judge call per evaluation (per ``verdict_batch_size`` claims). Claims code can prove supported
are settled without the judge; the judge decides every other claim (``verdict_checks``).

This module runs the steps in order and does the small ones itself (the inputs, the score, the label, the
reason); the claims are made in ``claims``, the verdicts in ``verdicts``, and ``run`` keeps what each step
spent.

``run_pipeline`` never raises for judge failures: it returns ``outcome=error`` with the step that failed and
every LLM call made up to that point, so a failed evaluation still reports what it cost.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from faithtrace._common.errors import JudgeError
from faithtrace._config.judge_settings import JudgeSettings
from faithtrace._config.scoring_options import ScoringOptions
from faithtrace.judge import Judge
from faithtrace.scoring import inputs, judge_budget, reasons, steps
from faithtrace.scoring import verdict_score as scoring
from faithtrace.scoring.cache import TruthCache, truth_cache
from faithtrace.scoring.claims import truths_and_claims
from faithtrace.scoring.models import (
    STATUS_TEXT,
    ClaimVerdict,
    ErrorInfo,
    FaithfulnessResult,
    Outcome,
    VerdictCounts,
)
from faithtrace.scoring.run import Run, StepFailed, calls_of
from faithtrace.scoring.verdicts import decide_verdicts

logger = logging.getLogger("faithtrace")


def local_mode(value: str, settings: JudgeSettings, local: str, hosted: str) -> str:
    """An ``auto`` option resolved: one behaviour for the embedded local judge, another for real models."""
    if value == "auto":
        return local if settings.is_local else hosted
    return value


def for_judge(options: ScoringOptions, settings: JudgeSettings) -> ScoringOptions:
    """``options`` with every ``auto`` choice made for this judge (the embedded one or a hosted model), once
    per evaluation: the steps read plain values."""
    return options.model_copy(
        update={
            "verdict_context": local_mode(options.verdict_context, settings, "evidence", "documents"),
            "verdict_logprobs": local_mode(options.verdict_logprobs, settings, "on", "off"),
            "verdict_policy": local_mode(options.verdict_policy, settings, "checks", "judge"),
            "judge_token_budget": judge_budget.resolve(options.judge_token_budget, settings),
        }
    )


async def run_pipeline(
    query: str | None,
    contexts: Sequence[str],
    answer: str,
    *,
    judge: Judge,
    options: ScoringOptions,
    cache: TruthCache | None = None,
) -> FaithfulnessResult:
    """Score ``answer`` against ``contexts``. Never raises for judge failures: returns ``outcome=error``."""
    options = for_judge(options, judge.settings)
    run = Run(judge=judge, options=options)
    try:
        return await _steps(run, query, contexts, answer, truth_cache if cache is None else cache)
    except StepFailed as failed:
        return failed.result(run)


async def _steps(
    run: Run, query: str | None, contexts: Sequence[str], answer: str, cache: TruthCache
) -> FaithfulnessResult:
    """The steps in order: inputs, truths and claims, verdicts, score and label, reason."""
    options = run.options
    try:
        query, contexts, answer, replaced = inputs.checked(query, contexts, answer)
    except inputs.BadInput as exc:
        return run.result(Outcome.INPUT_ERROR, error=ErrorInfo(type=inputs.INPUT_ERROR, message=str(exc)))
    if replaced:
        run.notes.append(inputs.replaced_note(replaced))
    documents, cut = inputs.prepare_contexts(contexts, options.max_context_chars)
    if cut:
        run.notes.append(f"(The retrieved context was cut to {options.max_context_chars} characters.)")
    text = answer.strip()
    if len(text) > options.max_answer_chars:
        text = text[: options.max_answer_chars]
        run.notes.append(f"(The answer was cut to {options.max_answer_chars} characters.)")
    question = query.strip() if query and query.strip() else None
    no_claims = _maybe(options, reasons.outcome_reason(VerdictCounts(), Outcome.NO_CLAIMS))
    if not text:
        return run.result(Outcome.NO_CLAIMS, reason=no_claims)

    claims_in = steps.ClaimsInput(question=question, answer=text)
    claims = await truths_and_claims(run, documents, claims_in, cache)
    if not claims:
        return run.result(Outcome.NO_CLAIMS, reason=no_claims)
    unjudged: list[str] = []
    if len(claims) > options.max_claims:
        run.notes.append(
            f"(Only the first {options.max_claims} of {len(claims)} claims were judged: max_claims.)"
        )
        unjudged = claims[options.max_claims :]
        claims = claims[: options.max_claims]

    # 3. verdicts. With nothing retrieved there is nothing to ask: every claim is unsupported.
    verdicts, outcome, detector, left = await decide_verdicts(run, documents, question, text, claims)
    unjudged += left

    # 4 and 5: the score, in code; the label; the reason.
    counts = scoring.count(verdicts)
    value, faithful = _score(options, counts, outcome)
    passed, reason = await _label_and_reason(run, counts, value, verdicts, outcome)
    return run.result(
        outcome,
        score=value,
        faithfulness=faithful,
        passed=passed,
        counts=counts,
        claims=verdicts,
        unjudged=unjudged,
        reason=reason,
        detector=detector,
        # The verdicts' author: with the detector deciding, the judge is at most asked for claims or truths.
        **({"judge_model": detector.model} if detector and options.verdict_source == "detector" else {}),
    )


def _score(
    options: ScoringOptions, counts: VerdictCounts, outcome: Outcome
) -> tuple[float | None, float | None]:
    """Step 4: the score and the faithfulness ratio, in code."""
    if outcome is Outcome.NO_CONTEXT:
        return 0.0, 0.0  # nothing to be faithful to: never a perfect score, whatever the policy
    return scoring.score(counts, options.idk_policy), scoring.faithfulness(counts)


async def _label_and_reason(
    run: Run, counts: VerdictCounts, value: float | None, verdicts: list[ClaimVerdict], outcome: Outcome
) -> tuple[bool | None, str | None]:
    """Step 5: the label (the score against the threshold, and no contradicted claim with
    ``fail_on_contradiction``) and the reason."""
    options = run.options
    passed = scoring.passed(value, options.threshold)
    failing = reasons.contradiction_failure(verdicts) if options.fail_on_contradiction else None
    reason = await _reason(run, counts, value, verdicts, outcome)
    if passed and failing is not None:
        # The ratio alone would pass it: say first what fails it.
        passed = False
        reason = None if reason is None else f"{failing} {reason}"
    return passed, reason


async def _reason(
    run: Run, counts: VerdictCounts, value: float | None, verdicts: Sequence[ClaimVerdict], outcome: Outcome
) -> str | None:
    if not run.options.include_reason:
        return None
    t0 = time.perf_counter()
    unsupported = [v for v in verdicts if v.verdict != "yes"]
    if outcome is not Outcome.SCORED or not unsupported:
        run.record("reason", [], t0)
        text = reasons.outcome_reason(counts, outcome)
    elif not run.options.judge_reason:
        run.record("reason", [], t0)
        text = reasons.scored_reason(counts, verdicts)
    else:
        score_text = f"{value:.2f} ({reasons.summary(verdicts).rstrip('.')})"
        findings = [(v.text, STATUS_TEXT[v.status], v.reason) for v in unsupported]
        try:
            out, calls = await steps.write_reason(
                run.judge, steps.ReasonInput(score_text=score_text, findings=findings)
            )
            run.record("reason", calls, t0)
            text = out.reason
        except JudgeError as exc:
            # The score stands on its own; losing it because the explanation failed would be worse.
            logger.warning("faithtrace: the judge could not write a reason (%s); using a summary", exc)
            run.record("reason", calls_of(exc), t0)
            text = reasons.scored_reason(counts, verdicts)
    if run.notes:
        text = text + " " + " ".join(run.notes)
    return text


def _maybe(options: ScoringOptions, text: str) -> str | None:
    return text if options.include_reason else None
