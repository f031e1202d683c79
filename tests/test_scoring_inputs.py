# ruff: noqa: F811  (fixtures are imported into this module by name)
"""Bad input is the input's fault: one bad character is replaced and scored, never filed as a judge outage.

A lone surrogate ("\\ud800") cannot be encoded as UTF-8: sent as it is, it broke the judge's request inside
litellm (filed as a judge setup error, with a warning to check the model and API key) and made the OTLP
encoder drop the span attribute that held it. Through the public API and real litellm (only the judge's
replies are scripted), it is now replaced by U+FFFD, and what cannot be scored is an ``input_error``.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

import faithtrace
from _scoring_fixtures import FakeJudge, fake_judge  # noqa: F401  (fixture)
from _trace_fixtures import clean_env, ft  # noqa: F401  (fixtures)
from faithtrace import JudgeError, Outcome, ScoringOptions, trace_faithfulness
from faithtrace._telemetry import names as n
from faithtrace.judge.llm.client import Judge
from faithtrace.scoring.scorer import Scorer
from faithtrace.testing import FaithtraceCapture

_DOC = "The office opens at 9 and closes at 17 on weekdays."
_BAD_ANSWER = "The office opens at 9 \ud800and closes at 17."
_YES = json.dumps({"verdicts": [{"claim": 1, "verdict": "yes"}]})


def _sent(body: dict[str, Any]) -> str:
    return "\n".join(str(m.get("content")) for m in body["messages"])


def test_a_lone_surrogate_is_replaced_and_the_answer_still_scored(fake_judge: FakeJudge) -> None:
    fake_judge.on("verdicts", _YES)
    res = faithtrace.evaluate(
        "When is the office \udfffopen?",
        [_DOC + " \ud83d"],
        _BAD_ANSWER,
        judge=fake_judge.settings(),
        options=ScoringOptions(prove_support=False),
    )
    assert res.outcome is Outcome.SCORED, res.error
    assert res.score == 1.0
    (request,) = fake_judge.requests_for("verdicts")
    assert "9 \ufffdand closes" in _sent(request)
    assert "(3 invalid characters in the texts replaced by U+FFFD before judging.)" in (res.reason or "")
    # A surrogate pair written as two code points is one character, not two bad ones.
    fake_judge.requests.clear()
    paired = faithtrace.evaluate(None, [_DOC], "It opens at 9 \ud83d\ude00.", judge=fake_judge.settings())
    assert paired.outcome is Outcome.SCORED
    assert "invalid character" not in (paired.reason or "")


def test_a_decorated_answer_with_a_lone_surrogate_is_scored_and_exported(
    ft: FaithtraceCapture, fake_judge: FakeJudge, caplog: pytest.LogCaptureFixture
) -> None:
    fake_judge.on("verdicts", _YES)
    ft.configure(judge=fake_judge.settings())

    @trace_faithfulness
    def answer(question: str, contexts: list[str]) -> str:
        return _BAD_ANSWER

    with caplog.at_level(logging.WARNING):
        assert answer("When is the office open?", [_DOC]) == _BAD_ANSWER  # the host's value, untouched
        assert ft.flush()
    (evaluation,) = ft.evaluation_spans()
    attrs = dict(evaluation.attributes or {})
    assert attrs[n.EVAL_OUTCOME] == "scored"
    blamed = [r for r in caplog.records if "not scored" in r.getMessage() or "API key" in r.getMessage()]
    assert not blamed, caplog.text  # nothing blames the judge
    # Every span encodes for OTLP: the attribute holding the answer is kept, with U+FFFD in its place.
    with caplog.at_level(logging.ERROR):
        encoded = encode_spans(ft.spans())
        assert not [r for r in caplog.records if "Failed to encode" in r.getMessage()]
    values = [
        kv.value.string_value
        for resource in encoded.resource_spans
        for scope in resource.scope_spans
        for span in scope.spans
        for kv in span.attributes
        if kv.key == n.OUTPUT_VALUE
    ]
    assert "The office opens at 9 \ufffdand closes at 17." in values
    outcomes = {str(p.attributes.get(n.OUTCOME)) for p in ft.points(n.METRIC_EVALUATIONS) if p.value}
    assert "scored" in outcomes
    assert not outcomes & {"error", "input_error"}, outcomes


def test_a_request_its_text_breaks_is_an_input_error_and_not_retried(fake_judge: FakeJudge) -> None:
    # The pipeline repairs texts before any request; a text that still reaches litellm unencodable (here sent
    # straight through the judge client) is classified as the input's fault, not the judge's.
    judge = Judge(fake_judge.settings(max_retries=3))

    async def ask() -> None:
        await judge.generate(
            step="verdicts",
            messages=[{"role": "user", "content": "Task: for each of the 1 claims: \ud800"}],
            schema=ScoringOptions,
        )

    with pytest.raises(JudgeError) as caught:
        asyncio.run(ask())
    assert caught.value.type == "input_error"
    assert [c.error_type for c in caught.value.calls] == ["input_error"]  # one attempt: retrying cannot help
    assert fake_judge.requests == []


def test_texts_that_are_not_text_are_an_input_error(fake_judge: FakeJudge) -> None:
    # What the decorator's worker, `faithtrace serve` and the CLI run: a non-text value is an input error.
    fake_judge.on("verdicts", _YES)
    scorer = Scorer(fake_judge.settings(), ScoringOptions(prove_support=False), timeout_s=30)

    async def score_all() -> list[faithtrace.FaithfulnessResult]:
        return [
            await scorer.score(None, [_DOC], 42),  # type: ignore[arg-type]
            await scorer.score(None, [_DOC, None], "The office opens at 9."),  # type: ignore[list-item]
            # Bytes are text in an unknown state: decoded as UTF-8, bad sequences replaced, and scored.
            await scorer.score(None, [_DOC.encode()], b"The office opens at 9 \xff."),  # type: ignore[arg-type]
        ]

    number, none, raw = asyncio.run(score_all())
    assert number.outcome is Outcome.INPUT_ERROR
    assert number.error is not None
    assert (number.error.type, number.error.message) == ("input_error", "answer: expected text, got int")
    assert none.outcome is Outcome.INPUT_ERROR
    assert none.error is not None
    assert none.error.message == "contexts[1]: expected text, got NoneType"
    assert raw.outcome is Outcome.SCORED, raw.error
    assert "1 invalid character in the texts" in (raw.reason or "")
    assert len(fake_judge.requests) == 1  # only the bytes were scored
