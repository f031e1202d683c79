"""One-off blocking jobs run off an event loop on a daemon thread of their own.

``asyncio.to_thread``'s executor threads are joined at interpreter exit. A job that an abandoned evaluation
started (litellm's import, seconds of CPU; the embedded judge's start) would then hold the host's exit well
past ``shutdown(timeout)``'s deadline. A daemon thread does not hold the exit, and one thread per job costs
nothing next to what these jobs do.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


async def in_daemon_thread(func: Callable[[], T], name: str) -> T:
    """``func()``'s result or exception, computed on a new daemon thread; cancelling the wait leaves the job
    to finish on its own (as ``asyncio.to_thread`` does). Raises RuntimeError when no thread can be started
    (at interpreter shutdown)."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(value: T | None, error: BaseException | None) -> None:
        if future.done():  # the waiter was cancelled meanwhile
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(value)  # type: ignore[arg-type]

    def run() -> None:
        value: T | None = None
        error: BaseException | None = None
        try:
            value = func()
        except Exception as exc:
            error = exc
        except BaseException as exc:  # SystemExit in a job: the waiter must not wait forever
            error = RuntimeError(f"{name} ended with {type(exc).__name__}")
        # A closed loop raises RuntimeError: nobody waits for the result any more.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(settle, value, error)

    threading.Thread(target=run, name=name, daemon=True).start()
    return await future
