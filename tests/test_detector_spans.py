# ruff: noqa: F811  (fixtures are imported into this module by name)
"""The detector's pure parts: token probabilities to flagged spans, spans to claims, and a detector that
cannot load (an error result when it decides, the judge's result untouched beside a judge).

The parts that run the model are in ``test_detector.py``, on the tiny model ``training/`` trains.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import faithtrace
from _scoring_fixtures import FakeJudge, fake_judge  # noqa: F401  (fixture)
from faithtrace import ScoringOptions
from faithtrace.judge.detector import spans, windows

CONTEXT = "The Eiffel Tower was completed in 1889. It is 330 metres tall and stands in Paris."
ANSWER = "The Eiffel Tower was completed in 1889. It is 450 metres tall. Gustave Eiffel's firm built it."


def _tokens(text: str, probs: list[float]) -> list[windows.TokenScore]:
    found = list(re.finditer(r"\S+", text))
    assert len(found) == len(probs)
    return [windows.TokenScore(m.start(), m.end(), p) for m, p in zip(found, probs, strict=True)]


def test_runs_of_flagged_tokens_become_spans_with_their_highest_probability() -> None:
    text = "It is 450 metres tall and red."
    tokens = _tokens(text, [0.1, 0.2, 0.9, 0.7, 0.3, 0.6, 0.2])
    assert [(s.text, s.p, s.tokens) for s in spans.flag_spans(text, tokens)] == [
        ("450 metres", 0.9, 2),
        ("and", 0.6, 1),
    ]
    assert [s.text for s in spans.flag_spans(text, tokens, min_confidence=0.65)] == ["450 metres"]
    assert [s.text for s in spans.flag_spans(text, tokens, min_tokens=2)] == ["450 metres"]
    assert spans.flag_spans(text, tokens, threshold=0.95) == []


def test_a_span_belongs_to_the_claims_it_overlaps() -> None:
    answer = "Alternatively, it is 450 metres tall. (Passage 2) It stands in Paris."
    claims = ["it is 450 metres tall.", "It stands in Paris."]  # as split_statements gives them
    where = spans.claim_ranges(answer, claims)
    assert [answer[a:b] for a, b in where] == ["it is 450 metres tall", "It stands in Paris"]  # type: ignore[misc]
    flagged = [spans.FlaggedSpan(21, 24, "450", 0.9, 1)]
    assert spans.spans_in(flagged, where[0], claims[0]) == flagged
    assert spans.spans_in(flagged, where[1], claims[1]) == []
    # A claim whose words are not in the answer (a judge's rewording) holds the spans it quotes.
    assert spans.spans_in(flagged, None, "The tower is 450 m tall.") == flagged


def test_a_missing_detector_is_an_error_result_not_an_exception(tmp_path: Path) -> None:
    res = faithtrace.evaluate(
        None,
        [CONTEXT],
        ANSWER,
        options=ScoringOptions(verdict_source="detector", detector_model=str(tmp_path / "none")),
    )
    assert res.outcome == "error"
    assert res.error is not None
    assert res.error.type == "detector_unavailable"
    assert "does not exist" in res.error.message


def judged_yes_beside(fake_judge: FakeJudge, options: ScoringOptions) -> faithtrace.FaithfulnessResult:
    """One claim the judge calls supported, scored with ``options`` (a detector beside the judge)."""
    fake_judge.on("verdicts", json.dumps({"verdicts": [{"claim": 1, "verdict": "yes"}]}))
    return faithtrace.evaluate(
        None,
        ["The office opens at nine on weekdays."],
        "The office opens at 9 on weekdays.",
        judge=fake_judge.settings(),
        options=options.model_copy(update={"prove_support": False}),
    )


def test_beside_a_judge_a_detector_that_cannot_load_changes_nothing(fake_judge: FakeJudge) -> None:
    res = judged_yes_beside(fake_judge, ScoringOptions(detector_model="/nonexistent"))
    assert res.outcome == "scored"
    assert res.score == 1.0
    assert res.detector is not None
    assert "does not exist" in (res.detector.error or "")
    assert res.claims[0].detector_verdict is None
    assert not res.claims[0].detector_disagreement
