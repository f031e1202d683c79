"""faithtrace's own event loop: one per process, on a daemon thread, shared by the worker and ``evaluate()``.

litellm keeps per-loop state (HTTP clients, its logging worker's task). A loop created and closed per call or
per configuration strands that state: every closed loop left an "Event loop is closed" traceback or an
"Unclosed client session" warning on the host's stderr. One loop that lives as long as the process, never
closed, keeps litellm's state valid and the host's logs clean. It is started on first use, and again in a
forked child (the parent's loop thread does not exist there).
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

_loop: asyncio.AbstractEventLoop | None = None
_thread: threading.Thread | None = None
_lock = threading.Lock()


def _run(loop: asyncio.AbstractEventLoop) -> None:
    asyncio.set_event_loop(loop)
    loop.run_forever()


def get() -> asyncio.AbstractEventLoop:
    """The running shared loop, started on first use."""
    global _loop, _thread
    loop = _loop
    if loop is not None:
        return loop
    with _lock:
        if _loop is None:
            loop = asyncio.new_event_loop()
            _thread = threading.Thread(target=_run, args=(loop,), name="faithtrace-loop", daemon=True)
            _thread.start()
            _loop = loop
        return _loop


def on_loop_thread() -> bool:
    return _thread is not None and threading.current_thread() is _thread


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` on the shared loop and wait for its result (from any thread but the loop's own)."""
    if on_loop_thread():  # pragma: no cover - nothing of ours blocks on the loop from the loop itself
        raise RuntimeError("faithtrace: run() called on faithtrace's own event loop")
    return asyncio.run_coroutine_threadsafe(coro, get()).result()


def _after_fork_in_child() -> None:
    global _loop, _thread, _lock
    _loop, _thread, _lock = None, None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
