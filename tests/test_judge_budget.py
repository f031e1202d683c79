# ruff: noqa: F811  (fixtures are imported into this module by name)
"""The judge token budget per evaluation: which claims the judge is asked about when not all fit, and how the
claims left out are reported. The stand-in judge answers through litellm and the real parsing path."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

import faithtrace
from _scoring_fixtures import FakeJudge, fake_judge  # noqa: F401  (fixture)
from _trace_fixtures import clean_env, ft  # noqa: F401  (fixtures)
from faithtrace import JudgeSettings, Outcome, ScoringOptions, trace_faithfulness
from faithtrace._telemetry import names as n
from faithtrace.testing import FaithtraceCapture

DOC = [
    "Preheat the oven to 350 degrees. Rub the roast with two tablespoons of the house seasoning. Turn the "
    "roast over and rub the rest of the seasoning into the other side. Place the roast in a large roasting "
    "pan. Pour one cup of water into the pan. Roast the meat for six hours, until it shreds easily. Let the "
    "roast rest for twenty minutes. Shred the meat with two forks. Slice the onions into thin rings. Warm "
    "the olive oil in a skillet over medium heat. Stir the onions in the oil until they are soft. Squeeze "
    "the juice of two oranges over the onions. Spoon the onion sauce over the shredded meat. Keep any "
    "leftover meat in the fridge for up to four days."
]
# Every document sentence (nothing the checks doubt), then one sentence of added material, last.
ADDED = "Serve the shredded roast with mashed potatoes, green beans and warm cornbread."
ANSWER = " ".join(re.split(r"(?<=\.) ", DOC[0])) + " " + ADDED
# The judge sees every claim without proof, as it would see paraphrases of these sentences.
NO_PROOF = ScoringOptions(prove_support=False)


def _asked(fake: FakeJudge) -> list[str]:
    out: list[str] = []
    for body in fake.requests_for("verdicts"):
        user = next(m["content"] for m in body["messages"] if m["role"] == "user")
        block = re.search(r"<claims>\n(.*?)\n</claims>", user, re.DOTALL)
        assert block is not None
        out += re.findall(r"^\d+\. (.+)$", block.group(1), re.MULTILINE)
    return out


def _truthful(body: dict[str, Any]) -> str:
    """A judge that knows the answer: the added sentence is not in the documents, the rest is."""
    user = next(m["content"] for m in body["messages"] if m["role"] == "user")
    block = re.search(r"<claims>\n(.*?)\n</claims>", user, re.DOTALL)
    assert block is not None
    claims = re.findall(r"^\d+\. (.+)$", block.group(1), re.MULTILINE)
    verdicts = [{"claim": i + 1, "verdict": "idk" if c == ADDED else "yes"} for i, c in enumerate(claims)]
    return json.dumps({"verdicts": verdicts})


def test_claims_that_do_not_fit_the_budget_are_listed_and_not_counted(fake_judge: FakeJudge) -> None:
    fake_judge.on("verdicts", _truthful)
    everything = faithtrace.evaluate(None, DOC, ANSWER, judge=fake_judge.settings(), options=NO_PROOF)
    all_claims = [c.text for c in everything.claims]
    assert len(all_claims) == 15
    assert everything.unjudged == []
    assert _asked(fake_judge) == all_claims  # a configured judge gets no budget unless one is set

    fake_judge.requests.clear()
    tight = NO_PROOF.model_copy(update={"judge_token_budget": 600})
    res = faithtrace.evaluate(None, DOC, ANSWER, judge=fake_judge.settings(), options=tight)
    asked = _asked(fake_judge)
    assert res.outcome is Outcome.SCORED
    # The added sentence comes last in the answer but is asked first: it is what the checks doubt.
    assert ADDED in asked
    assert 1 <= len(res.unjudged) < 14
    # Every claim is either judged (in the result, in answer order) or listed as unjudged, never both.
    assert [c.text for c in res.claims] == asked
    assert sorted(asked + res.unjudged) == sorted(all_claims)
    assert [c for c in all_claims if c in res.unjudged] == res.unjudged
    # The score counts the judged claims only, and the reason says how many were left out and why.
    assert res.counts.total == len(asked)
    assert res.score == pytest.approx((len(asked) - 1) / len(asked))
    left = len(res.unjudged)
    assert f"{left} claim{'' if left == 1 else 's'} {'was' if left == 1 else 'were'} not judged" in (
        res.reason or ""
    )
    assert "judge token budget of 600 tokens" in (res.reason or "")

    # A budget too small for any claim still asks about one, the most doubted.
    fake_judge.requests.clear()
    one = faithtrace.evaluate(
        None,
        DOC,
        ANSWER,
        judge=fake_judge.settings(),
        options=NO_PROOF.model_copy(update={"judge_token_budget": 1}),
    )
    assert _asked(fake_judge) == [ADDED]
    assert one.score == 0.0
    assert len(one.unjudged) == 14


def test_the_budget_comes_from_the_environment_and_its_count_is_on_the_span(
    ft: FaithtraceCapture, fake_judge: FakeJudge, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAITHTRACE_JUDGE_TOKEN_BUDGET", "600")
    fake_judge.on("verdicts", _truthful)
    ft.configure(  # child: the evaluation span's output.value JSON is read below
        judge=fake_judge.settings(),
        scoring=ScoringOptions.from_env(prove_support=False),
        evaluation_placement="child",
    )

    @trace_faithfulness
    def answer(question: str, contexts: list[str]) -> str:
        return ANSWER

    answer("How do I cook the roast?", DOC)
    assert ft.flush()
    (evaluation,) = ft.evaluation_spans()
    attrs = dict(evaluation.attributes or {})
    claim_events = [e for e in evaluation.events if n.is_claim_event(e.name)]
    assert attrs[n.EVAL_CLAIMS_UNJUDGED] == 15 - len(_asked(fake_judge)) >= 1
    assert attrs[n.EVAL_CLAIMS_TOTAL] == len(claim_events) == len(_asked(fake_judge))
    assert json.loads(str(attrs[n.OUTPUT_VALUE]))["claims_unjudged"] == attrs[n.EVAL_CLAIMS_UNJUDGED]


def test_a_budget_is_unset_zero_or_positive() -> None:
    assert ScoringOptions().judge_token_budget is None  # unset: decided by the judge (see the option's doc)
    assert ScoringOptions(judge_token_budget=0).judge_token_budget == 0
    with pytest.raises(ValueError, match="greater than or equal to 0"):
        ScoringOptions(judge_token_budget=-1)


@pytest.mark.judge
@pytest.mark.timeout(1800)
def test_the_embedded_judge_stays_within_its_default_budget(local_judge: Any) -> None:
    res = faithtrace.evaluate(
        "How do I cook the roast?",
        DOC,
        ANSWER,
        judge=JudgeSettings(model=None, timeout_s=600),
        options=NO_PROOF,
    )
    assert res.outcome is Outcome.SCORED, res.error
    assert res.unjudged, "15 unproven claims need ~1,500 judge tokens: some must be left out"
    assert ADDED in [c.text for c in res.claims]
    # The budget is estimated from the prompts' characters; the judge's own count must stay within it.
    assert res.input_tokens + res.output_tokens <= 1_100, (res.input_tokens, res.output_tokens)
