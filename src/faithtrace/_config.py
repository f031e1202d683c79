"""configure()/flush()/shutdown() and the option objects (interface; implementation in progress)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class SamplingOptions(BaseModel):
    model_config = ConfigDict(frozen=True)


class CaptureOptions(BaseModel):
    model_config = ConfigDict(frozen=True)


class WorkerOptions(BaseModel):
    model_config = ConfigDict(frozen=True)


def configure(**kwargs: object) -> None:
    raise NotImplementedError


def flush(timeout: float = 30.0) -> bool:
    raise NotImplementedError


def shutdown(timeout: float = 30.0) -> None:
    raise NotImplementedError
