"""Reading ``FAITHTRACE_*`` environment variables: a bad value warns once and falls back to the default.

An ops typo in an env var must never take a service down, while a bad explicit argument is a programming
error and raises (see ``ConfigError``).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from typing import TypeVar

logger = logging.getLogger("faithtrace")

T = TypeVar("T")

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def parse_bool(raw: str) -> bool:
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ValueError(f"expected one of {sorted(_TRUE | _FALSE)}")


def read(
    name: str,
    parse: Callable[[str], T],
    default: T,
    environ: Mapping[str, str] | None = None,
    check: Callable[[T], bool] | None = None,
) -> T:
    """The parsed value of env var ``name``; ``default`` (with a warning) when it is set but invalid."""
    env = os.environ if environ is None else environ
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = parse(raw.strip())
        if check is not None and not check(value):
            raise ValueError("out of range")
    except (ValueError, TypeError) as exc:
        logger.warning("faithtrace: ignoring %s=%r (%s); using the default %r", name, raw, exc, default)
        return default
    return value


def read_str(name: str, environ: Mapping[str, str] | None = None) -> str | None:
    env = os.environ if environ is None else environ
    raw = env.get(name)
    return raw.strip() if raw and raw.strip() else None
