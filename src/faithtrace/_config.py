"""``configure()``, ``flush()``, ``shutdown()`` and the option objects.

Settings are resolved once per ``configure()`` (explicit arguments > ``FAITHTRACE_*`` env > standard OTel
env > defaults) into one immutable ``Settings`` object, which a new runtime is built around and swapped in
atomically. This is the only module that reads the environment for the decorator's settings.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from faithtrace import _env
from faithtrace._errors import ConfigError
from faithtrace.judge.settings import JudgeSettings
from faithtrace.scoring.options import ScoringOptions

DEFAULT_PROMETHEUS_PORT = 9464  # the port OTel's Prometheus exporter documents


class SamplingOptions(BaseModel):
    """Which calls are traced and scored, decided on the request path before any work is done.

    Args:
        ratio: share of calls scored, decided by trace id so that a trace is scored everywhere or nowhere.
            Defaults to ``FAITHTRACE_SAMPLE_RATE`` or 1.0.
        max_per_second: at most this many evaluations start per second (token bucket, bursts up to one
            second's worth). Defaults to ``FAITHTRACE_RATE_LIMIT``; unlimited when unset.
        max_tokens_per_hour: stop scoring for the rest of the hour once the judge has used this many tokens.
            Defaults to ``FAITHTRACE_BUDGET_TOKENS_PER_HOUR``.
        max_cost_usd_per_hour: the same in US dollars (only judges with a known price count).
            Defaults to ``FAITHTRACE_BUDGET_USD_PER_HOUR``.
        respect_parent: a call inside a trace the app did not sample is not scored.
    """

    model_config = ConfigDict(frozen=True)

    ratio: float = Field(default=1.0, ge=0.0, le=1.0)
    max_per_second: float | None = Field(default=None, gt=0)
    max_tokens_per_hour: int | None = Field(default=None, gt=0)
    max_cost_usd_per_hour: float | None = Field(default=None, gt=0)
    respect_parent: bool = True


class CaptureOptions(BaseModel):
    """What the RAG span and the evaluation span record.

    Args:
        content: record the query, the contexts, the answer, claim texts and the explanation. Off keeps
            only sizes, counts, verdicts and scores. Defaults to ``FAITHTRACE_CAPTURE_CONTENT`` (then
            ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``) or True.
        redact: applied to every exported text (after secrets are scrubbed); the judge still sees the
            raw text.
        max_attribute_chars: exported texts are cut to this many characters.
        max_documents: at most this many retrieved documents are recorded on the span one by one.
        max_claim_events: at most this many per-claim events on the evaluation span (the total is noted).
        scrub_secrets: replace API keys, bearer tokens, passwords and private keys in exported text.
    """

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    content: bool = True
    redact: Callable[[str], str] | None = None
    max_attribute_chars: int = Field(default=4096, ge=16, le=1_000_000)
    max_documents: int = Field(default=20, ge=0, le=1000)
    max_claim_events: int = Field(default=32, ge=0, le=100)  # the SDK keeps 128 events per span
    scrub_secrets: bool = True


class WorkerOptions(BaseModel):
    """The background scorer.

    Args:
        queue_size: evaluations waiting at most; a call that finds the queue full is not scored (counted as
            ``dropped``). Defaults to ``FAITHTRACE_QUEUE_SIZE`` or 1000.
        concurrency: evaluations running at once. Defaults to ``FAITHTRACE_CONCURRENCY`` or 4 (1 with
            the embedded local judge).
        evaluation_timeout_s: one evaluation (all its judge calls) is abandoned after this long.
            Defaults to ``FAITHTRACE_EVALUATION_TIMEOUT`` or 120 (900 with the embedded local judge).
        shutdown_timeout_s: how long interpreter exit waits for queued evaluations.
            Defaults to ``FAITHTRACE_SHUTDOWN_TIMEOUT`` or 5.
    """

    model_config = ConfigDict(frozen=True)

    queue_size: int = Field(default=1000, ge=1, le=1_000_000)
    concurrency: int = Field(default=4, ge=1, le=256)
    evaluation_timeout_s: float = Field(default=120.0, gt=0)
    shutdown_timeout_s: float = Field(default=5.0, ge=0)


@dataclass(frozen=True)
class Settings:
    enabled: bool
    judge: JudgeSettings
    scoring: ScoringOptions
    sampling: SamplingOptions
    capture: CaptureOptions
    worker: WorkerOptions
    service_name: str | None
    otlp_endpoint: str | None
    prometheus_port: int | None  # None: no /metrics endpoint
    prometheus_host: str


M = TypeVar("M", bound=BaseModel)


def _explicit(value: BaseModel | None) -> dict[str, Any]:
    """The fields the caller actually set: those win, env fills the rest."""
    if value is None:
        return {}
    return {name: getattr(value, name) for name in value.model_fields_set}


def _merge(cls: type[M], env_values: dict[str, Any], explicit: M | None, arg: str) -> M:
    if explicit is not None and not isinstance(explicit, cls):
        raise ConfigError(f"{arg} must be a {cls.__name__}, got {type(explicit).__name__}")
    try:
        return cls.model_validate({**env_values, **_explicit(explicit)})
    except ValidationError as exc:  # pragma: no cover - explicit values were validated on construction
        raise ConfigError(f"invalid {arg}: {exc}") from exc


def _positive(v: float | None) -> bool:
    return v is not None and v > 0


def _port(v: int | None) -> bool:
    return v is not None and 0 <= v <= 65535


def _float(raw: str) -> float | None:
    return float(raw)


def _int(raw: str) -> int | None:
    return int(raw)


def _sampling_env(env: Mapping[str, str]) -> dict[str, Any]:
    return {
        "ratio": _env.read("FAITHTRACE_SAMPLE_RATE", float, 1.0, env, lambda v: 0.0 <= v <= 1.0),
        "max_per_second": _env.read("FAITHTRACE_RATE_LIMIT", _float, None, env, _positive),
        "max_tokens_per_hour": _env.read("FAITHTRACE_BUDGET_TOKENS_PER_HOUR", _int, None, env, _positive),
        "max_cost_usd_per_hour": _env.read("FAITHTRACE_BUDGET_USD_PER_HOUR", _float, None, env, _positive),
    }


def _capture_env(env: Mapping[str, str]) -> dict[str, Any]:
    otel_default = _env.read("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", _env.parse_bool, True, env)
    return {
        "content": _env.read("FAITHTRACE_CAPTURE_CONTENT", _env.parse_bool, otel_default, env),
        "max_attribute_chars": _env.read(
            "FAITHTRACE_MAX_ATTRIBUTE_CHARS", int, 4096, env, lambda v: 16 <= v <= 1_000_000
        ),
    }


def _worker_env(env: Mapping[str, str], local_judge: bool) -> dict[str, Any]:
    # The embedded judge answers one request at a time at CPU speed (~40 s per evaluation on 2 cores), so
    # its defaults run one evaluation at a time and give each far longer than a hosted API needs.
    concurrency, timeout = (1, 900.0) if local_judge else (4, 120.0)
    return {
        "queue_size": _env.read("FAITHTRACE_QUEUE_SIZE", int, 1000, env, lambda v: 1 <= v <= 1_000_000),
        "concurrency": _env.read("FAITHTRACE_CONCURRENCY", int, concurrency, env, lambda v: 1 <= v <= 256),
        "evaluation_timeout_s": _env.read("FAITHTRACE_EVALUATION_TIMEOUT", float, timeout, env, _positive),
        "shutdown_timeout_s": _env.read("FAITHTRACE_SHUTDOWN_TIMEOUT", float, 5.0, env, lambda v: v >= 0),
    }


def _judge(judge: str | JudgeSettings | None, env: Mapping[str, str]) -> JudgeSettings:
    if judge is None:
        return JudgeSettings.from_env(env)
    if isinstance(judge, str):
        if not judge.strip():
            raise ConfigError("judge must be a non-empty litellm model string")
        return JudgeSettings.from_env(env, model=judge.strip())
    if isinstance(judge, JudgeSettings):
        return JudgeSettings.from_env(env, **_explicit(judge))
    raise ConfigError(f"judge must be a model string or JudgeSettings, got {type(judge).__name__}")


def _scoring(scoring: ScoringOptions | None, env: Mapping[str, str]) -> ScoringOptions:
    if scoring is not None and not isinstance(scoring, ScoringOptions):
        raise ConfigError(f"scoring must be a ScoringOptions, got {type(scoring).__name__}")
    return ScoringOptions.from_env(env, **_explicit(scoring))


def _prometheus(prometheus: bool | int | None, env: Mapping[str, str]) -> int | None:
    if prometheus is None:
        return _env.read("FAITHTRACE_PROMETHEUS_PORT", _int, None, env, _port)
    if prometheus is True:
        default: int | None = DEFAULT_PROMETHEUS_PORT
        return _env.read("FAITHTRACE_PROMETHEUS_PORT", _int, default, env, _port)
    if prometheus is False:
        return None
    if isinstance(prometheus, int) and 0 <= prometheus <= 65535:
        return prometheus  # 0 picks a free port (see faithtrace._telemetry.setup.prometheus_address)
    raise ConfigError(f"prometheus must be a bool or a port number (0-65535), got {prometheus!r}")


def build_settings(
    *,
    enabled: bool | None = None,
    judge: str | JudgeSettings | None = None,
    scoring: ScoringOptions | None = None,
    sampling: SamplingOptions | None = None,
    capture: CaptureOptions | None = None,
    worker: WorkerOptions | None = None,
    service_name: str | None = None,
    otlp_endpoint: str | None = None,
    prometheus: bool | int | None = None,
    environ: Mapping[str, str] | None = None,
) -> Settings:
    """Resolve every setting once. Raises ``ConfigError`` for an invalid explicit argument."""
    env = os.environ if environ is None else environ
    if enabled is not None and not isinstance(enabled, bool):
        raise ConfigError(f"enabled must be a bool, got {enabled!r}")
    for arg, value in (("service_name", service_name), ("otlp_endpoint", otlp_endpoint)):
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise ConfigError(f"{arg} must be a non-empty string, got {value!r}")
    endpoint = otlp_endpoint or _env.read_str("OTEL_EXPORTER_OTLP_ENDPOINT", env)
    endpoint = endpoint or _env.read_str("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", env)
    judge_settings = _judge(judge, env)
    return Settings(
        enabled=enabled
        if enabled is not None
        else _env.read("FAITHTRACE_ENABLED", _env.parse_bool, True, env),
        judge=judge_settings,
        scoring=_scoring(scoring, env),
        sampling=_merge(SamplingOptions, _sampling_env(env), sampling, "sampling"),
        capture=_merge(CaptureOptions, _capture_env(env), capture, "capture"),
        worker=_merge(WorkerOptions, _worker_env(env, judge_settings.is_local), worker, "worker"),
        service_name=service_name or _env.read_str("OTEL_SERVICE_NAME", env),
        otlp_endpoint=endpoint,
        prometheus_port=_prometheus(prometheus, env),
        prometheus_host=_env.read_str("FAITHTRACE_PROMETHEUS_HOST", env) or "127.0.0.1",
    )


def configure(
    *,
    enabled: bool | None = None,
    judge: str | JudgeSettings | None = None,
    scoring: ScoringOptions | None = None,
    sampling: SamplingOptions | None = None,
    capture: CaptureOptions | None = None,
    worker: WorkerOptions | None = None,
    tracer_provider: Any = None,
    meter_provider: Any = None,
    service_name: str | None = None,
    otlp_endpoint: str | None = None,
    prometheus: bool | int | None = None,
) -> None:
    """Configure faithtrace (optional: without it, ``FAITHTRACE_*`` env vars and global providers are used).

    Every argument left as ``None`` falls back to its environment variable, then to its default. Calling it
    again replaces the whole configuration; evaluations queued under the previous one still finish.

    Args:
        enabled: ``False`` makes ``@trace_faithfulness`` a pass-through. Defaults to ``FAITHTRACE_ENABLED``.
        judge: a litellm model string or ``JudgeSettings``; defaults to ``FAITHTRACE_JUDGE_*``, else the
            embedded local judge.
        scoring: threshold, idk policy, ... (``FAITHTRACE_THRESHOLD``, ``FAITHTRACE_IDK_POLICY``, ...).
        sampling: ratio, rate limit and hourly budgets (``FAITHTRACE_SAMPLE_RATE``, ``FAITHTRACE_RATE_LIMIT``,
            ``FAITHTRACE_BUDGET_TOKENS_PER_HOUR``, ``FAITHTRACE_BUDGET_USD_PER_HOUR``).
        capture: content switch, redaction hook and size caps (``FAITHTRACE_CAPTURE_CONTENT``).
        worker: queue size, concurrency and timeouts (``FAITHTRACE_QUEUE_SIZE``, ``FAITHTRACE_CONCURRENCY``).
        tracer_provider: defaults to the global tracer provider.
        meter_provider: defaults to the global meter provider.
        service_name: used when faithtrace sets up the providers itself. Defaults to ``OTEL_SERVICE_NAME``.
        otlp_endpoint: when the app has set up no providers, export spans and metrics over OTLP to this
            endpoint. Defaults to ``OTEL_EXPORTER_OTLP_ENDPOINT``; the other ``OTEL_EXPORTER_OTLP_*``
            variables (protocol, headers, ...) apply as usual.
        prometheus: serve ``/metrics`` on 127.0.0.1 (``FAITHTRACE_PROMETHEUS_HOST`` to change) at this
            port, or at ``FAITHTRACE_PROMETHEUS_PORT`` / 9464 when ``True``. Needs ``faithtrace[prometheus]``.

    Raises:
        ConfigError: an explicit argument is invalid.
    """
    from faithtrace import _runtime

    settings = build_settings(
        enabled=enabled,
        judge=judge,
        scoring=scoring,
        sampling=sampling,
        capture=capture,
        worker=worker,
        service_name=service_name,
        otlp_endpoint=otlp_endpoint,
        prometheus=prometheus,
    )
    _runtime.install(settings, tracer_provider=tracer_provider, meter_provider=meter_provider)


def flush(timeout: float = 30.0, *, evaluations: bool = True) -> bool:
    """Wait until every queued evaluation has finished and its telemetry is exported.

    A decorated call's own span is ended and exported by faithtrace's worker a moment after the call
    returns. With ``evaluations=False`` this waits only for those spans, not for any scoring.
    Returns False when ``timeout`` seconds passed first.
    """
    from faithtrace import _runtime

    return _runtime.flush(timeout, evaluations=evaluations)


def shutdown(timeout: float = 30.0) -> None:
    """Finish queued evaluations (up to ``timeout`` seconds), stop the worker and flush telemetry.

    The decorator is a pass-through afterwards, until the next ``configure()``. Runs at interpreter exit with
    the worker's ``shutdown_timeout_s``.
    """
    from faithtrace import _runtime

    _runtime.shutdown(timeout)
