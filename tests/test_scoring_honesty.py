# ruff: noqa: F811  (fixtures are imported into this module by name)
"""Honest verdicts: the judge decides, code proves or flags, and disagreements are recorded.

The oracle test runs every probe of ``benchmarks/data/probes.jsonl`` (contradictions of ten kinds and faithful
paraphrases) against a stand-in judge that knows each probe's truth and answers each claim correctly, through
litellm and the real parsing path. With default options the score must follow it exactly: this tests our code
around a judge, not a model. The misbehaving judges check that a disagreement between the judge and the
lexical check is recorded on the claim and its event, and what each policy makes of it.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

import pytest

import faithtrace
from _scoring_fixtures import PROBES, FakeJudge, fake_judge  # noqa: F401  (fixture)
from _trace_fixtures import clean_env, ft  # noqa: F401  (fixtures)
from faithtrace import ScoringOptions, trace_faithfulness
from faithtrace._telemetry import names as n
from faithtrace.scoring import confidence, grounding, proof
from faithtrace.testing import FaithtraceCapture


def _user(body: dict[str, Any]) -> str:
    return next(m["content"] for m in body["messages"] if m["role"] == "user")


def _claims_asked(body: dict[str, Any]) -> list[str]:
    block = re.search(r"<claims>\n(.*?)\n</claims>", _user(body), re.DOTALL)
    assert block is not None
    return re.findall(r"^\d+\. (.+)$", block.group(1), re.MULTILINE)


def _logprobs(verdicts: list[str], p_yes: list[float]) -> dict[str, Any]:
    """OpenAI-shaped logprobs for a verdicts reply: each verdict token with yes/no/idk alternatives."""
    content: list[dict[str, Any]] = []
    for i, (verdict, p) in enumerate(zip(verdicts, p_yes, strict=True)):
        lead = ("" if i == 0 else ", ") + f'{{"claim": {i + 1}, "verdict": "'
        content.append({"token": lead, "logprob": 0.0, "top_logprobs": []})
        rest = (1.0 - p) / 2
        top = [("yes", p), ("no", rest), ("idk", rest)]
        content.append(
            {
                "token": verdict,
                "logprob": math.log(dict(top)[verdict]),
                "top_logprobs": [{"token": t, "logprob": math.log(q)} for t, q in top],
            }
        )
        content.append({"token": '"}', "logprob": 0.0, "top_logprobs": []})
    return {"content": content}


def _views(res: Any) -> list[tuple[Any, ...]]:
    return [(c.verdict, c.decided_by, c.judge_verdict, c.check_verdict) for c in res.claims]


def oracle(probe: dict[str, Any], *, with_logprobs: bool = False) -> Any:
    """A judge that answers every claim of ``probe`` correctly: "no" for its false sentences, else "yes"."""
    false = set(probe["false_sentences"])

    def reply(body: dict[str, Any]) -> dict[str, Any]:
        claims = _claims_asked(body)
        verdicts = ["no" if c in false else "yes" for c in claims]
        content = json.dumps({"verdicts": [{"claim": i + 1, "verdict": v} for i, v in enumerate(verdicts)]})
        spec: dict[str, Any] = {"content": content}
        if with_logprobs:
            spec["logprobs"] = _logprobs(verdicts, [0.97 if v == "yes" else 0.02 for v in verdicts])
        return spec

    return reply


def test_the_probe_set_is_what_the_issue_asks_for() -> None:
    contradictions = [p for p in PROBES if p["label"] == "contradiction"]
    faithful = [p for p in PROBES if p["label"] == "faithful"]
    assert len(contradictions) >= 60
    assert len({p["kind"] for p in contradictions}) >= 8
    assert len(faithful) >= 30
    held = [p for p in PROBES if p["split"] == "heldout"]
    assert len(held) >= len(PROBES) // 3 - 1
    # Every false sentence is a claim the pipeline will see (the splitter does not hide it).
    for p in contradictions:
        assert set(p["false_sentences"]) <= set(grounding.split_statements(p["answer"]))


@pytest.mark.parametrize(
    ("options", "with_logprobs"),
    [
        (ScoringOptions(), False),
        # What the embedded judge gets: evidence sentences per claim, P(yes) read from log-probabilities, and
        # its judge token budget (every probe fits: none is scored on part of its claims).
        (ScoringOptions(verdict_context="evidence", verdict_logprobs="on", judge_token_budget=1_050), True),
    ],
    ids=["defaults", "evidence-and-logprobs"],
)
def test_the_score_follows_a_correct_judge_on_every_probe(
    fake_judge: FakeJudge, options: ScoringOptions, with_logprobs: bool
) -> None:
    wrong = []
    for probe in PROBES:
        fake_judge.on("verdicts", oracle(probe, with_logprobs=with_logprobs))
        res = faithtrace.evaluate(
            probe["question"],
            probe["contexts"],
            probe["answer"],
            judge=fake_judge.settings(),
            options=options,
        )
        assert res.outcome == "scored", (probe["id"], res.error)
        assert res.unjudged == [], probe["id"]
        ok = res.passed and res.score == 1.0 if probe["label"] == "faithful" else (not res.passed)
        ok = ok and (probe["label"] == "faithful" or (res.score or 0.0) < 1.0)
        # No claim's verdict differs from the oracle's, whoever decided it.
        for claim in res.claims:
            truth = "no" if claim.text in probe["false_sentences"] else "yes"
            ok = ok and claim.verdict == truth
            if claim.decided_by == "proof":
                assert truth == "yes", (probe["id"], claim.text)  # code never proves a false claim
        if not ok:
            wrong.append((probe["id"], res.score, [(c.text, c.verdict, c.decided_by) for c in res.claims]))
    assert wrong == []


def test_a_proven_claim_skips_the_judge_and_an_unproven_one_is_judged(fake_judge: FakeJudge) -> None:
    fake_judge.on("verdicts", json.dumps({"verdicts": [{"claim": 1, "verdict": "no"}]}))
    res = faithtrace.evaluate(
        "When is the meeting?",
        ["The quarterly meeting is held on Tuesday in room 4."],
        "The quarterly meeting is held on Tuesday. The quarterly meeting is held on Friday.",
        judge=fake_judge.settings(),
    )
    proven, judged = res.claims
    assert (proven.verdict, proven.decided_by, proven.judge_verdict) == ("yes", "proof", None)
    assert (judged.verdict, judged.decided_by, judged.judge_verdict) == ("no", "judge", "no")
    assert [_claims_asked(r) for r in fake_judge.requests_for("verdicts")] == [
        ["The quarterly meeting is held on Friday."]
    ]
    assert res.score == 0.5
    assert res.passed is False


def test_proof_compares_numbers_by_value_and_refuses_swaps() -> None:
    doc = "The service has 10,000 active users and charges 5 % per transfer."
    assert proof.contained("The service has 10000 active users.", doc)
    assert proof.contained("The service has 10 000 active users.", doc)
    assert proof.contained("Each transfer costs 5 percent.", "Each transfer costs 5 %.")
    assert proof.contained("The trail is 8 kilometres long.", "The trail is 8 km long.")
    assert proof.contained("A charge takes four hours.", "A charge takes 4 hours.")
    assert not proof.contained("It charges 5 percent per transfer.", doc)  # "it" is nowhere in the sentence
    assert not proof.contained("The service has 1,000 active users.", doc)
    assert not proof.contained("The service does not have 10,000 active users.", doc)
    assert not proof.contained("The tenant pays the landlord.", "The landlord pays the tenant.")
    assert not proof.contained("The match is cancelled.", "If it rains, the match is cancelled.")
    assert not proof.contained("It costs 10 dollars.", "It costs 5 to 10 dollars.")
    assert not proof.contained("Port 80 serves HTTPS.", "Port 80 serves HTTP and port 443 serves HTTPS.")
    assert not proof.contained("It was designed by Andersen.", "It was designed by Anderson.")


def test_an_opening_connective_is_not_what_a_proof_must_find_but_a_negation_is() -> None:
    sentences = [
        "Alternately, apply a pet stain remover to the affected area.",
        "The store is not open on Sundays.",
    ]
    assert proof.proven(
        [
            "Alternatively, apply a pet stain remover to the affected area.",
            "No, the store is not open on Sundays.",
            "No, the store is open on Sundays.",
            "However, the store is open on Sundays.",
        ],
        sentences,
    ) == [0, 1, None, None]


def test_a_lenient_judge_is_not_overruled_by_default_but_the_disagreement_is_recorded(
    fake_judge: FakeJudge,
) -> None:
    # The judge says "yes" to a claim whose words are not in the documents: a paraphrase the check cannot
    # ground (the judge may be right), or a lenient judge (it may be wrong). Either way both views are kept.
    fake_judge.on("verdicts", json.dumps({"verdicts": [{"claim": 1, "verdict": "yes"}]}))
    doc = ["The office is open Monday to Friday."]
    res = faithtrace.evaluate(None, doc, "The office opens on weekdays only.", judge=fake_judge.settings())
    assert _views(res) == [("yes", "judge", "yes", "idk")]
    assert res.claims[0].disagreement
    assert res.score == 1.0

    strict = faithtrace.evaluate(
        None,
        doc,
        "The office opens on weekdays only.",
        judge=fake_judge.settings(),
        options=ScoringOptions(verdict_policy="strict"),
    )
    assert _views(strict) == [("idk", "check", "yes", "idk")]
    assert strict.score == 0.0
    assert "checks say idk" in (strict.claims[0].reason or "")


def test_the_check_never_raises_a_judges_no(fake_judge: FakeJudge) -> None:
    # A paraphrase whose words the lexical check cannot find: the judge's "no" stands under every policy.
    fake_judge.on("verdicts", json.dumps({"verdicts": [{"claim": 1, "verdict": "no"}]}))
    for policy in ("auto", "judge", "numbers", "checks", "strict"):
        res = faithtrace.evaluate(
            None,
            ["Under the lease, the tenant pays the landlord a monthly rent."],
            "The tenant owes the landlord a monthly rent under the lease.",
            judge=fake_judge.settings(),
            options=ScoringOptions(verdict_policy=policy),  # type: ignore[arg-type]
        )
        (claim,) = res.claims
        assert (claim.verdict, claim.check_verdict, claim.disagreement) == ("no", "yes", True), policy
        assert res.passed is False


def test_the_judges_own_probability_decides_a_yes(fake_judge: FakeJudge) -> None:
    # The sampled token says "yes", but the judge put only 0.2 on it: with log-probabilities read, that is
    # not a "yes" (min_p_supported 0.8); P(yes) is recorded either way.
    def reply(body: dict[str, Any]) -> dict[str, Any]:
        return {
            "content": json.dumps(
                {"verdicts": [{"claim": 1, "verdict": "yes"}, {"claim": 2, "verdict": "yes"}]}
            ),
            "logprobs": _logprobs(["yes", "yes"], [0.2, 0.9]),
        }

    fake_judge.on("verdicts", reply)
    res = faithtrace.evaluate(
        None,
        ["Senior nurses train the new interns. The ward has 30 beds."],
        "The interns train the senior nurses. The ward holds thirty beds.",
        judge=fake_judge.settings(),
        options=ScoringOptions(verdict_logprobs="on"),
    )
    first, second = res.claims
    # Unsure, not contradicted: the judge wrote "yes" (judge_verdict), the score does not count it.
    assert (first.verdict, first.judge_verdict, first.p_supported) == ("idk", "yes", pytest.approx(0.2))
    assert (second.verdict, second.p_supported) == ("yes", pytest.approx(0.9))
    assert fake_judge.requests_for("verdicts")[0]["logprobs"] is True


def test_verdict_distributions_follow_the_tokenizer_however_it_splits() -> None:
    tokens = [
        ('{"', {}),
        ("verd", {}),
        ('ict":', {}),
        (' "', {}),
        ("Yes", {"Yes": math.log(0.6), "no": math.log(0.3), "id": math.log(0.1)}),
        ('"}', {}),
    ]
    (dist,) = confidence.verdict_distributions(tokens, 1)
    assert dist is not None
    assert dist["yes"] == pytest.approx(0.6)
    assert dist["idk"] == pytest.approx(0.1)
    assert confidence.verdict_distributions([], 2) == [None, None]


def test_claim_events_carry_both_verdicts(ft: FaithtraceCapture, fake_judge: FakeJudge) -> None:
    fake_judge.on("verdicts", json.dumps({"verdicts": [{"claim": 1, "verdict": "yes"}]}))
    ft.configure(judge=fake_judge.settings())

    @trace_faithfulness
    def answer(question: str, contexts: list[str]) -> str:
        return "The office is open Monday to Friday. The office opens on weekdays only."

    answer("When is the office open?", ["The office is open Monday to Friday."])
    assert ft.flush()
    (evaluation,) = ft.evaluation_spans()
    events = [dict(e.attributes or {}) for e in evaluation.events if n.is_claim_event(e.name)]
    proven, judged = events
    assert proven[n.CLAIM_DECIDED_BY] == "proof"
    assert proven[n.CLAIM_DISAGREEMENT] is False
    assert n.CLAIM_JUDGE_VERDICT not in proven
    assert judged[n.CLAIM_DECIDED_BY] == "judge"
    assert (judged[n.CLAIM_JUDGE_VERDICT], judged[n.CLAIM_CHECK_VERDICT]) == ("yes", "idk")
    assert judged[n.CLAIM_DISAGREEMENT] is True
    assert judged[n.CLAIM_VERDICT] == "yes"


def test_the_numbers_policy_lowers_a_yes_only_for_a_number_its_evidence_lacks(fake_judge: FakeJudge) -> None:
    # What the embedded judge gets by default: it says "yes" to a swapped year. A number compared by value
    # ("eight kilometres" for "8 km") and a synonym are not lowered.
    fake_judge.on("verdicts", json.dumps({"verdicts": [{"claim": i, "verdict": "yes"} for i in (1, 2, 3)]}))
    res = faithtrace.evaluate(
        None,
        ["The bridge opened to traffic in 1937. The footpath along it is 8 km long."],
        "Traffic first crossed the bridge in 1951. Its footpath measures eight kilometres. Traffic first "
        "crossed the bridge in 1937.",
        judge=fake_judge.settings(),
        options=ScoringOptions(verdict_policy="numbers", prove_support=False),
    )
    assert [(c.verdict, c.decided_by, c.judge_verdict) for c in res.claims] == [
        ("idk", "check", "yes"),
        ("yes", "judge", "yes"),
        ("yes", "judge", "yes"),
    ]


def test_the_checks_policy_lowers_a_yes_for_added_material_not_a_paraphrase(fake_judge: FakeJudge) -> None:
    # The embedded judge says "yes" to plausible details the documents never give (RAGTruth's usual
    # hallucination). Under ``checks`` a claim with three or more words no document uses becomes idk; a
    # paraphrase with two such words ("lowers", "hypertension") keeps the judge's verdict. With a configured
    # judge's default (``auto`` = ``judge``), both keep it and the disagreement is recorded.
    fake_judge.on("verdicts", json.dumps({"verdicts": [{"claim": i, "verdict": "yes"} for i in (1, 2)]}))
    doc = ["The drug reduces high blood pressure within two weeks of daily use."]
    answer = (
        "The drug lowers hypertension within two weeks of daily use. "
        "The drug also prevents migraines and improves sleep quality."
    )
    checks = faithtrace.evaluate(
        None, doc, answer, judge=fake_judge.settings(), options=ScoringOptions(verdict_policy="checks")
    )
    # The paraphrase's check verdict is idk too (two of its five words are unknown): recorded, not applied.
    assert _views(checks) == [("yes", "judge", "yes", "idk"), ("idk", "check", "yes", "idk")]
    assert "not in the documents: 'prevents', 'migraines', 'improves'" in (checks.claims[1].reason or "")
    assert checks.score == 0.5

    default = faithtrace.evaluate(None, doc, answer, judge=fake_judge.settings())
    assert _views(default) == [("yes", "judge", "yes", "idk"), ("yes", "judge", "yes", "idk")]
    assert [c.disagreement for c in default.claims] == [True, True]
    assert default.score == 1.0


# --- what users read: a judge's "no" fails the answer, an unsure "yes" is never a contradiction ----------
_PLAN = [
    "The basic plan costs 9 euros a month. It includes 50 GB of storage. Support answers within one "
    "day. The plan can be cancelled at any time."
]
_PLAN_ANSWER = (
    "The basic plan costs 9 euros per month. The plan includes 50 GB of storage. Support replies within a "
    "day. The plan cannot be cancelled during the first year."
)


def test_a_correct_judges_no_on_one_claim_of_four_fails_the_answer(
    fake_judge: FakeJudge, monkeypatch: pytest.MonkeyPatch
) -> None:
    false = "The plan cannot be cancelled during the first year."
    probe = {"false_sentences": [false]}
    fake_judge.on("verdicts", oracle(probe))
    res = faithtrace.evaluate(
        "What does the basic plan offer?", _PLAN, _PLAN_ANSWER, judge=fake_judge.settings()
    )
    assert res.score == 0.75  # the score stays the ratio, above the 0.7 threshold ...
    assert (res.passed, res.label) == (False, "fail")  # ... and the contradiction fails the answer
    assert [c.status for c in res.claims] == ["supported"] * 3 + ["contradicted"]
    assert res.reason is not None
    assert res.reason.startswith(
        f'The answer fails because the retrieved context contradicts this claim: "{false}"'
    )

    # fail_on_contradiction=False, as an argument or from the environment: the score alone decides.
    lenient = faithtrace.evaluate(
        None,
        _PLAN,
        _PLAN_ANSWER,
        judge=fake_judge.settings(),
        options=ScoringOptions(fail_on_contradiction=False),
    )
    assert (lenient.score, lenient.label) == (0.75, "pass")
    monkeypatch.setenv("FAITHTRACE_FAIL_ON_CONTRADICTION", "false")
    from_env = faithtrace.evaluate(None, _PLAN, _PLAN_ANSWER, judge=fake_judge.settings())
    assert (from_env.score, from_env.label) == (0.75, "pass")


def _unsure(p_yes: float) -> Any:
    """A judge that writes "yes" for every claim it is asked about, with P(yes) = ``p_yes``."""

    def reply(body: dict[str, Any]) -> dict[str, Any]:
        n = len(_claims_asked(body))
        content = json.dumps({"verdicts": [{"claim": i + 1, "verdict": "yes"} for i in range(n)]})
        return {"content": content, "logprobs": _logprobs(["yes"] * n, [p_yes] * n)}

    return reply


@pytest.mark.parametrize(
    ("context", "answer", "p_yes"),
    [
        (["The X200 is a light e-scooter. The range is 40 km."], "The X200 has a range of 40 km.", 0.68),
        (
            ["The company was founded in Berlin and later moved its headquarters to Munich."],
            "The company started in Berlin and its headquarters are now in Munich.",
            0.67,
        ),
    ],
    ids=["range", "headquarters"],
)
@pytest.mark.parametrize("policy", ["auto", "judge", "numbers", "checks", "strict"])
def test_a_hesitant_yes_never_becomes_no(
    fake_judge: FakeJudge, policy: str, context: list[str], answer: str, p_yes: float
) -> None:
    fake_judge.on("verdicts", _unsure(p_yes))
    for verdict_context in ("documents", "evidence"):
        res = faithtrace.evaluate(
            None,
            context,
            answer,
            judge=fake_judge.settings(),
            options=ScoringOptions(
                verdict_policy=policy,  # type: ignore[arg-type]
                verdict_context=verdict_context,  # type: ignore[arg-type]
                verdict_logprobs="on",
                prove_support=False,
            ),
        )
        (claim,) = res.claims
        assert (claim.verdict, claim.judge_verdict) == ("idk", "yes"), (policy, verdict_context)
        assert claim.status in ("not_confirmed", "not_in_documents")
        assert f"the judge was unsure (P(yes) {p_yes:.2f})" in (claim.reason or "")
        assert res.counts.no == 0
        assert "contradict" not in (res.reason or "") + (claim.reason or "")
        if claim.decided_by == "judge":
            assert claim.status == "not_confirmed"
            assert "not confirmed" in (res.reason or "")


def test_an_unsure_yes_reads_as_not_confirmed_on_its_event(
    ft: FaithtraceCapture, fake_judge: FakeJudge
) -> None:
    fake_judge.on("verdicts", _unsure(0.68))
    ft.configure(  # child: the evaluation span's output.value JSON is read below
        judge=fake_judge.settings(),
        scoring=ScoringOptions(verdict_logprobs="on", verdict_policy="judge"),
        evaluation_placement="child",
    )

    @trace_faithfulness
    def answer(question: str, contexts: list[str]) -> str:
        return "The X200 has a range of 40 km."

    answer("How far does it go?", ["The X200 is a light e-scooter. The range is 40 km."])
    assert ft.flush()
    (evaluation,) = ft.evaluation_spans()
    (event,) = [dict(e.attributes or {}) for e in evaluation.events if n.is_claim_event(e.name)]
    assert (event[n.CLAIM_VERDICT], event[n.CLAIM_STATUS], event[n.CLAIM_JUDGE_VERDICT]) == (
        "idk",
        "not_confirmed",
        "yes",
    )
    output = json.loads(str((evaluation.attributes or {})[n.OUTPUT_VALUE]))
    assert output["claims"][0]["status"] == "not_confirmed"


def test_the_reason_counts_in_words(fake_judge: FakeJudge) -> None:
    # One claim of each kind but "supported": singular everywhere, and no "claim(s)".
    fake_judge.on(
        "verdicts",
        json.dumps({"verdicts": [{"claim": 1, "verdict": "no"}, {"claim": 2, "verdict": "idk"}]}),
    )
    res = faithtrace.evaluate(
        None,
        ["The shop opens at 9. It sells bicycles."],
        "The shop opens at 10. The shop sells cars too.",
        judge=fake_judge.settings(),
        options=ScoringOptions(verdict_policy="judge", prove_support=False),
    )
    reason = res.reason or ""
    assert reason.startswith(
        "0 of 2 claims are supported by the retrieved context, 1 is contradicted by it and 1 is not in it."
    ), reason
    assert "(s)" not in reason
    fake_judge.on("verdicts", json.dumps({"verdicts": [{"claim": 1, "verdict": "no"}]}))
    one = faithtrace.evaluate(
        None,
        ["The shop opens at 9."],
        "The shop opens at 10.",
        judge=fake_judge.settings(),
        options=ScoringOptions(prove_support=False),
    )
    assert "0 of 1 claim is supported" in (one.reason or ""), one.reason
