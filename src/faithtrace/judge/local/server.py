"""The local judge server process: llama-cpp-python's OpenAI-compatible app under uvicorn, on loopback.

Run as ``python -m faithtrace.judge.local.server`` (a detached child started by ``ensure_local_judge``) or in
the foreground by ``faithtrace judge serve``. Beyond llama-cpp-python's own server it adds four things:

- ``GET /faithtrace/health``, answered without the model lock: ``/v1/models`` waits for the running
  inference, so under load it looks dead and a client would wrongly replace a busy server;
- an idle timeout, so a detached server shared by many processes does not hold 2+ GB forever;
- the state file that lets other processes find and reuse it, written once listening, removed on exit;
- ``_llama_speed``'s changes to llama-cpp-python, in this process only: the same replies, sooner.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any

HEALTH_PATH = "/faithtrace/health"
STATE_VERSION = 1

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def _log(message: str) -> None:
    # stdout is the log file for a detached server and the terminal for `faithtrace judge serve`.
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} faithtrace-judge[{os.getpid()}] {message}", flush=True)


class _ActivityTracker:
    """ASGI wrapper: counts requests in flight, remembers the last activity, answers the health probe."""

    def __init__(self, app: ASGIApp, info: dict[str, Any]) -> None:
        self.app = app
        self.info = info
        self.in_flight = 0
        self.last_activity = time.monotonic()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        self.last_activity = time.monotonic()
        if scope.get("path") == HEALTH_PATH:
            body = json.dumps({**self.info, "in_flight": self.in_flight}).encode()
            headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": body})
            return
        self.in_flight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_flight -= 1
            self.last_activity = time.monotonic()


def write_state(state_file: Path, record: dict[str, Any]) -> None:
    state_file.parent.mkdir(parents=True, exist_ok=True)
    tmp = state_file.with_name(f"{state_file.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(record, indent=1))
    os.replace(tmp, state_file)


def remove_state_if_ours(state_file: Path, pid: int) -> None:
    try:
        record = json.loads(state_file.read_text())
    except (OSError, ValueError):
        return
    if isinstance(record, dict) and record.get("pid") == pid:
        with contextlib.suppress(FileNotFoundError):
            state_file.unlink()


def run(
    *,
    model_path: str,
    alias: str,
    host: str = "127.0.0.1",
    port: int,
    n_ctx: int = 8192,
    n_threads: int | None = None,
    idle_timeout_s: float = 0.0,
    state_file: Path | None = None,
    logprobs: bool = True,
) -> None:
    """Load the model; serve until stopped (SIGTERM / Ctrl-C) or idle for ``idle_timeout_s`` (0 = never)."""
    import uvicorn
    from llama_cpp.server.app import create_app
    from llama_cpp.server.settings import ModelSettings, ServerSettings

    threads = n_threads or _cpu_count()
    # llama-cpp-python's settings are pydantic BaseSettings: unprefixed env vars such as MODEL, CACHE or PORT
    # would leak into them, and CONFIG_FILE would replace them wholesale. Only explicit values count here.
    os.environ.pop("CONFIG_FILE", None)
    env_prefix = "FAITHTRACE_LLAMA_"
    server_settings = ServerSettings(_env_prefix=env_prefix, host=host, port=port, interrupt_requests=False)
    model_settings = ModelSettings(
        _env_prefix=env_prefix,
        model=model_path,
        model_alias=alias,
        n_ctx=n_ctx,
        n_threads=threads,
        n_threads_batch=threads,
        # llama-cpp-python returns log-probabilities (faithtrace reads P(yes) per verdict from them) only when
        # it keeps logits for every position: an n_ctx x 152k array of floats, allocated lazily (only the
        # rows a request reaches are touched). FAITHTRACE_LOCAL_JUDGE_LOGPROBS=0 turns it off.
        logits_all=logprobs,
        # Pinning 1.1 GB in RAM is not ours to decide on a user's machine; the page cache serves it well.
        use_mlock=False,
        verbose=False,
    )
    _log(f"loading {model_path} (n_ctx={n_ctx}, threads={threads})")
    t0 = time.perf_counter()
    # Here, not at import: ``_server`` imports this module in host processes, which must stay unpatched.
    from faithtrace.judge.local import llama_speed

    llama_speed.install()
    app = create_app(server_settings=server_settings, model_settings=[model_settings])
    _log(f"model loaded in {time.perf_counter() - t0:.1f} s")
    started_at = time.time()
    info: dict[str, Any] = {"service": "faithtrace-local-judge", "alias": alias, "pid": os.getpid()}
    tracker = _ActivityTracker(app, info)
    # A bounded graceful shutdown: a stop must not wait for a long generation whose client is long gone.
    config = uvicorn.Config(
        tracker,
        host=host,
        port=port,
        log_level="warning",
        access_log=False,
        lifespan="off",
        timeout_graceful_shutdown=5,
    )
    server = uvicorn.Server(config)

    def watch() -> None:
        # Registers the server once it listens, then enforces the idle timeout.
        while not server.started and not server.should_exit:
            time.sleep(0.05)
        if server.should_exit:
            return
        _log(f"listening on http://{host}:{port}/v1 as model {alias!r}")
        if state_file is not None:
            write_state(
                state_file,
                {
                    "version": STATE_VERSION,
                    "pid": os.getpid(),
                    "host": host,
                    "port": port,
                    "model_path": model_path,
                    "alias": alias,
                    "started_at": started_at,
                    "idle_timeout_s": idle_timeout_s,
                    "n_ctx": n_ctx,
                    "n_threads": threads,
                },
            )
        if idle_timeout_s <= 0:
            return
        step = max(0.05, min(5.0, idle_timeout_s / 4))
        while not server.should_exit:
            time.sleep(step)
            idle = time.monotonic() - tracker.last_activity
            if tracker.in_flight == 0 and idle >= idle_timeout_s:
                _log(f"idle for {idle:.0f} s (timeout {idle_timeout_s:g} s); shutting down")
                server.should_exit = True

    # uvicorn re-raises the SIGTERM it caught once it has shut down; with the default handler that would kill
    # the process before it unregisters itself, leaving a stale state file behind.
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    watcher = threading.Thread(target=watch, name="faithtrace-judge-watch", daemon=True)
    watcher.start()
    try:
        server.run()
    finally:
        server.should_exit = True
        if state_file is not None:
            remove_state_if_ours(state_file, os.getpid())
        _log("stopped")


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(0)


def _cpu_count() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m faithtrace.judge.local.server", description=__doc__)
    parser.add_argument("--model", required=True)
    parser.add_argument("--alias", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--n-ctx", type=int, default=8192)
    parser.add_argument("--n-threads", type=int, default=0)
    parser.add_argument("--idle-timeout", type=float, default=0.0)
    parser.add_argument("--state-file", type=Path, default=None)
    parser.add_argument("--nice", type=int, default=0)
    parser.add_argument("--no-logprobs", action="store_true")
    args = parser.parse_args(argv)
    if args.nice > 0:
        # Judging is background work: the host application's own requests must win the CPU.
        with contextlib.suppress(OSError):
            os.nice(args.nice)
    try:
        run(
            model_path=args.model,
            alias=args.alias,
            host=args.host,
            port=args.port,
            n_ctx=args.n_ctx,
            logprobs=not args.no_logprobs,
            n_threads=args.n_threads or None,
            idle_timeout_s=args.idle_timeout,
            state_file=args.state_file,
        )
    except KeyboardInterrupt:
        return 0
    except Exception as exc:
        _log(f"failed: {type(exc).__name__}: {exc}")
        raise
    return 0


if __name__ == "__main__":
    sys.exit(main())
