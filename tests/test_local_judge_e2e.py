"""End to end against the real embedded judge: the model, llama.cpp's server, litellm and our parsing path."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import pytest
from pydantic import BaseModel

from faithtrace.judge import Judge, JudgeSettings
from faithtrace.judge.local import process as _server
from faithtrace.judge.local.endpoint import (
    LOCAL_MODEL_ALIAS,
    LocalEndpoint,
    ensure_local_judge,
    local_judge_status,
    stop_local_judge,
)
from faithtrace.judge.local.model import ensure_bundled_model

pytestmark = pytest.mark.judge


class Verdict(BaseModel):
    verdict: Literal["yes", "no", "idk"]


def _messages(context: str, claim: str) -> list[dict[str, str]]:
    return [
        {
            "role": "system",
            "content": "Decide whether the claim is supported by the context. Answer with a JSON object "
            '{"verdict": "yes" | "no" | "idk"}: yes = the context states it, no = the context contradicts '
            "it, idk = the context does not say.",
        },
        {"role": "user", "content": f"<context>\n{context}\n</context>\n<claim>\n{claim}\n</claim>"},
    ]


def _our_server_pids(state_file: Path) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            args = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if _server.SERVE_MODULE.encode() in args and str(state_file).encode() in args:
            pids.append(int(entry.name))
    return pids


async def test_real_judge_returns_a_parsed_verdict(local_judge: LocalEndpoint) -> None:
    judge = Judge(JudgeSettings())
    reply = await judge.generate(
        step="verdicts",
        messages=_messages(
            "The Eiffel Tower is in Paris. It was completed in 1889.",
            "The Eiffel Tower was completed in 1889.",
        ),
        schema=Verdict,
        max_tokens=20,
    )
    assert reply.value.verdict == "yes"
    assert judge.model_name == local_judge.display_model
    # On a busy machine earlier attempts may time out and be retried; the last one is the answer.
    call = reply.calls[-1]
    assert call.error_type is None
    assert call.input_tokens is not None
    assert call.input_tokens > 0
    assert call.output_tokens is not None
    assert call.output_tokens > 0
    assert call.cost_usd is None  # a local model has no price; never a made-up 0


def test_second_call_and_second_process_reuse_the_server(local_judge: LocalEndpoint) -> None:
    assert ensure_local_judge() == local_judge
    status = local_judge_status()
    assert status is not None
    assert status["healthy"] is True
    assert status["api_base"] == local_judge.api_base
    code = "from faithtrace.judge.local.endpoint import ensure_local_judge as e; print(e().api_base)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    ).stdout
    assert out.strip() == local_judge.api_base
    assert _our_server_pids(_server.paths().state) == [status["pid"]]


@pytest.fixture
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A separate cache dir (so a separate server) serving the already assembled bundled model."""
    model = ensure_bundled_model()
    monkeypatch.setenv("FAITHTRACE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("FAITHTRACE_LOCAL_MODEL_PATH", str(model))
    try:
        yield tmp_path / "cache"
    finally:
        stop_local_judge()  # also on failure: never leave a 2 GB process behind


def test_start_status_and_stop_of_a_private_server(
    private_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # llama-cpp-python's settings read unprefixed env vars; a host that happens to set N_CTX or CACHE must
    # still get a working judge with our settings.
    monkeypatch.setenv("N_CTX", "1")
    monkeypatch.setenv("CACHE", "not-a-bool")
    progress: list[str] = []
    endpoint = ensure_local_judge(progress=progress.append)
    assert any("starting the local judge" in m for m in progress)
    assert any("ready" in m for m in progress)
    assert endpoint.model == f"openai/{LOCAL_MODEL_ALIAS}"
    assert endpoint.api_base.startswith("http://127.0.0.1:")
    status = local_judge_status()
    assert status is not None
    assert status["healthy"] is True
    assert status["state_file"].startswith(str(private_cache))
    assert status["n_ctx"] == 8192
    pid = status["pid"]
    assert stop_local_judge() is True
    assert f"faithtrace-judge[{pid}] stopped" in Path(status["log"]).read_text()  # a clean shutdown
    assert not _server.pid_alive(pid) or _server._is_zombie(pid)
    assert local_judge_status() is None
    assert stop_local_judge() is False


def test_detached_server_stops_by_itself_when_idle(tmp_path: Path) -> None:
    model = ensure_bundled_model()
    state = tmp_path / "state.json"
    port = _server.free_port()
    cmd = [
        sys.executable, "-m", _server.SERVE_MODULE, "--model", str(model), "--alias", LOCAL_MODEL_ALIAS,
        "--port", str(port), "--idle-timeout", "1", "--state-file", str(state), "--n-ctx", "1024",
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=_server.server_env())
    try:
        deadline = time.monotonic() + 120
        while not state.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert state.exists(), "the server never registered itself"
        record = json.loads(state.read_text())
        assert record["pid"] == proc.pid
        assert record["port"] == port
        # Nobody calls it: it must exit cleanly on its own and unregister.
        assert proc.wait(timeout=120) == 0
        assert not state.exists()
        log = proc.stdout.read().decode() if proc.stdout else ""
        assert "idle for" in log
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdout:
            proc.stdout.close()


def test_processes_starting_at_once_share_one_server(private_cache: Path) -> None:
    # Like gunicorn workers booting together: each asks for the judge, one server must start.
    code = "from faithtrace.judge.local.endpoint import ensure_local_judge as e; print(e().api_base)"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(3)
    ]
    outputs = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=300)
            assert proc.returncode == 0, err
            outputs.append(out.strip())
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert len(set(outputs)) == 1
    status = local_judge_status()
    assert status is not None
    assert outputs[0] == status["api_base"]
    assert _our_server_pids(_server.paths().state) == [status["pid"]]


def test_foreground_server_is_reused_and_stops_on_ctrl_c(private_cache: Path) -> None:
    code = "from faithtrace.judge.local.endpoint import serve_foreground; serve_foreground()"
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    state = _server.paths().state
    try:
        deadline = time.monotonic() + 120
        while not state.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert state.exists(), "the foreground server never registered itself"
        # Other processes use it rather than starting their own.
        endpoint = ensure_local_judge()
        status = local_judge_status()
        assert status is not None
        assert status["pid"] == proc.pid
        assert endpoint.api_base == status["api_base"]
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0
        assert not state.exists()
        output = proc.stdout.read().decode() if proc.stdout else ""
        assert "listening on http://127.0.0.1:" in output
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdout:
            proc.stdout.close()
