"""Step 3: each claim's verdict. Claims code can prove supported are settled without the judge; the judge
decides every other claim, within the judge token budget, and its verdicts are checked (``verdict_checks``);
or the detector decides them all (``verdict_source="detector"``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from faithtrace._common.errors import DetectorError
from faithtrace.scoring import detection, grounding, judge_budget, proof, steps, verdict_checks
from faithtrace.scoring.models import ClaimVerdict, DetectorReport, LLMCall, Outcome
from faithtrace.scoring.run import JUDGE_FAILURES, Run, StepFailed


async def decide_verdicts(
    run: Run, documents: list[str], question: str | None, text: str, claims: list[str]
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
            except JUDGE_FAILURES as exc:
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


async def _judge(
    run: Run, documents: list[str], claims: list[str], found: Sequence[grounding.Grounding]
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
