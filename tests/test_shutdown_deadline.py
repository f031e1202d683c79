"""shutdown(timeout) keeps its deadline with everything stuck at once, and says what it lost.

Each case runs in a fresh interpreter: faithtrace sets up the global OTel providers itself there (an OTLP
endpoint and no providers of the app's), which can be done once per process.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

# Fresh interpreters whose shutdown deadlines must run out.
pytestmark = pytest.mark.slow

SRC = str(Path(__file__).resolve().parent.parent / "src")


@pytest.fixture
def hanging_judge() -> Iterator[str]:
    """A loopback server that accepts connections, reads the request and never answers."""
    server = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            held.append(conn)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}/v1"
    finally:
        stop.set()
        thread.join(2)
        for conn in held:
            conn.close()
        server.close()


def _closed_port() -> int:
    """A loopback port with nothing listening (connections are refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# What a case checks ends with its printed report. The interpreter's exit after it is not under test: the
# app's own provider, shut down by the SDK's exit handler, would retry the closed port for its 10 s export
# timeout (the app's, not faithtrace's).
_EXIT_NOW = "\nimport os as _os, sys as _sys\n_sys.stdout.flush()\n_sys.stderr.flush()\n_os._exit(0)\n"


def _run(code: str, env: dict[str, str], exit_now: bool = True) -> tuple[dict[str, object], str]:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("FAITHTRACE_", "OTEL_", "PYTEST_"))}
    full_env.update(env, PYTHONPATH=SRC)
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code) + (_EXIT_NOW if exit_now else "")],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    last = proc.stdout.strip().splitlines()[-1]
    return json.loads(last), proc.stderr


_APP = """
    import json, logging, time
    import faithtrace
    from faithtrace import JudgeSettings, WorkerOptions, trace_faithfulness

    logging.basicConfig(level=logging.WARNING)
    faithtrace.configure(
        judge=JudgeSettings(model="openai/hung", api_base=JUDGE, api_key="x", timeout_s=120, max_retries=0,
                            max_concurrency=2),
        worker=WorkerOptions(queue_size=3),
        otlp_endpoint=ENDPOINT,
    )

    @trace_faithfulness
    def answer(question: str, contexts: list[str]) -> str:
        return "The refund window is 30 days and shipping to Mars is free."  # the judge must decide

    for _ in range(20):
        answer("How long is the refund window?", ["Refunds are accepted within 30 days."])
    faithtrace.flush(3.0, evaluations=False)  # every span ended and two evaluations waiting on the judge
    time.sleep(1.0)
"""


@pytest.mark.parametrize("timeout", [0.5, 2.0])
def test_shutdown_keeps_its_deadline_with_exporter_down_judge_hanging_and_queue_full(
    hanging_judge: str, timeout: float
) -> None:
    code = (
        f"JUDGE = {hanging_judge!r}\nENDPOINT = 'http://127.0.0.1:{_closed_port()}'\n"
        + textwrap.dedent(_APP)
        + f"""
started = time.monotonic()
report = faithtrace.shutdown({timeout})
elapsed = time.monotonic() - started
from faithtrace._telemetry.metrics import _all_stats
(stats,) = _all_stats()
print(json.dumps({{"elapsed": elapsed, "abandoned": report.abandoned, "cancelled": report.cancelled,
                  "dropped": report.dropped, "unfinished_spans": report.unfinished_spans,
                  "flushed": report.telemetry_flushed, "complete": report.complete,
                  "counted_dropped": stats.outcomes.get(("dropped", None), 0)}}))
"""
    )
    result, stderr = _run(code, {})
    assert float(result["elapsed"]) <= timeout + 1.0, result  # type: ignore[arg-type]
    # Two evaluations hung on the judge (cancelled), one to three waited in the queue (abandoned; how many
    # depends on when the dispatcher started the first two), the other calls found the queue full.
    cancelled, abandoned = result["cancelled"], result["abandoned"]
    assert cancelled == 2
    assert 1 <= abandoned <= 3  # type: ignore[operator]
    assert result["dropped"] == cancelled + abandoned  # type: ignore[operator]
    assert result["counted_dropped"] == 20  # every call is accounted for in the dropped count
    assert result["unfinished_spans"] == 0
    assert result["flushed"] is False  # the OTLP endpoint is down
    assert result["complete"] is False
    assert f"lost {abandoned} queued and 2 running evaluation(s)" in stderr


def test_the_metrics_exporter_cannot_hold_shutdown_past_its_deadline() -> None:
    """Nothing queued, only the OTLP endpoint down: the metrics exporter's retries (27 s when unbounded) must
    not hold a 5 s shutdown."""
    code = f"""
import json, time
import faithtrace
from faithtrace import trace_faithfulness
faithtrace.configure(judge="openai/unused", otlp_endpoint="http://127.0.0.1:{_closed_port()}")
faithtrace.flush(0.5)
started = time.monotonic()
report = faithtrace.shutdown(1.0)
print(json.dumps({{"elapsed": time.monotonic() - started, "dropped": report.dropped}}))
"""
    result, _stderr = _run(code, {})
    assert float(result["elapsed"]) <= 2.0, result  # type: ignore[arg-type]
    assert result["dropped"] == 0


def test_the_apps_own_providers_are_flushed_not_shut_down(hanging_judge: str) -> None:
    code = f"""
import json, time
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
import faithtrace
from faithtrace import JudgeSettings, trace_faithfulness

memory = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint="http://127.0.0.1:{_closed_port()}/v1/traces")))
provider.add_span_processor(SimpleSpanProcessor(memory))
trace.set_tracer_provider(provider)
faithtrace.configure(judge=JudgeSettings(model="openai/hung", api_base={hanging_judge!r}, api_key="x"))

@trace_faithfulness
def answer(question: str, contexts: list[str]) -> str:
    return "The shop opens at nine on Sundays and sells bicycles."  # the judge must decide

answer("Is it open?", ["It is open."])
faithtrace.flush(2.0, evaluations=False)
started = time.monotonic()
report = faithtrace.shutdown(1.0)
elapsed = time.monotonic() - started
with trace.get_tracer("app").start_as_current_span("after-shutdown"):
    pass
names = [s.name for s in memory.get_finished_spans()]
print(json.dumps({{"elapsed": elapsed, "dropped": report.dropped, "names": names}}))
"""
    result, _stderr = _run(code, {})
    assert float(result["elapsed"]) <= 2.0, result  # type: ignore[arg-type]
    assert result["dropped"] == 1, result  # queued, or running on the hung judge, depending on timing
    assert "after-shutdown" in result["names"]  # the app's provider still works: it was not shut down


def test_the_hosts_exit_does_not_wait_for_a_warm_up_that_shutdown_abandoned(hanging_judge: str) -> None:
    """shutdown() abandons an evaluation whose judge warm-up (litellm's import: seconds of CPU) is still
    running. The host's exit must not wait for it: ``asyncio.to_thread``'s executor threads are joined before
    the exit handlers run, so the handler below would find the import finished (seconds past the deadline)."""
    code = f"""
import atexit, json, os, sys, time
import faithtrace
from faithtrace import JudgeSettings, trace_faithfulness

def importing() -> bool:
    return bool(getattr(getattr(sys.modules.get("litellm"), "__spec__", None), "_initializing", False))

def at_exit() -> None:  # registered first, so it runs after faithtrace's own exit handlers
    print(json.dumps({{"importing_at_shutdown": at_shutdown, "importing_at_exit": importing(),
                      "dropped": report.dropped}}))
    sys.stdout.flush()
    os._exit(0)  # what follows (the providers' exit handlers retrying a closed port) is not under test

atexit.register(at_exit)
faithtrace.configure(judge=JudgeSettings(model="openai/hung", api_base={hanging_judge!r}, api_key="x"),
                     otlp_endpoint="http://127.0.0.1:{_closed_port()}")

@trace_faithfulness
def answer(question: str, contexts: list[str]) -> str:
    return "The shop opens at nine on Sundays and sells bicycles."

answer("Is it open?", ["It is open."])
deadline = time.monotonic() + 60
while "litellm" not in sys.modules and time.monotonic() < deadline:
    time.sleep(0.005)
at_shutdown = importing()
report = faithtrace.shutdown(0.5)
"""
    result, _stderr = _run(code, {}, exit_now=False)
    assert result["importing_at_shutdown"] is True, result  # the warm-up was under way at shutdown()
    assert result["dropped"] == 1, result
    assert result["importing_at_exit"] is True, result  # and the exit went on without waiting for it
