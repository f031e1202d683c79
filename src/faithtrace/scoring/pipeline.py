"""The faithfulness pipeline: truths (optional) → claims → proof → verdicts → checks → score → reason.

By default the claims are the answer's sentences (split in code), the score is code, and the reason is a
template: one judge call per evaluation (per ``verdict_batch_size`` claims). Claims code can prove supported
are settled without the judge; the judge decides every other claim (``verdict_checks``).

``run_pipeline`` never raises for judge failures: it returns ``outcome=error`` with the step that failed and
every LLM call made up to that point, so a failed evaluation still reports what it cost.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from faithtrace._common.errors import DetectorError, JudgeError, LocalJudgeError
from faithtrace._config.judge_settings import JudgeSettings
from faithtrace._config.scoring_options import ScoringOptions
from faithtrace.judge import Judge
from faithtrace.scoring import (
    detection,
    grounding,
    inputs,
    judge_budget,
    proof,
    reasons,
    steps,
    verdict_checks,
)
from faithtrace.scoring import verdict_score as scoring
from faithtrace.scoring.cache import TruthCache, truth_cache
from faithtrace.scoring.models import (
    STATUS_TEXT,
    ClaimVerdict,
    DetectorReport,
    ErrorInfo,
    FaithfulnessResult,
    LLMCall,
    Outcome,
    StepUsage,
    VerdictCounts,
)

logger = logging.getLogger("faithtrace")

StepName = Literal["truths", "claims", "verdicts", "reason"]


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
    )


@dataclass
class _Run:
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
        self.record(step, _calls_of(exc), t0)
        logger.debug("faithtrace: %s step failed: %s", step, exc)
        error = _error_info(step, exc)
        # A request the texts themselves broke is the input's fault, not the judge's.
        outcome = Outcome.INPUT_ERROR if error.type == inputs.INPUT_ERROR else Outcome.ERROR
        return self.result(outcome, error=error)


async def _truths(run: _Run, documents: Sequence[str], cache: TruthCache) -> list[LLMCall]:
    """Facts per document, cached by document hash + judge model; returns the calls made (none if all cached).

    Raises JudgeError with ``calls`` set to every call made for this step.
    """
    model = run.judge.model_name
    truths: list[str] = []
    calls: list[LLMCall] = []
    for doc in documents:
        found = cache.get(model, doc)
        if found is None:
            try:
                out, got = await steps.extract_truths(run.judge, steps.TruthsInput(document=doc))
            except JudgeError as exc:
                exc.calls = [*calls, *exc.calls]
                raise
            calls.extend(got)
            found = out.truths
            cache.put(model, doc, found)
        truths.extend(found)
    run.truths = truths
    return calls


async def _reason(
    run: _Run, counts: VerdictCounts, value: float | None, verdicts: Sequence[ClaimVerdict], outcome: Outcome
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
            run.record("reason", _calls_of(exc), t0)
            text = reasons.scored_reason(counts, verdicts)
    if run.notes:
        text = text + " " + " ".join(run.notes)
    return text


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


_JUDGE_FAILURES = (JudgeError, LocalJudgeError)


class StepFailed(Exception):
    """The steps' one failure type: the judge, the embedded judge or the detector could not do its step.
    ``run_pipeline`` turns it into an error result that keeps every call made so far. ``t0`` is when the
    step began, for recording its calls; None when they are recorded already."""

    def __init__(self, step: StepName, cause: BaseException, t0: float | None) -> None:
        super().__init__(f"{step}: {cause}")
        self.step = step
        self.cause = cause
        self.t0 = t0

    def result(self, run: _Run) -> FaithfulnessResult:
        if self.t0 is None:
            return run.result(Outcome.ERROR, error=_error_info(self.step, self.cause))
        return run.failed(self.step, self.cause, self.t0)


async def _truths_and_claims(
    run: _Run, documents: list[str], claims_in: steps.ClaimsInput, cache: TruthCache
) -> list[str]:
    """Steps 1 and 2: the claims. Raises ``StepFailed``.

    Sequential on the local judge (llama.cpp serves one request at a time, so concurrency would only add
    contention); concurrent on hosted judges, where latency dominates.
    """
    use_truths = run.options.use_truths and bool(documents)
    t0 = time.perf_counter()
    if use_truths and not run.judge.settings.is_local and run.options.claim_source == "judge":
        truths_res, claims_res = await asyncio.gather(
            _truths(run, documents, cache), steps.extract_claims(run.judge, claims_in), return_exceptions=True
        )
        failure: tuple[StepName, BaseException] | None = None
        if isinstance(truths_res, BaseException):
            failure = ("truths", truths_res)
            run.record("truths", _calls_of(truths_res), t0)
        else:
            run.record("truths", truths_res, t0, cached=not truths_res)
        if isinstance(claims_res, BaseException):
            failure = failure or ("claims", claims_res)
            run.record("claims", _calls_of(claims_res), t0)
        else:
            run.record("claims", claims_res[1], t0)
        if failure is not None:
            if not isinstance(failure[1], _JUDGE_FAILURES):
                raise failure[1]
            raise StepFailed(failure[0], failure[1], None)
        assert not isinstance(claims_res, BaseException)
        return claims_res[0].claims
    if use_truths:
        try:
            calls = await _truths(run, documents, cache)
        except _JUDGE_FAILURES as exc:
            raise StepFailed("truths", exc, t0) from exc
        run.record("truths", calls, t0, cached=not calls)
    t1 = time.perf_counter()
    if run.options.claim_source == "sentences":
        claims = grounding.split_statements(claims_in.answer)
        run.record("claims", [], t1)
        return claims
    try:
        out, calls = await steps.extract_claims(run.judge, claims_in)
    except _JUDGE_FAILURES as exc:
        raise StepFailed("claims", exc, t1) from exc
    run.record("claims", calls, t1)
    return out.claims


async def _judge(
    run: _Run, documents: list[str], claims: list[str], found: Sequence[grounding.Grounding]
) -> tuple[dict[int, ClaimVerdict], list[LLMCall]]:
    """Verdicts by index into ``claims``: every claim, or those that fit the judge token budget."""
    logprobs = run.options.verdict_logprobs == "on"
    evidence = grounding.evidence(claims, documents) if run.options.verdict_context == "evidence" else None
    asked = steps.VerdictsInput(
        documents=documents,
        claims=claims,
        truths=run.truths,
        # Not the question: shown it, the small local judge marked true claims that do not answer it as
        # contradicted (a faithful answer to the demo's range question scored 0.5 for "A full charge
        # takes about 4 hours."). Relevance is not faithfulness.
        question=None,
        evidence=evidence,
        focus=None if evidence is None else [g.unmatched for g in found],
        logprobs=logprobs,
        min_p_supported=run.options.min_p_supported if logprobs else 0.0,
    )
    budget = run.options.judge_token_budget or 0  # resolved by for_judge: 0 is no limit
    keep = judge_budget.select(asked, found, budget, run.options.verdict_batch_size)
    left = [i for i in range(len(claims)) if i not in keep]
    if left:
        clean = sum(1 for i in left if judge_budget.doubt(claims[i], found[i]) == 2)
        run.notes.append(judge_budget.note(len(left), clean, budget))
    judged, calls = await steps.judge_claims(
        run.judge, judge_budget.subset(asked, keep), run.options.verdict_batch_size
    )
    return dict(zip(keep, judged.verdicts, strict=True)), calls


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
    run = _Run(judge=judge, options=options)
    try:
        return await _steps(run, query, contexts, answer, truth_cache if cache is None else cache)
    except StepFailed as failed:
        return failed.result(run)


async def _steps(
    run: _Run, query: str | None, contexts: Sequence[str], answer: str, cache: TruthCache
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
    claims = await _truths_and_claims(run, documents, claims_in, cache)
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
    verdicts, outcome, detector, left = await _verdicts(run, documents, question, text, claims)
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


async def _verdicts(
    run: _Run, documents: list[str], question: str | None, text: str, claims: list[str]
) -> tuple[list[ClaimVerdict], Outcome, DetectorReport | None, list[str]]:
    """Step 3: each claim's verdict, the outcome, the detector's report and the claims left unjudged (by the
    judge token budget). With nothing retrieved there is nothing to ask: every claim is unsupported.
    Raises ``StepFailed``."""
    options = run.options
    unjudged: list[str] = []
    t0 = time.perf_counter()
    detector: DetectorReport | None = None
    if not documents:
        verdicts = [ClaimVerdict(text=c, verdict="idk", reason="No context was retrieved.") for c in claims]
        outcome = Outcome.NO_CONTEXT
    elif options.verdict_source == "detector":
        try:
            detector, verdicts = await detection.decide(options, question, documents, text, claims)
        except DetectorError as exc:
            raise StepFailed("verdicts", exc, t0) from exc
        run.record("verdicts", [], t0)
        outcome = Outcome.SCORED
    else:
        # Proven claims are settled in code; every other claim goes to the judge (verdict_checks).
        proofs = (
            proof.proven(claims, grounding.document_sentences(documents))
            if options.prove_support
            else [None] * len(claims)
        )
        settled = [
            None
            if i is None
            else ClaimVerdict(text=c, verdict="yes", reason=proof.PROVEN_NOTE, decided_by="proof")
            for c, i in zip(claims, proofs, strict=True)
        ]
        found = grounding.check_claims(claims, documents, question)
        asked = [i for i, done in enumerate(settled) if done is None]
        judged: dict[int, ClaimVerdict] = {}
        calls: list[LLMCall] = []
        if asked:
            try:
                answers, calls = await _judge(
                    run, documents, [claims[i] for i in asked], [found[i] for i in asked]
                )
            except _JUDGE_FAILURES as exc:
                raise StepFailed("verdicts", exc, t0) from exc
            judged = {asked[k]: v for k, v in answers.items()}
        run.record("verdicts", calls, t0)
        kept = [i for i, done in enumerate(settled) if done is not None or i in judged]
        unjudged = [claims[i] for i in range(len(claims)) if i not in kept]
        merged = [judged[i] if (done := settled[i]) is None else done for i in kept]
        verdicts = verdict_checks.apply(merged, [found[i] for i in kept], options.verdict_policy)
        outcome = Outcome.SCORED
        if options.detector_model:
            detector, verdicts = await detection.beside_judge(options, question, documents, text, verdicts)
    return verdicts, outcome, detector, unjudged


def _score(
    options: ScoringOptions, counts: VerdictCounts, outcome: Outcome
) -> tuple[float | None, float | None]:
    """Step 4: the score and the faithfulness ratio, in code."""
    if outcome is Outcome.NO_CONTEXT:
        return 0.0, 0.0  # nothing to be faithful to: never a perfect score, whatever the policy
    return scoring.score(counts, options.idk_policy), scoring.faithfulness(counts)


async def _label_and_reason(
    run: _Run, counts: VerdictCounts, value: float | None, verdicts: list[ClaimVerdict], outcome: Outcome
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


def _maybe(options: ScoringOptions, text: str) -> str | None:
    return text if options.include_reason else None


def _calls_of(exc: BaseException) -> list[LLMCall]:
    return [c for c in getattr(exc, "calls", []) if isinstance(c, LLMCall)]


def _error_info(step: StepName, exc: BaseException) -> ErrorInfo:
    if isinstance(exc, JudgeError):
        etype = exc.type
    else:
        etype = "detector_unavailable" if isinstance(exc, DetectorError) else "local_judge_unavailable"
    return ErrorInfo(type=etype, message=(str(exc) or etype)[:1000], step=step)
