# ruff: noqa: F811 - pytest fixtures imported from the fixture modules are parameters here
"""`faithtrace serve` end to end on loopback: real OTel SDK exporters in, a real OTLP/gRPC sink out, the
scripted judge of `_fake_judge` (its replies parsed on the real path)."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import grpc
import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter

import faithtrace
from _fake_judge import FakeJudge, fake_judge  # noqa: F401
from _serve_fixtures import Sink, oi_request, oi_retriever, oi_root, run_serve, scored, sink  # noqa: F401

# Each test runs a real `faithtrace serve` and waits out what it checks (timeouts, drains, retries).
pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

DOCS = ["The Eiffel Tower is in Paris.", "It opened in 1889."]
# Reworded from DOCS, so that it is judged rather than proven in code (the tests watch the judge call).
ANSWER = "In Paris is the Eiffel Tower. In 1889 it opened."


def _provider(exporter: SpanExporter, service: str) -> TracerProvider:
    tp = TracerProvider(resource=Resource.create({"service.name": service}))
    tp.add_span_processor(SimpleSpanProcessor(exporter))
    return tp


def _attrs(span: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kv in span.attributes:
        v = kv.value
        out[kv.key] = getattr(v, v.WhichOneof("value")) if v.WhichOneof("value") else None
    return out


def _openinference_trace(tp: TracerProvider, question: str, answer: str, docs: list[str]) -> tuple[int, int]:
    """A LlamaIndex-shaped trace: a CHAIN root with input/output, a RETRIEVER child with documents."""
    tracer = tp.get_tracer("openinference.instrumentation.llama_index")
    with tracer.start_as_current_span("RetrieverQueryEngine.query") as root:
        root.set_attribute("openinference.span.kind", "CHAIN")
        root.set_attribute("input.value", question)
        with tracer.start_as_current_span("VectorIndexRetriever.retrieve") as retriever:
            retriever.set_attribute("openinference.span.kind", "RETRIEVER")
            retriever.set_attribute("input.value", question)
            for i, doc in enumerate(docs):
                retriever.set_attribute(f"retrieval.documents.{i}.document.content", doc)
                retriever.set_attribute(f"retrieval.documents.{i}.document.id", f"doc-{i}")
        root.set_attribute("output.value", answer)
        ctx = root.get_span_context()
    return ctx.trace_id, ctx.span_id


def test_remote_decorator_over_grpc_is_scored_once_with_the_apps_identity(
    tmp_path: Path, fake_judge: FakeJudge, sink: Sink
) -> None:
    with run_serve(tmp_path, fake_judge.base_url, sink.port) as serve:
        # Ready (the ready file, /readyz) only once the judge has started up: litellm is imported before the
        # first request rather than inside it, where the load balancer would have every replica wait for it.
        assert serve.stats()["warm"] == 1
        with urllib.request.urlopen(serve.http + "/readyz", timeout=5) as ready:
            assert ready.status == 200
        tp = _provider(GrpcExporter(endpoint=f"127.0.0.1:{serve.grpc_port}", insecure=True), "shop-app")
        faithtrace.configure(scoring="remote", tracer_provider=tp, judge=fake_judge.settings())
        try:

            @faithtrace.trace_faithfulness(contexts="docs")
            def answer(question: str, docs: list[str]) -> str:
                return ANSWER

            assert answer("Where is the Eiffel Tower?", DOCS) == ANSWER
            faithtrace.flush(10)
            tp.force_flush()
        finally:
            faithtrace.shutdown(5)
        found = sink.wait(1)
        assert len(found) == 1
        resource, span = found[0]
        # The app's service, not the scorer's, filed apart from the app's own spans: the evaluation's trace
        # is no request's.
        assert resource["service.name"] == "shop-app-faithtrace"
        attrs = _attrs(span)
        assert attrs["faithtrace.function"].endswith("answer")
        assert attrs["gen_ai.evaluation.score.value"] == 1.0
        events = [e.name for e in span.events]
        assert "gen_ai.evaluation.result" in events
        assert "faithtrace.claim 1: supported" in events
        assert fake_judge.requests, "the scorer called the judge"
        stats = serve.stats()
        assert stats["scored"] == 1
        assert stats["rag_items"] == 1
        # The RAG span itself was not scored in the app: the only judge traffic came from the scorer.
        rag = [s for _r, s in sink.spans if s.name == "evaluate faithfulness"]
        # The app's RAG span was exported before it reached the scorer: the evaluation is in a trace of its
        # own, linked to it, and the request's trace keeps its duration.
        assert not rag[0].parent_span_id
        assert scored(rag[0])[0] != int.from_bytes(rag[0].trace_id, "big")


def test_openinference_trace_across_http_requests_is_assembled(
    tmp_path: Path, fake_judge: FakeJudge, sink: Sink
) -> None:
    with run_serve(tmp_path, fake_judge.base_url, sink.port, "--settle", "5") as serve:
        # SimpleSpanProcessor: each span is its own OTLP/HTTP request (retriever first, root later).
        tp = _provider(HttpExporter(endpoint=f"{serve.http}/v1/traces"), "llama-app")
        trace_id, root_id = _openinference_trace(tp, "Where is the Eiffel Tower?", ANSWER, DOCS)
        found = sink.wait(1)
        assert len(found) == 1
        resource, span = found[0]
        assert resource["service.name"] == "llama-app-faithtrace"
        assert scored(span) == (trace_id, root_id)
        assert _attrs(span)["faithtrace.function"] == "RetrieverQueryEngine.query"
        assert serve.stats()["requests"] >= 2


def test_json_encoded_values_and_resent_batches(tmp_path: Path, fake_judge: FakeJudge, sink: Sink) -> None:
    """OTLP/JSON in; a LangChain-style JSON input.value; the same batch re-sent is not scored twice."""
    trace_id, root, retr = "5b8efff798038103d269b633813fc60c", "eee19b7ec3c1b174", "eee19b7ec3c1b173"
    kv = lambda k, v: {"key": k, "value": {"stringValue": v}}  # noqa: E731
    body = {
        "resourceSpans": [
            {
                "resource": {"attributes": [kv("service.name", "chain-app")]},
                "scopeSpans": [
                    {
                        "spans": [
                            {
                                "traceId": trace_id,
                                "spanId": retr,
                                "parentSpanId": root,
                                "name": "retriever",
                                "startTimeUnixNano": "1",
                                "attributes": [
                                    kv("openinference.span.kind", "RETRIEVER"),
                                    kv("retrieval.documents.0.document.content", DOCS[0]),
                                    kv("retrieval.documents.1.document.content", DOCS[1]),
                                ],
                            },
                            {
                                "traceId": trace_id,
                                "spanId": root,
                                "name": "RetrievalQA",
                                "attributes": [
                                    kv("openinference.span.kind", "CHAIN"),
                                    kv("input.value", json.dumps({"query": "Where is it?"})),
                                    kv("input.mime_type", "application/json"),
                                    kv("output.value", json.dumps({"result": ANSWER})),
                                    kv("output.mime_type", "application/json"),
                                ],
                            },
                        ]
                    }
                ],
            }
        ]
    }
    with run_serve(tmp_path, fake_judge.base_url, sink.port) as serve:
        for _ in range(2):
            req = urllib.request.Request(
                serve.http + "/v1/traces", json.dumps(body).encode(), {"content-type": "application/json"}
            )
            with urllib.request.urlopen(req, timeout=30) as r:
                assert r.status == 200
        found = sink.wait(1)
        time.sleep(0.3)
        assert len(sink.evaluations()) == 1
        assert _attrs(found[0][1])["gen_ai.evaluation.score.value"] == 1.0
        sent = json.dumps(fake_judge.requests)
        assert "opened in 1889" in sent
        assert "result" not in sent


def test_malformed_input_gets_a_clear_error_and_non_rag_spans_cost_no_judge_call(
    tmp_path: Path, fake_judge: FakeJudge, sink: Sink
) -> None:
    with run_serve(tmp_path, fake_judge.base_url, sink.port, "--max-request-bytes", "100000") as serve:
        for ctype, body, status in [
            ("application/x-protobuf", b"\xff\xff\xff garbage", 400),
            ("application/json", b"{not json", 400),
            ("text/plain", b"hello", 415),
            ("application/x-protobuf", b"\x00" * 200_000, 413),
        ]:
            req = urllib.request.Request(serve.http + "/v1/traces", body, {"content-type": ctype})
            with pytest.raises(urllib.error.HTTPError) as info:
                urllib.request.urlopen(req, timeout=10)
            assert info.value.code == status
        channel = grpc.insecure_channel(f"127.0.0.1:{serve.grpc_port}")
        export = channel.unary_unary("/opentelemetry.proto.collector.trace.v1.TraceService/Export")
        with pytest.raises(grpc.RpcError) as rpc:
            export(b"\xff\xff\xff garbage", timeout=10)
        assert rpc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        channel.close()
        # 200 plain spans (an HTTP handler's, an LLM call's): answered at once, nothing scored.
        tp = _provider(GrpcExporter(endpoint=f"127.0.0.1:{serve.grpc_port}", insecure=True), "plain-app")
        tracer = tp.get_tracer("app")
        for i in range(200):
            with tracer.start_as_current_span(f"GET /items/{i}") as s:
                s.set_attribute("http.route", "/items/{id}")
        # A RAG-marked span lacking its texts is skipped and counted, not an error.
        with tracer.start_as_current_span("answer") as s:
            s.set_attribute("faithtrace.scoring.remote", True)
            s.set_attribute("faithtrace.function", "answer")
        tp.shutdown()
        stats = serve.stats()
        assert stats["spans"] == 201
        assert stats["rag_items"] == 0
        assert stats["incomplete"] == 1
        assert stats["bad_requests"] == 4
        text = serve.metrics()
        assert "# TYPE faithtrace_serve_pending gauge" in text
        assert "faithtrace_serve_bad_requests_total 4" in text
        assert fake_judge.requests == []
        assert serve.stop() == 0


def _raw_request(trace_id: int, span_id: int) -> bytes:
    req = ExportTraceServiceRequest()
    rs = req.resource_spans.add()
    kv = rs.resource.attributes.add()
    kv.key, kv.value.string_value = "service.name", "busy-app"
    span = rs.scope_spans.add().spans.add()
    span.trace_id, span.span_id, span.name = (
        trace_id.to_bytes(16, "big"),
        span_id.to_bytes(8, "big"),
        "answer",
    )
    for key, value in [
        ("faithtrace.scoring.remote", None),
        ("faithtrace.function", "answer"),
        ("input.value", "Where?"),
        ("output.value", ANSWER),
        ("retrieval.documents.0.document.content", DOCS[0]),
    ]:
        a = span.attributes.add()
        a.key = key
        if value is None:
            a.value.bool_value = True
        else:
            a.value.string_value = value
    return req.SerializeToString()


def test_saturation_is_retryable_and_the_sdk_exporter_delivers_after_retrying(
    tmp_path: Path, fake_judge: FakeJudge, sink: Sink
) -> None:
    import threading

    fake_judge.hang()
    args = ("--concurrency", "1", "--max-pending", "1", "--retry-after", "1")
    with run_serve(tmp_path, fake_judge.base_url, sink.port, *args) as serve:
        # The first request holds the only slot (its judge call hangs)...
        first = threading.Thread(
            target=lambda: urllib.request.urlopen(
                urllib.request.Request(
                    serve.http + "/v1/traces", _raw_request(1, 1), {"content-type": "application/x-protobuf"}
                ),
                timeout=60,
            )
        )
        first.start()
        deadline = time.monotonic() + 10
        while serve.stats()["pending"] < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        # ... so HTTP gets 429 + Retry-After, gRPC RESOURCE_EXHAUSTED with RetryInfo, once they have waited
        # for room (2 x --retry-after) in vain.
        req = urllib.request.Request(
            serve.http + "/v1/traces", _raw_request(2, 2), {"content-type": "application/x-protobuf"}
        )
        asked = time.monotonic()
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(req, timeout=10)
        assert 1.8 <= time.monotonic() - asked < 8
        assert info.value.code == 429
        assert info.value.headers["Retry-After"] == "1"
        channel = grpc.insecure_channel(f"127.0.0.1:{serve.grpc_port}")
        export = channel.unary_unary("/opentelemetry.proto.collector.trace.v1.TraceService/Export")
        with pytest.raises(grpc.RpcError) as rpc:
            export(_raw_request(3, 3), timeout=10)
        assert rpc.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        details = dict(rpc.value.trailing_metadata())["grpc-status-details-bin"]
        from google.rpc import error_details_pb2, status_pb2

        status = status_pb2.Status.FromString(details)
        info_ = error_details_pb2.RetryInfo()
        assert status.details[0].Unpack(info_)
        assert info_.retry_delay.seconds == 1
        channel.close()
        # The SDK's gRPC exporter retries on RetryInfo; once the judge answers, its batch is delivered.
        exporter = GrpcExporter(endpoint=f"127.0.0.1:{serve.grpc_port}", insecure=True, timeout=30)
        tp = _provider(exporter, "busy-app")
        tracer = tp.get_tracer("app")
        done = threading.Event()

        def send() -> None:
            with tracer.start_as_current_span("answer") as s:
                s.set_attributes(
                    {
                        "faithtrace.scoring.remote": True,
                        "faithtrace.function": "answer",
                        "output.value": ANSWER,
                        "retrieval.documents.0.document.content": " ".join(DOCS),
                    }
                )
            done.set()

        sender = threading.Thread(target=send)
        sender.start()
        deadline = time.monotonic() + 15
        while serve.stats()["rejected_saturated"] < 3 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert serve.stats()["rejected_saturated"] >= 3  # the SDK's first try was refused too
        fake_judge.mode = "ok"
        fake_judge.release.set()
        first.join(60)
        sender.join(60)
        assert done.is_set()
        found = sink.wait(2, timeout=30)
        assert {_attrs(s)["faithtrace.function"] for _r, s in found} == {"answer"}
        assert len(found) == 2  # the first request's (after its judge was released) and the retried one
        tp.shutdown()


def test_metrics_carry_the_apps_service_and_function_and_sigterm_finishes_work(
    tmp_path: Path, fake_judge: FakeJudge, sink: Sink
) -> None:
    import threading

    fake_judge.hang()
    args = ("--instance-id", "scorer-7", "--shutdown-timeout", "20")
    with run_serve(tmp_path, fake_judge.base_url, sink.port, *args) as serve:
        answered: list[int] = []

        def post() -> None:
            req = urllib.request.Request(
                serve.http + "/v1/traces", _raw_request(9, 9), {"content-type": "application/x-protobuf"}
            )
            with urllib.request.urlopen(req, timeout=60) as r:
                answered.append(r.status)

        client = threading.Thread(target=post)
        client.start()
        deadline = time.monotonic() + 10
        while serve.stats()["pending"] < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        # SIGTERM with an evaluation in flight: it finishes (the judge answers), the request is answered OK,
        # then the process exits 0 and its metrics are flushed on the way out.
        serve.proc.send_signal(15)
        deadline = time.monotonic() + 10  # the judge is released once the replica is stopping, not before
        while "faithtrace serve: stopping" not in serve.log.read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "faithtrace serve: stopping" in serve.log.read_text()
        fake_judge.mode = "ok"
        fake_judge.release.set()
        client.join(60)
        assert answered == [200]
        assert serve.proc.wait(30) == 0
    assert len(sink.evaluations()) == 1
    assert sink.metrics is not None
    points = [p for p in sink.metrics.points if p[1] == "faithtrace.evaluation.score"]
    assert points, "the score histogram was exported"
    resource, _name, attrs = points[-1]
    assert resource["service.name"] == "busy-app"  # the app's service, not the scorer's
    assert resource["service.instance.id"] == "scorer-7"  # one series per replica
    assert attrs["faithtrace.function"] == "answer"
    names = {p[1] for p in sink.metrics.points}
    assert "faithtrace.calls" not in names  # the app counts its own calls


def test_an_evaluation_still_running_at_the_drain_deadline_is_answered_send_again(
    tmp_path: Path, fake_judge: FakeJudge, sink: Sink
) -> None:
    fake_judge.hang()  # the judge never answers before the replica's shutdown deadline
    try:
        with run_serve(tmp_path, fake_judge.base_url, sink.port, "--shutdown-timeout", "1") as serve:
            channel = grpc.insecure_channel(f"127.0.0.1:{serve.grpc_port}")
            export = channel.unary_unary("/opentelemetry.proto.collector.trace.v1.TraceService/Export")
            call = export.future(_raw_request(8, 8), timeout=30)
            deadline = time.monotonic() + 10
            while serve.stats()["pending"] < 1 and time.monotonic() < deadline:
                time.sleep(0.05)
            serve.proc.send_signal(15)
            # Cancelled at the deadline, the evaluation still answers its request: retryable, with the reason,
            # before the servers go (not a dropped connection after the drain's extra 5 s).
            with pytest.raises(grpc.RpcError) as rpc:
                call.result(timeout=15)
            assert rpc.value.code() == grpc.StatusCode.UNAVAILABLE
            assert "stopped at the drain deadline" in (rpc.value.details() or "")
            assert serve.proc.wait(30) == 0
            channel.close()
        log = serve.log.read_text()
        assert "CancelledError" not in log, log
        assert "Exception in callback" not in log, log
        assert sink.evaluations() == []
    finally:
        fake_judge.release.set()


def test_an_export_failure_is_not_acknowledged(tmp_path: Path, fake_judge: FakeJudge, sink: Sink) -> None:
    sink.fail = True  # the downstream Collector refuses the results
    with run_serve(tmp_path, fake_judge.base_url, sink.port) as serve:
        req = urllib.request.Request(
            serve.http + "/v1/traces", _raw_request(7, 7), {"content-type": "application/x-protobuf"}
        )
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(req, timeout=30)
        assert info.value.code == 503  # retryable: the Collector keeps the batch
        sink.fail = False
        with urllib.request.urlopen(req, timeout=30) as r:  # the retry is scored again and delivered
            assert r.status == 200
        assert len(sink.wait(1)) == 1
        assert serve.stats()["export_failures"] == 1


def test_requests_in_flight_when_nothing_takes_the_results_are_answered_after_one_export_timeout(
    tmp_path: Path, fake_judge: FakeJudge
) -> None:
    """The results endpoint does not listen (the one Collector is restarting): the first export waits out
    the SDK exporter's timeout (5 s here) and fails; the exports queued behind it fail at once instead of
    each waiting the timeout in turn (which held the last request for 6 x 5 s, and a stopping Collector for
    its 110 s send timeout). A request that comes within that time is refused unjudged; once the endpoint
    listens again, the re-sent request is scored and delivered."""
    from concurrent import futures

    from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2_grpc
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc

    from _ports import free_port
    from _serve_fixtures import MetricSink

    port = free_port()
    with run_serve(tmp_path, fake_judge.base_url, port, OTEL_EXPORTER_OTLP_TIMEOUT="5") as serve:

        def post(trace_id: int) -> int:
            req = urllib.request.Request(
                serve.http + "/v1/traces",
                _raw_request(trace_id, trace_id),
                {"content-type": "application/x-protobuf"},
            )
            try:
                with urllib.request.urlopen(req, timeout=60) as r:
                    return int(r.status)
            except urllib.error.HTTPError as exc:
                return exc.code

        with futures.ThreadPoolExecutor(6) as pool:
            answers = list(pool.map(post, range(100, 106)))
        assert answers == [503] * 6  # retryable: the Collector keeps them
        stats = serve.stats()
        assert stats["export_failures"] == 6
        # One export was tried and waited out its timeout; those queued behind it were not tried (on a busy
        # machine an evaluation may finish after that window and try once more; never all six).
        assert serve.log.read_text().count("Failed to export traces") <= 2, serve.log.read_text()
        judged = len(fake_judge.requests)
        assert post(106) == 503
        assert len(fake_judge.requests) == judged  # refused before the judge
        assert serve.stats()["rejected_export_down"] == 1

        # The endpoint listens again (the Collector is back): the re-sent request is scored and delivered.
        sink = Sink()
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(sink, server)
        metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(MetricSink(), server)
        assert server.add_insecure_port(f"127.0.0.1:{port}") == port
        server.start()
        try:
            deadline = time.monotonic() + 30
            while post(100) != 200:
                assert time.monotonic() < deadline, serve.log.read_text()
                time.sleep(0.5)
            assert [scored(s)[0] for _, s in sink.wait(1)] == [100]
        finally:
            server.stop(0)


def test_a_failing_judge_is_answered_retry_later_and_scored_on_the_retry(
    tmp_path: Path, fake_judge: FakeJudge, sink: Sink
) -> None:
    fake_judge.fail(503)
    with run_serve(tmp_path, fake_judge.base_url, sink.port) as serve:
        channel = grpc.insecure_channel(f"127.0.0.1:{serve.grpc_port}")
        export = channel.unary_unary("/opentelemetry.proto.collector.trace.v1.TraceService/Export")
        with pytest.raises(grpc.RpcError) as rpc:
            export(_raw_request(5, 5), timeout=30)
        assert rpc.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED  # with RetryInfo: the Collector retries
        assert "grpc-status-details-bin" in dict(rpc.value.trailing_metadata())
        assert sink.evaluations() == []  # no error result was emitted for a judge that was merely down
        fake_judge.mode = "ok"
        assert export(_raw_request(5, 5), timeout=30) == b""  # an empty ExportTraceServiceResponse
        assert len(sink.wait(1)) == 1
        assert serve.stats()["judge_retry"] == 1
        channel.close()


def test_gzip_bodies_and_oversized_grpc_messages(tmp_path: Path, fake_judge: FakeJudge, sink: Sink) -> None:
    import gzip

    with run_serve(tmp_path, fake_judge.base_url, sink.port, "--max-request-bytes", "50000") as serve:
        headers = {"content-type": "application/x-protobuf", "content-encoding": "gzip"}
        req = urllib.request.Request(serve.http + "/v1/traces", gzip.compress(_raw_request(6, 6)), headers)
        with urllib.request.urlopen(req, timeout=30) as r:
            assert r.status == 200
        assert len(sink.wait(1)) == 1
        bomb = gzip.compress(b"\x00" * 5_000_000)  # 5 KB that inflates past the cap
        req = urllib.request.Request(serve.http + "/v1/traces", bomb, headers)
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(req, timeout=30)
        assert info.value.code == 413
        channel = grpc.insecure_channel(f"127.0.0.1:{serve.grpc_port}")
        export = channel.unary_unary("/opentelemetry.proto.collector.trace.v1.TraceService/Export")
        with pytest.raises(grpc.RpcError) as rpc:
            export(b"\x0a" + b"\x00" * 60_000, timeout=10)
        assert rpc.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "grpc-status-details-bin" not in dict(rpc.value.trailing_metadata() or ())  # permanent
        channel.close()
        assert serve.proc.poll() is None  # still serving


def test_the_ack_comes_after_the_results_were_exported(
    tmp_path: Path, fake_judge: FakeJudge, sink: Sink
) -> None:
    """A whole OpenInference trace in one gRPC batch: when the SDK's export returns OK, the evaluation is
    already in the sink (the answer waited for scoring and for the downstream export)."""
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    with run_serve(tmp_path, fake_judge.base_url, sink.port) as serve:
        tp = TracerProvider(resource=Resource.create({"service.name": "batch-app"}))
        tp.add_span_processor(
            BatchSpanProcessor(
                GrpcExporter(endpoint=f"127.0.0.1:{serve.grpc_port}", insecure=True, timeout=30)
            )
        )
        trace_ids = {_openinference_trace(tp, f"Question {i}?", ANSWER, DOCS)[0] for i in range(3)}
        assert tp.force_flush(30_000)
        exported = {scored(s)[0] for _r, s in sink.evaluations()}
        assert exported == trace_ids  # no waiting: the OK meant "scored and handed on"
        tp.shutdown()
        assert serve.stats()["scored"] == 3


# --- OpenInference assembly under load ------------------------------------------------------------------
def test_held_traces_do_not_count_against_max_pending_so_the_part_with_the_roots_gets_in(
    tmp_path: Path, fake_judge: FakeJudge, sink: Sink
) -> None:
    """Five traces' retriever parts come first (the Collector split each trace), then one part with their
    roots. Held traces wait for their root on their own bound, not on --max-pending's: with them counted
    there, the part carrying the roots was refused for good (a livelock)."""
    args = ("--concurrency", "1", "--max-pending", "2", "--settle", "60", "--hold", "0.2")
    with run_serve(tmp_path, fake_judge.base_url, sink.port, *args, "--retry-after", "0.5") as serve:
        channel = grpc.insecure_channel(f"127.0.0.1:{serve.grpc_port}")
        export = channel.unary_unary("/opentelemetry.proto.collector.trace.v1.TraceService/Export")
        for trace_id in range(1, 6):
            export(oi_request(oi_retriever(trace_id)), timeout=30)
        stats = serve.stats()
        assert (stats["held_traces"], stats["pending"], stats["rejected_saturated"]) == (5, 0, 0)
        export(oi_request(*(oi_root(t) for t in range(1, 6))), timeout=60)  # answered after the scores
        found = sink.wait(5, timeout=30)
        channel.close()
        assert len(found) == 5
        assert {scored(s) for _, s in found} == {(t, 1) for t in range(1, 6)}
        stats = serve.stats()
        assert (stats["scored"], stats["held_traces"], stats["incomplete"]) == (5, 0, 0)


def test_a_non_rag_flood_takes_no_rag_room_and_refusals_say_why(
    tmp_path: Path, fake_judge: FakeJudge, sink: Sink
) -> None:
    args = ("--max-traces", "3", "--retry-after", "0.5")
    with run_serve(tmp_path, fake_judge.base_url, sink.port, *args) as serve:
        channel = grpc.insecure_channel(f"127.0.0.1:{serve.grpc_port}")
        export = channel.unary_unary("/opentelemetry.proto.collector.trace.v1.TraceService/Export")
        # 2,000 CHAIN roots without a retriever (a chatbot's traces), 500 to a request: all taken at once.
        for first in range(1000, 3000, 500):
            export(oi_request(*(oi_root(t, "Hello there.") for t in range(first, first + 500))), timeout=30)
        stats = serve.stats()
        assert stats["dropped_not_rag"] >= 1990  # its own small bound: the oldest went first
        assert (stats["held_traces"], stats["rejected_saturated"], stats["rejected_held"]) == (0, 0, 0)
        # A RAG trace still gets in and is scored against its root.
        export(oi_request(oi_retriever(7), oi_root(7)), timeout=30)
        [(_, evaluation)] = sink.wait(1)
        assert scored(evaluation)[1] == 1
        # Three RAG traces waiting for their roots fill --max-traces; the fourth is refused, saying so.
        for trace_id in (11, 12, 13):
            export(oi_request(oi_retriever(trace_id)), timeout=30)
        with pytest.raises(grpc.RpcError) as rpc:
            export(oi_request(oi_retriever(14)), timeout=30)
        channel.close()
        assert rpc.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "3 RAG traces held waiting for their root (max 3" in str(rpc.value.details())
        stats = serve.stats()
        assert (stats["rejected_held"], stats["rejected_saturated"], stats["held_traces"]) == (1, 0, 3)


def test_a_rooted_trace_waiting_for_stragglers_is_not_held_up_by_a_missing_roots_long_wait(
    tmp_path: Path, fake_judge: FakeJudge, sink: Sink
) -> None:
    """Trace 1 waits up to --settle (60 s) for its root. Trace 2 comes with its root but looks incomplete (a
    span whose parent has not come), so it waits 2 s for more spans, then is scored: its request must be
    answered then, not when trace 1's wait ends (one timer served both, armed for the later deadline)."""
    args = ("--settle", "60", "--hold", "0.2")
    with run_serve(tmp_path, fake_judge.base_url, sink.port, *args) as serve:
        channel = grpc.insecure_channel(f"127.0.0.1:{serve.grpc_port}")
        export = channel.unary_unary("/opentelemetry.proto.collector.trace.v1.TraceService/Export")
        export(oi_request(oi_retriever(1)), timeout=30)
        orphan = (
            2,
            5,
            4,
            "step",
            {"openinference.span.kind": "CHAIN", "input.value": "x", "output.value": "y"},
        )
        started = time.monotonic()
        export(oi_request(oi_retriever(2), orphan, oi_root(2)), timeout=30)  # answered after its score
        waited = time.monotonic() - started
        channel.close()
        [(_, evaluation)] = sink.wait(1)
        assert scored(evaluation)[0] == 2
        assert 1.5 <= waited < 20, waited
        assert serve.stats()["held_traces"] == 1  # trace 1, still waiting for its root


def _export_in_thread(
    export: Any, body: bytes, on_answer: Any = None
) -> tuple[threading.Thread, threading.Event, list[BaseException]]:
    """Send one request from a thread; the event is set (after ``on_answer()``) when the replica answered."""
    answered, errors = threading.Event(), []

    def send() -> None:
        try:
            export(body, timeout=60)
        except BaseException as exc:  # the test's assertion reports it
            errors.append(exc)
        if on_answer is not None:
            on_answer()
        answered.set()

    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    return thread, answered, errors


@pytest.mark.parametrize("whole", [True, False], ids=["whole", "rooted-in-its-grace"])
def test_a_part_whose_root_came_while_it_waited_is_acknowledged_after_the_score(
    tmp_path: Path, fake_judge: FakeJudge, sink: Sink, whole: bool
) -> None:
    """The retriever's part waits --hold for the root; the root comes and the trace is scored after --hold:
    at once by a slow judge (whole), or after its 2 s grace when the root's part holds a span whose parent
    is still on its way (rooted, not whole). The retriever's part must wait for the score too: let go at
    --hold, the trace was acknowledged before its score, and a replica killed meanwhile lost it."""
    with run_serve(tmp_path, fake_judge.base_url, sink.port, "--settle", "60", "--hold", "0.5") as serve:
        channel = grpc.insecure_channel(f"127.0.0.1:{serve.grpc_port}")
        export = channel.unary_unary("/opentelemetry.proto.collector.trace.v1.TraceService/Export")
        fake_judge.hang()
        started = time.monotonic()
        part, part_answered, part_errors = _export_in_thread(export, oi_request(oi_retriever(9)))
        time.sleep(0.1)
        orphan = (9, 4, 3, "split", {"openinference.span.kind": "CHAIN", "output.value": "a chunk"})
        root_part = oi_request(oi_root(9)) if whole else oi_request(oi_root(9), orphan)
        root, root_answered, root_errors = _export_in_thread(export, root_part)
        deadline = time.monotonic() + 30
        while not fake_judge.requests and time.monotonic() < deadline:
            time.sleep(0.05)
        assert fake_judge.requests, "the trace was never scored"
        if not whole:
            assert time.monotonic() - started > 1.5, "scored before its grace: the trace looked whole"
        assert not part_answered.wait(1.5), "the retriever's part was answered before its trace's score"
        fake_judge.mode = "ok"
        fake_judge.release.set()
        assert part_answered.wait(30)
        assert root_answered.wait(30)
        part.join(5)
        root.join(5)
        channel.close()
        assert not part_errors, part_errors
        assert not root_errors, root_errors
        assert [scored(s)[0] for _, s in sink.evaluations()] == [9]
        assert serve.stats()["scored"] == 1
