"""Importing litellm without touching the host's environment, logging, warnings filters or exit handlers.

litellm fetches its model price map from the internet at import unless ``LITELLM_LOCAL_MODEL_COST_MAP`` is
true: a service must not stall on that, and offline machines would wait for a timeout. The bundled map is good
enough for our costs. The variable is read once, at import, so faithtrace sets it only around its own first
import of litellm and then restores the environment exactly as it was (litellm's own changes at import, such
as ``TIKTOKEN_CACHE_DIR``, are undone too; a host thread changing the environment during that window, about a
second once per process, would see its change undone as well). The same window restores the host's logging,
``warnings`` filters and exit handlers, which litellm's import rewrites (``faithtrace._common.host_state``).

When the host has already imported litellm, its price map is whatever the host chose (the module is shared)
and the variable is not set; litellm's lazy tokenizer import, which sets ``TIKTOKEN_CACHE_DIR``, is still done
inside the restored window. When the host imports litellm after us, it gets the module we imported, with the
bundled map unless its own environment said otherwise.

litellm's module settings (``suppress_debug_info``, ``set_verbose``, ``drop_params``, its callback lists) are
process-wide and, in the host's process, the host's: faithtrace never writes them there, and passes what it
needs per request instead (``client.py``). Only faithtrace's own commands, whose process is theirs, quieten
litellm's "Give Feedback / Get Help" banner (``own_process``).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
import threading
from typing import Any

from faithtrace._common import host_state

_VAR = "LITELLM_LOCAL_MODEL_COST_MAP"
# litellm's own loggers ("LiteLLM", "LiteLLM Proxy", "LiteLLM Router") print to stderr through a handler of
# their own; in a host that did not import litellm itself, that output would be ours, and we report judge
# failures in results, spans and one rate-limited warning instead.
_LITELLM_LOGGERS = ("LiteLLM", "litellm")
_lock = threading.Lock()
_ready = False
_own_process = False


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
    if _own_process:
        # litellm prints a "Give Feedback / Get Help" banner to stdout on every failed call: a command's
        # output (JSON, a report) must stay clean, and our errors are reported in results and logs instead.
        module.suppress_debug_info = True
    return module


def own_process() -> None:
    """Say that this process is faithtrace's own (the ``faithtrace`` command): litellm's settings are then
    ours to set. Never called in a host app's process, where they are the app's."""
    global _own_process
    _own_process = True


def _import_quietly() -> None:
    with host_state.preserved(muted=_LITELLM_LOGGERS):
        if "litellm" not in sys.modules:
            os.environ.setdefault(_VAR, "True")
        importlib.import_module("litellm")
        # Imported lazily by litellm on its first token count, and it sets TIKTOKEN_CACHE_DIR (to its bundled
        # tokenizers) for good: done now, inside the window whose changes are undone.
        with contextlib.suppress(Exception):
            importlib.import_module("litellm.litellm_core_utils.default_encoding")
        # litellm's response models finish building their pydantic schemas on first use, and that build warns
        # about a TypedDict qualifier; litellm's import filtered such warnings process-wide, which the window
        # undoes. Building them now, while its filters stand, keeps that warning off the host's stderr.
        with contextlib.suppress(Exception):
            sys.modules["litellm"].ModelResponse()
        # The first lazy attribute registers litellm's exit handler for its HTTP clients: done now, inside the
        # window, so that the handler is kept off the host's list and run by faithtrace's exit flush.
        with contextlib.suppress(Exception):
            getattr(sys.modules["litellm"], "supports_response_schema", None)


def _after_fork_in_child() -> None:
    global _lock
    _lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
