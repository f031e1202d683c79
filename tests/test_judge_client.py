# ruff: noqa: F811  (fixtures are imported into this module by name)
"""The judge client (``Judge.generate``) against a scripted OpenAI-compatible server on loopback."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import BaseModel

from _scoring_fixtures import (
    FakeJudge,
    fake_judge,  # noqa: F401  (fixture, imported by name: see conftest)
)
from faithtrace import JudgeError
from faithtrace.judge import Judge, OutputRejected

MESSAGES = [{"role": "system", "content": "s"}, {"role": "user", "content": "Task: break the answer please"}]


class Claims(BaseModel):
    claims: list[str]


async def test_json_schema_mode_sends_the_schema(fake_judge: FakeJudge) -> None:
    fake_judge.on("claims", json.dumps({"claims": ["x"]}))
    judge = Judge(fake_judge.settings(structured_output="json_schema"))

    reply = await judge.generate(step="claims", messages=MESSAGES, schema=Claims, max_tokens=77)

    assert reply.value.claims == ["x"]
    (request,) = fake_judge.requests
    fmt = request["response_format"]
    assert fmt["type"] == "json_schema"
    assert fmt["json_schema"]["name"] == "claims"
    assert fmt["json_schema"]["schema"]["properties"]["claims"]["type"] == "array"
    assert request["max_tokens"] == 77
    assert request["temperature"] == 0.0
    (call,) = reply.calls
    assert (call.step, call.attempt, call.input_tokens, call.output_tokens) == ("claims", 1, 100, 20)
    assert call.response_id is not None
    assert call.finish_reason == "stop"


async def test_gateway_rejecting_json_schema_falls_back_to_json_mode(fake_judge: FakeJudge) -> None:
    def reply(body: dict[str, Any]) -> dict[str, Any]:
        if body.get("response_format", {}).get("type") == "json_schema":
            return {"status": 400, "content": "response_format json_schema is not supported"}
        return {"content": json.dumps({"claims": ["y"]})}

    fake_judge.on("claims", reply)
    judge = Judge(fake_judge.settings(structured_output="json_schema"))

    first = await judge.generate(step="claims", messages=MESSAGES, schema=Claims)
    second = await judge.generate(step="claims", messages=MESSAGES, schema=Claims)

    assert first.value.claims == second.value.claims == ["y"]
    assert [c.error_type for c in first.calls] == ["judge_bad_request", None]
    assert len(second.calls) == 1  # the fallback is remembered
    assert [r["response_format"]["type"] for r in fake_judge.requests] == [
        "json_schema",
        "json_object",
        "json_object",
    ]


async def test_forced_tool_call_mode(fake_judge: FakeJudge) -> None:
    def reply(body: dict[str, Any]) -> dict[str, Any]:
        if "tools" in body:
            return {"tool_arguments": json.dumps({"claims": ["z"]}), "tool_name": "claims"}
        return {"content": json.dumps({"claims": ["z"]})}

    fake_judge.on("claims", reply)
    judge = Judge(fake_judge.settings(structured_output="tool"))

    reply_ = await judge.generate(step="claims", messages=MESSAGES, schema=Claims)

    # Either the forced tool call went through, or (litellm 1.106 without the optional `mcp` package cannot
    # send tools=) the client fell back to JSON mode instead of failing the evaluation.
    assert reply_.value.claims == ["z"]
    if fake_judge.requests and "tools" in fake_judge.requests[-1]:
        assert fake_judge.requests[-1]["tool_choice"]["function"]["name"] == "claims"
    else:
        assert fake_judge.requests[-1]["response_format"]["type"] == "json_object"
        assert reply_.calls[0].error_type is not None


async def test_invalid_reply_is_sent_back_with_the_validation_error(fake_judge: FakeJudge) -> None:
    fake_judge.on("claims", json.dumps({"items": ["x"]}), json.dumps({"claims": ["x"]}))
    judge = Judge(fake_judge.settings(max_repairs=1))

    reply = await judge.generate(step="claims", messages=MESSAGES, schema=Claims)

    assert reply.value.claims == ["x"]
    assert len(reply.calls) == 2
    retry = fake_judge.requests[1]["messages"]
    assert retry[-2] == {"role": "assistant", "content": json.dumps({"items": ["x"]})}
    assert "claims: Field required" in retry[-1]["content"]


async def test_check_rejection_is_retried_then_raised_with_its_type(fake_judge: FakeJudge) -> None:
    fake_judge.on("claims", json.dumps({"claims": []}))
    judge = Judge(fake_judge.settings(max_repairs=2))

    def check(value: Claims) -> None:
        if not value.claims:
            raise OutputRejected("empty_claims", "need at least one claim")

    with pytest.raises(JudgeError) as info:
        await judge.generate(step="claims", messages=MESSAGES, schema=Claims, check=check)

    assert info.value.type == "empty_claims"
    assert info.value.step == "claims"
    assert len(info.value.calls) == 3


async def test_authentication_errors_are_not_retried(fake_judge: FakeJudge) -> None:
    fake_judge.on("claims", {"status": 401, "content": "bad key"})
    judge = Judge(fake_judge.settings(max_retries=3))

    with pytest.raises(JudgeError) as info:
        await judge.generate(step="claims", messages=MESSAGES, schema=Claims)

    assert info.value.type == "judge_auth"
    assert len(fake_judge.requests) == 1


async def test_unreachable_judge_is_judge_unavailable() -> None:
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    from faithtrace import JudgeSettings

    judge = Judge(
        JudgeSettings(
            model="openai/x",
            api_base=f"http://127.0.0.1:{port}/v1",
            api_key="k",
            max_retries=0,
            structured_output="json_object",
        )
    )
    with pytest.raises(JudgeError) as info:
        await judge.generate(step="claims", messages=MESSAGES, schema=Claims)
    assert info.value.type == "judge_unavailable"
    assert info.value.calls
    assert info.value.calls[0].error_type == "judge_unavailable"


async def test_local_judge_is_asked_without_a_repeat_penalty(
    fake_judge: FakeJudge, monkeypatch: pytest.MonkeyPatch
) -> None:
    # llama-cpp-python's server penalises by default (1.1) every token the reply already holds: a verdict
    # list would make each "yes" less likely the more claims before it were supported. Greedy, unpenalised
    # decoding for the embedded judge; a configured model gets no such parameter.
    from faithtrace.judge.local import endpoint as local

    def fake_local() -> local.LocalEndpoint:
        return local.LocalEndpoint("openai/fake-judge", fake_judge.url, "sk-local", "faithtrace-local/fake")

    monkeypatch.setattr(local, "ensure_local_judge", fake_local)
    fake_judge.on("claims", json.dumps({"claims": ["x"]}))
    embedded = Judge(fake_judge.settings(model=None, api_base=None, structured_output="auto"))
    await embedded.generate(step="claims", messages=MESSAGES, schema=Claims)
    await Judge(fake_judge.settings()).generate(step="claims", messages=MESSAGES, schema=Claims)

    local_request, hosted_request = fake_judge.requests
    assert local_request["repeat_penalty"] == 1.0
    assert local_request["response_format"]["type"] == "json_object"
    assert "repeat_penalty" not in hosted_request
