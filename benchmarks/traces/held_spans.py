"""RAG spans held for their evaluation: how long, and what a crash loses.

With ``evaluation_placement="rag_span"`` (the default) a scored call's RAG span is exported once its
evaluation is on it, at most ``hold_timeout_s`` after the call. Two questions:

* ``--scenario hold``: how long the default judge (the embedded llama.cpp judge) keeps spans held, so that
  the default ``hold_timeout_s`` fits it. Decorated calls answer real RAG rows (``--data``, RAGTruth's QA dev
  rows; without it, the example service's questions) one every ``--interval`` seconds, then ``--burst`` at
  once, after one call that starts the judge; per call the evaluation's own time, its queue wait and the
  span's hold (export time minus the call's end), and whether the deadline released it (its evaluation is
  then read from the linked evaluation span). Needs ``make judge``.
* ``--scenario kill9``: what ``kill -9`` of the app loses with held spans against placement ``child``. An
  app process configured from the environment alone (OTLP/gRPC to a receiver in this process, the SDK's
  batch defaults, the worker's defaults: 4 evaluations at once) makes calls at a steady rate, judged by a
  stand-in of a fixed latency per request; after ``--seconds`` it is killed with SIGKILL. Lost: calls that
  returned whose RAG span never arrived, and evaluations that never arrived. Each ``--load RATE:LATENCY``
  is one such app: by default one whose judge keeps up (2 calls/s, 0.5 s per request: 8/s of capacity) and
  one whose judge does not (20 calls/s, 2 s: 2/s), where spans wait in the queue until the hold deadline.

* ``--scenario paths``: for each way of scoring (the decorator, ``score_openinference()`` on a LlamaIndex
  app, ``faithtrace serve``) and each placement, how long the request's trace lasts as a backend computes it
  (first span's start to last span's end, over every span in the request's trace) against the request's own
  root span, with a stand-in judge taking ``--judge-latency`` seconds per request; and whether the score is in
  the request's trace (what tail sampling on the label needs).

    python benchmarks/traces/held_spans.py --scenario kill9 --quick
    python benchmarks/traces/held_spans.py --scenario hold --data ../shared/data/ragtruth_qa_dev.jsonl
    python benchmarks/traces/held_spans.py --scenario paths
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # `benchmarks.*`

from benchmarks._shared import common as _common  # noqa: E402
from faithtrace._telemetry import names  # noqa: E402

FUNCTION = "bench-rag"
CONTEXT = "Refunds are accepted within 30 days of delivery."
ANSWER = "Within thirty days of delivery, you can get your money back."  # not provable in code: judged


# --- what reached the backend -------------------------------------------------------------------------------
def _received(sink: Any) -> tuple[set[str], set[str]]:
    """From the spans a Sink (tests/_serve_fixtures.py) received: the request traces whose RAG span arrived,
    and those whose evaluation arrived (on the RAG span, or in an evaluation span pointing at it: its parent
    with placement child, its link with linked)."""
    with sink.lock:
        spans = [s for _r, s in sink.spans]
    rag = {s.trace_id.hex() for s in spans if s.name == FUNCTION}
    evaluated = {
        s.trace_id.hex()
        for s in spans
        if s.name == FUNCTION and any(e.name == names.GEN_AI_EVALUATION_RESULT_EVENT for e in s.events)
    }
    for s in spans:
        if s.name == names.EVALUATION_SPAN:
            evaluated.add((s.links[0].trace_id if s.links else s.trace_id).hex())
    return rag, evaluated


# --- kill -9 ------------------------------------------------------------------------------------------------
_APP = textwrap.dedent(
    """
    import sys, time
    import faithtrace

    @faithtrace.trace_faithfulness(name=%(function)r)
    def answer(question, contexts):
        return "Refunds are accepted within 30 days. Store credit is offered after that."

    # Configured from the environment alone, as a deployed app is: OTEL_EXPORTER_OTLP_ENDPOINT, the judge.
    faithtrace.configure()
    answer("warm up", ["Refunds are accepted within 30 days."])  # litellm's import, before the clock runs
    faithtrace.flush(60)
    print("READY", flush=True)
    interval = 1.0 / %(rate)f
    next_at = time.monotonic()
    while True:
        answer("What is the refund window?", ["Refunds are accepted within 30 days of delivery."])
        print("RET", flush=True)
        next_at += interval
        time.sleep(max(0.0, next_at - time.monotonic()))
    """
)


def _die_with_parent() -> None:
    # The app must not outlive this benchmark, whatever ends it.
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def kill9_run(placement: str, rate: float, seconds: float, judge_url: str) -> dict[str, Any]:
    sys.path.insert(0, str(ROOT / "tests"))
    from _serve_fixtures import running_sink

    with running_sink() as sink:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "FAITHTRACE_"))}
        env.update(
            OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{sink.port}",
            OTEL_EXPORTER_OTLP_PROTOCOL="grpc",
            OTEL_SERVICE_NAME="kill9-app",
            OTEL_METRICS_EXPORTER="none",
            FAITHTRACE_JUDGE_MODEL="openai/bench-judge",
            FAITHTRACE_JUDGE_API_BASE=judge_url,
            FAITHTRACE_JUDGE_API_KEY="sk-bench",
            FAITHTRACE_EVALUATION_PLACEMENT=placement,
        )
        code = _APP % {"function": FUNCTION, "rate": rate}
        app = subprocess.Popen(
            [sys.executable, "-c", code],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=_die_with_parent,
        )
        assert app.stdout is not None
        returned = 0
        try:
            line = app.stdout.readline()
            if not line.startswith("READY"):
                raise RuntimeError(f"the app did not start: {line}{app.stderr.read() if app.stderr else ''}")
            before = set().union(*_received(sink))  # the warm-up call's
            started = time.monotonic()
            reader_done = threading.Event()
            count = [0]

            def read() -> None:
                assert app.stdout is not None
                for out in app.stdout:
                    if out.startswith("RET"):
                        count[0] += 1
                reader_done.set()

            threading.Thread(target=read, daemon=True).start()
            time.sleep(max(0.0, seconds - (time.monotonic() - started)))
            app.send_signal(signal.SIGKILL)
            app.wait(timeout=30)
            reader_done.wait(10)
            returned = count[0]
            time.sleep(2.0)  # whatever was on the wire has landed
            rag, evaluated = (found - before for found in _received(sink))
        finally:
            if app.poll() is None:
                app.kill()
                app.wait()
    return {
        "placement": placement,
        "calls_returned": returned,
        "rag_spans_received": len(rag),
        "rag_spans_lost": max(0, returned - len(rag)),
        "rag_spans_lost_s": round(max(0, returned - len(rag)) / rate, 2),
        "evaluations_received": len(evaluated),
        "evaluations_lost": max(0, returned - len(evaluated)),
    }


# --- hold times with the default judge ----------------------------------------------------------------------
def _rows(data: str | None, limit: int) -> list[tuple[str, list[str], str]]:
    """(question, contexts, answer) rows: RAGTruth's QA rows from ``data``, else the example's questions."""
    if data:
        rows = []
        with open(data, encoding="utf-8") as f:
            for line in f:
                row = json.loads(line)
                rows.append((row.get("question") or row.get("query"), row["contexts"], row["answer"]))
                if len(rows) >= limit:
                    break
        return rows
    sys.path.insert(0, str(ROOT / "examples"))
    from rag_service import knowledge

    questions = [
        ("How long do I have to return an e-bike?", "none"),
        ("How long are batteries covered by the warranty?", "contradict"),
        ("Where do orders ship from?", "embellish"),
    ]
    out = []
    for i in range(limit):
        question, made_up = questions[i % len(questions)]
        found = knowledge.answer(question, made_up)
        out.append((question, [d.text for d in found.documents], found.text))
    return out


def hold_run(rows: Sequence[tuple[str, list[str], str]], interval: float, burst: int) -> dict[str, Any]:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

    import faithtrace

    exported: list[tuple[Any, int]] = []
    lock = threading.Lock()

    class Noting(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            now = time.time_ns()
            with lock:
                exported.extend((s, now) for s in spans)
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(Noting()))
    faithtrace.configure(tracer_provider=provider)  # the default judge, the default hold
    settings = faithtrace._runtime.lifecycle.current().settings
    rows = list(rows)

    @faithtrace.trace_faithfulness(name=FUNCTION, query="question", contexts="contexts", answer=lambda r: r)
    def call(question: str, contexts: list[str], text: str) -> str:
        return text

    # The judge starts (the embedded one loads its model) and litellm is imported before the clock runs.
    call(*rows[0])
    faithtrace.flush(3600)
    with lock:
        exported.clear()
    paced = rows[: len(rows) - burst] if burst else rows
    started = time.monotonic()
    for question, contexts, text in paced:
        call(question, contexts, text)
        time.sleep(interval)
    for question, contexts, text in rows[len(paced) :]:
        call(question, contexts, text)
    faithtrace.flush(3600)
    faithtrace.shutdown(30)
    provider.shutdown()
    # An evaluation is on its RAG span, or (the span went out at the deadline) on an evaluation span of its
    # own linked to it.
    late = {s.links[0].context.span_id: s for s, _ in exported if s.name == names.EVALUATION_SPAN and s.links}
    per_call = []
    for span, at in exported:
        if span.name != FUNCTION:
            continue
        attrs = dict(span.attributes or {})
        evaluated = late.get(span.context.span_id)
        if evaluated is not None:
            attrs.update(evaluated.attributes or {})
        per_call.append(
            {
                "hold_s": round((at - span.end_time) / 1e9, 2),
                "evaluation_s": attrs.get(names.EVAL_DURATION),
                "queue_wait_s": attrs.get(names.EVAL_QUEUE_WAIT),
                "released": (span.attributes or {}).get(names.HOLD_REASON) or names.HOLD_EVALUATED,
            }
        )
    per_call.sort(key=lambda c: c["hold_s"])
    paced_n = len(paced)
    holds = [c["hold_s"] for c in per_call]
    evals = [c["evaluation_s"] for c in per_call if c["evaluation_s"] is not None]
    waits = [c["queue_wait_s"] for c in per_call if c["queue_wait_s"] is not None]
    return {
        "judge": settings.judge.model or "embedded local judge",
        "hold_timeout_s": settings.worker.hold_timeout_s,
        "calls": len(rows),
        "paced_calls": paced_n,
        "interval_s": interval,
        "burst": burst,
        "wall_s": round(time.monotonic() - started, 1),
        "evaluation_s": {
            "p50": _common.percentile(evals, 50),
            "p95": _common.percentile(evals, 95),
            "max": max(evals, default=float("nan")),
        },
        "queue_wait_s": {
            "p50": _common.percentile(waits, 50),
            "max": max(waits, default=float("nan")),
        },
        "hold_s": {
            "p50": _common.percentile(holds, 50),
            "p95": _common.percentile(holds, 95),
            "max": max(holds, default=float("nan")),
        },
        "released_at_deadline": sum(1 for c in per_call if c["released"] == names.HOLD_DEADLINE),
        "per_call": per_call,
    }


# --- each path's trace durations ----------------------------------------------------------------------------
def _extent(spans: Sequence[tuple[int, int]]) -> float:
    return (max(end for _, end in spans) - min(start for start, _ in spans)) / 1e6


def _in_process(path: str, placement: str, judge_url: str) -> dict[str, Any]:
    """The decorator or score_openinference() on a LlamaIndex app: every span in memory, as a backend gets
    them."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    import faithtrace

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    judge = faithtrace.JudgeSettings(model="openai/bench-judge", api_base=judge_url, api_key="sk-bench")
    # Every answer goes to the judge (MockLLM echoes its prompt, which code would prove supported).
    scoring = faithtrace.ScoringOptions(prove_support=False)
    faithtrace.configure(
        tracer_provider=provider, judge=judge, scoring=scoring, evaluation_placement=placement
    )
    tracer = provider.get_tracer("web")
    instrumentor = None
    try:
        if path == "decorator":

            @faithtrace.trace_faithfulness(name=FUNCTION)
            def run(question: str, contexts: list[str]) -> str:
                time.sleep(0.02)  # the app's own work
                return ANSWER

            def call() -> Any:
                return run("What is the refund window?", [CONTEXT])

        else:
            from llama_index.core import Document, VectorStoreIndex
            from llama_index.core.embeddings import MockEmbedding
            from llama_index.core.llms import MockLLM
            from openinference.instrumentation.llama_index import LlamaIndexInstrumentor

            instrumentor = LlamaIndexInstrumentor()
            instrumentor.instrument(tracer_provider=provider)
            faithtrace.score_openinference(provider)
            docs = [Document(text=CONTEXT)]
            engine = VectorStoreIndex.from_documents(
                docs, embed_model=MockEmbedding(embed_dim=8)
            ).as_query_engine(llm=MockLLM(max_tokens=16))

            def call() -> Any:
                return engine.query("What is the refund window?")

        call()  # warm up: litellm's import and the first evaluation
        faithtrace.flush(120)
        exporter.clear()
        with tracer.start_as_current_span("POST /ask") as root:
            call()
        trace_id = root.get_span_context().trace_id
        faithtrace.flush(120)
        spans = exporter.get_finished_spans()
    finally:
        if instrumentor is not None:
            instrumentor.uninstrument()
        faithtrace.shutdown(10)
        provider.shutdown()
    request = [s for s in spans if s.context.trace_id == trace_id]
    root_span = next(s for s in request if s.name == "POST /ask")
    scored = any(any(e.name == names.GEN_AI_EVALUATION_RESULT_EVENT for e in s.events) for s in request)
    return {
        "path": "decorator" if path == "decorator" else "score_openinference",
        "placement": placement,
        "request_ms": round((root_span.end_time - root_span.start_time) / 1e6, 1),
        "trace_ms": round(_extent([(s.start_time, s.end_time) for s in request]), 1),
        "score_in_request_trace": scored,
    }


def _serve(placement: str, judge_url: str, workdir: Path) -> dict[str, Any]:
    """``faithtrace serve`` scoring a decorated app's RAG span (scoring="remote"): the app's spans in memory,
    the scorer's from its OTLP sink."""
    sys.path.insert(0, str(ROOT / "tests"))
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    import faithtrace
    from _serve_fixtures import run_serve, running_sink

    env = {} if placement == "rag_span" else {"FAITHTRACE_EVALUATION_PLACEMENT": placement}
    base = judge_url.removesuffix("/v1")
    with running_sink() as sink, run_serve(workdir, base, sink.port, **env) as serve:
        memory = InMemorySpanExporter()
        provider = TracerProvider(resource=Resource.create({"service.name": "remote-app"}))
        provider.add_span_processor(SimpleSpanProcessor(memory))
        otlp = OTLPSpanExporter(endpoint=f"127.0.0.1:{serve.grpc_port}", insecure=True)
        provider.add_span_processor(SimpleSpanProcessor(otlp))
        faithtrace.configure(scoring="remote", tracer_provider=provider)
        try:

            @faithtrace.trace_faithfulness(name=FUNCTION)
            def answer(question: str, contexts: list[str]) -> str:
                time.sleep(0.02)  # the app's own work
                return ANSWER

            tracer = provider.get_tracer("web")
            with tracer.start_as_current_span("POST /ask") as root:
                answer("What is the refund window?", [CONTEXT])
            trace_id = root.get_span_context().trace_id
            faithtrace.flush(30)
            deadline = time.monotonic() + 120
            while not sink.evaluations() and time.monotonic() < deadline:
                time.sleep(0.1)
        finally:
            faithtrace.shutdown(10)
            provider.shutdown()
        app_spans = [s for s in memory.get_finished_spans() if s.context.trace_id == trace_id]
        theirs = [s for _r, s in sink.spans if int.from_bytes(s.trace_id, "big") == trace_id]
    root_span = next(s for s in app_spans if s.name == "POST /ask")
    times = [(s.start_time, s.end_time) for s in app_spans]
    times += [(s.start_time_unix_nano, s.end_time_unix_nano) for s in theirs]
    return {
        "path": "faithtrace serve",
        "placement": placement,
        "request_ms": round((root_span.end_time - root_span.start_time) / 1e6, 1),
        "trace_ms": round(_extent(times), 1),
        "score_in_request_trace": any(s.name == names.EVALUATION_SPAN for s in theirs),
    }


def paths_runs(judge_latency: float, workdir: Path) -> list[dict[str, Any]]:
    runs = []
    with _common.fake_judge(judge_latency, max_seconds=3600) as url:
        for placement in ("rag_span", "child", "linked"):
            runs.append(_in_process("decorator", placement, url))
        for placement in ("rag_span", "child"):
            runs.append(_in_process("openinference", placement, url))
        for placement in ("rag_span", "child"):
            runs.append(_serve(placement, url, workdir))
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--scenario", choices=("kill9", "hold", "paths"), required=True)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", default=None)
    kill9 = parser.add_argument_group("kill9")
    kill9.add_argument(
        "--load",
        action="append",
        default=None,
        metavar="RATE:LATENCY",
        help="calls per second and the judge's seconds per request (repeat it; default 2:0.5 and 20:2)",
    )
    kill9.add_argument("--seconds", type=float, default=30.0, help="killed after this long")
    kill9.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--path-judge-latency", type=float, default=1.0, help="paths: seconds per judge request"
    )
    hold = parser.add_argument_group("hold")
    hold.add_argument(
        "--data", default=None, help="RAGTruth QA rows (JSONL); default: the example's questions"
    )
    hold.add_argument("--calls", type=int, default=12)
    hold.add_argument("--interval", type=float, default=15.0, help="seconds between the paced calls")
    hold.add_argument("--burst", type=int, default=4, help="calls made at once after the paced ones")
    args = parser.parse_args()

    if args.scenario == "kill9":
        if args.quick:
            args.seconds, args.repeats = 12.0, 1
        loads = [tuple(float(x) for x in load.split(":")) for load in (args.load or ["2:0.5", "20:2"])]
        runs = []
        for rate, latency in loads:
            with _common.fake_judge(latency, max_seconds=3600) as url:
                for _ in range(args.repeats):
                    for placement in ("rag_span", "child"):
                        run = kill9_run(placement, rate, args.seconds, url)
                        runs.append({"rate_per_s": rate, "judge_latency_s": latency, **run})
        print(
            _common.table(
                ["calls/s", "judge s", "placement", "returned", "RAG spans lost", "= s of traffic",
                 "evaluations lost"],
                [
                    [r["rate_per_s"], r["judge_latency_s"], r["placement"], r["calls_returned"],
                     r["rag_spans_lost"], r["rag_spans_lost_s"], r["evaluations_lost"]]
                    for r in runs
                ],
            )
        )  # fmt: skip
        data = {"seconds": args.seconds, "concurrency": 4, "runs": runs}
        out = args.out or _common.default_out("held-spans-kill9", args.quick)
        print(f"\nwrote {_common.write_results('held_spans_kill9', data, out)}")
        return

    if args.scenario == "paths":
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            runs = paths_runs(args.path_judge_latency, Path(tmp))
        print(
            _common.table(
                ["path", "placement", "request ms", "trace ms", "score in the request's trace"],
                [[r["path"], r["placement"], r["request_ms"], r["trace_ms"], r["score_in_request_trace"]]
                 for r in runs],
            )
        )  # fmt: skip
        data = {"judge_latency_s": args.path_judge_latency, "runs": runs}
        out = args.out or _common.default_out("held-spans-paths", args.quick)
        print(f"\nwrote {_common.write_results('held_spans_paths', data, out)}")
        return

    if args.quick:
        args.calls, args.interval, args.burst = 3, 2.0, 2
    rows = _rows(args.data, args.calls)
    result = hold_run(rows, args.interval, min(args.burst, len(rows)))
    print(
        _common.table(
            ["judge", "hold_timeout_s", "calls", "eval p50", "eval p95", "eval max", "wait max", "hold p50",
             "hold max", "at deadline"],
            [[result["judge"], result["hold_timeout_s"], result["calls"], result["evaluation_s"]["p50"],
              result["evaluation_s"]["p95"], result["evaluation_s"]["max"], result["queue_wait_s"]["max"],
              result["hold_s"]["p50"], result["hold_s"]["max"], result["released_at_deadline"]]],
        )
    )  # fmt: skip
    out = args.out or _common.default_out("held-spans-hold", args.quick)
    print(f"\nwrote {_common.write_results('held_spans_hold', result, out)}")


if __name__ == "__main__":
    main()
