"""A real `faithtrace serve` process on loopback, and an OTLP/gRPC trace sink that reads its results back."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest


class Sink(trace_service_pb2_grpc.TraceServiceServicer):
    """What the scorer exported: every span with its resource attributes."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.spans: list[tuple[dict[str, Any], Any]] = []
        self.fail = False
        self.port = 0
        self.metrics: MetricSink | None = None

    def Export(self, request: Any, context: Any) -> Any:
        if self.fail:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "scripted sink failure")
        with self.lock:
            for rs in request.resource_spans:
                resource = {kv.key: kv.value.string_value for kv in rs.resource.attributes}
                for ss in rs.scope_spans:
                    self.spans.extend((resource, span) for span in ss.spans)
        return trace_service_pb2.ExportTraceServiceResponse()

    def evaluations(self) -> list[tuple[dict[str, Any], Any]]:
        """The evaluation spans received (with their resources). Each is in a trace of its own, linked to
        the RAG span it scores (``scored``)."""
        with self.lock:
            return [(r, s) for r, s in self.spans if s.name == "evaluate faithfulness"]

    def wait(self, count: int, timeout: float = 20.0) -> list[tuple[dict[str, Any], Any]]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = self.evaluations()
            if len(found) >= count:
                return found
            time.sleep(0.05)
        return self.evaluations()


def scored(evaluation: Any) -> tuple[int, int]:
    """(trace ID, span ID) of the RAG span an evaluation span (OTLP protobuf) scores: the span it links to."""
    (link,) = evaluation.links
    return int.from_bytes(link.trace_id, "big"), int.from_bytes(link.span_id, "big")


class MetricSink(metrics_service_pb2_grpc.MetricsServiceServicer):
    """Metric data points the scorer exported: (resource attributes, metric name, point attributes, value)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.points: list[tuple[dict[str, Any], str, dict[str, Any]]] = []

    def Export(self, request: Any, context: Any) -> Any:
        with self.lock:
            for rm in request.resource_metrics:
                resource = {kv.key: kv.value.string_value for kv in rm.resource.attributes}
                for sm in rm.scope_metrics:
                    for metric in sm.metrics:
                        kind = metric.WhichOneof("data")
                        for point in getattr(metric, kind).data_points:
                            attrs = {kv.key: kv.value.string_value for kv in point.attributes}
                            self.points.append((resource, metric.name, attrs))
        return metrics_service_pb2.ExportMetricsServiceResponse()


@contextlib.contextmanager
def running_sink() -> Iterator[Sink]:
    """A Sink served over OTLP/gRPC on 127.0.0.1 for the duration of the block (benchmarks use it too)."""
    s = Sink()
    s.metrics = MetricSink()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(s, server)
    metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(s.metrics, server)
    s.port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield s
    finally:
        server.stop(0)


@pytest.fixture
def sink() -> Iterator[Sink]:
    with running_sink() as s:
        yield s


class Serve:
    def __init__(self, proc: subprocess.Popen[str], info: dict[str, Any], log: Path) -> None:
        self.proc = proc
        self.grpc_port = int(info["grpc_port"])
        self.http_port = int(info["http_port"])
        self.log = log
        self.signalled = False

    @property
    def http(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    def stats(self) -> dict[str, Any]:
        import urllib.request

        with urllib.request.urlopen(self.http + "/stats", timeout=5) as r:
            return dict(json.loads(r.read()))

    def metrics(self) -> str:
        """The Prometheus text of ``/metrics``."""
        import urllib.request

        with urllib.request.urlopen(self.http + "/metrics", timeout=5) as r:
            return str(r.read().decode())

    def terminate(self) -> None:
        """SIGTERM, once: a second one after the drain, once serve has given its signal handler back, would
        end the process with -15 instead of 0."""
        if self.proc.poll() is None and not self.signalled:
            self.proc.send_signal(signal.SIGTERM)
            self.signalled = True

    def stop(self, timeout: float = 20.0) -> int:
        if self.proc.poll() is None:
            self.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        return self.proc.returncode


@contextlib.contextmanager
def run_serve(tmp_path: Path, judge_base: str, sink_port: int, *args: str, **env: str) -> Iterator[Serve]:
    with run_serves(judge_base, sink_port, (tmp_path, args, env)) as (serve,):
        yield serve


Replica = tuple[Path, tuple[str, ...], dict[str, str]]  # its folder, its flags, its environment


@contextlib.contextmanager
def run_serves(judge_base: str, sink_port: int, *replicas: Replica) -> Iterator[list[Serve]]:
    """Replicas started together (each start is seconds of imports: they overlap) and stopped together, each
    from its own folder (its ready file and serve.log)."""
    started: list[tuple[subprocess.Popen[str], Path, Path]] = []
    serves: list[Serve] = []
    try:
        for tmp_path, args, env in replicas:
            started.append(_spawn(tmp_path, judge_base, sink_port, args, env))
        deadline = time.monotonic() + 60
        for proc, ready, log in started:
            while not ready.exists():
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"faithtrace serve did not start:\n{log.read_text()}")
                time.sleep(0.05)
            time.sleep(0.05)
            serves.append(Serve(proc, json.loads(ready.read_text()), log))
        yield serves
    finally:
        for serve in serves:  # all signalled first: their drains overlap too
            serve.terminate()
        for serve in serves:
            serve.stop()
        for proc, _, _ in started[len(serves) :]:
            if proc.poll() is None:
                proc.kill()
                proc.wait(5)


def _spawn(
    tmp_path: Path, judge_base: str, sink_port: int, args: tuple[str, ...], env: dict[str, str]
) -> tuple[subprocess.Popen[str], Path, Path]:
    ready = tmp_path / f"ready-{time.monotonic_ns()}.json"
    log = tmp_path / "serve.log"
    environ = {
        **os.environ,
        "FAITHTRACE_JUDGE_MODEL": "openai/fake-judge",
        "FAITHTRACE_JUDGE_API_BASE": judge_base + "/v1",
        "FAITHTRACE_JUDGE_API_KEY": "x",
        "FAITHTRACE_JUDGE_MAX_RETRIES": "0",
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{sink_port}",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
        "OTEL_METRIC_EXPORT_INTERVAL": "500",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        **env,
    }
    cmd = [sys.executable, "-m", "faithtrace.cli", "serve", "--grpc-port", "0", "--http-port", "0"]
    with log.open("w") as out:
        proc = subprocess.Popen(
            [*cmd, "--ready-file", str(ready), *args],
            env=environ,
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
        )
    return proc, ready, log


def oi_request(*spans: tuple[int, int, int, str, dict[str, str]]) -> bytes:
    """One OTLP request of OpenInference spans: (trace id, span id, parent id, name, attributes)."""
    req = ExportTraceServiceRequest()
    rs = req.resource_spans.add()
    kv = rs.resource.attributes.add()
    kv.key, kv.value.string_value = "service.name", "oi-app"
    scope = rs.scope_spans.add()
    for trace_id, span_id, parent, name, attrs in spans:
        span = scope.spans.add()
        span.trace_id, span.span_id, span.name = (
            trace_id.to_bytes(16, "big"),
            span_id.to_bytes(8, "big"),
            name,
        )
        if parent:
            span.parent_span_id = parent.to_bytes(8, "big")
        for key, value in attrs.items():
            a = span.attributes.add()
            a.key, a.value.string_value = key, value
    return req.SerializeToString()


OiSpan = tuple[int, int, int, str, dict[str, str]]
# An OpenInference RAG trace in two spans: its retriever (span 2), its CHAIN root (span 1) answering from it.
OI_DOCS = "The Eiffel Tower is in Paris. It opened in 1889."
OI_ANSWER = "In Paris is the Eiffel Tower. In 1889 it opened."  # reworded: judged, not proven in code


def oi_retriever(trace_id: int, docs: str = OI_DOCS) -> OiSpan:
    attrs = {"openinference.span.kind": "RETRIEVER", "retrieval.documents.0.document.content": docs}
    return trace_id, 2, 1, "retrieve", attrs


def oi_root(trace_id: int, answer: str = OI_ANSWER) -> OiSpan:
    attrs = {"openinference.span.kind": "CHAIN", "input.value": "Where is it?", "output.value": answer}
    return trace_id, 1, 0, "query", attrs


def otlp_export(port: int) -> tuple[grpc.Channel, grpc.UnaryUnaryMultiCallable]:
    """A channel to an OTLP/gRPC receiver and its raw trace Export call (bytes in, bytes out)."""
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    return channel, channel.unary_unary("/opentelemetry.proto.collector.trace.v1.TraceService/Export")
