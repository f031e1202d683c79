"""The option objects and ``build_settings``: one immutable ``Settings`` per ``configure()``.

Settings are resolved once (explicit arguments > ``FAITHTRACE_*`` env > standard OTel env > defaults) from the
option table in ``options``; a new runtime is built around them and swapped in atomically.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from faithtrace._common.errors import ConfigError
from faithtrace._config import options
from faithtrace._config.judge_settings import JudgeSettings
from faithtrace._config.options import field
from faithtrace._config.scoring_options import ScoringOptions

PLACEMENTS = ("rag_span", "child", "linked")  # as names.PLACEMENTS (config sits below telemetry)
DEFAULT_PROMETHEUS_PORT = 9464  # the port OTel's Prometheus exporter documents
DEFAULT_PHOENIX_ENDPOINT = "http://127.0.0.1:6006"  # Phoenix's own default (UI, REST API and OTLP/HTTP)


class SamplingOptions(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    ratio: float = field("sampling.ratio")
    max_per_second: float | None = field("sampling.max_per_second")
    max_tokens_per_hour: int | None = field("sampling.max_tokens_per_hour")
    max_cost_usd_per_hour: float | None = field("sampling.max_cost_usd_per_hour")
    respect_parent: bool = field("sampling.respect_parent")


class CaptureOptions(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    content: bool = field("capture.content")
    redact: Callable[[str], str] | None = field("capture.redact")
    max_attribute_chars: int = field("capture.max_attribute_chars")
    max_documents: int = field("capture.max_documents")
    max_claim_events: int = field("capture.max_claim_events")
    scrub_secrets: bool = field("capture.scrub_secrets")


class WorkerOptions(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    queue_size: int = field("worker.queue_size")
    evaluation_timeout_s: float = field("worker.evaluation_timeout_s")
    hold_timeout_s: float = field("worker.hold_timeout_s")
    shutdown_timeout_s: float = field("worker.shutdown_timeout_s")

    @model_validator(mode="before")
    @classmethod
    def _merged(cls, data: Any) -> Any:
        if isinstance(data, dict) and "concurrency" in data:
            raise ValueError(
                "WorkerOptions.concurrency was merged into JudgeSettings.max_concurrency "
                "(FAITHTRACE_JUDGE_CONCURRENCY): the worker runs that many evaluations at once"
            )
        return data


SamplingOptions.__doc__ = options.docstring(
    "Which calls are traced and scored, decided on the request path before any work is done.", "sampling"
)
CaptureOptions.__doc__ = options.docstring("What the RAG span and the evaluation span record.", "capture")
WorkerOptions.__doc__ = options.docstring("The background scorer.", "worker")


@dataclass(frozen=True)
class Settings:
    enabled: bool
    judge: JudgeSettings
    scoring: ScoringOptions
    sampling: SamplingOptions
    capture: CaptureOptions
    worker: WorkerOptions
    service_name: str | None
    otlp_endpoint: str | None  # the base URL; the per-signal URLs below win
    otlp_traces_endpoint: str | None
    otlp_metrics_endpoint: str | None
    otlp_traces_protocol: str
    otlp_metrics_protocol: str
    prometheus_port: int | None  # None: no /metrics endpoint
    prometheus_host: str
    metrics_exporter: str = "otlp"  # OTEL_METRICS_EXPORTER; "none": no OTLP metrics
    # rag_span (on the RAG span, held until scored), child (a child span) or linked (a trace of its own)
    evaluation_placement: str = "rag_span"
    annotations: str | None = None  # "phoenix": one annotation per scored RAG span (and its trace)
    phoenix_endpoint: str = DEFAULT_PHOENIX_ENDPOINT
    phoenix_api_key: str | None = None
    # scoring="remote": the decorator records the texts on its span for `faithtrace serve` and scores nothing.
    remote: bool = False

    @property
    def concurrency(self) -> int:
        """Evaluations at once: the embedded judge computes one request at a time."""
        return 1 if self.judge.is_local else self.judge.max_concurrency

    @property
    def exports_otlp(self) -> bool:
        return bool(self.otlp_endpoint or self.otlp_traces_endpoint or self.otlp_metrics_endpoint)

    @property
    def pushes_metrics(self) -> bool:
        """OTLP metrics go out: to their own endpoint, or with the traces unless those go to Phoenix (which
        answers metrics with 405)."""
        if self.metrics_exporter == "none":
            return False
        return bool(self.otlp_metrics_endpoint) or (
            bool(self.otlp_endpoint) and self.annotations != "phoenix"
        )


M = TypeVar("M", bound=BaseModel)


def _explicit(value: BaseModel | None) -> dict[str, Any]:
    """The fields the caller actually set: those win, env fills the rest."""
    if value is None:
        return {}
    return {name: getattr(value, name) for name in value.model_fields_set}


def _resolve(
    cls: type[M], group: str, explicit: M | None, arg: str, env: Mapping[str, str] | None, local: bool = False
) -> M:
    if explicit is not None and not isinstance(explicit, cls):
        raise ConfigError(f"{arg} must be a {cls.__name__}, got {type(explicit).__name__}")
    values = options.local_defaults(group) if local else {}
    values.update(options.env_values(group, env))
    values.update(_explicit(explicit))
    try:
        return cls.model_validate(values)
    except ValidationError as exc:  # pragma: no cover - explicit and env values are checked before
        raise ConfigError(f"invalid {arg}: {exc}") from exc


def resolve_judge(judge: str | JudgeSettings | None, env: Mapping[str, str] | None = None) -> JudgeSettings:
    """``JudgeSettings`` from an argument (None, a model string or settings) and the environment."""
    if judge is None:
        return JudgeSettings.from_env(env)
    if isinstance(judge, str):
        if not judge.strip():
            raise ConfigError("judge: expected a litellm model string such as 'openai/gpt-4o-mini', got ''")
        return JudgeSettings.from_env(env, model=judge.strip())
    if isinstance(judge, JudgeSettings):
        return JudgeSettings.from_env(env, **_explicit(judge))
    raise ConfigError(f"judge: expected None, a model string or JudgeSettings, got {type(judge).__name__}")


SCORING_MODES = ("in_process", "remote")


def _remote(scoring: ScoringOptions | str | None, env: Mapping[str, str] | None) -> bool:
    """scoring="remote" / "in_process", else ``FAITHTRACE_SCORING``."""
    mode = options.resolve("configure.scoring", scoring if isinstance(scoring, str) else None, env)
    return bool(mode == "remote")


def _prometheus(prometheus: bool | int | None, env: Mapping[str, str] | None) -> int | None:
    port: int | None = options.env_values("configure", env).get("prometheus_port")
    if prometheus is None:
        return port
    if prometheus is True:
        return DEFAULT_PROMETHEUS_PORT if port is None else port
    if prometheus is False:
        return None
    if isinstance(prometheus, int) and 0 <= prometheus <= 65535:
        return prometheus  # 0 picks a free port (see faithtrace._telemetry.setup.prometheus_address)
    raise ConfigError(f"prometheus must be a bool or a port number (0-65535), got {prometheus!r}")


def _choice(arg: str, value: str | None, choices: tuple[str, ...], default: str) -> str:
    if value is None:
        return default
    if not isinstance(value, str) or value.lower() not in choices:
        raise ConfigError(f"{arg} must be one of {', '.join(choices)}, got {value!r}")
    return value.lower()


def _phoenix_endpoint(explicit: str | None, configured: str | None, otlp: str | None, protocol: str) -> str:
    """Phoenix's base URL: the argument, the environment, an OTLP/HTTP endpoint, else localhost:6006."""
    if explicit is not None and (not isinstance(explicit, str) or not explicit.strip()):
        raise ConfigError(f"phoenix_endpoint must be a non-empty URL, got {explicit!r}")
    url = explicit or configured
    if not url and otlp and otlp.startswith("http") and protocol != "grpc":
        url = otlp
    return (url or DEFAULT_PHOENIX_ENDPOINT).strip().rstrip("/").removesuffix("/v1/traces")


def build_settings(
    *,
    enabled: bool | None = None,
    judge: str | JudgeSettings | None = None,
    scoring: ScoringOptions | str | None = None,
    sampling: SamplingOptions | None = None,
    capture: CaptureOptions | None = None,
    worker: WorkerOptions | None = None,
    service_name: str | None = None,
    otlp_endpoint: str | None = None,
    prometheus: bool | int | None = None,
    evaluation_placement: str | None = None,
    annotations: str | None = None,
    phoenix_endpoint: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> Settings:
    """Resolve every setting once. Raises ``ConfigError`` for an invalid explicit argument."""
    env = environ  # None: os.environ, read by options
    if enabled is not None and not isinstance(enabled, bool):
        raise ConfigError(f"enabled must be a bool, got {enabled!r}")
    for arg, value in (("service_name", service_name), ("otlp_endpoint", otlp_endpoint)):
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise ConfigError(f"{arg} must be a non-empty string, got {value!r}")
    top = options.values("configure", env)
    otel = options.values("otel", env)
    judge_settings = resolve_judge(judge, env)
    sink = _choice("annotations", annotations, ("none", "phoenix"), top["annotations"])
    base = otlp_endpoint or top["otlp_endpoint"]
    return Settings(
        enabled=options.resolve("configure.enabled", enabled, env),
        judge=judge_settings,
        scoring=_resolve(
            ScoringOptions, "scoring", None if isinstance(scoring, str) else scoring, "scoring", env
        ),
        sampling=_resolve(SamplingOptions, "sampling", sampling, "sampling", env),
        capture=_resolve(CaptureOptions, "capture", capture, "capture", env),
        worker=_resolve(WorkerOptions, "worker", worker, "worker", env, local=judge_settings.is_local),
        service_name=service_name or top["service_name"],
        otlp_endpoint=base,
        otlp_traces_endpoint=otel["traces_endpoint"],
        otlp_metrics_endpoint=otel["metrics_endpoint"],
        otlp_traces_protocol=otel["traces_protocol"],
        otlp_metrics_protocol=otel["metrics_protocol"],
        prometheus_port=_prometheus(prometheus, env),
        prometheus_host=top["prometheus_host"],
        metrics_exporter=otel["metrics_exporter"],
        evaluation_placement=_choice(
            "evaluation_placement", evaluation_placement, PLACEMENTS, top["evaluation_placement"]
        ),
        annotations=None if sink == "none" else sink,
        phoenix_api_key=top["phoenix_api_key"],
        phoenix_endpoint=_phoenix_endpoint(
            phoenix_endpoint, top["phoenix_endpoint"], base, otel["traces_protocol"]
        ),
        remote=_remote(scoring, env),
    )
