"""Exceptions users may catch. Re-exported from ``faithtrace``."""

from __future__ import annotations


class FaithtraceError(Exception):
    """Base class for every exception faithtrace raises on purpose."""


class ConfigError(FaithtraceError, ValueError):
    """An explicit argument to ``configure()`` / ``evaluate()`` / the decorator is invalid."""


class JudgeError(FaithtraceError):
    """The judge could not produce a valid answer (after retries).

    ``type`` is a low-cardinality identifier that becomes ``error.type`` in telemetry, e.g. ``timeout``,
    ``rate_limited``, ``judge_unavailable``, ``judge_output_invalid``, ``verdict_count_mismatch``.
    """

    def __init__(self, type: str, message: str, *, step: str | None = None) -> None:
        super().__init__(message)
        self.type = type
        self.step = step
        # Calls made before giving up, so a failed evaluation still reports the tokens it spent.
        self.calls: list[object] = []


class LocalJudgeError(FaithtraceError):
    """The embedded local judge could not be installed, verified or started."""


class DetectorError(FaithtraceError):
    """The trained detector could not be loaded (missing extra, missing or changed file, bad metadata)."""
