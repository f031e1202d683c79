"""A real Arize Phoenix server for end-to-end trace tests, and helpers to read spans back from it.

Phoenix lives in its own virtualenv (``make backends``) because it pins its own OpenTelemetry and pandas
versions. Its OTLP/HTTP endpoint and UI bind 127.0.0.1; its OTLP gRPC server always binds ``[::]``, which is
why ``make test`` runs the suite in a loopback-only network namespace (tests/isolated.sh).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from _ports import free_port

PHOENIX_VENV = Path.home() / ".cache" / "faithtrace" / "phoenix-venv-20.26.1"
STARTUP_TIMEOUT_S = 120.0  # 11-15 s on an idle 2-core machine; much more while the local judge is busy


def find_phoenix() -> str | None:
    """The ``phoenix`` executable: $FAITHTRACE_PHOENIX_BIN, then the ``make backends`` venv, then PATH."""
    configured = os.environ.get("FAITHTRACE_PHOENIX_BIN")
    if configured:
        return configured if os.access(configured, os.X_OK) else None
    default = PHOENIX_VENV / "bin" / "phoenix"
    if os.access(default, os.X_OK):
        return str(default)
    return shutil.which("phoenix")


def _grpc_port_free(port: int) -> bool:
    # Phoenix binds gRPC on [::], so the port must also be free on the IPv6 wildcard (where there is IPv6).
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
        s.bind(("::", port))
        return True
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("0.0.0.0", port))
        return True
    return False


def _free_grpc_port(avoid: int) -> int:
    for _ in range(50):
        port = free_port()
        if port != avoid and _grpc_port_free(port):
            return port
    raise RuntimeError("no free port for Phoenix's gRPC server")


@dataclass
class PhoenixServer:
    http_url: str  # e.g. http://127.0.0.1:43111 (UI, REST API and OTLP/HTTP at /v1/traces)
    grpc_endpoint: str  # e.g. 127.0.0.1:43112 (OTLP/gRPC, insecure)
    process: subprocess.Popen[bytes]
    log_path: Path
    startup_s: float

    @property
    def otlp_http_traces_url(self) -> str:
        return f"{self.http_url}/v1/traces"

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def get_spans(self, project: str, **params: Any) -> list[dict[str, Any]] | None:
        """One page of spans of ``project`` (newest first), or None while the project does not exist yet."""
        with httpx.Client(base_url=self.http_url, trust_env=False, timeout=10.0) as client:
            response = client.get(f"/v1/projects/{project}/spans", params={"limit": 1000, **params})
        if response.status_code == 404:  # the project appears only once its first span has been stored
            return None
        response.raise_for_status()
        data: list[dict[str, Any]] = response.json()["data"]
        return data

    def wait_for_spans(
        self,
        project: str,
        until: Callable[[list[dict[str, Any]]], bool],
        timeout: float = 30.0,
    ) -> list[dict[str, Any]]:
        """Poll until ``until(spans)`` holds; ingestion is asynchronous. Fails with what Phoenix has."""
        deadline = time.monotonic() + timeout
        spans: list[dict[str, Any]] | None = None
        while True:
            spans = self.get_spans(project)
            if spans is not None and until(spans):
                return spans
            if time.monotonic() > deadline:
                names = None if spans is None else [s["name"] for s in spans]
                pytest.fail(
                    f"Phoenix did not show the expected spans in project {project!r} within {timeout}s; "
                    f"it has: {names}\n--- phoenix log ---\n{self.log_tail()}"
                )
            time.sleep(0.25)


def _finished(log_path: Path) -> bool:
    """Whether uvicorn says its server process finished (the log's tail: the log is megabytes long)."""
    try:
        with log_path.open("rb") as log:
            log.seek(max(0, log_path.stat().st_size - 4096))
            return b"Finished server process" in log.read()
    except OSError:
        return False


def _stop(process: subprocess.Popen[bytes], log_path: Path) -> None:
    if process.poll() is not None:
        return
    # Phoenix runs uvicorn in-process; SIGINT is its graceful stop (its lifespan closes the database and its
    # background tasks). Once uvicorn reports the server process finished, what is left is the interpreter's
    # own teardown of a ~450 MB heap, 10 s and more on a busy machine, which nothing needs: it is cut short.
    # Its own session only, never a group kill of anything else.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGINT)
    deadline = time.monotonic() + 15
    while process.poll() is None and not _finished(log_path) and time.monotonic() < deadline:
        time.sleep(0.1)
    try:
        process.wait(timeout=0.5)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)


@pytest.fixture(scope="session")
def phoenix_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PhoenixServer]:
    """Start Phoenix on free loopback ports with its data in a temp dir; stop it at the end of the session."""
    configured = os.environ.get("FAITHTRACE_PHOENIX_BIN")
    if configured and not os.access(configured, os.X_OK):
        pytest.fail(f"FAITHTRACE_PHOENIX_BIN={configured} is not an executable file")
    binary = find_phoenix()
    if binary is None:
        message = (
            "Arize Phoenix not found: run `make backends` (installs it into "
            f"{PHOENIX_VENV}) or set FAITHTRACE_PHOENIX_BIN to its `phoenix` executable"
        )
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(message)
        pytest.skip(message)

    workdir = tmp_path_factory.mktemp("phoenix")
    http_port = free_port()
    grpc_port = _free_grpc_port(avoid=http_port)
    env = {
        **os.environ,
        "PHOENIX_HOST": "127.0.0.1",
        "PHOENIX_PORT": str(http_port),
        "PHOENIX_GRPC_PORT": str(grpc_port),
        "PHOENIX_WORKING_DIR": str(workdir / "data"),
        "PHOENIX_TELEMETRY_ENABLED": "false",
        "PHOENIX_ALLOW_EXTERNAL_RESOURCES": "false",
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
    }
    # Our own OTel settings must not leak into Phoenix (it can trace itself).
    for key in [k for k in env if k.startswith("OTEL_")]:
        del env[key]
    log_path = workdir / "phoenix.log"
    started = time.monotonic()
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [binary, "serve"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    server = PhoenixServer(
        http_url=f"http://127.0.0.1:{http_port}",
        grpc_endpoint=f"127.0.0.1:{grpc_port}",
        process=process,
        log_path=log_path,
        startup_s=0.0,
    )
    try:
        deadline = started + STARTUP_TIMEOUT_S
        with httpx.Client(trust_env=False, timeout=2.0) as client:
            while True:
                if process.poll() is not None:
                    pytest.fail(f"Phoenix exited with {process.returncode}:\n{server.log_tail()}")
                with contextlib.suppress(httpx.HTTPError):
                    if client.get(f"{server.http_url}/healthz").status_code == 200:
                        break
                if time.monotonic() > deadline:
                    pytest.fail(f"Phoenix was not healthy after {STARTUP_TIMEOUT_S}s:\n{server.log_tail()}")
                time.sleep(0.1)
        server.startup_s = time.monotonic() - started
        yield server
    finally:
        _stop(process, log_path)
