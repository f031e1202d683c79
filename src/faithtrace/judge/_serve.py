"""The local judge server process: llama-cpp-python's OpenAI-compatible app under uvicorn, on loopback.

Run as ``python -m faithtrace.judge._serve`` (a detached child started by ``ensure_local_judge``) or in the
foreground by ``faithtrace judge serve``. Beyond llama-cpp-python's own server it adds three things:

- ``GET /faithtrace/health``, answered without the model lock: ``/v1/models`` waits for the running
  inference, so under load it looks dead and a client would wrongly replace a busy server;
- an idle timeout, so a detached server shared by many processes does not hold 2+ GB forever;
- the state file that lets other processes find and reuse it, written once listening, removed on exit.
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
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
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


_TOP_K = 20  # OpenAI's maximum top_logprobs


def _top_sorted(items: Any, reverse: bool = False) -> list[Any]:
    import heapq

    return heapq.nlargest(_TOP_K, items) if reverse else sorted(items)


class _RowLogprobs:
    """Log-softmax of a 2-D logits array, computed per row when a row is read.

    llama-cpp-python normalises the logits of *every* position of a request, prompt included (n_tokens x
    152k floats, about 0.7 GB for a 1,200-token request), then reads only the completion's rows: 16 % of the
    judge's time in a py-spy profile of RAGTruth evaluations. Each row read gets exactly what the whole-array
    call gives it (the reduction is along the row either way).
    """

    def __init__(self, logits: Any, one: Callable[[Any], Any]) -> None:
        self._logits = logits
        self._one = one

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, slice):
            return _RowLogprobs(self._logits[key], self._one)
        return self._one(self._logits[key])

    def __iter__(self) -> Any:
        return (self._one(row) for row in self._logits)

    def __len__(self) -> int:
        return len(self._logits)


def eval_last_logits(llm: Any, tokens: Sequence[int]) -> None:
    """``Llama.eval`` with logits computed for the last token of each batch only, as without
    ``logits_all``, while the model still counts as keeping them all (so it returns log-probabilities).

    Why: llama-cpp-python serves log-probabilities only from a model made with ``logits_all``, which runs
    the 152k-word output layer over every prompt token and copies each row (608 KB) into ``scores``. A
    completion's log-probabilities are read from the row before each of its tokens: the prompt's last row,
    then one row per single-token decode step, all of which this computes. The prompt's other rows are left
    unwritten, so this server refuses requests for the prompt's own log-probabilities (``echo`` with
    ``logprobs``, ``refuse_prompt_logprobs``), which faithtrace never makes. A 1,200-token prompt on 2
    threads here: 20.5 s with every row, 17.0 s with the last (llama.cpp built for AVX2; 14.8 s and 12.6 s
    for AVX-512), by ``benchmarks/judge_speed.py``.
    """
    import numpy as np

    llm._ctx.kv_cache_seq_rm(-1, llm.n_tokens, -1)
    for i in range(0, len(tokens), llm.n_batch):
        batch = tokens[i : min(len(tokens), i + llm.n_batch)]
        n_past = llm.n_tokens
        n_tokens = len(batch)
        llm._batch.set_batch(batch=batch, n_past=n_past, logits_all=False)
        llm._ctx.decode(llm._batch)
        llm.input_ids[n_past : n_past + n_tokens] = batch
        if llm._logits_all:
            # With one output in the batch, llama.cpp's logits buffer holds that one row.
            row = np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(llm._n_vocab,))
            llm.scores[n_past + n_tokens - 1, :] = row
        llm.n_tokens += n_tokens
        llm._requires_eval = False


def refuse_prompt_logprobs(create: Callable[..., Any]) -> Callable[..., Any]:
    """``create`` (llama-cpp-python's ``Llama._create_completion``, which every completion path calls with
    keywords), refusing requests for the prompt's own log-probabilities: ``eval_last_logits`` does not compute
    them, and a wrong answer must not look like a right one."""

    def _create_completion(self: Any, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("echo") and kwargs.get("logprobs") is not None:
            raise ValueError(
                "this judge server does not return the prompt's log-probabilities (echo with logprobs)"
            )
        return create(self, *args, **kwargs)

    return _create_completion


def _spare_logprob_costs() -> None:
    """Three costs of llama-cpp-python's log-probabilities that buy nothing, removed in this server process
    only (ours, never a host process):

    - it sorts all 152k (logprob, token) pairs in Python for every output token to return the top few:
      ~0.25 s per token, which made a 19-token verdict reply take 6 s instead of 1.4 s here. Its module only
      ever keeps the first ``top_logprobs`` of that sorted list, so a top-20 selection is the same answer;
    - it normalises every position's logits where it reads the completion's (``_RowLogprobs``);
    - it computes every prompt position's logits where it reads the last one's (``eval_last_logits``).
    """
    import llama_cpp.llama as module

    module.sorted = _top_sorted  # type: ignore[attr-defined]
    whole = module.Llama.logits_to_logprobs

    def logits_to_logprobs(logits: Any, axis: int = -1) -> Any:
        if axis == -1 and getattr(logits, "ndim", 1) == 2:
            return _RowLogprobs(logits, whole)
        return whole(logits, axis)

    module.Llama.logits_to_logprobs = staticmethod(logits_to_logprobs)  # type: ignore[method-assign]
    module.Llama.eval = eval_last_logits  # type: ignore[method-assign,assignment]
    module.Llama._create_completion = refuse_prompt_logprobs(module.Llama._create_completion)  # type: ignore[method-assign]


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
    if logprobs:
        _spare_logprob_costs()
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
    parser = argparse.ArgumentParser(prog="python -m faithtrace.judge._serve", description=__doc__)
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
