"""``faithtrace.configure()``: builds one ``Settings`` from arguments, the environment and defaults, and
makes it live through ``lifecycle``."""

from __future__ import annotations

from typing import Any

from faithtrace._config.judge_settings import JudgeSettings
from faithtrace._config.scoring_options import ScoringOptions
from faithtrace._config.settings import CaptureOptions, SamplingOptions, WorkerOptions, build_settings
from faithtrace._runtime.lifecycle import install


def configure(
    *,
    enabled: bool | None = None,
    judge: str | JudgeSettings | None = None,
    scoring: ScoringOptions | str | None = None,
    sampling: SamplingOptions | None = None,
    capture: CaptureOptions | None = None,
    worker: WorkerOptions | None = None,
    tracer_provider: Any = None,
    meter_provider: Any = None,
    service_name: str | None = None,
    otlp_endpoint: str | None = None,
    prometheus: bool | int | None = None,
    evaluation_placement: str | None = None,
    annotations: str | None = None,
    phoenix_endpoint: str | None = None,
) -> None:
    """Configure faithtrace (optional: without it, ``FAITHTRACE_*`` env vars and global providers are used).

    Every argument left as ``None`` falls back to its environment variable, then to its default (the docs'
    configuration table lists them all). Calling it again replaces the whole configuration; evaluations
    queued under the previous one still finish, within its ``shutdown_timeout_s``.

    Args:
        enabled: ``False`` makes ``@trace_faithfulness`` a pass-through.
        judge: a litellm model string or ``JudgeSettings``; by default the embedded local judge.
        scoring: ``ScoringOptions`` (threshold, idk policy, checks, size caps), or ``"remote"``: record the
            texts on the RAG span for ``faithtrace serve`` and score nothing in this process
            (``"in_process"``, the default, scores here; ``FAITHTRACE_SCORING``).
        sampling: ``SamplingOptions`` (ratio, rate limit, hourly budgets).
        capture: ``CaptureOptions`` (content switch, redaction hook, size caps).
        worker: ``WorkerOptions`` (queue size, timeouts).
        tracer_provider: defaults to the global tracer provider.
        meter_provider: defaults to the global meter provider.
        service_name: used when faithtrace sets up the providers itself.
        otlp_endpoint: when the app has set up no providers, export spans and metrics over OTLP to this
            endpoint; the other ``OTEL_EXPORTER_OTLP_*`` variables (headers, ...) apply as usual.
        prometheus: serve ``/metrics`` at this port, or at ``FAITHTRACE_PROMETHEUS_PORT`` / 9464 when
            ``True``. Needs ``faithtrace[prometheus]``.
        evaluation_placement: ``"rag_span"`` (the default: the RAG span is held until its evaluation is on
            it, keeping its own start and end times; the judge's calls go to a trace of their own),
            ``"child"`` (an evaluation span, the RAG span's child in the request's trace, which then lasts
            until scoring ends) or ``"linked"`` (an evaluation span in a trace of its own, linked to the RAG
            span).
        annotations: ``"phoenix"``: each score as a ``faithfulness`` annotation on the RAG span and its trace,
            through Phoenix's REST API.
        phoenix_endpoint: Phoenix's base URL for those annotations.

    Raises:
        ConfigError: an explicit argument is invalid.
    """
    # Every argument but the providers is a setting, resolved by build_settings (same names, same types: a
    # test holds the two signatures equal), so the settings are not listed a third time here.
    arguments = dict(locals())
    providers = arguments.pop("tracer_provider"), arguments.pop("meter_provider")
    settings = build_settings(**arguments)
    install(settings, tracer_provider=providers[0], meter_provider=providers[1])
