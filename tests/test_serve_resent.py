# ruff: noqa: F811 - pytest fixtures imported from the fixture modules are parameters here
"""`faithtrace serve` when its sender gives up on a request and sends it again: what the Collector's load
balancer does when it is killed or restarted with requests in flight (its persistent queue re-sends them)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from _fake_judge import FakeJudge, fake_judge  # noqa: F401
from _serve_fixtures import Serve, Sink, otlp_export, run_serve, sink  # noqa: F401
from faithtrace._telemetry import names

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def _rag_request() -> bytes:
    """One OTLP request carrying one RAG span of a decorated app with remote scoring."""
    spans = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "resent-app"}))
    provider.add_span_processor(SimpleSpanProcessor(spans))
    with provider.get_tracer("resent-app").start_as_current_span("answer") as span:
        span.set_attribute(names.SCORING_REMOTE, True)
        span.set_attribute(names.FUNCTION, "answer")
        span.set_attribute("input.value", "Where is the Eiffel Tower?")
        span.set_attribute("output.value", "In Paris is the Eiffel Tower.")
        span.set_attribute("retrieval.documents.0.document.content", "The Eiffel Tower is in Paris.")
    provider.shutdown()
    return bytes(encode_spans(spans.get_finished_spans()).SerializeToString())


def _until(what: str, check: Callable[[], bool], serve: Serve, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"{what} not within {timeout}s: {serve.stats()}"
        time.sleep(0.05)


def test_a_request_sent_again_while_its_first_send_is_given_up_on_is_answered_once_scored(
    tmp_path: Path, fake_judge: FakeJudge, sink: Sink
) -> None:
    """The first send's connection goes (its Collector was killed) while the judge works on its item; the
    same item sent again joins the running evaluation and is answered OK as soon as it is scored, once.
    Not left unanswered until the sender's own deadline (the Collector's load balancer: 110 s)."""
    body = _rag_request()
    fake_judge.hang()  # the judge holds its answer until released
    with run_serve(tmp_path, fake_judge.base_url, sink.port) as serve:
        stats = serve.stats
        first_channel, first = otlp_export(serve.grpc_port)
        sent = first.future(body, timeout=60)  # kept: a call future collected is a call cancelled
        _until("the evaluation running", lambda: stats()["pending"] == 1, serve)
        first_channel.close()  # the sender is gone: the server cancels its request
        assert sent.cancelled() or sent.done()
        _until("the first request cancelled", lambda: stats()["requests_open"] == 0, serve)
        assert stats()["pending"] == 1  # the evaluation itself runs on

        channel, export = otlp_export(serve.grpc_port)
        again = export.future(body, timeout=30)
        _until("the second request joined the evaluation", lambda: stats()["duplicates"] == 1, serve)
        fake_judge.mode = "ok"
        fake_judge.release.set()
        try:
            again.result()
        except grpc.RpcError as error:  # DEADLINE_EXCEEDED: left unanswered with the first send
            pytest.fail(f"the request sent again was answered {error.code()}: {error.details()}")
        channel.close()
        assert len(sink.wait(1)) == 1
        time.sleep(0.3)  # an evaluation exported twice would be here by now
        assert len(sink.evaluations()) == 1
        assert stats()["scored"] == 1
