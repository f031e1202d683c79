"""faithtrace's three request-path modes for overhead.py: disabled, sampled out, sampled in."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from benchmarks.request_path._overhead_bench import Variant


def add(
    bench: Any, rag: Callable[[str, list[str]], str], exporter: InMemorySpanExporter, provider: Any
) -> None:
    try:
        import faithtrace

        decorated = faithtrace.trace_faithfulness(query="question", contexts="contexts")(rag)
    except Exception as exc:  # the decorator is not there (yet): say so, measure the rest
        for mode in ("disabled", "sampled out", "sampled in"):  # the breakdown rows go unmentioned
            bench.missing[f"faithtrace {mode}"] = f"unavailable: {type(exc).__name__}: {exc}"[:120]
        return
    judge = _parked_judge(bench)

    def drain() -> None:
        # The spans' ends and exports that the worker does off the request path; scoring is parked.
        faithtrace.flush(60.0, evaluations=False)

    def configure(queue_size: int = 1_000_000, **kwargs: Any) -> Callable[[], None]:
        def apply() -> None:
            # shutdown_timeout_s=0: configure() replaces the runtime, and the old one must not wait for its
            # parked jobs. A queue this large holds every sampled-in call of the run: enqueued, never dropped.
            # Placement child: each RAG span is ended and exported in the run, so its cost is counted; with
            # the default (rag_span) the same end and export wait for the parked evaluation and would fall
            # outside the timed blocks. The calling thread's path is the same either way.
            worker = faithtrace.WorkerOptions(queue_size=queue_size, shutdown_timeout_s=0.0)
            faithtrace.configure(
                judge=judge, tracer_provider=provider, worker=worker, evaluation_placement="child", **kwargs
            )

        return apply

    bench.closers.append(lambda: faithtrace.shutdown(timeout=0.5))
    bench.variants.append(
        Variant("faithtrace disabled", decorated, setup=configure(enabled=False), note="enabled=False")
    )
    bench.variants.append(
        Variant(
            "faithtrace sampled out",
            decorated,
            setup=configure(sampling=faithtrace.SamplingOptions(ratio=0.0)),
            note="sample rate 0",
        )
    )
    bench.variants.append(
        Variant(
            "faithtrace sampled in",
            decorated,
            setup=configure(sampling=faithtrace.SamplingOptions(ratio=1.0)),
            note="span + enqueue; judge parked, scoring not counted",
            exporter=exporter,
            drain=drain,
        )
    )
    # Two breakdown rows: without the texts on the span, and with every call refused by a full queue.
    bench.variants.append(
        Variant(
            "faithtrace sampled in, content off",
            decorated,
            setup=configure(
                sampling=faithtrace.SamplingOptions(ratio=1.0),
                capture=faithtrace.CaptureOptions(content=False),
            ),
            note="breakdown: no query/contexts/answer on the span",
            drain=drain,
        )
    )
    bench.variants.append(
        Variant(
            "faithtrace sampled in, queue full",
            decorated,
            setup=configure(queue_size=1, sampling=faithtrace.SamplingOptions(ratio=1.0)),
            note="breakdown: the drop path instead of the enqueue",
            drain=drain,
        )
    )


def _parked_judge(bench: Any) -> Any:
    """A loopback judge that takes an hour per request: jobs wait on a socket and cost no CPU in the run."""
    import faithtrace
    from benchmarks._shared import common as _common

    cm = _common.fake_judge(3600.0, max_seconds=3600.0)
    base = cm.__enter__()
    bench.closers.append(lambda: cm.__exit__(None, None, None))
    return faithtrace.JudgeSettings(
        model="openai/bench-parked", api_base=base, api_key="sk-bench", structured_output="json_schema"
    )
