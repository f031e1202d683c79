"""The embedded local judge: Qwen2.5-Coder-1.5B-Instruct (Q4_K_M GGUF) behind llama-cpp-python's server.

It is what faithtrace uses when no judge is configured. ``ensure_local_judge()`` blocks until a healthy
server listens on 127.0.0.1 and returns how to reach it through litellm. The first call on a machine joins
the model from its PyPI parts and verifies its sha256 (once, ~1.1 GB); each later call reuses the server that
is already running, whichever process started it. The server is a detached process that stops by itself
after ``FAITHTRACE_LOCAL_JUDGE_IDLE_TIMEOUT`` seconds (default 900, 0 = never) without any request and with
no live process that uses it (a using process keeps it alive with a light heartbeat).

Its environment variables (``FAITHTRACE_CACHE_DIR``, ``FAITHTRACE_LOCAL_MODEL_PATH``,
``FAITHTRACE_LOCAL_JUDGE_*``) are the ``local_judge`` group of the option table (``faithtrace._config``).
"""

from __future__ import annotations

import importlib.util
import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from faithtrace._common.errors import LocalJudgeError
from faithtrace._config import options
from faithtrace.judge.local import model as _model
from faithtrace.judge.local import process as _server

logger = logging.getLogger("faithtrace")

LOCAL_MODEL_ALIAS = "faithtrace-local"
_BUNDLED_DISPLAY = "qwen2.5-coder-1.5b-instruct-q4_k_m"
_RUNTIME_MODULES = (
    "llama_cpp",
    "uvicorn",
    "fastapi",
    "sse_starlette",
    "starlette_context",
    "pydantic_settings",
)


@dataclass(frozen=True)
class LocalEndpoint:
    model: str  # litellm model string, e.g. "openai/faithtrace-local"
    api_base: str  # e.g. "http://127.0.0.1:43117/v1"
    api_key: str  # any non-empty string; the server does not check it
    display_model: (
        str  # what results and telemetry show, e.g. "faithtrace-local/qwen2.5-coder-1.5b-instruct-q4_k_m"
    )


_lock = threading.Lock()


def ensure_local_judge(progress: Callable[[str], None] | None = None) -> LocalEndpoint:
    """Start (or find) the local judge server and return its endpoint. Blocking; safe across threads and
    processes.

    Args:
        progress: called with a human-readable line at each slow stage (assembling, starting, ready), in
            addition to INFO messages on the ``faithtrace`` logger.

    Raises:
        LocalJudgeError: the runtime or model is not installed, the model is damaged, or the server did not
            start; the message says how to fix it and includes the end of the server's log.
    """
    with _lock:
        _check_runtime()
        idle = idle_timeout_s()
        try:
            running = _server.ensure_running(
                alias=LOCAL_MODEL_ALIAS,
                progress=progress,
                idle_timeout_s=idle,
                start_timeout_s=_start_timeout_s(),
            )
        except OSError as exc:  # e.g. a read-only home directory
            raise LocalJudgeError(
                f"the local judge could not use its cache directory {_model.cache_root()}: {exc}. Set "
                "FAITHTRACE_CACHE_DIR to a writable directory."
            ) from exc
        _warn_if_other_model(running.model_path)
        bypass_proxy_for_loopback()
        _heartbeat.keep_alive(running.port, running.pid, idle)
        return LocalEndpoint(
            model=f"openai/{LOCAL_MODEL_ALIAS}",
            api_base=f"http://127.0.0.1:{running.port}/v1",
            api_key="sk-local",
            display_model=_display_model(running.model_path),
        )


def stop_local_judge() -> bool:
    """Stop the machine's local judge server (whoever started it). True if one was running."""
    with _lock:
        _heartbeat.stop()
        stopped = _server.stop()
    if stopped:
        logger.info("faithtrace: local judge stopped")
    return stopped


def local_judge_status() -> dict[str, Any] | None:
    """What the state file says about the local judge, checked: None when none is registered."""
    p = _server.paths()
    record = _server.read_state(p)
    if record is None:
        return None
    pid, port = int(record["pid"]), int(record["port"])
    alive = _server.pid_alive(pid) and _server.is_our_server(pid)
    healthy = alive and _server.probe(port, str(record.get("alias", LOCAL_MODEL_ALIAS)), pid)
    started_at = float(record.get("started_at", 0.0))
    return {
        "pid": pid,
        "port": port,
        "api_base": f"http://127.0.0.1:{port}/v1",
        "model": f"openai/{record.get('alias', LOCAL_MODEL_ALIAS)}",
        "model_path": record.get("model_path"),
        "started_at": started_at,
        "uptime_s": max(0.0, time.time() - started_at) if alive else None,
        "idle_timeout_s": record.get("idle_timeout_s"),
        "n_ctx": record.get("n_ctx"),
        "n_threads": record.get("n_threads"),
        "rss_bytes": _rss_bytes(pid) if alive else None,
        "alive": alive,
        "healthy": healthy,
        "state_file": str(p.state),
        "log": str(p.log),
    }


def serve_foreground(host: str = "127.0.0.1", port: int | None = None) -> None:
    """Run the local judge in this process until Ctrl-C (``faithtrace judge serve``); no idle timeout.

    While it runs, other processes on this machine use it instead of starting their own, unless one is
    already running.
    """
    _check_runtime()

    def show(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    model = _model.resolve_model(progress=show)
    p = _server.paths()
    listen_port = port if port is not None else _server.free_port()
    state_file: Path | None = None
    if host in ("127.0.0.1", "localhost", "0.0.0.0"):
        running = _server.healthy_from_state(p, LOCAL_MODEL_ALIAS)
        if running is None:
            state_file = p.state
        else:
            show(f"a background local judge already runs on 127.0.0.1:{running.port} (pid {running.pid}); "
                 "this one will not replace it for other processes")  # fmt: skip
    if host not in ("127.0.0.1", "localhost", "::1"):
        logger.warning("faithtrace: the local judge listens on %s without authentication", host)
    show(f"starting the local judge on {host}:{listen_port} (model {model.path})…")
    try:
        _serve_run(model, host, listen_port, state_file)
    except KeyboardInterrupt:  # Ctrl-C is the normal way to stop it
        show("local judge stopped")


def _serve_run(model: _model.ModelFile, host: str, port: int, state_file: Path | None) -> None:
    from faithtrace.judge.local.server import run

    run(
        model_path=str(model.path),
        alias=LOCAL_MODEL_ALIAS,
        host=host,
        port=port,
        n_ctx=_server.n_ctx(),
        n_threads=_server.n_threads(),
        idle_timeout_s=0.0,
        state_file=state_file,
    )


# --- helpers -----------------------------------------------------------------------------------------------
def idle_timeout_s() -> float:
    seconds: float = options.read("local_judge.idle_timeout_s")
    return seconds


def _start_timeout_s() -> float:
    seconds: float = options.read("local_judge.start_timeout_s")
    return seconds


def _display_model(model_path: str) -> str:
    name = Path(model_path).name
    if name == _model.MODEL_FILENAME:
        return f"{LOCAL_MODEL_ALIAS}/{_BUNDLED_DISPLAY}"
    return f"{LOCAL_MODEL_ALIAS}/{Path(model_path).stem.lower()}"


_PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")


def bypass_proxy_for_loopback() -> None:
    """Add 127.0.0.1 and localhost to NO_PROXY when a proxy is configured.

    httpx (under litellm and openai) sends even loopback requests to ``HTTP_PROXY`` unless ``NO_PROXY`` says
    otherwise, so behind a corporate proxy the local judge would be unreachable. Loopback is never meant
    for a proxy, so this change to the environment is safe for the rest of the process.
    """
    if not any(os.environ.get(v) for v in _PROXY_VARS):
        return
    current = os.environ.get("NO_PROXY") or os.environ.get("no_proxy") or ""
    merged = _server.with_loopback(current)
    if merged != current:
        os.environ["NO_PROXY"] = os.environ["no_proxy"] = merged
        logger.debug("faithtrace: NO_PROXY=%s so that the local judge is reached directly", merged)


_warned_model: set[str] = set()


def _warn_if_other_model(serving: str) -> None:
    # The server is shared per machine: one started with another model (FAITHTRACE_LOCAL_MODEL_PATH set in
    # some other process) is reused rather than killed under its users, but this process must be told.
    wanted = options.read("local_judge.model_path") or ""
    wanted_path = Path(wanted).expanduser().resolve() if wanted else None
    if wanted_path is None and Path(serving).name == _model.MODEL_FILENAME:
        return
    if wanted_path is not None and Path(serving) == wanted_path:
        return
    if serving not in _warned_model:
        _warned_model.add(serving)
        logger.warning(
            "faithtrace: the running local judge serves %s, not %s; run `faithtrace judge stop` to switch",
            serving,
            wanted_path or "the bundled model",
        )


def _check_runtime() -> None:
    missing = [m for m in _RUNTIME_MODULES if importlib.util.find_spec(m) is None]
    if missing:
        raise LocalJudgeError(
            f"the embedded local judge needs llama-cpp-python's server ({', '.join(missing)} not installed). "
            f"Install it with: {_model.INSTALL_HINT}  — or configure another judge with "
            "FAITHTRACE_JUDGE_MODEL (any litellm model)."
        )


def _rss_bytes(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


class _Heartbeat:
    """Keeps the shared server from idling out while this process may still use it.

    Judges cache the endpoint, so a server that stopped under a live client would turn every later
    evaluation into a connection error; a probe every few minutes is the cheap way to prevent that.
    """

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._target: tuple[int, int] = (0, 0)

    def keep_alive(self, port: int, pid: int, idle_timeout: float) -> None:
        self._target = (port, pid)
        if idle_timeout <= 0:
            return
        # is_alive() is False in a forked child, so each gunicorn worker gets its own heartbeat.
        if self._thread is not None and self._thread.is_alive():
            return
        interval = max(1.0, min(120.0, idle_timeout / 3))
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, args=(self._stop, interval), name="faithtrace-judge-heartbeat", daemon=True
        )
        self._thread.start()

    def _run(self, stop: threading.Event, interval: float) -> None:
        while not stop.wait(interval):
            port, pid = self._target
            if not _server.probe(port, LOCAL_MODEL_ALIAS, pid, timeout_s=5.0):
                logger.debug("faithtrace: local judge heartbeat to port %d got no answer", port)

    def stop(self) -> None:
        self._stop.set()
        self._thread = None


_heartbeat = _Heartbeat()


def _reset_after_fork() -> None:
    global _lock
    _lock = threading.Lock()  # a lock held by another thread at fork time would never be released


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_after_fork)
