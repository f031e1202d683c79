# ruff: noqa: F811  (fixtures are imported into this module by name)
"""Importing and calling faithtrace leaves the host process as it was: its environment and its stderr.

Each case runs in a fresh interpreter with a clean environment (the test suite's own conftest sets
``LITELLM_LOCAL_MODEL_COST_MAP``, which would hide the very change under test), talking to the fake judge on
loopback through litellm's real client. Warnings are shown (``-W default``) and logging goes to stderr at
WARNING, so a stray "Unclosed client session", "Event loop is closed" traceback or warning fails the test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from _fake_judge import fake_judge  # noqa: F401  (fixture)

# Each test runs a host app in a fresh interpreter, reading what it printed.
pytestmark = pytest.mark.slow

SRC = str(Path(__file__).resolve().parent.parent / "src")

_PROLOGUE = """
    import json, logging, os, sys
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    BEFORE = dict(os.environ)

    def environ_changes():
        names = set(os.environ) | set(BEFORE)
        return sorted(n for n in names if os.environ.get(n) != BEFORE.get(n))
"""


def _run(body: str, *, host_env: dict[str, str] | None = None) -> tuple[dict[str, Any], str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FAITHTRACE_", "LITELLM_", "PYTEST_"))}
    env.pop("TIKTOKEN_CACHE_DIR", None)
    env.update(host_env or {}, PYTHONPATH=SRC)
    code = textwrap.dedent(_PROLOGUE) + textwrap.dedent(body)
    proc = subprocess.run(
        [sys.executable, "-W", "default", "-c", code], capture_output=True, text=True, env=env, timeout=240
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


def _judge_args(fake: Any, model: str) -> str:
    return f"model={model!r}, api_base={fake.base_url + '/v1'!r}, api_key='x', max_retries=0, max_repairs=0"


@pytest.mark.parametrize("model", ["openai/fake-judge", "hosted_vllm/fake-judge"])
def test_evaluate_in_a_loop_of_50_prints_nothing_and_changes_no_environment(
    fake_judge: Any, model: str
) -> None:
    # hosted_vllm goes through litellm's own HTTP handler and counts tokens (litellm's tokenizer import sets
    # TIKTOKEN_CACHE_DIR); openai goes through the OpenAI SDK's client.
    result, stderr = _run(
        f"""
        import faithtrace
        judge = faithtrace.JudgeSettings({_judge_args(fake_judge, model)})
        outcomes = set()
        for _ in range(50):
            result = faithtrace.evaluate("What colour is the sky?", ["The sky is blue."], "Blue is the sky.",
                                         judge=judge)
            outcomes.add(result.outcome.value)
        print(json.dumps({{"outcomes": sorted(outcomes), "changed": environ_changes()}}))
        """
    )
    assert result == {"outcomes": ["scored"], "changed": []}
    assert stderr == ""
    assert len(fake_judge.requests) >= 50


def test_the_decorator_across_reconfigurations_prints_nothing_and_changes_no_environment(
    fake_judge: Any,
) -> None:
    """Each configure() used to get a worker with its own event loop, closed on the next configure():
    litellm's logging task left on it printed "Event loop is closed" tracebacks (seen under pytest)."""
    result, stderr = _run(
        f"""
        import gc
        import faithtrace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))

        @faithtrace.trace_faithfulness
        def answer(question: str, contexts: list[str]) -> str:
            return "Blue is the sky."  # reworded: judged, not proven in code

        judge = faithtrace.JudgeSettings({_judge_args(fake_judge, "openai/fake-judge")})
        for _ in range(3):
            faithtrace.configure(judge=judge, tracer_provider=provider)
            for _ in range(5):
                answer("What colour is the sky?", ["The sky is blue."])
            assert faithtrace.flush(60)
            gc.collect()  # what a stranded loop leaves behind shows when it is collected
        report = faithtrace.shutdown(10)
        gc.collect()
        for _ in range(3):
            faithtrace.evaluate("Sky?", ["The sky is blue."], "Blue is the sky.", judge=judge)
        evaluations = [s for s in exporter.get_finished_spans() if s.name == "evaluate faithfulness"]
        print(json.dumps({{"evaluations": len(evaluations), "complete": report.complete,
                           "changed": environ_changes()}}))
        """
    )
    assert result == {"evaluations": 15, "complete": True, "changed": []}
    assert stderr == ""


def test_a_host_that_imported_litellm_first_keeps_its_choices(fake_judge: Any) -> None:
    result, stderr = _run(
        f"""
        import litellm  # the host's own import, with the host's own LITELLM_LOCAL_MODEL_COST_MAP
        import faithtrace
        judge = faithtrace.JudgeSettings({_judge_args(fake_judge, "hosted_vllm/fake-judge")})
        faithtrace.evaluate("Sky colour?", ["The sky is blue."], "Blue is the sky.", judge=judge)
        var = os.environ.get("LITELLM_LOCAL_MODEL_COST_MAP")
        print(json.dumps({{"changed": environ_changes(), "var": var}}))
        """,
        host_env={"LITELLM_LOCAL_MODEL_COST_MAP": "true"},
    )
    assert result == {"changed": [], "var": "true"}
    assert stderr == ""
