# ruff: noqa: F811  (fixtures are imported into this module by name)
"""Contradictions code can see (``scoring.contradictions``) and what the ``checks`` policy makes of them.

The detectors must fire on the three mechanical edits that fool the small embedded judge and never on a
paraphrase: every faithful probe, passive voice, symmetric relations, reordered clauses.
"""

from __future__ import annotations

import pytest

import faithtrace
from _scoring_fixtures import PROBES, FakeJudge, fake_judge, verdicts_json  # noqa: F401  (fixture)
from faithtrace import ScoringOptions
from faithtrace.scoring import contradictions, grounding


@pytest.mark.parametrize(
    ("claim", "sentence", "kind"),
    [
        (
            "Refunds can be claimed after the deadline.",
            "Refunds cannot be claimed after the deadline.",
            "negation_flip",
        ),
        ("The bridge is not open to lorries.", "The bridge is open to lorries.", "negation_flip"),
        ("The heater works without a fan.", "The heater does not work without a fan.", "negation_flip"),
        ("Smoking is allowed on the terrace.", "Smoking is never allowed on the terrace.", "negation_flip"),
        ("The buyer pays the seller a deposit.", "The seller pays the buyer a deposit.", "role_swap"),
        (
            "In 2015 Tandem bought Orbis for 3 million euros.",
            "In 2015 Orbis bought Tandem for 3 million euros.",
            "role_swap",
        ),
        ("The trains are faster than the buses.", "The buses are faster than the trains.", "role_swap"),
        (
            "The agent calls the broker, and the broker books a room.",
            "The broker calls the agent, and the agent books a room.",
            "role_swap",
        ),
        ("Ms Ito teaches physics.", "Mr Roy teaches physics and Ms Ito teaches music.", "attribute_swap"),
        ("The kettle is green.", "The kettle is white and the toaster is green.", "attribute_swap"),
        ("Room B costs 90 euros.", "Room A costs 90 euros and room B costs 70 euros.", "attribute_swap"),
    ],
)
def test_each_mechanical_edit_is_found(claim: str, sentence: str, kind: str) -> None:
    found = contradictions.find(claim, [sentence])
    assert found is not None
    assert found.kind == kind
    assert found.sentence == sentence


@pytest.mark.parametrize(
    ("claim", "sentence"),
    [
        # Passive voice says the same as the active sentence.
        ("The seller is paid a deposit by the buyer.", "The buyer pays the seller a deposit."),
        # Symmetric relations and unordered lists: exchanging what they join changes nothing.
        ("Tom and Ana met in Lisbon.", "Ana and Tom met in Lisbon."),
        ("Season it with pepper and salt.", "Season it with salt and pepper."),
        ("Oslo is as large as Bergen.", "Bergen is as large as Oslo."),
        ("Rome lies between Florence and Naples.", "Rome lies between Naples and Florence."),
        # Reordered clauses.
        ("On Tuesday the meeting is held in room 4.", "The meeting is held in room 4 on Tuesday."),
        # A double negation where the sentence has one too, and the same negation in other words.
        ("The app does not work without a connection.", "The app does not work without a connection."),
        ("Pets are not allowed inside.", "Pets are never allowed inside."),
        # A detail that is the sentence's own, not one taken from a parallel clause.
        ("Mr Roy teaches physics.", "Mr Roy teaches physics and Ms Ito teaches music."),
        # Same words, different facts: not a mechanical edit, so the judge's business.
        ("The store opens at 9 and closes at 5.", "The store opens at 9 and closes at 5 on weekdays."),
    ],
)
def test_a_paraphrase_is_never_a_contradiction(claim: str, sentence: str) -> None:
    assert contradictions.find(claim, [sentence]) is None


def test_no_faithful_probe_is_flagged_and_many_contradictions_are() -> None:
    kinds: dict[str, int] = {}
    for probe in PROBES:
        claims = grounding.split_statements(probe["answer"])
        for claim, g in zip(
            claims, grounding.check_claims(claims, probe["contexts"], probe["question"]), strict=True
        ):
            found = contradictions.find(claim, g.near)
            false = claim in probe["false_sentences"]
            if not false:
                assert found is None, (probe["id"], claim, found)
            elif found is not None:
                kinds[found.kind] = kinds.get(found.kind, 0) + 1
    # Measured when written: 5 negation flips, 7 role swaps, 6 attribute swaps of the 68 contradictions.
    assert kinds.get("negation_flip", 0) >= 4
    assert kinds.get("role_swap", 0) >= 6
    assert kinds.get("attribute_swap", 0) >= 5


def test_the_checks_policy_lowers_a_lenient_yes_to_a_role_swap_and_records_both(
    fake_judge: FakeJudge,
) -> None:
    # The embedded judge's failure, played by a stand-in: "yes" to a role swap and to a faithful claim.
    fake_judge.on("verdicts", verdicts_json("yes", "yes", reasons=False))
    docs = ["Under the lease, the tenant pays the landlord a monthly rent. The flat has two bedrooms."]
    answer = "Under the lease, the landlord pays the tenant a monthly rent. The apartment has two bedrooms."

    checked = faithtrace.evaluate(
        None, docs, answer, judge=fake_judge.settings(), options=ScoringOptions(verdict_policy="checks")
    )
    swap, fine = checked.claims
    assert (swap.verdict, swap.decided_by, swap.judge_verdict, swap.check_verdict) == (
        "no",
        "check",
        "yes",
        "no",
    )
    assert swap.disagreement
    assert "two of its parts exchanged" in (swap.reason or "")
    assert (fine.verdict, fine.decided_by) == ("yes", "judge")
    assert checked.score == 0.5

    # With a configured model the judge's verdict stands by default; the disagreement is still recorded.
    trusted = faithtrace.evaluate(None, docs, answer, judge=fake_judge.settings())
    swap, _ = trusted.claims
    assert (swap.verdict, swap.decided_by, swap.check_verdict, swap.disagreement) == (
        "yes",
        "judge",
        "no",
        True,
    )
    assert trusted.score == 1.0
