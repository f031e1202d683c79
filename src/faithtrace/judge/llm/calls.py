"""The judge's records of its own requests: what each call to the model cost and how it ended.

The judge layer owns them (it makes the calls); the scoring results carry them and telemetry turns them into
GenAI client spans and metrics.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class LLMCall(BaseModel):
    """One request to the judge model (a step may make several: batches, retries)."""

    model_config = ConfigDict(frozen=True)

    step: str
    model: str
    attempt: int = 1
    start_time_ns: int  # wall clock, for the GenAI client span the worker emits afterwards
    duration_s: float
    input_tokens: int | None = None
    output_tokens: int | None = None
    cost_usd: float | None = None
    response_id: str | None = None
    finish_reason: str | None = None
    error_type: str | None = None  # set when this attempt failed (and was retried or gave up)
    # The prompt as (role, content) pairs and the raw reply: exported on the call's span only when content
    # capture is on, capped and scrubbed there. They reference texts the evaluation holds anyway.
    input_messages: tuple[tuple[str, str], ...] = ()
    output_text: str | None = None
