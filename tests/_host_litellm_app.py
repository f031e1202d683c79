"""A host app that uses litellm itself while faithtrace scores its answers (a script: run in a fresh process).

The host registers its own litellm callbacks (a CustomLogger in ``litellm.callbacks`` and plain functions in
``litellm.success_callback`` / ``failure_callback``), then serves ``--requests`` answers concurrently through
``litellm.acompletion`` against a scripted OpenAI-compatible server on 127.0.0.1, each answer decorated with
``@trace_faithfulness`` and scored by a judge behind the same kind of server. It prints one JSON line: which
models the host's callbacks saw, and the warnings and errors logged in the process.

    python tests/_host_litellm_app.py --requests 500 [--disabled]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import logging
import os
import sys
import threading
from http.server import ThreadingHTTPServer
from typing import Any

sys.path.insert(0, os.path.dirname(__file__))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

HOST_MODEL = "openai/host-model"


class _Records(logging.Handler):
    """Every warning and error logged anywhere in the process (litellm, asyncio, faithtrace)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if record.exc_info and record.exc_info[1] is not None:
            text += f" | {type(record.exc_info[1]).__name__}: {record.exc_info[1]}"
        self.lines.append(f"{record.name}: {text}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--concurrency", type=int, default=25)
    parser.add_argument("--judge-status", type=int, default=0, help="the judge's server answers this error")
    parser.add_argument("--otel", action="store_true", help='also litellm.callbacks += ["otel"]')
    parser.add_argument("--host-span", action="store_true", help="the host's own span around each answer")
    parser.add_argument("--disabled", action="store_true", help="faithtrace.configure(enabled=False)")
    args = parser.parse_args()

    records = _Records()
    logging.getLogger().addHandler(records)
    # litellm's own logger does not propagate: listen to it directly.
    logging.getLogger("LiteLLM").addHandler(records)

    from _fake_judge import FakeJudge, _handler

    fake = FakeJudge()
    if args.judge_status:
        reply = fake.reply

        def judge_fails(body: dict[str, Any]) -> tuple[int, dict[str, Any] | str]:
            if body.get("model") == HOST_MODEL.split("/", 1)[1]:
                return reply(body)
            with fake.lock:
                fake.requests.append(body)
            return args.judge_status, {"error": {"message": "scripted failure", "type": "server_error"}}

        fake.reply = judge_fails  # type: ignore[method-assign]
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(fake))
    server.daemon_threads = True
    server.request_queue_size = 256
    fake.base_url = f"http://127.0.0.1:{server.server_port}"
    # shutdown() returns when serve_forever next polls: every 0.05 s, not its default 0.5 s.
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    import litellm
    from litellm.integrations.custom_logger import CustomLogger

    import faithtrace

    seen: dict[str, list[str]] = {}
    seen_lock = threading.Lock()

    def saw(event: str, kwargs: Any) -> None:
        model = str((kwargs or {}).get("model") or "?")
        with seen_lock:
            seen.setdefault(event, []).append(model)

    class HostLogger(CustomLogger):  # type: ignore[misc]
        def log_pre_api_call(self, model: Any, messages: Any, kwargs: Any) -> None:
            saw("log_pre_api_call", kwargs)

        def log_success_event(self, kwargs: Any, response_obj: Any, start_time: Any, end_time: Any) -> None:
            saw("log_success_event", kwargs)

        def log_failure_event(self, kwargs: Any, response_obj: Any, start_time: Any, end_time: Any) -> None:
            saw("log_failure_event", kwargs)

        async def async_log_success_event(
            self, kwargs: Any, response_obj: Any, start_time: Any, end_time: Any
        ) -> None:
            saw("async_log_success_event", kwargs)

        async def async_log_failure_event(
            self, kwargs: Any, response_obj: Any, start_time: Any, end_time: Any
        ) -> None:
            saw("async_log_failure_event", kwargs)

    def success_fn(kwargs: Any, completion_response: Any, start_time: Any, end_time: Any) -> None:
        saw("success_callback", kwargs)

    def failure_fn(kwargs: Any, completion_response: Any, start_time: Any, end_time: Any) -> None:
        saw("failure_callback", kwargs)

    exporter = None
    if args.otel:
        # The host's OTel SDK, which litellm's "otel" callback exports through.
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        trace.set_tracer_provider(provider)

    litellm.callbacks = [HostLogger(), *(["otel"] if args.otel else [])]
    litellm.success_callback = [success_fn]
    litellm.failure_callback = [failure_fn]

    faithtrace.configure(
        enabled=not args.disabled,
        judge=fake.settings(),
        worker=faithtrace.WorkerOptions(queue_size=args.requests + 10),
    )

    documents = ["Paris is the capital of France. The Seine flows through Paris."]

    @faithtrace.trace_faithfulness
    async def answer(question: str, contexts: list[str]) -> str:
        reply = await litellm.acompletion(
            model=HOST_MODEL,
            messages=[{"role": "user", "content": f'{question}\nReply as JSON: {{"answer": ...}}'}],
            api_base=fake.base_url + "/v1",
            api_key="x",
        )
        assert reply.choices[0].message is not None
        # The scripted server's reply is not an answer; the judge scores a fixed one, reworded from the
        # documents so that the judge decides it (a contained sentence would be proven in code).
        return "The capital of France is Paris. Through Paris flows the Seine."

    async def serve() -> None:
        gate = asyncio.Semaphore(args.concurrency)

        async def one(i: int) -> None:
            async with gate:
                if args.host_span:
                    from opentelemetry import trace

                    with trace.get_tracer("host").start_as_current_span("host request"):
                        await answer(f"What is the capital of France? ({i})", documents)
                else:
                    await answer(f"What is the capital of France? ({i})", documents)

        await asyncio.gather(*(one(i) for i in range(args.requests)))
        await asyncio.sleep(0.5)  # let litellm's logging worker run the host's callbacks

    asyncio.run(serve())
    flushed = faithtrace.flush(120)
    faithtrace.shutdown()
    gc.collect()
    server.shutdown()
    with seen_lock:
        summary = {event: {m: models.count(m) for m in set(models)} for event, models in seen.items()}
    otel_models: dict[str, int] = {}
    if exporter is not None:
        for span in exporter.get_finished_spans():
            model = str((span.attributes or {}).get("gen_ai.request.model", ""))
            if model and span.instrumentation_scope and "faithtrace" not in span.instrumentation_scope.name:
                otel_models[model] = otel_models.get(model, 0) + 1
    judge_requests = sum(1 for body in fake.requests if body.get("model") != HOST_MODEL.split("/", 1)[1])
    print(
        json.dumps(
            {
                "flushed": flushed,
                "callbacks": summary,
                "otel_span_models": otel_models,
                "judge_requests": judge_requests,
                "no_log_on_the_wire": sum(1 for body in fake.requests if {"no-log", "no_log"} & set(body)),
                "log_lines": records.lines,
            }
        )
    )


if __name__ == "__main__":
    main()
