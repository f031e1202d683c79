"""Importing litellm without touching the host's environment.

litellm fetches its model price map from the internet at import unless ``LITELLM_LOCAL_MODEL_COST_MAP`` is
true: a service must not stall on that, and offline machines would wait for a timeout. The bundled map is good
enough for our costs. The variable is read once, at import, so faithtrace sets it only around its own first
import of litellm and then restores the environment exactly as it was (litellm's own changes at import, such
as ``TIKTOKEN_CACHE_DIR``, are undone too; a host thread changing the environment during that window, about a
second once per process, would see its change undone as well).

When the host has already imported litellm, its price map is whatever the host chose (the module is shared)
and the variable is not set; litellm's lazy tokenizer import, which sets ``TIKTOKEN_CACHE_DIR``, is still done
inside the restored window. When the host imports litellm after us, it gets the module we imported, with the
bundled map unless its own environment said otherwise.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
import threading
from typing import Any

_VAR = "LITELLM_LOCAL_MODEL_COST_MAP"
_lock = threading.Lock()
_ready = False


def load() -> Any:
    """The litellm module, imported on first use (it takes a second or more: the decorator's import must be
    cheap). Blocking; call it off the event loop the first time."""
    global _ready
    if not _ready:
        with _lock:
            if not _ready:
                _import_quietly()
                _ready = True
    module: Any = sys.modules["litellm"]
    # litellm prints a "Give Feedback / Get Help" banner to stdout on every failed call; our errors are
    # reported in results and logs instead, and a CLI's stdout must stay clean.
    module.suppress_debug_info = True
    return module


def _import_quietly() -> None:
    before = dict(os.environ)
    if "litellm" not in sys.modules:
        os.environ.setdefault(_VAR, "True")
    try:
        importlib.import_module("litellm")
        # Imported lazily by litellm on its first token count, and it sets TIKTOKEN_CACHE_DIR (to its bundled
        # tokenizers) for good: done now, inside the window whose changes are undone.
        with contextlib.suppress(Exception):
            importlib.import_module("litellm.litellm_core_utils.default_encoding")
    finally:
        _restore(before)


def _restore(before: dict[str, str]) -> None:
    """Undo every change to ``os.environ`` since ``before``."""
    for name in [n for n in os.environ if n not in before]:
        del os.environ[name]
    for name, value in before.items():
        if os.environ.get(name) != value:
            os.environ[name] = value


def _after_fork_in_child() -> None:
    global _lock
    _lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
