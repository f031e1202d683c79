"""Two real uvicorn workers, both asking for the same Prometheus port: both start and serve, one serves
``/metrics``, the other says once why it does not (a taken port never stops the app)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from _ports import free_port

# Two uvicorn worker processes, started and stopped.
pytestmark = pytest.mark.slow

HERE = Path(__file__).parent


def test_two_uvicorn_workers_with_metrics_both_serve(tmp_path: Path) -> None:
    app_port, metrics_port = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FAITHTRACE_", "OTEL_", "PYTEST_"))}
    env.update(
        APP_METRICS_PORT=str(metrics_port),
        # A judge that is not there: evaluations fail fast, and the app must not mind.
        FAITHTRACE_JUDGE_MODEL="openai/absent",
        FAITHTRACE_JUDGE_API_BASE=f"http://127.0.0.1:{free_port()}/v1",
        FAITHTRACE_JUDGE_API_KEY="x",
        FAITHTRACE_JUDGE_MAX_RETRIES="0",
    )
    log = tmp_path / "uvicorn.log"
    with log.open("w") as out:
        server = subprocess.Popen(
            [
                *(sys.executable, "-m", "uvicorn", "--app-dir", str(HERE), "_multiworker_app:app"),
                *("--workers", "2", "--host", "127.0.0.1", "--port", str(app_port)),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
    try:
        pids: set[int] = set()

        def ask() -> int | None:
            try:  # a new connection per request, so that either worker may accept it
                with httpx.Client(timeout=5) as client:
                    return int(client.get(f"http://127.0.0.1:{app_port}/ask").json()["pid"])
            except httpx.HTTPError:
                return None

        deadline = time.monotonic() + 60
        with ThreadPoolExecutor(8) as pool:
            while len(pids) < 2 and time.monotonic() < deadline and server.poll() is None:
                pids.update(pid for pid in pool.map(lambda _: ask(), range(16)) if pid is not None)
                if len(pids) < 2:
                    time.sleep(0.2)
        output = log.read_text()
        assert server.poll() is None, output
        assert len(pids) == 2, (pids, output)
        metrics = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5)
        assert metrics.status_code == 200
        assert "faithtrace_calls_total" in metrics.text
        assert 'faithtrace_exporter_setup_errors_total{faithtrace_exporter="prometheus"' in metrics.text
        # The worker that found the port taken said so once, and did not die or restart.
        assert output.count("cannot serve Prometheus metrics") == 1, output
        assert "Traceback" not in output, output
        assert output.count("Application startup complete") == 2, output
        assert "died" not in output.lower(), output
        # The evaluations fail in the background (no judge): each worker says so once, with the fix.
        deadline = time.monotonic() + 60
        while "answers are not scored" not in output and time.monotonic() < deadline:
            time.sleep(0.5)
            output = log.read_text()
        assert 1 <= output.count("failed (judge_unavailable") <= 2, output
        assert "FAITHTRACE_JUDGE_API_BASE" in output
    finally:
        server.send_signal(signal.SIGINT)
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(10)
