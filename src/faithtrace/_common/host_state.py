"""Leave the host process as it was while faithtrace imports a third-party library into it.

Importing litellm rewrites process-wide state that belongs to the host: it sets the ``httpx`` logger to
WARNING (the host's INFO "HTTP Request" lines vanish), adds redaction filters to the ``asyncio``, ``httpx``
and ``uvicorn.*`` loggers (the host's access lines are rewritten), inserts ``warnings`` filters, registers
exit handlers and sets environment variables; a library it imports (``rich``) draws from the ``random``
module, which shifts an app's seeded sequence. faithtrace imports it lazily, on its first evaluation, so
without this the host's logging would change mid-run.

:func:`preserved` snapshots that state, runs the import, and puts it back:

- ``os.environ``, every logger that existed before (level, handlers, filters, ``propagate``, ``disabled``),
  the root logger, ``logging.disable``'s level, the logger class and record factory, and ``warnings.filters``
  are restored exactly, and so is the ``random`` module's state. A host thread changing them during the
  window (about a second, once per process) would see its change undone too.
- Loggers the import created are the library's own. Levels and filters set on them are cleared, so a host
  that later uses one of those names (``apscheduler``, ``backoff``) gets stock behaviour; the loggers of the
  library being imported (``muted``: litellm's ``LiteLLM`` loggers come with a stderr handler) print nothing:
  faithtrace reports its judge's failures itself.
- Exit handlers registered by the importing thread are taken back and kept here, and run once at exit
  (:func:`run_deferred_exit_handlers`) from the interpreter's threading shutdown hooks, so the cleanup still
  happens (litellm closes its HTTP sessions) and the host's list of exit handlers does not change. That hook
  is registered when this module is imported, before faithtrace's exit flush registers its own: the hooks run
  last-registered first, so litellm's cleanup comes after faithtrace's last judge call.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import random
import threading
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

__all__ = ["preserved", "register_exit_runner", "run_deferred_exit_handlers"]

_deferred_exit: list[tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]] = []
_deferred_lock = threading.Lock()


@dataclass
class _LoggerState:
    level: int
    handlers: list[logging.Handler]
    filters: list[Any]
    propagate: bool
    disabled: bool

    @classmethod
    def of(cls, logger: logging.Logger) -> _LoggerState:
        handlers, filters = list(logger.handlers), list(logger.filters)
        return cls(logger.level, handlers, filters, logger.propagate, logger.disabled)

    def apply(self, logger: logging.Logger) -> None:
        logger.setLevel(self.level)
        logger.handlers[:] = self.handlers
        logger.filters[:] = self.filters
        logger.propagate = self.propagate
        logger.disabled = self.disabled


@dataclass
class _Snapshot:
    environ: dict[str, str] = field(default_factory=lambda: dict(os.environ))
    loggers: dict[str, _LoggerState] = field(default_factory=dict)
    root: _LoggerState = field(default_factory=lambda: _LoggerState.of(logging.getLogger()))
    disable: int = field(default_factory=lambda: logging.root.manager.disable)
    logger_class: type[logging.Logger] = field(default_factory=logging.getLoggerClass)
    record_factory: Callable[..., logging.LogRecord] = field(default_factory=logging.getLogRecordFactory)
    warning_filters: list[Any] = field(default_factory=lambda: list(warnings.filters))
    random_state: Any = field(default_factory=random.getstate)

    def __post_init__(self) -> None:
        for name, logger in list(logging.root.manager.loggerDict.items()):
            if isinstance(logger, logging.Logger):
                self.loggers[name] = _LoggerState.of(logger)


@contextlib.contextmanager
def preserved(muted: tuple[str, ...] = ()) -> Iterator[None]:
    """Run the body (an import), then restore the host state it changed (see the module docstring).

    Args:
        muted: name prefixes of the loggers that the imported library owns; if the import created them, they
            are silenced (no handlers, no propagation).
    """
    before = _Snapshot()
    importing = threading.get_ident()
    register = atexit.register
    taken: list[tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]] = []

    def register_later(func: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Callable[..., Any]:
        # Only the importing thread's registrations are the import's; another thread's go through untouched.
        if threading.get_ident() != importing:
            return register(func, *args, **kwargs)
        taken.append((func, args, kwargs))
        return func

    atexit.register = register_later
    try:
        yield
    finally:
        atexit.register = register
        with _deferred_lock:
            _deferred_exit.extend(taken)
        _restore(before, muted)


def _restore(before: _Snapshot, muted: tuple[str, ...]) -> None:
    for name in [n for n in os.environ if n not in before.environ]:
        del os.environ[name]
    for name, value in before.environ.items():
        if os.environ.get(name) != value:
            os.environ[name] = value
    manager = logging.root.manager
    for name, logger in list(manager.loggerDict.items()):
        if not isinstance(logger, logging.Logger):
            continue
        state = before.loggers.get(name)
        if state is not None:
            state.apply(logger)
        elif name.startswith(muted):
            _LoggerState(logging.NOTSET, [logging.NullHandler()], [], False, False).apply(logger)
        else:
            # A library's logger the import created: the library may keep its handlers (by convention a
            # NullHandler), but not levels or filters that would change the host's records under that name.
            logger.setLevel(logging.NOTSET)
            logger.filters[:] = []
    before.root.apply(logging.getLogger())
    logging.disable(before.disable)
    logging.setLoggerClass(before.logger_class)
    logging.setLogRecordFactory(before.record_factory)
    if random.getstate() != before.random_state:
        random.setstate(before.random_state)
    if warnings.filters != before.warning_filters:
        filters: list[Any] = warnings.filters  # type: ignore[assignment]  # typeshed: a Sequence; it is a list
        filters[:] = before.warning_filters
        # Drops the interpreter's cached "already warned" state, as warnings.filterwarnings() itself does.
        mutated = getattr(warnings, "_filters_mutated", None) or getattr(
            warnings, "_filters_mutated_lock_held", None
        )
        if mutated is not None:
            mutated()


def run_deferred_exit_handlers() -> None:
    """Run, once, the exit handlers that imports under :func:`preserved` registered. Never raises: this runs
    at interpreter exit, after faithtrace's own shutdown."""
    with _deferred_lock:
        handlers = _deferred_exit[::-1]  # last registered first, as atexit would
        _deferred_exit.clear()
    for func, args, kwargs in handlers:
        with contextlib.suppress(Exception):
            func(*args, **kwargs)


_runner_registered = False


def register_exit_runner() -> None:
    """Put :func:`run_deferred_exit_handlers` on the threading shutdown hooks, once. faithtrace's exit flush
    calls this before registering itself, so that it runs first and these handlers after it."""
    global _runner_registered
    with _deferred_lock:
        if _runner_registered:
            return
        _runner_registered = True
    register = getattr(threading, "_register_atexit", None)
    if register is None:  # another Python implementation: the host's atexit list it is
        atexit.register(run_deferred_exit_handlers)
        return
    # RuntimeError: imported while the interpreter shuts down; there is nothing to defer then.
    with contextlib.suppress(RuntimeError):
        register(run_deferred_exit_handlers)


register_exit_runner()
