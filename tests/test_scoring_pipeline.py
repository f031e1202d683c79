# ruff: noqa: F811  (fixtures are imported into this module by name)
"""The pipeline's edge cases, through the public API, litellm and a scripted judge on loopback."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

import faithtrace
from _scoring_fixtures import (
    FakeJudge,
    fake_judge,  # noqa: F401  (fixture, imported by name: see conftest)
    verdicts_json,
)
from faithtrace import IdkPolicy, Outcome, ScoringOptions

DOC = "The Eiffel Tower is in Paris. It was completed in 1889 and is 330 metres tall."
CLAIMS = ["The Eiffel Tower is in Paris.", "The Eiffel Tower was completed in 1925."]


def claims_json(*claims: str) -> str:
    return json.dumps({"claims": list(claims)})


def user_prompt(request: dict[str, Any]) -> str:
    return next(m["content"] for m in request["messages"] if m["role"] == "user")


async def score(fake: FakeJudge, contexts: Any = DOC, answer: str = "answer text", **options: Any) -> Any:
    # These tests exercise every judge step: claims and reason from the judge, no lexical check. The default
    # pipeline (claims split in code, lexical check, template reason) is in test_scoring_grounding.py.
    options.setdefault("claim_source", "judge")
    options.setdefault("judge_reason", True)
    options.setdefault("prove_support", False)
    settings = fake.settings(**options.pop("judge", {}))
    return await faithtrace.aevaluate(
        "Where is the Eiffel Tower?", contexts, answer, judge=settings, options=ScoringOptions(**options)
    )


async def test_supported_and_contradicted_claims_are_scored_in_code(fake_judge: FakeJudge) -> None:
    fake_judge.on("claims", claims_json(*CLAIMS))
    fake_judge.on("verdicts", verdicts_json("yes", "no"))
    fake_judge.on("reason", json.dumps({"reason": "The completion year is wrong."}))

    result = await score(fake_judge)

    assert result.outcome is Outcome.SCORED
    assert result.score == 0.5
    assert result.faithfulness == 0.5
    assert result.passed is False
    assert (result.counts.yes, result.counts.no, result.counts.idk) == (1, 1, 0)
    assert [(c.text, c.verdict, c.reason) for c in result.claims] == [
        (CLAIMS[0], "yes", "reason 1"),
        (CLAIMS[1], "no", "reason 2"),
    ]
    assert result.reason == "The completion year is wrong."
    assert result.error is None
    assert result.judge_model == "openai/fake-judge"


@pytest.mark.parametrize(
    ("policy", "expected_score"), [(IdkPolicy.PENALIZE, 0.5), (IdkPolicy.DEEPEVAL, 0.75)]
)
async def test_idk_policy(fake_judge: FakeJudge, policy: IdkPolicy, expected_score: float) -> None:
    fake_judge.on("claims", claims_json("a is 1.", "b is 2.", "c is 3.", "d is 4."))
    fake_judge.on("verdicts", verdicts_json("yes", "idk", "no", "yes"))
    fake_judge.on("reason", json.dumps({"reason": "Some claims are unsupported."}))

    result = await score(fake_judge, idk_policy=policy)

    assert result.score == expected_score
    assert result.faithfulness == 0.75  # one contradiction in four, whatever the policy
    assert result.idk_policy is policy


async def test_no_claims_has_no_score_and_makes_no_verdict_call(fake_judge: FakeJudge) -> None:
    fake_judge.on("claims", claims_json())

    result = await score(fake_judge, answer="Hello! Happy to help.")

    assert result.outcome is Outcome.NO_CLAIMS
    assert result.score is None
    assert result.faithfulness is None
    assert result.passed is None
    assert fake_judge.requests_for("verdicts") == []
    assert result.reason is not None
    assert "no checkable" in result.reason


@pytest.mark.parametrize("contexts", ["", [""], ["  ", "\n\t"], []])
async def test_empty_context_makes_every_claim_idk_without_asking(
    fake_judge: FakeJudge, contexts: Any
) -> None:
    fake_judge.on("claims", claims_json(*CLAIMS))

    result = await score(fake_judge, contexts=contexts, idk_policy=IdkPolicy.DEEPEVAL)

    assert result.outcome is Outcome.NO_CONTEXT
    assert result.score == 0.0  # even under DeepEval's policy: no context is never a perfect score
    assert result.passed is False
    assert [c.verdict for c in result.claims] == ["idk", "idk"]
    assert result.counts.idk == 2
    assert fake_judge.requests_for("verdicts") == []
    assert fake_judge.requests_for("reason") == []


async def test_verdict_count_mismatch_is_retried_then_an_error(fake_judge: FakeJudge) -> None:
    fake_judge.on("claims", claims_json(*CLAIMS))
    fake_judge.on("verdicts", verdicts_json("yes"))  # one verdict for two claims, every time

    result = await score(fake_judge, judge={"max_repairs": 1})

    assert result.outcome is Outcome.ERROR
    assert result.error is not None
    assert (result.error.type, result.error.step) == ("verdict_count_mismatch", "verdicts")
    assert result.score is None
    assert result.claims == []
    assert len(fake_judge.requests_for("verdicts")) == 2
    retry = fake_judge.requests_for("verdicts")[1]["messages"]
    assert "expected exactly 2 verdicts" in retry[-1]["content"]
    verdict_step = next(s for s in result.steps if s.step == "verdicts")
    assert verdict_step.llm_calls == 2
    assert result.llm_calls == 3  # the claims call plus both verdict attempts are still reported


async def test_verdict_count_mismatch_recovers_on_retry(fake_judge: FakeJudge) -> None:
    fake_judge.on("claims", claims_json(*CLAIMS))
    fake_judge.on("verdicts", verdicts_json("yes", "yes", "no"), verdicts_json("yes", "yes"))

    result = await score(fake_judge)

    assert result.outcome is Outcome.SCORED
    assert result.score == 1.0


async def test_verdicts_are_aligned_by_claim_number(fake_judge: FakeJudge) -> None:
    fake_judge.on("claims", claims_json(*CLAIMS))
    reply = {"verdicts": [{"verdict": "no", "claim": 2, "reason": "1889"}, {"verdict": "yes", "claim": 1}]}
    fake_judge.on("verdicts", json.dumps(reply))
    fake_judge.on("reason", json.dumps({"reason": "r"}))

    result = await score(fake_judge)

    assert [(c.text, c.verdict) for c in result.claims] == [(CLAIMS[0], "yes"), (CLAIMS[1], "no")]


async def test_duplicate_claim_numbers_are_rejected(fake_judge: FakeJudge) -> None:
    fake_judge.on("claims", claims_json(*CLAIMS))
    bad = {"verdicts": [{"verdict": "yes", "claim": 1}, {"verdict": "yes", "claim": 1}]}
    fake_judge.on("verdicts", json.dumps(bad))

    result = await score(fake_judge, judge={"max_repairs": 0})

    assert result.error is not None
    assert result.error.type == "verdict_misaligned"


async def test_invalid_json_is_repaired_without_another_call(fake_judge: FakeJudge) -> None:
    fake_judge.on("claims", '```json\n{"claims": ["The Eiffel Tower is in Paris.",],}\n```')
    fake_judge.on("verdicts", '{"verdicts": [{"verdict": "YES", "claim": 1, "reason": "stated"}')  # unclosed

    result = await score(fake_judge)

    assert result.outcome is Outcome.SCORED
    assert result.score == 1.0
    assert result.llm_calls == 2


async def test_truncated_reply_is_asked_again(fake_judge: FakeJudge) -> None:
    fake_judge.on(
        "claims",
        {"content": '{"claims": ["The Eiffel Tower is in Par', "finish_reason": "length"},
        claims_json(CLAIMS[0]),
    )
    fake_judge.on("verdicts", verdicts_json("yes"))

    result = await score(fake_judge)

    # The cut-off reply was not used as if it were complete: it was sent back with a note and asked again.
    assert result.outcome is Outcome.SCORED
    assert [c.text for c in result.claims] == [CLAIMS[0]]
    second = fake_judge.requests_for("claims")[1]["messages"]
    assert "cut off" in second[-1]["content"]
    assert result.calls[0].finish_reason == "length"


async def test_garbage_gives_an_error_never_a_made_up_verdict(fake_judge: FakeJudge) -> None:
    fake_judge.on("claims", claims_json(*CLAIMS))
    fake_judge.on("verdicts", "I think these claims look fine to me!")

    result = await score(fake_judge, judge={"max_repairs": 1})

    assert result.outcome is Outcome.ERROR
    assert result.error is not None
    assert (result.error.type, result.error.step) == ("judge_output_invalid", "verdicts")
    assert result.score is None
    assert result.passed is None
    assert result.claims == []


@pytest.mark.parametrize(("status", "error_type"), [(429, "rate_limited"), (503, "judge_unavailable")])
async def test_rate_limits_and_server_errors_are_retried(
    fake_judge: FakeJudge, status: int, error_type: str
) -> None:
    fake_judge.on("claims", {"status": status, "content": "slow down"}, claims_json(CLAIMS[0]))
    fake_judge.on("verdicts", verdicts_json("yes"))

    result = await score(fake_judge, judge={"max_retries": 1})

    assert result.outcome is Outcome.SCORED
    claims_calls = [c for c in result.calls if c.step == "claims"]
    assert [c.attempt for c in claims_calls] == [1, 2]
    assert claims_calls[0].error_type == error_type
    assert claims_calls[1].error_type is None


async def test_persistent_rate_limit_is_an_error_result(fake_judge: FakeJudge) -> None:
    fake_judge.on("claims", {"status": 429, "content": "quota"})

    result = await score(fake_judge, judge={"max_retries": 0})

    assert result.error is not None
    assert (result.error.type, result.error.step) == ("rate_limited", "claims")
    assert result.llm_calls == 1


async def test_timeout_is_an_error_result(fake_judge: FakeJudge) -> None:
    fake_judge.on("claims", {"delay_s": 3.0, "content": claims_json(CLAIMS[0])})

    result = await score(fake_judge, judge={"timeout_s": 0.5, "max_retries": 0})

    assert result.outcome is Outcome.ERROR
    assert result.error is not None
    assert (result.error.type, result.error.step) == ("timeout", "claims")


async def test_all_supported_reason_is_a_template(fake_judge: FakeJudge) -> None:
    fake_judge.on("claims", claims_json(*CLAIMS))
    fake_judge.on("verdicts", verdicts_json("yes", "yes"))

    result = await score(fake_judge)

    assert result.reason == "All 2 claims in the answer are supported by the retrieved context."
    assert fake_judge.requests_for("reason") == []
    reason_step = next(s for s in result.steps if s.step == "reason")
    assert reason_step.llm_calls == 0
    assert reason_step.model is None


async def test_reason_call_is_given_the_unsupported_claims(fake_judge: FakeJudge) -> None:
    fake_judge.on("claims", claims_json(*CLAIMS))
    fake_judge.on("verdicts", verdicts_json("yes", "no"))
    fake_judge.on("reason", json.dumps({"reason": "The answer gets the year wrong."}))

    await score(fake_judge)

    (request,) = fake_judge.requests_for("reason")
    prompt = user_prompt(request)
    assert CLAIMS[1] in prompt
    assert "contradicted" in prompt
    assert "reason 2" in prompt
    assert CLAIMS[0] not in prompt


async def test_reason_failure_keeps_the_score(fake_judge: FakeJudge) -> None:
    fake_judge.on("claims", claims_json(*CLAIMS))
    fake_judge.on("verdicts", verdicts_json("yes", "no"))
    fake_judge.on("reason", "not json at all")

    result = await score(fake_judge, judge={"max_repairs": 0})

    assert result.outcome is Outcome.SCORED
    assert result.score == 0.5
    assert result.reason is not None
    assert "1 of 2 claims is supported" in result.reason


async def test_include_reason_false_makes_no_reason_call(fake_judge: FakeJudge) -> None:
    fake_judge.on("claims", claims_json(*CLAIMS))
    fake_judge.on("verdicts", verdicts_json("yes", "no"))

    result = await score(fake_judge, include_reason=False)

    assert result.reason is None
    assert fake_judge.requests_for("reason") == []


async def test_claims_are_batched_and_share_the_documents_prefix(fake_judge: FakeJudge) -> None:
    claims = [f"Fact number {i} holds." for i in range(5)]
    fake_judge.on("claims", claims_json(*claims))

    def verdicts(body: dict[str, Any]) -> str:
        n = user_prompt(body).count(" holds.")
        return verdicts_json(*["yes"] * n)

    fake_judge.on("verdicts", verdicts)

    result = await score(fake_judge, verdict_batch_size=2)

    requests = fake_judge.requests_for("verdicts")
    assert [user_prompt(r).count(" holds.") for r in requests] == [2, 2, 1]
    assert result.counts.yes == 5
    assert result.score == 1.0
    assert next(s for s in result.steps if s.step == "verdicts").llm_calls == 3
    # Documents first, identical across every verdict call (llama.cpp KV-cache reuse), claims after them.
    prefix = user_prompt(requests[0]).split("</documents>")[0]
    assert DOC in prefix
    assert all(user_prompt(r).startswith(prefix) for r in requests)
    assert DOC not in user_prompt(fake_judge.requests_for("claims")[0])  # claims come from the answer only


async def test_max_claims_cuts_and_says_so(fake_judge: FakeJudge) -> None:
    fake_judge.on("claims", claims_json(*[f"Claim {i} is true." for i in range(5)]))
    fake_judge.on("verdicts", verdicts_json("yes", "yes", "yes"))

    result = await score(fake_judge, max_claims=3)

    assert result.counts.total == 3
    assert result.reason is not None
    assert "Only the first 3 of 5 claims" in result.reason


async def test_contexts_and_answer_are_truncated(fake_judge: FakeJudge) -> None:
    fake_judge.on("claims", claims_json(CLAIMS[0]))
    fake_judge.on("verdicts", verdicts_json("yes"))
    long_doc = "A" * 3000
    long_answer = "B" * 500

    result = await score(
        fake_judge,
        contexts=[long_doc, "second document"],
        answer=long_answer,
        max_context_chars=1000,
        max_answer_chars=200,
    )

    prompt = user_prompt(fake_judge.requests_for("verdicts")[0])
    assert "A" * 1000 in prompt
    assert "A" * 1001 not in prompt
    assert "second document" not in prompt
    assert "B" * 200 in user_prompt(fake_judge.requests_for("claims")[0])
    assert "B" * 201 not in user_prompt(fake_judge.requests_for("claims")[0])
    assert result.reason is not None
    assert "cut to 1000 characters" in result.reason


async def test_truths_are_cached_per_document_and_model(fake_judge: FakeJudge) -> None:
    doc = f"Document {uuid.uuid4()}: the bridge opened in 1932."
    fake_judge.on("truths", json.dumps({"truths": ["The bridge opened in 1932."]}))
    fake_judge.on("claims", claims_json("The bridge opened in 1932."))
    fake_judge.on("verdicts", verdicts_json("yes"))

    first = await score(fake_judge, contexts=[doc], use_truths=True)
    second = await score(fake_judge, contexts=[doc], use_truths=True)

    assert first.truths == second.truths == ["The bridge opened in 1932."]
    assert len(fake_judge.requests_for("truths")) == 1
    t1 = next(s for s in first.steps if s.step == "truths")
    t2 = next(s for s in second.steps if s.step == "truths")
    assert (t1.llm_calls, t1.cached) == (1, False)
    assert (t2.llm_calls, t2.input_tokens, t2.output_tokens, t2.cached) == (0, 0, 0, True)
    # The verdict step sees the facts next to the documents.
    assert (
        "The bridge opened in 1932."
        in user_prompt(fake_judge.requests_for("verdicts")[1]).split("<claims>")[0]
    )


async def test_step_usage_tokens_and_cost(fake_judge: FakeJudge) -> None:
    fake_judge.on("claims", {"content": claims_json(*CLAIMS), "usage": (1000, 50)})
    fake_judge.on("verdicts", {"content": verdicts_json("yes", "no"), "usage": (1200, 40)})
    fake_judge.on("reason", {"content": json.dumps({"reason": "r"}), "usage": (300, 30)})

    # A model litellm has a price for, served by the fake: costs come from litellm's cost map.
    result = await score(fake_judge, judge={"model": "openai/gpt-4o-mini"})

    by_step = {s.step: s for s in result.steps}
    assert [s.step for s in result.steps] == ["claims", "verdicts", "reason"]
    assert (by_step["claims"].input_tokens, by_step["claims"].output_tokens) == (1000, 50)
    assert (by_step["verdicts"].input_tokens, by_step["verdicts"].output_tokens) == (1200, 40)
    assert result.input_tokens == 2500
    assert result.output_tokens == 120
    assert all(s.cost_usd is not None and s.cost_usd > 0 for s in result.steps)
    assert result.cost_usd == pytest.approx(sum(s.cost_usd or 0 for s in result.steps))
    assert all(s.model == "openai/gpt-4o-mini" for s in result.steps)
    assert [c.step for c in result.calls] == ["claims", "verdicts", "reason"]


async def test_unknown_price_is_none_not_zero(fake_judge: FakeJudge) -> None:
    fake_judge.on("claims", claims_json(CLAIMS[0]))
    fake_judge.on("verdicts", verdicts_json("yes"))

    result = await score(fake_judge)

    assert result.cost_usd is None
    assert all(s.cost_usd is None for s in result.steps if s.llm_calls)
