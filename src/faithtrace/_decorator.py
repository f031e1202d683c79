"""@trace_faithfulness (interface; implementation in progress)."""

from __future__ import annotations

from typing import Any


def trace_faithfulness(wrapped: Any = None, /, **kwargs: Any) -> Any:
    raise NotImplementedError
