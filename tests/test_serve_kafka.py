# ruff: noqa: F811 - pytest fixtures imported from the fixture modules are parameters here
"""`faithtrace serve --kafka` against a real KRaft broker: OTLP protobuf messages keyed by trace ID (what the
Collector's Kafka exporter writes) are scored by the same scorer as the OTLP receivers, and offsets are
committed only once the evaluation was exported."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from _fake_judge import FakeJudge, fake_judge  # noqa: F401
from _kafka_fixtures import Broker, kafka_broker
from _serve_fixtures import Sink, run_serve, scored, sink  # noqa: F401

pytestmark = [pytest.mark.backend, pytest.mark.slow, pytest.mark.timeout(240)]

TOPIC = "otlp_spans"
GROUP = "scorers"
DOCS = ["The Eiffel Tower is in Paris.", "It opened in 1889."]
ANSWER = "In Paris is the Eiffel Tower. In 1889 it opened."


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    with kafka_broker(tmp_path_factory.mktemp("kafka")) as b:
        yield b


def _span(
    request: ExportTraceServiceRequest,
    service: str,
    trace_id: int,
    span_id: int,
    parent: int,
    name: str,
    attrs: dict[str, Any],
) -> None:
    rs = request.resource_spans.add()
    kv = rs.resource.attributes.add()
    kv.key, kv.value.string_value = "service.name", service
    span = rs.scope_spans.add().spans.add()
    span.trace_id, span.span_id, span.name = trace_id.to_bytes(16, "big"), span_id.to_bytes(8, "big"), name
    if parent:
        span.parent_span_id = parent.to_bytes(8, "big")
    for key, value in attrs.items():
        a = span.attributes.add()
        a.key = key
        if isinstance(value, bool):
            a.value.bool_value = value
        else:
            a.value.string_value = value


def openinference_parts(trace_id: int, question: str, answer: str) -> tuple[bytes, bytes]:
    """A LlamaIndex-shaped trace in two messages, retriever first, its CHAIN root in the next one."""
    root, retriever = trace_id & 0xFFFFFFFF | 1 << 40, trace_id & 0xFFFFFFFF | 2 << 40
    first, second = ExportTraceServiceRequest(), ExportTraceServiceRequest()
    documents = {f"retrieval.documents.{i}.document.content": d for i, d in enumerate(DOCS)}
    _span(
        first,
        "llama-app",
        trace_id,
        retriever,
        root,
        "VectorIndexRetriever.retrieve",
        {"openinference.span.kind": "RETRIEVER", "input.value": question, **documents},
    )
    _span(
        second,
        "llama-app",
        trace_id,
        root,
        0,
        "RetrieverQueryEngine.query",
        {"openinference.span.kind": "CHAIN", "input.value": question, "output.value": answer},
    )
    return first.SerializeToString(), second.SerializeToString()


def remote_span(trace_id: int, span_id: int) -> bytes:
    """A span recorded by the decorator with scoring="remote": self-contained."""
    request = ExportTraceServiceRequest()
    _span(
        request,
        "shop-app",
        trace_id,
        span_id,
        0,
        "answer",
        {
            "faithtrace.scoring.remote": True,
            "faithtrace.function": "answer",
            "input.value": "Where is the Eiffel Tower?",
            "output.value": ANSWER,
            "retrieval.documents.0.document.content": DOCS[0],
            "retrieval.documents.1.document.content": DOCS[1],
        },
    )
    return request.SerializeToString()


def produce(broker: Broker, topic: str, messages: list[tuple[int, bytes]]) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
    for trace_id, value in messages:
        producer.produce(topic, key=trace_id.to_bytes(16, "big"), value=value)
    assert producer.flush(30) == 0


def committed(broker: Broker, topic: str, group: str, partitions: int) -> int:
    """Messages committed by `group` over the topic's partitions."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    try:
        offsets = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
        return sum(max(0, tp.offset) for tp in offsets)
    finally:
        consumer.close()


def kafka_serve(tmp_path: Path, judge: FakeJudge, sink: Sink, broker: Broker, topic: str, *args: str) -> Any:
    return run_serve(
        tmp_path,
        judge.base_url,
        sink.port,
        "--kafka",
        broker.bootstrap,
        "--kafka-topic",
        topic,
        "--kafka-group",
        GROUP,
        "--settle",
        "20",
        *args,
    )


def wait_for(what: str, check: Any, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"{what} not within {timeout}s"
        time.sleep(0.2)


def test_traces_from_kafka_are_scored_once_and_committed_after_export(
    tmp_path: Path, fake_judge: FakeJudge, sink: Sink, broker: Broker
) -> None:
    topic = "spans-scored"
    broker.create_topic(topic, partitions=2)
    oi_trace, own_trace, own_span = 0x1111 << 64 | 7, 0x2222 << 64 | 9, 0xABC
    first, second = openinference_parts(oi_trace, "Where is the Eiffel Tower?", ANSWER)
    own = remote_span(own_trace, own_span)
    # Both parts of the trace, a decorated span, a message that is not OTLP, and the decorated span again
    # (a Collector retry): 5 messages, 2 evaluations.
    produce(
        broker,
        topic,
        [(oi_trace, first), (own_trace, own), (oi_trace, second), (99, b"\xff\x00junk"), (own_trace, own)],
    )
    with kafka_serve(tmp_path, fake_judge, sink, broker, topic) as serve:
        found = sink.wait(2, timeout=60)
        wait_for("5 messages committed", lambda: committed(broker, topic, GROUP, 2) == 5)
        wait_for(
            "the lag gauge at 0",
            lambda: serve.stats()["kafka_lag"] == 0 and serve.stats()["kafka_committed"] == 5,
        )
        assert serve.stats()["kafka_uncommitted"] == 0
        time.sleep(1.0)
        found = sink.evaluations()
        assert len(found) == 2, [s.name for _, s in found]
        # Each in a trace of its own, filed under the app's service suffixed, linked to the span it scored.
        by_service = {r["service.name"].removesuffix("-faithtrace"): s for r, s in found}
        assert {r["service.name"] for r, _ in found} == {"llama-app-faithtrace", "shop-app-faithtrace"}
        oi = by_service["llama-app"]
        assert scored(oi) == (oi_trace, oi_trace & 0xFFFFFFFF | 1 << 40)  # the CHAIN root
        own_eval = by_service["shop-app"]
        assert scored(own_eval)[1] == own_span
        stats = serve.stats()
        assert stats["kafka_messages"] == 5
        assert stats["kafka_malformed"] == 1
        assert stats["duplicates"] == 1  # the decorated span sent twice
        assert stats["scored"] == 2
        text = serve.metrics()
        assert "# TYPE faithtrace_serve_kafka_lag gauge" in text
        assert "faithtrace_serve_duplicates_total 1" in text


def test_an_export_failure_holds_the_commit_until_the_evaluation_is_exported(
    tmp_path: Path, fake_judge: FakeJudge, sink: Sink, broker: Broker
) -> None:
    topic = "spans-export-fails"
    broker.create_topic(topic, partitions=1)
    sink.fail = True
    produce(broker, topic, [(0x33 << 64 | 1, remote_span(0x33 << 64 | 1, 0x10))])
    with kafka_serve(tmp_path, fake_judge, sink, broker, topic) as serve:
        wait_for("a retry after the export failure", lambda: serve.stats()["kafka_retries"] >= 1)
        assert committed(broker, topic, GROUP, 1) == 0  # refused downstream: not committed
        assert serve.stats()["kafka_lag"] <= 1
        sink.fail = False
        found = sink.wait(1, timeout=60)
        assert len(found) == 1
        wait_for("the message committed", lambda: committed(broker, topic, GROUP, 1) == 1)


def test_finished_messages_wait_for_the_commit_interval_and_a_graceful_stop_commits_them(
    tmp_path: Path, fake_judge: FakeJudge, sink: Sink, broker: Broker
) -> None:
    topic = "spans-commit-interval"
    broker.create_topic(topic, partitions=1)
    count = 3
    produce(broker, topic, [(0x66 << 64 | i, remote_span(0x66 << 64 | i, 0x50 + i)) for i in range(count)])
    with kafka_serve(tmp_path, fake_judge, sink, broker, topic, "--kafka-commit-interval", "3600") as serve:
        assert len(sink.wait(count, timeout=60)) == count
        wait_for("every message finished", lambda: serve.stats()["kafka_uncommitted"] == count)
        assert serve.stats()["kafka_committed"] == 0
        # The lag counts finished messages until their commit (it is measured once a second).
        wait_for("the lag gauge", lambda: serve.stats()["kafka_lag"] == count, timeout=10)
        assert committed(broker, topic, GROUP, 1) == 0
        serve.stop()  # SIGTERM: what finished is committed before the replica leaves the group
    assert committed(broker, topic, GROUP, 1) == count


def test_partitions_pause_at_the_buffer_bound_and_resume(
    tmp_path: Path, fake_judge: FakeJudge, sink: Sink, broker: Broker
) -> None:
    topic = "spans-paused"
    broker.create_topic(topic, partitions=1)
    count = 12
    produce(broker, topic, [(0x44 << 64 | i, remote_span(0x44 << 64 | i, 0x20 + i)) for i in range(count)])
    fake_judge.hang()  # every evaluation waits: the messages stay in flight
    with kafka_serve(tmp_path, fake_judge, sink, broker, topic, "--kafka-max-buffered", "3") as serve:
        wait_for("paused", lambda: serve.stats()["kafka_paused"] == 1)
        stats = serve.stats()
        assert stats["kafka_buffered"] <= 4  # max_buffered, + 1 while full
        assert stats["kafka_messages"] <= 4
        wait_for("the lag gauge", lambda: serve.stats()["kafka_lag"] >= count - 4, timeout=10)
        fake_judge.mode = "ok"
        fake_judge.release.set()
        found = sink.wait(count, timeout=120)
        assert len(found) == count
        wait_for("every message committed", lambda: committed(broker, topic, GROUP, 1) == count)
        assert serve.stats()["kafka_paused"] == 0


def test_a_refused_retriever_part_is_not_overtaken_by_its_root(
    tmp_path: Path, fake_judge: FakeJudge, sink: Sink, broker: Broker
) -> None:
    """One evaluation at a time and the judge stalled: the OpenInference trace's retriever part is refused
    (no room) and retried. Its root part, next in the partition, needs no room; fed at once it would reach the
    assembler first and the trace would be let go as one without a retriever. A partition feeds its next
    message only once the previous one is in."""
    topic = "spans-in-order"
    broker.create_topic(topic, partitions=1)
    oi_trace = 0x77 << 64 | 3
    first, second = openinference_parts(oi_trace, "Where is the Eiffel Tower?", ANSWER)
    produce(
        broker,
        topic,
        [(0x78 << 64 | 1, remote_span(0x78 << 64 | 1, 0x30)), (oi_trace, first), (oi_trace, second)],
    )
    fake_judge.hang()
    with kafka_serve(
        tmp_path,
        fake_judge,
        sink,
        broker,
        topic,
        "--concurrency",
        "1",
        "--max-pending",
        "1",
        "--retry-after",
        "1",
    ) as serve:
        wait_for("the retriever part refused", lambda: serve.stats()["kafka_retries"] >= 2, timeout=60)
        time.sleep(3.0)  # longer than a root-only trace is kept (2 s) before it is let go as not RAG
        fake_judge.mode = "ok"
        fake_judge.release.set()
        found = sink.wait(2, timeout=60)
        assert {r["service.name"] for r, _ in found} == {"shop-app-faithtrace", "llama-app-faithtrace"}
        stats = serve.stats()
        assert stats["incomplete"] == 0
        assert stats["dropped_not_rag"] == 0
        wait_for("every message committed", lambda: committed(broker, topic, GROUP, 1) == 3)


def test_a_replica_reading_messages_another_one_scored_judges_and_exports_none_of_them_again(
    tmp_path: Path, fake_judge: FakeJudge, sink: Sink, broker: Broker
) -> None:
    """What the replica that takes a killed one's partitions over reads: messages whose traces were scored
    and exported but not committed. Here a second consumer group reads the whole topic again, so every
    message is such a one. With the replicas' shared record (`--redis`) none is judged or exported again;
    a group without it judges every one again (at least once, and nothing more)."""
    from _redis_fixtures import redis_server

    topic = "spans-record"
    broker.create_topic(topic, partitions=2)
    own = [(0x55 << 64 | i, remote_span(0x55 << 64 | i, 0x40 + i)) for i in range(6)]
    oi = [0x56 << 64 | i for i in range(2)]
    parts = [(t, p) for t in oi for p in openinference_parts(t, "Where is the Eiffel Tower?", ANSWER)]
    produce(broker, topic, own + parts)
    messages = len(own) + len(parts)

    def read_all(name: str, *args: str) -> dict[str, Any]:
        path = tmp_path / name
        path.mkdir()
        with kafka_serve(path, fake_judge, sink, broker, topic, "--kafka-group", name, *args) as serve:
            wait_for(
                f"{name}: every message committed", lambda: committed(broker, topic, name, 2) == messages
            )
            return serve.stats()

    with redis_server(tmp_path / "redis") as redis:
        record = ("--redis", redis.url, "--fleet", "shop")
        first = read_all("first", *record)
        assert first["scored"] == 8
        judged, exported = len(fake_judge.requests), len(sink.evaluations())
        assert exported == 8
        again = read_all("again", *record)
        assert again["scored_elsewhere"] == 8
        assert again["scored"] == 0
        assert len(fake_judge.requests) == judged  # not one judge call
        assert len(sink.evaluations()) == exported  # not one evaluation exported twice
    alone = read_all("alone")  # no record: each replica knows only what it scored itself
    assert alone["scored"] == 8
    assert len(sink.evaluations()) == 2 * exported
