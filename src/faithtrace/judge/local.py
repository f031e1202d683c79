"""The embedded local judge (interface; implementation in progress).

Contract used by ``Judge.endpoint()``: ``ensure_local_judge()`` blocks until a healthy llama.cpp server is
listening on 127.0.0.1 and returns how to reach it through litellm.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

LOCAL_MODEL_ALIAS = "faithtrace-local"


@dataclass(frozen=True)
class LocalEndpoint:
    model: str  # litellm model string, e.g. "openai/faithtrace-local"
    api_base: str  # e.g. "http://127.0.0.1:43117/v1"
    api_key: str  # any non-empty string; the server does not check it
    display_model: str  # what results and telemetry show, e.g. "faithtrace-local/qwen2.5-coder-1.5b-instruct-q4_k_m"


def ensure_local_judge(progress: Callable[[str], None] | None = None) -> LocalEndpoint:
    raise NotImplementedError("embedded local judge: in progress")
