# ruff: noqa: F811  (fixtures are imported into this module by name)
"""``faithtrace.evaluate`` / ``aevaluate``: arguments, judge resolution, and use from inside an event loop."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

import faithtrace
from _scoring_fixtures import (
    FakeJudge,
    fake_judge,  # noqa: F401  (fixture, imported by name: see conftest)
    verdicts_json,
)
from faithtrace import ConfigError, JudgeSettings, Outcome
from faithtrace._evaluate import get_judge

DOC = "Mount Everest is 8,849 metres tall."


def script(fake: FakeJudge) -> None:
    fake.on("claims", json.dumps({"claims": ["Mount Everest is 8,849 metres tall."]}))
    fake.on("verdicts", verdicts_json("yes"))


def test_evaluate_is_sync_and_repeatable(fake_judge: FakeJudge) -> None:
    script(fake_judge)
    settings = fake_judge.settings()
    # Twice: each call runs its own event loop, and the shared judge must survive the first loop closing.
    first = faithtrace.evaluate("How tall is Everest?", DOC, "Everest is 8,849 m tall.", judge=settings)
    second = faithtrace.evaluate("How tall is Everest?", [DOC], "Everest is 8,849 m tall.", judge=settings)
    assert first.outcome is second.outcome is Outcome.SCORED
    assert first.score == second.score == 1.0


async def test_evaluate_inside_a_running_loop(fake_judge: FakeJudge) -> None:
    script(fake_judge)
    loop = asyncio.get_running_loop()
    # A sync call from async code (a FastAPI sync helper, a notebook cell): runs on a private loop/thread.
    result = faithtrace.evaluate(None, DOC, "Everest is 8,849 m tall.", judge=fake_judge.settings())
    assert result.score == 1.0
    assert asyncio.get_running_loop() is loop
    assert not loop.is_closed()


async def test_aevaluate_concurrently(fake_judge: FakeJudge) -> None:
    script(fake_judge)
    settings = fake_judge.settings()
    results = await asyncio.gather(
        *(faithtrace.aevaluate("q", DOC, f"Everest is tall ({i}).", judge=settings) for i in range(4))
    )
    assert [r.score for r in results] == [1.0] * 4


def test_judge_from_model_string_and_env(fake_judge: FakeJudge, monkeypatch: pytest.MonkeyPatch) -> None:
    script(fake_judge)
    monkeypatch.setenv("FAITHTRACE_JUDGE_API_BASE", fake_judge.url)
    monkeypatch.setenv("FAITHTRACE_JUDGE_API_KEY", "sk-env")
    result = faithtrace.evaluate("q", DOC, "Everest is 8,849 m tall.", judge="openai/fake-judge")
    assert result.outcome is Outcome.SCORED
    assert result.judge_model == "openai/fake-judge"

    monkeypatch.setenv("FAITHTRACE_JUDGE_MODEL", "openai/fake-judge-env")
    result = faithtrace.evaluate("q", DOC, "Everest is 8,849 m tall.")
    assert result.outcome is Outcome.SCORED
    assert result.judge_model == "openai/fake-judge-env"
    assert fake_judge.requests[-1]["model"] == "fake-judge-env"


def test_judges_are_shared_per_settings() -> None:
    a = JudgeSettings(model="openai/x", api_key="k1")
    assert get_judge(a) is get_judge(JudgeSettings(model="openai/x", api_key="k1"))
    assert get_judge(a) is not get_judge(JudgeSettings(model="openai/x", api_key="k2"))
    assert get_judge(a) is not get_judge(JudgeSettings(model="openai/y", api_key="k1"))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"contexts": 42}, "contexts"),
        ({"contexts": ["ok", 3]}, "contexts"),
        ({"answer": None}, "answer"),
        ({"query": 5}, "query"),
        ({"judge": 3.5}, "judge"),
        ({"judge": "  "}, "judge"),
        ({"options": {"threshold": 0.5}}, "options"),
    ],
)
def test_invalid_arguments_raise_config_error(kwargs: dict[str, Any], message: str) -> None:
    args: dict[str, Any] = {"query": "q", "contexts": DOC, "answer": "a", **kwargs}
    with pytest.raises(ConfigError, match=message):
        faithtrace.evaluate(args.pop("query"), args.pop("contexts"), args.pop("answer"), **args)


async def test_invalid_arguments_raise_config_error_async() -> None:
    with pytest.raises(ConfigError):
        await faithtrace.aevaluate("q", 42, "a")  # type: ignore[arg-type]
