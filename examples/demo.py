"""`make demo`: the example RAG service answers a few questions and faithtrace scores every answer, live.

What happens:
1. The example service (examples/rag_service) starts on 127.0.0.1 under uvicorn, in this process.
2. We ask it a few questions over HTTP. For some, the service's scripted model is told to make something up.
   Each request returns at once: scoring happens later, in faithtrace's background worker.
3. faithtrace scores each answer with its judge (the embedded local judge unless FAITHTRACE_JUDGE_MODEL names
   a litellm model) and records the result as spans and span events.
4. We print what was exported: each RAG span with its evaluation's events, read back from an in-memory
   exporter.
   With OTEL_EXPORTER_OTLP_ENDPOINT set, the same spans also go to your collector (Jaeger, Phoenix, ...).

5. We write an HTML report of the evaluations (faithtrace's `eval` report) and print where it is.

Usage: python examples/demo.py [--questions N] [--timeout SECONDS] [--json PATH] [--report HTML]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import socket
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from rich.console import Console

sys.path.insert(0, str(Path(__file__).resolve().parent))

from rag_service.app import create_app
from rag_service.demo_report import write_demo_report
from rag_service.demo_view import print_evaluation, print_intro, print_summary
from rag_service.knowledge import Hallucination
from rag_service.readback import EvaluationView, evaluation_for_trace, read_evaluations

import faithtrace


@dataclass(frozen=True)
class Question:
    text: str
    hallucinate: Hallucination
    what: str  # what the scripted model was told to do, in words


# Faithful and made-up answers alternate so that `--questions 2` already shows a pass and a fail.
QUESTIONS = (
    Question("How long do I have to return an e-bike?", "none", "answer faithfully"),
    Question("How long are batteries covered by the warranty?", "contradict", "change a fact (2 → 4 years)"),
    Question("Where do orders ship from?", "embellish", "add a fact the passage does not state"),
    Question("What is the range of the Voltaro City?", "none", "answer faithfully"),
)


@dataclass
class Asked:
    question: Question
    answer: str
    trace_id: str | None
    http_ms: float


def _otlp_exporter() -> SpanExporter | None:
    """An OTLP exporter when the standard OTel env asks for one; the exporter reads the endpoint itself."""
    if not (
        os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    ):
        return None
    protocol = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or os.environ.get(
        "OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"
    )
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter

        return GrpcExporter()
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter

    return HttpExporter()


class _JudgeProgress(logging.Handler):
    """Shows the local judge's start-up messages (and any faithtrace warning) while we wait."""

    def __init__(self, console: Console) -> None:
        super().__init__(logging.INFO)
        self.console = console

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno < logging.WARNING and record.module not in ("_model", "_server", "local"):
            return
        message = record.getMessage().removeprefix("faithtrace: ")
        style = "yellow" if record.levelno >= logging.WARNING else "cyan"
        self.console.print(f"   [{style}]judge ›[/] {message}", highlight=False)


class _Service:
    """The example app under uvicorn on 127.0.0.1, on a port the OS picks, in a background thread."""

    def __init__(self, provider: TracerProvider) -> None:
        self.socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.socket.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.socket.getsockname()[1]}"
        app = create_app(configure_faithtrace=False, tracer_provider=provider)
        config = uvicorn.Config(app, log_level="warning", lifespan="on")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.socket]}, daemon=True)

    def __enter__(self) -> _Service:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the example service did not start")
            time.sleep(0.05)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
        self.socket.close()


def _ask(url: str, questions: list[Question], console: Console) -> list[Asked]:
    asked: list[Asked] = []
    with httpx.Client(base_url=url, trust_env=False, timeout=30.0) as client:
        for i, q in enumerate(questions, 1):
            t0 = time.perf_counter()
            response = client.post("/ask", json={"question": q.text, "hallucinate": q.hallucinate})
            response.raise_for_status()
            ms = (time.perf_counter() - t0) * 1000
            body = response.json()
            asked.append(Asked(q, body["answer"], body.get("trace_id"), ms))
            console.print(
                f"   {i}. [bold]{q.text}[/]  [dim](model told to {q.what}; HTTP 200 in {ms:.0f} ms)[/]",
                highlight=False,
            )
    return asked


def _wait_for_evaluations(
    exporter: InMemorySpanExporter, asked: list[Asked], timeout: float, console: Console, started: float
) -> dict[int, EvaluationView]:
    """Print each evaluation as soon as its span is exported; stop when all are in, or when none has come for
    ``timeout`` seconds (a judge shared with other work can be much slower than usual, but not stuck)."""
    found: dict[int, EvaluationView] = {}
    deadline = time.monotonic() + timeout
    with console.status("") as status:
        while len(found) < len(asked) and time.monotonic() < deadline:
            views = read_evaluations(exporter.get_finished_spans())
            for i, a in enumerate(asked):
                view = evaluation_for_trace(views, a.trace_id) if a.trace_id else None
                if i not in found and view is not None:
                    found[i] = view
                    deadline = time.monotonic() + timeout
                    print_evaluation(console, i + 1, len(asked), a.question.what, view)
            elapsed = time.monotonic() - started
            status.update(
                f"[bold]scoring in the background[/] · {len(found)}/{len(asked)} done · {elapsed:.0f} s"
                + ("" if found else " · the first evaluation also starts the judge")
            )
            time.sleep(0.5)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--questions", type=int, default=len(QUESTIONS), help="how many questions to ask (1-4)"
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=900.0,
        help="give up when no evaluation has arrived for this long (s)",
    )
    parser.add_argument("--json", type=Path, help="also write the read-back results to this JSON file")
    parser.add_argument(
        "--report",
        type=Path,
        default=Path("demo-output/report.html"),
        help="write the HTML report here, and the results next to it (default demo-output/report.html)",
    )
    args = parser.parse_args(argv)
    questions = list(QUESTIONS[: max(1, min(args.questions, len(QUESTIONS)))])

    console = Console(highlight=False)
    started = time.monotonic()
    judge_model = os.environ.get("FAITHTRACE_JUDGE_MODEL")
    otlp = _otlp_exporter()
    print_intro(console, judge_model, otlp is not None)

    handler = _JudgeProgress(console)
    ft_logger = logging.getLogger("faithtrace")
    ft_logger.addHandler(handler)
    ft_logger.setLevel(logging.INFO)

    exporter = InMemorySpanExporter()
    resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME", "voltaro-help-centre")})
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    if otlp is not None:
        provider.add_span_processor(BatchSpanProcessor(otlp))
    # The judge comes from the environment: FAITHTRACE_JUDGE_MODEL etc., or the embedded local judge. The
    # local judge answers one request at a time, so evaluations run one by one, with generous time limits: on
    # a busy 2-core machine one request can wait minutes for the CPU. The questions all arrive at once, so the
    # last ones' RAG spans are held that long too, for their evaluations to be on them.
    if judge_model:
        faithtrace.configure(tracer_provider=provider)
    else:
        faithtrace.configure(
            tracer_provider=provider,
            judge=faithtrace.JudgeSettings(timeout_s=300),
            worker=faithtrace.WorkerOptions(evaluation_timeout_s=900, hold_timeout_s=900),
        )

    found: dict[int, EvaluationView] = {}
    asked: list[Asked] = []
    try:
        with _Service(provider) as service:
            console.print(f"\n[bold]Asking the example service[/] at {service.url}/ask")
            asked = _ask(service.url, questions, console)
            console.print()
            found = _wait_for_evaluations(exporter, asked, args.timeout, console, started)
    finally:
        faithtrace.shutdown(timeout=10.0)
        provider.shutdown()
        ft_logger.removeHandler(handler)

    print_summary(
        console, [(a.question.text, a.question.hallucinate, found.get(i)) for i, a in enumerate(asked)]
    )
    console.print(f"[dim]total {time.monotonic() - started:.0f} s[/]")
    if found:
        scored = [(a.question.hallucinate != "none", found[i]) for i, a in enumerate(asked) if i in found]
        results = write_demo_report(args.report, scored)
        console.print(
            f"\n[bold]Report:[/] {args.report.resolve()}  [dim](open it in a browser; "
            f"`faithtrace report {results}` writes it again)[/]",
            soft_wrap=True,
        )
    if args.json is not None:
        rows: list[dict[str, Any]] = [
            {
                "question": a.question.text,
                "hallucinate": a.question.hallucinate,
                "http_answer": a.answer,
                "trace_id": a.trace_id,
                "evaluation": found[i].as_dict() if i in found else None,
            }
            for i, a in enumerate(asked)
        ]
        args.json.write_text(json.dumps(rows, indent=2))
    missing = len(asked) - len(found)
    if missing:
        console.print(
            f"[yellow]{missing} answer(s) not scored within {args.timeout:.0f} s of the previous one.[/] "
            "The judge may be busy with other work (the local judge serves one request at a time): try "
            "again, with --questions 2, a longer --timeout, or another judge (FAITHTRACE_JUDGE_MODEL)."
        )
    errors = sum(1 for v in found.values() if v.outcome == "error")
    return 1 if missing or errors or not asked else 0


if __name__ == "__main__":
    sys.exit(main())
