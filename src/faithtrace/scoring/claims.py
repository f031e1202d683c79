"""Steps 1 and 2: the claims to judge, and (with ``use_truths``) the facts each document states.

The claims are the answer's sentences, split in code, unless ``claim_source="judge"`` asks the judge for
them. The truths are cached per document and judge model: the same documents come back request after
request.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

from faithtrace._common.errors import JudgeError
from faithtrace.scoring import grounding, steps
from faithtrace.scoring.cache import TruthCache
from faithtrace.scoring.models import LLMCall
from faithtrace.scoring.run import JUDGE_FAILURES, Run, StepFailed, StepName, calls_of


async def _truths(run: Run, documents: Sequence[str], cache: TruthCache) -> list[LLMCall]:
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


async def truths_and_claims(
    run: Run, documents: list[str], claims_in: steps.ClaimsInput, cache: TruthCache
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
            run.record("truths", calls_of(truths_res), t0)
        else:
            run.record("truths", truths_res, t0, cached=not truths_res)
        if isinstance(claims_res, BaseException):
            failure = failure or ("claims", claims_res)
            run.record("claims", calls_of(claims_res), t0)
        else:
            run.record("claims", claims_res[1], t0)
        if failure is not None:
            if not isinstance(failure[1], JUDGE_FAILURES):
                raise failure[1]
            raise StepFailed(failure[0], failure[1], None)
        assert not isinstance(claims_res, BaseException)
        return claims_res[0].claims
    if use_truths:
        try:
            calls = await _truths(run, documents, cache)
        except JUDGE_FAILURES as exc:
            raise StepFailed("truths", exc, t0) from exc
        run.record("truths", calls, t0, cached=not calls)
    t1 = time.perf_counter()
    if run.options.claim_source == "sentences":
        claims = grounding.split_statements(claims_in.answer)
        run.record("claims", [], t1)
        return claims
    try:
        out, calls = await steps.extract_claims(run.judge, claims_in)
    except JUDGE_FAILURES as exc:
        raise StepFailed("claims", exc, t1) from exc
    run.record("claims", calls, t1)
    return out.claims
