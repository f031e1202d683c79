"""A host app that uses litellm itself: its callbacks never see the judge, and its logs stay clean under load.

Each case runs ``_host_litellm_app.py`` in a fresh process (litellm's callback lists and logging worker are
process-wide): the host serves answers through ``litellm.acompletion`` concurrently against a scripted
server on 127.0.0.1 while faithtrace scores every answer through litellm on its own event loop.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

# Each test runs a host app in a fresh interpreter (litellm's import alone is seconds).
pytestmark = pytest.mark.slow

HERE = Path(__file__).parent
HOST_MODEL = "host-model"
LOOP_ERRORS = (
    "event loop changed",
    "cannot reuse already awaited coroutine",
    "Task was destroyed but it is pending",
)


def _run(*args: str) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FAITHTRACE_", "OTEL_", "PYTEST_"))}
    proc = subprocess.run(
        [sys.executable, str(HERE / "_host_litellm_app.py"), *args],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    result["stderr"] = proc.stderr
    return result


def test_host_acompletion_under_load_logs_no_error_and_its_callbacks_see_only_its_calls() -> None:
    requests = 500
    out = _run("--requests", str(requests))
    assert out["flushed"]
    assert out["judge_requests"] >= requests  # every answer was scored through litellm
    logged = out["log_lines"] + out["stderr"].splitlines()
    for pattern in LOOP_ERRORS:
        assert not [line for line in logged if pattern in line], pattern
    callbacks = out["callbacks"]
    # The host's own calls all reach its callbacks ...
    assert callbacks["async_log_success_event"] == {HOST_MODEL: requests}
    # ... and no judge call reaches a success or failure callback. (litellm runs its pre-call hooks for
    # every request, with no per-request switch: see docs/judges.md.)
    for event, models in callbacks.items():
        if event != "log_pre_api_call":
            assert set(models) == {HOST_MODEL}, (event, models)
    assert out["no_log_on_the_wire"] == 0  # the "no-log" flag stays in litellm, not in the request body


def test_failing_judge_calls_reach_no_host_failure_callback() -> None:
    out = _run("--requests", "40", "--judge-status", "500")
    assert out["judge_requests"] >= 40
    callbacks = out["callbacks"]
    assert callbacks["async_log_success_event"] == {HOST_MODEL: 40}
    for event in ("log_failure_event", "async_log_failure_event", "failure_callback"):
        assert event not in callbacks, callbacks


def test_litellm_otel_callback_traces_no_judge_call() -> None:
    """A host with ``litellm.callbacks = ["otel"]`` and its own OTel SDK: no judge call may become a root span
    of its own there, carrying the full judge prompt."""
    out = _run("--requests", "40", "--otel")
    assert out["judge_requests"] >= 40
    assert "fake-judge" not in out["otel_span_models"], out["otel_span_models"]
    logged = out["log_lines"] + out["stderr"].splitlines()
    for pattern in LOOP_ERRORS:
        assert not [line for line in logged if pattern in line], pattern
